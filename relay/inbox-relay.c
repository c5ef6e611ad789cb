/*-------------------------------------------------------------------------
 *
 * inbox-relay.c
 *	  inbox-relay CONNINFO: deliver the outbox of a database to its routes'
 *	  targets (AMQP 0-9-1, HTTP webhooks, another database's inbox).
 *
 * The database decides everything that concerns order and ownership; the
 * relay only moves messages.  outbox_fetch leases, per target, the head
 * of each key (its lowest position not yet delivered), at most one
 * message per key, and makes a key's next message fetchable only after
 * outbox_ack.  So a relay that sends a fetched batch (together, since
 * no two of its messages share a key) and acknowledges each message only
 * after its target confirmed it, keeps every key's commit order; several relays may run at once, since a lease
 * is held by one fetch at a time; and a relay that dies leaves its leased
 * messages to the next fetch after the lease, to be delivered again under
 * the same id (at least once; the id makes the copy harmless downstream).
 *
 * One process per target: the parent reads the targets (outbox_targets(),
 * or those named by --target), starts a child for each, starts a child
 * again when it dies, and reads the targets again every --refresh
 * seconds.  A child waits for work in outbox_fetch with a wait, which the
 * commit of a send to its target wakes: no fixed sleep, and no NOTIFY.
 * A child whose database connection breaks connects again with the same
 * conninfo, so a multi-host conninfo with target_session_attrs=read-write
 * follows a failover.
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
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "relay.h"

#define MAX_TARGETS 64

static const RelayTransport *const transports[] = {
	&relay_amqp, &relay_amqps, &relay_http, &relay_https, &relay_postgresql, &relay_postgres
};

/* Options */
static const char *conninfo;
static const char *secrets_path;
static const char *only_targets[MAX_TARGETS];
static int	nonly_targets;
static int	batch = 100;
static int	lease_seconds = 30;
static int	wait_seconds = 10;
static int	refresh_seconds = 30;
static bool once;

static volatile sig_atomic_t stopping = 0;

/*
 * While a child waits in outbox_fetch, SIGTERM cancels the query, so that
 * it stops at once rather than at the end of the wait; during a delivery
 * and its acknowledgement it only sets stopping, and the message in hand
 * is finished first.
 */
static PGcancel *volatile fetch_cancel = NULL;
static char log_prefix[256] = "inbox-relay";

void
relay_log(const char *fmt,...)
{
	va_list		ap;
	char		stamp[32];
	time_t		now = time(NULL);

	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", gmtime(&now));
	fprintf(stderr, "%s UTC [%d] %s: ", stamp, (int) getpid(), log_prefix);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void
on_signal(int signo)
{
	char		errbuf[256];

	stopping = 1;
	if (fetch_cancel != NULL)
		(void) PQcancel(fetch_cancel, errbuf, sizeof(errbuf));	/* signal-safe */
}

/* Decode %XX escapes of len bytes of s, into a new string */
char *
relay_url_decode(const char *s, size_t len)
{
	char	   *out = malloc(len + 1);
	size_t		i,
				o = 0;

	for (i = 0; i < len; i++)
	{
		if (s[i] == '%' && i + 2 < len && isxdigit((unsigned char) s[i + 1]) &&
			isxdigit((unsigned char) s[i + 2]))
		{
			char		hex[3] = {s[i + 1], s[i + 2], 0};

			out[o++] = (char) strtol(hex, NULL, 16);
			i += 2;
		}
		else
			out[o++] = s[i];
	}
	out[o] = '\0';
	return out;
}

/* The decoded value of the query parameter name of url, or NULL */
char *
relay_url_param(const char *url, const char *name)
{
	const char *q = strchr(url, '?');
	size_t		nlen = strlen(name);

	while (q != NULL)
	{
		const char *p = q + 1;
		const char *end = p + strcspn(p, "&#");

		if ((size_t) (end - p) > nlen && strncmp(p, name, nlen) == 0 && p[nlen] == '=')
			return relay_url_decode(p + nlen + 1, end - p - nlen - 1);
		q = *end == '&' ? end : NULL;
	}
	return NULL;
}

/* url without its query string */
char *
relay_url_without_query(const char *url)
{
	return strndup(url, strcspn(url, "?#"));
}

/*
 * The secret of target in the secrets file, or NULL.  The file is read at
 * each use, so that a changed secret is taken at the next (re)connection.
 */
static char *
secret_for(const char *target)
{
	FILE	   *f;
	struct stat st;
	char		line[4096];
	char	   *found = NULL;

	if (secrets_path == NULL)
		return NULL;
	if (stat(secrets_path, &st) != 0 || (f = fopen(secrets_path, "r")) == NULL)
	{
		relay_log("cannot read the secrets file \"%s\": %s", secrets_path, strerror(errno));
		return NULL;
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO))
	{
		relay_log("the secrets file \"%s\" is readable by group or others: not used "
				  "(chmod 600 it)", secrets_path);
		fclose(f);
		return NULL;
	}
	while (found == NULL && fgets(line, sizeof(line), f) != NULL)
	{
		char	   *t = line + strspn(line, " \t");
		size_t		tlen = strcspn(t, " \t\r\n");
		char	   *s;

		if (*t == '#' || tlen == 0 || tlen != strlen(target) || strncmp(t, target, tlen) != 0)
			continue;
		s = t + tlen;
		s += strspn(s, " \t");
		s[strcspn(s, "\r\n")] = '\0';
		if (*s)
			found = strdup(s);
	}
	fclose(f);
	return found;
}

