/*-------------------------------------------------------------------------
 *
 * inbox.c
 *	  Entry point of the inbox extension: the module magic, and _PG_init,
 *	  which is the table of contents of its modules.
 *
 * Each module defines its own settings and hooks in its init function.
 * Claims need nothing but the settings; shared memory for the counters and
 * the retention launcher exist only when the library is in
 * shared_preload_libraries, and their modules check that themselves.
 *
 * src/inbox.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/guc.h"

#include "claim.h"
#include "deferred.h"
#include "direct.h"
#include "distributed.h"
#include "front.h"
#include "purge.h"
#include "stats.h"
#include "version.h"
#include "wakeup.h"
#include "worker.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

void
_PG_init(void)
{
	version_init();				/* which SQL this library serves */
	claim_init();				/* inbox.on_duplicate, inbox.claim_timeout */
	direct_init();				/* inbox.direct_insert */
	deferred_init();			/* inbox.max_attempts */
	wakeup_init();				/* waiting takes, woken at commit */
	front_init();				/* inbox.take_front: where takes start;
								 * after wakeup_init, see front.c */
	purge_init();				/* retention and purge batches */
	worker_init();				/* the launcher and its purge workers */
	stats_init();				/* the shared-memory counters */
	distributed_init();			/* a guard against a crash in Citus */

	MarkGUCPrefixReserved("inbox");
}
