/*-------------------------------------------------------------------------
 *
 * purge.c
 *	  Retention: its settings, and the purge steps that the background
 *	  worker and the SQL function inbox_purge() share.
 *
 * A purge round has two steps:
 *
 *	1. observe: advance the retention clock of every scope that may need it,
 *	   and collect the cutoff of each scope that has entries to purge now;
 *	   remove the content-window rows past their window, and the listed
 *	   content duplicates past their scope's retention (window.c);
 *	2. for each leaf of inbox.entries, delete at most inbox.purge_batch_size
 *	   expired entries, oldest first, spread over the scopes.
 *
 * The worker runs each step in a transaction of its own (one per leaf), so
 * no snapshot and no lock outlives a batch.  inbox_purge() runs one round
 * in the caller's transaction, and deletes at most inbox.purge_batch_size
 * entries in all.  The batch bounds how long a claim can wait for the
 * purge: a claim of an expired key whose deletion is not yet committed
 * waits for the purging transaction, as it would for any other.
 *
 * Which scopes step 1 looks at (the SQL of 1.1.0 and later, see
 * observe_changed): only those that can have changed, so that a pass over
 * idle scopes costs a few statements whatever their number.  This rests on
 * what a scope's clock is (sql/inbox.sql, section 7): the scope's
 * observed_until L, its pauses P, its retention R and inbox.idle_threshold
 * I, from which inbox.cutoff computes the cutoff at time T.
 *
 *	- The clock is a function of the scope's entries alone: its pauses are
 *	  the gaps between their received_at, and the gap between L and the
 *	  next entry.  When the purge reads them changes nothing it learns.
 *	- With no entry after L, the cutoff never decreases as T grows, and
 *	  from T = L + I on it no longer moves (the clock has paused): it is
 *	  the scope's final cutoff.  And it is never later than T - R: the
 *	  clock counts at most the time that passed.
 *	- Entries after L that the purge has not read yet can only make the
 *	  clock count more active time, never less: up to L + I the clock runs
 *	  whether or not they exist, and after it they turn paused time into
 *	  active time.  The one exception is a new gap longer than the
 *	  retention (rule 3), which holds the purge; but a purge that had read
 *	  the entries up to just before that gap ended had a cutoff at least
 *	  as late, and would have purged as much then.  So a clock read late
 *	  never purges an entry that one read on time would still keep.
 *
 * So a scope needs looking at only when
 *
 *	- it received entries the purge has not read: the claim that wrote them
 *	  left a hint in shared memory (stats.c), which the purge clears by
 *	  reading the entries;
 *	- time alone may have made an entry expire: its schedule
 *	  (inbox.scope_schedules) holds the earliest time its cutoff can pass
 *	  its oldest entry if nothing new arrives (at least that entry's
 *	  received_at plus R; never, once the final cutoff is behind it), and
 *	  comes at every pass while a pending or processing message is past
 *	  the cutoff, which may complete;
 *	- its retention override changed (inbox_set_retention brings its
 *	  schedule forward);
 *	- the retention or idle threshold in force is not the one its schedule
 *	  was computed with, or it has no schedule yet.
 *
 * Every pass reads the hints and the index of the schedules that have
 * come.  A sweep looks at every scope of a leaf for what nothing else
 * shows (entries written other than by a claim, or with a received_at
 * behind the clock; a dead letter put back; scopes beyond
 * inbox.max_scopes, claims before a restart): the leaf's scopes by a skip
 * scan, with an index probe each for their newest and oldest entries.  A
 * full pass sweeps every leaf, and also reads the scopes without a
 * schedule for the settings in force: every pass without the preload;
 * with it, the first pass after a start or an inbox_stats_reset, and the
 * first after the settings changed.  Otherwise the leaves are swept one at
 * a time, at the first pass PURGE_SWEEP_INTERVAL_S / INBOX_LEAVES seconds
 * after the last sweep: each leaf about every PURGE_SWEEP_INTERVAL_S.
 *
 * Two purgers never fight: each leaf is taken with a try-lock, and each
 * scope's clock row with SKIP LOCKED, so the loser skips rather than
 * waits, and no row is deleted or even examined twice.  The number of
 * locks a purge holds does not grow with the number of scopes: row locks
 * live in the rows, and the leaf locks are one per leaf, in the
 * extension's private lock space (see inbox.h), where no application's
 * advisory lock can stall them.  Every statement runs under
 * inbox.purge_lock_timeout: the purge backs off rather than queue.
 *
 * All SQL goes through SPI with schema-qualified names, for the same
 * reasons as the claim (see claim.c).
 *
 * src/purge.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>
#include <math.h>

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "distributed.h"
#include "inbox.h"
#include "keys.h"
#include "outbox.h"
#include "purge.h"
#include "spi.h"
#include "stats.h"
#include "version.h"
#include "window.h"

PG_FUNCTION_INFO_V1(inbox_settings);
PG_FUNCTION_INFO_V1(inbox_purge_1_0);
PG_FUNCTION_INFO_V1(inbox_try_create_scopes);

/*
 * A duration setting (inbox.retention, inbox.idle_threshold), as parsed by
 * its check hook: the GUC "extra" that its assign hook installs.
 */
