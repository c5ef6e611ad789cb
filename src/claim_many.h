/*-------------------------------------------------------------------------
 *
 * claim_many.h
 *	  A batch of inbox_claim_many or inbox_receive_many, as its arguments
 *	  are read (claim_many_args.c) and it is written (claim_many.c).
 *
 * src/claim_many.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_CLAIM_MANY_H
#define INBOX_CLAIM_MANY_H

#include "fmgr.h"
#include "executor/spi.h"

/* The most ids one call takes: a batch, not a bulk load */
#define INBOX_MAX_BATCH 10000

/* What a batch does: claim its ids, or receive its messages */
typedef enum BatchKind
{
	BATCH_CLAIM,				/* inbox_claim_many */
	BATCH_RECEIVE_JSON,			/* inbox_receive_many, jsonb payloads */
	BATCH_RECEIVE_BYTES			/* inbox_receive_many, bytea payloads */
} BatchKind;

/* One call of inbox_claim_many or inbox_receive_many */
typedef struct Batch
{
	BatchKind	kind;
	text	   *scope;
	int			n;				/* the ids given */
	struct BatchItem *items;	/* they, in the order given */
	bool		raise;			/* on_mismatch = 'raise' */
	Datum		not_before;		/* receives only; 0 if none */
	text	  **group_keys;		/* receives only: per id, NULL for none */
	bool		ranked;			/* receives only: some id above the default priority */
	bool		headers;		/* receives only: some id has headers */
	const char *done;			/* the status of an id written: claimed, received */
	SPIPlanPtr	insert;			/* its INSERT's plan; NULL: one per id */
} Batch;

/* One id of the batch, as given */
typedef struct BatchItem
{
	int			position;		/* 1-based, in the arrays given */
	text	   *message_id;
	bytea	   *payload_hash;	/* NULL: no content check */
	Datum		payload;		/* receives only */
	int16		priority;		/* receives only; 0: the default */
	Datum		headers;		/* receives only; 0: none */
	int			first;			/* index of its first copy in the batch */
	const char *status;
	bytea	   *stored_hash;	/* first copies: the hash the entry now has */
} BatchItem;

extern void batch_args(FunctionCallInfo fcinfo, BatchKind kind, Batch *batch);

#endif							/* INBOX_CLAIM_MANY_H */
