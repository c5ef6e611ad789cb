/*-------------------------------------------------------------------------
 *
 * purge_steps.c
 *	  The two steps of a purge round (purge.c): which scopes step 1
 *	  observes and how, and step 2's deletion from one leaf.
 *
 * Which scopes step 1 looks at (the SQL of 1.1.0 and later, see
 * observe_changed): only those that can have changed, so that a pass over
 * idle scopes costs a few statements whatever their number.  This rests on
 * what a scope's clock is (sql/inbox.sql, section 7): the scope's
 * observed_until L, its pauses P, its retention R and inbox.idle_threshold
 * I, from which inbox.cutoff computes the cutoff at time T.
 *
 *	- The clock is a function of the scope's entries alone: its pauses are
 *	  the gaps between their received_at, and the gap between L and the
 *	  next entry.  When the purge reads them changes nothing it learns.
 *	- With no entry after L, the cutoff never decreases as T grows, and
 *	  from T = L + I on it no longer moves (the clock has paused): it is
 *	  the scope's final cutoff.  And it is never later than T - R: the
 *	  clock counts at most the time that passed.
 *	- Entries after L that the purge has not read yet can only make the
 *	  clock count more active time, never less: up to L + I the clock runs
 *	  whether or not they exist, and after it they turn paused time into
 *	  active time.  The one exception is a new gap longer than the
 *	  retention (rule 3), which holds the purge; but a purge that had read
 *	  the entries up to just before that gap ended had a cutoff at least
 *	  as late, and would have purged as much then.  So a clock read late
 *	  never purges an entry that one read on time would still keep.
 *
 * So a scope needs looking at only when
 *
 *	- it received entries the purge has not read: the claim that wrote them
 *	  left a hint in shared memory (stats.c), which the purge clears by
 *	  reading the entries;
 *	- time alone may have made an entry expire: its schedule
 *	  (inbox.scope_schedules) holds the earliest time its cutoff can pass
 *	  its oldest entry if nothing new arrives (at least that entry's
 *	  received_at plus R; never, once the final cutoff is behind it), and
 *	  comes at every pass while a pending or processing message is past
 *	  the cutoff, which may complete;
 *	- its retention override changed (inbox_set_retention brings its
 *	  schedule forward);
 *	- the retention or idle threshold in force is not the one its schedule
 *	  was computed with, or it has no schedule yet.
 *
 * Every pass reads the hints and the index of the schedules that have
 * come.  A sweep looks at every scope of a leaf for what nothing else
 * shows (entries written other than by a claim, or with a received_at
 * behind the clock; a dead letter put back; scopes beyond
 * inbox.max_scopes, claims before a restart): the leaf's scopes by a skip
 * scan, with an index probe each for their newest and oldest entries.  A
 * full pass sweeps every leaf, and also reads the scopes without a
 * schedule for the settings in force: every pass without the preload;
 * with it, the first pass after a start or an inbox_stats_reset, and the
 * first after the settings changed.  Otherwise the leaves are swept one at
 * a time, at the first pass PURGE_SWEEP_INTERVAL_S / INBOX_LEAVES seconds
 * after the last sweep: each leaf about every PURGE_SWEEP_INTERVAL_S.
 *
 * Two purgers never fight: each leaf is taken with a try-lock, and each
 * scope's clock row with SKIP LOCKED, so the loser skips rather than
 * waits, and no row is deleted or even examined twice.  The number of
 * locks a purge holds does not grow with the number of scopes: row locks
 * live in the rows, and the leaf locks are one per leaf, in the
 * extension's private lock space (see inbox.h), where no application's
 * advisory lock can stall them.  Every statement runs under
 * inbox.purge_lock_timeout: the purge backs off rather than queue.
 *
 * src/purge_steps.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "distributed.h"
#include "inbox.h"
#include "keys.h"
#include "purge.h"
#include "spi.h"
#include "stats.h"
#include "version.h"

/*
 * About the longest time between two sweeps of a scope with the preload
 * (see the banner): what the purge may take to learn of what neither a
 * hint nor a schedule shows.  A sweep probes the index of every scope of
 * a leaf, so the leaves are swept one at a time: no pass does much more
 * than another.
 */
#define PURGE_SWEEP_INTERVAL_S	300

/*
 * The rows (scope, cutoff) of the last SPI query, as PurgeTargets in cxt,
 * appended to targets: the scopes that may be purged now.
 */
