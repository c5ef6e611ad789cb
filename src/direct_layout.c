/*-------------------------------------------------------------------------
 *
 * direct_layout.c
 *	  Whether inbox.entries and a leaf of it are exactly as sql/inbox.sql
 *	  makes them: the condition on which direct.c writes a claim's entry,
 *	  or a completion, without the executor's checks.
 *
 * direct.c evaluates no CHECK, NOT NULL or partition constraint, applies
 * no default, and has no trigger, rule or row-level security to apply.
 * It writes what the SQL statement would write, and refuses what the SQL
 * statement would refuse, only while each of them is one that sql/inbox.sql
 * creates (entries.h):
 *
 *	- the CHECK constraints are its three, with its expressions, enforced
 *	  and validated.  They test what keys.c checks on every key, and the
 *	  bucket that keys.c computes, and no completion changes a column they
 *	  read; validated, because an UPDATE tests its new version of a row
 *	  that a NOT VALID constraint never tested;
 *	- the CHECK entries_bucket calls keys.c's own function: CREATE OR
 *	  REPLACE FUNCTION inbox.bucket would change what it enforces without
 *	  touching the table;
 *	- each column is NOT NULL exactly where sql/inbox.sql makes it so, and
 *	  validly: the columns a write leaves NULL accept NULL, and a
 *	  completion copies the others from a row that holds no NULL in them;
 *	- no column has a type modifier (which the SQL statement would apply to
 *	  the value), an identity or a generation expression, and only
 *	  received_at and state have defaults, sql/inbox.sql's: what a claim
 *	  writes there is what they give;
 *	- the leaf is the partition of inbox.entries for the buckets whose high
 *	  bits name it (INBOX_BUCKET_LEAF), and inbox.entries is partitioned by
 *	  range of the bucket;
 *	- neither has a trigger, a rule or row-level security.
 *
 * Anything else sends the write through SPI, which enforces whatever the
 * table holds.  A stored expression is compared with its canonical text,
 * cooked against the relation as heap.c cooks a CHECK (cookConstraint) or
 * a default (cookDefault), by equal(), which ignores parse locations.
 * Both trees name functions, operators and collations by OID, so neither
 * the search_path nor the way the expression was spelt changes the
 * verdict.
 *
 * The same holds for inbox.content_window, into which window.c writes the
 * first claim of a content: a plain table with the five columns of
 * sql/inbox.sql, no CHECK, trigger, rule or row-level security, and its
 * primary key on (scope, payload_hash), immediate, as the arbiter.  The
 * write sets every column, never to NULL, so neither a NOT NULL nor a
 * default matters there.
 *
 * A verdict is kept per relation for the backend's life: cooking costs a
 * parse and catalog lookups that a claim must not pay.  It is forgotten
 * when the relation's relcache entry is invalidated, which every change
 * above causes, and at any change to pg_proc (the bucket's function).  A verdict reached while an
 * invalidation arrived serves the statement that asked, and is not kept.
 *
 * src/direct_layout.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/relation.h"
#include "catalog/heap.h"
#include "catalog/partition.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_class.h"
#include "catalog/pg_opfamily.h"
#include "fmgr.h"
#include "nodes/parsenodes.h"
#include "nodes/value.h"
#include "parser/parse_coerce.h"
#include "parser/parse_collate.h"
#include "parser/parse_expr.h"
#include "parser/parse_func.h"
#include "parser/parse_node.h"
#include "parser/parse_relation.h"
#include "parser/parser.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/partcache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "compat.h"
#include "direct_layout.h"
#include "entries.h"
#include "keys.h"

/* Room for inbox.entries and its leaves, twice over */
#define MAX_VERDICTS			(2 * (INBOX_LEAVES + 1))

static struct
{
	Oid			relid;
	bool		ok;
}			verdicts[MAX_VERDICTS];
static int	nverdicts = 0;

/* Counts the invalidations, so that a verdict reached across one is not kept */
static uint64 forgets = 0;
static bool callbacks_registered = false;

/* The columns of inbox.content_window, in order (direct_layout.h) */
static const struct
{
	const char *name;
	Oid			type;
	Oid			collation;
}			content_columns[CONTENT_WINDOW_NATTS] =
{
	{"scope", TEXTOID, C_COLLATION_OID},
	{"payload_hash", BYTEAOID, InvalidOid},
	{"message_id", TEXTOID, C_COLLATION_OID},
	{"seen_at", TIMESTAMPTZOID, InvalidOid},
	{"expires_at", TIMESTAMPTZOID, InvalidOid},
};

