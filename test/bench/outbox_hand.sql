-- test/bench/outbox_hand.sql
--
-- outbox_send.sql's transaction with a hand-written outbox that gives the
-- same per-key order: the key's position taken under its row lock, held
-- to commit (an upsert of hand_outbox_keys), and the message inserted
-- unsent, in one statement.
\set id :base + random(1, :span)
\set amount :id % 1000000
\if :nkeys > 0
\set k random(1, :nkeys)
\else
\set k :id
\endif
BEGIN;
INSERT INTO orders (message_id, amount_cents) VALUES ('ho-' || :id, :amount);
WITH p AS (
	INSERT INTO hand_outbox_keys AS h (key, last) VALUES ('k' || :k, 1)
	ON CONFLICT (key) DO UPDATE SET last = h.last + 1
	RETURNING h.last)
INSERT INTO hand_outbox (key, position, payload)
SELECT 'k' || :k, p.last, jsonb_build_object('id', :id::text, 'amount', :amount::bigint) FROM p;
COMMIT;
