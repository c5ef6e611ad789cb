/*
 * sql/inbox.sql: the current definition of every SQL object of extension
 * inbox, written by hand.  The build turns it into inbox--<version>.sql.
 *
 * An installed database moves from one version to the next through the
 * literal upgrade scripts beside it (inbox--A--B.sql); test/t/005 checks
 * that an upgraded database and a fresh install of this file have the
 * same objects, definitions, grants and comments.
 *
 * Contents, one section per feature:
 *
 *	 1. Storage             schema inbox, shared tables, helpers, drop guard
 *	 2. Claims              inbox_claim, inbox_status: one message at once;
 *	                        content windows
 *	 3. Batch claims        inbox_claim_many: many messages in one call
 *	 4. Deferred mode       receive now; take, complete or fail later
 *	 5. Streams             ordered streams, by a high-water mark
 *	 6. Forget              audited removal of processed entries
 *	 7. Retention           the retention clock, the purge, dropping a scope
 *	 8. Grants and bundles  scope grants; bundles of API privileges
 *	 9. Monitoring          the operators' views, inbox_stats_reset
 *	10. Scale-out           inbox_distribute, the Citus drop path
 *	11. Outbox              outbox_send: messages to deliver, ordered by commit
 *	12. Ingest              inbox_subscribe: broker queues into scopes, acknowledged
 *	                        after the commit; the rejects
 *
 * Each section holds everything of its feature: tables, internal
 * functions, implementations, entry points, views, comments and
 * privileges.  It uses only what it or an earlier section defines; the one
 * exception is the list of the bundles' objects (section 8), which names
 * the views of section 9 and the functions and views of section 11 as
 * text.
 *
 * Everything is schema-qualified, and every implementation (SECURITY
 * DEFINER, in C or SQL) pins its search_path, so that nothing a caller
 * puts on its own path can change what runs.
 *
 * The API.  Every API function that names a scope is an entry point: a
 * SECURITY INVOKER C function that checks the scope grants for the role
 * that called it, then calls the SECURITY DEFINER implementation of the
 * same name and arguments in schema inbox (src/access.c says why it takes
 * two functions).  Nobody but the extension's owner may call an
 * implementation directly, and EXECUTE on the entry points is granted to
 * nobody: an administrator grants it to the consumer roles (see README),
 * a bundle at a time (section 8).
 *
 * Privileges.  A table's REVOKE follows the table; the other REVOKEs of a
 * section close it.  The functions of schema inbox that no section
 * revokes keep PUBLIC's EXECUTE: inbox.scope_visible, which answers only
 * for the role calling, the read-only helpers that the views call as the
 * role querying them, and helpers that only read or compute.  PUBLIC
 * cannot use schema inbox, so it names none of them.
 */

-- complain if the script is sourced in psql rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION inbox" to load this file. \quit

-- ======================================================================
-- 1. Storage
-- ======================================================================

/*
 * The tables every feature works on: inbox.entries, one row per message
 * claimed or received; inbox.scopes, the per-scope settings and retention
 * clock; inbox.scope_grants, which the entry points of every feature
 * check.  Besides them: the helpers more than one feature calls, and the
 * drop guard that keeps the entries from going with a careless DROP.
 */

/*
 * The tables live in schema inbox, which belongs to the extension and on
 * which nobody but its owner has any privilege: application roles reach
 * the rows only through the API functions.  The script fails if a schema
 * called inbox already exists, rather than adopting one that somebody else
 * may control.
 */
CREATE SCHEMA inbox;
COMMENT ON SCHEMA inbox IS 'storage of the inbox extension; use the inbox_* functions';
REVOKE ALL ON SCHEMA inbox FROM PUBLIC;

/*
 * The bucket of a key, 0 to 16383, the same in a database of any encoding
 * (src/keys.c): its high three bits are a hash of the scope's UTF-8 form
 * and pick the leaf of inbox.entries that holds all of the scope's
 * entries; its low eleven bits are a hash of the whole key's UTF-8 form.
 */
CREATE FUNCTION inbox.bucket(scope text, message_id text)
RETURNS smallint
AS 'MODULE_PATHNAME', 'inbox_bucket_sql'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

/*
 * One row per (scope, message_id) ever claimed or received and not yet
 * purged.
 *
 * The primary key is the arbiter of every claim.  Keys compare byte-wise
 * (COLLATE "C"), so two ids are the same message exactly when their bytes
 * are equal, whatever the database's locale.
 *
 * The table is partitioned so that retention can work leaf by leaf, by
 * ranges of a bucket the extension computes from the key and stores
 * (inbox.bucket).  A key's bucket is fixed, so each leaf's unique index
 * covers every entry its key can have, and uniqueness is still global.
 * The leaf depends on the scope alone: one consumer's claims, batches and
 * takes all work in one heap and one set of indexes, as they would in an
 * unpartitioned table, and a batch's neighbouring ids share index pages.
 * The bucket is stored rather than derived by PostgreSQL's hash
 * partitioning because that hash is of the key's bytes in the database's
 * encoding: a dump restored into another encoding would route re-encoded
 * keys to other leaves, or fail a leaf's COPY and lose every entry in it.
 * A stored bucket of the UTF-8 form puts every row back where claims look
 * for it.  The claim path writes and reads the key's leaf directly,
 * without tuple routing.
 *
 * The NOT NULL constraints are named as PostgreSQL 18 would name them:
 * 18 records them in pg_constraint, with names unique in the schema, and
 * an update script creates this table while the table it replaces still
 * holds those names.  Earlier versions of PostgreSQL accept the names and
 * ignore them.
 *
 * The length limits repeat those of the C code (src/inbox.h), for rows
 * that arrive by COPY, and so does the bucket: a row whose stored bucket is
 * not its key's (a restore that reinterpreted a key's bytes, say from
 * SQL_ASCII into LATIN1) holds a key that no claim will ever send, and the
 * message would then be claimed twice, so such a row fails its COPY,
 * loudly.  The bucket's eleven bits of the whole key's hash are what catch
 * a reinterpreted message id: such a row slips through with a chance of
 * 1 in 2048, and a restore stops at the first one caught.  Nothing
 * else is checked here: every other column is written only by the
 * extension's functions, which check their values, and a CHECK costs each
 * claim its evaluation.
 *
 * state: 'd' done (every claim, and a completed deferred message), 'p'
 * pending, 'r' processing, 'x' dead.  The other columns after state belong
 * to the deferred mode (inbox_receive, inbox_take, ...) and are NULL for
 * claims.  due is when an open message is next worth a take's look: a
 * pending one's arrival (or its not_before, or the end of its retry
 * delay); for one being processed, the end of its lease if inbox_poll took
 * it under a lease, or else its take: every take then checks whether its
 * lease ran out or its owner session ended.
 * receipt names the take that holds a processing message (src/deferred.c).
 * priority is a received message's priority when it is above the default
 * (0), which is stored as NULL: a message of the default priority, and
 * every claim, costs it nothing (section 4, "Priorities").  headers are a
 * received message's headers (a JSON object of strings, as an outbox
 * message's), handed to the worker that takes it; NULL for none and for
 * every claim.
 */
CREATE TABLE inbox.entries (
	scope text COLLATE pg_catalog."C" CONSTRAINT entries_scope_not_null NOT NULL,
	message_id text COLLATE pg_catalog."C" CONSTRAINT entries_message_id_not_null NOT NULL,
	bucket smallint CONSTRAINT entries_bucket_not_null NOT NULL,
	received_at timestamptz CONSTRAINT entries_received_at_not_null NOT NULL DEFAULT pg_catalog.now(),
	payload_hash bytea,
	state "char" CONSTRAINT entries_state_not_null NOT NULL DEFAULT 'd',
	payload jsonb,
	payload_bytes bytea,
	attempts integer,
	owner_session bigint,
	taken_at timestamptz,
	lease_until timestamptz,
	due timestamptz,
	receipt uuid,
	last_error text,
	result jsonb,
	finished_at timestamptz,
	priority smallint,
	headers jsonb,
	CONSTRAINT entries_pkey PRIMARY KEY (scope, message_id, bucket),
	CONSTRAINT entries_scope_length
		CHECK (pg_catalog.octet_length(scope) OPERATOR(pg_catalog.<=) 256),
	CONSTRAINT entries_message_id_length
		CHECK (pg_catalog.octet_length(message_id) OPERATOR(pg_catalog.<=) 1024),
	CONSTRAINT entries_bucket
		CHECK (bucket OPERATOR(pg_catalog.=) inbox.bucket(scope, message_id))
) PARTITION BY RANGE (bucket);

COMMENT ON TABLE inbox.entries IS 'one row per claimed message; the primary key arbitrates claims';

CREATE TABLE inbox.entries_p0 PARTITION OF inbox.entries FOR VALUES FROM (0) TO (2048);
CREATE TABLE inbox.entries_p1 PARTITION OF inbox.entries FOR VALUES FROM (2048) TO (4096);
CREATE TABLE inbox.entries_p2 PARTITION OF inbox.entries FOR VALUES FROM (4096) TO (6144);
CREATE TABLE inbox.entries_p3 PARTITION OF inbox.entries FOR VALUES FROM (6144) TO (8192);
CREATE TABLE inbox.entries_p4 PARTITION OF inbox.entries FOR VALUES FROM (8192) TO (10240);
CREATE TABLE inbox.entries_p5 PARTITION OF inbox.entries FOR VALUES FROM (10240) TO (12288);
CREATE TABLE inbox.entries_p6 PARTITION OF inbox.entries FOR VALUES FROM (12288) TO (14336);
CREATE TABLE inbox.entries_p7 PARTITION OF inbox.entries FOR VALUES FROM (14336) TO (16384);

-- Retention finds a scope's oldest entries through this index.
CREATE INDEX entries_scope_received_at ON inbox.entries (scope, received_at);

-- Messages pending or processing, by when they are due: what a take
-- scans, from the oldest due up to now, so that it never walks a delayed
-- message.  Done entries (every claim) and dead letters stay out of it, so
-- it stays small.  message_id breaks ties between messages received in
-- one transaction: takes hand them out in id order.
CREATE INDEX entries_open ON inbox.entries (scope, due, message_id)
	WHERE state OPERATOR(pg_catalog.<>) 'd'::"char" AND state OPERATOR(pg_catalog.<>) 'x'::"char";

-- Pending messages above the default priority, by priority and due: a
-- take reads them level by level, highest first, each level from its
-- oldest due up to now (src/priorities.c).  Messages of the default
-- priority stay out of it, and a message leaves it when taken, so that its
-- levels are not strewn with the entries of messages taken since the last
-- vacuum.  They are all in entries_open too, which a take reads for the
-- default priority and for the messages taken and lost.  Its name on each
-- leaf is PostgreSQL's own, entries_pN_scope_priority_due_message_id_idx,
-- which src/priorities.c looks up.
CREATE INDEX entries_ranked ON inbox.entries (scope, priority, due, message_id)
	WHERE priority IS NOT NULL AND state OPERATOR(pg_catalog.=) 'p'::"char";

-- The take that holds a processing message, for completions by receipt.
CREATE INDEX entries_receipt ON inbox.entries (receipt)
	WHERE state OPERATOR(pg_catalog.=) 'r'::"char";

-- Dead letters, in an index of their own: takes never walk them.
CREATE INDEX entries_dead ON inbox.entries (scope, finished_at)
	WHERE state OPERATOR(pg_catalog.=) 'x'::"char";

REVOKE ALL ON TABLE inbox.entries FROM PUBLIC;
REVOKE ALL ON TABLE inbox.entries_p0 FROM PUBLIC;
REVOKE ALL ON TABLE inbox.entries_p1 FROM PUBLIC;
REVOKE ALL ON TABLE inbox.entries_p2 FROM PUBLIC;
REVOKE ALL ON TABLE inbox.entries_p3 FROM PUBLIC;
REVOKE ALL ON TABLE inbox.entries_p4 FROM PUBLIC;
REVOKE ALL ON TABLE inbox.entries_p5 FROM PUBLIC;
REVOKE ALL ON TABLE inbox.entries_p6 FROM PUBLIC;
REVOKE ALL ON TABLE inbox.entries_p7 FROM PUBLIC;
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
 * Retention state, per scope: the retention override, the retention clock
 * the purge keeps (how far it has looked, the pauses it found), an
 * estimate of the entries retained, the deferred mode's max_attempts
 * override and what a dead letter does to its group (section 4), and the
 * content window (section 2).  See inbox.observe for the
 * clock.  A retention is at most
 * 2147483647 seconds (about 68 years), the range of inbox.retention.
 */
CREATE TABLE inbox.scopes (
	scope text COLLATE pg_catalog."C" NOT NULL,
	retention interval,
	observed_until timestamptz,
	pauses pg_catalog.tstzrange[] NOT NULL DEFAULT '{}',
	retained bigint NOT NULL DEFAULT 0,
	max_attempts integer,
	content_window interval,
	content_action text COLLATE "C",
	group_dead_letters text COLLATE "C",
	CONSTRAINT scopes_pkey PRIMARY KEY (scope),
	CONSTRAINT scopes_retention_range
		CHECK (retention OPERATOR(pg_catalog.>) '0'::interval
			   AND retention OPERATOR(pg_catalog.<=) '2147483647 seconds'::interval),
	CONSTRAINT scopes_max_attempts_positive
		CHECK (max_attempts OPERATOR(pg_catalog.>) 0),
	CONSTRAINT scopes_content_window_check
		CHECK ((content_window IS NULL) = (content_action IS NULL)
			   AND content_window OPERATOR(pg_catalog.>) '0'::interval
			   AND content_action IN ('warn', 'reject')),
	CONSTRAINT scopes_group_dead_letters_check
		CHECK (group_dead_letters IN ('block', 'skip'))
);

