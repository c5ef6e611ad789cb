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
 * after its target confirmed it, keeps every key's commit order; several
 * relays may run at once, since a lease is held by one fetch at a time;
 * and a relay that dies leaves its leased messages to the next fetch
 * after the lease, to be delivered again under the same id (at least
 * once; the id makes the copy harmless downstream).  A target that has
 * not answered within --timeout (by default half the lease less a second:
 * see main()) is given up on before another relay could take the message.
 *
 * One process per target: the parent reads the targets (outbox_targets(),
 * or those named by --target), starts a child for each, starts a child
 * again when it dies, and reads the targets again every --refresh
 * seconds.  A child waits for work in outbox_fetch with a wait, which the
 * commit of a send to its target wakes: no fixed sleep, and no NOTIFY.
 * A child holds two database connections, one that fetches and one that
 * records outcomes (see deliver_target); either one that breaks connects
 * again with the same conninfo, so a multi-host conninfo with
 * target_session_attrs=read-write follows a failover.
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
int			relay_timeout = 0;	/* 0: the default, see main() */
int			relay_http_connections = 16;
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

#define FETCH_SQL \
	"SELECT f.id, f.topic, f.key, f.position, f.payload, f.payload_bytes, f.headers, f.receipt " \
	"FROM outbox_fetch($1, $2::integer, $3::interval, $4::interval) AS f"

/* A fetched batch, and what became of each of its messages */
typedef struct Batch
{
	PGresult   *res;			/* outbox_fetch's rows, which m points into */
	int			n;
	RelayMessage *m;
	RelayResult *results;
	char		(*errors)[RELAY_ERROR_SIZE];
	int		   *retry_after;
	PGresult  **headers;
	unsigned char **bytes;
	bool		readable;		/* every message's headers could be read */
} Batch;

static Batch *
batch_read(PGconn *conn, PGresult *res)
{
	Batch	   *b = calloc(1, sizeof(Batch));
	int			n = PQntuples(res),
				i;

	b->res = res;
	b->n = n;
	b->m = calloc(n, sizeof(RelayMessage));
	b->results = calloc(n, sizeof(RelayResult));
	b->errors = calloc(n, RELAY_ERROR_SIZE);
	b->retry_after = calloc(n, sizeof(int));
	b->headers = calloc(n, sizeof(PGresult *));
	b->bytes = calloc(n, sizeof(unsigned char *));
	b->readable = true;
	for (i = 0; i < n; i++)
	{
		RelayMessage *m = &b->m[i];

		m->id = PQgetvalue(res, i, 0);
		m->topic = PQgetvalue(res, i, 1);
		m->key = PQgetvalue(res, i, 2);
		m->position = PQgetvalue(res, i, 3);
		if (!PQgetisnull(res, i, 4))
		{
			m->body = PQgetvalue(res, i, 4);
			m->body_len = PQgetlength(res, i, 4);
		}
		else
		{
			b->bytes[i] = PQunescapeBytea((const unsigned char *) PQgetvalue(res, i, 5),
										  &m->body_len);
			m->body = (const char *) b->bytes[i];
			m->binary = true;
		}
		if (!PQgetisnull(res, i, 6) &&
			read_headers(conn, PQgetvalue(res, i, 6), m, &b->headers[i]) != 0)
		{
			relay_log("reading a message's headers failed: %s", PQerrorMessage(conn));
			b->readable = false;
		}
		b->retry_after[i] = -1;
	}
	if (!b->readable)
		for (i = 0; i < n; i++)
		{
			b->results[i] = RELAY_RETRY;
			snprintf(b->errors[i], RELAY_ERROR_SIZE, "the relay could not read the headers");
		}
	return b;
}

static void
batch_free(Batch *b)
{
	int			i;

	for (i = 0; i < b->n; i++)
	{
		free((void *) b->m[i].header_names);
		free((void *) b->m[i].header_values);
		PQclear(b->headers[i]);
		if (b->bytes[i])
			PQfreemem(b->bytes[i]);
	}
	PQclear(b->res);
	free(b->m);
	free(b->results);
	free(b->errors);
	free(b->retry_after);
	free(b->headers);
	free(b->bytes);
	free(b);
}

