/*-------------------------------------------------------------------------
 *
 * deferred_settle.c
 *	  What a worker does with a message the deferred mode handed out,
 *	  besides completing it (complete.c): inbox_extend by receipt, a
 *	  longer lease; and inbox_result, the result its completion stored.
 *	  The take that hands messages out is in deferred.c, whose statements
 *	  on the scope's leaf these run.
 *
 * src/deferred_settle.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "deferred.h"
#include "deferred_internal.h"
#include "events.h"
#include "inbox.h"
#include "keys.h"
#include "spi.h"

PG_FUNCTION_INFO_V1(inbox_extend_receipt_1_0);
PG_FUNCTION_INFO_V1(inbox_result_1_0);

static SPIPlanPtr refuse_extend_plan = NULL;

/*
 * inbox_extend(scope, receipt, lease): the lease of the message the
 * receipt holds ends lease from now, from whichever session the caller
 * runs on.
 *
 * This and inbox_result are C with kept plans, like the completion, rather
 * than PL/pgSQL: on Citus they are delegated to the worker that holds the
 * scope (inbox_distribute), and Citus accepts a delegated call's query only
 * where it can read the scope's value, which a plan's parameters give it
 * and PL/pgSQL's variables do not.
 */
Datum
inbox_extend_receipt_1_0(PG_FUNCTION_ARGS)
{
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	pg_uuid_t  *receipt;
	Interval   *lease;
	Datum		values[3];
	bool		isnull;
	Datum		until;
	int			leaf;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("receipt must not be null")));
	lease = positive_duration_arg(fcinfo, 2, "lease", NULL);
	if (lease == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease must be positive")));
	receipt = PG_GETARG_UUID_P(1);

	values[0] = PointerGetDatum(scope);
	values[1] = UUIDPGetDatum(receipt);
	/* A value, not a function of the statement: see inbox.fail_message */
	values[2] = DirectFunctionCall2(timestamptz_pl_interval,
									TimestampTzGetDatum(GetCurrentTimestamp()),
									IntervalPGetDatum(lease));

	/* The lease's end is the message's new due: see inbox.wake_takers */
	leaf = inbox_scope_leaf(scope);
	inbox_scope_touched(leaf, scope, INBOX_TOUCH_LOCKS);
	inbox_spi_connect();
	if (deferred_execute(LEAF_EXTEND_RECEIPT, leaf, values, NULL, SPI_OK_UPDATE_RETURNING) != 1)
	{
		Oid			types[2] = {TEXTOID, UUIDOID};

		(void) inbox_execute_plan(inbox_plan(&refuse_extend_plan,
											 "SELECT inbox.refuse_receipt($1, $2, 'extended')",
											 2, types),
								  values, NULL, SPI_OK_SELECT, "inbox.refuse_receipt");
		elog(ERROR, "inbox.refuse_receipt did not raise");
	}
	until = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	SPI_finish();
	PG_RETURN_DATUM(until);
}

/*
 * inbox_result(scope, message_id): the result stored with the message's
 * completion, or NULL (none, or no such message).
 */
Datum
inbox_result_1_0(PG_FUNCTION_ARGS)
{
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	text	   *message_id = inbox_key_arg(fcinfo, 1, "message_id", INBOX_MAX_MESSAGE_ID_BYTES);
	Datum		values[2];
	bool		isnull = true;
	Datum		result = (Datum) 0;

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(message_id);

	inbox_spi_connect();
	if (deferred_execute(LEAF_RESULT, inbox_scope_leaf(scope), values, NULL, SPI_OK_SELECT) == 1)
	{
		result = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		if (!isnull)
			result = SPI_datumTransfer(result, false, -1);
	}
	SPI_finish();
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}
