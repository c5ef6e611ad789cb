--
-- poll: takes with receipts (inbox_poll), completion, failure and lease
-- extension by receipt from any session, waiting takes, delayed receives
-- and batch receives.  Another session is simulated by rewriting
-- owner_session as superuser; real concurrency and real waits are in the
-- isolation specs and TAP 010.
--
SET timezone = 'UTC';
SET datestyle = 'ISO';
CREATE TABLE regress.receipts (message_id text, receipt uuid);
-- Errors name the receipt, which is random.
CREATE FUNCTION regress.try_receipt(cmd text) RETURNS text LANGUAGE sql AS $$
	SELECT regexp_replace(regress.try(cmd), '[0-9a-f]{8}-[0-9a-f-]{27}', '<receipt>')
$$;

SELECT count(inbox_receive('jobs', 'j-' || g, jsonb_build_object('n', g))) FROM generate_series(1, 4) g;
-- A poll hands out messages under a lease, each with its receipt.
WITH p AS (SELECT * FROM inbox_poll('jobs', 2, lease => '1 minute'))
INSERT INTO regress.receipts SELECT message_id, receipt FROM p RETURNING message_id;
SELECT r.message_id, e.state, e.receipt = r.receipt AS stored, e.lease_until > now() AS leased,
	   e.attempts
FROM regress.receipts r JOIN inbox.entries e ON e.scope = 'jobs' AND e.message_id = r.message_id
ORDER BY 1;
-- A receipt is a random, version 4 UUID, one per take.
SELECT count(DISTINCT receipt) = count(*) AS distinct_receipts,
	   bool_and(substr(receipt::text, 15, 1) = '4') AS version_4
FROM regress.receipts;

