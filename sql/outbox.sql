--
-- outbox: sends in the caller's transaction, per-key positions, caller's
-- ids, routes, the relay's fetch, ack and fail, dead letters, requeue,
-- the views, the purge, and bad input.  Concurrency (commit order, two
-- relays) is in the isolation specs outbox_order and outbox_relays.
--
SET timezone = 'UTC';
SET datestyle = 'ISO';
-- Errors and results name random ids and receipts
CREATE FUNCTION regress.try_id(cmd text) RETURNS text LANGUAGE sql AS $$
	SELECT regexp_replace(regress.try(cmd), '[0-9a-f]{8}-[0-9a-f-]{27}', '<uuid>', 'g')
$$;
-- A key's first position is the clock's reading in microseconds: a
-- position, counted from the first that the key's messages hold (1)
CREATE FUNCTION regress.pos(t text, k text, p bigint) RETURNS bigint LANGUAGE sql AS $$
	SELECT p - (SELECT min(m.position) FROM inbox.outbox_messages AS m WHERE m.topic = t AND m.key = k) + 1
$$;
-- What outbox_fetch hands out, in a form that does not change between runs
CREATE TABLE regress.fetched (id uuid, key text, pos bigint, receipt uuid);
CREATE FUNCTION regress.fetch(target text, n integer) RETURNS SETOF text LANGUAGE sql AS $$
	WITH f AS (SELECT * FROM outbox_fetch(target, n, '1 minute')),
	kept AS (DELETE FROM regress.fetched RETURNING 1),
	ins AS (INSERT INTO regress.fetched SELECT f.id, f.key, f.position, f.receipt FROM f)
	SELECT f.topic || '/' || f.key || '#' || regress.pos(f.topic, f.key, f.position) || ' ' || coalesce(f.payload::text, encode(f.payload_bytes, 'hex'))
		   || ' attempt ' || f.attempts
	  FROM f ORDER BY f.key, f.position
