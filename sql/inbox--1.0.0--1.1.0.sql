/*
 * inbox--1.0.0--1.1.0.sql: update from 1.0.0 to 1.1.0, literal.
 *
 * 1.1.0 adds the grant bundles: inbox_grant_bundle, inbox_revoke_bundle
 * and the view inbox_bundles, and enforces the documented ranges of the
 * durations, of inbox_set_max_attempts and of inbox_set_retention in the
 * functions written in SQL (the C ones enforce them for 1.0.0's SQL too).
 * The purge keeps a schedule per scope, so that a pass looks only at the
 * scopes that can have changed (inbox.scope_schedules, inbox.purge_due,
 * inbox.sweep_leaf, inbox.observe_leaf), and counting the rows of
 * inbox_stats no longer probes each scope's entries; the library purges a
 * database at 1.0.0 as 1.0.0 did, until it is updated.  On the coordinator
 * of a distributed inbox, inbox_stats counts the calls of every node, and
 * resets them on every node.  Content windows: inbox_set_content_window,
 * the view inbox_content_duplicates and inbox_stats.content_duplicates.
 * The library serves the SQL of 1.0.0 and 1.1.0 through the same entry
 * points; 1.1.0 binds more: inbox.check_duration's, those of
 * inbox.scope_counters and inbox.forget_counters, and the content windows'
 * trigger and counter.
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


/* ------------------------------------------------------------------------
 * The purge's schedule (section 7 of sql/inbox.sql; src/purge.c).  No
 * scope has one yet: the first pass after the update observes every scope
 * once, and computes it.  A new retention override makes the next pass
 * compute the scope's schedule again.
 * ------------------------------------------------------------------------ */

/*
 * The purge's schedule, per scope (src/purge.c says how a pass uses it,
 * inbox.observe_leaf how it is computed): the earliest time at which the
 * scope's cutoff may pass one of its entries if nothing new arrives
 * (purge_at), the cutoff its clock stops at then (final_cutoff), and the
 * retention and idle threshold both were computed with.  A scope without
 * a row here was never evaluated: the next pass observes it.  The rows are
 * a cache of what inbox.scopes and the entries imply, so pg_dump leaves
 * them out; after a restore, the first pass computes them again.
 */
CREATE TABLE inbox.scope_schedules (
	scope text COLLATE pg_catalog."C" NOT NULL,
	purge_at timestamptz NOT NULL,
	final_cutoff timestamptz,
	retention interval NOT NULL,
	idle_threshold interval NOT NULL,
	CONSTRAINT scope_schedules_pkey PRIMARY KEY (scope),
	CONSTRAINT scope_schedules_scope_fkey FOREIGN KEY (scope)
		REFERENCES inbox.scopes (scope) ON DELETE CASCADE
);

COMMENT ON TABLE inbox.scope_schedules IS
'per-scope purge schedule: when its entries may next expire';

-- A pass reads the schedules that have come, and no other
CREATE INDEX scope_schedules_purge_at ON inbox.scope_schedules (purge_at);

REVOKE ALL ON TABLE inbox.scope_schedules FROM PUBLIC;

/*
 * inbox.purge_due(): the scopes whose schedule has come, what every purge
 * pass observes besides the scopes that received claims (src/purge.c).
 * One range of an index: an idle scope costs a pass nothing.
 */
CREATE FUNCTION inbox.purge_due()
RETURNS SETOF text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
	SELECT ss.scope
	  FROM inbox.scope_schedules AS ss
	 WHERE ss.purge_at OPERATOR(pg_catalog.<=) pg_catalog.now()
$$;

/*
 * inbox.purge_unscheduled(retention, idle): the scopes of inbox.scopes
 * without a schedule for the retention and idle threshold in force: none
 * yet, or one computed with other settings, or with a retention the
 * scope's override no longer has.  What a pass that starts a round of
 * sweeps observes besides (src/purge.c): one join of inbox.scopes with
 * inbox.scope_schedules, in the order of both primary keys.
 */
CREATE FUNCTION inbox.purge_unscheduled(p_retention interval, p_idle interval)
RETURNS SETOF text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
	SELECT sc.scope
	  FROM inbox.scopes AS sc
	  LEFT JOIN inbox.scope_schedules AS ss ON ss.scope OPERATOR(pg_catalog.=) sc.scope
	 WHERE ss.scope IS NULL
		OR ss.idle_threshold IS DISTINCT FROM p_idle
		OR ss.retention IS DISTINCT FROM coalesce(sc.retention, p_retention)
