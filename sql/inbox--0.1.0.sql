/* sql/inbox--0.1.0.sql */

-- complain if the script is sourced in psql rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION inbox" to load this file. \quit

/*
 * The tables live in schema inbox, which belongs to the extension and on
 * which nobody but its owner has any privilege: application roles reach
 * the rows only through the SECURITY DEFINER functions below.  The script
 * fails if a schema called inbox already exists, rather than adopting one
 * that somebody else may control.
 */
CREATE SCHEMA inbox;
COMMENT ON SCHEMA inbox IS 'storage of the inbox extension; use the inbox_* functions';
REVOKE ALL ON SCHEMA inbox FROM PUBLIC;

/*
 * One row per (scope, message_id) ever claimed and not yet purged.
 *
 * The primary key is the arbiter of every claim.  Keys compare byte-wise
 * (COLLATE "C"), so two ids are the same message exactly when their bytes
 * are equal, whatever the database's locale.  The table is hash-partitioned
 * on the whole key so that retention can work partition by partition; each
 * leaf's unique index covers every key that can hash to it, so uniqueness
 * is still global.
 *
 * state is 'd' (done) for every claim; 'p', 'r' and 'x' are reserved for
 * the deferred mode (pending, processing, dead).
 */
CREATE TABLE inbox.entries (
	scope text COLLATE pg_catalog."C" NOT NULL,
	message_id text COLLATE pg_catalog."C" NOT NULL,
	received_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	payload_hash bytea,
	state "char" NOT NULL DEFAULT 'd',
	CONSTRAINT entries_pkey PRIMARY KEY (scope, message_id),
	CONSTRAINT entries_scope_length
		CHECK (pg_catalog.octet_length(scope) OPERATOR(pg_catalog.<=) 256),
	CONSTRAINT entries_message_id_length
		CHECK (pg_catalog.octet_length(message_id) OPERATOR(pg_catalog.<=) 1024),
	CONSTRAINT entries_payload_hash_length
		CHECK (pg_catalog.octet_length(payload_hash) OPERATOR(pg_catalog.<=) 64),
	CONSTRAINT entries_state
		CHECK (state OPERATOR(pg_catalog.=) ANY (ARRAY['p', 'r', 'd', 'x']::"char"[]))
) PARTITION BY HASH (scope, message_id);

COMMENT ON TABLE inbox.entries IS 'one row per claimed message; the primary key arbitrates claims';

CREATE TABLE inbox.entries_p0 PARTITION OF inbox.entries
	FOR VALUES WITH (MODULUS 8, REMAINDER 0);
CREATE TABLE inbox.entries_p1 PARTITION OF inbox.entries
	FOR VALUES WITH (MODULUS 8, REMAINDER 1);
CREATE TABLE inbox.entries_p2 PARTITION OF inbox.entries
	FOR VALUES WITH (MODULUS 8, REMAINDER 2);
CREATE TABLE inbox.entries_p3 PARTITION OF inbox.entries
	FOR VALUES WITH (MODULUS 8, REMAINDER 3);
CREATE TABLE inbox.entries_p4 PARTITION OF inbox.entries
	FOR VALUES WITH (MODULUS 8, REMAINDER 4);
CREATE TABLE inbox.entries_p5 PARTITION OF inbox.entries
	FOR VALUES WITH (MODULUS 8, REMAINDER 5);
CREATE TABLE inbox.entries_p6 PARTITION OF inbox.entries
	FOR VALUES WITH (MODULUS 8, REMAINDER 6);
CREATE TABLE inbox.entries_p7 PARTITION OF inbox.entries
	FOR VALUES WITH (MODULUS 8, REMAINDER 7);

-- Retention finds a scope's oldest entries through this index.
CREATE INDEX entries_scope_received_at ON inbox.entries (scope, received_at);

REVOKE ALL ON ALL TABLES IN SCHEMA inbox FROM PUBLIC;

-- pg_dump keeps the dedup history: the rows live in the leaves.
SELECT pg_catalog.pg_extension_config_dump('inbox.entries_p0', '');
SELECT pg_catalog.pg_extension_config_dump('inbox.entries_p1', '');
SELECT pg_catalog.pg_extension_config_dump('inbox.entries_p2', '');
SELECT pg_catalog.pg_extension_config_dump('inbox.entries_p3', '');
SELECT pg_catalog.pg_extension_config_dump('inbox.entries_p4', '');
SELECT pg_catalog.pg_extension_config_dump('inbox.entries_p5', '');
SELECT pg_catalog.pg_extension_config_dump('inbox.entries_p6', '');
SELECT pg_catalog.pg_extension_config_dump('inbox.entries_p7', '');

/*
 * The API.  Every function is SECURITY DEFINER with a pinned search_path,
 * and the C code schema-qualifies every object and operator it uses, so
 * nothing a caller puts on its own search_path can change what runs.
 * EXECUTE is not granted to PUBLIC: an administrator grants it to the
 * consumer roles (see README).
 */
CREATE FUNCTION @extschema@.inbox_claim(scope text, message_id text,
										payload_hash bytea DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.inbox_claim(text, text, bytea) IS
'claim a message in the current transaction: true if new, false (or IB001) if already processed, IB002 on a payload mismatch';

CREATE FUNCTION @extschema@.inbox_status(scope text, message_id text,
										 OUT received_at timestamptz,
										 OUT payload_hash bytea,
										 OUT state text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'inbox_status'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
ROWS 1;

COMMENT ON FUNCTION @extschema@.inbox_status(text, text) IS
'the entry of a message (received_at, payload_hash, state), or no row';

REVOKE ALL ON FUNCTION @extschema@.inbox_claim(text, text, bytea) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_status(text, text) FROM PUBLIC;