$$;
-- outbox_stats's sent, counted by the acknowledgements in inbox.outbox_sent,
-- against what it stands for while nothing is purged: per route, the
-- messages of its topic with no delivery row left for its target (each
-- route here is made before its topic's first send).  The pairs where the
-- two disagree.
CREATE FUNCTION regress.sent_disagrees() RETURNS SETOF text LANGUAGE sql AS $$
	SELECT r.topic || ' ' || r.target || ': ' || coalesce(s.sent, 0) || ' counted, '
		   || d.n || ' delivered'
	  FROM outbox_routes AS r
	  LEFT JOIN outbox_stats AS s ON s.topic = r.topic AND s.target = r.target
	 CROSS JOIN LATERAL (SELECT count(*) AS n FROM inbox.outbox_messages AS m
						  WHERE m.topic = r.topic
							AND NOT EXISTS (SELECT FROM inbox.outbox_deliveries AS x
											 WHERE x.id = m.id AND x.target = r.target)) AS d
	 WHERE coalesce(s.sent, 0) <> d.n
$$;

-- Routes: a topic goes to targets; a password in a target is refused
SELECT outbox_route('orders', 'amqp://rabbit.example/vhost?exchange=orders');
SELECT outbox_route('orders', 'https://hooks.example/orders', '{"max_attempts": 2, "backoff": "1 hour"}');
SELECT regress.try($$SELECT outbox_route('orders', 'amqp://app:s3cret@rabbit.example/vhost')$$);
SELECT regress.try($$SELECT outbox_route('orders', 'postgresql://db.example/app?scope=s&password=x')$$);
SELECT regress.try($$SELECT outbox_route('orders', 'amqp://app@rabbit.example/vhost', '{"password": "x"}')$$);
SELECT regress.try($$SELECT outbox_route('orders', 'rabbit.example')$$);
SELECT regress.try($$SELECT outbox_route('orders', 'https://h.example', '{"max_attempts": 0}')$$);
SELECT regress.try($$SELECT outbox_route('orders', 'https://h.example', '{"backoff": "1 mon"}')$$);
SELECT regress.try($$SELECT outbox_route('orders', 'https://h.example', '[1]')$$);
SELECT regress.try($$SELECT outbox_route(NULL, 'https://h.example')$$);
SELECT regress.try($$SELECT outbox_route('orders', NULL)$$);
-- A user name alone is not a secret
SELECT outbox_route('audit', 'amqp://app@rabbit.example/vhost');
SELECT topic, target, options FROM outbox_routes ORDER BY 1, 2;
SELECT regress.try($$SELECT outbox_unroute('orders', 'https://nowhere.example')$$);
SELECT outbox_unroute('audit', 'amqp://app@rabbit.example/vhost');

-- Sends: ids are version 7 UUIDs, increasing within a session; positions
-- per key count 1, 2, 3 in call order, from the clock's reading at the
-- key's first send
SELECT inbox.outbox_position_at(clock_timestamp()) AS t0 \gset
BEGIN;
SELECT outbox_send('orders', 'o-1', '{"n": 1}'::jsonb) AS a \gset
SELECT outbox_send('orders', 'o-1', '{"n": 2}'::jsonb, '{"type": "updated"}') AS b \gset
SELECT outbox_send('orders', 'o-2', '\xdeadbeef'::bytea) AS c \gset
COMMIT;
SELECT substr(:'a', 15, 1) AS version, substr(:'a', 20, 1) IN ('8', '9', 'a', 'b') AS variant,
	   :'a'::uuid < :'b'::uuid AND :'b'::uuid < :'c'::uuid AS increasing;
SELECT key, regress.pos(topic, key, position) AS position, payload, payload_bytes, headers
  FROM inbox.outbox_messages ORDER BY key, position;
SELECT position BETWEEN :t0 AND inbox.outbox_position_at(clock_timestamp()) AS from_clock
  FROM inbox.outbox_messages WHERE id = :'a';
SELECT target, key, regress.pos(topic, key, position) AS position, state, attempts
  FROM inbox.outbox_deliveries ORDER BY target, key, position;

-- A rollback, and a savepoint's rollback, leave nothing and no gap
BEGIN;
SELECT outbox_send('orders', 'o-1', '{"n": "lost"}'::jsonb) IS NOT NULL AS sent;
ROLLBACK;
BEGIN;
SAVEPOINT s;
SELECT outbox_send('orders', 'o-1', '{"n": "lost too"}'::jsonb) IS NOT NULL AS sent;
ROLLBACK TO SAVEPOINT s;
SELECT outbox_send('orders', 'o-1', '{"n": 3}'::jsonb) IS NOT NULL AS sent;
COMMIT;
SELECT key, regress.pos(topic, key, position) AS position, payload
  FROM inbox.outbox_messages WHERE key = 'o-1' ORDER BY position;

-- A caller's id: the same send again returns it and writes nothing; other
-- content is IB002
SELECT outbox_send('orders', 'o-3', '{"n": 1}'::jsonb, NULL, '00000000-0000-7000-8000-000000000001') AS id;
SELECT outbox_send('orders', 'o-3', '{"n": 1}'::jsonb, NULL, '00000000-0000-7000-8000-000000000001') AS again;
SELECT regress.try($$SELECT outbox_send('orders', 'o-3', '{"n": 2}'::jsonb, NULL, '00000000-0000-7000-8000-000000000001')$$);
SELECT regress.try($$SELECT outbox_send('orders', 'o-4', '{"n": 1}'::jsonb, NULL, '00000000-0000-7000-8000-000000000001')$$);
SELECT count(*), max(regress.pos(topic, key, position)) FROM inbox.outbox_messages WHERE key = 'o-3';

-- A batch: ids in the order of the arrays, positions in array order per key
SELECT cardinality(outbox_send_many('orders', ARRAY['o-5', 'o-6', 'o-5'],
									ARRAY['{"i": 1}', '{"i": 2}', '{"i": 3}']::jsonb[])) AS sent;
SELECT key, regress.pos(topic, key, position) AS position, payload
  FROM inbox.outbox_messages WHERE key IN ('o-5', 'o-6') ORDER BY key, position;
SELECT outbox_send_many('orders', '{}', '{}') AS nothing;

-- Bad input: clear SQLSTATEs, nothing written
SELECT count(*) AS before FROM inbox.outbox_messages \gset
SELECT regress.try($$SELECT outbox_send(NULL, 'k', '{}'::jsonb)$$);
SELECT regress.try($$SELECT outbox_send('orders', NULL, '{}'::jsonb)$$);
SELECT regress.try($$SELECT outbox_send('orders', 'k', NULL::jsonb)$$);
SELECT regress.try($$SELECT outbox_send('', 'k', '{}'::jsonb)$$);
SELECT regress.try($$SELECT outbox_send(repeat('t', 257), 'k', '{}'::jsonb)$$);
SELECT regress.try($$SELECT outbox_send('orders', repeat('k', 1025), '{}'::jsonb)$$);
SELECT regress.try($$SELECT outbox_send('orders', 'k', convert_to(repeat('x', 16 * 1024 * 1024 + 1), 'UTF8'))$$);
SELECT regress.try($$SELECT outbox_send_many('orders', ARRAY['a', 'b'], ARRAY['{}']::jsonb[])$$);
SELECT regress.try($$SELECT outbox_send_many('orders', ARRAY['a', NULL], ARRAY['{}', '{}']::jsonb[])$$);
SELECT regress.try($$SELECT outbox_send_many('orders', ARRAY['a', 'b'], ARRAY['{}', NULL]::jsonb[])$$);
SELECT regress.try($$SELECT outbox_send_many('orders', NULL, NULL)$$);
SELECT regress.try($$SELECT outbox_send_many('orders', array_fill('k'::text, ARRAY[10001]), array_fill('{}'::jsonb, ARRAY[10001]))$$);
SELECT count(*) - :before AS written FROM inbox.outbox_messages;
SELECT topic_bytes, key_bytes, target_bytes, payload_bytes, batch FROM inbox.outbox_limits();

-- The relay: one message per key, its lowest position; the other target
-- has its own state
SELECT * FROM regress.fetch('amqp://rabbit.example/vhost?exchange=orders', 100);
-- Leased: a second fetch gets nothing
SELECT count(*) FROM outbox_fetch('amqp://rabbit.example/vhost?exchange=orders', 100, '1 minute');
-- Acknowledge o-1's head: its next position is fetchable; the others stay leased
SELECT outbox_ack(receipt) FROM regress.fetched WHERE key = 'o-1';
SELECT outbox_ack(receipt) AS twice FROM regress.fetched WHERE key = 'o-1';
SELECT * FROM regress.fetch('amqp://rabbit.example/vhost?exchange=orders', 100);
SELECT outbox_ack(receipt) FROM regress.fetched;
-- A failure retries after the delay given; the key waits, others go on
SELECT * FROM regress.fetch('amqp://rabbit.example/vhost?exchange=orders', 2);
SELECT outbox_fail(receipt, 'broker said no', '1 hour') FROM regress.fetched WHERE key = 'o-1';
SELECT outbox_ack(receipt) FROM regress.fetched WHERE key <> 'o-1';
SELECT * FROM regress.fetch('amqp://rabbit.example/vhost?exchange=orders', 100);
SELECT outbox_ack(receipt) FROM regress.fetched;
SELECT * FROM regress.fetch('amqp://rabbit.example/vhost?exchange=orders', 100);
-- Due again: retried, as the key's head still
UPDATE inbox.outbox_deliveries SET due = now() WHERE state = 'p' AND last_error IS NOT NULL;
SELECT * FROM regress.fetch('amqp://rabbit.example/vhost?exchange=orders', 100);
SELECT outbox_ack(receipt) FROM regress.fetched;

-- max_attempts 2 on the webhook.  Without retry_after, the route's
-- backoff (1 hour, with jitter) applies; a message whose attempts are used
-- is dead, and its key moves on.
SELECT * FROM regress.fetch('https://hooks.example/orders', 100);
SELECT outbox_fail(receipt, 'HTTP 500') FROM regress.fetched WHERE key = 'o-1';
SELECT due > now() + interval '29 minutes' AND due < now() + interval '61 minutes' AS backoff
  FROM inbox.outbox_deliveries WHERE last_error = 'HTTP 500';
SELECT outbox_fail(receipt, 'HTTP 410', '0 s') FROM regress.fetched WHERE key = 'o-5';
SELECT bool_and(outbox_ack(receipt)) FROM regress.fetched WHERE key NOT IN ('o-1', 'o-5');
SELECT * FROM regress.fetch('https://hooks.example/orders', 100);
SELECT outbox_fail(receipt, 'HTTP 410') FROM regress.fetched;
SELECT outbox_fail(receipt, 'again') AS gone FROM regress.fetched;
SELECT key, regress.pos(topic, key, position) AS position, target, attempts, last_error FROM outbox_dead_letters;
SELECT * FROM regress.fetch('https://hooks.example/orders', 100);
SELECT topic, target, pending, oldest_pending_age IS NOT NULL AS aged, sent, failed, dead
  FROM outbox_stats ORDER BY 1, 2;
-- Requeue: the dead message comes back, at the end of its key
SELECT outbox_requeue(id) FROM outbox_dead_letters;
SELECT regress.try_id($$SELECT outbox_requeue('00000000-0000-7000-8000-000000000009')$$);
SELECT count(*) AS dead FROM outbox_dead_letters;
SELECT outbox_ack(receipt) FROM regress.fetched;
SELECT * FROM regress.fetch('https://hooks.example/orders', 100);
SELECT outbox_ack(receipt) FROM regress.fetched;
SELECT * FROM regress.sent_disagrees();

-- A requeued message goes to the end of its key, at a new position: it
-- waits for the key's message in flight, and comes after it
SELECT outbox_route('requeue', 'https://hooks.example/requeue', '{"max_attempts": 1}');
SELECT count(outbox_send('requeue', 'r', jsonb_build_object('n', n))) FROM generate_series(1, 3) AS n;
SELECT * FROM regress.fetch('https://hooks.example/requeue', 100);
SELECT outbox_fail(receipt, 'HTTP 410') FROM regress.fetched;
SELECT * FROM regress.fetch('https://hooks.example/requeue', 100);
CREATE TABLE regress.in_flight AS SELECT * FROM regress.fetched;
SELECT outbox_requeue(id) FROM outbox_dead_letters WHERE topic = 'requeue';
SELECT * FROM regress.fetch('https://hooks.example/requeue', 100);
SELECT outbox_ack(receipt) FROM regress.in_flight;
SELECT * FROM regress.fetch('https://hooks.example/requeue', 100);
SELECT outbox_ack(receipt) FROM regress.fetched;
SELECT * FROM regress.fetch('https://hooks.example/requeue', 100);
SELECT outbox_ack(receipt) FROM regress.fetched;
SELECT regress.pos(topic, key, last) AS last FROM inbox.outbox_keys WHERE topic = 'requeue';
-- The message keeps its send's position; the next send takes the one after
SELECT regress.pos(topic, key, position) AS position
  FROM inbox.outbox_messages WHERE topic = 'requeue' AND payload = '{"n": 1}';
SELECT count(outbox_send('requeue', 'r', '{"n": 4}'::jsonb)) FROM (VALUES (1)) AS v;
SELECT * FROM regress.fetch('https://hooks.example/requeue', 100);
SELECT outbox_ack(receipt) FROM regress.fetched;
SELECT outbox_unroute('requeue', 'https://hooks.example/requeue');

-- A target that could not be reached (reached => false): the fetch does
-- not count, so no outage, however long, makes a message dead; a failure
-- at the target counts as before
SELECT outbox_route('outage', 'https://outage.example/hook', '{"max_attempts": 1, "backoff": "1 hour"}');
SELECT count(outbox_send('outage', 'u', '{"n": 1}'::jsonb)) FROM (VALUES (1)) AS v;
SELECT * FROM regress.fetch('https://outage.example/hook', 10);
SELECT outbox_fail(receipt, 'connection refused', '0 s', false) FROM regress.fetched;
SELECT * FROM regress.fetch('https://outage.example/hook', 10);
SELECT outbox_fail(receipt, 'connection refused', '0 s', false) FROM regress.fetched;
SELECT * FROM regress.fetch('https://outage.example/hook', 10);
-- Without retry_after: the route's backoff, as after a first attempt
SELECT outbox_fail(receipt, 'connection refused', NULL, false) FROM regress.fetched;
SELECT state, attempts, last_error,
	   due > now() + interval '29 minutes' AND due < now() + interval '61 minutes' AS backoff
  FROM inbox.outbox_deliveries WHERE target = 'https://outage.example/hook';
SELECT topic, pending, failed, dead FROM outbox_stats WHERE topic = 'outage';
UPDATE inbox.outbox_deliveries SET due = now() WHERE target = 'https://outage.example/hook';
SELECT * FROM regress.fetch('https://outage.example/hook', 10);
SELECT outbox_fail(receipt, 'HTTP 500', '0 s') FROM regress.fetched;
SELECT key, attempts, last_error FROM outbox_dead_letters WHERE topic = 'outage';
SELECT regress.try($$SELECT outbox_fail('00000000-0000-4000-8000-000000000000', 'x', NULL, NULL)$$);
SELECT outbox_unroute('outage', 'https://outage.example/hook');

-- Relay input checks
SELECT regress.try($$SELECT * FROM outbox_fetch('https://nowhere.example', 1, '1 minute')$$);
SELECT regress.try($$SELECT * FROM outbox_fetch(NULL, 1, '1 minute')$$);
SELECT regress.try($$SELECT * FROM outbox_fetch('https://hooks.example/orders', 0, '1 minute')$$);
SELECT regress.try($$SELECT * FROM outbox_fetch('https://hooks.example/orders', 1, '0 s')$$);
SELECT regress.try($$SELECT * FROM outbox_fetch('https://hooks.example/orders', 1, '1 mon')$$);
SELECT regress.try($$SELECT * FROM outbox_fetch('https://hooks.example/orders', 1, '1 s', '61 s')$$);
SELECT regress.try($$SELECT outbox_ack(NULL)$$);
SELECT outbox_ack('00000000-0000-4000-8000-000000000000') AS unknown_receipt;
SELECT regress.try($$SELECT outbox_ack_many(NULL)$$);
SELECT outbox_ack_many('{}') AS none, outbox_ack_many('{00000000-0000-4000-8000-000000000000}') AS unknown;

-- A fetch walks the keys on from where this session's last fetch for the
-- target stopped, and wraps around: every key gets its turn, and a fetch
-- reads about as many keys as it leases.  outbox_ack_many acknowledges a
-- batch, counting what its receipts still held.
SELECT outbox_route('turns', 'https://turns.example/hook');
SELECT count(*) FROM outbox_send_many('turns', ARRAY['t-a', 't-b', 't-c', 't-d', 't-a', 't-b', 't-c', 't-d'],
	array_fill('{}'::jsonb, ARRAY[8]));
SELECT * FROM regress.fetch('https://turns.example/hook', 2);
SELECT outbox_ack_many(array_agg(receipt)) FROM regress.fetched;
SELECT outbox_ack_many(array_agg(receipt)) AS again FROM regress.fetched;
-- t-a and t-b have their next heads, but t-c and t-d come first
SELECT * FROM regress.fetch('https://turns.example/hook', 2);
SELECT outbox_ack_many(array_agg(receipt)) FROM regress.fetched;
SELECT * FROM regress.fetch('https://turns.example/hook', 3);
SELECT outbox_ack_many(array_agg(receipt)) FROM regress.fetched;
SELECT * FROM regress.fetch('https://turns.example/hook', 3);
SELECT outbox_ack_many(array_agg(receipt)) FROM regress.fetched;
SELECT count(*) AS left FROM outbox_fetch('https://turns.example/hook', 10, '1 minute');
SELECT * FROM regress.sent_disagrees();
SELECT outbox_unroute('turns', 'https://turns.example/hook');
SELECT outbox_fail('00000000-0000-4000-8000-000000000000', 'x') AS unknown_receipt;
SELECT regress.try($$SELECT outbox_fail('00000000-0000-4000-8000-000000000000', 'x', '-1 s')$$);
-- A wait that finds nothing ends at its deadline
SELECT count(*) FROM outbox_fetch('amqp://rabbit.example/vhost?exchange=orders', 1, '1 minute', '200 ms');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT regress.try($$SELECT * FROM outbox_fetch('amqp://rabbit.example/vhost?exchange=orders', 1, '1 minute', '1 s')$$);
ROLLBACK;

-- Unrouting drops what was not delivered to that target (o-1, retrying)
SELECT outbox_unroute('orders', 'https://hooks.example/orders');
SELECT target, state, count(*) FROM inbox.outbox_deliveries GROUP BY 1, 2 ORDER BY 1, 2;

-- The purge: sent messages past the retention go, a batch at a time;
-- pending ones stay.  Within the retention, nothing goes.  The retention
-- at 1 second, and time let pass, for messages and keys' positions alike.
SELECT outbox_send('orders', 'o-9', '{"n": "pending"}'::jsonb) IS NOT NULL AS sent;
SELECT inbox_purge() AS purged;
CREATE TABLE regress.o1_before AS SELECT max(position) AS last FROM inbox.outbox_messages WHERE key = 'o-1';
SET inbox.outbox_retention = '1 s';
SELECT pg_sleep(1.1);
SET inbox.purge_batch_size = 2;
SELECT inbox_purge() AS purged;
RESET inbox.purge_batch_size;
SELECT inbox_purge() AS purged;
SELECT inbox_purge() AS purged;
SELECT key, regress.pos(topic, key, position) AS position FROM inbox.outbox_messages ORDER BY key, position;
-- sent counts the deliveries, purged or not
SELECT topic, target, pending, sent FROM outbox_stats ORDER BY 1, 2;
SELECT count(*) AS orphans FROM inbox.outbox_deliveries d
 WHERE NOT EXISTS (SELECT FROM inbox.outbox_messages m WHERE m.id = d.id);
-- Delivered now: they go too, once past inbox.outbox_retention.  The
-- leases' receipts, made again from their rows: the seed each keeps and
-- its address.
SELECT count(outbox_ack(inbox.outbox_receipt(receipt, ctid))) AS acked
  FROM inbox.outbox_deliveries WHERE receipt IS NOT NULL;
SELECT count(outbox_ack(receipt)) AS acked
  FROM outbox_fetch('amqp://rabbit.example/vhost?exchange=orders', 100, '1 minute');
SET inbox.outbox_retention = '1 h';
SELECT inbox_purge() AS purged;
SET inbox.outbox_retention = '1 s';
SELECT inbox_purge() AS purged;
RESET inbox.outbox_retention;
SELECT key, regress.pos(topic, key, position) AS position FROM inbox.outbox_messages ORDER BY key, position;
SELECT topic, target, pending, sent, dead FROM outbox_stats ORDER BY 1, 2;
-- The view reads deliveries only through the partial indexes of the
-- pending and the dead, whatever the statistics say (here: every row
-- pending)
BEGIN;
SELECT count(*) AS sent FROM outbox_send_many('orders', ARRAY(SELECT 's-' || i FROM generate_series(1, 300) AS i),
											   ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 300)));
