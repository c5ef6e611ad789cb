/*-------------------------------------------------------------------------
 *
 * access.c
 *	  Who may act on a scope: the API's entry points and the scope grants.
 *
 * Every API function that names a scope is a small SECURITY INVOKER entry
 * point, implemented here, in front of a SECURITY DEFINER implementation of
 * the same name and arguments in schema inbox.  The split exists because of
 * how SECURITY DEFINER works: fmgr_security_definer() switches to the
 * owner's role before the function body runs and keeps the caller's role
 * only in a local variable, so a SECURITY DEFINER function cannot tell who
 * called it.  GetOuterUserId() is no substitute: it honours SET ROLE, but
 * looks straight through an application's own SECURITY DEFINER function to
 * the session's role.  The entry point still runs as the role that called
 * it (after SET ROLE, or inside an application's SECURITY DEFINER
 * function, the role that function runs as), so it checks the scope grants
 * for that role and then calls the implementation through the function
 * manager, which performs the switch to the extension's owner and pins the
 * search_path exactly as a direct call would.
 *
 * The implementations are not executable by anyone but their owner, and
 * schema inbox is not visible to PUBLIC: the entry points reach them
 * through fmgr_info(), which, like any internal call, checks no EXECUTE
 * privilege.  So the check here cannot be bypassed by calling the
 * implementation directly.
 *
 * Scope grants live in inbox.scope_grants.  A scope with no row there is
 * open to every role that may execute the API; once it has one, only the
 * granted roles and the roles that have their privileges (members with
 * INHERIT, and superusers) may use it.  The table is read on every call of
 * every entry point, so each backend caches it whole (it holds a few rows
 * per scope at most) and drops the cache on a relcache invalidation of the
 * table, which a statement trigger on the table sends at every change.
 *
 * In the SQL of 1.0.0 and later, a grant names its role by name, as
 * pg_dump names roles in every ACL, and the cache resolves names to roles
 * when it loads: a restore into another cluster finds the same roles, and
 * a grant whose role does not exist (dropped, or not created before the
 * restore) keeps its scope closed and matches nobody.  The cache is
 * dropped whenever a role is created, renamed or dropped.  In a database
 * still at 0.4.0, whose table stores the role's OID (a regrole), the grant
 * is read as such.
 *
 * src/access.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_language.h"
#include "catalog/pg_proc.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "claim.h"
#include "compat.h"
#include "forget.h"
#include "inbox.h"
#include "keys.h"
#include "spi.h"
#include "version.h"

PG_FUNCTION_INFO_V1(inbox_enter_scope);
PG_FUNCTION_INFO_V1(inbox_enter_admin);
PG_FUNCTION_INFO_V1(inbox_enter_forget);
PG_FUNCTION_INFO_V1(inbox_enter_rows);
PG_FUNCTION_INFO_V1(inbox_caller_sees);
PG_FUNCTION_INFO_V1(inbox_scope_grants_changed);
PG_FUNCTION_INFO_V1(inbox_scope_visible);

/* What an entry point keeps between calls, in its FmgrInfo's fn_extra */
typedef struct EntryPoint
{
	FmgrInfo	impl;			/* the implementation in schema inbox */
	char	   *name;			/* the function's name, for messages */
	Oid			owner;			/* the implementation's owner */
	bool		direct_claim;	/* inbox_claim of this release: see below */
} EntryPoint;

/* One scope that has grants, and the roles granted it */
typedef struct ScopeGrants
{
	char		scope[INBOX_MAX_SCOPE_BYTES + 1];	/* hash key */
	List	   *roles;			/* Oids, allocated in grants_cxt */
} ScopeGrants;

/* The backend's copy of inbox.scope_grants; valid only if grants_valid */
static HTAB *grants_cache = NULL;
static MemoryContext grants_cxt = NULL;
static bool grants_valid = false;
static Oid	grants_relid = InvalidOid;
static bool grants_callback_registered = false;

static void
grants_invalidate(Datum arg, Oid relid)
{
	/*
	 * Only mark the cache stale: a callback may run in the middle of a
	 * lookup, so the memory is freed by the next load, not here.  InvalidOid
	 * means "every relation" (a cache reset).
	 */
	if (relid == InvalidOid || relid == grants_relid)
		grants_valid = false;
}

