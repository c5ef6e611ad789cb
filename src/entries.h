/*-------------------------------------------------------------------------
 *
 * entries.h
 *	  The layout of inbox.entries, the table every message lives in: its
 *	  leaves, the bucket that names them, the states of an entry, and its
 *	  columns by number, as sql/inbox.sql defines them.
 *
 * Code that reads or writes a row by column number (direct.c) uses the
 * Anum_ values below and checks the leaf against entries_columns before
 * it does; code that goes through SQL names the columns.
 *
 * src/entries.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_ENTRIES_H
#define INBOX_ENTRIES_H

#include "catalog/pg_type.h"

/*
 * inbox.entries is range-partitioned by a bucket that the extension
 * computes from the key's UTF-8 form (keys.c, inbox_bucket) and stores in
 * the row.  Its high bits are a hash of the scope alone and name the leaf:
 * a scope's entries all sit in one leaf, so a claim, a batch or a take
 * touches one heap and one set of indexes, as on an unpartitioned table.
 * Its low INBOX_BUCKET_KEY_BITS are a hash of the whole key, which the
 * CHECK entries_bucket compares on every restored row: they catch a
 * message id whose bytes a restore reinterpreted.  Leaf inbox.entries_p<N>
 * holds buckets N << INBOX_BUCKET_KEY_BITS up to the next leaf's; sql/
 * inbox.sql creates exactly these INBOX_LEAVES leaves, and every bucket
 * fits a smallint.
 */
#define INBOX_LEAVES				8
#define INBOX_BUCKET_KEY_BITS		11
#define INBOX_BUCKET_LEAF(bucket)	((bucket) >> INBOX_BUCKET_KEY_BITS)

/* The states of an entry (inbox.entries.state, a "char") */
#define INBOX_STATE_PENDING			'p'
#define INBOX_STATE_PROCESSING		'r'
#define INBOX_STATE_DONE			'd'
#define INBOX_STATE_DEAD			'x'

/*
 * The columns of inbox.entries, by number.  A claim sets the first six;
 * every later column is NULL in a claim's entry and has no default.
 */
#define Natts_entries				17
#define Anum_entries_scope			1
#define Anum_entries_message_id		2
#define Anum_entries_bucket			3
#define Anum_entries_received_at	4
#define Anum_entries_payload_hash	5
#define Anum_entries_state			6
#define Anum_entries_payload		7
#define Anum_entries_payload_bytes	8
#define Anum_entries_attempts		9
#define Anum_entries_owner_session	10
#define Anum_entries_taken_at		11
#define Anum_entries_lease_until	12
#define Anum_entries_due			13
#define Anum_entries_receipt		14
#define Anum_entries_last_error		15
#define Anum_entries_result			16
#define Anum_entries_finished_at	17

/* Each column's name and type, indexed by its Anum_entries_ value */
typedef struct EntriesColumn
{
	const char *name;
	Oid			type;
} EntriesColumn;

static const EntriesColumn entries_columns[Natts_entries + 1] = {
	[Anum_entries_scope] = {"scope", TEXTOID},
	[Anum_entries_message_id] = {"message_id", TEXTOID},
	[Anum_entries_bucket] = {"bucket", INT2OID},
	[Anum_entries_received_at] = {"received_at", TIMESTAMPTZOID},
	[Anum_entries_payload_hash] = {"payload_hash", BYTEAOID},
	[Anum_entries_state] = {"state", CHAROID},
	[Anum_entries_payload] = {"payload", JSONBOID},
	[Anum_entries_payload_bytes] = {"payload_bytes", BYTEAOID},
	[Anum_entries_attempts] = {"attempts", INT4OID},
	[Anum_entries_owner_session] = {"owner_session", INT8OID},
	[Anum_entries_taken_at] = {"taken_at", TIMESTAMPTZOID},
	[Anum_entries_lease_until] = {"lease_until", TIMESTAMPTZOID},
	[Anum_entries_due] = {"due", TIMESTAMPTZOID},
	[Anum_entries_receipt] = {"receipt", UUIDOID},
	[Anum_entries_last_error] = {"last_error", TEXTOID},
	[Anum_entries_result] = {"result", JSONBOID},
	[Anum_entries_finished_at] = {"finished_at", TIMESTAMPTZOID},
};

/*
 * The CHECK constraints of inbox.entries, by name.  Each repeats for rows
 * that arrive by COPY what keys.c and the bucket guarantee for the rows
 * the API writes.
 */
static const char *const entries_checks[] = {
	"entries_scope_length", "entries_message_id_length", "entries_bucket"
};

#endif							/* INBOX_ENTRIES_H */
