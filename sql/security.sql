--
-- security: application roles act only through the API
--
SET timezone = 'UTC';
\set superuser :USER

CREATE ROLE inbox_regress_app LOGIN;
CREATE SCHEMA app AUTHORIZATION inbox_regress_app;

-- The API in the extension's schema is made of C entry points that run as
-- the role that called them, check its scope grants, and call the
-- SECURITY DEFINER implementation of the same name in schema inbox.  Every
-- function that runs SQL pins its search_path first (the purge's and the
-- takes' also pin their plans to indexes, and inbox.citus_drop_tables
-- silences Citus's notices); nothing is executable by PUBLIC, and PUBLIC
-- cannot even look into schema inbox.
SELECT p.pronamespace::regnamespace AS schema, p.proname, l.lanname AS lang, p.prosecdef,
	   p.proconfig[1] = 'search_path=pg_catalog, pg_temp'
	   AND p.proconfig[2:] <@ '{"enable_seqscan=off","enable_bitmapscan=off","enable_sort=off",
							 "client_min_messages=warning"}' AS pinned,
	   has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute
FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
JOIN pg_language l ON l.oid = p.prolang
WHERE d.refclassid = 'pg_extension'::regclass
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'inbox')
ORDER BY 1, 2, 3;
-- Every entry point has its implementation, with the same arguments, and it
-- is the only kind of function that is not SECURITY DEFINER in the API.
SELECT e.oid::regprocedure AS entry_point, i.oid IS NOT NULL AS has_implementation,
	   i.prosecdef AS implementation_is_definer
FROM pg_proc e
LEFT JOIN pg_proc i ON i.pronamespace = 'inbox'::regnamespace
	AND i.proname = e.proname AND i.proargtypes = e.proargtypes
WHERE e.pronamespace = 'public'::regnamespace AND e.proname LIKE 'inbox\_%'
  AND NOT e.prosecdef
ORDER BY 1;
SELECT has_schema_privilege('public', 'inbox', 'USAGE') AS public_usage_on_inbox;
SELECT c.oid::regclass AS relation, has_table_privilege('public', c.oid, 'SELECT') AS public_select
FROM pg_class c JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid
WHERE d.refclassid = 'pg_extension'::regclass
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'inbox')
  AND c.relkind IN ('r', 'p', 'v')
ORDER BY 1;

-- Without a grant, an application role cannot even call the API.
\c - inbox_regress_app
SELECT regress.try($$SELECT inbox_claim('billing', 'sec-1')$$);
SELECT regress.try($$SELECT * FROM inbox_status('billing', 'sec-1')$$);

\c - :superuser
GRANT EXECUTE ON FUNCTION inbox_claim(text, text, bytea), inbox_status(text, text)
	TO inbox_regress_app;

-- With the grant it claims, and reads status, through the API...
\c - inbox_regress_app
SELECT inbox_claim('billing', 'sec-1', sha256('p'));
SELECT inbox_claim('billing', 'sec-1', sha256('p'));
SELECT state FROM inbox_status('billing', 'sec-1');

-- ...but can neither read nor write the tables, parent or leaf.
SELECT regress.try($$SELECT count(*) FROM inbox.entries$$);
SELECT regress.try($$SELECT count(*) FROM inbox.entries_p0$$);
SELECT regress.try($$INSERT INTO inbox.entries (scope, message_id) VALUES ('billing', 'forged')$$);
SELECT regress.try($$UPDATE inbox.entries SET payload_hash = NULL$$);
SELECT regress.try($$DELETE FROM inbox.entries$$);
SELECT regress.try($$TRUNCATE inbox.entries$$);
SELECT regress.try($$SET search_path = inbox; SELECT count(*) FROM entries$$);
RESET search_path;

