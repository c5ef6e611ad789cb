-- test/bench/handmade.sql
--
-- Variant (b): the transactional inbox as blog posts write it by hand,
-- against handmade_inbox, a table built like inbox.entries (same columns,
-- checks, 8 hash partitions, primary key and (scope, received_at) index).
--
-- The INSERT ... ON CONFLICT DO NOTHING is the arbiter; the SELECT reads
-- the stored hash back for the mismatch check.  A script cannot branch on
-- an INSERT's row count, so the hand-written consumer reads the hash on
-- every message, as the copied code usually does.  The business INSERT is
-- the one of (a).
\set id :base + random(1, :span)
\set amount random(1, 1000000)
BEGIN;
INSERT INTO handmade_inbox (scope, message_id, payload_hash)
	VALUES (:scope, :id, sha256(convert_to(:id::text, 'UTF8')))
	ON CONFLICT (scope, message_id) DO NOTHING;
SELECT payload_hash FROM handmade_inbox WHERE scope = :scope AND message_id = :id;
INSERT INTO orders (message_id, amount_cents) VALUES (:id, :amount);
COMMIT;
