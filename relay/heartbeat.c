/*-------------------------------------------------------------------------
 *
 * heartbeat.c
 *	  inbox-relay: a child's row in the view outbox_relays, written with
 *	  outbox_relay_beat over its fetching connection.
 *
 * The beat goes out between two fetches, while the connection is idle: at
 * most once a second while the child is busy, and before a fetch that
 * waits when something changed since the last beat, so that an idle
 * relay's row is right and costs one statement per --wait.  The row
 * belongs to the database session (see outbox_relay_beat): a new
 * connection writes a new row, and the old one leaves the view with its
 * session.  A beat that fails costs the delivery nothing: it is logged
 * once, and a database without outbox_relay_beat (an older extension, or
 * a role without the relay bundle's newer grants) is not asked again.
 *
 * relay/heartbeat.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"

#define BEAT_SQL "SELECT outbox_relay_beat($1, $2, $3::integer, $4::interval, $5::interval, " \
	"$6::bigint, $7::bigint)"

static const char *beat_target;
static double last_beat = -1;
static uint64_t beat_delivered,
			beat_failed;
static bool beat_off;
static bool beat_failing;

/* Send the beat, over conn, which is idle */
static void
beat(PGconn *conn, const char *target, double now)
{
	char		host[256] = "",
				pid[16],
				running[48],
				since_fetch[48],
				delivered[24],
				failed[24];
	const char *params[7] = {target, host, pid, running, since_fetch, delivered, failed};
	PGresult   *res;

	gethostname(host, sizeof(host) - 1);
	snprintf(pid, sizeof(pid), "%d", (int) getpid());
	snprintf(running, sizeof(running), "%.3f seconds", now - relay_counts.started);
	snprintf(since_fetch, sizeof(since_fetch), "%.3f seconds", now - relay_counts.last_fetch);
	snprintf(delivered, sizeof(delivered), "%llu", (unsigned long long) relay_counts.delivered);
	snprintf(failed, sizeof(failed), "%llu", (unsigned long long) relay_counts.failed);
	res = PQexecParams(conn, BEAT_SQL, 7, NULL, params, NULL, NULL, 0);
	last_beat = now;
	if (PQresultStatus(res) == PGRES_TUPLES_OK)
	{
		beat_delivered = relay_counts.delivered;
		beat_failed = relay_counts.failed;
		beat_failing = false;
	}
	else
	{
		const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

		if (state != NULL && (strcmp(state, "42883") == 0 || strcmp(state, "42501") == 0))
		{
			relay_log("no heartbeat in outbox_relays: %s", PQerrorMessage(conn));
			beat_off = true;
		}
		else if (!beat_failing)
			relay_log("the heartbeat failed: %s", PQerrorMessage(conn));
		beat_failing = true;
	}
	PQclear(res);
}

static bool
can_beat(PGconn *conn, const char *target)
{
	if (conn == NULL || beat_off || PQstatus(conn) != CONNECTION_OK ||
		PQtransactionStatus(conn) != PQTRANS_IDLE)
		return false;
	if (beat_target != target)
	{
		beat_target = target;
		last_beat = -1;
	}
	return true;
}

/*
 * After each fetch, with the fetching connection idle (NULL when it
 * broke); busy when the fetch brought messages or some are in flight.
 * While busy, a beat at most once a second; otherwise only the first.
 */
void
relay_beat_fetched(PGconn *conn, const char *target, bool busy)
{
	double		now = relay_now();

	if (conn == NULL || PQstatus(conn) != CONNECTION_OK)
		return;
	relay_counts.last_fetch = now;
	if (can_beat(conn, target) && (last_beat < 0 || (busy && now - last_beat >= 1.0)))
		beat(conn, target, now);
}

/*
 * Before a fetch that waits, nothing in flight: a beat when the counts
 * changed since the last one, or a second has passed (once per --wait).
 */
void
relay_beat_idle(PGconn *conn, const char *target)
{
	double		now = relay_now();

	if (can_beat(conn, target) &&
		(last_beat < 0 || now - last_beat >= 1.0 ||
		 relay_counts.delivered != beat_delivered || relay_counts.failed != beat_failed))
		beat(conn, target, now);
}
