--
-- security: application roles act only through the API
--
SET timezone = 'UTC';
\set superuser :USER

CREATE ROLE inbox_regress_app LOGIN;
CREATE SCHEMA app AUTHORIZATION inbox_regress_app;

-- Every function of the extension pins its search_path.  The API (in the
-- extension's schema) is SECURITY DEFINER and not executable by PUBLIC; the
-- internals live in schema inbox, which PUBLIC cannot even look into.
SELECT p.pronamespace::regnamespace AS schema, p.proname, p.prosecdef,
	   p.proconfig = '{"search_path=pg_catalog, pg_temp"}' AS pinned,
	   has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute
FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
WHERE d.refclassid = 'pg_extension'::regclass
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'inbox')
ORDER BY 1, 2;
SELECT has_schema_privilege('public', 'inbox', 'USAGE') AS public_usage_on_inbox;
SELECT c.oid::regclass AS relation, has_table_privilege('public', c.oid, 'SELECT') AS public_select
FROM pg_class c JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid
WHERE d.refclassid = 'pg_extension'::regclass
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'inbox')
  AND c.relkind IN ('r', 'p', 'v')
ORDER BY 1;

-- Without a grant, an application role cannot even call the API.
\c - inbox_regress_app
SELECT regress.try($$SELECT inbox_claim('billing', 'sec-1')$$);
SELECT regress.try($$SELECT * FROM inbox_status('billing', 'sec-1')$$);

\c - :superuser
GRANT EXECUTE ON FUNCTION inbox_claim(text, text, bytea), inbox_status(text, text)
	TO inbox_regress_app;

-- With the grant it claims, and reads status, through the API...
\c - inbox_regress_app
SELECT inbox_claim('billing', 'sec-1', sha256('p'));
SELECT inbox_claim('billing', 'sec-1', sha256('p'));
SELECT state FROM inbox_status('billing', 'sec-1');

-- ...but can neither read nor write the tables, parent or leaf.
SELECT regress.try($$SELECT count(*) FROM inbox.entries$$);
SELECT regress.try($$SELECT count(*) FROM inbox.entries_p0$$);
SELECT regress.try($$INSERT INTO inbox.entries (scope, message_id) VALUES ('billing', 'forged')$$);
SELECT regress.try($$UPDATE inbox.entries SET payload_hash = NULL$$);
SELECT regress.try($$DELETE FROM inbox.entries$$);
SELECT regress.try($$TRUNCATE inbox.entries$$);
SELECT regress.try($$SET search_path = inbox; SELECT count(*) FROM entries$$);
RESET search_path;

-- Shadowing the names the C code uses changes nothing: a table "entries",
-- a function now() and a text "=" operator in a schema put first on the
-- caller's search_path are never used.
CREATE TABLE app.entries (scope text, message_id text, received_at timestamptz,
						  payload_hash bytea, state "char");
CREATE FUNCTION app.now() RETURNS timestamptz LANGUAGE sql AS $$SELECT 'epoch'::timestamptz$$;
CREATE FUNCTION app.always_true(text, text) RETURNS boolean LANGUAGE sql AS $$SELECT true$$;
CREATE OPERATOR app.= (LEFTARG = text, RIGHTARG = text, FUNCTION = app.always_true);
SET search_path = app, pg_catalog, public;
SELECT inbox_claim('billing', 'sec-2');
SELECT inbox_claim('billing', 'sec-2');
SELECT inbox_claim('billing', 'sec-3');
SELECT state, received_at > 'epoch' AS real_time FROM inbox_status('billing', 'sec-3');
SELECT count(*) AS untouched FROM app.entries;
RESET search_path;

-- An operator granted SELECT on the views reads them, and still not the tables.
\c - :superuser
GRANT SELECT ON inbox_stats, inbox_dead_letters TO inbox_regress_app;
\c - inbox_regress_app
SELECT scope, claims > 0 AS counted FROM inbox_stats WHERE scope = 'billing';
SELECT count(*) FROM inbox_dead_letters;
SELECT regress.try($$SELECT count(*) FROM inbox.scopes$$);

\c - :superuser
SET timezone = 'UTC';
-- The claims above landed in the real table, with real timestamps.
SELECT message_id, received_at > 'epoch' AS real_time FROM inbox.entries
WHERE scope = 'billing' AND message_id LIKE 'sec-%' ORDER BY 1;

DROP SCHEMA app CASCADE;
DROP OWNED BY inbox_regress_app;
DROP ROLE inbox_regress_app;
