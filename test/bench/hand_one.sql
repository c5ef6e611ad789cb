-- test/bench/hand_one.sql
--
-- Variant (h1): the hand-written inbox and the effect in one statement.
-- No mismatch check and no function call: the floor of a one-statement
-- claim.
\set id :base + random(1, :span)
\set amount random(1, 1000000)
WITH c AS (INSERT INTO hand_inbox (scope, message_id, payload_hash) VALUES (:scope, 'm' || :id, '\x0102')
           ON CONFLICT DO NOTHING RETURNING 1)
INSERT INTO orders (message_id, amount_cents) SELECT 'm' || :id, :amount FROM c;
