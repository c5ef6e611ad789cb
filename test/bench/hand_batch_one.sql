-- test/bench/hand_batch_one.sql
--
-- Variant (hb1): the batch of (hb) by hand in one statement, the claim and
-- the effect together: the ids inserted into hand_inbox feed the
-- multi-row business INSERT.  No mismatch check: the floor of a
-- one-statement batch, against (cm).
\set id :base + random(1, :span)
\set amount random(1, 1000000)
WITH ins AS (INSERT INTO hand_inbox (scope, message_id, payload_hash)
             SELECT :scope, 'm' || :id || '-' || g, '\x0102' FROM generate_series(1, 100) g
             ON CONFLICT DO NOTHING RETURNING message_id)
INSERT INTO orders (message_id, amount_cents) SELECT message_id, :amount FROM ins;
