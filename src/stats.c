/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  Per-scope counters in shared memory: claims, duplicates, mismatches,
 *	  content duplicates, rows purged and the last purge time, behind the
 *	  inbox_stats view; and what the purge learns from them: which scopes
 *	  received entries it has not observed yet, and when it last swept a
 *	  database.
 *
 * Counters live in a shared hash keyed by (database, scope), sized by
 * inbox.max_scopes at server start, so they exist only when the library
 * is in shared_preload_libraries.  The hash is fixed-size: inbox.max_scopes
 * is a hard limit, and a scope beyond it is simply not counted, rather
 * than eating the shared memory that the lock table and others grow into.
 * Counters of a dropped scope go with inbox_drop_scope; those of dropped
 * databases, and of databases where the extension was dropped, are
 * reclaimed by the retention launcher's next pass.  Lookups take the lock
 * in shared mode and bump pg_atomic counters, so concurrent claims of one
 * scope never queue behind each other; only a scope's first count, and
 * removals, take it exclusively.  Nothing is written to disk: the counters
 * start from zero after every restart (documented).
 *
 * Claims, duplicates, mismatches and content duplicates are counted when
 * the call decides, as events.  Rows purged are state, so they are counted
 * only once the purge transaction commits: a purge inside a transaction or
 * savepoint that rolls back is not counted.
 *
 * The purge's hints (purge.c says how it uses them).  A claim that writes
 * an entry raises its scope's "received" to the entry's received_at (the
 * claiming transaction's start) when that is newer, in the atomic it
 * already updates the claims counter beside: no lock and no statement
 * more.  The purge's "observed" is how far its clock has read the scope's
 * committed entries (inbox.scopes.observed_until), written when the purge
 * transaction that read them commits.  A scope whose received is newer
 * than its observed may have entries the purge has not seen:
 *
 *	- a claim counted before it commits keeps the hint until the purge sees
 *	  its entry, so no purge can miss it by looking too early;
 *	- a claim that rolls back leaves a hint no entry satisfies: the purge
 *	  looks at that scope again each pass, a few index probes, until a
 *	  later claim commits.  Never the other way: a hint is only ever
 *	  cleared by the entry it stands for, or a newer one;
 *	- a scope the counters do not hold (beyond inbox.max_scopes), a restart
 *	  (the hints start empty), inbox_stats_reset (they are dropped), and
 *	  entries written other than by a claim (COPY, a restore, by hand) give
 *	  no hint.  The purge finds those by sweeping every scope: all at once
 *	  at the first pass after a start or a reset, or after a change of its
 *	  settings, and otherwise a leaf at a time, at intervals that the sweep
 *	  slots below time per database.
 *
 * src/stats.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "compat.h"
#include "inbox.h"
#include "stats.h"

PG_FUNCTION_INFO_V1(inbox_counters_1_0);
PG_FUNCTION_INFO_V1(inbox_content_counters);
PG_FUNCTION_INFO_V1(inbox_count_failure);
PG_FUNCTION_INFO_V1(inbox_forget_counters);

/* inbox.max_scopes: the (database, scope) pairs counted */
static int	max_scopes = 1000;

typedef struct InboxStatsKey
{
	Oid			dbid;
	char		scope[INBOX_MAX_SCOPE_BYTES + 1];	/* zero-padded: hashed whole */
} InboxStatsKey;

typedef struct InboxStatsEntry
{
	InboxStatsKey key;			/* must be first */
	pg_atomic_uint64 claims;
	pg_atomic_uint64 duplicates;
	pg_atomic_uint64 mismatches;
	pg_atomic_uint64 failures;
	pg_atomic_uint64 content_duplicates;
	pg_atomic_uint64 purged;
	pg_atomic_uint64 last_purge;	/* TimestampTz, 0 = never */
	pg_atomic_uint64 received;	/* TimestampTz: newest entry claimed, 0 = none */
	pg_atomic_uint64 observed;	/* TimestampTz: the purge's clock has seen up to */
} InboxStatsEntry;

/*
 * How the purge sweeps a database (see the banner): when it last swept
 * (all of it, or one leaf), the leaf it sweeps next, and the retention and
 * idle threshold it computed every schedule with at its last full sweep.
 * A database without a slot is swept whole at every pass: when more
 * databases than slots purge, the one swept longest ago gives its slot up.
 */
#define INBOX_SWEEP_SLOTS	64

typedef struct InboxSweepSlot
{
	Oid			dbid;			/* InvalidOid: free */
	TimestampTz swept_at;
	int			next_leaf;
	int			retention_s;
	int			idle_s;
} InboxSweepSlot;

typedef struct InboxSharedState
{
	LWLock	   *lock;			/* protects the hash's structure and the slots */
	InboxSweepSlot sweeps[INBOX_SWEEP_SLOTS];
} InboxSharedState;

static InboxSharedState *inbox_shared = NULL;
static HTAB *inbox_stats_hash = NULL;

/*
 * Rows purged, and clocks observed, by this backend's transaction (and its
 * subtransactions), not yet committed: one note per call, never searched,
 * so that a purge of many scopes notes each in constant time; two notes of
 * one scope add up when folded.  They live in pending_cxt, which the end
 * of the transaction resets.
 */
typedef struct PendingPurge
{
	char	   *scope;
	int64		rows;
	bool		has_observed;
	TimestampTz observed;
	int			nest_level;
} PendingPurge;

static MemoryContext pending_cxt = NULL;
static PendingPurge *pending = NULL;
static int	npending = 0;
static int	maxpending = 0;

/* A sweep of this database by this transaction, not yet committed */
static bool sweep_pending = false;
static int	sweep_nest_level = 0;
static InboxSweepSlot sweep_done;

static Size
stats_shmem_size(void)
{
	return add_size(MAXALIGN(sizeof(InboxSharedState)),
					hash_estimate_size(max_scopes, sizeof(InboxStatsEntry)));
}

/* The counters' shared memory and lock, asked for at server start */
void
stats_shmem_request(void)
{
	RequestAddinShmemSpace(stats_shmem_size());
	RequestNamedLWLockTranche("inbox", 1);
}

/* Find or create the counters; the caller holds AddinShmemInitLock */
void
stats_shmem_attach(void)
{
	bool		found;
	HASHCTL		info;

	inbox_shared = ShmemInitStruct("inbox", sizeof(InboxSharedState), &found);
	if (!found)
	{
		memset(inbox_shared, 0, sizeof(InboxSharedState));
		inbox_shared->lock = &(GetNamedLWLockTranche("inbox"))->lock;
	}

	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(InboxStatsKey);
	info.entrysize = sizeof(InboxStatsEntry);
	inbox_stats_hash = ShmemInitHash("inbox scope counters",
									 max_scopes, max_scopes,
									 &info, HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
}

/*
 * The counters exist only with the preload: shared memory is sized at
 * server start, and so is inbox.max_scopes, which is defined only then.
 */
void
stats_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;

	DefineCustomIntVariable("inbox.max_scopes",
							"Most (database, scope) pairs the shared-memory counters track.",
							"Scopes beyond it are still claimed and purged, but not counted.",
							&max_scopes,
							1000,
							100, 1000000,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);
}

static void
make_key(InboxStatsKey *key, Oid dbid, const char *scope, int len)
{
	memset(key, 0, sizeof(*key));
	key->dbid = dbid;
	memcpy(key->scope, scope, Min(len, INBOX_MAX_SCOPE_BYTES));
}

/*
 * Raise a TimestampTz kept in an atomic to value, unless it holds a newer
 * one already: a hint that concurrent writers raise may never go back.
 */
static void
atomic_raise(pg_atomic_uint64 *atomic, TimestampTz value)
{
	uint64		old = pg_atomic_read_u64(atomic);

	while ((TimestampTz) old < value &&
		   !pg_atomic_compare_exchange_u64(atomic, &old, (uint64) value))
		;
}

/*
 * Add delta to one counter of (dbid, scope), creating the entry if needed.
 * When the table is full the event is not counted: counting must never
 * make a claim fail.
 */
static void
stats_add(Oid dbid, const char *scope, int len, InboxCounter which, uint64 delta,
		  TimestampTz when)
{
	InboxStatsKey key;
	InboxStatsEntry *entry;
	bool		found;

	if (inbox_stats_hash == NULL)
		return;					/* not preloaded */

	make_key(&key, dbid, scope, len);
	LWLockAcquire(inbox_shared->lock, LW_SHARED);
	entry = hash_search(inbox_stats_hash, &key, HASH_FIND, NULL);
	if (entry == NULL)
	{
		LWLockRelease(inbox_shared->lock);
		LWLockAcquire(inbox_shared->lock, LW_EXCLUSIVE);
		entry = hash_search(inbox_stats_hash, &key, HASH_ENTER_NULL, &found);
		if (entry == NULL)
		{
			LWLockRelease(inbox_shared->lock);
			return;
		}
		if (!found)
		{
			pg_atomic_init_u64(&entry->claims, 0);
			pg_atomic_init_u64(&entry->duplicates, 0);
			pg_atomic_init_u64(&entry->mismatches, 0);
			pg_atomic_init_u64(&entry->failures, 0);
			pg_atomic_init_u64(&entry->content_duplicates, 0);
			pg_atomic_init_u64(&entry->purged, 0);
			pg_atomic_init_u64(&entry->last_purge, 0);
			pg_atomic_init_u64(&entry->received, 0);
			pg_atomic_init_u64(&entry->observed, 0);
		}
	}

	switch (which)
	{
		case INBOX_COUNT_CLAIM:
			pg_atomic_fetch_add_u64(&entry->claims, delta);
			break;
		case INBOX_COUNT_ENTRY:
			pg_atomic_fetch_add_u64(&entry->claims, delta);
			atomic_raise(&entry->received, GetCurrentTransactionStartTimestamp());
			break;
		case INBOX_COUNT_DUPLICATE:
			pg_atomic_fetch_add_u64(&entry->duplicates, delta);
			break;
		case INBOX_COUNT_MISMATCH:
			pg_atomic_fetch_add_u64(&entry->mismatches, delta);
			break;
		case INBOX_COUNT_FAILURE:
			pg_atomic_fetch_add_u64(&entry->failures, delta);
			break;
		case INBOX_COUNT_CONTENT_DUPLICATE:
			pg_atomic_fetch_add_u64(&entry->content_duplicates, delta);
			break;
		case INBOX_COUNT_PURGED:
			pg_atomic_fetch_add_u64(&entry->purged, delta);
			pg_atomic_write_u64(&entry->last_purge, (uint64) when);
			break;
	}
	LWLockRelease(inbox_shared->lock);
}

/* Count one claim decision for scope in the current database */
void
inbox_stats_count(const text *scope, InboxCounter which)
{
	stats_add(MyDatabaseId, VARDATA_ANY(scope), VARSIZE_ANY_EXHDR(scope),
			  which, 1, 0);
}

/*
 * Raise the observed hint of (MyDatabaseId, scope) to until.  A scope the
 * counters do not hold has no hint to clear.
 */
static void
stats_observed(const char *scope, TimestampTz until)
{
	InboxStatsKey key;
	InboxStatsEntry *entry;

	make_key(&key, MyDatabaseId, scope, strlen(scope));
	LWLockAcquire(inbox_shared->lock, LW_SHARED);
	entry = hash_search(inbox_stats_hash, &key, HASH_FIND, NULL);
	if (entry != NULL)
		atomic_raise(&entry->observed, until);
	LWLockRelease(inbox_shared->lock);
}

/* Record this database's sweep: take its slot, or one */
static void
stats_swept(const InboxSweepSlot *done)
{
	InboxSweepSlot *slot = NULL;
	int			i;

	LWLockAcquire(inbox_shared->lock, LW_EXCLUSIVE);
	for (i = 0; i < INBOX_SWEEP_SLOTS && slot == NULL; i++)
		if (inbox_shared->sweeps[i].dbid == MyDatabaseId)
			slot = &inbox_shared->sweeps[i];
	for (i = 0; i < INBOX_SWEEP_SLOTS && slot == NULL; i++)
		if (!OidIsValid(inbox_shared->sweeps[i].dbid))
			slot = &inbox_shared->sweeps[i];
	if (slot == NULL)
	{
		slot = &inbox_shared->sweeps[0];
		for (i = 1; i < INBOX_SWEEP_SLOTS; i++)
			if (inbox_shared->sweeps[i].swept_at < slot->swept_at)
				slot = &inbox_shared->sweeps[i];
	}
	*slot = *done;
	LWLockRelease(inbox_shared->lock);
}

/*
 * The end of a transaction (events.c): at commit, fold its purge counts,
 * the clocks it observed and its sweep into shared memory; else drop them
 * (a prepared purge is not counted).  Only a commit may clear a hint: the
 * observation of a purge that rolled back never happened.
 */
void
stats_xact_end(bool commit)
{
	int			i;

	if (npending == 0 && !sweep_pending)
		return;
	if (commit)
	{
		TimestampTz now = GetCurrentTimestamp();

		for (i = 0; i < npending; i++)
		{
			if (pending[i].rows > 0)
				stats_add(MyDatabaseId, pending[i].scope, strlen(pending[i].scope),
						  INBOX_COUNT_PURGED, (uint64) pending[i].rows, now);
			if (pending[i].has_observed)
				stats_observed(pending[i].scope, pending[i].observed);
		}
		if (sweep_pending)
			stats_swept(&sweep_done);
	}
	npending = 0;
	sweep_pending = false;
	if (pending_cxt != NULL && maxpending > 0)
	{
		MemoryContextReset(pending_cxt);
		pending = NULL;
		maxpending = 0;
	}
}

/*
 * The end of a subtransaction (events.c): a rolled-back savepoint takes
 * its purge counts, observations and sweep with it, a released one hands
 * them to its parent.
 */
void
stats_subxact_end(bool commit)
{
	int			level = GetCurrentTransactionNestLevel();
	int			i;
	int			kept = 0;

	for (i = 0; i < npending; i++)
	{
		if (pending[i].nest_level >= level)
		{
			if (!commit)
				continue;
			pending[i].nest_level = level - 1;
		}
		pending[kept++] = pending[i];
	}
	npending = kept;
	if (sweep_pending && sweep_nest_level >= level)
	{
		sweep_pending = commit;
		sweep_nest_level = level - 1;
	}
}

/* A new note of scope, at the current nesting level */
static PendingPurge *
pending_note(const char *scope)
{
	PendingPurge *note;

	if (pending_cxt == NULL)
		pending_cxt = AllocSetContextCreate(TopMemoryContext, "inbox purge notes",
											ALLOCSET_DEFAULT_SIZES);
	if (npending == maxpending)
	{
		maxpending = Max(64, maxpending * 2);
		pending = pending == NULL
			? MemoryContextAlloc(pending_cxt, maxpending * sizeof(PendingPurge))
			: repalloc_huge(pending, maxpending * sizeof(PendingPurge));
	}
	note = &pending[npending++];
	note->scope = MemoryContextStrdup(pending_cxt, scope);
	note->rows = 0;
	note->has_observed = false;
	note->observed = 0;
	note->nest_level = GetCurrentTransactionNestLevel();
	return note;
}

/*
 * Record rows purged from scope by the current transaction; they reach the
 * shared counters when it commits.
 */
void
inbox_stats_purged(const char *scope, int64 rows)
{
	if (inbox_stats_hash == NULL || rows <= 0)
		return;
	pending_note(scope)->rows += rows;
}

/*
 * Record that the current transaction's purge has observed scope's
 * committed entries up to until (its observed_until); the hint is raised
 * when the transaction commits.
 */
void
inbox_stats_observed(const char *scope, TimestampTz until)
{
	PendingPurge *note;

	if (inbox_stats_hash == NULL)
		return;
	note = pending_note(scope);
	note->observed = until;
	note->has_observed = true;
}

/*
 * The scopes of this database, as strings in cxt, that received entries
 * newer than the purge has observed: see the banner.  NIL without the
 * preload, where the caller sweeps instead.
 */
List *
inbox_stats_unobserved(MemoryContext cxt)
{
	HASH_SEQ_STATUS status;
	InboxStatsEntry *entry;
	List	   *scopes = NIL;
	MemoryContext oldcxt;

	if (inbox_stats_hash == NULL)
		return NIL;

	oldcxt = MemoryContextSwitchTo(cxt);
	LWLockAcquire(inbox_shared->lock, LW_SHARED);
	hash_seq_init(&status, inbox_stats_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->key.dbid == MyDatabaseId &&
			(TimestampTz) pg_atomic_read_u64(&entry->received) >
			(TimestampTz) pg_atomic_read_u64(&entry->observed))
			scopes = lappend(scopes, pstrdup(entry->key.scope));
	}
	LWLockRelease(inbox_shared->lock);
	MemoryContextSwitchTo(oldcxt);
	return scopes;
}

