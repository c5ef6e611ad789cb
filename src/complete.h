/*-------------------------------------------------------------------------
 *
 * complete.h
 *	  The completion of the deferred mode, which the single inbox_complete
 *	  and the batch (complete_many.c) share.
 *
 * src/complete.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_COMPLETE_H
#define INBOX_COMPLETE_H

#include "fmgr.h"
#include "utils/uuid.h"

/*
 * One statement's completions in one scope: begin, one call per message,
 * end; then the caller releases the groups of the messages completed
 * (inbox_group_leave).  Between begin and end, SPI may be connected.
 */
typedef struct InboxCompletion
{
	text	   *scope;
	int			leaf;			/* the leaf that holds the scope's entries */
	struct InboxDirectWriter *writer;	/* direct.c's, or NULL: SPI */
	bool		spi;			/* whether this completion connected to SPI */
} InboxCompletion;

extern void inbox_completion_begin(InboxCompletion *c, text *scope);
extern bool inbox_completion_one(InboxCompletion *c, text *message_id, pg_uuid_t *receipt,
								 int64 owner, Datum result, bool result_isnull,
								 text **completed_id);
extern void inbox_completion_end(InboxCompletion *c);

#endif							/* INBOX_COMPLETE_H */
