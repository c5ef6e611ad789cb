-- test/bench/pgmq_one.sql
--
-- work_one.sql as a pgmq user writes it (the reference of the deferred mode): read one
-- message under a 30 s visibility timeout, apply the effect, delete it,
-- all in one transaction.  Runs only where pgmq is installed.
BEGIN;
SELECT msg_id, (message->>'amount')::bigint AS amount FROM pgmq.read('bench', 30, 1) \gset
INSERT INTO orders (message_id, amount_cents) VALUES ('pgmq-' || :msg_id, :amount);
SELECT pgmq.delete('bench', :msg_id::bigint);
COMMIT;
