--
-- direct_guard: a claim or a completion written without the planner
-- (src/direct.c) is refused exactly when its SQL statement would be.
-- direct.c evaluates no constraint itself: it writes only into a table
-- exactly as sql/inbox.sql makes it (src/direct_layout.c), and anything
-- else sends the write through SPI.  Each case below alters the table and
-- runs the same call with inbox.direct_insert on and off, in one
-- transaction that is rolled back, so that the later tests find
-- inbox.entries as it was.
--
SET timezone = 'UTC';
SET datestyle = 'ISO';

-- Which way a write went shows in the calls of inbox.bucket: only the SQL
-- statement evaluates the CHECK entries_bucket, which calls it.
SET track_functions = 'all';
CREATE FUNCTION regress.path(cmd text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	before bigint := coalesce(pg_catalog.pg_stat_get_xact_function_calls(
		'inbox.bucket(text,text)'::pg_catalog.regprocedure), 0);
	result pg_catalog.text;
BEGIN
	result := regress.try(cmd);
	RETURN result || CASE WHEN coalesce(pg_catalog.pg_stat_get_xact_function_calls(
		'inbox.bucket(text,text)'::pg_catalog.regprocedure), 0) OPERATOR(pg_catalog.>) before
		THEN ' (SPI)' ELSE ' (direct)' END;
END $$;

BEGIN;
-- The constraints added below must hold for the rows already there
DELETE FROM inbox.entries;
SAVEPOINT clean;

-- As sql/inbox.sql makes the table, a claim and a completion are written
-- directly; inbox.direct_insert = off sends them through SPI.
SELECT regress.path($$SELECT inbox_claim('guard', 'as-made')$$) AS claim;
SELECT regress.path($$SELECT count(*) FROM inbox_claim_many('guard', ARRAY['as-made-1', 'as-made-2'])$$) AS claim_many;
SELECT inbox_receive('guard', 'received', '{}'::jsonb);
SELECT message_id FROM inbox_take('guard');
SELECT regress.path($$SELECT inbox_complete('guard', 'received')$$) AS complete;
SET LOCAL inbox.direct_insert = off;
SELECT regress.path($$SELECT inbox_claim('guard', 'as-made-spi')$$) AS claim_off;
SET LOCAL inbox.direct_insert = on;

--
-- A CHECK constraint of a known name with another expression
--
ROLLBACK TO SAVEPOINT clean;
ALTER TABLE inbox.entries DROP CONSTRAINT entries_message_id_length,
	ADD CONSTRAINT entries_message_id_length CHECK (octet_length(message_id) <= 10);
SELECT regress.try_rows($$SELECT inbox_claim('guard', 'longer-than-ten-bytes')$$) AS claim;
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('guard', ARRAY['short', 'longer-than-ten-bytes'])$$) AS claim_many;
SELECT regress.try_rows($$SELECT inbox_receive('guard', 'longer-than-ten-bytes', '{}'::jsonb)$$) AS receive;
SET LOCAL inbox.direct_insert = off;
SELECT regress.try_rows($$SELECT inbox_claim('guard', 'longer-than-ten-bytes')$$) AS claim_off;
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('guard', ARRAY['short', 'longer-than-ten-bytes'])$$) AS claim_many_off;
SET LOCAL inbox.direct_insert = on;
-- A key it accepts is written through SPI all the same
SELECT regress.path($$SELECT inbox_claim('guard', 'short')$$) AS claim;
-- The canonical expression again, spelt without the qualifications: the
-- same expression, and direct writes again
ALTER TABLE inbox.entries DROP CONSTRAINT entries_message_id_length,
	ADD CONSTRAINT entries_message_id_length CHECK (octet_length(message_id) <= 1024);
SELECT regress.path($$SELECT inbox_claim('guard', 'restored')$$) AS claim;
-- NOT VALID: it still refuses new rows, but rows that break it may exist,
-- and an UPDATE of them fails.  Validated, direct writes again.
ALTER TABLE inbox.entries DROP CONSTRAINT entries_message_id_length,
	ADD CONSTRAINT entries_message_id_length CHECK (octet_length(message_id) <= 1024) NOT VALID;
