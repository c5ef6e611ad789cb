/*
 * inbox--1.0.0--1.1.0.sql: update from 1.0.0 to 1.1.0, literal.
 *
 * 1.1.0 adds the grant bundles: inbox_grant_bundle, inbox_revoke_bundle
 * and the view inbox_bundles.  The library serves the SQL of 1.0.0 and
 * 1.1.0 through the same entry points, so nothing else changes.
 */

-- complain if the script is sourced in psql rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION inbox UPDATE TO '1.1.0'" to load this file. \quit

/* ------------------------------------------------------------------------
 * Grant bundles
 *
 * A bundle is the set of API functions and views one kind of role needs:
 * consumer (claims), receiver (receives), worker (takes, polls,
 * completions, failures and lease extensions), streams (offset claims)
 * and operator (the views and requeue).  inbox_grant_bundle and
 * inbox_revoke_bundle grant or revoke all of a bundle at once; they
 * belong to the extension's owner, whose privileges their entry point
 * checks as it does for inbox_grant.
 *
 * inbox.bundle_objects says which object is in which bundle; an object is
 * in one bundle at most.  The functions no bundle holds (settings, scope
 * grants, purge, forget, distribute, the bundles' own functions) are the
 * owner's alone.
 *
 * A role holds a bundle when it holds a privilege, granted directly, on
 * every object in it.  An update script puts each object it creates into
 * a bundle with inbox.bundle_add, which grants the new object to the roles
 * that hold the bundle, so that an update never leaves a role with part
 * of what it was given.
 * ------------------------------------------------------------------------ */

CREATE TABLE inbox.bundle_objects (
	bundle text COLLATE pg_catalog."C" NOT NULL,
	object_type text COLLATE pg_catalog."C" NOT NULL,
	object text COLLATE pg_catalog."C" NOT NULL,
	CONSTRAINT bundle_objects_pkey PRIMARY KEY (object_type, object),
	CONSTRAINT bundle_objects_object_type CHECK (object_type IN ('function', 'view'))
);

COMMENT ON TABLE inbox.bundle_objects IS
'which API function (as a regprocedure) or view (as a regclass) each grant bundle holds';

REVOKE ALL ON TABLE inbox.bundle_objects FROM PUBLIC;

-- The object's OID: its regprocedure for a function, its regclass for a view
CREATE FUNCTION inbox.bundle_object_oid(p_object_type text, p_object text)
RETURNS oid
LANGUAGE sql STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT CASE p_object_type
			   WHEN 'function' THEN p_object::pg_catalog.regprocedure::pg_catalog.oid
			   ELSE p_object::pg_catalog.regclass::pg_catalog.oid
		   END
$$;

-- The roles, other than the objects' owner and PUBLIC, that hold a
-- privilege granted directly on every object of the bundle; none when the
-- bundle is empty.
CREATE FUNCTION inbox.bundle_holders(p_bundle text)
RETURNS SETOF regrole
LANGUAGE sql STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT a.grantee::pg_catalog.regrole
	  FROM inbox.bundle_objects AS b
	 CROSS JOIN LATERAL (
		SELECT x.grantee, x.privilege_type, p.proowner AS owner
		  FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS x
		 WHERE b.object_type OPERATOR(pg_catalog.=) 'function'
		   AND p.oid OPERATOR(pg_catalog.=) inbox.bundle_object_oid(b.object_type, b.object)
		UNION ALL
		SELECT x.grantee, x.privilege_type, c.relowner
		  FROM pg_catalog.pg_class AS c, pg_catalog.aclexplode(c.relacl) AS x
		 WHERE b.object_type OPERATOR(pg_catalog.=) 'view'
		   AND c.oid OPERATOR(pg_catalog.=) inbox.bundle_object_oid(b.object_type, b.object)) AS a
	 WHERE b.bundle OPERATOR(pg_catalog.=) p_bundle
	   AND a.privilege_type OPERATOR(pg_catalog.=) ANY (ARRAY['EXECUTE', 'SELECT'])
	   AND a.grantee OPERATOR(pg_catalog.<>) 0
	   AND a.grantee OPERATOR(pg_catalog.<>) a.owner
	 GROUP BY a.grantee
	HAVING pg_catalog.count(DISTINCT b.object) OPERATOR(pg_catalog.=)
		   (SELECT pg_catalog.count(*) FROM inbox.bundle_objects AS o
			 WHERE o.bundle OPERATOR(pg_catalog.=) p_bundle)
$$;

-- The GRANT or REVOKE of one object of a bundle for one role
CREATE FUNCTION inbox.bundle_privilege_sql(p_grant boolean, p_object_type text,
										   p_object text, p_role regrole)
