/*
 * inbox--1.0.0--1.1.0.sql: update from 1.0.0 to 1.1.0, literal.
 *
 * 1.1.0 adds the grant bundles: inbox_grant_bundle, inbox_revoke_bundle
 * and the view inbox_bundles; content windows: inbox_set_content_window,
 * the view inbox_content_duplicates and inbox_stats.content_duplicates;
 * and it enforces the documented ranges of the durations, of
 * inbox_set_max_attempts and of inbox_set_retention in the functions
 * written in SQL (the C ones enforce them for 1.0.0's SQL too).
 * The library serves the SQL of 1.0.0 and 1.1.0 through the same entry
 * points; 1.1.0 binds more: inbox.check_duration's, and the content
 * windows' trigger and counter.
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

/* ------------------------------------------------------------------------
 * Ranges
 *
 * The documented ranges, enforced: a lease, a wait or a retry delay with a
 * part in months is refused (it would run as another length than it was
 * checked as), and one with days runs as long as it was checked to be;
 * inbox_set_max_attempts keeps to the range of inbox.max_attempts;
 * inbox_set_retention checks its bounds as the purge measures them too.
 * The functions are those of inbox.sql, word for word.
 * ------------------------------------------------------------------------ */

CREATE FUNCTION inbox.check_duration(value interval, argname text)
RETURNS interval
AS 'MODULE_PATHNAME', 'inbox_check_duration_sql'
LANGUAGE C STABLE STRICT
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION inbox.fail_message(p_scope text, p_id text, p_receipt uuid,
								   p_error text, p_retry_after interval)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	new_state "char";
	allowed integer;
	-- The times are computed before the UPDATE, and passed to it as
	-- values: Citus refuses a volatile function, and a stable one inside a
	-- CASE, in an UPDATE of a distributed table (docs/scale-out.md).
	finished timestamptz := pg_catalog.now();
	retry_at timestamptz;
	retry_span interval;
	me bigint := CASE WHEN p_receipt IS NULL THEN inbox.session_key() END;
BEGIN
	-- No months, and days of 24 hours: the delay is as long as it was
	-- checked to be (src/keys.c)
	retry_span := inbox.check_duration(p_retry_after, 'retry_after');
	IF retry_span < interval '0' THEN
		RAISE EXCEPTION 'retry_after must not be negative'
			USING ERRCODE = '22023',
				  DETAIL = format('It is %s.', p_retry_after),
				  HINT = 'Pass NULL to make the message takeable again at once.';
	END IF;
	allowed := inbox.max_attempts(p_scope);
	retry_at := pg_catalog.clock_timestamp() + coalesce(retry_span, interval '0');
	-- Before the UPDATE, which locks the message: its due moves, and the
	-- scope's front must hear of it even if this transaction aborts
	-- (src/front.c).  Takes waiting on the scope wake at commit.
	PERFORM inbox.wake_takers(p_scope);
	-- Two statements, so that each finds its row by an index of one leaf
	-- whatever plan_cache_mode says
	IF p_receipt IS NULL THEN
		UPDATE inbox.entries AS e
		   SET state = CASE WHEN coalesce(e.attempts, 0) >= allowed THEN 'x' ELSE 'p' END::"char",
			   due = CASE WHEN coalesce(e.attempts, 0) >= allowed THEN NULL ELSE retry_at END,
			   finished_at = CASE WHEN coalesce(e.attempts, 0) >= allowed THEN finished END,
			   owner_session = NULL, lease_until = NULL, receipt = NULL, last_error = p_error
		 WHERE e.scope OPERATOR(pg_catalog.=) p_scope COLLATE "C"
		   AND e.message_id OPERATOR(pg_catalog.=) p_id COLLATE "C"
		   AND e.bucket OPERATOR(pg_catalog.=) inbox.bucket(p_scope, p_id)
		   AND e.state = 'r' AND e.owner_session = me
		RETURNING e.state INTO new_state;
		IF NOT FOUND THEN
			PERFORM inbox.refuse(p_scope, p_id, 'failed', 'r');
		END IF;
	ELSE
		UPDATE inbox.entries AS e
		   SET state = CASE WHEN coalesce(e.attempts, 0) >= allowed THEN 'x' ELSE 'p' END::"char",
			   due = CASE WHEN coalesce(e.attempts, 0) >= allowed THEN NULL ELSE retry_at END,
			   finished_at = CASE WHEN coalesce(e.attempts, 0) >= allowed THEN finished END,
			   owner_session = NULL, lease_until = NULL, receipt = NULL, last_error = p_error
		 WHERE e.receipt = p_receipt
		   AND e.scope OPERATOR(pg_catalog.=) p_scope COLLATE "C"
		   AND e.state = 'r'
		RETURNING e.state INTO new_state;
		IF NOT FOUND THEN
			PERFORM inbox.refuse_receipt(p_scope, p_receipt, 'failed');
		END IF;
	END IF;
	PERFORM inbox.count_failure(p_scope);
	RETURN inbox.state_name(new_state);
