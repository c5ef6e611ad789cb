/*-------------------------------------------------------------------------
 *
 * ingest.c
 *	  inbox-relay: a child's loop for one subscription, which reads a
 *	  broker's queue (a source, relay.h) into an inbox.
 *
 * The order that loses nothing: take a batch from the broker, write it
 * into the inbox in one transaction (inbox_receive_many, one statement
 * per kind of payload), COMMIT, and only then acknowledge the batch to
 * the broker.  A relay that dies between the commit and the
 * acknowledgement leaves the batch to be delivered again; the inbox finds
 * each id stored already, a duplicate, and the copy is acknowledged
 * without a second entry.  Nothing is acknowledged that has not committed.
 *
 * What the database refuses on a message's own account is recorded in the
 * inbox's ingest rejects (inbox_ingest_reject, in the same transaction as
 * the batch) and then acknowledged, so that it is never lost and never
 * holds the queue back: a message without a usable id at once, other
 * content under an id the inbox holds (IB002) at once, and a message that
 * fails with a data error (class 22: invalid JSON under a JSON content
 * type, an id too long) once it has failed max_attempts times.  Such a
 * failure makes the batch be written again message by message, each under
 * a savepoint, so that the others go in; the messages after the failing
 * one are handed back to the broker (release) with it, to keep the queue's
 * order, and come back as the next batch.  Every other failure (the
 * database or the broker gone, 42501 while a grant is revoked, 57P01,
 * 40001) is transient: nothing of the batch is acknowledged, it is handed
 * back, and the child tries again after a backoff, without limit.  A
 * content the scope's content window refuses as sent again under a new
 * id (IB007) is acknowledged without being stored, as a duplicate id is.
 *
 * The message id is the broker's (AMQP's message_id), or the header the
 * subscription's message_id_header names; the group key, when the
 * subscription's group_key asks for one, the broker's routing key
 * ('routing_key') or a header ('header:NAME'), so that the inbox's
 * workers keep each key's order.  A payload under a JSON content type
 * (application/json, or any type ending in +json) is stored as jsonb,
 * anything else as bytea.
 *
 * relay/ingest.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "daemon.h"
#include "receive.h"

/* How many message ids' failed attempts a child keeps in mind */
#define ATTEMPTS_KEPT 256

/* How long a fetch waits for a first message, so that a stop is seen */
#define FETCH_WAIT_MS 1000

/*
 * With --once, how many empty fetches a source that knows its end (a
 * Kafka consumer waiting for the group's assignment) gets to reach it
 */
#define ONCE_WAITS_MAX 60

typedef enum Written
{
	WRITTEN,					/* committed */
	REFUSED,					/* a data error (class 22) of one message */
	REPEATED,					/* the scope's content window found a content
								 * sent again under a new id (IB007) */
	TRANSIENT					/* anything else: try again later */
} Written;

/* What the loop makes of a message: its id, group and kind, or a reject */
typedef struct Item
{
	const char *id;				/* NULL: none usable */
	const char *group_key;
	char	   *headers;		/* the headers as a JSON object, or NULL */
	bool		json;
	bool		rejected;		/* to be recorded as a reject */
	char		reason[RELAY_ERROR_SIZE];
} Item;

typedef struct Ingest
{
	const char *scope;
	const char *source;
	const RelaySource *src;
	RelayInlet *in;
	PGconn	   *conn;
	char	   *options;		/* the subscription's, as JSON text */
	int			batch;
	int			max_attempts;
	char	   *id_header;		/* message_id_header, or NULL */
	char	   *group;			/* group_key, or NULL */
	int			delay;			/* the backoff, 0 while all goes well */
	struct
	{
		char	   *id;
		int			count;
	}			attempts[ATTEMPTS_KEPT];
	int			next_attempt;
} Ingest;