typedef struct DurationSetting
{
	int			seconds;
	bool		valid;			/* false: a value found unparsable at load */
} DurationSetting;

/* The strings as set, and what they mean */
static char *retention_string = NULL;
static char *idle_threshold_string = NULL;
static DurationSetting retention = {7 * 24 * 3600, true};
static DurationSetting idle_threshold = {3600, true};

/* True while purge_init defines the settings, see check_duration */
static bool defining = false;

static int	purge_batch_size = 10000;
static int	purge_lock_timeout = 200;	/* milliseconds */

/* The SQL that keeps each scope's purge schedule (see the banner) */
#define PURGE_SCHEDULE_SINCE	"1.1.0"

/*
 * About the longest time between two sweeps of a scope with the preload
 * (see the banner): what the purge may take to learn of what neither a
 * hint nor a schedule shows.  A sweep probes the index of every scope of
 * a leaf, so the leaves are swept one at a time: no pass does much more
 * than another.
 */
#define PURGE_SWEEP_INTERVAL_S	300

/*
 * Parse a duration in seconds: a number with an optional unit, as integer
 * settings take it ("7d", "36h", "604800"), or interval syntax, as users
 * write it elsewhere ("30 days", "1 week 2 days", "P30D").  False if value
 * is neither, or outside 1 second .. INT_MAX seconds.
 */
static bool
parse_duration(const char *value, int *seconds)
{
	int			result;
	char		workbuf[256];
	char	   *field[MAXDATEFIELDS];
	int			ftype[MAXDATEFIELDS];
	int			nf;
	int			dtype;
	struct pg_itm_in itm_in;
	Interval	interval;
	double		total;

	if (parse_int(value, &result, GUC_UNIT_S, NULL))
	{
		if (result < 1)
			return false;
		*seconds = result;
		return true;
	}

	/* The steps of interval_in, without its errors */
	if (ParseDateTime(value, workbuf, sizeof(workbuf), field, ftype,
					  MAXDATEFIELDS, &nf) != 0 ||
		DecodeInterval(field, ftype, nf, INTERVAL_FULL_RANGE, &dtype, &itm_in) != 0)
	{
		if (DecodeISO8601Interval(unconstify(char *, value), &dtype, &itm_in) != 0)
			return false;
	}
	if (dtype != DTK_DELTA || itmin2interval(&itm_in, &interval) != 0)
		return false;

	/* Seconds as extract(epoch FROM interval) counts them */
	total = (double) interval.month * (DAYS_PER_YEAR / MONTHS_PER_YEAR) * SECS_PER_DAY +
		(double) interval.day * SECS_PER_DAY +
		(double) interval.time / USECS_PER_SEC;
	if (!(total >= 1.0 && total <= (double) INBOX_MAX_RETENTION_SECONDS))
		return false;
	*seconds = (int) floor(total);
	return true;
}

