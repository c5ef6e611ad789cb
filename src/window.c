/*-------------------------------------------------------------------------
 *
 * window.c
 *	  Content windows: a scope may say that the same content claimed under
 *	  two message ids within a span of time is one message sent twice (a
 *	  sender that got no acknowledgement and sent again under a new id).
 *	  The second claim then warns (it proceeds, and is counted and listed)
 *	  or is rejected with IB007.  inbox_set_content_window sets a scope's
 *	  window in inbox.scopes; scopes have none by default.
 *
 * The arbiter is the unique index of inbox.content_window on (scope,
 * payload_hash), as the entries' primary key is for message ids, never a
 * read followed by a write.  A claim that wrote its entry (a new message
 * id) then writes its content's row with INSERT ... ON CONFLICT DO UPDATE,
 * so the executor does what it does for the entries:
 *
 *	- no row of that content: the claim is its first, and its row commits
 *	  or aborts with the caller's transaction;
 *	- a row whose inserter is in progress: the executor waits for that
 *	  transaction.  If it aborted, the row is gone and this claim is the
 *	  first; if it committed, this claim is a second;
 *	- a committed row: if it is older than the window (or of the same
 *	  message id), the claim takes it over as the first; otherwise the
 *	  update keeps it as it is and returns it, naming the first id.
 *
 * The update locks the row, so of two claims that would both commit only
 * one can be the first.
 *
 * Most claims are the first of their content, and need no update: where
 * direct.c may write (inbox_direct_available), the content's row is first
 * inserted as ON CONFLICT DO NOTHING would, with the executor's routines
 * and the same arbitration (inbox_direct_insert), which spares a
 * statement's start-up.  Only when a row of the content exists does the
 * claim run the statement above, which decides as described.  That write
 * evaluates no constraint, so it is made only while inbox.content_window
 * is as sql/inbox.sql makes it (direct_layout_content_ok); any other
 * table takes the statement, which enforces what the table holds.
 *
 * The content check follows the entry's arbitration, so that a
 * redelivery of a message id is always the ordinary duplicate, never a
 * content duplicate.  Under REPEATABLE READ and SERIALIZABLE, a first
 * claim committed after the caller's snapshot makes the executor raise
 * 40001, as for an entry.  Rejecting raises, so the caller's
 * transaction (or savepoint) takes back the entry just written: nothing of
 * a rejected claim stays.
 *
 * Scopes without a window pay nothing on the claim path: each backend
 * keeps the windows of inbox.scopes in a small hash, loaded on first use
 * and dropped on a relcache invalidation of inbox.scopes, which a
 * statement trigger on the table sends when a window may have changed.  A
 * claim of a scope without a window looks in that hash, in memory; only a
 * claim of a scope with one runs a statement more.
 *
 * The retention purge (purge.c, the worker and inbox_purge()) removes the
 * content rows whose window ended, and the listed content duplicates
 * older than the scope's retention when they were listed: both by an
 * index on their expires_at, so a pass reads only what expired.
 *
 * src/window.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "conflicts.h"
#include "direct.h"
#include "direct_layout.h"
#include "inbox.h"
#include "keys.h"
#include "spi.h"
#include "stats.h"
#include "window.h"

PG_FUNCTION_INFO_V1(inbox_content_window_changed);

/* One scope that has a window */
typedef struct ScopeWindow
{
	char		scope[INBOX_MAX_SCOPE_BYTES + 1];	/* hash key */
	Interval	within;			/* no months: days folded into time */
	bool		reject;			/* action 'reject'; else 'warn' */
} ScopeWindow;

/*
 * The backend's copy of the windows in inbox.scopes; valid only if
 * windows_valid.  NULL while valid: no scope has a window (or the SQL
 * installed has no content windows).
 */
static HTAB *windows = NULL;
static MemoryContext windows_cxt = NULL;
static bool windows_valid = false;
static Oid	windows_relid = InvalidOid;
static bool windows_callback_registered = false;