SELECT regress.path($$SELECT inbox_claim('guard', 'not-valid')$$) AS claim;
ALTER TABLE inbox.entries VALIDATE CONSTRAINT entries_message_id_length;
SELECT regress.path($$SELECT inbox_claim('guard', 'validated')$$) AS claim;

--
-- A NOT NULL added to a column a claim may leave NULL
--
ROLLBACK TO SAVEPOINT clean;
ALTER TABLE inbox.entries ALTER COLUMN payload_hash SET NOT NULL;
SELECT regress.try_rows($$SELECT inbox_claim('guard', 'no-hash')$$) AS claim;
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('guard', ARRAY['no-hash'])$$) AS claim_many;
SET LOCAL inbox.direct_insert = off;
SELECT regress.try_rows($$SELECT inbox_claim('guard', 'no-hash')$$) AS claim_off;
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('guard', ARRAY['no-hash'])$$) AS claim_many_off;
SET LOCAL inbox.direct_insert = on;
SELECT regress.path($$SELECT inbox_claim('guard', 'hashed', '\x01')$$) AS claim;
ALTER TABLE inbox.entries ALTER COLUMN payload_hash DROP NOT NULL;
SELECT regress.path($$SELECT inbox_claim('guard', 'no-hash')$$) AS claim;

--
-- A completion: a CHECK on the columns it sets, under a known name
--
ROLLBACK TO SAVEPOINT clean;
SELECT inbox_receive('guard', 'to-complete', '{}'::jsonb);
SELECT message_id FROM inbox_take('guard');
ALTER TABLE inbox.entries DROP CONSTRAINT entries_bucket,
	ADD CONSTRAINT entries_bucket CHECK (state <> 'd' OR result IS NOT NULL);
SELECT regress.try($$SELECT inbox_complete('guard', 'to-complete')$$) AS complete;
SET LOCAL inbox.direct_insert = off;
SELECT regress.try($$SELECT inbox_complete('guard', 'to-complete')$$) AS complete_off;
SET LOCAL inbox.direct_insert = on;
SELECT regress.try($$SELECT inbox_complete('guard', 'to-complete', '{"done": true}')$$) AS complete;
SELECT state, result FROM inbox.entries WHERE scope = 'guard' AND message_id = 'to-complete';
-- NOT VALID, where it matters: an UPDATE tests its new version of a row
-- that the constraint never tested, here one written while it was dropped
ROLLBACK TO SAVEPOINT clean;
ALTER TABLE inbox.entries DROP CONSTRAINT entries_message_id_length;
INSERT INTO inbox.entries (scope, message_id, bucket, state, receipt, due)
SELECT 'guard', m, inbox.bucket('guard', m), 'r', '4e0b7b1c-0000-4000-8000-000000000001', now()
FROM repeat('m', 1100) AS m;
ALTER TABLE inbox.entries ADD CONSTRAINT entries_message_id_length
	CHECK (pg_catalog.octet_length(message_id) OPERATOR(pg_catalog.<=) 1024) NOT VALID;
SELECT left(regress.try($$SELECT inbox_complete('guard', '4e0b7b1c-0000-4000-8000-000000000001'::uuid)$$), 90) AS complete;
SET LOCAL inbox.direct_insert = off;
SELECT left(regress.try($$SELECT inbox_complete('guard', '4e0b7b1c-0000-4000-8000-000000000001'::uuid)$$), 90) AS complete_off;
SET LOCAL inbox.direct_insert = on;

--
-- The function the CHECK entries_bucket calls, replaced
--
ROLLBACK TO SAVEPOINT clean;
CREATE OR REPLACE FUNCTION inbox.bucket(scope text, message_id text) RETURNS smallint
LANGUAGE sql IMMUTABLE STRICT AS $$ SELECT (-1)::smallint $$;
SELECT regress.try_rows($$SELECT inbox_claim('guard', 'replaced')$$) AS claim;
SET LOCAL inbox.direct_insert = off;
SELECT regress.try_rows($$SELECT inbox_claim('guard', 'replaced')$$) AS claim_off;
SET LOCAL inbox.direct_insert = on;
ROLLBACK TO SAVEPOINT clean;
SELECT regress.path($$SELECT inbox_claim('guard', 'replaced')$$) AS claim_restored;

