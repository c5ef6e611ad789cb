--
-- deferred: receive now, process later (inbox_receive, inbox_take,
-- inbox_complete, inbox_fail, inbox_extend, inbox_requeue, dead letters,
-- stored results).  Another session's ownership is simulated by rewriting
-- owner_session as superuser; real concurrency is in the isolation specs.
--
SET timezone = 'UTC';
SET datestyle = 'ISO';

-- Receive: true when new, false for any existing key.
SELECT inbox_receive('orders', 'evt-1', '{"order": 1, "qty": 2}'::jsonb);
SELECT inbox_receive('orders', 'evt-1', '{"order": 1, "qty": 2}'::jsonb);
SELECT inbox_receive('orders', 'edi-1', '\x4953417e3030'::bytea);
SELECT state FROM inbox_status('orders', 'evt-1');
SELECT message_id, state, payload, payload_bytes FROM inbox.entries WHERE scope = 'orders' ORDER BY 1;
-- Without a hash, the stored one is sha256 of the payload (its text form
-- in UTF-8 for jsonb), the digest a consumer would compute for a claim.
SELECT payload_hash = sha256(convert_to('{"qty": 2, "order": 1}'::jsonb::text, 'UTF8')) AS json_digest
FROM inbox_status('orders', 'evt-1');
SELECT payload_hash = sha256('\x4953417e3030'::bytea) AS bytes_digest FROM inbox_status('orders', 'edi-1');
-- The same id with another payload: IB002, with or without explicit hashes.
SELECT regress.try($$SELECT inbox_receive('orders', 'evt-1', '{"order": 1, "qty": 3}'::jsonb)$$);
-- Receive and claim share one key space per scope, in both directions.
SELECT inbox_claim('orders', 'evt-1', sha256(convert_to('{"order": 1, "qty": 2}'::jsonb::text, 'UTF8')));
SELECT inbox_claim('orders', 'claimed-1');
SELECT inbox_receive('orders', 'claimed-1', '{}'::jsonb, NULL);
SET inbox.on_duplicate = raise;
SELECT regress.try($$SELECT inbox_receive('orders', 'evt-1', '{"order": 1, "qty": 2}'::jsonb)$$);
RESET inbox.on_duplicate;
-- Bad input.
SELECT regress.try($$SELECT inbox_receive('orders', 'evt-9', NULL::jsonb)$$);
SELECT regress.try($$SELECT inbox_receive(NULL, 'evt-9', '{}'::jsonb)$$);
SELECT regress.try($$SELECT inbox_receive('orders', '', '{}'::jsonb)$$);
SELECT regress.try($$SELECT inbox_receive('orders', 'evt-9', '{}')$$);

-- Take: oldest first, at most max_messages, durable and owned.
SELECT inbox_receive('orders', 'evt-2', '{"order": 2}'::jsonb);
UPDATE inbox.entries SET received_at = received_at - interval '1 hour', due = due - interval '1 hour'
 WHERE message_id = 'evt-2';
SELECT inbox.forget_front('orders');  -- moved by hand: the front must hear of it
SELECT message_id, payload, payload_bytes, attempts FROM inbox_take('orders', 2);
SELECT message_id, state FROM inbox.entries WHERE scope = 'orders' ORDER BY 1;
SELECT count(*) AS owned_by_me FROM inbox.entries
 WHERE scope = 'orders' AND state = 'r' AND owner_session = inbox.session_key();
-- What this session holds is not taken again.
SELECT message_id FROM inbox_take('orders', 10);
SELECT regress.try($$SELECT * FROM inbox_take('orders', 0)$$);
SELECT regress.try($$SELECT * FROM inbox_take('orders', NULL)$$);
SELECT regress.try($$SELECT * FROM inbox_take('orders', 1, '-1 second')$$);
SELECT regress.try($$SELECT * FROM inbox_take(NULL)$$);

-- Complete: only by the owner, only once; the result is kept.
SELECT inbox_complete('orders', 'evt-2', '{"invoice": "INV-2"}');
SELECT state, inbox_result('orders', 'evt-2') FROM inbox_status('orders', 'evt-2');
SELECT regress.try($$SELECT inbox_complete('orders', 'evt-2')$$);
SELECT regress.try($$SELECT inbox_complete('orders', 'nope')$$);
-- A redelivery of a completed message is a duplicate, and can answer with
-- the stored result.
SELECT inbox_receive('orders', 'evt-2', '{"order": 2}'::jsonb) AS new, inbox_result('orders', 'evt-2');
-- Owned by another session: refused, so the effect in this transaction
-- rolls back.
UPDATE inbox.entries SET owner_session = 42 WHERE message_id = 'evt-1';
SELECT inbox.forget_front('orders');  -- moved by hand: the front must hear of it
SELECT regress.try($$SELECT inbox_complete('orders', 'evt-1')$$);
SELECT regress.try($$SELECT inbox_fail('orders', 'evt-1', 'x')$$);
SELECT regress.try($$SELECT inbox_extend('orders', 'evt-1', '1 minute')$$);
-- ... and since no session 42 is alive, the message is recovered at once.
SELECT message_id, attempts FROM inbox_take('orders');

