/*-------------------------------------------------------------------------
 *
 * deferred_internal.h
 *	  What deferred.c shares with deferred_settle.c: the statements on the
 *	  scope's leaf, and the check of a lease argument.
 *
 * src/deferred_internal.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_DEFERRED_INTERNAL_H
#define INBOX_DEFERRED_INTERNAL_H

#include "fmgr.h"
#include "datatype/timestamp.h"

/*
 * The statements, each on the leaf that holds the scope's entries (%d):
 * a scope lives in one leaf (entries.h), so a take reads one open-messages
 * index, in its order, and never merges leaves.
 */
typedef enum DeferredLeafPlan
{
	LEAF_CANDIDATES,			/* the due messages a take may hand out */
	LEAF_CANDIDATES_HEADERS,	/* the same with their headers (1.2.0's SQL) */
	LEAF_NEXT_DUE,				/* when the next one is due (a waiting take) */
	LEAF_TAKE,					/* hand messages out */
	LEAF_TAKE_ONE,				/* hand one message out */
	LEAF_DIE,					/* a lost message out of attempts */
	LEAF_EXTEND_RECEIPT,		/* a longer lease, by receipt */
	LEAF_RESULT,				/* a message's stored result */
	DEFERRED_LEAF_PLANS
} DeferredLeafPlan;

extern uint64 deferred_execute(DeferredLeafPlan kind, int leaf, Datum *values,
							   const char *nulls, int expected);
extern Interval *positive_duration_arg(FunctionCallInfo fcinfo, int argno, const char *name,
									   const char *hint);

#endif							/* INBOX_DEFERRED_INTERNAL_H */
