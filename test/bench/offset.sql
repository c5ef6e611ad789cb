-- test/bench/offset.sql
--
-- Variant (o): inbox_claim_offset alone, one transaction per claim, one
-- stream per client (a Kafka partition per consumer), each claim the next
-- sequence number of its stream.  pgbench keeps :seq per client from one
-- transaction to the next; every run has streams of its own (:base).
\set seq :seq + 1
SELECT inbox_claim_offset(:scope, 'run-' || :base || '-' || :client_id, :seq);
