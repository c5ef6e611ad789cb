/*-------------------------------------------------------------------------
 *
 * locate.c
 *	  A row of ours found through the index that holds its whole key, read
 *	  with the index AM rather than planned: an entry by (scope,
 *	  message_id) on its leaf's primary key, an entry by its receipt on its
 *	  leaf's index of receipts, a group member by (scope, message_id).
 *
 * The planner picks among our indexes by its estimates, and for a scope
 * the statistics have never seen, every index that begins with the scope
 * looks as cheap as the one that names the row: it may read the scope
 * whole.  A statement that must touch one row is handed that row's tid
 * instead (WHERE ctid = ..., with the leaf's bucket so that only the leaf
 * is planned), and a tid scan has no index to choose.  The tid is read
 * with a snapshot taken now, seeing this transaction's writes; a row that
 * another transaction updates after that is not the row at the tid any
 * more, and the statement finds nothing, as it would had the row changed
 * before it looked.
 *
 * src/locate.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_am.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "compat.h"
#include "entries.h"
#include "keys.h"
#include "locate.h"
#include "spi.h"

PG_FUNCTION_INFO_V1(inbox_entry_tid_sql);
PG_FUNCTION_INFO_V1(inbox_entry_of_receipt_sql);
PG_FUNCTION_INFO_V1(inbox_member_tid_sql);

/*
 * A scan key for column attno of a B-tree index: equal to value, compared
 * as collation "C" compares our keys
 */
void
inbox_text_key(ScanKey key, AttrNumber attno, text *value)
{
	ScanKeyEntryInitialize(key, 0, attno, BTEqualStrategyNumber, InvalidOid,
						   C_COLLATION_OID, F_TEXTEQ, PointerGetDatum(value));
}

/*
 * The first row of heap that index finds for nkeys keys, in a snapshot
 * taken now: its tid into *tid, and its column attnum (if not 0), copied,
 * into *value.  False if none.
 */
static bool
probe(Relation heap, Relation index, ScanKey keys, int nkeys, ItemPointer tid,
	  AttrNumber attnum, Datum *value)
{
	IndexScanDesc scan;
	TupleTableSlot *slot = table_slot_create(heap, NULL);
	bool		found;

	PushActiveSnapshot(GetTransactionSnapshot());
	UpdateActiveSnapshotCommandId();
	scan = inbox_index_beginscan(heap, index, GetActiveSnapshot(), nkeys);
	index_rescan(scan, keys, nkeys, NULL, 0);
	found = index_getnext_slot(scan, ForwardScanDirection, slot);
	if (found)
	{
		*tid = slot->tts_tid;
		if (attnum != 0)
		{
			bool		isnull;
			Form_pg_attribute att = TupleDescAttr(RelationGetDescr(heap), attnum - 1);

			*value = datumCopy(slot_getattr(slot, attnum, &isnull), att->attbyval, att->attlen);
		}
	}
	index_endscan(scan);
	PopActiveSnapshot();
	ExecDropSingleTupleTableSlot(slot);
	return found;
}

/* The leaf of inbox.entries that holds scope, opened */
static Relation
open_leaf(text *scope)
{
	Oid			relid = inbox_relid(psprintf("entries_p%d", inbox_scope_leaf(scope)));

	if (!OidIsValid(relid))
		elog(ERROR, "the leaf of inbox.entries for a scope is missing");
	return table_open(relid, AccessShareLock);
}

/* The entry (scope, message_id): its tid, on its leaf's primary key */
bool
inbox_entry_tid(text *scope, text *message_id, ItemPointer tid)
{
	Relation	leaf = open_leaf(scope);
	Relation	pkey = index_open(inbox_primary_key(leaf), AccessShareLock);
	ScanKeyData keys[3];
	bool		found;

	inbox_text_key(&keys[0], 1, scope);
	inbox_text_key(&keys[1], 2, message_id);
	ScanKeyEntryInitialize(&keys[2], 0, 3, BTEqualStrategyNumber, InvalidOid,
						   InvalidOid, F_INT2EQ,
						   Int16GetDatum((int16) inbox_bucket(scope, message_id)));
	found = probe(leaf, pkey, keys, 3, tid, 0, NULL);
	index_close(pkey, AccessShareLock);
	table_close(leaf, AccessShareLock);
	return found;
}

