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
 * next member becomes due (inbox.group_leave, inbox.group_dead).  Those
 * run on every completion, grouped or not, so they first ask whether any
 * group has a member at all: inbox.group_members then has a page.  A
 * member is written by the receive's transaction, which committed before
 * any take could hand its message out, and a page that holds a live row
 * is never truncated: a completion that finds no page has no group to
 * release.  A database that never used a group pays a relation lookup per
 * completion, and no statement.
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
#include "groups.h"
#include "inbox.h"
#include "keys.h"
#include "spi.h"

static SPIPlanPtr enqueue_plan = NULL;
static SPIPlanPtr enqueue_one_plan = NULL;
static SPIPlanPtr leave_plan = NULL;
static SPIPlanPtr dead_plan = NULL;
static SPIPlanPtr key_of_plan = NULL;

/* Check one group key: not empty, not longer than the limit */
void
inbox_group_key_check(Datum key)
{
	(void) inbox_check_key_datum(key, false, "group_key", INBOX_MAX_GROUP_KEY_BYTES);
}

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
 * arrays of the same length, in receive order; a NULL key is no group.
 * SPI must be connected.
 */
void
inbox_group_enqueue(text *scope, Datum ids, Datum keys)
{
	Oid			types[3] = {TEXTOID, TEXTARRAYOID, TEXTARRAYOID};
	Datum		values[3];

	values[0] = PointerGetDatum(scope);
	values[1] = ids;
	values[2] = keys;
	(void) inbox_execute_plan(inbox_plan(&enqueue_plan,
										 "SELECT inbox.group_enqueue($1, $2, $3)", 3, types),
							  values, NULL, SPI_OK_SELECT, "inbox.group_enqueue");
}

/* The same for one message; SPI must be connected */
void
inbox_group_enqueue_one(text *scope, text *message_id, text *key)
{
	Oid			types[3] = {TEXTOID, TEXTOID, TEXTOID};
	Datum		values[3];

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(message_id);
	values[2] = PointerGetDatum(key);
	(void) inbox_execute_plan(inbox_plan(&enqueue_one_plan,
										 "SELECT inbox.group_enqueue($1, ARRAY[$2], ARRAY[$3])",
										 3, types),
							  values, NULL, SPI_OK_SELECT, "inbox.group_enqueue");
}

/*
 * The message being completed, by its id or by its receipt (message_id
 * NULL), leaves its group.  Called before the completion's own statement,
 * while the receipt still names the message; whatever refuses the
 * completion then raises, and takes this back with it.  Connects to SPI
 * when it has something to do.
 */
void
inbox_group_leave(text *scope, text *message_id, pg_uuid_t *receipt)
{
	Oid			types[3] = {TEXTOID, TEXTOID, UUIDOID};
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};

	if (!inbox_groups_in_use())
		return;
	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(message_id);
	values[2] = UUIDPGetDatum(receipt);
	if (message_id == NULL)
		nulls[1] = 'n';
	if (receipt == NULL)
		nulls[2] = 'n';
	inbox_spi_connect();
	(void) inbox_execute_plan(inbox_plan(&leave_plan,
										 "SELECT inbox.group_leave($1, $2, $3, false)", 3, types),
							  values, nulls, SPI_OK_SELECT, "inbox.group_leave");
	SPI_finish();
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