/* A role was created, renamed or dropped: names resolve differently */
static void
grants_roles_changed(Datum arg, int cacheid, uint32 hashvalue)
{
	grants_valid = false;
}

/*
 * inbox.scope_grants' OID, found again on each load: the extension may have
 * been dropped and created again since the last one.
 */
static Oid
grants_table(void)
{
	Oid			relid = inbox_relid("scope_grants");

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table inbox.scope_grants does not exist"),
				 errdetail("Extension inbox is not installed in this database, or is being dropped.")));
	return relid;
}

/* The owner of a relation: the extension's owner, for its tables */
static Oid
rel_owner(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	return owner;
}

/*
 * Reading the extension's tables for a caller who may not read them
 * (application roles cannot): as their owner, with the search_path pinned
 * like the API's, in an SPI connection.  as_owner_end restores both; an
 * error restores them by the transaction's abort.
 */
typedef struct AsOwner
{
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;
} AsOwner;

static void
as_owner_begin(AsOwner *as, Oid owner)
{
	GetUserIdAndSecContext(&as->save_userid, &as->save_sec_context);
	SetUserIdAndSecContext(owner, as->save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	as->save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
	inbox_spi_connect();
}

static void
as_owner_end(AsOwner *as)
{
	SPI_finish();
	AtEOXact_GUC(true, as->save_nestlevel);
	SetUserIdAndSecContext(as->save_userid, as->save_sec_context);
}

/* Load inbox.scope_grants into the cache, as its owner */
static void
grants_load(void)
{
	AsOwner		as;
	HASHCTL		ctl;
	uint64		i;
	char	   *version;
	bool		by_oid;

	if (!grants_callback_registered)
	{
		CacheRegisterRelcacheCallback(grants_invalidate, (Datum) 0);
		CacheRegisterSyscacheCallback(AUTHOID, grants_roles_changed, (Datum) 0);
		grants_callback_registered = true;
	}
	if (grants_cxt == NULL)
		grants_cxt = AllocSetContextCreate(TopMemoryContext, "inbox scope grants",
										   ALLOCSET_SMALL_SIZES);
	MemoryContextReset(grants_cxt);
	grants_cache = NULL;

	/*
	 * Valid from here on, unless an invalidation arrives while loading.
	 * Locking the table processes every invalidation already queued, and
	 * the rows are then read with the latest snapshot, not the caller's:
	 * a snapshot older than a change whose invalidation was just consumed
	 * would cache the old rows, marked valid, until the next change.  (A
	 * REPEATABLE READ transaction holds such a snapshot.)  Access rules,
	 * like the catalogs, are read as they are now.
	 */
	grants_valid = true;
	grants_relid = grants_table();
	LockRelationOid(grants_relid, AccessShareLock);

	ctl.keysize = INBOX_MAX_SCOPE_BYTES + 1;
	ctl.entrysize = sizeof(ScopeGrants);
	ctl.hcxt = grants_cxt;
	grants_cache = hash_create("inbox scope grants", 16, &ctl,
							   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);

	as_owner_begin(&as, rel_owner(grants_relid));
	/* read_only: SPI then uses the active snapshot, pushed here */
	PushActiveSnapshot(GetLatestSnapshot());
	version = inbox_sql_version();
	by_oid = version != NULL && strcmp(version, INBOX_PREVIOUS_SQL_VERSION) == 0;
	if (inbox_execute_once(by_oid
						   ? "SELECT scope, grantee::pg_catalog.oid::pg_catalog.text FROM inbox.scope_grants"
						   : "SELECT scope, grantee FROM inbox.scope_grants",
						   0, NULL, NULL, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read inbox.scope_grants");
	PopActiveSnapshot();

	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		found;
		char	   *scope = SPI_getvalue(tup, desc, 1);
		char	   *grantee = SPI_getvalue(tup, desc, 2);
		Oid			role;
		ScopeGrants *entry;
		MemoryContext oldcxt;

		/* The table's CHECK keeps scopes within the limit */
		if (scope == NULL || grantee == NULL || strlen(scope) > INBOX_MAX_SCOPE_BYTES)
			continue;
		/* A role that does not exist matches nobody, and keeps the scope closed */
		role = by_oid ? (Oid) strtoul(grantee, NULL, 10) : get_role_oid(grantee, true);
		entry = hash_search(grants_cache, scope, HASH_ENTER, &found);
		if (!found)
			entry->roles = NIL;
		oldcxt = MemoryContextSwitchTo(grants_cxt);
		entry->roles = lappend_oid(entry->roles, role);
		MemoryContextSwitchTo(oldcxt);
	}

	as_owner_end(&as);
}

/*
 * May the role act on the scope?  True if the scope has no grants, or if one
 * of its grantees' privileges are the role's (has_privs_of_role: members
 * with INHERIT, and superusers, who have every role's privileges).
 */
static bool
scope_allowed(Datum scope_datum, Oid role)
{
	text	   *scope_text;
	int			len;
	char		scope[INBOX_MAX_SCOPE_BYTES + 1];
	ScopeGrants *entry;
	ListCell   *lc;

	/*
	 * No grant can name a longer scope (the table's CHECK).  The size is
	 * read from the header, so that a huge value is not detoasted here just
	 * to be refused by the implementation, which does not detoast it.
	 */
	if (toast_raw_datum_size(scope_datum) - VARHDRSZ > INBOX_MAX_SCOPE_BYTES)
		return true;
	scope_text = DatumGetTextPP(scope_datum);
	len = VARSIZE_ANY_EXHDR(scope_text);

	/*
	 * Apply the invalidations queued since this backend last looked, so
	 * that a grant or revoke committed elsewhere counts from the next call,
	 * even in a transaction that began before it.  Without this, a backend
	 * that already holds its locks would process them only at its next
	 * transaction.  When nothing is queued this costs a read of a counter.
	 */
	AcceptInvalidationMessages();

	if (!grants_valid)
	{
		PG_TRY();
		{
			grants_load();
		}
		PG_CATCH();
		{
			/* A half-loaded cache must not be trusted by the next call */
			grants_valid = false;
			PG_RE_THROW();
		}
		PG_END_TRY();
	}
	if (hash_get_num_entries(grants_cache) == 0)
		return true;

	memcpy(scope, VARDATA_ANY(scope_text), len);
	scope[len] = '\0';
	/* A scope with an embedded NUL cannot exist: text has none */
	entry = hash_search(grants_cache, scope, HASH_FIND, NULL);
	if (entry == NULL)
		return true;

	foreach(lc, entry->roles)
	{
		/* InvalidOid, a missing role, is nobody's: only superusers pass */
		if (has_privs_of_role(role, lfirst_oid(lc)))
			return true;
	}
	return false;
}

/*
 * Raise 42501 unless the current role may act on the scope in argument 0.
 * A NULL or oversized scope passes: the implementation rejects it with its
 * own, more precise, error.
 */
static void
check_scope(FunctionCallInfo fcinfo)
{
	text	   *scope_text;
	Oid			caller = GetUserId();

	if (PG_ARGISNULL(0))
		return;
	if (scope_allowed(PG_GETARG_DATUM(0), caller))
		return;
	scope_text = PG_GETARG_TEXT_PP(0);

	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied for inbox scope \"%s\"",
					inbox_quote(scope_text)),
			 errdetail("Role \"%s\" is not granted this scope, and the scope has grants.",
					   GetUserNameFromId(caller, false)),
			 errhint("The extension's owner or a superuser grants a scope with inbox_grant(scope, role).")));
}

