-- test/bench/claim_alone.sql
--
-- Variant (c0): inbox_claim alone, one transaction per claim, as the
-- baseline of (o): claims per second.
\set id :base + random(1, :span)
SELECT inbox_claim(:scope, 'm' || :id, '\x0102');
