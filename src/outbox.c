/*-------------------------------------------------------------------------
 *
 * outbox.c
 *	  The C half of the outbox (sql/inbox.sql, section 11): the setting
 *	  inbox.outbox_retention, time-ordered message ids, the send's kept
 *	  statement (after outbox_check.c's checks), the wake-ups of waiting
 *	  relays, the fetch's walk of the keys' heads, the receipts, and the
 *	  purge of sent messages.
 *
 * Fetches, acknowledgements and failures are SQL and PL/pgSQL: each is a
 * few index lookups and writes, and the order of a key rests on a row
 * lock of inbox.outbox_keys that the send holds to its commit (see the
 * section's banner).  What SQL cannot do, or does at a cost the relay
 * pays per message, is here.
 *
 *	- inbox.uuid_v7(): PostgreSQL 15 to 17 have no UUIDv7.  The ids are
 *	  time-ordered so that they index well; within a backend they also
 *	  strictly increase, so that the ids of one transaction's messages
 *	  sort in the order they were sent.
 *	- A relay waiting in outbox_fetch sleeps on the slot of its target in
 *	  wakeup.c, the one inbox_poll uses, and a send wakes the slots of its
 *	  topic's targets when it commits, never before: a woken relay finds
 *	  what woke it.  Targets are hashed under a prefix of their own, so a
 *	  target and a scope of the same name do not share a slot by design
 *	  (two names that share one by chance cost an empty fetch).  NOTIFY
 *	  would serialize every sending commit on one queue lock.
 *	- The walk that finds a target's heads goes through the open index
 *	  one key at a time, from a cursor kept in this backend: each key
 *	  costs an index step, not a statement's executor nodes.
 *	- A key's first position is the clock's reading in microseconds, so
 *	  that a key whose row the purge deleted starts again above every
 *	  position it had (see sql/inbox.sql's banner).
 *	- A receipt carries the address of its lease's row version, so that
 *	  no index on receipts is needed and the lease is a HOT update.
 *	- The purge deletes sent messages older than inbox.outbox_retention,
 *	  a batch at a time, through the SQL function inbox.outbox_purge, in
 *	  the transactions of the purge worker and of inbox_purge().
 *
 * src/outbox.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "parser/parse_relation.h"
#include "storage/itemptr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
#include "utils/varlena.h"

#include "compat.h"
#include "distributed.h"
#include "inbox.h"
#include "keys.h"
#include "outbox.h"
#include "spi.h"
#include "wakeup.h"

PG_FUNCTION_INFO_V1(inbox_uuid_v7);
PG_FUNCTION_INFO_V1(inbox_outbox_wake);
PG_FUNCTION_INFO_V1(inbox_outbox_generation);
PG_FUNCTION_INFO_V1(inbox_outbox_sleep);
PG_FUNCTION_INFO_V1(inbox_outbox_retention);
PG_FUNCTION_INFO_V1(inbox_outbox_position_at);
PG_FUNCTION_INFO_V1(inbox_outbox_send_json);
PG_FUNCTION_INFO_V1(inbox_outbox_send_bytes);
PG_FUNCTION_INFO_V1(inbox_outbox_heads);
PG_FUNCTION_INFO_V1(inbox_outbox_receipt_seed);
PG_FUNCTION_INFO_V1(inbox_outbox_receipt);
PG_FUNCTION_INFO_V1(inbox_outbox_receipt_tid);

/* inbox.outbox_retention, in seconds */
static int	outbox_retention = 7 * SECS_PER_DAY;

/* The prefix under which a target's name picks its wake-up slot */
#define OUTBOX_WAKE_PREFIX "outbox target "

void
outbox_init(void)
{
	DefineCustomIntVariable("inbox.outbox_retention",
							"How long a sent outbox message is kept before the purge deletes it.",
							"Counted from its send; a message goes only once every route has delivered it. "
							"Pending and dead messages are never purged.",
							&outbox_retention,
							7 * SECS_PER_DAY,
							1, INBOX_MAX_RETENTION_SECONDS,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);
	outbox_trace_init();
}

/* ------------------------------------------------------------------------
 * Ids
 * ------------------------------------------------------------------------
 */

/*
 * The last id's time fields in this backend: 48 bits of Unix milliseconds
 * and 12 bits of the millisecond's fraction, as one number.  A clock that
 * stands still or steps back continues from it, so ids never repeat their
 * time fields nor go back within a backend.
 */
