/*-------------------------------------------------------------------------
 *
 * depth.h
 *	  A scope's pending, due and processing messages, from counters in
 *	  shared memory that every change of state keeps at commit.
 *
 * src/depth.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_DEPTH_H
#define INBOX_DEPTH_H

#include "fmgr.h"

/* No entry: a state's "from" for a new message, "to" for a deleted one */
#define INBOX_DEPTH_NONE	'\0'

extern void depth_init(void);
extern void depth_shmem_request(void);
extern void depth_shmem_attach(void);
extern void depth_xact_pre_commit(void);
extern void depth_xact_end(bool commit);
extern void depth_subxact_end(bool commit);
extern void depth_note_everything(void);

extern void inbox_depth_moved(const text *scope, char from, char to, int64 n, bool later);
extern void inbox_depth_forget(const text *scope);

#endif							/* INBOX_DEPTH_H */
