/*-------------------------------------------------------------------------
 *
 * deferred.c
 *	  The deferred mode's hot path: inbox_take and inbox_poll, which hand
 *	  out pending messages.  inbox_complete, which marks one done in the
 *	  transaction of its effect, is in complete.c; inbox_extend by
 *	  receipt and inbox_result in deferred_settle.c; inbox_fail,
 *	  inbox_extend by message id and inbox_requeue are SQL; the owner
 *	  sessions are in session.c and the waiting in wakeup.c.
 *
 * A take runs two kinds of statement, each with a plan kept for the life
 * of the backend, on the one leaf that holds the scope's entries:
 *
 *	- one SELECT ... FOR UPDATE SKIP LOCKED picks the messages, oldest due
 *	  first, through the leaf's open-messages index (scope, due,
 *	  message_id), read in its order.  "due" is when an open
 *	  message next deserves a look (see sql/inbox.sql), so the scan starts
 *	  at the scope's oldest due message and stops at now: delayed messages,
 *	  done entries and dead letters are never walked.  A message bound to
 *	  the session that took it (inbox_take, or inbox_poll without a lease)
 *	  is due from its take, and walked by every take, which checks whether
 *	  its lease ran out or its owner session ended: that is what recovers
 *	  it at once when its worker dies.  Each owner is probed once per take
 *	  (session.c), and such messages are at most what the workers hold.  A
 *	  message polled under a lease belongs to its receipt, not to a
 *	  session, and is due when the lease runs out.  SKIP LOCKED lets
 *	  concurrent takes pass each other's messages;
 *	- one UPDATE for all the messages it hands out (up to TAKE_CHUNK at a
 *	  time), by primary key: message_id = ANY of their ids, or = the id
 *	  when there is one.  Each UPDATE statement starts an executor and
 *	  rebuilds the table's CHECK expressions from their text, whatever the
 *	  number of rows it updates, so a take pays that once per chunk rather
 *	  than once per message.  A lost message out of attempts dies by a
 *	  statement of its own, which is rare.
 *
 * In a scope that has messages above the default priority, one statement
 * of priorities.c picks the candidates instead of the first one: it walks
 * those messages level by level, highest first, and reads the others
 * from the front (priorities.c says in what order).
 *
 * The first plan must not depend on statistics: a new scope, a burst that
 * autoanalyze has not seen, or plan_cache_mode = force_generic_plan must
 * not turn it into a sequential scan and a sort.  So the plan is generic
 * from the start, and the implementation functions run with the scans that
 * could replace the ordered index scan disabled (their SET clauses),
 * which holds for every re-planning too, since a plan is only ever
 * re-planned inside them.
 *
 * A take by inbox_take binds the message to this session: only this
 * session completes it, and the message is taken again when the session
 * ends (or its lease runs out).  inbox_poll also gives every message a
 * receipt, a random UUID stored with the message until the next take,
 * completion or failure.  Any session holding the receipt may
 * complete, fail or extend the message, which is what a transaction-mode
 * pooler needs: its next transaction runs on another server session.  A
 * completion by receipt names the scope, and so reaches its leaf directly.
 *
 * src/deferred.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
#include "utils/uuid.h"

#include "compat.h"
#include "deferred.h"
#include "deferred_internal.h"
#include "depth.h"
#include "events.h"
#include "distributed.h"
#include "entries.h"
#include "front.h"
#include "groups.h"
#include "inbox.h"
#include "keys.h"
#include "priorities.h"
#include "session.h"
#include "spi.h"
#include "wakeup.h"

PG_FUNCTION_INFO_V1(inbox_take_1_0);
PG_FUNCTION_INFO_V1(inbox_poll_1_0);

/* inbox.max_attempts, which the SQL functions read with current_setting */
static int	max_attempts = 5;

/* The most messages one take hands out */
#define TAKE_MAX_MESSAGES	10000

/*
 * The most messages one UPDATE of a take hands out.  The UPDATE gives each
 * its receipt by its position in the ids' array (array_position), so its
 * cost grows with the square of the chunk: the chunk is small enough that
 * this stays below the statement's own cost, and large enough that a take
 * of TAKE_MAX_MESSAGES runs few statements.
 */
#define TAKE_CHUNK			64

/*
 * The longest a take may wait for a message.  The statement that waits
 * keeps its snapshot, and with it holds back the horizon of VACUUM for the
 * whole database, so a wait is kept to what a long poll needs (SQS allows
 * 20 seconds); a worker simply polls again.
 */