static const RelayTransport *
transport_for(const char *target)
{
	size_t		i;

	for (i = 0; i < sizeof(transports) / sizeof(transports[0]); i++)
		if (strncmp(target, transports[i]->scheme, strlen(transports[i]->scheme)) == 0)
			return transports[i];
	return NULL;
}

/* A database connection, retried with a backoff until it works or we stop */
static PGconn *
connect_db(void)
{
	int			delay = 1;

	while (!stopping)
	{
		PGconn	   *conn = PQconnectdb(conninfo);

		if (PQstatus(conn) == CONNECTION_OK)
		{
			PQclear(PQexec(conn, "SET application_name = 'inbox-relay'"));
			return conn;
		}
		relay_log("cannot connect to the database: %s", PQerrorMessage(conn));
		PQfinish(conn);
		if (once)
			return NULL;
		sleep(delay);
		delay = delay < 30 ? delay * 2 : 30;
	}
	return NULL;
}

static const char *
sqlstate(const PGresult *res)
{
	const char *s = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	return s ? s : "";
}

/* The headers jsonb of a message, as name and value pairs */
static int
read_headers(PGconn *conn, const char *headers, RelayMessage *m, PGresult **res)
{
	const char *params[1] = {headers};
	int			i;

	*res = PQexecParams(conn, "SELECT h.key, h.value FROM pg_catalog.jsonb_each_text($1::pg_catalog.jsonb) AS h ORDER BY 1",
						1, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(*res) != PGRES_TUPLES_OK)
		return -1;
	m->nheaders = PQntuples(*res);
	m->header_names = calloc(m->nheaders + 1, sizeof(char *));
	m->header_values = calloc(m->nheaders + 1, sizeof(char *));
	for (i = 0; i < m->nheaders; i++)
	{
		m->header_names[i] = PQgetvalue(*res, i, 0);
		m->header_values[i] = PQgetisnull(*res, i, 1) ? "" : PQgetvalue(*res, i, 1);
	}
	return 0;
}

/*
 * Record the outcomes of a batch: the delivered messages acknowledged in
 * one statement, each other one failed with its error.  False when the
 * connection broke.
 */