List *
collect_targets(List *targets, MemoryContext cxt)
{
	uint64		i;

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
		target->leaf = InvalidOid;
		targets = lappend(targets, target);
		MemoryContextSwitchTo(oldcxt);
	}
	return targets;
}

/*
 * Step 1 on a distributed inbox.entries (distributed.c).  Citus cannot run
 * inbox.scope_list's recursive skip scan, so the scopes come from one
 * DISTINCT, which each shard answers.  Then inbox.observe runs here, on
 * this node, once per scope: in a query that also read the shards, Citus
 * could run it on a worker, against that worker's own inbox.scopes.
 */
List *
observe_distributed(Datum *settings, MemoryContext cxt)
{
	Oid			types[3] = {TEXTOID, INTERVALOID, INTERVALOID};
	SPITupleTable *scopes;
	uint64		nscopes;
	uint64		i;
	List	   *targets = NIL;

	(void) inbox_spi_check(inbox_execute_once("SELECT DISTINCT e.scope FROM inbox.entries AS e",
											  0, NULL, NULL, NULL, true, 0),
			  SPI_OK_SELECT, "listing the scopes of inbox.entries");
	scopes = SPI_tuptable;
	nscopes = SPI_processed;
	for (i = 0; i < nscopes; i++)
	{
		Datum		values[3];
		bool		isnull;

		values[0] = SPI_getbinval(scopes->vals[i], scopes->tupdesc, 1, &isnull);
		values[1] = settings[0];
		values[2] = settings[1];
		(void) inbox_spi_check(inbox_execute_once("SELECT $1, inbox.observe($1, $2, $3)",
												  3, types, values, NULL, false, 0),
				  SPI_OK_SELECT, "inbox.observe");
		targets = collect_targets(targets, cxt);
		SPI_freetuptable(SPI_tuptable);
	}
	return targets;
}

/*
 * Add each scope of the last SPI query's first column to the list of its
 * leaf, or of leaf if it is not -1
 */
static void
add_scopes(List **by_leaf, int leaf)
{
	uint64		i;

	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull);
		text	   *scope;
		int			k;

		if (isnull)
			continue;
		scope = DatumGetTextPP(d);
		k = leaf >= 0 ? leaf : inbox_scope_leaf(scope);
		by_leaf[k] = lappend(by_leaf[k], text_to_cstring(scope));
	}
	SPI_freetuptable(SPI_tuptable);
}

static int
compare_scopes(const ListCell *a, const ListCell *b)
{
	return strcmp((const char *) lfirst(a), (const char *) lfirst(b));
}

/*
 * Observe the scopes of one leaf (inbox.observe_leaf), each once; note
 * how far each clock has read for the hints, and append the scopes with
 * something to purge now to targets, in cxt.  *wanted and *observed count
 * the scopes asked for and those observed (the others were held by
 * another purger).
 */
static List *
observe_leaf(List *targets, Oid leaf, List *scopes, Datum *settings,
			 MemoryContext cxt, int64 *wanted, int64 *observed)
{
	Oid			types[4] = {REGCLASSOID, TEXTARRAYOID, INTERVALOID, INTERVALOID};
	Datum		values[4];
	Datum	   *elems = palloc(sizeof(Datum) * list_length(scopes));
	const char *prev = NULL;
	int			n = 0;
	uint64		i;
	ListCell   *lc;

	list_sort(scopes, compare_scopes);
	foreach(lc, scopes)
	{
		if (prev == NULL || strcmp(prev, lfirst(lc)) != 0)
			elems[n++] = CStringGetTextDatum(lfirst(lc));
		prev = lfirst(lc);
	}
	values[0] = ObjectIdGetDatum(leaf);
	values[1] = PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[2] = settings[0];
	values[3] = settings[1];
	(void) inbox_execute("SELECT scope, observed_until, cutoff "
						 "FROM inbox.observe_leaf($1, $2, $3, $4)",
						 4, types, values, NULL, SPI_OK_SELECT);
	*wanted += n;
	*observed += SPI_processed;
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[i];
		TupleDesc	tupdesc = SPI_tuptable->tupdesc;
		bool		isnull;
		char	   *scope = TextDatumGetCString(SPI_getbinval(tuple, tupdesc, 1, &isnull));
		Datum		until = SPI_getbinval(tuple, tupdesc, 2, &isnull);
		Datum		cutoff;

		if (!isnull)
			inbox_stats_observed(scope, DatumGetTimestampTz(until));
		cutoff = SPI_getbinval(tuple, tupdesc, 3, &isnull);
		if (!isnull)
		{
			MemoryContext oldcxt = MemoryContextSwitchTo(cxt);
			PurgeTarget *target = palloc(sizeof(PurgeTarget));

			target->scope = pstrdup(scope);
			target->cutoff = DatumGetTimestampTz(cutoff);
			target->leaf = leaf;
			targets = lappend(targets, target);
			MemoryContextSwitchTo(oldcxt);
		}
	}
	SPI_freetuptable(SPI_tuptable);
	return targets;
}

