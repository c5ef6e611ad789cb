/*-------------------------------------------------------------------------
 *
 * guard.c
 *	  DROP EXTENSION inbox refuses to destroy the deduplication history.
 *
 * The inbox's entries are the memory of what was already paid, shipped or
 * booked: dropping them turns every later redelivery into a new message.
 * A plain DROP EXTENSION would delete them silently, because the tables
 * belong to the extension.  So an event trigger, itself a member of the
 * extension, inspects every DROP EXTENSION before it runs: when it names
 * inbox without CASCADE and entries exist, it raises 2BP01, the error of a
 * DROP that something still depends on.  With CASCADE the drop goes ahead,
 * with a WARNING that says what goes with it.
 *
 * An event trigger is used rather than a ProcessUtility hook because the
 * trigger lives in the catalog and fires in every session, whether or not
 * the library was preloaded there.  It fires at ddl_command_start, the
 * only event that runs before the objects are gone (an extension's own
 * sql_drop trigger is dropped with it and never fires).  A superuser can
 * still step around it deliberately: ALTER EVENT TRIGGER ... DISABLE, or
 * single-user mode, where event triggers do not run.
 *
 * src/guard.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/event_trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "nodes/parsenodes.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(inbox_guard_drop);

/* True if the statement is a DROP EXTENSION that names inbox */
static bool
drops_inbox(Node *parsetree)
{
	DropStmt   *stmt;
	ListCell   *lc;

	if (parsetree == NULL || !IsA(parsetree, DropStmt))
		return false;
	stmt = (DropStmt *) parsetree;
	if (stmt->removeType != OBJECT_EXTENSION)
		return false;
	foreach(lc, stmt->objects)
	{
		if (strcmp(strVal(lfirst(lc)), "inbox") == 0)
			return true;
	}
	return false;
}

Datum
inbox_guard_drop(PG_FUNCTION_ARGS)
{
	EventTriggerData *trigdata;
	DropStmt   *stmt;
	bool		has_entries;
	bool		isnull;

	if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("inbox.guard_drop() must be called as an event trigger")));
	trigdata = (EventTriggerData *) fcinfo->context;
	if (!drops_inbox(trigdata->parsetree))
		PG_RETURN_VOID();
	stmt = (DropStmt *) trigdata->parsetree;

	/*
	 * Only whether any entry exists: on a large inbox an exact count would
	 * keep the DROP waiting for a full scan.
	 */
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute("SELECT EXISTS (SELECT FROM inbox.entries)", true, 0) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not look into inbox.entries");
	has_entries = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
											 SPI_tuptable->tupdesc, 1, &isnull));
	SPI_finish();

	if (!has_entries)
		PG_RETURN_VOID();

	if (stmt->behavior != DROP_CASCADE)
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("cannot drop extension inbox because it still holds inbox entries"),
				 errdetail("They are the deduplication history: without them, every redelivered message would be processed again."),
				 errhint("Use DROP EXTENSION inbox CASCADE to drop the history too, after pg_dump if it may be needed again.")));

	ereport(WARNING,
			(errmsg("dropping the deduplication history with extension inbox"),
			 errdetail("Messages redelivered after this will be processed again.")));
	PG_RETURN_VOID();
}
