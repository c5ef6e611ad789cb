/*-------------------------------------------------------------------------
 *
 * loop.c
 *	  inbox-relay: a child's loop, which delivers the outbox of one target.
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
 * A child waits for work in outbox_fetch with a wait, which the commit of
 * a send to its target wakes: no fixed sleep, and no NOTIFY.  It holds
 * two database connections, one that fetches and one that records
 * outcomes (see relay_deliver_target); either one that breaks connects
 * again with the same conninfo, so a multi-host conninfo with
 * target_session_attrs=read-write follows a failover.
 *
 * relay/loop.c
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"

PGcancel   *volatile relay_fetch_cancel = NULL;

/*
 * The secret of target in the secrets file, or NULL.  The file is read at
 * each use, so that a changed secret is taken at the next (re)connection.
 */
char *
relay_secret_for(const char *target)
{
	FILE	   *f;
	struct stat st;
	char		line[4096];
	char	   *found = NULL;

	if (relay_options.secrets_path == NULL)
		return NULL;
	if (stat(relay_options.secrets_path, &st) != 0 || (f = fopen(relay_options.secrets_path, "r")) == NULL)
	{
		relay_log("cannot read the secrets file \"%s\": %s", relay_options.secrets_path, strerror(errno));
		return NULL;
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO))
	{
		relay_log("the secrets file \"%s\" is readable by group or others: not used "
				  "(chmod 600 it)", relay_options.secrets_path);
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

/* A database connection, retried with a backoff until it works or we stop */
PGconn *
relay_connect_db(void)
{
	int			delay = 1;

	while (!relay_stopping)
	{
		PGconn	   *conn = PQconnectdb(relay_options.conninfo);

		if (PQstatus(conn) == CONNECTION_OK)
		{
			PQclear(PQexec(conn, "SET application_name = 'inbox-relay'"));
			return conn;
		}
		relay_log("cannot connect to the database: %s", PQerrorMessage(conn));
		PQfinish(conn);
		if (relay_options.once)
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
	double		fetched_at;		/* relay_now() when it was fetched */
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
	b->fetched_at = relay_metrics_fetched(n);
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
		r->ack_conn = relay_connect_db();
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
		{
			relay_metrics_dead();
			relay_log("message %s is dead after its last attempt", b->m[i].id);
		}
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
	relay_metrics_settled(b->results, b->n, b->fetched_at);
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
	char	   *secret = relay_secret_for(r->target);

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
int
relay_deliver_target(const char *target)
{
	Relay		r = {target, relay_transport_for(target), NULL, NULL, -1, {NULL}, 0, NULL, 0, false, 0, 0};
	char		batch_s[16],
				lease_s[32],
				wait_s[32];
	int			status = 0;
	int			n;

	relay_log_prefix(target);
	relay_metrics_child(target);
	if (r.transport == NULL)
	{
		{
			char		schemes[256];

			relay_log("no transport for this target: this relay serves %s",
					  relay_schemes(schemes, sizeof(schemes)));
		}
		return 2;
	}
	n = r.transport->batch_limit != NULL ? r.transport->batch_limit() : relay_options.batch;
	snprintf(batch_s, sizeof(batch_s), "%d", n < relay_options.batch ? n : relay_options.batch);
	snprintf(lease_s, sizeof(lease_s), "%d seconds", relay_options.lease_seconds);
	snprintf(wait_s, sizeof(wait_s), "%d seconds", relay_options.wait_seconds);

	while (!relay_stopping || r.nwindow > 0 || r.prefetching)
	{
		/* Wait for a commit only with nothing in flight */
		const char *params[4] = {target, batch_s, lease_s,
		(relay_options.once || r.nwindow > 0) ? NULL : wait_s};
		PGresult   *res = NULL;
		PGcancel   *cancel;
		bool		was_idle = r.nwindow == 0 && !r.prefetching;
		bool		stop = false;
		bool		fetched;

		/* Nothing in flight: what was acknowledged is fetchable first */
		if (was_idle)
			ack_collect(&r);
		if (was_idle)
			relay_beat_idle(r.conn, target);

		/*
		 * A target that went down is tried again only after a delay, and
		 * nothing is fetched for it meanwhile; --once stops there.
		 */
		if (was_idle && r.down_delay > 0 && !relay_stopping)
		{
			if (relay_options.once)
			{
				relay_log("the target is unreachable: stopping");
				break;
			}
			if (time(NULL) < r.retry_at)
			{
				while (!relay_stopping && time(NULL) < r.retry_at)
					sleep(1);
				continue;
			}
		}
		if (was_idle && r.open == NULL && !relay_stopping && !target_open(&r))
			continue;

		if (r.conn == NULL && !relay_stopping)
		{
			if ((r.conn = relay_connect_db()) == NULL)
			{
				status = 1;
				break;
			}
			relay_log("connected to the database; delivering (batches of %s, lease %d s, timeout %d s)",
					  batch_s, relay_options.lease_seconds, relay_timeout);
		}
		if (r.prefetching || (!relay_stopping && r.conn != NULL))
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
				relay_fetch_cancel = cancel;
				res = PQexecParams(r.conn, FETCH_SQL, 4, NULL, params, NULL, NULL, 0);
				relay_fetch_cancel = NULL;
				PQfreeCancel(cancel);
			}
			if (PQresultStatus(res) != PGRES_TUPLES_OK)
			{
				/* Stopped while waiting: only the batches in flight remain */
				if (!relay_stopping)
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
						if (relay_options.once)
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
		relay_beat_fetched(r.conn, target, fetched || r.nwindow > 0);
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
			if (!relay_stopping && b->readable && r.open != NULL)
			{
				params[3] = NULL;
				r.prefetching = PQsendQueryParams(r.conn, FETCH_SQL, 4, NULL, params,
												  NULL, NULL, 0) == 1;
			}
			batch_deliver(&r, b);
		}
		else if (stop || (relay_options.once && was_idle))
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
			   (r.nwindow == RELAY_WINDOW || !fetched || relay_stopping))
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
	if (relay_stopping)
		relay_log("stopped");
	return status;
}

/* The targets to deliver to: --target's, or every route's */
