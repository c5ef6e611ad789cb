--
-- claim: the contract of inbox_claim in the caller's transaction
--
SET timezone = 'UTC';
\set superuser :USER

-- The API is callable unqualified with the default search_path.
SHOW search_path;
SELECT inbox_claim('billing', 'INVOIC-000123', sha256('payload 123'));

-- A committed claim is a duplicate: false by default.
SELECT inbox_claim('billing', 'INVOIC-000123', sha256('payload 123'));
SELECT inbox_claim('billing', 'INVOIC-000123');   -- no hash: no content check

-- The claim rolls back with the caller's transaction: no trace is left,
-- so the redelivery is processed as new.
BEGIN;
SELECT inbox_claim('billing', 'INVOIC-000124', sha256('payload 124'));
ROLLBACK;
SELECT count(*) FROM inbox.entries WHERE message_id = 'INVOIC-000124';
SELECT inbox_claim('billing', 'INVOIC-000124', sha256('payload 124'));

-- A claim and the business effect commit together.
CREATE TABLE invoices (id serial, message_id text, amount numeric);
BEGIN;
SELECT inbox_claim('billing', 'INVOIC-000125') AS fresh \gset
\if :fresh
INSERT INTO invoices (message_id, amount) VALUES ('INVOIC-000125', 10);
\endif
COMMIT;
BEGIN;
SELECT inbox_claim('billing', 'INVOIC-000125') AS fresh \gset
\if :fresh
INSERT INTO invoices (message_id, amount) VALUES ('INVOIC-000125', 10);
\endif
COMMIT;
SELECT message_id, count(*) FROM invoices GROUP BY 1;

-- A second claim inside the transaction that made the first is a duplicate.
BEGIN;
SELECT inbox_claim('billing', 'INVOIC-000126');
SELECT inbox_claim('billing', 'INVOIC-000126');
COMMIT;

-- A claim undone by a rolled-back savepoint is gone; the next one wins.
BEGIN;
SAVEPOINT s;
SELECT inbox_claim('billing', 'INVOIC-000127');
ROLLBACK TO SAVEPOINT s;
SELECT inbox_claim('billing', 'INVOIC-000127');
COMMIT;

-- Identity is (scope, message_id): other scopes process the same id.
SELECT inbox_claim('inventory-reservation', 'INVOIC-000123');
SELECT inbox_claim('inventory-reservation', 'INVOIC-000123');

-- Keys compare byte-wise: case, accents in two normal forms, and
-- trailing spaces all make different keys.
SELECT inbox_claim('billing', 'invoic-000123');
SELECT inbox_claim('billing', 'INVOIC-000123 ');
SELECT inbox_claim('billing', U&'caf\00E9'), inbox_claim('billing', U&'cafe\0301');
SELECT inbox_claim('Billing', 'INVOIC-000123');

--
-- Payload mismatch: IB002 whatever inbox.on_duplicate says, with both
-- hashes and the first-received time.
--
SELECT regress.try($$SELECT inbox_claim('billing', 'INVOIC-000123', sha256('tampered'))$$);
SET inbox.on_duplicate = raise;
SELECT regress.try($$SELECT inbox_claim('billing', 'INVOIC-000123', sha256('tampered'))$$);
RESET inbox.on_duplicate;
\set VERBOSITY terse
SELECT inbox_claim('billing', 'INVOIC-000123', sha256('tampered'));
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
-- The stored entry is unchanged by the rejected delivery.
SELECT payload_hash = sha256('payload 123') AS unchanged
FROM inbox.entries WHERE scope = 'billing' AND message_id = 'INVOIC-000123';
-- A NULL on either side skips the content check (documented).
SELECT inbox_claim('billing', 'INVOIC-000125', sha256('anything'));
SELECT inbox_claim('billing', 'INVOIC-000123', NULL);
-- The mismatch is also caught inside the claiming transaction.
BEGIN;
SELECT inbox_claim('billing', 'INVOIC-000128', sha256('one'));
SELECT regress.try($$SELECT inbox_claim('billing', 'INVOIC-000128', sha256('two'))$$);
ROLLBACK;