COMMENT ON TABLE inbox.scopes IS 'per-scope retention override and retention clock';

-- What every backend reads to cache the content windows (src/window.c):
-- the few scopes that keep one, however many scopes there are
CREATE INDEX scopes_content_window ON inbox.scopes (scope) WHERE content_window IS NOT NULL;

REVOKE ALL ON TABLE inbox.scopes FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('inbox.scopes', '');

/*
 * Scope grants.  A scope without a row here is open to every role that may
 * execute the API; once it has one, only the granted roles (and the roles
 * that have their privileges) may act on it.  grantee is the role's name,
 * as pg_dump names roles everywhere: a restore into another cluster finds
 * the same roles, never attaches a grant to whatever role has the same
 * OID there, and cannot fail on a missing role.  A grant whose role does
 * not exist (dropped, or not created before a restore) matches nobody, so
 * its scope stays closed: the safe side.
 */
CREATE TABLE inbox.scope_grants (
	scope text COLLATE "C" NOT NULL,
	grantee text COLLATE "C" NOT NULL,
	granted_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT scope_grants_pkey PRIMARY KEY (scope, grantee),
	CONSTRAINT scope_grants_scope_check
		CHECK (pg_catalog.octet_length(scope) BETWEEN 1 AND 256),
	CONSTRAINT scope_grants_grantee_check
		CHECK (pg_catalog.octet_length(grantee) BETWEEN 1 AND 63)
);

REVOKE ALL ON TABLE inbox.scope_grants FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('inbox.scope_grants', '');

-- Every backend caches the grants (src/access.c); any change drops the caches.
CREATE FUNCTION inbox.scope_grants_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'inbox_scope_grants_changed'
LANGUAGE C;

CREATE TRIGGER scope_grants_changed
	AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON inbox.scope_grants
	FOR EACH STATEMENT EXECUTE FUNCTION inbox.scope_grants_changed();

-- The key limits the C code enforces; the constraints of inbox.entries
-- must agree.
CREATE FUNCTION inbox.limits(OUT scope_bytes integer, OUT message_id_bytes integer,
							 OUT payload_hash_bytes integer, OUT group_key_bytes integer)
AS 'MODULE_PATHNAME', 'inbox_limits'
LANGUAGE C IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp;

-- The argument checks and quoting of the C functions, for the SQL ones
CREATE FUNCTION inbox.check_key(scope text, message_id text, with_id boolean)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_check_key'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

-- A duration's check, and its span with days of 24 hours (src/keys.c)
CREATE FUNCTION inbox.check_duration(value interval, argname text)
RETURNS interval
AS 'MODULE_PATHNAME', 'inbox_check_duration_sql'
LANGUAGE C STABLE STRICT
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.quote(text)
RETURNS text
AS 'MODULE_PATHNAME', 'inbox_quote_sql'
LANGUAGE C IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp;

