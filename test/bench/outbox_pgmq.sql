-- test/bench/outbox_pgmq.sql
--
-- outbox_send.sql's transaction with pgmq.send in place of outbox_send.
-- pgmq keeps no order per key; the key only shapes the payload.
\set id :base + random(1, :span)
\set amount :id % 1000000
\if :nkeys > 0
\set k random(1, :nkeys)
\else
\set k :id
\endif
BEGIN;
INSERT INTO orders (message_id, amount_cents) VALUES ('pq-' || :id, :amount);
SELECT pgmq.send('bench_outbox', jsonb_build_object('key', 'k' || :k, 'id', :id::text, 'amount', :amount::bigint));
COMMIT;
