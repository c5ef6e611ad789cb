/*-------------------------------------------------------------------------
 *
 * distributed.c
 *	  Whether inbox.entries is a table distributed by Citus, the one list
 *	  of what the extension refuses to do on such a table, and why, and
 *	  the counters of the whole cluster, read and forgotten on every node.
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
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/pg_class.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "parser/parsetree.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "distributed.h"
#include "inbox.h"
#include "spi.h"

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
	[INBOX_REFUSE_ONE_ROW_FROM] = {
		"call a delegated function with a FROM clause of one row",
		"Citus 13 delegates such a call to a worker, and its deparser then crashes the coordinator (a "
		"subquery without FROM, or VALUES of one row, that the planner flattened).",
		"Call it without FROM, as SELECT inbox_claim($1, $2, $3), with parameters for the values."
	},
	[INBOX_REFUSE_SESSION_SETTING] = {
		"call a delegated function under a session's inbox.on_duplicate or inbox.claim_timeout",
		"Citus runs the call on the worker that holds the scope, whose backend does not see a setting made by "
		"SET in this session: a duplicate would return false where this session expects IB001, or a claim "
		"would wait without this session's bound.",
		"Give the setting to the role (ALTER ROLE ... SET), which Citus propagates to every node; or, in a "
		"transaction, SET LOCAL it after SET LOCAL citus.propagate_set_commands = 'local'."
	},
	[INBOX_REFUSE_PURGE_ON_WORKER] = {
		"purge on a Citus worker (inbox_purge)",
		"The coordinator keeps the scopes' retention clocks and overrides, and purges every shard; this "
		"worker's inbox.scopes is not theirs, and a purge here would apply the wrong retention.",
		"Run inbox_purge() on the coordinator, or let its purge worker run."
	},
	[INBOX_REFUSE_CONTENT_WINDOW] = {
		"keep a content window (inbox_set_content_window)",
		"A scope's window and the contents it has seen live in inbox.scopes and inbox.content_window on the "
		"coordinator, while a claim delegated to the worker that holds the scope's shard runs there and would "
		"read neither: the window would let resent content through unseen.",
		"Leave content windows off on a distributed inbox, or turn them off (inbox_set_content_window(scope, "
		"NULL, 'off')) before inbox_distribute()."
	},
	[INBOX_REFUSE_OUTBOX] = {
		"use the outbox (outbox_send, outbox_fetch and their kin) beside a distributed inbox",
		"The outbox's tables are local to the coordinator: a send there is not part of the single-shard "
		"write of the business row it must commit with, and a key's order would not follow the commits "
		"made on the workers.",
		"Use the outbox in a database whose inbox is not distributed; docs/scale-out.md says more."
	},
	[INBOX_REFUSE_GROUPS] = {
		"receive into an ordered group (group_key)",
		"The groups' tables are local to the coordinator: the release of a group's head and the due of "
		"its next message would not commit with the entries they order, which live on the workers.",
		"Receive without group_key, or keep the ordered scopes in a database whose inbox is not "
		"distributed; docs/scale-out.md says more."
	},
	[INBOX_REFUSE_PRIORITIES] = {
		"receive with a priority above 0",
		"A take reads the messages above the default priority with a recursive query over the entries; "
		"on a distributed inbox the takes run only statements proven to route to the scope's shard, "
		"and that one is not among them.",
		"Receive without priority, or keep the prioritized scopes in a database whose inbox is not "
		"distributed; docs/scale-out.md says more."
	},
};

/* -1: not known yet; else whether inbox.entries is distributed */
static int	entries_distributed = -1;

/* -1: not known yet; else whether Citus's catalogs exist in this database */
static int	citus_installed = -1;
static bool callback_registered = false;

static void
forget_answer(Datum arg, Oid relid)
{
	entries_distributed = -1;
	citus_installed = -1;
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

static void
register_callback(void)
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
}