/* inbox.content_window, found on first use, forgotten at its invalidation */
static Oid	content_relid = InvalidOid;

/* A claim's content row: the first id of the content within the window */
static const char *const window_claim_sql =
"INSERT INTO inbox.content_window AS w (scope, payload_hash, message_id, seen_at, expires_at) "
"VALUES ($1, $2, $3, pg_catalog.now(), pg_catalog.now() OPERATOR(pg_catalog.+) $4) "
"ON CONFLICT (scope, payload_hash) DO UPDATE SET "
"message_id = CASE WHEN w.expires_at OPERATOR(pg_catalog.>) EXCLUDED.seen_at "
"THEN w.message_id ELSE EXCLUDED.message_id END, "
"seen_at = CASE WHEN w.expires_at OPERATOR(pg_catalog.>) EXCLUDED.seen_at "
"THEN w.seen_at ELSE EXCLUDED.seen_at END, "
"expires_at = CASE WHEN w.expires_at OPERATOR(pg_catalog.>) EXCLUDED.seen_at "
"THEN w.expires_at ELSE EXCLUDED.expires_at END "
"RETURNING w.message_id, w.seen_at";

/*
 * A content duplicate under 'warn', for the view inbox_content_duplicates,
 * kept for the scope's retention
 */
static const char *const window_listed_sql =
"INSERT INTO inbox.content_duplicates (scope, message_id, first_message_id, seen_at, expires_at) "
"SELECT $1, $2, $3, pg_catalog.now(), pg_catalog.now() OPERATOR(pg_catalog.+) "
"COALESCE((SELECT s.retention FROM inbox.scopes AS s WHERE s.scope OPERATOR(pg_catalog.=) $1), "
"(SELECT cfg.retention FROM inbox.settings() AS cfg)) "
"ON CONFLICT (scope, message_id) DO NOTHING";

/*
 * The purge: the content rows and listed duplicates that expired, by the
 * index on expires_at, at most $1 of each a pass; rows another purger or
 * a claim holds are left for the next.
 */
static const char *const window_purge_sql =
"DELETE FROM inbox.content_window AS w "
"WHERE w.ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
"SELECT x.ctid FROM inbox.content_window AS x "
"WHERE x.expires_at OPERATOR(pg_catalog.<=) pg_catalog.now() "
"ORDER BY x.expires_at LIMIT $1 FOR UPDATE OF x SKIP LOCKED))";

static const char *const listed_purge_sql =
"DELETE FROM inbox.content_duplicates AS d "
"WHERE d.ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
"SELECT x.ctid FROM inbox.content_duplicates AS x "
"WHERE x.expires_at OPERATOR(pg_catalog.<=) pg_catalog.now() "
"ORDER BY x.expires_at LIMIT $1 FOR UPDATE OF x SKIP LOCKED))";

static SPIPlanPtr window_claim_plan = NULL;
static SPIPlanPtr window_listed_plan = NULL;
static SPIPlanPtr window_purge_plan = NULL;
static SPIPlanPtr listed_purge_plan = NULL;

static void
windows_invalidate(Datum arg, Oid relid)
{
	/*
	 * Only mark the cache stale: a callback may run in the middle of a
	 * lookup, so the memory is freed by the next load.  InvalidOid means
	 * "every relation" (a cache reset).
	 */
	if (relid == InvalidOid || relid == windows_relid)
		windows_valid = false;
	if (relid == InvalidOid || relid == content_relid)
		content_relid = InvalidOid;
}

/*
 * Load the windows of inbox.scopes.  The caller holds an SPI connection and
 * runs as the extension's owner.  As for the scope grants (access.c),
 * locking the table first processes the invalidations already queued, and
 * the rows are read with the latest snapshot: a settings change is read as
 * it is now, not as the caller's snapshot saw it.
 */
