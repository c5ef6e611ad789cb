/*-------------------------------------------------------------------------
 *
 * claim.h
 *	  The claim path: inbox_claim, inbox_receive and inbox_status.
 *
 * src/claim.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_CLAIM_H
#define INBOX_CLAIM_H

extern void claim_init(void);

#endif							/* INBOX_CLAIM_H */