ANALYZE inbox.outbox_deliveries;
CREATE TEMP TABLE scans AS
SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relid = 'inbox.outbox_deliveries'::regclass;
SELECT count(*) > 0 AS rows FROM outbox_stats;
SELECT x.seq_scan - s.seq_scan AS sequential_scans
  FROM pg_stat_xact_user_tables AS x, scans AS s
 WHERE x.relid = 'inbox.outbox_deliveries'::regclass;
ROLLBACK;
-- The relay's path keeps its plans: under force_generic_plan, with
-- statistics that know 20,000 pending messages on 1,000 keys, fetches and
-- their acknowledgements read the messages and deliveries by index only
BEGIN;
SELECT outbox_route('bulk', 'https://bulk.example/hook');
SELECT count(*) AS sent FROM generate_series(1, 20) AS b,
	   LATERAL outbox_send_many('bulk', ARRAY(SELECT 'b-' || k FROM generate_series(1, 1000) AS k),
								ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 1000)));
ANALYZE inbox.outbox_messages, inbox.outbox_deliveries;
SET LOCAL plan_cache_mode = force_generic_plan;
CREATE TEMP TABLE relay_scans AS
SELECT relid, seq_scan FROM pg_stat_xact_user_tables
 WHERE relid IN ('inbox.outbox_messages'::regclass, 'inbox.outbox_deliveries'::regclass);
