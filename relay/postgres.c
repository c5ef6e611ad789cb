/*-------------------------------------------------------------------------
 *
 * postgres.c
 *	  inbox-relay's PostgreSQL transport: a message is received into the
 *	  inbox of another database, postgresql://...?scope=SCOPE, by
 *	  inbox_receive there, under the message's id.
 *
 * So two databases talk exactly once without a broker: the relay may
 * deliver a message twice (it died before its acknowledgement), and the
 * second inbox_receive of the id is a duplicate there, which counts as
 * delivered.  The same id with other content is refused there (IB002),
 * and so here.  The URL is given to libpq without its scope parameter;
 * the target's line of the secrets file, if any, is the password, and
 * libpq's password file serves too.
 *
 * A batch is received in one statement, and so in one transaction of the
 * other database, per kind of payload: inbox_receive_many with
 * on_mismatch => 'return', whose row for each id says received,
 * duplicate or mismatch.  A batch holds one message per key, so receiving
 * it at once changes no key's order.  A mismatch, and every message of a
 * statement that failed for a reason other than the connection or a
 * transient conflict (an older inbox there without the batch form, a
 * payload the inbox there refuses), is then delivered alone by
 * inbox_receive, so that one message refused never holds back the others
 * and its error is the one inbox_receive gives.  The batch is sent and
 * answered in start_batch, all its statements within --timeout of its
 * start; finish_batch has nothing left to wait for.
 *
 * A key's order holds there too: each message is received with its
 * outbox key as its group_key, so that the workers there take a key's
 * messages one at a time, in the order they were received, which is the
 * key's order here (a key's next message is fetched only once this one
 * is acknowledged, so after its receive committed there).  ordered=off in
 * the URL receives them in no group.  An inbox there older than group
 * keys (before 1.1.0) is found once per connection, and served without
 * them, with one line in the log.
 *
 * Each message's headers go with it, as the inbox's headers of the
 * message, for the workers there; an inbox older than headers (before
 * 1.2.0) is found once per connection too, and receives the messages
 * without them, with one line in the log.
 *
 * A failure records the other database's reason: its SQLSTATE and
 * message ("42501: permission denied for function inbox_receive_many").
 *
 * relay/postgres.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <libpq-fe.h>

#include "receive.h"
#include "relay.h"

struct RelayTarget
{
	PGconn	   *conn;
	char	   *scope;
	bool		grouped;		/* the key goes as the message's group_key */
	bool		headers;		/* the inbox there takes headers (1.2.0 on) */
	struct timeval deadline;	/* --timeout after the batch's start */
	int			statements;		/* run for the batch so far */
	long		timeout_ms;		/* the session's statement_timeout */
};

/*
 * url without the parameters the relay reads itself (scope, ordered),
 * which libpq would refuse, the rest of its query kept
 */
static char *
without_own_params(const char *url)
{
	const char *q = strchr(url, '?');
	char	   *out = malloc(strlen(url) + 1);
	size_t		o;
	bool		first = true;

	o = q ? (size_t) (q - url) : strlen(url);
	memcpy(out, url, o);
	while (q != NULL)
	{
		const char *p = q + 1;
		const char *end = p + strcspn(p, "&");

		if (!(strncmp(p, "scope=", 6) == 0 || strncmp(p, "ordered=", 8) == 0))
		{
			out[o++] = first ? '?' : '&';
			memcpy(out + o, p, end - p);
			o += end - p;
			first = false;
		}
		q = *end == '&' ? end : NULL;
	}
	out[o] = '\0';
	return out;
}

static void pg_close(RelayTarget *t);

/*
 * What the inbox there takes, asked once per connection: group keys
 * (1.1.0 and later) and headers (1.2.0 and later).  t->grouped is cleared
 * when it takes no group keys, and the messages go in no group; t->headers
 * is set when it takes headers, else the messages go without them; each
 * with a line in the log.  false, with error filled, when the question
 * itself failed.
 */
