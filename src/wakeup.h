/*-------------------------------------------------------------------------
 *
 * wakeup.h
 *	  Waiting takes, and the commits that wake them.
 *
 * src/wakeup.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_WAKEUP_H
#define INBOX_WAKEUP_H

#include "datatype/timestamp.h"

extern void wakeup_shmem_request(void);
extern void wakeup_shmem_attach(void);
extern void wakeup_xact_end(bool commit);
extern void inbox_wakeup_note(const text *scope);
extern bool inbox_wakeup_available(void);
extern uint64 inbox_wakeup_generation(const text *scope);
extern void inbox_wakeup_sleep(const text *scope, uint64 generation, long timeout_ms);

#endif							/* INBOX_WAKEUP_H */
