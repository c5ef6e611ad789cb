/*-------------------------------------------------------------------------
 *
 * inbox.h
 *	  The constants every part of the inbox extension shares, each defined
 *	  once: its SQLSTATEs, the limits on keys and retentions, and the
 *	  private advisory-lock spaces.  The layout of inbox.entries is in
 *	  entries.h.
 *
 * src/inbox.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_H
#define INBOX_H

#include "utils/elog.h"

/*
 * The extension's own SQLSTATEs, class IB.  They are part of the API:
 * consumers branch on them, so a code never changes meaning.  The SQL
 * functions raise the same codes by these literals.
 */
#define ERRCODE_INBOX_DUPLICATE			MAKE_SQLSTATE('I','B','0','0','1')
#define ERRCODE_INBOX_PAYLOAD_MISMATCH	MAKE_SQLSTATE('I','B','0','0','2')
#define ERRCODE_INBOX_CLAIM_IN_FLIGHT	MAKE_SQLSTATE('I','B','0','0','3')
#define ERRCODE_INBOX_NOT_OWNER			MAKE_SQLSTATE('I','B','0','0','4')
#define ERRCODE_INBOX_NO_SUCH_MESSAGE	MAKE_SQLSTATE('I','B','0','0','5')
#define ERRCODE_INBOX_OFFSET_GAP		MAKE_SQLSTATE('I','B','0','0','6')
#define ERRCODE_INBOX_CONTENT_DUPLICATE	MAKE_SQLSTATE('I','B','0','0','7')

/*
 * Limits on keys, in bytes, which a key must meet both in the server
 * encoding and in UTF-8.  Both key columns share one btree entry, which
 * may hold at most a third of a page (about 2700 bytes); these limits keep
 * every legal key far below that, so an insert can never fail inside the
 * index.  The tables' CHECK constraints repeat them, for rows that arrive
 * by COPY (a restore): the regress test "limits" compares the two through
 * inbox.limits().  Counting the UTF-8 form too means that a dump restored
 * into a database of another encoding, where a key takes at most as many
 * bytes as in UTF-8, never meets a key its CHECK refuses.
 */
#define INBOX_MAX_SCOPE_BYTES		256
#define INBOX_MAX_MESSAGE_ID_BYTES	1024
#define INBOX_MAX_HASH_BYTES		64

/*
 * A group key of the deferred mode (sql/inbox.sql, section 4) is named
 * like a message id; inbox.groups' CHECK repeats the limit.
 */
#define INBOX_MAX_GROUP_KEY_BYTES	1024

/*
 * A message's priority in the deferred mode (src/priorities.c): 0, the
 * default and the lowest, up to the largest smallint, as which it is
 * stored.
 */
#define INBOX_MAX_PRIORITY			PG_INT16_MAX

/*
 * Limits of the outbox (sql/inbox.sql, section 11), in the same style: a
 * topic is named like a scope, a key like a message id, both within one
 * btree entry with room to spare; a target is a URL, which the relay
 * parses.  A payload is bounded so that a message stays far below what
 * brokers accept by default (RabbitMQ's 128 MB) and what one fetch holds
 * in memory at once.  The tables' CHECK constraints repeat the first
 * three.
 */
#define INBOX_MAX_TOPIC_BYTES			256
#define INBOX_MAX_OUTBOX_KEY_BYTES		1024
#define INBOX_MAX_TARGET_BYTES			2048
#define INBOX_MAX_OUTBOX_PAYLOAD_BYTES	(16 * 1024 * 1024)

/* The most messages one outbox_send_many or outbox_fetch handles */
#define INBOX_OUTBOX_MAX_BATCH			10000

/* The longest wait of an outbox_fetch, as of an inbox_poll */
#define INBOX_OUTBOX_MAX_WAIT_SECONDS	60

/*
 * The extension's advisory locks live in lock spaces of their own: the
 * fourth field of an advisory LOCKTAG, which is 1 or 2 for every lock that
 * pg_advisory_lock() and its kin can take.  So no application key, by
 * accident or on purpose, can collide with them.
 */
#define INBOX_LOCKSPACE_OWNER		0x4942	/* "IB": a live owner session */
#define INBOX_LOCKSPACE_PURGE		0x4950	/* "IP": one purger per leaf */

/* The most a retention may be, in seconds: the range of inbox.retention */
#define INBOX_MAX_RETENTION_SECONDS	PG_INT32_MAX

#endif							/* INBOX_H */
