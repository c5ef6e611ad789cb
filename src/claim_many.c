/*-------------------------------------------------------------------------
 *
 * claim_many.c
 *	  inbox_claim_many and inbox_receive_many: a consumer's whole batch in
 *	  one call, in the caller's transaction, with the arbitration of the
 *	  single claim (claim.c) for each id.
 *
 * One INSERT ... ON CONFLICT DO NOTHING of all the ids, then one read of
 * the entries of those it did not insert.  The INSERT takes the ids in
 * byte order, so two batches that share ids lock them in the same order
 * and cannot deadlock with each other.  An id that appears twice in the
 * batch is claimed once; its later copies are duplicates (or mismatches,
 * if their hashes differ).  A batch of claims is written by direct.c
 * where it can, id by id in that order, with the executor's arbitration
 * for each.
 *
 * src/claim_many.c
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
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "claim_internal.h"
#include "claim_many.h"
#include "conflicts.h"
#include "depth.h"
#include "direct.h"
#include "distributed.h"
#include "events.h"
#include "groups.h"
#include "inbox.h"
#include "keys.h"
#include "priorities.h"
#include "spi.h"
#include "stats.h"
#include "window.h"

PG_FUNCTION_INFO_V1(inbox_claim_many_1_0);
PG_FUNCTION_INFO_V1(inbox_receive_many_json);
PG_FUNCTION_INFO_V1(inbox_receive_many_bytes);

static const char *const insert_many_sql =
"INSERT INTO inbox.entries (scope, message_id, bucket, payload_hash) "
"SELECT $1, u.m, u.b, u.h "
"FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3), pg_catalog.unnest($4)) AS u(m, b, h) "
"ORDER BY u.m COLLATE pg_catalog.\"C\" "
"ON CONFLICT (scope, message_id, bucket) DO NOTHING "
"RETURNING message_id";

/*
 * A received entry's due: $6, which claim_receive_due makes, for a message
 * without a group key; none for one with a key ($8, NULL for a batch
 * without keys), which groups.c gives its due once it finds it the head
 * of its group.
 */
#define RECEIVE_MANY_DUE \
	"CASE WHEN u.k IS NULL THEN $6 END"

/* %s is the payload's column: payload (jsonb) or payload_bytes */
static const char *const receive_many_sql =
"INSERT INTO inbox.entries (scope, message_id, bucket, payload_hash, state, %s, due) "
"SELECT $1, u.m, u.b, u.h, 'p', u.p, " RECEIVE_MANY_DUE " "
"FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3), pg_catalog.unnest($4), "
"pg_catalog.unnest($5), pg_catalog.unnest($8)) AS u(m, b, h, p, k) "
"ORDER BY u.m COLLATE pg_catalog.\"C\" "
"ON CONFLICT (scope, message_id, bucket) DO NOTHING "
"RETURNING message_id";

/* The same with the ids' priorities, $7: only the SQL that has them (priorities.c) */
static const char *const receive_many_ranked_sql =
"INSERT INTO inbox.entries (scope, message_id, bucket, payload_hash, state, %s, due, priority) "
"SELECT $1, u.m, u.b, u.h, 'p', u.p, " RECEIVE_MANY_DUE ", NULLIF(u.r, 0) "
"FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3), pg_catalog.unnest($4), "
"pg_catalog.unnest($5), pg_catalog.unnest($7), pg_catalog.unnest($8)) AS u(m, b, h, p, r, k) "
"ORDER BY u.m COLLATE pg_catalog.\"C\" "
"ON CONFLICT (scope, message_id, bucket) DO NOTHING "
"RETURNING message_id";

/*
 * The same with the ids' headers, $9, and priorities: only the SQL that
 * has them, and only for a batch that has headers, so that a batch without
 * costs what it did.
 */
static const char *const receive_many_headers_sql =
"INSERT INTO inbox.entries (scope, message_id, bucket, payload_hash, state, %s, due, priority, headers) "
"SELECT $1, u.m, u.b, u.h, 'p', u.p, " RECEIVE_MANY_DUE ", NULLIF(u.r, 0), u.x "
"FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3), pg_catalog.unnest($4), "
"pg_catalog.unnest($5), pg_catalog.unnest($7), pg_catalog.unnest($8), pg_catalog.unnest($9)) "
"AS u(m, b, h, p, r, k, x) "
"ORDER BY u.m COLLATE pg_catalog.\"C\" "
"ON CONFLICT (scope, message_id, bucket) DO NOTHING "
"RETURNING message_id";