/*
 * What the purge must sweep in this database now: all of it without the
 * preload (there are no hints), at the first pass after a start or an
 * inbox_stats_reset, and when its retention or idle threshold (in seconds)
 * is not the one of the last full sweep that committed; else one leaf,
 * *leaf, once step_s seconds have passed since the last sweep; else
 * nothing.
 */
InboxSweep
inbox_stats_sweep_due(int step_s, int retention_s, int idle_s, int *leaf)
{
	InboxSweep	due = INBOX_SWEEP_ALL;
	int			i;

	if (inbox_stats_hash == NULL)
		return INBOX_SWEEP_ALL;

	LWLockAcquire(inbox_shared->lock, LW_SHARED);
	for (i = 0; i < INBOX_SWEEP_SLOTS; i++)
	{
		InboxSweepSlot *slot = &inbox_shared->sweeps[i];

		if (slot->dbid != MyDatabaseId)
			continue;
		if (slot->retention_s != retention_s || slot->idle_s != idle_s)
			due = INBOX_SWEEP_ALL;
		else if (TimestampDifferenceExceeds(slot->swept_at, GetCurrentTimestamp(),
											step_s * 1000))
		{
			due = INBOX_SWEEP_LEAF;
			*leaf = slot->next_leaf;
		}
		else
			due = INBOX_SWEEP_NONE;
		break;
	}
	LWLockRelease(inbox_shared->lock);
	return due;
}

