/* sql/inbox--0.2.0--0.3.0.sql */

-- complain if the script is sourced in psql rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION inbox UPDATE TO '0.3.0'" to load this file. \quit

/*
 * The deferred mode: receive now, process later.
 *
 * inbox_receive stores a message as pending ('p') and the broker can be
 * acked at once.  Workers take pending messages (inbox_take), which makes
 * them processing ('r') and records the taking session as their owner;
 * they finish them with inbox_complete (done, 'd') or inbox_fail (pending
 * again after a delay, or dead, 'x', after inbox.max_attempts takes).
 *
 * Received and claimed messages share the table, and so one key space per
 * scope: the unique index arbitrates between them as between two claims.
 *
 * A processing message goes back to pending, with no timeout to guess,
 * when:
 *	- the transaction that took it rolls back (the take is undone), or
 *	- its owner session has ended, normally or in a crash (see
 *	  src/deferred.c: the owner holds a lock only a live session holds), or
 *	- it was taken with a lease (for work outside the database, such as a
 *	  slow external call) and the lease ran out without inbox_extend.
 * Only its owner can complete or fail it: a worker that lost a message to
 * another gets IB004 in the transaction of its effect, which therefore
 * rolls back.  Every take counts as an attempt, so a message that kills
 * its worker every time ends up dead rather than looping.
 */
ALTER TABLE inbox.entries
	ADD COLUMN payload jsonb,
	ADD COLUMN payload_bytes bytea,
	ADD COLUMN attempts integer,
	ADD COLUMN owner_session bigint,
	ADD COLUMN taken_at timestamptz,
	ADD COLUMN lease_until timestamptz,
	ADD COLUMN visible_after timestamptz,
	ADD COLUMN last_error text,
	ADD COLUMN result jsonb,
	ADD COLUMN finished_at timestamptz;

-- Messages not yet done, oldest first per scope: what inbox_take scans.
-- Done entries (every claim) stay out of it, so it stays small.
CREATE INDEX entries_open ON inbox.entries (scope, received_at)
	WHERE state OPERATOR(pg_catalog.<>) 'd'::"char";

ALTER TABLE inbox.scopes
	ADD COLUMN max_attempts integer,
	ADD CONSTRAINT scopes_max_attempts_positive
		CHECK (max_attempts OPERATOR(pg_catalog.>) 0);

-- C helpers (src/deferred.c)

