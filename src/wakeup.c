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
 *	  inbox_fail, a requeue) notes its scope's slot; when it commits, the
 *	  transaction callback below bumps the slot's generation and wakes every
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

#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "port/pg_bitutils.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "front.h"
#include "keys.h"
#include "wakeup.h"

PG_FUNCTION_INFO_V1(inbox_wake_takers);

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

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void
wakeup_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(mul_size(WAKEUP_SLOTS, sizeof(WakeupSlot)));
}

static void
wakeup_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
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
	LWLockRelease(AddinShmemInitLock);
}

/*
 * At commit, wake the takes of every slot noted; at abort, forget them.
 * XACT_EVENT_COMMIT comes after the transaction became visible to others.
 */
static void
wakeup_xact_callback(XactEvent event, void *arg)
{
	if (!pending_any)
		return;
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
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
	/*
	 * A prepared transaction commits later, from whichever session runs
	 * COMMIT PREPARED, where nothing is noted: its messages are found by
	 * the waiting takes' next look, at the end of their wait at the
	 * latest.  Its marks must not wake anyone at this session's next
	 * commit either.
	 */
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
	{
		memset(pending_wakeups, 0, sizeof(pending_wakeups));
		pending_any = false;
	}
}

void
wakeup_init(void)
{
	/*
	 * Marks left by a transaction are dropped at its end, whether or not
	 * the slots exist, so the callback is needed in every backend that
	 * loads the library; it costs one test per transaction end.
	 */
	RegisterXactCallback(wakeup_xact_callback, NULL);

	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = wakeup_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = wakeup_shmem_startup;
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

/*
 * inbox.wake_takers(scope text): for the SQL functions that make a message
 * takeable again, or move when it is (inbox_fail with a retry,
 * inbox_requeue, inbox_extend, inbox_drop_scope).  They lock what they
 * change, and move its due to their clock or later: the scope's front must
 * hear of their end too (src/front.c).
 */
Datum
inbox_wake_takers(PG_FUNCTION_ARGS)
{
	text	   *scope = PG_GETARG_TEXT_PP(0);

	inbox_front_note(inbox_scope_leaf(scope), scope, false);
	inbox_wakeup_note(scope);
	PG_RETURN_VOID();
}
