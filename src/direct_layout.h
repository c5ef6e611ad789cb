/*-------------------------------------------------------------------------
 *
 * direct_layout.h
 *	  Whether inbox.entries and its leaves are exactly as sql/inbox.sql
 *	  makes them, so that direct.c may write into them.
 *
 * src/direct_layout.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_DIRECT_LAYOUT_H
#define INBOX_DIRECT_LAYOUT_H

#include "utils/relcache.h"

extern bool direct_layout_parent_ok(Oid parentid);
extern bool direct_layout_leaf_ok(Relation leaf, int leafno, Oid parentid);
extern void direct_layout_forget(Oid relid);

#endif							/* INBOX_DIRECT_LAYOUT_H */
