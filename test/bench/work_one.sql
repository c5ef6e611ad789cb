-- test/bench/work_one.sql
--
-- A worker processing one message in one transaction: take it, apply the
-- effect (the INSERT of the claim benchmark), complete it; all commit
-- together.  A rollback would put the message back to pending.
BEGIN;
SELECT message_id AS mid, (payload->>'amount')::bigint AS amount FROM inbox_take(:scope) \gset
INSERT INTO orders (message_id, amount_cents) VALUES (:mid, :amount);
SELECT inbox_complete(:scope, :mid);
COMMIT;
