/*-------------------------------------------------------------------------
 *
 * access.h
 *	  What the API's entry points tell the implementations.
 *
 * src/access.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_ACCESS_H
#define INBOX_ACCESS_H

extern Oid	inbox_forget_caller(void);

#endif							/* INBOX_ACCESS_H */