#define POLL_MAX_WAIT_SECONDS	60

static SPIPlanPtr max_attempts_plan = NULL;

/*
 * A take's candidates, in the columns hand_out reads: the seven of every
 * SQL, then, for the SQL whose takes return them (1.2.0 on), the headers.
 */
#define CANDIDATES_SQL(columns) \
	"SELECT e.message_id, e.state, e.attempts, e.payload, e.payload_bytes, e.received_at, e.due" \
	columns " " \
	"FROM inbox.entries_p%d e " \
	"WHERE e.scope = $1 AND e.state <> 'd' AND e.state <> 'x' " \
	"AND (e.due, e.message_id) >= ($4, $5) AND e.due <= $2 " \
	"AND " INBOX_TAKEABLE_SQL("e") " " \
	"ORDER BY e.due, e.message_id " \
	"LIMIT $3 " \
	"FOR UPDATE SKIP LOCKED"

static const InboxLeafStatement leaf_statements[DEFERRED_LEAF_PLANS] = {
	[LEAF_CANDIDATES] = {
		"candidates",
		CANDIDATES_SQL(""),
		{TEXTOID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, TEXTOID}
	},
	[LEAF_CANDIDATES_HEADERS] = {
		"candidates with headers",
		CANDIDATES_SQL(", e.headers"),
		{TEXTOID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, TEXTOID}
	},
	[LEAF_NEXT_DUE] = {
		"next due",
		"SELECT due FROM inbox.entries_p%d "
		"WHERE scope = $1 AND state <> 'd' AND state <> 'x' AND due > $2 "
		"ORDER BY due LIMIT 1",
		{TEXTOID, TIMESTAMPTZOID}
	},
	/* $2 the ids, $6 their receipts in the same order, or NULL */
	[LEAF_TAKE] = {
		"take",
		"UPDATE inbox.entries_p%d SET state = 'r', attempts = COALESCE(attempts, 0) + 1, "
		"owner_session = $3, taken_at = $4, lease_until = $5, due = $7, "
		"receipt = $6[pg_catalog.array_position($2, message_id)] "
		"WHERE scope = $1 AND message_id = ANY ($2)",
		{TEXTOID, TEXTARRAYOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, UUIDARRAYOID, TIMESTAMPTZOID}
	},
	[LEAF_TAKE_ONE] = {
		"take one",
		"UPDATE inbox.entries_p%d SET state = 'r', attempts = COALESCE(attempts, 0) + 1, "
		"owner_session = $3, taken_at = $4, lease_until = $5, due = $7, "
		"receipt = $6 "
		"WHERE scope = $1 AND message_id = $2",
		{TEXTOID, TEXTOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, UUIDOID, TIMESTAMPTZOID}
	},
	[LEAF_DIE] = {
		"die",
		"UPDATE inbox.entries_p%d SET state = 'x', owner_session = NULL, lease_until = NULL, "
		"due = NULL, receipt = NULL, taken_at = $3, finished_at = $3, "
		"last_error = COALESCE(last_error, 'worker lost during the last allowed attempt') "
		"WHERE scope = $1 AND message_id = $2",
		{TEXTOID, TEXTOID, TIMESTAMPTZOID}
	},
	/* A message taken without a lease stays due from its take */
	[LEAF_EXTEND_RECEIPT] = {
		"extend by receipt",
		"UPDATE inbox.entries_p%d SET lease_until = $3, "
		"due = CASE WHEN lease_until IS NULL THEN due ELSE $3 END "
		"WHERE receipt = $2 AND scope = $1 AND state = 'r' "
		"RETURNING lease_until",
		{TEXTOID, UUIDOID, TIMESTAMPTZOID}
	},
	[LEAF_RESULT] = {
		"result",
		"SELECT result FROM inbox.entries_p%d WHERE scope = $1 AND message_id = $2",
		{TEXTOID, TEXTOID}
	},
};

static SPIPlanPtr leaf_plans[DEFERRED_LEAF_PLANS][INBOX_LEAVES];

