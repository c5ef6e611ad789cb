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

#endif							/* INBOX_SESSION_H */