/* The state of a target and of its database connection, for one child */
typedef struct Relay
{
	const char *target;
	const RelayTransport *transport;
	RelayTarget *open;			/* NULL until opened, or after it went down */
	PGconn	   *conn;
	int			target_state;	/* -1 unknown, 0 unreachable, 1 reachable */
	Batch	   *window[RELAY_WINDOW];	/* started, not finished: oldest first */
	int			nwindow;
	PGconn	   *ack_conn;		/* where outcomes are recorded */
	int			acks_sent;		/* in an outbox_ack_many not yet answered */
	bool		prefetching;	/* an outbox_fetch sent on conn, unanswered */
	int			down_delay;		/* seconds between tries of a target that went
								 * down, 0 while it is up */
	time_t		retry_at;		/* no fetch before then, while it is down */
} Relay;

/*
 * Outcomes are recorded over a connection of their own, and the relay does
 * not wait for the answer of an outbox_ack_many before it fetches again:
 * the fetch and the acknowledgement run side by side.  A fetch that runs
 * before an acknowledgement commits finds that batch's keys still leased
 * and passes over them; they are fetchable once it commits.
 */
static bool
ack_connect(Relay *r)
{
	if (r->ack_conn == NULL)
		r->ack_conn = connect_db();
	return r->ack_conn != NULL;
}

static void
ack_drop(Relay *r)
{
	PQfinish(r->ack_conn);
	r->ack_conn = NULL;
	r->acks_sent = 0;
}

/* Wait for the answer to the outbox_ack_many in flight, if one is */
static void
ack_collect(Relay *r)
{
	PGresult   *res;
	bool		ok = false;

	if (r->acks_sent == 0)
		return;
	while ((res = PQgetResult(r->ack_conn)) != NULL)
	{
		if (PQresultStatus(res) == PGRES_TUPLES_OK)
		{
			/* Column 1: outbox_ack_many's count, after set_config's result */
			int			acked = atoi(PQgetvalue(res, 0, 1));

			ok = true;
			if (acked != r->acks_sent)
				relay_log("%d delivered message(s) had run out of lease: another relay delivers them "
						  "again under the same id", r->acks_sent - acked);
		}
		else
			relay_log("acknowledging deliveries failed: %s", PQerrorMessage(r->ack_conn));
		PQclear(res);
	}
	r->acks_sent = 0;
	if (!ok && PQstatus(r->ack_conn) != CONNECTION_OK)
		ack_drop(r);
}

/*
 * Record the outcomes of a batch: each failed message with outbox_fail,
 * then the delivered ones with one outbox_ack_many, sent without waiting.
 * A message the target could not be reached for (RELAY_DOWN) fails with
 * reached false: the fetch does not count toward max_attempts, so that an
 * outage holds messages back instead of dead-lettering them, and it waits
 * as long as the relay waits before it tries the target again.  What
 * cannot be recorded (the connection broke) is left to its lease: when it
 * runs out, the message is fetched and delivered again under the same id.
 */