CREATE FUNCTION pg_temp.relay_rounds(target text, rounds integer) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	delivered bigint := 0;
BEGIN
	FOR i IN 1 .. rounds LOOP
		delivered := delivered + outbox_ack_many(ARRAY(SELECT f.receipt FROM outbox_fetch(target, 100, '1 minute') AS f));
	END LOOP;
	RETURN delivered;
END
$$;
SELECT pg_temp.relay_rounds('https://bulk.example/hook', 8) AS delivered;
SELECT x.relid::regclass AS "table", x.seq_scan - s.seq_scan AS sequential_scans
  FROM pg_stat_xact_user_tables AS x JOIN relay_scans AS s USING (relid)
 ORDER BY 1;
ROLLBACK;
-- A lease writes no index entry: its receipt carries the address of the
-- row version the lease wrote, so the lease is a HOT update, and the
-- acknowledgement deletes the row at that address
SELECT outbox_route('moved', 'https://moved.example/hook');
SELECT cardinality(outbox_send_many('moved', ARRAY['v-1', 'v-2', 'v-3'],
									 array_fill('{}'::jsonb, ARRAY[3]))) AS sent;
BEGIN;
CREATE TEMP TABLE updates AS
SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables
 WHERE relid = 'inbox.outbox_deliveries'::regclass;