bool
inbox_entries_distributed(void)
{
	register_callback();
	if (entries_distributed < 0)
		entries_distributed = lookup() ? 1 : 0;
	return entries_distributed == 1;
}

/*
 * Whether Citus is installed in this database, distributing inbox.entries
 * or not: on a worker, a leaf may be a shell whose rows live in shards,
 * so only statements that Citus plans may touch it (direct.c).
 */
bool
inbox_citus_installed(void)
{
	register_callback();
	if (citus_installed < 0)
		citus_installed =
			OidIsValid(get_relname_relid("pg_dist_partition", PG_CATALOG_NAMESPACE)) ? 1 : 0;
	return citus_installed == 1;
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
 * inbox.refuse_if_distributed(what text): the refusals for the functions
 * written in SQL, by name
 */
PG_FUNCTION_INFO_V1(inbox_refuse_if_distributed_sql);

Datum
inbox_refuse_if_distributed_sql(PG_FUNCTION_ARGS)
{
	char	   *what = text_to_cstring(PG_GETARG_TEXT_PP(0));

	if (strcmp(what, "content_window") == 0)
		inbox_refuse_if_distributed(INBOX_REFUSE_CONTENT_WINDOW);
	else
		elog(ERROR, "unknown refusal \"%s\"", what);
	PG_RETURN_VOID();
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

/* ------------------------------------------------------------------------
 * A guard against a crash in Citus
 *
 * Citus 13.2 crashes the coordinator's backend, and with it every session
 * of the server, when it delegates a distributed function called with a
 * FROM clause that the planner flattens into one row:
 * SELECT inbox_claim(...) FROM (SELECT 1) AS s, or FROM (VALUES (...)) of
 * one row.  Its delegation deparses the planned query, whose subquery the
 * planner emptied.  Any distributed function trips it, not only the
 * inbox's.  inbox_distribute() distributes the API's entry points, so the
 * planner hook (init.c), which runs before Citus's, refuses those forms
 * of a call of them with an error instead.  It looks at a query only when it has
 * that shape, so the cost elsewhere is a few pointer tests.
 * ------------------------------------------------------------------------
 */
/*
 * True if the query's FROM is one row that needs no table: no FROM at all,
 * VALUES of one row, or a subquery of such, at any depth.
 */
static bool
flattens_to_one_row(Query *query)
{
	FromExpr   *jointree = query->jointree;
	Node	   *item;
	RangeTblEntry *rte;

	if (jointree == NULL || jointree->fromlist == NIL)
		return true;
	if (list_length(jointree->fromlist) != 1)
		return false;
	item = linitial(jointree->fromlist);
	if (!IsA(item, RangeTblRef))
		return false;
	rte = rt_fetch(((RangeTblRef *) item)->rtindex, query->rtable);
	if (rte->rtekind == RTE_VALUES)
		return list_length(rte->values_lists) == 1;
	if (rte->rtekind == RTE_SUBQUERY)
		return flattens_to_one_row(rte->subquery);
	return false;
}

/* Whether funcid is a function of extension inbox that Citus distributed */
static bool
delegated_inbox_function(Oid funcid)
{
	Oid			inbox = get_extension_oid("inbox", true);
	Oid			dist;
	Relation	rel;
	ScanKeyData keys[2];
	SysScanDesc scan;
	bool		found;

	if (!OidIsValid(inbox) || getExtensionOfObject(ProcedureRelationId, funcid) != inbox)
		return false;
	dist = get_relname_relid("pg_dist_object", PG_CATALOG_NAMESPACE);
	if (!OidIsValid(dist))
		return false;
	/* Its columns classid and objid, the object's address */
	rel = table_open(dist, AccessShareLock);
	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(ProcedureRelationId));
	ScanKeyInit(&keys[1], 2, BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(funcid));
	scan = systable_beginscan(rel, InvalidOid, false, NULL, 2, keys);
	found = HeapTupleIsValid(systable_getnext(scan));
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return found;
}

static bool
calls_delegated_function(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (IsA(node, FuncExpr) && delegated_inbox_function(((FuncExpr *) node)->funcid))
		return true;
	if (IsA(node, Query))
		return query_tree_walker((Query *) node, calls_delegated_function, context, 0);
	return expression_tree_walker(node, calls_delegated_function, context);
}

/*
 * True if Citus may delegate the query's function call: a SELECT without
 * WHERE, and without FROM or FROM one function (what Citus's
 * TryToDelegateFunctionCall looks for).
 */
static bool
may_be_delegated(Query *parse)
{
	FromExpr   *jointree = parse->jointree;
	Node	   *item;

	if (jointree == NULL || jointree->quals != NULL)
		return false;
	if (jointree->fromlist == NIL)
		return true;
	if (list_length(jointree->fromlist) != 1)
		return false;
	item = linitial(jointree->fromlist);
	return IsA(item, RangeTblRef) &&
		rt_fetch(((RangeTblRef *) item)->rtindex, parse->rtable)->rtekind == RTE_FUNCTION;
}

/*
 * True if this session changed setting name from the value a new backend
 * of this role starts with, in a way that Citus does not carry to the
 * workers.  A SET LOCAL under citus.propagate_set_commands = 'local'
 * reaches them; so does ALTER ROLE ... SET, which is part of the value a
 * backend starts with.  (On a worker, which runs the delegated call with
 * the SET LOCAL it received, the check is not made.)
 */
static bool
setting_stays_here(const char *name)
{
	const char *current = GetConfigOption(name, true, false);
	const char *reset = GetConfigOptionResetString(name);
	const char *propagate;

	if (current == NULL || reset == NULL || strcmp(current, reset) == 0)
		return false;
	propagate = GetConfigOption("citus.propagate_set_commands", true, false);
	if (propagate != NULL && strcmp(propagate, "local") == 0 && IsTransactionBlock())
		return false;
	return true;
}

/*
 * The planner hook's check (init.c): refuse, before Citus plans it, a
 * query that would make Citus crash or drop a session's setting.
 */
void
inbox_guard_planned_query(Query *parse)
{
	/* Whether inbox.entries is distributed is a cached answer: it goes first */
	if (parse->commandType != CMD_SELECT || !inbox_entries_distributed())
		return;

	/* Citus looks only at a SELECT without WHERE over one FROM item */
	if (parse->jointree != NULL && parse->jointree->quals == NULL &&
		parse->jointree->fromlist != NIL && flattens_to_one_row(parse) &&
		calls_delegated_function((Node *) parse->targetList, NULL))
		inbox_refuse_if_distributed(INBOX_REFUSE_ONE_ROW_FROM);

	/*
	 * The settings first: they are string comparisons, and almost always
	 * equal, so the query is walked only when one differs.
	 */
	if ((setting_stays_here("inbox.on_duplicate") ||
		 setting_stays_here("inbox.claim_timeout")) &&
		may_be_delegated(parse) &&
		calls_delegated_function((Node *) parse, NULL) &&
		!inbox_citus_worker_node())
		inbox_refuse_if_distributed(INBOX_REFUSE_SESSION_SETTING);
}

/* ------------------------------------------------------------------------
 * The counters of the whole cluster
 *
 * The counters behind inbox_stats (stats.c) live in each node's shared
 * memory, and a call is counted where it runs: a delegated claim on the
 * worker that holds its scope; a receive, a failure, a stream claim or a
 * purge on the coordinator.  On the coordinator of a distributed inbox,
 * inbox.scope_counters() therefore sums, per scope, this node's counters
 * and those of every active primary worker, which inbox.node_counters()
 * reads there; and inbox.forget_counters() (inbox_stats_reset,
 * inbox_drop_scope) forgets on every worker too.  Citus's
 * master_run_on_worker reaches each worker over a connection of its own,
 * as the extension's owner (the role querying inbox_stats has no access to
 * schema inbox).  A worker that does not answer is an error, never a
 * smaller count.  Everywhere else, on one node and on a worker, both are
 * this node's alone, after the cached test above.
 *
 * stats.c is a layer above this file: _PG_init hands over its functions.
 * ------------------------------------------------------------------------
 */
static InboxReadCounters read_node_counters = NULL;
static InboxForgetCounters forget_node_counters = NULL;

PG_FUNCTION_INFO_V1(inbox_cluster_counters);
PG_FUNCTION_INFO_V1(inbox_forget_cluster_counters);

void
distributed_init(InboxReadCounters read, InboxForgetCounters forget)
{
	read_node_counters = read;
	forget_node_counters = forget;
}

/*
 * $1 run on every active primary worker of this cluster (the coordinator's
 * group is 0), in parallel: one row per worker.  Without workers, the
 * arrays are NULL and the function, strict, returns no row.
 */
static const char *const run_on_workers_sql =
"SELECT w.node_name, w.node_port, w.success, w.result"
"  FROM (SELECT pg_catalog.array_agg(n.nodename ORDER BY n.nodeid) AS names,"
"               pg_catalog.array_agg(n.nodeport ORDER BY n.nodeid) AS ports,"
"               pg_catalog.array_agg($1 ORDER BY n.nodeid) AS commands"
"          FROM pg_catalog.pg_dist_node AS n"
"         WHERE n.groupid OPERATOR(pg_catalog.<>) 0 AND n.isactive"
"           AND n.noderole OPERATOR(pg_catalog.=) 'primary'"
"           AND n.nodecluster OPERATOR(pg_catalog.=) pg_catalog.current_setting('citus.cluster_name')) AS l"
" CROSS JOIN LATERAL pg_catalog.master_run_on_worker(l.names, l.ports, l.commands, true) AS w";

/* What a worker returns: its counters, as a JSON array of rows */
static const char *const node_counters_command =
"SELECT COALESCE(pg_catalog.json_agg(c), '[]')::pg_catalog.text FROM inbox.node_counters() AS c";

/* This node's counters and the workers' ($1), summed per scope */
static const char *const sum_counters_sql =
"SELECT c.scope, pg_catalog.sum(c.claims)::pg_catalog.int8, pg_catalog.sum(c.duplicates)::pg_catalog.int8,"
"       pg_catalog.sum(c.mismatches)::pg_catalog.int8, pg_catalog.sum(c.purged)::pg_catalog.int8,"
"       pg_catalog.max(c.last_purge), pg_catalog.sum(c.failures)::pg_catalog.int8"
"  FROM (SELECT n.scope, n.claims, n.duplicates, n.mismatches, n.purged, n.last_purge, n.failures"
"          FROM inbox.node_counters() AS n"
"        UNION ALL"
"        SELECT x.scope, x.claims, x.duplicates, x.mismatches, x.purged, x.last_purge, x.failures"
"          FROM pg_catalog.unnest($1) AS r(counters),"
"               pg_catalog.json_to_recordset(r.counters::pg_catalog.json)"
"                 AS x(scope pg_catalog.text, claims pg_catalog.int8, duplicates pg_catalog.int8,"
"                      mismatches pg_catalog.int8, purged pg_catalog.int8,"
"                      last_purge pg_catalog.timestamptz, failures pg_catalog.int8)) AS c"
" GROUP BY c.scope";

/* True on the coordinator (or a node with its role) of a distributed inbox */
static bool
sums_the_cluster(void)
{
	return inbox_entries_distributed() && !inbox_citus_worker_node();
}

typedef struct AsEntriesOwner
{
	Oid			save_userid;
	int			save_sec_context;
} AsEntriesOwner;

/*
 * Become the owner of inbox.entries, the extension's owner, for the
 * connections to the workers, in an SPI connection; an error restores the
 * role by the transaction's abort.
 */
static void
as_entries_owner_begin(AsEntriesOwner *as)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(inbox_relid("entries")));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for table inbox.entries");
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	GetUserIdAndSecContext(&as->save_userid, &as->save_sec_context);
	SetUserIdAndSecContext(owner, as->save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	inbox_spi_connect();
}

