/*-------------------------------------------------------------------------
 *
 * claim.c
 *	  inbox_claim, inbox_receive and inbox_status: record a message in the
 *	  caller's transaction, as processed (claim) or as pending for later
 *	  processing (receive), and report what is recorded.
 *
 * The unique index on (scope, message_id) is the only arbiter.  A claim is
 * an INSERT ... ON CONFLICT DO NOTHING run through SPI, so that the
 * executor does what it does for any unique insert:
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
 * Going through SPI rather than calling heap and index AMs directly keeps
 * the claim working wherever the planner decides where rows live, such as
 * when the inbox tables are distributed by Citus.
 *
 * Each function has two C entry points: the one that version 1.0.0 of the
 * SQL binds (suffix _1_0), and the one of the previous release, which
 * checks that the database really is at that release (see version.c).
 *
 * src/claim.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "claim.h"
#include "compat.h"
#include "inbox.h"
#include "keys.h"
#include "stats.h"
#include "version.h"

PG_FUNCTION_INFO_V1(inbox_claim_1_0);
PG_FUNCTION_INFO_V1(inbox_status_1_0);
PG_FUNCTION_INFO_V1(inbox_receive_json_1_0);
PG_FUNCTION_INFO_V1(inbox_receive_bytes_1_0);
PG_FUNCTION_INFO_V1(inbox_claim);
PG_FUNCTION_INFO_V1(inbox_status);
PG_FUNCTION_INFO_V1(inbox_receive_json);
PG_FUNCTION_INFO_V1(inbox_receive_bytes);

/* What a committed duplicate does: inbox.on_duplicate */
typedef enum InboxOnDuplicate
{
	INBOX_ON_DUPLICATE_RETURN,
	INBOX_ON_DUPLICATE_RAISE
} InboxOnDuplicate;

static const struct config_enum_entry on_duplicate_options[] = {
	{"return", INBOX_ON_DUPLICATE_RETURN, false},
	{"raise", INBOX_ON_DUPLICATE_RAISE, false},
	{NULL, 0, false}
};

/* inbox.on_duplicate */
static int	on_duplicate = INBOX_ON_DUPLICATE_RETURN;

/* inbox.claim_timeout: longest wait for a concurrent claim, 0 = no limit */
static int	claim_timeout = 0;

/*
 * How often a claim retries when its INSERT conflicted but the conflicting
 * entry was gone by the time it looked (purged in between).  Each retry
 * goes back to the index, so this only bounds a pathological loop.
 */
#define CLAIM_MAX_ATTEMPTS 10

/*
 * Plans kept for the life of the backend.  The plan cache re-plans them
 * after DDL on the inbox tables (including DROP and CREATE EXTENSION), and
 * they are always used under the function's pinned search_path.
 */
static SPIPlanPtr insert_plan = NULL;
static SPIPlanPtr receive_plan = NULL;
static SPIPlanPtr lookup_plan = NULL;

static const char *const insert_sql =
"INSERT INTO inbox.entries (scope, message_id, payload_hash) "
"VALUES ($1, $2, $3) "
"ON CONFLICT (scope, message_id) DO NOTHING";

/* Prepared only when inbox_receive is first used (version 0.3.0 on) */
static const char *const receive_sql =
"INSERT INTO inbox.entries (scope, message_id, payload_hash, state, payload, payload_bytes) "
"VALUES ($1, $2, $3, 'p', $4, $5) "
"ON CONFLICT (scope, message_id) DO NOTHING";

static const char *const lookup_sql =
"SELECT received_at, payload_hash, state FROM inbox.entries "
"WHERE scope OPERATOR(pg_catalog.=) $1 COLLATE pg_catalog.\"C\" "
"AND message_id OPERATOR(pg_catalog.=) $2 COLLATE pg_catalog.\"C\"";

/* An entry as read back from inbox.entries, in SPI memory */
typedef struct InboxEntry
{
	TimestampTz received_at;
	bytea	   *payload_hash;	/* NULL if the claim gave none */
	char		state;
} InboxEntry;

/*
 * The settings of the claim path.  Both are PGC_USERSET: they describe how
 * one consumer wants its duplicates reported, so they belong to the
 * session, role, database or a SET LOCAL around one transaction.
 */