/*
 * inbox.scope_visible(scope): whether the current role may act on the
 * scope.  The views inbox_stats and inbox_dead_letters filter on it: a view
 * reads its tables as its owner, but calls functions as the role querying
 * it, so an operator sees the scopes open to it and no others.
 */
Datum
inbox_scope_visible(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(scope_allowed(PG_GETARG_DATUM(0), GetUserId()));
}

/*
 * The role that called the inbox_enter_rows entry point whose
 * implementation runs now; InvalidOid outside one.
 */
static Oid	rows_caller = InvalidOid;

/*
 * inbox.caller_sees(scope): whether the role that called the API may act
 * on the scope, for an implementation that finds its scope in the rows it
 * reads (see inbox_enter_rows).  Outside such a call, the current role's
 * answer, as inbox.scope_visible gives it.
 */
Datum
inbox_caller_sees(PG_FUNCTION_ARGS)
{
	Oid			role = OidIsValid(rows_caller) ? rows_caller : GetUserId();

	PG_RETURN_BOOL(scope_allowed(PG_GETARG_DATUM(0), role));
}

/*
 * Raise 42501 unless the current role has the privileges of the owner of
 * the extension's tables (the extension's owner, its members, or a
 * superuser): what an ownership check of those tables tests.
 */
static void
check_admin(const char *name)
{
	Oid			caller = GetUserId();

	if (!has_privs_of_role(caller, rel_owner(grants_table())))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to change the grants of inbox scopes"),
				 errdetail("Only the owner of extension inbox or a superuser may call %s; role \"%s\" is neither.",
						   name, GetUserNameFromId(caller, false))));
}

