/*-------------------------------------------------------------------------
 *
 * session.h
 *	  Owner sessions of the deferred mode.
 *
 * src/session.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_SESSION_H
#define INBOX_SESSION_H

extern int64 inbox_owner_key(void);
extern void inbox_owner_probes_begin(void);
extern void inbox_owner_probes_end(void);

#endif							/* INBOX_SESSION_H */
