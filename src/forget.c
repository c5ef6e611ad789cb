/*-------------------------------------------------------------------------
 *
 * forget.c
 *	  inbox_forget and inbox_forget_range: remove processed entries so that
 *	  their next delivery is processed again, with an audit row for every
 *	  call.
 *
 * Forgetting undoes the inbox's one promise for a message, so it is not an
 * application's operation: the entry point (access.c) lets through only
 * the extension's owner, superusers, and roles the owner allowed with
 * inbox_allow_forget, whatever EXECUTE grants say, and hands over the
 * role that called (inbox_forget_set_caller), which the audit row
 * records.  The implementation runs as the owner.
 *
 * Only done entries are forgotten.  A pending or processing message has
 * not been processed yet, so there is nothing to forget, and a dead one is
 * given back with inbox_requeue.
 *
 * Every call writes inbox.forget_log in the caller's transaction: one row
 * per entry removed, holding the entry as it was, or one row with no entry
 * when nothing matched.  The audit commits or rolls back with the removal.
 *
 * src/forget.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "distributed.h"
#include "entries.h"
#include "forget.h"
#include "inbox.h"
#include "keys.h"
#include "spi.h"

PG_FUNCTION_INFO_V1(inbox_forget);
PG_FUNCTION_INFO_V1(inbox_forget_range);

/* The longest reason an audit row keeps, in bytes */
#define INBOX_MAX_REASON_BYTES		1024

/* The audit row's columns after the ones each statement supplies */
#define AUDIT_WHO \
	"SESSION_USER, pg_catalog.pg_backend_pid(), " \
	"pg_catalog.current_setting('application_name'), pg_catalog.inet_client_addr()"

static const char *const forget_one_sql =
"WITH gone AS ("
"  DELETE FROM inbox.entries AS e"
"   WHERE e.scope OPERATOR(pg_catalog.=) $1"
"     AND e.message_id OPERATOR(pg_catalog.=) $2"
"     AND e.bucket OPERATOR(pg_catalog.=) $3"
"     AND e.state OPERATOR(pg_catalog.=) 'd'::\"char\""
"  RETURNING pg_catalog.to_jsonb(e.*) AS entry) "
"INSERT INTO inbox.forget_log (scope, message_id, reason, entry, role_name, "
"                              session_role, backend_pid, application_name, client_addr) "
"SELECT $1, $2, $4, g.entry, $5, " AUDIT_WHO " FROM gone AS g";

static const char *const forget_range_sql =
"WITH gone AS ("
"  DELETE FROM inbox.entries AS e"
"   WHERE e.scope OPERATOR(pg_catalog.=) $1"
"     AND e.received_at OPERATOR(pg_catalog.>=) $2"
"     AND e.received_at OPERATOR(pg_catalog.<) $3"
"     AND e.state OPERATOR(pg_catalog.=) 'd'::\"char\""
"  RETURNING e.message_id, pg_catalog.to_jsonb(e.*) AS entry) "
"INSERT INTO inbox.forget_log (scope, message_id, received_from, received_before, reason, entry, "
"                              role_name, session_role, backend_pid, application_name, client_addr) "
"SELECT $1, g.message_id, $2, $3, $4, g.entry, $5, " AUDIT_WHO " FROM gone AS g";

/* A call that removed nothing still leaves its row */
static const char *const audit_nothing_sql =
"INSERT INTO inbox.forget_log (scope, message_id, received_from, received_before, reason, entry, "
"                              role_name, session_role, backend_pid, application_name, client_addr) "
"VALUES ($1, $2, $3, $4, $5, NULL, $6, " AUDIT_WHO ")";

/*
 * Two statements, each with a target list: Citus plans neither a query
 * that mixes a distributed inbox.entries with the local inbox.scopes, nor
 * an empty target list.
 */
static const char *const scope_known_sql[2] = {
	"SELECT EXISTS (SELECT 1 FROM inbox.entries WHERE scope OPERATOR(pg_catalog.=) $1)",
	"SELECT EXISTS (SELECT 1 FROM inbox.scopes WHERE scope OPERATOR(pg_catalog.=) $1)"
};

/*
 * On a distributed inbox.entries the forget's DELETE and its audit rows are
 * two statements: Citus runs neither a function in the RETURNING list of a
 * distributed DELETE nor a CTE that writes a shard and a local table.  The
 * DELETEs return each entry whole, and the audit turns it into jsonb.
 */
static const char *const forget_one_distributed_sql =
"DELETE FROM inbox.entries AS e"
" WHERE e.scope OPERATOR(pg_catalog.=) $1"
"   AND e.message_id OPERATOR(pg_catalog.=) $2"
"   AND e.bucket OPERATOR(pg_catalog.=) $3"
"   AND e.state OPERATOR(pg_catalog.=) 'd'::\"char\""
" RETURNING e.message_id, e";