--
-- inbox.on_duplicate: return (default) or raise IB001.
--
SHOW inbox.on_duplicate;
SET inbox.on_duplicate = raise;
SELECT regress.try($$SELECT inbox_claim('billing', 'INVOIC-000123', sha256('payload 123'))$$);
-- The full message as a consumer sees it.
\set VERBOSITY terse
SELECT inbox_claim('billing', 'INVOIC-000123');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
-- First claims still return true under raise.
SELECT inbox_claim('billing', 'INVOIC-000129');
RESET inbox.on_duplicate;

-- SET LOCAL lasts for one transaction.
BEGIN;
SET LOCAL inbox.on_duplicate = raise;
SELECT regress.try($$SELECT inbox_claim('billing', 'INVOIC-000123')$$);
COMMIT;
SELECT inbox_claim('billing', 'INVOIC-000123');

-- Per role and per database.
CREATE ROLE inbox_regress_raiser LOGIN;
ALTER ROLE inbox_regress_raiser SET inbox.on_duplicate = raise;
GRANT EXECUTE ON FUNCTION inbox_claim(text, text, bytea) TO inbox_regress_raiser;
SET ROLE inbox_regress_raiser;
SHOW inbox.on_duplicate;   -- SET ROLE does not apply role settings
RESET ROLE;
\c - inbox_regress_raiser
SHOW inbox.on_duplicate;
SELECT regress.try($$SELECT inbox_claim('billing', 'INVOIC-000123')$$);
\c - :superuser
ALTER DATABASE :DBNAME SET inbox.on_duplicate = raise;
\c
SET timezone = 'UTC';
SHOW inbox.on_duplicate;
ALTER DATABASE :DBNAME RESET inbox.on_duplicate;
\c
SET timezone = 'UTC';
SHOW inbox.on_duplicate;
DROP OWNED BY inbox_regress_raiser;
DROP ROLE inbox_regress_raiser;

-- Settings are checked: bad values and unknown inbox.* names are refused.
SET inbox.on_duplicate = 'ignore';
SET inbox.claim_timeout = -1;
SET inbox.claim_timeout = '1 fortnight';
SET inbox.claim_timeout = '2s';
SHOW inbox.claim_timeout;
RESET inbox.claim_timeout;
SET inbox.no_such_setting = 1;

--
-- Storage: a partitioned table whose unique index arbitrates.
--
SELECT c.relname, c.relkind, pg_get_partkeydef(c.oid) AS partkey
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'inbox' AND c.relname = 'entries';
SELECT count(*) AS leaves FROM pg_inherits WHERE inhparent = 'inbox.entries'::regclass;
SELECT indexrelid::regclass, indisunique, indisprimary
FROM pg_index WHERE indrelid = 'inbox.entries'::regclass ORDER BY 1;
SELECT attname, collname FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
WHERE attrelid = 'inbox.entries'::regclass AND attnum > 0 ORDER BY attnum;
SELECT attname, format_type(atttypid, atttypmod) AS type, attnotnull
FROM pg_attribute WHERE attrelid = 'inbox.entries'::regclass AND attnum > 0 ORDER BY attnum;
-- Every leaf is kept by pg_dump.
SELECT unnest(extconfig)::regclass AS dumped FROM pg_extension WHERE extname = 'inbox' ORDER BY 1;
-- The received time and the hash are stored.
SELECT scope, message_id, received_at <= now() AS received_at_set, payload_hash IS NOT NULL AS hashed, state
FROM inbox.entries WHERE message_id IN ('INVOIC-000123', 'INVOIC-000124') ORDER BY 1, 2;
-- Scopes are spread over the leaves, and each scope lives in one leaf.
SELECT count(DISTINCT tableoid) > 1 AS spread,
       (SELECT count(*) FROM (SELECT scope FROM inbox.entries GROUP BY scope
                              HAVING count(DISTINCT tableoid) > 1) AS s) AS split_scopes
