/*-------------------------------------------------------------------------
 *
 * depth.c
 *	  inbox_depth(scope): how many of a scope's messages are pending, how
 *	  many of those are due, and how many are being processed, from
 *	  counters in shared memory that every change of state keeps at
 *	  commit, rather than from a count of the scope's rows.
 *
 * What it returns, for the committed messages of the scope:
 *
 *	- pending: the messages in state pending, due or not;
 *	- due: the pending messages whose due has come at the time of the call
 *	  (the clock, not the transaction's start): neither delayed (a
 *	  not_before, a retry delay) nor held behind the head of their ordered
 *	  group;
 *	- processing: the messages in state processing, taken and neither
 *	  completed nor failed yet.  A message whose lease ran out, or whose
 *	  session ended, stays processing until a take hands it out again (it
 *	  is still processing then) or lets it die.
 *
 * The counters.  A shared hash keyed by (database, scope), sized by
 * inbox.depth_scopes at server start, holds per scope its pending and
 * processing messages.  Every path that changes a message's state says so
 * here (inbox_depth_moved) after its statement changed the rows: the
 * receives (single and batch), the takes (pending to processing, and a
 * lost message's death), the completions, inbox_fail and inbox_requeue
 * (through inbox.depth_moved).  The notes of a transaction stay in this
 * backend, with the nesting level of the subtransaction that made them: a
 * rolled-back savepoint drops its notes, a released one hands them to its
 * parent, an abort or a PREPARE drops them all, and a commit adds them to
 * the counters.  The purge and inbox_forget remove only done entries, and
 * leave the depth as it is.  inbox_drop_scope, messages moved by hand
 * (inbox.forget_front) and COMMIT or ROLLBACK PREPARED drop the counters
 * of their scope, or of the database, when their transaction ends: the
 * next call counts again.  So do a restart (shared memory starts empty)
 * and DROP EXTENSION (the counters remember the inbox.entries they
 * counted, and a new one is counted again).
 *
 * The first count.  A scope the counters do not hold is counted once, with
 * one scan of its open messages, and held from then on.  A transaction
 * adds its notes at commit after it became visible to new snapshots
 * (XACT_EVENT_COMMIT), so the count must neither miss a commit nor see one
 * twice.  The invariant: every committed change of the scope is in the
 * count's snapshot, or in the counters, never both.  How it holds:
 *
 *	1. under the lock held exclusively, the call adds the scope's entry,
 *	   not ready, takes its snapshot and publishes it (xmin, xmax, the
 *	   running xids) in shared memory, and flips the commit epoch.  A
 *	   commit that added its notes before this found no entry and added
 *	   nothing: it was visible already, so the snapshot sees it;
 *	2. it counts the scope's open messages with that snapshot.  Meanwhile
 *	   a commit that finds the entry not ready adds its notes only if its
 *	   xid is not visible in the published snapshot;
 *	3. it waits until every commit that registered in the old epoch has
 *	   added its notes.  A commit registers before it can become visible
 *	   (XACT_EVENT_PRE_COMMIT) and leaves after it added them, so every
 *	   commit visible in the snapshot has then passed step 2's test;
 *	4. under the lock, it adds the count to the entry and makes it ready.
 *	   A commit that finds it ready adds its notes: by step 3 it was not in
 *	   the snapshot.
 *
 * One count runs at a time; another call meanwhile, a scope beyond
 * inbox.depth_scopes (with a NOTICE, once per session), a transaction
 * that has changed the scope itself, a distributed inbox.entries, a hot
 * standby, a server without the preload, and a wait in step 3 that lasts
 * longer than a second (a synchronous standby that does not answer)
 * count the scope's rows instead, and return what they counted.
 *
 * Due.  A message becomes due with time, which no commit reports.  So the
 * entry also counts the commits that may have left a pending message not
 * due ("later": a receive with not_before or a group key, a failure with
 * a retry delay), and the value "later" had when a count of the scope's
 * pending messages not due last found none.  While no such commit came
 * since, due is pending.  Otherwise the call counts the pending messages
 * not due, through the open-messages index from now on (and its held
 * group members, whose due is NULL): the delayed ones, the held ones, and
 * the processing ones under a lease, which the statement reads and skips.
 * When it finds none, later commits alone make it count again.
 *
 * Pending and processing are the committed state: the caller's own
 * uncommitted changes count only where the call counts rows.
 *
 * src/depth.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/twophase.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "compat.h"
#include "depth.h"
#include "depth_internal.h"
#include "distributed.h"
#include "entries.h"
#include "inbox.h"
#include "keys.h"
#include "spi.h"

PG_FUNCTION_INFO_V1(inbox_depth_1_1);
PG_FUNCTION_INFO_V1(inbox_depth_moved_sql);
PG_FUNCTION_INFO_V1(inbox_depth_forget_sql);

/* inbox.depth_scopes: the (database, scope) pairs the counters hold */
static int	depth_scopes = 10000;

