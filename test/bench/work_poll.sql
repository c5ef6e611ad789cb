-- test/bench/work_poll.sql
--
-- work_one.sql with receipts: inbox_poll under a lease, the effect, and
-- the completion by receipt, in one transaction.
BEGIN;
SELECT message_id AS mid, (payload->>'amount')::bigint AS amount, receipt FROM inbox_poll(:scope, 1, '30 s') \gset
INSERT INTO orders (message_id, amount_cents) VALUES (:mid, :amount);
SELECT inbox_complete(:scope, :receipt::uuid);
COMMIT;