RETURNS text
LANGUAGE sql STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT pg_catalog.format('%s %s ON %s %s %s',
							 CASE WHEN p_grant THEN 'GRANT' ELSE 'REVOKE' END,
							 CASE p_object_type WHEN 'function' THEN 'EXECUTE' ELSE 'SELECT' END,
							 CASE p_object_type
								 WHEN 'function' THEN 'FUNCTION ' OPERATOR(pg_catalog.||)
									  inbox.bundle_object_oid(p_object_type, p_object)::pg_catalog.regprocedure::pg_catalog.text
								 ELSE 'TABLE ' OPERATOR(pg_catalog.||)
									  inbox.bundle_object_oid(p_object_type, p_object)::pg_catalog.regclass::pg_catalog.text
							 END,
							 CASE WHEN p_grant THEN 'TO' ELSE 'FROM' END,
							 p_role::pg_catalog.text)
$$;

-- Put a new object into a bundle, and grant it to the roles that hold the
-- bundle.  Update scripts call it for the objects they create, after the
-- object's own GRANTs and REVOKEs.  A GRANT run by an extension script is
-- recorded as one of the object's initial privileges (pg_init_privs), which
-- pg_dump leaves out: the grants to holders are the administrator's, so
-- the object's initial privileges are put back as the script set them,
-- and pg_dump then dumps the grants.
CREATE FUNCTION inbox.bundle_add(p_bundle text, p_object_type text, p_object text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	holder regrole;
	object_oid oid := inbox.bundle_object_oid(p_object_type, p_object);
	catalog oid := CASE p_object_type WHEN 'function' THEN 'pg_catalog.pg_proc'::regclass
									  ELSE 'pg_catalog.pg_class'::regclass END;
	init pg_catalog.pg_init_privs;
BEGIN
	SELECT i.* INTO init FROM pg_catalog.pg_init_privs AS i
	 WHERE (i.objoid, i.classoid, i.objsubid) OPERATOR(pg_catalog.=) (object_oid, catalog, 0);
	FOR holder IN SELECT h FROM inbox.bundle_holders(p_bundle) AS h
	LOOP
		EXECUTE inbox.bundle_privilege_sql(true, p_object_type, p_object, holder);
	END LOOP;
	-- The initial privileges as they were before the grants: none, or the row
	DELETE FROM pg_catalog.pg_init_privs AS i
	 WHERE (i.objoid, i.classoid, i.objsubid) OPERATOR(pg_catalog.=) (object_oid, catalog, 0);
	IF init.objoid IS NOT NULL THEN
		INSERT INTO pg_catalog.pg_init_privs VALUES (init.*);
	END IF;
	INSERT INTO inbox.bundle_objects (bundle, object_type, object)
	VALUES (p_bundle, p_object_type, p_object);
END
$$;

-- Grant (p_grant) or revoke every object of a bundle for a role
CREATE FUNCTION inbox.bundle_apply(p_role regrole, p_bundle text, p_grant boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	o record;
BEGIN
	IF p_role IS NULL THEN
		RAISE EXCEPTION 'role must not be NULL' USING ERRCODE = '22004';
	END IF;
	IF p_bundle IS NULL THEN
		RAISE EXCEPTION 'bundle must not be NULL' USING ERRCODE = '22004';
	END IF;
	IF NOT EXISTS (SELECT FROM inbox.bundle_objects AS b
					WHERE b.bundle OPERATOR(pg_catalog.=) p_bundle) THEN
		RAISE EXCEPTION 'unknown inbox grant bundle "%"', p_bundle
			USING ERRCODE = '22023',
				  HINT = 'The bundles are ' OPERATOR(pg_catalog.||)
						 (SELECT pg_catalog.string_agg(DISTINCT b.bundle, ', ' ORDER BY b.bundle)
							FROM inbox.bundle_objects AS b) OPERATOR(pg_catalog.||) '.';
	END IF;
	-- The owner has every privilege on its objects: nothing to grant, and
	-- a revoke would take from it what every entry point relies on.
	IF p_role OPERATOR(pg_catalog.=) (SELECT e.extowner FROM pg_catalog.pg_extension AS e
									   WHERE e.extname OPERATOR(pg_catalog.=) 'inbox') THEN
		RAISE NOTICE 'role % owns extension inbox and keeps every privilege on it', p_role;
		RETURN;
	END IF;
	FOR o IN SELECT b.object_type, b.object FROM inbox.bundle_objects AS b
			  WHERE b.bundle OPERATOR(pg_catalog.=) p_bundle
			  ORDER BY b.object_type, b.object
	LOOP
		EXECUTE inbox.bundle_privilege_sql(p_grant, o.object_type, o.object, p_role);
	END LOOP;
END
$$;

CREATE FUNCTION inbox.inbox_grant_bundle(role regrole, bundle text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM inbox.bundle_apply(inbox_grant_bundle.role, inbox_grant_bundle.bundle, true);
END
$$;

CREATE FUNCTION inbox.inbox_revoke_bundle(role regrole, bundle text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM inbox.bundle_apply(inbox_revoke_bundle.role, inbox_revoke_bundle.bundle, false);
END
$$;

COMMENT ON FUNCTION inbox.inbox_grant_bundle(regrole, text) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_revoke_bundle(regrole, text) IS
'implementation behind the API function of the same name; call that one';

CREATE FUNCTION @extschema@.inbox_grant_bundle(role regrole, bundle text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_admin'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_grant_bundle(regrole, text) IS
'grant a role every function and view of a bundle: consumer, receiver, worker, streams or operator';

CREATE FUNCTION @extschema@.inbox_revoke_bundle(role regrole, bundle text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_admin'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_revoke_bundle(regrole, text) IS
'revoke from a role every function and view of a bundle';

-- Which bundle holds which object, for administrators
CREATE VIEW @extschema@.inbox_bundles AS
	SELECT b.bundle, b.object_type,
		   CASE b.object_type
			   WHEN 'function' THEN inbox.bundle_object_oid(b.object_type, b.object)::regprocedure::text
			   ELSE inbox.bundle_object_oid(b.object_type, b.object)::regclass::text
		   END AS object
	  FROM inbox.bundle_objects AS b;

COMMENT ON VIEW @extschema@.inbox_bundles IS
'the grant bundles: which function or view each holds';

-- The objects of 1.0.0, each in its bundle.  Roles were given them one by
-- one on 1.0.0: nothing is granted here.
INSERT INTO inbox.bundle_objects (bundle, object_type, object) VALUES
	('consumer', 'function', '@extschema@.inbox_claim(text, text, bytea)'),
	('consumer', 'function', '@extschema@.inbox_claim_many(text, text[], bytea[], text)'),
	('consumer', 'function', '@extschema@.inbox_status(text, text)'),
	('consumer', 'function', '@extschema@.inbox_result(text, text)'),
	('receiver', 'function', '@extschema@.inbox_receive(text, text, jsonb, bytea)'),
	('receiver', 'function', '@extschema@.inbox_receive(text, text, bytea, bytea)'),
	('receiver', 'function', '@extschema@.inbox_receive(text, text, jsonb, bytea, timestamptz)'),
	('receiver', 'function', '@extschema@.inbox_receive(text, text, bytea, bytea, timestamptz)'),
	('receiver', 'function', '@extschema@.inbox_receive_many(text, text[], jsonb[], bytea[], timestamptz, text)'),
	('receiver', 'function', '@extschema@.inbox_receive_many(text, text[], bytea[], bytea[], timestamptz, text)'),
	('worker', 'function', '@extschema@.inbox_take(text, integer, interval)'),
	('worker', 'function', '@extschema@.inbox_poll(text, integer, interval, interval)'),
	('worker', 'function', '@extschema@.inbox_complete(text, text, jsonb)'),
	('worker', 'function', '@extschema@.inbox_complete(text, uuid, jsonb)'),
	('worker', 'function', '@extschema@.inbox_fail(text, text, text, interval)'),
	('worker', 'function', '@extschema@.inbox_fail(text, uuid, text, interval)'),
	('worker', 'function', '@extschema@.inbox_extend(text, text, interval)'),
	('worker', 'function', '@extschema@.inbox_extend(text, uuid, interval)'),
	('streams', 'function', '@extschema@.inbox_claim_offset(text, text, bigint, boolean)'),
	('streams', 'function', '@extschema@.inbox_claim_offsets(text, text, bigint, bigint, boolean)'),
	('operator', 'view', '@extschema@.inbox_stats'),
	('operator', 'view', '@extschema@.inbox_dead_letters'),
	('operator', 'view', '@extschema@.inbox_grants'),
	('operator', 'view', '@extschema@.inbox_forget_log'),
	('operator', 'function', '@extschema@.inbox_requeue(text, text)');


REVOKE ALL ON FUNCTION inbox.bundle_object_oid(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.bundle_holders(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.bundle_privilege_sql(boolean, text, text, regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.bundle_add(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.bundle_apply(regrole, text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_grant_bundle(regrole, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_revoke_bundle(regrole, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_grant_bundle(regrole, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_revoke_bundle(regrole, text) FROM PUBLIC;
REVOKE ALL ON @extschema@.inbox_bundles FROM PUBLIC;

-- New in 1.1.0: granted to the roles that hold the rest of its bundle
SELECT inbox.bundle_add('operator', 'view', '@extschema@.inbox_bundles');