static const char *const lookup_many_sql =
"SELECT message_id, received_at, payload_hash, state FROM inbox.entries "
"WHERE scope OPERATOR(pg_catalog.=) $1 "
"AND message_id OPERATOR(pg_catalog.=) ANY ($2)";

/*
 * Their plans, generic too: a custom plan would be made for every batch,
 * since the arrays' sizes change its estimates, and nothing in the plan
 * depends on them.
 */
static SPIPlanPtr insert_many_plan = NULL;
static SPIPlanPtr receive_many_plans[2] = {NULL, NULL};	/* jsonb, bytea */
static SPIPlanPtr receive_many_ranked_plans[2] = {NULL, NULL};
static SPIPlanPtr receive_many_headers_plans[2] = {NULL, NULL};
static SPIPlanPtr lookup_many_plan = NULL;

static int
compare_text(const text *a, const text *b)
{
	int			la = VARSIZE_ANY_EXHDR(a);
	int			lb = VARSIZE_ANY_EXHDR(b);
	int			c = memcmp(VARDATA_ANY(a), VARDATA_ANY(b), Min(la, lb));

	return c != 0 ? c : (la > lb) - (la < lb);
}

/* Batch items in byte order of their ids, then in the order given */
static int
compare_items(const void *a, const void *b)
{
	const BatchItem *x = *(BatchItem *const *) a;
	const BatchItem *y = *(BatchItem *const *) b;
	int			c = compare_text(x->message_id, y->message_id);

	return c != 0 ? c : x->position - y->position;
}