static void
as_entries_owner_end(AsEntriesOwner *as)
{
	SPI_finish();
	SetUserIdAndSecContext(as->save_userid, as->save_sec_context);
}

/*
 * Run command on every worker, inside as_entries_owner_begin/_end; raise
 * if one of them fails.  Returns their results, a text[] in SPI's memory.
 */
static Datum
run_on_workers(const char *command, const char *what)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(command)};
	uint64		n = inbox_execute(run_on_workers_sql, 1, argtypes, values, NULL, SPI_OK_SELECT);
	Datum	   *results = palloc(sizeof(Datum) * (n > 0 ? n : 1));

	for (uint64 i = 0; i < n; i++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *result = SPI_getvalue(tuple, desc, 4);
		bool		isnull;

		if (!DatumGetBool(SPI_getbinval(tuple, desc, 3, &isnull)))
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("inbox could not %s on Citus worker %s:%s",
							what, SPI_getvalue(tuple, desc, 1), SPI_getvalue(tuple, desc, 2)),
					 errdetail("%s", result != NULL ? result : "The worker gave no reason."),
					 errhint("Every active worker must be reachable from the coordinator, as the "
							 "extension's owner, with the extension at the coordinator's version.")));
		results[i] = CStringGetTextDatum(result != NULL ? result : "");
	}
	return PointerGetDatum(construct_array(results, (int) n, TEXTOID, -1, false, TYPALIGN_INT));
}

