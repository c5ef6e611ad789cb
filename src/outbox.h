/*-------------------------------------------------------------------------
 *
 * outbox.h
 *	  The outbox's C half: its retention setting, time-ordered ids, the
 *	  argument checks, the relays' wake-ups, and the purge of sent
 *	  messages that the worker and inbox_purge() run.
 *
 * src/outbox.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_OUTBOX_H
#define INBOX_OUTBOX_H

extern void outbox_init(void);

/* The caller holds an SPI connection and a snapshot */
extern int64 inbox_outbox_purge_batch(int limit, bool *more);

#endif							/* INBOX_OUTBOX_H */
