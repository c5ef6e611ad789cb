/*-------------------------------------------------------------------------
 *
 * transports.c
 *	  inbox-relay: the transports and the sources this relay was built
 *	  with, by scheme.
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
	&relay_amqp, &relay_amqps, &relay_http, &relay_https, &relay_postgresql, &relay_postgres,
#ifdef RELAY_HAVE_KAFKA
	&relay_kafka,
#endif
#ifdef RELAY_HAVE_NATS
	&relay_nats,
#endif
};

#define NTRANSPORTS ((int) (sizeof(transports) / sizeof(transports[0])))

static const RelaySource *const sources[] = {
	&relay_amqp_source, &relay_amqps_source,
#ifdef RELAY_HAVE_KAFKA
	&relay_kafka_source,
#endif
#ifdef RELAY_HAVE_NATS
	&relay_nats_source,
#endif
};

#define NSOURCES ((int) (sizeof(sources) / sizeof(sources[0])))

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

/* The source of a subscription, by the scheme its URL starts with, or NULL */
const RelaySource *
relay_source_for(const char *source)
{
	for (int i = 0; i < NSOURCES; i++)
		if (strncmp(source, sources[i]->scheme, strlen(sources[i]->scheme)) == 0)
			return sources[i];
	return NULL;
}

/* n schemes, each "scheme://", as a list "amqp amqps ..." into buf */
static const char *
scheme_list(char *buf, size_t size, const char *const *schemes, int n)
{
	size_t		len = 0;

	buf[0] = '\0';
	for (int i = 0; i < n && len < size; i++)
		len += snprintf(buf + len, size - len, "%s%.*s", i > 0 ? " " : "",
						(int) strcspn(schemes[i], ":"), schemes[i]);
	return buf;
}

/*
 * The schemes served, without "://" and separated by spaces ("amqp amqps
 * http ..."), into buf: as --version prints them and outbox_schemes()
 * lists them.
 */
const char *
relay_schemes(char *buf, size_t size)
{
	const char *schemes[NTRANSPORTS];

	for (int i = 0; i < NTRANSPORTS; i++)
		schemes[i] = transports[i]->scheme;
	return scheme_list(buf, size, schemes, NTRANSPORTS);
}

/* The schemes of the sources read, as relay_schemes() lists the targets' */
const char *
relay_source_schemes(char *buf, size_t size)
{
	const char *schemes[NSOURCES];

	for (int i = 0; i < NSOURCES; i++)
		schemes[i] = sources[i]->scheme;
	return scheme_list(buf, size, schemes, NSOURCES);
}
