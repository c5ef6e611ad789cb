/*-------------------------------------------------------------------------
 *
 * deferred.c
 *	  The deferred mode's settings.  Its functions are SQL (inbox_take,
 *	  inbox_complete, ...), with the owner sessions in session.c.
 *
 * src/deferred.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/guc.h"

#include "deferred.h"

/* inbox.max_attempts, which the SQL functions read with current_setting */
static int	max_attempts = 5;

void
deferred_init(void)
{
	DefineCustomIntVariable("inbox.max_attempts",
							"Takes of a deferred message before it is dead.",
							"A take counts as an attempt whether the worker fails it or is lost. "
							"inbox_set_max_attempts() overrides it per scope.",
							&max_attempts,
							5,
							1, 1000,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);
}
