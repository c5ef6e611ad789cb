/*-------------------------------------------------------------------------
 *
 * relay.h
 *	  inbox-relay: what the loop (loop.c) shares with the transports, one
 *	  per kind of target (amqp.c, webhook.c, postgres.c), what the ingest
 *	  loop (ingest.c) shares with the sources (amqp_source.c), and what
 *	  they all use: the log (log.c) and the reading of URLs (url.c).  A
 *	  transport or a source includes this header only.
 *
 * A transport opens a target once, delivers messages to it, and answers
 * for each only once the target confirmed it or refused it: the loop
 * acknowledges a message to the database after RELAY_DELIVERED, never
 * before.  Every other answer leaves the message pending, and the
 * outbox's backoff (outbox_fail) decides when it is fetched again;
 * RELAY_DOWN, a target that could not be reached, counts no attempt
 * toward the message's dead letter, and the loop waits before it tries
 * that target again.
 *
 * A transport delivers batches, whose sending and confirmation it splits
 * (start_batch, then finish_batch): the loop starts the next batch before
 * it finishes this one, at most RELAY_WINDOW open at once.  A batch never
 * holds two messages of one key, nor a key of another open batch, since a
 * key's next message is fetched only after this one is acknowledged.  A
 * transport whose target answers each call at once may answer the whole
 * batch in start_batch and leave finish_batch nothing to wait for.
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
	RELAY_DOWN					/* the target could not be reached, or the
								 * connection to it was lost: reopen it later;
								 * the attempt does not count */
} RelayResult;

/* Room for a transport's error, as outbox_fail records it */
#define RELAY_ERROR_SIZE 512

/* How many batches a transport may have started and not finished */
#define RELAY_WINDOW 2

typedef struct RelayTarget RelayTarget;

/*
 * Each transport: open(url, secret), where secret is the target's line of
 * the secrets file or NULL; start_batch() and finish_batch() a batch;
 * close().  open() returns NULL and fills error when the target cannot
 * be reached or the URL is wrong.
 */
typedef struct RelayTransport
{
	const char *scheme;			/* "amqp://", "https://" ... */
	RelayTarget *(*open) (const char *url, const char *secret, char *error);

	/*
	 * Send n messages at once, results[i] RELAY_DOWN until finish_batch
	 * fills results, errors and retry_after of the oldest started batch.
	 */
	void		(*start_batch) (RelayTarget *target, const RelayMessage *messages, int n,
								RelayResult *results, char (*errors)[RELAY_ERROR_SIZE],
								int *retry_after);
	void		(*finish_batch) (RelayTarget *target);
	void		(*close) (RelayTarget *target);

	/*
	 * The most messages a batch may hold for this transport, or NULL for
	 * --batch's: what the transport can send without queueing them.
	 */
	int			(*batch_limit) (void);

	/*
	 * Optional, for "inbox-relay check": verify what open() alone does not
	 * (an AMQP target's exchange and queue, declared passively), without
	 * sending anything; false with error filled when something is missing.
	 * NULL when a successful open() is the whole check.
	 */
	bool		(*check) (RelayTarget *target, const char *url, char *error);
} RelayTransport;

/*
 * One message a source took from its broker, not yet acknowledged there.
 * Every string is the source's malloc() and the loop's to free()
 * (relay_ingest_free).
 */
typedef struct RelayIngest
{
	char	   *broker_id;		/* where the broker keeps it: AMQP's delivery
								 * tag, Kafka's topic/partition/offset, a
								 * stream sequence; as text */
	char	   *message_id;		/* the broker's own message id, or NULL */
	char	   *body;
	size_t		body_len;
	char	   *content_type;	/* or NULL */
	char	   *routing_key;	/* the broker's key of the message (AMQP's
								 * routing key, Kafka's key), or NULL */
	int			nheaders;		/* the message's headers, as text pairs */
	char	  **header_names;
	char	  **header_values;
	const char *header_refusal; /* why its headers cannot be text pairs (a
								 * NUL in one), which rejects the message;
								 * NULL if they can: a static string */
} RelayIngest;

typedef struct RelayInlet RelayInlet;