SELECT * FROM regress.fetch('https://moved.example/hook', 10);
SELECT x.n_tup_upd - u.n_tup_upd AS leased, x.n_tup_hot_upd - u.n_tup_hot_upd AS hot
  FROM pg_stat_xact_user_tables AS x, updates AS u
 WHERE x.relid = 'inbox.outbox_deliveries'::regclass;
COMMIT;
-- A receipt holds its own row only: v-1's seed at v-2's address holds
-- nothing, for an acknowledgement as for a failure
SELECT outbox_ack(inbox.outbox_receipt(inbox.outbox_receipt_seed(a.receipt),
									   inbox.outbox_receipt_tid(b.receipt))) AS forged,
	   outbox_fail(inbox.outbox_receipt(inbox.outbox_receipt_seed(a.receipt),
										inbox.outbox_receipt_tid(b.receipt)), 'x') AS forged_fail
  FROM regress.fetched AS a, regress.fetched AS b WHERE a.key = 'v-1' AND b.key = 'v-2';
SELECT count(*) AS pending FROM inbox.outbox_deliveries
 WHERE target = 'https://moved.example/hook' AND state = 'p' AND last_error IS NULL;
-- VACUUM FULL moves rows: each receipt then acknowledges its own message
-- or nothing, and the messages it no longer holds are fetched again once
-- their leases run out
VACUUM FULL inbox.outbox_deliveries;
CREATE TEMP TABLE after_full AS
SELECT f.key, outbox_ack(f.receipt) AS acked FROM regress.fetched AS f ORDER BY f.key;
SELECT count(*) AS wrong FROM after_full AS a
 WHERE a.acked = EXISTS (SELECT FROM inbox.outbox_deliveries AS d JOIN inbox.outbox_messages AS m USING (id)
						  WHERE m.key = a.key AND d.target = 'https://moved.example/hook');
