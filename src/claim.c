/*-------------------------------------------------------------------------
 *
 * claim.c
 *	  inbox_claim, inbox_receive and inbox_status: record a message in the
 *	  caller's transaction, as processed (claim) or as pending for later
 *	  processing (receive), and report what is recorded.
 *
 * The unique index on (scope, message_id) is the only arbiter.  A claim is
 * an INSERT ... ON CONFLICT DO NOTHING, so that the executor does what it
 * does for any unique insert:
 *
 *	- no conflicting entry: the row is inserted and commits or aborts with
 *	  the caller's transaction;
 *	- a conflicting entry whose inserter is still in progress: the executor
 *	  waits for that transaction to end, then inserts (it aborted) or
 *	  reports the conflict (it committed).  An uncommitted claim is thus
 *	  never mistaken for a processed message;
 *	- a committed conflicting entry: nothing is written, and only then do
 *	  we read the entry, to compare payload hashes and report the duplicate.
 *
 * Under REPEATABLE READ and SERIALIZABLE, a conflicting entry committed
 * after the caller's snapshot was taken makes the executor raise 40001
 * (serialization failure), which is the right answer: the caller retries
 * the whole transaction, and the retry sees the duplicate.
 *
 * inbox_receive is the same arbitration with another INSERT: the entry
 * starts as pending and carries the payload.  Claims and receives share
 * one key space per scope: whichever comes first wins, the other sees a
 * duplicate.
 *
 * A claim's row is written by direct.c where it can: the executor's own
 * routines for that statement, the table AM's speculative insertion and
 * the unique index's insertion, called without the planner, so that the
 * arbitration is the same (direct.c says why, and what it leaves out).
 * Everything else runs its statement through SPI: a receive, a claim on a
 * leaf whose layout is not exactly the one sql/inbox.sql makes, every
 * claim under inbox.direct_insert = off, and every claim where Citus is
 * installed, since there only the planner knows where rows live.
 *
 * Each function serves the SQL of 1.0.0 and later (entry points with the
 * suffix _1_0, here) and that of 0.4.0, whose entry points are in
 * compat_0_4.c.  The batch forms are in claim_many.c.
 *
 * src/claim.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "claim.h"
#include "claim_internal.h"
#include "compat.h"
#include "conflicts.h"
#include "depth.h"
#include "direct.h"
#include "events.h"
#include "groups.h"
#include "inbox.h"
#include "keys.h"
#include "outbox.h"
#include "priorities.h"
#include "spi.h"
#include "stats.h"
#include "window.h"

PG_FUNCTION_INFO_V1(inbox_claim_1_0);
PG_FUNCTION_INFO_V1(inbox_status_1_0);
PG_FUNCTION_INFO_V1(inbox_receive_json_1_0);
PG_FUNCTION_INFO_V1(inbox_receive_bytes_1_0);

/*
 * The statements on one key.  For the SQL of 1.0.0 and later, a call
 * reaches the leaf that holds its key directly: the key's bucket (keys.c)
 * names the leaf, and each leaf has its own plans.  A statement on the
 * partitioned parent would instead set up tuple routing, or run-time
 * pruning, on every execution, work that the bucket already did once for
 * the key.  The last parameter is the key's bucket (key_args appends it).
 * A receive's $6 is its entry's due (claim_receive_due).
 */
