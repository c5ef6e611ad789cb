/*-------------------------------------------------------------------------
 *
 * stats.h
 *	  Per-scope counters in shared memory.
 *
 * src/stats.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_STATS_H
#define INBOX_STATS_H

#include "fmgr.h"
#include "nodes/pg_list.h"
#include "utils/timestamp.h"

typedef enum InboxCounter
{
	INBOX_COUNT_CLAIM,			/* a stream's claim: no entry written */
	INBOX_COUNT_ENTRY,			/* a claim or receive that wrote an entry */
	INBOX_COUNT_DUPLICATE,
	INBOX_COUNT_MISMATCH,
	INBOX_COUNT_FAILURE,		/* inbox_fail */
	INBOX_COUNT_CONTENT_DUPLICATE,	/* a content window's second claim */
	INBOX_COUNT_PURGED			/* only through inbox_stats_purged() */
} InboxCounter;

extern void stats_init(void);
extern void stats_shmem_request(void);
extern void stats_shmem_attach(void);
extern void stats_xact_end(bool commit);
extern void stats_subxact_end(bool commit);
extern void inbox_stats_count(const text *scope, InboxCounter which);
extern void inbox_stats_purged(const char *scope, int64 rows);
extern void inbox_stats_forget(Oid dbid, const char *scope);
extern void inbox_stats_materialize(FunctionCallInfo fcinfo);
extern void inbox_stats_keep_databases(const Oid *dbids, int ndbids);

/* The purge's hints (see stats.c) */
typedef enum InboxSweep
{
	INBOX_SWEEP_NONE,			/* no sweep in this pass */
	INBOX_SWEEP_LEAF,			/* one leaf */
	INBOX_SWEEP_ALL				/* every leaf */
} InboxSweep;

extern void inbox_stats_observed(const char *scope, TimestampTz until);
extern List *inbox_stats_unobserved(MemoryContext cxt);
extern InboxSweep inbox_stats_sweep_due(int step_s, int retention_s, int idle_s, int *leaf);
extern void inbox_stats_swept(TimestampTz started, int retention_s, int idle_s,
							  int next_leaf);

#endif							/* INBOX_STATS_H */