/*
 * Check hook of both duration settings.
 *
 * A value that someone SETs, or that ALTER SYSTEM, ALTER DATABASE or ALTER
 * ROLE validates, or that the configuration file holds, is refused if it
 * does not parse: that is said at once, where it is set.  But two kinds of
 * value reach this hook only after they were stored, and refusing them
 * would only log a warning and leave the default in force, so that a
 * retention of 7 days where '30 days' was meant would purge entries 23
 * days early:
 *
 *	- a value set before this library was loaded (ALTER DATABASE ... SET
 *	  without the preload), which PostgreSQL applies again while
 *	  purge_init defines the setting;
 *	- a value stored by ALTER DATABASE or ALTER ROLE (or given by the
 *	  client at connection), applied when a session starts.
 *
 * Such a value is taken, marked invalid, and the purge refuses to run
 * while it is in force (see duration_seconds).
 */
static bool
check_duration(char **newval, void **extra, GucSource source)
{
	DurationSetting *parsed = inbox_guc_malloc(sizeof(DurationSetting));

	if (parsed == NULL)
		return false;
	parsed->valid = parse_duration(*newval, &parsed->seconds);
	if (!parsed->valid && !defining &&
		!(source >= PGC_S_GLOBAL && source <= PGC_S_CLIENT))
	{
		inbox_guc_free(parsed);
		GUC_check_errdetail("A duration is a number of seconds with an optional unit (\"7d\", \"36h\"), "
							"or an interval (\"30 days\"), from 1 second to %d seconds.",
							INBOX_MAX_RETENTION_SECONDS);
		return false;
	}
	*extra = parsed;
	return true;
}

static void
assign_retention(const char *newval, void *extra)
{
	retention = *(DurationSetting *) extra;
}

static void
assign_idle_threshold(const char *newval, void *extra)
{
	idle_threshold = *(DurationSetting *) extra;
}

/*
 * The retention settings.  They are PGC_SUSET so that they can be set per
 * database (ALTER DATABASE) as well as for the cluster (ALTER SYSTEM); each
 * purge pass runs in a fresh connection, so it sees both.
 */
void
purge_init(void)
{
	defining = true;
	DefineCustomStringVariable("inbox.retention",
							   "How long a scope must have been active before its entries are purged.",
							   "Seconds with an optional unit (\"7d\"), or an interval (\"30 days\"). "
							   "Active time excludes pauses: see inbox.idle_threshold. "
							   "inbox_set_retention() overrides it per scope.",
							   &retention_string,
							   "7d",
							   PGC_SUSET,
							   0,
							   check_duration, assign_retention, NULL);

	DefineCustomStringVariable("inbox.idle_threshold",
							   "Silence after which a scope's retention clock pauses.",
							   "The clock keeps running this long after a scope's last new claim, "
							   "then stops until the next new claim.",
							   &idle_threshold_string,
							   "1h",
							   PGC_SUSET,
							   0,
							   check_duration, assign_idle_threshold, NULL);
	defining = false;

	DefineCustomIntVariable("inbox.purge_batch_size",
							"Most entries one purge transaction deletes.",
							"Per leaf in each of the worker's transactions, and in all per inbox_purge() call. "
							"A claim of an expired key may wait for one batch.",
							&purge_batch_size,
							10000,
							1, 1000000,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("inbox.purge_lock_timeout",
							"Longest time a purge statement waits for a lock before it gives up.",
							"The purge backs off rather than queue behind the application. Keep it "
							"below deadlock_timeout, so that in a lock cycle with DDL (DROP "
							"EXTENSION, say) the purge gives up before the DDL is chosen as victim.",
							&purge_lock_timeout,
							200,
							1, 600000,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
}

/*
 * The seconds a duration setting means, or an error if it holds a value
 * that was found unparsable when the library loaded.
 */
static int
duration_seconds(const char *name, const char *value, const DurationSetting *setting)
{
	if (!setting->valid)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for parameter \"%s\": \"%s\"", name, value),
				 errdetail("The purge does not run while it is in force: falling back to the default "
						   "could purge entries that a redelivery still needs."),
				 errhint("Set it to a number of seconds with an optional unit (\"7d\") or an interval "
						 "(\"30 days\"), where it was set: ALTER DATABASE, ALTER ROLE or ALTER SYSTEM.")));
	return setting->seconds;
}

static Interval *
seconds_interval(int seconds)
{
	Interval   *result = palloc0(sizeof(Interval));

	result->time = (int64) seconds * USECS_PER_SEC;
	return result;
}