static bool
settle_batch(PGconn *conn, PGresult *fetched, int n, const RelayResult *results,
			 char (*errors)[RELAY_ERROR_SIZE], const int *retry_after, const RelayMessage *m)
{
	char	   *receipts = malloc((size_t) n * 40 + 3);	/* {uuid,uuid,...} */
	size_t		len = 0;
	PGresult   *res;
	bool		ok = true;
	int			i,
				delivered = 0;

	receipts[len++] = '{';
	for (i = 0; i < n; i++)
		if (results[i] == RELAY_DELIVERED)
			len += snprintf(receipts + len, 40, "%s%.36s", delivered++ ? "," : "",
							PQgetvalue(fetched, i, 7));
	receipts[len++] = '}';
	receipts[len] = '\0';
	if (delivered > 0)
	{
		const char *params[1] = {receipts};

		res = PQexecParams(conn, "SELECT outbox_ack_many($1::uuid[])", 1, NULL, params, NULL, NULL, 0);
		ok = PQresultStatus(res) == PGRES_TUPLES_OK;
		if (ok && atoi(PQgetvalue(res, 0, 0)) != delivered)
			relay_log("%d delivered message(s) had run out of lease: another relay delivers them "
					  "again under the same id", delivered - atoi(PQgetvalue(res, 0, 0)));
		if (!ok)
			relay_log("acknowledging deliveries failed: %s", PQerrorMessage(conn));
		PQclear(res);
	}
	free(receipts);

	for (i = 0; i < n && ok; i++)
	{
		char		after[32];
		const char *params[3] = {PQgetvalue(fetched, i, 7), errors[i], NULL};

		if (results[i] == RELAY_DELIVERED)
			continue;
		relay_log("message %s (key \"%s\", position %s) not delivered: %s",
				  m[i].id, m[i].key, m[i].position, errors[i]);
		if (retry_after[i] >= 0)
		{
			snprintf(after, sizeof(after), "%d seconds", retry_after[i]);
			params[2] = after;
		}
		res = PQexecParams(conn, "SELECT outbox_fail($1::uuid, $2, $3::interval)", 3, NULL, params,
						   NULL, NULL, 0);
		ok = PQresultStatus(res) == PGRES_TUPLES_OK;
		if (ok && strcmp(PQgetvalue(res, 0, 0), "dead") == 0)
			relay_log("message %s is dead after its last attempt", m[i].id);
		if (!ok)
			relay_log("recording a failed delivery failed: %s", PQerrorMessage(conn));
		PQclear(res);
	}
	return ok;
}

/*
 * Deliver the messages of target until stopped (or, with --once, until
 * none is pending).  Returns the exit status of the child.
 */