static uint64 last_v7_time = 0;

/* Microseconds since 1970-01-01 00:00 UTC at t */
static int64
unix_micros(TimestampTz t)
{
	return t + ((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * USECS_PER_SEC);
}

/*
 * inbox.uuid_v7() -> uuid: an RFC 9562 version 7 UUID.  Bytes 0-5 are the
 * Unix time in milliseconds, the 12 bits after the version the fraction of
 * the millisecond (method 3 of the RFC), the rest random.
 */
static pg_uuid_t *
new_uuid_v7(void)
{
	pg_uuid_t  *uuid = palloc(sizeof(pg_uuid_t));
	int64		unix_us = unix_micros(GetCurrentTimestamp());
	uint64		t;
	uint64		ms;
	uint32		frac;

	t = ((uint64) (unix_us / 1000) << 12) | (uint64) ((unix_us % 1000) * 4096 / 1000);
	if (t <= last_v7_time)
		t = last_v7_time + 1;
	last_v7_time = t;
	ms = t >> 12;
	frac = (uint32) (t & 0xFFF);

	if (!pg_strong_random(uuid->data + 8, UUID_LEN - 8))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate random values")));
	for (int i = 0; i < 6; i++)
		uuid->data[i] = (unsigned char) (ms >> (40 - 8 * i));
	uuid->data[6] = (unsigned char) (0x70 | (frac >> 8));
	uuid->data[7] = (unsigned char) (frac & 0xFF);
	uuid->data[8] = (unsigned char) (0x80 | (uuid->data[8] & 0x3F));
	return uuid;
}

Datum
inbox_uuid_v7(PG_FUNCTION_ARGS)
{
	PG_RETURN_UUID_P(new_uuid_v7());
}

/* ------------------------------------------------------------------------
 * Waking relays
 * ------------------------------------------------------------------------
 */

/* The name whose wake-up slot a target's relays sleep on */
static text *
wake_name(text *target)
{
	int			len = VARSIZE_ANY_EXHDR(target);
	int			plen = strlen(OUTBOX_WAKE_PREFIX);
	text	   *name = palloc(VARHDRSZ + plen + len);

	SET_VARSIZE(name, VARHDRSZ + plen + len);
	memcpy(VARDATA(name), OUTBOX_WAKE_PREFIX, plen);
	memcpy(VARDATA(name) + plen, VARDATA_ANY(target), len);
	return name;
}

/*
 * inbox.outbox_wake(target text): wake the relays waiting on target when
 * this transaction commits.  A send calls it for each target of its topic;
 * an acknowledgement, a failure and a requeue too, since each can make a
 * key's next message fetchable.
 */
Datum
inbox_outbox_wake(PG_FUNCTION_ARGS)
{
	inbox_wakeup_note(wake_name(PG_GETARG_TEXT_PP(0)));
	PG_RETURN_VOID();
}

/*
 * inbox.outbox_generation(target text) -> bigint: the generation of the
 * target's slot, read before a fetch looks, so that a commit between the
 * look and the sleep is not missed.  Raises if the fetch cannot wait.
 */
Datum
inbox_outbox_generation(PG_FUNCTION_ARGS)
{
	if (!inbox_wakeup_available())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("outbox_fetch cannot wait: the inbox library is not in shared_preload_libraries"),
				 errdetail("A waiting fetch sleeps on a condition variable in shared memory, "
						   "which exists only when the library is preloaded."),
				 errhint("Add inbox to shared_preload_libraries and restart, or pass wait => NULL "
						 "and fetch again after a pause.")));
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("outbox_fetch cannot wait under REPEATABLE READ or SERIALIZABLE"),
				 errdetail("The transaction's snapshot was taken before the wait, "
						   "so it could never see a message that arrives during it."),
				 errhint("Fetch in a READ COMMITTED transaction, or pass wait => NULL.")));
	PG_RETURN_INT64((int64) inbox_wakeup_generation(wake_name(PG_GETARG_TEXT_PP(0))));
}

/*
 * inbox.outbox_sleep(target text, generation bigint, until timestamptz):
 * sleep until a commit wakes target's relays, or until, unless a commit
 * already moved the slot past generation.  Where transactions can be
 * prepared, whose COMMIT PREPARED wakes nobody, inbox_wakeup_sleep ends it
 * sooner, and the fetch looks again (wakeup.c).  Cancellable.
 */
