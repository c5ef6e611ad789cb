/*-------------------------------------------------------------------------
 *
 * direct.c
 *	  A claim's entry written into its leaf without the planner: the
 *	  speculative insertion of INSERT ... ON CONFLICT DO NOTHING, done with
 *	  the executor's own routines; and a completion's update likewise.
 *
 * A claim is one row.  Through SPI it costs a plan-cache check, an
 * executor start and end, and, at every statement, the rebuilding of the
 * table's CHECK expressions from their text (stringToNode, then
 * expression_planner), which PostgreSQL does not cache across statements:
 * work that does not depend on the row, and that a statement of one row
 * pays in full.  The claim writes the same row here with what the executor
 * itself calls for INSERT ... ON CONFLICT DO NOTHING (nodeModifyTable.c's
 * ExecInsert): ExecCheckIndexConstraints, table_tuple_insert_speculative,
 * ExecInsertIndexTuples and table_tuple_complete_speculative, under the
 * same speculative-insertion lock.  So the arbitration is the one
 * PostgreSQL performs for the SQL statement, in the same order, by the
 * same unique index, including the wait for an uncommitted conflicting
 * claim, which inbox.claim_timeout bounds here as it bounds the statement.
 *
 * One step is left out where it is only an optimization: the probe of the
 * unique index before the insertion, which spares a row that turns out to
 * be a duplicate its heap insertion and backing out.  The insertion into
 * the unique index detects every conflict itself (that is what makes the
 * speculative insertion safe under concurrency), and a conflict it
 * detects backs the row out and starts again with the probe, which waits
 * for an uncommitted conflicting row.  A batch skips the probe once it has
 * written a row, until its first conflict: by then the transaction has an
 * id and its commit is flushed anyway, so a duplicate costs only a dead
 * row, and the ids of a batch that follow a new one are mostly new.  A
 * batch that begins with duplicates, and a single claim, probe first, and
 * so write nothing when the key is taken.
 *
 * What the SQL statement would also do, and why it is not needed here:
 *
 *	- the CHECK constraints: they repeat the key checks that keys.c made
 *	  on this call's arguments (lengths in the server encoding and in
 *	  UTF-8), and the bucket, which this call computed itself.  They stay
 *	  on the table for rows that arrive by any other path, a restore's
 *	  COPY above all;
 *	- the NOT NULL constraints: a claim sets every column that has one,
 *	  and leaves NULL only columns that have none;
 *	- the partition constraint: the bucket's high bits name the leaf;
 *	- triggers, rules, row-level security, type modifiers, and defaults
 *	  other than those of received_at and state, which a claim writes
 *	  itself: the table has none of them.
 *
 * Each of these holds only while inbox.entries and the leaf are exactly as
 * sql/inbox.sql makes them, down to each CHECK's expression and each NOT
 * NULL.  direct_layout.c checks that, once per relation until its next
 * invalidation, and anything else sends the claim through SPI instead,
 * which enforces whatever the table holds.
 *
 * inbox_complete marks a message done without the planner too
 * (inbox_direct_complete, in direct_complete.c), for the same reason: its UPDATE through SPI would pay the
 * executor's start and the CHECK rebuild for one row.
 *
 * Where Citus is installed, every claim goes through SPI: there a leaf may
 * be a distributed table whose rows live in shards, which only Citus's
 * executor reaches (docs/scale-out.md).  inbox.direct_insert = off sends
 * every claim through SPI, as a way out and so that the tests run both
 * paths.
 *
 * src/direct.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/execnodes.h"
#include "optimizer/optimizer.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "compat.h"
#include "direct.h"
#include "direct_internal.h"
#include "direct_layout.h"
#include "distributed.h"
#include "entries.h"
#include "inbox.h"
#include "spi.h"

static bool direct_insert = true;

/*
 * The leaves' OIDs, found on first use and forgotten at any invalidation
 * of one of them (DROP EXTENSION drops them) or of the whole cache.
 */
static Oid	leaf_relids[INBOX_LEAVES];
static Oid	entries_relid = InvalidOid;
static bool callback_registered = false;

