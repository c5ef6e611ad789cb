/*-------------------------------------------------------------------------
 *
 * session.c
 *	  Owner sessions of the deferred mode: who owns a message being
 *	  processed, and whether that owner is still alive.
 *
 * inbox_take records the taking session as the owner of each message it
 * returns.  The owner is identified by (pid, backend start time), packed
 * into a bigint, and the owning session holds a session-level lock on a key
 * derived from it, in the extension's private lock space (see inbox.h),
 * which SQL-level advisory lock functions cannot name.  So:
 *
 *	- the owner is alive exactly while that lock is held: another session
 *	  that can take the lock knows the owner's backend has exited (or
 *	  crashed: a crash restart empties the lock table), and recovers the
 *	  message at once, with no timeout to guess;
 *	- pid reuse cannot fake liveness, because the start time is in the key.
 *
 * pg_advisory_unlock_all() and DISCARD ALL release this lock too (it lives
 * in the advisory lock method, the only one whose session locks a backend
 * releases on exit).  A session that does that looks dead, and its
 * messages may be taken by another worker; inbox_complete checks the owner
 * in the completing transaction, so such a message is still completed,
 * with its effect, at most once.  inbox_take takes the lock again.
 *
 * src/session.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lock.h"

#include "compat.h"
#include "inbox.h"
#include "session.h"

PG_FUNCTION_INFO_V1(inbox_session_key);
PG_FUNCTION_INFO_V1(inbox_session_alive);

static int64
my_session_key(void)
{
	return ((int64) MyProcPid << 32) | (int64) (uint32) MyStartTimestamp;
}

static void
owner_locktag(LOCKTAG *tag, int64 key)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) ((uint64) key >> 32),
						 (uint32) key, INBOX_LOCKSPACE_OWNER);
}

/* This session's owner key, making sure the session holds its owner lock */
int64
inbox_owner_key(void)
{
	int64		key = my_session_key();
	LOCKTAG		tag;

	owner_locktag(&tag, key);
	if (!inbox_lock_held(&tag, ExclusiveLock))
		(void) LockAcquire(&tag, ExclusiveLock, true, false);
	return key;
}

/* inbox.session_key() -> bigint: the same, for the SQL functions */
Datum
inbox_session_key(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(inbox_owner_key());
}

/*
 * The owners found alive by the statement of a take that picks messages,
 * so that it probes each only once however many of their messages it walks
 * (a take walks every message in flight in its scope).  The take brackets
 * that one statement with inbox_owner_probes_begin() and _end(), so what
 * is kept is never older than the statement that reads it, and nothing
 * else ever reads it.  Owners found dead are not kept: their messages are
 * taken, and not walked again.
 */
#define OWNER_CACHE_SIZE 32

static int64 owners_alive[OWNER_CACHE_SIZE];
static int	n_owners_alive = 0;
static bool owner_probes_active = false;

void
inbox_owner_probes_begin(void)
{
	n_owners_alive = 0;
	owner_probes_active = true;
}

void
inbox_owner_probes_end(void)
{
	owner_probes_active = false;
}

/*
 * inbox.session_alive(owner bigint) -> boolean: does the owning session
 * still exist?  Probing takes the owner's lock without waiting and gives it
 * back at once; only a live owner holds it.
 */
Datum
inbox_session_alive(PG_FUNCTION_ARGS)
{
	int64		key;
	LOCKTAG		tag;

	if (PG_ARGISNULL(0))
		PG_RETURN_BOOL(false);
	key = PG_GETARG_INT64(0);
	if (key == my_session_key())
		PG_RETURN_BOOL(true);
	for (int i = 0; owner_probes_active && i < n_owners_alive; i++)
	{
		if (owners_alive[i] == key)
			PG_RETURN_BOOL(true);
	}

	owner_locktag(&tag, key);
	if (LockAcquire(&tag, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
	{
		if (owner_probes_active && n_owners_alive < OWNER_CACHE_SIZE)
			owners_alive[n_owners_alive++] = key;
		PG_RETURN_BOOL(true);
	}
	LockRelease(&tag, ExclusiveLock, false);
	PG_RETURN_BOOL(false);
}
