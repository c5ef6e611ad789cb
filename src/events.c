/*-------------------------------------------------------------------------
 *
 * events.c
 *	  The scopes a transaction touched, and the one transaction callback
 *	  that tells front.c, wakeup.c, stats.c and depth.c how it ended, in an
 *	  order written here.
 *
 * Writers of open messages (receives, takes, completions, failures,
 * extensions, requeues, scope drops) say what they did to a scope through
 * inbox_scope_touched(), before their statement runs, so that an error in
 * it is seen by the abort:
 *
 *	- INBOX_TOUCH_LOCKS: it locks or writes open messages, with dues at or
 *	  after its start; its end moves the scope's front (front.c);
 *	- INBOX_TOUCH_WAKES: it makes messages takeable; its commit wakes the
 *	  takes waiting on the scope (wakeup.c);
 *	- INBOX_TOUCH_MOVES: it moves messages anywhere (by hand); its commit
 *	  forgets the scope's front.
 *
 * At the end of the transaction, in this order:
 *
 *	1. front.c records the end: a commit lowers the fronts of the scopes
 *	   it wrote, an abort forgets them;
 *	2. wakeup.c wakes the takes waiting on the scopes of a commit.  After
 *	   the front: a take woken by a commit must find the front that the
 *	   commit lowered, or it would start past the message it was woken for
 *	   and sleep again;
 *	3. stats.c folds the rows a purge removed, the clocks it read and its
 *	   sweep into shared memory, or drops them with an abort.  Independent
 *	   of the two others;
 *	4. depth.c adds the states the transaction moved messages between to
 *	   its scopes' counters, or drops them with an abort.  Independent of
 *	   the others too.  It is also told just before the commit becomes
 *	   visible (XACT_EVENT_PRE_COMMIT), so that a scope's first count can
 *	   wait for the commits its snapshot saw (depth.c says why).
 *
 * A prepared transaction ends later, from whichever session runs COMMIT or
 * ROLLBACK PREPARED, maybe after a restart, where nothing was noted: at
 * PREPARE its notes are dropped, and the transaction that runs COMMIT or
 * ROLLBACK PREPARED forgets every front when it ends (the utility hook in
 * init.c calls events_utility_statement).
 *
 * The notes are kept and dropped in every backend that loads the library,
 * whether or not the shared memory exists; each module's end costs one
 * test when the transaction touched nothing.
 *
 * src/events.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "nodes/parsenodes.h"

#include "depth.h"
#include "events.h"
#include "front.h"
#include "keys.h"
#include "stats.h"
#include "wakeup.h"

PG_FUNCTION_INFO_V1(inbox_wake_takers);
PG_FUNCTION_INFO_V1(inbox_forget_front);

/*
 * What this transaction did to scope, which lives in leaf: see the
 * banner.  Called before the statement that does it.
 */
void
inbox_scope_touched(int leaf, const text *scope, int what)
{
	if (what & (INBOX_TOUCH_LOCKS | INBOX_TOUCH_MOVES))
		inbox_front_note(leaf, scope, (what & INBOX_TOUCH_MOVES) != 0);
	if (what & INBOX_TOUCH_MOVES)
		inbox_depth_forget(scope);
	if (what & INBOX_TOUCH_WAKES)
		inbox_wakeup_note(scope);
}

/* The one transaction callback: see the banner for the order */
void
events_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
		case XACT_EVENT_PARALLEL_PRE_COMMIT:
			depth_xact_pre_commit();
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			front_xact_end(true);
			wakeup_xact_end(true);
			stats_xact_end(true);
			depth_xact_end(true);
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			front_xact_end(false);
			wakeup_xact_end(false);
			stats_xact_end(false);
			depth_xact_end(false);
			break;
		case XACT_EVENT_PREPARE:
			front_xact_prepared();
			wakeup_xact_end(false);
			stats_xact_end(false);
			depth_xact_end(false);
			break;
		default:
			break;
	}
}

/*
 * The one subtransaction callback.  A rolled-back savepoint released its
 * locks, so what it held is back (front.c), and its purge counts go with
 * it (stats.c); a released one hands its counts to its parent.  Waking
 * waits for the top-level commit.
 */
void
events_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	switch (event)
	{
		case SUBXACT_EVENT_ABORT_SUB:
			front_subxact_abort();
			stats_subxact_end(false);
			depth_subxact_end(false);
			break;
		case SUBXACT_EVENT_COMMIT_SUB:
			stats_subxact_end(true);
			depth_subxact_end(true);
			break;
		default:
			break;
	}
}

/*
 * A utility statement is about to run (init.c's ProcessUtility hook):
 * COMMIT PREPARED and ROLLBACK PREPARED end a transaction whose notes were
 * made by another session, or before a restart.
 */
void
events_utility_statement(PlannedStmt *pstmt)
{
	Node	   *parsetree = pstmt->utilityStmt;

	if (IsA(parsetree, TransactionStmt))
	{
		TransactionStmtKind kind = ((TransactionStmt *) parsetree)->kind;

		if (kind == TRANS_STMT_COMMIT_PREPARED || kind == TRANS_STMT_ROLLBACK_PREPARED)
		{
			front_note_everything();
			depth_note_everything();
		}
	}
}

/*
 * inbox.wake_takers(scope text): for the SQL functions that make a message
 * takeable again, or move when it is (inbox_fail with a retry,
 * inbox_requeue, inbox_extend, inbox_drop_scope).  They lock what they
 * change, and move its due to their clock or later.
 */
Datum
inbox_wake_takers(PG_FUNCTION_ARGS)
{
	text	   *scope = PG_GETARG_TEXT_PP(0);

	inbox_scope_touched(inbox_scope_leaf(scope), scope,
						INBOX_TOUCH_LOCKS | INBOX_TOUCH_WAKES);
	PG_RETURN_VOID();
}

/*
 * inbox.forget_front(scope text): the scope's next take scans it from its
 * oldest entry, once this transaction commits; for messages moved by hand.
 */
Datum
inbox_forget_front(PG_FUNCTION_ARGS)
{
	text	   *scope = PG_GETARG_TEXT_PP(0);

	inbox_scope_touched(inbox_scope_leaf(scope), scope, INBOX_TOUCH_MOVES);
	PG_RETURN_VOID();
}