void
relay_ingest_free(RelayIngest *m, int n)
{
	for (int i = 0; i < n; i++)
	{
		for (int h = 0; h < m[i].nheaders; h++)
		{
			free(m[i].header_names[h]);
			free(m[i].header_values[h]);
		}
		free(m[i].header_names);
		free(m[i].header_values);
		free(m[i].broker_id);
		free(m[i].message_id);
		free(m[i].body);
		free(m[i].content_type);
		free(m[i].routing_key);
	}
}

static const char *
header(const RelayIngest *m, const char *name)
{
	for (int h = 0; h < m->nheaders; h++)
		if (strcasecmp(m->header_names[h], name) == 0)
			return m->header_values[h];
	return NULL;
}

static bool
json_type(const char *type)
{
	size_t		len;

	if (type == NULL)
		return false;
	len = strcspn(type, "; ");
	return (len == 16 && strncasecmp(type, "application/json", 16) == 0) ||
		(len >= 5 && strncasecmp(type + len - 5, "+json", 5) == 0);
}

static void
make_item(const Ingest *g, const RelayIngest *m, Item *it)
{
	const char *refusal;

	memset(it, 0, sizeof(*it));
	it->id = g->id_header ? header(m, g->id_header) : m->message_id;
	if (it->id != NULL && it->id[0] == '\0')
		it->id = NULL;
	if (g->group != NULL && strcmp(g->group, "routing_key") == 0)
		it->group_key = m->routing_key;
	else if (g->group != NULL && strncmp(g->group, "header:", 7) == 0)
		it->group_key = header(m, g->group + 7);
	if (it->group_key != NULL && it->group_key[0] == '\0')
		it->group_key = NULL;
	it->json = json_type(m->content_type);
	if (it->id == NULL)
	{
		it->rejected = true;
		snprintf(it->reason, RELAY_ERROR_SIZE, "no message id: %s", g->id_header ?
				 "the message_id_header is missing or empty" : "the message has no message_id");
		return;
	}

	/*
	 * The headers go with the message, exactly, for its worker; headers the
	 * inbox cannot keep as they are make the message a reject at once,
	 * since no later attempt would change them.
	 */
	if ((refusal = m->header_refusal) == NULL)
		refusal = relay_headers_refusal(m->nheaders, (const char *const *) m->header_names,
										(const char *const *) m->header_values);
	if (refusal != NULL)
	{
		it->rejected = true;
		snprintf(it->reason, RELAY_ERROR_SIZE, "headers the inbox cannot keep: %s", refusal);
		return;
	}
	it->headers = relay_headers_json(m->nheaders, (const char *const *) m->header_names,
									 (const char *const *) m->header_values);
}

/*
 * A statement's outcome: WRITTEN when it ran as wanted, else by its
 * SQLSTATE, with the SQLSTATE and the message into error
 */
static Written
outcome(PGresult *res, ExecStatusType want, char *error)
{
	const char *state;

	if (PQresultStatus(res) == want)
		return WRITTEN;
	state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	snprintf(error, RELAY_ERROR_SIZE, "%s: %s", state ? state : "08006",
			 PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) ?
			 PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : "the connection to the database broke");
	if (state != NULL && strcmp(state, "IB007") == 0)
		return REPEATED;
	return state != NULL && strncmp(state, "22", 2) == 0 ? REFUSED : TRANSIENT;
}

static Written
run(Ingest *g, const char *sql, char *error)
{
	PGresult   *res = PQexec(g->conn, sql);
	Written		w = outcome(res, PGRES_COMMAND_OK, error);

	PQclear(res);
	return w;
}

/*
 * Receive which[0..count) of one kind in one statement; a mismatch (IB002)
 * marks its item rejected
 */
