-- test/bench/ingest.sql
--
-- The ingest of the retention benchmark ("keeps up"): one transaction
-- claims :batch fresh ids in one statement, in one of :scopes scopes
-- (ingest-0, ingest-1, ...) drawn at random, so that one pgbench
-- client can push many more claims per second than the one-claim
-- transaction of claim.sql.  Ids are :r * 1000 + i for a random :r below
-- 10^13, so two transactions share ids only if they draw the same :r:
-- about 1 chance in 2,000 over 100,000 transactions.  Such claims would
-- return false and be counted as duplicates (bench.sh reports them), never
-- as claims.  The count of fresh claims is returned only so that nothing
-- can skip the claims.
\set s random(0, :scopes - 1)
\set r random(1, 9999999999999)
SELECT count(*) FILTER (WHERE inbox_claim('ingest-' || (:s)::int::text, id, sha256(convert_to(id, 'UTF8'))))
FROM (SELECT ((:r)::bigint * 1000 + i)::text AS id FROM generate_series(1, (:batch)::int) AS i) AS ids;