/*
 * Record that the current transaction swept this database, starting at
 * started, with these settings, and that next_leaf comes next; it counts
 * once the transaction commits.
 */
void
inbox_stats_swept(TimestampTz started, int retention_s, int idle_s, int next_leaf)
{
	if (inbox_stats_hash == NULL)
		return;
	sweep_done.dbid = MyDatabaseId;
	sweep_done.swept_at = started;
	sweep_done.next_leaf = next_leaf;
	sweep_done.retention_s = retention_s;
	sweep_done.idle_s = idle_s;
	sweep_pending = true;
	sweep_nest_level = GetCurrentTransactionNestLevel();
}

/*
 * Remove the counters of one scope of dbid, or of all its scopes when scope
 * is NULL (inbox_stats_reset, inbox_drop_scope).
 */
void
inbox_stats_forget(Oid dbid, const char *scope)
{
	HASH_SEQ_STATUS status;
	InboxStatsEntry *entry;

	if (inbox_stats_hash == NULL)
		return;

	LWLockAcquire(inbox_shared->lock, LW_EXCLUSIVE);
	if (scope != NULL)
	{
		InboxStatsKey key;

		make_key(&key, dbid, scope, strlen(scope));
		hash_search(inbox_stats_hash, &key, HASH_REMOVE, NULL);
	}
	else
	{
		int			i;

		hash_seq_init(&status, inbox_stats_hash);
		while ((entry = hash_seq_search(&status)) != NULL)
		{
			if (entry->key.dbid == dbid)
				hash_search(inbox_stats_hash, &entry->key, HASH_REMOVE, NULL);
		}
		/* The hints went with the counters: sweep at the next pass */
		for (i = 0; i < INBOX_SWEEP_SLOTS; i++)
			if (inbox_shared->sweeps[i].dbid == dbid)
				inbox_shared->sweeps[i].dbid = InvalidOid;
	}
	LWLockRelease(inbox_shared->lock);
}