static Written
receive(Ingest *g, const RelayIngest *m, Item *it, const int *which, int count, bool json,
		char *error)
{
	RelayReceived *r = malloc(count * sizeof(RelayReceived));
	PGresult   *res;
	Written		w;

	for (int i = 0; i < count; i++)
		r[i] = (RelayReceived)
	{
		it[which[i]].id, m[which[i]].body, m[which[i]].body_len, it[which[i]].group_key,
			it[which[i]].headers
	};
	res = relay_receive_many(g->conn, g->scope, r, count, !json, true, true);
	free(r);
	if ((w = outcome(res, PGRES_TUPLES_OK, error)) == WRITTEN)
		for (int r = 0; r < PQntuples(res); r++)
		{
			int			k = atoi(PQgetvalue(res, r, 0)) - 1;

			if (k < 0 || k >= count || strcmp(PQgetvalue(res, r, 1), "mismatch") != 0)
				continue;
			it[which[k]].rejected = true;
			snprintf(it[which[k]].reason, RELAY_ERROR_SIZE,
					 "IB002: the inbox holds other content under message id \"%s\"", it[which[k]].id);
		}
	PQclear(res);
	return w;
}

/*
 * Record m as a reject, with its headers; a header the database cannot
 * take as text (not UTF-8) drops the headers, under a savepoint, rather
 * than the reject
 */
static Written
reject(Ingest *g, const RelayIngest *m, const char *reason, char *error)
{
	RelayText	names = {0},
				values = {0};
	const char *params[7] = {g->scope, g->source, m->broker_id, reason, m->body, NULL, NULL};
	int			lengths[7] = {0, 0, 0, 0, (int) m->body_len, 0, 0};
	int			formats[7] = {0, 0, 0, 0, 1, 0, 0};
	Written		w = WRITTEN;

	relay_text_append(&names, "{", 1);
	relay_text_append(&values, "{", 1);
	for (int h = 0; h < m->nheaders; h++)
	{
		relay_text_element(&names, m->header_names[h], strlen(m->header_names[h]), false);
		relay_text_element(&values, m->header_values[h], strlen(m->header_values[h]), false);
	}
	relay_text_append(&names, "}", 1);
	relay_text_append(&values, "}", 1);
	if (m->nheaders > 0)
	{
		params[5] = names.data;
		params[6] = values.data;
	}
	for (int with_headers = 1; with_headers >= 0; with_headers--)
	{
		PGresult   *res;

		if ((w = run(g, "SAVEPOINT reject", error)) != WRITTEN)
			break;
		res = PQexecParams(g->conn, "SELECT inbox_ingest_reject($1, $2, $3, $4, $5::bytea, "
						   "pg_catalog.jsonb_object($6::text[], $7::text[]))",
						   7, NULL, params, lengths, formats, 0);
		w = outcome(res, PGRES_TUPLES_OK, error);
		PQclear(res);
		if (w != REFUSED || !with_headers)
			break;
		if ((w = run(g, "ROLLBACK TO SAVEPOINT reject", error)) != WRITTEN)
			break;
		params[5] = params[6] = NULL;
	}
	free(names.data);
	free(values.data);
	if (w == WRITTEN)
		relay_log("message %s (broker id %s) rejected: %s", m->message_id ? m->message_id : "without id",
				  m->broker_id, reason);
	return w;
}

/*
 * The batch at once: one transaction, a statement per kind of payload,
 * the rejects, COMMIT
 */
static Written
write_batch(Ingest *g, const RelayIngest *m, Item *it, int n, char *error)
{
	int		   *which = malloc(n * sizeof(int));
	Written		w = run(g, "BEGIN", error);

	for (int kind = 0; kind < 2 && w == WRITTEN; kind++)
	{
		int			count = 0;

		for (int i = 0; i < n; i++)
			if (!it[i].rejected && it[i].json == (kind == 0))
				which[count++] = i;
		if (count > 0)
			w = receive(g, m, it, which, count, kind == 0, error);
	}
	for (int i = 0; i < n && w == WRITTEN; i++)
		if (it[i].rejected)
			w = reject(g, &m[i], it[i].reason, error);
	free(which);
	if (w == WRITTEN)
		return run(g, "COMMIT", error);
	PQclear(PQexec(g->conn, "ROLLBACK"));
	return w;
}

