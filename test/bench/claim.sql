-- test/bench/claim.sql
--
-- Variants (c) and (d): the consumer transaction with the extension.  The
-- claim decides, in the same transaction, whether the business INSERT (the
-- one of (a)) runs at all.
--
-- (c) runs it with fresh ids in scope "bench"; (d) runs the very same
-- script on ids claimed before the runs (scope "dup", :base 0, :span the
-- number of pre-claimed ids), so every claim is a duplicate: it returns
-- false and the transaction writes nothing.  The hash expression is the
-- one of handmade.sql, so the pre-claimed hashes match.
\set id :base + random(1, :span)
\set amount random(1, 1000000)
BEGIN;
SELECT inbox_claim(:scope, :id, sha256(convert_to(:id::text, 'UTF8'))) AS fresh \gset
\if :fresh
INSERT INTO orders (message_id, amount_cents) VALUES (:id, :amount);
\endif
COMMIT;
