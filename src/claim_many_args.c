/*-------------------------------------------------------------------------
 *
 * claim_many_args.c
 *	  The arguments of inbox_claim_many and inbox_receive_many, read into a
 *	  Batch (claim_many.h): each array checked, its NULLs refused, its
 *	  lengths matched, each id, hash, payload, group key, priority and
 *	  headers checked as the single claim and receive check theirs, before
 *	  claim_many.c writes anything.
 *
 * src/claim_many_args.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "claim_internal.h"
#include "claim_many.h"
#include "distributed.h"
#include "groups.h"
#include "inbox.h"
#include "keys.h"
#include "outbox.h"
#include "priorities.h"

/*
 * An array argument that gives one element per message id (of which there
 * are n), deconstructed as inbox_array_arg does.  what names its elements in
 * the error; hint, if not NULL, says what to pass instead.
 */
static void
per_id_array_arg(FunctionCallInfo fcinfo, int argno, const char *name, Oid type, int n,
				 const char *what, const char *hint, Datum **elems, bool **nulls)
{
	int			got = inbox_array_arg(fcinfo, argno, name, type, elems, nulls);

	if (got != n)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("%s must have one element per message id", name),
				 errdetail("There are %d message ids and %d %s.", n, got, what),
				 hint ? errhint("%s", hint) : 0));
}

/* Which element of headers an error is about */
static void
headers_context(void *arg)
{
	errcontext("headers[%d]", *(int *) arg);
}

/* on_mismatch: true for 'raise', false for 'return' */
static bool
on_mismatch_arg(FunctionCallInfo fcinfo, int argno)
{
	char	   *mode;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("on_mismatch must not be null")));
	mode = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	if (strcmp(mode, "return") == 0)
		return false;
	if (strcmp(mode, "raise") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("on_mismatch must be \"raise\" or \"return\""),
				 errdetail("It is \"%s\".", inbox_quote(PG_GETARG_TEXT_PP(argno)))));
	return true;
}

/*
 * The batch's arguments, every one checked before anything is written:
 * claim (scope, ids, hashes, on_mismatch); receive (scope, ids, payloads,
 * hashes, not_before, on_mismatch, group_keys, priorities, headers),
 * 1.0.0's SQL without the last three, 1.1.0's without headers.
 */
