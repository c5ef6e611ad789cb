/*-------------------------------------------------------------------------
 *
 * management.h
 *	  inbox-relay check --management=URL: the bindings of an AMQP target's
 *	  exchange, read from RabbitMQ's HTTP management API.
 *
 * relay/management.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_RELAY_MANAGEMENT_H
#define INBOX_RELAY_MANAGEMENT_H

#include <stdbool.h>

#include <libpq-fe.h>

extern bool relay_bindings_check(PGconn *conn, const char *management, const char *target,
								 char *error);

#endif							/* INBOX_RELAY_MANAGEMENT_H */
