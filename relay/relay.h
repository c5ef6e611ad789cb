/*-------------------------------------------------------------------------
 *
 * relay.h
 *	  inbox-relay: what the loop (inbox-relay.c) shares with the
 *	  transports, one per kind of target (amqp.c, webhook.c, postgres.c).
 *
 * A transport opens a target once, delivers messages to it (one at a time,
 * or a batch together when it can pipeline them, a batch never holding
 * two messages of one key), and answers for each only once the target
 * confirmed it or refused it:
 * the loop acknowledges a message to the database after
 * RELAY_DELIVERED, never before.  Every other answer leaves the message
 * pending, and the outbox's backoff (outbox_fail) decides when it is
 * fetched again.
 *
 * relay/relay.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_RELAY_H
#define INBOX_RELAY_H

#include <stddef.h>
#include <stdbool.h>

/* One message leased by outbox_fetch */
typedef struct RelayMessage
{
	const char *id;				/* the message id, a UUID in text */
	const char *topic;
	const char *key;
	const char *position;
	const char *body;			/* the payload: jsonb as text, or the bytes */
	size_t		body_len;
	bool		binary;			/* body holds payload_bytes, not JSON */
	int			nheaders;		/* the headers jsonb, as text pairs */
	const char **header_names;
	const char **header_values;
} RelayMessage;

typedef enum RelayResult
{
	RELAY_DELIVERED,			/* the target confirmed the message */
	RELAY_RETRY,				/* not delivered: try again after a backoff */
	RELAY_REFUSED,				/* the target refused it: counts toward dead */
	RELAY_DOWN					/* the target is unreachable: reopen it */
} RelayResult;

/* Room for a transport's error, as outbox_fail records it */
#define RELAY_ERROR_SIZE 512

typedef struct RelayTarget RelayTarget;

/*
 * Each transport: open(url, secret), where secret is the target's line of
 * the secrets file or NULL; deliver() one message, or deliver_batch() a
 * batch (one of the two; deliver_batch is used when there is one);
 * close().  open() returns NULL and fills error when the target cannot
 * be reached or the URL is wrong.
 */
typedef struct RelayTransport
{
	const char *scheme;			/* "amqp://", "https://" ... */
	RelayTarget *(*open) (const char *url, const char *secret, char *error);
	RelayResult (*deliver) (RelayTarget *target, const RelayMessage *message,
							char *error, int *retry_after);
	/*
	 * Or deliver n messages at once (no two of one key), filling one
	 * result, error and retry_after each.
	 */
	void		(*deliver_batch) (RelayTarget *target, const RelayMessage *messages, int n,
								  RelayResult *results, char (*errors)[RELAY_ERROR_SIZE],
								  int *retry_after);
	void		(*close) (RelayTarget *target);
} RelayTransport;

extern const RelayTransport relay_amqp;
extern const RelayTransport relay_amqps;
extern const RelayTransport relay_http;
extern const RelayTransport relay_https;
extern const RelayTransport relay_postgresql;
extern const RelayTransport relay_postgres;

/* Helpers the transports share (inbox-relay.c) */
extern void relay_log(const char *fmt,...) __attribute__((format(printf, 1, 2)));
extern char *relay_url_param(const char *url, const char *name);
extern char *relay_url_without_query(const char *url);
extern char *relay_url_decode(const char *s, size_t len);

#endif							/* INBOX_RELAY_H */