/* How long a source's fetch waits for a next message once one has come */
#define RELAY_LINGER_MS 2

/*
 * Each source: a broker's queue (topic, stream) read into an inbox by
 * ingest.c.  open(url, secret, options, error) connects and starts
 * consuming, with at most prefetch messages unacknowledged; options is the
 * subscription's options as JSON text, for what a source reads of them.
 * fetch() waits at most wait_ms for a first message, then takes those
 * that follow it until max have come or none came for RELAY_LINGER_MS
 * (a broker sends a prefetch's worth as a burst: a batch is the burst,
 * not the part of it that had arrived), into out: their number, or -1
 * with error filled when the broker is gone (the loop closes the inlet and
 * opens it again later).  ack() tells the broker that messages m[0..n),
 * each taken by the last fetch or one before, are done with: the loop
 * calls it only once what it wrote of them has committed.  release() hands
 * back every message taken and not acknowledged, to be delivered again,
 * in their order where the broker keeps one.  check(url, secret, error),
 * for "inbox-relay check", connects and verifies that the queue is there,
 * taking nothing.
 */
typedef struct RelaySource
{
	const char *scheme;			/* "amqp://" ... */
	RelayInlet *(*open) (const char *url, const char *secret, const char *options,
						 int prefetch, char *error);
	int			(*fetch) (RelayInlet *inlet, RelayIngest *out, int max, int wait_ms, char *error);
	bool		(*ack) (RelayInlet *inlet, const RelayIngest *m, int n, char *error);
	void		(*release) (RelayInlet *inlet);
	void		(*close) (RelayInlet *inlet);
	bool		(*check) (const char *url, const char *secret, char *error);

	/*
	 * Optional: whether the inlet has read all its source holds for it,
	 * for --once, after a fetch that brought nothing.  NULL where such a
	 * fetch says so itself; a Kafka consumer's says nothing until the
	 * group has assigned it its partitions and it has read each to its
	 * end.
	 */
	bool		(*at_end) (RelayInlet *inlet);
} RelaySource;

extern const RelaySource relay_amqp_source;
extern const RelaySource relay_amqps_source;

extern const RelayTransport relay_amqp;
extern const RelayTransport relay_amqps;
extern const RelayTransport relay_http;
extern const RelayTransport relay_https;
extern const RelayTransport relay_postgresql;
extern const RelayTransport relay_postgres;

#ifdef RELAY_HAVE_NATS
extern const RelayTransport relay_nats;
extern const RelaySource relay_nats_source;
#endif
#ifdef RELAY_HAVE_KAFKA
extern const RelayTransport relay_kafka;
extern const RelaySource relay_kafka_source;
#endif

/* Options the transports read (set by inbox-relay.c's main) */
/* How long a target may take to confirm a message, in seconds (--timeout) */
extern int	relay_timeout;
/* How many requests may be in flight at once to an HTTP target (--connections) */
extern int	relay_http_connections;

/* log.c: --verbose given n times makes relay_debug(n, ...) write */
extern int	relay_verbose;
extern void relay_log(const char *fmt,...) __attribute__((format(printf, 1, 2)));
extern void relay_debug(int level, const char *fmt,...) __attribute__((format(printf, 2, 3)));
extern void relay_log_prefix(const char *target);
extern double relay_now(void);

/* text.c: a string that grows as it is written */
typedef struct RelayText
{
	char	   *data;			/* NULL until written; free() it */
	size_t		len;
	size_t		size;
} RelayText;

extern void relay_text_reserve(RelayText *t, size_t n);
extern void relay_text_append(RelayText *t, const char *p, size_t n);
extern void relay_text_printf(RelayText *t, const char *fmt,...) __attribute__((format(printf, 2, 3)));

/* url.c */
extern char *relay_url_param(const char *url, const char *name);
extern char *relay_url_without_query(const char *url);
extern char *relay_url_decode(const char *s, size_t len);

/* text.c: one element of an array literal, NULL for p NULL */
extern void relay_text_element(RelayText *t, const char *p, size_t n, bool binary);

#endif							/* INBOX_RELAY_H */
