-- test/bench/queue_hand.sql
--
-- The queue users write by hand (the reference of the deferred mode): take the oldest
-- message with SKIP LOCKED and delete it, apply the effect, all in one
-- transaction.  No deduplication, no attempts, no dead letters, no
-- stored result: the floor a deferred take is compared with.
BEGIN;
DELETE FROM hand_queue WHERE id = (SELECT id FROM hand_queue ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1)
RETURNING message_id AS mid, (payload->>'amount')::bigint AS amount \gset
INSERT INTO orders (message_id, amount_cents) VALUES (:mid, :amount);
COMMIT;
