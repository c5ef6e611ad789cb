/*-------------------------------------------------------------------------
 *
 * groups.h
 *	  Ordered groups of the deferred mode: the C half of what sql/inbox.sql
 *	  (section 4, "Ordered groups") keeps in inbox.groups and
 *	  inbox.group_members.
 *
 * src/groups.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_GROUPS_H
#define INBOX_GROUPS_H

#include "fmgr.h"
#include "utils/uuid.h"

extern bool inbox_groups_in_use(void);
extern text *inbox_group_key_arg(FunctionCallInfo fcinfo, int argno);
extern void inbox_group_enqueue(text *scope, int n, text **ids, text **keys,
								Datum not_before);
extern void inbox_group_leave(text *scope, text *message_id, pg_uuid_t *receipt);
extern void inbox_group_dead(text *scope, Datum message_id);
extern bool inbox_group_key_of(text *scope, Datum message_id, Datum *key);

#endif							/* INBOX_GROUPS_H */
