/*-------------------------------------------------------------------------
 *
 * direct_layout.h
 *	  Whether inbox.entries and its leaves, and inbox.content_window, are
 *	  exactly as sql/inbox.sql makes them, so that direct.c and window.c
 *	  may write into them without the executor's checks.
 *
 * src/direct_layout.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_DIRECT_LAYOUT_H
#define INBOX_DIRECT_LAYOUT_H

#include "utils/relcache.h"

/*
 * inbox.content_window's columns: scope, payload_hash, message_id, seen_at,
 * expires_at, in that order
 */
#define CONTENT_WINDOW_NATTS	5

extern bool direct_layout_parent_ok(Oid parentid);
extern bool direct_layout_leaf_ok(Relation leaf, int leafno, Oid parentid);
extern bool direct_layout_content_ok(Relation rel);

#endif							/* INBOX_DIRECT_LAYOUT_H */
