/*-------------------------------------------------------------------------
 *
 * groups.c
 *	  Ordered groups of the deferred mode, seen from C: the group_key
 *	  arguments of the receives, and the calls into the SQL that keeps the
 *	  groups (sql/inbox.sql, section 4, "Ordered groups", which says how
 *	  a group's order holds under concurrency).
 *
 * A receive with a group key puts its message into its group after
 * writing its entry (inbox.group_enqueue).  A completion, and a take that
 * finds a message dead, let the message leave its group, so that the
 * next member becomes due (group_leave here, bound to inbox.group_leave
 * for the SQL too; inbox.group_dead); a take returns each message's group
 * key.  Those run on every take and completion, grouped or not, so they
 * first ask whether any group has a member at all: inbox.group_members
 * then has a page.  A member is written by the receive's transaction,
 * which committed before any take could hand its message out, and a page
 * that holds a live row is never truncated: a completion that finds no
 * page has no group to release.  A database that never used a group pays
 * a relation lookup per take and per completion, and no statement.
 *
 * On a distributed inbox the groups are refused (distributed.c).
 *
 * src/groups.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "catalog/pg_type.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/rel.h"

#include "distributed.h"
#include "events.h"
#include "groups.h"
#include "inbox.h"
#include "keys.h"
#include "spi.h"

PG_FUNCTION_INFO_V1(inbox_group_leave_sql);

static SPIPlanPtr enqueue_plan = NULL;
static SPIPlanPtr dead_plan = NULL;
static SPIPlanPtr key_of_plan = NULL;

/*
 * The group_key argument argno: NULL when the call has none or passes
 * NULL (no group), else checked.  A grouped receive is refused on a
 * distributed inbox before anything is written.
 */
text *
inbox_group_key_arg(FunctionCallInfo fcinfo, int argno)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	inbox_refuse_if_distributed(INBOX_REFUSE_GROUPS);
	return inbox_check_key_datum(PG_GETARG_DATUM(argno), false, "group_key",
								 INBOX_MAX_GROUP_KEY_BYTES);
}

/*
 * Whether inbox.group_members may hold a member: see the banner.  False on
 * a database whose SQL has no groups yet (before ALTER EXTENSION UPDATE).
 */
bool
inbox_groups_in_use(void)
{
	Oid			relid = inbox_relid("group_members");
	Relation	rel;
	BlockNumber pages;

	if (!OidIsValid(relid))
		return false;
	rel = table_open(relid, AccessShareLock);
	pages = RelationGetNumberOfBlocks(rel);
	table_close(rel, NoLock);
	return pages > 0;
}

/*
 * Put messages just received into their groups: ids and keys are text
 * arrays of the same length, in receive order; a NULL key is no group;
 * not_before is the receive's, or 0 for none.  SPI must be connected.
 */
void
inbox_group_enqueue(text *scope, Datum ids, Datum keys, Datum not_before)
{
	Oid			types[4] = {TEXTOID, TEXTARRAYOID, TEXTARRAYOID, TIMESTAMPTZOID};
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};

	values[0] = PointerGetDatum(scope);
	values[1] = ids;
	values[2] = keys;
	values[3] = not_before;
	if (not_before == (Datum) 0)
		nulls[3] = 'n';
	(void) inbox_execute_plan(inbox_plan(&enqueue_plan,
										 "SELECT inbox.group_enqueue($1, $2, $3, $4)", 4, types),
							  values, nulls, SPI_OK_SELECT, "inbox.group_enqueue");
}

/* The same for one message; SPI must be connected */
void
inbox_group_enqueue_one(text *scope, text *message_id, text *key, Datum not_before)
{
	Datum		id = PointerGetDatum(message_id);
	Datum		k = PointerGetDatum(key);

	inbox_group_enqueue(scope,
						PointerGetDatum(construct_array(&id, 1, TEXTOID, -1, false, TYPALIGN_INT)),
						PointerGetDatum(construct_array(&k, 1, TEXTOID, -1, false, TYPALIGN_INT)),
						not_before);
}

/*
 * A group's release, in kept plans on the scope's leaf (sql/inbox.sql,
 * section 4, says why it takes two statements): LEAVE_* takes the message
 * out of its group (deleted, or kept as skipped) and writes its group's
 * row, returning the group's key; LEAVE_NEXT, a statement of its own with
 * a snapshot taken after that write, gives the next member its due; and
 * LEAVE_EMPTY drops the row of a group left without a member.
 */
