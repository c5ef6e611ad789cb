/*-------------------------------------------------------------------------
 *
 * inbox.h
 *	  Declarations shared by the inbox extension's source files: its
 *	  SQLSTATEs, the limits on keys, and the settings read by the claim path.
 *
 * src/inbox.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_H
#define INBOX_H

#include "catalog/namespace.h"
#include "utils/elog.h"
#include "utils/lsyscache.h"

/*
 * The extension's own SQLSTATEs, class IB.  They are part of the API:
 * consumers branch on them, so a code never changes meaning.
 */
#define ERRCODE_INBOX_DUPLICATE			MAKE_SQLSTATE('I','B','0','0','1')
#define ERRCODE_INBOX_PAYLOAD_MISMATCH	MAKE_SQLSTATE('I','B','0','0','2')
#define ERRCODE_INBOX_CLAIM_IN_FLIGHT	MAKE_SQLSTATE('I','B','0','0','3')
/* Raised by the deferred mode's SQL functions, by these codes */
#define ERRCODE_INBOX_NOT_OWNER			MAKE_SQLSTATE('I','B','0','0','4')
#define ERRCODE_INBOX_NO_SUCH_MESSAGE	MAKE_SQLSTATE('I','B','0','0','5')

/*
 * Limits on keys, in bytes of the server encoding.  Both key columns share
 * one btree entry, which may hold at most a third of a page (about 2700
 * bytes); these limits keep every legal key far below that, so an insert
 * can never fail inside the index.
 */
#define INBOX_MAX_SCOPE_BYTES		256
#define INBOX_MAX_MESSAGE_ID_BYTES	1024
#define INBOX_MAX_HASH_BYTES		64

/* What a committed duplicate does: inbox.on_duplicate */
typedef enum InboxOnDuplicate
{
	INBOX_ON_DUPLICATE_RETURN,
	INBOX_ON_DUPLICATE_RAISE
} InboxOnDuplicate;

/* GUC variables, defined in inbox.c */
extern int	inbox_on_duplicate;
extern int	inbox_claim_timeout;
extern int	inbox_retention;			/* seconds */
extern int	inbox_idle_threshold;		/* seconds */
extern int	inbox_purge_batch_size;
extern int	inbox_purge_naptime;		/* seconds */
extern bool inbox_purge_enabled;
extern int	inbox_purge_lock_timeout;	/* milliseconds */
extern int	inbox_max_scopes;
extern int	inbox_max_attempts;

/*
 * The OID of table inbox.<relname>, or InvalidOid when it, or schema inbox,
 * does not exist (the extension is not installed, or is older).
 */
static inline Oid
inbox_relid(const char *relname)
{
	Oid			nsp = get_namespace_oid("inbox", true);

	return OidIsValid(nsp) ? get_relname_relid(relname, nsp) : InvalidOid;
}

/* keys.c: argument checks and safe quoting for messages */
extern text *inbox_key_arg(FunctionCallInfo fcinfo, int argno,
						   const char *argname, int maxbytes);
extern bytea *inbox_hash_arg(FunctionCallInfo fcinfo, int argno);
extern char *inbox_quote(const text *t);
extern char *inbox_hex(const bytea *b);

#endif							/* INBOX_H */
