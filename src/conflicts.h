/*-------------------------------------------------------------------------
 *
 * conflicts.h
 *	  What a claim does when its key is taken: how long it waits for an
 *	  uncommitted claim of the same key, and how it reports a committed one.
 *
 * src/conflicts.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_CONFLICTS_H
#define INBOX_CONFLICTS_H

#include "executor/spi.h"

/* A statement of a claim, run by inbox_run_bounded() */
typedef int (*InboxBoundedCall) (void *arg);

extern void conflicts_init(void);
extern bool inbox_on_duplicate_raises(void);
extern bool inbox_claim_bounded(void);
extern int	inbox_run_bounded(InboxBoundedCall call, void *arg,
							  const text *scope, const text *key, const char *kind);
extern int	inbox_execute_bounded(SPIPlanPtr plan, Datum *values, const char *nulls,
								  const text *scope, const text *key, const char *kind);

#endif							/* INBOX_CONFLICTS_H */
