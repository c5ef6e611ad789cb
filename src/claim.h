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

#include "executor/spi.h"

extern void claim_init(void);
extern bool inbox_on_duplicate_raises(void);
extern bool inbox_claim_direct(FunctionCallInfo fcinfo, bool *claimed);
extern SPIPlanPtr inbox_keep_plan(const char *sql, int nargs, Oid *argtypes,
								  int cursor_options);
extern SPIPlanPtr inbox_plan(SPIPlanPtr *slot, const char *sql, int nargs, Oid *argtypes);
extern int	inbox_execute_bounded(SPIPlanPtr plan, Datum *values, const char *nulls,
								  const text *scope, const text *key, const char *kind);

#endif							/* INBOX_CLAIM_H */