/* Count a failed attempt at id; whether it was the last one allowed */
static bool
last_attempt(Ingest *g, const char *id)
{
	int			k;

	for (k = 0; k < ATTEMPTS_KEPT; k++)
		if (g->attempts[k].id != NULL && strcmp(g->attempts[k].id, id) == 0)
			break;
	if (k == ATTEMPTS_KEPT)
	{
		k = g->next_attempt;
		g->next_attempt = (k + 1) % ATTEMPTS_KEPT;
		free(g->attempts[k].id);
		g->attempts[k].id = strdup(id);
		g->attempts[k].count = 0;
	}
	if (++g->attempts[k].count < g->max_attempts)
		return false;
	free(g->attempts[k].id);
	g->attempts[k].id = NULL;
	return true;
}

/*
 * The batch message by message, each under a savepoint, after a data
 * error refused the whole of it.  Returns how many of m, from the first,
 * are written (or rejected) and committed: a message refused before its
 * last attempt, and those after it, are not.  -1 on a transient failure.
 */
static int
write_each(Ingest *g, const RelayIngest *m, Item *it, int n, char *error)
{
	int			done = 0;
	Written		w = run(g, "BEGIN", error);

	for (; done < n && w == WRITTEN; done++)
	{
		int			one = done;
		char		why[RELAY_ERROR_SIZE];

		it[one].rejected = it[one].id == NULL;
		if (!it[one].rejected)
		{
			if ((w = run(g, "SAVEPOINT one", error)) != WRITTEN)
				break;
			w = receive(g, m, it, &one, 1, it[one].json, why);
			if (w == REPEATED)
			{
				/* A content duplicate: acknowledged, as a duplicate id is */
				relay_log("message %s (broker id %s) not stored: %s", it[one].id, m[one].broker_id, why);
				w = run(g, "ROLLBACK TO SAVEPOINT one", error);
				continue;
			}
			if (w == REFUSED)
			{
				relay_log("message %s (broker id %s) refused: %s", it[one].id, m[one].broker_id, why);
				if ((w = run(g, "ROLLBACK TO SAVEPOINT one", error)) != WRITTEN)
					break;
				if (!last_attempt(g, it[one].id))
					break;		/* handed back, with those after it */
				it[one].rejected = true;
				snprintf(it[one].reason, RELAY_ERROR_SIZE, "%.400s (after %d attempts)", why, g->max_attempts);
			}
			else if (w != WRITTEN)
			{
				memcpy(error, why, RELAY_ERROR_SIZE);
				break;
			}
		}
		if (it[one].rejected)
			w = reject(g, &m[one], it[one].reason, error);
	}
	if (w == WRITTEN)
		w = run(g, "COMMIT", error);
	else
		PQclear(PQexec(g->conn, "ROLLBACK"));
	return w == WRITTEN ? done : -1;
}

/*
 * For tests only: while the file named by INBOX_RELAY_TEST_PAUSE_ACK
 * exists, a child waits after each commit of a batch, before it
 * acknowledges it, as if it were stopped there (relay/README.md).
 */
static void
test_pause(void)
{
	const char *path = getenv("INBOX_RELAY_TEST_PAUSE_ACK");
	bool		said = false;

	while (path != NULL && *path != '\0' && access(path, F_OK) == 0 && !relay_stopping)
	{
		if (!said)
			relay_log("test pause: waiting after a commit while %s exists", path);
		said = true;
		usleep(100 * 1000);
	}
}

/*
 * Write a batch, then acknowledge what committed, hand back the rest.
 * How many were written and acknowledged.
 */
