/* sql/inbox--0.1.0--0.2.0.sql */

-- complain if the script is sourced in psql rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION inbox UPDATE TO '0.2.0'" to load this file. \quit

/*
 * Retention.
 *
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
 * values of the entries it sees, so a claim costs no bookkeeping at all.
 * This table keeps, per scope, what the purge has learnt: how far it has
 * looked (observed_until), the gaps it found (pauses), an estimate of the
 * entries retained, and the scope's retention override.  It is an ordinary
 * logged table, so all of it survives a crash.
 */
CREATE TABLE inbox.scopes (
	scope text COLLATE pg_catalog."C" NOT NULL,
	retention interval,
	observed_until timestamptz,
	pauses pg_catalog.tstzrange[] NOT NULL DEFAULT '{}',
	retained bigint NOT NULL DEFAULT 0,
	CONSTRAINT scopes_pkey PRIMARY KEY (scope),
	CONSTRAINT scopes_retention_positive
		CHECK (retention OPERATOR(pg_catalog.>) '0'::interval)
);

COMMENT ON TABLE inbox.scopes IS 'per-scope retention override and retention clock';

REVOKE ALL ON inbox.scopes FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('inbox.scopes', '');

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

/*
 * inbox.cutoff(): entries of a scope received before the returned time may
 * be purged; NULL means none may.  Pure arithmetic on the scope's state, in
 * epoch seconds so that a "day" never stretches over a DST change.
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
	remaining double precision := extract(epoch FROM retention);
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
			   WHERE extract(epoch FROM upper(g) - lower(g)) > extract(epoch FROM retention)
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
 * Only one purger observes a scope at a time (a try-advisory lock, then the
 * row lock with SKIP LOCKED), so the background worker and a concurrent
 * inbox_purge() never wait for each other and never purge the same scope
 * twice.
 */
CREATE FUNCTION inbox.observe(p_scope text, p_retention interval, p_idle interval)
RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	s record;
	seen_new bigint;
	latest timestamptz;
	gaps tstzrange[];
	all_pauses tstzrange[];
	result timestamptz;
BEGIN
	/*
	 * One purger per scope: the loser skips the scope instead of waiting,
	 * even on the scope's first observation, when the winner's INSERT below
	 * is not yet committed (an ON CONFLICT would wait for it).  Keys that
	 * collide on hashtext only make a scope wait for the next round.
	 */
	IF NOT pg_try_advisory_xact_lock(1768841849, hashtext(p_scope)) THEN	-- 'inby'
		RETURN NULL;
	END IF;
	INSERT INTO inbox.scopes (scope) VALUES (p_scope) ON CONFLICT (scope) DO NOTHING;
	SELECT sc.observed_until, sc.pauses, coalesce(sc.retention, p_retention) AS retention
	  INTO s
	  FROM inbox.scopes AS sc
	 WHERE sc.scope OPERATOR(pg_catalog.=) p_scope COLLATE "C"
	   FOR UPDATE SKIP LOCKED;
	IF NOT FOUND THEN
		RETURN NULL;			-- another purger is on this scope right now
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

	UPDATE inbox.scopes
	   SET observed_until = latest,
		   pauses = all_pauses,
		   retained = retained + seen_new
	 WHERE scope OPERATOR(pg_catalog.=) p_scope COLLATE "C";

	RETURN result;
END
$$;

/*
 * inbox.purge_batch(leaf, scope, cutoff, limit): delete at most limit
 * finished entries of one scope, received before cutoff, from one leaf,
 * oldest first.  Only state 'd' (done) is ever deleted: a message still
 * pending, processing or dead in the deferred mode is kept whatever its age.
 */
CREATE FUNCTION inbox.purge_batch(p_leaf regclass, p_scope text,
								  p_cutoff timestamptz, p_limit integer)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	n bigint;
BEGIN
	/*
	 * The worker observes in one transaction and purges in others; between
	 * them an inbox_purge() may have taken the scope (and will update its
	 * clock row).  Skip the scope rather than wait for that transaction: the
	 * same try-lock as inbox.observe, which a session may hold twice.
	 */
	IF NOT pg_try_advisory_xact_lock(1768841849, hashtext(p_scope)) THEN	-- 'inby'
		RETURN 0;
	END IF;
	EXECUTE format(
		'DELETE FROM %1$s WHERE ctid OPERATOR(pg_catalog.=) ANY (ARRAY('
		'  SELECT ctid FROM %1$s'
		'   WHERE scope OPERATOR(pg_catalog.=) $1 COLLATE "C"'
		'     AND received_at OPERATOR(pg_catalog.<) $2'
		'     AND state OPERATOR(pg_catalog.=) ''d''::"char"'
		'   ORDER BY received_at LIMIT $3))', p_leaf)
	USING p_scope, p_cutoff, p_limit;
	GET DIAGNOSTICS n = ROW_COUNT;
	IF n > 0 THEN
		UPDATE inbox.scopes SET retained = greatest(retained - n, 0)
		 WHERE scope OPERATOR(pg_catalog.=) p_scope COLLATE "C";
	END IF;
	RETURN n;
