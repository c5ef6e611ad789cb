/*-------------------------------------------------------------------------
 *
 * inbox.c
 *	  Entry point of the inbox extension: module magic, _PG_init and the
 *	  settings (GUCs) that callers use to choose how a claim behaves.
 *
 * _PG_init stays thin on purpose: it defines the settings and nothing else,
 * so that loading the library into a backend that never claims costs
 * nothing.  The library does not need shared_preload_libraries for claims.
 *
 * src/inbox.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "fmgr.h"
#include "utils/guc.h"

#include "compat.h"
#include "inbox.h"

PG_MODULE_MAGIC;

/* inbox.on_duplicate: what a committed duplicate does */
int			inbox_on_duplicate = INBOX_ON_DUPLICATE_RETURN;

/* inbox.claim_timeout: longest wait for a concurrent claim, 0 = no limit */
int			inbox_claim_timeout = 0;

static const struct config_enum_entry on_duplicate_options[] = {
	{"return", INBOX_ON_DUPLICATE_RETURN, false},
	{"raise", INBOX_ON_DUPLICATE_RAISE, false},
	{NULL, 0, false}
};

void		_PG_init(void);

void
_PG_init(void)
{
	/*
	 * Both settings are PGC_USERSET: they describe how one consumer wants its
	 * duplicates reported, so they belong to the session, role, database or
	 * a SET LOCAL around one transaction.
	 */
	DefineCustomEnumVariable("inbox.on_duplicate",
							 "What inbox_claim does when the message was already processed.",
							 "\"return\" makes it return false; \"raise\" raises SQLSTATE IB001.",
							 &inbox_on_duplicate,
							 INBOX_ON_DUPLICATE_RETURN,
							 on_duplicate_options,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("inbox.claim_timeout",
							"Longest time inbox_claim waits for a concurrent, uncommitted claim of the same message.",
							"When the wait exceeds it the claim fails with SQLSTATE IB003. "
							"0 waits until the other transaction ends (or lock_timeout expires).",
							&inbox_claim_timeout,
							0,
							0, INT_MAX,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	MarkGUCPrefixReserved("inbox");
}
