/*-------------------------------------------------------------------------
 *
 * front.c
 *	  Where each scope's takeable messages begin, so that a take starts
 *	  there instead of walking the dead index entries before them.
 *
 * A take reads the leaf's open-messages index (scope, due, message_id)
 * from the scope's oldest due entry up to now.  Every take and every
 * completion leaves a dead version behind, whose index entry stays until
 * VACUUM removes it: a take marks such entries dead as it passes them,
 * but still reads their pages.  Between two vacuums, then, every take
 * walks the entries of all the messages taken since the last one.
 *
 * So shared memory keeps, per scope, a lower bound of the (due,
 * message_id) of every message a take could hand out: the front.  A take
 * scans from (due, message_id) >= front, and after its scan moves the
 * front up to what it has seen:
 *
 *	- if it got as many messages as it asked for, to the last one (the
 *	  scan is in the index's order);
 *	- if it got fewer, to the now it scanned up to: what it walked past
 *	  was dead, or locked by another transaction, or invisible to its
 *	  snapshot, or being processed by a live owner.
 *
 * (Only a take under READ COMMITTED moves it: its scan's snapshot is
 * taken after it read the front; one under REPEATABLE READ may be older.)
 *
 * The messages it walked past are why the front is exact, and each is
 * covered by an event that moves the front back down:
 *
 *	- every transaction that locks or writes an open message (a receive,
 *	  take, completion, failure, extension, requeue or scope drop) notes
 *	  its scope first, and its commit records an event: "messages written
 *	  here are due at or after my start", which holds for every due the
 *	  extension writes (now(), a later not_before, a take's clock, a
 *	  lease's end, a retry's time).  A take's move is capped by the events
 *	  recorded since it read the front, which covers every message its
 *	  snapshot could not see, and every message it skipped as locked whose
 *	  locker committed.  The commit is recorded before wakeup.c wakes the
 *	  waiting takes (front_init);
 *	- a transaction or subtransaction that aborts puts back what it locked
 *	  with its old due: its abort forgets its scopes' fronts;
 *	- a session that ended leaves its messages to the next take, whatever
 *	  their due: its exit forgets every front (inbox_front_watch_owner_exit,
 *	  for the sessions that took messages);
 *	- a prepared transaction ends from whichever session runs COMMIT or
 *	  ROLLBACK PREPARED, maybe after a restart, where nothing was noted:
 *	  the transaction that runs either forgets every front when it ends.
 *
 * What none of that covers is found by a full scan, which every scope's
 * takes run at least once a second; until then such a message may wait
 * behind newer ones.  That is an UPDATE of inbox.entries by hand (which
 * inbox.forget_front(scope) tells the front of), an owner that released
 * its owner lock with pg_advisory_unlock_all() or DISCARD ALL, and a
 * message that inbox_take gave a lease: it stays due from its take, so
 * that it comes back at once when its owner ends, and becomes takeable
 * again when its lease runs out, which no transaction does.
 *
 * Fronts live in a fixed array of slots, a scope's slot given by its
 * hash; two scopes that share a slot take it from each other, and the one
 * without it scans from its oldest entry, as without the preload.  Events
 * live in a ring: a take that read the front longer ago than the ring
 * holds does not move it.  Where Citus is installed, another node may
 * write a scope's messages, and no front is kept.
 *
 * src/front.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "mb/pg_wchar.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "distributed.h"
#include "front.h"
#include "keys.h"

/* Slots and ring, each a power of two */
#define FRONT_SLOTS			4096
#define FRONT_EVENTS		1024

/* The event key that stands for every scope */
#define FRONT_ALL_SCOPES	UINT64CONST(0)

/* Distinct scopes one transaction notes before it counts as noting all */
#define FRONT_NOTES			8

/*
 * The front is a (due, message_id) pair, as the index orders entries:
 * messages received together share their due, and a front of due alone
 * would walk all of them.  A message id is kept up to this many bytes (cut
 * at a character): a prefix sorts before every id it starts, so the front
 * is still a lower bound.
 */
#define FRONT_ID_BYTES		64

typedef struct FrontSlot
{
	uint64		key;			/* the scope whose front this is */
	uint64		epoch;			/* valid only in the current epoch */
	TimestampTz low;			/* the front's due */
	TimestampTz full_at;		/* the last full scan's now */
	int			low_id_len;		/* and its message id (a prefix) */
	char		low_id[FRONT_ID_BYTES];
} FrontSlot;

typedef struct FrontEvent
{
	uint64		key;			/* a scope, or FRONT_ALL_SCOPES */
	TimestampTz bound;			/* due at or after it; DT_NOBEGIN: any */
} FrontEvent;

typedef struct FrontShared
{
	LWLock	   *lock;
	uint64		events;			/* events recorded so far */
	uint64		epoch;			/* moved when every front is forgotten */
	FrontEvent	ring[FRONT_EVENTS];
	FrontSlot	slots[FRONT_SLOTS];
} FrontShared;