$$;

/*
 * inbox.sweep_leaf(leaf): the scopes of one leaf whose entries show what
 * neither the hints of the claims nor the schedules say (src/purge.c):
 * scopes with entries and no clock, entries newer than the clock has read,
 * or an entry older than the cutoff the clock stops at (written with an
 * old received_at, restored, or a dead letter put back).  A skip scan of
 * the (scope, received_at) index: a probe per scope for its oldest entry,
 * one more for its newest, in one statement whatever the number of
 * scopes; index lookups of the two tables, whatever their statistics say.
 */
CREATE FUNCTION inbox.sweep_leaf(p_leaf regclass)
RETURNS SETOF text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
BEGIN
	RETURN QUERY EXECUTE format(
		'WITH RECURSIVE s(scope, oldest) AS ('
		'  (SELECT e.scope, e.received_at FROM %1$s AS e'
		'    ORDER BY e.scope, e.received_at LIMIT 1)'
		'  UNION ALL'
		'  SELECT n.scope, n.received_at FROM s'
		'   CROSS JOIN LATERAL (SELECT e.scope, e.received_at FROM %1$s AS e'
		'                        WHERE e.scope OPERATOR(pg_catalog.>) s.scope'
		'                        ORDER BY e.scope, e.received_at LIMIT 1) AS n)'
		'SELECT s.scope FROM s'
		'  LEFT JOIN inbox.scopes AS sc ON sc.scope OPERATOR(pg_catalog.=) s.scope'
		'  LEFT JOIN inbox.scope_schedules AS ss ON ss.scope OPERATOR(pg_catalog.=) s.scope'
		' WHERE sc.observed_until IS NULL'
		'    OR s.oldest OPERATOR(pg_catalog.<) ss.final_cutoff'
		'    OR EXISTS (SELECT FROM %1$s AS e'
		'                WHERE e.scope OPERATOR(pg_catalog.=) s.scope'
		'                  AND e.received_at OPERATOR(pg_catalog.>) sc.observed_until)', p_leaf);
END
$$;

/*
 * inbox.observe_leaf(leaf, scopes, retention, idle): inbox.observe for
 * many scopes of one leaf at once, in a few statements whatever their
 * number, and each one's schedule.  Returns, for each scope it observed
 * (one that another purger holds is skipped, as by inbox.observe), how far
 * its clock has read, and its cutoff if done entries are past it.
 *
 * The schedule rests on two properties of a clock with no new entry: its
 * cutoff never decreases, and stops from latest + idle on; and it is never
 * later than now less the retention.
 *
 *	final_cutoff	inbox.cutoff at latest + idle (or now, if later): where
 *					the cutoff stops; NULL while the clock holds after a
 *					pause longer than the retention
 *	purge_at		-infinity while done entries are past the cutoff: the
 *					pass after the purge computes it again.  now while a
 *					pending or processing message is past it: the scope is
 *					looked at each pass, and the message goes at the pass
 *					after it completes.  Else the scope's oldest entry at
 *					or after the cutoff, plus the retention: no entry can
 *					pass the cutoff sooner (or now, if that is past: a
 *					pause within the retention puts the cutoff further
 *					back, and the scope is looked at each pass until its
 *					clock stops).  infinity when the final cutoff is not
 *					past that entry, or there is none: nothing expires
 *					until something new arrives.
 *
 * Dead letters before the cutoff stay, whatever their age; one put back
 * and completed goes at the next sweep, which finds the scope's oldest
 * entry below its final cutoff (inbox.sweep_leaf).
 *
 * The CTEs that compute a cutoff are materialized, so that inbox.cutoff
 * runs once per scope however often its result is read; a row of
 * inbox.scopes or inbox.scope_schedules is written only if it changes.
 */
CREATE FUNCTION inbox.observe_leaf(p_leaf regclass, p_scopes text[], p_retention interval,
								   p_idle interval)