/* The cluster's counters, per scope, into the caller's result set */
static void
sum_cluster_counters(FunctionCallInfo fcinfo)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	AsEntriesOwner as;
	Oid			argtypes[1] = {TEXTARRAYOID};
	Datum		values[1];
	uint64		n;

	InitMaterializedSRF(fcinfo, 0);
	if (rsinfo->setDesc->natts != 7)
		elog(ERROR, "inbox counters: the function must return 7 columns");

	as_entries_owner_begin(&as);
	values[0] = run_on_workers(node_counters_command, "read the counters");
	n = inbox_execute(sum_counters_sql, 1, argtypes, values, NULL, SPI_OK_SELECT);
	for (uint64 i = 0; i < n; i++)
	{
		Datum		row[7];
		bool		nulls[7];

		for (int col = 0; col < 7; col++)
			row[col] = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, col + 1,
									 &nulls[col]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, row, nulls);
	}
	as_entries_owner_end(&as);
}

/*
 * inbox.scope_counters() -> SETOF (scope, claims, ..., failures): the
 * counters inbox_stats shows, those of the whole cluster on the
 * coordinator of a distributed inbox, else this node's.
 */
Datum
inbox_cluster_counters(PG_FUNCTION_ARGS)
{
	Assert(read_node_counters != NULL);
	if (sums_the_cluster())
		sum_cluster_counters(fcinfo);
	else
		read_node_counters(fcinfo);
	return (Datum) 0;
}

/*
 * inbox.forget_counters(scope text) -> void: forget the counters of one
 * scope of this database, or of all its scopes when NULL; on the
 * coordinator of a distributed inbox, on every worker too.
 */
Datum
inbox_forget_cluster_counters(PG_FUNCTION_ARGS)
{
	const char *scope = PG_ARGISNULL(0) ? NULL : TextDatumGetCString(PG_GETARG_DATUM(0));

	Assert(forget_node_counters != NULL);
	forget_node_counters(MyDatabaseId, scope);
	if (sums_the_cluster())
	{
		AsEntriesOwner as;

		as_entries_owner_begin(&as);
		(void) run_on_workers(psprintf("SELECT inbox.forget_node_counters(%s)",
									   scope != NULL ? quote_literal_cstr(scope) : "NULL"),
							  "forget the counters");
		as_entries_owner_end(&as);
	}
	PG_RETURN_VOID();
}
