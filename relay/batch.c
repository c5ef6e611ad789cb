/*-------------------------------------------------------------------------
 *
 * batch.c
 *	  inbox-relay: a batch fetched by outbox_fetch, read into messages for a
 *	  transport, with the latest its lease may end.
 *
 * relay/batch.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "batch.h"


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
 * The fetch's rows, sent at fetch_sent (relay_now()).  A message whose
 * headers the database cannot read as a JSON object (outbox_send refuses
 * such headers, but rows older than that check may hold them) is refused
 * alone: its batch-mates go out.  When the connection broke meanwhile,
 * the message is not the cause: it is left to its lease.
 */
Batch *
relay_batch_read(PGconn *conn, PGresult *res, double fetch_sent, int lease_seconds)
{
	Batch	   *b = calloc(1, sizeof(Batch));
	int			n = PQntuples(res),
				i,
				front = 0,
				back = n - 1;

	b->res = res;
	b->n = n;
	b->lease_end = fetch_sent + lease_seconds;
	b->m = calloc(n, sizeof(RelayMessage));
	b->receipts = calloc(n, sizeof(char *));
	b->unsettled = calloc(n, sizeof(bool));
	b->results = calloc(n, sizeof(RelayResult));
	b->errors = calloc(n, RELAY_ERROR_SIZE);
	b->retry_after = calloc(n, sizeof(int));
	b->headers = calloc(n, sizeof(PGresult *));
	b->bytes = calloc(n, sizeof(unsigned char *));
	for (i = 0; i < n; i++)
	{
		RelayMessage m = {0};
		PGresult   *headers = NULL;
		unsigned char *bytes = NULL;
		bool		readable = true;
		int			j;

		m.id = PQgetvalue(res, i, 0);
		m.topic = PQgetvalue(res, i, 1);
		m.key = PQgetvalue(res, i, 2);
		m.position = PQgetvalue(res, i, 3);
		if (!PQgetisnull(res, i, 4))
		{
			m.body = PQgetvalue(res, i, 4);
			m.body_len = PQgetlength(res, i, 4);
		}
		else
		{
			bytes = PQunescapeBytea((const unsigned char *) PQgetvalue(res, i, 5), &m.body_len);
			m.body = (const char *) bytes;
			m.binary = true;
		}
		if (!PQgetisnull(res, i, 8))
		{
			double		span = atof(PQgetvalue(res, i, 8));

			if (fetch_sent + span < b->lease_end)
				b->lease_end = fetch_sent + span;
		}
		if (!PQgetisnull(res, i, 6) &&
			read_headers(conn, PQgetvalue(res, i, 6), &m, &headers) != 0)
			readable = false;
		j = readable ? front++ : back--;
		b->m[j] = m;
		b->receipts[j] = PQgetvalue(res, i, 7);
		b->headers[j] = headers;
		b->bytes[j] = bytes;
		b->retry_after[j] = -1;
		if (!readable)
		{
			const char *why = headers ? PQresultErrorField(headers, PG_DIAG_MESSAGE_PRIMARY) : NULL;

			b->results[j] = RELAY_REFUSED;
			snprintf(b->errors[j], RELAY_ERROR_SIZE, "the relay cannot read its headers: %s",
					 why ? why : "no answer");
			if (PQstatus(conn) != CONNECTION_OK)
			{
				b->unsettled[j] = true;
				relay_log("reading the headers of message %s failed: %s", m.id, PQerrorMessage(conn));
			}
		}
	}
	b->nsend = front;
	return b;
}

void
relay_batch_free(Batch *b)
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
	free(b->receipts);
	free(b->unsettled);
	free(b->results);
	free(b->errors);
	free(b->retry_after);
	free(b->headers);
	free(b->bytes);
	free(b);
}
