/*-------------------------------------------------------------------------
 *
 * compat_0_4.c
 *	  The C entry points that the SQL of 0.4.0 binds: inbox_claim,
 *	  inbox_receive, inbox_status, inbox_purge, the counters, and the
 *	  administration functions inbox_set_retention, inbox_drop_scope and
 *	  inbox_stats_reset.
 *
 * The library keeps them so that a database still at 0.4.0 keeps working
 * between "make install" and ALTER EXTENSION inbox UPDATE.  Each checks
 * first that the database really is at 0.4.0 (version.c), then does what
 * the current version does: the claim path with 0.4.0's table, which has
 * no bucket, and the administration functions, which the SQL of 1.0.0 and
 * later defines in SQL, as statements of their own, including the bound
 * on a retention.
 *
 * src/compat_0_4.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "claim.h"
#include "inbox.h"
#include "keys.h"
#include "purge.h"
#include "spi.h"
#include "stats.h"
#include "version.h"

PG_FUNCTION_INFO_V1(inbox_claim);
PG_FUNCTION_INFO_V1(inbox_status);
PG_FUNCTION_INFO_V1(inbox_receive_json);
PG_FUNCTION_INFO_V1(inbox_receive_bytes);
PG_FUNCTION_INFO_V1(inbox_counters);
PG_FUNCTION_INFO_V1(inbox_purge);
PG_FUNCTION_INFO_V1(inbox_set_retention);
PG_FUNCTION_INFO_V1(inbox_drop_scope);
PG_FUNCTION_INFO_V1(inbox_stats_reset);

Datum
inbox_claim(PG_FUNCTION_ARGS)
{
	inbox_require_previous_sql();
	return inbox_claim_call(fcinfo, true);
}

Datum
inbox_receive_json(PG_FUNCTION_ARGS)
{
	inbox_require_previous_sql();
	return inbox_receive_call(fcinfo, true, true);
}

Datum
inbox_receive_bytes(PG_FUNCTION_ARGS)
{
	inbox_require_previous_sql();
	return inbox_receive_call(fcinfo, false, true);
}

Datum
inbox_status(PG_FUNCTION_ARGS)
{
	inbox_require_previous_sql();
	return inbox_status_call(fcinfo, true);
}

Datum
inbox_purge(PG_FUNCTION_ARGS)
{
	inbox_require_previous_sql();
	PG_RETURN_INT64(inbox_purge_round());
}

Datum
inbox_counters(PG_FUNCTION_ARGS)
{
	inbox_require_previous_sql();
	inbox_stats_materialize(fcinfo);
	return (Datum) 0;
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
	(void) inbox_execute_alone("INSERT INTO inbox.scopes (scope, retention) VALUES ($1, $2) "
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
	removed = (int64) inbox_execute_alone("DELETE FROM inbox.entries WHERE scope OPERATOR(pg_catalog.=) $1 COLLATE pg_catalog.\"C\"",
						  1, types, values, NULL, SPI_OK_DELETE);
	(void) inbox_execute_alone("DELETE FROM inbox.scopes WHERE scope OPERATOR(pg_catalog.=) $1 COLLATE pg_catalog.\"C\"",
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
	(void) inbox_execute_alone("UPDATE inbox.scopes AS s SET retained = "
		"(SELECT pg_catalog.count(*) FROM inbox.entries AS e "
		" WHERE e.scope OPERATOR(pg_catalog.=) s.scope)",
		0, NULL, NULL, NULL, SPI_OK_UPDATE);
	PG_RETURN_VOID();
}