-- Another session, behind a pooler, completes by receipt: the session
-- check does not apply.  (owner_session 42 is nobody's.)
UPDATE inbox.entries SET owner_session = 42 WHERE scope = 'jobs';
SELECT inbox.forget_front('jobs');  -- moved by hand: the front must hear of it
SELECT regress.try($$SELECT inbox_complete('jobs', 'j-1')$$);
SELECT inbox_complete('jobs', receipt, '{"ok": true}') FROM regress.receipts WHERE message_id = 'j-1';
SELECT state, inbox_result('jobs', 'j-1') FROM inbox_status('jobs', 'j-1');
-- A receipt holds one take only: once used, or for another scope, refused.
SELECT regress.try_receipt(format($$SELECT inbox_complete('jobs', %L::uuid)$$, receipt))
FROM regress.receipts WHERE message_id = 'j-1';
SELECT regress.try_receipt(format($$SELECT inbox_complete('other', %L::uuid)$$, receipt))
FROM regress.receipts WHERE message_id = 'j-2';
SELECT regress.try($$SELECT inbox_complete('jobs', NULL::uuid)$$);
SELECT regress.try_receipt($$SELECT inbox_complete('jobs', gen_random_uuid())$$);
-- Extend and fail by receipt.
SELECT inbox_extend('jobs', receipt, '2 hours') > now() + interval '1 hour' AS extended
FROM regress.receipts WHERE message_id = 'j-2';
SELECT inbox_fail('jobs', receipt, 'flaky', '1 hour') FROM regress.receipts WHERE message_id = 'j-2';
SELECT regress.try_receipt(format($$SELECT inbox_extend('jobs', %L::uuid, '1 minute')$$, receipt))
FROM regress.receipts WHERE message_id = 'j-2';
SELECT regress.try_receipt(format($$SELECT inbox_fail('jobs', %L::uuid, 'again')$$, receipt))
FROM regress.receipts WHERE message_id = 'j-2';
SELECT regress.try($$SELECT inbox_fail('jobs', NULL::uuid, 'x')$$);
-- A message taken again gets a new receipt; the old one is refused.
UPDATE inbox.entries SET due = now() WHERE scope = 'jobs' AND message_id = 'j-2';
SELECT inbox.forget_front('jobs');  -- moved by hand: the front must hear of it
SELECT message_id, attempts, receipt <> (SELECT receipt FROM regress.receipts WHERE message_id = 'j-2') AS new_receipt
FROM inbox_poll('jobs', 1);
SELECT regress.try_receipt(format($$SELECT inbox_complete('jobs', %L::uuid)$$, receipt))
FROM regress.receipts WHERE message_id = 'j-2';
-- A lease that ran out, with nobody taking the message since: its receipt
-- still holds it.  Once taken again, it does not.
TRUNCATE regress.receipts;
INSERT INTO regress.receipts SELECT message_id, receipt FROM inbox_poll('jobs', 1, lease => '1 minute');
UPDATE inbox.entries SET lease_until = now() - interval '1 second', due = now() - interval '1 second'
 WHERE scope = 'jobs' AND message_id = (SELECT message_id FROM regress.receipts);
SELECT inbox.forget_front('jobs');  -- moved by hand: the front must hear of it
SELECT inbox_extend('jobs', receipt, '1 minute') > now() AS extended FROM regress.receipts;
UPDATE inbox.entries SET lease_until = now() - interval '1 second', due = now() - interval '1 second'
 WHERE scope = 'jobs' AND message_id = (SELECT message_id FROM regress.receipts);
SELECT inbox.forget_front('jobs');  -- moved by hand: the front must hear of it
SELECT message_id FROM inbox_poll('jobs', 1);
SELECT regress.try_receipt(format($$SELECT inbox_complete('jobs', %L::uuid)$$, receipt)) FROM regress.receipts;
-- The taking session may still complete by message id, as with inbox_take.
UPDATE inbox.entries SET owner_session = inbox.session_key() WHERE scope = 'jobs' AND state = 'r';
SELECT inbox.forget_front('jobs');  -- moved by hand: the front must hear of it
SELECT inbox_complete('jobs', message_id) FROM inbox.entries WHERE scope = 'jobs' AND state = 'r';

-- A poll without a lease: its receipt holds while the taking session
-- lives, and then until another take (the message is recovered at once).
SELECT inbox_receive('solo', 's-1', '{}'::jsonb);
INSERT INTO regress.receipts SELECT message_id, receipt FROM inbox_poll('solo', 1, lease => NULL)
RETURNING message_id;
SELECT message_id FROM inbox_poll('solo', 1, lease => NULL);   -- held by this live session
UPDATE inbox.entries SET owner_session = 42 WHERE scope = 'solo';
SELECT inbox.forget_front('solo');  -- moved by hand: the front must hear of it
SELECT message_id, attempts, lease_until FROM inbox_poll('solo', 1, lease => NULL);
SELECT regress.try_receipt(format($$SELECT inbox_complete('solo', %L::uuid)$$, receipt))
FROM regress.receipts WHERE message_id = 's-1';
SELECT inbox_complete('solo', 's-1');

-- A message polled under a lease belongs to its receipt until the lease
-- runs out, even when the session that polled it has ended (a client that
-- polls on one connection and completes on another)...
SELECT inbox_receive('leased-gone', 'g-1', '{}'::jsonb);
TRUNCATE regress.receipts;
INSERT INTO regress.receipts SELECT message_id, receipt FROM inbox_poll('leased-gone', 1, lease => '2 hours')
RETURNING message_id;
UPDATE inbox.entries SET owner_session = 42 WHERE scope = 'leased-gone';
SELECT inbox.forget_front('leased-gone');  -- moved by hand: the front must hear of it
SELECT message_id FROM inbox_poll('leased-gone', 1);
SELECT regress.try_receipt(format($$SELECT inbox_complete('leased-gone', %L::uuid)$$, receipt)) FROM regress.receipts;
-- ... while one taken by inbox_take, bound to its session, comes back at
-- once when that session ends, lease or not.
SELECT inbox_receive('leased-gone', 'g-2', '{}'::jsonb);
SELECT message_id FROM inbox_take('leased-gone', 1, lease => '2 hours');
SELECT message_id FROM inbox_take('leased-gone', 1);   -- its owner (this session) lives
UPDATE inbox.entries SET owner_session = 42 WHERE scope = 'leased-gone' AND message_id = 'g-2';
SELECT inbox.forget_front('leased-gone');  -- moved by hand: the front must hear of it
SELECT message_id, attempts FROM inbox_take('leased-gone', 1);
SELECT inbox_complete('leased-gone', 'g-2');

-- Bad input.
SELECT regress.try($$SELECT * FROM inbox_poll('jobs', 0)$$);
SELECT regress.try($$SELECT * FROM inbox_poll('jobs', 10001)$$);
SELECT regress.try($$SELECT * FROM inbox_poll('jobs', NULL)$$);
SELECT regress.try($$SELECT * FROM inbox_poll('jobs', 1, '0 s')$$);
SELECT regress.try($$SELECT * FROM inbox_poll(NULL)$$);
SELECT regress.try($$SELECT * FROM inbox_poll('jobs', 1, wait => '-1 s')$$);
SELECT regress.try($$SELECT * FROM inbox_poll('jobs', 1, wait => '61 seconds')$$);
-- A wait under REPEATABLE READ could never see what arrives: refused.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT regress.try($$SELECT * FROM inbox_poll('jobs', 1, wait => '1 s')$$);
COMMIT;
-- A wait with nothing to take returns empty at its end.
SELECT count(*) AS taken FROM inbox_poll('empty', 1, wait => '50 ms');
-- ... or as soon as a message is due.
SELECT inbox_receive('soon', 's-1', '{}'::jsonb, NULL, not_before => clock_timestamp() + interval '200 ms');
SELECT message_id FROM inbox_poll('soon', 1, wait => '1 minute');

-- Delayed receive: not takeable before not_before, and it does not age.
SELECT inbox_receive('later', 'l-1', '{}'::jsonb, NULL, not_before => now() + interval '1 hour');
SELECT inbox_receive('later', 'l-2', '\x01'::bytea, NULL, not_before => now() - interval '1 hour');
SELECT inbox_receive('later', 'l-1', '{}'::jsonb, NULL, not_before => now());   -- duplicate
SELECT message_id FROM inbox_take('later', 10);
SELECT pending, processing, oldest_pending_age FROM inbox_stats WHERE scope = 'later';
UPDATE inbox.entries SET due = now() - interval '5 minutes' WHERE scope = 'later' AND message_id = 'l-1';
SELECT inbox.forget_front('later');  -- moved by hand: the front must hear of it
SELECT pending, oldest_pending_age >= interval '5 minutes' AS aged FROM inbox_stats WHERE scope = 'later';
SELECT message_id FROM inbox_take('later', 10);

-- Batch receive: one row per id, deduplicated within the batch and
-- against what is stored; one statement.
SELECT * FROM inbox_receive_many('batch', ARRAY['b-1', 'b-2', 'b-1', 'l-1'],
								 ARRAY['{"n": 1}', '{"n": 2}', '{"n": 1}', '{}']::jsonb[]);
SELECT * FROM inbox_receive_many('batch', ARRAY['b-2', 'b-3'], ARRAY['{"n": 2}', '{"n": 3}']::jsonb[]);
SELECT message_id, state, payload, payload_hash = sha256(convert_to(payload::text, 'UTF8')) AS digest
FROM inbox.entries WHERE scope = 'batch' ORDER BY 1;
-- Another payload under a stored id raises IB002 for the whole batch ...
SELECT regress.try($$SELECT * FROM inbox_receive_many('batch', ARRAY['b-4', 'b-1'], ARRAY['{}', '{"n": 9}']::jsonb[])$$);
SELECT count(*) AS b4 FROM inbox.entries WHERE scope = 'batch' AND message_id = 'b-4';
-- ... or is a row with on_mismatch => 'return'.
SELECT * FROM inbox_receive_many('batch', ARRAY['b-4', 'b-1'], ARRAY['{}', '{"n": 9}']::jsonb[],
								 on_mismatch => 'return');
-- Binary payloads, delayed.
SELECT * FROM inbox_receive_many('batch', ARRAY['x-1'], ARRAY['\x0102']::bytea[],
								 not_before => now() + interval '1 day');
SELECT message_id, payload_bytes, due > now() + interval '23 hours' AS delayed
FROM inbox.entries WHERE scope = 'batch' AND message_id = 'x-1';
-- Bad input writes nothing.
SELECT regress.try($$SELECT * FROM inbox_receive_many('batch', ARRAY['n-1'], NULL::jsonb[])$$);
SELECT regress.try($$SELECT * FROM inbox_receive_many('batch', ARRAY['n-1', 'n-2'], ARRAY['{}']::jsonb[])$$);
SELECT regress.try($$SELECT * FROM inbox_receive_many('batch', ARRAY['n-1', 'n-2'], ARRAY['{}', NULL]::jsonb[])$$);
SELECT regress.try($$SELECT * FROM inbox_receive_many('batch', ARRAY['n-1', NULL], ARRAY['{}', '{}']::jsonb[])$$);
SELECT regress.try($$SELECT * FROM inbox_receive_many('batch', '{}'::text[], '{}'::jsonb[])$$);
SELECT regress.try($$SELECT * FROM inbox_receive_many('batch', ARRAY['n-1'], ARRAY['{}']::jsonb[], ARRAY['\x01', '\x02']::bytea[])$$);
SELECT regress.try($$SELECT * FROM inbox_receive_many('batch', ARRAY['n-1'], ARRAY['{}']::jsonb[], on_mismatch => 'ignore')$$);
SELECT count(*) AS written FROM inbox.entries WHERE scope = 'batch' AND message_id LIKE 'n-%';
SELECT count(*) AS taken FROM inbox_take('batch', 100);

-- A take hands its messages out TAKE_CHUNK (64) to an UPDATE: 150 span
-- three, and each message keeps the receipt it was returned with, in the
-- order due, then id.
SELECT count(*) FROM inbox_receive_many('chunks', ARRAY(SELECT 'c-' || lpad(g::text, 3, '0') FROM generate_series(1, 150) g),
										ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 150) g));