static void
record_outcomes(Relay *r, Batch *b)
{
	char	   *receipts;
	size_t		len = 0;
	int			i,
				delivered = 0;

	if (!ack_connect(r))
		return;
	ack_collect(r);
	for (i = 0; i < b->n && r->ack_conn != NULL; i++)
	{
		char		after[32];
		bool		down = b->results[i] == RELAY_DOWN;
		const char *params[4] = {PQgetvalue(b->res, i, 7), b->errors[i], NULL, down ? "false" : "true"};
		PGresult   *res;

		if (b->results[i] == RELAY_DELIVERED)
			continue;
		relay_log("message %s (key \"%s\", position %s) not delivered: %s",
				  b->m[i].id, b->m[i].key, b->m[i].position, b->errors[i]);
		if (down || b->retry_after[i] >= 0)
		{
			snprintf(after, sizeof(after), "%d seconds", down ? r->down_delay : b->retry_after[i]);
			params[2] = after;
		}
		res = PQexecParams(r->ack_conn, "SELECT outbox_fail($1::uuid, $2, $3::interval, $4::boolean)", 4,
						   NULL, params, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			relay_log("recording a failed delivery failed: %s", PQerrorMessage(r->ack_conn));
			if (PQstatus(r->ack_conn) != CONNECTION_OK)
				ack_drop(r);
		}
		else if (strcmp(PQgetvalue(res, 0, 0), "dead") == 0)
			relay_log("message %s is dead after its last attempt", b->m[i].id);
		PQclear(res);
	}
	if (r->ack_conn == NULL)
		return;

	receipts = malloc((size_t) b->n * 40 + 3);	/* {uuid,uuid,...} */
	receipts[len++] = '{';
	for (i = 0; i < b->n; i++)
		if (b->results[i] == RELAY_DELIVERED)
			len += snprintf(receipts + len, 40, "%s%.36s", delivered++ ? "," : "",
							PQgetvalue(b->res, i, 7));
	receipts[len++] = '}';
	receipts[len] = '\0';
	if (delivered > 0)
	{
		const char *params[1] = {receipts};

		/*
		 * The acknowledgement's transaction commits without waiting for the
		 * disk (set_config's local form: for this transaction only, so that
		 * behind a pooler it reaches no other session).  A key's next
		 * message is leased only by a fetch that saw the acknowledgement,
		 * and outbox_fetch's commit waits for the disk, which writes the
		 * acknowledgement's commit there first, since it comes first in the
		 * log: no message leaves before its key's previous acknowledgement
		 * is durable.  One lost in a crash only makes its message delivered
		 * again, under the same id, as when a relay dies before it
		 * acknowledges.
		 */
		if (PQsendQueryParams(r->ack_conn,
							  "SELECT pg_catalog.set_config('synchronous_commit', 'off', true), "
							  "outbox_ack_many($1::uuid[])", 1, NULL, params,
							  NULL, NULL, 0) == 1)
			r->acks_sent = delivered;
		else
		{
			relay_log("acknowledging deliveries failed: %s", PQerrorMessage(r->ack_conn));
			ack_drop(r);
		}
	}
	free(receipts);
}

/*
 * The target could not be reached: it is tried again a second after the
 * first time, then twice as long after each next try that fails, up to 30
 * seconds, and nothing is fetched for it meanwhile.  The batches that
 * were in flight when it went down are the same try.  Reaching it resets
 * the delay.
 */
static void
target_down(Relay *r)
{
	if (r->down_delay > 0 && time(NULL) < r->retry_at)
		return;
	r->down_delay = r->down_delay == 0 ? 1 : r->down_delay < 16 ? r->down_delay * 2 : 30;
	r->retry_at = time(NULL) + r->down_delay;
}

/* Log the target's change of state, if it is one */
static void
target_state(Relay *r, bool reachable, const char *error)
{
	if ((reachable ? 1 : 0) == r->target_state)
		return;
	r->target_state = reachable ? 1 : 0;
	if (reachable)
		relay_log("the target is reachable");
	else
		relay_log("the target is unreachable: %s", error);
}

/*
 * Log the target's changes of state, and record the outcomes of a batch;
 * then free it.  Whether the target could not be reached for one of its
 * messages.
 */
static bool
batch_settle(Relay *r, Batch *b)
{
	int			i;
	bool		down = false,
				up = false;

	for (i = 0; i < b->n; i++)
		if (b->results[i] == RELAY_DOWN)
			down = true;
		else
			up = true;
	if (down)
		target_down(r);
	else if (up)
		r->down_delay = 0;

	for (i = 1; i < b->n; i++)
		if (b->results[i] == RELAY_DOWN && b->errors[i][0] == '\0')
			memcpy(b->errors[i], b->errors[i - 1], RELAY_ERROR_SIZE);
	for (i = 0; i < b->n; i++)
		target_state(r, b->results[i] != RELAY_DOWN, b->errors[i]);
	record_outcomes(r, b);
	batch_free(b);
	return down;
}