-- search_path attacks.  A role puts its own schema before pg_catalog on its
-- search_path and shadows what our code names: tables, functions, operators,
-- even the types "text" and "char" (as domains whose CHECK calls a spy).
-- Each shadow writes to app.spied when it runs.  None may run, and every
-- API function must give the same results as without the attack.  Removing
-- either defence breaks this test: without the schema qualification the
-- implementations find no table on their pinned path; without the pinned
-- search_path, their PL/pgSQL resolves "text", "<" and "=" to the shadows.
\c - :superuser
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO inbox_regress_app;
\c - inbox_regress_app
CREATE TABLE app.spied (what text);
GRANT INSERT ON app.spied TO PUBLIC;
CREATE FUNCTION app.spy(what text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO app.spied VALUES (what);
	RETURN true;
END $$;
CREATE TABLE app.entries (scope text, message_id text, received_at timestamptz,
						  payload_hash bytea, state "char");
CREATE TABLE app.scopes (scope text);
CREATE TABLE app.scope_grants (scope text, grantee oid);
CREATE FUNCTION app.now() RETURNS timestamptz LANGUAGE sql
	AS $$SELECT 'epoch'::timestamptz WHERE app.spy('now()')$$;
CREATE FUNCTION app.sha256(bytea) RETURNS bytea LANGUAGE sql
	AS $$SELECT '\x00'::bytea WHERE app.spy('sha256()')$$;
CREATE FUNCTION app.text_eq(pg_catalog.text, pg_catalog.text) RETURNS boolean LANGUAGE sql
	AS $$SELECT app.spy('text =')$$;
CREATE OPERATOR app.= (LEFTARG = pg_catalog.text, RIGHTARG = pg_catalog.text, FUNCTION = app.text_eq);
CREATE FUNCTION app.int_lt(integer, integer) RETURNS boolean LANGUAGE sql
	AS $$SELECT app.spy('integer <') AND false$$;
CREATE OPERATOR app.< (LEFTARG = integer, RIGHTARG = integer, FUNCTION = app.int_lt);
CREATE FUNCTION app.char_eq("char", "char") RETURNS boolean LANGUAGE sql
	AS $$SELECT app.spy('"char" =')$$;
CREATE OPERATOR app.= (LEFTARG = "char", RIGHTARG = "char", FUNCTION = app.char_eq);
CREATE DOMAIN app.text AS pg_catalog.text CHECK (app.spy('domain text'));
CREATE DOMAIN app."char" AS pg_catalog."char" CHECK (app.spy('domain "char"'));
SET search_path = app, pg_catalog, public;
SELECT inbox_claim('billing', 'sec-2');
SELECT inbox_claim('billing', 'sec-2');
SELECT inbox_claim('billing', 'sec-3');
SELECT state, received_at > 'epoch' AS real_time FROM inbox_status('billing', 'sec-3');
SELECT inbox_receive('work', 'w-1', '{"n": 1}'::jsonb);
SELECT inbox_receive('work', 'w-1', '{"n": 1}'::jsonb);
SELECT inbox_receive('work', 'w-2', '\x0102'::bytea);
SELECT message_id, payload, payload_bytes, attempts FROM inbox_take('work', 5);
SELECT inbox_complete('work', 'w-1', '{"ok": true}');
SELECT inbox_result('work', 'w-1');
SELECT inbox_extend('work', 'w-2', '1 hour') > pg_catalog.now() AS extended;
SELECT inbox_fail('work', 'w-2', 'try again');
SELECT regress.try($$SELECT inbox_take('work', 0)$$);
SELECT inbox_set_max_attempts('work', 1);
SELECT message_id FROM inbox_take('work');
SELECT inbox_fail('work', 'w-2', 'gone');
SELECT inbox_requeue('work', 'w-2');
SELECT inbox_set_retention('work', '2 days');
SELECT regress.try($$SELECT inbox_complete('work', 'nope')$$);
-- Strings are data, never code: quotes, semicolons, backslashes, % and
-- format directives, and keys at the length limit, are stored as given.
SELECT inbox_claim(E'sc''; DROP TABLE app.spied; --', E'id\\''%s%I%L%%$1 \\x41');
SELECT inbox_claim(E'sc''; DROP TABLE app.spied; --', E'id\\''%s%I%L%%$1 \\x41');
SELECT inbox_claim(repeat('s', 256), repeat('%s', 512));
SELECT regress.try($$SELECT inbox_claim(repeat('s', 256), repeat('%s', 512) || 'x')$$);
SELECT inbox_drop_scope(E'sc''; DROP TABLE app.spied; --');
-- Nothing of the role's ran, and its tables are untouched.
SELECT count(*) AS spied, string_agg(DISTINCT what, ', ') AS what FROM app.spied;
SELECT (SELECT count(*) FROM app.entries) + (SELECT count(*) FROM app.scopes)
	 + (SELECT count(*) FROM app.scope_grants) AS untouched;
RESET search_path;

-- An operator granted SELECT on the views reads them, and still not the tables.
\c - :superuser
GRANT SELECT ON inbox_stats, inbox_dead_letters TO inbox_regress_app;
\c - inbox_regress_app
SELECT scope, claims > 0 AS counted FROM inbox_stats WHERE scope = 'billing';
SELECT count(*) FROM inbox_dead_letters;
SELECT regress.try($$SELECT count(*) FROM inbox.scopes$$);

\c - :superuser
SET timezone = 'UTC';
-- The claims above landed in the real table, with real timestamps.
SELECT message_id, received_at > 'epoch' AS real_time FROM inbox.entries
WHERE scope = 'billing' AND message_id LIKE 'sec-%' ORDER BY 1;
SELECT scope, state, attempts, result, retention FROM inbox.entries
	LEFT JOIN inbox.scopes USING (scope) WHERE scope = 'work' ORDER BY message_id;
SELECT octet_length(scope), message_id = repeat('%s', 512) AS exact FROM inbox.entries
WHERE scope = repeat('s', 256);
SELECT count(*) AS dropped_scope_left FROM inbox.entries WHERE scope LIKE 'sc%DROP%';

-- Per-scope grants.  Only the extension's owner or a superuser may grant;
-- once a scope has a grant, only the granted roles and their members may act
-- on it, through any function; a scope without grants stays open.
CREATE ROLE inbox_regress_billing;
CREATE ROLE inbox_regress_other;
CREATE ROLE inbox_regress_member IN ROLE inbox_regress_billing;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public
	TO inbox_regress_billing, inbox_regress_other, inbox_regress_member;
SET ROLE inbox_regress_billing;
SELECT regress.try($$SELECT inbox_grant('billing', 'inbox_regress_billing')$$);
SELECT regress.try($$SELECT inbox_revoke('billing', 'inbox_regress_billing')$$);
RESET ROLE;
SELECT inbox_grant('billing', 'inbox_regress_billing');
SELECT inbox_grant('billing', 'inbox_regress_billing');
SELECT regress.try($$SELECT inbox_grant('', 'inbox_regress_billing')$$);
SELECT regress.try($$SELECT inbox_grant(repeat('s', 257), 'inbox_regress_billing')$$);
SELECT regress.try($$SELECT inbox_grant('billing', NULL)$$);
SELECT regress.try($$SELECT inbox_grant(NULL, 'inbox_regress_billing')$$);
SELECT regress.try($$SELECT inbox_grant('billing', 'inbox_no_such_role')$$);
SELECT scope, grantee FROM inbox_grants ORDER BY 1, 2;

SET ROLE inbox_regress_billing;
SELECT inbox_claim('billing', 'g-1');
SET ROLE inbox_regress_member;
SELECT inbox_claim('billing', 'g-2');
SET ROLE inbox_regress_other;
SELECT regress.try($$SELECT inbox_claim('billing', 'g-3')$$);
SELECT regress.try($$SELECT * FROM inbox_status('billing', 'g-1')$$);
SELECT regress.try($$SELECT inbox_receive('billing', 'g-4', '{}'::jsonb)$$);
SELECT regress.try($$SELECT inbox_receive('billing', 'g-4', '\x00'::bytea)$$);
SELECT regress.try($$SELECT * FROM inbox_take('billing')$$);
SELECT regress.try($$SELECT inbox_complete('billing', 'g-1')$$);
SELECT regress.try($$SELECT inbox_fail('billing', 'g-1', 'x')$$);
SELECT regress.try($$SELECT inbox_extend('billing', 'g-1', '1 hour')$$);
SELECT regress.try($$SELECT inbox_requeue('billing', 'g-1')$$);
SELECT regress.try($$SELECT inbox_result('billing', 'g-1')$$);
SELECT regress.try($$SELECT inbox_set_max_attempts('billing', 3)$$);
SELECT regress.try($$SELECT inbox_set_retention('billing', '1 day')$$);
SELECT regress.try($$SELECT inbox_drop_scope('billing')$$);
SELECT regress.try($$SELECT inbox_claim(E'billing\n"x"', 'g-3')$$);
SELECT inbox_claim('open-scope', 'g-5');

-- This session has cached the grants; a new grant reaches the cache at once.
RESET ROLE;
SELECT inbox_grant('open-scope', 'inbox_regress_billing');
SELECT inbox_grant(E'billing\n"x"', 'inbox_regress_billing');
SET ROLE inbox_regress_other;
SELECT regress.try($$SELECT inbox_claim('open-scope', 'g-6')$$);
-- (the scope's name is quoted safely in the message)
SELECT regress.try($$SELECT inbox_claim(E'billing\n"x"', 'g-4')$$);

-- The operators' views show a role only the scopes it may act on.
RESET ROLE;
GRANT SELECT ON inbox_stats, inbox_dead_letters TO inbox_regress_billing, inbox_regress_other;
SELECT inbox_set_max_attempts('billing', 1);
SELECT inbox_receive('billing', 'dl-1', '{"secret": 1}'::jsonb);
SELECT inbox_fail('billing', message_id, 'poison') FROM inbox_take('billing');
SET ROLE inbox_regress_other;
SELECT scope FROM inbox_stats WHERE scope IN ('billing', 'open-scope', 'work') ORDER BY 1;
SELECT scope, message_id FROM inbox_dead_letters;
-- Nor can a cheap function of the role's own in the WHERE clause see the
-- hidden rows: the views are security barriers, so it runs after the filter.
CREATE FUNCTION pg_temp.peek(s text, what text) RETURNS boolean LANGUAGE plpgsql COST 0.0001 AS $$
BEGIN
	IF s = 'billing' THEN
		RAISE NOTICE 'seen: % %', s, what;
	END IF;
	RETURN true;
END $$;
SELECT count(*) FROM inbox_dead_letters WHERE pg_temp.peek(scope, payload::text);
SELECT count(*) FROM inbox_stats WHERE pg_temp.peek(scope, 'counters') AND scope = 'billing';
SET ROLE inbox_regress_billing;
SELECT scope FROM inbox_stats WHERE scope IN ('billing', 'open-scope', 'work') ORDER BY 1;
SELECT scope, message_id, payload FROM inbox_dead_letters;
RESET ROLE;
SELECT inbox_set_max_attempts('billing', NULL);
DELETE FROM inbox.entries WHERE message_id = 'dl-1';

-- The identity that counts is the role that called the API: after SET ROLE,
-- the role set (above); inside an application's SECURITY DEFINER function,
-- the role that function runs as, whoever the session's user is.
RESET ROLE;
CREATE SCHEMA appsd;
GRANT USAGE ON SCHEMA appsd TO PUBLIC;
CREATE FUNCTION appsd.bill_as_billing(id text) RETURNS boolean
	LANGUAGE sql SECURITY DEFINER SET search_path = public
	AS $$SELECT inbox_claim('billing', id)$$;
ALTER FUNCTION appsd.bill_as_billing(text) OWNER TO inbox_regress_billing;
CREATE FUNCTION appsd.bill_as_other(id text) RETURNS boolean
	LANGUAGE sql SECURITY DEFINER SET search_path = public
	AS $$SELECT inbox_claim('billing', id)$$;
ALTER FUNCTION appsd.bill_as_other(text) OWNER TO inbox_regress_other;
SET ROLE inbox_regress_other;
SELECT appsd.bill_as_billing('g-7');
SET ROLE inbox_regress_billing;
SELECT regress.try($$SELECT appsd.bill_as_other('g-8')$$);
RESET ROLE;

-- Revoking the last grant opens the scope again, and says so.
SELECT inbox_revoke('open-scope', 'inbox_regress_billing');
SELECT inbox_revoke('open-scope', 'inbox_regress_billing');
SET ROLE inbox_regress_other;
SELECT inbox_claim('open-scope', 'g-6');
RESET ROLE;

-- A grantee that is dropped leaves the scope closed (the safe side).
CREATE ROLE inbox_regress_gone;
SELECT inbox_grant('closed', 'inbox_regress_gone');
DROP ROLE inbox_regress_gone;
SET ROLE inbox_regress_other;
SELECT regress.try($$SELECT inbox_claim('closed', 'g-9')$$);
RESET ROLE;
-- The grant names the role: it is shown without a role, never as a bare OID
-- that a restore could attach to another role.
SELECT scope, grantee IS NULL AS role_missing, grantee_name
FROM inbox_grants WHERE scope = 'closed';
SELECT message_id FROM inbox.entries WHERE message_id LIKE 'g-%' ORDER BY 1;
DELETE FROM inbox.scope_grants;
DROP SCHEMA appsd CASCADE;
DROP OWNED BY inbox_regress_billing, inbox_regress_other, inbox_regress_member;
DROP ROLE inbox_regress_member, inbox_regress_billing, inbox_regress_other;

SELECT inbox_drop_scope('work'), inbox_drop_scope(repeat('s', 256));
DROP SCHEMA app CASCADE;
DROP OWNED BY inbox_regress_app;
DROP ROLE inbox_regress_app;