END
$$;

/*
 * inbox.counters(): the shared-memory counters of this database's scopes.
 * No rows when the library is not in shared_preload_libraries.
 */
CREATE FUNCTION inbox.counters(OUT scope text, OUT claims bigint, OUT duplicates bigint,
							   OUT mismatches bigint, OUT purged bigint,
							   OUT last_purge timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'inbox_counters'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

-- The API.  SECURITY DEFINER with a pinned search_path, like inbox_claim.

CREATE FUNCTION @extschema@.inbox_purge()
RETURNS bigint
AS 'MODULE_PATHNAME', 'inbox_purge'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.inbox_purge() IS
'purge expired entries: one batch per leaf and scope, in the caller''s transaction; returns the rows purged';

CREATE FUNCTION @extschema@.inbox_set_retention(scope text, retention interval)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_set_retention'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.inbox_set_retention(text, interval) IS
'override inbox.retention for one scope; NULL goes back to the setting';

CREATE FUNCTION @extschema@.inbox_drop_scope(scope text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'inbox_drop_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.inbox_drop_scope(text) IS
'remove a scope that will never be used again, with all its entries; returns the entries removed';

CREATE FUNCTION @extschema@.inbox_stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_stats_reset'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.inbox_stats_reset() IS
'reset this database''s counters, and recount the entries retained per scope';

/*
 * inbox_stats: one row per scope known to the counters or to the purge.
 * Counters come from shared memory; the clock columns from inbox.scopes
 * and two index probes per scope (its oldest and newest entry).
 */
CREATE FUNCTION inbox.scope_state(OUT scope text, OUT retention interval, OUT clock text,
								  OUT cutoff timestamptz, OUT oldest_entry timestamptz,
								  OUT purge_lag interval, OUT entries_retained bigint)
RETURNS SETOF record
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT sc.scope, r.retention,
		   CASE WHEN x.latest IS NULL THEN 'empty'
				WHEN c.cutoff IS NULL THEN 'held'
				WHEN now() - x.latest > cfg.idle_threshold THEN 'paused'
				ELSE 'running' END,
		   c.cutoff, x.oldest,
		   CASE WHEN x.oldest < c.cutoff THEN c.cutoff - x.oldest
				ELSE '0'::interval END,
		   sc.retained
	  FROM inbox.scopes AS sc
	 CROSS JOIN inbox.settings() AS cfg
	 CROSS JOIN LATERAL (SELECT coalesce(sc.retention, cfg.retention) AS retention) AS r
	 CROSS JOIN LATERAL (SELECT min(e.received_at) AS oldest, max(e.received_at) AS latest
						   FROM inbox.entries AS e
						  WHERE e.scope OPERATOR(pg_catalog.=) sc.scope) AS x
	 CROSS JOIN LATERAL (SELECT inbox.cutoff(now(), greatest(x.latest, sc.observed_until),
											 sc.pauses, r.retention, cfg.idle_threshold)
								AS cutoff) AS c
$$;

CREATE VIEW @extschema@.inbox_stats AS
	SELECT scope,
		   c.claims, c.duplicates, c.mismatches,
		   c.purged AS rows_purged, c.last_purge,
		   s.retention, s.clock, s.cutoff, s.oldest_entry, s.purge_lag,
		   s.entries_retained
	  FROM inbox.counters() AS c
	  FULL JOIN inbox.scope_state() AS s USING (scope);

COMMENT ON VIEW @extschema@.inbox_stats IS
'per-scope claims, duplicates, mismatches, purge progress and retention clock';

-- The internals that write are for the purge only.  (Schema inbox is not
-- usable by PUBLIC anyway; the view's helpers must stay executable for the
-- roles an administrator lets read inbox_stats.)
REVOKE ALL ON FUNCTION inbox.observe(text, interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.purge_batch(regclass, text, timestamptz, integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION @extschema@.inbox_purge() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_set_retention(text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_drop_scope(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_stats_reset() FROM PUBLIC;
REVOKE ALL ON @extschema@.inbox_stats FROM PUBLIC;
