/*-------------------------------------------------------------------------
 *
 * wakeup.c
 *	  Waiting takes (inbox_poll with wait), and the commits that wake them.
 *
 * A take that finds nothing may wait for a message to arrive.  It must
 * neither poll nor rely on NOTIFY, which never reaches a backend inside a
 * transaction.  So shared memory holds a small array of slots, each a
 * condition variable and a generation counter, and a scope maps to one slot
 * by a hash of its name:
 *
 *	- a transaction that makes a message takeable (a receive, a retry after
 *	  inbox_fail, a requeue) notes its scope's slot (events.c); when it
 *	  commits, wakeup_xact_end() bumps the slot's generation and wakes every
 *	  take sleeping on it.  Waking at commit, not at the INSERT, is what
 *	  lets the woken take see the message;
 *	- a waiting take reads the generation before each attempt, and sleeps
 *	  only if it has not moved since, so a commit between its attempt and
 *	  its sleep is never missed.
 *
 * Scopes that share a slot wake each other's takes for nothing; that costs
 * one empty take, never a missed message.  Messages that become takeable
 * by the clock (a delay, a lease that runs out) wake nobody: the waiting
 * take sleeps until the earliest of them is due (src/deferred.c).
 *
 * The slots exist only when the library is in shared_preload_libraries.
 * Without them a take cannot wait, and says so.
 *
 * src/wakeup.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "port/pg_bitutils.h"
#include "storage/condition_variable.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "wakeup.h"

/* Slots; a power of two, so that a scope's slot is a mask of its hash */
#define WAKEUP_SLOTS	256

typedef struct WakeupSlot
{
	ConditionVariable cv;
	pg_atomic_uint64 generation;
} WakeupSlot;

static WakeupSlot *wakeup_slots = NULL;

/* The slots this transaction will wake when it commits */
static uint64 pending_wakeups[WAKEUP_SLOTS / 64];
static bool pending_any = false;

/* The slots' shared memory, asked for at server start */
void
wakeup_shmem_request(void)
{
	RequestAddinShmemSpace(mul_size(WAKEUP_SLOTS, sizeof(WakeupSlot)));
}

/* Find or create the slots; the caller holds AddinShmemInitLock */
void
wakeup_shmem_attach(void)
{
	bool		found;

	wakeup_slots = ShmemInitStruct("inbox wakeups",
								   mul_size(WAKEUP_SLOTS, sizeof(WakeupSlot)), &found);
	if (!found)
	{
		for (int i = 0; i < WAKEUP_SLOTS; i++)
		{
			ConditionVariableInit(&wakeup_slots[i].cv);
			pg_atomic_init_u64(&wakeup_slots[i].generation, 0);
		}
	}
}

/*
 * The end of a transaction (events.c): at commit, wake the takes of every
 * slot noted; either way, forget the notes.  The commit is visible to
 * others by then.
 *
 * A prepared transaction ends as an abort here: it commits later, from
 * whichever session runs COMMIT PREPARED, where nothing is noted, and its
 * messages are found by the waiting takes' next look, at the end of their
 * wait at the latest.  Its notes must not wake anyone at this session's
 * next commit either.
 */
void
wakeup_xact_end(bool commit)
{
	if (!pending_any)
		return;
	if (commit)
	{
		for (int w = 0; w < WAKEUP_SLOTS / 64; w++)
		{
			uint64		bits = pending_wakeups[w];

			while (bits != 0)
			{
				int			b = pg_rightmost_one_pos64(bits);
				WakeupSlot *slot = &wakeup_slots[w * 64 + b];

				pg_atomic_fetch_add_u64(&slot->generation, 1);
				ConditionVariableBroadcast(&slot->cv);
				bits &= bits - 1;
			}
		}
	}
	memset(pending_wakeups, 0, sizeof(pending_wakeups));
	pending_any = false;
}

bool
inbox_wakeup_available(void)
{
	return wakeup_slots != NULL;
}

/* A scope's slot; the database is part of it, as scopes are per database */
static int
slot_of(const text *scope)
{
	uint32		h = hash_bytes((const unsigned char *) VARDATA_ANY(scope),
							   VARSIZE_ANY_EXHDR(scope));

	return hash_combine(h, hash_uint32((uint32) MyDatabaseId)) & (WAKEUP_SLOTS - 1);
}

/* Wake the takes waiting on scope when this transaction commits */
void
inbox_wakeup_note(const text *scope)
{
	int			s;

	if (wakeup_slots == NULL)
		return;
	s = slot_of(scope);
	pending_wakeups[s / 64] |= UINT64CONST(1) << (s % 64);
	pending_any = true;
}

uint64
inbox_wakeup_generation(const text *scope)
{
	return pg_atomic_read_u64(&wakeup_slots[slot_of(scope)].generation);
}

/*
 * Sleep until a commit wakes scope's slot, or timeout_ms passes, unless a
 * commit already moved the slot past generation.  Cancellable: the sleep
 * ends on an interrupt, which CHECK_FOR_INTERRUPTS then serves.
 */
void
inbox_wakeup_sleep(const text *scope, uint64 generation, long timeout_ms)
{
	WakeupSlot *slot = &wakeup_slots[slot_of(scope)];

	ConditionVariablePrepareToSleep(&slot->cv);
	if (pg_atomic_read_u64(&slot->generation) == generation)
		(void) ConditionVariableTimedSleep(&slot->cv, timeout_ms, PG_WAIT_EXTENSION);
	ConditionVariableCancelSleep();
	CHECK_FOR_INTERRUPTS();
}
