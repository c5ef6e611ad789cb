-- test/bench/claim_const.sql
--
-- Variant (c2): the claim of (c) with the constant hash of (h), and the
-- ids of (h), so that (c2)/(h) compares the two ways of deduplicating and
-- nothing else.
\set id :base + random(1, :span)
\set amount random(1, 1000000)
BEGIN;
SELECT inbox_claim(:scope, 'm' || :id, '\x0102') AS fresh \gset
\if :fresh
INSERT INTO orders (message_id, amount_cents) VALUES ('m' || :id, :amount);
\endif
COMMIT;