static int
deliver_target(const char *target)
{
	const RelayTransport *transport = transport_for(target);
	RelayTarget *open = NULL;
	PGconn	   *conn = NULL;
	int			target_state = -1;	/* unknown, 0 unreachable, 1 reachable */
	char		batch_s[16],
				lease_s[32],
				wait_s[32];
	int			status = 0;

	snprintf(log_prefix, sizeof(log_prefix), "inbox-relay %s", target);
	if (transport == NULL)
	{
		relay_log("no transport for this target: amqp://, amqps://, http://, https:// and postgresql:// are known");
		return 2;
	}
	snprintf(batch_s, sizeof(batch_s), "%d", batch);
	snprintf(lease_s, sizeof(lease_s), "%d seconds", lease_seconds);
	snprintf(wait_s, sizeof(wait_s), "%d seconds", wait_seconds);

	while (!stopping)
	{
		const char *params[4] = {target, batch_s, lease_s, once ? NULL : wait_s};
		PGresult   *res;
		PGcancel   *cancel;
		int			i,
					n;

		if (conn == NULL)
		{
			if ((conn = connect_db()) == NULL)
			{
				status = 1;
				break;
			}
			relay_log("connected to the database; delivering");
		}
		cancel = PQgetCancel(conn);
		fetch_cancel = cancel;
		res = stopping ? NULL :
			PQexecParams(conn,
						 "SELECT f.id, f.topic, f.key, f.position, f.payload, f.payload_bytes, f.headers, f.receipt "
						 "FROM outbox_fetch($1, $2::integer, $3::interval, $4::interval) AS f",
						 4, NULL, params, NULL, NULL, 0);
		fetch_cancel = NULL;
		PQfreeCancel(cancel);
		/* Stopped while waiting; a batch already leased is still delivered */
		if (stopping && PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			PQclear(res);
			break;
		}
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			if (strcmp(sqlstate(res), "42704") == 0)
			{
				relay_log("the target has no route any more: stopping");
				PQclear(res);
				break;
			}
			relay_log("outbox_fetch failed: %s", PQerrorMessage(conn));
			PQclear(res);
			if (PQstatus(conn) != CONNECTION_OK)
			{
				PQfinish(conn);
				conn = NULL;
			}
			if (once)
			{
				status = 1;
				break;
			}
			sleep(1);
			continue;
		}
		n = PQntuples(res);
		if (n == 0 && once)
		{
			PQclear(res);
			break;
		}

		/*
		 * The batch holds at most one message per key, and a key's next
		 * message is fetched only after this one is acknowledged: the
		 * messages of a batch may be sent together (deliver_batch
		 * pipelines them and waits for every confirmation), and each is
		 * acknowledged only once its target confirmed it.
		 */
		if (n > 0)
		{
			RelayMessage *m = calloc(n, sizeof(RelayMessage));
			RelayResult *results = calloc(n, sizeof(RelayResult));
			char	  (*errors)[RELAY_ERROR_SIZE] = calloc(n, RELAY_ERROR_SIZE);
			int		   *retry_after = calloc(n, sizeof(int));
			PGresult  **headers = calloc(n, sizeof(PGresult *));
			unsigned char **bytes = calloc(n, sizeof(unsigned char *));
			bool		readable = true;

			for (i = 0; i < n; i++)
			{
				m[i].id = PQgetvalue(res, i, 0);
				m[i].topic = PQgetvalue(res, i, 1);
				m[i].key = PQgetvalue(res, i, 2);
				m[i].position = PQgetvalue(res, i, 3);
				if (!PQgetisnull(res, i, 4))
				{
					m[i].body = PQgetvalue(res, i, 4);
					m[i].body_len = PQgetlength(res, i, 4);
				}
				else
				{
					bytes[i] = PQunescapeBytea((const unsigned char *) PQgetvalue(res, i, 5),
											   &m[i].body_len);
					m[i].body = (const char *) bytes[i];
					m[i].binary = true;
				}
				if (!PQgetisnull(res, i, 6) &&
					read_headers(conn, PQgetvalue(res, i, 6), &m[i], &headers[i]) != 0)
				{
					relay_log("reading a message's headers failed: %s", PQerrorMessage(conn));
					readable = false;
				}
				retry_after[i] = -1;
			}
			if (!readable)
				for (i = 0; i < n; i++)
				{
					results[i] = RELAY_RETRY;
					snprintf(errors[i], RELAY_ERROR_SIZE, "the relay could not read the headers");
				}
			else
			{
				if (open == NULL)
				{
					char	   *secret = secret_for(target);

					open = transport->open(target, secret, errors[0]);
					free(secret);
					for (i = 1; open == NULL && i < n; i++)
						memcpy(errors[i], errors[0], RELAY_ERROR_SIZE);
				}
				if (open == NULL)
					for (i = 0; i < n; i++)
						results[i] = RELAY_DOWN;
				else if (transport->deliver_batch != NULL)
					transport->deliver_batch(open, m, n, results, errors, retry_after);
				else
					for (i = 0; i < n; i++)
						results[i] = (i > 0 && results[i - 1] == RELAY_DOWN) ? RELAY_DOWN :
							transport->deliver(open, &m[i], errors[i], &retry_after[i]);
			}
			for (i = 0; i < n; i++)
				if (results[i] == RELAY_DOWN && i > 0 && errors[i][0] == '\0')
					memcpy(errors[i], errors[i - 1], RELAY_ERROR_SIZE);
			if (open != NULL && results[n - 1] == RELAY_DOWN)
			{
				transport->close(open);
				open = NULL;
			}

			/* One line per change of the target's state */
			for (i = 0; i < n; i++)
				if ((results[i] == RELAY_DOWN ? 0 : 1) != target_state)
				{
					target_state = results[i] == RELAY_DOWN ? 0 : 1;
					if (target_state == 1)
						relay_log("the target is reachable");
					else
						relay_log("the target is unreachable: %s", errors[i]);
				}

			if (!settle_batch(conn, res, n, results, errors, retry_after, m) &&
				PQstatus(conn) != CONNECTION_OK)
			{
				PQfinish(conn);
				conn = NULL;
			}
			for (i = 0; i < n; i++)
			{
				free((void *) m[i].header_names);
				free((void *) m[i].header_values);
				PQclear(headers[i]);
				if (bytes[i])
					PQfreemem(bytes[i]);
			}
			free(m);
			free(results);
			free(errors);
			free(retry_after);
			free(headers);
			free(bytes);
		}
		PQclear(res);
	}
	if (open != NULL)
		transport->close(open);
	if (conn != NULL)
		PQfinish(conn);
	if (stopping)
		relay_log("stopped");
	return status;
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
	if ((conn = connect_db()) == NULL)
		return -1;
	res = PQexec(conn, "SELECT DISTINCT t.target FROM outbox_targets() AS t ORDER BY 1");
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		relay_log("outbox_targets() failed: %s", PQerrorMessage(conn));
		n = -1;
	}
	else
		for (i = 0; i < PQntuples(res) && n < MAX_TARGETS; i++)
			targets[n++] = strdup(PQgetvalue(res, i, 0));
	PQclear(res);
	PQfinish(conn);
	return n;
}