CREATE FUNCTION inbox.session_key()
RETURNS bigint
AS 'MODULE_PATHNAME', 'inbox_session_key'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.session_alive(owner bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_session_alive'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.check_key(scope text, message_id text, with_id boolean)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_check_key'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.quote(text)
RETURNS text
AS 'MODULE_PATHNAME', 'inbox_quote_sql'
LANGUAGE C IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.count_failure(scope text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_count_failure'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

-- The attempts allowed in a scope: its override, or inbox.max_attempts.
CREATE FUNCTION inbox.max_attempts(p_scope text)
RETURNS integer
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT coalesce((SELECT s.max_attempts FROM inbox.scopes AS s
					 WHERE s.scope OPERATOR(pg_catalog.=) p_scope COLLATE "C"),
					current_setting('inbox.max_attempts')::integer)
$$;

CREATE FUNCTION inbox.state_name("char")
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT CASE $1 WHEN 'p' THEN 'pending' WHEN 'r' THEN 'processing'
				   WHEN 'd' THEN 'done' WHEN 'x' THEN 'dead' END
$$;

/*
 * inbox.refuse(scope, message_id, action, expected state): explain why an
 * UPDATE of complete/fail/extend/requeue matched no row, and raise.
 */
CREATE FUNCTION inbox.refuse(p_scope text, p_id text, p_action text, p_expected "char")
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	st "char";
	msg text := format('message "%s" in scope "%s"', inbox.quote(p_id), inbox.quote(p_scope));
BEGIN
	SELECT e.state INTO st FROM inbox.entries AS e
	 WHERE e.scope OPERATOR(pg_catalog.=) p_scope COLLATE "C"
	   AND e.message_id OPERATOR(pg_catalog.=) p_id COLLATE "C";
	IF NOT FOUND THEN
		RAISE EXCEPTION '% does not exist', msg
			USING ERRCODE = 'IB005',
				  HINT = format('Only a message stored by inbox_receive can be %s.', p_action);
	ELSIF st <> p_expected THEN
		RAISE EXCEPTION '% is %', msg,
			CASE p_expected WHEN 'r' THEN 'not being processed' ELSE 'not dead' END
			USING ERRCODE = 'IB004',
				  DETAIL = format('It is %s, so it cannot be %s.', inbox.state_name(st), p_action);
	ELSE
		RAISE EXCEPTION '% is being processed by another session', msg
			USING ERRCODE = 'IB004',
				  DETAIL = 'This session does not own it: another session took it, or this session''s lease ran out and another worker took it again.',
				  HINT = 'Roll back the transaction, so that the effect of this processing does not commit.';
	END IF;
END
$$;

-- The API

CREATE FUNCTION @extschema@.inbox_receive(scope text, message_id text, payload jsonb,
										  payload_hash bytea DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_receive_json'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.inbox_receive(text, text, jsonb, bytea) IS
'store a message as pending: true if new, false (or IB001) if the key exists in any state, IB002 on a payload mismatch';

CREATE FUNCTION @extschema@.inbox_receive(scope text, message_id text, payload bytea,
										  payload_hash bytea DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_receive_bytes'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.inbox_receive(text, text, bytea, bytea) IS
'store a binary message (EDI, protobuf, ...) as pending';

CREATE FUNCTION @extschema@.inbox_take(scope text, max_messages integer DEFAULT 1,
									   lease interval DEFAULT NULL)
RETURNS TABLE (message_id text, payload jsonb, payload_bytes bytea,
			   attempts integer, received_at timestamptz)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
	me bigint;
	allowed integer;
BEGIN
	PERFORM inbox.check_key(inbox_take.scope, NULL, false);
	IF max_messages IS NULL OR max_messages < 1 OR max_messages > 10000 THEN
		RAISE EXCEPTION 'max_messages must be between 1 and 10000'
			USING ERRCODE = '22023',
				  DETAIL = format('It is %s.', coalesce(max_messages::text, 'NULL'));
	END IF;
	IF lease IS NOT NULL AND lease <= interval '0' THEN
		RAISE EXCEPTION 'lease must be positive'
			USING ERRCODE = '22023',
				  HINT = 'Pass NULL to take without a lease: the message then stays with this session until it is completed or failed, or the session ends.';
	END IF;
	me := inbox.session_key();
	allowed := inbox.max_attempts(inbox_take.scope);

	/*
	 * One pass, oldest first, over the open-messages index: pending
	 * messages that are due, and processing ones whose owner is gone or
	 * whose lease ran out.  A lost message that has had all its attempts
	 * is marked dead instead of being handed out (a message that kills its
	 * worker must not loop forever); it still uses up a place in
	 * max_messages, so a take can return fewer rows than are pending.
	 */
	RETURN QUERY
	WITH candidates AS (
		-- dies: lost after its last allowed attempt (the row is locked, so
		-- its state cannot change before the UPDATE below)
		SELECT c.message_id, (c.state = 'r' AND c.attempts >= allowed) AS dies
		  FROM inbox.entries AS c
		 WHERE c.scope OPERATOR(pg_catalog.=) inbox_take.scope COLLATE "C"
		   AND c.state <> 'd'
		   AND ((c.state = 'p' AND (c.visible_after IS NULL OR c.visible_after <= now()))
				OR (c.state = 'r' AND (c.lease_until < now()
									   OR NOT inbox.session_alive(c.owner_session))))
		 ORDER BY c.received_at
		 LIMIT max_messages
		   FOR UPDATE SKIP LOCKED),
	taken AS (
		UPDATE inbox.entries AS e
		   SET state = CASE WHEN k.dies THEN 'x' ELSE 'r' END::"char",
			   attempts = CASE WHEN k.dies THEN e.attempts ELSE coalesce(e.attempts, 0) + 1 END,
			   owner_session = CASE WHEN k.dies THEN NULL ELSE me END,
			   taken_at = now(),
			   lease_until = CASE WHEN k.dies THEN NULL ELSE now() + lease END,
			   visible_after = NULL,
			   finished_at = CASE WHEN k.dies THEN now() ELSE e.finished_at END,
			   last_error = CASE WHEN k.dies
								 THEN coalesce(e.last_error, 'worker lost during the last allowed attempt')
								 ELSE e.last_error END
		  FROM candidates AS k
		 WHERE e.scope OPERATOR(pg_catalog.=) inbox_take.scope COLLATE "C"
		   AND e.message_id OPERATOR(pg_catalog.=) k.message_id
		RETURNING e.message_id, e.payload, e.payload_bytes, e.attempts, e.received_at, e.state)
	SELECT t.message_id, t.payload, t.payload_bytes, t.attempts, t.received_at
	  FROM taken AS t
	 WHERE t.state = 'r'
	 ORDER BY t.received_at, t.message_id;
END
$$;

COMMENT ON FUNCTION @extschema@.inbox_take(text, integer, interval) IS
'take up to max_messages pending messages, oldest first; concurrent takers never get the same one';

CREATE FUNCTION @extschema@.inbox_complete(scope text, message_id text, result jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
	PERFORM inbox.check_key(inbox_complete.scope, inbox_complete.message_id, true);
	UPDATE inbox.entries AS e
	   SET state = 'd', result = inbox_complete.result, finished_at = now(),
		   owner_session = NULL, lease_until = NULL
	 WHERE e.scope OPERATOR(pg_catalog.=) inbox_complete.scope COLLATE "C"
	   AND e.message_id OPERATOR(pg_catalog.=) inbox_complete.message_id COLLATE "C"
	   AND e.state = 'r' AND e.owner_session = inbox.session_key();
	IF NOT FOUND THEN
		PERFORM inbox.refuse(inbox_complete.scope, inbox_complete.message_id, 'completed', 'r');
	END IF;
END
$$;

COMMENT ON FUNCTION @extschema@.inbox_complete(text, text, jsonb) IS
'mark a message this session took as done, storing its result; commits with the business effect';

CREATE FUNCTION @extschema@.inbox_fail(scope text, message_id text, error text,
									   retry_after interval DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
	new_state "char";
	allowed integer;
BEGIN
	PERFORM inbox.check_key(inbox_fail.scope, inbox_fail.message_id, true);
	IF retry_after < interval '0' THEN
		RAISE EXCEPTION 'retry_after must not be negative'
			USING ERRCODE = '22023';
	END IF;
	allowed := inbox.max_attempts(inbox_fail.scope);
	UPDATE inbox.entries AS e
	   SET state = CASE WHEN coalesce(e.attempts, 0) >= allowed
						THEN 'x' ELSE 'p' END::"char",
		   visible_after = CASE WHEN coalesce(e.attempts, 0) >= allowed
								THEN NULL ELSE now() + coalesce(retry_after, interval '0') END,
		   finished_at = CASE WHEN coalesce(e.attempts, 0) >= allowed
							  THEN now() END,
		   owner_session = NULL, lease_until = NULL, last_error = inbox_fail.error
	 WHERE e.scope OPERATOR(pg_catalog.=) inbox_fail.scope COLLATE "C"
	   AND e.message_id OPERATOR(pg_catalog.=) inbox_fail.message_id COLLATE "C"
	   AND e.state = 'r' AND e.owner_session = inbox.session_key()
	RETURNING e.state INTO new_state;
	IF NOT FOUND THEN
		PERFORM inbox.refuse(inbox_fail.scope, inbox_fail.message_id, 'failed', 'r');
	END IF;
	PERFORM inbox.count_failure(inbox_fail.scope);
	RETURN inbox.state_name(new_state);
END
$$;

COMMENT ON FUNCTION @extschema@.inbox_fail(text, text, text, interval) IS
'give back a message this session took: pending again after retry_after, or dead after its last attempt; returns the new state';

CREATE FUNCTION @extschema@.inbox_extend(scope text, message_id text, lease interval)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
	until timestamptz;
BEGIN
	PERFORM inbox.check_key(inbox_extend.scope, inbox_extend.message_id, true);
	IF lease IS NULL OR lease <= interval '0' THEN
		RAISE EXCEPTION 'lease must be positive'
			USING ERRCODE = '22023';
	END IF;
	UPDATE inbox.entries AS e
	   SET lease_until = now() + lease
	 WHERE e.scope OPERATOR(pg_catalog.=) inbox_extend.scope COLLATE "C"
	   AND e.message_id OPERATOR(pg_catalog.=) inbox_extend.message_id COLLATE "C"
	   AND e.state = 'r' AND e.owner_session = inbox.session_key()
	RETURNING e.lease_until INTO until;
	IF NOT FOUND THEN
		PERFORM inbox.refuse(inbox_extend.scope, inbox_extend.message_id, 'extended', 'r');
	END IF;
	RETURN until;
END
$$;

COMMENT ON FUNCTION @extschema@.inbox_extend(text, text, interval) IS
'extend the lease of a message this session took; returns the new end of the lease';

CREATE FUNCTION @extschema@.inbox_requeue(scope text, message_id text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
	PERFORM inbox.check_key(inbox_requeue.scope, inbox_requeue.message_id, true);
	UPDATE inbox.entries AS e
	   SET state = 'p', attempts = 0, visible_after = NULL, finished_at = NULL,
		   owner_session = NULL, lease_until = NULL
	 WHERE e.scope OPERATOR(pg_catalog.=) inbox_requeue.scope COLLATE "C"
	   AND e.message_id OPERATOR(pg_catalog.=) inbox_requeue.message_id COLLATE "C"
	   AND e.state = 'x';
	IF NOT FOUND THEN
		PERFORM inbox.refuse(inbox_requeue.scope, inbox_requeue.message_id, 'requeued', 'x');
	END IF;
END
$$;

COMMENT ON FUNCTION @extschema@.inbox_requeue(text, text) IS
'put a dead message back to pending, with its attempts reset';

CREATE FUNCTION @extschema@.inbox_set_max_attempts(scope text, max_attempts integer)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
	PERFORM inbox.check_key(inbox_set_max_attempts.scope, NULL, false);
	IF inbox_set_max_attempts.max_attempts < 1 THEN
		RAISE EXCEPTION 'max_attempts must be at least 1'
			USING ERRCODE = '22023',
				  HINT = 'Pass NULL to go back to inbox.max_attempts.';
	END IF;
	INSERT INTO inbox.scopes AS s (scope, max_attempts)
	VALUES (inbox_set_max_attempts.scope, inbox_set_max_attempts.max_attempts)
	ON CONFLICT (scope) DO UPDATE SET max_attempts = EXCLUDED.max_attempts;
END
$$;

COMMENT ON FUNCTION @extschema@.inbox_set_max_attempts(text, integer) IS
'override inbox.max_attempts for one scope; NULL goes back to the setting';

CREATE FUNCTION @extschema@.inbox_result(scope text, message_id text)
RETURNS jsonb
LANGUAGE plpgsql STABLE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
	r jsonb;
BEGIN
	PERFORM inbox.check_key(inbox_result.scope, inbox_result.message_id, true);
	SELECT e.result INTO r FROM inbox.entries AS e
	 WHERE e.scope OPERATOR(pg_catalog.=) inbox_result.scope COLLATE "C"
	   AND e.message_id OPERATOR(pg_catalog.=) inbox_result.message_id COLLATE "C";
	RETURN r;
END
$$;

COMMENT ON FUNCTION @extschema@.inbox_result(text, text) IS
'the result stored by inbox_complete, so that a redelivered request is answered as the first time; NULL if none';

CREATE VIEW @extschema@.inbox_dead_letters AS
	SELECT e.scope, e.message_id, e.attempts, e.last_error, e.received_at,
		   e.finished_at AS died_at, e.payload, e.payload_bytes
	  FROM inbox.entries AS e
	 WHERE e.state OPERATOR(pg_catalog.=) 'x'::"char";

COMMENT ON VIEW @extschema@.inbox_dead_letters IS
'messages that used all their attempts; inbox_requeue puts one back';

/*
 * inbox_stats gains the backlog (from the open-messages index, which holds
 * only messages not yet done) and the processing failures (shared memory).
 * The view keeps its columns and adds these at the end, so that grants on
 * it survive the update.
 */
CREATE FUNCTION inbox.scope_counters(OUT scope text, OUT claims bigint, OUT duplicates bigint,
									 OUT mismatches bigint, OUT purged bigint,
									 OUT last_purge timestamptz, OUT failures bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'inbox_counters'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.scope_backlog(OUT scope text, OUT pending bigint, OUT processing bigint,
									OUT dead bigint, OUT oldest_pending timestamptz)
RETURNS SETOF record
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT e.scope,
		   count(*) FILTER (WHERE e.state = 'p'),
		   count(*) FILTER (WHERE e.state = 'r'),
		   count(*) FILTER (WHERE e.state = 'x'),
		   min(e.received_at) FILTER (WHERE e.state = 'p')
	  FROM inbox.entries AS e
	 WHERE e.state OPERATOR(pg_catalog.<>) 'd'::"char"
	 GROUP BY e.scope
$$;

CREATE OR REPLACE VIEW @extschema@.inbox_stats AS
	SELECT scope,
		   c.claims, c.duplicates, c.mismatches,
		   c.purged AS rows_purged, c.last_purge,
		   s.retention, s.clock, s.cutoff, s.oldest_entry, s.purge_lag,
		   s.entries_retained,
		   coalesce(b.pending, 0) AS pending,
		   coalesce(b.processing, 0) AS processing,
		   coalesce(b.dead, 0) AS dead,
		   now() - b.oldest_pending AS oldest_pending_age,
		   c.failures
	  FROM inbox.scope_counters() AS c
	  FULL JOIN inbox.scope_state() AS s USING (scope)
	  FULL JOIN inbox.scope_backlog() AS b USING (scope);

DROP FUNCTION inbox.counters();

-- Only the extension owner and those it grants may use the API.
REVOKE ALL ON FUNCTION @extschema@.inbox_receive(text, text, jsonb, bytea) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_receive(text, text, bytea, bytea) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_take(text, integer, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_complete(text, text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_fail(text, text, text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_extend(text, text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_requeue(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_set_max_attempts(text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_result(text, text) FROM PUBLIC;
REVOKE ALL ON @extschema@.inbox_dead_letters FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.session_key() FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.refuse(text, text, text, "char") FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.count_failure(text) FROM PUBLIC;
