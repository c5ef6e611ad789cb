/*-------------------------------------------------------------------------
 *
 * depth_count.c
 *	  inbox_depth's counts of a scope's rows, through SQL on the leaf that
 *	  holds the scope: its open messages (a first count, or a call that
 *	  counts rows instead of reading the counters), and its pending
 *	  messages not due.  depth.c says when each runs, and keeps the
 *	  counters in shared memory.
 *
 * src/depth_count.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "depth_internal.h"
#include "entries.h"
#include "spi.h"

static const InboxLeafStatement leaf_statements[DEPTH_LEAF_PLANS] = {
	[LEAF_COUNT] = {
		"depth count",
		"SELECT pg_catalog.count(*) FILTER (WHERE state = 'p'), "
		"pg_catalog.count(*) FILTER (WHERE state = 'p' AND due <= $2), "
		"pg_catalog.count(*) FILTER (WHERE state = 'r') "
		"FROM inbox.entries_p%d WHERE scope = $1 AND state <> 'd' AND state <> 'x'",
		{TEXTOID, TIMESTAMPTZOID}
	},
	[LEAF_NOT_DUE] = {
		"depth not due",
		"SELECT (SELECT pg_catalog.count(*) FROM inbox.entries_p%d "
		"        WHERE scope = $1 AND state <> 'd' AND state <> 'x' AND due > $2 AND state = 'p') "
		"     + (SELECT pg_catalog.count(*) FROM inbox.entries_p%d "
		"        WHERE scope = $1 AND state <> 'd' AND state <> 'x' AND due IS NULL AND state = 'p')",
		{TEXTOID, TIMESTAMPTZOID}
	},
};

static SPIPlanPtr leaf_plans[DEPTH_LEAF_PLANS][INBOX_LEAVES];

/* The plan of kind on leaf; LEAF_NOT_DUE names the leaf twice */
static SPIPlanPtr
leaf_plan(DepthLeafPlan kind, int leaf)
{
	if (kind == LEAF_NOT_DUE && leaf_plans[kind][leaf] == NULL)
		leaf_plans[kind][leaf] =
			inbox_keep_plan(psprintf(leaf_statements[kind].sql, leaf, leaf), 2,
							leaf_statements[kind].argtypes, CURSOR_OPT_GENERIC_PLAN);
	return inbox_leaf_plan(&leaf_statements[kind], leaf_plans[kind], leaf);
}

/*
 * Run kind on the scope's leaf with snapshot (NULL: the latest), and
 * return its first row's int8 columns in out.  SPI must be connected.
 */
void
run_count(DepthLeafPlan kind, text *scope, int leaf, TimestampTz now, Snapshot snapshot,
		  int64 *out, int ncolumns)
{
	Datum		values[2];
	int			i;

	values[0] = PointerGetDatum(scope);
	values[1] = TimestampTzGetDatum(now);
	PushActiveSnapshot(snapshot != NULL ? snapshot : GetLatestSnapshot());
	PG_TRY();
	{
		(void) inbox_execute_plan_read_only(leaf_plan(kind, leaf), values, NULL,
											SPI_OK_SELECT, leaf_statements[kind].name);
	}
	PG_FINALLY();
	{
		PopActiveSnapshot();
	}
	PG_END_TRY();
	for (i = 0; i < ncolumns; i++)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, i + 1, &isnull);

		out[i] = isnull ? 0 : DatumGetInt64(d);
	}
	SPI_freetuptable(SPI_tuptable);
}

/* Count the scope's rows (see depth.c's banner for when) */
void
count_rows(text *scope, int leaf, TimestampTz now, Depth *depth)
{
	int64		c[3];

	run_count(LEAF_COUNT, scope, leaf, now, NULL, c, 3);
	depth->pending = c[0];
	depth->due = c[1];
	depth->processing = c[2];
}