static const char *const forget_range_distributed_sql =
"DELETE FROM inbox.entries AS e"
" WHERE e.scope OPERATOR(pg_catalog.=) $1"
"   AND e.received_at OPERATOR(pg_catalog.>=) $2"
"   AND e.received_at OPERATOR(pg_catalog.<) $3"
"   AND e.state OPERATOR(pg_catalog.=) 'd'::\"char\""
" RETURNING e.message_id, e";

static const char *const audit_entry_sql =
"INSERT INTO inbox.forget_log (scope, message_id, received_from, received_before, reason, entry, "
"                              role_name, session_role, backend_pid, application_name, client_addr) "
"VALUES ($1, $2, $3, $4, $5, pg_catalog.to_jsonb($6), $7, " AUDIT_WHO ")";

static const char *const state_sql =
"SELECT state FROM inbox.entries "
"WHERE scope OPERATOR(pg_catalog.=) $1 AND message_id OPERATOR(pg_catalog.=) $2 "
"AND bucket OPERATOR(pg_catalog.=) $3";

static text *
reason_arg(FunctionCallInfo fcinfo, int argno)
{
	Size		len;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("reason must not be null"),
				 errhint("Say why the message must be processed again: the audit keeps it.")));
	len = toast_raw_datum_size(PG_GETARG_DATUM(argno)) - VARHDRSZ;
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("reason must not be empty"),
				 errhint("Say why the message must be processed again: the audit keeps it.")));
	if (len > INBOX_MAX_REASON_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("reason is too long"),
				 errdetail("The reason is %zu bytes long; the limit is %d bytes.",
						   len, INBOX_MAX_REASON_BYTES),
				 errhint("Refer to a ticket or a document for the details.")));
	return PG_GETARG_TEXT_PP(argno);
}

/*
 * The role that called the running inbox_forget* entry point, which
 * access.c hands over for the audit row; InvalidOid outside such a call.
 */
static Oid	forget_caller = InvalidOid;

/*
 * access.c's entry point is about to call the implementation for caller:
 * returns the caller it replaces, which the entry point puts back when the
 * call ends, on success and on error alike (calls may nest).
 */
Oid
inbox_forget_set_caller(Oid caller)
{
	Oid			outer = forget_caller;

	forget_caller = caller;
	return outer;
}

/* Refuse a scope that has no entry and no settings: most likely a typo */
static void
check_scope_known(text *scope)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {PointerGetDatum(scope)};
	bool		isnull;
	bool		known = false;
	int			i;

	for (i = 0; i < 2 && !known; i++)
	{
		inbox_execute(scope_known_sql[i], 1, types, values, NULL, SPI_OK_SELECT);
		known = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	if (!known)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("inbox scope \"%s\" does not exist", inbox_quote(scope)),
				 errdetail("It has no entries and no settings."),
				 errhint("Check the scope's name: scopes compare byte-wise.")));
}

/* The name of the role that called, for the audit */
static Datum
caller_name(void)
{
	/* A direct call of the implementation (its owner only) is the owner's */
	Oid			caller = OidIsValid(forget_caller) ? forget_caller : GetUserId();

	return CStringGetTextDatum(GetUserNameFromId(caller, false));
}

static void
audit_nothing(text *scope, text *message_id, Datum from, Datum before, bool range, text *reason)
{
	Oid			types[6] = {TEXTOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, TEXTOID};
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(message_id);
	if (message_id == NULL)
		nulls[1] = 'n';
	values[2] = from;
	values[3] = before;
	if (!range)
		nulls[2] = nulls[3] = 'n';
	values[4] = PointerGetDatum(reason);
	values[5] = caller_name();
	inbox_execute(audit_nothing_sql, 6, types, values, nulls, SPI_OK_INSERT);
}

/*
 * The forget on a distributed inbox.entries: run delete_sql (the arguments
 * of the single-node statement but the last two), then write an audit row
 * for each entry it returned.  from and before are 0 for a single id.
 * Returns how many entries were removed.
 */
static uint64
forget_distributed(const char *delete_sql, Oid *types, Datum *values, text *scope,
				   Datum from, Datum before, bool range, text *reason)
{
	Oid			audit_types[7] = {TEXTOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID,
	get_rel_type_id(inbox_relid("entries")), TEXTOID};
	SPITupleTable *gone;
	uint64		n;
	uint64		i;

	n = inbox_execute(delete_sql, 3, types, values, NULL, SPI_OK_DELETE_RETURNING);
	gone = SPI_tuptable;
	for (i = 0; i < n; i++)
	{
		Datum		audit[7];
		char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};
		bool		isnull;

		audit[0] = PointerGetDatum(scope);
		audit[1] = SPI_getbinval(gone->vals[i], gone->tupdesc, 1, &isnull);
		audit[2] = from;
		audit[3] = before;
		if (!range)
			nulls[2] = nulls[3] = 'n';
		audit[4] = PointerGetDatum(reason);
		audit[5] = SPI_getbinval(gone->vals[i], gone->tupdesc, 2, &isnull);
		audit[6] = caller_name();
		inbox_execute(audit_entry_sql, 7, audit_types, audit, nulls, SPI_OK_INSERT);
	}
	return n;
}

