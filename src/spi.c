/*-------------------------------------------------------------------------
 *
 * spi.c
 *	  Checked SPI connections and executions, plans kept for the life of
 *	  the backend, and the per-leaf plan tables of the hot paths.
 *
 * Every module that runs SQL goes through these functions, so that an
 * unexpected SPI result is reported the same way everywhere, and a hot
 * statement is prepared once per backend and leaf.
 *
 * Kept plans are generic (CURSOR_OPT_GENERIC_PLAN) where nothing in them
 * depends on the values: the plan cache would otherwise plan the first
 * five executions anew, and an estimate that changes with the values
 * (the size of an array, a scope's statistics) could change the plan's
 * shape.  So a hot statement's plan holds under plan_cache_mode =
 * force_generic_plan and stale statistics alike.  The plan cache re-plans
 * a kept plan after DDL on the tables it reads, including DROP and CREATE
 * EXTENSION; they are always executed under the calling function's pinned
 * search_path.
 *
 * src/spi.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "utils/lsyscache.h"

#include "spi.h"

/* Connect to SPI, or raise */
void
inbox_spi_connect(void)
{
	int			rc = SPI_connect();

	if (rc != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed: %s", SPI_result_code_string(rc));
}

/*
 * Raise unless rc, the result of what, is expected; else the rows it
 * processed.
 */
uint64
inbox_spi_check(int rc, int expected, const char *what)
{
	if (rc != expected)
		elog(ERROR, "%s failed: %s", what, SPI_result_code_string(rc));
	return SPI_processed;
}

/* The number of parameter types before the first InvalidOid */
int
inbox_statement_nargs(const Oid *argtypes)
{
	int			n = 0;

	while (n < INBOX_SPI_MAX_ARGS && OidIsValid(argtypes[n]))
		n++;
	return n;
}

/* Prepare sql and keep its plan for the life of the backend */
SPIPlanPtr
inbox_keep_plan(const char *sql, int nargs, const Oid *argtypes, int cursor_options)
{
	SPIPlanPtr	plan = SPI_prepare_cursor(sql, nargs, (Oid *) argtypes, cursor_options);

	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	return plan;
}

/* The generic plan of sql kept in *slot, prepared on first use */
SPIPlanPtr
inbox_plan(SPIPlanPtr *slot, const char *sql, int nargs, const Oid *argtypes)
{
	if (*slot == NULL)
		*slot = inbox_keep_plan(sql, nargs, argtypes, CURSOR_OPT_GENERIC_PLAN);
	return *slot;
}

/* The generic plan of stmt on leaf, kept in slots[leaf], made on first use */
SPIPlanPtr
inbox_leaf_plan(const InboxLeafStatement *stmt, SPIPlanPtr *slots, int leaf)
{
	Assert(leaf >= 0 && leaf < INBOX_LEAVES);
	if (slots[leaf] == NULL)
		slots[leaf] = inbox_keep_plan(psprintf(stmt->sql, leaf),
									  inbox_statement_nargs(stmt->argtypes),
									  stmt->argtypes, CURSOR_OPT_GENERIC_PLAN);
	return slots[leaf];
}

/*
 * Execute a kept plan, read-write, without a row limit; raise unless its
 * result is expected.  what names the statement in that error.
 */
uint64
inbox_execute_plan(SPIPlanPtr plan, const Datum *values, const char *nulls,
				   int expected, const char *what)
{
	return inbox_spi_check(SPI_execute_plan(plan, (Datum *) values, nulls, false, 0),
						   expected, what);
}

/*
 * Execute a kept plan read-only, with the active snapshot the caller
 * pushed rather than a new one; as inbox_execute_plan otherwise.
 */
uint64
inbox_execute_plan_read_only(SPIPlanPtr plan, const Datum *values, const char *nulls,
							 int expected, const char *what)
{
	return inbox_spi_check(SPI_execute_plan(plan, (Datum *) values, nulls, true, 0),
						   expected, what);
}

/*
 * Plan and execute sql once in the caller's SPI connection, with nargs
 * parameters (0: none), read-only or not, returning at most count rows (0:
 * all); for statements off the hot paths.  SPI's result code, which the
 * caller checks against what it expects, in its own words.  A read-only
 * statement runs under the active snapshot, which the caller pushes.
 */
int
inbox_execute_once(const char *sql, int nargs, const Oid *argtypes, const Datum *values,
				   const char *nulls, bool read_only, long count)
{
	return SPI_execute_with_args(sql, nargs, (Oid *) argtypes, (Datum *) values, nulls,
								 read_only, count);
}

/*
 * Plan and execute sql once, read-write, in the caller's SPI connection;
 * for statements off the hot paths.  The rows it processed.
 */
uint64
inbox_execute(const char *sql, int nargs, const Oid *argtypes, const Datum *values,
			  const char *nulls, int expected)
{
	return inbox_spi_check(inbox_execute_once(sql, nargs, argtypes, values, nulls, false, 0),
						   expected, "SPI_execute_with_args");
}

/* inbox_execute in an SPI connection of its own */
uint64
inbox_execute_alone(const char *sql, int nargs, const Oid *argtypes, const Datum *values,
					const char *nulls, int expected)
{
	uint64		processed;

	inbox_spi_connect();
	processed = inbox_execute(sql, nargs, argtypes, values, nulls, expected);
	SPI_finish();
	return processed;
}

/*
 * The OID of table inbox.<relname>, or InvalidOid when it, or schema inbox,
 * does not exist (the extension is not installed).
 */
Oid
inbox_relid(const char *relname)
{
	Oid			nsp = get_namespace_oid("inbox", true);

	return OidIsValid(nsp) ? get_relname_relid(relname, nsp) : InvalidOid;
}