/* One call of inbox_take or inbox_poll */
typedef struct TakeCall
{
	text	   *scope;
	int			leaf;			/* the leaf that holds the scope's entries */
	int			max_messages;
	Interval   *lease;			/* NULL: no lease; else its span (keys.c) */
	bool		receipts;		/* inbox_poll: return receipts and leases */
	int64		owner;
	int			allowed;		/* max attempts, read when first needed */
	ReturnSetInfo *rsinfo;
	int			group_column;	/* the result's group_key, or 0: none (1.0.0's SQL) */
	int			headers_column; /* the result's headers, or 0: none (before 1.2.0) */
	bool		groups;			/* whether a message may be in a group (groups.c) */
} TakeCall;

void
deferred_init(void)
{
	DefineCustomIntVariable("inbox.max_attempts",
							"Takes of a deferred message before it is dead.",
							"A take counts as an attempt whether the worker fails it or is lost. "
							"inbox_set_max_attempts() overrides it per scope.",
							&max_attempts,
							5,
							1, 1000,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);
}

/* The plan of kind on leaf (inbox_scope_leaf of the call's scope) */
static SPIPlanPtr
leaf_plan(DeferredLeafPlan kind, int leaf)
{
	return inbox_leaf_plan(&leaf_statements[kind], leaf_plans[kind], leaf);
}

/* Run kind's plan on leaf; raise unless its result is expected */
uint64
deferred_execute(DeferredLeafPlan kind, int leaf, Datum *values, const char *nulls, int expected)
{
	return inbox_execute_plan(leaf_plan(kind, leaf), values, nulls, expected,
							  leaf_statements[kind].name);
}

/* The attempts allowed in the scope: its override, or inbox.max_attempts */
static int
allowed_attempts(TakeCall *call)
{
	if (call->allowed == 0)
	{
		Oid			types[1] = {TEXTOID};
		Datum		values[1] = {PointerGetDatum(call->scope)};
		bool		isnull;

		(void) inbox_execute_plan(inbox_plan(&max_attempts_plan, "SELECT inbox.max_attempts($1)",
											 1, types),
								  values, NULL, SPI_OK_SELECT, "inbox.max_attempts");
		call->allowed = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
													SPI_tuptable->tupdesc, 1, &isnull));
		SPI_freetuptable(SPI_tuptable);
	}
	return call->allowed;
}

/* A new receipt: a random (version 4) UUID */
static pg_uuid_t *
new_receipt(void)
{
	pg_uuid_t  *uuid = palloc(sizeof(pg_uuid_t));

	if (!pg_strong_random(uuid->data, UUID_LEN))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random receipt")));
	uuid->data[6] = (uuid->data[6] & 0x0f) | 0x40;
	uuid->data[8] = (uuid->data[8] & 0x3f) | 0x80;
	return uuid;
}

/*
 * Hand out the n messages of ids (with their receipts, or none) in one
 * UPDATE: see the banner.
 */
