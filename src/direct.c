/*-------------------------------------------------------------------------
 *
 * direct.c
 *	  A claim's entry written into its leaf without the planner: the
 *	  speculative insertion of INSERT ... ON CONFLICT DO NOTHING, done with
 *	  the executor's own routines.
 *
 * A claim is one row.  Through SPI it costs a plan-cache check, an
 * executor start and end, and, at every statement, the rebuilding of the
 * table's CHECK expressions from their text (stringToNode, then
 * expression_planner), which PostgreSQL does not cache across statements.
 * Measured with callgrind on PostgreSQL 15, that is about 180,000
 * instructions for the claim's INSERT, of which the three CHECKs alone
 * take 58,000; the whole statement users write by hand (issue 11's "h")
 * costs 101,000.  The claim writes the same row here with what the
 * executor itself calls for INSERT ... ON CONFLICT DO NOTHING
 * (nodeModifyTable.c's ExecInsert): ExecCheckIndexConstraints,
 * table_tuple_insert_speculative, ExecInsertIndexTuples and
 * table_tuple_complete_speculative, under the same speculative-insertion
 * lock.  So the arbitration is the one PostgreSQL performs for the SQL
 * statement, in the same order, by the same unique index, including the
 * wait for an uncommitted conflicting claim, which inbox.claim_timeout
 * bounds as before.
 *
 * What the SQL statement would also do, and why it is not needed here:
 *
 *	- the CHECK constraints: they repeat the key checks that keys.c made
 *	  on this call's arguments (lengths in the server encoding and in
 *	  UTF-8), and the bucket, which this call computed itself.  They stay
 *	  on the table for rows that arrive by any other path, a restore's
 *	  COPY above all;
 *	- the partition constraint: the bucket names the leaf;
 *	- triggers, row-level security, and the other columns' defaults: the
 *	  leaf has none of them.  That is checked at every call, with the
 *	  leaf's column layout, and anything unexpected sends the claim through
 *	  SPI instead, which does all of it.
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

#include "access/relation.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/execnodes.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "direct.h"
#include "distributed.h"
#include "inbox.h"

static bool direct_insert = true;

/*
 * The leaves' OIDs, found on first use and forgotten at any invalidation
 * of one of them (DROP EXTENSION drops them) or of the whole cache.
 */
static Oid	leaf_relids[INBOX_BUCKETS];
static Oid	entries_relid = InvalidOid;
static bool callback_registered = false;

/*
 * The columns of inbox.entries that a claim sets, by position, as
 * sql/inbox.sql defines them; every other column is NULL in a claim's
 * entry and has no default.  direct_layout_ok() checks the leaf against
 * this before every write.
 */
#define ENTRIES_NATTS			17
#define ATT_SCOPE				1
#define ATT_MESSAGE_ID			2
#define ATT_BUCKET				3
#define ATT_RECEIVED_AT			4
#define ATT_PAYLOAD_HASH		5
#define ATT_STATE				6

static const struct
{
	const char *name;
	Oid			type;
}			entries_columns[] = {
	[ATT_SCOPE] = {"scope", TEXTOID},
	[ATT_MESSAGE_ID] = {"message_id", TEXTOID},
	[ATT_BUCKET] = {"bucket", INT2OID},
	[ATT_RECEIVED_AT] = {"received_at", TIMESTAMPTZOID},
	[ATT_PAYLOAD_HASH] = {"payload_hash", BYTEAOID},
	[ATT_STATE] = {"state", CHAROID},
};

/*
 * The CHECK constraints of inbox.entries, each of which keys.c and the
 * bucket computed here already guarantee for a claim's entry.  A leaf with
 * any other CHECK takes SPI, which enforces it.
 */
static const char *const entries_checks[] = {
	"entries_scope_length", "entries_message_id_length", "entries_bucket"
};

