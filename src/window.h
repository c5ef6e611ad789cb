/*-------------------------------------------------------------------------
 *
 * window.h
 *	  Content windows: per scope, what a claim does when its payload hash
 *	  was claimed under another message id a short while ago.
 *
 * src/window.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_WINDOW_H
#define INBOX_WINDOW_H

#include "fmgr.h"

extern bool inbox_window_known_off(const text *scope);
extern bool inbox_window_known_on(const text *scope);
extern bool inbox_window_on(const text *scope);
extern bool inbox_window_first(const text *scope, const text *message_id,
							   const bytea *payload_hash);
extern void inbox_window_claimed(const text *scope, const text *message_id,
								 const bytea *payload_hash, const char *where,
								 bool direct_tried);
extern void inbox_window_purge(int limit);

#endif							/* INBOX_WINDOW_H */
