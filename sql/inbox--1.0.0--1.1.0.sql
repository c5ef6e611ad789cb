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
 * And 1.1.0 adds the outbox (the last part below).
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
	CONSTRAINT bundle_objects_pkey PRIMARY KEY (bundle, object_type, object),
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
	-- A revoke keeps what the role still holds through another bundle
	FOR o IN SELECT b.object_type, b.object FROM inbox.bundle_objects AS b
			  WHERE b.bundle OPERATOR(pg_catalog.=) p_bundle
				AND (p_grant OR NOT EXISTS (
					SELECT FROM inbox.bundle_objects AS other
					 WHERE other.object_type OPERATOR(pg_catalog.=) b.object_type
					   AND other.object OPERATOR(pg_catalog.=) b.object
					   AND other.bundle OPERATOR(pg_catalog.<>) p_bundle
					   AND p_role OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT inbox.bundle_holders(other.bundle)))))
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
'grant a role every function and view of a bundle: consumer, receiver, worker, streams, operator, publisher or relay';

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

/*
 * Rows found through the index that holds their whole key, with the index
 * AM (src/locate.c): a statement that must touch one row is given its tid
 * and its leaf's bucket, so that whatever the statistics say of a scope,
 * no index that begins with the scope alone can be chosen to read it.
 */
CREATE FUNCTION inbox.entry_tid(p_scope text, p_id text)
RETURNS tid
AS 'MODULE_PATHNAME', 'inbox_entry_tid_sql'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

CREATE FUNCTION inbox.entry_of_receipt(p_scope text, p_receipt uuid,
									   OUT message_id text, OUT tid tid)
RETURNS record
AS 'MODULE_PATHNAME', 'inbox_entry_of_receipt_sql'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