/*
 * inbox.settings() -> (retention interval, idle_threshold interval,
 * batch_size integer): the settings in force for this session.  A NULL
 * duration is one that holds a value found unparsable at load.
 */
Datum
inbox_settings(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[3];
	bool		nulls[3] = {false, false, false};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	tupdesc = BlessTupleDesc(tupdesc);
	/* An unparsable setting holds every clock (see check_duration) */
	values[0] = IntervalPGetDatum(seconds_interval(retention.seconds));
	nulls[0] = !retention.valid;
	values[1] = IntervalPGetDatum(seconds_interval(idle_threshold.seconds));
	nulls[1] = !idle_threshold.valid;
	values[2] = Int32GetDatum(purge_batch_size);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * Apply inbox.purge_lock_timeout as lock_timeout.  The caller chooses the
 * action: GUC_ACTION_LOCAL in the worker's own transactions,
 * GUC_ACTION_SAVE inside a GUC nest level in inbox_purge().
 */
void
inbox_purge_set_lock_timeout(GucAction action)
{
	char		value[32];

	snprintf(value, sizeof(value), "%d", purge_lock_timeout);
	(void) set_config_option("lock_timeout", value, PGC_SUSET, PGC_S_SESSION,
							 action, true, 0, false);
}

/*
 * The rows (scope, cutoff) of the last SPI query, as PurgeTargets in cxt,
 * appended to targets: the scopes that may be purged now.
 */
static List *
collect_targets(List *targets, MemoryContext cxt)
{
	uint64		i;

	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[i];
		TupleDesc	tupdesc = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		cutoff = SPI_getbinval(tuple, tupdesc, 2, &isnull);
		PurgeTarget *target;
		char	   *scope;
		MemoryContext oldcxt;

		if (isnull)
			continue;			/* held, or another purger has it */
		scope = TextDatumGetCString(SPI_getbinval(tuple, tupdesc, 1, &isnull));
		oldcxt = MemoryContextSwitchTo(cxt);
		target = palloc(sizeof(PurgeTarget));
		target->scope = pstrdup(scope);
		target->cutoff = DatumGetTimestampTz(cutoff);
		target->leaf = InvalidOid;
		targets = lappend(targets, target);
		MemoryContextSwitchTo(oldcxt);
	}
	return targets;
}

/*
 * Step 1 on a distributed inbox.entries (distributed.c).  Citus cannot run
 * inbox.scope_list's recursive skip scan, so the scopes come from one
 * DISTINCT, which each shard answers.  Then inbox.observe runs here, on
 * this node, once per scope: in a query that also read the shards, Citus
 * could run it on a worker, against that worker's own inbox.scopes.
 */
static List *
observe_distributed(Datum *settings, MemoryContext cxt)
{
	Oid			types[3] = {TEXTOID, INTERVALOID, INTERVALOID};
	SPITupleTable *scopes;
	uint64		nscopes;
	uint64		i;
	List	   *targets = NIL;

	(void) inbox_spi_check(SPI_execute("SELECT DISTINCT e.scope FROM inbox.entries AS e", true, 0),
			  SPI_OK_SELECT, "listing the scopes of inbox.entries");
	scopes = SPI_tuptable;
	nscopes = SPI_processed;
	for (i = 0; i < nscopes; i++)
	{
		Datum		values[3];
		bool		isnull;

		values[0] = SPI_getbinval(scopes->vals[i], scopes->tupdesc, 1, &isnull);
		values[1] = settings[0];
		values[2] = settings[1];
		(void) inbox_spi_check(SPI_execute_with_args("SELECT $1, inbox.observe($1, $2, $3)",
										3, types, values, NULL, false, 0),
				  SPI_OK_SELECT, "inbox.observe");
		targets = collect_targets(targets, cxt);
		SPI_freetuptable(SPI_tuptable);
	}
	return targets;
}

/*
 * Add each scope of the last SPI query's first column to the list of its
 * leaf, or of leaf if it is not -1
 */