static bool
inbox_takes(RelayTarget *t, bool grouped, char *error)
{
	PGresult   *res = PQexec(t->conn,
							 "SELECT pg_catalog.count(*) FILTER (WHERE 'group_keys' OPERATOR(pg_catalog.=) "
							 "ANY (p.proargnames)), pg_catalog.count(*), "
							 "pg_catalog.count(*) FILTER (WHERE 'headers' OPERATOR(pg_catalog.=) "
							 "ANY (p.proargnames)) FROM pg_catalog.pg_proc AS p "
							 "WHERE p.proname = 'inbox_receive_many' "
							 "AND pg_catalog.pg_function_is_visible(p.oid)");
	bool		none;

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		snprintf(error, RELAY_ERROR_SIZE, "cannot read the functions there: %s", PQerrorMessage(t->conn));
		error[strcspn(error, "\n")] = '\0';
		PQclear(res);
		return false;
	}

	/*
	 * No inbox_receive_many in sight at all (not installed, or not on the
	 * search_path) is no older inbox: each statement fails there with its
	 * own error, which is the reason recorded.
	 */
	none = strcmp(PQgetvalue(res, 0, 1), "0") == 0;
	t->grouped = grouped && (strcmp(PQgetvalue(res, 0, 0), "0") != 0 || none);
	t->headers = strcmp(PQgetvalue(res, 0, 2), "0") != 0;
	PQclear(res);
	if (grouped && !t->grouped)
		relay_log("the inbox there has no group keys (it is older than 1.1.0): messages are received "
				  "in no group, and its workers may take a key's messages out of order");
	if (!t->headers && !none)
		relay_log("the inbox there keeps no headers (it is older than 1.2.0): messages are received "
				  "without their headers");
	return true;
}

static RelayTarget *
pg_open(const char *url, const char *secret, char *error)
{
	char	   *scope = relay_url_param(url, "scope");
	char	   *own_options = relay_url_param(url, "options");
	char	   *ordered;
	bool		grouped;
	char	   *dsn;

	/*
	 * The relay's defaults come before the URL, whose own values win
	 * (libpq takes the last); options come after it, the URL's own with
	 * the statement timeout the lease needs appended.
	 */
	const char *keywords[6] = {"application_name", "connect_timeout", "dbname", "options", NULL, NULL};
	const char *values[6];
	char		timeout[32];
	char	   *options;
	size_t		options_size;
	PGconn	   *conn;
	RelayTarget *t;

	if (scope == NULL || *scope == '\0')
	{
		snprintf(error, RELAY_ERROR_SIZE, "a postgresql:// target needs ?scope=SCOPE");
		free(scope);
		free(own_options);
		return NULL;
	}
	ordered = relay_url_param(url, "ordered");
	if (ordered != NULL && strcmp(ordered, "on") != 0 && strcmp(ordered, "off") != 0)
	{
		snprintf(error, RELAY_ERROR_SIZE, "ordered must be on or off, not \"%.64s\"", ordered);
		free(ordered);
		free(scope);
		return NULL;
	}
	grouped = ordered == NULL || strcmp(ordered, "on") == 0;
	free(ordered);
	dsn = without_own_params(url);
	snprintf(timeout, sizeof(timeout), "%d", relay_timeout);
	options_size = (own_options != NULL ? strlen(own_options) : 0) + 64;
	options = malloc(options_size);
	snprintf(options, options_size, "%s%s-c statement_timeout=%ds", own_options != NULL ? own_options : "",
			 own_options != NULL ? " " : "", relay_timeout);
	free(own_options);
	values[0] = "inbox-relay";
	values[1] = timeout;
	values[2] = dsn;
	values[3] = options;
	if (secret != NULL)
	{
		keywords[4] = "password";
		values[4] = secret;
	}
	values[5] = NULL;
	conn = PQconnectdbParams(keywords, values, 1);
	free(dsn);
	free(options);
	if (PQstatus(conn) != CONNECTION_OK)
	{
		snprintf(error, RELAY_ERROR_SIZE, "cannot connect: %s", PQerrorMessage(conn));
		PQfinish(conn);
		free(scope);
		return NULL;
	}
	t = calloc(1, sizeof(RelayTarget));
	t->conn = conn;
	t->scope = scope;
	t->timeout_ms = relay_timeout * 1000L;
	if (!inbox_takes(t, grouped, error))
	{
		pg_close(t);
		return NULL;
	}
	return t;
}

