-- test/bench/pgmq_send.sql
--
-- receive.sql's counterpart in pgmq: send one message (autocommit).
-- pgmq does not deduplicate, so the id only shapes the payload.
\set id :base + random(1, :span)
\set amount :id % 1000000
SELECT pgmq.send('bench_send', jsonb_build_object('id', :id::text, 'amount', :amount::bigint));