static void
add_scopes(List **by_leaf, int leaf)
{
	uint64		i;

	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull);
		text	   *scope;
		int			k;

		if (isnull)
			continue;
		scope = DatumGetTextPP(d);
		k = leaf >= 0 ? leaf : inbox_scope_leaf(scope);
		by_leaf[k] = lappend(by_leaf[k], text_to_cstring(scope));
	}
	SPI_freetuptable(SPI_tuptable);
}

static int
compare_scopes(const ListCell *a, const ListCell *b)
{
	return strcmp((const char *) lfirst(a), (const char *) lfirst(b));
}

/*
 * Observe the scopes of one leaf (inbox.observe_leaf), each once; note
 * how far each clock has read for the hints, and append the scopes with
 * something to purge now to targets, in cxt.  *wanted and *observed count
 * the scopes asked for and those observed (the others were held by
 * another purger).
 */
static List *
observe_leaf(List *targets, Oid leaf, List *scopes, Datum *settings,
			 MemoryContext cxt, int64 *wanted, int64 *observed)
{
	Oid			types[4] = {REGCLASSOID, TEXTARRAYOID, INTERVALOID, INTERVALOID};
	Datum		values[4];
	Datum	   *elems = palloc(sizeof(Datum) * list_length(scopes));
	const char *prev = NULL;
	int			n = 0;
	uint64		i;
	ListCell   *lc;

	list_sort(scopes, compare_scopes);
	foreach(lc, scopes)
	{
		if (prev == NULL || strcmp(prev, lfirst(lc)) != 0)
			elems[n++] = CStringGetTextDatum(lfirst(lc));
		prev = lfirst(lc);
	}
	values[0] = ObjectIdGetDatum(leaf);
	values[1] = PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[2] = settings[0];
	values[3] = settings[1];
	(void) inbox_execute("SELECT scope, observed_until, cutoff "
						 "FROM inbox.observe_leaf($1, $2, $3, $4)",
						 4, types, values, NULL, SPI_OK_SELECT);
	*wanted += n;
	*observed += SPI_processed;
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[i];
		TupleDesc	tupdesc = SPI_tuptable->tupdesc;
		bool		isnull;
		char	   *scope = TextDatumGetCString(SPI_getbinval(tuple, tupdesc, 1, &isnull));
		Datum		until = SPI_getbinval(tuple, tupdesc, 2, &isnull);
		Datum		cutoff;

		if (!isnull)
			inbox_stats_observed(scope, DatumGetTimestampTz(until));
		cutoff = SPI_getbinval(tuple, tupdesc, 3, &isnull);
		if (!isnull)
		{
			MemoryContext oldcxt = MemoryContextSwitchTo(cxt);
			PurgeTarget *target = palloc(sizeof(PurgeTarget));

			target->scope = pstrdup(scope);
			target->cutoff = DatumGetTimestampTz(cutoff);
			target->leaf = leaf;
			targets = lappend(targets, target);
			MemoryContextSwitchTo(oldcxt);
		}
	}
	SPI_freetuptable(SPI_tuptable);
	return targets;
}

/*
 * Step 1 by the SQL of PURGE_SCHEDULE_SINCE and later: observe only the
 * scopes that can have changed (see the banner), in a number of
 * statements that does not depend on the number of scopes.  Every pass
 * reads the hints and the schedules that have come (an index range).  A
 * pass that sweeps also reads the scopes without a schedule for the
 * settings in force (a full pass, and the first leaf of a round), and
 * sweeps its leaves before it observes anything.  A sweep counts only once
 * every scope it found was observed: one that another purger held may
 * hide what only a sweep finds, and the next pass sweeps again.
 */
