-- test/bench/claim_one.sql
--
-- Variant (c1): claim and effect in one statement, one round trip: the
-- business row is inserted exactly when the claim is new.
\set id :base + random(1, :span)
\set amount random(1, 1000000)
INSERT INTO orders (message_id, amount_cents)
SELECT 'm' || :id, :amount WHERE inbox_claim(:scope, 'm' || :id, '\x0102');
