/*-------------------------------------------------------------------------
 *
 * direct.h
 *	  A claim's entry written into its leaf, and a completion, without the
 *	  planner.
 *
 * src/direct.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_DIRECT_H
#define INBOX_DIRECT_H

#include "fmgr.h"
#include "nodes/execnodes.h"
#include "datatype/timestamp.h"
#include "utils/uuid.h"

typedef enum InboxDirectResult
{
	INBOX_DIRECT_WRITTEN,		/* this call wrote the entry, or completed it */
	INBOX_DIRECT_CONFLICT,		/* a write: an entry of the key exists */
	INBOX_DIRECT_NOT_FOUND,		/* a completion: no message held as named */
	INBOX_DIRECT_UNAVAILABLE	/* nothing done: use SPI */
} InboxDirectResult;

typedef struct InboxDirectWriter InboxDirectWriter;

extern void direct_init(void);
extern bool inbox_direct_available(void);
extern bool inbox_direct_insert(EState *estate, ResultRelInfo *rri, TupleTableSlot *slot,
								List *arbiter, bool probe, ItemPointer conflict);
extern InboxDirectWriter *inbox_direct_begin(const char *command);
extern InboxDirectResult inbox_direct_write(InboxDirectWriter *w, int bucket, text *scope,
											text *message_id, bytea *payload_hash);
extern bool inbox_direct_lookup(InboxDirectWriter *w, int bucket, text *scope,
								text *message_id, TimestampTz *received_at,
								bytea **payload_hash, char *state);
extern InboxDirectResult inbox_direct_complete(InboxDirectWriter *w, int leafno, text *scope,
											   text *message_id, pg_uuid_t *receipt, int64 owner,
											   Datum result, bool result_isnull,
											   text **completed_id);
extern void inbox_direct_end(InboxDirectWriter *w);

#endif							/* INBOX_DIRECT_H */
