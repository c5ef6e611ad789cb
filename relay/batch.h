/*-------------------------------------------------------------------------
 *
 * batch.h
 *	  inbox-relay: a fetched batch (batch.c), as a child's loop (loop.c)
 *	  sends it and records what became of it.
 *
 * relay/batch.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_RELAY_BATCH_H
#define INBOX_RELAY_BATCH_H

#include <libpq-fe.h>

#include "relay.h"

/*
 * Column 8: how long after the statement's start the lease ends.  The
 * lease begins when outbox_fetch takes it, which is after it waited for a
 * commit, and the statement starts after the relay sent it: so the time
 * the relay sent the fetch plus this span is never later than the lease's
 * end, whatever the two machines' clocks read.
 */
#define FETCH_SQL \
	"SELECT f.id, f.topic, f.key, f.position, f.payload, f.payload_bytes, f.headers, f.receipt, " \
	"pg_catalog.date_part('epoch', f.lease_until OPERATOR(pg_catalog.-) pg_catalog.statement_timestamp()) " \
	"FROM outbox_fetch($1, $2::integer, $3::interval, $4::interval) AS f"

/*
 * A fetched batch, and what became of each of its messages.  Those the
 * relay can send come first (nsend); a message whose headers cannot be
 * read follows them, already refused, so that it fails alone.
 */
typedef struct Batch
{
	PGresult   *res;			/* outbox_fetch's rows, which m points into */
	int			n;
	int			nsend;			/* m[0 .. nsend - 1] go to the target */
	double		lease_end;		/* on relay_now()'s clock, at the latest */
	RelayMessage *m;
	const char **receipts;
	bool	   *unsettled;		/* left to its lease: no outcome recorded */
	RelayResult *results;
	char		(*errors)[RELAY_ERROR_SIZE];
	int		   *retry_after;
	PGresult  **headers;
	unsigned char **bytes;
	double		fetched_at;		/* relay_now() when fetched: the batch's
								 * duration, for the metrics */
} Batch;

extern Batch *relay_batch_read(PGconn *conn, PGresult *res, double fetch_sent, int lease_seconds);
extern void relay_batch_free(Batch *b);

#endif							/* INBOX_RELAY_BATCH_H */