Datum
inbox_outbox_sleep(PG_FUNCTION_ARGS)
{
	text	   *name = wake_name(PG_GETARG_TEXT_PP(0));
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz until = PG_GETARG_TIMESTAMPTZ(2);
	long		secs;
	int			usecs;

	if (until <= now)
		PG_RETURN_VOID();
	/* Never longer than a fetch may wait, whatever until says */
	if (until - now > (int64) INBOX_OUTBOX_MAX_WAIT_SECONDS * USECS_PER_SEC)
		until = now + (int64) INBOX_OUTBOX_MAX_WAIT_SECONDS * USECS_PER_SEC;
	TimestampDifference(now, until, &secs, &usecs);
	inbox_wakeup_sleep(name, (uint64) PG_GETARG_INT64(1), secs * 1000 + usecs / 1000 + 1);
	PG_RETURN_VOID();
}

/* ------------------------------------------------------------------------
 * Sends
 * ------------------------------------------------------------------------
 */

/*
 * A send of a new id, in one statement: the key's position taken under its
 * row (held to commit: see sql/inbox.sql's banner), or the clock's reading
 * for a key without a row, taken as the row is inserted; the message; and
 * a delivery per route of the topic, whose targets come back to be woken
 * at commit.
 */
#define SEND_SQL_CTES \
" k AS (" \
" INSERT INTO inbox.outbox_keys AS k (topic, key, last) VALUES ($1, $2," \
" inbox.outbox_position_at(pg_catalog.clock_timestamp()))" \
" ON CONFLICT ON CONSTRAINT outbox_keys_pkey DO UPDATE SET last = k.last OPERATOR(pg_catalog.+) 1" \
" RETURNING k.last)," \
" m AS (" \
" INSERT INTO inbox.outbox_messages (id, topic, key, position, payload, payload_bytes, headers)" \
" SELECT $3, $1, $2, k.last, $4, $5, $6 FROM k" \
" RETURNING position) "
#define SEND_SQL_DELIVERIES \
"INSERT INTO inbox.outbox_deliveries (id, target, topic, key, position) " \
"SELECT $3, r.target, $1, $2, m.position FROM m CROSS JOIN "
#define SEND_SQL_ROUTES \
"inbox.outbox_routes AS r WHERE r.topic OPERATOR(pg_catalog.=) $1 COLLATE \"C\""

static const char *const send_sql =
"WITH" SEND_SQL_CTES SEND_SQL_DELIVERIES SEND_SQL_ROUTES " RETURNING target";

/*
 * The same under REPEATABLE READ or SERIALIZABLE, whose snapshot may be
 * older than an outbox_unroute that this send waited for (on
 * outbox_messages): it locks the routes it delivers to, and one deleted
 * since its snapshot fails it with 40001 instead of leaving a delivery for
 * a target without a route (see outbox_unroute in sql/inbox.sql).  Under
 * READ COMMITTED the send's snapshot is taken after that wait, and it
 * locks nothing.
 */
static const char *const send_locked_sql =
"WITH r AS (SELECT r.target FROM " SEND_SQL_ROUTES " FOR KEY SHARE),"
SEND_SQL_CTES SEND_SQL_DELIVERIES "r RETURNING target";

/* A send with the caller's id: outbox_write compares it with one sent before */
static const char *const send_with_id_sql =
"SELECT inbox.outbox_write($1, $2, $4, $5, $6, $3)";

static SPIPlanPtr send_plan = NULL;
static SPIPlanPtr send_locked_plan = NULL;
static SPIPlanPtr send_with_id_plan = NULL;

/*
 * inbox.outbox_send(topic, key, payload, headers, id), the implementation
 * behind the entry point of the same name, for a jsonb payload or a bytea
 * one (bytes).  A new id: outbox_check's checks and the headers', then
 * one statement.  A caller's id: outbox_write, which makes the same checks.
 */