static void
windows_load(void)
{
	uint64		i;

	if (!windows_callback_registered)
	{
		CacheRegisterRelcacheCallback(windows_invalidate, (Datum) 0);
		windows_callback_registered = true;
	}
	if (windows_cxt == NULL)
		windows_cxt = AllocSetContextCreate(TopMemoryContext, "inbox content windows",
											ALLOCSET_SMALL_SIZES);
	MemoryContextReset(windows_cxt);
	windows = NULL;

	/* Valid from here on, unless an invalidation arrives while loading */
	windows_valid = true;
	windows_relid = inbox_relid("scopes");
	if (!OidIsValid(windows_relid) || !OidIsValid(inbox_relid("content_window")))
		return;					/* SQL older than content windows */
	LockRelationOid(windows_relid, AccessShareLock);

	PushActiveSnapshot(GetLatestSnapshot());
	(void) inbox_spi_check(inbox_execute_once("SELECT s.scope, s.content_window, s.content_action "
											  "FROM inbox.scopes AS s "
											  "WHERE s.content_window IS NOT NULL",
											  0, NULL, NULL, NULL, true, 0),
						   SPI_OK_SELECT, "reading the content windows");
	PopActiveSnapshot();

	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		char	   *scope = TextDatumGetCString(SPI_getbinval(tup, desc, 1, &isnull));
		Datum		within = SPI_getbinval(tup, desc, 2, &isnull);
		Datum		action = SPI_getbinval(tup, desc, 3, &isnull);
		ScopeWindow *entry;

		/* The table's CHECKs keep scopes within the limit, actions known */
		if (isnull || strlen(scope) > INBOX_MAX_SCOPE_BYTES)
			continue;
		if (windows == NULL)
		{
			HASHCTL		ctl;

			ctl.keysize = INBOX_MAX_SCOPE_BYTES + 1;
			ctl.entrysize = sizeof(ScopeWindow);
			ctl.hcxt = windows_cxt;
			windows = hash_create("inbox content windows", 16, &ctl,
								  HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
		}
		entry = hash_search(windows, scope, HASH_ENTER, NULL);
		entry->within = *DatumGetIntervalP(within);
		entry->reject = strcmp(TextDatumGetCString(action), "reject") == 0;
	}
}

/* The scope's window in the cache, or NULL; the cache must be valid */
static ScopeWindow *
window_lookup(const text *scope)
{
	char		key[INBOX_MAX_SCOPE_BYTES + 1];
	int			len = VARSIZE_ANY_EXHDR(scope);

	if (windows == NULL || len > INBOX_MAX_SCOPE_BYTES)
		return NULL;
	memcpy(key, VARDATA_ANY(scope), len);
	key[len] = '\0';
	return hash_search(windows, key, HASH_FIND, NULL);
}

/*
 * Does the cache already know that the scope has no window?  For the
 * direct claim (claim.c), which holds no SPI connection to load it with:
 * false sends the claim to the implementation, which loads the cache and
 * applies the window.
 */
bool
inbox_window_known_off(const text *scope)
{
	return windows_valid && window_lookup(scope) == NULL;
}

/*
 * Does the cache already know that the scope has a window?  For the direct
 * claim, which then writes the entry itself and applies the window with
 * an SPI connection of its own.
 */
bool
inbox_window_known_on(const text *scope)
{
	return windows_valid && window_lookup(scope) != NULL;
}

/* Does the scope have a window?  The caller holds an SPI connection. */
bool
inbox_window_on(const text *scope)
{
	if (!windows_valid)
	{
		PG_TRY();
		{
			windows_load();
		}
		PG_CATCH();
		{
			/* A half-loaded cache must not be trusted by the next call */
			windows_valid = false;
			PG_RE_THROW();
		}
		PG_END_TRY();
	}
	return window_lookup(scope) != NULL;
}

/*
 * Insert the content's row of a claim as INSERT ... ON CONFLICT DO NOTHING
 * would (see above): true when it was written, the claim being the first
 * of its content; false, having written nothing, when a row of the
 * content exists or the write must take the statement.
 */