/* The longest a first count waits for the commits it must see (step 3) */
#define DEPTH_WAIT_US		1000000L
#define DEPTH_WAIT_STEP_US	100L

typedef struct DepthKey
{
	Oid			dbid;
	char		scope[INBOX_MAX_SCOPE_BYTES + 1];	/* zero-padded: hashed whole */
} DepthKey;

/*
 * One scope.  The counts are int64 kept in unsigned atomics (two's
 * complement), so that commits add to them under the lock held shared.
 */
typedef struct DepthEntry
{
	DepthKey	key;			/* must be first */
	Oid			relid;			/* the inbox.entries it counted */
	uint32		generation;		/* the first count that made it */
	bool		ready;			/* false: its first count runs */
	pg_atomic_uint64 pending;
	pg_atomic_uint64 processing;
	pg_atomic_uint64 later;		/* commits that may have left one not due */
	pg_atomic_uint64 later_seen;	/* later when none was last found */
} DepthEntry;

typedef struct DepthShared
{
	LWLock	   *lock;			/* the hash's structure, the count's slot */
	uint32		generation;		/* of the last first count */
	pg_atomic_uint64 epoch;		/* flipped by each first count */
	pg_atomic_uint32 committing[2]; /* commits with notes, per epoch's parity */
	/* The first count that runs, if any, and its snapshot */
	bool		counting;
	DepthKey	counting_key;
	TransactionId xmin;
	TransactionId xmax;
	int			xcnt;
	TransactionId xip[FLEXIBLE_ARRAY_MEMBER];
} DepthShared;

static DepthShared *depth_shared = NULL;
static HTAB *depth_hash = NULL;

/* This transaction's notes, one per (scope, nesting level) in a row */
typedef struct DepthNote
{
	char	   *scope;
	int			nest_level;
	int64		pending;
	int64		processing;
	bool		later;
	bool		forget;
} DepthNote;

static MemoryContext notes_cxt = NULL;
static DepthNote *notes = NULL;
static int	nnotes = 0;
static int	maxnotes = 0;
static bool forget_everything = false;

/* The commit epoch's parity this backend registered in, or -1 */
static int	committing_slot = -1;

/* The first count this backend runs: its key, generation and level */
static bool counting = false;
static DepthKey counting_key;
static uint32 counting_generation;
static int	counting_level;

static bool full_noticed = false;

static int
snapshot_slots(void)
{
	return MaxBackends + max_prepared_xacts;
}

static Size
depth_shared_size(void)
{
	return add_size(offsetof(DepthShared, xip),
					mul_size(sizeof(TransactionId), snapshot_slots()));
}

void
depth_shmem_request(void)
{
	RequestAddinShmemSpace(add_size(MAXALIGN(depth_shared_size()),
									hash_estimate_size(Max(depth_scopes, 1),
													   sizeof(DepthEntry))));
	RequestNamedLWLockTranche("inbox depth", 1);
}

/* Find or create the counters; the caller holds AddinShmemInitLock */
void
depth_shmem_attach(void)
{
	bool		found;
	HASHCTL		info;

	depth_shared = ShmemInitStruct("inbox depth", depth_shared_size(), &found);
	if (!found)
	{
		memset(depth_shared, 0, depth_shared_size());
		depth_shared->lock = &(GetNamedLWLockTranche("inbox depth"))->lock;
		pg_atomic_init_u64(&depth_shared->epoch, 0);
		pg_atomic_init_u32(&depth_shared->committing[0], 0);
		pg_atomic_init_u32(&depth_shared->committing[1], 0);
	}
	if (depth_scopes == 0)
		return;
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(DepthKey);
	info.entrysize = sizeof(DepthEntry);
	depth_hash = ShmemInitHash("inbox depth counters", depth_scopes, depth_scopes,
							   &info, HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
}

/* The counters exist only with the preload, sized at server start */
void
depth_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	DefineCustomIntVariable("inbox.depth_scopes",
							"Most (database, scope) pairs whose depth the shared-memory counters hold.",
							"inbox_depth counts the rows of a scope beyond it. 0 turns the counters off.",
							&depth_scopes,
							10000,
							0, 1000000,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);
}

