-- test/bench/bare.sql
--
-- Variant (a): the business transaction alone, with no deduplication at
-- all.  It is the ceiling the inbox variants are measured against: what a
-- consumer pays when it trusts the broker to deliver exactly once.
--
-- The id is drawn the same way in every variant (see bench.sh: :base is
-- unique per run, :span keeps the draws of one run apart from the next), so
-- the business INSERT is byte-for-byte the statement of (b0), (b) and (c).
\set id :base + random(1, :span)
\set amount random(1, 1000000)
BEGIN;
INSERT INTO orders (message_id, amount_cents) VALUES (:id, :amount);
COMMIT;