/*
 * The outcome of a statement that failed on t's connection, its error in
 * error: the target is down, the statement may succeed if tried again, or
 * the target refused it.
 */
static RelayResult
failure(RelayTarget *t, const PGresult *res, char *error)
{
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	const char *message = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);

	/* "42501: permission denied ...", or libpq's own words without one */
	if (state != NULL && message != NULL)
		snprintf(error, RELAY_ERROR_SIZE, "%s: %s", state, message);
	else
		snprintf(error, RELAY_ERROR_SIZE, "%s", PQerrorMessage(t->conn));
	error[strcspn(error, "\n")] = '\0';
	if (PQstatus(t->conn) != CONNECTION_OK || (state != NULL && strncmp(state, "08", 2) == 0))
		return RELAY_DOWN;
	if (state != NULL && (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0 ||
						  strcmp(state, "55P03") == 0 || strcmp(state, "57014") == 0 ||
						  strcmp(state, "57P01") == 0 || strcmp(state, "53300") == 0))
		return RELAY_RETRY;
	return RELAY_REFUSED;
}

/*
 * Whether a statement of the batch may run: its messages must be settled
 * within --timeout of the batch's start, whatever number of statements
 * it takes, so a statement after the first gets only what is left of it
 * (a SET of statement_timeout first).  false, with the outcome, when
 * nothing is left or the SET failed.
 */
static bool
budget(RelayTarget *t, char *error, RelayResult *outcome)
{
	struct timeval now,
				left;
	long		left_ms;

	gettimeofday(&now, NULL);
	timersub(&t->deadline, &now, &left);
	left_ms = left.tv_sec * 1000L + left.tv_usec / 1000;
	if (left_ms < 1)
	{
		/* Not sent: the target was too slow, and the attempt does not count */
		snprintf(error, RELAY_ERROR_SIZE, "no time left within --timeout for this message");
		*outcome = RELAY_DOWN;
		return false;
	}
	/* The first statement runs with --timeout itself, set back if need be */
	if (t->statements++ == 0)
		left_ms = relay_timeout * 1000L;
	if (left_ms != t->timeout_ms)
	{
		char		sql[64];
		PGresult   *res;

		snprintf(sql, sizeof(sql), "SET statement_timeout = %ld", left_ms);
		res = PQexec(t->conn, sql);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
		{
			*outcome = failure(t, res, error);
			PQclear(res);
			return false;
		}
		PQclear(res);
		t->timeout_ms = left_ms;
	}
	return true;
}

static RelayResult
pg_deliver(RelayTarget *t, const RelayMessage *m, char *error, int *retry_after)
{
	char	   *headers = t->headers ? relay_headers_json(m->nheaders, m->header_names,
														  m->header_values) : NULL;
	const char *params[5] = {t->scope, m->id, m->body, m->key, headers};
	int			lengths[5] = {0, 0, (int) m->body_len, 0, 0};
	int			formats[5] = {0, 0, m->binary ? 1 : 0, 0, 0};
	char		sql[160];
	char		with_headers[32];
	int			nparams;
	PGresult   *res;
	RelayResult result;

	if (!budget(t, error, &result))
	{
		free(headers);
		return result;
	}
	if (!t->grouped)
		params[3] = headers;
	nparams = 3 + (t->grouped ? 1 : 0) + (headers != NULL ? 1 : 0);
	snprintf(with_headers, sizeof(with_headers), ", headers => $%d::jsonb", nparams);
	snprintf(sql, sizeof(sql), "SELECT inbox_receive($1, $2, $3::%s%s%s)",
			 m->binary ? "bytea" : "jsonb",
			 t->grouped ? ", group_key => $4" : "",
			 headers != NULL ? with_headers : "");
	res = PQexecParams(t->conn, sql, nparams, NULL, params, lengths, formats, 0);
	free(headers);
	/* received, or already received: a duplicate */
	result = PQresultStatus(res) == PGRES_TUPLES_OK ? RELAY_DELIVERED : failure(t, res, error);
	PQclear(res);
	return result;
}

/*
 * The most payload bytes one statement carries: a batch of large
 * messages goes in several, so that neither this process nor the server
 * has to hold an array near PostgreSQL's limit of a value.
 */
