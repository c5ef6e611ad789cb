/*-------------------------------------------------------------------------
 *
 * transports.c
 *	  inbox-relay: the transports this relay was built with, by scheme.
 *
 * The one list of schemes: --version prints it, the loop finds a target's
 * transport in it, and a target of a scheme not in it is reported
 * (outbox_report) and not served.
 *
 * relay/transports.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <string.h>

#include "daemon.h"

static const RelayTransport *const transports[] = {
	&relay_amqp, &relay_amqps, &relay_http, &relay_https, &relay_postgresql, &relay_postgres
};

#define NTRANSPORTS ((int) (sizeof(transports) / sizeof(transports[0])))

/* The transport of target, by the scheme its URL starts with, or NULL */
const RelayTransport *
relay_transport_for(const char *target)
{
	int			i;

	for (i = 0; i < NTRANSPORTS; i++)
		if (strncmp(target, transports[i]->scheme, strlen(transports[i]->scheme)) == 0)
			return transports[i];
	return NULL;
}

/*
 * The schemes served, without "://" and separated by spaces ("amqp amqps
 * http ..."), into buf: as --version prints them and outbox_schemes()
 * lists them.
 */
const char *
relay_schemes(char *buf, size_t size)
{
	size_t		len = 0;
	int			i;

	buf[0] = '\0';
	for (i = 0; i < NTRANSPORTS && len < size; i++)
	{
		const char *scheme = transports[i]->scheme;

		len += snprintf(buf + len, size - len, "%s%.*s", i > 0 ? " " : "",
						(int) strcspn(scheme, ":"), scheme);
	}
	return buf;
}
