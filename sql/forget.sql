--
-- forget: inbox_forget and inbox_forget_range remove processed entries so
-- that their next delivery is processed again; only the owner, superusers
-- and allowed roles may, and every call is audited
--
SET timezone = 'UTC';
\set superuser :USER

SELECT inbox_claim('edi', 'INV-1', '\x01'), inbox_claim('edi', 'INV-2'), inbox_claim('edi', 'INV-3');
SELECT inbox_receive('edi', 'PENDING-1', '{"n": 1}'::jsonb);

-- Forgotten: the next delivery is new again.
SELECT inbox_forget('edi', 'INV-1', 'ticket 42: tax rate fixed, re-bill') AS forgotten;
SELECT inbox_claim('edi', 'INV-1', '\x02') AS claimed_again;
-- Nothing to forget: false, and still audited.
SELECT inbox_forget('edi', 'NEVER-SEEN', 'checking') AS nothing;
-- An unknown scope is an error (most likely a typo).
SELECT regress.try($$SELECT inbox_forget('edj', 'INV-1', 'typo')$$) AS unknown_scope;
-- Only processed messages: a pending one raises 55000.
SELECT regress.try($$SELECT inbox_forget('edi', 'PENDING-1', 'too early')$$) AS pending;

-- The audit: who, when, what, why, and the entry as it was.
SELECT scope, message_id, reason, role_name = :'superuser' AS by_caller,
       session_role = :'superuser' AS session_role_kept, backend_pid = pg_backend_pid() AS backend,
       forgotten_at <= clock_timestamp() AS timed,
       entry->>'message_id' AS entry_id, entry->>'payload_hash' AS entry_hash, entry->>'state' AS entry_state
FROM inbox_forget_log ORDER BY forgotten_at;

-- Bad input: a clear SQLSTATE, nothing removed, nothing audited.
SELECT count(*) AS log_before FROM inbox.forget_log \gset
SELECT regress.try($$SELECT inbox_forget('edi', 'INV-2', NULL)$$) AS null_reason,
       regress.try($$SELECT inbox_forget('edi', 'INV-2', '')$$) AS empty_reason,
       regress.try($$SELECT inbox_forget('edi', 'INV-2', repeat('r', 1025))$$) AS long_reason,
       regress.try($$SELECT inbox_forget(NULL, 'INV-2', 'r')$$) AS null_scope,
       regress.try($$SELECT inbox_forget('edi', NULL, 'r')$$) AS null_id;
SELECT regress.try($$SELECT inbox_forget_range('edi', NULL, now(), 'r')$$) AS null_from,
       regress.try($$SELECT inbox_forget_range('edi', now(), now() - interval '1 day', 'r')$$) AS reversed,
       regress.try($$SELECT inbox_forget_range('edj', '-infinity', 'infinity', 'r')$$) AS unknown_scope;
SELECT count(*) - :log_before AS audited, (SELECT count(*) FROM inbox_status('edi', 'INV-2')) AS inv2_kept
FROM inbox.forget_log;

-- A replay: every processed entry received in the range, one audit row each.
SELECT inbox_forget_range('edi', '-infinity', 'infinity', 'replay after the EDI mapping fix') AS replayed;
SELECT message_id, entry->>'state' AS was FROM inbox_forget_log
 WHERE reason = 'replay after the EDI mapping fix' ORDER BY message_id;
SELECT message_id, state FROM inbox.entries WHERE scope = 'edi' ORDER BY 1;
-- Nothing left in the range: 0, and one audit row without an entry.
SELECT inbox_forget_range('edi', '-infinity', 'infinity', 'again') AS replayed_again;
SELECT message_id, received_from, received_before, entry FROM inbox_forget_log WHERE reason = 'again';

-- Who may forget: EXECUTE is not enough.
CREATE ROLE inbox_forget_app;
CREATE ROLE inbox_forget_ops;
CREATE ROLE inbox_forget_oncall IN ROLE inbox_forget_ops;
GRANT EXECUTE ON FUNCTION inbox_forget(text, text, text),
	inbox_forget_range(text, timestamptz, timestamptz, text),
	inbox_allow_forget(regrole) TO inbox_forget_app, inbox_forget_oncall;
