/*-------------------------------------------------------------------------
 *
 * purge.c
 *	  Retention: its settings, the purge round of inbox_purge(), and the
 *	  first step's reading of the settings in force.
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
 * The steps themselves, and which scopes step 1 looks at, are in
 * purge_steps.c; here are the settings they read, the round that
 * inbox_purge() runs, and the SQL entry points.
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

/* The SQL that keeps each scope's purge schedule (see purge_steps.c) */
#define PURGE_SCHEDULE_SINCE	"1.1.0"

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
	(void) inbox_spi_check(inbox_execute_once("SELECT s, inbox.observe(s, $1, $2) "
											  "FROM inbox.scope_list() AS s",
											  2, types, values, NULL, false, 0),
			  SPI_OK_SELECT, "inbox.observe");

	return collect_targets(NIL, cxt);
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
