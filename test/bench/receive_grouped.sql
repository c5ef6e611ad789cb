-- test/bench/receive_grouped.sql
--
-- A grouped receive, one per transaction, into 100 groups; ids drawn at
-- random from a span no run exhausts (a repeat is a duplicate, not a
-- mismatch).  receive.sql is the same without the group key.
\set id :base + random(1, :span)
SELECT inbox_receive(:scope, :id::text, jsonb_build_object('amount', :id::bigint % 1000000),
					 group_key => 'g' || (:id::bigint % 100));