void
batch_args(FunctionCallInfo fcinfo, BatchKind kind, Batch *batch)
{
	bool		receive = kind != BATCH_CLAIM;
	bool		is_jsonb = kind == BATCH_RECEIVE_JSON;
	int			hashes_arg = receive ? 3 : 2;
	int			mode_arg = receive ? 5 : 3;
	Datum	   *ids;
	bool	   *id_nulls;
	Datum	   *hashes = NULL;
	bool	   *hash_nulls = NULL;
	Datum	   *payloads = NULL;
	bool	   *payload_nulls = NULL;
	int			n;
	int			i;

	batch->kind = kind;
	batch->scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("message_ids must not be null")));
	batch->raise = on_mismatch_arg(fcinfo, mode_arg);
	batch->not_before = receive && !PG_ARGISNULL(4) ? PG_GETARG_DATUM(4) : (Datum) 0;
	if (batch->not_before != (Datum) 0)
		inbox_check_not_before(DatumGetTimestampTz(batch->not_before));
	batch->done = receive ? "received" : "claimed";
	batch->group_keys = NULL;
	batch->ranked = false;
	batch->headers = false;
	batch->items = NULL;

	n = inbox_array_arg(fcinfo, 1, "message_ids", TEXTOID, &ids, &id_nulls);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("message_ids must not be empty"),
				 errhint("A batch claims at least one message.")));
	if (n > INBOX_MAX_BATCH)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("too many message_ids in one batch"),
				 errdetail("The batch has %d ids; the limit is %d.", n, INBOX_MAX_BATCH),
				 errhint("Split the batch: each call is one statement, whose locks are held to commit.")));
	if (receive)
	{
		if (PG_ARGISNULL(2))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("payloads must not be null"),
					 errhint("A received message is processed later from its stored payload.")));
		per_id_array_arg(fcinfo, 2, "payloads", is_jsonb ? JSONBOID : BYTEAOID, n,
						 "payloads", NULL, &payloads, &payload_nulls);
	}
	if (!PG_ARGISNULL(hashes_arg))
		per_id_array_arg(fcinfo, hashes_arg, "payload_hashes", BYTEAOID, n, "payload hashes",
						 "Pass NULL for payload_hashes to skip the content check, or NULL elements for some ids.",
						 &hashes, &hash_nulls);

	if (receive && PG_NARGS() > 6 && !PG_ARGISNULL(6))
	{
		Datum	   *keys;
		bool	   *key_nulls;

		per_id_array_arg(fcinfo, 6, "group_keys", TEXTOID, n, "group keys",
						 "Pass NULL elements for the ids that belong to no group.", &keys, &key_nulls);
		inbox_refuse_if_distributed(INBOX_REFUSE_GROUPS);
		batch->group_keys = palloc0(sizeof(text *) * n);
		for (i = 0; i < n; i++)
		{
			char		name[32];

			snprintf(name, sizeof(name), "group_keys[%d]", i + 1);
			if (!key_nulls[i])
				batch->group_keys[i] = inbox_check_key_datum(keys[i], false, name,
															 INBOX_MAX_GROUP_KEY_BYTES);
		}
	}

	if (receive && PG_NARGS() > 7 && !PG_ARGISNULL(7))
	{
		Datum	   *levels;
		bool	   *level_nulls;

		per_id_array_arg(fcinfo, 7, "priorities", INT4OID, n, "priorities",
						 "Pass NULL elements for the ids of the default priority.", &levels, &level_nulls);
		batch->items = palloc0(sizeof(BatchItem) * n);
		for (i = 0; i < n; i++)
		{
			char		name[32];

			snprintf(name, sizeof(name), "priorities[%d]", i + 1);
			if (!level_nulls[i])
				batch->items[i].priority =
					(int16) inbox_check_priority(DatumGetInt32(levels[i]), name);
			batch->ranked |= batch->items[i].priority > 0;
		}
	}

	if (batch->items == NULL)
		batch->items = palloc0(sizeof(BatchItem) * n);

	if (receive && PG_NARGS() > 8 && !PG_ARGISNULL(8))
	{
		Datum	   *headers;
		bool	   *header_nulls;
		ErrorContextCallback context;
		int			at = 0;

		per_id_array_arg(fcinfo, 8, "headers", JSONBOID, n, "headers",
						 "Pass NULL elements for the ids without headers.", &headers, &header_nulls);
		context.callback = headers_context;
		context.arg = &at;
		context.previous = error_context_stack;
		error_context_stack = &context;
		for (i = 0; i < n; i++)
		{
			if (header_nulls[i])
				continue;
			at = i + 1;
			outbox_check_headers(headers[i]);
			batch->items[i].headers = headers[i];
			batch->headers = true;
		}
		error_context_stack = context.previous;
	}

	batch->n = n;
	for (i = 0; i < n; i++)
	{
		BatchItem  *item = &batch->items[i];
		char		name[32];

		snprintf(name, sizeof(name), "message_ids[%d]", i + 1);
		item->position = i + 1;
		item->message_id = inbox_check_key_datum(ids[i], id_nulls[i], name,
												 INBOX_MAX_MESSAGE_ID_BYTES);
		snprintf(name, sizeof(name), "payload_hashes[%d]", i + 1);
		if (hashes != NULL)
			item->payload_hash = inbox_check_hash_datum(hashes[i], hash_nulls[i], name);
		if (receive)
		{
			if (payload_nulls[i])
				ereport(ERROR,
						(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						 errmsg("payloads[%d] must not be null", i + 1)));
			item->payload = payloads[i];
			/* as for one receive: the hash of the payload, unless given */
			if (item->payload_hash == NULL)
				item->payload_hash = claim_payload_digest(payloads[i], is_jsonb);
		}
	}
}
