/*-------------------------------------------------------------------------
 *
 * admin.c
 *	  The C entry points that the SQL of 0.4.0 binds for
 *	  its administration functions: inbox_set_retention, inbox_drop_scope
 *	  and inbox_stats_reset.
 *
 * The SQL of 1.0.0 and later defines them as SQL functions (sql/inbox.sql):
 * nothing in them needs C but the shared-memory counters, which
 * inbox.forget_counters() reaches.  The library keeps these entry points so
 * that a database still at 0.4.0 keeps working until ALTER EXTENSION inbox
 * UPDATE (version.c).  They do what the SQL versions do, including the
 * bound on a retention.
 *
 * src/admin.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "inbox.h"
#include "keys.h"
#include "stats.h"
#include "version.h"

PG_FUNCTION_INFO_V1(inbox_set_retention);
PG_FUNCTION_INFO_V1(inbox_drop_scope);
PG_FUNCTION_INFO_V1(inbox_stats_reset);

/* Run one statement in an SPI connection of its own; the rows it touched */
static uint64
run(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls,
	int expected)
{
	int			rc;
	uint64		processed;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	rc = SPI_execute_with_args(sql, nargs, types, values, nulls, false, 0);
	if (rc != expected)
		elog(ERROR, "SPI_execute_with_args failed: %s", SPI_result_code_string(rc));
	processed = SPI_processed;
	SPI_finish();
	return processed;
}

/* inbox_set_retention(scope text, retention interval) -> void */
Datum
inbox_set_retention(PG_FUNCTION_ARGS)
{
	text	   *scope;
	Oid			types[2] = {TEXTOID, INTERVALOID};
	Datum		values[2];
	char		nulls[2] = {' ', ' '};

	inbox_require_previous_sql();
	scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	values[0] = PointerGetDatum(scope);
	values[1] = PG_ARGISNULL(1) ? (Datum) 0 : PG_GETARG_DATUM(1);
	if (PG_ARGISNULL(1))
		nulls[1] = 'n';
	else
	{
		Interval   *low = palloc0(sizeof(Interval));
		Interval   *high = palloc0(sizeof(Interval));

		high->time = (int64) INBOX_MAX_RETENTION_SECONDS * USECS_PER_SEC;
		if (DatumGetBool(DirectFunctionCall2(interval_le, values[1], IntervalPGetDatum(low))) ||
			DatumGetBool(DirectFunctionCall2(interval_gt, values[1], IntervalPGetDatum(high))))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("retention must be between 1 second and %d seconds",
							INBOX_MAX_RETENTION_SECONDS),
					 errdetail("The retention given for scope \"%s\" is %s.",
							   inbox_quote(scope),
							   DatumGetCString(DirectFunctionCall1(interval_out, values[1]))),
					 errhint("Pass NULL to go back to inbox.retention.")));
	}
	(void) run("INSERT INTO inbox.scopes (scope, retention) VALUES ($1, $2) "
		"ON CONFLICT (scope) DO UPDATE SET retention = EXCLUDED.retention",
		2, types, values, nulls, SPI_OK_INSERT);
	PG_RETURN_VOID();
}

/* inbox_drop_scope(scope text) -> bigint: the entries removed */
Datum
inbox_drop_scope(PG_FUNCTION_ARGS)
{
	text	   *scope;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	int64		removed;

	inbox_require_previous_sql();
	scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	values[0] = PointerGetDatum(scope);
	removed = (int64) run("DELETE FROM inbox.entries WHERE scope OPERATOR(pg_catalog.=) $1 COLLATE pg_catalog.\"C\"",
						  1, types, values, NULL, SPI_OK_DELETE);
	(void) run("DELETE FROM inbox.scopes WHERE scope OPERATOR(pg_catalog.=) $1 COLLATE pg_catalog.\"C\"",
		1, types, values, NULL, SPI_OK_DELETE);
	inbox_stats_forget(MyDatabaseId, text_to_cstring(scope));
	PG_RETURN_INT64(removed);
}

/* inbox_stats_reset() -> void */
Datum
inbox_stats_reset(PG_FUNCTION_ARGS)
{
	inbox_require_previous_sql();
	inbox_stats_forget(MyDatabaseId, NULL);
	(void) run("UPDATE inbox.scopes AS s SET retained = "
		"(SELECT pg_catalog.count(*) FROM inbox.entries AS e "
		" WHERE e.scope OPERATOR(pg_catalog.=) s.scope)",
		0, NULL, NULL, NULL, SPI_OK_UPDATE);
	PG_RETURN_VOID();
}