/*
 * The partial indexes of the deferred mode (entries_open, entries_ranked,
 * entries_receipt, entries_dead) never hold a claim's entry: each
 * predicate reads only the state and the columns after it, which a claim
 * leaves NULL (entries.h), and is false for a done one.  The SQL INSERT
 * opens and locks them,
 * prepares their predicates and evaluates them, for nothing; a claim
 * written here leaves them out, which is what ExecInsertIndexTuples would
 * conclude.  The verdict is proven once per index (index_holds_claims) and
 * forgotten at the next invalidation.
 */
#define MAX_KNOWN_INDEXES		64

static struct
{
	Oid			indexid;
	bool		holds_claims;
}			known_indexes[MAX_KNOWN_INDEXES];
static int	nknown_indexes = 0;

void
direct_init(void)
{
	DefineCustomBoolVariable("inbox.direct_insert",
							 "Whether a claim writes its entry, and a completion its update, without the planner.",
							 "Off sends every claim's INSERT and every completion's UPDATE through SPI "
							 "and the executor, with the same arbitration; it is slower.  Where Citus "
							 "is installed, they always go through SPI.",
							 &direct_insert,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);
}

static void
forget_leaves(Datum arg, Oid relid)
{
	int			i;

	for (i = 0; i < INBOX_LEAVES; i++)
		if (relid == InvalidOid || relid == leaf_relids[i])
			leaf_relids[i] = InvalidOid;
	if (relid == InvalidOid || relid == entries_relid)
		entries_relid = InvalidOid;
	for (i = 0; i < nknown_indexes; i++)
		if (relid == InvalidOid || relid == known_indexes[i].indexid)
		{
			nknown_indexes = 0;
			break;
		}
}

static Oid
leaf_relid(int leaf)
{
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(forget_leaves, (Datum) 0);
		callback_registered = true;
	}
	if (!OidIsValid(leaf_relids[leaf]))
	{
		char		name[NAMEDATALEN];

		snprintf(name, sizeof(name), "entries_p%d", leaf);
		leaf_relids[leaf] = inbox_relid(name);
	}
	if (!OidIsValid(entries_relid))
		entries_relid = inbox_relid("entries");
	return leaf_relids[leaf];
}

/*
 * Whether attrs (of pull_varattnos) name only the state and the columns
 * after it, and the state among them.
 */
static bool
claim_null_columns_only(Bitmapset *attrs)
{
	int			attr = -1;

	if (!bms_is_member(Anum_entries_state - FirstLowInvalidHeapAttributeNumber, attrs))
		return false;
	while ((attr = bms_next_member(attrs, attr)) >= 0)
	{
		AttrNumber	attno = attr + FirstLowInvalidHeapAttributeNumber;

		if (attno < Anum_entries_state || attno > Natts_entries)
			return false;
	}
	return true;
}

/* The proven verdict on indexid: its slot in known_indexes, or -1 */
static int
known_index(Oid indexid)
{
	int			i;

	for (i = 0; i < nknown_indexes; i++)
		if (known_indexes[i].indexid == indexid)
			return i;
	return -1;
}

/*
 * Whether index may hold a claim's entry: false only for a partial index
 * whose predicate reads nothing but the state and the columns after it,
 * and is false for a claim's entry (done, the columns after the state
 * NULL), which is then proven by evaluating it on one.
 */
static bool
index_holds_claims(Relation index, Relation leaf)
{
	Oid			indexid = RelationGetRelid(index);
	List	   *predicate;
	Bitmapset  *attrs = NULL;
	bool		holds = true;
	int			known = known_index(indexid);

	if (known >= 0)
		return known_indexes[known].holds_claims;

	predicate = RelationGetIndexPredicate(index);
	if (predicate != NIL)
		pull_varattnos((Node *) predicate, 1, &attrs);
	if (predicate != NIL && claim_null_columns_only(attrs))
	{
		EState	   *estate = CreateExecutorState();
		MemoryContext old = MemoryContextSwitchTo(estate->es_query_cxt);
		TupleTableSlot *slot = table_slot_create(leaf, NULL);
		ExprContext *econtext = GetPerTupleExprContext(estate);

		ExecClearTuple(slot);
		memset(slot->tts_isnull, true, slot->tts_tupleDescriptor->natts * sizeof(bool));
		slot->tts_values[Anum_entries_state - 1] = CharGetDatum(INBOX_STATE_DONE);
		slot->tts_isnull[Anum_entries_state - 1] = false;
		ExecStoreVirtualTuple(slot);
		econtext->ecxt_scantuple = slot;
		holds = ExecQual(ExecPrepareQual(predicate, estate), econtext);
		ExecDropSingleTupleTableSlot(slot);
		MemoryContextSwitchTo(old);
		FreeExecutorState(estate);
	}
	if (nknown_indexes < MAX_KNOWN_INDEXES)
	{
		known_indexes[nknown_indexes].indexid = indexid;
		known_indexes[nknown_indexes].holds_claims = holds;
		nknown_indexes++;
	}
	return holds;
}

