/*-------------------------------------------------------------------------
 *
 * complete_many.c
 *	  inbox_complete_many: a worker's batch of receipts completed in one
 *	  call, in the caller's transaction, each as the single inbox_complete
 *	  by receipt completes it (complete.c's completion, which both call).
 *
 * A receipt that holds no message does not stop the others, and needs no
 * subtransaction: its completion is an update that matches no row, which
 * writes nothing, so there is nothing to undo.  The batch reports it, as
 * the status named after the error the single form raises (IB004,
 * not_owner), and goes on.  Only what concerns the whole call raises: its
 * arguments, and what would abort the single form's statement too (a
 * serialization failure, a deadlock, a cancel).
 *
 * The receipts are completed in byte order, so that two batches that
 * share receipts lock their messages in the same order and cannot
 * deadlock with each other; a receipt given twice is completed once, and
 * its later copies are duplicates, as inbox_receive_many reports an id
 * given twice.  The groups of the messages completed are released after
 * the completions' statement, in the same order, each as the single form
 * releases it: a receipt not completed releases nothing.
 *
 * src/complete_many.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/tuplestore.h"
#include "utils/uuid.h"

#include "complete.h"
#include "groups.h"
#include "inbox.h"
#include "keys.h"

PG_FUNCTION_INFO_V1(inbox_complete_many);

/* The most receipts one call takes: what one poll hands out */
#define COMPLETE_MAX_RECEIPTS	10000

/* One receipt of the batch, as given */
typedef struct CompleteItem
{
	int			position;		/* 1-based, in the arrays given */
	pg_uuid_t  *receipt;
	Datum		result;
	bool		result_isnull;
	const char *status;
	text	   *completed;		/* the id of the message completed, or NULL */
} CompleteItem;

/* Receipts in byte order; copies of one receipt in the order given */
static int
compare_receipts(const void *a, const void *b)
{
	const CompleteItem *x = *(CompleteItem *const *) a;
	const CompleteItem *y = *(CompleteItem *const *) b;
	int			c = memcmp(x->receipt->data, y->receipt->data, UUID_LEN);

	if (c != 0)
		return c;
	return x->position - y->position;
}

/* The receipts and their results, every one checked before any is completed */
static int
complete_args(FunctionCallInfo fcinfo, CompleteItem **items)
{
	Datum	   *receipts;
	bool	   *receipt_nulls;
	Datum	   *results = NULL;
	bool	   *result_nulls = NULL;
	int			n;
	int			i;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("receipts must not be null")));
	n = inbox_array_arg(fcinfo, 1, "receipts", UUIDOID, &receipts, &receipt_nulls);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("receipts must not be empty"),
				 errhint("A batch completes at least one message.")));
	if (n > COMPLETE_MAX_RECEIPTS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("too many receipts in one batch"),
				 errdetail("The batch has %d receipts; the limit is %d.", n, COMPLETE_MAX_RECEIPTS),
				 errhint("Split the batch: each call is one statement, whose locks are held to commit.")));
	if (!PG_ARGISNULL(2))
	{
		int			got = inbox_array_arg(fcinfo, 2, "results", JSONBOID, &results, &result_nulls);

		if (got != n)
			ereport(ERROR,
					(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
					 errmsg("results must have one element per receipt"),
					 errdetail("There are %d receipts and %d results.", n, got),
					 errhint("Pass NULL for results to store none, or NULL elements for some receipts.")));
	}

	*items = palloc0(sizeof(CompleteItem) * n);
	for (i = 0; i < n; i++)
	{
		CompleteItem *item = &(*items)[i];

		if (receipt_nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("receipts[%d] must not be null", i + 1)));
		item->position = i + 1;
		item->receipt = DatumGetUUIDP(receipts[i]);
		item->result_isnull = results == NULL || result_nulls[i];
		item->result = item->result_isnull ? (Datum) 0 : results[i];
	}
	return n;
}

/*
 * inbox_complete_many(scope text, receipts uuid[], results jsonb[])
 *		-> SETOF (ordinality integer, receipt uuid, status text)
 *
 * One row per receipt given, in the order given: status 'completed' (the
 * message it held is done, with its result), 'duplicate' (an earlier copy
 * in this batch), or 'not_owner' (the receipt holds no message: completed
 * or failed since, or taken again after its lease ran out; its effect
 * must not commit).
 */
Datum
inbox_complete_many(PG_FUNCTION_ARGS)
{
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	ReturnSetInfo *rsinfo;
	CompleteItem *items;
	CompleteItem **sorted;
	InboxCompletion c;
	int			n;
	int			i;

	n = complete_args(fcinfo, &items);
	sorted = palloc(sizeof(CompleteItem *) * n);
	for (i = 0; i < n; i++)
		sorted[i] = &items[i];
	qsort(sorted, n, sizeof(CompleteItem *), compare_receipts);

	InitMaterializedSRF(fcinfo, 0);
	rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	inbox_completion_begin(&c, scope);
	for (i = 0; i < n; i++)
	{
		CompleteItem *item = sorted[i];

		if (i > 0 && memcmp(sorted[i - 1]->receipt->data, item->receipt->data, UUID_LEN) == 0)
			item->status = "duplicate";
		else if (inbox_completion_one(&c, NULL, item->receipt, 0, item->result,
									  item->result_isnull, &item->completed))
			item->status = "completed";
		else
		{
			item->status = "not_owner";
			item->completed = NULL;
		}
		CHECK_FOR_INTERRUPTS();
	}
	inbox_completion_end(&c);

	/*
	 * Each completed message's group lets its next message go (groups.c);
	 * a database without groups is asked once, not once per message
	 */
	if (inbox_groups_in_use())
		for (i = 0; i < n; i++)
			if (sorted[i]->completed != NULL)
				inbox_group_leave(scope, sorted[i]->completed, NULL);

	for (i = 0; i < n; i++)
	{
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		values[0] = Int32GetDatum(items[i].position);
		values[1] = UUIDPGetDatum(items[i].receipt);
		values[2] = CStringGetTextDatum(items[i].status);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
