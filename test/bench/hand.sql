-- test/bench/hand.sql
--
-- Variant (h): the inbox users copy from a blog, as they write
-- it: an unpartitioned table, one statement that inserts and checks the
-- hash, then the business INSERT.  The hash is a constant, as in (c2).
\set id :base + random(1, :span)
\set amount random(1, 1000000)
BEGIN;
WITH ins AS (INSERT INTO hand_inbox (scope, message_id, payload_hash) VALUES (:scope, 'm' || :id, '\x0102')
             ON CONFLICT DO NOTHING RETURNING 1)
SELECT EXISTS (SELECT 1 FROM ins) OR (SELECT CASE WHEN payload_hash = '\x0102' THEN false ELSE NULL END
                                      FROM hand_inbox WHERE scope = :scope AND message_id = 'm' || :id);
INSERT INTO orders (message_id, amount_cents) VALUES ('m' || :id, :amount);
COMMIT;
