/*-------------------------------------------------------------------------
 *
 * distributed.c
 *	  Whether inbox.entries is a table distributed by Citus, and the one
 *	  list of what the extension refuses to do on such a table, and why.
 *
 * On Citus, inbox.entries may be distributed by scope and co-located with
 * the business tables (docs/scale-out.md).  Each statement of the
 * extension then runs on the worker that holds the scope's shard.  Most of
 * the API works unchanged there; what cannot work, because it needs state
 * that only the node running the session has, or a statement Citus cannot
 * plan, is refused here with an error that says so, rather than failing
 * with a planner error from deep inside Citus or, worse, succeeding with a
 * wrong answer.
 *
 * The answer is cached per backend and dropped by the relation cache
 * invalidation that Citus sends for a table it distributes or undistributes
 * (and by any invalidation of the whole cache), so the check costs a
 * memory read on the paths that make it.
 *
 * src/distributed.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/pg_namespace.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/rel.h"

#include "distributed.h"
#include "inbox.h"

/* What cannot run on a distributed inbox.entries, and why: one entry each */
typedef struct Refusal
{
	const char *what;			/* what cannot be done, and by which API */
	const char *why;			/* the errdetail */
	const char *hint;			/* the errhint, or NULL */
} Refusal;

static const Refusal refusals[] = {
	[INBOX_REFUSE_SESSION_TAKE] = {
		"take messages bound to a session (inbox_take, or inbox_poll without a lease)",
		"Such a take trusts the liveness of the session that holds each message, and only the node that runs "
		"that session can see it: the take's query runs on the worker that holds the scope's shard, where "
		"every owner would look dead and its messages would be handed out again.",
		"Use inbox_poll with a lease, and complete, fail or extend by its receipt."
	},
	[INBOX_REFUSE_CLAIM_TIMEOUT] = {
		"bound a claim's wait (inbox.claim_timeout) on the coordinator",
		"This claim runs on the coordinator, and waits for a concurrent claim of the same message on the "
		"worker that holds the scope's shard, where this session's timeout does not apply: the claim would "
		"wait without bound.",
		"Call the claim as a statement of its own (SELECT inbox_claim(...)), which inbox_distribute() has "
		"Citus delegate to the worker, and give the timeout to that worker with SET LOCAL under "
		"citus.propagate_set_commands = 'local', or ALTER ROLE ... SET; or set inbox.claim_timeout to 0."
	},
};

/* -1: not known yet; else whether inbox.entries is distributed */
static int	entries_distributed = -1;
static bool callback_registered = false;

static void
forget_answer(Datum arg, Oid relid)
{
	entries_distributed = -1;
}

/*
 * Look for inbox.entries in Citus's pg_dist_partition, the list of
 * distributed tables.  Without Citus there is no such catalog, and the
 * answer is no.
 */
static bool
lookup(void)
{
	Oid			entries = inbox_relid("entries");
	Oid			dist;
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	bool		found;

	if (!OidIsValid(entries))
		return false;
	dist = get_relname_relid("pg_dist_partition", PG_CATALOG_NAMESPACE);
	if (!OidIsValid(dist))
		return false;

	/* Its first column, logicalrelid, is the table's OID */
	rel = table_open(dist, AccessShareLock);
	ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(entries));
	scan = systable_beginscan(rel, InvalidOid, false, NULL, 1, &key);
	found = HeapTupleIsValid(systable_getnext(scan));
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return found;
}

bool
inbox_entries_distributed(void)
{
	if (!callback_registered)
	{
		/*
		 * Any relation's invalidation drops the answer, not only that of
		 * inbox.entries: its OID changes when the extension is re-created,
		 * and recomputing is a scan of a catalog of a few rows.
		 */
		CacheRegisterRelcacheCallback(forget_answer, (Datum) 0);
		callback_registered = true;
	}
	if (entries_distributed < 0)
		entries_distributed = lookup() ? 1 : 0;
	return entries_distributed == 1;
}

void
inbox_refuse_if_distributed(InboxRefusal which)
{
	const Refusal *r;

	if (!inbox_entries_distributed())
		return;
	r = &refusals[which];
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("inbox cannot %s when inbox.entries is distributed by Citus", r->what),
			 errdetail("%s", r->why),
			 r->hint ? errhint("%s", r->hint) : 0));
}

/*
 * True on a Citus worker whose inbox.entries is a distributed table: a
 * node other than the coordinator (its group, in Citus's
 * pg_dist_local_group, is not 0).
 */
bool
inbox_citus_worker_node(void)
{
	Oid			local_group;
	Relation	rel;
	SysScanDesc scan;
	HeapTuple	tuple;
	bool		worker = false;

	if (!inbox_entries_distributed())
		return false;
	local_group = get_relname_relid("pg_dist_local_group", PG_CATALOG_NAMESPACE);
	if (!OidIsValid(local_group))
		return false;
	rel = table_open(local_group, AccessShareLock);
	scan = systable_beginscan(rel, InvalidOid, false, NULL, 0, NULL);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		bool		isnull;
		Datum		group = heap_getattr(tuple, 1, RelationGetDescr(rel), &isnull);

		worker = !isnull && DatumGetInt32(group) != 0;
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return worker;
}
