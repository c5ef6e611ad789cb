/*-------------------------------------------------------------------------
 *
 * direct_complete.c
 *	  A completion's update written into its leaf without the planner,
 *	  with the executor's own routines, by the writer that direct.c opens.
 *
 * inbox_complete marks a message done here rather than by an UPDATE
 * through SPI for the reason direct.c writes a claim's entry: the SQL
 * statement would pay the executor's start and the rebuilding of the
 * table's CHECK expressions for one row.  The leaf is opened, and found
 * to be as sql/inbox.sql makes it, by direct.c (open_leaf), which also
 * ends the statement.
 *
 * src/direct_complete.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_am.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/execnodes.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "compat.h"
#include "direct.h"
#include "direct_internal.h"
#include "entries.h"
#include "inbox.h"

/*
 * The leaf's index of receipts: the one index whose only key is the
 * receipt (sql/inbox.sql's entries_receipt, partial on processing
 * entries, which held_by checks on the row).  NULL if there is none.
 */
static Relation
open_receipt_index(DirectLeaf *leaf)
{
	List	   *indexoids;
	ListCell   *lc;

	if (leaf->receipt_index != NULL)
		return leaf->receipt_index;
	indexoids = RelationGetIndexList(leaf->rel);
	foreach(lc, indexoids)
	{
		Relation	index = index_open(lfirst_oid(lc), AccessShareLock);

		if (index->rd_index->indisvalid && index->rd_index->indisready &&
			index->rd_index->indnkeyatts == 1 && index->rd_index->indnatts == 1 &&
			index->rd_index->indkey.values[0] == Anum_entries_receipt &&
			index->rd_rel->relam == BTREE_AM_OID &&
			RelationGetIndexExpressions(index) == NIL)
		{
			leaf->receipt_index = index;
			break;
		}
		index_close(index, AccessShareLock);
	}
	list_free(indexoids);
	return leaf->receipt_index;
}

/* Whether the text datum d holds the bytes of t */
static bool
same_text(Datum d, text *t)
{
	text	   *stored = DatumGetTextPP(d);

	return VARSIZE_ANY_EXHDR(stored) == VARSIZE_ANY_EXHDR(t) &&
		memcmp(VARDATA_ANY(stored), VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t)) == 0;
}

/*
 * Whether the entry in slot is the one the completion names, processing
 * and held: by its receipt (in scope), or else (scope, message_id) by its
 * owner session.  The whole WHERE clause, as EvalPlanQual checks it again
 * on a version that a concurrent update made.
 */
static bool
held_by(TupleTableSlot *slot, text *scope, text *message_id, pg_uuid_t *receipt,
		int64 owner)
{
	bool		isnull;
	Datum		d;

	slot_getallattrs(slot);
	if (DatumGetChar(slot->tts_values[Anum_entries_state - 1]) != INBOX_STATE_PROCESSING ||
		!same_text(slot->tts_values[Anum_entries_scope - 1], scope))
		return false;
	if (receipt != NULL)
	{
		d = slot_getattr(slot, Anum_entries_receipt, &isnull);
		return !isnull && memcmp(DatumGetUUIDP(d)->data, receipt->data, UUID_LEN) == 0;
	}
	if (!same_text(slot->tts_values[Anum_entries_message_id - 1], message_id))
		return false;
	d = slot_getattr(slot, Anum_entries_owner_session, &isnull);
	return !isnull && DatumGetInt64(d) == owner;
}

/*
 * The columns a completion changes, for the hint that tells btree an
 * index's key is unchanged by the update (see below)
 */
static const AttrNumber completion_sets[] = {
	Anum_entries_state, Anum_entries_owner_session, Anum_entries_lease_until, Anum_entries_due, Anum_entries_receipt,
	Anum_entries_result, Anum_entries_finished_at
};

/*
 * Decide for each index the executor's "unchanged by the update" hint
 * (execIndexing.c's index_unchanged_by_update), which would otherwise read
 * the updated columns from a range table this writer does not have, find
 * none, and hint every index unchanged: true when none of the index's key
 * columns is one a completion sets, and it has no expression.
 */