static List *
observe_changed(Datum *settings, int retention_s, int idle_s, MemoryContext cxt)
{
	Oid			types[2] = {INTERVALOID, INTERVALOID};
	Oid			leaves[INBOX_LEAVES];
	List	   *by_leaf[INBOX_LEAVES];
	List	   *targets = NIL;
	TimestampTz started = GetCurrentTimestamp();
	int			leaf = 0;
	InboxSweep	sweep = inbox_stats_sweep_due(PURGE_SWEEP_INTERVAL_S / INBOX_LEAVES,
											  retention_s, idle_s, &leaf);
	int64		wanted = 0;
	int64		observed = 0;
	ListCell   *lc;
	int			k;

	memset(by_leaf, 0, sizeof(by_leaf));
	for (k = 0; k < INBOX_LEAVES; k++)
	{
		char		name[NAMEDATALEN];

		snprintf(name, sizeof(name), "entries_p%d", k);
		leaves[k] = inbox_relid(name);
		if (!OidIsValid(leaves[k]))
			elog(ERROR, "inbox.%s does not exist", name);
	}

	/* Entries claimed since the purge last read their scope (stats.c) */
	foreach(lc, inbox_stats_unobserved(CurrentMemoryContext))
	{
		k = inbox_scope_leaf(cstring_to_text(lfirst(lc)));
		by_leaf[k] = lappend(by_leaf[k], lfirst(lc));
	}

	(void) inbox_execute("SELECT s FROM inbox.purge_due() AS s",
						 0, NULL, NULL, NULL, SPI_OK_SELECT);
	add_scopes(by_leaf, -1);

	if (sweep == INBOX_SWEEP_ALL || (sweep == INBOX_SWEEP_LEAF && leaf == 0))
	{
		(void) inbox_execute("SELECT s FROM inbox.purge_unscheduled($1, $2) AS s",
							 2, types, settings, NULL, SPI_OK_SELECT);
		add_scopes(by_leaf, -1);
	}
	for (k = 0; k < INBOX_LEAVES; k++)
	{
		Oid			leaftype[1] = {REGCLASSOID};
		Datum		leafvalue[1];

		if (sweep == INBOX_SWEEP_NONE || (sweep == INBOX_SWEEP_LEAF && k != leaf))
			continue;
		leafvalue[0] = ObjectIdGetDatum(leaves[k]);
		(void) inbox_execute("SELECT s FROM inbox.sweep_leaf($1) AS s",
							 1, leaftype, leafvalue, NULL, SPI_OK_SELECT);
		add_scopes(by_leaf, k);
	}

	for (k = 0; k < INBOX_LEAVES; k++)
	{
		if (by_leaf[k] != NIL)
			targets = observe_leaf(targets, leaves[k], by_leaf[k], settings, cxt,
								   &wanted, &observed);
	}

	if (sweep != INBOX_SWEEP_NONE && observed == wanted)
		inbox_stats_swept(started, retention_s, idle_s,
						  sweep == INBOX_SWEEP_ALL ? 0 : (leaf + 1) % INBOX_LEAVES);
	return targets;
}

/*
 * Step 1: remove what the content windows (window.c) no longer need;
 * observe the scopes that may need it; return the PurgeTargets, allocated
 * in cxt, of the scopes with something to purge now.
 */
List *
inbox_purge_observe(MemoryContext cxt)
{
	Oid			types[2] = {INTERVALOID, INTERVALOID};
	Datum		values[2];
	int			retention_s = duration_seconds("inbox.retention", retention_string,
											   &retention);
	int			idle_s = duration_seconds("inbox.idle_threshold", idle_threshold_string,
										  &idle_threshold);

	values[0] = IntervalPGetDatum(seconds_interval(retention_s));
	values[1] = IntervalPGetDatum(seconds_interval(idle_s));
	inbox_window_purge(purge_batch_size);
	if (inbox_entries_distributed())
		return observe_distributed(values, cxt);
	if (!inbox_sql_older_than(PURGE_SCHEDULE_SINCE))
		return observe_changed(values, retention_s, idle_s, cxt);

	/* The SQL of 0.4.0 and 1.0.0: every scope, one inbox.observe each */
	(void) inbox_spi_check(SPI_execute_with_args("SELECT s, inbox.observe(s, $1, $2) "
									"FROM inbox.scope_list() AS s",
									2, types, values, NULL, false, 0),
			  SPI_OK_SELECT, "inbox.observe");

	return collect_targets(NIL, cxt);
}