END
$$;

CREATE OR REPLACE FUNCTION inbox.extend_lease(p_scope text, p_id text, p_lease interval)
RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	until timestamptz;
	-- Values, not functions, in the UPDATE: see inbox.fail_message
	me bigint := inbox.session_key();
	lease_span interval;
	lease_end timestamptz;
BEGIN
	-- As the lease of a take (src/deferred.c): no months, days of 24 hours
	lease_span := inbox.check_duration(p_lease, 'lease');
	IF lease_span IS NULL OR lease_span <= interval '0' THEN
		RAISE EXCEPTION 'lease must be positive'
			USING ERRCODE = '22023';
	END IF;
	lease_end := pg_catalog.clock_timestamp() + lease_span;
	-- As in inbox.fail_message: the front, and the takes waiting to
	-- recheck the held message, hear of the new due.
	PERFORM inbox.wake_takers(p_scope);
	-- A message polled under a lease is due when its lease runs out; one
	-- bound to its session stays due from its take (src/deferred.c).
	UPDATE inbox.entries AS e
	   SET lease_until = lease_end,
		   due = CASE WHEN e.receipt IS NULL OR e.lease_until IS NULL THEN e.due ELSE lease_end END
	 WHERE e.scope OPERATOR(pg_catalog.=) p_scope COLLATE "C"
	   AND e.message_id OPERATOR(pg_catalog.=) p_id COLLATE "C"
	   AND e.bucket OPERATOR(pg_catalog.=) inbox.bucket(p_scope, p_id)
	   AND e.state = 'r' AND e.owner_session = me
	RETURNING e.lease_until INTO until;
	IF NOT FOUND THEN
		PERFORM inbox.refuse(p_scope, p_id, 'extended', 'r');
	END IF;
	RETURN until;
END
$$;

CREATE OR REPLACE FUNCTION inbox.inbox_set_max_attempts(scope text, max_attempts integer)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
	lowest integer;
	highest integer;
BEGIN
	PERFORM inbox.check_key(inbox_set_max_attempts.scope, NULL, false);
	-- The range of the setting inbox.max_attempts (src/deferred.c), read
	-- from the setting, which inbox.check_key has loaded the library to
	-- define.  NULL passes: it goes back to the setting.
	SELECT s.min_val::integer, s.max_val::integer INTO STRICT lowest, highest
	  FROM pg_catalog.pg_settings AS s
	 WHERE s.name OPERATOR(pg_catalog.=) 'inbox.max_attempts';
	IF inbox_set_max_attempts.max_attempts NOT BETWEEN lowest AND highest THEN
		RAISE EXCEPTION 'max_attempts must be between % and %', lowest, highest
			USING ERRCODE = '22023',
				  DETAIL = format('It is %s.', inbox_set_max_attempts.max_attempts),
				  HINT = 'That is the range of inbox.max_attempts; pass NULL to go back to the setting.';
	END IF;
	INSERT INTO inbox.scopes AS s (scope, max_attempts)
	VALUES (inbox_set_max_attempts.scope, inbox_set_max_attempts.max_attempts)
	ON CONFLICT (scope) DO UPDATE SET max_attempts = EXCLUDED.max_attempts;
END
$$;

CREATE OR REPLACE FUNCTION inbox.inbox_set_retention(scope text, retention interval)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
	PERFORM inbox.check_key(inbox_set_retention.scope, NULL, false);
	IF inbox_set_retention.retention <= interval '0'
	   OR extract(epoch FROM inbox_set_retention.retention) <= 0 THEN
		RAISE EXCEPTION 'retention must be positive'
			USING ERRCODE = '22023',
				  DETAIL = format('The retention given for scope "%s" is %s.',
								  inbox.quote(inbox_set_retention.scope), inbox_set_retention.retention),
				  HINT = 'Pass NULL to go back to inbox.retention.';
	END IF;
	IF inbox_set_retention.retention > interval '2147483647 seconds'
	   OR extract(epoch FROM inbox_set_retention.retention) > 2147483647 THEN
		RAISE EXCEPTION 'retention must be at most 2147483647 seconds'
			USING ERRCODE = '22023',
				  DETAIL = format('The retention given for scope "%s" is %s.',
								  inbox.quote(inbox_set_retention.scope), inbox_set_retention.retention),
				  HINT = 'That is about 68 years, the longest retention inbox.retention allows too.';
	END IF;
	INSERT INTO inbox.scopes AS s (scope, retention)
	VALUES (inbox_set_retention.scope, inbox_set_retention.retention)
	ON CONFLICT (scope) DO UPDATE SET retention = EXCLUDED.retention;