FROM inbox.entries;
-- Each entry sits in the leaf its bucket's high bits name, and its bucket
-- is inbox.bucket of its key.
SELECT count(*) FILTER (WHERE tableoid::regclass::text <> 'inbox.entries_p' || (bucket >> 11)
                           OR bucket <> inbox.bucket(scope, message_id)) AS misplaced
FROM inbox.entries;
-- The bucket is fixed for good: stored entries would be stranded by any
-- change to it.  These values are of the UTF-8 bytes, in any encoding.
SELECT inbox.bucket('billing', 'INVOIC-000123') AS b1,
       inbox.bucket('billing', 'INVOIC-000124') AS b2,
       inbox.bucket('a', 'bc') AS a_bc, inbox.bucket('ab', 'c') AS ab_c,
       inbox.bucket('scope', U&'caf\00e9') AS non_ascii;
-- Scopes spread evenly over the 8 leaves; one scope's ids over all 2048
-- values of the low bits, in one leaf.
SELECT count(*) AS leaves, min(n) AS fewest, max(n) AS most
FROM (SELECT inbox.bucket('s' || g, 'm') >> 11, count(*) AS n
      FROM generate_series(1, 80000) g GROUP BY 1) AS b;
SELECT count(*) AS key_bits, min(n) AS fewest, max(n) AS most,
       count(DISTINCT leaf) AS leaves_of_one_scope
FROM (SELECT inbox.bucket('s', 'm' || g) & 2047 AS bits, min(inbox.bucket('s', 'm' || g) >> 11) AS leaf,
             count(*) AS n
      FROM generate_series(1, 80000) g GROUP BY 1) AS b;

--
-- One statement, one round trip: the effect's INSERT carries the claim.
--
CREATE TABLE invoices_one (message_id text, amount int);
\set VERBOSITY terse
-- new: one row
INSERT INTO invoices_one SELECT 'one-1', 10 WHERE inbox_claim('one', 'one-1', '\x01');
-- redelivered: no row
INSERT INTO invoices_one SELECT 'one-1', 10 WHERE inbox_claim('one', 'one-1', '\x01');
-- other content under the same id: IB002, nothing inserted
INSERT INTO invoices_one SELECT 'one-1', 99 WHERE inbox_claim('one', 'one-1', '\x02');
-- under inbox.on_duplicate = raise, the duplicate raises IB001
BEGIN;
SET LOCAL inbox.on_duplicate = 'raise';
INSERT INTO invoices_one SELECT 'one-1', 10 WHERE inbox_claim('one', 'one-1', '\x01');
ROLLBACK;
-- an aborted statement leaves no claim: the next delivery inserts
BEGIN;
INSERT INTO invoices_one SELECT 'one-2', 20 WHERE inbox_claim('one', 'one-2');
ROLLBACK;
INSERT INTO invoices_one SELECT 'one-2', 20 WHERE inbox_claim('one', 'one-2');
SELECT message_id, amount FROM invoices_one ORDER BY 1;
\set VERBOSITY default
SELECT state FROM inbox_status('one', 'one-1');
DROP TABLE invoices_one;
SELECT inbox_drop_scope('one');

--
-- The two ways a claim writes its entry: without the planner (src/direct.c,
-- the default) and through SPI (inbox.direct_insert = off).  The outcomes,
-- and the entries, are the same, and each sees the other's.
--
SET inbox.direct_insert = off;
SELECT inbox_claim('paths', 'spi-1', '\x01') AS spi_new;
SELECT inbox_claim('paths', 'spi-1', '\x01') AS spi_duplicate;
RESET inbox.direct_insert;
SELECT inbox_claim('paths', 'spi-1', '\x01') AS direct_sees_spi;
SELECT inbox_claim('paths', 'direct-1', '\x01') AS direct_new;
SET inbox.direct_insert = off;
SELECT inbox_claim('paths', 'direct-1', '\x01') AS spi_sees_direct;
\set VERBOSITY terse
SELECT inbox_claim('paths', 'direct-1', '\x02') AS spi_mismatch;
RESET inbox.direct_insert;
SELECT inbox_claim('paths', 'spi-1', '\x02') AS direct_mismatch;
\set VERBOSITY default
BEGIN;
SELECT inbox_claim('paths', 'direct-2') AS direct_new, inbox_claim('paths', 'direct-2') AS same_statement;
SET LOCAL inbox.direct_insert = off;
SELECT inbox_claim('paths', 'direct-2') AS spi_same_transaction;
COMMIT;
SELECT message_id, tableoid::regclass AS leaf, bucket = inbox.bucket(scope, message_id) AS bucket_ok,
	   payload_hash, state, num_nulls(payload, payload_bytes, attempts, owner_session, taken_at,
									  lease_until, due, receipt, last_error, result, finished_at) AS nulls