#define RECEIVE_MANY_BYTES (16 * 1024 * 1024)

/*
 * Receive messages m[which[0]], ... m[which[count - 1]], all of one kind
 * (binary or not), in one statement; fill their results and errors.
 */
static void
receive_some(RelayTarget *t, const RelayMessage *m, const int *which, int count, bool binary,
			 RelayResult *results, char (*errors)[RELAY_ERROR_SIZE], int *retry_after)
{
	RelayReceived *r;
	PGresult   *res = NULL;
	RelayResult outcome;
	bool		ran;
	int			i;

	ran = budget(t, errors[which[0]], &outcome);
	if (ran)
	{
		r = malloc(count * sizeof(RelayReceived));
		for (i = 0; i < count; i++)
		{
			const RelayMessage *one = &m[which[i]];

			r[i] = (RelayReceived)
			{
				one->id, one->body, one->body_len, one->key,
					t->headers ? relay_headers_json(one->nheaders, one->header_names,
													one->header_values) : NULL
			};
		}
		res = relay_receive_many(t->conn, t->scope, r, count, binary, t->grouped, t->headers);
		for (i = 0; i < count; i++)
			free((char *) r[i].headers);
		free(r);
	}
	if (ran && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == count)
	{
		for (i = 0; i < count; i++)
		{
			int			k = atoi(PQgetvalue(res, i, 0)) - 1;

			if (k < 0 || k >= count)
				continue;
			/* A mismatch is delivered alone, for inbox_receive's error */
			results[which[k]] = strcmp(PQgetvalue(res, i, 1), "mismatch") == 0 ?
				pg_deliver(t, &m[which[k]], errors[which[k]], &retry_after[which[k]]) :
				RELAY_DELIVERED;
		}
		PQclear(res);
		return;
	}
	/* Not run: budget's outcome holds for every message */
	if (ran)
	{
		outcome = PQresultStatus(res) == PGRES_TUPLES_OK ? RELAY_REFUSED :
			failure(t, res, errors[which[0]]);
		PQclear(res);
	}
	for (i = 0; i < count; i++)
	{
		int			k = which[i];

		/* A statement refused is tried message by message */
		if (ran && outcome == RELAY_REFUSED)
			results[k] = pg_deliver(t, &m[k], errors[k], &retry_after[k]);
		else
		{
			results[k] = outcome;
			if (k != which[0])
				memcpy(errors[k], errors[which[0]], RELAY_ERROR_SIZE);
		}
	}
}

/*
 * Receive a batch: its JSON payloads, then its binary ones, each in as
 * few statements as RECEIVE_MANY_BYTES allows.  When the target went
 * down, every message not yet settled is down with it.
 */
static void
pg_start_batch(RelayTarget *t, const RelayMessage *m, int n, RelayResult *results,
			   char (*errors)[RELAY_ERROR_SIZE], int *retry_after)
{
	int		   *which = malloc(n * sizeof(int));

	gettimeofday(&t->deadline, NULL);
	t->deadline.tv_sec += relay_timeout;
	t->statements = 0;
	for (int i = 0; i < n; i++)
		results[i] = RELAY_DOWN;
	for (int kind = 0; kind < 2; kind++)
	{
		int			count = 0;
		size_t		bytes = 0;

		for (int i = 0; i <= n; i++)
		{
			if (i < n && m[i].binary != (kind == 1))
				continue;
			if (count > 0 && (i == n || bytes + m[i].body_len > RECEIVE_MANY_BYTES))
			{
				receive_some(t, m, which, count, kind == 1, results, errors, retry_after);
				count = 0;
				bytes = 0;
			}
			if (i < n)
			{
				which[count++] = i;
				bytes += m[i].body_len;
			}
		}
	}
	free(which);
}

static void
pg_finish_batch(RelayTarget *t)
{
}

static void
pg_close(RelayTarget *t)
{
	PQfinish(t->conn);
	free(t->scope);
	free(t);
}

const RelayTransport relay_postgresql = {"postgresql://", pg_open, pg_start_batch, pg_finish_batch, pg_close, NULL, NULL};
const RelayTransport relay_postgres = {"postgres://", pg_open, pg_start_batch, pg_finish_batch, pg_close, NULL, NULL};
