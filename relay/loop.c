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
 * see parse_options() in inbox-relay.c) is given up on before another
 * relay could take the message, and a batch is not sent at all once less
 * than --timeout and a second of its lease is left (batch_deliver).
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
#include <time.h>
#include <unistd.h>

#include "batch.h"
#include "daemon.h"

PGcancel   *volatile relay_fetch_cancel = NULL;

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
	double		prefetch_sent;	/* when it was sent, on relay_now()'s clock */
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
		const char *params[4] = {b->receipts[i], b->errors[i], NULL, down ? "false" : "true"};
		PGresult   *res;

		if (b->results[i] == RELAY_DELIVERED || b->unsettled[i])
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
		{
			relay_debug(2, "message %s (key \"%s\", position %s) delivered",
						b->m[i].id, b->m[i].key, b->m[i].position);
			len += snprintf(receipts + len, 40, "%s%.36s", delivered++ ? "," : "", b->receipts[i]);
		}
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

	/* Only the messages sent tell of the target */
	for (i = 0; i < b->nsend; i++)
		if (b->results[i] == RELAY_DOWN)
			down = true;
		else
			up = true;
	if (down)
		target_down(r);
	else if (up)
		r->down_delay = 0;

	for (i = 1; i < b->nsend; i++)
		if (b->results[i] == RELAY_DOWN && b->errors[i][0] == '\0')
			memcpy(b->errors[i], b->errors[i - 1], RELAY_ERROR_SIZE);
	for (i = 0; i < b->nsend; i++)
		target_state(r, b->results[i] != RELAY_DOWN, b->errors[i]);
	if (relay_verbose >= 1)
	{
		int			delivered = 0;

		for (i = 0; i < b->n; i++)
			delivered += b->results[i] == RELAY_DELIVERED;
		relay_debug(1, "batch of %d settled: %d delivered, %d not", b->n, delivered, b->n - delivered);
	}
	record_outcomes(r, b);
	relay_metrics_settled(b->results, b->n, b->fetched_at);
	relay_batch_free(b);
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
 * Deliver a batch: started, to be finished later; or, when none of its
 * messages can be read, or the target went down while it was fetched,
 * settled at once (the target is opened again only before a fetch).
 *
 * A batch goes out only while its lease has at least --timeout and a
 * second left, the most its target may take to confirm it and a margin:
 * otherwise another relay may already have fetched and delivered its
 * messages, and then their keys' next ones, which this batch would
 * overtake.  Such a batch is not sent and nothing is recorded for it: its
 * messages are fetched again when their lease runs out, with no attempt
 * counted, since no target saw them.
 */
static void
batch_deliver(Relay *r, Batch *b)
{
	double		left = b->lease_end - relay_now();

	if (left < relay_timeout + 1)
	{
		relay_log("a batch of %d message(s) is not sent: %.1f s of its lease are left, less than "
				  "--timeout and a second; its messages are fetched again after the lease",
				  b->n, left > 0 ? left : 0.0);
		relay_metrics_settled(NULL, b->n, b->fetched_at);
		relay_batch_free(b);
		return;
	}
	if (b->nsend > 0 && r->open == NULL)
		for (int i = 0; i < b->nsend; i++)
		{
			b->results[i] = RELAY_DOWN;
			snprintf(b->errors[i], RELAY_ERROR_SIZE, "the target went down before this batch was sent");
		}
	else if (b->nsend > 0)
	{
		relay_debug(1, "batch of %d sent (%.1f s of its lease left)", b->nsend, left);
		r->transport->start_batch(r->open, b->m, b->nsend, b->results, b->errors, b->retry_after);
		r->window[r->nwindow++] = b;
		return;
	}
	batch_settle(r, b);
}

/*
 * For tests only: while the file named by INBOX_RELAY_TEST_PAUSE exists, a
 * child waits after each fetch that leased something, before it sends
 * it, as if it were stopped there (relay/README.md).
 */
static void
test_pause(void)
{
	static const char *path = NULL;
	static bool looked = false;
	bool		said = false;

	if (!looked)
	{
		path = getenv("INBOX_RELAY_TEST_PAUSE");
		looked = true;
	}
	while (path != NULL && *path != '\0' && access(path, F_OK) == 0 && !relay_stopping)
	{
		if (!said)
			relay_log("test pause: waiting after a fetch while %s exists", path);
		said = true;
		usleep(100 * 1000);
	}
}

/*
 * A target of a scheme this relay was not built with: recorded as the
 * error of the target's routes, so that outbox_stats shows it.
 */
static void
report_unserved(const char *target)
{
	char		schemes[256];
	char		error[RELAY_ERROR_SIZE];
	PGconn	   *conn;

	snprintf(error, sizeof(error), "this relay serves no such scheme; it serves: %s",
			 relay_schemes(schemes, sizeof(schemes)));
	relay_log("no transport for this target: %s", error);
	if ((conn = relay_connect_db()) != NULL)
	{
		const char *params[2] = {target, error};
		PGresult   *res = PQexecParams(conn, "SELECT outbox_report($1, $2)", 2, NULL, params,
									   NULL, NULL, 0);

		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			relay_log("recording that failure failed: %s", PQerrorMessage(conn));
		PQclear(res);
		PQfinish(conn);
	}
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
	Relay		r = {.target = target, .transport = relay_transport_for(target), .target_state = -1};
	char		batch_s[16],
				lease_s[32],
				wait_s[32];
	int			status = 0;
	int			n;

	relay_log_prefix(target);
	relay_metrics_child(target);
	if (r.transport == NULL)
	{
		report_unserved(target);
		return RELAY_EXIT_UNSERVED;
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
		double		fetch_sent = 0;

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
				fetch_sent = r.prefetch_sent;
			}
			else
			{
				fetch_sent = relay_now();
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
					else if (PQstatus(r.conn) != CONNECTION_OK)
					{
						relay_log("outbox_fetch failed: %s", PQerrorMessage(r.conn));
						PQfinish(r.conn);
						r.conn = NULL;
						if (relay_options.once)
						{
							status = 1;
							stop = true;
						}
						else if (r.nwindow == 0)
							sleep(1);
					}
					else
					{
						/*
						 * The database refused the fetch (a privilege, a
						 * missing function): the process ends, and the
						 * supervisor starts it again after its backoff
						 */
						relay_log("outbox_fetch failed: %s", PQerrorMessage(r.conn));
						status = 1;
						stop = true;
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
			Batch	   *b = relay_batch_read(r.conn, res, fetch_sent, relay_options.lease_seconds);

			b->fetched_at = relay_metrics_fetched(b->n);

			test_pause();

			/*
			 * The next batch is fetched while this one is sent: the fetch
			 * leases other keys only, those of the batches in flight being
			 * leased already.  That batch starts once this one is sent and
			 * the one before is settled, within --timeout of its lease
			 * (see parse_options() in inbox-relay.c).
			 */
			if (!relay_stopping && r.open != NULL && PQstatus(r.conn) == CONNECTION_OK)
			{
				params[3] = NULL;
				r.prefetch_sent = relay_now();
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