-- Fail: back to pending after retry_after, then dead after max_attempts.
SELECT inbox_fail('orders', 'evt-1', 'warehouse API: 503', '1 hour');
SELECT message_id FROM inbox_take('orders');     -- not visible for an hour
UPDATE inbox.entries SET due = now() WHERE message_id = 'evt-1';
SELECT inbox.forget_front('orders');  -- moved by hand: the front must hear of it
SELECT message_id, attempts FROM inbox_take('orders');
SELECT inbox_set_max_attempts('orders', 3);
SELECT inbox_fail('orders', 'evt-1', 'warehouse API: 503');
SELECT scope, message_id, attempts, last_error, payload FROM inbox_dead_letters;
SELECT message_id FROM inbox_take('orders');     -- dead is never taken
SELECT regress.try($$SELECT inbox_fail('orders', 'evt-1', 'again')$$);
SELECT regress.try($$SELECT inbox_fail('orders', 'edi-1', 'x', '-1 second')$$);
-- A message whose owner vanished after its last attempt dies too.
SELECT inbox_receive('orders', 'poison', '{}'::jsonb);
UPDATE inbox.entries SET state = 'r', attempts = 3, owner_session = 42 WHERE message_id = 'poison';
SELECT inbox.forget_front('orders');  -- moved by hand: the front must hear of it
SELECT message_id FROM inbox_take('orders');
SELECT message_id, last_error FROM inbox_dead_letters WHERE message_id = 'poison';
-- Requeue puts a dead message back, attempts reset.
SELECT inbox_requeue('orders', 'evt-1');
SELECT state, attempts FROM inbox.entries WHERE message_id = 'evt-1';
SELECT regress.try($$SELECT inbox_requeue('orders', 'evt-1')$$);
SELECT regress.try($$SELECT inbox_set_max_attempts('orders', 0)$$);
SELECT inbox_set_max_attempts('orders', NULL);

-- Leases: a message taken with a lease stays with its (live) owner while
-- the lease runs, and is recoverable once it has run out, unless extended.
-- (This session plays the live owner; a dead owner loses it at once.)
SELECT message_id FROM inbox_take('orders', 1, '1 hour');
SELECT inbox_extend('orders', 'evt-1', '2 hours') > now() + interval '1 hour' AS extended;
SELECT message_id FROM inbox_take('orders', 1);  -- lease running: kept
UPDATE inbox.entries SET lease_until = now() - interval '1 second', due = now() - interval '1 second'
 WHERE message_id = 'evt-1';
SELECT inbox.forget_front('orders');  -- moved by hand: the front must hear of it
SELECT message_id, attempts FROM inbox_take('orders', 1);  -- lease over: taken again
SELECT inbox_complete('orders', 'evt-1');
SELECT inbox_complete('orders', 'edi-1');

-- Retention never purges a pending, processing or dead message.
SELECT inbox_receive('keep', 'k-' || g, '{}'::jsonb) FROM generate_series(1, 3) g;
UPDATE inbox.entries SET state = 'r', owner_session = inbox.session_key(), attempts = 1
 WHERE scope = 'keep' AND message_id = 'k-2';
SELECT inbox.forget_front('keep');  -- moved by hand: the front must hear of it
UPDATE inbox.entries SET state = 'x', attempts = 5 WHERE scope = 'keep' AND message_id = 'k-3';
SELECT inbox.forget_front('keep');  -- moved by hand: the front must hear of it
SET inbox.idle_threshold = '365d';
UPDATE inbox.entries SET received_at = now() - interval '30 days' WHERE scope = 'keep';
SELECT inbox_purge() >= 0 AS purged;
SELECT message_id, state FROM inbox.entries WHERE scope = 'keep' ORDER BY 1;
RESET inbox.idle_threshold;

-- The backlog in inbox_stats.
SELECT scope, pending, processing, dead, oldest_pending_age IS NOT NULL AS has_pending, failures
FROM inbox_stats WHERE scope IN ('orders', 'keep') ORDER BY 1;

-- A completion by message id is written by src/direct.c, or through SPI
-- with inbox.direct_insert = off: the same done entry either way, in the
-- transaction of its take or after it, and every index of the leaves holds
-- what it should (amcheck, heapallindexed), including a partial index of
-- done entries added for the test.
CREATE EXTENSION amcheck;
CREATE INDEX entries_test_done ON inbox.entries (message_id) WHERE state = 'd';
SELECT count(inbox_receive('both-ways', 'w-' || g, jsonb_build_object('n', g))) FROM generate_series(1, 4) g;
BEGIN;
SELECT message_id FROM inbox_take('both-ways');
SELECT inbox_complete('both-ways', 'w-1', '{"by": "direct"}');
COMMIT;
SET inbox.direct_insert = off;
BEGIN;
SELECT message_id FROM inbox_take('both-ways');
SELECT inbox_complete('both-ways', 'w-2', '{"by": "spi"}');
COMMIT;
RESET inbox.direct_insert;
SELECT message_id FROM inbox_take('both-ways', 2);
SELECT inbox_complete('both-ways', 'w-3');
SET inbox.direct_insert = off;
SELECT inbox_complete('both-ways', 'w-4', '{"by": "spi"}');
RESET inbox.direct_insert;
SELECT regress.try($$SELECT inbox_complete('both-ways', 'w-3')$$);
SELECT message_id, state, attempts, result, owner_session, lease_until, due, receipt,
	   finished_at IS NOT NULL AS finished, last_error
FROM inbox.entries WHERE scope = 'both-ways' ORDER BY 1;
SELECT count(*) AS done_in_test_index FROM inbox.entries
WHERE state = 'd' AND scope = 'both-ways' AND message_id > 'w';
SELECT count(*) AS indexes_checked
FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
WHERE c.relnamespace = 'inbox'::regnamespace AND c.relname LIKE 'entries_p_'
  AND bt_index_check(i.indexrelid, true) IS NOT NULL;
DROP INDEX inbox.entries_test_done;
DROP EXTENSION amcheck;
