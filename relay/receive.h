/*-------------------------------------------------------------------------
 *
 * receive.h
 *	  inbox-relay: a batch into an inbox with inbox_receive_many, for both
 *	  ways a message reaches one: the postgresql:// target (postgres.c)
 *	  and ingest from a broker (ingest.c).
 *
 * relay/receive.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_RELAY_RECEIVE_H
#define INBOX_RELAY_RECEIVE_H

#include <stdbool.h>
#include <stddef.h>

#include <libpq-fe.h>

/* One message of a batch: its id, its payload, its group key or NULL */
typedef struct RelayReceived
{
	const char *id;
	const char *body;
	size_t		body_len;
	const char *group_key;
} RelayReceived;

extern PGresult *relay_receive_many(PGconn *conn, const char *scope, const RelayReceived *r,
									int count, bool binary, bool grouped);

#endif							/* INBOX_RELAY_RECEIVE_H */
