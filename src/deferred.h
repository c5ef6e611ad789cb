/*-------------------------------------------------------------------------
 *
 * deferred.h
 *	  The deferred mode's settings.
 *
 * src/deferred.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_DEFERRED_H
#define INBOX_DEFERRED_H

extern void deferred_init(void);

#endif							/* INBOX_DEFERRED_H */