static const InboxLeafStatement key_statements[KEY_STATEMENTS] = {
	[KEY_INSERT] = {
		"claim",
		"INSERT INTO inbox.entries_p%d (scope, message_id, bucket, payload_hash) "
		"VALUES ($1, $2, $4, $3) "
		"ON CONFLICT (scope, message_id, bucket) DO NOTHING",
		{TEXTOID, TEXTOID, BYTEAOID, INT2OID}
	},
	[KEY_RECEIVE] = {
		"receive",
		"INSERT INTO inbox.entries_p%d (scope, message_id, bucket, payload_hash, state, payload, payload_bytes, due) "
		"VALUES ($1, $2, $7, $3, 'p', $4, $5, $6) "
		"ON CONFLICT (scope, message_id, bucket) DO NOTHING",
		{TEXTOID, TEXTOID, BYTEAOID, JSONBOID, BYTEAOID, TIMESTAMPTZOID, INT2OID}
	},

	/*
	 * The same with a priority above the default: a statement of its own,
	 * which only the SQL that has the column reaches (priorities.c).
	 */
	[KEY_RECEIVE_RANKED] = {
		"receive with a priority",
		"INSERT INTO inbox.entries_p%d (scope, message_id, bucket, payload_hash, state, payload, payload_bytes, due, priority) "
		"VALUES ($1, $2, $8, $3, 'p', $4, $5, $6, $7) "
		"ON CONFLICT (scope, message_id, bucket) DO NOTHING",
		{TEXTOID, TEXTOID, BYTEAOID, JSONBOID, BYTEAOID, TIMESTAMPTZOID, INT2OID, INT2OID}
	},

	/*
	 * The same with headers, $8, and the priority, $7, NULL for the
	 * default: only the SQL that has the column reaches it, and a receive
	 * without headers never does, so that it costs the others nothing.
	 */
	[KEY_RECEIVE_HEADERS] = {
		"receive with headers",
		"INSERT INTO inbox.entries_p%d (scope, message_id, bucket, payload_hash, state, payload, payload_bytes, due, priority, headers) "
		"VALUES ($1, $2, $9, $3, 'p', $4, $5, $6, $7, $8) "
		"ON CONFLICT (scope, message_id, bucket) DO NOTHING",
		{TEXTOID, TEXTOID, BYTEAOID, JSONBOID, BYTEAOID, TIMESTAMPTZOID, INT2OID, JSONBOID, INT2OID}
	},

	/*
	 * No COLLATE on the parameters: the columns' collation "C" wins over
	 * the parameters' default one, and Citus cannot plan an explicit one.
	 */
	[KEY_LOOKUP] = {
		"lookup",
		"SELECT received_at, payload_hash, state FROM inbox.entries_p%d "
		"WHERE scope OPERATOR(pg_catalog.=) $1 "
		"AND message_id OPERATOR(pg_catalog.=) $2 "
		"AND bucket OPERATOR(pg_catalog.=) $3",
		{TEXTOID, TEXTOID, INT2OID}
	},
};

static SPIPlanPtr key_plans_kept[KEY_STATEMENTS][INBOX_LEAVES];

/*
 * The statements of 0.4.0's SQL, whose inbox.entries is hash-partitioned
 * by PostgreSQL and has no bucket: used by 0.4.0's entry points until
 * ALTER EXTENSION inbox UPDATE runs.  They take the arguments above but
 * the bucket; the legacy receive has no use for $6 (not_before), and
 * ignores it.
 */
static const InboxLeafStatement legacy_statements[KEY_STATEMENTS] = {
	[KEY_INSERT] = {
		"claim",
		"INSERT INTO inbox.entries (scope, message_id, payload_hash) "
		"VALUES ($1, $2, $3) "
		"ON CONFLICT (scope, message_id) DO NOTHING",
		{TEXTOID, TEXTOID, BYTEAOID}
	},
	[KEY_RECEIVE] = {
		"receive",
		"INSERT INTO inbox.entries (scope, message_id, payload_hash, state, payload, payload_bytes) "
		"VALUES ($1, $2, $3, 'p', $4, $5) "
		"ON CONFLICT (scope, message_id) DO NOTHING",
		{TEXTOID, TEXTOID, BYTEAOID, JSONBOID, BYTEAOID, TIMESTAMPTZOID}
	},
	[KEY_RECEIVE_RANKED] = {0},
	[KEY_RECEIVE_HEADERS] = {0},
	[KEY_LOOKUP] = {
		"lookup",
		"SELECT received_at, payload_hash, state FROM inbox.entries "
		"WHERE scope OPERATOR(pg_catalog.=) $1 COLLATE pg_catalog.\"C\" "
		"AND message_id OPERATOR(pg_catalog.=) $2 COLLATE pg_catalog.\"C\"",
		{TEXTOID, TEXTOID}
	},
};

static SPIPlanPtr legacy_plans_kept[KEY_STATEMENTS];

/*
 * The plan of kind for the key's leaf (or the legacy one), made on first
 * use.  Generic: the plan cache would otherwise plan the first five calls
 * anew, and the legacy lookup, whose generic plan on paper scans every
 * leaf, on every call.  That generic plan prunes to one leaf at executor
 * start.
 */
