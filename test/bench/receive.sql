-- test/bench/receive.sql
--
-- The receiver of the deferred mode: store a message as pending, one per
-- transaction (the broker is acked when it commits).  The payload follows
-- from the id, as a redelivery's does: two clients drawing the same id
-- make a duplicate, not a payload mismatch (IB002).
\set id :base + random(1, :span)
\set amount :id % 1000000
SELECT inbox_receive(:scope, :id::text, jsonb_build_object('amount', :amount::bigint));