/* Finish and settle the oldest started batch; whether the target went down */
static bool
window_finish_one(Relay *r)
{
	Batch	   *b = r->window[0];

	r->transport->finish_batch(r->open);
	r->nwindow--;
	memmove(&r->window[0], &r->window[1], r->nwindow * sizeof(Batch *));
	return batch_settle(r, b);
}

/*
 * Finish and settle the oldest started batch.  When the target went down
 * in it, every later started batch went down with it: those are finished
 * and settled too, and the target is closed, to be opened again.
 */
static void
window_finish_oldest(Relay *r)
{
	if (window_finish_one(r))
	{
		while (r->nwindow > 0)
			window_finish_one(r);
		r->transport->close(r->open);
		r->open = NULL;
	}
}

/*
 * Open the target, before anything is fetched for it, so that opening
 * takes nothing from a batch's lease; false, the target noted down, when
 * it cannot be.
 */
static bool
target_open(Relay *r)
{
	char		error[RELAY_ERROR_SIZE] = "";
	char	   *secret = secret_for(r->target);

	r->open = r->transport->open(r->target, secret, error);
	free(secret);
	if (r->open != NULL)
		return true;
	target_state(r, false, error);
	target_down(r);
	return false;
}

/*
 * Deliver a batch: started, to be finished later; or, when its messages
 * cannot be read, or the target went down while it was fetched, settled
 * at once (the target is opened again only before a fetch).
 */
static void
batch_deliver(Relay *r, Batch *b)
{
	if (b->readable && r->open == NULL)
		for (int i = 0; i < b->n; i++)
		{
			b->results[i] = RELAY_DOWN;
			snprintf(b->errors[i], RELAY_ERROR_SIZE, "the target went down before this batch was sent");
		}
	else if (b->readable)
	{
		r->transport->start_batch(r->open, b->m, b->n, b->results, b->errors, b->retry_after);
		r->window[r->nwindow++] = b;
		return;
	}
	batch_settle(r, b);
}

/*
 * Deliver the messages of target until stopped (or, with --once, until
 * none is pending).  Returns the exit status of the child.
 *
 * A batch holds at most one message per key, and a key's next message is
 * fetched only after this one is acknowledged: so the messages of a batch
 * may be sent together, and the next batch, which holds other keys only,
 * may be fetched and started while this one waits for its confirmations.
 * The database's work (fetch, acknowledge) overlaps the target's, and each
 * message is still acknowledged only once its target confirmed it.
 */
