-- test/bench/hand_batch.sql
--
-- Variant (hb): a consumer's batch of 100 messages by hand: one INSERT of
-- the 100 ids into hand_inbox, the count of mismatches, then the
-- multi-row business INSERT.  One transaction per batch.
\set id :base + random(1, :span)
\set amount random(1, 1000000)
BEGIN;
WITH ids AS (SELECT 'm' || :id || '-' || g AS m FROM generate_series(1, 100) g),
     ins AS (INSERT INTO hand_inbox (scope, message_id, payload_hash)
             SELECT :scope, m, '\x0102' FROM ids ON CONFLICT DO NOTHING RETURNING message_id)
SELECT (SELECT count(*) FROM ins),
       (SELECT count(*) FROM hand_inbox h JOIN ids ON h.scope = :scope AND h.message_id = ids.m
         WHERE h.payload_hash <> '\x0102');
INSERT INTO orders (message_id, amount_cents)
SELECT 'm' || :id || '-' || g, :amount FROM generate_series(1, 100) g;
COMMIT;