-- Drop the shared-memory counters (src/stats.c) of one scope, or of every
-- scope when NULL: on this node (forget_node_counters), or, through
-- forget_counters, on every node when this is the coordinator of a
-- distributed inbox (section 9)
CREATE FUNCTION inbox.forget_node_counters(scope text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_forget_counters'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.forget_counters(scope text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_forget_cluster_counters'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

/*
 * inbox.scope_visible(scope): whether the role querying may act on the
 * scope.  It only answers for the role itself, so PUBLIC may execute it.
 *
 * The views that show rows of scopes (inbox_forget_log, inbox_stats,
 * inbox_dead_letters) filter on it, and show only the scopes the role
 * querying them may act on (all of them for a superuser): a view reads its
 * tables as its owner but calls functions as the role querying it, so
 * inbox.scope_visible() answers for that role.  They are security
 * barriers: otherwise the planner could run a cheap function of the
 * caller's WHERE clause on rows of other scopes before the filter, and the
 * function could print them.
 */
CREATE FUNCTION inbox.scope_visible(scope text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_scope_visible'
LANGUAGE C STABLE STRICT PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp;

/*
 * The drop guard.  DROP EXTENSION inbox, and DROP OWNED BY its owner,
 * without CASCADE are refused while entries exist; with CASCADE, and for
 * DROP SCHEMA ... CASCADE of a schema the extension lives in, they warn
 * (src/guard.c).  The trigger belongs to the extension, so it goes with
 * it.  On a distributed inbox, it calls inbox.citus_drop_tables (section
 * 10) first.
 */
CREATE FUNCTION inbox.guard_drop()
RETURNS event_trigger
AS 'MODULE_PATHNAME', 'inbox_guard_drop'
LANGUAGE C
SET search_path = pg_catalog, pg_temp;

CREATE EVENT TRIGGER inbox_guard_drop ON ddl_command_start
	WHEN TAG IN ('DROP EXTENSION', 'DROP SCHEMA', 'DROP OWNED')
	EXECUTE FUNCTION inbox.guard_drop();

REVOKE ALL ON FUNCTION inbox.scope_grants_changed() FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.forget_node_counters(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.forget_counters(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.guard_drop() FROM PUBLIC;

-- ======================================================================
-- 2. Claims
-- ======================================================================

/*
 * A consumer that processes a message at once claims it in the
 * transaction of its effect (src/claim.c): the claim inserts the message's
 * entry, and the primary key of inbox.entries decides which of two
 * concurrent claims of one key is new.  The entry commits or rolls back
 * with the effect.  inbox_status reads the entry of a message, whichever
 * feature wrote it.
 */

CREATE FUNCTION inbox.inbox_claim(scope text, message_id text,
								  payload_hash bytea DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_claim_1_0'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.inbox_status(scope text, message_id text,
								   OUT received_at timestamptz,
								   OUT payload_hash bytea,
								   OUT state text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'inbox_status_1_0'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
ROWS 1;

COMMENT ON FUNCTION inbox.inbox_claim(text, text, bytea) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_status(text, text) IS
'implementation behind the API function of the same name; call that one';

CREATE FUNCTION @extschema@.inbox_claim(scope text, message_id text,
										payload_hash bytea DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_claim(text, text, bytea) IS
'claim a message in the current transaction: true if new, false (or IB001) if already processed, IB002 on a payload mismatch';

CREATE FUNCTION @extschema@.inbox_status(scope text, message_id text,
										 OUT received_at timestamptz,
										 OUT payload_hash bytea,
										 OUT state text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE
ROWS 1;

COMMENT ON FUNCTION @extschema@.inbox_status(text, text) IS
'the entry of a message (received_at, payload_hash, state), or no row';

REVOKE ALL ON FUNCTION inbox.inbox_claim(text, text, bytea) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_status(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_claim(text, text, bytea) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_status(text, text) FROM PUBLIC;

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

-- ======================================================================
-- 3. Batch claims
-- ======================================================================

/*
 * inbox_claim_many claims a batch of ids of one scope in one call, in the
 * caller's transaction, and answers one row per id: claimed, duplicate or
 * (with on_mismatch => 'return') mismatch.
 */

CREATE FUNCTION inbox.inbox_claim_many(scope text, message_ids text[],
									   payload_hashes bytea[] DEFAULT NULL,
									   on_mismatch text DEFAULT 'raise')
RETURNS TABLE (ordinality integer, message_id text, status text)
AS 'MODULE_PATHNAME', 'inbox_claim_many_1_0'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION inbox.inbox_claim_many(text, text[], bytea[], text) IS
'implementation behind the API function of the same name; call that one';

CREATE FUNCTION @extschema@.inbox_claim_many(scope text, message_ids text[],
											 payload_hashes bytea[] DEFAULT NULL,
											 on_mismatch text DEFAULT 'raise')
RETURNS TABLE (ordinality integer, message_id text, status text)
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_claim_many(text, text[], bytea[], text) IS
'claim a batch of messages in the current transaction: one row per id, claimed, duplicate or (on_mismatch => ''return'') mismatch';

REVOKE ALL ON FUNCTION inbox.inbox_claim_many(text, text[], bytea[], text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_claim_many(text, text[], bytea[], text) FROM PUBLIC;

-- ======================================================================
-- 4. Deferred mode
-- ======================================================================

/*
 * Receive now, process later (src/deferred.c, src/wakeup.c, src/front.c).
 * inbox_receive and inbox_receive_many store messages as pending; a
 * worker takes them and completes each in the transaction of its effect.
 * inbox_take binds what it takes to its session; inbox_poll takes under a
 * lease and gives each message a receipt, which any session may complete,
 * fail or extend, and can wait for messages to arrive.  A failed message
 * is pending again after its retry delay, or dead after its last attempt;
 * inbox_requeue puts a dead one back.  inbox_result returns what
 * inbox_complete stored.
 *
 * The forms with not_before and the forms by receipt are overloads beside
 * the others rather than new arguments of them: a function whose
 * arguments or result columns change must be dropped and created again,
 * which would drop the EXECUTE privileges administrators granted on it,
 * and a GRANT run by an update script would be recorded as one of the
 * extension's initial privileges, which pg_dump then leaves out.
 */

-- Owner sessions of the deferred mode (src/session.c)
CREATE FUNCTION inbox.session_key()
RETURNS bigint
AS 'MODULE_PATHNAME', 'inbox_session_key'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.session_alive(owner bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_session_alive'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

-- Wake the takes waiting on a scope when this transaction commits
CREATE FUNCTION inbox.wake_takers(scope text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_wake_takers'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

-- For messages moved by hand (an UPDATE of inbox.entries, as the tests
-- do): the next take of the scope scans it from its oldest entry.
CREATE FUNCTION inbox.forget_front(scope text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_forget_front'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

-- Count a failure in the scope's shared-memory counters (src/stats.c)
CREATE FUNCTION inbox.count_failure(scope text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_count_failure'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

-- The attempts allowed in a scope: its override, or inbox.max_attempts.
CREATE FUNCTION inbox.max_attempts(p_scope text)
RETURNS integer
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT coalesce((SELECT s.max_attempts FROM inbox.scopes AS s
					 WHERE s.scope OPERATOR(pg_catalog.=) p_scope COLLATE "C"),
					current_setting('inbox.max_attempts')::integer)
$$;

CREATE FUNCTION inbox.state_name("char")
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT CASE $1 WHEN 'p' THEN 'pending' WHEN 'r' THEN 'processing'
				   WHEN 'd' THEN 'done' WHEN 'x' THEN 'dead' END
$$;

/*
 * inbox.refuse(scope, message_id, action, expected state): explain why an
 * UPDATE of complete/fail/extend/requeue matched no row, and raise.  An id
 * that no message has, written as a UUID, is most likely a receipt passed
 * as an untyped literal, which resolves to the message-id form: the hint
 * names the receipt form.  It is only a pattern match, on the error path.
 */
CREATE FUNCTION inbox.refuse(p_scope text, p_id text, p_action text, p_expected "char")
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

/*
 * inbox.refuse_receipt(scope, receipt, action): explain why an UPDATE by
 * receipt matched no row, and raise.
 */
CREATE FUNCTION inbox.refuse_receipt(p_scope text, p_receipt uuid, p_action text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF p_receipt IS NULL THEN
		RAISE EXCEPTION 'receipt must not be null' USING ERRCODE = '22004';
	END IF;
	RAISE EXCEPTION 'the receipt does not hold a message in scope "%"', inbox.quote(p_scope)
		USING ERRCODE = 'IB004',
			  DETAIL = format('The message that receipt %s was given for was completed or failed since, or another take has it now (its lease ran out, or the session that took it ended).', p_receipt),
			  HINT = format('Roll back the transaction, so that the effect of this processing does not commit; a message can only be %s under the receipt of its latest take.', p_action);
END
$$;

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

/*
 * fail by owner session or by receipt: one body, whose UPDATE matches the
 * session's own message (p_receipt NULL), or the message the receipt
 * holds.  extend by owner session is below; extend by receipt is C
 * (src/deferred.c), so that Citus can delegate it.
 */
CREATE FUNCTION inbox.fail_message(p_scope text, p_id text, p_receipt uuid,
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

CREATE FUNCTION inbox.extend_lease(p_scope text, p_id text, p_lease interval)
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

/*
 * Priorities.  A message received with a priority above 0 (up to 32767)
 * keeps it in inbox.entries.priority; the default, 0, is stored as NULL,
 * so that neither a message of the default priority nor a claim pays for
 * it.  The pending messages above the default are in the index
 * entries_ranked (section 1) besides entries_open.  A take hands out, for
 * what remains of max_messages at each step: the messages of any
 * priority due for longer than inbox.priority_age, by due; the other due
 * messages above the default, by priority then due; the other due
 * messages of the default priority, and the messages taken and lost, by
 * due (src/priorities.c).  So no message waits behind higher priorities
 * for longer than inbox.priority_age (an hour by default; 0 makes
 * priorities strict), and a scope without priorities takes exactly as
 * before.  Within an ordered group, only the head is due: order wins over
 * priority, and the head competes with its own priority.  A retry delay,
 * a lease, a requeue and a not_before move a message's due and keep its
 * priority.
 */

-- The implementations

CREATE FUNCTION inbox.inbox_receive(scope text, message_id text, payload jsonb,
									payload_hash bytea DEFAULT NULL,
									not_before timestamptz DEFAULT NULL,
									group_key text DEFAULT NULL,
									priority integer DEFAULT 0,
									headers jsonb DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_receive_json_1_0'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.inbox_receive(scope text, message_id text, payload bytea,
									payload_hash bytea DEFAULT NULL,
									not_before timestamptz DEFAULT NULL,
									group_key text DEFAULT NULL,
									priority integer DEFAULT 0,
									headers jsonb DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_receive_bytes_1_0'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.inbox_receive_many(scope text, message_ids text[], payloads jsonb[],
										 payload_hashes bytea[] DEFAULT NULL,
										 not_before timestamptz DEFAULT NULL,
										 on_mismatch text DEFAULT 'raise',
										 group_keys text[] DEFAULT NULL,
										 priorities integer[] DEFAULT NULL,
										 headers jsonb[] DEFAULT NULL)
RETURNS TABLE (ordinality integer, message_id text, status text)
AS 'MODULE_PATHNAME', 'inbox_receive_many_json'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.inbox_receive_many(scope text, message_ids text[], payloads bytea[],
										 payload_hashes bytea[] DEFAULT NULL,
										 not_before timestamptz DEFAULT NULL,
										 on_mismatch text DEFAULT 'raise',
										 group_keys text[] DEFAULT NULL,
										 priorities integer[] DEFAULT NULL,
										 headers jsonb[] DEFAULT NULL)
RETURNS TABLE (ordinality integer, message_id text, status text)
AS 'MODULE_PATHNAME', 'inbox_receive_many_bytes'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

/*
 * The take and the completion are C (src/deferred.c, src/complete.c):
 * they run kept plans, which do not depend on statistics or on
 * plan_cache_mode.  The takes' SET clauses keep their plans on the
 * open-messages index whatever the statistics say (src/deferred.c says
 * why).  inbox_take binds what it
 * takes to this session; inbox_poll also gives each message a receipt,
 * which any session may complete, fail or extend, and can wait for
 * messages to arrive.
 */
CREATE FUNCTION inbox.inbox_take(scope text, max_messages integer DEFAULT 1,
								 lease interval DEFAULT NULL)
RETURNS TABLE (message_id text, payload jsonb, payload_bytes bytea,
			   attempts integer, received_at timestamptz, group_key text,
			   headers jsonb)
AS 'MODULE_PATHNAME', 'inbox_take_1_0'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off;

CREATE FUNCTION inbox.inbox_poll(scope text, max_messages integer DEFAULT 1,
								 lease interval DEFAULT '30 seconds',
								 wait interval DEFAULT NULL)
RETURNS TABLE (message_id text, payload jsonb, payload_bytes bytea,
			   attempts integer, received_at timestamptz,
			   receipt uuid, lease_until timestamptz, group_key text,
			   headers jsonb)
AS 'MODULE_PATHNAME', 'inbox_poll_1_0'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off;

CREATE FUNCTION inbox.inbox_complete(scope text, message_id text, result jsonb DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_complete_1_0'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.inbox_complete(scope text, receipt uuid, result jsonb DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_complete_receipt_1_0'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

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

CREATE FUNCTION inbox.inbox_fail(scope text, message_id text, error text,
								 retry_after interval DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM inbox.check_key(inbox_fail.scope, inbox_fail.message_id, true);
	RETURN inbox.fail_message(inbox_fail.scope, inbox_fail.message_id, NULL,
							  inbox_fail.error, inbox_fail.retry_after);
END
$$;

CREATE FUNCTION inbox.inbox_fail(scope text, receipt uuid, error text,
								 retry_after interval DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM inbox.check_key(inbox_fail.scope, NULL, false);
	IF inbox_fail.receipt IS NULL THEN
		PERFORM inbox.refuse_receipt(inbox_fail.scope, NULL, 'failed');
	END IF;
	RETURN inbox.fail_message(inbox_fail.scope, NULL, inbox_fail.receipt,
							  inbox_fail.error, inbox_fail.retry_after);
END
$$;

CREATE FUNCTION inbox.inbox_extend(scope text, message_id text, lease interval)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM inbox.check_key(inbox_extend.scope, inbox_extend.message_id, true);
	RETURN inbox.extend_lease(inbox_extend.scope, inbox_extend.message_id, inbox_extend.lease);
END
$$;

CREATE FUNCTION inbox.inbox_extend(scope text, receipt uuid, lease interval)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'inbox_extend_receipt_1_0'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.inbox_requeue(scope text, message_id text)
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

CREATE FUNCTION inbox.inbox_set_max_attempts(scope text, max_attempts integer)
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

/*
 * What a dead letter does to its group: 'block' (the group waits for
 * inbox_requeue; the default, NULL) or 'skip' (the next member becomes
 * due).  Setting 'skip' releases the groups its dead heads hold now.
 */
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

CREATE FUNCTION inbox.inbox_result(scope text, message_id text)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'inbox_result_1_0'
LANGUAGE C STABLE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION inbox.inbox_receive(text, text, jsonb, bytea, timestamptz, text, integer, jsonb) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_receive(text, text, bytea, bytea, timestamptz, text, integer, jsonb) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_receive_many(text, text[], jsonb[], bytea[], timestamptz, text, text[], integer[], jsonb[]) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_receive_many(text, text[], bytea[], bytea[], timestamptz, text, text[], integer[], jsonb[]) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_take(text, integer, interval) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_poll(text, integer, interval, interval) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_complete(text, text, jsonb) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_complete(text, uuid, jsonb) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_complete_many(text, uuid[], jsonb[]) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_fail(text, text, text, interval) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_fail(text, uuid, text, interval) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_extend(text, text, interval) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_extend(text, uuid, interval) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_requeue(text, text) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_set_max_attempts(text, integer) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_set_group_dead_letters(text, text) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_result(text, text) IS
'implementation behind the API function of the same name; call that one';

-- The entry points

CREATE FUNCTION @extschema@.inbox_receive(scope text, message_id text, payload jsonb,
										  payload_hash bytea DEFAULT NULL,
										  not_before timestamptz DEFAULT NULL,
										  group_key text DEFAULT NULL,
										  priority integer DEFAULT 0,
										  headers jsonb DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_receive(text, text, jsonb, bytea, timestamptz, text, integer, jsonb) IS
'store a message as pending, not to be taken before not_before, behind the earlier messages of its group, ahead of lower priorities: true if new, false (or IB001) if the key exists in any state, IB002 on a payload mismatch';

CREATE FUNCTION @extschema@.inbox_receive(scope text, message_id text, payload bytea,
										  payload_hash bytea DEFAULT NULL,
										  not_before timestamptz DEFAULT NULL,
										  group_key text DEFAULT NULL,
										  priority integer DEFAULT 0,
										  headers jsonb DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_receive(text, text, bytea, bytea, timestamptz, text, integer, jsonb) IS
'store a binary message (EDI, protobuf, ...) as pending, as the jsonb form does';

CREATE FUNCTION @extschema@.inbox_receive_many(scope text, message_ids text[], payloads jsonb[],
											   payload_hashes bytea[] DEFAULT NULL,
											   not_before timestamptz DEFAULT NULL,
											   on_mismatch text DEFAULT 'raise',
											   group_keys text[] DEFAULT NULL,
											   priorities integer[] DEFAULT NULL,
											   headers jsonb[] DEFAULT NULL)
RETURNS TABLE (ordinality integer, message_id text, status text)
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_receive_many(text, text[], jsonb[], bytea[], timestamptz, text, text[], integer[], jsonb[]) IS
'store a batch of messages as pending: one row per id, received, duplicate or (on_mismatch => ''return'') mismatch';

CREATE FUNCTION @extschema@.inbox_receive_many(scope text, message_ids text[], payloads bytea[],
											   payload_hashes bytea[] DEFAULT NULL,
											   not_before timestamptz DEFAULT NULL,
											   on_mismatch text DEFAULT 'raise',
											   group_keys text[] DEFAULT NULL,
											   priorities integer[] DEFAULT NULL,
											   headers jsonb[] DEFAULT NULL)
RETURNS TABLE (ordinality integer, message_id text, status text)
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_receive_many(text, text[], bytea[], bytea[], timestamptz, text, text[], integer[], jsonb[]) IS
'store a batch of binary messages as pending: one row per id';

CREATE FUNCTION @extschema@.inbox_take(scope text, max_messages integer DEFAULT 1,
									   lease interval DEFAULT NULL)
RETURNS TABLE (message_id text, payload jsonb, payload_bytes bytea,
			   attempts integer, received_at timestamptz, group_key text,
			   headers jsonb)
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_take(text, integer, interval) IS
'take up to max_messages pending messages, oldest first; concurrent takers never get the same one';

CREATE FUNCTION @extschema@.inbox_poll(scope text, max_messages integer DEFAULT 1,
									   lease interval DEFAULT '30 seconds',
									   wait interval DEFAULT NULL)
RETURNS TABLE (message_id text, payload jsonb, payload_bytes bytea,
			   attempts integer, received_at timestamptz,
			   receipt uuid, lease_until timestamptz, group_key text,
			   headers jsonb)
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_poll(text, integer, interval, interval) IS
'take up to max_messages messages under a lease, each with a receipt any session may complete; waits up to wait for one to arrive';

CREATE FUNCTION @extschema@.inbox_complete(scope text, message_id text,
										   result jsonb DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_complete(text, text, jsonb) IS
'mark a message this session took as done, storing its result; commits with the business effect';

CREATE FUNCTION @extschema@.inbox_complete(scope text, receipt uuid,
										   result jsonb DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_complete(text, uuid, jsonb) IS
'mark the message a receipt holds as done, from any session; commits with the business effect';

CREATE FUNCTION @extschema@.inbox_complete_many(scope text, receipts uuid[],
												results jsonb[] DEFAULT NULL)
RETURNS TABLE (ordinality integer, receipt uuid, status text)
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_complete_many(text, uuid[], jsonb[]) IS
'mark the messages a batch of receipts holds as done: one row per receipt, completed, duplicate or not_owner';

CREATE FUNCTION @extschema@.inbox_fail(scope text, message_id text, error text,
									   retry_after interval DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_fail(text, text, text, interval) IS
'give back a message this session took: pending again after retry_after, or dead after its last attempt; returns the new state';

CREATE FUNCTION @extschema@.inbox_fail(scope text, receipt uuid, error text,
									   retry_after interval DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_fail(text, uuid, text, interval) IS
'give back the message a receipt holds, from any session; returns its new state';

CREATE FUNCTION @extschema@.inbox_extend(scope text, message_id text, lease interval)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_extend(text, text, interval) IS
'extend the lease of a message this session took; returns the new end of the lease';

CREATE FUNCTION @extschema@.inbox_extend(scope text, receipt uuid, lease interval)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_extend(text, uuid, interval) IS
'extend the lease of the message a receipt holds, from any session; returns the new end of the lease';

CREATE FUNCTION @extschema@.inbox_requeue(scope text, message_id text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_requeue(text, text) IS
'put a dead message back to pending, with its attempts reset';

CREATE FUNCTION @extschema@.inbox_set_max_attempts(scope text, max_attempts integer)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_set_max_attempts(text, integer) IS
'override inbox.max_attempts for one scope; NULL goes back to the setting';

CREATE FUNCTION @extschema@.inbox_set_group_dead_letters(scope text, action text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_set_group_dead_letters(text, text) IS
'what a dead letter does to its ordered group: ''block'' (the default) holds the group until inbox_requeue, ''skip'' lets the next message go';

CREATE FUNCTION @extschema@.inbox_result(scope text, message_id text)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C STABLE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_result(text, text) IS
'the result stored by inbox_complete, so that a redelivered request is answered as the first time; NULL if none';

REVOKE ALL ON FUNCTION inbox.session_key() FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.group_leave(text, text, uuid, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.group_dead(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.wake_takers(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.forget_front(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.count_failure(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.refuse(text, text, text, "char") FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.refuse_receipt(text, uuid, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.fail_message(text, text, uuid, text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.extend_lease(text, text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_receive(text, text, jsonb, bytea, timestamptz, text, integer, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_receive(text, text, bytea, bytea, timestamptz, text, integer, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_receive_many(text, text[], jsonb[], bytea[], timestamptz, text, text[], integer[], jsonb[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_receive_many(text, text[], bytea[], bytea[], timestamptz, text, text[], integer[], jsonb[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_take(text, integer, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_poll(text, integer, interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_complete(text, text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_complete(text, uuid, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_complete_many(text, uuid[], jsonb[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_fail(text, text, text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_fail(text, uuid, text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_extend(text, text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_extend(text, uuid, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_requeue(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_set_max_attempts(text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_set_group_dead_letters(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_result(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_receive(text, text, jsonb, bytea, timestamptz, text, integer, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_receive(text, text, bytea, bytea, timestamptz, text, integer, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_receive_many(text, text[], jsonb[], bytea[], timestamptz, text, text[], integer[], jsonb[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_receive_many(text, text[], bytea[], bytea[], timestamptz, text, text[], integer[], jsonb[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_take(text, integer, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_poll(text, integer, interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_complete(text, text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_complete(text, uuid, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_complete_many(text, uuid[], jsonb[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_fail(text, text, text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_fail(text, uuid, text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_extend(text, text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_extend(text, uuid, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_requeue(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_set_max_attempts(text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_set_group_dead_letters(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_result(text, text) FROM PUBLIC;

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

-- ======================================================================
-- 5. Streams
-- ======================================================================

/*
 * Deduplication by a high-water mark (src/offsets.c).  For a stream that
 * delivers in order with a monotonic sequence number, one row per (scope,
 * stream) holds the highest number claimed.  A claim advances it in the
 * caller's transaction; the row's lock orders the claims of one stream.
 * Nothing is inserted per message, so nothing is purged: an offset stays
 * until its scope is dropped.
 *
 * The table has no CHECK constraints: the C code checks every value on the
 * only path that writes, and a CHECK would cost every claim the setup of
 * its evaluation, which is more than the update itself costs.  Unlike an
 * entry's key, a stream's needs no bucket: a restore into another encoding
 * only re-encodes it, and a name that grows on the way is still one name.
 * The btree refuses any key too long to index.
 */

CREATE TABLE inbox.offsets (
	scope text COLLATE pg_catalog."C" NOT NULL,
	stream text COLLATE pg_catalog."C" NOT NULL,
	seq bigint NOT NULL,
	advanced_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT offsets_pkey PRIMARY KEY (scope, stream)
);

COMMENT ON TABLE inbox.offsets IS 'per (scope, stream), the highest sequence number claimed';

REVOKE ALL ON TABLE inbox.offsets FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('inbox.offsets', '');

CREATE FUNCTION inbox.inbox_claim_offset(scope text, stream text, seq bigint,
										 strict boolean DEFAULT false)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_claim_offset'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.inbox_claim_offsets(scope text, stream text, first_seq bigint,
										  last_seq bigint, strict boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'inbox_claim_offsets'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION inbox.inbox_claim_offset(text, text, bigint, boolean) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_claim_offsets(text, text, bigint, bigint, boolean) IS
'implementation behind the API function of the same name; call that one';

CREATE FUNCTION @extschema@.inbox_claim_offset(scope text, stream text, seq bigint,
											   strict boolean DEFAULT false)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_claim_offset(text, text, bigint, boolean) IS
'claim sequence number seq of an ordered stream: true if above the stream''s mark (which becomes seq), false (or IB001) if not; strict refuses gaps (IB006)';

CREATE FUNCTION @extschema@.inbox_claim_offsets(scope text, stream text, first_seq bigint,
												last_seq bigint, strict boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_claim_offsets(text, text, bigint, bigint, boolean) IS
'claim sequence numbers first_seq to last_seq of an ordered stream: the lowest new one, or NULL (or IB001) if none is new';

REVOKE ALL ON FUNCTION inbox.inbox_claim_offset(text, text, bigint, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_claim_offsets(text, text, bigint, bigint, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_claim_offset(text, text, bigint, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_claim_offsets(text, text, bigint, bigint, boolean) FROM PUBLIC;

-- ======================================================================
-- 6. Forget
-- ======================================================================

/*
 * Forgetting, audited (src/forget.c).  inbox_forget and
 * inbox_forget_range remove processed entries so that their next delivery
 * is processed again.  Only the extension's owner, superusers and the
 * roles in inbox.forget_grants may call them (their entry point checks
 * it: EXECUTE is not enough), and every call leaves rows in
 * inbox.forget_log, in the same transaction.
 */

CREATE TABLE inbox.forget_grants (
	grantee text COLLATE "C" NOT NULL,
	grantee_oid oid NOT NULL,
	granted_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT forget_grants_pkey PRIMARY KEY (grantee),
	CONSTRAINT forget_grants_grantee_check
		CHECK (pg_catalog.octet_length(grantee) BETWEEN 1 AND 63)
);

/*
 * A role is allowed by name and OID, and counts only while both still
 * match: a role dropped and another created under its name (by anyone with
 * CREATEROLE) does not inherit the right to forget.  After a restore into
 * another cluster the OIDs differ, so the owner allows the roles again: a
 * power is not restored blindly.
 */
COMMENT ON TABLE inbox.forget_grants IS 'roles allowed to forget entries, besides the extension''s owner';

REVOKE ALL ON TABLE inbox.forget_grants FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('inbox.forget_grants', '');

/*
 * One row per entry forgotten, with the entry as it was; or one row with
 * no entry for a call that found nothing.  Who: the role that called
 * (role_name), the session's role, the backend, the application and the
 * client; when: the time the row was written.
 */
CREATE TABLE inbox.forget_log (
	forgotten_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
	transaction_id xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
	scope text COLLATE "C" NOT NULL,
	message_id text COLLATE "C",
	received_from timestamptz,
	received_before timestamptz,
	reason text NOT NULL,
	entry jsonb,
	role_name text NOT NULL,
	session_role text NOT NULL,
	backend_pid integer NOT NULL,
	application_name text,
	client_addr inet
);

COMMENT ON TABLE inbox.forget_log IS 'audit of inbox_forget and inbox_forget_range';

CREATE INDEX forget_log_scope_forgotten_at ON inbox.forget_log (scope, forgotten_at);

REVOKE ALL ON TABLE inbox.forget_log FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('inbox.forget_log', '');

CREATE FUNCTION inbox.inbox_forget(scope text, message_id text, reason text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_forget'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.inbox_forget_range(scope text, received_from timestamptz,
										 received_before timestamptz, reason text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'inbox_forget_range'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.inbox_allow_forget(role regrole)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF inbox_allow_forget.role IS NULL THEN
		RAISE EXCEPTION 'role must not be null' USING ERRCODE = '22004';
	END IF;
	INSERT INTO inbox.forget_grants AS g (grantee, grantee_oid)
	VALUES (pg_catalog.pg_get_userbyid(inbox_allow_forget.role), inbox_allow_forget.role)
	ON CONFLICT (grantee) DO UPDATE SET grantee_oid = EXCLUDED.grantee_oid, granted_at = pg_catalog.now()
	WHERE g.grantee_oid OPERATOR(pg_catalog.<>) EXCLUDED.grantee_oid;
	RETURN FOUND;
END
$$;

CREATE FUNCTION inbox.inbox_disallow_forget(role regrole)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF inbox_disallow_forget.role IS NULL THEN
		RAISE EXCEPTION 'role must not be null' USING ERRCODE = '22004';
	END IF;
	DELETE FROM inbox.forget_grants AS g
	 WHERE g.grantee OPERATOR(pg_catalog.=) pg_catalog.pg_get_userbyid(inbox_disallow_forget.role);
	RETURN FOUND;
END
$$;

COMMENT ON FUNCTION inbox.inbox_forget(text, text, text) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_forget_range(text, timestamptz, timestamptz, text) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_allow_forget(regrole) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_disallow_forget(regrole) IS
'implementation behind the API function of the same name; call that one';

CREATE FUNCTION @extschema@.inbox_forget(scope text, message_id text, reason text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_enter_forget'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_forget(text, text, text) IS
'remove a processed entry so that its next delivery is processed again; audited; owner, superusers and allowed roles only';

CREATE FUNCTION @extschema@.inbox_forget_range(scope text, received_from timestamptz,
											   received_before timestamptz, reason text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'inbox_enter_forget'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_forget_range(text, timestamptz, timestamptz, text) IS
'remove a scope''s processed entries received in [received_from, received_before), for a replay; audited; returns how many';

CREATE FUNCTION @extschema@.inbox_allow_forget(role regrole)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_enter_admin'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_allow_forget(regrole) IS
'let a role (and its members) call inbox_forget and inbox_forget_range';

CREATE FUNCTION @extschema@.inbox_disallow_forget(role regrole)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_enter_admin'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_disallow_forget(regrole) IS
'withdraw what inbox_allow_forget gave';

CREATE VIEW @extschema@.inbox_forget_log WITH (security_barrier) AS
	SELECT f.forgotten_at, f.transaction_id, f.scope, f.message_id, f.received_from,
		   f.received_before, f.reason, f.role_name, f.session_role, f.backend_pid,
		   f.application_name, f.client_addr, f.entry
	  FROM inbox.forget_log AS f
	 WHERE inbox.scope_visible(f.scope);

COMMENT ON VIEW @extschema@.inbox_forget_log IS
'who forgot which entries, when and why, with the entries as they were';

REVOKE ALL ON FUNCTION inbox.inbox_forget(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_forget_range(text, timestamptz, timestamptz, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_allow_forget(regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_disallow_forget(regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_forget(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_forget_range(text, timestamptz, timestamptz, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_allow_forget(regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_disallow_forget(regrole) FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.inbox_forget_log FROM PUBLIC;

-- ======================================================================
-- 7. Retention
-- ======================================================================

/*
 * An entry may be purged only once no redelivery of its message can be
 * expected.  Brokers redeliver relative to the time the consumer was
 * working, not to the wall clock: after a week-long outage the backlog
 * still holds messages whose first delivery was just before it.  So each
 * scope has a retention clock that counts *active time*:
 *
 *	- the clock runs while the scope receives new claims, and for
 *	  inbox.idle_threshold after its last new claim; then it pauses until
 *	  the next new claim;
 *	- an entry is purged once its scope has been active for the retention
 *	  since the entry was received;
 *	- after a pause longer than the retention, nothing received before it is
 *	  purged until the scope has again been active for the retention.
 *
 * Pauses are found by the purge itself, from the gaps between received_at
 * values of the entries it sees, so a claim costs no bookkeeping in the
 * database (it raises a hint in shared memory, src/stats.c).
 * inbox.scopes keeps what the purge has learnt, and when each scope's
 * entries may next expire.  Only done entries are ever purged.  The purge
 * runs in the background worker (src/worker.c) or through inbox_purge
 * (src/purge.c), which says which scopes a pass looks at.
 *
 * inbox_drop_scope, for a scope that will never be used again, removes
 * everything it holds at once.
 */

/*
 * inbox.settings(): the retention settings in force, as intervals.  It is
 * written in C so that calling it loads the library, which defines the
 * inbox.* settings, before anything reads them.
 */
CREATE FUNCTION inbox.settings(OUT retention interval, OUT idle_threshold interval,
							   OUT batch_size integer)
AS 'MODULE_PATHNAME', 'inbox_settings'
LANGUAGE C STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp;

-- One purger at a time adds new scopes to inbox.scopes (src/purge.c)
CREATE FUNCTION inbox.try_create_scopes()
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_try_create_scopes'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

/*
 * inbox.cutoff(): entries of a scope received before the returned time may
 * be purged; NULL means none may.  Pure arithmetic on the scope's state, in
 * epoch seconds so that a "day" never stretches over a DST change.  A
 * retention beyond the largest one allowed counts as that one, so that no
 * row can make the arithmetic leave the range of timestamps and stop the
 * purge of every scope.
 *
 *	now_ts		the current time
 *	latest		the scope's newest received_at (NULL: no entries)
 *	pauses		gaps between consecutive new claims longer than the threshold
 *	retention	the scope's retention
 *	idle		inbox.idle_threshold
 */
CREATE FUNCTION inbox.cutoff(now_ts timestamptz, latest timestamptz,
							 pauses pg_catalog.tstzrange[], retention interval,
							 idle interval)
RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	retention_s double precision := least(extract(epoch FROM retention), 2147483647);
	remaining double precision := retention_s;
	idle_s double precision := extract(epoch FROM idle);
	t double precision := extract(epoch FROM now_ts);
	p record;
BEGIN
	IF latest IS NULL THEN
		RETURN NULL;
	END IF;

	/*
	 * Walk back from now through the stretches of active time, skipping
	 * the paused part of each gap (all of it but its first idle_s
	 * seconds), until the retention is used up.  The current silence, if
	 * longer than the threshold, is a pause too.
	 */
	FOR p IN
		SELECT extract(epoch FROM lower(g)) + idle_s AS paused_from,
			   extract(epoch FROM upper(g)) AS paused_until
		FROM unnest(pauses) AS g
		WHERE extract(epoch FROM upper(g) - lower(g)) > idle_s
		UNION ALL
		SELECT extract(epoch FROM latest) + idle_s, extract(epoch FROM now_ts)
		WHERE extract(epoch FROM now_ts - latest) > idle_s
		ORDER BY paused_until DESC
	LOOP
		IF p.paused_until < t THEN
			IF t - p.paused_until >= remaining THEN
				EXIT;
			END IF;
			remaining := remaining - (t - p.paused_until);
		END IF;
		t := least(t, p.paused_from);
	END LOOP;
	t := t - remaining;

	/*
	 * After a pause longer than the retention, keep everything from before
	 * it until the scope has been active for the retention since it ended,
	 * that is until the cutoff has moved past its end.
	 */
	IF EXISTS (SELECT FROM unnest(pauses) AS g
			   WHERE extract(epoch FROM upper(g) - lower(g)) > retention_s
				 AND extract(epoch FROM upper(g)) > t) THEN
		RETURN NULL;
	END IF;

	RETURN to_timestamp(t);
END
$$;

/*
 * inbox.scope_list(): the scopes that have entries, by a skip scan of the
 * primary key (one index probe per scope, never a scan of the entries).
 */
CREATE FUNCTION inbox.scope_list()
RETURNS SETOF text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
	WITH RECURSIVE s(scope) AS (
		SELECT min(scope) FROM inbox.entries
		UNION ALL
		SELECT (SELECT min(e.scope) FROM inbox.entries AS e
				WHERE e.scope OPERATOR(pg_catalog.>) s.scope)
		FROM s WHERE s.scope IS NOT NULL
	)
	SELECT scope FROM s WHERE scope IS NOT NULL
$$;

/*
 * inbox.observe(scope, retention, idle): advance a scope's retention clock
 * over the entries received since the last observation, and return its
 * purge cutoff (NULL: purge nothing now).
 *
 * Only one purger observes a scope at a time, and none waits for another:
 * the scope's clock row is locked with SKIP LOCKED, and a scope seen for
 * the first time is added only by the purger that holds
 * inbox.try_create_scopes(), so no INSERT here waits for another purger's.
 * Row locks live in the rows, so a purge holds the same few locks in the
 * lock table whether there are ten scopes or a million.
 *
 * Its statements run once per scope, with plans PL/pgSQL keeps for the
 * session.  A plan made while inbox.scopes was small would scan it whole,
 * once per scope, while the round fills it: enable_seqscan = off keeps
 * every lookup on its index whatever the statistics said.
 */
CREATE FUNCTION inbox.observe(p_scope text, p_retention interval, p_idle interval)
RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
DECLARE
	s record;
	seen_new bigint;
	latest timestamptz;
	gaps tstzrange[];
	all_pauses tstzrange[];
	result timestamptz;
BEGIN
	SELECT sc.observed_until, sc.pauses, coalesce(sc.retention, p_retention) AS retention
	  INTO s
	  FROM inbox.scopes AS sc
	 WHERE sc.scope OPERATOR(pg_catalog.=) p_scope COLLATE "C"
	   FOR UPDATE SKIP LOCKED;
	IF NOT FOUND THEN
		-- Another purger holds the row, or the scope is new and another
		-- purger adds the new scopes in this round.
		IF EXISTS (SELECT FROM inbox.scopes AS sc
					WHERE sc.scope OPERATOR(pg_catalog.=) p_scope COLLATE "C")
		   OR NOT inbox.try_create_scopes() THEN
			RETURN NULL;
		END IF;
		INSERT INTO inbox.scopes (scope) VALUES (p_scope) ON CONFLICT (scope) DO NOTHING;
		SELECT sc.observed_until, sc.pauses, coalesce(sc.retention, p_retention) AS retention
		  INTO s
		  FROM inbox.scopes AS sc
		 WHERE sc.scope OPERATOR(pg_catalog.=) p_scope COLLATE "C"
		   FOR UPDATE SKIP LOCKED;
		IF NOT FOUND THEN
			RETURN NULL;
		END IF;
	END IF;

	-- The entries received since the last look, and the gaps between them;
	-- the first gap starts at the newest entry seen last time.  Strictly
	-- after it: entries sharing its timestamp (one transaction's claims)
	-- were counted then and must not be read again at every round.
	SELECT count(*),
		   max(e.received_at),
		   coalesce(array_agg(tstzrange(e.prev, e.received_at))
					FILTER (WHERE e.received_at - e.prev > p_idle), '{}')
	  INTO seen_new, latest, gaps
	  FROM (SELECT received_at,
				   lag(received_at, 1, s.observed_until) OVER (ORDER BY received_at) AS prev
			  FROM inbox.entries
			 WHERE scope OPERATOR(pg_catalog.=) p_scope COLLATE "C"
			   AND received_at > coalesce(s.observed_until, '-infinity')) AS e;

	latest := coalesce(latest, s.observed_until);
	all_pauses := s.pauses || gaps;
	result := inbox.cutoff(now(), latest, all_pauses, s.retention, p_idle);

	-- A pause that ended before the cutoff can never matter again: the
	-- cutoff only moves forward.
	IF result IS NOT NULL THEN
		all_pauses := ARRAY(SELECT g FROM unnest(all_pauses) AS g WHERE upper(g) >= result);
	END IF;

	-- Nothing new and no pause forgotten: leave the row as it is, so that a
	-- round over many idle scopes writes nothing.
	IF seen_new > 0 OR latest IS DISTINCT FROM s.observed_until
	   OR all_pauses IS DISTINCT FROM s.pauses THEN
		UPDATE inbox.scopes
		   SET observed_until = latest,
			   pauses = all_pauses,
			   retained = retained + seen_new
		 WHERE scope OPERATOR(pg_catalog.=) p_scope COLLATE "C";
	END IF;

	RETURN result;
END
$$;

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
 * inbox.purge_leaf(leaf, scopes, cutoffs, limit): delete at most limit
 * finished entries from one leaf, oldest first, of the given scopes, each
 * received before its scope's cutoff; return the rows deleted per scope.
 * Only state 'd' (done) is ever deleted: a message still pending,
 * processing or dead in the deferred mode is kept whatever its age.
 *
 * One statement per leaf, whatever the number of scopes, and a plan that
 * statistics cannot change: each scope's oldest entries are read through
 * the (scope, received_at) index, at most limit of them, and the oldest
 * limit of those go; enable_seqscan = off keeps the clock rows, too, on
 * their index.
 *
 * The worker observes in one transaction and purges in others; between
 * them an inbox_purge() may have taken a scope (and will update its clock
 * row).  Such a scope is skipped rather than waited for: its clock row is
 * locked with SKIP LOCKED.  A transaction that observed the scope holds
 * the row already.
 */
CREATE FUNCTION inbox.purge_leaf(p_leaf regclass, p_scopes text[],
								 p_cutoffs timestamptz[], p_limit integer)
RETURNS TABLE (scope text, purged bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
DECLARE
	r record;
BEGIN
	FOR r IN EXECUTE format(
		'WITH targets AS ('
		'  SELECT sc.scope, t.cutoff'
		'    FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2)) AS t(scope, cutoff)'
		'    JOIN inbox.scopes AS sc ON sc.scope OPERATOR(pg_catalog.=) t.scope COLLATE "C"'
		'     FOR UPDATE OF sc SKIP LOCKED),'
		' victims AS ('
		'  SELECT v.ctid FROM targets AS t'
		'   CROSS JOIN LATERAL (SELECT e.ctid, e.received_at FROM %1$s AS e'
		'                        WHERE e.scope OPERATOR(pg_catalog.=) t.scope COLLATE "C"'
		'                          AND e.received_at OPERATOR(pg_catalog.<) t.cutoff'
		'                          AND e.state OPERATOR(pg_catalog.=) ''d''::"char"'
		'                        ORDER BY e.received_at LIMIT $3) AS v'
		'   ORDER BY v.received_at LIMIT $3),'
		' gone AS ('
		'  DELETE FROM %1$s AS e'
		'   WHERE e.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT ctid FROM victims))'
		'  RETURNING e.scope)'
		'SELECT g.scope, pg_catalog.count(*) AS n FROM gone AS g GROUP BY g.scope', p_leaf)
		USING p_scopes, p_cutoffs, p_limit
	LOOP
		UPDATE inbox.scopes AS sc SET retained = greatest(sc.retained - r.n, 0)
		 WHERE sc.scope OPERATOR(pg_catalog.=) r.scope COLLATE "C";
		scope := r.scope;
		purged := r.n;
		RETURN NEXT;
	END LOOP;
END
$$;

/*
 * inbox.purge_scope(leaf, scope, cutoff, limit): purge_leaf for one scope,
 * on a distributed inbox.entries (src/purge.c).  Citus runs neither a
 * DELETE by row address nor a join of the local inbox.scopes to a shard,
 * so the scope's clock row is locked first, on its own, and the batch is
 * one DELETE whose subquery reads the same shard: Citus sends the whole
 * statement to the worker that holds it.
 */
CREATE FUNCTION inbox.purge_scope(p_leaf regclass, p_scope text, p_cutoff timestamptz,
								  p_limit integer)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	n bigint;
BEGIN
	PERFORM FROM inbox.scopes AS sc
	  WHERE sc.scope OPERATOR(pg_catalog.=) p_scope COLLATE "C"
	  FOR UPDATE SKIP LOCKED;
	IF NOT FOUND THEN
		RETURN 0;				-- another purger has the scope
	END IF;
	EXECUTE format(
		'DELETE FROM %1$s AS e'
		' WHERE e.scope OPERATOR(pg_catalog.=) $1'
		'   AND e.message_id IN ('
		'       SELECT v.message_id FROM %1$s AS v'
		'        WHERE v.scope OPERATOR(pg_catalog.=) $1'
		'          AND v.received_at OPERATOR(pg_catalog.<) $2'
		'          AND v.state OPERATOR(pg_catalog.=) ''d''::"char"'
		'        ORDER BY v.received_at LIMIT $3)', p_leaf)
		USING p_scope, p_cutoff, p_limit;
	GET DIAGNOSTICS n = ROW_COUNT;
	UPDATE inbox.scopes AS sc SET retained = greatest(sc.retained - n, 0)
	 WHERE sc.scope OPERATOR(pg_catalog.=) p_scope COLLATE "C";
	RETURN n;
END
$$;

/*
 * Retention overrides are bounded like inbox.retention: a retention
 * beyond it could only push the purge's arithmetic out of the range of
 * timestamps.  Months and years are allowed: the purge measures a
 * retention in epoch seconds (inbox.cutoff), a month as 30 days and a year
 * as 365.25, and never adds one to a time by the calendar.  Comparisons of
 * intervals count a year as 360 days, though, so the bounds are checked by
 * both measures: '-1 year 361 days' compares as one day, and is 4.25 days
 * before now to the purge, which would then remove every done entry of the
 * scope.
 */
CREATE FUNCTION inbox.inbox_set_retention(scope text, retention interval)
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

-- Everything a scope holds: its entries in every state, its stream
-- offsets, its content window's rows, its ordered groups, its row of
-- inbox.scopes and its counters
CREATE FUNCTION inbox.inbox_drop_scope(scope text)
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

COMMENT ON FUNCTION inbox.inbox_set_retention(text, interval) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_drop_scope(text) IS
'implementation behind the API function of the same name; call that one';

CREATE FUNCTION @extschema@.inbox_set_retention(scope text, retention interval)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_set_retention(text, interval) IS
'override inbox.retention for one scope; NULL goes back to the setting';

CREATE FUNCTION @extschema@.inbox_drop_scope(scope text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_drop_scope(text) IS
'remove a scope that will never be used again, with all its entries and stream offsets; returns the entries removed';

-- Not an entry point: it names no scope, and is SECURITY DEFINER itself
CREATE FUNCTION @extschema@.inbox_purge()
RETURNS bigint
AS 'MODULE_PATHNAME', 'inbox_purge_1_0'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.inbox_purge() IS
'purge expired entries: one batch per leaf and scope, in the caller''s transaction; returns the rows purged';

REVOKE ALL ON FUNCTION inbox.try_create_scopes() FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.observe(text, interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.purge_due() FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.purge_unscheduled(interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.sweep_leaf(regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.observe_leaf(regclass, text[], interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.purge_leaf(regclass, text[], timestamptz[], integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.purge_scope(regclass, text, timestamptz, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_set_retention(text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_drop_scope(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_set_retention(text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_drop_scope(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_purge() FROM PUBLIC;

-- ======================================================================
-- 8. Grants and bundles
-- ======================================================================

/*
 * Scope grants.  A scope without a row in inbox.scope_grants (section 1)
 * is open to every role that may execute the API; once it has one, only
 * the granted roles (and the roles that have their privileges) may act on
 * it.  The entry points check them (src/access.c).
 *
 * Grant bundles.  A bundle is the set of API functions and views one kind
 * of role needs: consumer (claims), receiver (receives), worker (takes,
 * polls, completions, failures and lease extensions), streams (offset
 * claims), operator (the views and requeue), publisher (outbox sends)
 * and relay (the outbox relay's API, section 11).  inbox_grant_bundle and
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
 */

/*
 * inbox_grant and inbox_revoke: the extension's owner or a superuser only.
 * The entry point checks that, for the role that called (a SECURITY
 * DEFINER implementation could not see it).  Grants name the role.
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
	VALUES (inbox_grant.scope, pg_catalog.pg_get_userbyid(inbox_grant.role))
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
	   AND g.grantee OPERATOR(pg_catalog.=) pg_catalog.pg_get_userbyid(inbox_revoke.role);
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

COMMENT ON FUNCTION inbox.inbox_grant(text, regrole) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_revoke(text, regrole) IS
'implementation behind the API function of the same name; call that one';

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

-- The grants, read as the extension's owner.  The view reads them through
-- this function rather than from the table: on Citus, a view's query on a
-- distributed table runs on the workers as the role querying the view,
-- which has no access to schema inbox.  Like the other helpers of the
-- views, it stays executable by PUBLIC, who cannot name it (schema inbox
-- is not usable by PUBLIC).
CREATE FUNCTION inbox.grant_rows()
RETURNS TABLE (scope text, grantee text, granted_at timestamptz)
LANGUAGE sql STABLE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT g.scope, g.grantee, g.granted_at FROM inbox.scope_grants AS g
$$;

-- For administrators: who may act on which scope.  grantee is NULL for a
-- grant whose role does not exist; grantee_name says which role it names.
CREATE VIEW @extschema@.inbox_grants AS
	SELECT g.scope COLLATE "C" AS scope, pg_catalog.to_regrole(pg_catalog.quote_ident(g.grantee)) AS grantee,
		   g.granted_at, g.grantee COLLATE "C" AS grantee_name
	  FROM inbox.grant_rows() AS g;

COMMENT ON VIEW @extschema@.inbox_grants IS
'scope grants: a scope listed here is open only to its grantees (and their members)';

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

-- The bundles.  Objects are named as text, resolved only when a bundle is
-- granted, revoked or listed; the operator views inbox_stats and
-- inbox_dead_letters are those of section 9, the outbox's objects those of
-- section 11.
INSERT INTO inbox.bundle_objects (bundle, object_type, object) VALUES
	('consumer', 'function', '@extschema@.inbox_claim(text, text, bytea)'),
	('consumer', 'function', '@extschema@.inbox_claim_many(text, text[], bytea[], text)'),
	('consumer', 'function', '@extschema@.inbox_status(text, text)'),
	('consumer', 'function', '@extschema@.inbox_result(text, text)'),
	('receiver', 'function', '@extschema@.inbox_receive(text, text, jsonb, bytea, timestamptz, text, integer, jsonb)'),
	('receiver', 'function', '@extschema@.inbox_receive(text, text, bytea, bytea, timestamptz, text, integer, jsonb)'),
	('receiver', 'function', '@extschema@.inbox_receive_many(text, text[], jsonb[], bytea[], timestamptz, text, text[], integer[], jsonb[])'),
	('receiver', 'function', '@extschema@.inbox_receive_many(text, text[], bytea[], bytea[], timestamptz, text, text[], integer[], jsonb[])'),
	('worker', 'function', '@extschema@.inbox_take(text, integer, interval)'),
	('worker', 'function', '@extschema@.inbox_poll(text, integer, interval, interval)'),
	('worker', 'function', '@extschema@.inbox_complete(text, text, jsonb)'),
	('worker', 'function', '@extschema@.inbox_complete(text, uuid, jsonb)'),
	('worker', 'function', '@extschema@.inbox_complete_many(text, uuid[], jsonb[])'),
	('worker', 'function', '@extschema@.inbox_fail(text, text, text, interval)'),
	('worker', 'function', '@extschema@.inbox_fail(text, uuid, text, interval)'),
	('worker', 'function', '@extschema@.inbox_extend(text, text, interval)'),
	('worker', 'function', '@extschema@.inbox_extend(text, uuid, interval)'),
	('worker', 'function', '@extschema@.inbox_depth(text)'),
	('consumer', 'function', '@extschema@.inbox_depth(text)'),
	('streams', 'function', '@extschema@.inbox_claim_offset(text, text, bigint, boolean)'),
	('streams', 'function', '@extschema@.inbox_claim_offsets(text, text, bigint, bigint, boolean)'),
	('operator', 'view', '@extschema@.inbox_stats'),
	('operator', 'view', '@extschema@.inbox_dead_letters'),
	('operator', 'view', '@extschema@.inbox_grants'),
	('operator', 'view', '@extschema@.inbox_forget_log'),
	('operator', 'function', '@extschema@.inbox_requeue(text, text)'),
	('operator', 'view', '@extschema@.inbox_bundles'),
	('operator', 'view', '@extschema@.inbox_content_duplicates'),
	('publisher', 'function', '@extschema@.outbox_send(text, text, jsonb, jsonb, uuid)'),
	('publisher', 'function', '@extschema@.outbox_send(text, text, bytea, jsonb, uuid)'),
	('publisher', 'function', '@extschema@.outbox_send_many(text, text[], jsonb[], jsonb)'),
	('relay', 'function', '@extschema@.outbox_targets()'),
	('relay', 'function', '@extschema@.outbox_fetch(text, integer, interval, interval)'),
	('relay', 'function', '@extschema@.outbox_ack(uuid)'),
	('relay', 'function', '@extschema@.outbox_ack_many(uuid[])'),
	('relay', 'function', '@extschema@.outbox_fail(uuid, text, interval, boolean)'),
	('operator', 'view', '@extschema@.outbox_stats'),
	('operator', 'view', '@extschema@.outbox_dead_letters'),
	('operator', 'view', '@extschema@.outbox_routes'),
	('operator', 'function', '@extschema@.outbox_requeue(uuid)');

REVOKE ALL ON FUNCTION inbox.inbox_grant(text, regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_revoke(text, regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_grant(text, regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_revoke(text, regrole) FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.inbox_grants FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.bundle_object_oid(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.bundle_holders(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.bundle_privilege_sql(boolean, text, text, regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.bundle_add(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.bundle_apply(regrole, text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_grant_bundle(regrole, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_revoke_bundle(regrole, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_grant_bundle(regrole, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_revoke_bundle(regrole, text) FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.inbox_bundles FROM PUBLIC;

-- ======================================================================
-- 9. Monitoring
-- ======================================================================

/*
 * The views for operators, and the reset of the counters.  The views show
 * only the scopes the role querying them may act on, through
 * inbox.scope_visible (section 1), and are security barriers.
 */

/*
 * The shared-memory counters (src/stats.c), one row per scope.  Each node
 * counts the calls it runs, and on Citus a delegated call runs on the
 * worker that holds its scope: node_counters() are this node's;
 * scope_counters(), behind inbox_stats, are the same everywhere but on the
 * coordinator of a distributed inbox, where they are summed per scope over
 * the coordinator and every active primary worker, whose node_counters()
 * it reads over a connection to each, as the extension's owner
 * (src/distributed.c).
 */
CREATE FUNCTION inbox.node_counters(OUT scope text, OUT claims bigint, OUT duplicates bigint,
									OUT mismatches bigint, OUT purged bigint,
									OUT last_purge timestamptz, OUT failures bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'inbox_counters_1_0'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION inbox.scope_counters(OUT scope text, OUT claims bigint, OUT duplicates bigint,
									 OUT mismatches bigint, OUT purged bigint,
									 OUT last_purge timestamptz, OUT failures bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'inbox_cluster_counters'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

-- The content windows' counter (src/stats.c, src/window.c), one row per scope
CREATE FUNCTION inbox.content_counters(OUT scope text, OUT content_duplicates bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'inbox_content_counters'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

/*
 * A scope's oldest and newest entry (two probes of its index), and its
 * number of entries.  Functions rather than subqueries of inbox.scope_clock
 * and inbox_stats_reset, and PL/pgSQL rather than SQL: on Citus each is
 * then a query on the scope's shard, which Citus runs, where a correlated
 * aggregate over a distributed table joined to a local one is refused
 * (docs/scale-out.md).
 */
CREATE FUNCTION inbox.scope_span(p_scope text, OUT oldest timestamptz, OUT latest timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	SELECT min(e.received_at), max(e.received_at) INTO oldest, latest
	  FROM inbox.entries AS e
	 WHERE e.scope OPERATOR(pg_catalog.=) p_scope;
END
$$;

CREATE FUNCTION inbox.scope_size(p_scope text)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	n bigint;
BEGIN
	SELECT count(*) INTO n FROM inbox.entries AS e
	 WHERE e.scope OPERATOR(pg_catalog.=) p_scope;
	RETURN n;
END
$$;

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

/*
 * pending counts every pending message, delayed ones included (a
 * not_before or a retry delay ahead), and oldest_pending is when the
 * longest-waiting message that is due became due: a message delayed on
 * purpose does not age.
 */
CREATE FUNCTION inbox.scope_backlog(OUT scope text, OUT pending bigint, OUT processing bigint,
									OUT dead bigint, OUT oldest_pending timestamptz)
RETURNS SETOF record
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
	-- Open messages from the open-messages index, dead ones from theirs
	SELECT b.scope, pg_catalog.sum(b.pending)::bigint, pg_catalog.sum(b.processing)::bigint,
		   pg_catalog.sum(b.dead)::bigint, pg_catalog.min(b.oldest_pending)
	  FROM (SELECT e.scope,
				   count(*) FILTER (WHERE e.state = 'p') AS pending,
				   count(*) FILTER (WHERE e.state = 'r') AS processing,
				   0::bigint AS dead,
				   min(e.due) FILTER (WHERE e.state = 'p' AND e.due <= now()) AS oldest_pending
			  FROM inbox.entries AS e
			 WHERE e.state OPERATOR(pg_catalog.<>) 'd'::"char"
			   AND e.state OPERATOR(pg_catalog.<>) 'x'::"char"
			 GROUP BY e.scope
			UNION ALL
			SELECT e.scope, 0, 0, count(*), NULL
			  FROM inbox.entries AS e
			 WHERE e.state OPERATOR(pg_catalog.=) 'x'::"char"
			 GROUP BY e.scope) AS b
	 GROUP BY b.scope
$$;

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

CREATE VIEW @extschema@.inbox_stats WITH (security_barrier) AS
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

-- The dead letters, read as the extension's owner.  The view reads them
-- through this function rather than from the table: on Citus, a view's
-- query on a distributed table runs on the workers as the role querying
-- the view, which has no access to schema inbox.  Like the other helpers
-- of the views, it stays executable by PUBLIC, who cannot name it (schema
-- inbox is not usable by PUBLIC), and the view applies the scope grants.
CREATE FUNCTION inbox.dead_letters()
RETURNS TABLE (scope text, message_id text, attempts integer, last_error text,
			   received_at timestamptz, died_at timestamptz, payload jsonb, payload_bytes bytea)
LANGUAGE sql STABLE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT e.scope, e.message_id, e.attempts, e.last_error, e.received_at,
		   e.finished_at, e.payload, e.payload_bytes
	  FROM inbox.entries AS e
	 WHERE e.state OPERATOR(pg_catalog.=) 'x'::"char"
$$;

-- The ordered group of every message in one (section 4), dead letters
-- included, whether they hold their group or were skipped
CREATE FUNCTION inbox.group_keys()
RETURNS TABLE (scope text, message_id text, group_key text)
LANGUAGE sql STABLE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT m.scope, m.message_id, m.group_key FROM inbox.group_members AS m
$$;

CREATE VIEW @extschema@.inbox_dead_letters WITH (security_barrier) AS
	SELECT d.scope COLLATE "C" AS scope, d.message_id COLLATE "C" AS message_id,
		   d.attempts, d.last_error, d.received_at, d.died_at, d.payload, d.payload_bytes,
		   g.group_key COLLATE "C" AS group_key
	  FROM inbox.dead_letters() AS d
	  LEFT JOIN inbox.group_keys() AS g
		ON g.scope OPERATOR(pg_catalog.=) d.scope AND g.message_id OPERATOR(pg_catalog.=) d.message_id
	 WHERE inbox.scope_visible(d.scope);

COMMENT ON VIEW @extschema@.inbox_dead_letters IS
'messages that used all their attempts; inbox_requeue puts one back';

-- Not an entry point: it names no scope, and is SECURITY DEFINER itself
CREATE FUNCTION @extschema@.inbox_stats_reset()
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	-- Zero the counters, and recount exactly the entries retained per
	-- scope (the purge keeps that number up to date incrementally, which
	-- can undercount claims that committed long after they started).
	PERFORM inbox.forget_counters(NULL);
	UPDATE inbox.scopes AS s SET retained = inbox.scope_size(s.scope);
END
$$;

COMMENT ON FUNCTION @extschema@.inbox_stats_reset() IS
'reset this database''s counters, and recount the entries retained per scope';

REVOKE ALL ON FUNCTION inbox.node_counters() FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.scope_span(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.scope_size(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_stats_reset() FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.inbox_stats FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.inbox_dead_letters FROM PUBLIC;

-- ======================================================================
-- 10. Scale-out
-- ======================================================================

/*
 * Citus (docs/scale-out.md).  inbox_distribute(colocate_with) distributes
 * the inbox beside a business table that is distributed by scope:
 *
 *	- inbox.entries, by scope, co-located with that table;
 *	- inbox.scope_grants, as a reference table: the API's entry points
 *	  that Citus delegates to the worker holding a scope's shard check the
 *	  grants there, against the same rows as the coordinator;
 *	- the entry points an application calls inside the transaction of its
 *	  effect, as functions delegated by their scope argument, with
 *	  force_delegation.  Such a call runs on the worker, as the role that
 *	  made it (then as the owner, behind the entry point, locally), and
 *	  Citus pins the rest of the transaction to that worker over the
 *	  caller's connection.  The claim and the effect are then written over
 *	  one connection as one user, which is what Citus requires of a
 *	  transaction that writes one placement twice (25001 otherwise).
 *
 * The entry points that read or wake state only the coordinator has are
 * not delegated: inbox_receive and inbox_poll (wake-ups of waiting polls,
 * per-scope max_attempts in inbox.scopes) and inbox_fail (max_attempts).
 */

CREATE FUNCTION inbox.delegated_functions()
RETURNS regprocedure[]
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT ARRAY['@extschema@.inbox_claim(text, text, bytea)',
				 '@extschema@.inbox_claim_many(text, text[], bytea[], text)',
				 '@extschema@.inbox_status(text, text)',
				 '@extschema@.inbox_result(text, text)',
				 '@extschema@.inbox_complete(text, uuid, jsonb)',
				 '@extschema@.inbox_extend(text, uuid, interval)']::regprocedure[]
$$;

CREATE FUNCTION @extschema@.inbox_distribute(colocate_with regclass)
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

COMMENT ON FUNCTION @extschema@.inbox_distribute(regclass) IS
'on Citus: distribute the inbox by scope, co-located with a business table, and delegate the API calls made in an effect''s transaction';

/*
 * Called by the drop guard (src/guard.c) before DROP EXTENSION inbox runs
 * on a distributed inbox.  Citus's own drop trigger fails on the leaves of
 * a distributed partitioned table that belongs to an extension, and the
 * reference table's shard on the coordinator is not a member of the
 * extension, so the drop would fail.  Detached from the extension, the
 * tables (and the views over them, which would otherwise hold them) drop
 * as any distributed table does; the DROP EXTENSION that follows, in the
 * same transaction, removes the rest.
 */
CREATE FUNCTION inbox.citus_drop_tables()
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
	tables regclass[];
	views text[];
	view text;
	obj regclass;
BEGIN
	-- One connection per node, as Citus requires of an extension command
	PERFORM pg_catalog.set_config('citus.multi_shard_modify_mode', 'sequential', true);
	SELECT pg_catalog.array_agg(c.oid::pg_catalog.regclass) INTO tables
	  FROM pg_catalog.pg_class AS c
	 WHERE c.relnamespace = 'inbox'::pg_catalog.regnamespace AND c.relkind IN ('r', 'p')
	   AND c.oid IN (SELECT p.logicalrelid FROM pg_catalog.pg_dist_partition AS p);
	-- The extension's views, which read those tables or one another
	SELECT pg_catalog.array_agg(c.oid::pg_catalog.regclass::text) INTO views
	  FROM pg_catalog.pg_depend AS d
	  JOIN pg_catalog.pg_class AS c ON c.oid = d.objid
	 WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.deptype = 'e'
	   AND d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
	   AND d.refobjid = (SELECT e.oid FROM pg_catalog.pg_extension AS e WHERE e.extname = 'inbox')
	   AND c.relkind = 'v';
	FOREACH view IN ARRAY coalesce(views, '{}') LOOP
		EXECUTE pg_catalog.format('ALTER EXTENSION inbox DROP VIEW %s', view);
	END LOOP;
	FOREACH view IN ARRAY coalesce(views, '{}') LOOP
		EXECUTE pg_catalog.format('DROP VIEW IF EXISTS %s CASCADE', view);
	END LOOP;
	FOREACH obj IN ARRAY tables LOOP
		EXECUTE pg_catalog.format('ALTER EXTENSION inbox DROP TABLE %s', obj);
	END LOOP;
	-- The parents; their leaves go with them
	FOREACH obj IN ARRAY tables LOOP
		IF EXISTS (SELECT FROM pg_catalog.pg_class AS c WHERE c.oid = obj AND NOT c.relispartition) THEN
			EXECUTE pg_catalog.format('DROP TABLE %s', obj);
		END IF;
	END LOOP;
END;
$$;

REVOKE ALL ON FUNCTION inbox.delegated_functions() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_distribute(regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.citus_drop_tables() FROM PUBLIC;

-- ======================================================================
-- 11. Outbox
-- ======================================================================

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

-- A send's headers with the caller's trace context (src/outbox_check.c):
-- inbox.traceparent and inbox.tracestate, unless the headers name a
-- traceparent of their own
CREATE FUNCTION inbox.outbox_trace_headers(headers jsonb)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'inbox_outbox_trace_headers'
LANGUAGE C STABLE PARALLEL SAFE
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
-- Headers without the trace context (traceparent, tracestate, in any
-- case), NULL when nothing else is left: what a retried send's headers
-- are compared on, since a retry may run under another trace
CREATE FUNCTION inbox.outbox_untraced(headers jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT pg_catalog.jsonb_object_agg(e.key, e.value)
	  FROM pg_catalog.jsonb_each(headers) AS e
	 WHERE pg_catalog.lower(e.key COLLATE "C") OPERATOR(pg_catalog.<>) ALL (ARRAY['traceparent', 'tracestate'])
$$;

CREATE FUNCTION inbox.outbox_same(old inbox.outbox_messages, p_topic text, p_key text,
								  p_payload jsonb, p_bytes bytea, p_headers jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF (old.topic, old.key, old.payload, old.payload_bytes, inbox.outbox_untraced(old.headers))
	   IS DISTINCT FROM (p_topic, p_key, p_payload, p_bytes, inbox.outbox_untraced(p_headers)) THEN
		RAISE EXCEPTION 'outbox message % was sent with other content', old.id
			USING ERRCODE = 'IB002',
				  DETAIL = CASE WHEN old.topic OPERATOR(pg_catalog.=) p_topic COLLATE "C" THEN
							   pg_catalog.format('It was sent to this topic with key "%s"; its topic, key, '
												 'payload and headers (but their trace context) must all be the same again.',
												 inbox.quote(old.key))
						   ELSE 'It was not sent to this topic; its topic, key, payload and headers '
								'(but their trace context) must all be the same again.' END,
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
	p_headers := inbox.outbox_trace_headers(p_headers);
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
		-- The topic is the URL's path, or the outbox topic without one
		('kafka', ARRAY['security_protocol', 'sasl_mechanism', 'sasl_username', 'cacert']),
		-- A JetStream subject, the URL's path
		('nats', ARRAY['cacert']),
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
REVOKE ALL ON FUNCTION inbox.outbox_trace_headers(jsonb) FROM PUBLIC;
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
REVOKE ALL ON FUNCTION inbox.outbox_untraced(jsonb) FROM PUBLIC;
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

-- The routes' list of schemes is the operator's and the relay's; the
-- target's own errors are the relay's to report
INSERT INTO inbox.bundle_objects (bundle, object_type, object) VALUES
	('operator', 'function', '@extschema@.outbox_schemes()'),
	('relay', 'function', '@extschema@.outbox_schemes()'),
	('relay', 'function', '@extschema@.outbox_report(text, text)');

-- ======================================================================
-- 12. Ingest
-- ======================================================================

/*
 * Subscriptions: a broker's queue (a source) whose messages the relay
 * writes into a scope with inbox_receive_many, acknowledging them to the
 * broker only after that transaction has committed.  The extension's
 * owner subscribes and unsubscribes; the relay reads the view
 * inbox_subscriptions, and re-reads it when a change commits (the
 * notification inbox_subscriptions, whose payload is the scope and the
 * source, separated by a space).
 *
 * A source is a URL of a scheme the relay reads, whose query holds only
 * the parameters that scheme reads, and whose options are only those the
 * relay reads: inbox_source_schemes() is the one list of them.  Secrets
 * live in the relay's secrets file, as the targets' do: a password in
 * the URL's user information, and a parameter or option whose name,
 * percent-decoded and in any case, names a secret, are refused as such.
 *
 * What the relay cannot write, because the database refuses the message
 * on its own account (a class 22 error after max_attempts, a message
 * without a usable id, different content under an id already received),
 * is recorded with inbox_ingest_reject and only then acknowledged.  The
 * rejects stay until an operator removes them with inbox_ingest_forget:
 * each is a message the broker no longer holds.
 */
CREATE TABLE inbox.subscriptions (
	scope text COLLATE pg_catalog."C" NOT NULL,
	source text COLLATE pg_catalog."C" NOT NULL,
	options jsonb NOT NULL DEFAULT '{}',
	created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT subscriptions_pkey PRIMARY KEY (scope, source)
);

COMMENT ON TABLE inbox.subscriptions IS
'the sources (broker queues) the relay writes into each scope, with their options';

REVOKE ALL ON TABLE inbox.subscriptions FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('inbox.subscriptions', '');

CREATE TABLE inbox.ingest_rejects (
	id uuid NOT NULL DEFAULT inbox.uuid_v7(),
	scope text COLLATE pg_catalog."C" NOT NULL,
	source text COLLATE pg_catalog."C" NOT NULL,
	broker_id text COLLATE pg_catalog."C",
	reason text NOT NULL,
	payload bytea,
	headers jsonb,
	rejected_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
	CONSTRAINT ingest_rejects_pkey PRIMARY KEY (id)
);

COMMENT ON TABLE inbox.ingest_rejects IS
'messages a source delivered that the relay could not write into the scope, recorded before their acknowledgement';

CREATE INDEX ingest_rejects_scope_rejected_at ON inbox.ingest_rejects (scope, rejected_at);

REVOKE ALL ON TABLE inbox.ingest_rejects FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('inbox.ingest_rejects', '');

CREATE FUNCTION @extschema@.inbox_source_schemes()
RETURNS TABLE (scheme text, parameters text[], required text[], options text[])
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT s.scheme, s.parameters, s.required,
		   ARRAY['max_attempts', 'message_id_header', 'group_key', 'batch']
	  FROM (VALUES
		('amqp', ARRAY['queue'], ARRAY['queue']),
		('amqps', ARRAY['queue', 'cacert'], ARRAY['queue']),
		-- A consumer group's offsets, committed after the database's
		('kafka', ARRAY['group', 'security_protocol', 'sasl_mechanism', 'sasl_username', 'cacert'],
		 ARRAY['group']),
		-- A JetStream stream's durable pull consumer
		('nats', ARRAY['consumer', 'cacert'], ARRAY['consumer'])) AS s(scheme, parameters, required)
$$;

COMMENT ON FUNCTION @extschema@.inbox_source_schemes() IS
'the source schemes the relay reads, with the URL parameters each accepts and requires, and the subscription options';

-- The source URL's checks that do not depend on its scheme
CREATE FUNCTION inbox.ingest_check_source(source_url text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF source_url IS NULL THEN
		RAISE EXCEPTION 'source_url must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF source_url !~ '^[A-Za-z][A-Za-z0-9+.-]*://' THEN
		RAISE EXCEPTION 'source_url must be a URL'
			USING ERRCODE = '22023',
				  DETAIL = pg_catalog.format('It is "%s".', inbox.quote(source_url)),
				  HINT = 'For example amqp://host/vhost?queue=orders.';
	END IF;
	IF source_url ~ '[[:cntrl:][:space:]]' OR pg_catalog.octet_length(source_url) OPERATOR(pg_catalog.>) 2048 THEN
		RAISE EXCEPTION 'source_url must be at most 2048 bytes, without spaces or control characters'
			USING ERRCODE = '22023',
				  DETAIL = pg_catalog.format('It is "%s".', inbox.quote(source_url));
	END IF;
END
$$;

CREATE FUNCTION inbox.inbox_subscribe(scope text, source_url text, options jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	p_scope text := inbox_subscribe.scope;
	p_source text := inbox_subscribe.source_url;
	opts jsonb := coalesce(inbox_subscribe.options, '{}');
	p_scheme text;
	parameters text[];
	required text[];
	allowed text[];
	seen text[] := '{}';
	userinfo text;
	pair text;
	raw text;
	name text;
	k text;
	gk text;
BEGIN
	PERFORM inbox.check_key(p_scope, NULL, false);
	PERFORM inbox.ingest_check_source(p_source);
	p_scheme := pg_catalog.substring(p_source, '^([^:]*)://');
	SELECT s.parameters, s.required, s.options INTO parameters, required, allowed
	  FROM @extschema@.inbox_source_schemes() AS s WHERE s.scheme OPERATOR(pg_catalog.=) p_scheme;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'source_url''s scheme is not one the relay reads'
			USING ERRCODE = '22023',
				  DETAIL = pg_catalog.format('It is "%s".', inbox.quote(p_scheme)),
				  HINT = 'The schemes are ' OPERATOR(pg_catalog.||)
						 (SELECT pg_catalog.string_agg(s.scheme OPERATOR(pg_catalog.||) '://', ', ')
							FROM @extschema@.inbox_source_schemes() AS s) OPERATOR(pg_catalog.||)
						 ': inbox_source_schemes() lists them.';
	END IF;
	-- The user information, the widest reading: up to the first '@'
	-- before the first '/'
	userinfo := pg_catalog.substring(pg_catalog.substring(p_source, '^[^:]*://([^/]*)'), '^([^@]*)@');
	IF pg_catalog.strpos(coalesce(userinfo, ''), ':') OPERATOR(pg_catalog.>) 0 THEN
		RAISE EXCEPTION 'source_url must not hold a password'
			USING ERRCODE = '22023',
				  DETAIL = 'The subscriptions are readable by operators, and their rows reach dumps and logs.',
				  HINT = 'Give the source without its password, and put the password in the relay''s secrets file.';
	END IF;
	FOR pair IN SELECT p FROM pg_catalog.regexp_split_to_table(
					 coalesce(pg_catalog.substring(p_source, '\?(.*)$'), ''), '&') AS p
				 WHERE p OPERATOR(pg_catalog.<>) '' LOOP
		raw := pg_catalog.split_part(pair, '=', 1);
		name := inbox.outbox_url_decode(raw);
		IF inbox.outbox_secret_name(name) THEN
			RAISE EXCEPTION 'source_url must not hold a secret'
				USING ERRCODE = '22023',
					  DETAIL = pg_catalog.format('URL parameter "%s" names one; the subscriptions are readable '
												 'by operators, and their rows reach dumps and logs.', inbox.quote(raw)),
					  HINT = 'Put secrets in the relay''s secrets file.';
		END IF;
		IF NOT raw OPERATOR(pg_catalog.=) ANY (parameters) THEN
			RAISE EXCEPTION 'URL parameter "%" is not one that %:// sources take', inbox.quote(raw), p_scheme
				USING ERRCODE = '22023',
					  DETAIL = pg_catalog.format('They take %s.', pg_catalog.array_to_string(parameters, ', ')),
					  HINT = 'inbox_source_schemes() lists the parameters of each scheme.';
		END IF;
		IF raw OPERATOR(pg_catalog.=) ANY (seen) THEN
			RAISE EXCEPTION 'URL parameter "%" is given twice', inbox.quote(raw)
				USING ERRCODE = '22023';
		END IF;
		seen := seen OPERATOR(pg_catalog.||) raw;
		IF coalesce(inbox.outbox_url_decode(pg_catalog.substr(pair, pg_catalog.length(raw) OPERATOR(pg_catalog.+) 2)), '')
		   OPERATOR(pg_catalog.=) '' THEN
			RAISE EXCEPTION 'URL parameter "%" must not be empty', inbox.quote(raw)
				USING ERRCODE = '22023';
		END IF;
	END LOOP;
	FOREACH k IN ARRAY required LOOP
		IF NOT k OPERATOR(pg_catalog.=) ANY (seen) THEN
			RAISE EXCEPTION 'source_url must name its %', k
				USING ERRCODE = '22023',
					  DETAIL = pg_catalog.format('%s:// sources require URL parameter "%s".', p_scheme, k),
					  HINT = 'For example amqp://host/vhost?queue=orders.';
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
			RAISE EXCEPTION 'option "%" is not one that subscriptions to %:// take', inbox.quote(k), p_scheme
				USING ERRCODE = '22023',
					  DETAIL = pg_catalog.format('They take %s.', pg_catalog.array_to_string(allowed, ', ')),
					  HINT = 'inbox_source_schemes() lists the options of each scheme.';
		END IF;
	END LOOP;
	-- Each option of one JSON type, so that the relay reads it one way
	IF (opts OPERATOR(pg_catalog.?) 'max_attempts'
		AND (pg_catalog.jsonb_typeof(opts OPERATOR(pg_catalog.->) 'max_attempts') OPERATOR(pg_catalog.<>) 'number'
			 OR (opts OPERATOR(pg_catalog.->>) 'max_attempts') !~ '^[0-9]{1,9}$'
			 OR (opts OPERATOR(pg_catalog.->>) 'max_attempts')::integer OPERATOR(pg_catalog.<) 1))
	   OR (opts OPERATOR(pg_catalog.?) 'batch'
		   AND (pg_catalog.jsonb_typeof(opts OPERATOR(pg_catalog.->) 'batch') OPERATOR(pg_catalog.<>) 'number'
				OR (opts OPERATOR(pg_catalog.->>) 'batch') !~ '^[0-9]{1,4}$'
				OR (opts OPERATOR(pg_catalog.->>) 'batch')::integer NOT BETWEEN 1 AND 1000))
	   OR (opts OPERATOR(pg_catalog.?) 'message_id_header'
		   AND (pg_catalog.jsonb_typeof(opts OPERATOR(pg_catalog.->) 'message_id_header') OPERATOR(pg_catalog.<>) 'string'
				OR (opts OPERATOR(pg_catalog.->>) 'message_id_header') !~ '^[!#$%&''*+.^_`|~0-9A-Za-z-]{1,255}$'))
	THEN
		RAISE EXCEPTION 'invalid subscription options'
			USING ERRCODE = '22023',
				  DETAIL = pg_catalog.format('They are %s.', opts),
				  HINT = 'max_attempts is an integer of at least 1, batch an integer from 1 to 1000, '
						 'message_id_header a header name.';
	END IF;
	IF opts OPERATOR(pg_catalog.?) 'group_key' THEN
		gk := CASE WHEN pg_catalog.jsonb_typeof(opts OPERATOR(pg_catalog.->) 'group_key') OPERATOR(pg_catalog.=) 'string'
				   THEN opts OPERATOR(pg_catalog.->>) 'group_key' END;
		IF gk IS NULL OR NOT (gk OPERATOR(pg_catalog.=) 'routing_key'
							  OR gk ~ '^header:[!#$%&''*+.^_`|~0-9A-Za-z-]{1,255}$') THEN
			RAISE EXCEPTION 'invalid subscription options'
				USING ERRCODE = '22023',
					  DETAIL = pg_catalog.format('They are %s.', opts),
					  HINT = 'group_key is "routing_key" or "header:NAME".';
		END IF;
	END IF;
	INSERT INTO inbox.subscriptions AS s (scope, source, options)
	VALUES (p_scope, p_source, opts)
	ON CONFLICT ON CONSTRAINT subscriptions_pkey DO UPDATE SET options = EXCLUDED.options;
	-- The relays re-read their subscriptions when this commits
	PERFORM pg_catalog.pg_notify('inbox_subscriptions', p_scope OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) p_source);
END
$$;

CREATE FUNCTION inbox.inbox_unsubscribe(scope text, source_url text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	p_scope text := inbox_unsubscribe.scope;
	p_source text := inbox_unsubscribe.source_url;
BEGIN
	PERFORM inbox.check_key(p_scope, NULL, false);
	IF p_source IS NULL THEN
		RAISE EXCEPTION 'source_url must not be null'
			USING ERRCODE = '22004';
	END IF;
	DELETE FROM inbox.subscriptions AS s
	 WHERE s.scope OPERATOR(pg_catalog.=) p_scope COLLATE "C"
	   AND s.source OPERATOR(pg_catalog.=) p_source COLLATE "C";
	IF NOT FOUND THEN
		RAISE EXCEPTION 'no subscription of scope "%" to source "%"',
			inbox.quote(p_scope), inbox.quote(p_source)
			USING ERRCODE = '42704',
				  HINT = 'The view inbox_subscriptions lists the subscriptions.';
	END IF;
	PERFORM pg_catalog.pg_notify('inbox_subscriptions', p_scope OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) p_source);
END
$$;

/*
 * A message the relay could not write into the scope, recorded before the
 * relay acknowledges it to the broker: the source, the broker's id of the
 * message (an AMQP delivery tag, an offset, a sequence), the reason, and
 * the payload and headers as the broker delivered them.  A relay that
 * dies between this commit and the acknowledgement receives the message
 * again, and may record it twice: never none.
 */
CREATE FUNCTION inbox.inbox_ingest_reject(scope text, source text, broker_id text, reason text,
										  payload bytea, headers jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM inbox.check_key(inbox_ingest_reject.scope, NULL, false);
	IF inbox_ingest_reject.source IS NULL OR inbox_ingest_reject.reason IS NULL THEN
		RAISE EXCEPTION 'source and reason must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF inbox_ingest_reject.headers IS NOT NULL
	   AND pg_catalog.jsonb_typeof(inbox_ingest_reject.headers) OPERATOR(pg_catalog.<>) 'object' THEN
		RAISE EXCEPTION 'headers must be a JSON object'
			USING ERRCODE = '22023';
	END IF;
	INSERT INTO inbox.ingest_rejects (scope, source, broker_id, reason, payload, headers)
	VALUES (inbox_ingest_reject.scope, inbox_ingest_reject.source, inbox_ingest_reject.broker_id,
			inbox_ingest_reject.reason, inbox_ingest_reject.payload, inbox_ingest_reject.headers);
END
$$;

/*
 * Remove a reject once it has been dealt with.  A reject of a scope the
 * caller may not act on is answered as an unknown id, which names no
 * scope.
 */
CREATE FUNCTION inbox.inbox_ingest_forget(id uuid)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	p_scope text;
BEGIN
	SELECT r.scope INTO p_scope FROM inbox.ingest_rejects AS r
	 WHERE r.id OPERATOR(pg_catalog.=) inbox_ingest_forget.id;
	IF NOT FOUND OR NOT inbox.caller_sees(p_scope) THEN
		RAISE EXCEPTION 'no ingest reject %', coalesce(inbox_ingest_forget.id::text, 'NULL')
			USING ERRCODE = '42704',
				  HINT = 'The view inbox_ingest_rejects lists the rejects.';
	END IF;
	DELETE FROM inbox.ingest_rejects AS r WHERE r.id OPERATOR(pg_catalog.=) inbox_ingest_forget.id;
END
$$;

COMMENT ON FUNCTION inbox.inbox_subscribe(text, text, jsonb) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_unsubscribe(text, text) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_ingest_reject(text, text, text, text, bytea, jsonb) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_ingest_forget(uuid) IS
'implementation behind the API function of the same name; call that one';

-- The entry points

CREATE FUNCTION @extschema@.inbox_subscribe(scope text, source_url text, options jsonb DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_admin'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_subscribe(text, text, jsonb) IS
'write a source''s messages (a broker queue, a URL without secrets) into a scope, or change the subscription''s options';

CREATE FUNCTION @extschema@.inbox_unsubscribe(scope text, source_url text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_admin'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_unsubscribe(text, text) IS
'stop writing a source''s messages into a scope';

CREATE FUNCTION @extschema@.inbox_ingest_reject(scope text, source text, broker_id text, reason text,
												payload bytea, headers jsonb)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_ingest_reject(text, text, text, text, bytea, jsonb) IS
'record a message of a source that cannot be written into the scope, before acknowledging it to the broker';

CREATE FUNCTION @extschema@.inbox_ingest_forget(id uuid)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_rows'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_ingest_forget(uuid) IS
'remove an ingest reject that has been dealt with';

-- The views, read as the extension's owner through these functions.
-- inbox_subscriptions lists every subscription: a relay serves each one,
-- and one whose scope it may not write into fails loudly, with 42501,
-- rather than being skipped.  inbox_ingest_rejects shows the scopes the
-- role querying may act on (inbox.scope_visible).
CREATE FUNCTION inbox.subscription_rows()
RETURNS TABLE (scope text, source text, options jsonb, created_at timestamptz)
LANGUAGE sql STABLE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT s.scope, s.source, s.options, s.created_at FROM inbox.subscriptions AS s
$$;

CREATE FUNCTION inbox.ingest_reject_rows()
RETURNS TABLE (scope text, source text, broker_id text, reason text, payload bytea,
			   headers jsonb, rejected_at timestamptz, id uuid)
LANGUAGE sql STABLE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT r.scope, r.source, r.broker_id, r.reason, r.payload, r.headers, r.rejected_at, r.id
	  FROM inbox.ingest_rejects AS r
$$;

CREATE VIEW @extschema@.inbox_subscriptions AS
	SELECT s.scope COLLATE "C" AS scope, s.source COLLATE "C" AS source, s.options, s.created_at
	  FROM inbox.subscription_rows() AS s;

COMMENT ON VIEW @extschema@.inbox_subscriptions IS
'the subscriptions: which source (broker queue) the relay writes into each scope, with its options';

CREATE VIEW @extschema@.inbox_ingest_rejects WITH (security_barrier) AS
	SELECT r.scope COLLATE "C" AS scope, r.source COLLATE "C" AS source, r.broker_id COLLATE "C" AS broker_id,
		   r.reason, r.payload, r.headers, r.rejected_at, r.id
	  FROM inbox.ingest_reject_rows() AS r
	 WHERE inbox.scope_visible(r.scope);

COMMENT ON VIEW @extschema@.inbox_ingest_rejects IS
'messages of a source that could not be written into their scope, recorded before they were acknowledged; inbox_ingest_forget removes one';

REVOKE ALL ON FUNCTION inbox.ingest_check_source(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_subscribe(text, text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_unsubscribe(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_ingest_reject(text, text, text, text, bytea, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_ingest_forget(uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_source_schemes() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_subscribe(text, text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_unsubscribe(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_ingest_reject(text, text, text, text, bytea, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_ingest_forget(uuid) FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.inbox_subscriptions FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.inbox_ingest_rejects FROM PUBLIC;

-- The relay reads the subscriptions and records rejects; the operator
-- reads both and removes rejects
SELECT inbox.bundle_add('relay', 'function', '@extschema@.inbox_source_schemes()');
SELECT inbox.bundle_add('relay', 'view', '@extschema@.inbox_subscriptions');
SELECT inbox.bundle_add('relay', 'function',
						'@extschema@.inbox_ingest_reject(text, text, text, text, bytea, jsonb)');
SELECT inbox.bundle_add('operator', 'function', '@extschema@.inbox_source_schemes()');
SELECT inbox.bundle_add('operator', 'view', '@extschema@.inbox_subscriptions');
SELECT inbox.bundle_add('operator', 'view', '@extschema@.inbox_ingest_rejects');
SELECT inbox.bundle_add('operator', 'function', '@extschema@.inbox_ingest_forget(uuid)');