/*
 * Forget the verdict on relid, or every verdict (InvalidOid): the relcache
 * callback.
 */
static void
forget_at_relation_change(Datum arg, Oid relid)
{
	int			i = 0;

	forgets++;
	while (i < nverdicts)
	{
		if (relid == InvalidOid || verdicts[i].relid == relid)
			verdicts[i] = verdicts[--nverdicts];
		else
			i++;
	}
}

static void
forget_at_function_change(Datum arg, int cacheid, uint32 hashvalue)
{
	forget_at_relation_change((Datum) 0, InvalidOid);
}

/* The kept verdict on relid: 1 or 0, or -1 if none is kept */
static int
kept_verdict(Oid relid)
{
	int			i;

	for (i = 0; i < nverdicts; i++)
		if (verdicts[i].relid == relid)
			return verdicts[i].ok ? 1 : 0;
	return -1;
}

static void
keep_verdict(Oid relid, bool ok, uint64 forgets_before)
{
	if (forgets != forgets_before)
		return;
	if (nverdicts == MAX_VERDICTS)
		nverdicts = 0;
	verdicts[nverdicts].relid = relid;
	verdicts[nverdicts].ok = ok;
	nverdicts++;
}

/*
 * Whether inbox.bucket(text, text) is keys.c's inbox_bucket_sql, called
 * as it is (no SECURITY DEFINER, no SET): then entries_bucket holds for
 * every bucket a claim computes.  Looked up without error, so that a
 * missing or renamed function means SPI, not a failed claim.
 */
static bool
bucket_function_ok(void)
{
	Oid			argtypes[2] = {TEXTOID, TEXTOID};
	List	   *name = list_make2(makeString(pstrdup(ENTRIES_BUCKET_SCHEMA)),
								  makeString(pstrdup(ENTRIES_BUCKET_FUNCTION)));
	Oid			funcid = LookupFuncName(name, 2, argtypes, true);
	FmgrInfo	flinfo;

	if (!OidIsValid(funcid))
		return false;
	fmgr_info(funcid, &flinfo);
	return flinfo.fn_addr == inbox_bucket_sql;
}

/* The one expression that sql, a canonical text of entries.h, holds */
static Node *
parse_expression(const char *sql)
{
	List	   *parsed = raw_parser(sql, RAW_PARSE_PLPGSQL_EXPR);
	SelectStmt *select;

	if (list_length(parsed) != 1)
		elog(ERROR, "inbox: not one expression: %s", sql);
	select = castNode(SelectStmt, linitial_node(RawStmt, parsed)->stmt);
	if (list_length(select->targetList) != 1 || select->fromClause != NIL ||
		select->whereClause != NULL)
		elog(ERROR, "inbox: not one expression: %s", sql);
	return linitial_node(ResTarget, select->targetList)->val;
}

/* A CHECK's canonical text, cooked as heap.c's cookConstraint does */
static Node *
cook_check(ParseState *pstate, const char *sql)
{
	Node	   *expr;

	pstate->p_sourcetext = sql;
	expr = transformExpr(pstate, parse_expression(sql), EXPR_KIND_CHECK_CONSTRAINT);
	expr = coerce_to_boolean(pstate, expr, "CHECK");
	assign_expr_collations(pstate, expr);
	return expr;
}

/*
 * Whether rel has exactly the columns, defaults and CHECK constraints of
 * entries.h, and no trigger, rule or row-level security.  The relcache
 * entry is read whole, its expressions copied, before the first catalog
 * lookup: a lookup may process an invalidation, which rebuilds the entry
 * and frees what it held.
 */
