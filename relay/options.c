/*-------------------------------------------------------------------------
 *
 * options.c
 *	  inbox-relay: the command line, read into relay_options before any
 *	  process is forked, and --help.
 *
 * relay/options.c
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon.h"

#ifndef RELAY_VERSION
#define RELAY_VERSION "unknown"
#endif

RelayOptions relay_options = {
	.batch = 100,
	.lease_seconds = 30,
	.wait_seconds = 10,
	.refresh_seconds = 30,
};
int			relay_timeout = 0;	/* 0: the default, see relay_parse_options() */
int			relay_http_connections = 16;

static void
usage(void)
{
	printf("inbox-relay delivers the outbox of a database to its routes' targets,\n"
		   "and reads its subscriptions' sources into its inboxes.\n\n"
		   "Usage:\n  inbox-relay [OPTION]... CONNINFO\n  inbox-relay check --help\n\n"
		   "Options:\n"
		   "  --target=URL        deliver to this target only (repeatable); default: every route's\n"
		   "                      and, without --source, read no source\n"
		   "  --source=URL        read this source's subscriptions only (repeatable), and serve\n"
		   "                      no target but those of --target; default: every subscription's\n"
		   "  --secrets=FILE      the secrets of targets and sources, one \"URL SECRET\" per line,\n"
		   "                      mode 600\n"
		   "  --batch=N           messages per fetch, at most one per key (default 100)\n"
		   "  --lease=SECONDS     how long a fetched message is the relay's (default 30)\n"
		   "  --timeout=SECONDS   how long a target may take to confirm a message; shorter\n"
		   "                      than the lease (default half the lease less 1 second, at most 30)\n"
		   "  --connections=N     requests in flight at once to an HTTP target, at least 2;\n"
		   "                      a batch holds half as many messages (default 16)\n"
		   "  --wait=SECONDS      how long a fetch waits for a send's commit (default 10)\n"
		   "  --refresh=SECONDS   how often the routes are read again, besides when a route\n"
		   "                      changes (default 30)\n"
		   "  --once              deliver what is due and read what the sources hold, then exit\n"
		   "                      (or stop at an unreachable target)\n"
		   "  --metrics=HOST:PORT serve Prometheus metrics of every target at /metrics\n"
		   "  -v, --verbose       log each batch; given twice, each delivery too\n"
		   "  --version           show the version and the schemes served, then exit\n"
		   "  --help              show this help, then exit\n\n"
		   "CONNINFO is a libpq connection string or URI; several hosts with\n"
		   "target_session_attrs=read-write follow a failover.\n");
}

static int
int_option(const char *name, const char *value, int min, int max)
{
	char	   *end;
	long		v = strtol(value, &end, 10);

	if (*value == '\0' || *end != '\0' || v < min || v > max)
	{
		fprintf(stderr, "inbox-relay: --%s must be an integer between %d and %d, not \"%s\"\n",
				name, min, max, value);
		exit(2);
	}
	return (int) v;
}

/*
 * Read the command line into relay_options and the supervisor's settings.
 * Returns -1 when the relay is to run, or the exit status of a command
 * that ends here (--help, --version, a wrong option).
 */
int
relay_parse_options(int argc, char **argv)
{
	static const struct option options[] = {
		{"target", required_argument, NULL, 't'},
		{"source", required_argument, NULL, 'S'},
		{"secrets", required_argument, NULL, 's'},
		{"batch", required_argument, NULL, 'b'},
		{"lease", required_argument, NULL, 'l'},
		{"timeout", required_argument, NULL, 'T'},
		{"connections", required_argument, NULL, 'c'},
		{"wait", required_argument, NULL, 'w'},
		{"refresh", required_argument, NULL, 'r'},
		{"once", no_argument, NULL, 'o'},
		{"verbose", no_argument, NULL, 'v'},
		{"version", no_argument, NULL, 'V'},
		{"metrics", required_argument, NULL, 'm'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	char		schemes[256];
	int			c;

	while ((c = getopt_long(argc, argv, "v", options, NULL)) != -1)
	{
		switch (c)
		{
			case 't':
				if (relay_options.ntargets == RELAY_MAX_TARGETS)
				{
					fprintf(stderr, "inbox-relay: at most %d --target\n", RELAY_MAX_TARGETS);
					return 2;
				}
				relay_options.targets[relay_options.ntargets++] = optarg;
				break;
			case 'S':
				if (relay_options.nsources == RELAY_MAX_TARGETS)
				{
					fprintf(stderr, "inbox-relay: at most %d --source\n", RELAY_MAX_TARGETS);
					return 2;
				}
				relay_options.sources[relay_options.nsources++] = optarg;
				break;
			case 's':
				relay_options.secrets_path = optarg;
				break;
			case 'b':
				relay_options.batch = int_option("batch", optarg, 1, 1000);
				break;
			case 'l':
				relay_options.lease_seconds = int_option("lease", optarg, 1, 86400);
				break;
			case 'T':
				relay_timeout = int_option("timeout", optarg, 1, 86400);
				break;
			case 'c':
				relay_http_connections = int_option("connections", optarg, RELAY_WINDOW, 1000);
				break;
			case 'w':
				relay_options.wait_seconds = int_option("wait", optarg, 1, 60);
				break;
			case 'r':
				relay_options.refresh_seconds = int_option("refresh", optarg, 1, 86400);
				break;
			case 'o':
				relay_options.once = true;
				break;
			case 'v':
				relay_verbose++;
				break;
			case 'V':
				printf("inbox-relay %s\nschemes: %s\n", RELAY_VERSION,
					   relay_schemes(schemes, sizeof(schemes)));
				printf("sources: %s\n", relay_source_schemes(schemes, sizeof(schemes)));
				return 0;
			case 'm':
				relay_options.metrics_address = optarg;
				break;
			case 'h':
				usage();
				return 0;
			default:
				fprintf(stderr, "Try \"inbox-relay --help\".\n");
				return 2;
		}
	}

	/*
	 * A message whose target has not answered when its lease runs out may
	 * be fetched and delivered by another relay meanwhile: give up first.
	 * A batch fetched while the one before is sent starts once the one
	 * before that is settled, within --timeout of its lease, and each of
	 * its messages is settled within --timeout of the batch's start: so by
	 * default the timeout is half the lease less a second.
	 */
	if (relay_timeout == 0)
	{
		relay_timeout = (relay_options.lease_seconds - 1) / 2;
		if (relay_timeout > 30)
			relay_timeout = 30;
		if (relay_timeout < 1)
			relay_timeout = 1;
	}
	else if (relay_timeout >= relay_options.lease_seconds)
	{
		fprintf(stderr, "inbox-relay: --timeout (%d) must be shorter than --lease (%d)\n",
				relay_timeout, relay_options.lease_seconds);
		return 2;
	}
	if (optind != argc - 1)
	{
		fprintf(stderr, "inbox-relay: one CONNINFO is needed\nTry \"inbox-relay --help\".\n");
		return 2;
	}
	relay_options.conninfo = argv[optind];
	if (relay_options.secrets_path != NULL)
	{
		struct stat st;

		if (stat(relay_options.secrets_path, &st) != 0)
		{
			fprintf(stderr, "inbox-relay: cannot read the secrets file \"%s\": %s\n",
					relay_options.secrets_path, strerror(errno));
			return 2;
		}
		if (st.st_mode & (S_IRWXG | S_IRWXO))
		{
			fprintf(stderr, "inbox-relay: the secrets file \"%s\" is readable by group or others; "
					"chmod 600 it\n", relay_options.secrets_path);
			return 2;
		}
	}
	return -1;
}
