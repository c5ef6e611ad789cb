/*-------------------------------------------------------------------------
 *
 * groups.c
 *	  Ordered groups of the deferred mode, seen from C: the group_key
 *	  arguments of the receives, and the calls into the SQL that keeps the
 *	  groups (sql/inbox.sql, section 4, "Ordered groups", which says how
 *	  a group's order holds under concurrency).
 *
 * A receive with a group key writes its entry with no due, then puts its
 * message into its group (inbox_group_enqueue), which gives the due to
 * the message that heads its group.  A completion, and a take that
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

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "compat.h"
#include "distributed.h"
#include "events.h"
#include "groups.h"
#include "inbox.h"
#include "keys.h"
#include "locate.h"
#include "spi.h"

PG_FUNCTION_INFO_V1(inbox_group_leave_sql);

/* Columns of inbox.group_members, as sql/inbox.sql makes the table */
#define Anum_group_members_position	4
#define Anum_group_members_skipped	6

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
 * A receive's part of the groups: every statement and probe here names a
 * group's or an entry's full key, or a row's tid, so that its cost
 * follows the messages it writes, never what the scope already holds,
 * whatever the statistics say of the scope.  The receive wrote its
 * grouped entries with no due (claim.c, claim_many.c).  Here it locks
 * each group's row, in byte order of the keys, so that two batches over
 * the same groups never wait on each other in a circle; then, in a
 * snapshot taken after every lock, it reads each group's members from
 * its last one back: the last position given is the one its members
 * follow, and a group none of whose members is left but skipped ones has
 * the batch's first as its head, which alone gets its due.  Members
 * after the first of their group in a batch are never heads.
 *
 * The row is written once by each transaction that locks it (and each
 * subtransaction), and only locked after that: a transaction that
 * receives a group's messages one by one leaves one version of the row,
 * not one per message.  That write is what makes a receive and a release
 * of the same group under REPEATABLE READ fail with 40001 rather than
 * miss each other (sql/inbox.sql, section 4).
 */
static SPIPlanPtr lock_plan = NULL;
static SPIPlanPtr members_plan = NULL;

static const char *const lock_sql =
"INSERT INTO inbox.groups AS g (scope, group_key) VALUES ($1, $2) "
"ON CONFLICT ON CONSTRAINT groups_pkey DO UPDATE SET group_key = EXCLUDED.group_key "
"WHERE g.xmin OPERATOR(pg_catalog.<>) pg_catalog.xid(pg_catalog.pg_current_xact_id())";

static const char *const members_sql =
"INSERT INTO inbox.group_members (scope, message_id, group_key, position, not_before) "
"SELECT $1, u.id, u.k, u.p, $5 "
"FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3), pg_catalog.unnest($4)) AS u(id, k, p)";

/* The head's due, by tid on the scope's leaf: no index is chosen */
static const InboxLeafStatement heads_statement = {
	"the due of a group's new head",
	"UPDATE inbox.entries_p%d AS e SET due = GREATEST($2, pg_catalog.now()) "
	"WHERE e.ctid OPERATOR(pg_catalog.=) ANY ($1)",
	{TIDARRAYOID, TIMESTAMPTZOID}
};
static SPIPlanPtr heads_plans[INBOX_LEAVES];

/* Byte order of two keys, as collation "C" sorts them */
static int
key_cmp(const text *a, const text *b)
{
	int			la = VARSIZE_ANY_EXHDR(a);
	int			lb = VARSIZE_ANY_EXHDR(b);
	int			c = memcmp(VARDATA_ANY(a), VARDATA_ANY(b), Min(la, lb));

	return c != 0 ? c : (la > lb) - (la < lb);
}

static text *const *sort_keys;

/* Items by key, then by their order in the batch */
static int
item_cmp(const void *a, const void *b)
{
	int			i = *(const int *) a;
	int			j = *(const int *) b;
	int			c = key_cmp(sort_keys[i], sort_keys[j]);

	return c != 0 ? c : (i > j) - (i < j);
}

/*
 * The members of (scope, key), from the last back, through
 * group_members_order in snapshot: the last one's position into *last (0
 * if none), and whether a member not skipped is among them.
 */
