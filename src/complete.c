/*-------------------------------------------------------------------------
 *
 * complete.c
 *	  inbox_complete, by message id and by receipt: the message is marked
 *	  done in the transaction of its effect, with its result, and its
 *	  ordered group's next message becomes due.  The completion of one
 *	  message is shared with the batch, inbox_complete_many
 *	  (complete_many.c).
 *
 * A completion updates the entry through direct.c (inbox_direct_complete)
 * where it may: the UPDATE through SPI would pay an executor start and the
 * rebuilding of the table's CHECK expressions for one row.  Elsewhere (on
 * Citus, with inbox.direct_insert off, or a leaf that is not as
 * sql/inbox.sql makes it) it runs one of the kept plans below, on the leaf
 * that holds the scope's entries.  A completion by receipt names the
 * scope, and so reaches its leaf directly.
 *
 * The group is released after the completion's statement, by the id of
 * the message it completed (groups.c): a message that is not completed
 * releases nothing, whether the caller then raises (the single forms) or
 * reports it and goes on (the batch).
 *
 * src/complete.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/uuid.h"

#include "complete.h"
#include "depth.h"
#include "direct.h"
#include "events.h"
#include "groups.h"
#include "inbox.h"
#include "keys.h"
#include "session.h"
#include "spi.h"

PG_FUNCTION_INFO_V1(inbox_complete_1_0);
PG_FUNCTION_INFO_V1(inbox_complete_receipt_1_0);

static SPIPlanPtr refuse_plan = NULL;
static SPIPlanPtr refuse_receipt_plan = NULL;

/* The statements, each on the leaf that holds the scope's entries (%d) */
typedef enum CompleteLeafPlan
{
	LEAF_COMPLETE,				/* done, by its owner session */
	LEAF_COMPLETE_RECEIPT,		/* done, by receipt */
	COMPLETE_LEAF_PLANS
} CompleteLeafPlan;

static const InboxLeafStatement leaf_statements[COMPLETE_LEAF_PLANS] = {
	[LEAF_COMPLETE] = {
		"complete",
		"UPDATE inbox.entries_p%d SET state = 'd', result = $3, finished_at = pg_catalog.now(), "
		"owner_session = NULL, lease_until = NULL, due = NULL, receipt = NULL "
		"WHERE scope = $1 AND message_id = $2 AND state = 'r' AND owner_session = $4",
		{TEXTOID, TEXTOID, JSONBOID, INT8OID}
	},
	[LEAF_COMPLETE_RECEIPT] = {
		"complete by receipt",
		"UPDATE inbox.entries_p%d SET state = 'd', result = $3, finished_at = pg_catalog.now(), "
		"owner_session = NULL, lease_until = NULL, due = NULL, receipt = NULL "
		"WHERE receipt = $2 AND scope = $1 AND state = 'r' "
		"RETURNING message_id",
		{TEXTOID, UUIDOID, JSONBOID}
	},
};

static SPIPlanPtr leaf_plans[COMPLETE_LEAF_PLANS][INBOX_LEAVES];

/* Run kind's plan on leaf; raise unless its result is expected */
static uint64
execute(CompleteLeafPlan kind, int leaf, Datum *values, const char *nulls, int expected)
{
	return inbox_execute_plan(inbox_leaf_plan(&leaf_statements[kind], leaf_plans[kind], leaf),
							  values, nulls, expected, leaf_statements[kind].name);
}

/*
 * A completion: one statement's worth of messages of one scope marked done,
 * each as the single inbox_complete marks it.  Written through direct.c
 * (inbox_direct_complete) where it may, else by the kept plans
 * LEAF_COMPLETE and LEAF_COMPLETE_RECEIPT; which one is decided by the
 * first message, since every message of a scope lives in one leaf.
 */
void
inbox_completion_begin(InboxCompletion *c, text *scope)
{
	c->scope = scope;
	c->leaf = inbox_scope_leaf(scope);
	c->spi = false;
	/* It locks open messages: an abort must reach the front (front.c) */
	inbox_scope_touched(c->leaf, scope, INBOX_TOUCH_LOCKS);
	c->writer = inbox_direct_begin("UPDATE");
}

/* Leave direct.c for SPI, for this message and the rest of the completion */
static void
completion_spi(InboxCompletion *c)
{
	if (c->writer != NULL)
	{
		inbox_direct_end(c->writer);
		c->writer = NULL;
	}
	if (!c->spi)
	{
		inbox_spi_connect();
		c->spi = true;
	}
}

/*
 * Mark one message done with result: the one this session holds by
 * (message_id, owner), or the one the receipt holds (message_id NULL).
 * True if it did, with the message's id in *completed_id, allocated in the
 * caller's memory context; false if no such message is held, which
 * inbox.refuse or inbox.refuse_receipt explains.  Its group is released by
 * the caller once the completion's statement has ended (inbox_group_leave
 * with that id), so that a message that is not completed releases
 * nothing, with or without a raise after it.
 */