CREATE FUNCTION inbox.member_tid(p_scope text, p_id text)
RETURNS tid
AS 'MODULE_PATHNAME', 'inbox_member_tid_sql'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION inbox.entry_tid(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.entry_of_receipt(text, uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.member_tid(text, text) FROM PUBLIC;

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
	failed_id text;
	held record;
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
		RETURNING e.state, e.message_id INTO new_state, failed_id;
		IF NOT FOUND THEN
			PERFORM inbox.refuse(p_scope, p_id, 'failed', 'r');
		END IF;
	ELSE
		-- The row the receipt holds, by the leaf's index of receipts
		-- (inbox.entry_of_receipt): its bucket and tid
		held := inbox.entry_of_receipt(p_scope, p_receipt);
		UPDATE inbox.entries AS e
		   SET state = CASE WHEN coalesce(e.attempts, 0) >= allowed THEN 'x' ELSE 'p' END::"char",
			   due = CASE WHEN coalesce(e.attempts, 0) >= allowed THEN NULL ELSE retry_at END,
			   finished_at = CASE WHEN coalesce(e.attempts, 0) >= allowed THEN finished END,
			   owner_session = NULL, lease_until = NULL, receipt = NULL, last_error = p_error
		 WHERE e.bucket OPERATOR(pg_catalog.=) inbox.bucket(p_scope, held.message_id)
		   AND e.ctid OPERATOR(pg_catalog.=) held.tid
		   AND e.receipt = p_receipt
		   AND e.scope OPERATOR(pg_catalog.=) p_scope COLLATE "C"
		   AND e.state = 'r'
		RETURNING e.state, e.message_id INTO new_state, failed_id;
		IF NOT FOUND THEN
			PERFORM inbox.refuse_receipt(p_scope, p_receipt, 'failed');
		END IF;
	END IF;
	-- The scope's depth (src/depth.c): a retry delay leaves it not due
	PERFORM inbox.depth_moved(p_scope, 'r', new_state,
							  coalesce(retry_span OPERATOR(pg_catalog.>) interval '0', false));
	-- A dead head holds its group, or leaves it (inbox.group_dead)
	IF new_state OPERATOR(pg_catalog.=) 'x' THEN
		PERFORM inbox.group_dead(p_scope, failed_id);
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
 * Receipt hints
 *
 * The message-id forms of inbox_complete, inbox_fail and inbox_extend,
 * given an id that no message has and that is written as a UUID, hint at
 * the receipt form.  The function is that of inbox.sql, word for word.
 * ------------------------------------------------------------------------ */

/*
 * inbox.refuse(scope, message_id, action, expected state): explain why an
 * UPDATE of complete/fail/extend/requeue matched no row, and raise.  An id
 * that no message has, written as a UUID, is most likely a receipt passed
 * as an untyped literal, which resolves to the message-id form: the hint
 * names the receipt form.  It is only a pattern match, on the error path.
 */
CREATE OR REPLACE FUNCTION inbox.refuse(p_scope text, p_id text, p_action text, p_expected "char")
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	st "char";
	msg text := format('message "%s" in scope "%s"', inbox.quote(p_id), inbox.quote(p_scope));
BEGIN
	SELECT e.state INTO st FROM inbox.entries AS e
	 WHERE e.scope OPERATOR(pg_catalog.=) p_scope COLLATE "C"
	   AND e.message_id OPERATOR(pg_catalog.=) p_id COLLATE "C"
	   AND e.bucket OPERATOR(pg_catalog.=) inbox.bucket(p_scope, p_id);
	IF NOT FOUND THEN
		RAISE EXCEPTION '% does not exist', msg
			USING ERRCODE = 'IB005',
				  HINT = CASE
					WHEN p_expected OPERATOR(pg_catalog.=) 'r'
					 AND p_id OPERATOR(pg_catalog.~) '^[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$'
					THEN format('If it is a receipt from inbox_poll, cast it to uuid to call the receipt form: %s.',
								CASE p_action
									WHEN 'completed' THEN format('inbox_complete(scope, %L::uuid)', p_id)
									WHEN 'failed' THEN format('inbox_fail(scope, %L::uuid, error)', p_id)
									ELSE format('inbox_extend(scope, %L::uuid, lease)', p_id)
								END)
					ELSE format('Only a message stored by inbox_receive can be %s.', p_action)
				  END;
	ELSIF st <> p_expected THEN
		RAISE EXCEPTION '% is %', msg,
			CASE p_expected WHEN 'r' THEN 'not being processed' ELSE 'not dead' END
			USING ERRCODE = 'IB004',
				  DETAIL = format('It is %s, so it cannot be %s.', inbox.state_name(st), p_action);
	ELSE
		RAISE EXCEPTION '% is being processed by another session', msg
			USING ERRCODE = 'IB004',
				  DETAIL = 'This session does not own it: another session took it, or this session''s lease ran out and another worker took it again.',
				  HINT = 'Roll back the transaction, so that the effect of this processing does not commit.';
	END IF;
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
	DELETE FROM inbox.group_members AS m
	 WHERE m.scope OPERATOR(pg_catalog.=) inbox_drop_scope.scope COLLATE "C";
	DELETE FROM inbox.groups AS g
	 WHERE g.scope OPERATOR(pg_catalog.=) inbox_drop_scope.scope COLLATE "C";
	DELETE FROM inbox.scopes AS s
	 WHERE s.scope OPERATOR(pg_catalog.=) inbox_drop_scope.scope COLLATE "C";
	PERFORM inbox.forget_counters(inbox_drop_scope.scope);
	PERFORM inbox.depth_forget(inbox_drop_scope.scope);
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
	-- The groups order entries that would move to the workers (section 4)
	IF EXISTS (SELECT FROM inbox.group_members) THEN
		RAISE EXCEPTION 'inbox_distribute cannot distribute an inbox with messages in ordered groups'
			USING ERRCODE = 'feature_not_supported',
				  DETAIL = 'The groups are kept on the coordinator, and would no longer commit with the entries they order.',
				  HINT = 'Let the grouped messages be processed (or drop their scopes) first.';
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


/* ------------------------------------------------------------------------
 * Outbox (section 11 of sql/inbox.sql), new in 1.1.0: outbox_send,
 * outbox_send_many, the relay's API (outbox_targets, outbox_fetch,
 * outbox_ack, outbox_fail, outbox_report), routes and their schemes
 * (outbox_schemes), outbox_requeue and the views
 * outbox_stats, outbox_dead_letters and outbox_routes; the bundles
 * publisher and relay.
 * ------------------------------------------------------------------------ */

/*
 * The transactional outbox: what a transaction has to say to the world,
 * written in that transaction (outbox_send), and delivered after it
 * commits by a relay that acts through the API below (outbox_fetch,
 * outbox_ack, outbox_fail).  A rollback, a savepoint's rollback or a
 * crash before COMMIT leaves nothing to send; PREPARE TRANSACTION keeps
 * the messages until COMMIT PREPARED.
 *
 * Tables:
 *
 *	outbox_keys        one row per (topic, key): the last position given
 *	outbox_messages    one row per message, written once and never updated
 *	                   (Debezium's outbox event router can read it: id,
 *	                   topic as aggregatetype, key as aggregateid, payload)
 *	outbox_deliveries  one row per (message, target) not yet delivered:
 *	                   pending or dead, its attempts and lease
 *	outbox_routes      which targets each topic goes to
 *	outbox_sent        per (topic, target), how many messages were
 *	                   delivered: outbox_stats's counter
 *
 * Per-key order is commit order.  A send takes its message's position in
 * its key with an upsert of the key's row in outbox_keys (last = last + 1),
 * whose row lock it holds until it commits or aborts.  A second sender on
 * the same key waits for the first to end, and reads the position the
 * first committed (or, if it aborted, the one before): so positions of a
 * key are gapless and follow commit order, and an aborted send leaves no
 * hole.  A requeue takes a position as a send does (outbox_requeue), for
 * a delivery whose message row keeps its send's: the only holes in a
 * key's positions in outbox_messages.  A key without a row starts at the
 * clock's reading in microseconds since 1970 (outbox_position_at), read
 * for each row as it is inserted: see Retention for why.  Sequences and
 * transaction ids are assigned before commit, and order by them can be
 * other than the order of the commits.  The lock is released after the
 * commit is visible, so any snapshot that sees a key's position n sees
 * every position before it.
 *
 * Deadlocks: outbox_send_many locks its keys in one order (byte order of
 * the key), so two batches over the same keys never wait on each other
 * in a circle.  Separate outbox_send calls lock in the order they are
 * made: two transactions that send to keys a and b in opposite orders can
 * deadlock, as two UPDATEs of the same rows would, and PostgreSQL then
 * aborts one of them; outbox_requeue takes its key's row as a send does,
 * and the same holds for it.  Sends to one key in a transaction keep
 * their call order.
 *
 * Delivery.  A send writes a row in outbox_deliveries for each route of
 * its topic ('p', pending); a route added later applies to later sends.
 * For a target, a key's head is its lowest pending position: outbox_fetch
 * hands out only heads, each under a lease (a receipt and lease_until),
 * so a key's next message waits until the previous one is acknowledged
 * (outbox_ack deletes the delivery: it is sent) or dead-lettered
 * (outbox_fail after the last attempt: 'x', dead).  A failing message
 * blocks its key for that target only.  Fetch walks the pending rows of
 * its target key by key, through a partial index that holds pending rows
 * only: its cost follows what is pending, not how many keys or messages
 * ever existed.
 *
 * Two relays never hold one message at once: a fetch locks each head it
 * picks (FOR UPDATE SKIP LOCKED) and re-checks, on the row's latest
 * version, that it is still pending and unleased before it leases it.
 *
 * Wake-ups: a send notes its targets, and its commit wakes the relays
 * waiting in outbox_fetch on them (src/outbox.c, src/wakeup.c).
 *
 * Leases write no index: a receipt carries the address of the version its
 * lease wrote (src/outbox.c), and outbox_ack and outbox_fail find the row
 * there, so the lease is a HOT update; the table's fillfactor leaves room
 * for it on the row's page.
 *
 * Retention: the purge (the worker and inbox_purge()) deletes messages
 * older than inbox.outbox_retention that no delivery waits for, in
 * batches of inbox.purge_batch_size.  Pending and dead messages stay.
 * The message that holds its key's last position goes only together with
 * the key's row, once that position is below the clock's reading of the
 * retention ago (a message's age counts from its transaction's start, the
 * position from its row's insertion); while a sender holds the row (SKIP
 * LOCKED), both stay.  A later send starts the key again from the clock,
 * above every position the row gave, all below the reading of the
 * retention ago: a new row's reading is taken as the executor builds the
 * row, after the statement's waits for other keys, and before the
 * insertion checks the key, where it can wait only for the purge's
 * deletion, which began at most moments before, or for a sender that
 * inserted the key's row and has not ended, while no other position of
 * the key can commit; the retention is at least a second.  So a key's
 * positions only grow, as long as the clock does not step back by more
 * than the retention, and the table holds the keys that sent within the
 * retention or still have messages, and those whose last position a
 * requeue took (no message holds it), until their next message goes.
 *
 * Topics are reserved to roles as scopes are: outbox_send and
 * outbox_send_many are entry points that check the scope grants for their
 * topic (inbox_grant(topic, role)); a topic and a scope of the same name
 * share their grants.  outbox_requeue, which names a message, treats one
 * of a topic the caller may not act on as absent (inbox.caller_sees).  On a database whose inbox is distributed by Citus,
 * the outbox refuses to run (docs/scale-out.md).
 */

/* Time-ordered ids (src/outbox.c): PostgreSQL before 18 has no uuidv7() */
CREATE FUNCTION inbox.uuid_v7()
RETURNS uuid
AS 'MODULE_PATHNAME', 'inbox_uuid_v7'
LANGUAGE C VOLATILE PARALLEL SAFE;

-- The checks of a send and of a target, and the outbox's limits (src/inbox.h)
CREATE FUNCTION inbox.outbox_check(topic text, key text, payload_bytes bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_outbox_check'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.outbox_check_target(target text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_outbox_check_target'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

-- The headers every target can carry (src/outbox.c): an object of strings,
-- whose names are tokens and whose values hold no line break
CREATE FUNCTION inbox.outbox_check_headers(headers jsonb)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_outbox_check_headers'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.outbox_limits(OUT topic_bytes integer, OUT key_bytes integer,
									OUT target_bytes integer, OUT payload_bytes integer,
									OUT batch integer)
AS 'MODULE_PATHNAME', 'inbox_outbox_limits'
LANGUAGE C IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp;

-- Waking the relays that wait on a target, at commit (src/outbox.c)
CREATE FUNCTION inbox.outbox_wake(target text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_outbox_wake'
LANGUAGE C VOLATILE STRICT
SET search_path = pg_catalog, pg_temp;

-- The heads of a target's keys, walked on from where this backend's last
-- fetch for the target stopped (outbox_lease)
CREATE FUNCTION inbox.outbox_heads(target text, max integer, now timestamptz)
RETURNS tid[]
AS 'MODULE_PATHNAME', 'inbox_outbox_heads'
LANGUAGE C VOLATILE STRICT;

-- Receipts: the address of the lease's row version, and a seed kept in it
CREATE FUNCTION inbox.outbox_receipt_seed(receipt uuid)
RETURNS uuid
AS 'MODULE_PATHNAME', 'inbox_outbox_receipt_seed'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION inbox.outbox_receipt(seed uuid, at tid)
RETURNS uuid
AS 'MODULE_PATHNAME', 'inbox_outbox_receipt'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION inbox.outbox_receipt_tid(receipt uuid)
RETURNS tid
AS 'MODULE_PATHNAME', 'inbox_outbox_receipt_tid'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION inbox.outbox_generation(target text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'inbox_outbox_generation'
LANGUAGE C VOLATILE STRICT
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.outbox_sleep(target text, generation bigint, until timestamptz)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_outbox_sleep'
LANGUAGE C VOLATILE STRICT
SET search_path = pg_catalog, pg_temp;

-- inbox.outbox_retention, as an interval
CREATE FUNCTION inbox.outbox_retention()
RETURNS interval
AS 'MODULE_PATHNAME', 'inbox_outbox_retention'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

-- Microseconds since 1970 at a time: a new key's first position (banner)
CREATE FUNCTION inbox.outbox_position_at(t timestamptz)
RETURNS bigint
AS 'MODULE_PATHNAME', 'inbox_outbox_position_at'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

/*
 * The last position given in each key.  A send holds its key's row lock
 * until it ends: see the banner.  The purge deletes a key's row with the
 * message that holds its last position; the key then starts again from
 * the clock, above every position it had (banner, Retention).
 */
CREATE TABLE inbox.outbox_keys (
	topic text COLLATE pg_catalog."C" NOT NULL,
	key text COLLATE pg_catalog."C" NOT NULL,
	last bigint NOT NULL,
	CONSTRAINT outbox_keys_pkey PRIMARY KEY (topic, key)
);

COMMENT ON TABLE inbox.outbox_keys IS
'per outbox key, the last position given: the row lock that orders a key''s sends';

REVOKE ALL ON TABLE inbox.outbox_keys FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('inbox.outbox_keys', '');

/*
 * The messages, insert-only.  Exactly one of payload and payload_bytes is
 * set.  Neither this table nor outbox_deliveries has a CHECK constraint:
 * every value is checked on the call's arguments (outbox_check, with
 * src/inbox.h's limits) on the only paths that write them, and a CHECK
 * costs every send the rebuilding of its expression, which PostgreSQL
 * does at each statement.  The primary key of outbox_keys refuses a topic
 * or key too long to index.
 */
CREATE TABLE inbox.outbox_messages (
	id uuid NOT NULL,
	topic text COLLATE pg_catalog."C" NOT NULL,
	key text COLLATE pg_catalog."C" NOT NULL,
	position bigint NOT NULL,
	payload jsonb,
	payload_bytes bytea,
	headers jsonb,
	created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT outbox_messages_pkey PRIMARY KEY (id)
);

COMMENT ON TABLE inbox.outbox_messages IS
'one row per message sent through the outbox, never updated; delivery state is in outbox_deliveries';

-- The purge finds the oldest messages through this index
CREATE INDEX outbox_messages_created_at ON inbox.outbox_messages (created_at);

REVOKE ALL ON TABLE inbox.outbox_messages FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('inbox.outbox_messages', '');

/*
 * Delivery state, per (message, target), until the target has the
 * message: the acknowledgement deletes the row.  state: 'p' pending, 'x'
 * dead.  due: when a pending message may next be fetched (its send, or
 * the end of its retry delay); receipt and lease_until: the lease of the
 * fetch that holds it (receipt is the lease's seed, see src/outbox.c);
 * attempts: the fetches it had.  fillfactor: room on each page for a new
 * version of every row on it, since rows sent together are leased
 * together, each lease a HOT update.
 */
CREATE TABLE inbox.outbox_deliveries (
	id uuid NOT NULL,
	target text COLLATE pg_catalog."C" NOT NULL,
	topic text COLLATE pg_catalog."C" NOT NULL,
	key text COLLATE pg_catalog."C" NOT NULL,
	position bigint NOT NULL,
	queued_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	state "char" NOT NULL DEFAULT 'p',
	attempts integer NOT NULL DEFAULT 0,
	due timestamptz NOT NULL DEFAULT pg_catalog.now(),
	receipt uuid,
	lease_until timestamptz,
	last_error text,
	finished_at timestamptz,
	CONSTRAINT outbox_deliveries_pkey PRIMARY KEY (id, target)
) WITH (fillfactor = 50);

COMMENT ON TABLE inbox.outbox_deliveries IS
'per outbox message and target not yet delivered: pending or dead, attempts and lease';

-- The pending rows of a target, key by key in position order: what a
-- fetch walks.  Dead rows stay out of it.
CREATE INDEX outbox_deliveries_open ON inbox.outbox_deliveries (target, topic, key, position)
	WHERE state OPERATOR(pg_catalog.=) 'p'::"char";

-- Dead letters, in an index of their own
CREATE INDEX outbox_deliveries_dead ON inbox.outbox_deliveries (target, finished_at)
	WHERE state OPERATOR(pg_catalog.=) 'x'::"char";

REVOKE ALL ON TABLE inbox.outbox_deliveries FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('inbox.outbox_deliveries', '');

/*
 * Where each topic goes.  A target is a URL that the relay reads; it
 * never holds a secret (outbox_route refuses one): the relay reads them
 * from its own secrets file.  options: max_attempts (before a message is
 * dead), backoff and max_backoff (the first retry delay, and the most it
 * grows to), and whatever else the relay reads.
 */
CREATE TABLE inbox.outbox_routes (
	topic text COLLATE pg_catalog."C" NOT NULL,
	target text COLLATE pg_catalog."C" NOT NULL,
	options jsonb NOT NULL DEFAULT '{}',
	created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT outbox_routes_pkey PRIMARY KEY (topic, target),
	CONSTRAINT outbox_routes_topic_length
		CHECK (pg_catalog.octet_length(topic) OPERATOR(pg_catalog.<=) 256),
	CONSTRAINT outbox_routes_target_length
		CHECK (pg_catalog.octet_length(target) OPERATOR(pg_catalog.<=) 2048)
);

COMMENT ON TABLE inbox.outbox_routes IS 'the targets each outbox topic is delivered to';

REVOKE ALL ON TABLE inbox.outbox_routes FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('inbox.outbox_routes', '');

/*
 * How many messages each (topic, target) delivered: acknowledgements add
 * to it in their own transactions, so it is exact at every snapshot, and
 * outbox_unroute drops the route's row.  Senders never touch it (it would
 * order every send of a topic behind one row lock); the pending and dead
 * messages are counted from their partial indexes.  The row also holds
 * when a delivery was last acknowledged, and the last error, with when it
 * came: outbox_fail's, or outbox_report's for every route of a target.
 */
CREATE TABLE inbox.outbox_sent (
	topic text COLLATE pg_catalog."C" NOT NULL,
	target text COLLATE pg_catalog."C" NOT NULL,
	sent bigint NOT NULL,
	last_error text,
	last_error_at timestamptz,
	last_delivered_at timestamptz,
	CONSTRAINT outbox_sent_pkey PRIMARY KEY (topic, target)
);

COMMENT ON TABLE inbox.outbox_sent IS
'per outbox topic and target, the messages delivered, the last delivery and the last error: outbox_stats';

REVOKE ALL ON TABLE inbox.outbox_sent FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('inbox.outbox_sent', '');

/*
 * Add each (topic, target, sent) of deltas to outbox_sent, with the time
 * (last_delivered_at), in one order
 * (by topic and target), so that two callers never wait for each other's
 * rows in a circle.  PL/pgSQL, so that the statement's plan is kept: a
 * SQL function is planned again at every call, and each acknowledgement
 * calls it.
 */
CREATE FUNCTION inbox.outbox_count_sent(deltas inbox.outbox_sent[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	INSERT INTO inbox.outbox_sent AS s (topic, target, sent, last_delivered_at)
	SELECT d.topic, d.target, pg_catalog.sum(d.sent), pg_catalog.clock_timestamp()
	  FROM pg_catalog.unnest(deltas) AS d
	 GROUP BY d.topic, d.target
	 ORDER BY d.topic, d.target
	ON CONFLICT ON CONSTRAINT outbox_sent_pkey DO UPDATE
	   SET sent = s.sent OPERATOR(pg_catalog.+) EXCLUDED.sent,
		   last_delivered_at = greatest(s.last_delivered_at, EXCLUDED.last_delivered_at);
END
$$;

-- The implementations

/*
 * The next position of a key, taken under its row, held until the
 * transaction ends, or the clock's reading for a key without a row (see
 * the banner): outbox_write's and outbox_requeue's.  The send
 * (src/outbox.c) and outbox_send_many take it within their one statement.
 */
CREATE FUNCTION inbox.outbox_next_position(p_topic text, p_key text)
RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
	INSERT INTO inbox.outbox_keys AS k (topic, key, last)
	VALUES (p_topic, p_key, inbox.outbox_position_at(pg_catalog.clock_timestamp()))
	ON CONFLICT ON CONSTRAINT outbox_keys_pkey DO UPDATE SET last = k.last OPERATOR(pg_catalog.+) 1
	RETURNING k.last
$$;

/*
 * inbox.outbox_write: a send with the caller's id p_id (see the banner;
 * src/outbox.c sends a new id itself).  An id that exists already is the
 * same send again when its topic, key, payload and headers are the same:
 * it returns the id and writes nothing; else IB002.
 * Two sends of one new id race on the primary key: the loser gives back
 * the position it took (it still holds its key's row) and compares.
 */
CREATE FUNCTION inbox.outbox_write(p_topic text, p_key text, p_payload jsonb, p_bytes bytea,
								   p_headers jsonb, p_id uuid)
RETURNS uuid
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	pos bigint;
	old inbox.outbox_messages;
BEGIN
	PERFORM inbox.outbox_check(p_topic, p_key,
							   coalesce(pg_catalog.pg_column_size(p_payload),
										pg_catalog.pg_column_size(p_bytes)));
	PERFORM inbox.outbox_check_headers(p_headers);
	SELECT m.* INTO old FROM inbox.outbox_messages AS m WHERE m.id OPERATOR(pg_catalog.=) p_id;
	IF FOUND THEN
		PERFORM inbox.outbox_same(old, p_topic, p_key, p_payload, p_bytes, p_headers);
		RETURN p_id;
	END IF;
	pos := inbox.outbox_next_position(p_topic, p_key);
	INSERT INTO inbox.outbox_messages AS m (id, topic, key, position, payload, payload_bytes, headers)
	VALUES (p_id, p_topic, p_key, pos, p_payload, p_bytes, p_headers)
	ON CONFLICT ON CONSTRAINT outbox_messages_pkey DO NOTHING;
	IF NOT FOUND THEN
		UPDATE inbox.outbox_keys AS k SET last = k.last OPERATOR(pg_catalog.-) 1
		 WHERE k.topic OPERATOR(pg_catalog.=) p_topic COLLATE "C"
		   AND k.key OPERATOR(pg_catalog.=) p_key COLLATE "C";
		SELECT m.* INTO STRICT old FROM inbox.outbox_messages AS m WHERE m.id OPERATOR(pg_catalog.=) p_id;
		PERFORM inbox.outbox_same(old, p_topic, p_key, p_payload, p_bytes, p_headers);
		RETURN p_id;
	END IF;
	-- A snapshot older than the insert's wait: see outbox_unroute
	IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
		PERFORM FROM inbox.outbox_routes AS r
		  WHERE r.topic OPERATOR(pg_catalog.=) p_topic COLLATE "C" FOR KEY SHARE;
	END IF;
	PERFORM inbox.outbox_wake(r.target) FROM inbox.outbox_routes AS r
	 WHERE r.topic OPERATOR(pg_catalog.=) p_topic COLLATE "C";
	INSERT INTO inbox.outbox_deliveries AS d (id, target, topic, key, position)
	SELECT p_id, r.target, p_topic, p_key, pos
	  FROM inbox.outbox_routes AS r
	 WHERE r.topic OPERATOR(pg_catalog.=) p_topic COLLATE "C";
	RETURN p_id;
END
$$;

/*
 * Raise IB002 unless a message already sent with a caller's id is this
 * one.  The detail names the key only when the message was sent to the
 * caller's topic, the one the entry point checked: an id of another
 * topic, perhaps one reserved to other roles, is answered without its
 * topic or key.
 */
CREATE FUNCTION inbox.outbox_same(old inbox.outbox_messages, p_topic text, p_key text,
								  p_payload jsonb, p_bytes bytea, p_headers jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF (old.topic, old.key, old.payload, old.payload_bytes, old.headers)
	   IS DISTINCT FROM (p_topic, p_key, p_payload, p_bytes, p_headers) THEN
		RAISE EXCEPTION 'outbox message % was sent with other content', old.id
			USING ERRCODE = 'IB002',
				  DETAIL = CASE WHEN old.topic OPERATOR(pg_catalog.=) p_topic COLLATE "C" THEN
							   pg_catalog.format('It was sent to this topic with key "%s"; its topic, key, '
												 'payload and headers must all be the same again.',
												 inbox.quote(old.key))
						   ELSE 'It was not sent to this topic; its topic, key, payload and headers '
								'must all be the same again.' END,
				  HINT = 'A retried send keeps its id and its content; a new message needs a new id.';
	END IF;
END
$$;

-- A send (src/outbox.c): outbox_check's checks, then the key's position,
-- the message and its deliveries in one statement; a caller's id goes
-- through outbox_write, which compares it with a message sent before.
CREATE FUNCTION inbox.outbox_send(topic text, key text, payload jsonb,
								  headers jsonb DEFAULT NULL, id uuid DEFAULT NULL)
RETURNS uuid
AS 'MODULE_PATHNAME', 'inbox_outbox_send_json'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.outbox_send(topic text, key text, payload bytea,
								  headers jsonb DEFAULT NULL, id uuid DEFAULT NULL)
RETURNS uuid
AS 'MODULE_PATHNAME', 'inbox_outbox_send_bytes'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

/*
 * Many messages of one topic: keys[i] with payloads[i], ids in the order
 * of the arrays.  The keys are locked first, in byte order, all at once
 * (see the banner); each key's positions then follow the arrays' order.
 */
CREATE FUNCTION inbox.outbox_send_many(topic text, keys text[], payloads jsonb[],
									   headers jsonb DEFAULT NULL)
RETURNS uuid[]
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	p_topic text := outbox_send_many.topic;
	-- Keys are grouped byte by byte, whatever the caller's collation, as
	-- they are stored
	p_keys text[] COLLATE "C" := outbox_send_many.keys;
	p_payloads jsonb[] := outbox_send_many.payloads;
	p_headers jsonb := outbox_send_many.headers;
	n integer := coalesce(pg_catalog.cardinality(p_keys), 0);
	ids uuid[];
	counts jsonb;
BEGIN
	IF p_keys IS NULL OR p_payloads IS NULL THEN
		RAISE EXCEPTION 'keys and payloads must not be null'
			USING ERRCODE = '22004',
				  HINT = 'Pass two arrays of the same length, empty ones to send nothing.';
	END IF;
	-- unnest would flatten a matrix into a list
	IF pg_catalog.array_ndims(p_keys) OPERATOR(pg_catalog.>) 1 THEN
		RAISE EXCEPTION 'keys must be a one-dimensional array' USING ERRCODE = '22023';
	END IF;
	IF pg_catalog.array_ndims(p_payloads) OPERATOR(pg_catalog.>) 1 THEN
		RAISE EXCEPTION 'payloads must be a one-dimensional array' USING ERRCODE = '22023';
	END IF;
	IF n OPERATOR(pg_catalog.<>) pg_catalog.cardinality(p_payloads) THEN
		RAISE EXCEPTION 'keys and payloads must have the same length'
			USING ERRCODE = '22023',
				  DETAIL = pg_catalog.format('There are %s keys and %s payloads.', n,
											 pg_catalog.cardinality(p_payloads));
	END IF;
	IF n OPERATOR(pg_catalog.>) (SELECT l.batch FROM inbox.outbox_limits() AS l) THEN
		RAISE EXCEPTION 'too many messages in one outbox_send_many'
			USING ERRCODE = '54000',
				  DETAIL = pg_catalog.format('There are %s; the limit is %s.', n,
											 (SELECT l.batch FROM inbox.outbox_limits() AS l)),
				  HINT = 'Send them in several calls, in one transaction if they must commit together.';
	END IF;
	IF n OPERATOR(pg_catalog.=) 0 THEN
		RETURN '{}';
	END IF;
	PERFORM inbox.outbox_check(p_topic, u.k, pg_catalog.pg_column_size(u.p))
	   FROM ROWS FROM (pg_catalog.unnest(p_keys), pg_catalog.unnest(p_payloads)) AS u(k, p);
	PERFORM inbox.outbox_check_headers(p_headers);
	ids := ARRAY(SELECT inbox.uuid_v7() FROM pg_catalog.generate_series(1, n));
	-- c, the messages of each key: a key with a row takes last + 1 ..
	-- last + c; one without, r .. r + c - 1, r the clock's reading, read
	-- for each key as its row is inserted, after the waits for the keys
	-- before it (see the banner)
	counts := (SELECT pg_catalog.jsonb_object_agg(g.k, g.c)
				 FROM (SELECT v.k, pg_catalog.count(*) AS c FROM pg_catalog.unnest(p_keys) AS v(k)
						GROUP BY v.k) AS g);

	WITH items AS (
		SELECT u.i, u.k, u.p, ids[u.i] AS id,
			   pg_catalog.row_number() OVER (PARTITION BY u.k ORDER BY u.i) AS r,
			   (counts OPERATOR(pg_catalog.->>) u.k)::bigint AS c
		  FROM ROWS FROM (pg_catalog.unnest(p_keys), pg_catalog.unnest(p_payloads))
			   WITH ORDINALITY AS u(k, p, i)),
	locked AS (
		INSERT INTO inbox.outbox_keys AS k (topic, key, last)
		SELECT p_topic, g.k,
			   inbox.outbox_position_at(pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.+) g.c
			   OPERATOR(pg_catalog.-) 1
		  FROM (SELECT DISTINCT it.k COLLATE "C" AS k, it.c FROM items AS it
				 ORDER BY 1) AS g
		ON CONFLICT ON CONSTRAINT outbox_keys_pkey DO UPDATE
		   SET last = k.last OPERATOR(pg_catalog.+) (counts OPERATOR(pg_catalog.->>) EXCLUDED.key)::bigint
		RETURNING k.key, k.last),
	messages AS (
		INSERT INTO inbox.outbox_messages AS m (id, topic, key, position, payload, headers)
		SELECT it.id, p_topic, it.k, l.last OPERATOR(pg_catalog.-) it.c OPERATOR(pg_catalog.+) it.r,
			   it.p, p_headers
		  FROM items AS it
		  JOIN locked AS l ON l.key OPERATOR(pg_catalog.=) it.k COLLATE "C"
		RETURNING m.id, m.key, m.position)
	INSERT INTO inbox.outbox_deliveries AS d (id, target, topic, key, position)
	SELECT ms.id, r.target, p_topic, ms.key, ms.position
	  FROM messages AS ms
	 CROSS JOIN inbox.outbox_routes AS r
	 WHERE r.topic OPERATOR(pg_catalog.=) p_topic COLLATE "C";
	-- A snapshot older than the insert's wait: see outbox_unroute
	IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
		PERFORM FROM inbox.outbox_routes AS r
		  WHERE r.topic OPERATOR(pg_catalog.=) p_topic COLLATE "C" FOR KEY SHARE;
	END IF;

	PERFORM inbox.outbox_wake(r.target) FROM inbox.outbox_routes AS r
	 WHERE r.topic OPERATOR(pg_catalog.=) p_topic COLLATE "C";
	RETURN ids;
END
$$;

COMMENT ON FUNCTION inbox.outbox_send(text, text, jsonb, jsonb, uuid) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.outbox_send(text, text, bytea, jsonb, uuid) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.outbox_send_many(text, text[], jsonb[], jsonb) IS
'implementation behind the API function of the same name; call that one';

/*
 * inbox.outbox_lease(target, max, lease_until, now): lease up to max
 * heads of target's keys, due and unleased at now.  inbox.outbox_heads
 * finds them (src/outbox.c): a walk of the open index, one probe per key,
 * that starts after the key where this backend's last fetch for the
 * target stopped and wraps around, and stops once it has max heads, so a
 * fetch reads about as many keys as it leases, however many keys are
 * pending, and each key gets its turn.  The picked rows are locked with
 * SKIP LOCKED, and the lock re-checks them on their latest version: a
 * head another relay leased or acknowledged since the walk's snapshot is
 * passed over.
 *
 * Every step goes by the rows' addresses (ctid) from the walk, or by a
 * primary key probe per leased row: the plan is the same whatever the
 * statistics say, and its cost follows the batch, not the backlog.
 */
CREATE FUNCTION inbox.outbox_lease(p_target text, p_max integer, p_until timestamptz,
								   p_now timestamptz)
RETURNS TABLE (id uuid, topic text, key text, "position" bigint, payload jsonb,
			   payload_bytes bytea, headers jsonb, created_at timestamptz,
			   attempts integer, receipt uuid, lease_until timestamptz)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	tids tid[] := inbox.outbox_heads(p_target, p_max, p_now);
BEGIN
	IF tids IS NULL THEN
		RETURN;
	END IF;
	-- A row updated since the walk's snapshot is either skipped (the
	-- walk's version is dead to this statement's snapshot) or, when the
	-- lock follows it to its latest version, checked again on that one.
	RETURN QUERY
	WITH picked AS (
		SELECT d.ctid AS tid
		  FROM inbox.outbox_deliveries AS d
		 WHERE d.ctid OPERATOR(pg_catalog.=) ANY (tids)
		   AND d.target OPERATOR(pg_catalog.=) p_target COLLATE "C"
		   AND d.state OPERATOR(pg_catalog.=) 'p'::"char"
		   AND d.due OPERATOR(pg_catalog.<=) p_now
		   AND (d.lease_until IS NULL OR d.lease_until OPERATOR(pg_catalog.<=) p_now)
		   FOR UPDATE SKIP LOCKED),
	leased AS (
		UPDATE inbox.outbox_deliveries AS d
		   SET receipt = inbox.outbox_receipt_seed(pg_catalog.gen_random_uuid()),
			   lease_until = p_until, attempts = d.attempts OPERATOR(pg_catalog.+) 1
		  FROM picked AS p
		 WHERE d.ctid OPERATOR(pg_catalog.=) p.tid
		RETURNING d.id, d.topic, d.key, d.position, d.attempts,
				  inbox.outbox_receipt(d.receipt, d.ctid) AS receipt, d.lease_until)
	SELECT l.id, l.topic, l.key, l.position, m.payload, m.payload_bytes, m.headers,
		   m.created_at, l.attempts, l.receipt, l.lease_until
	  FROM leased AS l
	 CROSS JOIN LATERAL (
		-- OFFSET 0 keeps this a probe of the primary key per leased row
		SELECT x.payload, x.payload_bytes, x.headers, x.created_at
		  FROM inbox.outbox_messages AS x
		 WHERE x.id OPERATOR(pg_catalog.=) l.id
		OFFSET 0) AS m
	 ORDER BY l.topic, l.key, l.position;
END
$$;

-- When target's next pending message may become fetchable by the clock
CREATE FUNCTION inbox.outbox_next_due(p_target text, p_now timestamptz)
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT pg_catalog.min(greatest(d.due, coalesce(d.lease_until, d.due)))
	  FROM inbox.outbox_deliveries AS d
	 WHERE d.target OPERATOR(pg_catalog.=) p_target COLLATE "C"
	   AND d.state OPERATOR(pg_catalog.=) 'p'::"char"
	   AND greatest(d.due, coalesce(d.lease_until, d.due)) OPERATOR(pg_catalog.>) p_now
$$;

-- Whether a route names the target
CREATE FUNCTION inbox.outbox_target_known(p_target text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT EXISTS (SELECT FROM inbox.outbox_routes AS r
					WHERE r.target OPERATOR(pg_catalog.=) p_target COLLATE "C")
$$;

/*
 * inbox.outbox_purge(batch) -> (purged, examined): delete at most batch
 * messages older than inbox.outbox_retention that every route delivered:
 * no delivery row is left (src/outbox.c); examined counts those it
 * considered, with the last messages it kept.  A message with a pending
 * or dead delivery stays.  A key's last message goes only with the key's
 * row (see the banner, Retention): idle holds the rows that go, and a
 * doomed message that is its key's last in the statement's snapshot goes
 * only if its key is there.  SKIP LOCKED: two purgers never wait for each
 * other, and the purge never waits for a sender.
 */
CREATE FUNCTION inbox.outbox_purge(p_batch integer, OUT purged bigint, OUT examined bigint)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
	WITH doomed AS (
		SELECT m.id, m.topic, m.key, m.position FROM inbox.outbox_messages AS m
		 WHERE m.created_at OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-) inbox.outbox_retention())
		   AND NOT EXISTS (SELECT FROM inbox.outbox_deliveries AS d
							WHERE d.id OPERATOR(pg_catalog.=) m.id)
		 ORDER BY m.created_at
		 LIMIT p_batch
		   FOR UPDATE SKIP LOCKED),
	idle AS (
		SELECT k.topic, k.key FROM inbox.outbox_keys AS k
		  JOIN doomed AS dm ON k.topic OPERATOR(pg_catalog.=) dm.topic
						   AND k.key OPERATOR(pg_catalog.=) dm.key
		 WHERE k.last OPERATOR(pg_catalog.=) dm.position
		   AND k.last OPERATOR(pg_catalog.<)
			   inbox.outbox_position_at(pg_catalog.now() OPERATOR(pg_catalog.-) inbox.outbox_retention())
		   FOR UPDATE OF k SKIP LOCKED),
	messages AS (
		DELETE FROM inbox.outbox_messages AS m USING doomed AS dm
		 WHERE m.id OPERATOR(pg_catalog.=) dm.id
		   AND (NOT EXISTS (SELECT FROM inbox.outbox_keys AS k
							 WHERE k.topic OPERATOR(pg_catalog.=) dm.topic
							   AND k.key OPERATOR(pg_catalog.=) dm.key
							   AND k.last OPERATOR(pg_catalog.=) dm.position)
				OR EXISTS (SELECT FROM idle
							WHERE idle.topic OPERATOR(pg_catalog.=) dm.topic
							  AND idle.key OPERATOR(pg_catalog.=) dm.key))
		RETURNING 1),
	keys AS (
		DELETE FROM inbox.outbox_keys AS k USING idle
		 WHERE k.topic OPERATOR(pg_catalog.=) idle.topic
		   AND k.key OPERATOR(pg_catalog.=) idle.key)
	SELECT (SELECT pg_catalog.count(*) FROM messages), (SELECT pg_catalog.count(*) FROM doomed)
$$;

/*
 * The relay's API: outbox_targets, outbox_fetch, outbox_ack, outbox_fail,
 * outbox_report.  They name no topic, so they are not entry points:
 * SECURITY DEFINER themselves, granted by the relay bundle (section 8).
 */

-- The routes, for a relay to know which targets to fetch for
CREATE FUNCTION @extschema@.outbox_targets()
RETURNS TABLE (target text, topic text, options jsonb)
LANGUAGE sql STABLE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT r.target, r.topic, r.options FROM inbox.outbox_routes AS r ORDER BY r.target, r.topic
$$;

COMMENT ON FUNCTION @extschema@.outbox_targets() IS
'the outbox routes, by target: what a relay delivers';

/*
 * outbox_fetch(target, max_messages, lease, wait): lease up to
 * max_messages messages for target, at most one per key (its head).  With
 * wait, a fetch that finds nothing sleeps until a send to target commits,
 * a retry comes due or wait has passed, and looks again.
 */
CREATE FUNCTION @extschema@.outbox_fetch(target text, max_messages integer DEFAULT 100,
										 lease interval DEFAULT '30 seconds',
										 wait interval DEFAULT NULL)
RETURNS TABLE (id uuid, topic text, key text, "position" bigint, payload jsonb,
			   payload_bytes bytea, headers jsonb, created_at timestamptz,
			   attempts integer, receipt uuid, lease_until timestamptz)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	p_target text := outbox_fetch.target;
	p_max integer := outbox_fetch.max_messages;
	lease_span interval;
	wait_span interval;
	deadline timestamptz;
	generation bigint;
	t timestamptz;
BEGIN
	PERFORM inbox.outbox_check_target(p_target);
	IF p_max IS NULL OR p_max OPERATOR(pg_catalog.<) 1
	   OR p_max OPERATOR(pg_catalog.>) (SELECT l.batch FROM inbox.outbox_limits() AS l) THEN
		RAISE EXCEPTION 'max_messages must be between 1 and %', (SELECT l.batch FROM inbox.outbox_limits() AS l)
			USING ERRCODE = '22023',
				  DETAIL = pg_catalog.format('It is %s.', coalesce(p_max::text, 'NULL'));
	END IF;
	lease_span := inbox.check_duration(outbox_fetch.lease, 'lease');
	IF lease_span IS NULL OR lease_span OPERATOR(pg_catalog.<=) interval '0' THEN
		RAISE EXCEPTION 'lease must be positive'
			USING ERRCODE = '22023',
				  HINT = 'The lease is how long the relay may take to deliver a message before another may.';
	END IF;
	wait_span := inbox.check_duration(outbox_fetch.wait, 'wait');
	IF wait_span IS NOT NULL THEN
		IF wait_span OPERATOR(pg_catalog.<=) interval '0' THEN
			RAISE EXCEPTION 'wait must be positive'
				USING ERRCODE = '22023', HINT = 'Pass NULL not to wait.';
		END IF;
		IF wait_span OPERATOR(pg_catalog.>) interval '60 seconds' THEN
			RAISE EXCEPTION 'wait must be at most 60 seconds'
				USING ERRCODE = '22023', HINT = 'Wait again when the call returns empty.';
		END IF;
		deadline := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) wait_span;
	END IF;
	LOOP
		IF wait_span IS NOT NULL THEN
			generation := inbox.outbox_generation(p_target);
		END IF;
		t := pg_catalog.clock_timestamp();
		RETURN QUERY SELECT * FROM inbox.outbox_lease(p_target, p_max, t OPERATOR(pg_catalog.+) lease_span, t);
		IF FOUND THEN
			-- The commit of a fetch that leased waits for the disk, and
			-- for the synchronous standbys where there are, even where
			-- synchronous_commit is off or local: a relay may acknowledge
			-- without waiting (inbox-relay does), and this commit makes
			-- durable the acknowledgements this fetch saw, before the keys'
			-- next messages can leave.
			IF pg_catalog.current_setting('synchronous_commit') OPERATOR(pg_catalog.=) ANY ('{off,local}'::text[]) THEN
				PERFORM pg_catalog.set_config('synchronous_commit', 'on', true);
			END IF;
			RETURN;
		END IF;
		IF NOT inbox.outbox_target_known(p_target) THEN
			RAISE EXCEPTION 'no outbox route goes to target "%"', inbox.quote(p_target)
				USING ERRCODE = '42704',
					  HINT = 'outbox_targets() lists the targets; outbox_route(topic, target) adds one.';
		END IF;
		EXIT WHEN wait_span IS NULL OR pg_catalog.clock_timestamp() OPERATOR(pg_catalog.>=) deadline;
		PERFORM inbox.outbox_sleep(p_target, generation,
								   least(deadline, inbox.outbox_next_due(p_target, t)));
	END LOOP;
END
$$;

COMMENT ON FUNCTION @extschema@.outbox_fetch(text, integer, interval, interval) IS
'lease the next message of each key pending for a target; wait for a send''s commit if none';

-- Mark a leased message delivered, after the target confirmed it.  false:
-- the receipt no longer holds it (acknowledged already, or its lease ran
-- out and another fetch took it).
CREATE FUNCTION @extschema@.outbox_ack(receipt uuid)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	p_receipt uuid := outbox_ack.receipt;
BEGIN
	IF p_receipt IS NULL THEN
		RAISE EXCEPTION 'receipt must not be null'
			USING ERRCODE = '22004', HINT = 'Pass the receipt outbox_fetch returned with the message.';
	END IF;
	-- A batch of one: the same statement, count and wake-up
	RETURN @extschema@.outbox_ack_many(ARRAY[p_receipt]) OPERATOR(pg_catalog.=) 1;
END
$$;

COMMENT ON FUNCTION @extschema@.outbox_ack(uuid) IS
'mark a fetched outbox message delivered, by its receipt';

-- Mark a batch of fetched messages delivered, by their receipts: how many
-- the receipts still held.  One statement for a relay's whole batch: each
-- receipt goes to its row's address and deletes the delivery there if
-- the row holds the receipt's seed and is pending (see src/outbox.c).
CREATE FUNCTION @extschema@.outbox_ack_many(receipts uuid[])
RETURNS integer
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	p_receipts uuid[] := outbox_ack_many.receipts;
	targets text[];
	counted inbox.outbox_sent[];
	done integer;
BEGIN
	IF p_receipts IS NULL THEN
		RAISE EXCEPTION 'receipts must not be null'
			USING ERRCODE = '22004', HINT = 'Pass the receipts outbox_fetch returned with the messages.';
	END IF;
	IF pg_catalog.array_ndims(p_receipts) OPERATOR(pg_catalog.>) 1 THEN
		RAISE EXCEPTION 'receipts must be a one-dimensional array' USING ERRCODE = '22023';
	END IF;
	WITH acked AS (
		DELETE FROM inbox.outbox_deliveries AS d
		 USING pg_catalog.unnest(p_receipts) AS r(receipt)
		 WHERE d.ctid OPERATOR(pg_catalog.=) inbox.outbox_receipt_tid(r.receipt)
		   AND d.receipt OPERATOR(pg_catalog.=) inbox.outbox_receipt_seed(r.receipt)
		   AND d.state OPERATOR(pg_catalog.=) 'p'::"char"
		RETURNING d.topic, d.target)
	SELECT pg_catalog.array_agg(DISTINCT a.target), pg_catalog.count(*),
		   pg_catalog.array_agg(ROW(a.topic, a.target, 1, NULL, NULL, NULL)::inbox.outbox_sent)
	  INTO targets, done, counted
	  FROM acked AS a;
	IF done OPERATOR(pg_catalog.>) 0 THEN
		PERFORM inbox.outbox_count_sent(counted);
	END IF;
	-- The keys' next messages are their heads now: wake the relays at commit
	PERFORM inbox.outbox_wake(t.target) FROM pg_catalog.unnest(targets) AS t(target);
	RETURN done;
END
$$;

COMMENT ON FUNCTION @extschema@.outbox_ack_many(uuid[]) IS
'mark fetched outbox messages delivered, by their receipts; how many the receipts still held';

/*
 * Record a failed delivery.  With retry_after, the message may be fetched
 * again after it; without, after the route's backoff: backoff (1 second
 * unless the route says) doubled at each attempt, at most max_backoff (1
 * hour), times a random factor between 0.5 and 1 (jitter, so that keys
 * that failed together do not retry together).  A message that had
 * max_attempts fetches (the route's, or inbox.max_attempts) is dead
 * instead, and its key moves on.  With reached false, the message never
 * reached the target, which could not be reached (the relay could not
 * connect, or lost the connection): its fetch does not count as an
 * attempt, and it is never dead for it, so that an outage of the target
 * holds messages back instead of dead-lettering them.  Returns 'pending'
 * or 'dead'; NULL when the receipt no longer holds the message.
 */
CREATE FUNCTION @extschema@.outbox_fail(receipt uuid, error text, retry_after interval DEFAULT NULL,
										reached boolean DEFAULT true)
RETURNS text
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	p_receipt uuid := outbox_fail.receipt;
	span interval;
	d inbox.outbox_deliveries;
	opts jsonb;
	allowed integer;
	dead boolean;
	tries integer;
BEGIN
	IF p_receipt IS NULL THEN
		RAISE EXCEPTION 'receipt must not be null'
			USING ERRCODE = '22004', HINT = 'Pass the receipt outbox_fetch returned with the message.';
	END IF;
	IF outbox_fail.reached IS NULL THEN
		RAISE EXCEPTION 'reached must not be null'
			USING ERRCODE = '22004',
				  HINT = 'Pass false when the target could not be reached, true (the default) otherwise.';
	END IF;
	span := inbox.check_duration(outbox_fail.retry_after, 'retry_after');
	IF span OPERATOR(pg_catalog.<) interval '0' THEN
		RAISE EXCEPTION 'retry_after must not be negative'
			USING ERRCODE = '22023',
				  HINT = 'Pass NULL for the route''s backoff, or 0 to retry at once.';
	END IF;
	SELECT x.* INTO d FROM inbox.outbox_deliveries AS x
	 WHERE x.ctid OPERATOR(pg_catalog.=) inbox.outbox_receipt_tid(p_receipt)
	   AND x.receipt OPERATOR(pg_catalog.=) inbox.outbox_receipt_seed(p_receipt)
	   AND x.state OPERATOR(pg_catalog.=) 'p'::"char"
	   FOR UPDATE;
	IF NOT FOUND THEN
		RETURN NULL;
	END IF;
	SELECT r.options INTO opts FROM inbox.outbox_routes AS r
	 WHERE r.topic OPERATOR(pg_catalog.=) d.topic AND r.target OPERATOR(pg_catalog.=) d.target;
	allowed := coalesce((opts OPERATOR(pg_catalog.->>) 'max_attempts')::integer,
						pg_catalog.current_setting('inbox.max_attempts')::integer);
	-- The fetches that count: the one that leased the message is given
	-- back when the message never reached the target
	tries := d.attempts;
	IF NOT outbox_fail.reached THEN
		tries := greatest(tries OPERATOR(pg_catalog.-) 1, 0);
	END IF;
	dead := outbox_fail.reached AND tries OPERATOR(pg_catalog.>=) allowed;
	IF span IS NULL AND NOT dead THEN
		span := least(coalesce((opts OPERATOR(pg_catalog.->>) 'max_backoff')::interval, interval '1 hour'),
					  coalesce((opts OPERATOR(pg_catalog.->>) 'backoff')::interval, interval '1 second')
					  OPERATOR(pg_catalog.*) pg_catalog.power(2, least(greatest(tries, 1) OPERATOR(pg_catalog.-) 1, 30)))
				OPERATOR(pg_catalog.*) (0.5 OPERATOR(pg_catalog.+) (pg_catalog.random() OPERATOR(pg_catalog.*) 0.5));
	END IF;
	PERFORM inbox.outbox_wake(d.target);
	UPDATE inbox.outbox_deliveries AS x
	   SET state = CASE WHEN dead THEN 'x' ELSE 'p' END::"char",
		   due = CASE WHEN dead THEN x.due ELSE pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) span END,
		   finished_at = CASE WHEN dead THEN pg_catalog.clock_timestamp() END,
		   receipt = NULL, lease_until = NULL, last_error = outbox_fail.error, attempts = tries
	 WHERE x.id OPERATOR(pg_catalog.=) d.id AND x.target OPERATOR(pg_catalog.=) d.target;
	PERFORM inbox.outbox_note_error(d.topic, d.target, outbox_fail.error);
	RETURN CASE WHEN dead THEN 'dead' ELSE 'pending' END;
END
$$;

COMMENT ON FUNCTION @extschema@.outbox_fail(uuid, text, interval, boolean) IS
'record a failed delivery: retry after a backoff, or dead after max_attempts; not counted when the target was unreachable';

-- Note p_error as the last error of (topic, target), for outbox_stats,
-- under the pair's row lock, as an acknowledgement takes it (after the
-- delivery's, as an acknowledgement does).  PL/pgSQL, so that the plan is
-- kept, as outbox_count_sent's is.
CREATE FUNCTION inbox.outbox_note_error(p_topic text, p_target text, p_error text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	INSERT INTO inbox.outbox_sent AS s (topic, target, sent, last_error, last_error_at)
	VALUES (p_topic, p_target, 0, p_error, pg_catalog.clock_timestamp())
	ON CONFLICT ON CONSTRAINT outbox_sent_pkey DO UPDATE
	   SET last_error = EXCLUDED.last_error, last_error_at = EXCLUDED.last_error_at;
END
$$;

/*
 * Record an error that is the target's, not a message's: the relay
 * could not open the target, or does not serve its scheme.  It becomes
 * the last error of every route to the target; no message counts an
 * attempt.  Returns how many routes it was recorded for.
 */
CREATE FUNCTION @extschema@.outbox_report(target text, error text)
RETURNS integer
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	p_target text := outbox_report.target;
	n integer;
BEGIN
	PERFORM inbox.outbox_check_target(p_target);
	IF outbox_report.error IS NULL THEN
		RAISE EXCEPTION 'error must not be null'
			USING ERRCODE = '22004', HINT = 'Pass the reason the target could not be served.';
	END IF;
	-- In one order, as outbox_count_sent locks them
	PERFORM inbox.outbox_note_error(r.topic, r.target, outbox_report.error)
	   FROM inbox.outbox_routes AS r
	  WHERE r.target OPERATOR(pg_catalog.=) p_target COLLATE "C"
	  ORDER BY r.topic;
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n;
END
$$;

COMMENT ON FUNCTION @extschema@.outbox_report(text, text) IS
'record an error of a target itself (it cannot be opened or served) as the last error of each of its routes';

/*
 * Routes.  A target is a URL of a scheme the relay serves, whose query
 * holds only the parameters that scheme reads, and whose route options
 * are only those the outbox reads: outbox_schemes() is the one list of
 * both.  Secrets live in the relay's secrets file, never in a table: a
 * password in the URL's user information, and a parameter or option
 * whose name, percent-decoded and in any case, names a secret, are
 * refused as such.  A parameter or option must be written as listed,
 * since the relay and libpq read names byte for byte.
 */
CREATE FUNCTION @extschema@.outbox_schemes()
RETURNS TABLE (scheme text, parameters text[], options text[])
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT s.scheme, s.parameters, ARRAY['max_attempts', 'backoff', 'max_backoff']
	  FROM (VALUES
		('amqp', ARRAY['exchange', 'routing_key', 'outbox_headers']),
		('amqps', ARRAY['exchange', 'routing_key', 'outbox_headers', 'cacert']),
		-- A webhook's query string goes to the endpoint as it is, and is
		-- where endpoints take their credentials: none is accepted
		('http', ARRAY[]::text[]),
		('https', ARRAY[]::text[]),
		('postgresql', NULL),
		('postgres', NULL)) AS s0(scheme, parameters)
	 CROSS JOIN LATERAL (SELECT s0.scheme, coalesce(s0.parameters, ARRAY[
		-- The receiving inbox's scope and ordered, then libpq's own
		-- parameters, but for its secrets (password, sslpassword,
		-- oauth_client_secret) and those a relay has no use for
		-- (replication, the interactive OAuth flow)
		'scope', 'ordered',
		'host', 'hostaddr', 'port', 'dbname', 'user', 'passfile', 'require_auth',
		'channel_binding', 'connect_timeout', 'client_encoding', 'options',
		'application_name', 'fallback_application_name', 'keepalives', 'keepalives_idle',
		'keepalives_interval', 'keepalives_count', 'tcp_user_timeout', 'sslmode',
		'sslnegotiation', 'sslcompression', 'sslcert', 'sslkey', 'sslcertmode', 'sslrootcert',
		'sslcrl', 'sslcrldir', 'sslsni', 'requirepeer', 'ssl_min_protocol_version',
		'ssl_max_protocol_version', 'min_protocol_version', 'max_protocol_version',
		'gssencmode', 'krbsrvname', 'gsslib', 'gssdelegation', 'service',
		'target_session_attrs', 'load_balance_hosts'])) AS s(scheme, parameters)
$$;

COMMENT ON FUNCTION @extschema@.outbox_schemes() IS
'the target schemes the relay serves, with the URL parameters and the route options each accepts';

-- Whether a name (a URL parameter's, percent-decoded, or an option's)
-- names a secret, in any case
CREATE FUNCTION inbox.outbox_secret_name(name text)
RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT pg_catalog.lower(name COLLATE "C")
		   ~ '(pass(word|wd|phrase)|pwd|secret|token|api[-_.]?key|authori[sz]ation|credential)'
$$;

-- s with its %XX escapes decoded, as UTF-8; NULL when the bytes are not
-- valid text
CREATE FUNCTION inbox.outbox_url_decode(s text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	RETURN pg_catalog.convert_from(pg_catalog.decode(coalesce(
		(SELECT pg_catalog.string_agg(CASE WHEN r.m[1] ~ '^%[0-9A-Fa-f]{2}$'
											THEN pg_catalog.substr(r.m[1], 2)
											ELSE pg_catalog.encode(pg_catalog.convert_to(r.m[1], 'UTF8'), 'hex')
									   END, '' ORDER BY r.n)
		   FROM pg_catalog.regexp_matches(s, '%[0-9A-Fa-f]{2}|[^%]+|%', 'g') WITH ORDINALITY AS r(m, n)),
		''), 'hex'), 'UTF8');
EXCEPTION WHEN character_not_in_repertoire OR untranslatable_character THEN
	RETURN NULL;
END
$$;

CREATE FUNCTION inbox.outbox_route(topic text, target text, options jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	p_topic text := outbox_route.topic;
	p_target text := outbox_route.target;
	opts jsonb := coalesce(outbox_route.options, '{}');
	p_scheme text;
	parameters text[];
	allowed text[];
	userinfo text;
	pair text;
	raw text;
	name text;
	k text;
BEGIN
	PERFORM inbox.outbox_check(p_topic, 'k', 0);
	PERFORM inbox.outbox_check_target(p_target);
	IF p_target !~ '^[A-Za-z][A-Za-z0-9+.-]*:' THEN
		RAISE EXCEPTION 'target must be a URL'
			USING ERRCODE = '22023',
				  DETAIL = pg_catalog.format('It is "%s".', inbox.quote(p_target)),
				  HINT = 'For example amqp://host/vhost, https://host/path or postgresql://host/db?scope=s.';
	END IF;
	p_scheme := pg_catalog.substring(p_target, '^([^:]*)://');
	SELECT s.parameters, s.options INTO parameters, allowed
	  FROM @extschema@.outbox_schemes() AS s WHERE s.scheme OPERATOR(pg_catalog.=) p_scheme;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'target''s scheme is not one the relay serves'
			USING ERRCODE = '22023',
				  DETAIL = pg_catalog.format('It is "%s".',
											 inbox.quote(pg_catalog.substring(p_target, '^([^:]*):'))),
				  HINT = 'The schemes are ' OPERATOR(pg_catalog.||)
						 (SELECT pg_catalog.string_agg(s.scheme OPERATOR(pg_catalog.||) '://', ', ')
							FROM @extschema@.outbox_schemes() AS s) OPERATOR(pg_catalog.||)
						 ': outbox_schemes() lists them.';
	END IF;
	-- The user information as libpq finds it, the widest reading: up to
	-- the first '@' before the first '/'
	userinfo := pg_catalog.substring(pg_catalog.substring(p_target, '^[^:]*://([^/]*)'), '^([^@]*)@');
	IF pg_catalog.strpos(coalesce(userinfo, ''), ':') OPERATOR(pg_catalog.>) 0 THEN
		RAISE EXCEPTION 'target must not hold a password'
			USING ERRCODE = '22023',
				  DETAIL = 'The routes table is readable by operators, and its rows reach dumps and logs.',
				  HINT = 'Give the target without its password, and put the password in the relay''s secrets file.';
	END IF;
	IF userinfo IS NOT NULL AND p_scheme OPERATOR(pg_catalog.=) ANY ('{http,https}'::text[]) THEN
		RAISE EXCEPTION 'target must not hold a password'
			USING ERRCODE = '22023',
				  DETAIL = 'A webhook''s user information is sent as its credentials.',
				  HINT = 'Give the target without it; the relay signs webhooks with the secret of its secrets file.';
	END IF;
	-- Every pair after the first '?', as libpq reads them: a '#' does not
	-- end the query for it
	FOR pair IN SELECT p FROM pg_catalog.regexp_split_to_table(
					 coalesce(pg_catalog.substring(p_target, '\?(.*)$'), ''), '&') AS p
				 WHERE p OPERATOR(pg_catalog.<>) '' LOOP
		raw := pg_catalog.split_part(pair, '=', 1);
		name := inbox.outbox_url_decode(raw);
		IF inbox.outbox_secret_name(name) THEN
			RAISE EXCEPTION 'target must not hold a secret'
				USING ERRCODE = '22023',
					  DETAIL = pg_catalog.format('URL parameter "%s" names one; the routes table is readable '
												 'by operators, and its rows reach dumps and logs.', inbox.quote(raw)),
					  HINT = 'Put secrets in the relay''s secrets file.';
		END IF;
		IF NOT raw OPERATOR(pg_catalog.=) ANY (parameters) THEN
			RAISE EXCEPTION 'URL parameter "%" is not one that %:// targets take', inbox.quote(raw), p_scheme
				USING ERRCODE = '22023',
					  DETAIL = CASE WHEN pg_catalog.lower(name COLLATE "C") OPERATOR(pg_catalog.=) ANY (parameters)
									THEN pg_catalog.format('It is read as written: write it "%s".',
														   pg_catalog.lower(name COLLATE "C"))
									WHEN pg_catalog.cardinality(parameters) OPERATOR(pg_catalog.=) 0
									THEN 'They take none: the query goes to the endpoint as it is, '
										 'and is where endpoints take credentials.'
									WHEN pg_catalog.cardinality(parameters) OPERATOR(pg_catalog.>) 8
									THEN 'outbox_schemes() lists those they take.'
									ELSE pg_catalog.format('They take %s.', pg_catalog.array_to_string(parameters, ', '))
							   END,
					  HINT = 'outbox_schemes() lists the parameters of each scheme.';
		END IF;
		IF raw OPERATOR(pg_catalog.=) 'ordered'
		   AND inbox.outbox_url_decode(pg_catalog.substr(pair, 9)) IS DISTINCT FROM 'on'
		   AND inbox.outbox_url_decode(pg_catalog.substr(pair, 9)) IS DISTINCT FROM 'off' THEN
			RAISE EXCEPTION 'URL parameter "ordered" must be on or off'
				USING ERRCODE = '22023',
					  DETAIL = pg_catalog.format('It is "%s".', inbox.quote(pg_catalog.substr(pair, 9)));
		END IF;
	END LOOP;
	IF pg_catalog.jsonb_typeof(opts) OPERATOR(pg_catalog.<>) 'object' THEN
		RAISE EXCEPTION 'options must be a JSON object'
			USING ERRCODE = '22023';
	END IF;
	FOR k IN SELECT pg_catalog.jsonb_object_keys(opts) LOOP
		IF inbox.outbox_secret_name(k) THEN
			RAISE EXCEPTION 'options must not hold a secret'
				USING ERRCODE = '22023',
					  DETAIL = pg_catalog.format('Option "%s" names one.', inbox.quote(k)),
					  HINT = 'Put secrets in the relay''s secrets file.';
		END IF;
		IF NOT k OPERATOR(pg_catalog.=) ANY (allowed) THEN
			RAISE EXCEPTION 'option "%" is not one that routes to %:// take', inbox.quote(k), p_scheme
				USING ERRCODE = '22023',
					  DETAIL = pg_catalog.format('They take %s.', pg_catalog.array_to_string(allowed, ', ')),
					  HINT = 'outbox_schemes() lists the options of each scheme.';
		END IF;
	END LOOP;
	BEGIN
		IF (opts OPERATOR(pg_catalog.->>) 'max_attempts')::integer OPERATOR(pg_catalog.<) 1 THEN
			RAISE EXCEPTION USING ERRCODE = '22023';
		END IF;
		IF inbox.check_duration((opts OPERATOR(pg_catalog.->>) 'backoff')::interval, 'backoff')
		   OPERATOR(pg_catalog.<=) interval '0'
		   OR inbox.check_duration((opts OPERATOR(pg_catalog.->>) 'max_backoff')::interval, 'max_backoff')
		   OPERATOR(pg_catalog.<=) interval '0' THEN
			RAISE EXCEPTION USING ERRCODE = '22023';
		END IF;
	EXCEPTION WHEN invalid_text_representation OR invalid_datetime_format OR datetime_field_overflow
				   OR numeric_value_out_of_range OR invalid_parameter_value THEN
		RAISE EXCEPTION 'invalid outbox route options'
			USING ERRCODE = '22023',
				  DETAIL = pg_catalog.format('They are %s.', opts),
				  HINT = 'max_attempts is a positive integer; backoff and max_backoff are positive intervals without months.';
	END;
	INSERT INTO inbox.outbox_routes AS r (topic, target, options)
	VALUES (p_topic, p_target, opts)
	ON CONFLICT ON CONSTRAINT outbox_routes_pkey DO UPDATE SET options = EXCLUDED.options;
	-- The relays re-read their targets when this commits
	PERFORM pg_catalog.pg_notify('inbox_outbox_routes', p_target);
END
$$;

/*
 * Removing a route stops deliveries to its target: the messages of the
 * topic not yet delivered there (pending or dead) are no longer for it,
 * and its count of delivered messages goes.  A send in flight may have
 * read the route and written a delivery this could not see: so this
 * first waits for every send in flight to end, and holds back new ones
 * until it commits (SHARE on outbox_messages, which every send writes
 * and no other writer holds for long but the purge), then deletes with
 * a snapshot that sees what they committed.  Under REPEATABLE READ the
 * snapshot is older than the wait: refused.
 *
 * A sender under REPEATABLE READ or SERIALIZABLE has the same problem the
 * other way round: its snapshot may be older than this unroute, which it
 * waited for, and still show the route.  So such a send locks the routes
 * it delivers to (FOR KEY SHARE, after its insert into outbox_messages
 * has waited), and a route deleted since its snapshot fails it with
 * 40001, which callers at those levels retry anyway.  Under READ
 * COMMITTED a send's statement takes its snapshot after that wait, sees
 * the route gone, and locks nothing.  Hence, at every level: no delivery
 * is left for a target without a route.
 */
CREATE FUNCTION inbox.outbox_unroute(topic text, target text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	p_topic text := outbox_unroute.topic;
	p_target text := outbox_unroute.target;
BEGIN
	PERFORM inbox.outbox_check(p_topic, 'k', 0);
	PERFORM inbox.outbox_check_target(p_target);
	IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
		RAISE EXCEPTION 'outbox_unroute cannot run under REPEATABLE READ or SERIALIZABLE'
			USING ERRCODE = '0A000',
				  DETAIL = 'It waits for the sends in flight, and its snapshot, taken before the wait, '
						   'could not see the deliveries they wrote.',
				  HINT = 'Remove the route in a READ COMMITTED transaction.';
	END IF;
	LOCK TABLE inbox.outbox_messages IN SHARE MODE;
	DELETE FROM inbox.outbox_routes AS r
	 WHERE r.topic OPERATOR(pg_catalog.=) p_topic COLLATE "C"
	   AND r.target OPERATOR(pg_catalog.=) p_target COLLATE "C";
	IF NOT FOUND THEN
		RAISE EXCEPTION 'no outbox route from topic "%" to target "%"',
			inbox.quote(p_topic), inbox.quote(p_target)
			USING ERRCODE = '42704',
				  HINT = 'The view outbox_routes lists the routes.';
	END IF;
	DELETE FROM inbox.outbox_deliveries AS d
	 WHERE d.target OPERATOR(pg_catalog.=) p_target COLLATE "C"
	   AND d.topic OPERATOR(pg_catalog.=) p_topic COLLATE "C";
	DELETE FROM inbox.outbox_sent AS s
	 WHERE s.topic OPERATOR(pg_catalog.=) p_topic COLLATE "C"
	   AND s.target OPERATOR(pg_catalog.=) p_target COLLATE "C";
	PERFORM pg_catalog.pg_notify('inbox_outbox_routes', p_target);
END
$$;

COMMENT ON FUNCTION inbox.outbox_route(text, text, jsonb) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.outbox_unroute(text, text) IS
'implementation behind the API function of the same name; call that one';

-- The entry points

CREATE FUNCTION @extschema@.outbox_send(topic text, key text, payload jsonb,
										headers jsonb DEFAULT NULL, id uuid DEFAULT NULL)
RETURNS uuid
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.outbox_send(text, text, jsonb, jsonb, uuid) IS
'send a JSON message on a topic, in the caller''s transaction, ordered by commit within its key';

CREATE FUNCTION @extschema@.outbox_send(topic text, key text, payload bytea,
										headers jsonb DEFAULT NULL, id uuid DEFAULT NULL)
RETURNS uuid
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.outbox_send(text, text, bytea, jsonb, uuid) IS
'send a binary message on a topic, in the caller''s transaction, ordered by commit within its key';

CREATE FUNCTION @extschema@.outbox_send_many(topic text, keys text[], payloads jsonb[],
											 headers jsonb DEFAULT NULL)
RETURNS uuid[]
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.outbox_send_many(text, text[], jsonb[], jsonb) IS
'send many JSON messages on a topic; their ids, in the order of the arrays';

CREATE FUNCTION @extschema@.outbox_route(topic text, target text, options jsonb DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_admin'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.outbox_route(text, text, jsonb) IS
'deliver a topic''s messages to a target (a URL without secrets), or change the route''s options';

CREATE FUNCTION @extschema@.outbox_unroute(topic text, target text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_admin'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.outbox_unroute(text, text) IS
'stop delivering a topic to a target; its undelivered messages are no longer for it';

/*
 * inbox.caller_sees(scope): whether the role that called the entry point
 * may act on the scope (src/access.c, inbox_enter_rows), for outbox_requeue,
 * which finds its topic in the message's rows.
 */
CREATE FUNCTION inbox.caller_sees(scope text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_caller_sees'
LANGUAGE C STABLE STRICT PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp;

/*
 * Put a dead message back: each of its dead deliveries is pending again,
 * at a new position, the key's next, taken as a send takes one.  So it is
 * delivered after the messages of its key committed before the requeue,
 * and never while one of them is in flight: a key has one message in
 * flight per target, and the positions a target receives in a key only
 * grow.  A message of a topic reserved to roles the caller has not the
 * privileges of is no dead letter to it: the same IB005 as an unknown
 * id, which names no topic.
 */
CREATE FUNCTION inbox.outbox_requeue(id uuid)
RETURNS integer
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	p_id uuid := outbox_requeue.id;
	p_topic text;
	p_key text;
	pos bigint;
	n integer := 0;
BEGIN
	SELECT d.topic, d.key INTO p_topic, p_key FROM inbox.outbox_deliveries AS d
	 WHERE d.id OPERATOR(pg_catalog.=) p_id AND d.state OPERATOR(pg_catalog.=) 'x'::"char"
	 LIMIT 1;
	-- A message's deliveries share its topic
	IF FOUND AND inbox.caller_sees(p_topic) THEN
		-- The key's next position, taken under its row as a send takes one
		-- (the purge may have deleted the row: the clock then starts it)
		pos := inbox.outbox_next_position(p_topic, p_key);
		PERFORM inbox.outbox_wake(d.target) FROM inbox.outbox_deliveries AS d
		 WHERE d.id OPERATOR(pg_catalog.=) p_id AND d.state OPERATOR(pg_catalog.=) 'x'::"char";
		UPDATE inbox.outbox_deliveries AS d
		   SET state = 'p', attempts = 0, due = pg_catalog.clock_timestamp(), finished_at = NULL,
			   position = pos
		 WHERE d.id OPERATOR(pg_catalog.=) p_id AND d.state OPERATOR(pg_catalog.=) 'x'::"char";
		GET DIAGNOSTICS n = ROW_COUNT;
	END IF;
	IF n OPERATOR(pg_catalog.=) 0 THEN
		RAISE EXCEPTION 'outbox message % is not a dead letter', coalesce(p_id::text, 'NULL')
			USING ERRCODE = 'IB005',
				  HINT = 'The view outbox_dead_letters lists the dead letters.';
	END IF;
	RETURN n;
END
$$;

COMMENT ON FUNCTION inbox.outbox_requeue(uuid) IS
'implementation behind the API function of the same name; call that one';

CREATE FUNCTION @extschema@.outbox_requeue(id uuid)
RETURNS integer
AS 'MODULE_PATHNAME', 'inbox_enter_rows'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.outbox_requeue(uuid) IS
'put a dead outbox message back, at the end of its key, for each target it died for';

-- The views, read as the extension's owner through these functions; they
-- show the topics the role querying may act on (inbox.scope_visible)

/*
 * outbox_stats's counts.  The pending and the dead deliveries are read
 * through their partial indexes (sequential scans off, whatever the
 * statistics say), and the delivered ones counted in outbox_sent: the
 * cost follows the backlog, never the delivered history that retention
 * keeps.
 */
CREATE FUNCTION inbox.outbox_counts()
RETURNS TABLE (topic text, target text, pending bigint, oldest_pending timestamptz,
			   sent bigint, failed bigint, dead bigint, last_error text, last_error_at timestamptz,
			   last_delivered_at timestamptz)
LANGUAGE sql STABLE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
	WITH open AS (
		SELECT d.topic, d.target, pg_catalog.count(*) AS pending,
			   pg_catalog.min(d.queued_at) AS oldest_pending,
			   pg_catalog.count(*) FILTER (WHERE d.last_error IS NOT NULL) AS failed
		  FROM inbox.outbox_deliveries AS d
		 WHERE d.state OPERATOR(pg_catalog.=) 'p'::"char"
		 GROUP BY d.topic, d.target),
	dead AS (
		SELECT d.topic, d.target, pg_catalog.count(*) AS dead
		  FROM inbox.outbox_deliveries AS d
		 WHERE d.state OPERATOR(pg_catalog.=) 'x'::"char"
		 GROUP BY d.topic, d.target),
	pairs AS (
		SELECT r.topic, r.target FROM inbox.outbox_routes AS r
		UNION SELECT o.topic, o.target FROM open AS o
		UNION SELECT x.topic, x.target FROM dead AS x
		UNION SELECT s.topic, s.target FROM inbox.outbox_sent AS s
			   WHERE s.sent OPERATOR(pg_catalog.<>) 0)
	SELECT p.topic, p.target, coalesce(o.pending, 0), o.oldest_pending, coalesce(s.sent, 0),
		   coalesce(o.failed, 0), coalesce(x.dead, 0), s.last_error, s.last_error_at, s.last_delivered_at
	  FROM pairs AS p
	  LEFT JOIN open AS o ON o.topic = p.topic AND o.target = p.target
	  LEFT JOIN dead AS x ON x.topic = p.topic AND x.target = p.target
	  LEFT JOIN inbox.outbox_sent AS s ON s.topic = p.topic AND s.target = p.target
$$;

CREATE FUNCTION inbox.outbox_dead()
RETURNS TABLE (id uuid, topic text, key text, "position" bigint, target text,
			   attempts integer, last_error text, created_at timestamptz, died_at timestamptz,
			   payload jsonb, payload_bytes bytea, headers jsonb)
LANGUAGE sql STABLE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT d.id, d.topic, d.key, d.position, d.target, d.attempts, d.last_error,
		   m.created_at, d.finished_at, m.payload, m.payload_bytes, m.headers
	  FROM inbox.outbox_deliveries AS d
	  JOIN inbox.outbox_messages AS m ON m.id = d.id
	 WHERE d.state = 'x'::"char"
$$;

CREATE FUNCTION inbox.outbox_route_rows()
RETURNS TABLE (topic text, target text, options jsonb, created_at timestamptz)
LANGUAGE sql STABLE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT r.topic, r.target, r.options, r.created_at FROM inbox.outbox_routes AS r
$$;

CREATE VIEW @extschema@.outbox_stats WITH (security_barrier) AS
	SELECT c.topic COLLATE "C" AS topic, c.target COLLATE "C" AS target,
		   c.pending, now() - c.oldest_pending AS oldest_pending_age,
		   c.sent, c.failed, c.dead, c.last_error, c.last_error_at, c.last_delivered_at
	  FROM inbox.outbox_counts() AS c
	 WHERE inbox.scope_visible(c.topic);

COMMENT ON VIEW @extschema@.outbox_stats IS
'per outbox topic and target: pending, oldest pending age, sent, failed (retrying), dead, the last error and the last delivery';

CREATE VIEW @extschema@.outbox_dead_letters WITH (security_barrier) AS
	SELECT d.id, d.topic COLLATE "C" AS topic, d.key COLLATE "C" AS key, d.position,
		   d.target COLLATE "C" AS target, d.attempts, d.last_error, d.created_at, d.died_at,
		   d.payload, d.payload_bytes, d.headers
	  FROM inbox.outbox_dead() AS d
	 WHERE inbox.scope_visible(d.topic);

COMMENT ON VIEW @extschema@.outbox_dead_letters IS
'outbox messages that used all their attempts for a target; outbox_requeue puts one back';

CREATE VIEW @extschema@.outbox_routes WITH (security_barrier) AS
	SELECT r.topic COLLATE "C" AS topic, r.target COLLATE "C" AS target, r.options, r.created_at
	  FROM inbox.outbox_route_rows() AS r
	 WHERE inbox.scope_visible(r.topic);

COMMENT ON VIEW @extschema@.outbox_routes IS 'the outbox routes: which target each topic goes to';

REVOKE ALL ON FUNCTION inbox.uuid_v7() FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_position_at(timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_next_position(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_check(text, text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_check_target(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_check_headers(jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.caller_sees(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_requeue(uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_wake(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_generation(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_receipt_seed(uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_receipt(uuid, tid) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_receipt_tid(uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_heads(text, integer, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_sleep(text, bigint, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_write(text, text, jsonb, bytea, jsonb, uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_same(inbox.outbox_messages, text, text, jsonb, bytea, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_send(text, text, jsonb, jsonb, uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_send(text, text, bytea, jsonb, uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_send_many(text, text[], jsonb[], jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_lease(text, integer, timestamptz, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_count_sent(inbox.outbox_sent[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_next_due(text, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_target_known(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_purge(integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_route(text, text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_unroute(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_secret_name(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_url_decode(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.outbox_note_error(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_schemes() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_report(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_send(text, text, jsonb, jsonb, uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_send(text, text, bytea, jsonb, uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_send_many(text, text[], jsonb[], jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_route(text, text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_unroute(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_targets() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_fetch(text, integer, interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_ack(uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_ack_many(uuid[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_fail(uuid, text, interval, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_requeue(uuid) FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.outbox_stats FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.outbox_dead_letters FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.outbox_routes FROM PUBLIC;

-- New in 1.1.0, each in its bundle
SELECT inbox.bundle_add('publisher', 'function', '@extschema@.outbox_send(text, text, jsonb, jsonb, uuid)');
SELECT inbox.bundle_add('publisher', 'function', '@extschema@.outbox_send(text, text, bytea, jsonb, uuid)');
SELECT inbox.bundle_add('publisher', 'function', '@extschema@.outbox_send_many(text, text[], jsonb[], jsonb)');
SELECT inbox.bundle_add('relay', 'function', '@extschema@.outbox_targets()');
SELECT inbox.bundle_add('relay', 'function', '@extschema@.outbox_fetch(text, integer, interval, interval)');
SELECT inbox.bundle_add('relay', 'function', '@extschema@.outbox_ack(uuid)');
SELECT inbox.bundle_add('relay', 'function', '@extschema@.outbox_ack_many(uuid[])');
SELECT inbox.bundle_add('relay', 'function', '@extschema@.outbox_fail(uuid, text, interval, boolean)');
SELECT inbox.bundle_add('operator', 'view', '@extschema@.outbox_stats');
SELECT inbox.bundle_add('operator', 'view', '@extschema@.outbox_dead_letters');
SELECT inbox.bundle_add('operator', 'view', '@extschema@.outbox_routes');
SELECT inbox.bundle_add('operator', 'function', '@extschema@.outbox_requeue(uuid)');

/* ------------------------------------------------------------------------
 * Ordered groups and priorities
 *
 * inbox_receive and inbox_receive_many take a group key and a priority;
 * inbox.entries has a priority column, and its open messages above the
 * default priority that are pending an index of their own (entries_ranked).
 * A scope's takes
 * hand out one message of a group at a time, in the order the receives
 * committed, and return each message's group key, as inbox_dead_letters
 * does.  inbox_set_group_dead_letters says whether a dead letter holds
 * its group.  The receive functions of 1.0.0 are replaced by one form per
 * payload type with the new arguments last, which every call of 1.0.0
 * resolves to, and the takes by forms with the new column: each keeps
 * the EXECUTE privileges its predecessors had (inbox.replace_api).
 * inbox.limits() gives the group key's limit too.  The functions are those
 * of inbox.sql, word for word.
 * ------------------------------------------------------------------------ */

ALTER TABLE inbox.entries ADD COLUMN priority smallint;

CREATE INDEX entries_ranked ON inbox.entries (scope, priority, due, message_id)
	WHERE priority IS NOT NULL AND state OPERATOR(pg_catalog.=) 'p'::"char";

ALTER TABLE inbox.scopes ADD COLUMN group_dead_letters text COLLATE "C";
ALTER TABLE inbox.scopes ADD CONSTRAINT scopes_group_dead_letters_check
	CHECK (group_dead_letters IN ('block', 'skip'));

DROP FUNCTION inbox.limits();
CREATE FUNCTION inbox.limits(OUT scope_bytes integer, OUT message_id_bytes integer,
							 OUT payload_hash_bytes integer, OUT group_key_bytes integer)
AS 'MODULE_PATHNAME', 'inbox_limits'
LANGUAGE C IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp;

/*
 * Ordered groups.  A message received with a group_key belongs to the
 * group (scope, group_key), and a scope's takes hand out at most one
 * message of a group at a time: its head, the member received first.
 *
 *	inbox.groups         one row per group that has messages: its row
 *	                     lock orders the group's receives and releases
 *	inbox.group_members  one row per message of a group not yet done:
 *	                     pending, processing or dead; a dead one that its
 *	                     scope skipped is kept (skipped), out of the order
 *
 * Only a group's head can be taken: every other member is pending with no
 * due (NULL), and a take reads the open index only for dues up to now, so
 * it never sees one.  The head leaves its group when it is completed
 * (its member row is deleted), or when it dies in a scope whose
 * group_dead_letters is 'skip' (its row is marked skipped, so that the
 * dead letter still shows its group); the same transaction gives the
 * next member its due (now()), so that a take sees the next member once
 * that transaction commits, and never if it aborts; a next member
 * received with a later not_before is due then.  A skipped dead
 * letter that inbox_requeue gives back leaves its group, and is taken on
 * its own.  A head that fails with a retry delay
 * stays the head, due at its retry: nothing behind it overtakes it.  A
 * head whose session or lease ends is taken again, as any message.  A
 * dead head in a scope that blocks ('block', the default) holds its group
 * until inbox_requeue gives it back, or the scope is set to 'skip'.
 *
 * Receive order is commit order.  A receive locks its group's row with
 * an upsert, which writes the row once per transaction, and holds the
 * lock until it ends, as outbox_send does for its keys.  With a snapshot
 * taken after the lock, its messages take the positions after the
 * group's last member, and are written with no due; the first of them
 * gets one only if no live member precedes it (src/groups.c, which reads
 * only the group's own rows).  A release updates the same row before it
 * looks for the next member.  So a receive still running holds a release
 * back until it commits, and the release then sees its member; a release
 * that runs first holds the receive back, which then finds no member
 * before its own.  A group's row goes when its last member leaves, in the
 * release that holds it: a receive waiting for it then writes a new one,
 * and positions start over in a group with no member.  So inbox.groups holds
 * the groups that have messages, not every group key ever used.
 * Under REPEATABLE READ or SERIALIZABLE, whichever comes second
 * fails with a serialization failure (40001) instead of reading an old
 * snapshot: both write the row.  A transaction that receives into one
 * group and releases another while a second transaction does the reverse
 * can deadlock; PostgreSQL then aborts one of them.
 */
CREATE TABLE inbox.groups (
	scope text COLLATE pg_catalog."C" NOT NULL,
	group_key text COLLATE pg_catalog."C" NOT NULL,
	CONSTRAINT groups_pkey PRIMARY KEY (scope, group_key),
	CONSTRAINT groups_group_key_length
		CHECK (pg_catalog.octet_length(group_key) BETWEEN 1 AND 1024)
);

COMMENT ON TABLE inbox.groups IS
'per ordered group of the deferred mode that has members: the row lock that orders its receives and releases';

REVOKE ALL ON TABLE inbox.groups FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('inbox.groups', '');

CREATE TABLE inbox.group_members (
	scope text COLLATE pg_catalog."C" NOT NULL,
	message_id text COLLATE pg_catalog."C" NOT NULL,
	group_key text COLLATE pg_catalog."C" NOT NULL,
	position bigint NOT NULL,
	not_before timestamptz,
	skipped boolean NOT NULL DEFAULT false,
	CONSTRAINT group_members_pkey PRIMARY KEY (scope, message_id),
	CONSTRAINT group_members_order UNIQUE (scope, group_key, position)
);

COMMENT ON TABLE inbox.group_members IS
'the messages still in their ordered group, by position: the first is the head, the only one a take can see';

REVOKE ALL ON TABLE inbox.group_members FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('inbox.group_members', '');

/*
 * inbox.group_leave(scope, message_id, receipt, skip): the message (or
 * the one the receipt holds) leaves its group: deleted from it, or kept
 * as skipped (skip); the group's next member becomes due (now()), and
 * the group's row goes when it has no member left.  Nothing for a message
 * in no group.  Two statements in kept plans (src/groups.c): the first
 * takes the member out and writes the group's row (see the banner), the
 * second, with a snapshot taken after that write, finds the next member
 * and makes it due at now() or at its not_before, whichever is later.
 * The completions call the same C directly.
 */
CREATE FUNCTION inbox.group_leave(p_scope text, p_id text, p_receipt uuid, p_skip boolean)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_group_leave_sql'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

-- A message just dead: it leaves its group where the scope skips dead letters
CREATE FUNCTION inbox.group_dead(p_scope text, p_id text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF (SELECT s.group_dead_letters FROM inbox.scopes AS s
		 WHERE s.scope OPERATOR(pg_catalog.=) p_scope COLLATE "C") OPERATOR(pg_catalog.=) 'skip' THEN
		PERFORM inbox.group_leave(p_scope, p_id, NULL, true);
	END IF;
END
$$;

CREATE FUNCTION inbox.inbox_set_group_dead_letters(scope text, action text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
	dead text;
BEGIN
	PERFORM inbox.check_key(inbox_set_group_dead_letters.scope, NULL, false);
	IF inbox_set_group_dead_letters.action NOT IN ('block', 'skip') THEN
		RAISE EXCEPTION 'action must be ''block'' or ''skip'''
			USING ERRCODE = '22023',
				  DETAIL = format('It is "%s".', inbox.quote(inbox_set_group_dead_letters.action)),
				  HINT = 'Pass NULL to go back to the default, ''block''.';
	END IF;
	INSERT INTO inbox.scopes AS s (scope, group_dead_letters)
	VALUES (inbox_set_group_dead_letters.scope, inbox_set_group_dead_letters.action)
	ON CONFLICT (scope) DO UPDATE SET group_dead_letters = EXCLUDED.group_dead_letters;
	IF inbox_set_group_dead_letters.action OPERATOR(pg_catalog.=) 'skip' THEN
		FOR dead IN
			SELECT m.message_id FROM inbox.group_members AS m
			  JOIN inbox.entries AS e
				ON e.scope OPERATOR(pg_catalog.=) m.scope
			   AND e.message_id OPERATOR(pg_catalog.=) m.message_id
			   AND e.bucket OPERATOR(pg_catalog.=) inbox.bucket(m.scope, m.message_id)
			 WHERE m.scope OPERATOR(pg_catalog.=) inbox_set_group_dead_letters.scope COLLATE "C"
			   AND NOT m.skipped
			   AND e.state OPERATOR(pg_catalog.=) 'x'::"char"
			 ORDER BY m.group_key, m.position
		LOOP
			PERFORM inbox.group_leave(inbox_set_group_dead_letters.scope, dead, NULL, true);
		END LOOP;
	END IF;
END
$$;

COMMENT ON FUNCTION inbox.inbox_set_group_dead_letters(text, text) IS
'implementation behind the API function of the same name; call that one';

-- A dead letter its group skipped goes back on its own
CREATE OR REPLACE FUNCTION inbox.inbox_requeue(scope text, message_id text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
	dead tid;
	member tid;
BEGIN
	PERFORM inbox.check_key(inbox_requeue.scope, inbox_requeue.message_id, true);
	PERFORM inbox.wake_takers(inbox_requeue.scope);
	-- By its tid (inbox.entry_tid), read through the leaf's primary key
	dead := inbox.entry_tid(inbox_requeue.scope, inbox_requeue.message_id);
	UPDATE inbox.entries AS e
	   SET state = 'p', attempts = 0, due = now(), finished_at = NULL,
		   owner_session = NULL, lease_until = NULL, receipt = NULL
	 WHERE e.bucket OPERATOR(pg_catalog.=) inbox.bucket(inbox_requeue.scope, inbox_requeue.message_id)
	   AND e.ctid OPERATOR(pg_catalog.=) dead
	   AND e.scope OPERATOR(pg_catalog.=) inbox_requeue.scope COLLATE "C"
	   AND e.message_id OPERATOR(pg_catalog.=) inbox_requeue.message_id COLLATE "C"
	   AND e.state = 'x';
	IF NOT FOUND THEN
		PERFORM inbox.refuse(inbox_requeue.scope, inbox_requeue.message_id, 'requeued', 'x');
	END IF;
	PERFORM inbox.depth_moved(inbox_requeue.scope, 'x', 'p', false);
	-- A dead letter its group skipped is taken on its own; one that holds
	-- its group is its head again
	member := inbox.member_tid(inbox_requeue.scope, inbox_requeue.message_id);
	DELETE FROM inbox.group_members AS m
	 WHERE m.ctid OPERATOR(pg_catalog.=) member
	   AND m.scope OPERATOR(pg_catalog.=) inbox_requeue.scope COLLATE "C"
	   AND m.message_id OPERATOR(pg_catalog.=) inbox_requeue.message_id COLLATE "C"
	   AND m.skipped;
END
$$;

CREATE FUNCTION inbox.group_keys()
RETURNS TABLE (scope text, message_id text, group_key text)
LANGUAGE sql STABLE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT m.scope, m.message_id, m.group_key FROM inbox.group_members AS m
$$;

CREATE OR REPLACE VIEW @extschema@.inbox_dead_letters WITH (security_barrier) AS
	SELECT d.scope COLLATE "C" AS scope, d.message_id COLLATE "C" AS message_id,
		   d.attempts, d.last_error, d.received_at, d.died_at, d.payload, d.payload_bytes,
		   g.group_key COLLATE "C" AS group_key
	  FROM inbox.dead_letters() AS d
	  LEFT JOIN inbox.group_keys() AS g
		ON g.scope OPERATOR(pg_catalog.=) d.scope AND g.message_id OPERATOR(pg_catalog.=) d.message_id
	 WHERE inbox.scope_visible(d.scope);

COMMENT ON VIEW @extschema@.inbox_dead_letters IS
'messages that used all their attempts; inbox_requeue puts one back';

-- The implementations of the receives and takes: owner-only, dropped and made again
DROP FUNCTION inbox.inbox_receive(text, text, jsonb, bytea);
DROP FUNCTION inbox.inbox_receive(text, text, jsonb, bytea, timestamptz);
CREATE FUNCTION inbox.inbox_receive(scope text, message_id text, payload jsonb,
									payload_hash bytea DEFAULT NULL,
									not_before timestamptz DEFAULT NULL,
									group_key text DEFAULT NULL,
									priority integer DEFAULT 0)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_receive_json_1_0'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION inbox.inbox_receive(text, text, jsonb, bytea, timestamptz, text, integer) IS
'implementation behind the API function of the same name; call that one';
REVOKE ALL ON FUNCTION inbox.inbox_receive(text, text, jsonb, bytea, timestamptz, text, integer) FROM PUBLIC;

DROP FUNCTION inbox.inbox_receive(text, text, bytea, bytea);
DROP FUNCTION inbox.inbox_receive(text, text, bytea, bytea, timestamptz);
CREATE FUNCTION inbox.inbox_receive(scope text, message_id text, payload bytea,
									payload_hash bytea DEFAULT NULL,
									not_before timestamptz DEFAULT NULL,
									group_key text DEFAULT NULL,
									priority integer DEFAULT 0)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_receive_bytes_1_0'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION inbox.inbox_receive(text, text, bytea, bytea, timestamptz, text, integer) IS
'implementation behind the API function of the same name; call that one';
REVOKE ALL ON FUNCTION inbox.inbox_receive(text, text, bytea, bytea, timestamptz, text, integer) FROM PUBLIC;

DROP FUNCTION inbox.inbox_receive_many(text, text[], jsonb[], bytea[], timestamptz, text);
CREATE FUNCTION inbox.inbox_receive_many(scope text, message_ids text[], payloads jsonb[],
										 payload_hashes bytea[] DEFAULT NULL,
										 not_before timestamptz DEFAULT NULL,
										 on_mismatch text DEFAULT 'raise',
										 group_keys text[] DEFAULT NULL,
										 priorities integer[] DEFAULT NULL)
RETURNS TABLE (ordinality integer, message_id text, status text)
AS 'MODULE_PATHNAME', 'inbox_receive_many_json'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION inbox.inbox_receive_many(text, text[], jsonb[], bytea[], timestamptz, text, text[], integer[]) IS
'implementation behind the API function of the same name; call that one';
REVOKE ALL ON FUNCTION inbox.inbox_receive_many(text, text[], jsonb[], bytea[], timestamptz, text, text[], integer[]) FROM PUBLIC;

DROP FUNCTION inbox.inbox_receive_many(text, text[], bytea[], bytea[], timestamptz, text);
CREATE FUNCTION inbox.inbox_receive_many(scope text, message_ids text[], payloads bytea[],
										 payload_hashes bytea[] DEFAULT NULL,
										 not_before timestamptz DEFAULT NULL,
										 on_mismatch text DEFAULT 'raise',
										 group_keys text[] DEFAULT NULL,
										 priorities integer[] DEFAULT NULL)
RETURNS TABLE (ordinality integer, message_id text, status text)
AS 'MODULE_PATHNAME', 'inbox_receive_many_bytes'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION inbox.inbox_receive_many(text, text[], bytea[], bytea[], timestamptz, text, text[], integer[]) IS
'implementation behind the API function of the same name; call that one';
REVOKE ALL ON FUNCTION inbox.inbox_receive_many(text, text[], bytea[], bytea[], timestamptz, text, text[], integer[]) FROM PUBLIC;

DROP FUNCTION inbox.inbox_take(text, integer, interval);
CREATE FUNCTION inbox.inbox_take(scope text, max_messages integer DEFAULT 1,
								 lease interval DEFAULT NULL)
RETURNS TABLE (message_id text, payload jsonb, payload_bytes bytea,
			   attempts integer, received_at timestamptz, group_key text)
AS 'MODULE_PATHNAME', 'inbox_take_1_0'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off;

COMMENT ON FUNCTION inbox.inbox_take(text, integer, interval) IS
'implementation behind the API function of the same name; call that one';
REVOKE ALL ON FUNCTION inbox.inbox_take(text, integer, interval) FROM PUBLIC;

DROP FUNCTION inbox.inbox_poll(text, integer, interval, interval);
CREATE FUNCTION inbox.inbox_poll(scope text, max_messages integer DEFAULT 1,
								 lease interval DEFAULT '30 seconds',
								 wait interval DEFAULT NULL)
RETURNS TABLE (message_id text, payload jsonb, payload_bytes bytea,
			   attempts integer, received_at timestamptz,
			   receipt uuid, lease_until timestamptz, group_key text)
AS 'MODULE_PATHNAME', 'inbox_poll_1_0'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off;

COMMENT ON FUNCTION inbox.inbox_poll(text, integer, interval, interval) IS
'implementation behind the API function of the same name; call that one';
REVOKE ALL ON FUNCTION inbox.inbox_poll(text, integer, interval, interval) FROM PUBLIC;

/*
 * inbox.replace_api(new, old, create): drop the API functions old (new's
 * own signature when it only changes its result) and run create, which
 * makes new; new goes into their bundle and is granted to every role
 * that was granted EXECUTE on any of them.  Its initial privileges stay
 * as this script sets them (no PUBLIC), so that pg_dump dumps those
 * grants, as inbox.bundle_add does.
 */
CREATE FUNCTION inbox.replace_api(p_new text, p_old text[], p_create text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	grants text[];
	bundle text;
	init pg_catalog.pg_init_privs;
	g text;
	old text;
BEGIN
	SELECT pg_catalog.array_agg(DISTINCT
			   CASE WHEN x.grantee = 0 THEN 'PUBLIC'
					ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(x.grantee)) END
			   || CASE WHEN x.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
	  INTO grants
	  FROM pg_catalog.unnest(p_old) AS o(f)
	  JOIN pg_catalog.pg_proc AS p ON p.oid = o.f::regprocedure
	 CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) AS x
	 WHERE x.privilege_type = 'EXECUTE' AND x.grantee <> p.proowner;
	SELECT pg_catalog.min(b.bundle) INTO STRICT bundle FROM inbox.bundle_objects AS b
	 WHERE b.object_type = 'function' AND b.object = ANY (p_old);
	DELETE FROM inbox.bundle_objects AS b
	 WHERE b.object_type = 'function' AND b.object = ANY (p_old);
	FOREACH old IN ARRAY p_old
	LOOP
		EXECUTE pg_catalog.format('DROP FUNCTION %s', old);
	END LOOP;
	EXECUTE p_create;
	EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', p_new);
	SELECT i.* INTO init FROM pg_catalog.pg_init_privs AS i
	 WHERE (i.objoid, i.classoid, i.objsubid) = (p_new::regprocedure, 'pg_catalog.pg_proc'::regclass, 0);
	FOREACH g IN ARRAY coalesce(grants, '{}')
	LOOP
		EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', p_new, g);
	END LOOP;
	DELETE FROM pg_catalog.pg_init_privs AS i
	 WHERE (i.objoid, i.classoid, i.objsubid) = (p_new::regprocedure, 'pg_catalog.pg_proc'::regclass, 0);
	IF init.objoid IS NOT NULL THEN
		INSERT INTO pg_catalog.pg_init_privs VALUES (init.*);
	END IF;
	INSERT INTO inbox.bundle_objects (bundle, object_type, object) VALUES (bundle, 'function', p_new);
END
$$;

SELECT inbox.replace_api('@extschema@.inbox_receive(text, text, jsonb, bytea, timestamptz, text, integer)',
						 ARRAY['@extschema@.inbox_receive(text, text, jsonb, bytea)',
							   '@extschema@.inbox_receive(text, text, jsonb, bytea, timestamptz)'],
$create$
CREATE FUNCTION @extschema@.inbox_receive(scope text, message_id text, payload jsonb,
										  payload_hash bytea DEFAULT NULL,
										  not_before timestamptz DEFAULT NULL,
										  group_key text DEFAULT NULL,
										  priority integer DEFAULT 0)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
$create$);
COMMENT ON FUNCTION @extschema@.inbox_receive(text, text, jsonb, bytea, timestamptz, text, integer) IS
'store a message as pending, not to be taken before not_before, behind the earlier messages of its group, ahead of lower priorities: true if new, false (or IB001) if the key exists in any state, IB002 on a payload mismatch';


SELECT inbox.replace_api('@extschema@.inbox_receive(text, text, bytea, bytea, timestamptz, text, integer)',
						 ARRAY['@extschema@.inbox_receive(text, text, bytea, bytea)',
							   '@extschema@.inbox_receive(text, text, bytea, bytea, timestamptz)'],
$create$
CREATE FUNCTION @extschema@.inbox_receive(scope text, message_id text, payload bytea,
										  payload_hash bytea DEFAULT NULL,
										  not_before timestamptz DEFAULT NULL,
										  group_key text DEFAULT NULL,
										  priority integer DEFAULT 0)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
$create$);
COMMENT ON FUNCTION @extschema@.inbox_receive(text, text, bytea, bytea, timestamptz, text, integer) IS
'store a binary message (EDI, protobuf, ...) as pending, as the jsonb form does';


SELECT inbox.replace_api('@extschema@.inbox_receive_many(text, text[], jsonb[], bytea[], timestamptz, text, text[], integer[])',
						 ARRAY['@extschema@.inbox_receive_many(text, text[], jsonb[], bytea[], timestamptz, text)'],
$create$
CREATE FUNCTION @extschema@.inbox_receive_many(scope text, message_ids text[], payloads jsonb[],
											   payload_hashes bytea[] DEFAULT NULL,
											   not_before timestamptz DEFAULT NULL,
											   on_mismatch text DEFAULT 'raise',
											   group_keys text[] DEFAULT NULL,
											   priorities integer[] DEFAULT NULL)
RETURNS TABLE (ordinality integer, message_id text, status text)
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
$create$);
COMMENT ON FUNCTION @extschema@.inbox_receive_many(text, text[], jsonb[], bytea[], timestamptz, text, text[], integer[]) IS
'store a batch of messages as pending: one row per id, received, duplicate or (on_mismatch => ''return'') mismatch';


SELECT inbox.replace_api('@extschema@.inbox_receive_many(text, text[], bytea[], bytea[], timestamptz, text, text[], integer[])',
						 ARRAY['@extschema@.inbox_receive_many(text, text[], bytea[], bytea[], timestamptz, text)'],
$create$
CREATE FUNCTION @extschema@.inbox_receive_many(scope text, message_ids text[], payloads bytea[],
											   payload_hashes bytea[] DEFAULT NULL,
											   not_before timestamptz DEFAULT NULL,
											   on_mismatch text DEFAULT 'raise',
											   group_keys text[] DEFAULT NULL,
											   priorities integer[] DEFAULT NULL)
RETURNS TABLE (ordinality integer, message_id text, status text)
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
$create$);
COMMENT ON FUNCTION @extschema@.inbox_receive_many(text, text[], bytea[], bytea[], timestamptz, text, text[], integer[]) IS
'store a batch of binary messages as pending: one row per id';


SELECT inbox.replace_api('@extschema@.inbox_take(text, integer, interval)',
						 ARRAY['@extschema@.inbox_take(text, integer, interval)'],
$create$
CREATE FUNCTION @extschema@.inbox_take(scope text, max_messages integer DEFAULT 1,
									   lease interval DEFAULT NULL)
RETURNS TABLE (message_id text, payload jsonb, payload_bytes bytea,
			   attempts integer, received_at timestamptz, group_key text)
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
$create$);
COMMENT ON FUNCTION @extschema@.inbox_take(text, integer, interval) IS
'take up to max_messages pending messages, oldest first; concurrent takers never get the same one';


SELECT inbox.replace_api('@extschema@.inbox_poll(text, integer, interval, interval)',
						 ARRAY['@extschema@.inbox_poll(text, integer, interval, interval)'],
$create$
CREATE FUNCTION @extschema@.inbox_poll(scope text, max_messages integer DEFAULT 1,
									   lease interval DEFAULT '30 seconds',
									   wait interval DEFAULT NULL)
RETURNS TABLE (message_id text, payload jsonb, payload_bytes bytea,
			   attempts integer, received_at timestamptz,
			   receipt uuid, lease_until timestamptz, group_key text)
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
$create$);
COMMENT ON FUNCTION @extschema@.inbox_poll(text, integer, interval, interval) IS
'take up to max_messages messages under a lease, each with a receipt any session may complete; waits up to wait for one to arrive';


DROP FUNCTION inbox.replace_api(text, text[], text);

CREATE FUNCTION @extschema@.inbox_set_group_dead_letters(scope text, action text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_set_group_dead_letters(text, text) IS
'what a dead letter does to its ordered group: ''block'' (the default) holds the group until inbox_requeue, ''skip'' lets the next message go';

REVOKE ALL ON FUNCTION inbox.group_leave(text, text, uuid, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.group_dead(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_set_group_dead_letters(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_set_group_dead_letters(text, text) FROM PUBLIC;

-- inbox_stats shows the groups that wait behind a failed or dead head
/*
 * Per scope, the ordered groups (section 4) whose head waits for its
 * retry after a failure, or died and holds its group, and since when the
 * oldest has been held: its head's last take, or its death.  Read only
 * when a group has a member, so that a database without groups (and a
 * distributed one, which refuses them) plans no join of them.
 */
CREATE FUNCTION inbox.group_waits()
RETURNS TABLE (scope text, groups_blocked bigint, blocked_since timestamptz)
LANGUAGE plpgsql STABLE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF NOT EXISTS (SELECT FROM inbox.group_members) THEN
		RETURN;
	END IF;
	RETURN QUERY
	SELECT m.scope, pg_catalog.count(*),
		   pg_catalog.min(CASE WHEN e.state OPERATOR(pg_catalog.=) 'x'::"char" THEN e.finished_at
							   ELSE e.taken_at END)
	  FROM inbox.group_members AS m
	  JOIN inbox.entries AS e
		ON e.scope OPERATOR(pg_catalog.=) m.scope
	   AND e.message_id OPERATOR(pg_catalog.=) m.message_id
	   AND e.bucket OPERATOR(pg_catalog.=) inbox.bucket(m.scope, m.message_id)
	 WHERE NOT m.skipped
	   AND (e.state OPERATOR(pg_catalog.=) 'x'::"char"
			OR (e.state OPERATOR(pg_catalog.=) 'p'::"char" AND e.attempts OPERATOR(pg_catalog.>) 0
				AND e.due OPERATOR(pg_catalog.>) pg_catalog.now()))
	 GROUP BY m.scope;
END
$$;

CREATE OR REPLACE VIEW @extschema@.inbox_stats WITH (security_barrier) AS
	SELECT v.scope,
		   v.claims, v.duplicates, v.mismatches, v.rows_purged, v.last_purge,
		   v.retention, (v.k).clock, (v.k).cutoff, (v.k).oldest_entry, (v.k).purge_lag,
		   v.entries_retained, v.pending, v.processing, v.dead, v.oldest_pending_age,
		   v.failures, v.content_duplicates, v.groups_blocked, v.oldest_group_block_age
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
				   w.content_duplicates,
				   coalesce(g.groups_blocked, 0) AS groups_blocked,
				   now() - g.blocked_since AS oldest_group_block_age
			  FROM inbox.scope_counters() AS c
			  FULL JOIN inbox.scope_rows() AS s USING (scope)
			  FULL JOIN inbox.scope_backlog() AS b USING (scope)
			  LEFT JOIN inbox.content_counters() AS w USING (scope)
			  LEFT JOIN inbox.group_waits() AS g USING (scope)
			OFFSET 0) AS v
	 WHERE inbox.scope_visible(v.scope);

COMMENT ON VIEW @extschema@.inbox_stats IS
'per-scope claims, duplicates, mismatches, content duplicates, blocked ordered groups, purge progress and retention clock';

-- ======================================================================
-- Depth: inbox_depth, from shared-memory counters (src/depth.c)
-- ======================================================================

/*
 * Depth (src/depth.c).  inbox_depth(scope) returns the scope's pending
 * messages, those of them that are due, and the messages being processed,
 * from counters in shared memory that the receives, takes, completions,
 * failures and requeues keep at commit: no count of rows, whatever the
 * backlog.  A scope the counters do not hold yet is counted once.  The SQL
 * functions that move a message tell the counters with inbox.depth_moved,
 * after their UPDATE; inbox_drop_scope has its scope counted again with
 * inbox.depth_forget.
 */
CREATE FUNCTION inbox.depth_moved(scope text, from_state "char", to_state "char", later boolean)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_depth_moved_sql'
LANGUAGE C VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.depth_forget(scope text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_depth_forget_sql'
LANGUAGE C VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.inbox_depth(scope text)
RETURNS TABLE (pending bigint, due bigint, processing bigint)
AS 'MODULE_PATHNAME', 'inbox_depth_1_1'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off;

COMMENT ON FUNCTION inbox.inbox_depth(text) IS
'implementation behind the API function of the same name; call that one';

CREATE FUNCTION @extschema@.inbox_depth(scope text)
RETURNS TABLE (pending bigint, due bigint, processing bigint)
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_depth(text) IS
'the scope''s pending messages, those of them due now, and the messages being processed, from shared-memory counters';

REVOKE ALL ON FUNCTION inbox.depth_moved(text, "char", "char", boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.depth_forget(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_depth(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_depth(text) FROM PUBLIC;

SELECT inbox.bundle_add('worker', 'function', '@extschema@.inbox_depth(text)');
SELECT inbox.bundle_add('consumer', 'function', '@extschema@.inbox_depth(text)');

/* ------------------------------------------------------------------------
 * A batch of completions by receipt
 */

/*
 * A batch of completions by receipt (src/complete_many.c): each as
 * inbox_complete by receipt, and a receipt that holds no message is
 * reported, not raised, while the others complete.
 */
CREATE FUNCTION inbox.inbox_complete_many(scope text, receipts uuid[], results jsonb[] DEFAULT NULL)
RETURNS TABLE (ordinality integer, receipt uuid, status text)
AS 'MODULE_PATHNAME', 'inbox_complete_many'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION inbox.inbox_complete_many(text, uuid[], jsonb[]) IS
'implementation behind the API function of the same name; call that one';

CREATE FUNCTION @extschema@.inbox_complete_many(scope text, receipts uuid[],
												results jsonb[] DEFAULT NULL)
RETURNS TABLE (ordinality integer, receipt uuid, status text)
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_complete_many(text, uuid[], jsonb[]) IS
'mark the messages a batch of receipts holds as done: one row per receipt, completed, duplicate or not_owner';

REVOKE ALL ON FUNCTION inbox.inbox_complete_many(text, uuid[], jsonb[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_complete_many(text, uuid[], jsonb[]) FROM PUBLIC;

-- New in 1.1.0: granted to the roles that hold the rest of its bundle
SELECT inbox.bundle_add('worker', 'function', '@extschema@.inbox_complete_many(text, uuid[], jsonb[])');

/* ------------------------------------------------------------------------
 * The relays' heartbeat: outbox_relays
 */

/*
 * One row per running relay process (a child of inbox-relay, one per
 * target), written by the relay over its fetching connection with
 * outbox_relay_beat, at most about once a second.  A row belongs to the
 * database session that wrote it, named by its backend's pid and start
 * time: the view shows a row only while that session lives, and a beat
 * from a new session deletes the rows of sessions that are gone.  A
 * relay killed with SIGKILL closes its socket; its backend ends at once
 * when idle, or within a second when it waits in outbox_fetch (which
 * checks the client every second), and its row leaves the view with it.
 */
CREATE TABLE inbox.outbox_relays (
	backend_pid integer NOT NULL,
	backend_start timestamptz NOT NULL,
	target text COLLATE pg_catalog."C" NOT NULL,
	host text COLLATE pg_catalog."C" NOT NULL,
	pid integer NOT NULL,
	started_at timestamptz NOT NULL,
	last_fetch_at timestamptz,
	delivered bigint NOT NULL,
	failed bigint NOT NULL,
	beat_at timestamptz NOT NULL,
	CONSTRAINT outbox_relays_pkey PRIMARY KEY (backend_pid, backend_start)
);

COMMENT ON TABLE inbox.outbox_relays IS
'the running relay processes, one row per database session that beats (outbox_relay_beat)';

REVOKE ALL ON TABLE inbox.outbox_relays FROM PUBLIC;

-- Whether the session of backend pid, started at backend_start, still runs
CREATE FUNCTION inbox.outbox_relay_alive(p_backend_pid integer, p_backend_start timestamptz)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_get_activity(p_backend_pid) AS s
					WHERE s.backend_start OPERATOR(pg_catalog.=) p_backend_start)
$$;

/*
 * A relay process's heartbeat: its target, host and pid, how long it has
 * run and since its last fetch, and what it delivered and failed since it
 * started.  Durations, not the relay's clock, so that a relay on another
 * host with a skewed clock still reads right.  The first beat of a session
 * inserts its row and deletes those of sessions that are gone.
 */
CREATE FUNCTION @extschema@.outbox_relay_beat(target text, host text, pid integer,
											  running interval, since_fetch interval,
											  delivered bigint, failed bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	me_start timestamptz := (SELECT s.backend_start
							   FROM pg_catalog.pg_stat_get_activity(pg_catalog.pg_backend_pid()) AS s);
BEGIN
	IF target IS NULL OR host IS NULL OR pid IS NULL OR running IS NULL
	   OR delivered IS NULL OR failed IS NULL THEN
		RAISE EXCEPTION 'outbox_relay_beat''s arguments must not be NULL, but since_fetch'
			USING ERRCODE = '22004';
	END IF;
	UPDATE inbox.outbox_relays AS r
	   SET target = outbox_relay_beat.target, host = outbox_relay_beat.host,
		   pid = outbox_relay_beat.pid,
		   started_at = pg_catalog.now() OPERATOR(pg_catalog.-) running,
		   last_fetch_at = pg_catalog.now() OPERATOR(pg_catalog.-) since_fetch,
		   delivered = outbox_relay_beat.delivered, failed = outbox_relay_beat.failed,
		   beat_at = pg_catalog.now()
	 WHERE r.backend_pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
	   AND r.backend_start OPERATOR(pg_catalog.=) me_start;
	IF NOT FOUND THEN
		DELETE FROM inbox.outbox_relays AS r
		 WHERE NOT inbox.outbox_relay_alive(r.backend_pid, r.backend_start);
		INSERT INTO inbox.outbox_relays
		VALUES (pg_catalog.pg_backend_pid(), me_start, outbox_relay_beat.target,
				outbox_relay_beat.host, outbox_relay_beat.pid,
				pg_catalog.now() OPERATOR(pg_catalog.-) running,
				pg_catalog.now() OPERATOR(pg_catalog.-) since_fetch,
				outbox_relay_beat.delivered, outbox_relay_beat.failed, pg_catalog.now());
	END IF;
END
$$;

COMMENT ON FUNCTION @extschema@.outbox_relay_beat(text, text, integer, interval, interval, bigint, bigint) IS
'a relay process''s heartbeat, for outbox_relays: its target, host, pid, time running and since its last fetch, messages delivered and failed';

-- The rows of the sessions that live, read as the extension's owner.  Like
-- the other helpers of the views, it stays executable by PUBLIC, who
-- cannot name it (schema inbox is not usable by PUBLIC).
CREATE FUNCTION inbox.outbox_relay_rows()
RETURNS TABLE (target text, host text, pid integer, started_at timestamptz,
			   last_fetch_at timestamptz, delivered bigint, failed bigint, beat_at timestamptz)
LANGUAGE sql STABLE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT r.target, r.host, r.pid, r.started_at, r.last_fetch_at, r.delivered, r.failed, r.beat_at
	  FROM inbox.outbox_relays AS r
	 WHERE inbox.outbox_relay_alive(r.backend_pid, r.backend_start)
$$;

CREATE VIEW @extschema@.outbox_relays AS
	SELECT r.target COLLATE "C" AS target, r.host COLLATE "C" AS host, r.pid, r.started_at,
		   r.last_fetch_at, r.delivered, r.failed, r.beat_at
	  FROM inbox.outbox_relay_rows() AS r;

COMMENT ON VIEW @extschema@.outbox_relays IS
'the running relay processes: target, host and pid, started, last fetch, messages delivered and failed since start';

REVOKE ALL ON FUNCTION inbox.outbox_relay_alive(integer, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_relay_beat(text, text, integer, interval, interval, bigint, bigint) FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.outbox_relays FROM PUBLIC;

SELECT inbox.bundle_add('relay', 'function',
						'@extschema@.outbox_relay_beat(text, text, integer, interval, interval, bigint, bigint)');
SELECT inbox.bundle_add('operator', 'view', '@extschema@.outbox_relays');

-- Routes' schemes and the target's own errors, each in its bundles
SELECT inbox.bundle_add('operator', 'function', '@extschema@.outbox_schemes()');
SELECT inbox.bundle_add('relay', 'function', '@extschema@.outbox_schemes()');
SELECT inbox.bundle_add('relay', 'function', '@extschema@.outbox_report(text, text)');
