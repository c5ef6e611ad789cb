-- test/bench/claim_many.sql
--
-- Variant (cm): the batch of (hb) with inbox_claim_many in one statement,
-- one round trip: the claim and the multi-row business INSERT of the
-- claimed ids, against (hb1).
\set id :base + random(1, :span)
\set amount random(1, 1000000)
INSERT INTO orders (message_id, amount_cents)
SELECT c.message_id, :amount
  FROM inbox_claim_many(:scope, ARRAY(SELECT 'm' || :id || '-' || g FROM generate_series(1, 100) g),
                        array_fill('\x0102'::bytea, ARRAY[100])) AS c
 WHERE c.status = 'claimed';