static Datum
outbox_send(FunctionCallInfo fcinfo, bool bytes)
{
	Oid			types[6] = {TEXTOID, TEXTOID, UUIDOID, JSONBOID, BYTEAOID, JSONBOID};
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', 'n', 'n', ' '};
	pg_uuid_t  *id;
	uint64		n;

	if (PG_ARGISNULL(4))
	{
		LOCAL_FCINFO(check, 3);

		InitFunctionCallInfoData(*check, NULL, 3, InvalidOid, NULL, NULL);
		check->args[0] = fcinfo->args[0];
		check->args[1] = fcinfo->args[1];
		check->args[2].isnull = PG_ARGISNULL(2);
		check->args[2].value = PG_ARGISNULL(2) ? (Datum) 0 :
			Int64GetDatum((int64) toast_datum_size(PG_GETARG_DATUM(2)));
		(void) inbox_outbox_check(check);
		if (!PG_ARGISNULL(3))
			outbox_check_headers(PG_GETARG_DATUM(3));
	}
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);
	id = PG_ARGISNULL(4) ? new_uuid_v7() : PG_GETARG_UUID_P(4);
	values[2] = UUIDPGetDatum(id);
	values[bytes ? 4 : 3] = PG_GETARG_DATUM(2);
	nulls[bytes ? 4 : 3] = ' ';
	/* The caller's trace context, which an explicit traceparent overrides */
	values[5] = outbox_trace_headers(PG_ARGISNULL(3) ? (Datum) 0 : PG_GETARG_DATUM(3));
	nulls[5] = values[5] == (Datum) 0 ? 'n' : ' ';

	inbox_spi_connect();
	if (!PG_ARGISNULL(4))
	{
		(void) inbox_execute_plan(inbox_plan(&send_with_id_plan, send_with_id_sql, 6, types),
								  values, nulls, SPI_OK_SELECT, "an outbox send with its id");
		SPI_finish();
		PG_RETURN_UUID_P(id);
	}
	n = inbox_execute_plan(IsolationUsesXactSnapshot() ?
						   inbox_plan(&send_locked_plan, send_locked_sql, 6, types) :
						   inbox_plan(&send_plan, send_sql, 6, types),
						   values, nulls, SPI_OK_INSERT_RETURNING, "an outbox send");
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;
		Datum		target = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull);

		inbox_wakeup_note(wake_name(DatumGetTextPP(target)));
	}
	SPI_finish();
	PG_RETURN_UUID_P(id);
}

Datum
inbox_outbox_send_json(PG_FUNCTION_ARGS)
{
	return outbox_send(fcinfo, false);
}

Datum
inbox_outbox_send_bytes(PG_FUNCTION_ARGS)
{
	return outbox_send(fcinfo, true);
}

/* ------------------------------------------------------------------------
 * The fetch's walk
 * ------------------------------------------------------------------------
 */

/*
 * Where this backend's last fetch for a target stopped: the next fetch
 * (inbox.outbox_heads) walks the target's keys on from there and wraps
 * around, so that it reads about as many keys as it leases, and every key
 * gets its turn.  Backend-local: a relay's session fetches for one target
 * or a few; the oldest cursor gives way when there are more.
 */
#define MAX_FETCH_CURSORS 16

typedef struct FetchCursor
{
	char	   *target;			/* NULL: a free slot */
	char	   *topic;
	char	   *key;
} FetchCursor;

static FetchCursor cursors[MAX_FETCH_CURSORS];
static int	next_cursor = 0;

static FetchCursor *
find_cursor(const char *target)
{
	for (int i = 0; i < MAX_FETCH_CURSORS; i++)
		if (cursors[i].target != NULL && strcmp(cursors[i].target, target) == 0)
			return &cursors[i];
	return NULL;
}

/* Point c (a free slot, or the oldest target's) at target's (topic, key) */
static void
set_cursor(FetchCursor *c, const char *target, text *topic, text *key)
{
	if (c == NULL)
	{
		c = &cursors[next_cursor];
		next_cursor = (next_cursor + 1) % MAX_FETCH_CURSORS;
		if (c->target != NULL)
			pfree(c->target);
		c->target = MemoryContextStrdup(TopMemoryContext, target);
	}
	if (c->topic != NULL)
		pfree(c->topic);
	if (c->key != NULL)
		pfree(c->key);
	c->topic = MemoryContextStrdup(TopMemoryContext, text_to_cstring(topic));
	c->key = MemoryContextStrdup(TopMemoryContext, text_to_cstring(key));
}

/* a < b, a == b or a > b, as text in the C collation: -1, 0 or 1 */
static int
text_order(text *a, text *b)
{
	int			c = varstr_cmp(VARDATA_ANY(a), VARSIZE_ANY_EXHDR(a),
							   VARDATA_ANY(b), VARSIZE_ANY_EXHDR(b), C_COLLATION_OID);

	return (c > 0) - (c < 0);
}