static FrontShared *shared = NULL;

static bool take_front = true;

/* The scopes this transaction noted, and whether to forget their fronts */
typedef struct FrontNote
{
	uint64		key;
	bool		forget;
} FrontNote;

static FrontNote noted[FRONT_NOTES];
static int	n_noted = 0;
static bool noted_overflow = false;

static bool owner_exit_watched = false;

/* The fronts' shared memory and lock, asked for at server start */
void
front_shmem_request(void)
{
	RequestAddinShmemSpace(sizeof(FrontShared));
	RequestNamedLWLockTranche("inbox_front", 1);
}

/* Find or create the fronts; the caller holds AddinShmemInitLock */
void
front_shmem_attach(void)
{
	bool		found;

	shared = ShmemInitStruct("inbox fronts", sizeof(FrontShared), &found);
	if (!found)
	{
		memset(shared, 0, sizeof(FrontShared));
		shared->lock = &(GetNamedLWLockTranche("inbox_front"))->lock;
		shared->epoch = 1;		/* slot epoch 0: never valid */
	}
}

/* Record an event; the caller holds the lock exclusively */
static void
record_event(uint64 key, TimestampTz bound)
{
	FrontEvent *e;

	shared->events++;
	e = &shared->ring[shared->events & (FRONT_EVENTS - 1)];
	e->key = key;
	e->bound = bound;
}

static FrontSlot *
slot_of(uint64 key)
{
	return &shared->slots[key & (FRONT_SLOTS - 1)];
}

static bool
slot_holds(const FrontSlot *slot, uint64 key)
{
	return slot->key == key && slot->epoch == shared->epoch;
}

/*
 * A transaction that noted scopes ends.  At commit, the messages it wrote
 * are due at or after its start; at abort, what it locked is back with its
 * old due, anywhere.
 */
static void
scopes_end(bool commit)
{
	TimestampTz start = GetCurrentTransactionStartTimestamp();

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (noted_overflow)
	{
		record_event(FRONT_ALL_SCOPES, DT_NOBEGIN);
		shared->epoch++;
	}
	else
	{
		for (int i = 0; i < n_noted; i++)
		{
			FrontSlot  *slot = slot_of(noted[i].key);
			TimestampTz bound = commit && !noted[i].forget ? start : DT_NOBEGIN;

			record_event(noted[i].key, bound);
			if (slot_holds(slot, noted[i].key))
			{
				if (bound == DT_NOBEGIN)
					slot->epoch = 0;
				else if (bound <= slot->low)
				{
					slot->low = bound;
					slot->low_id_len = 0;
				}
			}
		}
	}
	LWLockRelease(shared->lock);
}

static void
forget_notes(void)
{
	n_noted = 0;
	noted_overflow = false;
}

/* The end of a transaction, which may have noted scopes (events.c) */
void
front_xact_end(bool commit)
{
	if (n_noted == 0 && !noted_overflow)
		return;
	scopes_end(commit);
	forget_notes();
}

/*
 * A transaction was prepared: its end is COMMIT or ROLLBACK PREPARED's,
 * which front_note_everything() covers.
 */
void
front_xact_prepared(void)
{
	forget_notes();
}

/* A subtransaction's abort releases its locks: what they held is back */
void
front_subxact_abort(void)
{
	if (n_noted > 0 || noted_overflow)
		scopes_end(false);
}

/*
 * This transaction ends one whose notes were made by another session, or
 * before a restart (COMMIT or ROLLBACK PREPARED): it forgets every front
 * when it ends.
 */
void
front_note_everything(void)
{
	if (shared != NULL)
		noted_overflow = true;
}

void
front_init(void)
{
	DefineCustomBoolVariable("inbox.take_front",
							 "Whether a take starts at its scope's front, kept in shared memory.",
							 "Off makes every take scan its scope's open-messages index from the oldest "
							 "entry, dead ones included, as without shared_preload_libraries.  Either way "
							 "every session keeps the fronts exact for the others.",
							 &take_front,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);
}

static uint64
scope_key(int leaf, const text *scope)
{
	uint64		key;

	key = hash_bytes_extended((const unsigned char *) VARDATA_ANY(scope),
							  VARSIZE_ANY_EXHDR(scope),
							  ((uint64) MyDatabaseId << 8) | (uint64) leaf);
	return key == FRONT_ALL_SCOPES ? 1 : key;
}

/* Note the scope of key (front exists): see inbox_front_note */
static void
note_key(uint64 key, bool forget)
{
	if (noted_overflow)
		return;
	for (int i = 0; i < n_noted; i++)
	{
		if (noted[i].key == key)
		{
			noted[i].forget |= forget;
			return;
		}
	}
	if (n_noted == FRONT_NOTES)
		noted_overflow = true;
	else
	{
		noted[n_noted].key = key;
		noted[n_noted].forget = forget;
		n_noted++;
	}
}