/* The leaves of inbox.entries, in a stable order, as a List of Oids in cxt */
List *
inbox_purge_leaves(MemoryContext cxt)
{
	List	   *leaves = NIL;
	MemoryContext oldcxt;
	uint64		i;

	(void) inbox_spi_check(SPI_execute("SELECT c.oid FROM pg_catalog.pg_inherits AS i "
						  "JOIN pg_catalog.pg_class AS c ON c.oid OPERATOR(pg_catalog.=) i.inhrelid "
						  "WHERE i.inhparent OPERATOR(pg_catalog.=) 'inbox.entries'::pg_catalog.regclass "
						  "ORDER BY c.relname", true, 0),
			  SPI_OK_SELECT, "listing the leaves of inbox.entries");

	oldcxt = MemoryContextSwitchTo(cxt);
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		leaves = lappend_oid(leaves,
							 DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
															SPI_tuptable->tupdesc,
															1, &isnull)));
	}
	MemoryContextSwitchTo(oldcxt);
	return leaves;
}

/*
 * Step 2, for one leaf, one scope at a time until limit rows are gone: by
 * the SQL of 0.4.0 (inbox.purge_batch), or on a distributed inbox.entries
 * (inbox.purge_scope, a statement on the scope's shard).  sql calls either,
 * with the same arguments.
 */
static int64
purge_leaf_by_scope(Oid leaf, List *targets, int limit, bool *more, const char *sql)
{
	bool		isnull;
	int64		total = 0;
	ListCell   *lc;

	foreach(lc, targets)
	{
		PurgeTarget *target = (PurgeTarget *) lfirst(lc);
		Oid			types[4] = {REGCLASSOID, TEXTOID, TIMESTAMPTZOID, INT4OID};
		Datum		values[4];
		int64		rows;

		values[0] = ObjectIdGetDatum(leaf);
		values[1] = CStringGetTextDatum(target->scope);
		values[2] = TimestampTzGetDatum(target->cutoff);
		values[3] = Int32GetDatum((int32) (limit - total));
		(void) inbox_spi_check(SPI_execute_with_args(sql, 4, types, values, NULL, false, 1),
				  SPI_OK_SELECT, sql);
		rows = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
										   SPI_tuptable->tupdesc, 1, &isnull));
		inbox_stats_purged(target->scope, rows);
		total += rows;
		if (total >= limit)
		{
			*more = true;
			break;
		}
	}
	return total;
}

/*
 * Step 2, for one leaf, by the SQL of 1.0.0 and later: one statement,
 * inbox.purge_leaf, for all the scopes, so that a round costs a few
 * statements per leaf whatever the number of scopes.
 */
