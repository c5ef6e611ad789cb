/*-------------------------------------------------------------------------
 *
 * priorities.h
 *	  Priorities of the deferred mode: the checks of the receives'
 *	  priority arguments, and the take's walk of the messages above the
 *	  default priority, level by level.
 *
 * src/priorities.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_PRIORITIES_H
#define INBOX_PRIORITIES_H

#include "executor/spi.h"
#include "fmgr.h"
#include "datatype/timestamp.h"

extern void priorities_init(void);
extern int	inbox_priority_arg(FunctionCallInfo fcinfo, int argno);
extern int	inbox_check_priority(int32 value, const char *argname);
extern int64 inbox_priority_age(void);
extern bool inbox_ranked_in_scope(int leaf, text *scope);
/* The parameters of inbox_ranked_candidates' statement */
#define RANKED_NARGS 8

extern SPIPlanPtr inbox_ranked_candidates(int leaf, text *scope, TimestampTz now, int limit,
										  TimestampTz low, text *low_id, TimestampTz aged,
										  bool aged_first, bool headers, Datum *values,
										  const char **name);

#endif							/* INBOX_PRIORITIES_H */
