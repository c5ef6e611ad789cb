-- test/bench/work_batch.sql
--
-- A worker in the recommended two-step form: a durable take of ten
-- messages (its own transaction, so every attempt counts even if the
-- worker dies), then one transaction per message with its effect and its
-- completion.  bench_work() is defined by deferred.sh.
CALL bench_work(:scope, 10);