static void
hint_unchanged_indexes(ResultRelInfo *rri)
{
	for (int i = 0; i < rri->ri_NumIndices; i++)
	{
		IndexInfo  *ii = rri->ri_IndexRelationInfo[i];
		bool		unchanged = ii->ii_Expressions == NIL;

		for (int k = 0; unchanged && k < ii->ii_NumIndexKeyAttrs; k++)
			for (int c = 0; c < (int) lengthof(completion_sets); c++)
				if (ii->ii_IndexAttrNumbers[k] == completion_sets[c] ||
					ii->ii_IndexAttrNumbers[k] == 0)
					unchanged = false;
		ii->ii_CheckedUnchanged = true;
		ii->ii_IndexUnchanged = unchanged;
	}
}

/*
 * Complete a message in leaf leafno, which must be processing and held by
 * what the caller names, as complete.c's LEAF_COMPLETE and
 * LEAF_COMPLETE_RECEIPT statements would: (scope, message_id) held by the
 * owner session, or (receipt != NULL, message_id NULL) the message of
 * scope that the receipt holds.
 *
 *	UPDATE ... SET state = 'd', result = result, finished_at = now(),
 *		owner_session = NULL, lease_until = NULL, due = NULL, receipt = NULL
 *	WHERE scope = ... AND message_id = ... AND state = 'r' AND owner_session = owner
 *	   (or WHERE receipt = ... AND scope = ... AND state = 'r')
 *
 * That UPDATE costs an executor start and the rebuilding of the table's
 * three CHECK expressions, which no column it sets is read by; done here,
 * it costs the index scan, the heap update and the index entries of the
 * new version.  The new version is done, so only the indexes that hold
 * claims' entries get one (open_claim_indexes): the primary key and the
 * retention index, which the update hints as unchanged
 * (hint_unchanged_indexes) so that btree's bottom-up deletion removes the
 * versions that completions leave behind, as it does for the SQL
 * statement.
 *
 * A concurrent update is followed as the executor follows it
 * (nodeModifyTable.c's ExecUpdate, then EvalPlanQual): under READ
 * COMMITTED, the latest version is locked and checked again; under
 * REPEATABLE READ and SERIALIZABLE, it is a serialization failure.
 * INBOX_DIRECT_WRITTEN when the message was completed, with its id in
 * *completed_id (in the caller's memory context); INBOX_DIRECT_NOT_FOUND
 * when there is none to complete (the caller explains why);
 * INBOX_DIRECT_UNAVAILABLE, having done nothing, when the leaf is not
 * what this module expects.
 */