/*
 * After a key's head, a walk reads on through that key's other entries
 * in the index, fewer than this many (about what a leaf page holds of
 * entries of usual width), before it descends the index again to the
 * next key.  A step within the leaf page in hand costs next to nothing,
 * while a descent reads a leaf page anew and tests the scan keys on each
 * of its entries after the start; but stepping through a deep key would
 * read page after page.
 */
#define HEAD_WALK_STEPS 64

/*
 * The walk's scans of the open index, (target, topic, key, position) over
 * the pending rows: in_topic reads target's entries of one topic, after
 * a key, in order; next_topic finds the first entry of a later topic (or,
 * after the empty topic that no key has, the first of all).
 */
typedef struct HeadScans
{
	IndexScanDesc in_topic;
	text	   *scan_topic;		/* the topic in_topic reads; NULL: none */
	IndexScanDesc next_topic;
	TupleTableSlot *slot;
	Datum		target;
	AttrNumber	topic_att;		/* in the heap */
	AttrNumber	key_att;
	AttrNumber	due_att;
	AttrNumber	lease_att;
} HeadScans;

/* in_topic reads topic's entries after key */
static void
descend(HeadScans *hs, text *topic, text *key)
{
	ScanKeyData keys[3];

	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_TEXTEQ, hs->target);
	ScanKeyInit(&keys[1], 2, BTEqualStrategyNumber, F_TEXTEQ, PointerGetDatum(topic));
	ScanKeyInit(&keys[2], 3, BTGreaterStrategyNumber, F_TEXT_GT, PointerGetDatum(key));
	index_rescan(hs->in_topic, keys, 3, NULL, 0);
	hs->scan_topic = topic;
}

/*
 * The head of the target's first key after (topic, key) that has a
 * pending row visible to the statement's snapshot, into hs->slot: the
 * key's lowest position, first in the index.  false when there is none.
 * When in_topic last returned key's head, it reads on from there.
 */
static bool
next_head(HeadScans *hs, text *topic, text *key)
{
	IndexScanDesc scan = hs->in_topic;
	ScanKeyData keys[2];
	int			steps = 0;

	if (hs->scan_topic == NULL || text_order(hs->scan_topic, topic) != 0)
		descend(hs, topic, key);
	while (index_getnext_tid(scan, ForwardScanDirection) != NULL)
	{
		bool		isnull;
		Datum		entry_key = index_getattr(scan->xs_itup, 3, scan->xs_itupdesc, &isnull);

		if (text_order(DatumGetTextPP(entry_key), key) <= 0)
		{
			/*
			 * key's own rows, after its head: step over them (no heap fetch,
			 * so nothing is marked dead), or descend
			 */
			if (++steps < HEAD_WALK_STEPS)
				continue;
			descend(hs, topic, key);
			steps = 0;
			continue;
		}
		/* A later key: its first row that is still there is its head */
		if (index_fetch_heap(scan, hs->slot))
			return true;
	}
	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_TEXTEQ, hs->target);
	ScanKeyInit(&keys[1], 2, BTGreaterStrategyNumber, F_TEXT_GT, PointerGetDatum(topic));
	index_rescan(hs->next_topic, keys, 2, NULL, 0);
	hs->scan_topic = NULL;
	return index_getnext_slot(hs->next_topic, ForwardScanDirection, hs->slot);
}

/*
 * inbox.outbox_heads(target text, max integer, now timestamptz) -> tid[]:
 * the addresses of up to max heads of target's keys that are due and
 * unleased at now, in walk order; NULL when there are none.
 *
 * The walk goes key by key through the open index, one descent per key
 * (two at a topic's end), starting after the key where this backend's
 * last walk for the target stopped, and wrapping around after the last
 * key up to that one: it reads about as many keys as it returns heads,
 * however many keys are pending, and each key gets its turn.  The cursor
 * moves to the last head returned.  Nothing is locked here: the caller
 * locks the heads with SKIP LOCKED and checks them again on their latest
 * versions (inbox.outbox_lease).
 */
