/*-------------------------------------------------------------------------
 *
 * entries.h
 *	  The layout of inbox.entries, the table every message lives in: its
 *	  leaves, the bucket that names them, the states of an entry, and its
 *	  columns by number, as sql/inbox.sql defines them.
 *
 * Code that reads or writes a row by column number (direct.c) uses the
 * Anum_ values below, and writes only into a leaf that direct_layout.c
 * found exactly as entries_columns and entries_checks describe it; code
 * that goes through SQL names the columns.
 *
 * src/entries.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_ENTRIES_H
#define INBOX_ENTRIES_H

#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"

#include "inbox.h"

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
 * Whether an open entry (of alias a) may be handed out by a take at now,
 * $2 of every take's statement: pending, or processing but lost, its lease
 * run out or the session that holds it without a lease ended
 * (inbox.session_alive, session.c).
 */
#define INBOX_TAKEABLE_SQL(a) \
	"(" a ".state = 'p' OR " a ".lease_until < $2 " \
	"OR ((" a ".receipt IS NULL OR " a ".lease_until IS NULL) AND NOT inbox.session_alive(" a ".owner_session)))"

/*
 * The columns of inbox.entries, by number.  A claim sets the first six;
 * every later column is NULL in a claim's entry and has no default.
 */
#define Natts_entries				19
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
#define Anum_entries_priority		18
#define Anum_entries_headers		19

/*
 * Each column as sql/inbox.sql creates it, indexed by its Anum_entries_
 * value: name, type (no type modifier), collation (InvalidOid for a type
 * that has none), whether it is NOT NULL, and its DEFAULT as that script
 * writes it (NULL: none).  direct.c writes a row only into a leaf whose
 * columns are exactly these (direct_layout.c): then the columns it leaves
 * NULL accept NULL, and the values it writes for received_at and state
 * are those their defaults would give.
 */
typedef struct EntriesColumn
{
	const char *name;
	Oid			type;
	Oid			collation;
	bool		notnull;
	const char *default_sql;
} EntriesColumn;

static const EntriesColumn entries_columns[Natts_entries + 1] = {
	[Anum_entries_scope] = {"scope", TEXTOID, C_COLLATION_OID, true, NULL},
	[Anum_entries_message_id] = {"message_id", TEXTOID, C_COLLATION_OID, true, NULL},
	[Anum_entries_bucket] = {"bucket", INT2OID, InvalidOid, true, NULL},
	[Anum_entries_received_at] = {"received_at", TIMESTAMPTZOID, InvalidOid, true, "pg_catalog.now()"},
	[Anum_entries_payload_hash] = {"payload_hash", BYTEAOID, InvalidOid, false, NULL},
	[Anum_entries_state] = {"state", CHAROID, InvalidOid, true, "'d'"},
	[Anum_entries_payload] = {"payload", JSONBOID, InvalidOid, false, NULL},
	[Anum_entries_payload_bytes] = {"payload_bytes", BYTEAOID, InvalidOid, false, NULL},
	[Anum_entries_attempts] = {"attempts", INT4OID, InvalidOid, false, NULL},
	[Anum_entries_owner_session] = {"owner_session", INT8OID, InvalidOid, false, NULL},
	[Anum_entries_taken_at] = {"taken_at", TIMESTAMPTZOID, InvalidOid, false, NULL},
	[Anum_entries_lease_until] = {"lease_until", TIMESTAMPTZOID, InvalidOid, false, NULL},
	[Anum_entries_due] = {"due", TIMESTAMPTZOID, InvalidOid, false, NULL},
	[Anum_entries_receipt] = {"receipt", UUIDOID, InvalidOid, false, NULL},
	[Anum_entries_last_error] = {"last_error", TEXTOID, DEFAULT_COLLATION_OID, false, NULL},
	[Anum_entries_result] = {"result", JSONBOID, InvalidOid, false, NULL},
	[Anum_entries_finished_at] = {"finished_at", TIMESTAMPTZOID, InvalidOid, false, NULL},
	[Anum_entries_priority] = {"priority", INT2OID, InvalidOid, false, NULL},
	[Anum_entries_headers] = {"headers", JSONBOID, InvalidOid, false, NULL},
};

/*
 * The function that computes a key's bucket in SQL, which the CHECK
 * entries_bucket calls: keys.c's inbox_bucket_sql, the same computation
 * as the bucket a claim writes.
 */
#define ENTRIES_BUCKET_SCHEMA		"inbox"
#define ENTRIES_BUCKET_FUNCTION		"bucket"

/*
 * The CHECK constraints of inbox.entries, by name, each with its
 * expression as sql/inbox.sql writes it: schema-qualified, so that no
 * search_path changes what it names.  Each repeats for rows that arrive
 * by COPY what keys.c checks (the limits of inbox.h) and the bucket
 * guarantees for the rows the API writes.
 */
typedef struct EntriesCheck
{
	const char *name;
	const char *expression;
} EntriesCheck;

static const EntriesCheck entries_checks[] = {
	{"entries_scope_length",
	"pg_catalog.octet_length(scope) OPERATOR(pg_catalog.<=) " CppAsString2(INBOX_MAX_SCOPE_BYTES)},
	{"entries_message_id_length",
	"pg_catalog.octet_length(message_id) OPERATOR(pg_catalog.<=) " CppAsString2(INBOX_MAX_MESSAGE_ID_BYTES)},
	{"entries_bucket",
	"bucket OPERATOR(pg_catalog.=) " ENTRIES_BUCKET_SCHEMA "." ENTRIES_BUCKET_FUNCTION "(scope, message_id)"},
};

#endif							/* INBOX_ENTRIES_H */