static int
settle(Ingest *g, const RelayIngest *m, int n)
{
	Item	   *it = malloc(n * sizeof(Item));
	char		error[RELAY_ERROR_SIZE] = "";
	int			done,
				acked = 0;

	for (int i = 0; i < n; i++)
		make_item(g, &m[i], &it[i]);
	switch (write_batch(g, m, it, n, error))
	{
		case WRITTEN:
			done = n;
			break;
		case REFUSED:
		case REPEATED:
			relay_debug(1, "batch of %d refused (%s): written message by message", n, error);
			done = write_each(g, m, it, n, error);
			break;
		default:
			done = -1;
	}
	if (done >= 0)
	{
		test_pause();
		if (done > 0 && !g->src->ack(g->in, m, done, error))
		{
			/* Delivered again, they are duplicates, acknowledged then */
			relay_log("acknowledging a written batch failed: %s", error);
			g->src->close(g->in);
			g->in = NULL;
		}
		else
		{
			acked = done;
			if (done < n)
				g->src->release(g->in);
		}
		relay_debug(1, "%d message(s) written and acknowledged, %d handed back", done, n - done);
		g->delay = 0;
	}
	else
	{
		relay_log("batch of %d not written, handed back to the broker: %s", n, error);
		g->src->release(g->in);
		if (PQstatus(g->conn) != CONNECTION_OK)
		{
			PQfinish(g->conn);
			g->conn = NULL;
		}
		g->delay = g->delay == 0 ? 1 : (g->delay < 30 ? g->delay * 2 : 30);
		sleep(g->delay);
	}
	for (int i = 0; i < n; i++)
		free(it[i].headers);
	free(it);
	return acked;
}

/*
 * The subscription's options; 0 when read, 1 when it is gone (the child
 * has nothing to do), -1 when they cannot be read
 */
static int
read_options(Ingest *g)
{
	const char *params[2] = {g->scope, g->source};
	PGresult   *res = PQexecParams(g->conn,
								   "SELECT coalesce((s.options OPERATOR(pg_catalog.->>) 'batch')::integer, 100), "
								   "coalesce((s.options OPERATOR(pg_catalog.->>) 'max_attempts')::integer, 5), "
								   "s.options OPERATOR(pg_catalog.->>) 'message_id_header', "
								   "s.options OPERATOR(pg_catalog.->>) 'group_key', "
								   "coalesce(s.options, '{}')::text "
								   "FROM inbox_subscriptions AS s WHERE s.scope = $1 AND s.source = $2",
								   2, NULL, params, NULL, NULL, 0);
	int			rc = -1;

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		relay_log("reading the subscription failed: %s", PQerrorMessage(g->conn));
	else if (PQntuples(res) == 0)
		rc = 1;
	else
	{
		free(g->id_header);
		free(g->group);
		free(g->options);
		g->batch = atoi(PQgetvalue(res, 0, 0));
		g->max_attempts = atoi(PQgetvalue(res, 0, 1));
		g->id_header = PQgetisnull(res, 0, 2) ? NULL : strdup(PQgetvalue(res, 0, 2));
		g->group = PQgetisnull(res, 0, 3) ? NULL : strdup(PQgetvalue(res, 0, 3));
		g->options = strdup(PQgetvalue(res, 0, 4));
		rc = 0;
	}
	PQclear(res);
	return rc;
}

/*
 * Whether inbox_subscribe or inbox_unsubscribe notified a change of this
 * subscription, seen without a round trip (the child LISTENs on its
 * connection, between its transactions)
 */
static bool
subscription_changed(Ingest *g)
{
	size_t		len = strlen(g->scope);
	bool		changed = false;
	PGnotify   *note;

	if (PQconsumeInput(g->conn) == 0)
	{
		/* Connected again (and listening) before the next batch */
		PQfinish(g->conn);
		g->conn = NULL;
		return false;
	}
	while ((note = PQnotifies(g->conn)) != NULL)
	{
		changed |= strncmp(note->extra, g->scope, len) == 0 && note->extra[len] == ' ' &&
			strcmp(note->extra + len + 1, g->source) == 0;
		PQfreemem(note);
	}
	return changed;
}

