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
 * Nor does a prepared transaction wake anybody.  Its notes cannot be kept
 * for its COMMIT PREPARED: that runs in whichever session issues it,
 * possibly after a restart that emptied shared memory, or in a
 * subscription's apply worker, which runs no statement.  So where the
 * server can hold prepared transactions (max_prepared_transactions > 0),
 * every sleep here ends after at most WAKEUP_PREPARED_LOOK_MS, and the
 * caller looks again: a waiting inbox_poll and a waiting outbox_fetch
 * alike find a COMMIT PREPARED's messages within that period, at the cost
 * of one empty look per period.  Without prepared transactions, every
 * commit that makes a message available wakes its waiters, and a sleep
 * lasts as long as its caller asks.
 *
 * A waiting take whose client has gone must take nothing: it would count an
 * attempt for a message that no client receives, and a few such takes can
 * spend all of a message's attempts.  PostgreSQL notices a client that went
 * away only when it next reads from or writes to it, or every
 * client_connection_check_interval, which is off by default.  So a waiting
 * take checks the connection itself, as that setting does: after every
 * slice of its sleep, so that a dead client's backend ends within a slice,
 * and once more when the sleep ends, before the take looks again, so that
 * a commit that wakes it does not hand it a message.  A client that goes
 * away after that last check, while the take runs or its rows are on the
 * way, still costs an attempt; the message is taken again when the
 * session ends (or its lease runs out).  A take that does not wait checks
 * nothing, and pays nothing for this.
 *
 * The slots exist only when the library is in shared_preload_libraries.
 * Without them a take cannot wait, and says so.
 *
 * src/wakeup.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/twophase.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "port/pg_bitutils.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "wakeup.h"

/* Slots; a power of two, so that a scope's slot is a mask of its hash */
#define WAKEUP_SLOTS	256

/*
 * The longest a waiting take sleeps without checking on its client: how
 * long the backend of a client that went away may go on holding its
 * connection slot and its snapshot.  A check is one non-blocking poll of
 * the socket.
 */
#define WAKEUP_CLIENT_CHECK_MS	1000

/*
 * Where transactions can be prepared, the longest a sleep lasts before its
 * caller looks again, for the commits that wake nobody (see the banner).
 */
#define WAKEUP_PREPARED_LOOK_MS	1000

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
 * messages are found by the waiters' next look, which comes within
 * WAKEUP_PREPARED_LOOK_MS (see the banner).  Its notes must not wake
 * anyone at this session's next commit either.
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
 * End the session if its client has gone, as PostgreSQL does when
 * client_connection_check_interval finds it so: FATAL, "connection to
 * client lost", nothing sent.  The transaction aborts, so nothing is taken.
 * Only a backend that serves a client over a socket has one to check, and
 * only where the platform can report a closed socket without reading from
 * it (the condition under which PostgreSQL allows that setting).
 */
static void
check_client(void)
{
	if (whereToSendOutput != DestRemote || MyProcPort == NULL ||
		!WaitEventSetCanReportClosed() || pq_check_connection())
		return;
	ClientConnectionLost = true;
	InterruptPending = true;
	CHECK_FOR_INTERRUPTS();

	/* Interrupts are held off: end the statement, and the session after it */
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("connection to client lost")));
}

/*
 * Sleep until a commit wakes scope's slot, or timeout_ms passes, unless a
 * commit already moved the slot past generation; where transactions can be
 * prepared, WAKEUP_PREPARED_LOOK_MS at most.  Every caller looks again
 * when it returns.  Cancellable: the sleep ends on an interrupt, which
 * CHECK_FOR_INTERRUPTS then serves.  The client is checked on after every
 * WAKEUP_CLIENT_CHECK_MS of sleep and when the sleep ends (see the
 * banner).
 *
 * The generation, not the latch, says whether a commit came: checking the
 * client resets the latch, and a commit bumps the generation before it
 * wakes anyone.
 */
void
inbox_wakeup_sleep(const text *scope, uint64 generation, long timeout_ms)
{
	WakeupSlot *slot = &wakeup_slots[slot_of(scope)];
	TimestampTz end;

	if (max_prepared_xacts > 0)
		timeout_ms = Min(timeout_ms, WAKEUP_PREPARED_LOOK_MS);
	end = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);

	ConditionVariablePrepareToSleep(&slot->cv);
	while (pg_atomic_read_u64(&slot->generation) == generation)
	{
		long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), end);

		if (left <= 0)
			break;
		/* false: woken by a commit, or by an interrupt served inside */
		if (!ConditionVariableTimedSleep(&slot->cv, Min(left, WAKEUP_CLIENT_CHECK_MS),
										 PG_WAIT_EXTENSION))
			break;
		check_client();
	}
	ConditionVariableCancelSleep();
	CHECK_FOR_INTERRUPTS();
	check_client();
}