UPDATE inbox.outbox_deliveries SET lease_until = now() - interval '1 second'
 WHERE target = 'https://moved.example/hook';
SELECT (SELECT count(*) FROM outbox_fetch('https://moved.example/hook', 10, '1 minute'))
	   = (SELECT count(*) FROM after_full WHERE NOT acked) AS fetched_again;
SELECT outbox_unroute('moved', 'https://moved.example/hook');
-- The commit of a fetch that leased waits for the disk (and the
-- synchronous standbys) even where synchronous_commit is off: it makes
-- durable the acknowledgements the fetch saw (which a relay may commit
-- without waiting) before the keys' next messages leave.  A fetch that
-- finds nothing leaves the setting.
SELECT outbox_route('durable', 'https://durable.example/hook');
BEGIN;
SET LOCAL synchronous_commit = off;
SELECT count(*) AS leased FROM outbox_fetch('https://durable.example/hook', 10, '1 minute');
SELECT current_setting('synchronous_commit') AS after_nothing;
SELECT cardinality(outbox_send_many('durable', ARRAY['d-1'], array_fill('{}'::jsonb, ARRAY[1]))) AS sent;
SELECT count(*) AS leased FROM outbox_fetch('https://durable.example/hook', 10, '1 minute');
SELECT current_setting('synchronous_commit') AS after_lease;
COMMIT;
SELECT current_setting('synchronous_commit') AS after_commit;
-- local, which waits for no standby, is raised too
BEGIN;
SET LOCAL synchronous_commit = local;
SELECT cardinality(outbox_send_many('durable', ARRAY['d-2'], array_fill('{}'::jsonb, ARRAY[1]))) AS sent;
SELECT count(*) AS leased FROM outbox_fetch('https://durable.example/hook', 10, '1 minute');
SELECT current_setting('synchronous_commit') AS after_lease;
COMMIT;
SELECT outbox_unroute('durable', 'https://durable.example/hook');

