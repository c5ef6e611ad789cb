/*-------------------------------------------------------------------------
 *
 * events.h
 *	  The scopes a transaction touched, and what the end of a transaction
 *	  tells the modules that keep shared state about them.
 *
 * src/events.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_EVENTS_H
#define INBOX_EVENTS_H

#include "access/xact.h"
#include "nodes/plannodes.h"

/* What a transaction does to a scope's open messages (flags) */
#define INBOX_TOUCH_LOCKS	0x01	/* locks or writes some, due from its start on */
#define INBOX_TOUCH_WAKES	0x02	/* makes some takeable: wake waiting takes */
#define INBOX_TOUCH_MOVES	0x04	/* writes dues anywhere: forget the front */

extern void inbox_scope_touched(int leaf, const text *scope, int what);

extern void events_xact_callback(XactEvent event, void *arg);
extern void events_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
									SubTransactionId parentSubid, void *arg);
extern void events_utility_statement(PlannedStmt *pstmt);

#endif							/* INBOX_EVENTS_H */