static void
make_key(DepthKey *key, const char *scope, int len)
{
	memset(key, 0, sizeof(*key));
	key->dbid = MyDatabaseId;
	memcpy(key->scope, scope, Min(len, INBOX_MAX_SCOPE_BYTES));
}

/* The note of scope at the current level: the last one, or a new one */
static DepthNote *
note_of(const text *scope)
{
	int			level = GetCurrentTransactionNestLevel();
	int			len = VARSIZE_ANY_EXHDR(scope);
	DepthNote  *note;

	if (nnotes > 0)
	{
		note = &notes[nnotes - 1];
		if (note->nest_level == level && strlen(note->scope) == (size_t) len &&
			memcmp(note->scope, VARDATA_ANY(scope), len) == 0)
			return note;
	}
	if (notes_cxt == NULL)
		notes_cxt = AllocSetContextCreate(TopMemoryContext, "inbox depth notes",
										  ALLOCSET_SMALL_SIZES);
	if (nnotes == maxnotes)
	{
		maxnotes = Max(16, maxnotes * 2);
		notes = notes == NULL
			? MemoryContextAlloc(notes_cxt, maxnotes * sizeof(DepthNote))
			: repalloc(notes, maxnotes * sizeof(DepthNote));
	}
	note = &notes[nnotes++];
	memset(note, 0, sizeof(*note));
	note->scope = MemoryContextAlloc(notes_cxt, len + 1);
	memcpy(note->scope, VARDATA_ANY(scope), len);
	note->scope[len] = '\0';
	note->nest_level = level;
	return note;
}

static void
count_state(DepthNote *note, char state, int64 n)
{
	if (state == INBOX_STATE_PENDING)
		note->pending += n;
	else if (state == INBOX_STATE_PROCESSING)
		note->processing += n;
}

/*
 * This transaction moved n messages of scope from state from to state to
 * (INBOX_DEPTH_NONE: written, or deleted); later: a pending message it
 * left may not be due when it commits.  Called after the statement that
 * moved them.
 */
void
inbox_depth_moved(const text *scope, char from, char to, int64 n, bool later)
{
	DepthNote  *note;

	if (n == 0 && !later)
		return;
	note = note_of(scope);
	count_state(note, from, -n);
	count_state(note, to, n);
	note->later |= later;
}

/* The scope's rows changed other than by the API: count it again */
void
inbox_depth_forget(const text *scope)
{
	note_of(scope)->forget = true;
}

/* COMMIT or ROLLBACK PREPARED: count every scope of the database again */
void
depth_note_everything(void)
{
	forget_everything = true;
}

/*
 * The commit is about to become visible: register in the epoch, so that
 * a first count waits until this commit has added its notes (banner, 3).
 * The increment comes before the epoch is read again: a count that flips
 * the epoch in between sees this commit in the old epoch's slot, or this
 * commit moves to the new one, whose commits its snapshot cannot see.
 */
void
depth_xact_pre_commit(void)
{
	if (depth_hash == NULL || nnotes == 0 || committing_slot >= 0)
		return;
	for (;;)
	{
		uint64		epoch = pg_atomic_read_u64(&depth_shared->epoch);
		int			slot = (int) (epoch & 1);

		pg_atomic_fetch_add_u32(&depth_shared->committing[slot], 1);
		if (pg_atomic_read_u64(&depth_shared->epoch) == epoch)
		{
			committing_slot = slot;
			return;
		}
		pg_atomic_fetch_sub_u32(&depth_shared->committing[slot], 1);
	}
}

/*
 * Whether the first count that runs saw the commit of xid; the caller
 * holds the lock.  A transaction with notes wrote rows, so it has an xid.
 */
static bool
seen_by_count(TransactionId xid)
{
	int			i;

	if (!TransactionIdIsValid(xid) || TransactionIdPrecedes(xid, depth_shared->xmin))
		return true;
	if (!TransactionIdPrecedes(xid, depth_shared->xmax))
		return false;
	for (i = 0; i < depth_shared->xcnt; i++)
		if (TransactionIdEquals(depth_shared->xip[i], xid))
			return false;
	return true;
}