static bool
content_first_direct(const text *scope, const text *message_id, const bytea *payload_hash,
					 const Interval *within)
{
	Oid			relid;
	Relation	rel;
	EState	   *estate;
	ResultRelInfo *rri;
	TupleTableSlot *slot;
	ItemPointerData conflict;
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	MemoryContext caller_cxt;
	bool		first;

	/* A bounded wait for an uncommitted first claim is the statement's */
	if (!inbox_direct_available() || inbox_claim_bounded())
		return false;
	if (!OidIsValid(content_relid))
		content_relid = inbox_relid("content_window");
	relid = content_relid;
	if (!OidIsValid(relid))
		return false;

	/* The lock may process an invalidation that drops the table's OID */
	LockRelationOid(relid, RowExclusiveLock);
	if (relid != content_relid)
		return false;
	rel = table_open(relid, NoLock);
	if (!direct_layout_content_ok(rel) ||
		pg_class_aclcheck(relid, GetUserId(), ACL_INSERT) != ACLCHECK_OK)
	{
		table_close(rel, NoLock);
		return false;
	}

	estate = CreateExecutorState();
	caller_cxt = MemoryContextSwitchTo(estate->es_query_cxt);
	estate->es_output_cid = GetCurrentCommandId(true);
	rri = makeNode(ResultRelInfo);
	InitResultRelInfo(rri, rel, 0, NULL, 0);
	ExecOpenIndices(rri, true);
	slot = table_slot_create(rel, NULL);
	ExecClearTuple(slot);
	slot->tts_values[0] = PointerGetDatum(scope);
	slot->tts_values[1] = PointerGetDatum(payload_hash);
	slot->tts_values[2] = PointerGetDatum(message_id);
	slot->tts_values[3] = TimestampTzGetDatum(now);
	slot->tts_values[4] = DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(now),
											  IntervalPGetDatum(within));
	memset(slot->tts_isnull, false, CONTENT_WINDOW_NATTS * sizeof(bool));
	ExecStoreVirtualTuple(slot);

	first = inbox_direct_insert(estate, rri, slot, list_make1_oid(inbox_primary_key(rel)), true,
								&conflict);

	ExecDropSingleTupleTableSlot(slot);
	ExecCloseIndices(rri);
	MemoryContextSwitchTo(caller_cxt);
	FreeExecutorState(estate);
	table_close(rel, NoLock);
	return first;
}

/*
 * For the direct claim (claim.c), which holds no SPI connection: a claim of
 * scope wrote the entry of a new message id with payload_hash; true if
 * the scope's window, as the cache knows it, took the content's row as
 * the first of its content.  False, having done nothing, when that takes
 * a statement: then inbox_window_claimed(..., true) with a connection.
 */
bool
inbox_window_first(const text *scope, const text *message_id, const bytea *payload_hash)
{
	ScopeWindow *window;
	Interval	within;

	if (payload_hash == NULL || !windows_valid || (window = window_lookup(scope)) == NULL)
		return false;
	within = window->within;
	return content_first_direct(scope, message_id, payload_hash, &within);
}

/*
 * A claim (or receive) of scope wrote the entry of a new message id with
 * payload_hash: apply the scope's window, if it has one.  where is a
 * sentence that an error adds about the claim (which id of a batch), or
 * NULL; direct_tried, that inbox_window_first() was called and returned
 * false.  The caller holds an SPI connection, as the extension's owner.
 */
