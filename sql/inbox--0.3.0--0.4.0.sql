/* inbox--0.3.0--0.4.0.sql: per-scope grants, and DROP EXTENSION keeps the history */

\echo Use "ALTER EXTENSION inbox UPDATE TO '0.4.0'" to load this file. \quit

/*
 * Scope grants.  A scope without a row here is open to every role that may
 * execute the API; once it has one, only the granted roles (and the roles
 * that have their privileges) may act on it.  grantee is a regrole, so that
 * pg_dump writes role names, not OIDs that mean nothing in another cluster.
 * A dropped role leaves its rows behind, pointing at no role: the scope
 * stays closed to everyone not granted, which is the safe side.
 */
CREATE TABLE inbox.scope_grants (
	scope text COLLATE "C" NOT NULL
		CHECK (pg_catalog.octet_length(scope) BETWEEN 1 AND 256),
	grantee regrole NOT NULL,
	granted_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	PRIMARY KEY (scope, grantee)
);
SELECT pg_catalog.pg_extension_config_dump('inbox.scope_grants', '');

-- Every backend caches the table (src/access.c); any change drops the caches.
CREATE FUNCTION inbox.scope_grants_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'inbox_scope_grants_changed'
LANGUAGE C;
REVOKE ALL ON FUNCTION inbox.scope_grants_changed() FROM PUBLIC;

CREATE TRIGGER scope_grants_changed
	AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON inbox.scope_grants
	FOR EACH STATEMENT EXECUTE FUNCTION inbox.scope_grants_changed();

/*
 * Each API function that names a scope becomes an entry point: a SECURITY
 * INVOKER C function that checks the scope grants for the role that called
 * it, then calls the SECURITY DEFINER implementation of the same name and
 * arguments in schema inbox (src/access.c says why it takes two functions).
 *
 * The implementation is a copy of the 0.3.0 function's definition, made
 * here from the catalog, so its code is written once.  The entry point then
 * replaces the function in place: CREATE OR REPLACE keeps its OID, owner
 * and the EXECUTE grants administrators gave on it, so applications keep
 * working across the update, and pg_dump keeps dumping those grants.
 */
DO $$
DECLARE
	fn regprocedure;
	def text;
	header text;
	impl text;
BEGIN
	FOREACH fn IN ARRAY ARRAY[
		'@extschema@.inbox_claim(text, text, bytea)',
		'@extschema@.inbox_status(text, text)',
		'@extschema@.inbox_receive(text, text, jsonb, bytea)',
		'@extschema@.inbox_receive(text, text, bytea, bytea)',
		'@extschema@.inbox_take(text, integer, interval)',
		'@extschema@.inbox_complete(text, text, jsonb)',
		'@extschema@.inbox_fail(text, text, text, interval)',
		'@extschema@.inbox_extend(text, text, interval)',
		'@extschema@.inbox_requeue(text, text)',
		'@extschema@.inbox_set_max_attempts(text, integer)',
		'@extschema@.inbox_result(text, text)',
		'@extschema@.inbox_set_retention(text, interval)',
		'@extschema@.inbox_drop_scope(text)']::regprocedure[]
	LOOP
		SELECT pg_catalog.pg_get_functiondef(p.oid),
			   'CREATE OR REPLACE FUNCTION ' ||
			   pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(p.proname) || '(',
			   'inbox.' || pg_catalog.quote_ident(p.proname)
		  INTO def, header, impl
		  FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
		 WHERE p.oid = fn;
		IF pg_catalog.strpos(def, header) <> 1 THEN
			RAISE EXCEPTION 'unexpected definition of %', fn;
		END IF;
		EXECUTE 'CREATE FUNCTION ' || impl || '(' ||
			pg_catalog.substr(def, pg_catalog.length(header) + 1);

		-- Nobody but its owner may call the implementation directly.
		impl := impl || '(' || pg_catalog.pg_get_function_identity_arguments(fn) || ')';
		EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', impl);
		EXECUTE pg_catalog.format('COMMENT ON FUNCTION %s IS %L', impl,
			'implementation behind the API function of the same name; call that one');
	END LOOP;
END
$$;