/*
 * ExecOpenIndices for a claim's entry, without the indexes that cannot
 * hold it (index_holds_claims).  The others are opened, locked and
 * described as the executor does for INSERT ... ON CONFLICT.
 */
static void
open_claim_indexes(ResultRelInfo *rri)
{
	Relation	rel = rri->ri_RelationDesc;
	List	   *indexoids = RelationGetIndexList(rel);
	int			n = 0;
	ListCell   *lc;

	rri->ri_IndexRelationDescs = palloc(list_length(indexoids) * sizeof(Relation));
	rri->ri_IndexRelationInfo = palloc(list_length(indexoids) * sizeof(IndexInfo *));
	foreach(lc, indexoids)
	{
		Oid			indexid = lfirst_oid(lc);
		int			known = known_index(indexid);
		Relation	index;
		IndexInfo  *ii;

		/* A known verdict spares opening the index at all */
		if (known >= 0 && !known_indexes[known].holds_claims)
			continue;
		index = index_open(indexid, RowExclusiveLock);
		if (!index_holds_claims(index, rel))
		{
			index_close(index, RowExclusiveLock);
			continue;
		}
		ii = BuildIndexInfo(index);
		if (ii->ii_Unique && !index->rd_index->indisexclusion)
			BuildSpeculativeIndexInfo(index, ii);
		rri->ri_IndexRelationDescs[n] = index;
		rri->ri_IndexRelationInfo[n] = ii;
		n++;
	}
	rri->ri_NumIndices = n;
	list_free(indexoids);
}

/*
 * Whether claims may take this module's path: not where Citus is
 * installed (see above), nor where a module checks or audits the
 * executor's table accesses (ExecutorCheckPerms_hook: sepgsql, pgaudit),
 * which would not see these.
 */
bool
inbox_direct_available(void)
{
	return direct_insert && ExecutorCheckPerms_hook == NULL && !inbox_citus_installed();
}

/*
 * Under REPEATABLE READ and SERIALIZABLE, ON CONFLICT DO NOTHING must not
 * treat as a duplicate an entry that this transaction's snapshot cannot
 * see: it raises a serialization failure, as nodeModifyTable.c's
 * ExecCheckTupleVisible does, unless this transaction wrote the entry
 * itself.
 */
static void
check_conflict_visible(EState *estate, Relation rel, ItemPointer tid)
{
	TupleTableSlot *slot;
	Datum		xmin;
	bool		isnull;

	if (!IsolationUsesXactSnapshot())
		return;
	slot = table_slot_create(rel, NULL);
	if (!table_tuple_fetch_row_version(rel, tid, SnapshotAny, slot))
		elog(ERROR, "failed to fetch conflicting tuple for ON CONFLICT");
	if (!table_tuple_satisfies_snapshot(rel, slot, estate->es_snapshot))
	{
		xmin = slot_getsysattr(slot, MinTransactionIdAttributeNumber, &isnull);
		if (!TransactionIdIsCurrentTransactionId(DatumGetTransactionId(xmin)))
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to concurrent update")));
	}
	ExecDropSingleTupleTableSlot(slot);
}

/*
 * Start writing entries (claims' entries, one or a batch, or a
 * completion) as one statement would: NULL when they must take SPI
 * (Citus, inbox.direct_insert = off, no inbox.entries, or one that is not
 * as sql/inbox.sql makes it).  command is the statement's, INSERT or
 * UPDATE, for its errors.  End with inbox_direct_end().
 */