static bool
relation_matches(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);
	TupleConstr *constr = desc->constr;
	Node	   *checks[lengthof(entries_checks)];
	Node	   *defaults[Natts_entries + 1] = {0};
	ParseState *pstate;
	int			attno;
	int			i;
	bool		ok = true;

	if (rel->trigdesc != NULL || rel->rd_rules != NULL || rel->rd_rel->relrowsecurity ||
		desc->natts != Natts_entries || constr == NULL ||
		constr->num_check != (int) lengthof(entries_checks))
		return false;
	for (attno = 1; attno <= Natts_entries; attno++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, attno - 1);
		const EntriesColumn *column = &entries_columns[attno];

		if (att->attisdropped ||
			strcmp(NameStr(att->attname), column->name) != 0 ||
			att->atttypid != column->type || att->atttypmod != -1 ||
			att->attcollation != column->collation ||
			att->attnotnull != column->notnull ||
			(att->attnotnull && !inbox_not_null_valid(desc, attno - 1)) ||
			att->attidentity != '\0' || att->attgenerated != '\0' ||
			att->atthasdef != (column->default_sql != NULL))
			return false;
	}
	for (i = 0; i < constr->num_defval; i++)
	{
		AttrNumber	adnum = constr->defval[i].adnum;

		if (adnum < 1 || adnum > Natts_entries || entries_columns[adnum].default_sql == NULL)
			return false;
		defaults[adnum] = stringToNode(constr->defval[i].adbin);
	}
	for (i = 0; i < (int) lengthof(entries_checks); i++)
	{
		int			j;

		checks[i] = NULL;
		for (j = 0; j < constr->num_check; j++)
		{
			ConstrCheck *check = &constr->check[j];

			if (strcmp(check->ccname, entries_checks[i].name) != 0)
				continue;
			if (!check->ccvalid || check->ccnoinherit || !inbox_check_enforced(check))
				return false;
			checks[i] = stringToNode(check->ccbin);
		}
		if (checks[i] == NULL)
			return false;
	}

	/* From here on, catalog lookups: the relcache entry is not read again */
	if (!bucket_function_ok())
		return false;
	pstate = make_parsestate(NULL);
	addNSItemToQuery(pstate,
					 addRangeTableEntryForRelation(pstate, rel, AccessShareLock, NULL,
												   false, true),
					 true, true, true);
	for (i = 0; ok && i < (int) lengthof(entries_checks); i++)
		ok = equal(checks[i], cook_check(pstate, entries_checks[i].expression));
	for (attno = 1; ok && attno <= Natts_entries; attno++)
	{
		const EntriesColumn *column = &entries_columns[attno];

		if (column->default_sql == NULL)
			continue;
		pstate->p_sourcetext = column->default_sql;
		ok = defaults[attno] != NULL &&
			equal(defaults[attno],
				  cookDefault(pstate, parse_expression(column->default_sql), column->type, -1,
							  column->name, '\0'));
	}
	free_parsestate(pstate);
	return ok;
}

/* Whether datums, one column's range bound, is the bucket value */
static bool
bound_is(List *datums, int value)
{
	PartitionRangeDatum *datum;
	Const	   *c;

	if (list_length(datums) != 1)
		return false;
	datum = linitial_node(PartitionRangeDatum, datums);
	if (datum->kind != PARTITION_RANGE_DATUM_VALUE || !IsA(datum->value, Const))
		return false;
	c = (Const *) datum->value;
	return c->consttype == INT2OID && !c->constisnull && DatumGetInt16(c->constvalue) == value;
}

/*
 * Whether leaf is the partition of parentid for exactly the buckets whose
 * high bits are leafno: then every row written into it by bucket meets its
 * partition constraint, which direct.c does not evaluate.
 */
static bool
leaf_bound_ok(Relation leaf, int leafno, Oid parentid)
{
	Oid			relid = RelationGetRelid(leaf);
	PartitionBoundSpec *spec = NULL;
	HeapTuple	tuple;
	Datum		datum;
	bool		isnull;

	if (!leaf->rd_rel->relispartition)
		return false;
	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	datum = SysCacheGetAttr(RELOID, tuple, Anum_pg_class_relpartbound, &isnull);
	if (!isnull)
		spec = castNode(PartitionBoundSpec, stringToNode(TextDatumGetCString(datum)));
	ReleaseSysCache(tuple);
	return spec != NULL && !spec->is_default &&
		spec->strategy == PARTITION_STRATEGY_RANGE &&
		bound_is(spec->lowerdatums, leafno << INBOX_BUCKET_KEY_BITS) &&
		bound_is(spec->upperdatums, (leafno + 1) << INBOX_BUCKET_KEY_BITS) &&
		get_partition_parent(relid, true) == parentid;
}

/* Whether parent is partitioned by range of the bucket, as integers compare */
static bool
parent_key_ok(Relation parent)
{
	PartitionKey key = RelationGetPartitionKey(parent);

	return key != NULL && key->strategy == PARTITION_STRATEGY_RANGE &&
		key->partnatts == 1 && key->partattrs[0] == Anum_entries_bucket &&
		key->partopfamily[0] == INTEGER_BTREE_FAM_OID;
}

/*
 * The start and end of a verdict's making: its garbage goes into a context
 * of its own, and it is kept only if no invalidation arrived meanwhile.
 */
