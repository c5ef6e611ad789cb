/*-------------------------------------------------------------------------
 *
 * offsets.c
 *	  inbox_claim_offset and inbox_claim_offsets: deduplication by a
 *	  high-water mark, for streams that deliver in order with a monotonic
 *	  sequence number (Kafka partitions, Kinesis shards, event-store
 *	  streams, EDI interchange control numbers).
 *
 * For such a stream one row per message is waste: the highest sequence
 * number processed says which deliveries are new.  inbox.offsets keeps one
 * row per (scope, stream), and a claim advances its mark in the caller's
 * transaction, so the mark commits or rolls back with the effect, exactly
 * as an entry does.  Nothing is inserted per message, and nothing is ever
 * purged.
 *
 * The arbiter is the row: the unique key on (scope, stream) creates it
 * once, and its row lock orders every advance.  A claim that finds the row
 * locked by an uncommitted advance waits for it, then decides against the
 * mark that transaction left (it committed) or the one before (it rolled
 * back): the behaviour of a claim that meets an uncommitted claim of the
 * same key.  Under REPEATABLE READ and SERIALIZABLE, an advance committed
 * after the caller's snapshot makes the executor raise 40001.
 *
 * Rules (docs/streams.md):
 *	- seq above the mark is new: the mark becomes seq.  A gap (seq more
 *	  than one above the mark) is allowed, unless strict is true, when it
 *	  raises IB006 and advances nothing;
 *	- seq at or below the mark is a duplicate, whether it was processed or
 *	  skipped by a gap: false, or IB001 under inbox.on_duplicate = raise;
 *	- the first claim of a stream sets its mark, strict or not: nothing
 *	  says where a stream starts.
 *
 * An offset carries no content identity, so there is no payload check: a
 * stream that may reuse a sequence number for other content must use
 * inbox_claim with a payload hash.
 *
 * src/offsets.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "conflicts.h"
#include "inbox.h"
#include "keys.h"
#include "spi.h"
#include "stats.h"

PG_FUNCTION_INFO_V1(inbox_claim_offset);
PG_FUNCTION_INFO_V1(inbox_claim_offsets);

/*
 * The plans, kept for the life of the backend (spi.c).  A plain
 * claim that may have a gap is one UPDATE in the common case, a stream that
 * exists and a new number: under READ COMMITTED an UPDATE that finds the
 * row locked waits, then checks its WHERE against the version that
 * committed.  Otherwise (a duplicate, a new stream, a strict claim, a
 * range) the claim needs the mark before deciding, so it locks the row, or
 * creates it.
 */
static SPIPlanPtr advance_plan = NULL;
static SPIPlanPtr lock_plan = NULL;
static SPIPlanPtr create_plan = NULL;
static SPIPlanPtr update_plan = NULL;

static const char *const advance_sql =
"UPDATE inbox.offsets SET seq = $3, advanced_at = pg_catalog.now() "
"WHERE scope OPERATOR(pg_catalog.=) $1 AND stream OPERATOR(pg_catalog.=) $2 "
"AND seq OPERATOR(pg_catalog.<) $3";

static const char *const lock_sql =
"SELECT seq FROM inbox.offsets "
"WHERE scope OPERATOR(pg_catalog.=) $1 AND stream OPERATOR(pg_catalog.=) $2 "
"FOR UPDATE";

static const char *const create_sql =
"INSERT INTO inbox.offsets (scope, stream, seq) VALUES ($1, $2, $3) "
"ON CONFLICT (scope, stream) DO NOTHING";

static const char *const update_sql =
"UPDATE inbox.offsets SET seq = $3, advanced_at = pg_catalog.now() "
"WHERE scope OPERATOR(pg_catalog.=) $1 AND stream OPERATOR(pg_catalog.=) $2";

static SPIPlanPtr
offset_plan(SPIPlanPtr *slot, const char *sql, int nargs)
{
	Oid			types[3] = {TEXTOID, TEXTOID, INT8OID};

	return inbox_plan(slot, sql, nargs, types);
}

static int64
seq_arg(FunctionCallInfo fcinfo, int argno, const char *name)
{
	int64		seq;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name),
				 errhint("A NULL sequence number cannot be deduplicated.")));
	seq = PG_GETARG_INT64(argno);
	if (seq < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be negative", name),
				 errdetail("It is " INT64_FORMAT ".", seq),
				 errhint("Sequence numbers start at 0, as Kafka offsets do.")));
	return seq;
}

static bool
strict_arg(FunctionCallInfo fcinfo, int argno)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("strict must not be null")));
	return PG_GETARG_BOOL(argno);
}

/*
 * Run one of the plans, bounded by inbox.claim_timeout like a claim: each
 * of them may wait for a concurrent advance of the same stream.
 */
static int
run_plan(SPIPlanPtr plan, Datum *values)
{
	return inbox_execute_bounded(plan, values, NULL, DatumGetTextPP(values[0]),
								 DatumGetTextPP(values[1]), "stream");
}

/* The mark of (scope, stream), locked; false if the stream has no row */
static bool
lock_mark(Datum *values, int64 *mark)
{
	bool		isnull;
	int			rc = run_plan(offset_plan(&lock_plan, lock_sql, 2), values);

	if (inbox_spi_check(rc, SPI_OK_SELECT, "the lock of a stream's mark") == 0)
		return false;
	*mark = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	return true;
}