-- The entry points, replacing the 0.3.0 functions in place.
CREATE OR REPLACE FUNCTION @extschema@.inbox_claim(scope text, message_id text,
												   payload_hash bytea DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION @extschema@.inbox_status(scope text, message_id text,
													OUT received_at timestamptz,
													OUT payload_hash bytea,
													OUT state text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE
ROWS 1;

CREATE OR REPLACE FUNCTION @extschema@.inbox_receive(scope text, message_id text, payload jsonb,
													 payload_hash bytea DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION @extschema@.inbox_receive(scope text, message_id text, payload bytea,
													 payload_hash bytea DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION @extschema@.inbox_take(scope text, max_messages integer DEFAULT 1,
												  lease interval DEFAULT NULL)
RETURNS TABLE (message_id text, payload jsonb, payload_bytes bytea,
			   attempts integer, received_at timestamptz)
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION @extschema@.inbox_complete(scope text, message_id text,
													  result jsonb DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION @extschema@.inbox_fail(scope text, message_id text, error text,
												  retry_after interval DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION @extschema@.inbox_extend(scope text, message_id text, lease interval)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION @extschema@.inbox_requeue(scope text, message_id text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION @extschema@.inbox_set_max_attempts(scope text, max_attempts integer)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION @extschema@.inbox_result(scope text, message_id text)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C STABLE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION @extschema@.inbox_set_retention(scope text, retention interval)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE OR REPLACE FUNCTION @extschema@.inbox_drop_scope(scope text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

/*
 * inbox_grant and inbox_revoke: the extension's owner or a superuser only.
 * The entry point checks that, for the role that called (a SECURITY
 * DEFINER implementation could not see it).
 */
CREATE FUNCTION inbox.inbox_grant(scope text, role regrole)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM inbox.check_key(inbox_grant.scope, NULL, false);
	IF inbox_grant.role IS NULL THEN
		RAISE EXCEPTION 'role must not be NULL' USING ERRCODE = '22004';
	END IF;
	INSERT INTO inbox.scope_grants AS g (scope, grantee)
	VALUES (inbox_grant.scope, inbox_grant.role)
	ON CONFLICT DO NOTHING;
	RETURN FOUND;
END
$$;

CREATE FUNCTION inbox.inbox_revoke(scope text, role regrole)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	removed boolean;
BEGIN
	PERFORM inbox.check_key(inbox_revoke.scope, NULL, false);
	IF inbox_revoke.role IS NULL THEN
		RAISE EXCEPTION 'role must not be NULL' USING ERRCODE = '22004';
	END IF;
	DELETE FROM inbox.scope_grants AS g
	 WHERE g.scope OPERATOR(pg_catalog.=) inbox_revoke.scope COLLATE "C"
	   AND g.grantee OPERATOR(pg_catalog.=) inbox_revoke.role;
	removed := FOUND;
	-- The last revoke opens the scope to every API user: say so.
	IF removed AND NOT EXISTS (SELECT FROM inbox.scope_grants AS g
								WHERE g.scope OPERATOR(pg_catalog.=) inbox_revoke.scope COLLATE "C") THEN
		RAISE NOTICE 'scope "%" has no grants left', inbox.quote(inbox_revoke.scope)
			USING DETAIL = 'It is now open to every role that may execute the inbox API.';
	END IF;
	RETURN removed;
END
$$;

REVOKE ALL ON FUNCTION inbox.inbox_grant(text, regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_revoke(text, regrole) FROM PUBLIC;

CREATE FUNCTION @extschema@.inbox_grant(scope text, role regrole)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_enter_admin'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_grant(text, regrole) IS
'let a role (and its members) act on a scope; once a scope has grants, nobody else may';

CREATE FUNCTION @extschema@.inbox_revoke(scope text, role regrole)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_enter_admin'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_revoke(text, regrole) IS
'withdraw a scope grant; a scope left without grants is open to every API user';

REVOKE ALL ON FUNCTION @extschema@.inbox_grant(text, regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_revoke(text, regrole) FROM PUBLIC;

/*
 * The operators' views show only the scopes the role querying them may act
 * on (all of them for a superuser).  inbox.scope_visible() runs as that
 * role, because a view calls functions as the role that queries it; it
 * only answers for the role itself, so PUBLIC may execute it.  The views
 * are replaced in place, keeping their columns and grants, by wrapping
 * their 0.3.0 definitions.  They are security barriers: otherwise the
 * planner could run a cheap function of the caller's WHERE clause on rows
 * of other scopes before the filter, and the function could print them.
 */
CREATE FUNCTION inbox.scope_visible(scope text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_scope_visible'
LANGUAGE C STABLE STRICT PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp;

DO $$
DECLARE
	v regclass;
BEGIN
	FOREACH v IN ARRAY ARRAY['@extschema@.inbox_stats',
							 '@extschema@.inbox_dead_letters']::regclass[]
	LOOP
		EXECUTE pg_catalog.format(
			'CREATE OR REPLACE VIEW %s WITH (security_barrier) AS SELECT * FROM (%s) AS v WHERE inbox.scope_visible(v.scope)',
			v, pg_catalog.rtrim(pg_catalog.pg_get_viewdef(v), ';'));
	END LOOP;
END
$$;

-- For administrators: who may act on which scope.
CREATE VIEW @extschema@.inbox_grants AS
SELECT g.scope, g.grantee, g.granted_at
  FROM inbox.scope_grants AS g;

COMMENT ON VIEW @extschema@.inbox_grants IS
'scope grants: a scope listed here is open only to its grantees (and their members)';

REVOKE ALL ON @extschema@.inbox_grants FROM PUBLIC;

/*
 * DROP EXTENSION inbox, and DROP OWNED BY its owner, without CASCADE are
 * refused while entries exist; with CASCADE, and for DROP SCHEMA ... CASCADE
 * of a schema the extension lives in, they warn (src/guard.c).  The trigger
 * belongs to the extension, so it goes with it.
 */
CREATE FUNCTION inbox.guard_drop()
RETURNS event_trigger
AS 'MODULE_PATHNAME', 'inbox_guard_drop'
LANGUAGE C
SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION inbox.guard_drop() FROM PUBLIC;

CREATE EVENT TRIGGER inbox_guard_drop ON ddl_command_start
	WHEN TAG IN ('DROP EXTENSION', 'DROP SCHEMA', 'DROP OWNED')
	EXECUTE FUNCTION inbox.guard_drop();
