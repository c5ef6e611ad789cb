-- test/bench/outbox_send.sql
--
-- A producer's transaction: the business INSERT and outbox_send of one
-- message, on one of :nkeys keys (every message a key of its own when
-- :nkeys is 0).
\set id :base + random(1, :span)
\set amount :id % 1000000
\if :nkeys > 0
\set k random(1, :nkeys)
\else
\set k :id
\endif
BEGIN;
INSERT INTO orders (message_id, amount_cents) VALUES ('ob-' || :id, :amount);
SELECT outbox_send('bench', 'k' || :k, jsonb_build_object('id', :id::text, 'amount', :amount::bigint));
COMMIT;
