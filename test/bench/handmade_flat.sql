-- test/bench/handmade_flat.sql
--
-- Variant (b0): the hand-written inbox of handmade.sql, statement for
-- statement, against handmade_inbox_flat: the same table without
-- partitioning.  It is context, not a target: it shows what the 8 hash
-- partitions (which inbox.entries has for retention) cost by themselves.
\set id :base + random(1, :span)
\set amount random(1, 1000000)
BEGIN;
INSERT INTO handmade_inbox_flat (scope, message_id, payload_hash)
	VALUES (:scope, :id, sha256(convert_to(:id::text, 'UTF8')))
	ON CONFLICT (scope, message_id) DO NOTHING;
SELECT payload_hash FROM handmade_inbox_flat WHERE scope = :scope AND message_id = :id;
INSERT INTO orders (message_id, amount_cents) VALUES (:id, :amount);
COMMIT;
