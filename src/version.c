/*-------------------------------------------------------------------------
 *
 * version.c
 *	  The handshake between this library and the SQL objects installed in
 *	  the database, after pg_stat_statements.
 *
 * "make install" replaces the library at once, in every database, while
 * each database keeps the SQL objects of the version it was created or
 * last updated at, until ALTER EXTENSION inbox UPDATE.  So the SQL of each
 * version binds C symbols of its own where the two must be able to
 * differ: versions 1.0.0 and later bind inbox_claim_1_0 and its kin,
 * 0.4.0 binds inbox_claim.  The library keeps 0.4.0's symbols and serves
 * them as 0.4.0's library does, so claims never break in between.  The
 * symbol says which SQL called; nothing is guessed from the shape of the
 * tables.  A version that only adds SQL objects binds the same symbols as
 * the one before it (1.1.0 binds 1.0.0's, and inbox_check_duration_sql,
 * inbox_cluster_counters and inbox_forget_cluster_counters besides, which
 * nothing of 1.0.0 calls), and inbox_sql_served() says which versions
 * this library serves.
 *
 * The SQL of older versions (0.1.0 to 0.3.0, never released) binds the
 * same symbols as 0.4.0.  0.4.0's entry points therefore check
 * pg_extension.extversion, and refuse any other version with an error
 * that names the versions served and the command that fixes it.  The
 * version is read once per backend and read again after any change to
 * pg_proc, which every CREATE, DROP and ALTER EXTENSION ... UPDATE makes.
 *
 * src/version.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "version.h"

/* pg_extension.extversion of inbox, or NULL: not read, or not installed */
static char *sql_version = NULL;
static bool sql_version_valid = false;

static void
sql_version_invalidate(Datum arg, int cacheid, uint32 hashvalue)
{
	sql_version_valid = false;
}

void
version_init(void)
{
	CacheRegisterSyscacheCallback(PROCOID, sql_version_invalidate, (Datum) 0);
}

/*
 * The version of the SQL objects installed in this database (a string in
 * TopMemoryContext, valid until the next call), or NULL if the extension
 * is not installed.
 */
char *
inbox_sql_version(void)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;

	if (sql_version_valid)
		return sql_version;

	if (sql_version != NULL)
		pfree(sql_version);
	sql_version = NULL;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum("inbox"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		bool		isnull;
		Datum		d = heap_getattr(tuple, Anum_pg_extension_extversion,
									 RelationGetDescr(rel), &isnull);

		if (!isnull)
			sql_version = MemoryContextStrdup(TopMemoryContext,
											  TextDatumGetCString(d));
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);

	sql_version_valid = true;
	return sql_version;
}

/*
 * Called by the entry points that 0.4.0's SQL binds: refuse to serve any
 * other version, clearly.
 */
void
inbox_require_previous_sql(void)
{
	char	   *version = inbox_sql_version();

	if (version != NULL && strcmp(version, INBOX_PREVIOUS_SQL_VERSION) == 0)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("inbox library %s cannot serve version %s of extension inbox",
					INBOX_LIBRARY_VERSION, version ? version : "(none)"),
			 errdetail("This library serves the SQL objects of version %s and of versions %s to %s.",
					   INBOX_PREVIOUS_SQL_VERSION, INBOX_CURRENT_SQL_SINCE,
					   INBOX_LIBRARY_VERSION),
			 errhint("Run ALTER EXTENSION inbox UPDATE in this database.")));
}

/*
 * -1, 0 or 1 as version a (major.minor.patch) is older than, the same as
 * or newer than version b.
 */
static int
version_cmp(const char *a, const char *b)
{
	int			va[3] = {0, 0, 0};
	int			vb[3] = {0, 0, 0};
	int			i;

	(void) sscanf(a, "%d.%d.%d", &va[0], &va[1], &va[2]);
	(void) sscanf(b, "%d.%d.%d", &vb[0], &vb[1], &vb[2]);
	for (i = 0; i < 3; i++)
	{
		if (va[i] != vb[i])
			return va[i] < vb[i] ? -1 : 1;
	}
	return 0;
}

/*
 * Does this library serve the SQL objects of this version?  0.4.0's,
 * through the entry points it binds, and every version from
 * INBOX_CURRENT_SQL_SINCE to INBOX_LIBRARY_VERSION, which bind the
 * current entry points.
 */
bool
inbox_sql_served(const char *version)
{
	return strcmp(version, INBOX_PREVIOUS_SQL_VERSION) == 0 ||
		(version_cmp(version, INBOX_CURRENT_SQL_SINCE) >= 0 &&
		 version_cmp(version, INBOX_LIBRARY_VERSION) <= 0);
}

/*
 * Is the SQL installed in this database older than version (major.minor.
 * patch)?  For the features whose steps call SQL functions that a later
 * version added: a database not yet updated is served the way its own
 * release served it.  False when the extension is not installed.
 */
bool
inbox_sql_older_than(const char *version)
{
	const char *installed = inbox_sql_version();

	if (installed == NULL)
		return false;
	return version_cmp(installed, version) < 0;
}