/*
 * The entry of scope that receipt holds: its id and its tid, on the
 * leaf's index whose one key is the receipt (sql/inbox.sql's
 * entries_receipt).  The caller's statement checks the row's scope and
 * state again.
 */
bool
inbox_entry_of_receipt(text *scope, pg_uuid_t *receipt, text **message_id, ItemPointer tid)
{
	Relation	leaf = open_leaf(scope);
	List	   *indexoids = RelationGetIndexList(leaf);
	ListCell   *lc;
	bool		found = false;
	Datum		id;

	foreach(lc, indexoids)
	{
		Relation	index = index_open(lfirst_oid(lc), AccessShareLock);

		if (index->rd_index->indisvalid && index->rd_index->indnkeyatts == 1 &&
			index->rd_index->indkey.values[0] == Anum_entries_receipt &&
			index->rd_rel->relam == BTREE_AM_OID)
		{
			ScanKeyData key;

			ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid,
								   InvalidOid, F_UUID_EQ, UUIDPGetDatum(receipt));
			found = probe(leaf, index, &key, 1, tid, Anum_entries_message_id, &id);
			index_close(index, AccessShareLock);
			break;
		}
		index_close(index, AccessShareLock);
	}
	list_free(indexoids);
	table_close(leaf, AccessShareLock);
	if (found)
		*message_id = DatumGetTextPP(id);
	return found;
}

/* The group member (scope, message_id): its tid, on its primary key */
bool
inbox_member_tid(text *scope, text *message_id, ItemPointer tid)
{
	Oid			relid = inbox_relid("group_members");
	Relation	members;
	Relation	pkey;
	ScanKeyData keys[2];
	bool		found;

	if (!OidIsValid(relid))
		return false;
	members = table_open(relid, AccessShareLock);
	pkey = index_open(inbox_primary_key(members), AccessShareLock);
	inbox_text_key(&keys[0], 1, scope);
	inbox_text_key(&keys[1], 2, message_id);
	found = probe(members, pkey, keys, 2, tid, 0, NULL);
	index_close(pkey, AccessShareLock);
	table_close(members, AccessShareLock);
	return found;
}

/* The tid as a datum, palloc'd */
static Datum
tid_datum(ItemPointer tid)
{
	ItemPointer copy = palloc(sizeof(ItemPointerData));

	ItemPointerCopy(tid, copy);
	return PointerGetDatum(copy);
}

/* inbox.entry_tid(scope text, message_id text) -> tid, NULL if none */
Datum
inbox_entry_tid_sql(PG_FUNCTION_ARGS)
{
	ItemPointerData tid;

	if (!inbox_entry_tid(PG_GETARG_TEXT_PP(0), PG_GETARG_TEXT_PP(1), &tid))
		PG_RETURN_NULL();
	return tid_datum(&tid);
}

/*
 * inbox.entry_of_receipt(scope text, receipt uuid, OUT message_id text,
 * OUT tid tid): NULLs if no entry of the scope's leaf has it
 */
Datum
inbox_entry_of_receipt_sql(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[2];
	bool		nulls[2] = {true, true};
	ItemPointerData tid;
	text	   *id;

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "inbox.entry_of_receipt must return a row");
	if (inbox_entry_of_receipt(PG_GETARG_TEXT_PP(0), PG_GETARG_UUID_P(1), &id, &tid))
	{
		values[0] = PointerGetDatum(id);
		values[1] = tid_datum(&tid);
		nulls[0] = nulls[1] = false;
	}
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}

/* inbox.member_tid(scope text, message_id text) -> tid, NULL if none */
Datum
inbox_member_tid_sql(PG_FUNCTION_ARGS)
{
	ItemPointerData tid;

	if (!inbox_member_tid(PG_GETARG_TEXT_PP(0), PG_GETARG_TEXT_PP(1), &tid))
		PG_RETURN_NULL();
	return tid_datum(&tid);
}