static SPIPlanPtr
key_plan(const KeyPlans *kp, KeyStatement kind)
{
	const InboxLeafStatement *stmt = &legacy_statements[kind];

	if (!kp->legacy)
		return inbox_leaf_plan(&key_statements[kind], key_plans_kept[kind],
							   INBOX_BUCKET_LEAF(kp->bucket));
	return inbox_plan(&legacy_plans_kept[kind], stmt->sql,
					  inbox_statement_nargs(stmt->argtypes), stmt->argtypes);
}

/*
 * The arguments of kind's plan for the key: the caller's, and then, for a
 * leaf's plan, the bucket.  Returns the arrays to pass, v and n or the
 * caller's own.
 */
static Datum *
key_args(const KeyPlans *kp, KeyStatement kind, Datum *values, const char *nulls,
		 Datum *v, char *n, const char **nulls_out)
{
	int			given = inbox_statement_nargs(key_statements[kind].argtypes) - 1;

	*nulls_out = nulls;
	if (kp->legacy)
		return values;
	memcpy(v, values, sizeof(Datum) * given);
	if (nulls != NULL)
		memcpy(n, nulls, given);
	else
		memset(n, ' ', given);
	v[given] = Int16GetDatum((int16) kp->bucket);
	n[given] = ' ';
	*nulls_out = n;
	return v;
}

/* The plans for (scope, message_id), by the release of the caller's SQL */
static KeyPlans
key_plans(text *scope, text *message_id, bool legacy)
{
	KeyPlans	kp;

	kp.legacy = legacy;
	kp.bucket = legacy ? -1 : inbox_bucket(scope, message_id);
	return kp;
}

static const char *
state_name(char state)
{
	switch (state)
	{
		case INBOX_STATE_PENDING:
			return "pending";
		case INBOX_STATE_PROCESSING:
			return "processing";
		case INBOX_STATE_DONE:
			return "done";
		case INBOX_STATE_DEAD:
			return "dead";
	}
	elog(ERROR, "unexpected inbox entry state \"%c\"", state);
	return NULL;				/* keep compiler quiet */
}

/*
 * Read the entry for (scope, message_id).  read_only = false gives the
 * statement a fresh snapshot under READ COMMITTED, so it sees the entry of
 * a concurrent claim whose commit our INSERT has just waited for.
 */
static bool
lookup_entry(const KeyPlans *kp, text *scope, text *message_id, StoredEntry *entry)
{
	Datum		values[2];
	HeapTuple	tuple;
	TupleDesc	tupdesc;
	bool		isnull;
	Datum		d;
	Datum		v[KEY_MAX_ARGS + 1];
	char		n[KEY_MAX_ARGS + 1];
	const char *nulls;
	Datum	   *args;

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(message_id);
	args = key_args(kp, KEY_LOOKUP, values, NULL, v, n, &nulls);
	if (inbox_execute_plan(key_plan(kp, KEY_LOOKUP), args, nulls, SPI_OK_SELECT,
						   "the lookup of a key") == 0)
		return false;

	tuple = SPI_tuptable->vals[0];
	tupdesc = SPI_tuptable->tupdesc;
	entry->received_at = DatumGetTimestampTz(SPI_getbinval(tuple, tupdesc, 1, &isnull));
	d = SPI_getbinval(tuple, tupdesc, 2, &isnull);
	entry->payload_hash = isnull ? NULL : DatumGetByteaPP(d);
	entry->state = DatumGetChar(SPI_getbinval(tuple, tupdesc, 3, &isnull));
	return true;
}

/* A claim's entry written by direct.c, run by inbox_run_bounded() */
typedef struct DirectCall
{
	int			bucket;
	text	   *scope;
	text	   *message_id;
	bytea	   *payload_hash;
	StoredEntry *entry;			/* if not NULL: read the entry found there */
	bool		found;			/* whether it was read */
} DirectCall;