/*
 * Step 1 by the SQL of PURGE_SCHEDULE_SINCE and later: observe only the
 * scopes that can have changed (see the banner), in a number of
 * statements that does not depend on the number of scopes.  Every pass
 * reads the hints and the schedules that have come (an index range).  A
 * pass that sweeps also reads the scopes without a schedule for the
 * settings in force (a full pass, and the first leaf of a round), and
 * sweeps its leaves before it observes anything.  A sweep counts only once
 * every scope it found was observed: one that another purger held may
 * hide what only a sweep finds, and the next pass sweeps again.
 */
List *
observe_changed(Datum *settings, int retention_s, int idle_s, MemoryContext cxt)
{
	Oid			types[2] = {INTERVALOID, INTERVALOID};
	Oid			leaves[INBOX_LEAVES];
	List	   *by_leaf[INBOX_LEAVES];
	List	   *targets = NIL;
	TimestampTz started = GetCurrentTimestamp();
	int			leaf = 0;
	InboxSweep	sweep = inbox_stats_sweep_due(PURGE_SWEEP_INTERVAL_S / INBOX_LEAVES,
											  retention_s, idle_s, &leaf);
	int64		wanted = 0;
	int64		observed = 0;
	ListCell   *lc;
	int			k;

	memset(by_leaf, 0, sizeof(by_leaf));
	for (k = 0; k < INBOX_LEAVES; k++)
	{
		char		name[NAMEDATALEN];

		snprintf(name, sizeof(name), "entries_p%d", k);
		leaves[k] = inbox_relid(name);
		if (!OidIsValid(leaves[k]))
			elog(ERROR, "inbox.%s does not exist", name);
	}

	/* Entries claimed since the purge last read their scope (stats.c) */
	foreach(lc, inbox_stats_unobserved(CurrentMemoryContext))
	{
		k = inbox_scope_leaf(cstring_to_text(lfirst(lc)));
		by_leaf[k] = lappend(by_leaf[k], lfirst(lc));
	}

	(void) inbox_execute("SELECT s FROM inbox.purge_due() AS s",
						 0, NULL, NULL, NULL, SPI_OK_SELECT);
	add_scopes(by_leaf, -1);

	if (sweep == INBOX_SWEEP_ALL || (sweep == INBOX_SWEEP_LEAF && leaf == 0))
	{
		(void) inbox_execute("SELECT s FROM inbox.purge_unscheduled($1, $2) AS s",
							 2, types, settings, NULL, SPI_OK_SELECT);
		add_scopes(by_leaf, -1);
	}
	for (k = 0; k < INBOX_LEAVES; k++)
	{
		Oid			leaftype[1] = {REGCLASSOID};
		Datum		leafvalue[1];

		if (sweep == INBOX_SWEEP_NONE || (sweep == INBOX_SWEEP_LEAF && k != leaf))
			continue;
		leafvalue[0] = ObjectIdGetDatum(leaves[k]);
		(void) inbox_execute("SELECT s FROM inbox.sweep_leaf($1) AS s",
							 1, leaftype, leafvalue, NULL, SPI_OK_SELECT);
		add_scopes(by_leaf, k);
	}

	for (k = 0; k < INBOX_LEAVES; k++)
	{
		if (by_leaf[k] != NIL)
			targets = observe_leaf(targets, leaves[k], by_leaf[k], settings, cxt,
								   &wanted, &observed);
	}

	if (sweep != INBOX_SWEEP_NONE && observed == wanted)
		inbox_stats_swept(started, retention_s, idle_s,
						  sweep == INBOX_SWEEP_ALL ? 0 : (leaf + 1) % INBOX_LEAVES);
	return targets;
}

