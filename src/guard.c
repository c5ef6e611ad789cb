/*-------------------------------------------------------------------------
 *
 * guard.c
 *	  Dropping the extension never destroys the deduplication history by
 *	  accident.
 *
 * The inbox's entries are the memory of what was already paid, shipped or
 * booked: dropping them turns every later redelivery into a new message.
 * A plain DROP EXTENSION would delete them silently, because the tables
 * belong to the extension, and so would DROP OWNED BY the extension's
 * owner.  So an event trigger, itself a member of the extension, inspects
 * each of the commands that can drop it before it runs:
 *
 *	- DROP EXTENSION naming inbox, or DROP OWNED BY its owner, without
 *	  CASCADE, while entries exist: refused with 2BP01, the error of a DROP
 *	  that something still depends on;
 *	- the same with CASCADE, or DROP SCHEMA ... CASCADE of a schema the
 *	  extension lives in (without CASCADE that fails anyway): a WARNING that
 *	  says what goes with it.
 *
 * An event trigger is used rather than a ProcessUtility hook because the
 * trigger lives in the catalog and fires in every session, whether or not
 * the library was preloaded there.  It fires at ddl_command_start, the
 * only event that runs before the objects are gone (an extension's own
 * sql_drop trigger is dropped with it and never fires).
 *
 * The check takes the ACCESS EXCLUSIVE lock on inbox.entries that the drop
 * would take anyway, then looks with the latest snapshot: otherwise a claim
 * committing while the DROP waits for its locks, or after the DROP's
 * snapshot was taken, would be dropped unseen.
 *
 * What steps around it is deliberate: ALTER EVENT TRIGGER ... DISABLE,
 * session_replication_role = replica, event_triggers = off (PostgreSQL 17),
 * or single-user mode, where event triggers do not run.
 *
 * src/guard.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/event_trigger.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"

#include "distributed.h"
#include "inbox.h"
#include "spi.h"

PG_FUNCTION_INFO_V1(inbox_guard_drop);

/* What a command would do to the extension */
typedef enum DropKind
{
	DROPS_NOTHING,
	DROPS_RESTRICT,				/* drops it unless refused here */
	DROPS_CASCADE				/* drops it, as asked explicitly */
} DropKind;

/* The extension's owner and schema, read from pg_extension */
typedef struct InboxExtension
{
	Oid			owner;
	char	   *schema;
} InboxExtension;

static bool
read_extension(InboxExtension *ext)
{
	MemoryContext callercxt = CurrentMemoryContext;
	bool		found = false;
	bool		isnull;

	inbox_spi_connect();
	if (inbox_execute_once("SELECT extowner, extnamespace::pg_catalog.regnamespace::pg_catalog.text"
						   " FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'inbox'",
						   0, NULL, NULL, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read pg_extension");
	if (SPI_processed == 1)
	{
		ext->owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0],
													SPI_tuptable->tupdesc, 1, &isnull));
		/*
		 * SPI_getvalue allocates in SPI's procedure context, which is also
		 * CurrentMemoryContext here, and SPI_finish frees it: copy into the
		 * caller's context.
		 */
		ext->schema = MemoryContextStrdup(callercxt,
										  SPI_getvalue(SPI_tuptable->vals[0],
													   SPI_tuptable->tupdesc, 2));
		found = true;
	}
	SPI_finish();
	return found;
}

