/*-------------------------------------------------------------------------
 *
 * purge.c
 *	  Retention: the purge steps that the background worker and the SQL
 *	  function inbox_purge() share, and the per-scope administration
 *	  functions.
 *
 * A purge round has two steps:
 *
 *	1. observe: advance every scope's retention clock (inbox.observe) and
 *	   collect the cutoff of each scope that may be purged now;
 *	2. for each leaf of inbox.entries, delete at most inbox.purge_batch_size
 *	   expired entries, oldest first, spread over the scopes.
 *
 * The worker runs each step in a transaction of its own (one per leaf), so
 * no snapshot and no lock outlives a batch.  inbox_purge() runs one round
 * in the caller's transaction.  Two purgers never fight: each leaf is taken
 * with pg_try_advisory_xact_lock and each scope's clock row with SKIP
 * LOCKED, so the loser skips rather than waits, and no row is deleted or
 * even examined twice.  Every statement runs under inbox.purge_lock_timeout:
 * the purge backs off instead of making claims queue behind it.
 *
 * All SQL goes through SPI with schema-qualified names, for the same
 * reasons as the claim (see claim.c).
 *
 * src/purge.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "inbox.h"
#include "purge.h"
#include "stats.h"

PG_FUNCTION_INFO_V1(inbox_settings);
PG_FUNCTION_INFO_V1(inbox_purge);
PG_FUNCTION_INFO_V1(inbox_set_retention);
PG_FUNCTION_INFO_V1(inbox_drop_scope);
PG_FUNCTION_INFO_V1(inbox_stats_reset);

/* First key of the advisory locks that give one purger a leaf at a time */
#define INBOX_PURGE_LOCK_KEY	0x696e6278	/* "inbx" */

static Interval *
seconds_interval(int seconds)
{
	Interval   *result = palloc0(sizeof(Interval));

	result->time = (int64) seconds * USECS_PER_SEC;
	return result;
}

static void
spi_check(int rc, int expected, const char *what)
{
	if (rc != expected)
		elog(ERROR, "%s failed: %s", what, SPI_result_code_string(rc));
}

/*
 * inbox.settings() -> (retention interval, idle_threshold interval,
 * batch_size integer): the settings in force for this session.
 */
Datum
inbox_settings(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[3];
	bool		nulls[3] = {false, false, false};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	tupdesc = BlessTupleDesc(tupdesc);
	values[0] = IntervalPGetDatum(seconds_interval(inbox_retention));
	values[1] = IntervalPGetDatum(seconds_interval(inbox_idle_threshold));
	values[2] = Int32GetDatum(inbox_purge_batch_size);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * Apply inbox.purge_lock_timeout as lock_timeout.  The caller chooses the
 * action: GUC_ACTION_LOCAL in the worker's own transactions,
 * GUC_ACTION_SAVE inside a GUC nest level in inbox_purge().
 */
void
inbox_purge_set_lock_timeout(GucAction action)
{
	char		value[32];

	snprintf(value, sizeof(value), "%d", inbox_purge_lock_timeout);
	(void) set_config_option("lock_timeout", value, PGC_SUSET, PGC_S_SESSION,
							 action, true, 0, false);
}

/*
 * Step 1: observe every scope; return the PurgeTargets, allocated in cxt,
 * of the scopes that have a cutoff now.
 */
List *
inbox_purge_observe(MemoryContext cxt)
{
	Oid			types[2] = {INTERVALOID, INTERVALOID};
	Datum		values[2];
	List	   *targets = NIL;
	uint64		i;

	values[0] = IntervalPGetDatum(seconds_interval(inbox_retention));
	values[1] = IntervalPGetDatum(seconds_interval(inbox_idle_threshold));
	spi_check(SPI_execute_with_args("SELECT s, inbox.observe(s, $1, $2) "
									"FROM inbox.scope_list() AS s",
									2, types, values, NULL, false, 0),
			  SPI_OK_SELECT, "inbox.observe");

	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[i];
		TupleDesc	tupdesc = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		cutoff = SPI_getbinval(tuple, tupdesc, 2, &isnull);
		PurgeTarget *target;
		char	   *scope;
		MemoryContext oldcxt;

		if (isnull)
			continue;			/* held, or another purger has it */
		scope = TextDatumGetCString(SPI_getbinval(tuple, tupdesc, 1, &isnull));
		oldcxt = MemoryContextSwitchTo(cxt);
		target = palloc(sizeof(PurgeTarget));
		target->scope = pstrdup(scope);
		target->cutoff = DatumGetTimestampTz(cutoff);
		targets = lappend(targets, target);
		MemoryContextSwitchTo(oldcxt);
	}
	return targets;
}

