/*-------------------------------------------------------------------------
 *
 * inbox-relay.c
 *	  inbox-relay CONNINFO: deliver the outbox of a database to its routes'
 *	  targets (AMQP 0-9-1, HTTP webhooks, another database's inbox).
 *
 * One process per target: the supervisor reads the targets
 * (outbox_targets(), or those named by --target), starts a child for
 * each, which delivers with the loop of loop.c, and starts a child again
 * when it fails, after a backoff.  It reads the targets again when
 * outbox_route or outbox_unroute notify it (channel inbox_outbox_routes),
 * and every --refresh seconds besides.  A child dies with its supervisor.
 * Beside them, one process per subscription (inbox_subscriptions: a
 * source read into a scope, with the loop of ingest.c), looked after the
 * same way, read again when inbox_subscribe or inbox_unsubscribe notify
 * (channel inbox_subscriptions); a relay given --target reads none, and
 * one given --source reads those sources' subscriptions only (and serves
 * no target but those of --target).
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
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"

/* A failing child is started again after 1, 2, 4 ... seconds, at most this */
#define RESTART_DELAY_MAX 60

/* A child that ran this long before it failed starts its backoff afresh */
#define RAN_WELL_SECONDS 60

/* The channel on which outbox_route and outbox_unroute notify */
#define ROUTES_CHANNEL "inbox_outbox_routes"

/* The channel on which inbox_subscribe and inbox_unsubscribe notify */
#define SUBSCRIPTIONS_CHANNEL "inbox_subscriptions"


/* A target, or a subscription's source, and its child */
typedef struct Slot
{
	char	   *target;			/* the target's URL, or the source's */
	char	   *scope;			/* a subscription's scope; NULL for a target */
	pid_t		pid;			/* its running child, or 0 */
	bool		listed;			/* the last read of the routes named it */
	bool		done;			/* its child ended well: started again only by
								 * a later read of the routes that names it */
	bool		unserved;		/* a scheme this relay does not serve: not
								 * started again while the routes name it */
	int			delay;			/* its last backoff, in seconds; 0 none */
	time_t		start_at;		/* not started before */
	time_t		started;
} Slot;

static Slot slots[RELAY_MAX_TARGETS];
static int	nslots;

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

/*
 * The supervisor's connection to the database, on which it reads the
 * routes and listens for their changes; one try, NULL when it fails (the
 * next read tries again), so that the children are still looked after
 * while the database is away.
 */
static PGconn *
supervisor_connect(void)
{
	PGconn	   *conn = PQconnectdb(relay_options.conninfo);
	PGresult   *res;

	if (PQstatus(conn) != CONNECTION_OK)
	{
		relay_log("cannot connect to the database: %s", PQerrorMessage(conn));
		PQfinish(conn);
		return NULL;
	}
	PQclear(PQexec(conn, "SET application_name = 'inbox-relay'"));
	if (relay_options.once)
		return conn;
	res = PQexec(conn, "LISTEN " ROUTES_CHANNEL "; LISTEN " SUBSCRIPTIONS_CHANNEL);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		relay_log("LISTEN failed (routes are read every --refresh only): %s", PQerrorMessage(conn));
	PQclear(res);
	return conn;
}

/*
 * The targets of every route, then the sources of every subscription, into
 * targets (and their scopes into scopes, NULL for a target); -1 when they
 * cannot be read.  A database whose inbox has no subscriptions yet (older
 * than 1.2.0), or a role not allowed to read them, has none to serve.
 */