void
direct_init(void)
{
	DefineCustomBoolVariable("inbox.direct_insert",
							 "Whether a claim writes its entry without the planner.",
							 "Off sends every claim's INSERT through SPI and the executor, "
							 "with the same arbitration; it is slower.  Where Citus is installed, "
							 "claims always go through SPI.",
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

	for (i = 0; i < INBOX_BUCKETS; i++)
		if (relid == InvalidOid || relid == leaf_relids[i])
			leaf_relids[i] = InvalidOid;
	if (relid == InvalidOid || relid == entries_relid)
		entries_relid = InvalidOid;
}

static Oid
leaf_relid(int bucket)
{
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(forget_leaves, (Datum) 0);
		callback_registered = true;
	}
	if (!OidIsValid(leaf_relids[bucket]))
	{
		char		name[NAMEDATALEN];

		snprintf(name, sizeof(name), "entries_p%d", bucket);
		leaf_relids[bucket] = inbox_relid(name);
	}
	if (!OidIsValid(entries_relid))
		entries_relid = inbox_relid("entries");
	return leaf_relids[bucket];
}

/*
 * Whether rel is a leaf this module may write: a plain table with the
 * columns above, no trigger, no row-level security, no default but those
 * of received_at and state, no CHECK but the three above, and the INSERT
 * privilege for the current user
 * (the extension's owner, under SECURITY DEFINER), as the executor would
 * check it.
 */
static bool
direct_layout_ok(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);
	int			attno;
	int			i;

	if (rel->rd_rel->relkind != RELKIND_RELATION ||
		rel->trigdesc != NULL ||
		rel->rd_rel->relrowsecurity ||
		desc->natts != ENTRIES_NATTS ||
		desc->constr == NULL ||
		desc->constr->num_defval != 2)
		return false;
	for (attno = ATT_SCOPE; attno <= ATT_STATE; attno++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, attno - 1);

		if (att->attisdropped || att->atttypid != entries_columns[attno].type ||
			strcmp(NameStr(att->attname), entries_columns[attno].name) != 0)
			return false;
	}
	for (attno = ATT_STATE + 1; attno <= ENTRIES_NATTS; attno++)
		if (TupleDescAttr(desc, attno - 1)->attisdropped)
			return false;
	if (desc->constr->num_check != (int) lengthof(entries_checks))
		return false;
	for (i = 0; i < (int) lengthof(entries_checks); i++)
	{
		int			j;

		for (j = 0; j < desc->constr->num_check; j++)
			if (strcmp(desc->constr->check[j].ccname, entries_checks[i]) == 0)
				break;
		if (j == desc->constr->num_check)
			return false;
	}
	return pg_class_aclcheck(RelationGetRelid(rel), GetUserId(), ACL_INSERT) == ACLCHECK_OK;
}

bool
inbox_direct_available(void)
{
	return direct_insert && !inbox_citus_installed();
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
 * Write a claim's entry (scope, message_id, payload_hash, in bucket's
 * leaf) as INSERT ... ON CONFLICT DO NOTHING would.  INBOX_DIRECT_INSERTED
 * or INBOX_DIRECT_CONFLICT; INBOX_DIRECT_UNAVAILABLE, having done nothing,
 * when the leaf is not what this module expects: the caller then uses SPI.
 */