/*
 * Remove the counters and sweep slots of every database not among dbids.
 * The launcher passes the databases that exist, so those of dropped
 * databases go.
 */
void
inbox_stats_keep_databases(const Oid *dbids, int ndbids)
{
	HASH_SEQ_STATUS status;
	InboxStatsEntry *entry;
	int			j;

	if (inbox_stats_hash == NULL)
		return;

	LWLockAcquire(inbox_shared->lock, LW_EXCLUSIVE);
	hash_seq_init(&status, inbox_stats_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		bool		kept = false;
		int			i;

		for (i = 0; i < ndbids && !kept; i++)
			kept = (dbids[i] == entry->key.dbid);
		if (!kept)
			hash_search(inbox_stats_hash, &entry->key, HASH_REMOVE, NULL);
	}
	for (j = 0; j < INBOX_SWEEP_SLOTS; j++)
	{
		bool		kept = false;
		int			i;

		for (i = 0; i < ndbids && !kept; i++)
			kept = (dbids[i] == inbox_shared->sweeps[j].dbid);
		if (!kept)
			inbox_shared->sweeps[j].dbid = InvalidOid;
	}
	LWLockRelease(inbox_shared->lock);
}

/*
 * The scope counters of the current database, in the caller's result set.
 * The SQL of every version this library serves declares seven columns
 * (scope, claims, duplicates, mismatches, purged, last_purge, failures).
 */