/* Add this committed transaction's notes to the counters */
static void
apply_notes(void)
{
	TransactionId xid = GetTopTransactionIdIfAny();
	bool		forgets = false;
	int			i;

	LWLockAcquire(depth_shared->lock, LW_SHARED);
	for (i = 0; i < nnotes; i++)
	{
		DepthNote  *note = &notes[i];
		DepthKey	key;
		DepthEntry *entry;

		forgets |= note->forget;
		make_key(&key, note->scope, strlen(note->scope));
		entry = hash_search(depth_hash, &key, HASH_FIND, NULL);
		if (entry == NULL || (!entry->ready && seen_by_count(xid)))
			continue;
		if (note->pending != 0)
			pg_atomic_fetch_add_u64(&entry->pending, note->pending);
		if (note->processing != 0)
			pg_atomic_fetch_add_u64(&entry->processing, note->processing);
		if (note->later)
			pg_atomic_fetch_add_u64(&entry->later, 1);
	}
	LWLockRelease(depth_shared->lock);

	if (!forgets)
		return;
	LWLockAcquire(depth_shared->lock, LW_EXCLUSIVE);
	for (i = 0; i < nnotes; i++)
	{
		DepthKey	key;

		if (!notes[i].forget)
			continue;
		make_key(&key, notes[i].scope, strlen(notes[i].scope));
		hash_search(depth_hash, &key, HASH_REMOVE, NULL);
	}
	LWLockRelease(depth_shared->lock);
}