-- Positions go on after a purge: o-1's row went with its last message,
-- and its next send starts again from the clock, above its old positions
SELECT count(*) AS o1_rows FROM inbox.outbox_keys WHERE topic = 'orders' AND key = 'o-1';
SELECT outbox_send('orders', 'o-1', '{"n": "later"}'::jsonb) AS later \gset
SELECT m.position > b.last AS above FROM inbox.outbox_messages AS m, regress.o1_before AS b WHERE m.id = :'later';

-- A key's row goes with its last message, once that is purged and its
-- position is older than the retention; the next send starts the key again
-- from the clock, above every position it had.  idle-a: both messages
-- delivered; idle-b: the first dead, the second delivered; idle-c: its
-- last message still pending.
SELECT outbox_route('idle', 'https://idle.example/hook', '{"max_attempts": 1}');
SELECT cardinality(outbox_send_many('idle', ARRAY['idle-a', 'idle-a', 'idle-b', 'idle-b', 'idle-c'],
									 array_fill('{}'::jsonb, ARRAY[5]))) AS sent;
SELECT key, CASE WHEN key = 'idle-b' THEN outbox_fail(receipt, 'HTTP 410') ELSE outbox_ack(receipt)::text END AS done
  FROM outbox_fetch('https://idle.example/hook', 10, '1 minute') ORDER BY key;
