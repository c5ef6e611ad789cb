--
-- depth: inbox_depth(scope), the pending, due and processing messages of a
-- scope from shared-memory counters; each step compares it with a count
-- of the scope's rows.  Restarts and concurrent commits are in TAP
-- test/t/032_depth.pl.
--
SET timezone = 'UTC';

-- The shape: one row of three bigints.
SELECT pg_catalog.pg_get_function_result('inbox_depth(text)'::regprocedure);
SELECT * FROM inbox_depth('depth-none');

-- What the counters must equal
CREATE FUNCTION pg_temp.counted(s text, OUT pending bigint, OUT due bigint, OUT processing bigint)
LANGUAGE sql AS $$
	SELECT count(*) FILTER (WHERE state = 'p'),
		   count(*) FILTER (WHERE state = 'p' AND due <= clock_timestamp()),
		   count(*) FILTER (WHERE state = 'r')
	  FROM inbox.entries WHERE scope = s
$$;
CREATE FUNCTION pg_temp.check_depth(s text) RETURNS text
LANGUAGE sql AS $$
	SELECT format('%s/%s/%s %s', d.pending, d.due, d.processing,
				  CASE WHEN (d.pending, d.due, d.processing) = (c.pending, c.due, c.processing)
					   THEN 'ok' ELSE format('MISMATCH rows %s/%s/%s', c.pending, c.due, c.processing) END)
	  FROM inbox_depth(s) AS d, pg_temp.counted(s) AS c
$$;

-- Receives, takes, completions, failures, a requeue
SELECT count(*) FROM (SELECT inbox_receive('depth', 'm-' || i, '{}'::jsonb) FROM generate_series(1, 5) AS i) AS r;
SELECT pg_temp.check_depth('depth');
SELECT count(*) FROM inbox_receive_many('depth', ARRAY['b-1', 'b-2', 'm-1'], ARRAY['{}', '{}', '{}']::jsonb[]);
SELECT pg_temp.check_depth('depth');
SELECT inbox_claim('depth', 'claimed');
SELECT pg_temp.check_depth('depth');
SELECT count(*) FROM inbox_take('depth', 2);
SELECT pg_temp.check_depth('depth');
SELECT inbox_complete('depth', message_id) FROM inbox.entries WHERE scope = 'depth' AND state = 'r' AND message_id = 'm-1';
SELECT pg_temp.check_depth('depth');
SELECT receipt IS NOT NULL AS polled FROM inbox_poll('depth', 1, '1 minute');
SELECT pg_temp.check_depth('depth');
SELECT inbox_complete('depth', receipt) FROM inbox.entries WHERE scope = 'depth' AND receipt IS NOT NULL;
SELECT pg_temp.check_depth('depth');
SELECT inbox_fail('depth', message_id, 'again') FROM inbox.entries WHERE scope = 'depth' AND state = 'r';
SELECT pg_temp.check_depth('depth');
SELECT inbox_set_max_attempts('depth', 1);
SELECT inbox_fail('depth', message_id, 'poison') FROM inbox_take('depth', 1);
SELECT pg_temp.check_depth('depth');
SELECT inbox_requeue('depth', message_id) FROM inbox.entries WHERE scope = 'depth' AND state = 'x';
SELECT pg_temp.check_depth('depth');

-- Not due: a not_before, a retry delay, a group's members behind its head
SELECT inbox_receive('depth', 'later', '{}'::jsonb, not_before => now() + interval '1 hour');
SELECT pg_temp.check_depth('depth');
SELECT inbox_set_max_attempts('depth', 5);
SELECT inbox_fail('depth', message_id, 'retry', interval '1 hour') FROM inbox_take('depth', 1);
SELECT pg_temp.check_depth('depth');
SELECT inbox_receive('depth', 'g-' || i, '{}'::jsonb, group_key => 'g') FROM generate_series(1, 3) AS i;
SELECT pg_temp.check_depth('depth');
-- A delay moved into the past by hand: due at once, once the scope is
-- counted again (inbox.forget_front)
UPDATE inbox.entries SET due = now() - interval '1 second' WHERE scope = 'depth' AND message_id = 'later';
SELECT inbox.forget_front('depth');
SELECT pg_temp.check_depth('depth');