static void
raise_gap(text *scope, text *stream, int64 first, int64 mark)
{
	ereport(ERROR,
			(errcode(ERRCODE_INBOX_OFFSET_GAP),
			 errmsg("sequence number " INT64_FORMAT " of stream \"%s\" in scope \"%s\" leaves a gap",
					first, inbox_quote(stream), inbox_quote(scope)),
			 errdetail("The highest sequence number claimed is " INT64_FORMAT "; a strict claim must continue from it.",
					   mark),
			 errhint("Deliver the missing messages first, or claim without strict to accept the gap.")));
}

/* A duplicate: count it, and raise IB001 if inbox.on_duplicate says so */
static void
report_offset_duplicate(text *scope, text *stream, int64 last, int64 mark)
{
	inbox_stats_count(scope, INBOX_COUNT_DUPLICATE);
	if (inbox_on_duplicate_raises())
		ereport(ERROR,
				(errcode(ERRCODE_INBOX_DUPLICATE),
				 errmsg("sequence number " INT64_FORMAT " of stream \"%s\" in scope \"%s\" was already processed",
						last, inbox_quote(stream), inbox_quote(scope)),
				 errdetail("The highest sequence number claimed is " INT64_FORMAT ".", mark),
				 errhint("This delivery is a redelivery: acknowledge it to the broker without applying its effect again.")));
}

/*
 * Claim [first, last] of (scope, stream): the lowest new sequence number
 * of the range, or -1 if none is new.  The caller holds an SPI connection.
 */
static int64
claim_range(text *scope, text *stream, int64 first, int64 last, bool strict)
{
	Datum		values[3];
	int64		mark = -1;
	int			rc;
	int			attempt;

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(stream);
	values[2] = Int64GetDatum(last);

	/* The common case, one statement: a single seq above the mark */
	if (first == last && !strict)
	{
		rc = run_plan(offset_plan(&advance_plan, advance_sql, 3), values);
		if (inbox_spi_check(rc, SPI_OK_UPDATE, "the advance of a stream's mark") == 1)
		{
			inbox_stats_count(scope, INBOX_COUNT_CLAIM);
			return first;
		}
		/* A duplicate, or a stream with no row yet: see below */
	}

	/*
	 * Lock the row, or create it.  A concurrent creation makes our INSERT
	 * wait for it, then do nothing if it committed: go back and lock the
	 * row it made.
	 */
	for (attempt = 1;; attempt++)
	{
		if (lock_mark(values, &mark))
			break;
		rc = run_plan(offset_plan(&create_plan, create_sql, 3), values);
		if (inbox_spi_check(rc, SPI_OK_INSERT, "the creation of a stream's mark") == 1)
		{
			inbox_stats_count(scope, INBOX_COUNT_CLAIM);
			return first;		/* a new stream: its first claim sets the mark */
		}
		if (attempt >= 10)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not claim stream \"%s\" in scope \"%s\"",
							inbox_quote(stream), inbox_quote(scope)),
					 errdetail("Its offset was created and removed concurrently %d times in a row.", attempt),
					 errhint("Retry the transaction.")));
		CHECK_FOR_INTERRUPTS();
	}

	if (last <= mark)
	{
		report_offset_duplicate(scope, stream, last, mark);
		return -1;
	}
	if (strict && first > mark + 1)
		raise_gap(scope, stream, first, mark);

	rc = SPI_execute_plan(offset_plan(&update_plan, update_sql, 3), values, NULL, false, 0);
	if (rc != SPI_OK_UPDATE || SPI_processed != 1)
		elog(ERROR, "could not advance the offset of stream \"%s\"", inbox_quote(stream));
	inbox_stats_count(scope, INBOX_COUNT_CLAIM);
	return Max(first, mark + 1);
}

/*
 * inbox_claim_offset(scope text, stream text, seq bigint,
 *					  strict boolean DEFAULT false) -> boolean
 *
 * True: seq is new, the mark is now seq, apply the effect.  False (or
 * IB001): seq is at or below the mark.
 */
Datum
inbox_claim_offset(PG_FUNCTION_ARGS)
{
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	text	   *stream = inbox_key_arg(fcinfo, 1, "stream", INBOX_MAX_MESSAGE_ID_BYTES);
	int64		seq = seq_arg(fcinfo, 2, "seq");
	bool		strict = strict_arg(fcinfo, 3);
	int64		first_new;

	inbox_spi_connect();
	first_new = claim_range(scope, stream, seq, seq, strict);
	SPI_finish();
	PG_RETURN_BOOL(first_new >= 0);
}

/*
 * inbox_claim_offsets(scope text, stream text, first_seq bigint,
 *					   last_seq bigint, strict boolean DEFAULT false) -> bigint
 *
 * A batch, first_seq to last_seq: the lowest new sequence number of the
 * range (apply the effects from it to last_seq), or NULL (or IB001) if the
 * whole range is at or below the mark.  The mark becomes last_seq.
 */
Datum
inbox_claim_offsets(PG_FUNCTION_ARGS)
{
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	text	   *stream = inbox_key_arg(fcinfo, 1, "stream", INBOX_MAX_MESSAGE_ID_BYTES);
	int64		first = seq_arg(fcinfo, 2, "first_seq");
	int64		last = seq_arg(fcinfo, 3, "last_seq");
	bool		strict = strict_arg(fcinfo, 4);
	int64		first_new;

	if (last < first)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("last_seq must not be below first_seq"),
				 errdetail("The range given is " INT64_FORMAT " to " INT64_FORMAT ".", first, last)));

	inbox_spi_connect();
	first_new = claim_range(scope, stream, first, last, strict);
	SPI_finish();
	if (first_new < 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(first_new);
}
