/*-------------------------------------------------------------------------
 *
 * locate.h
 *	  A row of ours found through its unique index, without the planner.
 *
 * src/locate.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_LOCATE_H
#define INBOX_LOCATE_H

#include "access/skey.h"
#include "fmgr.h"
#include "storage/itemptr.h"
#include "utils/uuid.h"

extern void inbox_text_key(ScanKey key, AttrNumber attno, text *value);
extern bool inbox_entry_tid(text *scope, text *message_id, ItemPointer tid);
extern bool inbox_entry_of_receipt(text *scope, pg_uuid_t *receipt, text **message_id,
								   ItemPointer tid);
extern bool inbox_member_tid(text *scope, text *message_id, ItemPointer tid);

#endif							/* INBOX_LOCATE_H */