void
claim_init(void)
{
	DefineCustomEnumVariable("inbox.on_duplicate",
							 "What inbox_claim does when the message was already processed.",
							 "\"return\" makes it return false; \"raise\" raises SQLSTATE IB001.",
							 &on_duplicate,
							 INBOX_ON_DUPLICATE_RETURN,
							 on_duplicate_options,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("inbox.claim_timeout",
							"Longest time inbox_claim waits for a concurrent, uncommitted claim of the same message.",
							"When the wait exceeds it the claim fails with SQLSTATE IB003. "
							"0 waits until the other transaction ends (or lock_timeout expires).",
							&claim_timeout,
							0,
							0, INT_MAX,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
}

static SPIPlanPtr
keep_plan(const char *sql, int nargs, Oid *argtypes, int cursor_options)
{
	SPIPlanPtr	plan = SPI_prepare_cursor(sql, nargs, argtypes, cursor_options);

	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s",
			 SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	return plan;
}

static void
prepare_plans(void)
{
	if (insert_plan == NULL)
	{
		Oid			types[3] = {TEXTOID, TEXTOID, BYTEAOID};

		insert_plan = keep_plan(insert_sql, 3, types, 0);
	}
	if (lookup_plan == NULL)
	{
		Oid			types[2] = {TEXTOID, TEXTOID};

		/*
		 * A generic plan: the plan cache would otherwise keep choosing custom
		 * plans (a generic scan of all leaves looks costlier on paper) and
		 * re-plan the duplicate path on every call.  The generic plan prunes
		 * to one leaf at executor start.
		 */
		lookup_plan = keep_plan(lookup_sql, 2, types, CURSOR_OPT_GENERIC_PLAN);
	}
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
lookup_entry(text *scope, text *message_id, InboxEntry *entry)
{
	Datum		values[2];
	HeapTuple	tuple;
	TupleDesc	tupdesc;
	bool		isnull;
	Datum		d;
	int			rc;

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(message_id);
	rc = SPI_execute_plan(lookup_plan, values, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute_plan failed: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return false;

	tuple = SPI_tuptable->vals[0];
	tupdesc = SPI_tuptable->tupdesc;
	entry->received_at = DatumGetTimestampTz(SPI_getbinval(tuple, tupdesc, 1, &isnull));
	d = SPI_getbinval(tuple, tupdesc, 2, &isnull);
	entry->payload_hash = isnull ? NULL : DatumGetByteaPP(d);
	entry->state = DatumGetChar(SPI_getbinval(tuple, tupdesc, 3, &isnull));
	return true;
}

/*
 * Run the claim's INSERT under inbox.claim_timeout.  The timeout is applied
 * as lock_timeout in a GUC nest level of its own, so it covers exactly this
 * statement and is undone on success and on error alike; its expiry is
 * reported as IB003 rather than as a generic lock timeout, because the
 * caller asked for a bounded claim and must be able to tell "held by a
 * concurrent claim, try later" from its other errors.
 */
static int
insert_bounded(SPIPlanPtr plan, Datum *values, const char *nulls,
			   text *scope, text *message_id)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			nestlevel = NewGUCNestLevel();
	char		timeout[32];
	int			rc = 0;

	snprintf(timeout, sizeof(timeout), "%d", claim_timeout);
	(void) set_config_option("lock_timeout", timeout,
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	PG_TRY();
	{
		rc = SPI_execute_plan(plan, values, nulls, false, 0);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			PG_RE_THROW();
		FlushErrorState();
		ereport(ERROR,
				(errcode(ERRCODE_INBOX_CLAIM_IN_FLIGHT),
				 errmsg("message \"%s\" in scope \"%s\" is being claimed by a concurrent transaction",
						inbox_quote(message_id), inbox_quote(scope)),
				 errdetail("The claim waited %d ms (inbox.claim_timeout) for a lock held by another transaction, "
						   "most likely an uncommitted claim of the same message.",
						   claim_timeout),
				 errhint("Retry after that transaction ends: if it committed, the retry reports a duplicate; "
						 "if it rolled back, the retry claims the message.")));
	}
	PG_END_TRY();
	AtEOXact_GUC(true, nestlevel);
	return rc;
}

/*
 * Try to insert the entry with plan (the claim's or the receive's INSERT ...
 * ON CONFLICT DO NOTHING); true if this call inserted it.
 */
static bool
insert_entry(SPIPlanPtr plan, Datum *values, const char *nulls,
			 text *scope, text *message_id)
{
	int			rc;

	if (claim_timeout > 0)
		rc = insert_bounded(plan, values, nulls, scope, message_id);
	else
		rc = SPI_execute_plan(plan, values, nulls, false, 0);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "SPI_execute_plan failed: %s", SPI_result_code_string(rc));
	return SPI_processed == 1;
}

static bool
hashes_equal(bytea *a, bytea *b)
{
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/*
 * The key exists and is committed (or ours): decide between a payload
 * mismatch, a raised duplicate and a plain "false".  A mismatch is checked
 * first and always raises, whatever inbox.on_duplicate says: the same id
 * with different content is a producer bug, never a silent duplicate.
 */
static void
report_duplicate(text *scope, text *message_id, bytea *payload_hash,
				 InboxEntry *entry)
{
	if (payload_hash != NULL && entry->payload_hash != NULL &&
		!hashes_equal(payload_hash, entry->payload_hash))
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
	if (on_duplicate == INBOX_ON_DUPLICATE_RAISE)
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
claim_key(SPIPlanPtr plan, Datum *values, const char *nulls,
		  text *scope, text *message_id, bytea *payload_hash)
{
	int			attempt;

	for (attempt = 1;; attempt++)
	{
		InboxEntry	entry;

		if (insert_entry(plan, values, nulls, scope, message_id))
		{
			inbox_stats_count(scope, INBOX_COUNT_CLAIM);
			return true;
		}
		if (lookup_entry(scope, message_id, &entry))
		{
			report_duplicate(scope, message_id, payload_hash, &entry);
			return false;
		}

		/*
		 * The INSERT saw a conflicting entry that our snapshot no longer
		 * sees: it was deleted in between.  Go back to the index.
		 */
		if (attempt >= CLAIM_MAX_ATTEMPTS)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not claim message \"%s\" in scope \"%s\"",
							inbox_quote(message_id), inbox_quote(scope)),
					 errdetail("Its entry was deleted and re-created concurrently %d times in a row.",
							   attempt),
					 errhint("Retry the transaction.")));
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * inbox_claim(scope text, message_id text, payload_hash bytea) -> boolean
 *
 * True: this transaction now holds the claim and must apply the effect.
 * False: the message was already processed (inbox.on_duplicate = return).
 */
static Datum
claim(FunctionCallInfo fcinfo)
{
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	text	   *message_id = inbox_key_arg(fcinfo, 1, "message_id", INBOX_MAX_MESSAGE_ID_BYTES);
	bytea	   *payload_hash = inbox_hash_arg(fcinfo, 2);
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	bool		claimed;

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(message_id);
	values[2] = PointerGetDatum(payload_hash);
	if (payload_hash == NULL)
		nulls[2] = 'n';

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	prepare_plans();
	claimed = claim_key(insert_plan, values, nulls, scope, message_id, payload_hash);
	SPI_finish();
	PG_RETURN_BOOL(claimed);
}

Datum
inbox_claim_1_0(PG_FUNCTION_ARGS)
{
	return claim(fcinfo);
}

Datum
inbox_claim(PG_FUNCTION_ARGS)
{
	inbox_require_previous_sql();
	return claim(fcinfo);
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
static bytea *
payload_digest(Datum payload, bool is_jsonb)
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

/* inbox_receive for either payload type; the SQL overloads pick one */
static Datum
receive(FunctionCallInfo fcinfo, bool is_jsonb)
{
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	text	   *message_id = inbox_key_arg(fcinfo, 1, "message_id", INBOX_MAX_MESSAGE_ID_BYTES);
	bytea	   *payload_hash = inbox_hash_arg(fcinfo, 3);
	Datum		payload;
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', 'n', 'n'};
	bool		received;

	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("payload must not be null"),
				 errhint("A received message is processed later from its stored payload; "
						 "use inbox_claim to record a message processed at once.")));
	payload = PG_GETARG_DATUM(2);
	if (payload_hash == NULL)
		payload_hash = payload_digest(payload, is_jsonb);

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(message_id);
	values[2] = PointerGetDatum(payload_hash);
	values[3] = values[4] = (Datum) 0;
	values[is_jsonb ? 3 : 4] = payload;
	nulls[is_jsonb ? 3 : 4] = ' ';

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	prepare_plans();
	if (receive_plan == NULL)
	{
		Oid			types[5] = {TEXTOID, TEXTOID, BYTEAOID, JSONBOID, BYTEAOID};

		receive_plan = keep_plan(receive_sql, 5, types, 0);
	}
	received = claim_key(receive_plan, values, nulls, scope, message_id, payload_hash);
	SPI_finish();
	PG_RETURN_BOOL(received);
}

/*
 * inbox_receive(scope text, message_id text, payload jsonb|bytea,
 *				 payload_hash bytea) -> boolean
 *
 * Store the message as pending, to be taken later by inbox_take.  True if
 * new; false (or IB001) if the key exists in any state; IB002 if it exists
 * with another payload hash.
 */
Datum
inbox_receive_json_1_0(PG_FUNCTION_ARGS)
{
	return receive(fcinfo, true);
}

Datum
inbox_receive_bytes_1_0(PG_FUNCTION_ARGS)
{
	return receive(fcinfo, false);
}

Datum
inbox_receive_json(PG_FUNCTION_ARGS)
{
	inbox_require_previous_sql();
	return receive(fcinfo, true);
}

Datum
inbox_receive_bytes(PG_FUNCTION_ARGS)
{
	inbox_require_previous_sql();
	return receive(fcinfo, false);
}

/*
 * inbox_status(scope text, message_id text)
 *		-> SETOF (received_at timestamptz, payload_hash bytea, state text)
 *
 * One row if an entry is visible to this transaction, none otherwise.  A
 * consumer whose COMMIT outcome was lost (the connection dropped) calls it
 * from a new session: a row means the claim, and so the effect, committed.
 */
static Datum
status(FunctionCallInfo fcinfo)
{
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	text	   *message_id = inbox_key_arg(fcinfo, 1, "message_id", INBOX_MAX_MESSAGE_ID_BYTES);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	InboxEntry	entry;

	InitMaterializedSRF(fcinfo, 0);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	prepare_plans();

	/* tuplestore_putvalues copies, so SPI memory may go away afterwards */
	if (lookup_entry(scope, message_id, &entry))
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
	return status(fcinfo);
}

Datum
inbox_status(PG_FUNCTION_ARGS)
{
	inbox_require_previous_sql();
	return status(fcinfo);
}
