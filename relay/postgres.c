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
 * relay/postgres.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "relay.h"

struct RelayTarget
{
	PGconn	   *conn;
	char	   *scope;
};

/* url without its scope parameter, the rest of its query kept */
static char *
without_scope(const char *url)
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

		if (!(strncmp(p, "scope=", 6) == 0 && end - p >= 6))
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

static RelayTarget *
pg_open(const char *url, const char *secret, char *error)
{
	char	   *scope = relay_url_param(url, "scope");
	char	   *dsn;
	const char *keywords[6] = {"dbname", "application_name", "connect_timeout", "options", NULL, NULL};
	const char *values[6];
	char		timeout[32],
				options[64];
	PGconn	   *conn;
	RelayTarget *t;

	if (scope == NULL || *scope == '\0')
	{
		snprintf(error, RELAY_ERROR_SIZE, "a postgresql:// target needs ?scope=SCOPE");
		free(scope);
		return NULL;
	}
	dsn = without_scope(url);
	snprintf(timeout, sizeof(timeout), "%d", relay_timeout);
	snprintf(options, sizeof(options), "-c statement_timeout=%ds", relay_timeout);
	values[0] = dsn;
	values[1] = "inbox-relay";
	values[2] = timeout;
	values[3] = options;
	if (secret != NULL)
	{
		keywords[4] = "password";
		values[4] = secret;
	}
	values[5] = NULL;
	conn = PQconnectdbParams(keywords, values, 1);
	free(dsn);
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
	return t;
}

static RelayResult
pg_deliver(RelayTarget *t, const RelayMessage *m, char *error, int *retry_after)
{
	const char *params[3] = {t->scope, m->id, m->body};
	int			lengths[3] = {0, 0, (int) m->body_len};
	int			formats[3] = {0, 0, m->binary ? 1 : 0};
	PGresult   *res;
	const char *state;
	RelayResult result;

	res = PQexecParams(t->conn,
					   m->binary ? "SELECT inbox_receive($1, $2, $3::bytea)"
					   : "SELECT inbox_receive($1, $2, $3::jsonb)",
					   3, NULL, params, lengths, formats, 0);
	if (PQresultStatus(res) == PGRES_TUPLES_OK)
	{
		PQclear(res);
		return RELAY_DELIVERED;	/* received, or already received: a duplicate */
	}
	snprintf(error, RELAY_ERROR_SIZE, "%s", PQerrorMessage(t->conn));
	error[strcspn(error, "\n")] = '\0';
	state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	if (PQstatus(t->conn) != CONNECTION_OK || (state != NULL && strncmp(state, "08", 2) == 0))
		result = RELAY_DOWN;
	else if (state != NULL && (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0 ||
							   strcmp(state, "55P03") == 0 || strcmp(state, "57014") == 0 ||
							   strcmp(state, "57P01") == 0 || strcmp(state, "53300") == 0))
		result = RELAY_RETRY;
	else
		result = RELAY_REFUSED;
	PQclear(res);
	return result;
}

static void
pg_close(RelayTarget *t)
{
	PQfinish(t->conn);
	free(t->scope);
	free(t);
}

const RelayTransport relay_postgresql = {"postgresql://", pg_open, pg_deliver, NULL, NULL, pg_close};
const RelayTransport relay_postgres = {"postgres://", pg_open, pg_deliver, NULL, NULL, pg_close};
