/*-------------------------------------------------------------------------
 *
 * priorities.c
 *	  Priorities of the deferred mode: the receives' priority arguments,
 *	  inbox.priority_age, and the take's walk of the messages above the
 *	  default priority (sql/inbox.sql, section 4, "Priorities").
 *
 * A message received with a priority above 0 keeps it in inbox.entries;
 * one of the default priority stores NULL, so that it, and every claim,
 * costs nothing.  The open messages above the default sit in a second
 * index of their own, entries_ranked (scope, priority, due, message_id),
 * besides entries_open, which holds every open message.  A take
 * (deferred.c) hands out, in this order:
 *
 *	1. messages of any priority due for longer than inbox.priority_age,
 *	   by due;
 *	2. the other due messages above the default, by priority, then due;
 *	3. the other due messages of the default priority, by due.
 *
 * So a message waits behind higher priorities for at most
 * inbox.priority_age; after that, only behind messages due before it.
 *
 * One statement runs the three steps (inbox_ranked_candidates).  Steps 1
 * and 3 scan entries_open from the scope's front (front.c), as a take
 * without priorities does.  Step 3 skips the pending messages above the
 * default, which step 2 has taken, locked by this statement, unless
 * another take holds them: what it passes over is what a scan of every
 * priority would pass over, so the front stays a bound for every
 * priority.  Hence step 1 runs only behind a front older than
 * inbox.priority_age, and step 2 reads no message due before that age.
 * A message above the default that was taken and lost (its lease ran
 * out, its session ended) comes back in step 1 or 3, by due, as any lost
 * message.
 *
 * Step 2 reads entries_ranked, which holds the pending messages above the
 * default.  It walks down the priorities present in the scope, one index
 * descent each in a recursive CTE, lazily, and reads at each level the
 * due messages in index order, until it has enough.  A level is read
 * only up to now, so what it reads past is the messages a concurrent take
 * holds, and the entries of messages taken since the leaf's last vacuum:
 * there is no front for the levels above the default.
 *
 * The statement runs only for a scope of which entries_ranked holds an
 * entry (inbox_ranked_in_scope): any other is taken from as without
 * priorities, at the cost of a relation lookup per take, and of one
 * descent of the index in a leaf where it ever held an entry.  On a
 * distributed inbox a priority is refused (distributed.c), so its leaves'
 * indexes stay empty here.
 *
 * src/priorities.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "storage/bufmgr.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "distributed.h"
#include "entries.h"
#include "inbox.h"
#include "priorities.h"
#include "spi.h"

/* inbox.priority_age, in seconds; 0: priorities are strict */
static int	priority_age = 3600;

/*
 * A take's candidates in a scope that has messages above the default, in
 * the three steps of the banner, each row with its step (pass): 1, when
 * $8 says the front ($4, $5) is older than $6 (now less
 * inbox.priority_age), the messages from it up to $6; 2, at each level
 * from the highest, the pending ones due after $6 up to $2 (now); 3, of
 * the default priority or taken and lost, from ($4, $5) or, after step 1,
 * ($7, '') up to $2.  At most $3
 * in all: an Append runs its branches in order and the LIMIT stops it, so
 * a later step runs only if the earlier ones left room.
 */
#define OPEN_STEP(columns, gate, low, low_id, until, filter) \
	" SELECT e.message_id, e.state, e.attempts, e.payload, e.payload_bytes, e.received_at, e.due" \
	columns \
	"  FROM inbox.entries_p%1$d e" \
	" WHERE " gate " e.scope = $1 AND e.state <> 'd' AND e.state <> 'x'" \
	"   AND (e.due, e.message_id) >= (" low ", " low_id ") AND e.due <= " until \
	"   AND " filter INBOX_TAKEABLE_SQL("e") \
	" ORDER BY e.due, e.message_id LIMIT $3 FOR UPDATE OF e SKIP LOCKED"

/*
 * The statement, with columns after the seven of deferred.c's candidates:
 * none, or the headers for the SQL whose takes return them (1.2.0 on).
 */
#define RANKED_SQL(columns) \
	"WITH RECURSIVE levels(p) AS (" \
	" SELECT (SELECT pg_catalog.max(x.priority) FROM inbox.entries_p%1$d x" \
	"         WHERE x.scope = $1 AND x.priority IS NOT NULL AND x.state = 'p')" \
	" UNION ALL" \
	" SELECT (SELECT pg_catalog.max(x.priority) FROM inbox.entries_p%1$d x" \
	"         WHERE x.scope = $1 AND x.priority < l.p AND x.state = 'p')" \
	"   FROM levels l WHERE l.p IS NOT NULL) " \
	"SELECT c.*, 1 AS pass FROM (" OPEN_STEP(columns, "$8 AND", "$4", "$5", "$6", "") ") c " \
	"UNION ALL " \
	"SELECT c.*, 2 FROM levels l JOIN LATERAL (" \
	" SELECT e.message_id, e.state, e.attempts, e.payload, e.payload_bytes, e.received_at, e.due" \
	columns \
	"  FROM inbox.entries_p%1$d e" \
	" WHERE e.scope = $1 AND e.priority = l.p AND e.state = 'p' AND e.due > $6 AND e.due <= $2" \
	" ORDER BY e.due, e.message_id LIMIT $3 FOR UPDATE OF e SKIP LOCKED) c ON true " \
	"UNION ALL " \
	"SELECT c.*, 3 FROM (" OPEN_STEP(columns, "", "CASE WHEN $8 THEN $7 ELSE $4 END", \
									  "CASE WHEN $8 THEN '' ELSE $5 END", "$2", \
									  "(e.priority IS NULL OR e.state = 'r') AND ") ") c " \
	"LIMIT $3"