Datum
inbox_outbox_heads(PG_FUNCTION_ARGS)
{
	char	   *target = text_to_cstring(PG_GETARG_TEXT_PP(0));
	int			max = PG_GETARG_INT32(1);
	TimestampTz now = PG_GETARG_TIMESTAMPTZ(2);
	FetchCursor *c = find_cursor(target);
	text	   *start_topic = cstring_to_text(c ? c->topic : "");
	text	   *start_key = cstring_to_text(c ? c->key : "");
	text	   *topic = start_topic;
	text	   *key = start_key;
	text	   *last_topic = NULL;
	text	   *last_key = NULL;
	bool		wrapped = false;
	Oid			heapid = inbox_relid("outbox_deliveries");
	Oid			indexid;
	Relation	index;
	Relation	heap;
	HeadScans	hs;
	ItemPointerData *tids;
	Datum	   *elems;
	int			n = 0;

	if (max < 1)
		PG_RETURN_NULL();
	if (!OidIsValid(heapid))
		elog(ERROR, "table inbox.outbox_deliveries does not exist");
	/* The table first, then its index, in the order the executor locks them */
	heap = table_open(heapid, AccessShareLock);
	indexid = inbox_relid("outbox_deliveries_open");
	if (!OidIsValid(indexid))
		elog(ERROR, "index inbox.outbox_deliveries_open does not exist");
	index = index_open(indexid, AccessShareLock);
	hs.target = PG_GETARG_DATUM(0);
	hs.topic_att = index->rd_index->indkey.values[1];
	hs.key_att = index->rd_index->indkey.values[2];
	hs.due_att = attnameAttNum(heap, "due", false);
	hs.lease_att = attnameAttNum(heap, "lease_until", false);
	if (hs.due_att <= 0 || hs.lease_att <= 0)
		elog(ERROR, "inbox.outbox_deliveries has no column due or lease_until");
	hs.in_topic = inbox_index_beginscan(heap, index, GetActiveSnapshot(), 3);
	hs.in_topic->xs_want_itup = true;
	hs.scan_topic = NULL;
	hs.next_topic = inbox_index_beginscan(heap, index, GetActiveSnapshot(), 2);
	hs.slot = table_slot_create(heap, NULL);
	tids = palloc(sizeof(ItemPointerData) * max);

	while (n < max)
	{
		bool		isnull;
		Datum		due;
		Datum		lease;

		CHECK_FOR_INTERRUPTS();
		if (!next_head(&hs, topic, key))
		{
			/* Past the last key: once around, from the first */
			if (wrapped)
				break;
			wrapped = true;
			if (!next_head(&hs, cstring_to_text(""), cstring_to_text("")))
				break;
		}
		topic = DatumGetTextPCopy(slot_getattr(hs.slot, hs.topic_att, &isnull));
		key = DatumGetTextPCopy(slot_getattr(hs.slot, hs.key_att, &isnull));
		/* A wrapped walk ends with the key it started after */
		if (wrapped)
		{
			int			order = text_order(topic, start_topic);

			if (order > 0 || (order == 0 && text_order(key, start_key) > 0))
				break;
		}
		due = slot_getattr(hs.slot, hs.due_att, &isnull);
		if (isnull || DatumGetTimestampTz(due) > now)
			continue;
		lease = slot_getattr(hs.slot, hs.lease_att, &isnull);
		if (!isnull && DatumGetTimestampTz(lease) > now)
			continue;
		tids[n++] = hs.slot->tts_tid;
		last_topic = topic;
		last_key = key;
	}

	ExecDropSingleTupleTableSlot(hs.slot);
	index_endscan(hs.in_topic);
	index_endscan(hs.next_topic);
	table_close(heap, NoLock);
	index_close(index, NoLock);

	if (n == 0)
		PG_RETURN_NULL();
	set_cursor(c, target, last_topic, last_key);
	elems = palloc(sizeof(Datum) * n);
	for (int i = 0; i < n; i++)
		elems[i] = PointerGetDatum(&tids[i]);
	PG_RETURN_ARRAYTYPE_P(construct_array(elems, n, TIDOID, sizeof(ItemPointerData), false,
										  TYPALIGN_SHORT));
}

/* ------------------------------------------------------------------------
 * Receipts
 * ------------------------------------------------------------------------
 */

/*
 * A receipt names its lease twice: bytes 0-5 hold the address (ctid) of
 * the delivery's version that the lease wrote, the rest are random and
 * stored in the row, with bytes 0-5 zero (the seed).  outbox_ack and
 * outbox_fail go to the address and check the seed there: no index on
 * the receipt is needed, so the lease changes no indexed column and is a
 * HOT update.  A receipt whose address now holds another version, or
 * another row (after VACUUM FULL), finds no seed of its own there and
 * holds nothing, as if its lease had run out.
 */
#define RECEIPT_TID_BYTES 6