/*
 * Whether the function of proctup runs inbox_claim_1_0, the claim that the
 * entry point may decide itself (see inbox_enter_scope): judged by the C
 * function its library symbol resolves to, not by its name.
 *
 * An entry point finds its implementation at every executor start, so the
 * verdicts are kept for the backend, each with the version of the pg_proc
 * row it was reached on, as fmgr keeps its own lookups of C functions: a
 * CREATE OR REPLACE writes a new version, whose verdict is made anew.
 */
#define CLAIM_VERDICTS 32

typedef struct ClaimVerdict
{
	Oid			oid;
	TransactionId xmin;
	ItemPointerData tid;
	bool		runs_claim;
} ClaimVerdict;

static ClaimVerdict claim_verdicts[CLAIM_VERDICTS];
static int	n_claim_verdicts = 0;

static bool
runs_claim(HeapTuple proctup)
{
	Form_pg_proc proc = (Form_pg_proc) GETSTRUCT(proctup);
	TransactionId xmin = HeapTupleHeaderGetRawXmin(proctup->t_data);
	Datum		prosrc;
	Datum		probin;
	bool		isnull;
	bool		verdict = false;

	if (proc->prolang != ClanguageId)
		return false;
	for (int i = 0; i < n_claim_verdicts; i++)
	{
		ClaimVerdict *v = &claim_verdicts[i];

		if (v->oid == proc->oid && v->xmin == xmin && ItemPointerEquals(&v->tid, &proctup->t_self))
			return v->runs_claim;
	}

	prosrc = SysCacheGetAttr(PROCOID, proctup, Anum_pg_proc_prosrc, &isnull);
	if (!isnull)
	{
		probin = SysCacheGetAttr(PROCOID, proctup, Anum_pg_proc_probin, &isnull);
		if (!isnull)
			verdict = load_external_function(TextDatumGetCString(probin),
											 TextDatumGetCString(prosrc),
											 false, NULL) == (void *) inbox_claim_1_0;
	}
	if (n_claim_verdicts < CLAIM_VERDICTS)
	{
		ClaimVerdict *v = &claim_verdicts[n_claim_verdicts++];

		v->oid = proc->oid;
		v->xmin = xmin;
		v->tid = proctup->t_self;
		v->runs_claim = verdict;
	}
	return verdict;
}

/*
 * Find this entry point's implementation: the function of the same name
 * and argument types in schema inbox.
 */
static EntryPoint *
entry_for(FunctionCallInfo fcinfo)
{
	FmgrInfo   *flinfo = fcinfo->flinfo;
	EntryPoint *entry = (EntryPoint *) flinfo->fn_extra;
	HeapTuple	proctup;
	HeapTuple	impltup;
	Form_pg_proc proc;
	Oid			impl;

	if (entry != NULL)
		return entry;

	proctup = SearchSysCache1(PROCOID, ObjectIdGetDatum(flinfo->fn_oid));
	if (!HeapTupleIsValid(proctup))
		elog(ERROR, "cache lookup failed for function %u", flinfo->fn_oid);
	proc = (Form_pg_proc) GETSTRUCT(proctup);

	/*
	 * Looked up in the catalog directly: the role calling may not look into
	 * schema inbox, and need not.
	 */
	impltup = SearchSysCache3(PROCNAMEARGSNSP,
							  PointerGetDatum(&proc->proname),
							  PointerGetDatum(&proc->proargtypes),
							  ObjectIdGetDatum(get_namespace_oid("inbox", false)));
	impl = InvalidOid;
	entry = MemoryContextAllocZero(flinfo->fn_mcxt, sizeof(EntryPoint));
	if (HeapTupleIsValid(impltup))
	{
		Form_pg_proc implproc = (Form_pg_proc) GETSTRUCT(impltup);

		impl = implproc->oid;
		entry->owner = implproc->proowner;
		entry->direct_claim = implproc->prosecdef && runs_claim(impltup);
		ReleaseSysCache(impltup);
	}
	if (!OidIsValid(impl))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("the implementation of %s is missing from schema inbox",
						NameStr(proc->proname)),
				 errhint("Reinstall or update the extension.")));

	entry->name = MemoryContextStrdup(flinfo->fn_mcxt, NameStr(proc->proname));
	ReleaseSysCache(proctup);

	/*
	 * fmgr_info() on a SECURITY DEFINER function installs
	 * fmgr_security_definer(), which switches role and search_path on every
	 * call.  The call expression is the entry point's, so that argument and
	 * result types resolve as they would for a direct call.
	 */
	fmgr_info_cxt(impl, &entry->impl, flinfo->fn_mcxt);
	entry->impl.fn_expr = flinfo->fn_expr;
	flinfo->fn_extra = entry;
	return entry;
}