static void
take_chunk(TakeCall *call, Datum *ids, Datum *receipts, int n,
		   TimestampTz now, Datum lease_until)
{
	Datum		values[7];
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};
	bool		one = (n == 1);

	values[0] = PointerGetDatum(call->scope);
	values[1] = one ? ids[0] :
		PointerGetDatum(construct_array(ids, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[2] = Int64GetDatum(call->owner);
	values[3] = TimestampTzGetDatum(now);
	values[4] = lease_until;
	nulls[4] = call->lease != NULL ? ' ' : 'n';
	values[5] = receipts == NULL ? (Datum) 0 : one ? receipts[0] :
		PointerGetDatum(construct_array(receipts, n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
	nulls[5] = receipts != NULL ? ' ' : 'n';

	/*
	 * inbox_take binds the messages to this session: no receipt, and due
	 * from now, so that every take checks on its owner.  A poll under a
	 * lease hands each to its receipt until the lease runs out.
	 */
	values[6] = call->receipts && call->lease != NULL ? lease_until : TimestampTzGetDatum(now);
	(void) deferred_execute(one ? LEAF_TAKE_ONE : LEAF_TAKE, call->leaf, values, nulls, SPI_OK_UPDATE);
	if (!one)
	{
		pfree(DatumGetPointer(values[1]));
		if (receipts != NULL)
			pfree(DatumGetPointer(values[5]));
	}

	/* They are locked by this transaction since the candidates' SELECT */
	if (SPI_processed != (uint64) n)
		elog(ERROR, "inbox_take: %d messages it had locked, but " UINT64_FORMAT " updated",
			 n, SPI_processed);
}

/* One attempt of a take: what handing out its candidates needs */
typedef struct TakeRound
{
	TimestampTz now;
	Datum		lease_until;	/* if the call has a lease */
	int			chunk;			/* the most messages one UPDATE hands out */
	int			picked;			/* candidates, dead ones included */
	int			taken;			/* handed out */
} TakeRound;

/*
 * Run a statement that picks candidates, plan with values, and return how
 * many it picked (in SPI_tuptable): it may probe the liveness of the
 * sessions that hold messages (session.c).
 */
static uint64
execute_picking(SPIPlanPtr plan, Datum *values, const char *name)
{
	volatile uint64 npicked = 0;

	inbox_owner_probes_begin();
	PG_TRY();
	{
		npicked = inbox_execute_plan(plan, values, NULL, SPI_OK_SELECT, name);
	}
	PG_FINALLY();
	{
		inbox_owner_probes_end();
	}
	PG_END_TRY();
	return npicked;
}

/*
 * Where a scan of the open-messages index that filled its limit ended:
 * at picked's last row, (due, message_id), in the columns of
 * LEAF_CANDIDATES.  The id is copied: the rows are freed when handed out.
 */
static void
last_picked(SPITupleTable *picked, uint64 npicked, TimestampTz *bound, text **bound_id)
{
	HeapTuple	last = picked->vals[npicked - 1];
	bool		isnull;

	*bound = DatumGetTimestampTz(SPI_getbinval(last, picked->tupdesc, 7, &isnull));
	*bound_id = DatumGetTextPCopy(SPI_getbinval(last, picked->tupdesc, 1, &isnull));
}

/*
 * Hand out the npicked candidates of picked, in their order, and free
 * them.  Their columns are those of LEAF_CANDIDATES.
 */
static void
hand_out(TakeCall *call, TakeRound *round, SPITupleTable *picked, uint64 npicked)
{
	Datum		ids[TAKE_CHUNK];
	Datum		receipts[TAKE_CHUNK];
	int			nchunk = 0;

	for (uint64 i = 0; i < npicked; i++)
	{
		HeapTuple	tuple = picked->vals[i];
		TupleDesc	desc = picked->tupdesc;
		bool		isnull;
		Datum		message_id = SPI_getbinval(tuple, desc, 1, &isnull);
		char		state = DatumGetChar(SPI_getbinval(tuple, desc, 2, &isnull));
		Datum		d = SPI_getbinval(tuple, desc, 3, &isnull);
		int			attempts = isnull ? 0 : DatumGetInt32(d);
		Datum		out[9];
		bool		out_nulls[9] = {false, false, false, false, false, false, false, false, false};
		pg_uuid_t  *receipt;

		round->picked++;

		/*
		 * A processing message picked here was lost (its lease ran out, or
		 * its owner is gone).  After its last allowed attempt it dies
		 * instead of being handed out again: a message that kills its
		 * worker must not loop forever.  It still used up a place in
		 * max_messages, so a take can return fewer rows than are pending.
		 */
		if (state == INBOX_STATE_PROCESSING && attempts >= allowed_attempts(call))
		{
			Datum		values[3];

			values[0] = PointerGetDatum(call->scope);
			values[1] = message_id;
			values[2] = TimestampTzGetDatum(round->now);
			(void) deferred_execute(LEAF_DIE, call->leaf, values, NULL, SPI_OK_UPDATE);
			inbox_depth_moved(call->scope, INBOX_STATE_PROCESSING, INBOX_STATE_DEAD, 1, false);
			inbox_group_dead(call->scope, message_id);
			continue;
		}

		/* A lost message taken again stays processing */
		if (state == INBOX_STATE_PENDING)
			inbox_depth_moved(call->scope, INBOX_STATE_PENDING, INBOX_STATE_PROCESSING, 1, false);
		receipt = call->receipts ? new_receipt() : NULL;
		ids[nchunk] = message_id;
		receipts[nchunk] = receipt != NULL ? UUIDPGetDatum(receipt) : (Datum) 0;
		if (++nchunk == round->chunk)
		{
			take_chunk(call, ids, call->receipts ? receipts : NULL, nchunk, round->now,
					   round->lease_until);
			nchunk = 0;
		}

		/*
		 * The row goes out now; if its UPDATE fails, the error discards
		 * the whole result.
		 */
		out[0] = message_id;
		out[1] = SPI_getbinval(tuple, desc, 4, &out_nulls[1]);
		out[2] = SPI_getbinval(tuple, desc, 5, &out_nulls[2]);
		out[3] = Int32GetDatum(attempts + 1);
		out[4] = SPI_getbinval(tuple, desc, 6, &out_nulls[4]);
		out[5] = receipt != NULL ? UUIDPGetDatum(receipt) : (Datum) 0;
		out_nulls[5] = receipt == NULL;
		out[6] = round->lease_until;
		out_nulls[6] = call->lease == NULL;
		/* group_key, last: 1.0.0's SQL has no such column */
		if (call->group_column > 0)
			out_nulls[call->group_column] =
				!(call->groups && inbox_group_key_of(call->scope, message_id,
													 &out[call->group_column]));
		/* headers, after it: the candidates' eighth column */
		if (call->headers_column > 0)
			out[call->headers_column] = SPI_getbinval(tuple, desc, 8,
													  &out_nulls[call->headers_column]);
		tuplestore_putvalues(call->rsinfo->setResult, call->rsinfo->setDesc, out, out_nulls);
		round->taken++;
	}
	if (nchunk > 0)
		take_chunk(call, ids, call->receipts ? receipts : NULL, nchunk, round->now,
				   round->lease_until);
	/* a waiting take runs many attempts in one SPI connection */
	SPI_freetuptable(picked);
}

/*
 * Pick up to limit messages from the open-messages index, from (low,
 * low_id) up to until, and hand them out.  *bound and *bound_id are set to
 * where the scan ended: until if it found fewer than it asked for, else
 * the last one (they come in the index's order).  Returns how many it
 * picked.
 */
static int
pick_open(TakeCall *call, TakeRound *round, TimestampTz low, text *low_id, TimestampTz until,
		  int limit, TimestampTz *bound, text **bound_id)
{
	Datum		values[5];
	SPITupleTable *picked;
	uint64		npicked;
	DeferredLeafPlan kind = call->headers_column > 0 ? LEAF_CANDIDATES_HEADERS : LEAF_CANDIDATES;

	values[0] = PointerGetDatum(call->scope);
	values[1] = TimestampTzGetDatum(until);
	values[2] = Int32GetDatum(limit);
	values[3] = TimestampTzGetDatum(low);
	values[4] = PointerGetDatum(low_id);
	npicked = execute_picking(leaf_plan(kind, call->leaf), values, leaf_statements[kind].name);
	picked = SPI_tuptable;

	*bound = until;
	*bound_id = NULL;
	if (npicked == (uint64) limit)
		last_picked(picked, npicked, bound, bound_id);
	hand_out(call, round, picked, npicked);
	return (int) npicked;
}

/*
 * Pick and hand out the messages of a take in a scope that has messages
 * above the default priority, in one statement (priorities.c), from the
 * front low, low_id on, the messages due up to aged first when aged_first.
 * Sets *bound, *bound_id to where its reading from the front ended, and
 * returns whether it read from there.
 */
static bool
pick_ranked(TakeCall *call, TakeRound *round, TimestampTz low, text *low_id,
			TimestampTz aged, bool aged_first, TimestampTz *bound, text **bound_id)
{
	Datum		values[RANKED_NARGS];
	const char *name;
	SPIPlanPtr	plan = inbox_ranked_candidates(call->leaf, call->scope, round->now,
											   call->max_messages, low, low_id, aged,
											   aged_first, call->headers_column > 0, values,
											   &name);
	uint64		npicked = execute_picking(plan, values, name);
	SPITupleTable *picked = SPI_tuptable;
	int			last_pass = 0;
	bool		isnull;
	bool		read = true;

	if (npicked > 0)
		last_pass = DatumGetInt32(SPI_getbinval(picked->vals[npicked - 1], picked->tupdesc,
												picked->tupdesc->natts, &isnull));

	/*
	 * As pick_open's bound, for steps 1 and 3 together: a statement that
	 * found fewer than it asked for read up to now; else it ended in the
	 * step of its last row, at that row, or, in step 2, after step 1.
	 */
	*bound_id = NULL;
	if (npicked < (uint64) call->max_messages)
		*bound = round->now;
	else if (last_pass == 1 || last_pass == 3)
		last_picked(picked, npicked, bound, bound_id);
	else if (aged_first)
		*bound = aged;
	else
		read = false;
	hand_out(call, round, picked, npicked);
	return read;
}

/*
 * One attempt: pick up to max_messages due messages and hand them out.
 * *candidates is set to how many were picked, dead ones included; returns
 * how many were handed out.
 *
 * Without messages above the default priority in the scope's leaf, one
 * scan of the open-messages index from the scope's front picks them all.
 * With some, one statement runs the steps that priorities.c describes.
 */
static int
take_round(TakeCall *call, int *candidates)
{
	TakeRound	round;
	InboxFront	front;
	TimestampTz bound = 0;
	text	   *bound_id = NULL;
	bool		scanned;

	round.now = GetCurrentTimestamp();
	round.lease_until = (Datum) 0;
	round.picked = 0;
	round.taken = 0;

	/*
	 * Where Citus is installed, a take updates one message a statement:
	 * the array form of the UPDATE on a distributed leaf can crash the
	 * backend that runs it under Citus 13.2, for a cause not diagnosed
	 * (test/citus/citus.pl runs takes on Citus).
	 */
	round.chunk = inbox_citus_installed() ? 1 : TAKE_CHUNK;

	if (call->lease != NULL)
		round.lease_until = DirectFunctionCall2(timestamptz_pl_interval,
												TimestampTzGetDatum(round.now),
												IntervalPGetDatum(call->lease));

	/* From the scope's front, before which nothing is takeable (front.c) */
	inbox_front_read(call->leaf, call->scope, round.now, &front);
	if (inbox_ranked_in_scope(call->leaf, call->scope))
	{
		int64		age = inbox_priority_age();
		TimestampTz aged = age > 0 ? round.now - age : DT_NOBEGIN;

		scanned = pick_ranked(call, &round, front.low, front.low_id, aged,
							  age > 0 && (front.low == DT_NOBEGIN || front.low <= aged),
							  &bound, &bound_id);
	}
	else
	{
		(void) pick_open(call, &round, front.low, front.low_id, round.now, call->max_messages,
						 &bound, &bound_id);
		scanned = true;
	}

	/*
	 * The front moves to where the scan from it ended.  Those picked are
	 * locked by this transaction, whose end tells the front where they
	 * went.
	 */
	if (scanned)
		inbox_front_advance(&front, round.now, bound, bound_id);
	*candidates = round.picked;
	return round.taken;
}

/*
 * Until when a take that found nothing at now may sleep: until its
 * deadline, the next due time of the scope, or a commit that noted the
 * scope (wakeup.c), whichever comes first, and never longer than
 * FRONT_FULL_SCAN_MS.
 *
 * Some messages become takeable with no commit that wakes the scope's
 * waiting takes, and no due time to sleep until: a row written without the
 * extension's functions (a data-only restore, a COPY, an INSERT or UPDATE
 * by hand), a message whose owner session ended, one that a concurrent
 * take locked and gave back by rolling back.  A take finds each of them
 * when it looks, the rows written by hand only with the full scan that the
 * scope's takes run at least every FRONT_FULL_SCAN_MS, since no event told
 * the front of them (front.c).  So a waiting take looks again at least
 * that often, and finds them as soon as a take that does not wait would.
 * A receive committed by COMMIT PREPARED wakes nobody either; the sleep
 * itself ends in time for it where transactions can be prepared, as every
 * waiter's does (wakeup.c).
 */
static TimestampTz
sleep_until(TakeCall *call, TimestampTz now, TimestampTz deadline)
{
	Datum		values[2];
	bool		isnull;
	TimestampTz until = Min(deadline, TimestampTzPlusMilliseconds(now, FRONT_FULL_SCAN_MS));

	values[0] = PointerGetDatum(call->scope);
	values[1] = TimestampTzGetDatum(now);
	if (deferred_execute(LEAF_NEXT_DUE, call->leaf, values, NULL, SPI_OK_SELECT) > 0)
		until = Min(until, DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
															 SPI_tuptable->tupdesc, 1, &isnull)));
	SPI_freetuptable(SPI_tuptable);
	return until;
}

/*
 * A lease or a wait: NULL if not given, else its span (inbox_check_duration),
 * which must be positive.
 */
Interval *
positive_duration_arg(FunctionCallInfo fcinfo, int argno, const char *name,
					  const char *hint)
{
	Interval   *span;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	span = inbox_check_duration(PG_GETARG_INTERVAL_P(argno), name);
	if (span->time <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be positive", name),
				 hint ? errhint("%s", hint) : 0));
	return span;
}