static MemoryContext
start_verdict(uint64 *forgets_before)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "inbox layout check",
											  ALLOCSET_SMALL_SIZES);

	if (!callbacks_registered)
	{
		CacheRegisterRelcacheCallback(forget_at_relation_change, (Datum) 0);
		CacheRegisterSyscacheCallback(PROCOID, forget_at_function_change, (Datum) 0);
		callbacks_registered = true;
	}
	*forgets_before = forgets;
	return MemoryContextSwitchTo(cxt);
}

static bool
end_verdict(MemoryContext caller_cxt, Oid relid, bool ok, uint64 forgets_before)
{
	MemoryContext cxt = MemoryContextSwitchTo(caller_cxt);

	MemoryContextDelete(cxt);
	keep_verdict(relid, ok, forgets_before);
	return ok;
}

/*
 * Whether inbox.entries (parentid, on which the caller holds a lock) is as
 * sql/inbox.sql makes it.  A claim through the parent (a batch's, with
 * inbox.direct_insert = off) applies its defaults, its triggers and its
 * row-level security, not its leaves'.
 */
bool
direct_layout_parent_ok(Oid parentid)
{
	int			kept = kept_verdict(parentid);
	uint64		forgets_before;
	MemoryContext caller_cxt;
	Relation	parent;
	bool		ok;

	if (kept >= 0)
		return kept == 1;
	caller_cxt = start_verdict(&forgets_before);
	parent = relation_open(parentid, NoLock);
	ok = parent->rd_rel->relkind == RELKIND_PARTITIONED_TABLE &&
		relation_matches(parent) && parent_key_ok(parent);
	relation_close(parent, NoLock);
	return end_verdict(caller_cxt, parentid, ok, forgets_before);
}

/*
 * Whether leaf, which leaf_relid found for leaf number leafno (by name: a
 * rename invalidates it), is as sql/inbox.sql makes it, attached to
 * inbox.entries (parentid).  The caller holds a lock on both.
 */
bool
direct_layout_leaf_ok(Relation leaf, int leafno, Oid parentid)
{
	Oid			relid = RelationGetRelid(leaf);
	int			kept = kept_verdict(relid);
	uint64		forgets_before;
	MemoryContext caller_cxt;
	bool		ok;

	if (kept >= 0)
		return kept == 1;
	caller_cxt = start_verdict(&forgets_before);
	ok = leaf->rd_rel->relkind == RELKIND_RELATION && relation_matches(leaf) &&
		leaf_bound_ok(leaf, leafno, parentid);
	return end_verdict(caller_cxt, relid, ok, forgets_before);
}

/* Whether rel, inbox.content_window, is as sql/inbox.sql makes it (above) */
static bool
content_matches(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);
	Oid			pkey;
	Relation	index;
	bool		ok;
	int			i;

	if (rel->rd_rel->relkind != RELKIND_RELATION || rel->trigdesc != NULL ||
		rel->rd_rules != NULL || rel->rd_rel->relrowsecurity ||
		desc->natts != CONTENT_WINDOW_NATTS ||
		(desc->constr != NULL && desc->constr->num_check != 0))
		return false;
	for (i = 0; i < CONTENT_WINDOW_NATTS; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped || strcmp(NameStr(att->attname), content_columns[i].name) != 0 ||
			att->atttypid != content_columns[i].type || att->atttypmod != -1 ||
			att->attcollation != content_columns[i].collation ||
			att->attidentity != '\0' || att->attgenerated != '\0')
			return false;
	}
	pkey = inbox_primary_key(rel);
	if (!OidIsValid(pkey))
		return false;
	index = index_open(pkey, AccessShareLock);
	ok = index->rd_index->indisunique && index->rd_index->indimmediate &&
		index->rd_index->indnkeyatts == 2 &&
		index->rd_index->indkey.values[0] == 1 && index->rd_index->indkey.values[1] == 2 &&
		RelationGetIndexExpressions(index) == NIL && RelationGetIndexPredicate(index) == NIL;
	index_close(index, AccessShareLock);
	return ok;
}

/*
 * Whether rel, inbox.content_window (on which the caller holds a lock), is
 * as sql/inbox.sql makes it, so that window.c may write a content's row
 * into it with its primary key as the arbiter.
 */
bool
direct_layout_content_ok(Relation rel)
{
	Oid			relid = RelationGetRelid(rel);
	int			kept = kept_verdict(relid);
	uint64		forgets_before;
	MemoryContext caller_cxt;

	if (kept >= 0)
		return kept == 1;
	caller_cxt = start_verdict(&forgets_before);
	return end_verdict(caller_cxt, relid, content_matches(rel), forgets_before);
}
