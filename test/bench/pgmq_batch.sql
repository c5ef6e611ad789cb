-- test/bench/pgmq_batch.sql
--
-- work_batch.sql with pgmq: read ten (committed), then per message the
-- effect and the delete, each committed.  pgmq_work() is defined by
-- deferred.sh.  Runs only where pgmq is installed.
CALL pgmq_work(10);
