/*-------------------------------------------------------------------------
 *
 * nats_internal.h
 *	  inbox-relay: what the NATS JetStream transport (nats.c) and source
 *	  (nats_source.c) share: the connection to a server, and the stream
 *	  that captures a subject.
 *
 * relay/nats_internal.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_RELAY_NATS_INTERNAL_H
#define INBOX_RELAY_NATS_INTERNAL_H

#include <nats/nats.h>

#include "relay.h"

extern natsConnection *relay_nats_connect(const char *url, const char *secret,
										  natsConnectionHandler closed, void *closure, char *error);
extern bool relay_nats_stream_of(natsConnection *nc, const char *subject, char *stream, size_t size,
								 char *error);
extern void relay_nats_reason(natsStatus s, const char *what, char *error);

#endif							/* INBOX_RELAY_NATS_INTERNAL_H */