TRUNCATE regress.receipts;
INSERT INTO regress.receipts SELECT message_id, receipt FROM inbox_poll('chunks', 150, lease => '1 minute');
SELECT count(*) AS taken, count(*) FILTER (WHERE e.receipt = r.receipt AND e.state = 'r' AND e.attempts = 1) AS held_by_their_receipts,
	   count(DISTINCT r.receipt) AS receipts
FROM regress.receipts r JOIN inbox.entries e ON e.scope = 'chunks' AND e.message_id = r.message_id;
SELECT count(*) AS under_lease_retaken FROM inbox_poll('chunks', 150);
UPDATE inbox.entries SET due = now() - interval '1 hour', lease_until = now() - interval '1 hour' WHERE scope = 'chunks';
SELECT inbox.forget_front('chunks');  -- moved by hand: the front must hear of it
SELECT array_agg(message_id) = array_agg(message_id ORDER BY message_id) AS in_order, count(*),
	   min(message_id), max(message_id), bool_and(attempts = 2) AS second_attempt
FROM (SELECT message_id, attempts FROM inbox_poll('chunks', 150)) t;

-- Takes start at the scope's front (src/front.c), not at the oldest entry
-- of the leaf's open-messages index: a take does not walk the entries of
-- the messages taken before it, which stay until VACUUM.  150 takes of one
-- in one transaction, counted by the entries that index returned.  The
-- 300 messages share their due (one receive), so the front is a due and a
-- message id.  Without the front, the i-th take walks the i - 1 before.
SELECT count(*) FROM inbox_receive_many('front', ARRAY(SELECT 'f-' || lpad(g::text, 3, '0') FROM generate_series(1, 300) g),
										ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 300) g));