typedef enum GroupLeafPlan
{
	LEAVE_DELETE,				/* by message id */
	LEAVE_DELETE_RECEIPT,		/* by the receipt that holds it */
	LEAVE_SKIP,					/* a dead head, kept as skipped */
	LEAVE_NEXT,
	GROUP_LEAF_PLANS
} GroupLeafPlan;

#define LEAVE_WRITE_GROUP \
	"UPDATE inbox.groups AS g SET last = g.last FROM gone " \
	"WHERE g.scope OPERATOR(pg_catalog.=) $1 AND g.group_key OPERATOR(pg_catalog.=) gone.group_key " \
	"RETURNING g.group_key"

static const InboxLeafStatement group_leaf_statements[GROUP_LEAF_PLANS] = {
	[LEAVE_DELETE] = {
		"the release of a group's head",
		"WITH gone AS (DELETE FROM inbox.group_members AS m "
		"WHERE m.scope OPERATOR(pg_catalog.=) $1 AND m.message_id OPERATOR(pg_catalog.=) $2 "
		"RETURNING m.group_key) " LEAVE_WRITE_GROUP,
		{TEXTOID, TEXTOID}
	},
	[LEAVE_DELETE_RECEIPT] = {
		"the release of a group's head by receipt",
		"WITH held AS (SELECT e.message_id FROM inbox.entries_p%d AS e "
		"WHERE e.receipt OPERATOR(pg_catalog.=) $2 AND e.scope OPERATOR(pg_catalog.=) $1 "
		"AND e.state OPERATOR(pg_catalog.=) 'r'::\"char\"), "
		"gone AS (DELETE FROM inbox.group_members AS m USING held "
		"WHERE m.scope OPERATOR(pg_catalog.=) $1 AND m.message_id OPERATOR(pg_catalog.=) held.message_id "
		"RETURNING m.group_key) " LEAVE_WRITE_GROUP,
		{TEXTOID, UUIDOID}
	},
	[LEAVE_SKIP] = {
		"the skip of a group's dead head",
		"WITH gone AS (UPDATE inbox.group_members AS m SET skipped = true "
		"WHERE m.scope OPERATOR(pg_catalog.=) $1 AND m.message_id OPERATOR(pg_catalog.=) $2 "
		"AND NOT m.skipped RETURNING m.group_key) " LEAVE_WRITE_GROUP,
		{TEXTOID, TEXTOID}
	},
	[LEAVE_NEXT] = {
		"the due of a group's next message",
		"UPDATE inbox.entries_p%d AS e SET due = GREATEST(pg_catalog.now(), n.not_before) "
		"FROM (SELECT m.message_id, m.not_before FROM inbox.group_members AS m "
		"      WHERE m.scope OPERATOR(pg_catalog.=) $1 AND m.group_key OPERATOR(pg_catalog.=) $2 "
		"      AND NOT m.skipped ORDER BY m.position LIMIT 1) AS n "
		"WHERE e.scope OPERATOR(pg_catalog.=) $1 AND e.message_id OPERATOR(pg_catalog.=) n.message_id "
		"AND e.state OPERATOR(pg_catalog.=) 'p'::\"char\" AND e.due IS NULL",
		{TEXTOID, TEXTOID}
	},
};

static SPIPlanPtr group_leaf_plans[GROUP_LEAF_PLANS][INBOX_LEAVES];
static SPIPlanPtr empty_plan = NULL;

static const char *const empty_sql =
"DELETE FROM inbox.groups AS g "
"WHERE g.scope OPERATOR(pg_catalog.=) $1 AND g.group_key OPERATOR(pg_catalog.=) $2 "
"AND NOT EXISTS (SELECT FROM inbox.group_members AS m "
"                WHERE m.scope OPERATOR(pg_catalog.=) $1 AND m.group_key OPERATOR(pg_catalog.=) $2)";

/*
 * The message (by id, or by the receipt that holds it) leaves its group:
 * deleted from it, or with skip kept as skipped; the group's next member
 * becomes due, or the group's row goes when it has no member left.
 * Nothing for a message in no group.  SPI must be connected.
 */