void
inbox_window_claimed(const text *scope, const text *message_id,
					 const bytea *payload_hash, const char *where, bool direct_tried)
{
	ScopeWindow *window;
	Oid			types[4] = {TEXTOID, BYTEAOID, TEXTOID, INTERVALOID};
	Datum		values[4];
	Interval	within;
	bool		reject;
	HeapTuple	tuple;
	TupleDesc	tupdesc;
	bool		isnull;
	text	   *first;
	TimestampTz first_seen;
	int			rc;

	if (payload_hash == NULL || !inbox_window_on(scope))
		return;
	window = window_lookup(scope);
	/* Copied: running a statement may process an invalidation */
	within = window->within;
	reject = window->reject;
	if (!direct_tried && content_first_direct(scope, message_id, payload_hash, &within))
		return;

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(payload_hash);
	values[2] = PointerGetDatum(message_id);
	values[3] = IntervalPGetDatum(&within);
	rc = inbox_execute_bounded(inbox_plan(&window_claim_plan, window_claim_sql, 4, types),
							   values, NULL, scope, message_id, "message");
	if (inbox_spi_check(rc, SPI_OK_INSERT_RETURNING, "the content check of a claim") != 1)
		elog(ERROR, "the content check of a claim returned no row");

	tuple = SPI_tuptable->vals[0];
	tupdesc = SPI_tuptable->tupdesc;
	first = DatumGetTextPP(SPI_getbinval(tuple, tupdesc, 1, &isnull));
	first_seen = DatumGetTimestampTz(SPI_getbinval(tuple, tupdesc, 2, &isnull));
	if (VARSIZE_ANY_EXHDR(first) == VARSIZE_ANY_EXHDR(message_id) &&
		memcmp(VARDATA_ANY(first), VARDATA_ANY(message_id), VARSIZE_ANY_EXHDR(first)) == 0)
		return;					/* the first of its content in the window */

	inbox_stats_count(scope, INBOX_COUNT_CONTENT_DUPLICATE);
	if (reject)
		ereport(ERROR,
				(errcode(ERRCODE_INBOX_CONTENT_DUPLICATE),
				 errmsg("message \"%s\" in scope \"%s\" repeats the content of message \"%s\"",
						inbox_quote(message_id), inbox_quote(scope), inbox_quote(first)),
				 errdetail("Message \"%s\" with payload hash %s was first seen at %s, within the scope's content window of %s.%s%s",
						   inbox_quote(first), inbox_hex(payload_hash),
						   timestamptz_to_str(first_seen),
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(&within))),
						   where ? " " : "", where ? where : ""),
				 errhint("The sender sent this content again under a new id. Acknowledge the delivery "
						 "without applying its effect: nothing of this claim was recorded.")));

	{
		Oid			listed_types[3] = {TEXTOID, TEXTOID, TEXTOID};
		Datum		listed[3];

		listed[0] = PointerGetDatum(scope);
		listed[1] = PointerGetDatum(message_id);
		listed[2] = PointerGetDatum(first);
		(void) inbox_execute_plan(inbox_plan(&window_listed_plan, window_listed_sql, 3, listed_types),
								  listed, NULL, SPI_OK_INSERT, "the listing of a content duplicate");
	}
}

/*
 * The purge's part for content windows (purge.c): at most limit content
 * rows and limit listed duplicates, of those that expired.  The caller
 * holds an SPI connection and a snapshot.
 */
void
inbox_window_purge(int limit)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1];

	if (!OidIsValid(inbox_relid("content_window")))
		return;					/* SQL older than content windows */
	values[0] = Int32GetDatum(limit);
	(void) inbox_execute_plan(inbox_plan(&window_purge_plan, window_purge_sql, 1, types),
							  values, NULL, SPI_OK_DELETE, "the purge of content windows");
	(void) inbox_execute_plan(inbox_plan(&listed_purge_plan, listed_purge_sql, 1, types),
							  values, NULL, SPI_OK_DELETE, "the purge of content duplicates");
}

/*
 * Statement trigger on inbox.scopes: a window may have changed, so every
 * backend's cache of them must be dropped.  The relcache invalidation is
 * transactional: other backends receive it when this transaction commits,
 * this one at the end of the current command.
 */
Datum
inbox_content_window_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("inbox.content_window_changed() must be called as a trigger")));
	CacheInvalidateRelcacheByRelid(RelationGetRelid(trigdata->tg_relation));
	return PointerGetDatum(NULL);
}