/* The leaves of inbox.entries, in a stable order, as a List of Oids in cxt */
List *
inbox_purge_leaves(MemoryContext cxt)
{
	List	   *leaves = NIL;
	MemoryContext oldcxt;
	uint64		i;

	spi_check(SPI_execute("SELECT c.oid FROM pg_catalog.pg_inherits AS i "
						  "JOIN pg_catalog.pg_class AS c ON c.oid OPERATOR(pg_catalog.=) i.inhrelid "
						  "WHERE i.inhparent OPERATOR(pg_catalog.=) 'inbox.entries'::pg_catalog.regclass "
						  "ORDER BY c.relname", true, 0),
			  SPI_OK_SELECT, "listing the leaves of inbox.entries");

	oldcxt = MemoryContextSwitchTo(cxt);
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		leaves = lappend_oid(leaves,
							 DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
															SPI_tuptable->tupdesc,
															1, &isnull)));
	}
	MemoryContextSwitchTo(oldcxt);
	return leaves;
}

/*
 * Step 2, for one leaf: delete at most limit expired entries, scope after
 * scope.  Returns the rows deleted; *more says whether the limit was
 * reached, so that more may remain.  A leaf that another purger holds is
 * skipped (0 rows, *more false): that purger is doing the work.
 */
int64
inbox_purge_leaf(Oid leaf, List *targets, int limit, bool *more)
{
	Oid			locktypes[2] = {INT4OID, INT4OID};
	Datum		lockargs[2];
	bool		isnull;
	int64		total = 0;
	ListCell   *lc;

	*more = false;
	if (targets == NIL)
		return 0;

	lockargs[0] = Int32GetDatum(INBOX_PURGE_LOCK_KEY);
	lockargs[1] = Int32GetDatum((int32) leaf);
	spi_check(SPI_execute_with_args("SELECT pg_catalog.pg_try_advisory_xact_lock($1, $2)",
									2, locktypes, lockargs, NULL, false, 1),
			  SPI_OK_SELECT, "pg_try_advisory_xact_lock");
	if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
									1, &isnull)))
		return 0;

	foreach(lc, targets)
	{
		PurgeTarget *target = (PurgeTarget *) lfirst(lc);
		Oid			types[4] = {REGCLASSOID, TEXTOID, TIMESTAMPTZOID, INT4OID};
		Datum		values[4];
		int64		rows;

		values[0] = ObjectIdGetDatum(leaf);
		values[1] = CStringGetTextDatum(target->scope);
		values[2] = TimestampTzGetDatum(target->cutoff);
		values[3] = Int32GetDatum((int32) (limit - total));
		spi_check(SPI_execute_with_args("SELECT inbox.purge_batch($1, $2, $3, $4)",
										4, types, values, NULL, false, 1),
				  SPI_OK_SELECT, "inbox.purge_batch");
		rows = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
										   SPI_tuptable->tupdesc, 1, &isnull));
		inbox_stats_purged(target->scope, rows);
		total += rows;
		if (total >= limit)
		{
			*more = true;
			break;
		}
	}
	return total;
}

/*
 * inbox_purge() -> bigint: one purge round in the caller's transaction (at
 * most inbox.purge_batch_size rows per leaf), for servers that cannot run
 * the background worker.  Returns the rows purged; call it again, in a new
 * transaction, while it returns a positive number to drain a backlog.
 */
