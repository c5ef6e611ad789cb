-- test/bench/claim_many_two.sql
--
-- Variant (cm2): the batch of (hb) in the same two statements: the claim of
-- the 100 ids with inbox_claim_many, whose per-id results a consumer reads
-- (here the count of each status), then the multi-row business INSERT.
\set id :base + random(1, :span)
\set amount random(1, 1000000)
BEGIN;
SELECT count(*) FILTER (WHERE c.status = 'claimed'),
       count(*) FILTER (WHERE c.status <> 'claimed')
  FROM inbox_claim_many(:scope, ARRAY(SELECT 'm' || :id || '-' || g FROM generate_series(1, 100) g),
                        array_fill('\x0102'::bytea, ARRAY[100])) AS c;
INSERT INTO orders (message_id, amount_cents)
SELECT 'm' || :id || '-' || g, :amount FROM generate_series(1, 100) g;
COMMIT;
