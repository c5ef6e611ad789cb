/*-------------------------------------------------------------------------
 *
 * front.h
 *	  Where each scope's takeable messages begin, so that a take starts
 *	  there instead of walking the dead index entries before them.
 *
 * src/front.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_FRONT_H
#define INBOX_FRONT_H

#include "datatype/timestamp.h"

/*
 * How long a scope's takes may go without one full scan, the scan from the
 * oldest entry that finds what no event told the front of (front.c).  A
 * waiting take looks again at least this often (deferred.c), so that it
 * finds such a message no later than takes that do not wait.
 */
#define FRONT_FULL_SCAN_MS	1000

/* What a take read before its scan, and gives back after it */
typedef struct InboxFront
{
	uint64		key;			/* the scope's key (database, leaf, scope) */
	uint64		version;		/* the event count when it was read */
	TimestampTz low;			/* scan from (due, message_id) >= */
	text	   *low_id;			/* (low, low_id); DT_NOBEGIN: all */
	bool		full;			/* the scan starts at the oldest entry */
	bool		usable;			/* the front is kept here at all */
} InboxFront;

extern void front_init(void);
extern void front_shmem_request(void);
extern void front_shmem_attach(void);
extern void front_xact_end(bool commit);
extern void front_xact_prepared(void);
extern void front_subxact_abort(void);
extern void front_note_everything(void);
extern void inbox_front_note(int leaf, const text *scope, bool forget);
extern void inbox_front_read(int leaf, const text *scope, TimestampTz now, InboxFront *front);
extern void inbox_front_advance(const InboxFront *front, TimestampTz now, TimestampTz bound,
								const text *bound_id);
extern void inbox_front_watch_owner_exit(void);

#endif							/* INBOX_FRONT_H */