END
$$;

/* ------------------------------------------------------------------------
 * Content windows
 *
 * A scope may set a content window (inbox_set_content_window): within it,
 * the same payload hash claimed under a new message id warns (counted in
 * inbox_stats.content_duplicates, listed in inbox_content_duplicates) or
 * is rejected with IB007.  The window lives in two new columns of
 * inbox.scopes; the tables, trigger, functions and view are those of
 * inbox.sql, word for word, and inbox_drop_scope and inbox_stats take in
 * the new rows and counter.
 * ------------------------------------------------------------------------ */

ALTER TABLE inbox.scopes
	ADD COLUMN content_window interval,
	ADD COLUMN content_action text COLLATE "C",
	ADD CONSTRAINT scopes_content_window_check
		CHECK ((content_window IS NULL) = (content_action IS NULL)
			   AND content_window OPERATOR(pg_catalog.>) '0'::interval
			   AND content_action IN ('warn', 'reject'));

/*
 * Content windows (src/window.c).  A sender that got no acknowledgement
 * may send the same content again under a new message id, and the id
 * alone cannot tell.  A scope may set a content window: within it, a
 * claim or receive of a new id whose payload hash was already claimed
 * under another id is a content duplicate, and either proceeds with a
 * warning ('warn': counted in inbox_stats.content_duplicates and listed
 * in inbox_content_duplicates) or is rejected ('reject': IB007, naming the
 * first id, and nothing of the claim is written).  Scopes have no window
 * by default; a call without a payload hash is never checked.
 *
 * The unique index of inbox.content_window on (scope, payload_hash)
 * arbitrates, as the primary key of inbox.entries does for ids: a second
 * claim of the same content waits for the first while it is in flight,
 * and only one of two that would both commit is the first.  The check
 * runs after the entry's arbitration, so a redelivery of the same id is
 * an ordinary duplicate, never a content duplicate.  A row older than its
 * scope's window counts for nothing, and the retention purge removes it;
 * the listed content duplicates go once older than the scope's retention.
 * The window is set in inbox.scopes (section 1), whose trigger below
 * makes every backend read the windows again.
 */
CREATE TABLE inbox.content_window (
	scope text COLLATE "C" NOT NULL,
	payload_hash bytea NOT NULL,
	message_id text COLLATE "C" NOT NULL,
	seen_at timestamptz NOT NULL,
	CONSTRAINT content_window_pkey PRIMARY KEY (scope, payload_hash)
);

COMMENT ON TABLE inbox.content_window IS
'per scope with a content window, the first message id of each content claimed within it';

REVOKE ALL ON TABLE inbox.content_window FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('inbox.content_window', '');

CREATE TABLE inbox.content_duplicates (
	scope text COLLATE "C" NOT NULL,
	message_id text COLLATE "C" NOT NULL,
	first_message_id text COLLATE "C" NOT NULL,
	seen_at timestamptz NOT NULL,
	CONSTRAINT content_duplicates_pkey PRIMARY KEY (scope, message_id)
);

COMMENT ON TABLE inbox.content_duplicates IS
'claims that a content window let through with a warning, and the first id of their content';

REVOKE ALL ON TABLE inbox.content_duplicates FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('inbox.content_duplicates', '');

-- Every backend caches the windows (src/window.c); a change drops the caches.
CREATE FUNCTION inbox.content_window_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'inbox_content_window_changed'
LANGUAGE C;

CREATE TRIGGER content_window_changed
	AFTER INSERT OR UPDATE OF content_window, content_action OR DELETE OR TRUNCATE
	ON inbox.scopes
	FOR EACH STATEMENT EXECUTE FUNCTION inbox.content_window_changed();

/*
 * A window is a duration as the leases are (inbox.check_duration): no
 * months, days of 24 hours, stored as the span the claims measure.
 * Turning a window off forgets the contents it held.
 */
