/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  Shims for the PostgreSQL APIs that differ between the versions the
 *	  extension builds against (13 to 18).  Only APIs that really changed
 *	  belong here.
 *
 * src/compat.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_COMPAT_H
#define INBOX_COMPAT_H

#include "funcapi.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/tuplestore.h"

/*
 * HASH_STRINGS (14) names what was the default before: without HASH_BLOBS
 * or HASH_FUNCTION, dynahash treated keys as C strings.
 */
#if PG_VERSION_NUM < 140000
#define HASH_STRINGS 0
#endif

/* MarkGUCPrefixReserved replaced EmitWarningsOnPlaceholders in 15 */
#if PG_VERSION_NUM < 150000
#define MarkGUCPrefixReserved(prefix) EmitWarningsOnPlaceholders(prefix)
#endif

/*
 * InitMaterializedSRF (15) sets up a set-returning function in materialize
 * mode; before 15 every caller wrote it out.  This is the same setup, for
 * flags = 0.
 */
#if PG_VERSION_NUM < 150000
static inline void
InitMaterializedSRF(FunctionCallInfo fcinfo, bits32 flags)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TupleDesc	tupdesc;
	MemoryContext oldcxt;

	if (rsinfo == NULL || !IsA(rsinfo, ReturnSetInfo) ||
		(rsinfo->allowedModes & SFRM_Materialize) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("set-valued function called in context that cannot accept a set")));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	oldcxt = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
	rsinfo->setDesc = CreateTupleDescCopy(tupdesc);
	rsinfo->setResult = tuplestore_begin_heap(true, false, work_mem);
	MemoryContextSwitchTo(oldcxt);
	rsinfo->returnMode = SFRM_Materialize;
}
#endif

#endif							/* INBOX_COMPAT_H */
