-- test/bench/receive.sql
--
-- The receiver of the deferred mode: store a message as pending, one per
-- transaction (the broker is acked when it commits).
\set id :base + random(1, :span)
\set amount random(1, 1000000)
SELECT inbox_receive(:scope, :id::text, jsonb_build_object('amount', :amount::bigint));