/* The first copy of id among the sorted items, or NULL */
static BatchItem *
find_item(BatchItem **sorted, int n, const text *id)
{
	int			lo = 0;
	int			hi = n - 1;

	while (lo <= hi)
	{
		int			mid = (lo + hi) / 2;
		int			c = compare_text(sorted[mid]->message_id, id);

		if (c == 0)
		{
			while (mid > 0 && compare_text(sorted[mid - 1]->message_id, id) == 0)
				mid--;
			return sorted[mid];
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return NULL;
}

static void
raise_batch_mismatch(text *scope, BatchItem *item, bytea *stored, const char *where)
{
	ereport(ERROR,
			(errcode(ERRCODE_INBOX_PAYLOAD_MISMATCH),
			 errmsg("message \"%s\" in scope \"%s\" was already received with a different payload",
					inbox_quote(item->message_id), inbox_quote(scope)),
			 errdetail("%s with payload hash %s; message_ids[%d] has payload hash %s.",
					   where, inbox_hex(stored), item->position, inbox_hex(item->payload_hash)),
			 errhint("Nothing of this batch was claimed. Pass on_mismatch => 'return' to claim the rest "
					 "and get the mismatches as rows.")));
}

/* A mismatch: raise, or report it as the item's status */
static void
batch_mismatch(text *scope, BatchItem *item, bool raise, bytea *stored,
			   const char *where)
{
	inbox_stats_count(scope, INBOX_COUNT_MISMATCH);
	if (raise)
		raise_batch_mismatch(scope, item, stored, where);
	item->status = "mismatch";
}

/* An existing entry's hash against the item's: the status of a duplicate */
static void
batch_duplicate(text *scope, BatchItem *item, bool raise, bytea *stored,
				const char *where)
{
	if (item->payload_hash != NULL && stored != NULL &&
		!claim_hashes_equal(item->payload_hash, stored))
		batch_mismatch(scope, item, raise, stored, where);
	else
	{
		inbox_stats_count(scope, INBOX_COUNT_DUPLICATE);
		item->status = "duplicate";
	}
}

/* item's entry was written by this batch */
static void
batch_written(Batch *batch, BatchItem *item)
{
	item->status = batch->done;
	item->stored_hash = item->payload_hash;
	inbox_stats_count(batch->scope, INBOX_COUNT_ENTRY);
	/* Not due at once if it waits for not_before or its group's head */
	if (batch->kind != BATCH_CLAIM)
		inbox_depth_moved(batch->scope, INBOX_DEPTH_NONE, INBOX_STATE_PENDING, 1,
						  batch->not_before != (Datum) 0 ||
						  (batch->group_keys != NULL &&
						   batch->group_keys[item - batch->items] != NULL));
}

/*
 * A batch's INSERT as one single claim (or receive) per id, in pending's
 * order, for a distributed inbox.entries (see claim_many).  Returns how
 * many were written.
 */
static uint64
insert_each(Batch *batch, BatchItem **pending, int npending)
{
	bool		receive = batch->kind != BATCH_CLAIM;
	uint64		inserted = 0;
	int			i;

	/* A priority is refused on a distributed inbox (priorities.c) */
	Assert(!batch->ranked);
	for (i = 0; i < npending; i++)
	{
		BatchItem  *item = pending[i];
		KeyPlans	kp = {false, inbox_bucket(batch->scope, item->message_id)};
		Datum		values[8];
		char		nulls[8] = {' ', ' ', ' ', 'n', 'n', 'n', 'n', 'n'};
		KeyStatement kind = receive ? KEY_RECEIVE : KEY_INSERT;

		values[0] = PointerGetDatum(batch->scope);
		values[1] = PointerGetDatum(item->message_id);
		values[2] = PointerGetDatum(item->payload_hash);
		nulls[2] = item->payload_hash != NULL ? ' ' : 'n';
		if (receive)
		{
			int			col = batch->kind == BATCH_RECEIVE_JSON ? 3 : 4;

			values[col] = item->payload;
			nulls[col] = ' ';
			/* No group keys on a distributed inbox (groups.c) */
			values[5] = claim_receive_due(batch->not_before, false, &nulls[5]);
			if (item->headers != (Datum) 0)
			{
				kind = KEY_RECEIVE_HEADERS;
				values[7] = item->headers;
				nulls[7] = ' ';
			}
		}
		if (claim_insert_entry(&kp, kind, values, nulls,
						 batch->scope, item->message_id, item->payload_hash, false))
		{
			batch_written(batch, item);
			inserted++;
		}
	}
	return inserted;
}

/* One batch's claims written by direct.c (run by run_bounded) */
typedef struct BatchDirectCall
{
	Batch	   *batch;
	BatchItem **pending;
	int			npending;
	uint64		inserted;
} BatchDirectCall;

/*
 * A batch's claims, in pending's order, each written as a single claim's
 * would be by direct.c, with the executor's arbitration per id (see
 * claim_many).  A leaf that direct.c cannot write takes the single claim's
 * INSERT.  INBOX_DIRECT_UNAVAILABLE, having written nothing, where claims
 * must take SPI.
 */
static int
batch_direct_call(void *arg)
{
	BatchDirectCall *c = (BatchDirectCall *) arg;
	Batch	   *batch = c->batch;
	InboxDirectWriter *w = inbox_direct_begin("INSERT");
	int			i;

	if (w == NULL)
		return INBOX_DIRECT_UNAVAILABLE;
	for (i = 0; i < c->npending; i++)
	{
		BatchItem  *item = c->pending[i];
		KeyPlans	kp = {false, inbox_bucket(batch->scope, item->message_id)};
		InboxDirectResult r;
		bool		written;

		CHECK_FOR_INTERRUPTS();
		r = inbox_direct_write(w, kp.bucket, batch->scope, item->message_id, item->payload_hash);
		if (r == INBOX_DIRECT_UNAVAILABLE)
		{
			Datum		values[3];
			char		nulls[3] = {' ', ' ', ' '};

			values[0] = PointerGetDatum(batch->scope);
			values[1] = PointerGetDatum(item->message_id);
			values[2] = PointerGetDatum(item->payload_hash);
			nulls[2] = item->payload_hash != NULL ? ' ' : 'n';
			written = claim_insert_entry(&kp, KEY_INSERT, values, nulls,
								   batch->scope, item->message_id, item->payload_hash, false);
		}
		else
			written = r == INBOX_DIRECT_WRITTEN;
		if (written)
		{
			batch_written(batch, item);
			c->inserted++;
		}
	}
	inbox_direct_end(w);
	return INBOX_DIRECT_WRITTEN;
}

/*
 * Claim the first copies in pending (sorted by id) that have no status yet:
 * insert them, then read the entries of those not inserted.  Returns how
 * many are left without a status (their entry was deleted between the two
 * statements), to be tried again.
 */
static int
claim_batch_round(Batch *batch, BatchItem **pending, int npending)
{
	text	   *scope = batch->scope;
	bool		raise = batch->raise;
	Datum	   *ids = palloc(sizeof(Datum) * npending);
	Datum	   *buckets = palloc(sizeof(Datum) * npending);
	Datum	   *hashes = palloc(sizeof(Datum) * npending);
	Datum	   *payloads = palloc(sizeof(Datum) * npending);
	Datum	   *priorities = palloc(sizeof(Datum) * npending);
	Datum	   *headers = batch->headers ? palloc(sizeof(Datum) * npending) : NULL;
	bool	   *header_nulls = batch->headers ? palloc(sizeof(bool) * npending) : NULL;
	bool	   *hash_nulls = palloc(sizeof(bool) * npending);
	int			dims[1];
	int			lbs[1] = {1};
	Datum	   *keys = palloc(sizeof(Datum) * npending);
	bool	   *key_nulls = palloc(sizeof(bool) * npending);
	Datum		values[9];
	char		nulls[9] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', 'n', 'n'};
	SPIPlanPtr	plan = batch->insert;
	BatchDirectCall direct = {batch, pending, npending, 0};
	int			rc;
	int			i;
	int			left = 0;
	uint64		inserted;
	uint64		r;

	for (i = 0; i < npending; i++)
	{
		ids[i] = PointerGetDatum(pending[i]->message_id);
		buckets[i] = Int16GetDatum((int16) inbox_bucket(scope, pending[i]->message_id));
		hashes[i] = PointerGetDatum(pending[i]->payload_hash);
		hash_nulls[i] = (pending[i]->payload_hash == NULL);
		payloads[i] = pending[i]->payload;
		priorities[i] = Int16GetDatum(pending[i]->priority);
		if (headers != NULL)
		{
			headers[i] = pending[i]->headers;
			header_nulls[i] = pending[i]->headers == (Datum) 0;
		}
		if (batch->group_keys != NULL)
		{
			text	   *key = batch->group_keys[pending[i]->position - 1];

			keys[i] = PointerGetDatum(key);
			key_nulls[i] = key == NULL;
		}
	}
	dims[0] = npending;
	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(construct_array(ids, npending, TEXTOID, -1, false, TYPALIGN_INT));
	values[2] = PointerGetDatum(construct_array(buckets, npending, INT2OID, 2, true, TYPALIGN_SHORT));
	values[3] = PointerGetDatum(construct_md_array(hashes, hash_nulls, 1, dims, lbs,
												   BYTEAOID, -1, false, TYPALIGN_INT));
	if (batch->kind != BATCH_CLAIM)
	{
		bool		is_jsonb = batch->kind == BATCH_RECEIVE_JSON;

		values[4] = PointerGetDatum(construct_array(payloads, npending,
													is_jsonb ? JSONBOID : BYTEAOID,
													-1, false, TYPALIGN_INT));
		values[5] = claim_receive_due(batch->not_before, false, &nulls[5]);
		values[6] = PointerGetDatum(construct_array(priorities, npending, INT2OID, 2, true,
													TYPALIGN_SHORT));
		if (batch->group_keys != NULL)
		{
			values[7] = PointerGetDatum(construct_md_array(keys, key_nulls, 1, dims, lbs,
														   TEXTOID, -1, false, TYPALIGN_INT));
			nulls[7] = ' ';
		}
		if (headers != NULL)
		{
			values[8] = PointerGetDatum(construct_md_array(headers, header_nulls, 1, dims, lbs,
														   JSONBOID, -1, false, TYPALIGN_INT));
			nulls[8] = ' ';
		}
	}

	if (batch->kind == BATCH_CLAIM && plan != NULL &&
		inbox_run_bounded(batch_direct_call, &direct, scope, NULL, "message") != INBOX_DIRECT_UNAVAILABLE)
		inserted = direct.inserted;
	else if (plan == NULL)
		inserted = insert_each(batch, pending, npending);
	else
	{
		/* The INSERT, bounded by inbox.claim_timeout like a single claim's */
		rc = inbox_execute_bounded(plan, values, nulls, scope, NULL, "message");
		(void) inbox_spi_check(rc, SPI_OK_INSERT_RETURNING, "the INSERT of a batch");
		for (r = 0; r < SPI_processed; r++)
		{
			bool		isnull;
			text	   *id = DatumGetTextPP(SPI_getbinval(SPI_tuptable->vals[r],
														  SPI_tuptable->tupdesc, 1, &isnull));
			BatchItem  *item = find_item(pending, npending, id);

			if (item == NULL)
				elog(ERROR, "inbox_claim_many: the INSERT returned an id not in the batch");
			batch_written(batch, item);
		}
		inserted = SPI_processed;
	}
	if (inserted == (uint64) npending)
		return 0;

	/* The others conflicted: read what is there */
	(void) inbox_execute_plan(lookup_many_plan, values, NULL, SPI_OK_SELECT,
							  "the lookup of a batch");
	for (r = 0; r < SPI_processed; r++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[r];
		TupleDesc	tupdesc = SPI_tuptable->tupdesc;
		bool		isnull;
		text	   *id = DatumGetTextPP(SPI_getbinval(tuple, tupdesc, 1, &isnull));
		Datum		d = SPI_getbinval(tuple, tupdesc, 3, &isnull);
		bytea	   *stored = isnull ? NULL : DatumGetByteaPP(d);
		BatchItem  *item = find_item(pending, npending, id);
		char	   *where;

		if (item == NULL || item->status != NULL)
			continue;			/* inserted just now */
		where = psprintf("First received at %s",
						 timestamptz_to_str(DatumGetTimestampTz(SPI_getbinval(tuple, tupdesc, 2, &isnull))));
		batch_duplicate(scope, item, raise, stored, where);
		/* Kept past SPI_finish, for the later copies of the id */
		if (stored != NULL)
		{
			item->stored_hash = SPI_palloc(VARSIZE_ANY(stored));
			memcpy(item->stored_hash, stored, VARSIZE_ANY(stored));
		}
	}
	for (i = 0; i < npending; i++)
	{
		if (pending[i]->status == NULL)
			pending[left++] = pending[i];
	}
	return left;
}

static int
compare_hashes(const void *a, const void *b)
{
	const bytea *ha = (*(BatchItem *const *) a)->payload_hash;
	const bytea *hb = (*(BatchItem *const *) b)->payload_hash;
	int			la = VARSIZE_ANY_EXHDR(ha);
	int			lb = VARSIZE_ANY_EXHDR(hb);
	int			c = memcmp(VARDATA_ANY(ha), VARDATA_ANY(hb), Min(la, lb));

	return c != 0 ? c : la - lb;
}

/*
 * The scope's content window (window.c) for the ids this batch wrote, in
 * the order of their hashes: two batches that share contents take their
 * content rows in the same order, and cannot deadlock over them.  A
 * rejected one raises, and nothing of the batch is claimed.
 */
static void
batch_window(Batch *batch)
{
	BatchItem **written;
	int			n = 0;
	int			i;

	if (!inbox_window_on(batch->scope))
		return;
	written = palloc(sizeof(BatchItem *) * batch->n);
	for (i = 0; i < batch->n; i++)
	{
		if (batch->items[i].status == batch->done && batch->items[i].payload_hash != NULL)
			written[n++] = &batch->items[i];
	}
	qsort(written, n, sizeof(BatchItem *), compare_hashes);
	for (i = 0; i < n; i++)
	{
		char		where[64];

		snprintf(where, sizeof(where), "It is message_ids[%d]; nothing of the batch was claimed.",
				 written[i]->position);
		inbox_window_claimed(batch->scope, written[i]->message_id, written[i]->payload_hash, where, false);
	}
	pfree(written);
}

/*
 * The first copy of each id, sorted by id, into pending; returns how many.
 * Later copies of an id are duplicates of its first copy: with on_mismatch
 * 'raise', one whose hash differs from its first copy's raises now.
 */
static int
batch_first_copies(Batch *batch, BatchItem **pending)
{
	BatchItem  *items = batch->items;
	BatchItem **sorted = palloc(sizeof(BatchItem *) * batch->n);
	int			npending = 0;
	int			i;

	for (i = 0; i < batch->n; i++)
		sorted[i] = &items[i];
	qsort(sorted, batch->n, sizeof(BatchItem *), compare_items);
	for (i = 0; i < batch->n; i++)
	{
		if (i > 0 && compare_text(sorted[i]->message_id, sorted[i - 1]->message_id) == 0)
			sorted[i]->first = sorted[i - 1]->first;
		else
		{
			sorted[i]->first = sorted[i]->position - 1;
			pending[npending++] = sorted[i];
		}
	}
	pfree(sorted);

	for (i = 0; batch->raise && i < batch->n; i++)
	{
		BatchItem  *first = &items[items[i].first];

		if (first != &items[i] && items[i].payload_hash != NULL && first->payload_hash != NULL &&
			!claim_hashes_equal(items[i].payload_hash, first->payload_hash))
		{
			inbox_stats_count(batch->scope, INBOX_COUNT_MISMATCH);
			raise_batch_mismatch(batch->scope, &items[i], first->payload_hash,
								 psprintf("message_ids[%d] of the same batch has it", first->position));
		}
	}
	return npending;
}

/* The plans of the batch's statements, made on first use */
static void
batch_plans(Batch *batch)
{
	bool		is_jsonb = batch->kind == BATCH_RECEIVE_JSON;
	SPIPlanPtr *receive_plan = batch->headers ? &receive_many_headers_plans[is_jsonb ? 0 : 1] :
		batch->ranked ? &receive_many_ranked_plans[is_jsonb ? 0 : 1] :
		&receive_many_plans[is_jsonb ? 0 : 1];

	if (batch->kind != BATCH_CLAIM && *receive_plan == NULL)
	{
		Oid			types[9] = {TEXTOID, TEXTARRAYOID, INT2ARRAYOID, BYTEAARRAYOID,
		is_jsonb ? JSONBARRAYOID : BYTEAARRAYOID, TIMESTAMPTZOID, INT2ARRAYOID, TEXTARRAYOID,
		JSONBARRAYOID};

		*receive_plan = inbox_keep_plan(psprintf(batch->headers ? receive_many_headers_sql :
												 batch->ranked ? receive_many_ranked_sql :
												 receive_many_sql,
												 is_jsonb ? "payload" : "payload_bytes"),
										batch->headers ? 9 : 8, types, CURSOR_OPT_GENERIC_PLAN);
	}
	if (insert_many_plan == NULL)
	{
		Oid			types[4] = {TEXTOID, TEXTARRAYOID, INT2ARRAYOID, BYTEAARRAYOID};

		insert_many_plan = inbox_keep_plan(insert_many_sql, 4, types, CURSOR_OPT_GENERIC_PLAN);
	}
	if (lookup_many_plan == NULL)
	{
		Oid			types[2] = {TEXTOID, TEXTARRAYOID};

		lookup_many_plan = inbox_keep_plan(lookup_many_sql, 2, types, CURSOR_OPT_GENERIC_PLAN);
	}

	/*
	 * Citus runs an INSERT ... SELECT into a distributed table through the
	 * coordinator, and its RETURNING rows then disagree with the count SPI
	 * checks them against.  So there, each id gets the single claim's (or
	 * receive's) INSERT, in the same order: the same arbitration per id.
	 */
	if (inbox_entries_distributed())
		batch->insert = NULL;
	else
		batch->insert = batch->kind != BATCH_CLAIM ? *receive_plan : insert_many_plan;
}

/*
 * The ids this batch received that have a group key join their groups, in
 * the order given (groups.c).  SPI must be connected.
 */
static void
batch_groups(Batch *batch)
{
	text	  **ids;
	text	  **keys;
	int			n = 0;
	int			i;

	if (batch->group_keys == NULL)
		return;
	ids = palloc(sizeof(text *) * batch->n);
	keys = palloc(sizeof(text *) * batch->n);
	for (i = 0; i < batch->n; i++)
	{
		BatchItem  *item = &batch->items[i];

		if (batch->group_keys[i] == NULL || item->first != i || item->status != batch->done)
			continue;
		ids[n] = item->message_id;
		keys[n++] = batch->group_keys[i];
	}
	if (n > 0)
		inbox_group_enqueue(batch->scope, n, ids, keys, batch->not_before);
}

/* One row per id given, in the order given */
static void
batch_results(FunctionCallInfo fcinfo, Batch *batch)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;

	for (i = 0; i < batch->n; i++)
	{
		BatchItem  *item = &batch->items[i];
		BatchItem  *first = &batch->items[item->first];
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		/*
		 * A later copy is checked against what the entry holds now: the
		 * first copy's content if that copy was written, else the stored
		 * entry's, so that a copy matching the entry is a duplicate even
		 * when the first copy mismatched.  (Only with on_mismatch =>
		 * 'return': otherwise copies that differ raised before.)
		 */
		if (first != item)
			batch_duplicate(batch->scope, item, batch->raise, first->stored_hash,
							psprintf("message_ids[%d] of the same batch has it", first->position));
		values[0] = Int32GetDatum(item->position);
		values[1] = PointerGetDatum(item->message_id);
		values[2] = CStringGetTextDatum(item->status);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
}

/*
 * inbox_claim_many(scope text, message_ids text[], payload_hashes bytea[],
 *					on_mismatch text)
 *		-> SETOF (ordinality integer, message_id text, status text)
 *
 * One row per id given, in the order given: status 'claimed' (apply the
 * effect), 'duplicate' (already processed, or an earlier copy in this
 * batch), or 'mismatch' (with on_mismatch => 'return' only; by default a
 * mismatch raises IB002 and nothing of the batch is claimed).
 */
static Datum
claim_many(FunctionCallInfo fcinfo, BatchKind kind)
{
	Batch		batch;
	BatchItem **pending;
	int			npending;
	int			attempt;

	batch_args(fcinfo, kind, &batch);
	pending = palloc(sizeof(BatchItem *) * batch.n);
	npending = batch_first_copies(&batch, pending);

	InitMaterializedSRF(fcinfo, 0);

	inbox_spi_connect();
	batch_plans(&batch);
	for (attempt = 1; npending > 0; attempt++)
	{
		npending = claim_batch_round(&batch, pending, npending);
		if (npending > 0 && attempt >= CLAIM_MAX_ATTEMPTS)
			claim_raise_contention(batch.scope, pending[0]->message_id, attempt);
		CHECK_FOR_INTERRUPTS();
	}
	batch_window(&batch);
	batch_groups(&batch);
	SPI_finish();
	if (kind != BATCH_CLAIM)
		inbox_scope_touched(inbox_scope_leaf(batch.scope), batch.scope,
							INBOX_TOUCH_LOCKS | INBOX_TOUCH_WAKES);

	batch_results(fcinfo, &batch);
	return (Datum) 0;
}

Datum
inbox_claim_many_1_0(PG_FUNCTION_ARGS)
{
	return claim_many(fcinfo, BATCH_CLAIM);
}

/*
 * inbox_receive_many(scope text, message_ids text[], payloads jsonb[] or
 *					  bytea[], payload_hashes bytea[], not_before timestamptz,
 *					  on_mismatch text, group_keys text[], priorities integer[],
 *					  headers jsonb[])
 *		-> SETOF (ordinality integer, message_id text, status text)
 *
 * inbox_claim_many's arbitration for a batch of receives: status
 * 'received' (stored as pending), 'duplicate' or 'mismatch'.  A payload
 * hash not given is the payload's, as for inbox_receive.  An id received
 * with a group key joins its group, in the order of the arrays; one
 * with headers keeps them for the worker.
 */
Datum
inbox_receive_many_json(PG_FUNCTION_ARGS)
{
	return claim_many(fcinfo, BATCH_RECEIVE_JSON);
}

Datum
inbox_receive_many_bytes(PG_FUNCTION_ARGS)
{
	return claim_many(fcinfo, BATCH_RECEIVE_BYTES);
}