static int
deliver_target(const char *target)
{
	Relay		r = {target, transport_for(target), NULL, NULL, -1, {NULL}, 0, NULL, 0, false, 0, 0};
	char		batch_s[16],
				lease_s[32],
				wait_s[32];
	int			status = 0;
	int			n;

	snprintf(log_prefix, sizeof(log_prefix), "inbox-relay %s", target);
	if (r.transport == NULL)
	{
		relay_log("no transport for this target: amqp://, amqps://, http://, https:// and postgresql:// are known");
		return 2;
	}
	n = r.transport->batch_limit != NULL ? r.transport->batch_limit() : batch;
	snprintf(batch_s, sizeof(batch_s), "%d", n < batch ? n : batch);
	snprintf(lease_s, sizeof(lease_s), "%d seconds", lease_seconds);
	snprintf(wait_s, sizeof(wait_s), "%d seconds", wait_seconds);

	while (!stopping || r.nwindow > 0 || r.prefetching)
	{
		/* Wait for a commit only with nothing in flight */
		const char *params[4] = {target, batch_s, lease_s,
		(once || r.nwindow > 0) ? NULL : wait_s};
		PGresult   *res = NULL;
		PGcancel   *cancel;
		bool		was_idle = r.nwindow == 0 && !r.prefetching;
		bool		stop = false;
		bool		fetched;

		/* Nothing in flight: what was acknowledged is fetchable first */
		if (was_idle)
			ack_collect(&r);

		/*
		 * A target that went down is tried again only after a delay, and
		 * nothing is fetched for it meanwhile; --once stops there.
		 */
		if (was_idle && r.down_delay > 0 && !stopping)
		{
			if (once)
			{
				relay_log("the target is unreachable: stopping");
				break;
			}
			if (time(NULL) < r.retry_at)
			{
				while (!stopping && time(NULL) < r.retry_at)
					sleep(1);
				continue;
			}
		}
		if (was_idle && r.open == NULL && !stopping && !target_open(&r))
			continue;

		if (r.conn == NULL && !stopping)
		{
			if ((r.conn = connect_db()) == NULL)
			{
				status = 1;
				break;
			}
			relay_log("connected to the database; delivering (batches of %s, lease %d s, timeout %d s)",
					  batch_s, lease_seconds, relay_timeout);
		}
		if (r.prefetching || (!stopping && r.conn != NULL))
		{
			if (r.prefetching)
			{
				PGresult   *extra;

				res = PQgetResult(r.conn);
				while ((extra = PQgetResult(r.conn)) != NULL)
					PQclear(extra);
				r.prefetching = false;
			}
			else
			{
				cancel = PQgetCancel(r.conn);
				fetch_cancel = cancel;
				res = PQexecParams(r.conn, FETCH_SQL, 4, NULL, params, NULL, NULL, 0);
				fetch_cancel = NULL;
				PQfreeCancel(cancel);
			}
			if (PQresultStatus(res) != PGRES_TUPLES_OK)
			{
				/* Stopped while waiting: only the batches in flight remain */
				if (!stopping)
				{
					if (strcmp(sqlstate(res), "42704") == 0)
					{
						relay_log("the target has no route any more: stopping");
						stop = true;
					}
					else
					{
						relay_log("outbox_fetch failed: %s", PQerrorMessage(r.conn));
						if (PQstatus(r.conn) != CONNECTION_OK)
						{
							PQfinish(r.conn);
							r.conn = NULL;
						}
						if (once)
						{
							status = 1;
							stop = true;
						}
						else if (r.nwindow == 0)
							sleep(1);
					}
				}
				PQclear(res);
				res = NULL;
			}
			else if (PQntuples(res) == 0)
			{
				PQclear(res);
				res = NULL;
			}
		}
		fetched = res != NULL;
		if (fetched)
		{
			Batch	   *b = batch_read(r.conn, res);

			/*
			 * The next batch is fetched while this one is sent: the fetch
			 * leases other keys only, those of the batches in flight being
			 * leased already.  That batch starts once this one is sent and
			 * the one before is settled, within --timeout of its lease
			 * (see main()).
			 */
			if (!stopping && b->readable && r.open != NULL)
			{
				params[3] = NULL;
				r.prefetching = PQsendQueryParams(r.conn, FETCH_SQL, 4, NULL, params,
												  NULL, NULL, 0) == 1;
			}
			batch_deliver(&r, b);
		}
		else if (stop || (once && was_idle))
		{
			while (r.nwindow > 0)
				window_finish_oldest(&r);
			break;
		}

		/*
		 * Finish the oldest batch when the window is full, or when nothing
		 * new was started (nothing fetched, or stopping): then its keys'
		 * next messages become fetchable.
		 */
		while (r.nwindow > 0 &&
			   (r.nwindow == RELAY_WINDOW || !fetched || stopping))
			window_finish_oldest(&r);
	}
	while (r.nwindow > 0)
		window_finish_oldest(&r);
	ack_collect(&r);
	if (r.ack_conn != NULL)
		PQfinish(r.ack_conn);
	if (r.open != NULL)
		r.transport->close(r.open);
	if (r.conn != NULL)
		PQfinish(r.conn);
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
		   "Usage:\n  inbox-relay [OPTION]... CONNINFO\n\n"
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
			case 'T':
				relay_timeout = int_option("timeout", optarg, 1, 86400);
				break;
			case 'c':
				relay_http_connections = int_option("connections", optarg, RELAY_WINDOW, 1000);
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
		relay_timeout = (lease_seconds - 1) / 2;
		if (relay_timeout > 30)
			relay_timeout = 30;
		if (relay_timeout < 1)
			relay_timeout = 1;
	}
	else if (relay_timeout >= lease_seconds)
	{
		fprintf(stderr, "inbox-relay: --timeout (%d) must be shorter than --lease (%d)\n",
				relay_timeout, lease_seconds);
		return 2;
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