static int
read_targets(PGconn *conn, char **targets, char **scopes)
{
	static bool said = false;
	PGresult   *res;
	int			n = 0,
				i;

	/* With --source, the targets are those of --target, read from no route */
	if (relay_options.nsources > 0)
	{
		for (i = 0; i < relay_options.ntargets; i++)
		{
			targets[n] = strdup(relay_options.targets[i]);
			scopes[n++] = NULL;
		}
		res = PQexec(conn, "SELECT s.source, s.scope FROM inbox_subscriptions AS s WHERE false");
	}
	else
		res = PQexec(conn, "SELECT DISTINCT t.target, NULL FROM outbox_targets() AS t ORDER BY 1");
	for (int pass = 0; pass < 2; pass++)
	{
		const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

		if (PQresultStatus(res) != PGRES_TUPLES_OK && pass == 1 && state != NULL &&
			(strcmp(state, "42P01") == 0 || strcmp(state, "42501") == 0))
		{
			if (!said)
				relay_log("no subscriptions read: %s", PQerrorMessage(conn));
			said = true;
		}
		else if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			relay_log("reading the %s failed: %s", pass ? "subscriptions" : "routes", PQerrorMessage(conn));
			while (n > 0)
				free(targets[--n]);
			PQclear(res);
			return -1;
		}
		for (i = 0; PQresultStatus(res) == PGRES_TUPLES_OK && i < PQntuples(res); i++)
		{
			int			k = 0;

			if (pass == 1 && relay_options.nsources > 0)
			{
				while (k < relay_options.nsources && strcmp(relay_options.sources[k], PQgetvalue(res, i, 0)) != 0)
					k++;
				if (k == relay_options.nsources)
					continue;	/* not a source of --source */
			}
			if (n == RELAY_MAX_TARGETS)
			{
				relay_log("the routes and subscriptions name over %d targets and sources; this relay "
						  "serves the first %d only: run another with --target for the targets", RELAY_MAX_TARGETS, RELAY_MAX_TARGETS);
				break;
			}
			targets[n] = strdup(PQgetvalue(res, i, 0));
			scopes[n++] = PQgetisnull(res, i, 1) ? NULL : strdup(PQgetvalue(res, i, 1));
		}
		PQclear(res);
		if (pass == 0)
			res = PQexec(conn, "SELECT s.source, s.scope FROM inbox_subscriptions AS s ORDER BY 2, 1");
	}
	return n;
}

/* Whether slot s is fresh entry j, the same target or the same subscription */
static bool
same_slot(const Slot *s, const char *target, const char *scope)
{
	return target != NULL && strcmp(s->target, target) == 0 &&
		(s->scope == NULL ? scope == NULL : scope != NULL && strcmp(s->scope, scope) == 0);
}

static const char *
kind_of(const Slot *s)
{
	return s->scope ? "source" : "target";
}

static const char *
namer_of(const Slot *s)
{
	return s->scope ? "subscription" : "route";
}

/*
 * Take a fresh read of the targets: a target newly named is picked up; one
 * no longer named is dropped, and its child asked to stop (SIGTERM: it
 * finishes the batches in hand).  A child that ended well is started
 * again when a read names its target.
 */
static void
update_slots(char **fresh, char **scopes, int nfresh)
{
	int			i,
				j;

	for (i = 0; i < nslots; i++)
	{
		Slot	   *s = &slots[i];

		for (j = 0; j < nfresh && !same_slot(s, fresh[j], scopes[j]); j++)
			;
		if (j < nfresh)
		{
			free(fresh[j]);
			free(scopes[j]);
			fresh[j] = NULL;
			if (!s->listed)
			{
				relay_log("%s %s picked up: a %s names it", kind_of(s), s->target, namer_of(s));
				s->unserved = false;
				s->delay = 0;
				s->start_at = 0;
			}
			s->listed = true;
			s->done = false;
		}
		else if (s->listed)
		{
			relay_log("%s %s dropped: no %s names it", kind_of(s), s->target, namer_of(s));
			s->listed = false;
			if (s->pid > 0)
				kill(s->pid, SIGTERM);
		}
	}
	for (j = 0; j < nfresh; j++)
	{
		if (fresh[j] == NULL)
			continue;
		if (nslots == RELAY_MAX_TARGETS)
		{
			relay_log("no room for %s: this relay serves %d at most; "
					  "run another with --target", fresh[j], RELAY_MAX_TARGETS);
			free(fresh[j]);
			free(scopes[j]);
			continue;
		}
		relay_log("%s %s picked up: a %s names it", scopes[j] ? "source" : "target", fresh[j],
				  scopes[j] ? "subscription" : "route");
		memset(&slots[nslots], 0, sizeof(Slot));
		slots[nslots].target = fresh[j];
		slots[nslots].scope = scopes[j];
		slots[nslots].listed = true;
		nslots++;
	}
	/* A target no longer named, whose child ended, gives up its slot */
	for (i = 0; i < nslots;)
		if (!slots[i].listed && slots[i].pid == 0)
		{
			free(slots[i].target);
			free(slots[i].scope);
			slots[i] = slots[--nslots];
		}
		else
			i++;
}