static bool
group_tail(Relation members, Relation order, Snapshot snapshot, text *scope, text *key,
		   int64 *last)
{
	ScanKeyData keys[2];
	IndexScanDesc scan;
	TupleTableSlot *slot = table_slot_create(members, NULL);
	bool		found = false;
	bool		first = true;

	*last = 0;
	inbox_text_key(&keys[0], 1, scope);
	inbox_text_key(&keys[1], 2, key);
	scan = inbox_index_beginscan(members, order, snapshot, 2);
	index_rescan(scan, keys, 2, NULL, 0);
	while (!found && index_getnext_slot(scan, BackwardScanDirection, slot))
	{
		bool		isnull;

		if (first)
			*last = DatumGetInt64(slot_getattr(slot, Anum_group_members_position, &isnull));
		first = false;
		found = !DatumGetBool(slot_getattr(slot, Anum_group_members_skipped, &isnull));
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	return found;
}

/*
 * Put n messages just received into their groups: ids[i] with keys[i], in
 * receive order, every key set; not_before is the receive's, or 0 for
 * none.  See above.  SPI must be connected.
 */
void
inbox_group_enqueue(text *scope, int n, text **ids, text **keys, Datum not_before)
{
	Oid			lock_types[2] = {TEXTOID, TEXTOID};
	Oid			members_types[5] = {TEXTOID, TEXTARRAYOID, TEXTARRAYOID, INT8ARRAYOID,
	TIMESTAMPTZOID};
	int		   *order = palloc(sizeof(int) * n);
	Datum	   *positions = palloc(sizeof(Datum) * n);
	Datum	   *heads = palloc(sizeof(Datum) * n);
	int		   *runs = palloc(sizeof(int) * (n + 1));
	int			nruns = 0;
	int			nheads = 0;
	int			leafno = inbox_scope_leaf(scope);
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	Relation	members;
	Relation	members_order;
	Snapshot	snapshot;
	int			i;
	int			r;

	for (i = 0; i < n; i++)
		order[i] = i;
	sort_keys = keys;
	qsort(order, n, sizeof(int), item_cmp);
	for (i = 0; i < n; i++)
		if (i == 0 || key_cmp(keys[order[i - 1]], keys[order[i]]) != 0)
			runs[nruns++] = i;
	runs[nruns] = n;

	/* Each group's row, locked in byte order */
	values[0] = PointerGetDatum(scope);
	for (r = 0; r < nruns; r++)
	{
		values[1] = PointerGetDatum(keys[order[runs[r]]]);
		(void) inbox_execute_plan(inbox_plan(&lock_plan, lock_sql, 2, lock_types),
								  values, NULL, SPI_OK_INSERT, "the lock of a group");
	}

	/*
	 * A snapshot of its own, taken after every lock, so that it sees the
	 * releases that committed while a lock waited; with this
	 * transaction's writes.  Each group's messages follow its last member;
	 * the first of them is the head if no member before it is live.
	 */
	CommandCounterIncrement();
	PushActiveSnapshot(GetTransactionSnapshot());
	UpdateActiveSnapshotCommandId();
	snapshot = GetActiveSnapshot();
	members = table_open(inbox_relid("group_members"), AccessShareLock);
	members_order = index_open(inbox_relid("group_members_order"), AccessShareLock);
	for (r = 0; r < nruns; r++)
	{
		int			first = order[runs[r]];
		int64		last;

		if (!group_tail(members, members_order, snapshot, scope, keys[first], &last))
		{
			ItemPointer tid = palloc(sizeof(ItemPointerData));

			if (!inbox_entry_tid(scope, ids[first], tid))
				elog(ERROR, "a grouped message's entry is missing on its leaf");
			heads[nheads++] = PointerGetDatum(tid);
		}
		for (i = runs[r]; i < runs[r + 1]; i++)
			positions[order[i]] = Int64GetDatum(last + 1 + (i - runs[r]));
	}
	index_close(members_order, AccessShareLock);
	table_close(members, AccessShareLock);
	PopActiveSnapshot();

	values[1] = PointerGetDatum(construct_array((Datum *) ids, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[2] = PointerGetDatum(construct_array((Datum *) keys, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[3] = PointerGetDatum(construct_array(positions, n, INT8OID, 8, FLOAT8PASSBYVAL,
												TYPALIGN_DOUBLE));
	values[4] = not_before;
	nulls[4] = not_before == (Datum) 0 ? 'n' : ' ';
	(void) inbox_execute_plan(inbox_plan(&members_plan, members_sql, 5, members_types),
							  values, nulls, SPI_OK_INSERT, "the insertion of group members");

	if (nheads > 0)
	{
		values[0] = PointerGetDatum(construct_array(heads, nheads, TIDOID, sizeof(ItemPointerData),
													false, TYPALIGN_SHORT));
		values[1] = not_before;
		nulls[1] = not_before == (Datum) 0 ? 'n' : ' ';
		if (inbox_execute_plan(inbox_leaf_plan(&heads_statement, heads_plans, leafno),
							   values, nulls, SPI_OK_UPDATE, heads_statement.name) != (uint64) nheads)
			elog(ERROR, "a group's new head was not found by its tid");
	}
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
	"UPDATE inbox.groups AS g SET group_key = g.group_key FROM gone " \
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
