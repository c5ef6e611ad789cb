/*-------------------------------------------------------------------------
 *
 * conflicts.c
 *	  What a claim does when its key is taken: inbox.claim_timeout bounds
 *	  its wait for an uncommitted claim of the same key (IB003 when it
 *	  runs out), and inbox.on_duplicate says whether a committed one
 *	  returns false or raises IB001.
 *
 * Both settings are PGC_USERSET: they describe how one consumer wants its
 * conflicts reported, so they belong to the session, role, database or a
 * SET LOCAL around one transaction.  The single claim, the batch, the
 * stream claims and the receives all go through here.
 *
 * src/conflicts.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "utils/guc.h"

#include "conflicts.h"
#include "distributed.h"
#include "inbox.h"
#include "keys.h"

/* What a committed duplicate does: inbox.on_duplicate */
typedef enum InboxOnDuplicate
{
	INBOX_ON_DUPLICATE_RETURN,
	INBOX_ON_DUPLICATE_RAISE
} InboxOnDuplicate;

static const struct config_enum_entry on_duplicate_options[] = {
	{"return", INBOX_ON_DUPLICATE_RETURN, false},
	{"raise", INBOX_ON_DUPLICATE_RAISE, false},
	{NULL, 0, false}
};

/* inbox.on_duplicate */
static int	on_duplicate = INBOX_ON_DUPLICATE_RETURN;

/* inbox.claim_timeout: longest wait for a concurrent claim, 0 = no limit */
static int	claim_timeout = 0;

void
conflicts_init(void)
{
	DefineCustomEnumVariable("inbox.on_duplicate",
							 "What inbox_claim does when the message was already processed.",
							 "\"return\" makes it return false; \"raise\" raises SQLSTATE IB001.",
							 &on_duplicate,
							 INBOX_ON_DUPLICATE_RETURN,
							 on_duplicate_options,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("inbox.claim_timeout",
							"Longest time inbox_claim waits for a concurrent, uncommitted claim of the same message.",
							"When the wait exceeds it the claim fails with SQLSTATE IB003. "
							"0 waits until the other transaction ends (or lock_timeout expires).",
							&claim_timeout,
							0,
							0, INT_MAX,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
}

/* Whether a duplicate raises IB001 (inbox.on_duplicate = raise) */
bool
inbox_on_duplicate_raises(void)
{
	return on_duplicate == INBOX_ON_DUPLICATE_RAISE;
}

/* Whether claims are bounded by inbox.claim_timeout */
bool
inbox_claim_bounded(void)
{
	return claim_timeout > 0;
}

/*
 * Run a statement of a claim under inbox.claim_timeout: key is the message
 * id, or the stream (kind "stream"), or NULL for a batch's INSERT.  With no
 * timeout set, it is a plain call.  The timeout is applied as lock_timeout
 * in a GUC nest level of its own, so it covers exactly this statement and
 * is undone on success and on error alike; its expiry is reported as IB003
 * rather than as a generic lock timeout, because the caller asked for a
 * bounded claim and must be able to tell "held by a concurrent claim, try
 * later" from its other errors.
 */
int
inbox_run_bounded(InboxBoundedCall call, void *arg,
				  const text *scope, const text *key, const char *kind)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			nestlevel;
	char		timeout[32];
	int			rc = 0;

	if (claim_timeout <= 0)
		return call(arg);

	/*
	 * On a Citus coordinator the wait would happen on a worker, out of this
	 * timeout's reach.  A claim delegated to the worker (inbox_distribute)
	 * runs its INSERT there, in this backend, where the timeout applies.
	 */
	if (strcmp(kind, "stream") != 0 && !inbox_citus_worker_node())
		inbox_refuse_if_distributed(INBOX_REFUSE_CLAIM_TIMEOUT);

	nestlevel = NewGUCNestLevel();
	snprintf(timeout, sizeof(timeout), "%d", claim_timeout);
	(void) set_config_option("lock_timeout", timeout,
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	PG_TRY();
	{
		rc = call(arg);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			PG_RE_THROW();
		FlushErrorState();
		ereport(ERROR,
				(errcode(ERRCODE_INBOX_CLAIM_IN_FLIGHT),
				 key != NULL
				 ? errmsg("%s \"%s\" in scope \"%s\" is being claimed by a concurrent transaction",
						  kind, inbox_quote(key), inbox_quote(scope))
				 : errmsg("a message of this batch in scope \"%s\" is being claimed by a concurrent transaction",
						  inbox_quote(scope)),
				 errdetail("The claim waited %d ms (inbox.claim_timeout) for a lock held by another transaction, "
						   "most likely an uncommitted claim of the same %s.",
						   claim_timeout, kind),
				 errhint("Retry after that transaction ends: if it committed, the retry reports a duplicate; "
						 "if it rolled back, the retry claims the message.")));
	}
	PG_END_TRY();
	AtEOXact_GUC(true, nestlevel);
	return rc;
}

typedef struct SpiCall
{
	SPIPlanPtr	plan;
	Datum	   *values;
	const char *nulls;
} SpiCall;

static int
spi_call(void *arg)
{
	SpiCall    *c = (SpiCall *) arg;

	return SPI_execute_plan(c->plan, c->values, c->nulls, false, 0);
}

/* SPI_execute_plan under inbox.claim_timeout (see inbox_run_bounded) */
int
inbox_execute_bounded(SPIPlanPtr plan, Datum *values, const char *nulls,
					  const text *scope, const text *key, const char *kind)
{
	SpiCall		c = {plan, values, nulls};

	return inbox_run_bounded(spi_call, &c, scope, key, kind);
}