static void
usage(void)
{
	printf("inbox-relay delivers the outbox of a database to its routes' targets.\n\n"
		   "Usage:\n  inbox-relay [OPTION]... CONNINFO\n\n"
		   "Options:\n"
		   "  --target=URL        deliver to this target only (repeatable); default: every route's\n"
		   "  --secrets=FILE      the targets' secrets, one \"TARGET SECRET\" per line, mode 600\n"
		   "  --batch=N           messages per fetch, at most one per key (default 100)\n"
		   "  --lease=SECONDS     how long a fetched message is the relay's (default 30)\n"
		   "  --wait=SECONDS      how long a fetch waits for a send's commit (default 10)\n"
		   "  --refresh=SECONDS   how often the routes are read again (default 30)\n"
		   "  --once              deliver what is pending, then exit\n"
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
		{"wait", required_argument, NULL, 'w'},
		{"refresh", required_argument, NULL, 'r'},
		{"once", no_argument, NULL, 'o'},
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
				secrets_path = optarg;
				break;
			case 'b':
				batch = int_option("batch", optarg, 1, 1000);
				break;
			case 'l':
				lease_seconds = int_option("lease", optarg, 1, 86400);
				break;
			case 'w':
				wait_seconds = int_option("wait", optarg, 1, 60);
				break;
			case 'r':
				refresh_seconds = int_option("refresh", optarg, 1, 86400);
				break;
			case 'o':
				once = true;
				break;
			case 'h':
				usage();
				return 0;
			default:
				fprintf(stderr, "Try \"inbox-relay --help\".\n");
				return 2;
		}
	}
	if (optind != argc - 1)
	{
		fprintf(stderr, "inbox-relay: one CONNINFO is needed\nTry \"inbox-relay --help\".\n");
		return 2;
	}
	conninfo = argv[optind];
	if (secrets_path != NULL)
	{
		struct stat st;

		if (stat(secrets_path, &st) != 0)
		{
			fprintf(stderr, "inbox-relay: cannot read the secrets file \"%s\": %s\n",
					secrets_path, strerror(errno));
			return 2;
		}
		if (st.st_mode & (S_IRWXG | S_IRWXO))
		{
			fprintf(stderr, "inbox-relay: the secrets file \"%s\" is readable by group or others; "
					"chmod 600 it\n", secrets_path);
			return 2;
		}
	}

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	/*
	 * The parent: a child per target, started again when it dies (not
	 * with --once, where each child ends when its target has nothing
	 * pending).
	 */
	while (!stopping)
	{
		pid_t		pid;
		int			wstatus;

		if (!once && time(NULL) - last_read >= refresh_seconds)
		{
			char	   *fresh[MAX_TARGETS];
			int			nfresh = read_targets(fresh);

			last_read = time(NULL);
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
					free(fresh[i]);
				}
			}
		}
		else if (once && ntargets == 0)
		{
			ntargets = read_targets(targets);
			if (ntargets < 0)
				return 1;
		}

		for (i = 0; i < ntargets; i++)
		{
			if (children[i] != 0 || (once && children[i] == -1))
				continue;
			pid = fork();
			if (pid == 0)
				_exit(deliver_target(targets[i]));
			if (pid < 0)
				relay_log("fork failed: %s", strerror(errno));
			else
				children[i] = pid;
		}

		pid = waitpid(-1, &wstatus, once ? 0 : WNOHANG);
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
					children[i] = (once || ended_well) ? -1 : 0;
			if (!ended_well)
			{
				relay_log("a target's process ended with status %d", wstatus);
				status = 1;
			}
			if (!once && !stopping)
				sleep(1);		/* no tight loop on a target that fails at once */
		}
		else if (once && pid < 0)
			break;				/* every child ended */
		else if (!once)
			sleep(1);
	}

	/* Stopping: the children finish the message they deliver, and exit */
	for (i = 0; i < ntargets; i++)
		if (children[i] > 0)
			kill(children[i], SIGTERM);
	while (wait(NULL) > 0 || errno == EINTR)
		;
	return once ? status : 0;
}