void
inbox_stats_materialize(FunctionCallInfo fcinfo)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HASH_SEQ_STATUS status;
	InboxStatsEntry *entry;

	InitMaterializedSRF(fcinfo, 0);
	if (rsinfo->setDesc->natts != 7)
		elog(ERROR, "inbox counters: the function must return 7 columns");

	if (inbox_stats_hash == NULL)
		return;

	LWLockAcquire(inbox_shared->lock, LW_SHARED);
	hash_seq_init(&status, inbox_stats_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		Datum		values[7];
		bool		nulls[7] = {false, false, false, false, false, false, false};
		uint64		last;

		if (entry->key.dbid != MyDatabaseId)
			continue;
		values[0] = CStringGetTextDatum(entry->key.scope);
		values[1] = Int64GetDatum((int64) pg_atomic_read_u64(&entry->claims));
		values[2] = Int64GetDatum((int64) pg_atomic_read_u64(&entry->duplicates));
		values[3] = Int64GetDatum((int64) pg_atomic_read_u64(&entry->mismatches));
		values[4] = Int64GetDatum((int64) pg_atomic_read_u64(&entry->purged));
		last = pg_atomic_read_u64(&entry->last_purge);
		values[5] = TimestampTzGetDatum((TimestampTz) last);
		nulls[5] = (last == 0);
		values[6] = Int64GetDatum((int64) pg_atomic_read_u64(&entry->failures));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(inbox_shared->lock);
}