static int
direct_call(void *arg)
{
	DirectCall *c = (DirectCall *) arg;
	InboxDirectWriter *w = inbox_direct_begin("INSERT");
	InboxDirectResult r;

	if (w == NULL)
		return INBOX_DIRECT_UNAVAILABLE;
	r = inbox_direct_write(w, c->bucket, c->scope, c->message_id, c->payload_hash);
	if (r == INBOX_DIRECT_CONFLICT && c->entry != NULL)
		c->found = inbox_direct_lookup(w, c->bucket, c->scope, c->message_id,
									   &c->entry->received_at, &c->entry->payload_hash,
									   &c->entry->state);
	inbox_direct_end(w);
	return (int) r;
}

/*
 * Try to insert the entry of kind (the claim's or the receive's INSERT ...
 * ON CONFLICT DO NOTHING); true if this call inserted it.  A claim's entry
 * is written by direct.c where it can, with the same arbitration.
 */
bool
claim_insert_entry(const KeyPlans *kp, KeyStatement kind, Datum *values, const char *nulls,
				   text *scope, text *message_id, bytea *payload_hash, bool try_direct)
{
	Datum		v[KEY_MAX_ARGS + 1];
	char		n[KEY_MAX_ARGS + 1];
	const char *args_nulls;
	Datum	   *args;
	int			rc;

	if (try_direct && kind == KEY_INSERT && !kp->legacy)
	{
		DirectCall	c = {kp->bucket, scope, message_id, payload_hash, NULL, false};

		rc = inbox_run_bounded(direct_call, &c, scope, message_id, "message");
		if (rc != INBOX_DIRECT_UNAVAILABLE)
			return rc == INBOX_DIRECT_WRITTEN;
	}
	args = key_args(kp, kind, values, nulls, v, n, &args_nulls);
	rc = inbox_execute_bounded(key_plan(kp, kind), args, args_nulls, scope, message_id, "message");
	return inbox_spi_check(rc, SPI_OK_INSERT, "the INSERT of a claim") == 1;
}

bool
claim_hashes_equal(const bytea *a, const bytea *b)
{
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/*
 * The INSERT saw a conflicting entry that the snapshot no longer sees, as
 * many times in a row as a claim tries: give up with a serialization
 * failure, which the caller retries.
 */
void
claim_raise_contention(const text *scope, const text *message_id, int attempt)
{
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not claim message \"%s\" in scope \"%s\"",
					inbox_quote(message_id), inbox_quote(scope)),
			 errdetail("Its entry was deleted and re-created concurrently %d times in a row.",
					   attempt),
			 errhint("Retry the transaction.")));
}

/*
 * The key exists and is committed (or ours): decide between a payload
 * mismatch, a raised duplicate and a plain "false".  A mismatch is checked
 * first and always raises, whatever inbox.on_duplicate says: the same id
 * with different content is a producer bug, never a silent duplicate.
 */
static void
report_duplicate(text *scope, text *message_id, bytea *payload_hash,
				 StoredEntry *entry)
{
	if (payload_hash != NULL && entry->payload_hash != NULL &&
		!claim_hashes_equal(payload_hash, entry->payload_hash))
	{
		inbox_stats_count(scope, INBOX_COUNT_MISMATCH);
		ereport(ERROR,
				(errcode(ERRCODE_INBOX_PAYLOAD_MISMATCH),
				 errmsg("message \"%s\" in scope \"%s\" was already received with a different payload",
						inbox_quote(message_id), inbox_quote(scope)),
				 errdetail("First received at %s with payload hash %s; this delivery has payload hash %s.",
						   timestamptz_to_str(entry->received_at),
						   inbox_hex(entry->payload_hash),
						   inbox_hex(payload_hash)),
				 errhint("The producer reused a message id for different content, or the two hashes were computed "
						 "from different encodings of the payload. The stored entry is unchanged.")));
	}

	inbox_stats_count(scope, INBOX_COUNT_DUPLICATE);
	if (inbox_on_duplicate_raises())
		ereport(ERROR,
				(errcode(ERRCODE_INBOX_DUPLICATE),
				 entry->state == INBOX_STATE_DONE
				 ? errmsg("message \"%s\" in scope \"%s\" was already processed",
						  inbox_quote(message_id), inbox_quote(scope))
				 : errmsg("message \"%s\" in scope \"%s\" was already received",
						  inbox_quote(message_id), inbox_quote(scope)),
				 errdetail("It was first received at %s and is %s.",
						   timestamptz_to_str(entry->received_at),
						   state_name(entry->state)),
				 errhint("This delivery is a redelivery: acknowledge it to the broker without applying its effect again.")));
}

