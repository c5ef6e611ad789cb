/*-------------------------------------------------------------------------
 *
 * purge.h
 *	  Retention: the purge steps shared by the background worker and
 *	  inbox_purge() (purge.c, purge_steps.c).
 *
 * src/purge.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_PURGE_H
#define INBOX_PURGE_H

#include "nodes/pg_list.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

/* A scope to purge, and the time before which its entries may go */
typedef struct PurgeTarget
{
	char	   *scope;
	TimestampTz cutoff;
	Oid			leaf;			/* the leaf of its entries; InvalidOid: unknown */
} PurgeTarget;

extern void purge_init(void);
extern int64 inbox_purge_round(void);

/* Callers hold an SPI connection and a snapshot for each of these */
extern List *inbox_purge_observe(MemoryContext cxt);
extern List *inbox_purge_leaves(MemoryContext cxt);
extern int64 inbox_purge_leaf_batch(Oid leaf, List *targets, bool *more);
extern int64 inbox_purge_outbox_batch(bool *more);
extern void inbox_purge_set_lock_timeout(GucAction action);

/* The steps (purge_steps.c), as the round and step 1 in purge.c call them */
extern List *collect_targets(List *targets, MemoryContext cxt);
extern List *observe_distributed(Datum *settings, MemoryContext cxt);
extern List *observe_changed(Datum *settings, int retention_s, int idle_s,
							 MemoryContext cxt);
extern int64 inbox_purge_leaf(Oid leaf, List *targets, int limit, bool *more);

#endif							/* INBOX_PURGE_H */