FROM inbox.entries WHERE scope = 'paths' ORDER BY 1;

-- The direct way is taken only for a leaf exactly as sql/inbox.sql makes
-- it; anything else sends the claim through SPI, which does what the
-- table asks: here a CHECK and a trigger added by hand.
ALTER TABLE inbox.entries ADD CONSTRAINT entries_test_check CHECK (message_id <> 'refused');
\set VERBOSITY terse
SELECT inbox_claim('paths', 'refused');
\set VERBOSITY default
ALTER TABLE inbox.entries DROP CONSTRAINT entries_test_check;
CREATE FUNCTION entries_test_trigger() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RAISE NOTICE 'trigger saw %', NEW.message_id; RETURN NEW; END $$;
CREATE TRIGGER entries_test_trigger BEFORE INSERT ON inbox.entries
	FOR EACH ROW EXECUTE FUNCTION entries_test_trigger();
SELECT inbox_claim('paths', 'triggered');
DROP TRIGGER entries_test_trigger ON inbox.entries;
DROP FUNCTION entries_test_trigger();
SELECT inbox_claim('paths', 'refused') AS direct_again;

-- Every index of the leaves holds exactly the entries it should, whichever
-- way they were written (amcheck, heapallindexed): the partial indexes of
-- the deferred mode, which direct.c leaves out for a claim, hold none of
-- them, and a partial index that takes done entries gets them.
CREATE EXTENSION amcheck;
CREATE INDEX entries_test_done ON inbox.entries (message_id) WHERE state = 'd';
SELECT inbox_claim('paths', 'indexed-' || g) AS direct_new FROM generate_series(1, 3) g;
SELECT inbox_receive('paths', 'received-1', '{}'::jsonb) AS received;
SELECT count(*) AS indexes_checked
FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
WHERE c.relnamespace = 'inbox'::regnamespace AND c.relname LIKE 'entries_p_'
  AND bt_index_check(i.indexrelid, true) IS NOT NULL;
SELECT count(*) AS done_in_test_index FROM inbox.entries
WHERE state = 'd' AND message_id LIKE 'indexed-%' AND scope = 'paths';
DROP INDEX inbox.entries_test_done;
DROP EXTENSION amcheck;

-- A read-only transaction refuses a claim, a duplicate's too, as it
-- refuses the INSERT, both ways.
\set VERBOSITY terse
BEGIN READ ONLY;
SELECT inbox_claim('paths', 'read-only');
ROLLBACK;
BEGIN READ ONLY;
SELECT inbox_claim('paths', 'direct-1', '\x01');
ROLLBACK;
BEGIN READ ONLY;
SELECT * FROM inbox_claim_many('paths', ARRAY['read-only']);
ROLLBACK;
BEGIN READ ONLY;
SET LOCAL inbox.direct_insert = off;
SELECT inbox_claim('paths', 'direct-1', '\x01');
ROLLBACK;
\set VERBOSITY default
SELECT count(*) AS read_only_entries FROM inbox.entries WHERE message_id = 'read-only';

-- The setting is a superuser's: both ways arbitrate alike, but only one is
-- fast, and it is not an application's to choose.
CREATE ROLE paths_app;
SET ROLE paths_app;
SET inbox.direct_insert = off;
RESET ROLE;
DROP ROLE paths_app;
SELECT inbox_drop_scope('paths');