SELECT key, outbox_ack(receipt) AS acked FROM outbox_fetch('https://idle.example/hook', 10, '1 minute') ORDER BY key;
SELECT outbox_send('idle', 'idle-c', '{}'::jsonb) IS NOT NULL AS sent;
CREATE TABLE regress.idle_keys AS SELECT key, last FROM inbox.outbox_keys WHERE topic = 'idle';
SET inbox.outbox_retention = '1 s';
SELECT pg_sleep(1.1);
SELECT inbox_purge() AS purged;
RESET inbox.outbox_retention;
SELECT key FROM inbox.outbox_keys WHERE topic = 'idle' ORDER BY key;
SELECT key, count(*) FROM inbox.outbox_messages WHERE topic = 'idle' GROUP BY key ORDER BY key;
-- idle-b's dead message, requeued, and a new send: above every position
SELECT outbox_requeue(id) FROM outbox_dead_letters WHERE topic = 'idle';
SELECT outbox_send('idle', 'idle-a', '{}'::jsonb) AS idle_a \gset
SELECT k.key, k.last > i.last AS above FROM inbox.outbox_keys AS k JOIN regress.idle_keys AS i USING (key)
 WHERE k.topic = 'idle' ORDER BY k.key;
SELECT m.position > i.last AS above FROM inbox.outbox_messages AS m JOIN regress.idle_keys AS i USING (key)
 WHERE m.id = :'idle_a';
SELECT d.key, d.position > i.last AS above FROM inbox.outbox_deliveries AS d JOIN regress.idle_keys AS i USING (key)
 WHERE d.target = 'https://idle.example/hook' ORDER BY d.key;
SELECT key, count(outbox_ack(receipt)) AS acked FROM outbox_fetch('https://idle.example/hook', 10, '1 minute')
 GROUP BY key ORDER BY key;
SELECT outbox_unroute('idle', 'https://idle.example/hook');

-- A batch groups its keys byte by byte, as they are stored, whatever the
-- caller's collation: under a case-insensitive one, ci and CI are still
-- two keys, each with its own positions, each row's last held by its
-- last message (a server built without ICU has no such collation: the
-- same output there, from a deterministic one)
DO $$
BEGIN
	CREATE COLLATION regress.ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
EXCEPTION WHEN feature_not_supported THEN
	CREATE COLLATION regress.ci FROM "C";
END
$$;
SELECT cardinality(outbox_send_many('collated', ARRAY['ci', 'CI'] COLLATE regress.ci,
									 ARRAY['{"i": 1}', '{"i": 2}']::jsonb[])) AS sent;
SELECT cardinality(outbox_send_many('collated', ARRAY['ci', 'CI', 'ci'] COLLATE regress.ci,
									 ARRAY['{"i": 3}', '{"i": 4}', '{"i": 5}']::jsonb[])) AS again;
SELECT m.key, regress.pos(m.topic, m.key, m.position) AS position, m.payload,
	   k.last = max(m.position) OVER (PARTITION BY m.key) AS last_held
  FROM inbox.outbox_messages AS m JOIN inbox.outbox_keys AS k USING (topic, key)
 WHERE m.topic = 'collated' ORDER BY m.key, m.position;

-- Two-phase commit: prepared, nothing to fetch; committed, there
BEGIN;
SELECT outbox_send('orders', 'o-2pc', '{"n": 1}'::jsonb) IS NOT NULL AS sent;
PREPARE TRANSACTION 'outbox';
SELECT count(*) FROM inbox.outbox_messages WHERE key = 'o-2pc';
COMMIT PREPARED 'outbox';
SELECT count(*) FROM inbox.outbox_messages WHERE key = 'o-2pc';

RESET timezone;
RESET datestyle;
