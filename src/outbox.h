/*-------------------------------------------------------------------------
 *
 * outbox.h
 *	  The outbox's C half: its retention setting, time-ordered ids, the
 *	  argument checks (outbox_check.c), the relays' wake-ups, and the purge of sent
 *	  messages that the worker and inbox_purge() run.
 *
 * src/outbox.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_OUTBOX_H
#define INBOX_OUTBOX_H

#include "fmgr.h"

extern void outbox_init(void);

/* outbox_check.c: a send's checks, for the send in outbox.c */
extern PGDLLEXPORT Datum inbox_outbox_check(PG_FUNCTION_ARGS);
extern void outbox_check_headers(Datum headers);
extern PGDLLEXPORT Datum inbox_outbox_trace_headers(PG_FUNCTION_ARGS);

/* outbox_check.c: the trace context's settings, and a send's headers with it */
extern void outbox_trace_init(void);
extern Datum outbox_trace_headers(Datum headers);

/* The caller holds an SPI connection and a snapshot */
extern int64 inbox_outbox_purge_batch(int limit, bool *more);

#endif							/* INBOX_OUTBOX_H */
