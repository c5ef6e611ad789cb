-- test/bench/pgmq_grouped.sql
--
-- work_one.sql as a pgmq user with FIFO groups writes it: read the head
-- of one group (read_grouped_head, pgmq 1.8 and later: at most one
-- message per x-pgmq-group header, the oldest) under a 30 s visibility
-- timeout, apply the effect, delete it, all in one transaction.  Runs only
-- where the installed pgmq has read_grouped_head.
BEGIN;
SELECT msg_id, (message->>'amount')::bigint AS amount FROM pgmq.read_grouped_head(:scope, 30, 1) \gset
INSERT INTO orders (message_id, amount_cents) VALUES (:scope::text || '-' || :msg_id, :amount);
SELECT pgmq.delete(:scope, :msg_id::bigint);
COMMIT;
