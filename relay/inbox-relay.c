/*-------------------------------------------------------------------------
 *
 * inbox-relay.c
 *	  inbox-relay CONNINFO: deliver the outbox of a database to its routes'
 *	  targets (AMQP 0-9-1, HTTP webhooks, another database's inbox).
 *
 * One process per target: the supervisor reads the targets
 * (outbox_targets(), or those named by --target), starts a child for
 * each, which delivers with the loop of loop.c, starts a child again when
 * it dies, and reads the targets again every --refresh seconds.
 *
 * Secrets never sit in the database: the routes hold no password, and the
 * relay reads them from its secrets file (--secrets), one line per target,
 * "TARGET SECRET", which must not be readable by group or others.  For
 * postgresql:// targets libpq's password file serves as well.
 *
 * relay/inbox-relay.c
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"

#define MAX_TARGETS 64

RelayOptions relay_options = {
	.batch = 100,
	.lease_seconds = 30,
	.wait_seconds = 10,
};
int			relay_timeout = 0;	/* 0: the default, see main() */
int			relay_http_connections = 16;

static const char *only_targets[MAX_TARGETS];
static int	nonly_targets;
static int	refresh_seconds = 30;
static const char *metrics_address;	/* --metrics, or NULL */

volatile sig_atomic_t relay_stopping = 0;

/*
 * While a child waits in outbox_fetch, SIGTERM cancels the query, so that
 * it stops at once rather than at the end of the wait; during a delivery
 * and its acknowledgement it only sets stopping, and the message in
 * hand is finished first.
 */
static void
on_signal(int signo)
{
	char		errbuf[256];

	relay_stopping = 1;
	if (relay_fetch_cancel != NULL)
		(void) PQcancel(relay_fetch_cancel, errbuf, sizeof(errbuf));	/* signal-safe */
}

/* The targets to deliver to: --target's, or every route's */
static int
read_targets(char **targets)
{
	PGconn	   *conn;
	PGresult   *res;
	int			n = 0,
				i;

	if (nonly_targets > 0)
	{
		for (i = 0; i < nonly_targets; i++)
			targets[i] = strdup(only_targets[i]);
		return nonly_targets;
	}
	if ((conn = relay_connect_db()) == NULL)
		return -1;
	res = PQexec(conn, "SELECT DISTINCT t.target FROM outbox_targets() AS t ORDER BY 1");
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		relay_log("outbox_targets() failed: %s", PQerrorMessage(conn));
		n = -1;
	}
	else
	{
		for (i = 0; i < PQntuples(res) && n < MAX_TARGETS; i++)
			targets[n++] = strdup(PQgetvalue(res, i, 0));
		if (PQntuples(res) > MAX_TARGETS)
			relay_log("the routes name %d targets; this relay delivers to the first %d only, in "
					  "the order of their URLs: run another with --target for each of the others",
					  PQntuples(res), MAX_TARGETS);
	}
	PQclear(res);
	PQfinish(conn);
	return n;
}