/* What the statement would do to the extension */
static DropKind
classify(Node *parsetree, InboxExtension *ext)
{
	ListCell   *lc;

	if (IsA(parsetree, DropStmt))
	{
		DropStmt   *stmt = (DropStmt *) parsetree;
		DropKind	kind = stmt->behavior == DROP_CASCADE ? DROPS_CASCADE : DROPS_RESTRICT;

		if (stmt->removeType == OBJECT_EXTENSION)
		{
			foreach(lc, stmt->objects)
				if (strcmp(strVal(lfirst(lc)), "inbox") == 0)
					return kind;
		}
		else if (stmt->removeType == OBJECT_SCHEMA && kind == DROPS_CASCADE)
		{
			/*
			 * The extension's schema, or schema inbox, which holds its
			 * tables.  Without CASCADE either drop fails on its own.
			 */
			foreach(lc, stmt->objects)
			{
				char	   *name = strVal(lfirst(lc));

				if (strcmp(name, "inbox") == 0 || strcmp(name, ext->schema) == 0)
					return kind;
			}
		}
	}
	else if (IsA(parsetree, DropOwnedStmt))
	{
		DropOwnedStmt *stmt = (DropOwnedStmt *) parsetree;

		foreach(lc, stmt->roles)
			if (get_rolespec_oid(lfirst(lc), true) == ext->owner)
				return stmt->behavior == DROP_CASCADE ? DROPS_CASCADE : DROPS_RESTRICT;
	}
	return DROPS_NOTHING;
}

/* True if inbox.entries holds a committed entry, or one committing now */
static bool
has_entries(void)
{
	Oid			entries = inbox_relid("entries");
	bool		result;
	bool		isnull;

	if (!OidIsValid(entries))
		return false;
	/* Waits for every transaction writing entries, as the DROP would */
	LockRelationOid(entries, AccessExclusiveLock);

	inbox_spi_connect();
	PushActiveSnapshot(GetLatestSnapshot());
	/* A target list, because Citus cannot plan an empty one (scale-out.md) */
	if (inbox_execute_once("SELECT EXISTS (SELECT 1 FROM inbox.entries)",
						   0, NULL, NULL, NULL, true, 0) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not look into inbox.entries");
	result = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
										SPI_tuptable->tupdesc, 1, &isnull));
	PopActiveSnapshot();
	SPI_finish();
	return result;
}

Datum
inbox_guard_drop(PG_FUNCTION_ARGS)
{
	EventTriggerData *trigdata;
	InboxExtension ext;
	DropKind	kind;

	if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("inbox.guard_drop() must be called as an event trigger")));
	trigdata = (EventTriggerData *) fcinfo->context;
	if (trigdata->parsetree == NULL || !read_extension(&ext))
		PG_RETURN_VOID();

	kind = classify(trigdata->parsetree, &ext);
	if (kind == DROPS_NOTHING)
		PG_RETURN_VOID();

	/*
	 * Someone who may not drop the extension (who lacks its owner's
	 * privileges: the extension's ownership check) gets PostgreSQL's own
	 * error from the command, not a permission error from looking into its
	 * tables.
	 */
	if (!has_privs_of_role(GetUserId(), ext.owner))
		PG_RETURN_VOID();

	if (has_entries())
	{
		if (kind == DROPS_RESTRICT)
			ereport(ERROR,
					(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
					 errmsg("cannot drop extension inbox because it still holds inbox entries"),
					 errdetail("They are the deduplication history: without them, every redelivered message would be processed again."),
					 errhint("Use %s CASCADE to drop the history too, after pg_dump if it may be needed again.",
							 IsA(trigdata->parsetree, DropOwnedStmt) ? "DROP OWNED BY ..." : "DROP EXTENSION inbox")));

		ereport(WARNING,
				(errmsg("dropping the deduplication history with extension inbox"),
				 errdetail("Messages redelivered after this will be processed again.")));
	}

	/*
	 * On Citus, the distributed tables go first, detached from the
	 * extension, or the drop fails inside Citus (sql/inbox.sql says why).
	 * Still in the command's transaction: if it fails, they come back.
	 */
	if (inbox_entries_distributed())
	{
		inbox_spi_connect();
		if (inbox_execute_once("SELECT inbox.citus_drop_tables()",
							   0, NULL, NULL, NULL, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not drop the distributed tables of extension inbox");
		SPI_finish();
	}
	PG_RETURN_VOID();
}