static int64
purge_leaf_at_once(Oid leaf, List *targets, int limit, bool *more)
{
	int			n = list_length(targets);
	Datum	   *scopes = palloc(sizeof(Datum) * n);
	Datum	   *cutoffs = palloc(sizeof(Datum) * n);
	Oid			types[4] = {REGCLASSOID, TEXTARRAYOID, TIMESTAMPTZARRAYOID, INT4OID};
	Datum		values[4];
	int64		total = 0;
	uint64		i;
	ListCell   *lc;
	int			k = 0;

	foreach(lc, targets)
	{
		PurgeTarget *target = (PurgeTarget *) lfirst(lc);

		if (OidIsValid(target->leaf) && target->leaf != leaf)
			continue;			/* its entries are in another leaf */
		scopes[k] = CStringGetTextDatum(target->scope);
		cutoffs[k] = TimestampTzGetDatum(target->cutoff);
		k++;
	}
	if (k == 0)
		return 0;
	n = k;
	values[0] = ObjectIdGetDatum(leaf);
	values[1] = PointerGetDatum(construct_array(scopes, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[2] = PointerGetDatum(construct_array(cutoffs, n, TIMESTAMPTZOID, sizeof(TimestampTz),
												FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[3] = Int32GetDatum(limit);
	(void) inbox_spi_check(SPI_execute_with_args("SELECT scope, purged FROM inbox.purge_leaf($1, $2, $3, $4)",
									4, types, values, NULL, false, 0),
			  SPI_OK_SELECT, "inbox.purge_leaf");
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		char	   *scope = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		int64		rows = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
													   SPI_tuptable->tupdesc, 2, &isnull));

		inbox_stats_purged(scope, rows);
		total += rows;
	}
	*more = (total >= limit);
	return total;
}

/*
 * Step 2, for one leaf: delete at most limit expired entries, oldest first
 * over the scopes.  Returns the rows deleted; *more says whether the limit
 * was reached, so that more may remain.  A leaf that another purger holds
 * is skipped (0 rows, *more false): that purger is doing the work.
 */
static int64
inbox_purge_leaf(Oid leaf, List *targets, int limit, bool *more)
{
	LOCKTAG		tag;
	char	   *version;

	*more = false;
	if (targets == NIL || limit <= 0)
		return 0;

	/* Held to the end of the transaction, like pg_try_advisory_xact_lock */
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, leaf, 0, INBOX_LOCKSPACE_PURGE);
	if (LockAcquire(&tag, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return 0;

	/* The SQL installed says which function does the work (version.c) */
	version = inbox_sql_version();
	if (version != NULL && strcmp(version, INBOX_PREVIOUS_SQL_VERSION) == 0)
		return purge_leaf_by_scope(leaf, targets, limit, more,
								   "SELECT inbox.purge_batch($1, $2, $3, $4)");
	if (inbox_entries_distributed())
		return purge_leaf_by_scope(leaf, targets, limit, more,
								   "SELECT inbox.purge_scope($1, $2, $3, $4)");
	return purge_leaf_at_once(leaf, targets, limit, more);
}

/*
 * inbox_purge() -> bigint: one purge round in the caller's transaction, for
 * servers that cannot run the background worker.  It deletes at most
 * inbox.purge_batch_size entries in all, so that a claim waiting for one
 * of them waits for one batch at most.  Returns the rows purged; call it
 * again, in a new transaction, while it returns a positive number to drain
 * a backlog.
 */
int64
inbox_purge_round(void)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext,
											  "inbox_purge",
											  ALLOCSET_DEFAULT_SIZES);
	List	   *targets;
	List	   *leaves;
	ListCell   *lc;
	int64		total = 0;
	int			nestlevel;

	inbox_spi_connect();

	nestlevel = NewGUCNestLevel();
	inbox_purge_set_lock_timeout(GUC_ACTION_SAVE);

	targets = inbox_purge_observe(cxt);
	leaves = inbox_purge_leaves(cxt);
	foreach(lc, leaves)
	{
		bool		more;

		total += inbox_purge_leaf(lfirst_oid(lc), targets,
								  purge_batch_size - (int) total, &more);
		if (total >= purge_batch_size)
			break;
	}
	/* The outbox's sent messages, within what is left of the batch */
	if (total < purge_batch_size)
	{
		bool		more;

		total += inbox_outbox_purge_batch(purge_batch_size - (int) total, &more);
	}

	AtEOXact_GUC(true, nestlevel);
	SPI_finish();
	MemoryContextDelete(cxt);
	return total;
}

Datum
inbox_purge_1_0(PG_FUNCTION_ARGS)
{
	if (inbox_citus_worker_node())
		inbox_refuse_if_distributed(INBOX_REFUSE_PURGE_ON_WORKER);
	PG_RETURN_INT64(inbox_purge_round());
}

/*
 * One round of the worker for one leaf: at most inbox.purge_batch_size
 * entries.  *more says whether the batch was full, so that more may remain.
 */
int64
inbox_purge_leaf_batch(Oid leaf, List *targets, bool *more)
{
	return inbox_purge_leaf(leaf, targets, purge_batch_size, more);
}

/*
 * One batch of the worker for the outbox: at most inbox.purge_batch_size
 * sent messages.  *more says whether the batch was full.
 */
int64
inbox_purge_outbox_batch(bool *more)
{
	return inbox_outbox_purge_batch(purge_batch_size, more);
}

/*
 * inbox.try_create_scopes() -> boolean: may this transaction add new
 * scopes to inbox.scopes?  One purger at a time does, so that no purger
 * ever waits for another's uncommitted insert of the same scope; the
 * others leave new scopes to the next round.  One lock per transaction,
 * whatever the number of scopes.
 */
Datum
inbox_try_create_scopes(PG_FUNCTION_ARGS)
{
	LOCKTAG		tag;

	/* Leaf OIDs are never 0, so this tag is nobody else's */
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0, 0, INBOX_LOCKSPACE_PURGE);
	PG_RETURN_BOOL(LockAcquire(&tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL);
}
