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
 * Each function has two C entry points: the one that the SQL of 1.0.0 and
 * later binds (suffix _1_0), and the one that 0.4.0's SQL binds, which
 * checks that the database really is at 0.4.0 (see version.c).
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
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "claim.h"
#include "compat.h"
#include "direct.h"
#include "distributed.h"
#include "front.h"
#include "inbox.h"
#include "keys.h"
#include "stats.h"
#include "version.h"
#include "wakeup.h"

PG_FUNCTION_INFO_V1(inbox_claim_1_0);
PG_FUNCTION_INFO_V1(inbox_claim_many_1_0);
PG_FUNCTION_INFO_V1(inbox_receive_many_json);
PG_FUNCTION_INFO_V1(inbox_receive_many_bytes);
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
 *
 * For the SQL of 1.0.0 and later, a call reaches the leaf that holds its
 * key directly: the key's bucket (keys.c) names the leaf, and each leaf
 * has its own plans.  A statement on the partitioned parent would instead
 * set up tuple routing, or run-time pruning, on every execution, work that
 * the bucket already did once for the key.  Each plan is made on first
 * use; they are all generic (nothing in them depends on the values), so
 * none is ever re-planned.
 */
typedef enum LeafPlan
{
	LEAF_INSERT,				/* inbox_claim */
	LEAF_RECEIVE,				/* inbox_receive */
	LEAF_LOOKUP,				/* the entry of a key */
	LEAF_PLANS
} LeafPlan;

static SPIPlanPtr leaf_plans[LEAF_PLANS][INBOX_LEAVES];

/*
 * The statements; %d is the leaf, and the last parameter the key's bucket
 * (key_args appends it)
 */
static const char *const leaf_sql[LEAF_PLANS] = {
	[LEAF_INSERT] =
	"INSERT INTO inbox.entries_p%d (scope, message_id, bucket, payload_hash) "
	"VALUES ($1, $2, $4, $3) "
	"ON CONFLICT (scope, message_id, bucket) DO NOTHING",
	[LEAF_RECEIVE] =
	"INSERT INTO inbox.entries_p%d (scope, message_id, bucket, payload_hash, state, payload, payload_bytes, due) "
	"VALUES ($1, $2, $7, $3, 'p', $4, $5, GREATEST($6, pg_catalog.now())) "
	"ON CONFLICT (scope, message_id, bucket) DO NOTHING",

	/*
	 * No COLLATE on the parameters: the columns' collation "C" wins over
	 * the parameters' default one, and Citus cannot plan an explicit one.
	 */
	[LEAF_LOOKUP] =
	"SELECT received_at, payload_hash, state FROM inbox.entries_p%d "
	"WHERE scope OPERATOR(pg_catalog.=) $1 "
	"AND message_id OPERATOR(pg_catalog.=) $2 "
	"AND bucket OPERATOR(pg_catalog.=) $3",
};

/*
 * The arguments, of which the legacy plans take all but the bucket.  The
 * legacy receive has no use for $6 (not_before), and ignores it.
 */
#define LEAF_MAX_ARGS 7
static const int leaf_nargs[LEAF_PLANS] = {4, 7, 3};
static const Oid leaf_argtypes[LEAF_PLANS][LEAF_MAX_ARGS] = {
	{TEXTOID, TEXTOID, BYTEAOID, INT2OID},
	{TEXTOID, TEXTOID, BYTEAOID, JSONBOID, BYTEAOID, TIMESTAMPTZOID, INT2OID},
	{TEXTOID, TEXTOID, INT2OID},
};

/*
 * The plans of 0.4.0's SQL, whose inbox.entries is hash-partitioned by
 * PostgreSQL and has no bucket: used by 0.4.0's entry points until ALTER
 * EXTENSION inbox UPDATE runs.
 */
static SPIPlanPtr legacy_plans[LEAF_PLANS];