InboxDirectResult
inbox_direct_complete(InboxDirectWriter *w, int leafno, text *scope, text *message_id,
					  pg_uuid_t *receipt, int64 owner, Datum result, bool result_isnull,
					  text **completed_id)
{
	DirectLeaf *leaf = open_leaf(w, leafno);
	EState	   *estate = w->estate;
	ScanKeyData keys[2];
	IndexScanDesc scan;
	Relation	index;
	TupleTableSlot *old;
	TupleTableSlot *new;
	Snapshot	snapshot;
	MemoryContext caller_cxt;
	InboxDirectResult outcome = INBOX_DIRECT_NOT_FOUND;
	bool		found;

	if (leaf == NULL ||
		pg_class_aclmask(RelationGetRelid(leaf->rel), GetUserId(), ACL_UPDATE | ACL_SELECT,
						 ACLMASK_ALL) != (ACL_UPDATE | ACL_SELECT))
		return INBOX_DIRECT_UNAVAILABLE;
	index = receipt != NULL ? open_receipt_index(leaf) : leaf->pkey;
	if (index == NULL)
		return INBOX_DIRECT_UNAVAILABLE;

	/*
	 * As the executor checks a result relation (CheckValidResultRel): a
	 * leaf published for updates needs a replica identity
	 */
	CheckCmdReplicaIdentity(leaf->rel, CMD_UPDATE);
	hint_unchanged_indexes(leaf->rri);
	if (leaf->new_slot == NULL)
	{
		MemoryContext old_cxt = MemoryContextSwitchTo(estate->es_query_cxt);

		leaf->new_slot = table_slot_create(leaf->rel, NULL);
		MemoryContextSwitchTo(old_cxt);
	}
	old = leaf->slot;
	new = leaf->new_slot;
	caller_cxt = MemoryContextSwitchTo(GetPerTupleMemoryContext(estate));

	/* The statement's snapshot, as SPI would take it */
	PushActiveSnapshot(GetTransactionSnapshot());
	UpdateActiveSnapshotCommandId();
	snapshot = GetActiveSnapshot();

	/*
	 * The visible version held as named.  A receipt's index may hold
	 * entries of its older versions (a lease extended), and of another
	 * scope's message with the same receipt, which only a forged receipt
	 * could give: the first visible version that is held is the one.
	 */
	if (receipt != NULL)
		ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
							   InvalidOid, F_UUID_EQ, UUIDPGetDatum(receipt));
	else
	{
		ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
							   C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(scope));
		ScanKeyEntryInitialize(&keys[1], 0, 2, BTEqualStrategyNumber, InvalidOid,
							   C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(message_id));
	}
	scan = inbox_index_beginscan(leaf->rel, index, snapshot, receipt != NULL ? 1 : 2);
	index_rescan(scan, keys, receipt != NULL ? 1 : 2, NULL, 0);
	while ((found = index_getnext_slot(scan, ForwardScanDirection, old)) &&
		   !held_by(old, scope, message_id, receipt, owner))
		;
	index_endscan(scan);

	/* found: old holds the version to update, held as named */
	while (found)
	{
		ItemPointerData tid = old->tts_tid;
		TM_FailureData tmfd;
		LockTupleMode lockmode;
		TM_Result	tm;
		int			index_mode;

		/* The new version: the old one, done */
		slot_getallattrs(old);
		ExecClearTuple(new);
		memcpy(new->tts_values, old->tts_values, Natts_entries * sizeof(Datum));
		memcpy(new->tts_isnull, old->tts_isnull, Natts_entries * sizeof(bool));
		new->tts_values[Anum_entries_state - 1] = CharGetDatum(INBOX_STATE_DONE);
		new->tts_values[Anum_entries_result - 1] = result;
		new->tts_isnull[Anum_entries_result - 1] = result_isnull;
		new->tts_values[Anum_entries_finished_at - 1] =
			TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
		new->tts_isnull[Anum_entries_finished_at - 1] = false;
		new->tts_isnull[Anum_entries_owner_session - 1] = true;
		new->tts_isnull[Anum_entries_lease_until - 1] = true;
		new->tts_isnull[Anum_entries_due - 1] = true;
		new->tts_isnull[Anum_entries_receipt - 1] = true;
		ExecStoreVirtualTuple(new);

		tm = inbox_tuple_update(leaf->rel, &tid, new, estate->es_output_cid, snapshot,
								&tmfd, &lockmode, &index_mode);
		if (tm == TM_Ok)
		{
			if (index_mode != INBOX_UPDATE_INDEXES_NONE)
				list_free(inbox_update_index_tuples(leaf->rri, new, estate,
													index_mode == INBOX_UPDATE_INDEXES_SUMMARIZING));
			MemoryContextSwitchTo(caller_cxt);
			*completed_id = DatumGetTextPCopy(old->tts_values[Anum_entries_message_id - 1]);
			MemoryContextSwitchTo(GetPerTupleMemoryContext(estate));
			outcome = INBOX_DIRECT_WRITTEN;
			break;
		}
		if (tm == TM_SelfModified)
			elog(ERROR, "inbox_complete: the entry was already updated by this command");
		if (tm != TM_Updated && tm != TM_Deleted)
			elog(ERROR, "inbox_complete: unexpected table_tuple_update status: %d", (int) tm);
		if (IsolationUsesXactSnapshot())
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to concurrent %s",
							tm == TM_Deleted ? "delete" : "update")));
		if (tm == TM_Deleted)
			break;

		/*
		 * Another transaction updated the entry and committed: its latest
		 * version, locked, is checked again, as EvalPlanQual does.
		 */
		tm = table_tuple_lock(leaf->rel, &tid, snapshot, old, estate->es_output_cid,
							  lockmode, LockWaitBlock, TUPLE_LOCK_FLAG_FIND_LAST_VERSION,
							  &tmfd);
		if (tm == TM_Deleted)
			break;
		if (tm != TM_Ok)
			elog(ERROR, "inbox_complete: unexpected table_tuple_lock status: %d", (int) tm);
		found = held_by(old, scope, message_id, receipt, owner);
		CHECK_FOR_INTERRUPTS();
	}

	ExecClearTuple(new);
	ExecClearTuple(old);
	PopActiveSnapshot();
	MemoryContextSwitchTo(caller_cxt);
	ResetPerTupleExprContext(estate);
	return outcome;
}