/*
 * Call the implementation with the entry point's arguments, result info
 * (set-returning implementations materialize into the caller's
 * ReturnSetInfo) and collation.
 */
static Datum
call_impl(FunctionCallInfo fcinfo, EntryPoint *entry)
{
	LOCAL_FCINFO(inner, FUNC_MAX_ARGS);
	Datum		result;

	InitFunctionCallInfoData(*inner, &entry->impl, fcinfo->nargs,
							 fcinfo->fncollation, fcinfo->context,
							 fcinfo->resultinfo);
	memcpy(inner->args, fcinfo->args, sizeof(NullableDatum) * fcinfo->nargs);
	result = FunctionCallInvoke(inner);
	fcinfo->isnull = inner->isnull;
	return result;
}

/*
 * The entry point of every API function whose first argument is a scope.
 *
 * A claim (inbox_claim) is the one call whose speed users compare, and
 * src/direct.c writes its entry without running any SQL.  The entry point
 * then writes it itself, as the implementation's owner, switched to the way
 * fmgr_security_definer() switches (an error's abort switches back): with
 * no statement to plan and no name to resolve, the pinned search_path has
 * nothing to protect, so the claim does not pay for setting and restoring
 * it.  A duplicate or a mismatch is decided there too, from the entry that
 * direct.c reads back.  A bounded wait, or a leaf direct.c cannot write,
 * calls the implementation, which decides it through SPI.
 */
Datum
inbox_enter_scope(PG_FUNCTION_ARGS)
{
	EntryPoint *entry = entry_for(fcinfo);

	check_scope(fcinfo);
	/* fmgr_hook (sepgsql) must see the switch to the owner: the implementation's */
	if (entry->direct_claim && fmgr_hook == NULL)
	{
		Oid			save_user;
		int			save_sec;
		bool		decided;
		bool		claimed = false;

		GetUserIdAndSecContext(&save_user, &save_sec);
		SetUserIdAndSecContext(entry->owner, save_sec | SECURITY_LOCAL_USERID_CHANGE);
		decided = inbox_claim_direct(fcinfo, &claimed);
		SetUserIdAndSecContext(save_user, save_sec);
		if (decided)
			PG_RETURN_BOOL(claimed);
	}
	return call_impl(fcinfo, entry);
}

/*
 * The entry point of an API function that names no scope but acts on rows
 * that belong to one, such as outbox_requeue(id): the role calling cannot
 * be checked before the rows are read, and the implementation, which runs
 * as the owner, no longer knows it.  So the entry point keeps the role
 * for the call, and the implementation asks inbox.caller_sees(scope)
 * about each row's scope: a row of a scope the role may not act on is
 * treated as absent, so that the answer reveals nothing of it.
 */
Datum
inbox_enter_rows(PG_FUNCTION_ARGS)
{
	EntryPoint *entry = entry_for(fcinfo);
	Oid			outer = rows_caller;
	volatile Datum result = (Datum) 0;

	rows_caller = GetUserId();
	PG_TRY();
	{
		result = call_impl(fcinfo, entry);
	}
	PG_FINALLY();
	{
		rows_caller = outer;
	}
	PG_END_TRY();
	return result;
}