InboxDirectResult
inbox_direct_insert(int bucket, text *scope, text *message_id, bytea *payload_hash)
{
	Oid			relid = leaf_relid(bucket);
	Relation	rel;
	EState	   *estate;
	ResultRelInfo *rri;
	TupleTableSlot *slot;
	List	   *arbiter;
	TransactionId xid;
	MemoryContext oldcxt;
	bool		pushed;
	InboxDirectResult result;

	if (!OidIsValid(relid) || !OidIsValid(entries_relid))
		return INBOX_DIRECT_UNAVAILABLE;

	/*
	 * The lock the INSERT on the leaf takes on inbox.entries too: the guard
	 * of DROP EXTENSION (guard.c) locks inbox.entries before it looks for
	 * entries, and so waits for this claim's transaction to end.
	 */
	LockRelationOid(entries_relid, AccessShareLock);
	rel = table_open(relid, RowExclusiveLock);
	if (!direct_layout_ok(rel))
	{
		table_close(rel, NoLock);
		return INBOX_DIRECT_UNAVAILABLE;
	}

	/*
	 * As SPI would before a statement: the entries written earlier in this
	 * command become visible to it, and it gets a command id of its own.
	 */
	CommandCounterIncrement();
	estate = CreateExecutorState();
	oldcxt = MemoryContextSwitchTo(estate->es_query_cxt);
	estate->es_output_cid = GetCurrentCommandId(true);

	/*
	 * Only check_conflict_visible() reads the snapshot, and only under
	 * REPEATABLE READ or SERIALIZABLE: there it is the transaction's, with
	 * this command's id, as SPI would make it active for the statement.
	 */
	pushed = IsolationUsesXactSnapshot() || !ActiveSnapshotSet();
	if (pushed)
	{
		PushActiveSnapshot(GetTransactionSnapshot());
		UpdateActiveSnapshotCommandId();
	}
	estate->es_snapshot = GetActiveSnapshot();

	rri = makeNode(ResultRelInfo);
	InitResultRelInfo(rri, rel, 0, NULL, 0);
	ExecOpenIndices(rri, true);
	arbiter = list_make1_oid(rel->rd_pkindex);

	slot = table_slot_create(rel, NULL);
	ExecClearTuple(slot);
	memset(slot->tts_isnull, true, ENTRIES_NATTS * sizeof(bool));
	slot->tts_values[ATT_SCOPE - 1] = PointerGetDatum(scope);
	slot->tts_values[ATT_MESSAGE_ID - 1] = PointerGetDatum(message_id);
	slot->tts_values[ATT_BUCKET - 1] = Int16GetDatum(bucket);
	slot->tts_values[ATT_RECEIVED_AT - 1] =
		TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	if (payload_hash != NULL)
		slot->tts_values[ATT_PAYLOAD_HASH - 1] = PointerGetDatum(payload_hash);
	slot->tts_values[ATT_STATE - 1] = CharGetDatum(INBOX_STATE_DONE);
	slot->tts_isnull[ATT_SCOPE - 1] = false;
	slot->tts_isnull[ATT_MESSAGE_ID - 1] = false;
	slot->tts_isnull[ATT_BUCKET - 1] = false;
	slot->tts_isnull[ATT_RECEIVED_AT - 1] = false;
	slot->tts_isnull[ATT_PAYLOAD_HASH - 1] = (payload_hash == NULL);
	slot->tts_isnull[ATT_STATE - 1] = false;
	ExecStoreVirtualTuple(slot);
	slot->tts_tableOid = relid;

	xid = GetCurrentTransactionId();
	for (;;)
	{
		ItemPointerData conflict_tid;
		bool		spec_conflict = false;
		uint32		token;
		List	   *recheck;

		/*
		 * Wait for, or find, an entry of the same key, as ExecInsert does
		 * before a speculative insertion.  A committed one ends the claim.
		 */
		if (!inbox_check_index_constraints(rri, slot, estate, &conflict_tid, arbiter))
		{
			check_conflict_visible(estate, rel, &conflict_tid);
			result = INBOX_DIRECT_CONFLICT;
			break;
		}

		token = SpeculativeInsertionLockAcquire(xid);
		table_tuple_insert_speculative(rel, slot, estate->es_output_cid, 0, NULL, token);
		recheck = inbox_insert_index_tuples(rri, slot, estate, &spec_conflict, arbiter);
		table_tuple_complete_speculative(rel, slot, token, !spec_conflict);
		SpeculativeInsertionLockRelease(xid);
		list_free(recheck);
		if (!spec_conflict)
		{
			result = INBOX_DIRECT_INSERTED;
			break;
		}

		/*
		 * A concurrent claim of the key got into the index between the
		 * check and the insertion; ours was backed out.  Check again,
		 * which now waits for that claim's transaction.
		 */
		CHECK_FOR_INTERRUPTS();
	}

	ExecDropSingleTupleTableSlot(slot);
	ExecCloseIndices(rri);
	if (pushed)
		PopActiveSnapshot();
	MemoryContextSwitchTo(oldcxt);
	FreeExecutorState(estate);
	table_close(rel, NoLock);
	return result;
}
