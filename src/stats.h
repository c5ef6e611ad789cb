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

typedef enum InboxCounter
{
	INBOX_COUNT_CLAIM,
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

#endif							/* INBOX_STATS_H */