static const char *const legacy_sql[LEAF_PLANS] = {
	[LEAF_INSERT] =
	"INSERT INTO inbox.entries (scope, message_id, payload_hash) "
	"VALUES ($1, $2, $3) "
	"ON CONFLICT (scope, message_id) DO NOTHING",
	[LEAF_RECEIVE] =
	"INSERT INTO inbox.entries (scope, message_id, payload_hash, state, payload, payload_bytes) "
	"VALUES ($1, $2, $3, 'p', $4, $5) "
	"ON CONFLICT (scope, message_id) DO NOTHING",
	[LEAF_LOOKUP] =
	"SELECT received_at, payload_hash, state FROM inbox.entries "
	"WHERE scope OPERATOR(pg_catalog.=) $1 COLLATE pg_catalog.\"C\" "
	"AND message_id OPERATOR(pg_catalog.=) $2 COLLATE pg_catalog.\"C\"",
};

/*
 * Where a call reads and writes one key: the plans for the leaf of its
 * bucket, or 0.4.0's plans (legacy).
 */
typedef struct KeyPlans
{
	bool		legacy;
	int			bucket;			/* -1 if legacy */
} KeyPlans;

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

/* Whether a duplicate raises IB001 (inbox.on_duplicate = raise) */
bool
inbox_on_duplicate_raises(void)
{
	return on_duplicate == INBOX_ON_DUPLICATE_RAISE;
}

/* Prepare sql and keep its plan for the life of the backend */
SPIPlanPtr
inbox_keep_plan(const char *sql, int nargs, Oid *argtypes, int cursor_options)
{
	SPIPlanPtr	plan = SPI_prepare_cursor(sql, nargs, argtypes, cursor_options);

	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s",
			 SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	return plan;
}

/*
 * The generic plan of sql kept in *slot, prepared on first use: the hot
 * paths' statements, whose plans depend on no value (claim.c, offsets.c,
 * deferred.c).
 */
SPIPlanPtr
inbox_plan(SPIPlanPtr *slot, const char *sql, int nargs, Oid *argtypes)
{
	if (*slot == NULL)
		*slot = inbox_keep_plan(sql, nargs, argtypes, CURSOR_OPT_GENERIC_PLAN);
	return *slot;
}

/* The plan of kind for the key's leaf (or the legacy one), made on first use */
static SPIPlanPtr
key_plan(const KeyPlans *kp, LeafPlan kind)
{
	int			leaf = kp->legacy ? 0 : INBOX_BUCKET_LEAF(kp->bucket);
	SPIPlanPtr *slot = kp->legacy ? &legacy_plans[kind] : &leaf_plans[kind][leaf];

	if (*slot == NULL)
	{
		char	   *sql = kp->legacy ? pstrdup(legacy_sql[kind]) :
			psprintf(leaf_sql[kind], leaf);

		/*
		 * Generic: the plan cache would otherwise plan the first five calls
		 * anew, and the legacy lookup, whose generic plan on paper scans
		 * every leaf, on every call.  The generic plan prunes to one leaf
		 * at executor start.
		 */
		*slot = inbox_keep_plan(sql, leaf_nargs[kind] - (kp->legacy ? 1 : 0),
								(Oid *) leaf_argtypes[kind], CURSOR_OPT_GENERIC_PLAN);
	}
	return *slot;
}

/*
 * The arguments of kind's plan for the key: the caller's, and then, for a
 * leaf's plan, the bucket.  Returns the arrays to pass, v and n or the
 * caller's own.
 */
