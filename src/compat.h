/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  Every difference between the PostgreSQL versions the extension builds
 *	  against (15 to 18), in one place.  Only APIs that really changed
 *	  belong here; the rest of the code calls the names defined below.
 *
 * src/compat.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_COMPAT_H
#define INBOX_COMPAT_H

#include "access/genam.h"
#include "access/tableam.h"
#include "access/tupdesc.h"
#include "catalog/pg_database.h"
#include "datatype/timestamp.h"
#include "executor/executor.h"
#include "storage/lock.h"
#include "utils/relcache.h"
#include "utils/guc.h"

#if PG_VERSION_NUM < 150000
#error "inbox requires PostgreSQL 15 or later"
#endif

/*
 * From 16 on, postgres.h no longer includes varatt.h, which defines
 * VARDATA_ANY and its kin.
 */
#if PG_VERSION_NUM >= 160000
#include "varatt.h"
#endif

/*
 * The "extra" of a GUC check hook: plain malloc before 16, where GUC memory
 * moved into a memory context of its own and must come from guc_malloc.
 */
static inline void *
inbox_guc_malloc(size_t size)
{
#if PG_VERSION_NUM >= 160000
	return guc_malloc(LOG, size);
#else
	return malloc(size);
#endif
}

static inline void
inbox_guc_free(void *ptr)
{
#if PG_VERSION_NUM >= 160000
	guc_free(ptr);
#else
	free(ptr);
#endif
}

/*
 * A database left invalid by an interrupted DROP DATABASE cannot be
 * connected to.  The marker came with minor releases of 15 and 16
 * (15.4, 16.0), so it is tested for by name, not by version.
 */
static inline bool
inbox_database_is_invalid(Form_pg_database form)
{
#ifdef DATCONNLIMIT_INVALID_DB
	return form->datconnlimit == DATCONNLIMIT_INVALID_DB;
#else
	return false;
#endif
}

/* Intervals can be infinite ('infinity', '-infinity') from 17 on */
static inline bool
inbox_interval_is_finite(const Interval *i)
{
#if PG_VERSION_NUM >= 170000
	return !INTERVAL_NOT_FINITE(i);
#else
	return true;
#endif
}

/* LockHeldByMe grew an "or stronger" flag in 17 */
static inline bool
inbox_lock_held(const LOCKTAG *tag, LOCKMODE mode)
{
#if PG_VERSION_NUM >= 170000
	return LockHeldByMe(tag, mode, false);
#else
	return LockHeldByMe(tag, mode);
#endif
}

/*
 * The executor's routines of a speculative insertion (direct.c).
 * ExecInsertIndexTuples took "onlySummarizing" in 16;
 * ExecCheckIndexConstraints took the TID of a tuple to ignore in 18.
 */
static inline List *
inbox_insert_index_tuples(ResultRelInfo *rri, TupleTableSlot *slot, EState *estate,
						  bool *spec_conflict, List *arbiter)
{
#if PG_VERSION_NUM >= 160000
	return ExecInsertIndexTuples(rri, slot, estate, false, true, spec_conflict, arbiter, false);
#else
	return ExecInsertIndexTuples(rri, slot, estate, false, true, spec_conflict, arbiter);
#endif
}

static inline bool
inbox_check_index_constraints(ResultRelInfo *rri, TupleTableSlot *slot, EState *estate,
							  ItemPointer conflict_tid, List *arbiter)
{
#if PG_VERSION_NUM >= 180000
	return ExecCheckIndexConstraints(rri, slot, estate, conflict_tid, NULL, arbiter);
#else
	return ExecCheckIndexConstraints(rri, slot, estate, conflict_tid, arbiter);
#endif
}

/*
 * table_tuple_update (direct.c's completion, which never has a crosscheck
 * snapshot and always waits): in 16 its "update_indexes" became which
 * indexes need entries, all or only the summarizing ones, and
 * ExecInsertIndexTuples took "onlySummarizing" to match.
 */
#define INBOX_UPDATE_INDEXES_NONE			0
#define INBOX_UPDATE_INDEXES_ALL			1
#define INBOX_UPDATE_INDEXES_SUMMARIZING	2

static inline TM_Result
inbox_tuple_update(Relation rel, ItemPointer otid, TupleTableSlot *slot, CommandId cid,
				   Snapshot snapshot, TM_FailureData *tmfd, LockTupleMode *lockmode,
				   int *index_mode)
{
	TM_Result	result;
#if PG_VERSION_NUM >= 160000
	TU_UpdateIndexes update_indexes;

	result = table_tuple_update(rel, otid, slot, cid, snapshot, InvalidSnapshot, true,
								tmfd, lockmode, &update_indexes);
	*index_mode = update_indexes == TU_None ? INBOX_UPDATE_INDEXES_NONE :
		update_indexes == TU_Summarizing ? INBOX_UPDATE_INDEXES_SUMMARIZING :
		INBOX_UPDATE_INDEXES_ALL;
#else
	bool		update_indexes;

	result = table_tuple_update(rel, otid, slot, cid, snapshot, InvalidSnapshot, true,
								tmfd, lockmode, &update_indexes);
	*index_mode = update_indexes ? INBOX_UPDATE_INDEXES_ALL : INBOX_UPDATE_INDEXES_NONE;
#endif
	return result;
}

static inline List *
inbox_update_index_tuples(ResultRelInfo *rri, TupleTableSlot *slot, EState *estate,
						  bool only_summarizing)
{
#if PG_VERSION_NUM >= 160000
	return ExecInsertIndexTuples(rri, slot, estate, true, false, NULL, NIL, only_summarizing);
#else
	Assert(!only_summarizing);
	return ExecInsertIndexTuples(rri, slot, estate, true, false, NULL, NIL);
#endif
}

/* The primary key of a table; 18 can leave out a deferrable one (direct.c) */
static inline Oid
inbox_primary_key(Relation rel)
{
#if PG_VERSION_NUM >= 180000
	return RelationGetPrimaryKeyIndex(rel, false);
#else
	return RelationGetPrimaryKeyIndex(rel);
#endif
}

/* index_beginscan took the scan's instrumentation in 18 (direct.c) */
static inline IndexScanDesc
inbox_index_beginscan(Relation heap, Relation index, Snapshot snapshot, int nkeys)
{
#if PG_VERSION_NUM >= 180000
	return index_beginscan(heap, index, snapshot, NULL, nkeys, 0);
#else
	return index_beginscan(heap, index, snapshot, nkeys, 0);
#endif
}

/*
 * What a table's constraints enforce (direct_layout.c).  18 has NOT NULL
 * constraints that are NOT VALID (attnotnull is set, but rows from before
 * may hold NULLs), and CHECK constraints that are NOT ENFORCED.
 */
static inline bool
inbox_not_null_valid(TupleDesc desc, int i)
{
#ifdef ATTNULLABLE_VALID
	return TupleDescCompactAttr(desc, i)->attnullability == ATTNULLABLE_VALID;
#else
	return true;
#endif
}

static inline bool
inbox_check_enforced(const ConstrCheck *check)
{
#if PG_VERSION_NUM >= 180000
	return check->ccenforced;
#else
	return true;
#endif
}

/*
 * Whether the client is still connected (libpq/pqcomm.c, the same in 15 to
 * 18).  Its header, libpq/libpq.h, includes libpq-be.h, and with it the
 * GSSAPI headers of a server built with GSSAPI, which a build machine need
 * not have: declared here instead.
 */
extern bool pq_check_connection(void);

#endif							/* INBOX_COMPAT_H */