-- Rolled back: a transaction, a savepoint
BEGIN;
SELECT inbox_receive('depth', 'rolled-back', '{}'::jsonb);
SELECT count(*) FROM inbox_take('depth', 2);
ROLLBACK;
SELECT pg_temp.check_depth('depth');
BEGIN;
SELECT inbox_receive('depth', 'kept', '{}'::jsonb);
SAVEPOINT s;
SELECT inbox_receive('depth', 'undone', '{}'::jsonb);
SELECT count(*) FROM inbox_take('depth', 3);
ROLLBACK TO SAVEPOINT s;
SAVEPOINT t;
SELECT count(*) FROM inbox_take('depth', 1);
RELEASE SAVEPOINT t;
COMMIT;
SELECT pg_temp.check_depth('depth');
-- An error caught by a PL/pgSQL block takes its notes with it
DO $$
BEGIN
	PERFORM inbox_receive('depth', 'caught', '{}'::jsonb);
	PERFORM inbox_take('depth', 1);
	RAISE EXCEPTION 'undo';
EXCEPTION WHEN raise_exception THEN
	NULL;
END
$$;
SELECT pg_temp.check_depth('depth');

-- Inside the transaction that changes it, the scope is counted
BEGIN;
SELECT inbox_receive('depth', 'mine', '{}'::jsonb);
SELECT pending FROM inbox_depth('depth');
ROLLBACK;
SELECT pg_temp.check_depth('depth');

-- A prepared transaction counts when COMMIT PREPARED ends
BEGIN;
SELECT inbox_receive('depth', 'prepared', '{}'::jsonb);
PREPARE TRANSACTION 'depth';
SELECT pg_temp.check_depth('depth');
COMMIT PREPARED 'depth';
SELECT pg_temp.check_depth('depth');

-- Another scope is counted apart; a dropped scope is empty
SELECT inbox_receive('depth-other', 'o-1', '{}'::jsonb);
SELECT pg_temp.check_depth('depth-other');
SELECT inbox_drop_scope('depth-other');
SELECT pg_temp.check_depth('depth-other');
SELECT pg_temp.check_depth('depth');

-- Errors
SELECT regress.try($$SELECT * FROM inbox_depth(NULL)$$);
SELECT regress.try($$SELECT * FROM inbox_depth('')$$);
SELECT regress.try($$SELECT * FROM inbox_depth(repeat('s', 257))$$);

-- Grants: the worker bundle holds it; a scope's grants apply
SELECT bundle FROM inbox_bundles WHERE object = 'inbox_depth(text)' ORDER BY 1;
CREATE ROLE inbox_regress_depth_worker;
CREATE ROLE inbox_regress_depth_other;
CREATE ROLE inbox_regress_depth_none;
SELECT inbox_grant_bundle('inbox_regress_depth_worker', 'worker');
SELECT inbox_grant_bundle('inbox_regress_depth_other', 'worker');
SELECT inbox_grant('depth-private', 'inbox_regress_depth_worker');
SELECT inbox_receive('depth-private', 'p-1', '{}'::jsonb);
SET ROLE inbox_regress_depth_worker;
SELECT * FROM inbox_depth('depth-private');
SET ROLE inbox_regress_depth_other;
SELECT * FROM inbox_depth('depth');
SELECT regress.try($$SELECT * FROM inbox_depth('depth-private')$$);
SET ROLE inbox_regress_depth_none;
SELECT regress.try($$SELECT * FROM inbox_depth('depth')$$);
RESET ROLE;
SELECT inbox_drop_scope('depth-private');
SELECT inbox_revoke('depth-private', 'inbox_regress_depth_worker');
SELECT inbox_revoke_bundle('inbox_regress_depth_worker', 'worker');
SELECT inbox_revoke_bundle('inbox_regress_depth_other', 'worker');
DROP ROLE inbox_regress_depth_worker, inbox_regress_depth_other, inbox_regress_depth_none;
SELECT inbox_drop_scope('depth');