/*
 * The loop of a child that reads source into scope, until it is stopped
 * (or, with --once, until the source has nothing more); its exit status
 */
int
relay_ingest(const char *scope, const char *source)
{
	Ingest		g = {.scope = scope, .source = source};
	char	   *secret = relay_secret_for(source);
	RelayIngest *m = NULL;
	int			status = 0;
	bool		reread = true;
	double		idle_beat = 0;
	int			once_waits = 0;

	relay_log_prefix(source);
	if ((g.src = relay_source_for(source)) == NULL)
	{
		relay_log("no source for this scheme: this relay reads none");
		return RELAY_EXIT_UNSERVED;
	}
	/* Its counts, in --metrics and outbox_relays, as a target's are */
	relay_metrics_child(source);
	while (!relay_stopping)
	{
		char		error[RELAY_ERROR_SIZE] = "";
		int			n;

		if (g.conn == NULL)
		{
			if ((g.conn = relay_connect_db()) == NULL)
			{
				status = 1;
				break;
			}
			PQclear(PQexec(g.conn, "LISTEN inbox_subscriptions"));
			reread = true;
		}
		if (reread)
		{
			char	   *before = g.options ? strdup(g.options) : NULL;

			if ((n = read_options(&g)) != 0)
			{
				free(before);
				if (n > 0)
					break;		/* no such subscription: nothing to do */
				PQfinish(g.conn);
				g.conn = NULL;
				sleep(1);
				continue;
			}
			reread = false;
			/* New options: the source opened again, with the new batch */
			if (before != NULL && strcmp(before, g.options) != 0 && g.in != NULL)
			{
				relay_log("the subscription's options changed: opening the source again");
				g.src->close(g.in);
				g.in = NULL;
				free(m);
				m = NULL;
			}
			free(before);
		}
		if (m == NULL)
			m = calloc(g.batch, sizeof(RelayIngest));
		if (g.in == NULL &&
			(g.in = g.src->open(source, secret, g.options, g.batch, error)) == NULL)
		{
			relay_log("cannot open the source: %s", error);
			if (relay_options.once)
			{
				status = 1;
				break;
			}
			g.delay = g.delay == 0 ? 1 : (g.delay < 30 ? g.delay * 2 : 30);
			sleep(g.delay);
			continue;
		}
		n = g.src->fetch(g.in, m, g.batch, FETCH_WAIT_MS, error);
		if (n < 0)
		{
			relay_log("the source went down: %s", error);
			g.src->close(g.in);
			g.in = NULL;
			continue;
		}
		/* --once: done when the source has nothing more for this reader */
		if (n == 0 && relay_options.once &&
			(g.src->at_end == NULL || g.src->at_end(g.in) || ++once_waits > ONCE_WAITS_MAX))
		{
			if (once_waits > ONCE_WAITS_MAX)
				relay_log("--once: the source did not say it was read to its end in %d s; stopping",
						  ONCE_WAITS_MAX);
			break;
		}
		if (n > 0)
		{
			double		started = relay_metrics_fetched(n);

			relay_metrics_counted(settle(&g, m, n), n, started);
		}
		relay_ingest_free(m, n);
		if (g.conn != NULL)
		{
			relay_beat_fetched(g.conn, source, n > 0);
			/* An idle source's row says it is alive once per --wait */
			if (n == 0 && relay_now() - idle_beat >= relay_options.wait_seconds)
			{
				relay_beat_idle(g.conn, source);
				idle_beat = relay_now();
			}
		}
		if (g.conn != NULL && subscription_changed(&g))
			reread = true;
	}
	if (g.in != NULL)
		g.src->close(g.in);
	PQfinish(g.conn);
	return status;
}