/*
 * Start a child for slot.  It dies with the supervisor: PR_SET_PDEATHSIG
 * sends it SIGTERM when the supervisor ends, however it ends, so that it
 * finishes the batches in hand (acknowledging what its target confirmed)
 * and exits, rather than deliver on, unsupervised, for ever.  SIGTERM, not
 * SIGKILL: a child is stopped only by someone who means it (a debugger,
 * SIGSTOP), and ends once continued.  If the supervisor ended before the
 * child asked for the signal, the child's parent is already another
 * process: it exits at once.
 */
static void
start_child(Slot *s, pid_t supervisor, PGconn *conn)
{
	pid_t		pid = fork();

	if (pid == 0)
	{
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != supervisor)
			_exit(1);
		/* The supervisor's connection is its own: its socket is not used */
		if (conn != NULL)
			close(PQsocket(conn));
		_exit(s->scope ? relay_ingest(s->scope, s->target) : relay_deliver_target(s->target));
	}
	if (pid < 0)
	{
		relay_log("fork failed: %s", strerror(errno));
		s->start_at = time(NULL) + 1;
		return;
	}
	s->pid = pid;
	s->started = time(NULL);
	relay_log("%s %s: process %d started", kind_of(s), s->target, (int) pid);
}

/*
 * A child ended.  One that ends well has nothing more to do (--once), was
 * stopped, or its target has no route any more.  One that fails is
 * started again after 1, 2, 4 ... seconds, at most RESTART_DELAY_MAX, the
 * backoff starting afresh once a child ran RAN_WELL_SECONDS: so a target
 * that fails at once costs five starts in the first half minute, then one
 * a minute.  Whether it failed.
 */
static bool
child_ended(pid_t pid, int wstatus)
{
	int			i;

	for (i = 0; i < nslots; i++)
	{
		Slot	   *s = &slots[i];
		time_t		now = time(NULL);

		if (s->pid != pid)
			continue;
		s->pid = 0;
		if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == RELAY_EXIT_UNSERVED)
		{
			s->unserved = true;
			return true;
		}
		if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)
		{
			s->done = true;
			return false;
		}
		if (relay_options.once)
		{
			relay_log("%s %s: process %d ended with status %d", kind_of(s), s->target, (int) pid, wstatus);
			s->done = true;
			return true;
		}
		if (now - s->started >= RAN_WELL_SECONDS || s->delay == 0)
			s->delay = 1;
		else
			s->delay = s->delay * 2 < RESTART_DELAY_MAX ? s->delay * 2 : RESTART_DELAY_MAX;
		s->start_at = now + s->delay;
		relay_log("%s %s: process %d ended with status %d; starting it again in %d s",
				  kind_of(s), s->target, (int) pid, wstatus, s->delay);
		return true;
	}
	return false;
}

/*
 * Wait up to a second for a notification of a route's change on conn (or
 * just a second without it).  Whether the routes are to be read again;
 * *conn is closed and set NULL when its connection broke.
 */