/* The leaves of inbox.entries, in a stable order, as a List of Oids in cxt */
List *
inbox_purge_leaves(MemoryContext cxt)
{
	List	   *leaves = NIL;
	MemoryContext oldcxt;
	uint64		i;

	(void) inbox_spi_check(inbox_execute_once("SELECT c.oid FROM pg_catalog.pg_inherits AS i "
											  "JOIN pg_catalog.pg_class AS c ON c.oid OPERATOR(pg_catalog.=) i.inhrelid "
											  "WHERE i.inhparent OPERATOR(pg_catalog.=) 'inbox.entries'::pg_catalog.regclass "
											  "ORDER BY c.relname",
											  0, NULL, NULL, NULL, true, 0),
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
 * Step 2, for one leaf, one scope at a time until limit rows are gone: by
 * the SQL of 0.4.0 (inbox.purge_batch), or on a distributed inbox.entries
 * (inbox.purge_scope, a statement on the scope's shard).  sql calls either,
 * with the same arguments.
 */
static int64
purge_leaf_by_scope(Oid leaf, List *targets, int limit, bool *more, const char *sql)
{
	bool		isnull;
	int64		total = 0;
	ListCell   *lc;

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
		(void) inbox_spi_check(inbox_execute_once(sql, 4, types, values, NULL, false, 1),
				  SPI_OK_SELECT, sql);
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
 * Step 2, for one leaf, by the SQL of 1.0.0 and later: one statement,
 * inbox.purge_leaf, for all the scopes, so that a round costs a few
 * statements per leaf whatever the number of scopes.
 */
static int64
purge_leaf_at_once(Oid leaf, List *targets, int limit, bool *more)
{
	int			n = list_length(targets);
	Datum	   *scopes = palloc(sizeof(Datum) * n);
	Datum	   *cutoffs = palloc(sizeof(Datum) * n);
	Oid			types[4] = {REGCLASSOID, TEXTARRAYOID, TIMESTAMPTZARRAYOID, INT4OID};
	Datum		values[4];
	int64		total = 0;
	uint64		i;
	ListCell   *lc;
	int			k = 0;

	foreach(lc, targets)
	{
		PurgeTarget *target = (PurgeTarget *) lfirst(lc);

		if (OidIsValid(target->leaf) && target->leaf != leaf)
			continue;			/* its entries are in another leaf */
		scopes[k] = CStringGetTextDatum(target->scope);
		cutoffs[k] = TimestampTzGetDatum(target->cutoff);
		k++;
	}
	if (k == 0)
		return 0;
	n = k;
	values[0] = ObjectIdGetDatum(leaf);
	values[1] = PointerGetDatum(construct_array(scopes, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[2] = PointerGetDatum(construct_array(cutoffs, n, TIMESTAMPTZOID, sizeof(TimestampTz),
												FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[3] = Int32GetDatum(limit);
	(void) inbox_spi_check(inbox_execute_once("SELECT scope, purged FROM inbox.purge_leaf($1, $2, $3, $4)",
											  4, types, values, NULL, false, 0),
			  SPI_OK_SELECT, "inbox.purge_leaf");
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		char	   *scope = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		int64		rows = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
													   SPI_tuptable->tupdesc, 2, &isnull));

		inbox_stats_purged(scope, rows);
		total += rows;
	}
	*more = (total >= limit);
	return total;
}

/*
 * Step 2, for one leaf: delete at most limit expired entries, oldest first
 * over the scopes.  Returns the rows deleted; *more says whether the limit
 * was reached, so that more may remain.  A leaf that another purger holds
 * is skipped (0 rows, *more false): that purger is doing the work.
 */
int64
inbox_purge_leaf(Oid leaf, List *targets, int limit, bool *more)
{
	LOCKTAG		tag;
	char	   *version;

	*more = false;
	if (targets == NIL || limit <= 0)
		return 0;

	/* Held to the end of the transaction, like pg_try_advisory_xact_lock */
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, leaf, 0, INBOX_LOCKSPACE_PURGE);
	if (LockAcquire(&tag, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return 0;

	/* The SQL installed says which function does the work (version.c) */
	version = inbox_sql_version();
	if (version != NULL && strcmp(version, INBOX_PREVIOUS_SQL_VERSION) == 0)
		return purge_leaf_by_scope(leaf, targets, limit, more,
								   "SELECT inbox.purge_batch($1, $2, $3, $4)");
	if (inbox_entries_distributed())
		return purge_leaf_by_scope(leaf, targets, limit, more,
								   "SELECT inbox.purge_scope($1, $2, $3, $4)");
	return purge_leaf_at_once(leaf, targets, limit, more);
}