/*
 * inbox_take(scope, max_messages, lease) and inbox_poll(scope,
 * max_messages, lease, wait): see the banner.
 */
static Datum
take(FunctionCallInfo fcinfo, bool poll)
{
	TakeCall	call;
	Interval   *wait = NULL;
	TimestampTz deadline = 0;
	int			candidates;

	call.scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	call.leaf = inbox_scope_leaf(call.scope);
	if (PG_ARGISNULL(1) || PG_GETARG_INT32(1) < 1 || PG_GETARG_INT32(1) > TAKE_MAX_MESSAGES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_messages must be between 1 and %d", TAKE_MAX_MESSAGES),
				 PG_ARGISNULL(1) ? errdetail("It is NULL.") :
				 errdetail("It is %d.", PG_GETARG_INT32(1))));
	call.max_messages = PG_GETARG_INT32(1);
	call.lease = positive_duration_arg(fcinfo, 2, "lease",
									   "Pass NULL to take without a lease: the message then stays with this session "
									   "until it is completed or failed, or the session ends.");
	call.receipts = poll;
	call.allowed = 0;
	call.rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	/* Liveness is node-local: a receipt's lease is not (distributed.c) */
	if (!poll || call.lease == NULL)
		inbox_refuse_if_distributed(INBOX_REFUSE_SESSION_TAKE);

	if (poll)
	{
		wait = positive_duration_arg(fcinfo, 3, "wait",
									 "Pass NULL not to wait.");
		if (wait != NULL)
		{
			if (wait->time > (int64) POLL_MAX_WAIT_SECONDS * USECS_PER_SEC)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("wait must be at most %d seconds", POLL_MAX_WAIT_SECONDS),
						 errhint("Wait again when the call returns empty.")));
			if (!inbox_wakeup_available())
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("inbox_poll cannot wait: the inbox library is not in shared_preload_libraries"),
						 errdetail("A waiting take sleeps on a condition variable in shared memory, "
								   "which exists only when the library is preloaded."),
						 errhint("Add inbox to shared_preload_libraries and restart, or pass wait => NULL "
								 "and poll again after a pause.")));
			if (IsolationUsesXactSnapshot())
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("inbox_poll cannot wait under REPEATABLE READ or SERIALIZABLE"),
						 errdetail("The transaction's snapshot was taken before the wait, "
								   "so it could never see a message that arrives during it."),
						 errhint("Poll in a READ COMMITTED transaction, or pass wait => NULL.")));
			/* A span of at most POLL_MAX_WAIT_SECONDS: no overflow */
			deadline = GetCurrentTimestamp() + wait->time;
		}
	}

	InitMaterializedSRF(fcinfo, 0);
	/* The columns of the caller's SQL: 1.0.0 has neither, 1.1.0 no headers */
	call.group_column = call.rsinfo->setDesc->natts >= (poll ? 8 : 6) ? (poll ? 7 : 5) : 0;
	call.headers_column = call.rsinfo->setDesc->natts == (poll ? 9 : 7) ? (poll ? 8 : 6) : 0;
	call.groups = call.group_column > 0 && inbox_groups_in_use();
	call.owner = inbox_owner_key();
	/* The messages it takes are anybody's when this session exits */
	inbox_front_watch_owner_exit();

	inbox_spi_connect();
	for (;;)
	{
		uint64		generation = wait != NULL ? inbox_wakeup_generation(call.scope) : 0;
		TimestampTz now;
		TimestampTz until;
		long		secs;
		int			usecs;

		/*
		 * Return what was taken; and return at once too when all that was
		 * picked died, rather than sleep on their uncommitted deaths,
		 * which would keep them from inbox_dead_letters and lock them
		 * against an inbox_requeue for the rest of the wait.
		 */
		if (take_round(&call, &candidates) > 0 || wait == NULL || candidates > 0)
			break;

		now = GetCurrentTimestamp();
		if (now >= deadline)
			break;
		until = sleep_until(&call, now, deadline);
		TimestampDifference(now, until, &secs, &usecs);
		inbox_wakeup_sleep(call.scope, generation, secs * 1000 + usecs / 1000 + 1);
	}
	SPI_finish();
	return (Datum) 0;
}

Datum
inbox_take_1_0(PG_FUNCTION_ARGS)
{
	return take(fcinfo, false);
}

Datum
inbox_poll_1_0(PG_FUNCTION_ARGS)
{
	return take(fcinfo, true);
}