/*
 * Arbitrate one key: insert it with plan, or report the entry that is
 * already there.  True if this call inserted it.  The caller holds an SPI
 * connection.
 */
static bool
claim_key(const KeyPlans *kp, KeyStatement kind, Datum *values, const char *nulls,
		  text *scope, text *message_id, bytea *payload_hash)
{
	int			attempt;

	for (attempt = 1;; attempt++)
	{
		StoredEntry entry;

		if (claim_insert_entry(kp, kind, values, nulls, scope, message_id, payload_hash, true))
		{
			inbox_stats_count(scope, INBOX_COUNT_ENTRY);
			/* A new id: the content may still be a message sent again */
			if (!kp->legacy)
				inbox_window_claimed(scope, message_id, payload_hash, NULL, false);
			return true;
		}
		if (lookup_entry(kp, scope, message_id, &entry))
		{
			report_duplicate(scope, message_id, payload_hash, &entry);
			return false;
		}

		/*
		 * The INSERT saw a conflicting entry that our snapshot no longer
		 * sees: it was deleted in between.  Go back to the index.
		 */
		if (attempt >= CLAIM_MAX_ATTEMPTS)
			claim_raise_contention(scope, message_id, attempt);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * inbox_claim(scope text, message_id text, payload_hash bytea) -> boolean
 *
 * True: this transaction now holds the claim and must apply the effect.
 * False: the message was already processed (inbox.on_duplicate = return).
 */
Datum
inbox_claim_call(FunctionCallInfo fcinfo, bool legacy)
{
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	text	   *message_id = inbox_key_arg(fcinfo, 1, "message_id", INBOX_MAX_MESSAGE_ID_BYTES);
	bytea	   *payload_hash = inbox_hash_arg(fcinfo, 2);
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	bool		claimed;
	KeyPlans	kp;

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(message_id);
	values[2] = PointerGetDatum(payload_hash);
	if (payload_hash == NULL)
		nulls[2] = 'n';

	inbox_spi_connect();
	kp = key_plans(scope, message_id, legacy);
	claimed = claim_key(&kp, KEY_INSERT, values, nulls, scope, message_id, payload_hash);
	SPI_finish();
	PG_RETURN_BOOL(claimed);
}

/*
 * inbox_claim decided by the entry point (access.c), as the extension's
 * owner, when direct.c can write and read the key's leaf without SQL: the
 * checks, the arbitration and the reporting of inbox_claim_call(), in the
 * same order.  False, having done nothing, where the implementation must
 * decide: a claim bounded by inbox.claim_timeout, a leaf that needs SPI, a
 * scope that may have a content window, or an entry that was deleted
 * between the write and the read.  Otherwise *claimed says whether this
 * call claimed the message.
 */
bool
inbox_claim_direct(FunctionCallInfo fcinfo, bool *claimed)
{
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	text	   *message_id = inbox_key_arg(fcinfo, 1, "message_id", INBOX_MAX_MESSAGE_ID_BYTES);
	bytea	   *payload_hash = inbox_hash_arg(fcinfo, 2);
	StoredEntry entry;
	DirectCall	c = {0, scope, message_id, payload_hash, &entry, false};
	bool		windowed = payload_hash != NULL && !inbox_window_known_off(scope);

	/*
	 * Not where a key's bucket takes an encoding conversion, which is
	 * looked up along the search_path that only the implementation pins.
	 * Nor where the scope may have a content window that the backend has
	 * not read yet: the implementation reads the windows with a statement
	 * (window.c).
	 */
	if (inbox_claim_bounded() ||
		(GetDatabaseEncoding() != PG_UTF8 && GetDatabaseEncoding() != PG_SQL_ASCII) ||
		(windowed && !inbox_window_known_on(scope)))
		return false;
	c.bucket = inbox_bucket(scope, message_id);
	switch ((InboxDirectResult) direct_call(&c))
	{
		case INBOX_DIRECT_WRITTEN:
			inbox_stats_count(scope, INBOX_COUNT_ENTRY);
			/* A new id: the content may still be a message sent again */
			if (windowed && !inbox_window_first(scope, message_id, payload_hash))
			{
				inbox_spi_connect();
				inbox_window_claimed(scope, message_id, payload_hash, NULL, true);
				SPI_finish();
			}
			*claimed = true;
			return true;
		case INBOX_DIRECT_CONFLICT:
			if (!c.found)
				return false;
			report_duplicate(scope, message_id, payload_hash, &entry);
			*claimed = false;
			return true;
		case INBOX_DIRECT_NOT_FOUND:
		case INBOX_DIRECT_UNAVAILABLE:
			break;
	}
	return false;
}

Datum
inbox_claim_1_0(PG_FUNCTION_ARGS)
{
	return inbox_claim_call(fcinfo, false);
}

/*
 * The digest inbox_receive stores when the caller gives none: SHA-256 of
 * the payload's bytes, or of a jsonb payload's text form in UTF-8, which
 * is what sha256(convert_to(payload::text, 'UTF8')) gives a consumer.
 *
 * A SQL_ASCII database has no encoding to convert from: its text is bytes
 * that nobody checked.  There the digest is of the text form's bytes as
 * they are, which is the same as above whenever those bytes are valid
 * UTF-8 (convert_to then changes nothing), and still a digest, rather than
 * an error, when they are not (convert_to then fails).
 */
bytea *
claim_payload_digest(Datum payload, bool is_jsonb)
{
	Datum		bytes = payload;

	if (is_jsonb)
	{
		char	   *json = DatumGetCString(DirectFunctionCall1(jsonb_out, payload));
		char	   *utf8 = GetDatabaseEncoding() == PG_SQL_ASCII ? json :
			pg_server_to_any(json, strlen(json), PG_UTF8);
		int			len = strlen(utf8);
		bytea	   *raw = palloc(VARHDRSZ + len);

		SET_VARSIZE(raw, VARHDRSZ + len);
		memcpy(VARDATA(raw), utf8, len);
		bytes = PointerGetDatum(raw);
	}
	return DatumGetByteaPP(DirectFunctionCall1(sha256_bytea, bytes));
}

/*
 * A received entry's due: now(), or its not_before if later.  A message
 * with a group key has none (*null is 'n'): it waits behind its group
 * until groups.c finds it the head.
 */
Datum
claim_receive_due(Datum not_before, bool grouped, char *null)
{
	TimestampTz now = GetCurrentTransactionStartTimestamp();

	*null = grouped ? 'n' : ' ';
	if (grouped)
		return (Datum) 0;
	if (not_before != (Datum) 0 && DatumGetTimestampTz(not_before) > now)
		return not_before;
	return TimestampTzGetDatum(now);
}

/*
 * The headers argument argno of a receive, checked as an outbox message's
 * are (outbox_check.c), so that what a worker takes is what every target
 * could have carried; 0 when the call has none (the SQL before 1.2.0) or
 * passes NULL.
 */
Datum
claim_headers_arg(FunctionCallInfo fcinfo, int argno)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return (Datum) 0;
	outbox_check_headers(PG_GETARG_DATUM(argno));
	return PG_GETARG_DATUM(argno);
}

/*
 * inbox_receive(scope text, message_id text, payload jsonb|bytea,
 *				 payload_hash bytea, not_before timestamptz, group_key text,
 *				 priority integer, headers jsonb)
 *		-> boolean
 *
 * Store the message as pending, to be taken later by inbox_take.  True if
 * new; false (or IB001) if the key exists in any state; IB002 if it exists
 * with another payload hash.  The SQL overloads pick the payload's type.
 * A new message with a group key joins its group (groups.c); one with a
 * priority above the default stores it (priorities.c), and one with
 * headers keeps them for the worker.  1.0.0's SQL has none of the last
 * four arguments, or only not_before; 1.1.0's has no headers.
 */
Datum
inbox_receive_call(FunctionCallInfo fcinfo, bool is_jsonb, bool legacy)
{
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	text	   *message_id = inbox_key_arg(fcinfo, 1, "message_id", INBOX_MAX_MESSAGE_ID_BYTES);
	bytea	   *payload_hash = inbox_hash_arg(fcinfo, 3);
	text	   *group_key = inbox_group_key_arg(fcinfo, 5);
	int			priority = inbox_priority_arg(fcinfo, 6);
	Datum		headers = claim_headers_arg(fcinfo, 7);
	Datum		payload;
	Datum		values[8];
	char		nulls[8] = {' ', ' ', ' ', 'n', 'n', 'n', ' ', ' '};
	KeyStatement kind = priority > 0 ? KEY_RECEIVE_RANKED : KEY_RECEIVE;
	Datum		not_before;
	bool		received;
	KeyPlans	kp;

	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("payload must not be null"),
				 errhint("A received message is processed later from its stored payload; "
						 "use inbox_claim to record a message processed at once.")));
	payload = PG_GETARG_DATUM(2);
	if (payload_hash == NULL)
		payload_hash = claim_payload_digest(payload, is_jsonb);

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(message_id);
	values[2] = PointerGetDatum(payload_hash);
	values[3] = values[4] = (Datum) 0;
	values[is_jsonb ? 3 : 4] = payload;
	nulls[is_jsonb ? 3 : 4] = ' ';
	/* not_before, in every form but the shortest of 1.0.0 */
	not_before = (Datum) 0;
	if (PG_NARGS() > 4 && !PG_ARGISNULL(4))
	{
		inbox_check_not_before(PG_GETARG_TIMESTAMPTZ(4));
		not_before = PG_GETARG_DATUM(4);
	}
	values[5] = claim_receive_due(not_before, group_key != NULL, &nulls[5]);

	values[6] = Int16GetDatum((int16) priority);
	if (headers != (Datum) 0)
	{
		kind = KEY_RECEIVE_HEADERS;
		nulls[6] = priority > 0 ? ' ' : 'n';
		values[7] = headers;
	}

	inbox_spi_connect();
	kp = key_plans(scope, message_id, legacy);
	received = claim_key(&kp, kind, values, nulls, scope, message_id, payload_hash);
	if (received && group_key != NULL)
		inbox_group_enqueue(scope, 1, &message_id, &group_key, not_before);
	SPI_finish();
	if (received)
	{
		inbox_scope_touched(inbox_scope_leaf(scope), scope,
							INBOX_TOUCH_LOCKS | INBOX_TOUCH_WAKES);
		/* Not due at once if it waits for not_before or its group's head */
		inbox_depth_moved(scope, INBOX_DEPTH_NONE, INBOX_STATE_PENDING, 1,
						  values[5] != (Datum) 0 || group_key != NULL);
	}
	PG_RETURN_BOOL(received);
}