/*
 * This transaction is about to lock or write open messages of scope: see
 * the banner.  Called before the statement, so that its abort is seen.
 * forget: its commit forgets the front, wherever the dues it wrote are.
 */
void
inbox_front_note(int leaf, const text *scope, bool forget)
{
	if (shared != NULL)
		note_key(scope_key(leaf, scope), forget);
}

/*
 * Where a take at now should start.  It notes the scope too: the take
 * locks what it picks.
 */
void
inbox_front_read(int leaf, const text *scope, TimestampTz now, InboxFront *f)
{
	FrontSlot  *slot;
	char		low_id[FRONT_ID_BYTES];
	int			low_id_len = 0;

	f->low = DT_NOBEGIN;
	f->full = true;
	f->usable = false;
	if (shared != NULL)
	{
		/* the take locks what it picks: noted whether or not it uses it */
		f->key = scope_key(leaf, scope);
		note_key(f->key, false);
		f->usable = take_front && !inbox_citus_installed();
	}
	if (!f->usable)
	{
		f->low_id = cstring_to_text_with_len("", 0);
		return;
	}
	slot = slot_of(f->key);

	LWLockAcquire(shared->lock, LW_SHARED);
	f->version = shared->events;
	if (slot_holds(slot, f->key) && slot->low <= now && slot->full_at <= now &&
		!TimestampDifferenceExceeds(slot->full_at, now, FRONT_FULL_SCAN_MS))
	{
		f->low = slot->low;
		low_id_len = slot->low_id_len;
		memcpy(low_id, slot->low_id, low_id_len);
		f->full = false;
	}
	LWLockRelease(shared->lock);
	f->low_id = cstring_to_text_with_len(low_id, low_id_len);
}

/* Does (t1, id1) sort before (t2, id2), as the index sorts them? */
static bool
front_before(TimestampTz t1, const char *id1, int len1,
			 TimestampTz t2, const char *id2, int len2)
{
	int			c;

	if (t1 != t2)
		return t1 < t2;
	c = memcmp(id1, id2, Min(len1, len2));
	return c < 0 || (c == 0 && len1 < len2);
}

/*
 * After the scan of a take that read f at now: every message it could
 * hand out sorts at or after (bound, bound_id; NULL: ""), but for the
 * events since.
 */
void
inbox_front_advance(const InboxFront *f, TimestampTz now, TimestampTz bound,
					const text *bound_id)
{
	FrontSlot  *slot;
	const char *id = "";
	int			id_len = 0;

	/*
	 * Under REPEATABLE READ or SERIALIZABLE the scan used the
	 * transaction's snapshot, which may be older than the events the take
	 * read the front after: what was committed in between is invisible to
	 * it, and would not cap its bound.  Such a take only reads the front.
	 */
	if (!f->usable || IsolationUsesXactSnapshot())
		return;
	slot = slot_of(f->key);
	if (bound_id != NULL)
	{
		id = VARDATA_ANY(bound_id);
		id_len = pg_mbcliplen(id, VARSIZE_ANY_EXHDR(bound_id), FRONT_ID_BYTES);
	}

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (shared->events - f->version < FRONT_EVENTS)
	{
		for (uint64 v = f->version + 1; v <= shared->events; v++)
		{
			FrontEvent *e = &shared->ring[v & (FRONT_EVENTS - 1)];

			if ((e->key == f->key || e->key == FRONT_ALL_SCOPES) && e->bound <= bound)
			{
				bound = e->bound;
				id_len = 0;
			}
		}
		if (bound == DT_NOBEGIN)
			;					/* an abort or exit: nothing learnt */
		else if (f->full ||
				 (slot_holds(slot, f->key) &&
				  front_before(slot->low, slot->low_id, slot->low_id_len, bound, id, id_len)))
		{
			/* A full scan's bound holds by itself, and claims the slot */
			if (f->full)
			{
				slot->key = f->key;
				slot->epoch = shared->epoch;
				slot->full_at = now;
			}
			slot->low = bound;
			slot->low_id_len = id_len;
			memcpy(slot->low_id, id, id_len);
		}
	}
	LWLockRelease(shared->lock);
}

/*
 * At the exit of a session that took messages, forget every front.  On
 * shmem exit, not before: the owner lock that keeps the session's messages
 * from other takes is released before (ShutdownPostgres), and a take that
 * ran between the two would move a front past them.
 */
static void
owner_exit(int code, Datum arg)
{
	if (shared == NULL)
		return;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	shared->epoch++;
	record_event(FRONT_ALL_SCOPES, DT_NOBEGIN);
	LWLockRelease(shared->lock);
}

void
inbox_front_watch_owner_exit(void)
{
	if (owner_exit_watched || shared == NULL)
		return;
	on_shmem_exit(owner_exit, (Datum) 0);
	owner_exit_watched = true;
}