static const InboxLeafStatement ranked_statements[2] = {
	{
		"candidates by priority",
		RANKED_SQL(""),
		{TEXTOID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, TEXTOID, TIMESTAMPTZOID,
		TIMESTAMPTZOID, BOOLOID}
	},
	{
		"candidates by priority with headers",
		RANKED_SQL(", e.headers"),
		{TEXTOID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, TEXTOID, TIMESTAMPTZOID,
		TIMESTAMPTZOID, BOOLOID}
	},
};

static SPIPlanPtr ranked_plans[2][INBOX_LEAVES];

void
priorities_init(void)
{
	DefineCustomIntVariable("inbox.priority_age",
							"How long a due message may wait behind higher priorities.",
							"A message due for longer is taken before every message that has not waited "
							"as long, whatever their priorities. 0 makes priorities strict.",
							&priority_age,
							3600,
							0, INT_MAX,
							PGC_USERSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);
}

/* inbox.priority_age in microseconds; 0: priorities are strict */
int64
inbox_priority_age(void)
{
	return (int64) priority_age * USECS_PER_SEC;
}

/*
 * A priority named argname: between 0 and INBOX_MAX_PRIORITY.  A priority
 * above the default is refused on a distributed inbox, before anything is
 * written.
 */
int
inbox_check_priority(int32 value, const char *argname)
{
	if (value < 0 || value > INBOX_MAX_PRIORITY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be between 0 and %d", argname, INBOX_MAX_PRIORITY),
				 errdetail("It is %d.", value),
				 errhint("0, the default, is the lowest priority; a take hands out higher ones first.")));
	if (value > 0)
		inbox_refuse_if_distributed(INBOX_REFUSE_PRIORITIES);
	return value;
}

/* The priority argument argno: 0 when the call has none or passes NULL */
int
inbox_priority_arg(FunctionCallInfo fcinfo, int argno)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return 0;
	return inbox_check_priority(PG_GETARG_INT32(argno), "priority");
}

/*
 * Whether the scope, in leaf, may have a message above the default
 * priority: whether the leaf's entries_ranked has ever held an entry (an
 * empty btree has only its metapage, and its root is never truncated),
 * and then whether it has one of the scope, alive or not yet vacuumed
 * away, which one descent of the index tells, without the heap.  False on
 * a database whose SQL has no priorities yet.  A message above the
 * default committed after this look is taken among those of the default,
 * in due order, by a take that looked before.
 */
bool
inbox_ranked_in_scope(int leaf, text *scope)
{
	char		name[NAMEDATALEN];
	Oid			relid;
	Relation	index;
	Relation	heap;
	IndexScanDesc scan;
	ScanKeyData key;
	bool		found;

	snprintf(name, sizeof(name), "entries_p%d_scope_priority_due_message_id_idx", leaf);
	relid = inbox_relid(name);
	if (!OidIsValid(relid))
		return false;
	index = index_open(relid, AccessShareLock);
	if (RelationGetNumberOfBlocks(index) <= 1)
	{
		index_close(index, NoLock);
		return false;
	}
	heap = table_open(index->rd_index->indrelid, AccessShareLock);
	ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_TEXTEQ, PointerGetDatum(scope));
	key.sk_collation = C_COLLATION_OID;
	scan = inbox_index_beginscan(heap, index, SnapshotAny, 1);
	index_rescan(scan, &key, 1, NULL, 0);
	found = index_getnext_tid(scan, ForwardScanDirection) != NULL;
	index_endscan(scan);
	table_close(heap, NoLock);
	index_close(index, NoLock);
	return found;
}

/*
 * The statement for a take of at most limit messages at now, in the scope
 * in leaf, from the scope's front (low, low_id): see above.  aged is now
 * less inbox.priority_age, or DT_NOBEGIN when priorities are strict;
 * aged_first says whether the front is older than aged.  Fills values
 * (RANKED_NARGS of them) and returns the kept plan, and in *name the
 * statement's name; its rows are the candidates, in the columns of
 * deferred.c's (with headers, their headers) and their step last.
 */
SPIPlanPtr
inbox_ranked_candidates(int leaf, text *scope, TimestampTz now, int limit, TimestampTz low,
						text *low_id, TimestampTz aged, bool aged_first, bool headers,
						Datum *values, const char **name)
{
	values[0] = PointerGetDatum(scope);
	values[1] = TimestampTzGetDatum(now);
	values[2] = Int32GetDatum(limit);
	values[3] = TimestampTzGetDatum(low);
	values[4] = PointerGetDatum(low_id);
	values[5] = TimestampTzGetDatum(aged);
	/* step 3 after step 1: right after its span */
	values[6] = TimestampTzGetDatum(aged_first ? aged + 1 : low);
	values[7] = BoolGetDatum(aged_first);
	*name = ranked_statements[headers].name;
	return inbox_leaf_plan(&ranked_statements[headers], ranked_plans[headers], leaf);
}
