/*-------------------------------------------------------------------------
 *
 * claim.h
 *	  The claim path: inbox_claim, inbox_receive and inbox_status, for the
 *	  entry points that call them (access.c, compat_0_4.c).
 *
 * src/claim.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_CLAIM_H
#define INBOX_CLAIM_H

#include "fmgr.h"

extern PGDLLEXPORT Datum inbox_claim_1_0(PG_FUNCTION_ARGS);
extern bool inbox_claim_direct(FunctionCallInfo fcinfo, bool *claimed);

/* legacy: the SQL of 0.4.0, whose table has no bucket (compat_0_4.c) */
extern Datum inbox_claim_call(FunctionCallInfo fcinfo, bool legacy);
extern Datum inbox_receive_call(FunctionCallInfo fcinfo, bool is_jsonb, bool legacy);
extern Datum inbox_status_call(FunctionCallInfo fcinfo, bool legacy);

#endif							/* INBOX_CLAIM_H */