InboxDirectWriter *
inbox_direct_begin(const char *command)
{
	InboxDirectWriter *w;
	EState	   *estate;
	MemoryContext caller_cxt;

	Oid			entries;

	if (!inbox_direct_available())
		return NULL;

	/* As the executor refuses an INSERT, duplicate or not, before it runs */
	PreventCommandIfReadOnly(command);
	PreventCommandIfParallelMode(command);

	/*
	 * A lock on inbox.entries, parent before leaf as DDL takes them: the
	 * guard of DROP EXTENSION (guard.c) locks inbox.entries before it looks
	 * for entries, and so waits for this claim's transaction to end.  The
	 * lock may process an invalidation that drops the OID found (the
	 * extension dropped and created again): then look it up again.
	 */
	for (;;)
	{
		leaf_relid(0);			/* finds inbox.entries too */
		entries = entries_relid;
		if (!OidIsValid(entries))
			return NULL;
		LockRelationOid(entries, AccessShareLock);
		if (entries == entries_relid)
			break;
		UnlockRelationOid(entries, AccessShareLock);
	}

	/*
	 * A statement through inbox.entries (a batch's) applies its triggers,
	 * row-level security and defaults: unless they are sql/inbox.sql's,
	 * the whole statement takes SPI.
	 */
	if (!direct_layout_parent_ok(entries))
		return NULL;

	/*
	 * As SPI would before a statement: the entries written earlier in this
	 * command become visible to it, and it gets a command id of its own.
	 */
	CommandCounterIncrement();
	estate = CreateExecutorState();
	caller_cxt = MemoryContextSwitchTo(estate->es_query_cxt);
	w = palloc0(sizeof(InboxDirectWriter));
	w->estate = estate;
	w->entries = entries;
	estate->es_output_cid = GetCurrentCommandId(true);

	/*
	 * Only check_conflict_visible() reads the snapshot, and only under
	 * REPEATABLE READ or SERIALIZABLE: there it is the transaction's, with
	 * this command's id, as SPI would make it active for the statement.
	 */
	w->pushed = IsolationUsesXactSnapshot() || !ActiveSnapshotSet();
	if (w->pushed)
	{
		PushActiveSnapshot(GetTransactionSnapshot());
		UpdateActiveSnapshotCommandId();
	}
	estate->es_snapshot = GetActiveSnapshot();
	MemoryContextSwitchTo(caller_cxt);
	return w;
}

/* Leaf number leafno, opened on first use; NULL if it must take SPI */
DirectLeaf *
open_leaf(InboxDirectWriter *w, int leafno)
{
	DirectLeaf *leaf = &w->leaves[leafno];
	Oid			relid;
	int			i;

	if (leaf->state == 0)
	{
		MemoryContext old = MemoryContextSwitchTo(w->estate->es_query_cxt);

		leaf->state = -1;
		relid = leaf_relid(leafno);
		if (OidIsValid(relid))
		{
			leaf->rel = table_open(relid, RowExclusiveLock);

			/*
			 * As the executor checks the INSERT privilege, for the current
			 * user: the extension's owner, under SECURITY DEFINER or as the
			 * entry point switched to it
			 */
			if (direct_layout_leaf_ok(leaf->rel, leafno, w->entries) &&
				pg_class_aclcheck(relid, GetUserId(), ACL_INSERT) == ACLCHECK_OK)
			{
				Oid			pkey;

				leaf->rri = makeNode(ResultRelInfo);
				InitResultRelInfo(leaf->rri, leaf->rel, 0, NULL, 0);
				open_claim_indexes(leaf->rri);
				pkey = inbox_primary_key(leaf->rel);
				leaf->arbiter = list_make1_oid(pkey);
				leaf->slot = table_slot_create(leaf->rel, NULL);
				for (i = 0; i < leaf->rri->ri_NumIndices; i++)
					if (RelationGetRelid(leaf->rri->ri_IndexRelationDescs[i]) == pkey)
						leaf->pkey = leaf->rri->ri_IndexRelationDescs[i];
				/* The primary key is (scope, message_id, bucket), as inbox_direct_lookup reads it */
				if (leaf->pkey != NULL && leaf->pkey->rd_index->indnkeyatts == 3 &&
					leaf->pkey->rd_index->indkey.values[0] == Anum_entries_scope &&
					leaf->pkey->rd_index->indkey.values[1] == Anum_entries_message_id &&
					leaf->pkey->rd_index->indkey.values[2] == Anum_entries_bucket)
					leaf->state = 1;
			}
		}
		MemoryContextSwitchTo(old);
	}
	return leaf->state == 1 ? leaf : NULL;
}