/* The entry point of inbox_grant and inbox_revoke */
Datum
inbox_enter_admin(PG_FUNCTION_ARGS)
{
	EntryPoint *entry = entry_for(fcinfo);

	check_admin(entry->name);
	return call_impl(fcinfo, entry);
}

/*
 * Statement trigger on inbox.scope_grants: every backend's cache of the
 * table must be dropped when it changes.  A relcache invalidation is
 * transactional: other backends receive it when this transaction commits,
 * this one at the end of the current command.
 *
 * The invalidation names inbox.scope_grants itself, which the caches
 * watch, not the relation the trigger fired on.  On one node they are the
 * same.  On Citus, where inbox_distribute() makes the table a reference
 * table, the trigger fires on each node's shard of it (a relation with
 * another name and OID), and the delegated calls that read the grants on
 * that node must still see the change.
 */
Datum
inbox_scope_grants_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Oid			grants;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("inbox.scope_grants_changed() must be called as a trigger")));
	grants = inbox_relid("scope_grants");
	if (!OidIsValid(grants))
		grants = RelationGetRelid(trigdata->tg_relation);
	CacheInvalidateRelcacheByRelid(grants);
	return PointerGetDatum(NULL);
}

/* ------------------------------------------------------------------------
 * Forgetting
 *
 * inbox_forget and inbox_forget_range remove what the inbox exists to
 * keep, so EXECUTE is not enough: applications are often granted EXECUTE
 * on the whole API.  Their entry point also requires the privileges of the
 * extension's owner (its members and superusers have them), or of a role
 * that the owner allowed with inbox_allow_forget (inbox.forget_grants,
 * by name, as scope grants are).  It then tells the implementation, which
 * runs as the owner, who called, for the audit row.
 * ------------------------------------------------------------------------
 */

/* Whether caller may forget: the owner's privileges, or an allowed role's */
static bool
forget_allowed(Oid caller)
{
	Oid			relid = inbox_relid("forget_grants");
	Oid			owner = rel_owner(grants_table());
	AsOwner		as;
	bool		allowed = false;
	uint64		i;

	if (has_privs_of_role(caller, owner))
		return true;
	if (!OidIsValid(relid))
		return false;

	/*
	 * Read as the rules are now, not as the caller's snapshot saw them: a
	 * role disallowed after a REPEATABLE READ transaction began is refused.
	 * A row counts only while its role still has the name and OID it was
	 * allowed with (see sql/inbox.sql).
	 */
	as_owner_begin(&as, owner);
	PushActiveSnapshot(GetLatestSnapshot());
	if (inbox_execute_once("SELECT grantee, grantee_oid FROM inbox.forget_grants",
						   0, NULL, NULL, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read inbox.forget_grants");
	PopActiveSnapshot();
	for (i = 0; i < SPI_processed && !allowed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		char	   *grantee = SPI_getvalue(tup, SPI_tuptable->tupdesc, 1);
		bool		isnull;
		Oid			oid = DatumGetObjectId(SPI_getbinval(tup, SPI_tuptable->tupdesc, 2, &isnull));
		Oid			role = grantee != NULL ? get_role_oid(grantee, true) : InvalidOid;

		allowed = OidIsValid(role) && !isnull && role == oid && has_privs_of_role(caller, role);
	}
	as_owner_end(&as);
	return allowed;
}

/* The entry point of inbox_forget and inbox_forget_range */
Datum
inbox_enter_forget(PG_FUNCTION_ARGS)
{
	EntryPoint *entry = entry_for(fcinfo);
	Oid			caller = GetUserId();
	Oid			outer;
	volatile Datum result = (Datum) 0;

	check_scope(fcinfo);
	if (!forget_allowed(caller))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to forget inbox entries"),
				 errdetail("Only the owner of extension inbox, a superuser, or a role allowed with "
						   "inbox_allow_forget may call %s; role \"%s\" is none of them.",
						   entry->name, GetUserNameFromId(caller, false)),
				 errhint("EXECUTE on the function is not enough. The extension's owner allows a role "
						 "with inbox_allow_forget(role).")));

	outer = inbox_forget_set_caller(caller);
	PG_TRY();
	{
		result = call_impl(fcinfo, entry);
	}
	PG_FINALLY();
	{
		(void) inbox_forget_set_caller(outer);
	}
	PG_END_TRY();
	return result;
}