Datum
inbox_purge(PG_FUNCTION_ARGS)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext,
											  "inbox_purge",
											  ALLOCSET_DEFAULT_SIZES);
	List	   *targets;
	List	   *leaves;
	ListCell   *lc;
	int64		total = 0;
	int			nestlevel;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	nestlevel = NewGUCNestLevel();
	inbox_purge_set_lock_timeout(GUC_ACTION_SAVE);

	targets = inbox_purge_observe(cxt);
	leaves = inbox_purge_leaves(cxt);
	foreach(lc, leaves)
	{
		bool		more;

		total += inbox_purge_leaf(lfirst_oid(lc), targets,
								  inbox_purge_batch_size, &more);
	}

	AtEOXact_GUC(true, nestlevel);
	SPI_finish();
	MemoryContextDelete(cxt);
	PG_RETURN_INT64(total);
}

/*
 * inbox_set_retention(scope text, retention interval) -> void: override
 * inbox.retention for one scope; NULL goes back to the setting.
 */
Datum
inbox_set_retention(PG_FUNCTION_ARGS)
{
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	Oid			types[2] = {TEXTOID, INTERVALOID};
	Datum		values[2];
	char		nulls[2] = {' ', ' '};

	values[0] = PointerGetDatum(scope);
	if (PG_ARGISNULL(1))
	{
		values[1] = (Datum) 0;
		nulls[1] = 'n';
	}
	else
	{
		Interval   *retention = PG_GETARG_INTERVAL_P(1);
		Interval   *zero = palloc0(sizeof(Interval));

		if (DatumGetBool(DirectFunctionCall2(interval_le,
											 IntervalPGetDatum(retention),
											 IntervalPGetDatum(zero))))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("retention must be positive"),
					 errdetail("The retention given for scope \"%s\" is %s.",
							   inbox_quote(scope),
							   DatumGetCString(DirectFunctionCall1(interval_out,
																   IntervalPGetDatum(retention)))),
					 errhint("Pass NULL to go back to inbox.retention.")));
		values[1] = IntervalPGetDatum(retention);
	}

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	spi_check(SPI_execute_with_args("INSERT INTO inbox.scopes (scope, retention) VALUES ($1, $2) "
									"ON CONFLICT (scope) DO UPDATE SET retention = EXCLUDED.retention",
									2, types, values, nulls, false, 0),
			  SPI_OK_INSERT, "inbox_set_retention");
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * inbox_drop_scope(scope text) -> bigint: remove a scope that will never be
 * used again: all its entries, its retention settings and its counters.
 * Returns the number of entries removed.
 */
Datum
inbox_drop_scope(PG_FUNCTION_ARGS)
{
	text	   *scope = inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	int64		removed;

	values[0] = PointerGetDatum(scope);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	spi_check(SPI_execute_with_args("DELETE FROM inbox.entries "
									"WHERE scope OPERATOR(pg_catalog.=) $1 COLLATE pg_catalog.\"C\"",
									1, types, values, NULL, false, 0),
			  SPI_OK_DELETE, "inbox_drop_scope");
	removed = (int64) SPI_processed;
	spi_check(SPI_execute_with_args("DELETE FROM inbox.scopes "
									"WHERE scope OPERATOR(pg_catalog.=) $1 COLLATE pg_catalog.\"C\"",
									1, types, values, NULL, false, 0),
			  SPI_OK_DELETE, "inbox_drop_scope");
	SPI_finish();

	inbox_stats_forget(MyDatabaseId, text_to_cstring(scope));
	PG_RETURN_INT64(removed);
}

/*
 * inbox_stats_reset() -> void: zero this database's counters, and recount
 * exactly the entries retained per scope (the purge keeps that number up
 * to date incrementally, which can undercount claims that committed long
 * after they started).
 */
Datum
inbox_stats_reset(PG_FUNCTION_ARGS)
{
	inbox_stats_forget(MyDatabaseId, NULL);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	spi_check(SPI_execute("UPDATE inbox.scopes AS s SET retained = "
						  "(SELECT pg_catalog.count(*) FROM inbox.entries AS e "
						  " WHERE e.scope OPERATOR(pg_catalog.=) s.scope)",
						  false, 0),
			  SPI_OK_UPDATE, "inbox_stats_reset");
	SPI_finish();
	PG_RETURN_VOID();
}