/*
 * Insert the row in slot into rri's table as INSERT ... ON CONFLICT DO
 * NOTHING does, arbitrated by the unique indexes of arbiter: what
 * nodeModifyTable.c's ExecInsert calls, in its order, under the same
 * speculative-insertion lock.  A row of the same key whose inserter is in
 * progress is waited for.  True when the row was written; false, having
 * written nothing, when a row of the key exists, committed or written by
 * this transaction: its tid is put in *conflict.  probe false skips the
 * probe before the first insertion (see above): only a caller whose
 * transaction already has an id should ask for that.  rri's indexes are
 * open (with the speculative details of its unique ones), and estate's
 * output command id is set; the caller evaluates no constraint the table
 * has.
 */
bool
inbox_direct_insert(EState *estate, ResultRelInfo *rri, TupleTableSlot *slot, List *arbiter,
					bool probe, ItemPointer conflict)
{
	Relation	rel = rri->ri_RelationDesc;

	for (;;)
	{
		bool		spec_conflict = false;
		TransactionId xid;
		uint32		token;
		List	   *recheck;

		/* Wait for, or find, a row of the same key, as ExecInsert does */
		if (probe && !inbox_check_index_constraints(rri, slot, estate, conflict, arbiter))
			return false;
		probe = true;

		/*
		 * The transaction gets its id only now, as with the SQL statement: a
		 * duplicate writes nothing, and its commit need not be flushed.
		 */
		xid = GetCurrentTransactionId();
		token = SpeculativeInsertionLockAcquire(xid);
		table_tuple_insert_speculative(rel, slot, estate->es_output_cid, 0, NULL, token);
		recheck = inbox_insert_index_tuples(rri, slot, estate, &spec_conflict, arbiter);
		table_tuple_complete_speculative(rel, slot, token, !spec_conflict);
		SpeculativeInsertionLockRelease(xid);
		list_free(recheck);
		if (!spec_conflict)
			return true;

		/*
		 * Another insertion of the key got into the index before ours (after
		 * the probe, or with none), and ours was backed out.  Probe now,
		 * which waits for that insertion's transaction.
		 */
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * Write a claim's entry (scope, message_id, payload_hash, in bucket's
 * leaf) as INSERT ... ON CONFLICT DO NOTHING would.  INBOX_DIRECT_WRITTEN
 * or INBOX_DIRECT_CONFLICT; INBOX_DIRECT_UNAVAILABLE, having done nothing,
 * when the leaf is not what this module expects: the caller then uses SPI.
 */
InboxDirectResult
inbox_direct_write(InboxDirectWriter *w, int bucket, text *scope, text *message_id,
				   bytea *payload_hash)
{
	DirectLeaf *leaf = open_leaf(w, INBOX_BUCKET_LEAF(bucket));
	EState	   *estate = w->estate;
	TupleTableSlot *slot;
	MemoryContext caller_cxt;
	InboxDirectResult result;
	ItemPointerData conflict_tid;

	if (leaf == NULL)
		return INBOX_DIRECT_UNAVAILABLE;

	/* What this row needs (index keys, a fetched conflict) goes with it */
	caller_cxt = MemoryContextSwitchTo(GetPerTupleMemoryContext(estate));
	slot = leaf->slot;
	ExecClearTuple(slot);
	memset(slot->tts_isnull, true, Natts_entries * sizeof(bool));
	slot->tts_values[Anum_entries_scope - 1] = PointerGetDatum(scope);
	slot->tts_values[Anum_entries_message_id - 1] = PointerGetDatum(message_id);
	slot->tts_values[Anum_entries_bucket - 1] = Int16GetDatum(bucket);
	slot->tts_values[Anum_entries_received_at - 1] =
		TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	if (payload_hash != NULL)
		slot->tts_values[Anum_entries_payload_hash - 1] = PointerGetDatum(payload_hash);
	slot->tts_values[Anum_entries_state - 1] = CharGetDatum(INBOX_STATE_DONE);
	slot->tts_isnull[Anum_entries_scope - 1] = false;
	slot->tts_isnull[Anum_entries_message_id - 1] = false;
	slot->tts_isnull[Anum_entries_bucket - 1] = false;
	slot->tts_isnull[Anum_entries_received_at - 1] = false;
	slot->tts_isnull[Anum_entries_payload_hash - 1] = (payload_hash == NULL);
	slot->tts_isnull[Anum_entries_state - 1] = false;
	ExecStoreVirtualTuple(slot);
	slot->tts_tableOid = RelationGetRelid(leaf->rel);

	if (inbox_direct_insert(estate, leaf->rri, slot, leaf->arbiter, !w->optimistic,
							&conflict_tid))
	{
		result = INBOX_DIRECT_WRITTEN;
		w->optimistic = true;
	}
	else
	{
		check_conflict_visible(estate, leaf->rel, &conflict_tid);
		result = INBOX_DIRECT_CONFLICT;
		w->optimistic = false;
	}

	MemoryContextSwitchTo(caller_cxt);
	ResetPerTupleExprContext(estate);
	return result;
}

/*
 * Read the entry of a key that inbox_direct_write() found written, as
 * claim.c's SPI lookup would: through the leaf's primary key, with a
 * snapshot taken now under READ COMMITTED (so that it sees the entry of
 * the concurrent claim whose commit the write waited for), the
 * transaction's under REPEATABLE READ, and this command's id either way.
 * False if no entry is visible (purged in between); the hash is copied
 * into the caller's memory.
 */
bool
inbox_direct_lookup(InboxDirectWriter *w, int bucket, text *scope, text *message_id,
					TimestampTz *received_at, bytea **payload_hash, char *state)
{
	DirectLeaf *leaf = open_leaf(w, INBOX_BUCKET_LEAF(bucket));
	ScanKeyData keys[3];
	IndexScanDesc scan;
	TupleTableSlot *slot;
	bool		found;

	if (leaf == NULL)
		elog(ERROR, "inbox_direct_lookup on a leaf that inbox_direct_write did not write");
	PushActiveSnapshot(GetTransactionSnapshot());
	UpdateActiveSnapshotCommandId();

	ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
						   C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(scope));
	ScanKeyEntryInitialize(&keys[1], 0, 2, BTEqualStrategyNumber, InvalidOid,
						   C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(message_id));
	ScanKeyEntryInitialize(&keys[2], 0, 3, BTEqualStrategyNumber, InvalidOid,
						   InvalidOid, F_INT2EQ, Int16GetDatum(bucket));
	slot = leaf->slot;
	scan = inbox_index_beginscan(leaf->rel, leaf->pkey, GetActiveSnapshot(), 3);
	index_rescan(scan, keys, 3, NULL, 0);
	found = index_getnext_slot(scan, ForwardScanDirection, slot);
	if (found)
	{
		bool		isnull;
		Datum		d;

		*received_at = DatumGetTimestampTz(slot_getattr(slot, Anum_entries_received_at, &isnull));
		d = slot_getattr(slot, Anum_entries_payload_hash, &isnull);
		*payload_hash = isnull ? NULL : DatumGetByteaPP(datumCopy(d, false, -1));
		*state = DatumGetChar(slot_getattr(slot, Anum_entries_state, &isnull));
	}
	index_endscan(scan);
	ExecClearTuple(slot);
	PopActiveSnapshot();
	return found;
}

/* The end of the statement begun by inbox_direct_begin() */
void
inbox_direct_end(InboxDirectWriter *w)
{
	int			i;

	for (i = 0; i < INBOX_LEAVES; i++)
	{
		DirectLeaf *leaf = &w->leaves[i];

		if (leaf->slot != NULL)
			ExecDropSingleTupleTableSlot(leaf->slot);
		if (leaf->new_slot != NULL)
			ExecDropSingleTupleTableSlot(leaf->new_slot);
		if (leaf->receipt_index != NULL)
			index_close(leaf->receipt_index, AccessShareLock);
		if (leaf->rri != NULL)
			ExecCloseIndices(leaf->rri);
		if (leaf->rel != NULL)
			table_close(leaf->rel, NoLock);
	}
	if (w->pushed)
		PopActiveSnapshot();
	FreeExecutorState(w->estate);
}
