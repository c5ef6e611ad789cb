/*-------------------------------------------------------------------------
 *
 * amqp_internal.h
 *	  inbox-relay's AMQP transport: what its connection (amqp_connect.c)
 *	  shares with its publishing and confirmations (amqp.c).
 *
 * relay/amqp_internal.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_RELAY_AMQP_INTERNAL_H
#define INBOX_RELAY_AMQP_INTERNAL_H

#include <stdint.h>
#include <sys/time.h>

#include <amqp.h>

#include "relay.h"

#define CHANNEL 1
#define DEFAULT_CACERT "/etc/ssl/certs/ca-certificates.crt"

/* The longest AMQP short string: a routing key, an exchange or header name */
#define SHORTSTR_MAX 255

/* How much of a key an error shows, its length said when it is longer */
#define SHOWN_MAX 64

/*
 * A batch started and not yet finished.  tags[i] is message i's publish
 * sequence on the channel, 0 while it has none there: never published,
 * settled, or cut off by a close of the channel.
 */
typedef struct OpenBatch
{
	const RelayMessage *m;
	int			n;
	int			unsettled;		/* with a tag, awaiting its confirmation */
	uint64_t   *tags;
	bool	   *returned;
	bool	   *settled;
	RelayResult *results;
	char		(*errors)[RELAY_ERROR_SIZE];
	struct timeval deadline;	/* --timeout after it was published */
} OpenBatch;

struct RelayTarget
{
	amqp_connection_state_t conn;
	char	   *url;			/* to connect again after the broker closed it */
	char	   *secret;
	char	   *exchange;
	char	   *routing_key;	/* NULL: the message's key */
	bool		outbox_headers; /* add outbox-topic, -key and -position */
	uint64_t	published;		/* the channel's publish sequence */
	OpenBatch  *open[RELAY_WINDOW]; /* oldest first */
	int			nopen;
	const char *broken;			/* why the connection is unusable, or NULL */
	char		broken_text[RELAY_ERROR_SIZE];
	char		closed[RELAY_ERROR_SIZE];	/* the broker's reason, when it has
											 * just closed the channel or the
											 * connection; else "" */
	bool		closed_connection;
};

/* amqp_connect.c */
extern bool rmq_reply_ok(amqp_rpc_reply_t reply, const char *what, char *error);
extern int	rmq_shown_len(const char *s);
extern const char *rmq_shown_cut(const char *s);
extern void rmq_disconnect(RelayTarget *t);
extern bool rmq_channel_open(RelayTarget *t, char *error);
extern bool rmq_connect(RelayTarget *t, char *error);
extern RelayTarget *amqp_target_open(const char *url, const char *secret, char *error);
extern void amqp_target_close(RelayTarget *t);
extern bool amqp_target_check(RelayTarget *t, const char *url, char *error);

#endif							/* INBOX_RELAY_AMQP_INTERNAL_H */
