/*-------------------------------------------------------------------------
 *
 * check.c
 *	  inbox-relay check [--secrets=FILE] [--timeout=SECONDS]
 *	  [--management=URL] CONNINFO: whether the relay could deliver, without
 *	  delivering anything.
 *
 * It connects to the database, reads the routed targets (outbox_targets())
 * and, for each, opens it as the relay would (the transport's open(), with
 * the target's line of the secrets file), runs the transport's check()
 * when it has one (the AMQP one declares the exchange, and the queue when
 * one is named, passively), and closes it.  An HTTP target, whose open()
 * connects to nothing, is checked by a TCP connection to its host and
 * port, with no request.  With --management, an AMQP target's exchange
 * must also have a binding its messages could follow (management.c).
 * Then each subscription's source, after the targets
 * (check_sources).  One line per target or source on stdout, "OK
 * NAME" or "FAIL NAME: REASON"; the exit status is 0 when every line is
 * OK, 1 otherwise (or when the database cannot be read), 2 on a wrong
 * command line.  Nothing is fetched, published or acknowledged.
 *
 * relay/check.c
 *
 *-------------------------------------------------------------------------
 */
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <fcntl.h>
#include <errno.h>

#include "daemon.h"
#include "management.h"

/*
 * An HTTP(S) target's host and port reached by TCP within relay_timeout:
 * true, or false with error filled.
 */
static bool
tcp_reachable(const char *url, char *error)
{
	const char *rest = strstr(url, "://") + 3;
	size_t		authority = strcspn(rest, "/?#");
	const char *at = memchr(rest, '@', authority);
	const char *host_start = at ? at + 1 : rest;
	const char *end = rest + authority;
	const char *port_start = NULL;
	char	   *host,
			   *port;
	struct addrinfo hints,
			   *ai,
			   *p;
	int			rc;
	bool		ok = false;

	if (*host_start == '[')
	{
		const char *close = memchr(host_start, ']', end - host_start);

		if (close == NULL)
		{
			snprintf(error, RELAY_ERROR_SIZE, "the URL's host is not readable");
			return false;
		}
		host = strndup(host_start + 1, close - host_start - 1);
		if (close + 1 < end && close[1] == ':')
			port_start = close + 2;
	}
	else
	{
		const char *colon = memchr(host_start, ':', end - host_start);

		host = strndup(host_start, (colon ? colon : end) - host_start);
		if (colon)
			port_start = colon + 1;
	}
	port = port_start ? strndup(port_start, end - port_start)
		: strdup(strncmp(url, "https", 5) == 0 ? "443" : "80");
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	if ((rc = getaddrinfo(host, port, &hints, &ai)) != 0)
		snprintf(error, RELAY_ERROR_SIZE, "cannot resolve %s: %s", host, gai_strerror(rc));
	else
	{
		snprintf(error, RELAY_ERROR_SIZE, "cannot connect to %s port %s", host, port);
		for (p = ai; p != NULL && !ok; p = p->ai_next)
		{
			int			fd = socket(p->ai_family, p->ai_socktype | SOCK_NONBLOCK, p->ai_protocol);
			struct pollfd pfd = {fd, POLLOUT, 0};
			int			err = 0;
			socklen_t	len = sizeof(err);

			if (fd < 0)
				continue;
			if (connect(fd, p->ai_addr, p->ai_addrlen) == 0)
				ok = true;
			else if (errno == EINPROGRESS && poll(&pfd, 1, relay_timeout * 1000) == 1 &&
					 getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0)
			{
				ok = err == 0;
				if (err != 0)
					snprintf(error, RELAY_ERROR_SIZE, "cannot connect to %s port %s: %s",
							 host, port, strerror(err));
			}
			else if (errno != EINPROGRESS)
				snprintf(error, RELAY_ERROR_SIZE, "cannot connect to %s port %s: %s",
						 host, port, strerror(errno));
			else
				snprintf(error, RELAY_ERROR_SIZE, "cannot connect to %s port %s: no answer in %d s",
						 host, port, relay_timeout);
			close(fd);
		}
		freeaddrinfo(ai);
	}
	free(host);
	free(port);
	return ok;
}

/*
 * For "inbox-relay check": each subscription's source opened and its queue
 * looked for, nothing taken; one line each, as for the targets.  How many
 * failed.  A database without subscriptions (older than 1.2.0) has none.
 */
