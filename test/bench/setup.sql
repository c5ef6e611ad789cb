/*
 * test/bench/setup.sql
 *
 * Schema of the benchmark database, run once by bench.sh with psql
 * (-v dup_ids=N: how many ids to pre-claim for variant (d)).
 *
 * handmade_inbox must be the same table as inbox.entries, or the
 * comparison (b) vs (c) measures two storage layouts instead of two ways
 * of writing the claim: same columns and defaults, same COLLATE "C" keys,
 * same checks, same 8-way hash partitioning, same primary key and the
 * same (scope, received_at) index.  Keep it in step with
 * sql/inbox--*.sql.
 */
\set ON_ERROR_STOP on
SET client_min_messages = warning;

-- The extension and the business table "orders": an order per message,
-- with a key of its own and no unique key on the message id, as a consumer
-- that relies on an inbox for deduplication would have it.
\ir base.sql

CREATE TABLE handmade_inbox (
	scope text COLLATE "C" NOT NULL,
	message_id text COLLATE "C" NOT NULL,
	received_at timestamptz NOT NULL DEFAULT now(),
	payload_hash bytea,
	state "char" NOT NULL DEFAULT 'd',
	CONSTRAINT handmade_inbox_pkey PRIMARY KEY (scope, message_id),
	CONSTRAINT handmade_inbox_scope_length CHECK (octet_length(scope) <= 256),
	CONSTRAINT handmade_inbox_message_id_length CHECK (octet_length(message_id) <= 1024),
	CONSTRAINT handmade_inbox_payload_hash_length CHECK (octet_length(payload_hash) <= 64),
	CONSTRAINT handmade_inbox_state CHECK (state = ANY (ARRAY['p', 'r', 'd', 'x']::"char"[]))
) PARTITION BY HASH (scope, message_id);

SELECT format('CREATE TABLE handmade_inbox_p%s PARTITION OF handmade_inbox '
			  'FOR VALUES WITH (MODULUS 8, REMAINDER %s)', r, r)
FROM generate_series(0, 7) AS r
\gexec

CREATE INDEX handmade_inbox_scope_received_at ON handmade_inbox (scope, received_at);

/* (b0): the same table without partitions, for context */
CREATE TABLE handmade_inbox_flat (LIKE handmade_inbox INCLUDING ALL);

/*
 * (h), (h1), (hb): the inbox as users copy it, as they write
 * it: unpartitioned, no checks, the key and an index for retention.
 */
CREATE TABLE hand_inbox (scope text COLLATE "C" NOT NULL, message_id text COLLATE "C" NOT NULL,
  payload_hash bytea, received_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (scope, message_id));
CREATE INDEX ON hand_inbox (received_at);

/*
 * (cw): the claims of (c) in a scope with a content window, whose every
 * content is new (the hash follows the id): what the window costs a claim.
 */
SELECT inbox_set_content_window('windowed', '1 hour', 'warn');

/*
 * The ids that (d) redelivers, claimed the way claim.sql claims them (the
 * same hash expression), so that every claim of (d) returns false.
 */
SELECT count(*) FILTER (WHERE inbox_claim('dup', i::text, sha256(convert_to(i::text, 'UTF8'))))
	AS dup_ids_claimed
FROM generate_series(1, :dup_ids) AS i
\gset
SELECT :dup_ids_claimed = :dup_ids AS dup_ok \gset
\if :dup_ok
\else
	\echo 'setup.sql: pre-claimed' :dup_ids_claimed 'of' :dup_ids 'ids'
	SELECT 1/0;
\endif

/*
 * The memory check: n fresh claims in one session, with a COMMIT every
 * 10,000 so that no transaction-lived memory can hide or fake growth.  It
 * also samples the backend's memory after every COMMIT and returns the
 * largest sample, so that growth that a later step would free still shows.
 */
CREATE PROCEDURE bench_memory_claims(first bigint, n bigint, INOUT peak_bytes bigint DEFAULT 0)
LANGUAGE plpgsql
AS $$
DECLARE
	i bigint;
	sample bigint;
BEGIN
	FOR i IN first .. first + n - 1 LOOP
		IF NOT inbox_claim('memory', i::text, sha256(convert_to(i::text, 'UTF8'))) THEN
			RAISE EXCEPTION 'memory check: id % was not fresh', i;
		END IF;
		IF (i - first + 1) % 10000 = 0 OR i = first + n - 1 THEN
			COMMIT;
			SELECT sum(total_bytes) INTO sample FROM pg_backend_memory_contexts;
			peak_bytes := greatest(peak_bytes, sample);
		END IF;
	END LOOP;
END
$$;

ANALYZE;