static void
group_leave(text *scope, Datum message_id, Datum receipt, bool skip)
{
	int			leaf = inbox_scope_leaf(scope);
	GroupLeafPlan kind = skip ? LEAVE_SKIP : message_id != (Datum) 0 ? LEAVE_DELETE : LEAVE_DELETE_RECEIPT;
	const InboxLeafStatement *stmt = &group_leaf_statements[kind];
	Datum		values[2];
	bool		isnull;
	Datum		key;

	values[0] = PointerGetDatum(scope);
	values[1] = kind == LEAVE_DELETE_RECEIPT ? receipt : message_id;
	if (inbox_execute_plan(inbox_leaf_plan(stmt, group_leaf_plans[kind], leaf),
						   values, NULL, SPI_OK_UPDATE_RETURNING, stmt->name) == 0)
		return;
	key = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

	/*
	 * The next member's due moves below the scope's front: the front must
	 * hear of it, and the takes waiting on the scope wake at commit.
	 */
	inbox_scope_touched(leaf, scope, INBOX_TOUCH_LOCKS | INBOX_TOUCH_WAKES);
	values[1] = key;
	stmt = &group_leaf_statements[LEAVE_NEXT];
	if (inbox_execute_plan(inbox_leaf_plan(stmt, group_leaf_plans[LEAVE_NEXT], leaf),
						   values, NULL, SPI_OK_UPDATE, stmt->name) == 0)
	{
		Oid			types[2] = {TEXTOID, TEXTOID};

		(void) inbox_execute_plan(inbox_plan(&empty_plan, empty_sql, 2, types),
								  values, NULL, SPI_OK_DELETE, "the removal of an empty group");
	}
}

/*
 * The message completed, by its id or by its receipt (message_id NULL),
 * leaves its group.  The completions (complete.c) call it after their
 * statement, with the id of a message they did complete, so that a batch
 * that completes some of its receipts and not others releases only the
 * groups of those it completed.  Connects to SPI when it has something to
 * do.
 */
void
inbox_group_leave(text *scope, text *message_id, pg_uuid_t *receipt)
{
	if (!inbox_groups_in_use())
		return;
	inbox_spi_connect();
	group_leave(scope, PointerGetDatum(message_id), receipt ? UUIDPGetDatum(receipt) : (Datum) 0,
				false);
	SPI_finish();
}

/*
 * inbox.group_leave(scope text, message_id text, receipt uuid, skip
 * boolean): the same, for the SQL of section 4 (a dead head under 'skip',
 * and the switch to 'skip').
 */
Datum
inbox_group_leave_sql(PG_FUNCTION_ARGS)
{
	if (PG_ARGISNULL(0) || (PG_ARGISNULL(1) && PG_ARGISNULL(2)))
		PG_RETURN_VOID();
	inbox_spi_connect();
	group_leave(PG_GETARG_TEXT_PP(0), PG_ARGISNULL(1) ? (Datum) 0 : PG_GETARG_DATUM(1),
				PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2),
				!PG_ARGISNULL(3) && PG_GETARG_BOOL(3));
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * A take found message_id dead (its worker was lost during its last
 * attempt): where its scope skips dead letters, it leaves its group.
 * SPI must be connected.
 */
void
inbox_group_dead(text *scope, Datum message_id)
{
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];

	if (!inbox_groups_in_use())
		return;
	values[0] = PointerGetDatum(scope);
	values[1] = message_id;
	(void) inbox_execute_plan(inbox_plan(&dead_plan,
										 "SELECT inbox.group_dead($1, $2)", 2, types),
							  values, NULL, SPI_OK_SELECT, "inbox.group_dead");
}

/*
 * The group key of message_id, into *key: false if it is in no group.
 * For a take's result; SPI must be connected.
 */
bool
inbox_group_key_of(text *scope, Datum message_id, Datum *key)
{
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	bool		isnull;
	bool		found;

	values[0] = PointerGetDatum(scope);
	values[1] = message_id;
	found = inbox_execute_plan(inbox_plan(&key_of_plan,
										  "SELECT m.group_key FROM inbox.group_members AS m "
										  "WHERE m.scope OPERATOR(pg_catalog.=) $1 "
										  "AND m.message_id OPERATOR(pg_catalog.=) $2",
										  2, types),
							   values, NULL, SPI_OK_SELECT, "the group of a message") > 0;
	if (found)
		*key = datumCopy(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull),
						 false, -1);
	SPI_freetuptable(SPI_tuptable);
	return found;
}
