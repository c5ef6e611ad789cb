/*-------------------------------------------------------------------------
 *
 * init.c
 *	  Entry point of the inbox extension: the module magic, and _PG_init,
 *	  which defines every module's settings and installs every hook.
 *
 * Each module defines its settings in its init function, and keeps its
 * state to itself.  The hooks are all installed here, so that a reader
 * sees in one place everything the library changes in the server:
 *
 *	- one transaction and one subtransaction callback (events.c), which
 *	  tell the modules how a transaction ended, in an order written there;
 *	- a ProcessUtility hook, for COMMIT and ROLLBACK PREPARED (events.c);
 *	- a planner hook, which refuses the queries Citus would crash on
 *	  (distributed.c);
 *	- with shared_preload_libraries only, one shared-memory request and
 *	  one startup, which call each module that keeps shared state: the
 *	  fronts (front.c), the wakeup slots (wakeup.c) and the counters
 *	  (stats.c); and the retention launcher (worker.c).
 *
 * Claims need nothing but the settings: without the preload, takes scan
 * from the oldest entry, a take cannot wait, and nothing is counted.
 *
 * src/init.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "optimizer/planner.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "tcop/utility.h"
#include "utils/guc.h"

#include "conflicts.h"
#include "deferred.h"
#include "depth.h"
#include "direct.h"
#include "distributed.h"
#include "events.h"
#include "front.h"
#include "outbox.h"
#include "priorities.h"
#include "purge.h"
#include "stats.h"
#include "version.h"
#include "wakeup.h"
#include "worker.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

static shmem_request_hook_type prev_shmem_request = NULL;
static shmem_startup_hook_type prev_shmem_startup = NULL;
static ProcessUtility_hook_type prev_process_utility = NULL;
static planner_hook_type prev_planner = NULL;

/* The shared memory of every module that keeps shared state */
static void
inbox_shmem_request(void)
{
	if (prev_shmem_request)
		prev_shmem_request();
	front_shmem_request();
	wakeup_shmem_request();
	stats_shmem_request();
	depth_shmem_request();
}

static void
inbox_shmem_startup(void)
{
	if (prev_shmem_startup)
		prev_shmem_startup();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	front_shmem_attach();
	wakeup_shmem_attach();
	stats_shmem_attach();
	depth_shmem_attach();
	LWLockRelease(AddinShmemInitLock);
}

static void
inbox_process_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
					  ProcessUtilityContext context, ParamListInfo params,
					  QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	events_utility_statement(pstmt);
	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context, params,
							 queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params,
								queryEnv, dest, qc);
}

static PlannedStmt *
inbox_planner(Query *parse, const char *query_string, int cursor_options,
			  ParamListInfo bound_params)
{
	inbox_guard_planned_query(parse);
	if (prev_planner)
		return prev_planner(parse, query_string, cursor_options, bound_params);
	return standard_planner(parse, query_string, cursor_options, bound_params);
}

void
_PG_init(void)
{
	/* The settings, each module's own */
	version_init();				/* which SQL this library serves */
	conflicts_init();			/* inbox.on_duplicate, inbox.claim_timeout */
	direct_init();				/* inbox.direct_insert */
	deferred_init();			/* inbox.max_attempts */
	priorities_init();			/* inbox.priority_age */
	front_init();				/* inbox.take_front */
	purge_init();				/* retention and purge batches */
	outbox_init();				/* inbox.outbox_retention */
	stats_init();				/* inbox.max_scopes, with the preload only */
	depth_init();				/* inbox.depth_scopes, with the preload only */
	worker_init();				/* purge_naptime and _enabled; the launcher */

	/* The counters a coordinator sums over the workers read this node's */
	distributed_init(inbox_stats_materialize, inbox_stats_forget);

	/* The hooks of every backend that loads the library */
	RegisterXactCallback(events_xact_callback, NULL);
	RegisterSubXactCallback(events_subxact_callback, NULL);
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = inbox_process_utility;
	prev_planner = planner_hook;
	planner_hook = inbox_planner;

	/* Shared memory exists only with the preload */
	if (process_shared_preload_libraries_in_progress)
	{
		prev_shmem_request = shmem_request_hook;
		shmem_request_hook = inbox_shmem_request;
		prev_shmem_startup = shmem_startup_hook;
		shmem_startup_hook = inbox_shmem_startup;
	}

	MarkGUCPrefixReserved("inbox");
}
