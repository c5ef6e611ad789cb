/*-------------------------------------------------------------------------
 *
 * forget.h
 *	  inbox_forget and inbox_forget_range, as their entry point sees them.
 *
 * src/forget.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_FORGET_H
#define INBOX_FORGET_H

extern Oid	inbox_forget_set_caller(Oid caller);

#endif							/* INBOX_FORGET_H */
