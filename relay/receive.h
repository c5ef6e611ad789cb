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

/*
 * One message of a batch: its id, its payload, its group key or NULL, its
 * headers as a JSON object or NULL
 */
typedef struct RelayReceived
{
	const char *id;
	const char *body;
	size_t		body_len;
	const char *group_key;
	const char *headers;
} RelayReceived;

extern PGresult *relay_receive_many(PGconn *conn, const char *scope, const RelayReceived *r,
									int count, bool binary, bool grouped, bool with_headers);
extern char *relay_headers_json(int n, const char *const *names, const char *const *values);
extern bool relay_utf8_valid(const void *p, size_t n);
extern const char *relay_headers_refusal(int n, const char *const *names,
										 const char *const *values);

#endif							/* INBOX_RELAY_RECEIVE_H */
