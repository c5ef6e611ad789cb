/*-------------------------------------------------------------------------
 *
 * claim_internal.h
 *	  What the single claim (claim.c) shares with the batch (claim_many.c):
 *	  the statements on a key's leaf, and the pieces of its arbitration.
 *	  Included by those two files only.
 *
 * src/claim_internal.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_CLAIM_INTERNAL_H
#define INBOX_CLAIM_INTERNAL_H

#include "fmgr.h"
#include "datatype/timestamp.h"

/*
 * How often a claim retries when its INSERT conflicted but the conflicting
 * entry was gone by the time it looked (purged in between).  Each retry
 * goes back to the index, so this only bounds a pathological loop.
 */
#define CLAIM_MAX_ATTEMPTS 10

/* The statements on one key (claim.c's key_statements) */
typedef enum KeyStatement
{
	KEY_INSERT,					/* a claim's INSERT ... ON CONFLICT DO NOTHING */
	KEY_RECEIVE,				/* a receive's */
	KEY_RECEIVE_RANKED,			/* a receive's, above the default priority */
	KEY_RECEIVE_HEADERS,		/* a receive's, with headers (and any priority) */
	KEY_LOOKUP,					/* the entry of a key */
	KEY_STATEMENTS
} KeyStatement;

/* The arguments a KEY_INSERT or KEY_RECEIVE* takes, before the bucket */
#define KEY_MAX_ARGS 8

/*
 * Where a call reads and writes one key: the plans for the leaf of its
 * bucket, or 0.4.0's plans (legacy), whose table has no bucket.
 */
typedef struct KeyPlans
{
	bool		legacy;
	int			bucket;			/* -1 if legacy */
} KeyPlans;

/* An entry as read back from inbox.entries */
typedef struct StoredEntry
{
	TimestampTz received_at;
	bytea	   *payload_hash;	/* NULL if the claim gave none */
	char		state;
} StoredEntry;

extern bool claim_insert_entry(const KeyPlans *kp, KeyStatement kind, Datum *values,
							   const char *nulls, text *scope, text *message_id,
							   bytea *payload_hash, bool try_direct);
extern Datum claim_receive_due(Datum not_before, bool grouped, char *null);
extern Datum claim_headers_arg(FunctionCallInfo fcinfo, int argno);
extern bool claim_hashes_equal(const bytea *a, const bytea *b);
extern bytea *claim_payload_digest(Datum payload, bool is_jsonb);
extern void claim_raise_contention(const text *scope, const text *message_id, int attempt);

#endif							/* INBOX_CLAIM_INTERNAL_H */