CREATE FUNCTION regress.take_walk(n integer) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	idx regclass := format('inbox.entries_p%s_scope_due_message_id_idx',
						   inbox.bucket('front', 'f') / 2048)::regclass;
	before bigint := pg_stat_get_xact_tuples_returned(idx);
	taken text;
BEGIN
	FOR i IN 1 .. n LOOP
		SELECT message_id INTO taken FROM inbox_take('front', 1);
		IF taken IS DISTINCT FROM 'f-' || lpad(i::text, 3, '0') THEN
			RAISE EXCEPTION 'take % got %', i, taken;
		END IF;
	END LOOP;
	RETURN pg_stat_get_xact_tuples_returned(idx) - before;
END $$;
BEGIN;
SELECT regress.take_walk(150) < 3 * 150 AS walks_only_its_own;
ROLLBACK;
BEGIN;
SET LOCAL inbox.take_front = off;
SELECT regress.take_walk(150) > 150 * 149 / 2 AS walks_all_before;
ROLLBACK;

-- What the front cannot hear of, such as an UPDATE by hand, a full scan
-- finds: every scope's takes run one at least once a second.
SELECT count(inbox_receive('by-hand', 'h-' || g, '{}'::jsonb)) FROM generate_series(1, 3) g;
SELECT count(*) FROM inbox_take('by-hand', 10);  -- the front moves up to now
UPDATE inbox.entries SET state = 'p', owner_session = NULL, due = now() - interval '1 hour'
 WHERE scope = 'by-hand' AND message_id = 'h-2';
