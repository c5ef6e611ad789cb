/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  Per-scope counters in shared memory: claims, duplicates, mismatches,
 *	  content duplicates, rows purged and the last purge time, behind the
 *	  inbox_stats view.
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
} InboxStatsEntry;

typedef struct InboxSharedState
{
	LWLock	   *lock;			/* protects the hash's structure */
} InboxSharedState;

static InboxSharedState *inbox_shared = NULL;
static HTAB *inbox_stats_hash = NULL;

/*
 * Rows purged by this backend's transaction (and its subtransactions), not
 * yet committed.  A handful of scopes per transaction at most, so a short
 * array in TopMemoryContext will do.
 */
typedef struct PendingPurge
{
	char		scope[INBOX_MAX_SCOPE_BYTES + 1];
	int64		rows;
	int			nest_level;
} PendingPurge;

static PendingPurge *pending = NULL;
static int	npending = 0;
static int	maxpending = 0;

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
		inbox_shared->lock = &(GetNamedLWLockTranche("inbox"))->lock;

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
		}
	}

	switch (which)
	{
		case INBOX_COUNT_CLAIM:
			pg_atomic_fetch_add_u64(&entry->claims, delta);
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
 * The end of a transaction (events.c): at commit, fold its purge counts
 * into shared memory; else drop them (a prepared purge is not counted).
 */
void
stats_xact_end(bool commit)
{
	int			i;

	if (npending == 0)
		return;
	if (commit)
	{
		TimestampTz now = GetCurrentTimestamp();

		for (i = 0; i < npending; i++)
			stats_add(MyDatabaseId, pending[i].scope, strlen(pending[i].scope),
					  INBOX_COUNT_PURGED, (uint64) pending[i].rows, now);
	}
	npending = 0;
}

/*
 * The end of a subtransaction (events.c): a rolled-back savepoint takes
 * its purge counts with it, a released one hands them to its parent.
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
}

/*
 * Record rows purged from scope by the current transaction; they reach the
 * shared counters when it commits.
 */
void
inbox_stats_purged(const char *scope, int64 rows)
{
	int			level = GetCurrentTransactionNestLevel();
	int			i;

	if (inbox_stats_hash == NULL || rows <= 0)
		return;

	for (i = 0; i < npending; i++)
	{
		if (pending[i].nest_level == level && strcmp(pending[i].scope, scope) == 0)
		{
			pending[i].rows += rows;
			return;
		}
	}
	if (npending == maxpending)
	{
		maxpending = Max(16, maxpending * 2);
		pending = pending == NULL
			? MemoryContextAlloc(TopMemoryContext, maxpending * sizeof(PendingPurge))
			: repalloc(pending, maxpending * sizeof(PendingPurge));
	}
	strlcpy(pending[npending].scope, scope, sizeof(pending[npending].scope));
	pending[npending].rows = rows;
	pending[npending].nest_level = level;
	npending++;
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
		hash_seq_init(&status, inbox_stats_hash);
		while ((entry = hash_seq_search(&status)) != NULL)
		{
			if (entry->key.dbid == dbid)
				hash_search(inbox_stats_hash, &entry->key, HASH_REMOVE, NULL);
		}
	}
	LWLockRelease(inbox_shared->lock);
}

/*
 * Remove the counters of every database not among dbids.  The launcher
 * passes the databases that exist, so the counters of dropped databases
 * go.
 */
void
inbox_stats_keep_databases(const Oid *dbids, int ndbids)
{
	HASH_SEQ_STATUS status;
	InboxStatsEntry *entry;

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
