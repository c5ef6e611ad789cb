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
 *	1. messages above the default that have been due for longer than
 *	   inbox.priority_age, by priority, then due;
 *	2. messages of the default priority due that long, by due;
 *	3. the other due messages above the default, by priority, then due;
 *	4. the other due messages of the default priority, by due.
 *
 * So a message waits behind higher priorities for at most
 * inbox.priority_age; after that, only behind messages that have waited
 * as long.  Steps 2 and 4 are the take's scan of entries_open from the
 * scope's front (front.c), as without priorities: steps 1 and 3 took the
 * takeable messages above the default in the same spans, so these scans
 * find messages of the default priority, and pass over the others, which
 * are in flight or held by a concurrent take, as they would in a scope
 * without priorities.  Steps 1 and 3 are one statement,
 * inbox_ranked_candidates: a walk down the
 * priorities present in the scope (one index descent each, in a recursive
 * CTE), which reads at each level the due messages of the step's span, in
 * index order, and stops as soon as it has enough.  The index holds only
 * open messages and a level is read only up to now, so what the walk
 * reads past is the messages in flight, those a concurrent take holds,
 * and the index entries of messages done since the leaf's last vacuum:
 * there is no front for the levels above the default.
 *
 * Those steps run only in a leaf whose entries_ranked has ever held an
 * entry: an empty btree has only its metapage, and its root is never
 * truncated.  A scope in such a leaf that has no message above the
 * default pays step 1's statement, which finds no level and says so; a
 * database that never received a priority pays a relation lookup per
 * take, and no statement.  On a distributed inbox a priority is refused
 * (distributed.c), so its leaves' indexes stay empty here.
 *
 * src/priorities.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "storage/bufmgr.h"
#include "utils/guc.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "distributed.h"
#include "entries.h"
#include "inbox.h"
#include "priorities.h"
#include "spi.h"

/* inbox.priority_age, in seconds; 0: priorities are strict */
static int	priority_age = 3600;

/*
 * The due messages above the default priority of a span (after, until],
 * highest priority first, then by due, at most $3.  With no such message
 * in the scope at all, one row of NULLs (levels.n = 1, p NULL).  $5 is now,
 * for the leases, which the span's end may precede.  The filters are those
 * of deferred.c's candidates.
 */
static const InboxLeafStatement ranked_statement = {
	"ranked candidates",
	"WITH RECURSIVE levels(p, n) AS ("
	" SELECT (SELECT pg_catalog.max(x.priority) FROM inbox.entries_p%1$d x"
	"         WHERE x.scope = $1 AND x.priority IS NOT NULL AND x.state <> 'd' AND x.state <> 'x'), 1"
	" UNION ALL"
	" SELECT (SELECT pg_catalog.max(x.priority) FROM inbox.entries_p%1$d x"
	"         WHERE x.scope = $1 AND x.priority < l.p AND x.state <> 'd' AND x.state <> 'x'), l.n + 1"
	"   FROM levels l WHERE l.p IS NOT NULL) "
	"SELECT c.message_id, c.state, c.attempts, c.payload, c.payload_bytes, c.received_at, c.due "
	"FROM levels l LEFT JOIN LATERAL ("
	" SELECT e.message_id, e.state, e.attempts, e.payload, e.payload_bytes, e.received_at, e.due"
	"  FROM inbox.entries_p%1$d e"
	" WHERE e.scope = $1 AND e.priority = l.p AND e.due > $4 AND e.due <= $2"
	"   AND e.state <> 'd' AND e.state <> 'x'"
	"   AND (e.state = 'p' OR e.lease_until < $5"
	"        OR ((e.receipt IS NULL OR e.lease_until IS NULL) AND NOT inbox.session_alive(e.owner_session)))"
	" ORDER BY e.due, e.message_id"
	" LIMIT $3"
	" FOR UPDATE OF e SKIP LOCKED) c ON true "
	"WHERE c.message_id IS NOT NULL OR (l.n = 1 AND l.p IS NULL) "
	"LIMIT $3",
	{TEXTOID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

static SPIPlanPtr ranked_plans[INBOX_LEAVES];

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
 * Whether the leaf's entries_ranked has ever held an entry (see the
 * banner).  False on a database whose SQL has no priorities yet.
 */
bool
inbox_ranked_in_use(int leaf)
{
	char		name[NAMEDATALEN];
	Oid			relid;
	Relation	rel;
	BlockNumber pages;

	snprintf(name, sizeof(name), "entries_p%d_scope_priority_due_message_id_idx", leaf);
	relid = inbox_relid(name);
	if (!OidIsValid(relid))
		return false;
	rel = index_open(relid, AccessShareLock);
	pages = RelationGetNumberOfBlocks(rel);
	index_close(rel, NoLock);
	return pages > 1;
}

/*
 * Run the statement for the span (after, until] of the scope in leaf:
 * SPI_tuptable then holds the candidates, in the columns of deferred.c's.
 * Returns how many, or -1 when the scope has no open message above the
 * default priority (and SPI_tuptable is freed).
 */
int64
inbox_ranked_candidates(int leaf, text *scope, TimestampTz after, TimestampTz until,
						TimestampTz now, int limit)
{
	Datum		values[5];
	uint64		n;
	bool		isnull;

	values[0] = PointerGetDatum(scope);
	values[1] = TimestampTzGetDatum(until);
	values[2] = Int32GetDatum(limit);
	values[3] = TimestampTzGetDatum(after);
	values[4] = TimestampTzGetDatum(now);
	n = inbox_execute_plan(inbox_leaf_plan(&ranked_statement, ranked_plans, leaf),
						   values, NULL, SPI_OK_SELECT, ranked_statement.name);
	if (n == 1)
	{
		(void) SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		if (isnull)
		{
			SPI_freetuptable(SPI_tuptable);
			return -1;
		}
	}
	return (int64) n;
}
