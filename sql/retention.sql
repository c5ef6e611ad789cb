--
-- retention: the retention clock, inbox_purge(), per-scope retention,
-- inbox_drop_scope and the counters.  Entries are backdated by hand (as
-- superuser) so that every rule can be checked without waiting.
--
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';

--
-- The clock: inbox.cutoff(now, latest, pauses, retention, idle), checked on
-- fixed times.  Retention 7 days, idle threshold 1 hour.
--
\set t0 '''2026-06-15 12:00:00+00'''
-- Running: the cutoff is a retention ago.
SELECT inbox.cutoff(:t0, :t0, '{}', '7 days', '1 hour');
-- Silent for 10 hours: the clock ran for 1 hour of it, then paused 9 hours.
SELECT inbox.cutoff(:t0, timestamptz :t0 - interval '10 hours', '{}', '7 days', '1 hour');
-- A 3-day gap between claims two days ago: 3 days less 1 hour were paused.
SELECT inbox.cutoff(:t0, :t0, ARRAY[tstzrange(timestamptz :t0 - interval '5 days', timestamptz :t0 - interval '2 days')],
					'7 days', '1 hour');
-- Gaps shorter than the threshold are not pauses.
SELECT inbox.cutoff(:t0, :t0, ARRAY[tstzrange(timestamptz :t0 - interval '2 days', timestamptz :t0 - interval '2 days' + interval '59 minutes')],
					'7 days', '1 hour');
-- A pause longer than the retention that ended 2 days ago: nothing from
-- before it may go until the scope has been active for 7 days since.
SELECT inbox.cutoff(:t0, :t0, ARRAY[tstzrange(timestamptz :t0 - interval '20 days', timestamptz :t0 - interval '2 days')],
					'7 days', '1 hour');
