/*-------------------------------------------------------------------------
 *
 * depth_internal.h
 *	  What depth.c shares with depth_count.c: the counts of a scope's rows
 *	  and what inbox_depth returns.
 *
 * src/depth_internal.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_DEPTH_INTERNAL_H
#define INBOX_DEPTH_INTERNAL_H

#include "fmgr.h"
#include "datatype/timestamp.h"
#include "utils/snapshot.h"

/* The statements on the leaf that holds the scope */
typedef enum DepthLeafPlan
{
	LEAF_COUNT,					/* pending, due at $2, processing */
	LEAF_NOT_DUE,				/* pending, not due at $2 */
	DEPTH_LEAF_PLANS
} DepthLeafPlan;

/* What the call returns */
typedef struct Depth
{
	int64		pending;
	int64		due;
	int64		processing;
} Depth;

extern void run_count(DepthLeafPlan kind, text *scope, int leaf, TimestampTz now,
					  Snapshot snapshot, int64 *out, int ncolumns);
extern void count_rows(text *scope, int leaf, TimestampTz now, Depth *depth);

#endif							/* INBOX_DEPTH_INTERNAL_H */