Datum
inbox_receive_json_1_0(PG_FUNCTION_ARGS)
{
	return inbox_receive_call(fcinfo, true, false);
}

Datum
inbox_receive_bytes_1_0(PG_FUNCTION_ARGS)
{
	return inbox_receive_call(fcinfo, false, false);
}

/*
 * inbox_status(scope text, message_id text)
 *		-> SETOF (received_at timestamptz, payload_hash bytea, state text)
 *
 * One row if an entry is visible to this transaction, none otherwise.  A
 * consumer whose COMMIT outcome was lost (the connection dropped) calls it
 * from a new session: a row means the claim, and so the effect, committed.
 */
Datum
inbox_status_call(FunctionCallInfo fcinfo, bool legacy)
{
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	text	   *message_id = inbox_key_arg(fcinfo, 1, "message_id", INBOX_MAX_MESSAGE_ID_BYTES);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	StoredEntry entry;
	KeyPlans	kp;

	InitMaterializedSRF(fcinfo, 0);

	inbox_spi_connect();
	kp = key_plans(scope, message_id, legacy);

	/* tuplestore_putvalues copies, so SPI memory may go away afterwards */
	if (lookup_entry(&kp, scope, message_id, &entry))
	{
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		values[0] = TimestampTzGetDatum(entry.received_at);
		values[1] = PointerGetDatum(entry.payload_hash);
		nulls[1] = (entry.payload_hash == NULL);
		values[2] = CStringGetTextDatum(state_name(entry.state));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}

	SPI_finish();
	return (Datum) 0;
}

Datum
inbox_status_1_0(PG_FUNCTION_ARGS)
{
	return inbox_status_call(fcinfo, false);
}
