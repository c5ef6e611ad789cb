/*-------------------------------------------------------------------------
 *
 * distributed.h
 *	  Whether inbox.entries is distributed by Citus, the refusals of what
 *	  cannot run on it, and the counters of the whole cluster.
 *
 * src/distributed.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_DISTRIBUTED_H
#define INBOX_DISTRIBUTED_H

#include "fmgr.h"
#include "nodes/parsenodes.h"

typedef enum InboxRefusal
{
	INBOX_REFUSE_SESSION_TAKE,
	INBOX_REFUSE_CLAIM_TIMEOUT,
	INBOX_REFUSE_ONE_ROW_FROM,
	INBOX_REFUSE_SESSION_SETTING,
	INBOX_REFUSE_PURGE_ON_WORKER,
	INBOX_REFUSE_CONTENT_WINDOW,
	INBOX_REFUSE_OUTBOX,
	INBOX_REFUSE_GROUPS,
	INBOX_REFUSE_PRIORITIES
} InboxRefusal;

extern bool inbox_entries_distributed(void);
extern void inbox_refuse_if_distributed(InboxRefusal which);
extern bool inbox_citus_worker_node(void);
extern bool inbox_citus_installed(void);
extern void inbox_guard_planned_query(Query *parse);

/*
 * This node's counters (stats.c, a layer above), handed over by _PG_init:
 * how to read them into a function's result set, and how to forget those
 * of one scope (or all, for NULL) of a database.
 */
typedef void (*InboxReadCounters) (FunctionCallInfo fcinfo);
typedef void (*InboxForgetCounters) (Oid dbid, const char *scope);

extern void distributed_init(InboxReadCounters read, InboxForgetCounters forget);

#endif							/* INBOX_DISTRIBUTED_H */