/* inbox.scope_counters() -> SETOF (scope, claims, ..., failures) */
Datum
inbox_counters_1_0(PG_FUNCTION_ARGS)
{
	inbox_stats_materialize(fcinfo);
	return (Datum) 0;
}

/*
 * inbox.content_counters() -> SETOF (scope, content_duplicates): the
 * content windows' counter, apart from inbox.scope_counters, whose columns
 * the SQL of 1.0.0 fixed.
 */
Datum
inbox_content_counters(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HASH_SEQ_STATUS status;
	InboxStatsEntry *entry;

	InitMaterializedSRF(fcinfo, 0);
	if (inbox_stats_hash == NULL)
		return (Datum) 0;

	LWLockAcquire(inbox_shared->lock, LW_SHARED);
	hash_seq_init(&status, inbox_stats_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		Datum		values[2];
		bool		nulls[2] = {false, false};

		if (entry->key.dbid != MyDatabaseId)
			continue;
		values[0] = CStringGetTextDatum(entry->key.scope);
		values[1] = Int64GetDatum((int64) pg_atomic_read_u64(&entry->content_duplicates));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(inbox_shared->lock);
	return (Datum) 0;
}

/* inbox.count_failure(scope text) -> void: one more processing failure */
Datum
inbox_count_failure(PG_FUNCTION_ARGS)
{
	inbox_stats_count(PG_GETARG_TEXT_PP(0), INBOX_COUNT_FAILURE);
	PG_RETURN_VOID();
}

/*
 * inbox.forget_counters(scope text) -> void: drop the counters of one scope
 * of this database, or of all its scopes when scope is NULL
 * (inbox_drop_scope, inbox_stats_reset).
 */
Datum
inbox_forget_counters(PG_FUNCTION_ARGS)
{
	inbox_stats_forget(MyDatabaseId,
					   PG_ARGISNULL(0) ? NULL : TextDatumGetCString(PG_GETARG_DATUM(0)));
	PG_RETURN_VOID();
}
