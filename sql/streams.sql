--
-- streams: inbox_claim_offset and inbox_claim_offsets, deduplication by a
-- per-stream high-water mark
--
SET timezone = 'UTC';

-- The first claim of a stream sets its mark; above it is new, at or below
-- it a duplicate.  A gap is allowed: what it skipped counts as done.
SELECT inbox_claim_offset('kafka', 'orders-0', 5) AS first,
       inbox_claim_offset('kafka', 'orders-0', 5) AS same_again,
       inbox_claim_offset('kafka', 'orders-0', 6) AS next,
       inbox_claim_offset('kafka', 'orders-0', 9) AS after_a_gap,
       inbox_claim_offset('kafka', 'orders-0', 8) AS skipped_by_the_gap,
       inbox_claim_offset('kafka', 'orders-0', 0) AS far_below;
SELECT scope, stream, seq FROM inbox.offsets ORDER BY 1, 2;

-- Streams are independent, and so are scopes.
SELECT inbox_claim_offset('kafka', 'orders-1', 0) AS other_stream,
       inbox_claim_offset('kinesis', 'orders-0', 1) AS other_scope;

-- Strict: a gap raises IB006 and advances nothing; the next number is new.
SELECT regress.try($$SELECT inbox_claim_offset('kafka', 'orders-0', 11, strict => true)$$);
SELECT seq FROM inbox.offsets WHERE scope = 'kafka' AND stream = 'orders-0';
SELECT inbox_claim_offset('kafka', 'orders-0', 10, strict => true) AS strict_next,
       inbox_claim_offset('kafka', 'orders-0', 10, strict => true) AS strict_duplicate;
-- A new stream accepts any first number, strict or not.
SELECT inbox_claim_offset('kafka', 'orders-2', 1000, strict => true) AS strict_first;

-- Under inbox.on_duplicate = raise, a duplicate is IB001.
BEGIN;
SET LOCAL inbox.on_duplicate = raise;
SELECT regress.try($$SELECT inbox_claim_offset('kafka', 'orders-0', 3)$$);
ROLLBACK;

-- The mark moves with the caller's transaction.
BEGIN;
SELECT inbox_claim_offset('kafka', 'orders-0', 20);
ROLLBACK;
SELECT inbox_claim_offset('kafka', 'orders-0', 20) AS after_rollback;

-- A batch, first_seq to last_seq: the lowest new number, NULL if none.
SELECT inbox_claim_offsets('kafka', 'batch', 0, 99) AS new_stream,
       inbox_claim_offsets('kafka', 'batch', 50, 149) AS overlapping,
       inbox_claim_offsets('kafka', 'batch', 100, 149) AS all_seen,
       inbox_claim_offsets('kafka', 'batch', 160, 169) AS after_a_gap;
SELECT regress.try($$SELECT inbox_claim_offsets('kafka', 'batch', 180, 189, strict => true)$$);
SELECT inbox_claim_offsets('kafka', 'batch', 170, 179, strict => true) AS strict_next;
BEGIN;
SET LOCAL inbox.on_duplicate = raise;
SELECT regress.try($$SELECT inbox_claim_offsets('kafka', 'batch', 0, 9)$$);
ROLLBACK;

-- Bad input: a clear SQLSTATE, and nothing written.
SELECT count(*) AS offsets_before FROM inbox.offsets \gset
SELECT regress.try($$SELECT inbox_claim_offset(NULL, 'x', 1)$$) AS null_scope,
       regress.try($$SELECT inbox_claim_offset('kafka', NULL, 1)$$) AS null_stream,
       regress.try($$SELECT inbox_claim_offset('kafka', 'x', NULL)$$) AS null_seq,
       regress.try($$SELECT inbox_claim_offset('kafka', 'x', 1, NULL)$$) AS null_strict;
SELECT regress.try($$SELECT inbox_claim_offset('kafka', 'x', -1)$$) AS negative,
       regress.try($$SELECT inbox_claim_offset('kafka', '', 1)$$) AS empty_stream,
       regress.try($$SELECT inbox_claim_offset('kafka', repeat('x', 1025), 1)$$) AS long_stream,
       regress.try($$SELECT inbox_claim_offset('kafka', 'x', '9223372036854775808')$$) AS overflow;
SELECT regress.try($$SELECT inbox_claim_offsets('kafka', 'x', 5, 4)$$) AS reversed,
       regress.try($$SELECT inbox_claim_offsets('kafka', 'x', -5, 4)$$) AS negative_first,
       regress.try($$SELECT inbox_claim_offsets('kafka', 'x', 1, NULL)$$) AS null_last;
SELECT count(*) - :offsets_before AS offsets_written FROM inbox.offsets;
-- The largest sequence number is a number like any other.
SELECT inbox_claim_offset('kafka', 'max', 9223372036854775807) AS at_max,
       inbox_claim_offset('kafka', 'max', 9223372036854775807) AS max_again;

-- Counted in inbox_stats like claims.
SELECT scope, claims, duplicates FROM inbox_stats WHERE scope IN ('kafka', 'kinesis') ORDER BY 1;

-- Scope grants apply: a granted scope is closed to other roles.
CREATE ROLE inbox_streams_app;
CREATE ROLE inbox_streams_other;
GRANT EXECUTE ON FUNCTION inbox_claim_offset(text, text, bigint, boolean),
	inbox_claim_offsets(text, text, bigint, bigint, boolean) TO inbox_streams_app, inbox_streams_other;
SELECT inbox_grant('kafka', 'inbox_streams_app');
SET ROLE inbox_streams_app;
SELECT inbox_claim_offset('kafka', 'orders-0', 21) AS granted;
SET ROLE inbox_streams_other;
SELECT regress.try($$SELECT inbox_claim_offset('kafka', 'orders-0', 22)$$) AS not_granted;
SELECT regress.try($$SELECT inbox_claim_offsets('kafka', 'orders-0', 22, 23)$$) AS not_granted_batch;
RESET ROLE;
SELECT inbox_revoke('kafka', 'inbox_streams_app');
REVOKE ALL ON FUNCTION inbox_claim_offset(text, text, bigint, boolean),
	inbox_claim_offsets(text, text, bigint, bigint, boolean) FROM inbox_streams_app, inbox_streams_other;
DROP ROLE inbox_streams_app;
DROP ROLE inbox_streams_other;

-- pg_dump keeps the offsets; dropping a scope removes them.
SELECT 'inbox.offsets'::regclass = ANY (extconfig) AS dumped FROM pg_extension WHERE extname = 'inbox';
SELECT inbox_drop_scope('kinesis');
SELECT count(*) AS kinesis_offsets FROM inbox.offsets WHERE scope = 'kinesis';
SELECT inbox_drop_scope('kafka');