--
-- Defaults, type modifiers, triggers: what the SQL statement applies
--
ROLLBACK TO SAVEPOINT clean;
ALTER TABLE inbox.entries ALTER COLUMN state SET DEFAULT 'p';
SELECT regress.path($$SELECT inbox_claim('guard', 'default')$$) AS claim;
SELECT state FROM inbox.entries WHERE scope = 'guard' AND message_id = 'default';
ROLLBACK TO SAVEPOINT clean;
-- Only the parent's: a batch through inbox.entries gets it, a single
-- claim through its leaf does not, both ways
ALTER TABLE ONLY inbox.entries ALTER COLUMN state SET DEFAULT 'p';
SELECT regress.path($$SELECT count(*) FROM inbox_claim_many('guard', ARRAY['batch-default'])$$) AS claim_many;
SELECT regress.path($$SELECT inbox_claim('guard', 'leaf-default')$$) AS claim;
SET LOCAL inbox.direct_insert = off;
SELECT regress.path($$SELECT count(*) FROM inbox_claim_many('guard', ARRAY['batch-default-off'])$$) AS claim_many_off;
SELECT regress.path($$SELECT inbox_claim('guard', 'leaf-default-off')$$) AS claim_off;
SET LOCAL inbox.direct_insert = on;
SELECT message_id, state FROM inbox.entries WHERE scope = 'guard' ORDER BY 1;
ROLLBACK TO SAVEPOINT clean;
-- A type modifier, which the UPDATE would apply to finished_at
SELECT inbox_receive('guard', 'typmod', '{}'::jsonb);
SELECT message_id FROM inbox_take('guard');
ALTER TABLE inbox.entries ALTER COLUMN finished_at TYPE timestamptz(0);
SELECT regress.path($$SELECT inbox_complete('guard', 'typmod')$$) AS complete;
ROLLBACK TO SAVEPOINT clean;
CREATE FUNCTION regress.entries_statement() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RAISE NOTICE 'statement trigger on %', TG_TABLE_NAME; RETURN NULL; END $$;
CREATE TRIGGER entries_statement AFTER INSERT ON inbox.entries
	FOR EACH STATEMENT EXECUTE FUNCTION regress.entries_statement();
SELECT regress.path($$SELECT count(*) FROM inbox_claim_many('guard', ARRAY['triggered'])$$) AS claim_many;
SET LOCAL inbox.direct_insert = off;
SELECT regress.path($$SELECT count(*) FROM inbox_claim_many('guard', ARRAY['triggered-off'])$$) AS claim_many_off;
SET LOCAL inbox.direct_insert = on;

--
-- A leaf attached for other buckets than its number names: the leaf's
-- partition constraint refuses the claim
--
ROLLBACK TO SAVEPOINT clean;
DO $$
DECLARE
	leaf int := inbox.bucket('guard', 'x') >> 11;
	other int := (inbox.bucket('guard', 'x') >> 11) # 1;
BEGIN
	EXECUTE format('ALTER TABLE inbox.entries DETACH PARTITION inbox.entries_p%s', leaf);
	EXECUTE format('ALTER TABLE inbox.entries DETACH PARTITION inbox.entries_p%s', other);
	EXECUTE format('ALTER TABLE inbox.entries ATTACH PARTITION inbox.entries_p%s FOR VALUES FROM (%s) TO (%s)',
				   leaf, other * 2048, (other + 1) * 2048);
	EXECUTE format('ALTER TABLE inbox.entries ATTACH PARTITION inbox.entries_p%s FOR VALUES FROM (%s) TO (%s)',
				   other, leaf * 2048, (leaf + 1) * 2048);
END $$;
SELECT regress.try_rows($$SELECT inbox_claim('guard', 'swapped')$$) AS claim;
SET LOCAL inbox.direct_insert = off;
SELECT regress.try_rows($$SELECT inbox_claim('guard', 'swapped')$$) AS claim_off;
SET LOCAL inbox.direct_insert = on;

-- Rolled back: the table as sql/inbox.sql makes it, written directly
ROLLBACK;
SELECT regress.path($$SELECT inbox_claim('guard', 'after')$$) AS claim;
SELECT inbox_drop_scope('guard');
DROP FUNCTION regress.path(text);
RESET track_functions;
