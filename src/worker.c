/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The retention launcher and its per-database purge workers.
 *
 * With shared_preload_libraries = 'inbox', the postmaster runs one
 * launcher ("inbox launcher" in pg_stat_activity.backend_type).  It
 * connects to no database: every inbox.purge_naptime it reads pg_database
 * and, one database at a time, starts a short-lived purge worker ("inbox
 * purge") with the database's OID as its argument.  The worker connects,
 * leaves at once if the extension is not installed there (so nobody has to
 * list databases, and CREATE EXTENSION is served within one naptime), and
 * otherwise runs purge rounds until nothing expired is left, then exits.
 *
 * Why short-lived workers rather than one resident worker per database:
 *
 *	- DROP DATABASE refuses while other sessions are connected.  Between
 *	  passes nothing is connected, and during a pass the worker checks before
 *	  each batch whether someone waits to drop (or rename) its database and
 *	  leaves if so: DROP DATABASE waits at most one batch.
 *	- Each pass starts with a fresh connection, so per-database settings
 *	  (ALTER DATABASE ... SET inbox.retention) apply from the next pass on;
 *	  cluster settings also reload on SIGHUP within a pass.
 *	- A crashed or killed pass costs nothing: the next one starts over,
 *	  since every batch is its own transaction and the clocks live in a
 *	  table.
 *
 * The launcher restarts after a crash (bgw_restart_time); a purge worker is
 * never restarted by the postmaster, the launcher simply starts the next
 * pass.  Both exit on SIGTERM through die(), like every backend.
 *
 * src/worker.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_database.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "distributed.h"
#include "inbox.h"
#include "purge.h"
#include "spi.h"
#include "stats.h"
#include "version.h"
#include "worker.h"

/* inbox.purge_naptime, in seconds, and inbox.purge_enabled */
static int	purge_naptime = 10;
static bool purge_enabled = true;

/* The launcher comes back this long after a crash or a SIGTERM */
#define LAUNCHER_RESTART_SECONDS	10

/* A pass gives way to the next database after this long */
#define PASS_BUDGET_MS				(60 * 1000)

typedef struct PurgeDatabase
{
	Oid			oid;
	char		name[NAMEDATALEN];
} PurgeDatabase;

/* What the purge worker's steps work on; lives in its round context */
typedef struct PurgeRound
{
	MemoryContext cxt;
	List	   *targets;
	List	   *leaves;
	Oid			leaf;
	bool		more;
	bool		dropping;
} PurgeRound;

/*
 * What the launcher and the purge workers have in common: both use SPI (so
 * shared memory and a database connection), and neither runs on a standby.
 */
static void
init_worker(BackgroundWorker *worker, const char *function, const char *type)
{
	memset(worker, 0, sizeof(*worker));
	worker->bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker->bgw_start_time = BgWorkerStart_RecoveryFinished;
	strlcpy(worker->bgw_library_name, "inbox", BGW_MAXLEN);
	strlcpy(worker->bgw_function_name, function, BGW_MAXLEN);
	strlcpy(worker->bgw_type, type, BGW_MAXLEN);
}

/*
 * The worker's settings, and the launcher.  The settings exist without the
 * preload too, so that ALTER DATABASE ... SET inbox.purge_enabled is
 * checked wherever it is set; only the preload starts the launcher.
 */
void
worker_init(void)
{
	BackgroundWorker worker;

	DefineCustomIntVariable("inbox.purge_naptime",
							"Time between two purge passes over every database.",
							NULL,
							&purge_naptime,
							10,
							1, 24 * 3600,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("inbox.purge_enabled",
							 "Whether the background worker purges expired entries.",
							 "inbox_purge() works whatever this says.",
							 &purge_enabled,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	if (!process_shared_preload_libraries_in_progress)
		return;

	init_worker(&worker, "inbox_launcher_main", "inbox launcher");
	worker.bgw_restart_time = LAUNCHER_RESTART_SECONDS;
	strlcpy(worker.bgw_name, "inbox launcher", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

/*
 * The databases a purge worker may connect to, as PurgeDatabases in cxt:
 * not templates, not closed to connections, not left invalid by an
 * interrupted DROP DATABASE.
 */
static List *
database_list(MemoryContext cxt)
{
	List	   *dbs = NIL;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tuple;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	(void) GetTransactionSnapshot();

	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while (HeapTupleIsValid(tuple = heap_getnext(scan, ForwardScanDirection)))
	{
		Form_pg_database form = (Form_pg_database) GETSTRUCT(tuple);
		MemoryContext oldcxt;
		PurgeDatabase *db;

		if (form->datistemplate || !form->datallowconn ||
			inbox_database_is_invalid(form))
			continue;
		oldcxt = MemoryContextSwitchTo(cxt);
		db = palloc(sizeof(PurgeDatabase));
		db->oid = form->oid;
		strlcpy(db->name, NameStr(form->datname), NAMEDATALEN);
		dbs = lappend(dbs, db);
		MemoryContextSwitchTo(oldcxt);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);

	CommitTransactionCommand();
	return dbs;
}

/*
 * Start a purge worker for db and wait until it has finished.  Only the
 * database's OID is passed, never a pointer.  One worker at a time keeps
 * the extension's use of max_worker_processes at two slots.
 */
static void
run_purge_worker(PurgeDatabase *db)
{
	static bool warned = false;
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	BgwHandleStatus status;
	pid_t		pid;

	init_worker(&worker, "inbox_purge_main", "inbox purge");
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_name, BGW_MAXLEN, "inbox purge worker for database %s", db->name);
	worker.bgw_main_arg = ObjectIdGetDatum(db->oid);
	worker.bgw_notify_pid = MyProcPid;

	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
	{
		/* Say it once, not every naptime, until it works again */
		if (!warned)
			ereport(WARNING,
					(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
					 errmsg("inbox launcher could not start a purge worker for database \"%s\"",
							db->name),
					 errdetail("No background worker slot is free."),
					 errhint("Raise max_worker_processes; the purge needs one slot besides the launcher's.")));
		warned = true;
		return;
	}
	warned = false;

	status = WaitForBackgroundWorkerStartup(handle, &pid);
	if (status == BGWH_STARTED)
		status = WaitForBackgroundWorkerShutdown(handle);
	if (status == BGWH_POSTMASTER_DIED)
		proc_exit(1);
	pfree(handle);
}

/* The counters of databases that no longer exist are freed */
static void
forget_dropped_databases(List *dbs)
{
	Oid		   *oids = palloc(sizeof(Oid) * Max(list_length(dbs), 1));
	int			n = 0;
	ListCell   *lc;

	foreach(lc, dbs)
		oids[n++] = ((PurgeDatabase *) lfirst(lc))->oid;
	inbox_stats_keep_databases(oids, n);
	pfree(oids);
}

void
inbox_launcher_main(Datum main_arg)
{
	MemoryContext cxt;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	/* No database: pg_database is a shared catalog */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	/* Reset every pass, as pg_cron resets its loop context */
	cxt = AllocSetContextCreate(TopMemoryContext, "inbox launcher",
								ALLOCSET_DEFAULT_SIZES);

	for (;;)
	{
		TimestampTz pass_start = GetCurrentTimestamp();
		List	   *dbs;
		ListCell   *lc;

		MemoryContextReset(cxt);
		dbs = database_list(cxt);
		forget_dropped_databases(dbs);
		foreach(lc, dbs)
		{
			CHECK_FOR_INTERRUPTS();
			if (ConfigReloadPending)
			{
				ConfigReloadPending = false;
				ProcessConfigFile(PGC_SIGHUP);
			}
			run_purge_worker((PurgeDatabase *) lfirst(lc));
		}

		/*
		 * Nap until a naptime after this pass started.  The latch is also set
		 * when a purge worker stops, and on SIGHUP: neither may start a pass
		 * early, but a reload may shorten the nap.
		 */
		for (;;)
		{
			long		timeout;

			CHECK_FOR_INTERRUPTS();
			if (ConfigReloadPending)
			{
				ConfigReloadPending = false;
				ProcessConfigFile(PGC_SIGHUP);
			}
			timeout = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
													  TimestampTzPlusMilliseconds(pass_start,
																				  purge_naptime * 1000L));
			if (timeout <= 0)
				break;
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 timeout, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
	}
}

/*
 * Is the extension installed here, at a version this library purges?  Its
 * counters are reclaimed where it is not installed (any more).  The
 * version is read from pg_extension: a database left at a version this
 * library does not serve is said so in the log, and not purged until
 * ALTER EXTENSION inbox UPDATE.
 */
static bool
extension_ready(void)
{
	char	   *version;
	bool		ready;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	version = inbox_sql_version();
	ready = version != NULL && inbox_sql_served(version);
	if (version == NULL)
		inbox_stats_forget(MyDatabaseId, NULL);
	else if (ready && inbox_citus_worker_node())
	{
		/*
		 * The coordinator purges the shards, with the retention clocks it
		 * keeps in its inbox.scopes; a worker's copy of that table is
		 * empty.  Quietly: the launcher comes back every naptime.
		 */
		ereport(DEBUG1,
				(errmsg("inbox purge skips database \"%s\" on this Citus worker: the coordinator purges",
						get_database_name(MyDatabaseId))));
		ready = false;
	}
	else if (!ready)
		ereport(LOG,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("inbox purge skips database \"%s\": library %s cannot serve version %s of extension inbox",
						get_database_name(MyDatabaseId), INBOX_LIBRARY_VERSION, version),
				 errhint("Run ALTER EXTENSION inbox UPDATE in that database.")));
	CommitTransactionCommand();
	return ready;
}

/*
 * Does a DROP DATABASE (or another AccessExclusiveLock on the database,
 * such as a rename) wait for us?  It holds that lock while it waits for
 * other sessions to leave.
 */
static bool
database_being_dropped(void)
{
	Oid			types[1] = {OIDOID};
	Datum		values[1];
	bool		isnull;

	values[0] = ObjectIdGetDatum(MyDatabaseId);
	if (inbox_execute_once("SELECT EXISTS (SELECT FROM pg_catalog.pg_locks "
						   "WHERE locktype = 'object' AND granted "
						   "AND classid = 'pg_catalog.pg_database'::pg_catalog.regclass "
						   "AND objid = $1 AND mode = 'AccessExclusiveLock')",
						   1, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read pg_locks");
	return DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
									  SPI_tuptable->tupdesc, 1, &isnull));
}

static void
step_observe(PurgeRound *round)
{
	round->targets = inbox_purge_observe(round->cxt);
	round->leaves = inbox_purge_leaves(round->cxt);
}

static void
step_purge_leaf(PurgeRound *round)
{
	round->dropping = database_being_dropped();
	if (!round->dropping)
		(void) inbox_purge_leaf_batch(round->leaf, round->targets, &round->more);
}

static void
step_purge_outbox(PurgeRound *round)
{
	round->dropping = database_being_dropped();
	if (!round->dropping)
		(void) inbox_purge_outbox_batch(&round->more);
}

/*
 * Run one step in a transaction of its own, as worker_spi does: its own
 * snapshot, SPI connection and lock_timeout, all gone when it ends.  An
 * error (typically a lock timeout: someone runs DDL on the inbox tables)
 * is logged and ends the pass; the next pass starts over.
 */
static bool
run_step(const char *activity, void (*step) (PurgeRound *), PurgeRound *round)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	volatile bool ok = true;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PG_TRY();
	{
		inbox_spi_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		pgstat_report_activity(STATE_RUNNING, activity);
		inbox_purge_set_lock_timeout(GUC_ACTION_LOCAL);

		step(round);

		SPI_finish();
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		HOLD_INTERRUPTS();
		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		RESUME_INTERRUPTS();
		/*
		 * A lock timeout (DDL on the inbox tables) and objects gone (DROP
		 * EXTENSION in progress) are expected operation, not trouble.
		 */
		ereport(edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE ||
				edata->sqlerrcode == ERRCODE_UNDEFINED_TABLE ||
				edata->sqlerrcode == ERRCODE_UNDEFINED_FUNCTION ? LOG : WARNING,
				(errmsg("inbox purge stopped early: %s", edata->message),
				 errdetail("The next pass, in inbox.purge_naptime, starts over.")));
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();

	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
	return ok;
}

void
inbox_purge_main(Datum main_arg)
{
	Oid			dboid = DatumGetObjectId(main_arg);
	TimestampTz started;
	PurgeRound	round;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);

	if (!extension_ready() || !purge_enabled)
		proc_exit(0);

	memset(&round, 0, sizeof(round));
	round.cxt = AllocSetContextCreate(TopMemoryContext, "inbox purge round",
									  ALLOCSET_DEFAULT_SIZES);
	started = GetCurrentTimestamp();

	/*
	 * The outbox's sent messages first, a batch a transaction: they have no
	 * retention clock to observe, and the scopes' loop below ends as soon
	 * as no scope has anything to purge.
	 */
	do
	{
		CHECK_FOR_INTERRUPTS();
		round.more = false;
		if (!run_step("inbox: purging the outbox", step_purge_outbox, &round))
			proc_exit(0);
		if (round.dropping)
			proc_exit(0);
	} while (round.more &&
			 !TimestampDifferenceExceeds(started, GetCurrentTimestamp(), PASS_BUDGET_MS));

	for (;;)
	{
		ListCell   *lc;
		bool		more = false;

		MemoryContextReset(round.cxt);
		if (!run_step("inbox: observing retention clocks", step_observe, &round))
			break;
		if (round.targets == NIL)
			break;				/* nothing may be purged now */

		/* Partition by partition, a batch each */
		foreach(lc, round.leaves)
		{
			CHECK_FOR_INTERRUPTS();
			if (ConfigReloadPending)
			{
				ConfigReloadPending = false;
				ProcessConfigFile(PGC_SIGHUP);
				if (!purge_enabled)
					proc_exit(0);
			}

			round.leaf = lfirst_oid(lc);
			round.more = false;
			if (!run_step("inbox: purging a partition", step_purge_leaf, &round))
				proc_exit(0);
			if (round.dropping)
			{
				ereport(LOG,
						(errmsg("inbox purge worker leaves database %u, which is being dropped or altered",
								dboid)));
				proc_exit(0);
			}
			more |= round.more;
		}

		/* Stop once every leaf had less than a full batch left */
		if (!more)
			break;
		if (TimestampDifferenceExceeds(started, GetCurrentTimestamp(), PASS_BUDGET_MS))
			break;
	}

	proc_exit(0);
}
