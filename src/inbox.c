/*-------------------------------------------------------------------------
 *
 * inbox.c
 *	  Entry point of the inbox extension: module magic, _PG_init and the
 *	  settings (GUCs) that callers use to choose how a claim behaves.
 *
 * _PG_init stays thin on purpose: it defines the settings and asks each
 * subsystem to set itself up.  Claims need nothing else; shared memory for
 * the counters and the retention launcher exist only when the library is
 * in shared_preload_libraries.
 *
 * src/inbox.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "compat.h"
#include "inbox.h"
#include "stats.h"
#include "worker.h"

PG_MODULE_MAGIC;

/* inbox.on_duplicate: what a committed duplicate does */
int			inbox_on_duplicate = INBOX_ON_DUPLICATE_RETURN;

/* inbox.claim_timeout: longest wait for a concurrent claim, 0 = no limit */
int			inbox_claim_timeout = 0;

/* Retention; see sql/inbox--0.1.0--0.2.0.sql for the clock they drive */
int			inbox_retention = 7 * 24 * 3600;
int			inbox_idle_threshold = 3600;
int			inbox_purge_batch_size = 10000;
int			inbox_purge_naptime = 10;
bool		inbox_purge_enabled = true;
int			inbox_purge_lock_timeout = 200;
int			inbox_max_scopes = 1000;

/* Deferred mode: takes before a message is dead */
int			inbox_max_attempts = 5;

static const struct config_enum_entry on_duplicate_options[] = {
	{"return", INBOX_ON_DUPLICATE_RETURN, false},
	{"raise", INBOX_ON_DUPLICATE_RAISE, false},
	{NULL, 0, false}
};

void		_PG_init(void);

void
_PG_init(void)
{
	/*
	 * Both settings are PGC_USERSET: they describe how one consumer wants its
	 * duplicates reported, so they belong to the session, role, database or
	 * a SET LOCAL around one transaction.
	 */
	DefineCustomEnumVariable("inbox.on_duplicate",
							 "What inbox_claim does when the message was already processed.",
							 "\"return\" makes it return false; \"raise\" raises SQLSTATE IB001.",
							 &inbox_on_duplicate,
							 INBOX_ON_DUPLICATE_RETURN,
							 on_duplicate_options,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("inbox.claim_timeout",
							"Longest time inbox_claim waits for a concurrent, uncommitted claim of the same message.",
							"When the wait exceeds it the claim fails with SQLSTATE IB003. "
							"0 waits until the other transaction ends (or lock_timeout expires).",
							&inbox_claim_timeout,
							0,
							0, INT_MAX,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	/*
	 * Retention settings are PGC_SUSET so that they can be set per database
	 * (ALTER DATABASE) as well as for the cluster (ALTER SYSTEM); each purge
	 * pass runs in a fresh connection, so it sees both.  Only the launcher's
	 * nap is cluster-wide.
	 */
	DefineCustomIntVariable("inbox.retention",
							"How long a scope must have been active before its entries are purged.",
							"Active time excludes pauses: see inbox.idle_threshold. "
							"inbox_set_retention() overrides it per scope.",
							&inbox_retention,
							7 * 24 * 3600,
							1, INT_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("inbox.idle_threshold",
							"Silence after which a scope's retention clock pauses.",
							"The clock keeps running this long after a scope's last new claim, "
							"then stops until the next new claim.",
							&inbox_idle_threshold,
							3600,
							1, INT_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("inbox.purge_batch_size",
							"Most entries the purge deletes from one partition in one transaction.",
							NULL,
							&inbox_purge_batch_size,
							10000,
							1, 1000000,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("inbox.purge_naptime",
							"Time between two purge passes over every database.",
							NULL,
							&inbox_purge_naptime,
							10,
							1, 24 * 3600,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("inbox.purge_enabled",
							 "Whether the background worker purges expired entries.",
							 "inbox_purge() works whatever this says.",
							 &inbox_purge_enabled,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("inbox.purge_lock_timeout",
							"Longest time a purge batch waits for a lock before it gives up.",
							"The purge never makes claims wait: it backs off instead. Keep it "
							"below deadlock_timeout, so that in a lock cycle with DDL (DROP "
							"EXTENSION, say) the purge gives up before the DDL is chosen as victim.",
							&inbox_purge_lock_timeout,
							200,
							1, 600000,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("inbox.max_attempts",
							"Takes of a deferred message before it is dead.",
							"A take counts as an attempt whether the worker fails it or is lost. "
							"inbox_set_max_attempts() overrides it per scope.",
							&inbox_max_attempts,
							5,
							1, 1000,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	/* Sizing shared memory: only meaningful, and only defined, at preload */
	if (process_shared_preload_libraries_in_progress)
		DefineCustomIntVariable("inbox.max_scopes",
								"Most (database, scope) pairs the shared-memory counters track.",
								"Scopes beyond it are still claimed and purged, but not counted.",
								&inbox_max_scopes,
								1000,
								100, 1000000,
								PGC_POSTMASTER,
								0,
								NULL, NULL, NULL);

	MarkGUCPrefixReserved("inbox");

	if (process_shared_preload_libraries_in_progress)
	{
		inbox_stats_init();
		inbox_worker_init();
	}
}