SELECT inbox_claim('edi', 'INV-9');
SET ROLE inbox_forget_app;
SELECT regress.try($$SELECT inbox_forget('edi', 'INV-9', 'app tries')$$) AS app_with_execute;
SELECT regress.try($$SELECT inbox_forget_range('edi', '-infinity', 'infinity', 'app tries')$$) AS app_range;
SELECT regress.try($$SELECT inbox_allow_forget('inbox_forget_app')$$) AS app_allows_itself;
RESET ROLE;
-- The owner allows a role; its members may then forget.
SELECT inbox_allow_forget('inbox_forget_ops') AS allowed, inbox_allow_forget('inbox_forget_ops') AS again;
SET ROLE inbox_forget_oncall;
SELECT inbox_forget('edi', 'INV-9', 'on-call replay') AS by_member;
RESET ROLE;
SELECT role_name, session_role = :'superuser' AS session_role_kept FROM inbox_forget_log WHERE reason = 'on-call replay';
-- Scope grants still apply to allowed roles.
SELECT inbox_grant('edi', 'inbox_forget_app');
SET ROLE inbox_forget_oncall;
SELECT regress.try($$SELECT inbox_forget('edi', 'INV-2', 'closed scope')$$) AS closed_scope;
RESET ROLE;
SELECT inbox_revoke('edi', 'inbox_forget_app');
SELECT inbox_disallow_forget('inbox_forget_ops') AS disallowed;
SET ROLE inbox_forget_oncall;
SELECT regress.try($$SELECT inbox_forget('edi', 'INV-2', 'no longer')$$) AS after_disallow;
RESET ROLE;
SELECT regress.try($$SELECT inbox_allow_forget(NULL)$$) AS null_role;
-- An allowed role that is dropped, and another created under its name, does
-- not pass the right on: it is kept by name and OID.
SELECT inbox_allow_forget('inbox_forget_ops') AS allowed_again;
REVOKE ALL ON FUNCTION inbox_forget(text, text, text),
	inbox_forget_range(text, timestamptz, timestamptz, text),
	inbox_allow_forget(regrole) FROM inbox_forget_oncall;
DROP ROLE inbox_forget_oncall;
DROP ROLE inbox_forget_ops;
CREATE ROLE inbox_forget_ops;
CREATE ROLE inbox_forget_oncall IN ROLE inbox_forget_ops;
GRANT EXECUTE ON FUNCTION inbox_forget(text, text, text),
	inbox_forget_range(text, timestamptz, timestamptz, text),
	inbox_allow_forget(regrole) TO inbox_forget_oncall;
SET ROLE inbox_forget_oncall;
SELECT regress.try($$SELECT inbox_forget('edi', 'INV-2', 'a new role of the same name')$$) AS recreated_role;
RESET ROLE;
-- Allowing it again records the new role.
SELECT inbox_allow_forget('inbox_forget_ops') AS reallowed, inbox_claim('edi', 'INV-10') AS claimed;
SET ROLE inbox_forget_oncall;
SELECT inbox_forget('edi', 'INV-10', 'allowed again') AS forgotten_by_new_role;
RESET ROLE;

-- pg_dump keeps the audit and the allowed roles.
SELECT array_agg(c ORDER BY c) AS dumped FROM (SELECT unnest(extconfig)::regclass::text AS c
	FROM pg_extension WHERE extname = 'inbox') AS x WHERE c LIKE 'inbox.forget%';

REVOKE ALL ON FUNCTION inbox_forget(text, text, text),
	inbox_forget_range(text, timestamptz, timestamptz, text),
	inbox_allow_forget(regrole) FROM inbox_forget_app, inbox_forget_oncall;
DROP ROLE inbox_forget_oncall;
DROP ROLE inbox_forget_ops;
DROP ROLE inbox_forget_app;
SELECT inbox_drop_scope('edi');