SELECT pg_sleep(1.1);
SELECT message_id, attempts FROM inbox_take('by-hand', 10);

-- A receipt passed as an untyped literal resolves to the message-id forms
-- of inbox_complete, inbox_fail and inbox_extend, which find no message of
-- that id and hint at the receipt form; an id not written as a UUID, or
-- inbox_requeue, which has no receipt form, keep the plain hint.
CREATE FUNCTION regress.try_hint(cmd text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	st text;
	msg text;
	hint text;
BEGIN
	EXECUTE cmd;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
	RETURN regexp_replace(st || ': ' || msg || ' [' || hint || ']',
						  '[0-9a-f]{8}-[0-9a-f-]{27}', '<receipt>', 'gi');
END $$;
SELECT inbox_receive('hints', 'h-1', '{}'::jsonb);
WITH p AS (SELECT * FROM inbox_poll('hints', 1, lease => '1 minute'))
INSERT INTO regress.receipts SELECT 'hints/' || message_id, receipt FROM p RETURNING message_id;
SELECT regress.try_hint(format($$SELECT inbox_complete('hints', %L)$$, receipt))
FROM regress.receipts WHERE message_id = 'hints/h-1';
SELECT regress.try_hint(format($$SELECT inbox_fail('hints', %L, 'flaky')$$, receipt))
FROM regress.receipts WHERE message_id = 'hints/h-1';
SELECT regress.try_hint(format($$SELECT inbox_extend('hints', %L, '1 minute')$$, receipt))
FROM regress.receipts WHERE message_id = 'hints/h-1';
SELECT regress.try_hint(format($$SELECT inbox_complete('hints', %L)$$, upper(receipt::text)))
FROM regress.receipts WHERE message_id = 'hints/h-1';
SELECT regress.try_hint($$SELECT inbox_complete('hints', 'h-2')$$);
SELECT regress.try_hint(format($$SELECT inbox_requeue('hints', %L)$$, receipt))
FROM regress.receipts WHERE message_id = 'hints/h-1';
-- Cast, as the hint says, it completes.
SELECT inbox_complete('hints', receipt::text::uuid) FROM regress.receipts WHERE message_id = 'hints/h-1';
SELECT state FROM inbox_status('hints', 'h-1');
DROP FUNCTION regress.try_hint(text);

-- A batch received with a later not_before is due then: nothing of it is
-- taken now
SELECT count(*) FROM inbox_receive_many('batch-later', ARRAY['d-1', 'd-2'], ARRAY['{}', '{}']::jsonb[],
										 not_before => now() + interval '1 hour');
SELECT count(*) FROM inbox_take('batch-later', 10);
SELECT message_id, due > now() + interval '59 minutes' AS later
  FROM inbox.entries WHERE scope = 'batch-later' ORDER BY 1;

DROP FUNCTION regress.take_walk(integer);
DROP TABLE regress.receipts;
DROP FUNCTION regress.try_receipt(text);