/*
 * inbox_forget(scope text, message_id text, reason text) -> boolean
 *
 * True if a done entry was removed; false if there was none (an unknown
 * scope raises 42704).  A pending, processing or dead message raises 55000.
 */
Datum
inbox_forget(PG_FUNCTION_ARGS)
{
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	text	   *message_id = inbox_key_arg(fcinfo, 1, "message_id", INBOX_MAX_MESSAGE_ID_BYTES);
	text	   *reason = reason_arg(fcinfo, 2);
	Oid			types[5] = {TEXTOID, TEXTOID, INT2OID, TEXTOID, TEXTOID};
	Datum		values[5];
	bool		forgotten;

	inbox_spi_connect();
	check_scope_known(scope);

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(message_id);
	values[2] = Int16GetDatum((int16) inbox_bucket(scope, message_id));
	values[3] = PointerGetDatum(reason);
	values[4] = caller_name();
	if (inbox_entries_distributed())
		forgotten = forget_distributed(forget_one_distributed_sql, types, values, scope,
									   (Datum) 0, (Datum) 0, false, reason) == 1;
	else
	{
		forgotten = inbox_execute(forget_one_sql, 5, types, values, NULL, SPI_OK_INSERT) == 1;
	}

	if (!forgotten)
	{
		bool		isnull;

		/* Nothing done to remove: is there an entry in another state? */
		if (inbox_execute(state_sql, 3, types, values, NULL, SPI_OK_SELECT) == 1)
		{
			char		state = DatumGetChar(SPI_getbinval(SPI_tuptable->vals[0],
														   SPI_tuptable->tupdesc, 1, &isnull));

			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("message \"%s\" in scope \"%s\" has not been processed",
							inbox_quote(message_id), inbox_quote(scope)),
					 errdetail("It is %s; only a processed (done) message can be forgotten.",
							   state == INBOX_STATE_PENDING ? "pending" :
							   state == INBOX_STATE_PROCESSING ? "processing" : "dead"),
					 errhint(state == INBOX_STATE_DEAD
							 ? "Give a dead message back with inbox_requeue."
							 : "It will be processed: there is nothing to forget.")));
		}
		audit_nothing(scope, message_id, (Datum) 0, (Datum) 0, false, reason);
	}
	SPI_finish();
	PG_RETURN_BOOL(forgotten);
}

/*
 * inbox_forget_range(scope text, received_from timestamptz,
 *					  received_before timestamptz, reason text) -> bigint
 *
 * Remove the scope's done entries received in [received_from,
 * received_before), for a replay; returns how many.
 */
Datum
inbox_forget_range(PG_FUNCTION_ARGS)
{
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	text	   *reason;
	TimestampTz from;
	TimestampTz before;
	Oid			types[5] = {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, TEXTOID};
	Datum		values[5];
	uint64		forgotten;

	if (PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("received_from and received_before must not be null"),
				 errhint("Bound the replay in time; '-infinity' and 'infinity' name the ends explicitly.")));
	from = PG_GETARG_TIMESTAMPTZ(1);
	before = PG_GETARG_TIMESTAMPTZ(2);
	if (from >= before)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("received_from must be before received_before"),
				 errdetail("The range given is [%s, %s).",
						   pstrdup(timestamptz_to_str(from)), timestamptz_to_str(before))));
	reason = reason_arg(fcinfo, 3);

	inbox_spi_connect();
	check_scope_known(scope);

	values[0] = PointerGetDatum(scope);
	values[1] = TimestampTzGetDatum(from);
	values[2] = TimestampTzGetDatum(before);
	values[3] = PointerGetDatum(reason);
	values[4] = caller_name();
	if (inbox_entries_distributed())
		forgotten = forget_distributed(forget_range_distributed_sql, types, values, scope,
									   values[1], values[2], true, reason);
	else
	{
		forgotten = inbox_execute(forget_range_sql, 5, types, values, NULL, SPI_OK_INSERT);
	}
	if (forgotten == 0)
		audit_nothing(scope, NULL, values[1], values[2], true, reason);
	SPI_finish();
	PG_RETURN_INT64((int64) forgotten);
}