/* inbox.outbox_receipt_seed(receipt uuid) -> uuid: bytes 0-5 zero */
Datum
inbox_outbox_receipt_seed(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *seed = palloc(sizeof(pg_uuid_t));

	memcpy(seed, PG_GETARG_UUID_P(0), sizeof(pg_uuid_t));
	memset(seed->data, 0, RECEIPT_TID_BYTES);
	PG_RETURN_UUID_P(seed);
}

/* inbox.outbox_receipt(seed uuid, at tid) -> uuid: at in bytes 0-5 */
Datum
inbox_outbox_receipt(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *receipt = palloc(sizeof(pg_uuid_t));
	ItemPointer at = (ItemPointer) PG_GETARG_POINTER(1);
	BlockNumber block = ItemPointerGetBlockNumberNoCheck(at);
	OffsetNumber offset = ItemPointerGetOffsetNumberNoCheck(at);

	memcpy(receipt, PG_GETARG_UUID_P(0), sizeof(pg_uuid_t));
	receipt->data[0] = (unsigned char) (block >> 24);
	receipt->data[1] = (unsigned char) (block >> 16);
	receipt->data[2] = (unsigned char) (block >> 8);
	receipt->data[3] = (unsigned char) block;
	receipt->data[4] = (unsigned char) (offset >> 8);
	receipt->data[5] = (unsigned char) offset;
	PG_RETURN_UUID_P(receipt);
}

/*
 * inbox.outbox_receipt_tid(receipt uuid) -> tid: the address in bytes
 * 0-5.  Any uuid gives some address; one that no lease made finds no row
 * with its seed there.
 */
Datum
inbox_outbox_receipt_tid(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *receipt = PG_GETARG_UUID_P(0);
	ItemPointer at = palloc(sizeof(ItemPointerData));

	ItemPointerSet(at,
				   ((BlockNumber) receipt->data[0] << 24) | ((BlockNumber) receipt->data[1] << 16) |
				   ((BlockNumber) receipt->data[2] << 8) | (BlockNumber) receipt->data[3],
				   (OffsetNumber) ((receipt->data[4] << 8) | receipt->data[5]));
	PG_RETURN_POINTER(at);
}

/* ------------------------------------------------------------------------
 * Retention
 * ------------------------------------------------------------------------
 */

/* inbox.outbox_retention() -> interval: the setting in force */
Datum
inbox_outbox_retention(PG_FUNCTION_ARGS)
{
	Interval   *result = palloc0(sizeof(Interval));

	result->time = (int64) outbox_retention * USECS_PER_SEC;
	PG_RETURN_INTERVAL_P(result);
}

/*
 * inbox.outbox_position_at(t) -> bigint: microseconds since 1970 at t.  A
 * key without a row in outbox_keys starts at clock_timestamp() read this
 * way as the executor inserts the row: above every position that a row
 * the purge deleted had given (see sql/inbox.sql's banner).  C, as every
 * send's statement calls it.
 */
Datum
inbox_outbox_position_at(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(unix_micros(PG_GETARG_TIMESTAMPTZ(0)));
}

static SPIPlanPtr purge_plan = NULL;

/*
 * Delete at most limit sent messages past inbox.outbox_retention; *more
 * says whether the batch was full: limit messages considered, some
 * deleted.  The purge keeps a key's last message while a sender holds the
 * key's row, and considers it again in each batch, so a batch can fall
 * short with more behind it; one that deleted nothing is the end.
 * Nothing in a database whose SQL has no outbox (an older version): the
 * function is looked up first.
 */
int64
inbox_outbox_purge_batch(int limit, bool *more)
{
	Oid			argtypes[1] = {INT4OID};
	Datum		values[1];
	bool		isnull;
	int64		purged;
	int64		examined;

	*more = false;
	/* inbox_relid also answers InvalidOid without schema inbox */
	if (limit <= 0 || !OidIsValid(inbox_relid("outbox_messages")))
		return 0;
	values[0] = Int32GetDatum(limit);
	inbox_execute_plan(inbox_plan(&purge_plan,
								  "SELECT p.purged, p.examined FROM inbox.outbox_purge($1) AS p",
								  1, argtypes),
					   values, NULL, SPI_OK_SELECT, "inbox.outbox_purge");
	purged = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (isnull)
		purged = 0;
	examined = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	if (isnull)
		examined = 0;
	*more = examined >= limit && purged > 0;
	return purged;
}