RETURNS TABLE (scope text, observed_until timestamptz, cutoff timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
BEGIN
	-- Scopes seen for the first time, added by the one purger that may
	-- (see inbox.observe)
	IF EXISTS (SELECT FROM unnest(p_scopes) AS s(name)
				WHERE NOT EXISTS (SELECT FROM inbox.scopes AS sc
								   WHERE sc.scope OPERATOR(pg_catalog.=) s.name COLLATE "C"))
	   AND inbox.try_create_scopes() THEN
		INSERT INTO inbox.scopes AS sc (scope)
		SELECT s.name FROM unnest(p_scopes) AS s(name)
		ON CONFLICT ON CONSTRAINT scopes_pkey DO NOTHING;
	END IF;

	RETURN QUERY EXECUTE format(
		'WITH locked AS ('
		'  SELECT sc.scope, sc.observed_until, sc.pauses, coalesce(sc.retention, $2) AS retention'
		'    FROM inbox.scopes AS sc'
		'   WHERE sc.scope OPERATOR(pg_catalog.=) ANY ($1)'
		'     FOR UPDATE SKIP LOCKED),'
		' seen AS ('
		'  SELECT l.*, n.seen_new, coalesce(n.latest, l.observed_until) AS latest,'
		'         l.pauses OPERATOR(pg_catalog.||) n.gaps AS all_pauses'
		'    FROM locked AS l'
		'   CROSS JOIN LATERAL ('
		'    SELECT pg_catalog.count(*) AS seen_new, pg_catalog.max(e.received_at) AS latest,'
		'           coalesce(pg_catalog.array_agg(pg_catalog.tstzrange(e.prev, e.received_at))'
		'                    FILTER (WHERE (e.received_at OPERATOR(pg_catalog.-) e.prev)'
		'                                  OPERATOR(pg_catalog.>) $3), ''{}'') AS gaps'
		'      FROM (SELECT x.received_at,'
		'                   pg_catalog.lag(x.received_at, 1, l.observed_until)'
		'                     OVER (ORDER BY x.received_at) AS prev'
		'              FROM %1$s AS x'
		'             WHERE x.scope OPERATOR(pg_catalog.=) l.scope'
		'               AND x.received_at OPERATOR(pg_catalog.>)'
		'                   coalesce(l.observed_until, ''-infinity'')) AS e) AS n),'
		' clock AS MATERIALIZED ('
		'  SELECT s.*, inbox.cutoff(pg_catalog.now(), s.latest, s.all_pauses, s.retention, $3) AS cutoff'
		'    FROM seen AS s),'
		' schedule AS MATERIALIZED ('
		'  SELECT c.*,'
		'         CASE WHEN c.latest IS NULL THEN NULL'
		'              WHEN pg_catalog.now() OPERATOR(pg_catalog.>=) (c.latest OPERATOR(pg_catalog.+) $3)'
		'              THEN c.cutoff'
		'              ELSE inbox.cutoff(c.latest OPERATOR(pg_catalog.+) $3, c.latest, c.all_pauses,'
		'                                c.retention, $3) END AS final,'
		'         c.cutoff IS NOT NULL AND EXISTS ('
		'           SELECT FROM %1$s AS x'
		'            WHERE x.scope OPERATOR(pg_catalog.=) c.scope'
		'              AND x.received_at OPERATOR(pg_catalog.<) c.cutoff'
		'              AND x.state OPERATOR(pg_catalog.=) ''d''::"char") AS expired,'
		'         (SELECT pg_catalog.min(x.received_at) FROM %1$s AS x'
		'           WHERE x.scope OPERATOR(pg_catalog.=) c.scope'
		'             AND x.received_at OPERATOR(pg_catalog.>=) coalesce(c.cutoff, ''-infinity'')) AS oldest,'
		'         CASE WHEN c.cutoff IS NULL THEN c.all_pauses'
		'              ELSE ARRAY(SELECT g FROM pg_catalog.unnest(c.all_pauses) AS g'
		'                          WHERE pg_catalog.upper(g) OPERATOR(pg_catalog.>=) c.cutoff) END AS kept'
		'    FROM clock AS c),'
		' planned AS MATERIALIZED ('
		'  SELECT s.*,'
		'         CASE WHEN s.expired THEN ''-infinity''::timestamptz'
		'              WHEN s.cutoff IS NOT NULL AND EXISTS ('
		'                SELECT FROM %1$s AS x'
		'                 WHERE x.scope OPERATOR(pg_catalog.=) s.scope'
		'                   AND x.received_at OPERATOR(pg_catalog.<) s.cutoff'
		'                   AND x.state OPERATOR(pg_catalog.<>) ''x''::"char")'
		'              THEN pg_catalog.now()'
		'              WHEN s.oldest IS NULL OR s.final IS NULL'
		'                   OR s.oldest OPERATOR(pg_catalog.>=) s.final THEN ''infinity''::timestamptz'
		'              ELSE greatest(s.oldest OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs =>'
		'                              least(pg_catalog.date_part(''epoch'', s.retention), 2147483647)),'
		'                            pg_catalog.now()) END AS purge_at'
		'    FROM schedule AS s),'
		' clocks AS ('
		'  UPDATE inbox.scopes AS sc'
		'     SET observed_until = p.latest, pauses = p.kept,'
		'         retained = sc.retained OPERATOR(pg_catalog.+) p.seen_new'
		'    FROM planned AS p'
		'   WHERE sc.scope OPERATOR(pg_catalog.=) p.scope'
		'     AND (p.seen_new OPERATOR(pg_catalog.>) 0'
		'          OR p.latest IS DISTINCT FROM sc.observed_until'
		'          OR p.kept IS DISTINCT FROM sc.pauses)),'
		' schedules AS ('
		'  INSERT INTO inbox.scope_schedules AS ss (scope, purge_at, final_cutoff, retention, idle_threshold)'
		'  SELECT p.scope, p.purge_at, p.final, p.retention, $3'
		'    FROM planned AS p'
		'    LEFT JOIN inbox.scope_schedules AS o ON o.scope OPERATOR(pg_catalog.=) p.scope'
		'   WHERE (o.purge_at, o.final_cutoff, o.retention, o.idle_threshold)'
		'         IS DISTINCT FROM (p.purge_at, p.final, p.retention, $3)'
		'  ON CONFLICT ON CONSTRAINT scope_schedules_pkey DO UPDATE'
		'     SET purge_at = EXCLUDED.purge_at, final_cutoff = EXCLUDED.final_cutoff,'
		'         retention = EXCLUDED.retention, idle_threshold = EXCLUDED.idle_threshold)'
		'SELECT p.scope, p.latest, CASE WHEN p.expired THEN p.cutoff END FROM planned AS p', p_leaf)
		USING p_scopes, p_retention, p_idle;
END
$$;

/*
 * Retention overrides are bounded like inbox.retention: a retention
 * beyond it could only push the purge's arithmetic out of the range of
 * timestamps.
 */
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
	-- The purge's next pass computes the scope's schedule again
	UPDATE inbox.scope_schedules AS ss SET purge_at = '-infinity'
	 WHERE ss.scope OPERATOR(pg_catalog.=) inbox_set_retention.scope COLLATE "C";
END
$$;

REVOKE ALL ON FUNCTION inbox.purge_due() FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.purge_unscheduled(interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.sweep_leaf(regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.observe_leaf(regclass, text[], interval, interval) FROM PUBLIC;

/* ------------------------------------------------------------------------
 * inbox_stats without a probe per scope when no clock column is read
 * (section 9 of sql/inbox.sql).  The view keeps its columns, its grants
 * and its comment; inbox.scope_state, which only it called, goes.
 * ------------------------------------------------------------------------ */

/*
 * inbox_stats: one row per scope known to the counters, to the purge or to
 * the deferred mode.  Counters come from shared memory; the retention
 * state from inbox.scopes (inbox.scope_rows); the clock columns from two
 * index probes per scope (its oldest and newest entry) and its cutoff
 * (inbox.scope_clock); the backlog from the open-messages index.
 *
 * The view calls inbox.scope_clock in a subquery's select list, which the
 * planner does not flatten: a query that reads none of the clock columns
 * (count(*), say) drops the call, and reads inbox.scopes once, whatever
 * the number of scopes.
 */
CREATE FUNCTION inbox.scope_rows(OUT scope text, OUT retention interval,
								 OUT observed_until timestamptz,
								 OUT pauses pg_catalog.tstzrange[], OUT entries_retained bigint)
RETURNS SETOF record
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT sc.scope, coalesce(sc.retention, cfg.retention), sc.observed_until, sc.pauses,
		   sc.retained
	  FROM inbox.scopes AS sc
	 CROSS JOIN inbox.settings() AS cfg
$$;

-- The clock columns of one scope of inbox_stats; none for a scope that
-- inbox.scopes does not hold (p_scope NULL)
CREATE FUNCTION inbox.scope_clock(p_scope text, p_observed_until timestamptz,
								  p_pauses pg_catalog.tstzrange[], p_retention interval,
								  OUT clock text, OUT cutoff timestamptz,
								  OUT oldest_entry timestamptz, OUT purge_lag interval)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT CASE WHEN x.latest IS NULL THEN 'empty'
				WHEN c.cutoff IS NULL THEN 'held'
				WHEN now() - x.latest > cfg.idle_threshold THEN 'paused'
				ELSE 'running' END,
		   c.cutoff, x.oldest,
		   CASE WHEN x.oldest < c.cutoff THEN c.cutoff - x.oldest
				ELSE '0'::interval END
	  FROM inbox.settings() AS cfg
	 CROSS JOIN LATERAL inbox.scope_span(p_scope) AS x
	 CROSS JOIN LATERAL (SELECT inbox.cutoff(now(), greatest(x.latest, p_observed_until),
											 p_pauses, p_retention, cfg.idle_threshold)
								AS cutoff) AS c
	 WHERE p_scope IS NOT NULL
$$;

CREATE OR REPLACE VIEW @extschema@.inbox_stats WITH (security_barrier) AS
	SELECT v.scope,
		   v.claims, v.duplicates, v.mismatches, v.rows_purged, v.last_purge,
		   v.retention, (v.k).clock, (v.k).cutoff, (v.k).oldest_entry, (v.k).purge_lag,
		   v.entries_retained, v.pending, v.processing, v.dead, v.oldest_pending_age,
		   v.failures
	  FROM (SELECT scope,
				   c.claims, c.duplicates, c.mismatches,
				   c.purged AS rows_purged, c.last_purge,
				   s.retention,
				   inbox.scope_clock(s.scope, s.observed_until, s.pauses, s.retention) AS k,
				   s.entries_retained,
				   coalesce(b.pending, 0) AS pending,
				   coalesce(b.processing, 0) AS processing,
				   coalesce(b.dead, 0) AS dead,
				   now() - b.oldest_pending AS oldest_pending_age,
				   c.failures
			  FROM inbox.scope_counters() AS c
			  FULL JOIN inbox.scope_rows() AS s USING (scope)
			  FULL JOIN inbox.scope_backlog() AS b USING (scope)
			OFFSET 0) AS v
	 WHERE inbox.scope_visible(v.scope);

DROP FUNCTION inbox.scope_state();

/* ------------------------------------------------------------------------
 * The counters of the whole cluster
 *
 * Each node counts the calls it runs, and on Citus a delegated call runs
 * on the worker that holds its scope.  inbox.node_counters and
 * inbox.forget_node_counters are this node's, as inbox.scope_counters and
 * inbox.forget_counters were; these two now sum and forget over every
 * node on the coordinator of a distributed inbox (src/distributed.c), and
 * stay this node's everywhere else.  The functions are those of
 * inbox.sql, word for word.
 * ------------------------------------------------------------------------ */

CREATE FUNCTION inbox.forget_node_counters(scope text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_forget_counters'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION inbox.forget_counters(scope text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_forget_cluster_counters'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.node_counters(OUT scope text, OUT claims bigint, OUT duplicates bigint,
									OUT mismatches bigint, OUT purged bigint,
									OUT last_purge timestamptz, OUT failures bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'inbox_counters_1_0'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION inbox.scope_counters(OUT scope text, OUT claims bigint, OUT duplicates bigint,
									 OUT mismatches bigint, OUT purged bigint,
									 OUT last_purge timestamptz, OUT failures bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'inbox_cluster_counters'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON FUNCTION inbox.forget_node_counters(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.node_counters() FROM PUBLIC;

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

-- What every backend reads to cache the content windows (src/window.c):
-- the few scopes that keep one, however many scopes there are
CREATE INDEX scopes_content_window ON inbox.scopes (scope) WHERE content_window IS NOT NULL;

-- Refuse what cannot work on a distributed inbox.entries, by name, with
-- the reason (src/distributed.c)
CREATE FUNCTION inbox.refuse_if_distributed(what text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_refuse_if_distributed_sql'
LANGUAGE C VOLATILE STRICT
SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON FUNCTION inbox.refuse_if_distributed(text) FROM PUBLIC;

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
 * an ordinary duplicate, never a content duplicate.  A row counts until
 * its expires_at, when it was seen plus the scope's window (a new window
 * moves it), and the retention purge then removes it; a listed content
 * duplicate is kept for the scope's retention in force when it was
 * listed.  The purge reads both by expires_at: it costs what expired.
 * The window is set in inbox.scopes (section 1), whose trigger below
 * makes every backend read the windows again.
 */
CREATE TABLE inbox.content_window (
	scope text COLLATE "C" NOT NULL,
	payload_hash bytea NOT NULL,
	message_id text COLLATE "C" NOT NULL,
	seen_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL,
	CONSTRAINT content_window_pkey PRIMARY KEY (scope, payload_hash)
);

-- What the purge reads: only the rows that expired, oldest first
CREATE INDEX content_window_expires_at ON inbox.content_window (expires_at);

COMMENT ON TABLE inbox.content_window IS
'per scope with a content window, the first message id of each content claimed within it';

REVOKE ALL ON TABLE inbox.content_window FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('inbox.content_window', '');

CREATE TABLE inbox.content_duplicates (
	scope text COLLATE "C" NOT NULL,
	message_id text COLLATE "C" NOT NULL,
	first_message_id text COLLATE "C" NOT NULL,
	seen_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL,
	CONSTRAINT content_duplicates_pkey PRIMARY KEY (scope, message_id)
);

CREATE INDEX content_duplicates_expires_at ON inbox.content_duplicates (expires_at);

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
	PERFORM inbox.refuse_if_distributed('content_window');
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
	-- The contents seen count for the new span from when they were seen
	UPDATE inbox.content_window AS w SET expires_at = w.seen_at + span
	 WHERE w.scope OPERATOR(pg_catalog.=) inbox_set_content_window.scope
	   AND w.expires_at IS DISTINCT FROM w.seen_at + span;
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
	SELECT v.scope,
		   v.claims, v.duplicates, v.mismatches, v.rows_purged, v.last_purge,
		   v.retention, (v.k).clock, (v.k).cutoff, (v.k).oldest_entry, (v.k).purge_lag,
		   v.entries_retained, v.pending, v.processing, v.dead, v.oldest_pending_age,
		   v.failures, v.content_duplicates
	  FROM (SELECT scope,
				   c.claims, c.duplicates, c.mismatches,
				   c.purged AS rows_purged, c.last_purge,
				   s.retention,
				   inbox.scope_clock(s.scope, s.observed_until, s.pauses, s.retention) AS k,
				   s.entries_retained,
				   coalesce(b.pending, 0) AS pending,
				   coalesce(b.processing, 0) AS processing,
				   coalesce(b.dead, 0) AS dead,
				   now() - b.oldest_pending AS oldest_pending_age,
				   c.failures,
				   w.content_duplicates
			  FROM inbox.scope_counters() AS c
			  FULL JOIN inbox.scope_rows() AS s USING (scope)
			  FULL JOIN inbox.scope_backlog() AS b USING (scope)
			  LEFT JOIN inbox.content_counters() AS w USING (scope)
			OFFSET 0) AS v
	 WHERE inbox.scope_visible(v.scope);

COMMENT ON VIEW @extschema@.inbox_stats IS
'per-scope claims, duplicates, mismatches, content duplicates, purge progress and retention clock';

-- New in 1.1.0: granted to the roles that hold the rest of its bundle
SELECT inbox.bundle_add('operator', 'view', '@extschema@.inbox_content_duplicates');

-- inbox_distribute refuses an inbox whose scopes keep content windows
CREATE OR REPLACE FUNCTION @extschema@.inbox_distribute(colocate_with regclass)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	dist_column text;
	dist_type oid;
	dist_collation oid;
	entries_colocation integer;
	fn regprocedure;
	grantee text;
BEGIN
	IF NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') THEN
		RAISE EXCEPTION 'inbox_distribute needs Citus'
			USING ERRCODE = 'feature_not_supported',
				  DETAIL = 'Extension citus is not installed in this database.',
				  HINT = 'On one node, the inbox needs no distribution.';
	END IF;
	-- A delegated claim could not see a window (src/distributed.c)
	IF EXISTS (SELECT FROM inbox.scopes AS s WHERE s.content_window IS NOT NULL) THEN
		RAISE EXCEPTION 'inbox_distribute cannot distribute an inbox whose scopes keep content windows'
			USING ERRCODE = 'feature_not_supported',
				  DETAIL = 'A claim delegated to a worker would read neither the windows nor the contents they have seen.',
				  HINT = 'Turn the windows off first: inbox_set_content_window(scope, NULL, ''off'').';
	END IF;

	-- The business table, distributed by hash on a text column of collation "C"
	SELECT pg_catalog.column_to_column_name(p.logicalrelid, p.partkey)
	  INTO dist_column
	  FROM pg_catalog.pg_dist_partition AS p
	 WHERE p.logicalrelid = colocate_with AND p.partmethod = 'h';
	IF dist_column IS NULL THEN
		RAISE EXCEPTION 'table % is not distributed by hash', colocate_with
			USING ERRCODE = 'wrong_object_type',
				  DETAIL = 'inbox.entries is co-located with a table distributed by the scope its rows belong to.',
				  HINT = 'Distribute it first: SELECT create_distributed_table(''table'', ''scope column'').';
	END IF;
	SELECT a.atttypid, a.attcollation INTO dist_type, dist_collation
	  FROM pg_catalog.pg_attribute AS a
	 WHERE a.attrelid = colocate_with AND a.attname = dist_column;
	IF dist_type <> 'pg_catalog.text'::pg_catalog.regtype THEN
		RAISE EXCEPTION 'the distribution column % of table % is of type %, not text',
				dist_column, colocate_with, dist_type::pg_catalog.regtype
			USING ERRCODE = 'datatype_mismatch',
				  DETAIL = 'Citus co-locates tables whose distribution columns have the same type; inbox.entries.scope is text.';
	END IF;
	IF dist_collation <> 'pg_catalog."C"'::pg_catalog.regcollation THEN
		RAISE EXCEPTION 'the distribution column % of table % has collation %, not "C"',
				dist_column, colocate_with, dist_collation::pg_catalog.regcollation
			USING ERRCODE = 'collation_mismatch',
				  DETAIL = 'The inbox compares scopes byte-wise, and Citus co-locates only distribution columns of one collation.',
				  HINT = 'Create the business table with that column COLLATE "C", before distributing it; Citus cannot change a distribution column afterwards.';
	END IF;

	-- inbox.entries: distribute it, or check that it is co-located already
	SELECT p.colocationid INTO entries_colocation
	  FROM pg_catalog.pg_dist_partition AS p
	 WHERE p.logicalrelid = 'inbox.entries'::pg_catalog.regclass;
	IF entries_colocation IS NULL THEN
		PERFORM pg_catalog.create_distributed_table('inbox.entries', 'scope',
													colocate_with => colocate_with::text);
	ELSIF entries_colocation <> (SELECT p.colocationid FROM pg_catalog.pg_dist_partition AS p
								  WHERE p.logicalrelid = colocate_with) THEN
		RAISE EXCEPTION 'inbox.entries is already distributed, and not co-located with table %', colocate_with
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = 'Citus cannot redistribute a table that belongs to an extension.';
	END IF;

	-- inbox.scope_grants on every node.  Its statement trigger, which drops
	-- the backends' caches of the grants, must follow it onto the shards:
	-- Citus creates triggers there only when allowed to.
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p
				   WHERE p.logicalrelid = 'inbox.scope_grants'::pg_catalog.regclass) THEN
		PERFORM pg_catalog.set_config('citus.enable_unsafe_triggers', 'on', true);
		PERFORM pg_catalog.create_reference_table('inbox.scope_grants');
	END IF;

	-- The delegated entry points.  Citus propagates a GRANT on a function
	-- only once the function is distributed, so the EXECUTE privileges
	-- given before are given again, now to every node.
	FOREACH fn IN ARRAY inbox.delegated_functions() LOOP
		PERFORM pg_catalog.create_distributed_function(fn, 'scope',
													   colocate_with => 'inbox.entries',
													   force_delegation => true);
		FOR grantee IN
			SELECT CASE WHEN x.grantee = 0 THEN 'PUBLIC'
						ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(x.grantee)) END
			  FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS x
			 WHERE p.oid = fn AND x.privilege_type = 'EXECUTE' AND x.grantee <> p.proowner
		LOOP
			EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', fn, grantee);
		END LOOP;
	END LOOP;

	RAISE NOTICE 'the inbox is distributed with table %', colocate_with
		USING DETAIL = 'This cannot be undone: Citus does not undistribute a table that belongs to an extension. '
					   'DROP EXTENSION inbox still works.';
END;
$$;