static Datum *
key_args(const KeyPlans *kp, LeafPlan kind, Datum *values, const char *nulls,
		 Datum *v, char *n, const char **nulls_out)
{
	int			given = leaf_nargs[kind] - 1;

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
lookup_entry(const KeyPlans *kp, text *scope, text *message_id, InboxEntry *entry)
{
	Datum		values[2];
	HeapTuple	tuple;
	TupleDesc	tupdesc;
	bool		isnull;
	Datum		d;
	int			rc;
	Datum		v[LEAF_MAX_ARGS];
	char		n[LEAF_MAX_ARGS];
	const char *nulls;
	Datum	   *args;

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(message_id);
	args = key_args(kp, LEAF_LOOKUP, values, NULL, v, n, &nulls);
	rc = SPI_execute_plan(key_plan(kp, LEAF_LOOKUP), args, nulls, false, 1);
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
 * A statement of a claim, run by run_bounded(): through SPI, or direct.c's
 * insertion of a claim's entry.
 */
typedef int (*BoundedCall) (void *arg);

typedef struct SpiCall
{
	SPIPlanPtr	plan;
	Datum	   *values;
	const char *nulls;
} SpiCall;

static int
spi_call(void *arg)
{
	SpiCall    *c = (SpiCall *) arg;

	return SPI_execute_plan(c->plan, c->values, c->nulls, false, 0);
}

typedef struct DirectCall
{
	int			bucket;
	text	   *scope;
	text	   *message_id;
	bytea	   *payload_hash;
	InboxEntry *entry;			/* if not NULL: read the entry found there */
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
 * Run a statement of a claim under inbox.claim_timeout: key is the message
 * id, or the stream (kind "stream"), or NULL for a batch's INSERT.  With no
 * timeout set, it is a plain call.  The timeout is applied as lock_timeout
 * in a GUC nest level of its own, so it covers exactly this statement and
 * is undone on success and on error alike; its expiry is reported as IB003
 * rather than as a generic lock timeout, because the caller asked for a
 * bounded claim and must be able to tell "held by a concurrent claim, try
 * later" from its other errors.
 */
static int
run_bounded(BoundedCall call, void *arg,
			const text *scope, const text *key, const char *kind)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			nestlevel;
	char		timeout[32];
	int			rc = 0;

	if (claim_timeout <= 0)
		return call(arg);
	/*
	 * On a Citus coordinator the wait would happen on a worker, out of this
	 * timeout's reach.  A claim delegated to the worker (inbox_distribute)
	 * runs its INSERT there, in this backend, where the timeout applies.
	 */
	if (strcmp(kind, "stream") != 0 && !inbox_citus_worker_node())
		inbox_refuse_if_distributed(INBOX_REFUSE_CLAIM_TIMEOUT);

	nestlevel = NewGUCNestLevel();
	snprintf(timeout, sizeof(timeout), "%d", claim_timeout);
	(void) set_config_option("lock_timeout", timeout,
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	PG_TRY();
	{
		rc = call(arg);
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
				 key != NULL
				 ? errmsg("%s \"%s\" in scope \"%s\" is being claimed by a concurrent transaction",
						  kind, inbox_quote(key), inbox_quote(scope))
				 : errmsg("a message of this batch in scope \"%s\" is being claimed by a concurrent transaction",
						  inbox_quote(scope)),
				 errdetail("The claim waited %d ms (inbox.claim_timeout) for a lock held by another transaction, "
						   "most likely an uncommitted claim of the same %s.",
						   claim_timeout, kind),
				 errhint("Retry after that transaction ends: if it committed, the retry reports a duplicate; "
						 "if it rolled back, the retry claims the message.")));
	}
	PG_END_TRY();
	AtEOXact_GUC(true, nestlevel);
	return rc;
}

/* SPI_execute_plan under inbox.claim_timeout (see run_bounded) */
int
inbox_execute_bounded(SPIPlanPtr plan, Datum *values, const char *nulls,
					  const text *scope, const text *key, const char *kind)
{
	SpiCall		c = {plan, values, nulls};

	return run_bounded(spi_call, &c, scope, key, kind);
}

/*
 * Try to insert the entry of kind (the claim's or the receive's INSERT ...
 * ON CONFLICT DO NOTHING); true if this call inserted it.  A claim's entry
 * is written by direct.c where it can, with the same arbitration.
 */
static bool
insert_entry(const KeyPlans *kp, LeafPlan kind, Datum *values, const char *nulls,
			 text *scope, text *message_id, bytea *payload_hash, bool try_direct)
{
	int			rc;

	if (try_direct && kind == LEAF_INSERT && !kp->legacy)
	{
		DirectCall	c = {kp->bucket, scope, message_id, payload_hash, NULL, false};

		rc = run_bounded(direct_call, &c, scope, message_id, "message");
		if (rc != INBOX_DIRECT_UNAVAILABLE)
			return rc == INBOX_DIRECT_INSERTED;
	}
	{
		Datum		v[LEAF_MAX_ARGS];
		char		n[LEAF_MAX_ARGS];
		const char *args_nulls;
		Datum	   *args = key_args(kp, kind, values, nulls, v, n, &args_nulls);

		rc = inbox_execute_bounded(key_plan(kp, kind), args, args_nulls, scope, message_id, "message");
	}
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
claim_key(const KeyPlans *kp, LeafPlan kind, Datum *values, const char *nulls,
		  text *scope, text *message_id, bytea *payload_hash)
{
	int			attempt;

	for (attempt = 1;; attempt++)
	{
		InboxEntry	entry;

		if (insert_entry(kp, kind, values, nulls, scope, message_id, payload_hash, true))
		{
			inbox_stats_count(scope, INBOX_COUNT_CLAIM);
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
claim(FunctionCallInfo fcinfo, bool legacy)
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

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	kp = key_plans(scope, message_id, legacy);
	claimed = claim_key(&kp, LEAF_INSERT, values, nulls, scope, message_id, payload_hash);
	SPI_finish();
	PG_RETURN_BOOL(claimed);
}

/*
 * inbox_claim decided by the entry point (access.c), as the extension's
 * owner, when direct.c can write and read the key's leaf without SQL: the
 * checks, the arbitration and the reporting of claim(), in the same order.
 * False, having done nothing, where the implementation must decide: a
 * claim bounded by inbox.claim_timeout, a leaf that needs SPI, or an entry
 * that was deleted between the write and the read.  Otherwise *claimed
 * says whether this call claimed the message.
 */
bool
inbox_claim_direct(FunctionCallInfo fcinfo, bool *claimed)
{
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	text	   *message_id = inbox_key_arg(fcinfo, 1, "message_id", INBOX_MAX_MESSAGE_ID_BYTES);
	bytea	   *payload_hash = inbox_hash_arg(fcinfo, 2);
	InboxEntry	entry;
	DirectCall	c = {0, scope, message_id, payload_hash, &entry, false};

	/*
	 * Not where a key's bucket takes an encoding conversion, which is
	 * looked up along the search_path that only the implementation pins.
	 */
	if (claim_timeout > 0 ||
		(GetDatabaseEncoding() != PG_UTF8 && GetDatabaseEncoding() != PG_SQL_ASCII))
		return false;
	c.bucket = inbox_bucket(scope, message_id);
	switch ((InboxDirectResult) direct_call(&c))
	{
		case INBOX_DIRECT_INSERTED:
			inbox_stats_count(scope, INBOX_COUNT_CLAIM);
			*claimed = true;
			return true;
		case INBOX_DIRECT_CONFLICT:
			if (!c.found)
				return false;
			report_duplicate(scope, message_id, payload_hash, &entry);
			*claimed = false;
			return true;
		case INBOX_DIRECT_UNAVAILABLE:
			break;
	}
	return false;
}

Datum
inbox_claim_1_0(PG_FUNCTION_ARGS)
{
	return claim(fcinfo, false);
}

Datum
inbox_claim(PG_FUNCTION_ARGS)
{
	inbox_require_previous_sql();
	return claim(fcinfo, true);
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
receive(FunctionCallInfo fcinfo, bool is_jsonb, bool legacy)
{
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	text	   *message_id = inbox_key_arg(fcinfo, 1, "message_id", INBOX_MAX_MESSAGE_ID_BYTES);
	bytea	   *payload_hash = inbox_hash_arg(fcinfo, 3);
	Datum		payload;
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', 'n', 'n', 'n'};
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
		payload_hash = payload_digest(payload, is_jsonb);

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(message_id);
	values[2] = PointerGetDatum(payload_hash);
	values[3] = values[4] = (Datum) 0;
	values[is_jsonb ? 3 : 4] = payload;
	nulls[is_jsonb ? 3 : 4] = ' ';
	/* not_before, in the 1.0.0 overloads that have it */
	values[5] = (Datum) 0;
	if (PG_NARGS() > 4 && !PG_ARGISNULL(4))
	{
		values[5] = PG_GETARG_DATUM(4);
		nulls[5] = ' ';
	}

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	kp = key_plans(scope, message_id, legacy);
	received = claim_key(&kp, LEAF_RECEIVE, values, nulls, scope, message_id, payload_hash);
	SPI_finish();
	if (received)
	{
		inbox_wakeup_note(scope);
		inbox_front_note(inbox_scope_leaf(scope), scope, false);
	}
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
	return receive(fcinfo, true, false);
}

Datum
inbox_receive_bytes_1_0(PG_FUNCTION_ARGS)
{
	return receive(fcinfo, false, false);
}

Datum
inbox_receive_json(PG_FUNCTION_ARGS)
{
	inbox_require_previous_sql();
	return receive(fcinfo, true, true);
}

Datum
inbox_receive_bytes(PG_FUNCTION_ARGS)
{
	inbox_require_previous_sql();
	return receive(fcinfo, false, true);
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
status(FunctionCallInfo fcinfo, bool legacy)
{
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	text	   *message_id = inbox_key_arg(fcinfo, 1, "message_id", INBOX_MAX_MESSAGE_ID_BYTES);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	InboxEntry	entry;
	KeyPlans	kp;

	InitMaterializedSRF(fcinfo, 0);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
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
	return status(fcinfo, false);
}

Datum
inbox_status(PG_FUNCTION_ARGS)
{
	inbox_require_previous_sql();
	return status(fcinfo, true);
}

/* ------------------------------------------------------------------------
 * Batch claims
 *
 * inbox_claim_many claims a consumer's whole batch in one call, in the
 * caller's transaction, with the arbitration of inbox_claim for each id:
 * one INSERT ... ON CONFLICT DO NOTHING of all the ids, then one read of
 * the entries of those it did not insert.  The INSERT takes the ids in
 * byte order, so two batches that share ids lock them in the same order
 * and cannot deadlock with each other.  An id that appears twice in the
 * batch is claimed once; its later copies are duplicates (or mismatches,
 * if their hashes differ).
 * ------------------------------------------------------------------------
 */

/* The most ids one call takes: a batch, not a bulk load */
#define INBOX_MAX_BATCH 10000

/* What a batch does: claim its ids, or receive its messages */
typedef enum BatchKind
{
	BATCH_CLAIM,				/* inbox_claim_many */
	BATCH_RECEIVE_JSON,			/* inbox_receive_many, jsonb payloads */
	BATCH_RECEIVE_BYTES			/* inbox_receive_many, bytea payloads */
} BatchKind;

/* One call of inbox_claim_many or inbox_receive_many */
typedef struct Batch
{
	BatchKind	kind;
	text	   *scope;
	bool		raise;			/* on_mismatch = 'raise' */
	Datum		not_before;		/* receives only; 0 if none */
	const char *done;			/* the status of an id written: claimed, received */
	SPIPlanPtr	insert;			/* its INSERT's plan; NULL: one per id */
} Batch;

/* One id of the batch, as given */
typedef struct BatchItem
{
	int			position;		/* 1-based, in the arrays given */
	text	   *message_id;
	bytea	   *payload_hash;	/* NULL: no content check */
	Datum		payload;		/* receives only */
	int			first;			/* index of its first copy in the batch */
	const char *status;
	bytea	   *stored_hash;	/* first copies: the hash the entry now has */
} BatchItem;

static SPIPlanPtr insert_many_plan = NULL;
static SPIPlanPtr receive_many_plans[2] = {NULL, NULL};	/* jsonb, bytea */
static SPIPlanPtr lookup_many_plan = NULL;

static const char *const insert_many_sql =
"INSERT INTO inbox.entries (scope, message_id, bucket, payload_hash) "
"SELECT $1, u.m, u.b, u.h "
"FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3), pg_catalog.unnest($4)) AS u(m, b, h) "
"ORDER BY u.m COLLATE pg_catalog.\"C\" "
"ON CONFLICT (scope, message_id, bucket) DO NOTHING "
"RETURNING message_id";

/* %s is the payload's column: payload (jsonb) or payload_bytes */
static const char *const receive_many_sql =
"INSERT INTO inbox.entries (scope, message_id, bucket, payload_hash, state, %s, due) "
"SELECT $1, u.m, u.b, u.h, 'p', u.p, GREATEST($6, pg_catalog.now()) "
"FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3), pg_catalog.unnest($4), "
"pg_catalog.unnest($5)) AS u(m, b, h, p) "
"ORDER BY u.m COLLATE pg_catalog.\"C\" "
"ON CONFLICT (scope, message_id, bucket) DO NOTHING "
"RETURNING message_id";

static const char *const lookup_many_sql =
"SELECT message_id, received_at, payload_hash, state FROM inbox.entries "
"WHERE scope OPERATOR(pg_catalog.=) $1 "
"AND message_id OPERATOR(pg_catalog.=) ANY ($2)";

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
		!hashes_equal(item->payload_hash, stored))
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
	inbox_stats_count(batch->scope, INBOX_COUNT_CLAIM);
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

	for (i = 0; i < npending; i++)
	{
		BatchItem  *item = pending[i];
		KeyPlans	kp = {false, inbox_bucket(batch->scope, item->message_id)};
		Datum		values[6];
		char		nulls[6] = {' ', ' ', ' ', 'n', 'n', 'n'};

		values[0] = PointerGetDatum(batch->scope);
		values[1] = PointerGetDatum(item->message_id);
		values[2] = PointerGetDatum(item->payload_hash);
		nulls[2] = item->payload_hash != NULL ? ' ' : 'n';
		if (receive)
		{
			int			col = batch->kind == BATCH_RECEIVE_JSON ? 3 : 4;

			values[col] = item->payload;
			nulls[col] = ' ';
			values[5] = batch->not_before;
			nulls[5] = batch->not_before != (Datum) 0 ? ' ' : 'n';
		}
		if (insert_entry(&kp, receive ? LEAF_RECEIVE : LEAF_INSERT, values, nulls,
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
			written = insert_entry(&kp, LEAF_INSERT, values, nulls,
								   batch->scope, item->message_id, item->payload_hash, false);
		}
		else
			written = r == INBOX_DIRECT_INSERTED;
		if (written)
		{
			batch_written(batch, item);
			c->inserted++;
		}
	}
	inbox_direct_end(w);
	return INBOX_DIRECT_INSERTED;
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
	bool	   *hash_nulls = palloc(sizeof(bool) * npending);
	int			dims[1];
	int			lbs[1] = {1};
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};
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
		values[5] = batch->not_before;
		nulls[5] = batch->not_before != (Datum) 0 ? ' ' : 'n';
	}

	if (batch->kind == BATCH_CLAIM && plan != NULL &&
		run_bounded(batch_direct_call, &direct, scope, NULL, "message") != INBOX_DIRECT_UNAVAILABLE)
		inserted = direct.inserted;
	else if (plan == NULL)
		inserted = insert_each(batch, pending, npending);
	else
	{
		/* The INSERT, bounded by inbox.claim_timeout like a single claim's */
		rc = inbox_execute_bounded(plan, values, nulls, scope, NULL, "message");
		if (rc != SPI_OK_INSERT_RETURNING)
			elog(ERROR, "SPI_execute_plan failed: %s", SPI_result_code_string(rc));
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
	rc = SPI_execute_plan(lookup_many_plan, values, NULL, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute_plan failed: %s", SPI_result_code_string(rc));
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
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	bool		receive = kind != BATCH_CLAIM;
	bool		is_jsonb = kind == BATCH_RECEIVE_JSON;

	/* claim: (scope, ids, hashes, on_mismatch); receive: (scope, ids, payloads, hashes, not_before, on_mismatch) */
	int			hashes_arg = receive ? 3 : 2;
	int			mode_arg = receive ? 5 : 3;
	Batch		batch;
	ArrayType  *id_array;
	ArrayType  *hash_array = NULL;
	Datum	   *ids;
	bool	   *id_nulls;
	Datum	   *hashes = NULL;
	bool	   *hash_nulls = NULL;
	Datum	   *payloads = NULL;
	bool	   *payload_nulls = NULL;
	int			n;
	int			nhashes = 0;
	bool		raise = true;
	BatchItem  *items;
	BatchItem **sorted;
	BatchItem **pending;
	int			npending = 0;
	int			attempt;
	int			i;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("message_ids must not be null")));
	if (!PG_ARGISNULL(mode_arg))
	{
		char	   *mode = text_to_cstring(PG_GETARG_TEXT_PP(mode_arg));

		if (strcmp(mode, "return") == 0)
			raise = false;
		else if (strcmp(mode, "raise") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("on_mismatch must be \"raise\" or \"return\""),
					 errdetail("It is \"%s\".", inbox_quote(PG_GETARG_TEXT_PP(mode_arg)))));
	}
	else
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("on_mismatch must not be null")));

	id_array = PG_GETARG_ARRAYTYPE_P(1);
	if (ARR_NDIM(id_array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("message_ids must be a one-dimensional array")));
	deconstruct_array(id_array, TEXTOID, -1, false, TYPALIGN_INT, &ids, &id_nulls, &n);
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
		ArrayType  *payload_array;
		int			npayloads;

		if (PG_ARGISNULL(2))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("payloads must not be null"),
					 errhint("A received message is processed later from its stored payload.")));
		payload_array = PG_GETARG_ARRAYTYPE_P(2);
		if (ARR_NDIM(payload_array) > 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("payloads must be a one-dimensional array")));
		deconstruct_array(payload_array, is_jsonb ? JSONBOID : BYTEAOID, -1, false, TYPALIGN_INT,
						  &payloads, &payload_nulls, &npayloads);
		if (npayloads != n)
			ereport(ERROR,
					(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
					 errmsg("payloads must have one element per message id"),
					 errdetail("There are %d message ids and %d payloads.", n, npayloads)));
	}
	if (!PG_ARGISNULL(hashes_arg))
	{
		hash_array = PG_GETARG_ARRAYTYPE_P(hashes_arg);
		if (ARR_NDIM(hash_array) > 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("payload_hashes must be a one-dimensional array")));
		deconstruct_array(hash_array, BYTEAOID, -1, false, TYPALIGN_INT,
						  &hashes, &hash_nulls, &nhashes);
		if (nhashes != n)
			ereport(ERROR,
					(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
					 errmsg("payload_hashes must have one element per message id"),
					 errdetail("There are %d message ids and %d payload hashes.", n, nhashes),
					 errhint("Pass NULL for payload_hashes to skip the content check, or NULL elements for some ids.")));
	}

	/* Every id is checked before anything is written */
	items = palloc0(sizeof(BatchItem) * n);
	sorted = palloc(sizeof(BatchItem *) * n);
	for (i = 0; i < n; i++)
	{
		char		name[32];

		snprintf(name, sizeof(name), "message_ids[%d]", i + 1);
		items[i].position = i + 1;
		items[i].message_id = inbox_check_key_datum(ids[i], id_nulls[i], name,
													INBOX_MAX_MESSAGE_ID_BYTES);
		snprintf(name, sizeof(name), "payload_hashes[%d]", i + 1);
		if (hashes != NULL)
			items[i].payload_hash = inbox_check_hash_datum(hashes[i], hash_nulls[i], name);
		if (receive)
		{
			if (payload_nulls[i])
				ereport(ERROR,
						(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						 errmsg("payloads[%d] must not be null", i + 1)));
			items[i].payload = payloads[i];
			/* as for one receive: the hash of the payload, unless given */
			if (items[i].payload_hash == NULL)
				items[i].payload_hash = payload_digest(payloads[i], is_jsonb);
		}
		sorted[i] = &items[i];
	}

	/* Later copies of an id are duplicates of its first copy */
	qsort(sorted, n, sizeof(BatchItem *), compare_items);
	pending = palloc(sizeof(BatchItem *) * n);
	for (i = 0; i < n; i++)
	{
		if (i > 0 && compare_text(sorted[i]->message_id, sorted[i - 1]->message_id) == 0)
			sorted[i]->first = sorted[i - 1]->first;
		else
		{
			sorted[i]->first = sorted[i]->position - 1;
			pending[npending++] = sorted[i];
		}
	}
	for (i = 0; i < n; i++)
	{
		BatchItem  *first = &items[items[i].first];

		if (first != &items[i] && items[i].payload_hash != NULL && first->payload_hash != NULL &&
			!hashes_equal(items[i].payload_hash, first->payload_hash))
		{
			char	   *where = psprintf("message_ids[%d] of the same batch has it", first->position);

			if (raise)
			{
				inbox_stats_count(scope, INBOX_COUNT_MISMATCH);
				raise_batch_mismatch(scope, &items[i], first->payload_hash, where);
			}
		}
	}

	InitMaterializedSRF(fcinfo, 0);

	batch.kind = kind;
	batch.scope = scope;
	batch.raise = raise;
	batch.not_before = receive && !PG_ARGISNULL(4) ? PG_GETARG_DATUM(4) : (Datum) 0;
	batch.done = receive ? "received" : "claimed";

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (receive && receive_many_plans[is_jsonb ? 0 : 1] == NULL)
	{
		Oid			types[6] = {TEXTOID, TEXTARRAYOID, INT2ARRAYOID, BYTEAARRAYOID,
		is_jsonb ? JSONBARRAYOID : BYTEAARRAYOID, TIMESTAMPTZOID};

		receive_many_plans[is_jsonb ? 0 : 1] =
			inbox_keep_plan(psprintf(receive_many_sql, is_jsonb ? "payload" : "payload_bytes"),
							6, types, CURSOR_OPT_GENERIC_PLAN);
	}
	if (insert_many_plan == NULL)
	{
		Oid			types[4] = {TEXTOID, TEXTARRAYOID, INT2ARRAYOID, BYTEAARRAYOID};

		/*
		 * Generic too: a custom plan would be made for every batch, since
		 * the arrays' sizes change its estimates, and nothing in the plan
		 * depends on them.
		 */
		insert_many_plan = inbox_keep_plan(insert_many_sql, 4, types, CURSOR_OPT_GENERIC_PLAN);
	}

	/*
	 * Citus runs an INSERT ... SELECT into a distributed table through the
	 * coordinator, and its RETURNING rows then disagree with the count SPI
	 * checks them against.  So there, each id gets the single claim's (or
	 * receive's) INSERT, in the same order: the same arbitration per id.
	 */
	if (inbox_entries_distributed())
		batch.insert = NULL;
	else
		batch.insert = receive ? receive_many_plans[is_jsonb ? 0 : 1] : insert_many_plan;
	if (lookup_many_plan == NULL)
	{
		Oid			types[2] = {TEXTOID, TEXTARRAYOID};

		/* Generic as well, for the same reason */
		lookup_many_plan = inbox_keep_plan(lookup_many_sql, 2, types, CURSOR_OPT_GENERIC_PLAN);
	}

	for (attempt = 1; npending > 0; attempt++)
	{
		npending = claim_batch_round(&batch, pending, npending);
		if (npending > 0 && attempt >= CLAIM_MAX_ATTEMPTS)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not claim message \"%s\" in scope \"%s\"",
							inbox_quote(pending[0]->message_id), inbox_quote(scope)),
					 errdetail("Its entry was deleted and re-created concurrently %d times in a row.",
							   attempt),
					 errhint("Retry the transaction.")));
		CHECK_FOR_INTERRUPTS();
	}
	SPI_finish();
	if (receive)
	{
		inbox_wakeup_note(scope);
		inbox_front_note(inbox_scope_leaf(scope), scope, false);
	}

	/* Later copies follow their first copy, in the order given */
	for (i = 0; i < n; i++)
	{
		BatchItem  *item = &items[i];
		BatchItem  *first = &items[item->first];
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		/*
		 * A later copy is checked against what the entry holds now: the
		 * first copy's content if that copy was written, else the stored
		 * entry's, so that a copy matching the entry is a duplicate even
		 * when the first copy mismatched.  (Only with on_mismatch =>
		 * 'return': otherwise copies that differ raised above.)
		 */
		if (first != item)
			batch_duplicate(scope, item, raise, first->stored_hash,
							psprintf("message_ids[%d] of the same batch has it", first->position));
		values[0] = Int32GetDatum(item->position);
		values[1] = PointerGetDatum(item->message_id);
		values[2] = CStringGetTextDatum(item->status);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
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
 *					  on_mismatch text)
 *		-> SETOF (ordinality integer, message_id text, status text)
 *
 * inbox_claim_many's arbitration for a batch of receives: status
 * 'received' (stored as pending), 'duplicate' or 'mismatch'.  A payload
 * hash not given is the payload's, as for inbox_receive.
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