/* A message completed: its scope's depth hears of it at commit (depth.c) */
static bool
completed(InboxCompletion *c)
{
	inbox_depth_moved(c->scope, INBOX_STATE_PROCESSING, INBOX_STATE_DONE, 1, false);
	return true;
}

bool
inbox_completion_one(InboxCompletion *c, text *message_id, pg_uuid_t *receipt, int64 owner,
					 Datum result, bool result_isnull, text **completed_id)
{
	CompleteLeafPlan kind = receipt != NULL ? LEAF_COMPLETE_RECEIPT : LEAF_COMPLETE;
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	bool		isnull;

	if (c->writer != NULL)
	{
		InboxDirectResult done = inbox_direct_complete(c->writer, c->leaf, c->scope, message_id,
													   receipt, owner, result, result_isnull,
													   completed_id);

		if (done != INBOX_DIRECT_UNAVAILABLE)
			return done == INBOX_DIRECT_WRITTEN && completed(c);
	}
	completion_spi(c);

	values[0] = PointerGetDatum(c->scope);
	values[1] = receipt != NULL ? UUIDPGetDatum(receipt) : PointerGetDatum(message_id);
	values[2] = result_isnull ? (Datum) 0 : result;
	nulls[2] = result_isnull ? 'n' : ' ';
	values[3] = Int64GetDatum(owner);
	if (receipt == NULL)
	{
		if (execute(kind, c->leaf, values, nulls, SPI_OK_UPDATE) != 1)
			return false;
		*completed_id = message_id;
		return completed(c);
	}
	if (execute(kind, c->leaf, values, nulls, SPI_OK_UPDATE_RETURNING) != 1)
		return false;
	*completed_id = DatumGetTextPP(SPI_datumTransfer(SPI_getbinval(SPI_tuptable->vals[0],
																   SPI_tuptable->tupdesc,
																   1, &isnull),
													 false, -1));
	SPI_freetuptable(SPI_tuptable);
	return completed(c);
}

/* The end of the completion's statement */
void
inbox_completion_end(InboxCompletion *c)
{
	if (c->writer != NULL)
		inbox_direct_end(c->writer);
	c->writer = NULL;
	if (c->spi)
		SPI_finish();
	c->spi = false;
}

/*
 * inbox_complete(scope, message_id, result): the message this session
 * took is done, with the caller's effect.
 */
Datum
inbox_complete_1_0(PG_FUNCTION_ARGS)
{
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	text	   *message_id = inbox_key_arg(fcinfo, 1, "message_id", INBOX_MAX_MESSAGE_ID_BYTES);
	InboxCompletion c;
	text	   *completed;

	inbox_completion_begin(&c, scope);
	if (!inbox_completion_one(&c, message_id, NULL, inbox_owner_key(),
							  PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2), PG_ARGISNULL(2),
							  &completed))
	{
		Oid			types[2] = {TEXTOID, TEXTOID};
		Datum		values[2] = {PointerGetDatum(scope), PointerGetDatum(message_id)};

		completion_spi(&c);
		/* inbox.refuse says why, and raises */
		(void) inbox_execute_plan(inbox_plan(&refuse_plan,
											 "SELECT inbox.refuse($1, $2, 'completed', 'r')",
											 2, types),
								  values, NULL, SPI_OK_SELECT, "inbox.refuse");
		elog(ERROR, "inbox.refuse did not raise");
	}
	inbox_completion_end(&c);
	/* Its group's next message becomes due (groups.c) */
	inbox_group_leave(scope, completed, NULL);
	PG_RETURN_VOID();
}

/*
 * inbox_complete(scope, receipt, result): the message the receipt holds
 * is done, from whichever session the caller runs on.
 */
Datum
inbox_complete_receipt_1_0(PG_FUNCTION_ARGS)
{
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	pg_uuid_t  *receipt;
	InboxCompletion c;
	text	   *completed;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("receipt must not be null")));
	receipt = PG_GETARG_UUID_P(1);

	/* As inbox_complete by message id */
	inbox_completion_begin(&c, scope);
	if (!inbox_completion_one(&c, NULL, receipt, 0,
							  PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2), PG_ARGISNULL(2),
							  &completed))
	{
		Oid			types[2] = {TEXTOID, UUIDOID};
		Datum		values[2] = {PointerGetDatum(scope), UUIDPGetDatum(receipt)};

		completion_spi(&c);
		(void) inbox_execute_plan(inbox_plan(&refuse_receipt_plan,
											 "SELECT inbox.refuse_receipt($1, $2, 'completed')",
											 2, types),
								  values, NULL, SPI_OK_SELECT, "inbox.refuse_receipt");
		elog(ERROR, "inbox.refuse_receipt did not raise");
	}
	inbox_completion_end(&c);
	inbox_group_leave(scope, completed, NULL);
	PG_RETURN_VOID();
}