static bool
wait_for_routes(PGconn **conn)
{
	struct pollfd pfd;
	PGnotify   *notify;
	bool		changed = false;

	if (*conn == NULL || PQsocket(*conn) < 0)
	{
		sleep(1);
		return false;
	}
	pfd.fd = PQsocket(*conn);
	pfd.events = POLLIN;
	pfd.revents = 0;
	if (poll(&pfd, 1, 1000) <= 0)
		return false;
	if (PQconsumeInput(*conn) == 0)
	{
		relay_log("the connection to the database broke: %s", PQerrorMessage(*conn));
		PQfinish(*conn);
		*conn = NULL;
		return true;
	}
	while ((notify = PQnotifies(*conn)) != NULL)
	{
		relay_debug(1, "route change notified for target %s", notify->extra);
		changed = true;
		PQfreemem(notify);
	}
	return changed;
}

int
main(int argc, char **argv)
{
	PGconn	   *conn = NULL;
	pid_t		supervisor = getpid();
	int			i,
				status = 0;
	bool		read_due = true;
	time_t		last_read = 0,
				read_retry_at = 0;
	struct sigaction sa;

	if (argc >= 2 && strcmp(argv[1], "check") == 0)
		return relay_check_main(argc - 1, argv + 1);
	if ((i = relay_parse_options(argc, argv)) >= 0)
		return i;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (relay_options.metrics_address != NULL && relay_metrics_start(relay_options.metrics_address) != 0)
		return 2;

	for (i = 0; i < relay_options.ntargets && relay_options.nsources == 0; i++)
	{
		slots[nslots].target = strdup(relay_options.targets[i]);
		slots[nslots++].listed = true;
	}

	/*
	 * A child per target, started again when it fails (not with --once,
	 * where each child ends when its target has nothing pending).
	 */
	while (!relay_stopping)
	{
		pid_t		pid;
		int			wstatus;
		bool		running = false;
		time_t		now = time(NULL);

		if ((relay_options.ntargets == 0 || relay_options.nsources > 0) && now >= read_retry_at &&
			(read_due || (!relay_options.once && now - last_read >= relay_options.refresh_seconds)))
		{
			char	   *fresh[RELAY_MAX_TARGETS],
					   *scopes[RELAY_MAX_TARGETS];
			int			nfresh = -1;

			if (conn == NULL)
				conn = supervisor_connect();
			if (conn != NULL)
				nfresh = read_targets(conn, fresh, scopes);
			if (nfresh >= 0)
				update_slots(fresh, scopes, nfresh);
			else if (relay_options.once)
				return 1;
			else if (conn != NULL && PQstatus(conn) != CONNECTION_OK)
			{
				PQfinish(conn);
				conn = NULL;
			}
			/* A failed read is tried again in a few seconds */
			last_read = now;
			read_due = nfresh < 0;
			if (read_due)
				read_retry_at = now + 5;
			if (relay_options.once)
			{
				PQfinish(conn);
				conn = NULL;
			}
		}

		for (i = 0; i < nslots && !relay_stopping; i++)
		{
			Slot	   *s = &slots[i];

			if (s->listed && s->pid == 0 && !s->done && !s->unserved && time(NULL) >= s->start_at)
				start_child(s, supervisor, conn);
			running |= s->pid > 0;
		}
		if (relay_options.once && !running)
			break;				/* every child ended */

		while ((pid = waitpid(-1, &wstatus, relay_options.once ? 0 : WNOHANG)) > 0)
		{
			if (child_ended(pid, wstatus))
				status = 1;
			if (relay_options.once)
				break;
		}
		if (!relay_options.once && wait_for_routes(&conn))
			read_due = true;
	}

	/* Stopping: the children finish the batches in hand, and exit */
	for (i = 0; i < nslots; i++)
		if (slots[i].pid > 0)
			kill(slots[i].pid, SIGTERM);
	while (wait(NULL) > 0 || errno == EINTR)
		;
	PQfinish(conn);
	return relay_options.once ? status : 0;
}