static void
usage(void)
{
	printf("inbox-relay delivers the outbox of a database to its routes' targets.\n\n"
		   "Usage:\n  inbox-relay [OPTION]... CONNINFO\n  inbox-relay check --help\n\n"
		   "Options:\n"
		   "  --target=URL        deliver to this target only (repeatable); default: every route's\n"
		   "  --secrets=FILE      the targets' secrets, one \"TARGET SECRET\" per line, mode 600\n"
		   "  --batch=N           messages per fetch, at most one per key (default 100)\n"
		   "  --lease=SECONDS     how long a fetched message is the relay's (default 30)\n"
		   "  --timeout=SECONDS   how long a target may take to confirm a message; shorter\n"
		   "                      than the lease (default half the lease less 1 second, at most 30)\n"
		   "  --connections=N     requests in flight at once to an HTTP target, at least 2;\n"
		   "                      a batch holds half as many messages (default 16)\n"
		   "  --wait=SECONDS      how long a fetch waits for a send's commit (default 10)\n"
		   "  --refresh=SECONDS   how often the routes are read again (default 30)\n"
		   "  --once              deliver what is due, then exit (or stop at an unreachable target)\n"
		   "  --metrics=HOST:PORT serve Prometheus metrics of every target at /metrics\n"
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

int
main(int argc, char **argv)
{
	static const struct option options[] = {
		{"target", required_argument, NULL, 't'},
		{"secrets", required_argument, NULL, 's'},
		{"batch", required_argument, NULL, 'b'},
		{"lease", required_argument, NULL, 'l'},
		{"timeout", required_argument, NULL, 'T'},
		{"connections", required_argument, NULL, 'c'},
		{"wait", required_argument, NULL, 'w'},
		{"refresh", required_argument, NULL, 'r'},
		{"once", no_argument, NULL, 'o'},
		{"metrics", required_argument, NULL, 'm'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	char	   *targets[MAX_TARGETS];
	pid_t		children[MAX_TARGETS] = {0};
	int			ntargets = 0;
	int			c,
				i,
				status = 0;
	time_t		last_read = 0;
	struct sigaction sa;

	if (argc >= 2 && strcmp(argv[1], "check") == 0)
		return relay_check_main(argc - 1, argv + 1);
	while ((c = getopt_long(argc, argv, "", options, NULL)) != -1)
	{
		switch (c)
		{
			case 't':
				if (nonly_targets == MAX_TARGETS)
				{
					fprintf(stderr, "inbox-relay: at most %d --target\n", MAX_TARGETS);
					return 2;
				}
				only_targets[nonly_targets++] = optarg;
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
				refresh_seconds = int_option("refresh", optarg, 1, 86400);
				break;
			case 'o':
				relay_options.once = true;
				break;
			case 'm':
				metrics_address = optarg;
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

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (metrics_address != NULL && relay_metrics_start(metrics_address) != 0)
		return 2;

	/*
	 * The parent: a child per target, started again when it dies (not
	 * with --once, where each child ends when its target has nothing
	 * pending).
	 */
	while (!relay_stopping)
	{
		pid_t		pid;
		int			wstatus;

		if (!relay_options.once && time(NULL) - last_read >= refresh_seconds)
		{
			char	   *fresh[MAX_TARGETS];
			int			nfresh = read_targets(fresh);

			last_read = time(NULL);

			/*
			 * A target whose process ended because its routes are gone,
			 * and that the routes still do not name, gives up its slot
			 */
			for (i = 0; nfresh >= 0 && i < ntargets;)
			{
				int			j;

				for (j = 0; j < nfresh && strcmp(targets[i], fresh[j]) != 0; j++)
					;
				if (children[i] == -1 && j == nfresh)
				{
					free(targets[i]);
					targets[i] = targets[--ntargets];
					children[i] = children[ntargets];
					children[ntargets] = 0;
				}
				else
					i++;
			}
			for (i = 0; i < nfresh; i++)
			{
				int			j;

				for (j = 0; j < ntargets && strcmp(targets[j], fresh[i]) != 0; j++)
					;
				if (j == ntargets && ntargets < MAX_TARGETS)
					targets[ntargets++] = fresh[i];
				else
				{
					/* A target whose route came back is delivered again */
					if (j < ntargets && children[j] == -1)
						children[j] = 0;
					else if (j == ntargets)
						relay_log("no room for target %s: this relay delivers to %d at most; "
								  "run another with --target", fresh[i], MAX_TARGETS);
					free(fresh[i]);
				}
			}
		}
		else if (relay_options.once && ntargets == 0)
		{
			ntargets = read_targets(targets);
			if (ntargets < 0)
				return 1;
		}

		for (i = 0; i < ntargets; i++)
		{
			if (children[i] != 0 || (relay_options.once && children[i] == -1))
				continue;
			pid = fork();
			if (pid == 0)
				_exit(relay_deliver_target(targets[i]));
			if (pid < 0)
				relay_log("fork failed: %s", strerror(errno));
			else
				children[i] = pid;
		}

		pid = waitpid(-1, &wstatus, relay_options.once ? 0 : WNOHANG);
		if (pid > 0)
		{
			/*
			 * A child that ends well has nothing more to do (--once) or no
			 * route any more: it is started again only when the routes name
			 * its target again.  One that fails is started again.
			 */
			bool		ended_well = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;

			for (i = 0; i < ntargets; i++)
				if (children[i] == pid)
					children[i] = (relay_options.once || ended_well) ? -1 : 0;
			if (!ended_well)
			{
				relay_log("a target's process ended with status %d", wstatus);
				status = 1;
			}
			if (!relay_options.once && !relay_stopping)
				sleep(1);		/* no tight loop on a target that fails at once */
		}
		else if (relay_options.once && pid < 0)
			break;				/* every child ended */
		else if (!relay_options.once)
			sleep(1);
	}

	/* Stopping: the children finish the message they deliver, and exit */
	for (i = 0; i < ntargets; i++)
		if (children[i] > 0)
			kill(children[i], SIGTERM);
	while (wait(NULL) > 0 || errno == EINTR)
		;
	return relay_options.once ? status : 0;
}