CREATE FUNCTION inbox.inbox_set_content_window(scope text, within interval, action text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
	span interval;
BEGIN
	PERFORM inbox.check_key(inbox_set_content_window.scope, NULL, false);
	IF inbox_set_content_window.action IS NULL OR inbox_set_content_window.action = 'off' THEN
		UPDATE inbox.scopes AS s SET content_window = NULL, content_action = NULL
		 WHERE s.scope OPERATOR(pg_catalog.=) inbox_set_content_window.scope
		   AND s.content_window IS NOT NULL;
		DELETE FROM inbox.content_window AS w
		 WHERE w.scope OPERATOR(pg_catalog.=) inbox_set_content_window.scope;
		RETURN;
	END IF;
	IF inbox_set_content_window.action NOT IN ('warn', 'reject') THEN
		RAISE EXCEPTION 'unknown content window action "%"', inbox_set_content_window.action
			USING ERRCODE = '22023',
				  DETAIL = 'The actions are warn, reject and off.',
				  HINT = 'Pass ''warn'' to count and list content duplicates, ''reject'' to refuse them (IB007), or NULL or ''off'' to turn the window off.';
	END IF;
	span := inbox.check_duration(inbox_set_content_window.within, 'within');
	IF span IS NULL OR span <= interval '0' THEN
		RAISE EXCEPTION 'within must be positive'
			USING ERRCODE = '22023',
				  DETAIL = format('The window given for scope "%s" is %s.',
								  inbox.quote(inbox_set_content_window.scope),
								  coalesce(inbox_set_content_window.within::text, 'NULL')),
				  HINT = 'Give how long a content counts as seen, such as ''10 minutes''.';
	END IF;
	INSERT INTO inbox.scopes AS s (scope, content_window, content_action)
	VALUES (inbox_set_content_window.scope, span, inbox_set_content_window.action)
	ON CONFLICT (scope) DO UPDATE
	   SET content_window = EXCLUDED.content_window, content_action = EXCLUDED.content_action;
END
$$;

COMMENT ON FUNCTION inbox.inbox_set_content_window(text, interval, text) IS
'implementation behind the API function of the same name; call that one';

CREATE FUNCTION @extschema@.inbox_set_content_window(scope text, within interval, action text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_set_content_window(text, interval, text) IS
'set a scope''s content window: the same payload hash under a new id within it warns or is rejected (IB007); NULL or ''off'' turns it off';

CREATE VIEW @extschema@.inbox_content_duplicates WITH (security_barrier) AS
	SELECT d.scope, d.message_id, d.first_message_id, d.seen_at
	  FROM inbox.content_duplicates AS d
	 WHERE inbox.scope_visible(d.scope);

COMMENT ON VIEW @extschema@.inbox_content_duplicates IS
'claims that a content window let through with a warning, with the first id of their content';

REVOKE ALL ON FUNCTION inbox.content_window_changed() FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_set_content_window(text, interval, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_set_content_window(text, interval, text) FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.inbox_content_duplicates FROM PUBLIC;

CREATE OR REPLACE FUNCTION inbox.inbox_drop_scope(scope text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
	removed bigint;
BEGIN
	PERFORM inbox.check_key(inbox_drop_scope.scope, NULL, false);
	-- It locks the scope's open messages too: if it rolls back, they are
	-- back where they were, and the front must hear of it (src/front.c)
	PERFORM inbox.wake_takers(inbox_drop_scope.scope);
	DELETE FROM inbox.entries AS e
	 WHERE e.scope OPERATOR(pg_catalog.=) inbox_drop_scope.scope COLLATE "C";
	GET DIAGNOSTICS removed = ROW_COUNT;
	DELETE FROM inbox.offsets AS o
	 WHERE o.scope OPERATOR(pg_catalog.=) inbox_drop_scope.scope COLLATE "C";
	DELETE FROM inbox.content_window AS w
	 WHERE w.scope OPERATOR(pg_catalog.=) inbox_drop_scope.scope COLLATE "C";
	DELETE FROM inbox.content_duplicates AS d
	 WHERE d.scope OPERATOR(pg_catalog.=) inbox_drop_scope.scope COLLATE "C";
	DELETE FROM inbox.scopes AS s
	 WHERE s.scope OPERATOR(pg_catalog.=) inbox_drop_scope.scope COLLATE "C";
	PERFORM inbox.forget_counters(inbox_drop_scope.scope);
	RETURN removed;
END
$$;

CREATE FUNCTION inbox.content_counters(OUT scope text, OUT content_duplicates bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'inbox_content_counters'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE VIEW @extschema@.inbox_stats WITH (security_barrier) AS
	SELECT scope,
		   c.claims, c.duplicates, c.mismatches,
		   c.purged AS rows_purged, c.last_purge,
		   s.retention, s.clock, s.cutoff, s.oldest_entry, s.purge_lag,
		   s.entries_retained,
		   coalesce(b.pending, 0) AS pending,
		   coalesce(b.processing, 0) AS processing,
		   coalesce(b.dead, 0) AS dead,
		   now() - b.oldest_pending AS oldest_pending_age,
		   c.failures,
		   w.content_duplicates
	  FROM inbox.scope_counters() AS c
	  FULL JOIN inbox.scope_state() AS s USING (scope)
	  FULL JOIN inbox.scope_backlog() AS b USING (scope)
	  LEFT JOIN inbox.content_counters() AS w USING (scope)
	 WHERE inbox.scope_visible(scope);

COMMENT ON VIEW @extschema@.inbox_stats IS
'per-scope claims, duplicates, mismatches, content duplicates, purge progress and retention clock';

-- New in 1.1.0: granted to the roles that hold the rest of its bundle
SELECT inbox.bundle_add('operator', 'view', '@extschema@.inbox_content_duplicates');