/* Drop every counter of this database; the caller holds the lock */
static void
forget_database(void)
{
	HASH_SEQ_STATUS status;
	DepthEntry *entry;

	hash_seq_init(&status, depth_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
		if (entry->key.dbid == MyDatabaseId)
			hash_search(depth_hash, &entry->key, HASH_REMOVE, NULL);
}

/*
 * A first count that did not finish: its entry goes, and its slot is
 * free.  The caller holds the lock exclusively.
 */
static void
abandon_count(void)
{
	DepthEntry *entry = hash_search(depth_hash, &counting_key, HASH_FIND, NULL);

	if (entry != NULL && !entry->ready && entry->generation == counting_generation)
		hash_search(depth_hash, &counting_key, HASH_REMOVE, NULL);
	depth_shared->counting = false;
	counting = false;
}

/*
 * The end of a transaction (events.c): a commit adds its notes to the
 * counters, after it became visible; an abort or a PREPARE drops them.
 * Either way it leaves the epoch it registered in, after the notes.
 */
void
depth_xact_end(bool commit)
{
	if (depth_hash != NULL)
	{
		if (commit && nnotes > 0)
			apply_notes();
		if (committing_slot >= 0)
			pg_atomic_fetch_sub_u32(&depth_shared->committing[committing_slot], 1);
		if (forget_everything || counting)
		{
			LWLockAcquire(depth_shared->lock, LW_EXCLUSIVE);
			if (counting)
				abandon_count();
			if (forget_everything)
				forget_database();
			LWLockRelease(depth_shared->lock);
		}
	}
	committing_slot = -1;
	forget_everything = false;
	counting = false;
	nnotes = 0;
	if (notes_cxt != NULL && maxnotes > 0)
	{
		MemoryContextReset(notes_cxt);
		notes = NULL;
		maxnotes = 0;
	}
}

/*
 * The end of a subtransaction (events.c): a rolled-back savepoint drops
 * its notes, and the first count it ran; a released one hands its notes
 * to its parent.
 */
void
depth_subxact_end(bool commit)
{
	int			level = GetCurrentTransactionNestLevel();
	int			kept = 0;
	int			i;

	for (i = 0; i < nnotes; i++)
	{
		if (notes[i].nest_level >= level)
		{
			if (!commit)
				continue;
			notes[i].nest_level = level - 1;
		}
		notes[kept++] = notes[i];
	}
	nnotes = kept;
	if (!commit && counting && counting_level >= level && depth_hash != NULL)
	{
		LWLockAcquire(depth_shared->lock, LW_EXCLUSIVE);
		abandon_count();
		LWLockRelease(depth_shared->lock);
	}
}

/* Whether this transaction has notes of scope */
static bool
noted(const DepthKey *key)
{
	int			i;

	for (i = 0; i < nnotes; i++)
		if (strncmp(notes[i].scope, key->scope, INBOX_MAX_SCOPE_BYTES + 1) == 0)
			return true;
	return false;
}

/*
 * The scope's entry, ready and of this inbox.entries, read into depth
 * with its later counters; false if there is none.
 */
static bool
read_entry(const DepthKey *key, Oid relid, Depth *depth, uint64 *later, uint64 *seen)
{
	DepthEntry *entry;
	bool		ok = false;

	LWLockAcquire(depth_shared->lock, LW_SHARED);
	entry = hash_search(depth_hash, key, HASH_FIND, NULL);
	if (entry != NULL && entry->ready && entry->relid == relid)
	{
		depth->pending = (int64) pg_atomic_read_u64(&entry->pending);
		depth->processing = (int64) pg_atomic_read_u64(&entry->processing);
		*later = pg_atomic_read_u64(&entry->later);
		*seen = pg_atomic_read_u64(&entry->later_seen);
		ok = true;
	}
	LWLockRelease(depth_shared->lock);
	return ok;
}

/*
 * Start the first count of key (banner, step 1): its entry and its
 * snapshot.  NULL if it cannot start: another runs, or the hash is full.
 */
static Snapshot
start_count(text *scope, const DepthKey *key, Oid relid, uint64 *old_epoch)
{
	DepthEntry *entry;
	bool		found;
	Snapshot	snapshot;

	LWLockAcquire(depth_shared->lock, LW_EXCLUSIVE);
	entry = hash_search(depth_hash, key, HASH_FIND, NULL);
	if (entry != NULL && entry->relid != relid && entry->ready)
	{
		hash_search(depth_hash, key, HASH_REMOVE, NULL);
		entry = NULL;
	}
	if (entry != NULL || depth_shared->counting)
	{
		LWLockRelease(depth_shared->lock);
		return NULL;
	}
	entry = hash_search(depth_hash, key, HASH_ENTER_NULL, &found);
	if (entry == NULL)
	{
		LWLockRelease(depth_shared->lock);
		if (!full_noticed)
			ereport(NOTICE,
					(errmsg("inbox_depth counts the rows of scope \"%s\": the counters hold %d scopes already",
							inbox_quote(scope), depth_scopes),
					 errhint("Raise inbox.depth_scopes (with a restart) so that every scope is counted in shared memory.")));
		full_noticed = true;
		return NULL;
	}
	entry->relid = relid;
	entry->generation = ++depth_shared->generation;
	entry->ready = false;
	pg_atomic_init_u64(&entry->pending, 0);
	pg_atomic_init_u64(&entry->processing, 0);
	pg_atomic_init_u64(&entry->later, 1);
	pg_atomic_init_u64(&entry->later_seen, 0);

	snapshot = GetLatestSnapshot();
	depth_shared->xmin = snapshot->xmin;
	depth_shared->xmax = snapshot->xmax;
	depth_shared->xcnt = Min((int) snapshot->xcnt, snapshot_slots());
	memcpy(depth_shared->xip, snapshot->xip, sizeof(TransactionId) * depth_shared->xcnt);
	depth_shared->counting = true;
	depth_shared->counting_key = *key;
	*old_epoch = pg_atomic_fetch_add_u64(&depth_shared->epoch, 1);

	counting = true;
	counting_key = *key;
	counting_generation = entry->generation;
	counting_level = GetCurrentTransactionNestLevel();
	LWLockRelease(depth_shared->lock);
	return snapshot;
}

/*
 * Finish the first count (banner, steps 3 and 4): wait for the commits of
 * the old epoch, then add the count to the entry and make it ready.  If
 * the wait is too long, or the entry went meanwhile, the entry goes and
 * the count is only returned.
 */
static void
finish_count(uint64 old_epoch, const Depth *counted)
{
	long		waited = 0;
	bool		in_time;
	DepthEntry *entry;

	while (pg_atomic_read_u32(&depth_shared->committing[old_epoch & 1]) > 0 &&
		   waited < DEPTH_WAIT_US)
	{
		CHECK_FOR_INTERRUPTS();
		pg_usleep(DEPTH_WAIT_STEP_US);
		waited += DEPTH_WAIT_STEP_US;
	}
	in_time = pg_atomic_read_u32(&depth_shared->committing[old_epoch & 1]) == 0;

	LWLockAcquire(depth_shared->lock, LW_EXCLUSIVE);
	entry = hash_search(depth_hash, &counting_key, HASH_FIND, NULL);
	if (in_time && entry != NULL && !entry->ready && entry->generation == counting_generation)
	{
		pg_atomic_fetch_add_u64(&entry->pending, counted->pending);
		pg_atomic_fetch_add_u64(&entry->processing, counted->processing);
		entry->ready = true;
		depth_shared->counting = false;
		counting = false;
	}
	else
		abandon_count();
	LWLockRelease(depth_shared->lock);
}

/* Raise an atomic to value unless it holds a larger one */
static void
atomic_raise(pg_atomic_uint64 *atomic, uint64 value)
{
	uint64		old = pg_atomic_read_u64(atomic);

	while (old < value && !pg_atomic_compare_exchange_u64(atomic, &old, value))
		;
}

/*
 * The due messages of a scope whose counters say pending, when a commit
 * since the last look may have left one not due (see the banner).  later
 * was read before the statement's snapshot is taken, so a commit that
 * snapshot does not see counts after it, and keeps the next call looking.
 */
static int64
due_of(text *scope, int leaf, TimestampTz now, const DepthKey *key, uint64 later,
	   int64 pending)
{
	DepthEntry *entry;
	int64		not_due;

	run_count(LEAF_NOT_DUE, scope, leaf, now, NULL, &not_due, 1);
	if (not_due == 0)
	{
		LWLockAcquire(depth_shared->lock, LW_SHARED);
		entry = hash_search(depth_hash, key, HASH_FIND, NULL);
		if (entry != NULL && entry->ready)
			atomic_raise(&entry->later_seen, later);
		LWLockRelease(depth_shared->lock);
	}
	return Min(Max(pending - not_due, 0), pending);
}

/*
 * inbox.inbox_depth(scope text) -> TABLE(pending bigint, due bigint,
 * processing bigint): see the banner.
 */
Datum
inbox_depth_1_1(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	int			leaf = inbox_scope_leaf(scope);
	TimestampTz now = GetCurrentTimestamp();
	Depth		depth;
	Datum		values[3];
	bool		nulls[3] = {false, false, false};
	DepthKey	key;
	Oid			relid = InvalidOid;
	uint64		later;
	uint64		seen;

	InitMaterializedSRF(fcinfo, 0);
	make_key(&key, VARDATA_ANY(scope), VARSIZE_ANY_EXHDR(scope));
	if (depth_hash != NULL)
		relid = inbox_relid("entries");

	inbox_spi_connect();
	if (depth_hash == NULL || RecoveryInProgress() || inbox_entries_distributed() ||
		noted(&key))
		count_rows(scope, leaf, now, &depth);
	else if (read_entry(&key, relid, &depth, &later, &seen))
		depth.due = later <= seen ? depth.pending :
			due_of(scope, leaf, now, &key, later, depth.pending);
	else
	{
		uint64		old_epoch;
		Snapshot	snapshot = start_count(scope, &key, relid, &old_epoch);

		if (snapshot == NULL)
			count_rows(scope, leaf, now, &depth);
		else
		{
			int64		c[3];

			run_count(LEAF_COUNT, scope, leaf, now, snapshot, c, 3);
			depth.pending = c[0];
			depth.due = c[1];
			depth.processing = c[2];
			finish_count(old_epoch, &depth);
		}
	}
	SPI_finish();

	values[0] = Int64GetDatum(depth.pending);
	values[1] = Int64GetDatum(depth.due);
	values[2] = Int64GetDatum(depth.processing);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}

/*
 * inbox.depth_moved(scope text, from "char", to "char", later boolean):
 * for the SQL functions that move one message (inbox_fail, inbox_requeue),
 * after their UPDATE; from or to NULL for none.
 */
Datum
inbox_depth_moved_sql(PG_FUNCTION_ARGS)
{
	if (PG_ARGISNULL(0))
		PG_RETURN_VOID();
	inbox_depth_moved(PG_GETARG_TEXT_PP(0),
					  PG_ARGISNULL(1) ? INBOX_DEPTH_NONE : PG_GETARG_CHAR(1),
					  PG_ARGISNULL(2) ? INBOX_DEPTH_NONE : PG_GETARG_CHAR(2),
					  1, !PG_ARGISNULL(3) && PG_GETARG_BOOL(3));
	PG_RETURN_VOID();
}

/*
 * inbox.depth_forget(scope text): the scope is counted again once this
 * transaction commits (inbox_drop_scope).
 */
Datum
inbox_depth_forget_sql(PG_FUNCTION_ARGS)
{
	if (!PG_ARGISNULL(0))
		inbox_depth_forget(PG_GETARG_TEXT_PP(0));
	PG_RETURN_VOID();
}