-- The same pause, 8 days of activity later: purging resumes, counting
-- only active time (8 days since, so 7 days back reaches 1 day before the
-- pause's end; the pause is skipped).
SELECT inbox.cutoff(:t0, :t0, ARRAY[tstzrange(timestamptz :t0 - interval '26 days', timestamptz :t0 - interval '8 days')],
					'7 days', '1 hour');
-- Nothing ever received: nothing to purge.
SELECT inbox.cutoff(:t0, NULL, '{}', '7 days', '1 hour');

--
-- inbox_purge(): entries just past the retention go, those just inside stay.
-- A long idle threshold makes the hand-made gaps below plain silence.
--
SET inbox.idle_threshold = '365d';
SELECT inbox_claim('ret', 'past-' || g) FROM generate_series(1, 3) g;
SELECT inbox_claim('ret', 'inside-' || g) FROM generate_series(1, 3) g;
UPDATE inbox.entries SET received_at = now() - interval '7 days 1 minute'
 WHERE scope = 'ret' AND message_id LIKE 'past-%';
UPDATE inbox.entries SET received_at = now() - interval '6 days 23 hours 59 minutes'
 WHERE scope = 'ret' AND message_id LIKE 'inside-%';
SELECT inbox_purge();
SELECT message_id FROM inbox.entries WHERE scope = 'ret' ORDER BY 1;
-- Purged ids are new again: the claim wins.
SELECT inbox_claim('ret', 'past-1');
-- Nothing left to do.
SELECT inbox_purge();

-- Only finished entries are purged: a pending or processing one (the
-- deferred mode) stays whatever its age.
SELECT inbox_claim('ret', 'pending-1'), inbox_claim('ret', 'processing-1');
UPDATE inbox.entries SET received_at = now() - interval '30 days',
	   state = CASE message_id WHEN 'pending-1' THEN 'p' ELSE 'r' END::"char"
 WHERE scope = 'ret' AND message_id IN ('pending-1', 'processing-1');
SELECT inbox_purge();
SELECT message_id, state FROM inbox.entries WHERE scope = 'ret' AND state <> 'd' ORDER BY 1;

-- inbox_purge() is bounded: at most inbox.purge_batch_size rows per call,
-- in all leaves together, so that a claim of an expired key never waits
-- for more than one batch.
SET inbox.purge_batch_size = 2;
SELECT inbox_claim('batch', 'b-' || g) FROM generate_series(1, 40) g \g /dev/null
UPDATE inbox.entries SET received_at = now() - interval '8 days' WHERE scope = 'batch';
SELECT count(*) FROM inbox.entries WHERE scope = 'batch';
SELECT inbox_purge() AS purged_by_one_call;
SELECT count(*) < 40 AS some_left_some_gone FROM inbox.entries WHERE scope = 'batch';
-- Repeated calls drain it.
DO $$ BEGIN WHILE inbox_purge() > 0 LOOP END LOOP; END $$;
SELECT count(*) FROM inbox.entries WHERE scope = 'batch';
RESET inbox.purge_batch_size;

--
-- Per-scope retention overrides the setting; NULL resets it.
--
SELECT inbox_set_retention('short', '1 hour');
SELECT inbox_claim('short', 's-' || g) FROM generate_series(1, 2) g;
SELECT inbox_claim('long', 'l-' || g) FROM generate_series(1, 2) g;
UPDATE inbox.entries SET received_at = now() - interval '2 hours'
 WHERE scope IN ('short', 'long') AND message_id LIKE '_-1';
SELECT inbox_purge();
SELECT scope, message_id FROM inbox.entries WHERE scope IN ('short', 'long') ORDER BY 1, 2;
SELECT scope, retention FROM inbox_stats WHERE scope IN ('short', 'long') ORDER BY 1;
-- An override longer than the setting holds too: under 7 days, a scope of
-- 30 days keeps an entry 8 days old (and loses one 31 days old), while a
-- scope without an override loses its entry of 8 days.
SET inbox.retention = '7 days';
SELECT inbox_set_retention('month', '30 days');
SELECT inbox_claim(s, s || '-' || g) FROM unnest(ARRAY['month', 'week']) s, generate_series(1, 3) g;
UPDATE inbox.entries SET received_at = now() - interval '8 days'
 WHERE scope IN ('month', 'week') AND message_id LIKE '%-2';
UPDATE inbox.entries SET received_at = now() - interval '31 days'
 WHERE scope IN ('month', 'week') AND message_id LIKE '%-1';
SELECT inbox_purge();
SELECT scope, message_id FROM inbox.entries WHERE scope IN ('month', 'week') ORDER BY 1, 2;
SELECT scope, retention FROM inbox_stats WHERE scope IN ('month', 'week') ORDER BY 1;
RESET inbox.retention;
SELECT inbox_set_retention('short', NULL);
SELECT scope, retention FROM inbox_stats WHERE scope = 'short';
SELECT inbox_set_retention('short', '36h');
SELECT retention FROM inbox.scopes WHERE scope = 'short';
-- Bad retention values and keys.
SELECT regress.try($$SELECT inbox_set_retention('short', '0')$$);
SELECT regress.try($$SELECT inbox_set_retention('short', '-1 day')$$);
SELECT regress.try($$SELECT inbox_set_retention(NULL, '1 day')$$);
SELECT regress.try($$SELECT inbox_set_retention('', '1 day')$$);
SELECT regress.try($$SELECT inbox_set_retention(repeat('x', 257), '1 day')$$);
-- A retention is at most what inbox.retention allows (2147483647 s, about
-- 68 years): a longer one would push the purge out of the range of
-- timestamps, and stop it for every scope.
SELECT regress.try($$SELECT inbox_set_retention('forever', '10000 years')$$);
SELECT inbox_set_retention('forever', '2147483647 seconds');
SELECT regress.try($$INSERT INTO inbox.scopes (scope, retention) VALUES ('direct', '100 years')$$);
-- And the clock's arithmetic takes the largest retention as it is.
SELECT inbox.cutoff('2026-06-15 12:00:00+00', '2026-06-15 12:00:00+00', '{}', '10000 years', '1 hour');
SELECT inbox_set_retention('forever', NULL);

-- The retention settings take interval syntax as well as units.
SET inbox.retention = '30 days';
SET inbox.idle_threshold = '1 week 2 days';
SELECT retention, idle_threshold FROM inbox.settings();
SET inbox.retention = '36h';
SELECT retention FROM inbox.settings();
SELECT regress.try($$SET inbox.retention = '30 parsecs'$$);
SELECT regress.try($$SET inbox.retention = '100 years'$$);
SHOW inbox.retention;
RESET inbox.retention;
RESET inbox.idle_threshold;

--
-- Downtime: a pause longer than the retention holds everything received
-- before it until the scope has been active for the retention again.
--
SET inbox.idle_threshold = '1h';
SELECT inbox_claim('outage', 'before-' || g) FROM generate_series(1, 3) g;
SELECT inbox_claim('outage', 'after-' || g) FROM generate_series(1, 3) g;
-- Active 20 to 19 days ago, silent for 18 days, active again for 1 day.
UPDATE inbox.entries SET received_at = now() - interval '20 days' + (substr(message_id, 8)::int * interval '10 hours')
 WHERE scope = 'outage' AND message_id LIKE 'before-%';
UPDATE inbox.entries SET received_at = now() - interval '1 day' + (substr(message_id, 7)::int * interval '5 hours')
 WHERE scope = 'outage' AND message_id LIKE 'after-%';
SELECT inbox_purge();
SELECT count(*) AS kept FROM inbox.entries WHERE scope = 'outage';
SELECT scope, clock, cutoff IS NULL AS held FROM inbox_stats WHERE scope = 'outage';
-- Without that rule the oldest entries would have gone: with a threshold
-- longer than the outage, the same scope is purged.
SET inbox.idle_threshold = '365d';
UPDATE inbox.scopes SET pauses = '{}', observed_until = NULL WHERE scope = 'outage';
SELECT inbox_purge();
SELECT count(*) AS kept FROM inbox.entries WHERE scope = 'outage';
RESET inbox.idle_threshold;

--
-- Counters (shared memory, the test instance preloads the library).
--
SELECT inbox_claim('counted', 'c-1'), inbox_claim('counted', 'c-1'), inbox_claim('counted', 'c-2');
SELECT regress.try($$SELECT inbox_claim('counted', 'c-1', sha256('x'))$$) IS NOT NULL AS tried;
UPDATE inbox.entries SET payload_hash = sha256('y') WHERE scope = 'counted' AND message_id = 'c-1';
SELECT regress.try($$SELECT inbox_claim('counted', 'c-1', sha256('x'))$$);
SELECT scope, claims, duplicates, mismatches, rows_purged, last_purge IS NULL AS never_purged
FROM inbox_stats WHERE scope = 'counted';
-- Rows purged count only once committed.  (A scope silent for 8 days has
-- its clock paused; the long threshold makes the backdating plain age.)
SET inbox.idle_threshold = '365d';
UPDATE inbox.entries SET received_at = now() - interval '8 days' WHERE scope = 'counted';
BEGIN;
SELECT inbox_purge();
ROLLBACK;
SELECT rows_purged FROM inbox_stats WHERE scope = 'counted';
SELECT inbox_purge();
SELECT rows_purged, last_purge IS NOT NULL AS purged_at FROM inbox_stats WHERE scope = 'counted';
RESET inbox.idle_threshold;
-- entries_retained is kept up to date by the purge from the entries it
-- sees arrive; the two backdated above (pending-1, processing-1) look as
-- if they had committed long after they started, which it does not see.
-- inbox_stats_reset zeroes the counters and recounts what is retained.
SELECT scope, entries_retained FROM inbox_stats WHERE scope = 'ret';
SELECT inbox_stats_reset();
SELECT scope, claims, rows_purged FROM inbox_stats WHERE scope = 'counted';
SELECT scope, entries_retained FROM inbox_stats WHERE scope = 'ret';

--
-- inbox_drop_scope removes a scope, its entries, settings and counters.
--
SELECT inbox_claim('gone', 'g-' || g) FROM generate_series(1, 4) g \g /dev/null
SELECT inbox_set_retention('gone', '1 day');
SELECT inbox_drop_scope('gone');
SELECT count(*) FROM inbox.entries WHERE scope = 'gone';
SELECT count(*) FROM inbox.scopes WHERE scope = 'gone';
SELECT count(*) FROM inbox_stats WHERE scope = 'gone';
SELECT inbox_claim('gone', 'g-1');
SELECT inbox_drop_scope('never-used');
SELECT regress.try($$SELECT inbox_drop_scope(NULL)$$);

-- The settings, as an administrator sees them.
SELECT name, setting, unit, context, min_val, max_val FROM pg_settings
WHERE name LIKE 'inbox.%' ORDER BY name;
SET inbox.retention = '36h';
SHOW inbox.retention;
SET inbox.retention = '0';
SET inbox.retention = '7 parsecs';
SET inbox.purge_batch_size = 0;
SET inbox.purge_naptime = '5s';
RESET inbox.retention;