static int
check_sources(PGconn *conn)
{
	PGresult   *res = PQexec(conn, "SELECT DISTINCT s.source FROM inbox_subscriptions AS s ORDER BY 1");
	int			failures = 0;

	for (int i = 0; PQresultStatus(res) == PGRES_TUPLES_OK && i < PQntuples(res); i++)
	{
		const char *source = PQgetvalue(res, i, 0);
		const RelaySource *src = relay_source_for(source);
		char		error[RELAY_ERROR_SIZE] = "this relay reads no source of this scheme";
		char	   *secret = relay_secret_for(source);

		if (src != NULL && src->check(source, secret, error))
			printf("OK %s\n", source);
		else
		{
			printf("FAIL %s: %.*s\n", source, (int) strcspn(error, "\n"), error);
			failures++;
		}
		fflush(stdout);
		free(secret);
	}
	PQclear(res);
	return failures;
}

/* One target: whether it is OK, with error filled when not */
static bool
check_target(const char *target, char *error)
{
	const RelayTransport *transport = relay_transport_for(target);
	RelayTarget *open;
	char	   *secret;
	bool		ok = true;

	if (transport == NULL)
	{
		char		schemes[256];

		snprintf(error, RELAY_ERROR_SIZE, "no transport for this target: this relay serves %s",
				 relay_schemes(schemes, sizeof(schemes)));
		return false;
	}
	secret = relay_secret_for(target);
	open = transport->open(target, secret, error);
	free(secret);
	if (open == NULL)
		return false;
	if (transport->check != NULL)
		ok = transport->check(open, target, error);
	else if (strncmp(target, "http://", 7) == 0 || strncmp(target, "https://", 8) == 0)
		ok = tcp_reachable(target, error);
	transport->close(open);
	return ok;
}

int
relay_check_main(int argc, char **argv)
{
	static const struct option options[] = {
		{"secrets", required_argument, NULL, 's'},
		{"timeout", required_argument, NULL, 'T'},
		{"management", required_argument, NULL, 'm'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	PGconn	   *conn;
	PGresult   *res;
	const char *management = NULL;
	int			c,
				i,
				failures = 0;

	relay_timeout = 5;
	while ((c = getopt_long(argc, argv, "", options, NULL)) != -1)
	{
		switch (c)
		{
			case 's':
				relay_options.secrets_path = optarg;
				break;
			case 'T':
				relay_timeout = atoi(optarg);
				if (relay_timeout < 1 || relay_timeout > 3600)
				{
					fprintf(stderr, "inbox-relay check: --timeout must be between 1 and 3600\n");
					return 2;
				}
				break;
			case 'm':
				management = optarg;
				break;
			case 'h':
				printf("inbox-relay check connects to the database and to each routed target,\n"
					   "and says for each whether it could be delivered to; it sends nothing.\n\n"
					   "Usage:\n  inbox-relay check [OPTION]... CONNINFO\n\n"
					   "Options:\n"
					   "  --secrets=FILE      the targets' secrets, as for inbox-relay\n"
					   "  --timeout=SECONDS   how long a target may take to answer (default 5)\n"
					   "  --management=URL    RabbitMQ's management API (http://HOST:15672): check\n"
					   "                      that each AMQP exchange has a binding for its messages\n"
					   "  --help              show this help, then exit\n\n"
					   "One line per target, \"OK TARGET\" or \"FAIL TARGET: REASON\"; exit status 0\n"
					   "when every target is OK, 1 otherwise.\n");
				return 0;
			default:
				fprintf(stderr, "Try \"inbox-relay check --help\".\n");
				return 2;
		}
	}
	if (optind != argc - 1)
	{
		fprintf(stderr, "inbox-relay check: one CONNINFO is needed\n");
		return 2;
	}
	relay_options.conninfo = argv[optind];
	relay_options.once = true;	/* one try at the database, no retries */
	if ((conn = relay_connect_db()) == NULL)
	{
		printf("FAIL database: cannot connect\n");
		return 1;
	}
	res = PQexec(conn, "SELECT DISTINCT t.target FROM outbox_targets() AS t ORDER BY 1");
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		char	   *msg = PQerrorMessage(conn);

		printf("FAIL database: %.*s\n", (int) strcspn(msg, "\n"), msg);
		PQclear(res);
		PQfinish(conn);
		return 1;
	}
	printf("OK database\n");
	fflush(stdout);
	for (i = 0; i < PQntuples(res); i++)
	{
		const char *target = PQgetvalue(res, i, 0);
		char		error[RELAY_ERROR_SIZE] = "";

		if (check_target(target, error) &&
			(management == NULL || relay_bindings_check(conn, management, target, error)))
			printf("OK %s\n", target);
		else
		{
			printf("FAIL %s: %.*s\n", target, (int) strcspn(error, "\n"), error);
			failures++;
		}
		fflush(stdout);
	}
	PQclear(res);
	failures += check_sources(conn);
	PQfinish(conn);
	return failures > 0 ? 1 : 0;
}
