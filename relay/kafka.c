/*-------------------------------------------------------------------------
 *
 * kafka.c
 *	  inbox-relay's Kafka transport (librdkafka):
 *	  kafka://host:port[,host:port...][/topic][?security_protocol=...
 *	  &sasl_mechanism=...&sasl_username=...&cacert=FILE]
 *
 * The topic defaults to each message's outbox topic.  The record's key is
 * the message's key, so that Kafka keeps a key's messages in one
 * partition, in order; its headers are the message's headers and
 * message-id, the outbox id, which the next consumer deduplicates by.
 * The SASL password is the target's line of the secrets file.
 *
 * The producer is idempotent (enable.idempotence, acks=all, at most five
 * requests in flight per connection): the broker writes a retried produce
 * request once, and a partition's records in the order produced, through
 * its retries.  A batch (one message per key) is produced at once
 * (start_batch), each record's opaque naming its batch and place, and its
 * delivery reports are awaited later (finish_batch): a message counts as
 * delivered only on a report without error.  A report with an error
 * carries the broker's reason; a message the broker or librdkafka refuses
 * on its own account (too large, invalid) fails alone, RELAY_REFUSED; a
 * broker that cannot be reached, or no report within --timeout, is
 * RELAY_DOWN, and the producer is closed and made again.  A message left
 * in flight when the producer is closed may still have reached its
 * partition: it is produced again under the same message-id.
 *
 * relay/kafka.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>

#include "kafka_internal.h"

/* A started batch, until finish_batch settles it */
typedef struct OpenBatch
{
	uint64_t	seq;			/* which batch, in every record's opaque */
	int			n;
	int			unsettled;
	bool	   *settled;
	RelayResult *results;
	char		(*errors)[RELAY_ERROR_SIZE];
	double		deadline;
} OpenBatch;

struct RelayTarget
{
	rd_kafka_t *rk;
	char	   *topic;			/* the URL's, or NULL: each message's own */
	OpenBatch  *open[RELAY_WINDOW];
	int			nopen;
	uint64_t	next_seq;
	char		fatal[RELAY_ERROR_SIZE];	/* a fatal error of the producer */
};

/* A record's opaque: its batch's sequence number and its place in it */
#define PLACE_BITS 24
#define OPAQUE(seq, i) ((void *) (uintptr_t) (((seq) << PLACE_BITS) | (uint64_t) (i)))

/*
 * Whether err means the brokers could not be reached (or the producer is
 * gone), rather than that this message was refused
 */
static bool
unreachable(rd_kafka_resp_err_t err)
{
	switch (err)
	{
		case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
		case RD_KAFKA_RESP_ERR__TIMED_OUT:
		case RD_KAFKA_RESP_ERR__TRANSPORT:
		case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN:
		case RD_KAFKA_RESP_ERR__PURGE_QUEUE:
		case RD_KAFKA_RESP_ERR__PURGE_INFLIGHT:
		case RD_KAFKA_RESP_ERR__FATAL:
		case RD_KAFKA_RESP_ERR__DESTROY:
		case RD_KAFKA_RESP_ERR__RESOLVE:
		case RD_KAFKA_RESP_ERR__AUTHENTICATION:
		case RD_KAFKA_RESP_ERR__SSL:
		case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS:
		case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND:
		case RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT:
		case RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION:
		case RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE:
			return true;
		default:
			return false;
	}
}

/* Whether err is this message's own: it would fail the same way again */
static bool
refused(rd_kafka_resp_err_t err)
{
	switch (err)
	{
		case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
		case RD_KAFKA_RESP_ERR_INVALID_MSG:
		case RD_KAFKA_RESP_ERR_INVALID_RECORD:
		case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
		case RD_KAFKA_RESP_ERR__INVALID_ARG:
			return true;
		default:
			return false;
	}
}

static void
settle(OpenBatch *o, int i, rd_kafka_resp_err_t err, const char *detail)
{
	if (o->settled[i])
		return;
	o->settled[i] = true;
	o->unsettled--;
	if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		o->results[i] = RELAY_DELIVERED;
		return;
	}
	o->results[i] = unreachable(err) ? RELAY_DOWN : refused(err) ? RELAY_REFUSED : RELAY_RETRY;
	if (detail != NULL && detail[0] != '\0' && strcmp(detail, rd_kafka_err2str(err)) != 0)
		snprintf(o->errors[i], RELAY_ERROR_SIZE, "%s (%s): %s", rd_kafka_err2str(err),
				 rd_kafka_err2name(err), detail);
	else
		snprintf(o->errors[i], RELAY_ERROR_SIZE, "%s (%s)", rd_kafka_err2str(err), rd_kafka_err2name(err));
}

/* A delivery report: the message's batch, if still open, settles it */
static void
delivered(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	RelayTarget *t = opaque;
	uint64_t	v = (uint64_t) (uintptr_t) m->_private;
	uint64_t	seq = v >> PLACE_BITS;
	int			i = (int) (v & ((1 << PLACE_BITS) - 1));

	(void) rk;
	for (int b = 0; b < t->nopen; b++)
		if (t->open[b]->seq == seq && i < t->open[b]->n)
			settle(t->open[b], i, m->err, m->err ? rd_kafka_message_errstr(m) : NULL);
}

/* The library's errors: a fatal one ends the producer */
static void
on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	RelayTarget *t = opaque;

	if (err == RD_KAFKA_RESP_ERR__FATAL)
	{
		char		why[RELAY_ERROR_SIZE - 32];

		rd_kafka_fatal_error(rk, why, sizeof(why));
		snprintf(t->fatal, RELAY_ERROR_SIZE, "the producer failed: %s", why);
	}
	relay_debug(1, "kafka: %s: %s", rd_kafka_err2name(err), reason);
}

static RelayTarget *
kafka_target_open(const char *url, const char *secret, char *error)
{
	RelayTarget *t = calloc(1, sizeof(RelayTarget));
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	char		timeout[32];
	int			ms = relay_timeout * 1000 - 500;
	const struct rd_kafka_metadata *md;
	rd_kafka_resp_err_t err;

	rd_kafka_conf_set_opaque(conf, t);
	rd_kafka_conf_set_dr_msg_cb(conf, delivered);
	rd_kafka_conf_set_error_cb(conf, on_error);
	snprintf(timeout, sizeof(timeout), "%d", ms < 1000 ? 1000 : ms);
	if (!relay_kafka_conf(conf, url, secret, error) ||
		!relay_kafka_set(conf, "enable.idempotence", "true", error) ||
		!relay_kafka_set(conf, "acks", "all", error) ||
		!relay_kafka_set(conf, "max.in.flight.requests.per.connection", "5", error) ||
		!relay_kafka_set(conf, "message.timeout.ms", timeout, error) ||
		!relay_kafka_set(conf, "linger.ms", "1", error))
	{
		rd_kafka_conf_destroy(conf);
		free(t);
		return NULL;
	}
	t->topic = relay_kafka_topic(url);
	if ((t->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, error, RELAY_ERROR_SIZE)) == NULL)
	{
		rd_kafka_conf_destroy(conf);
		free(t->topic);
		free(t);
		return NULL;
	}
	/* Reached, or not: the brokers answer a request for their metadata */
	err = rd_kafka_metadata(t->rk, 0, NULL, &md, relay_kafka_wait_ms());
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		snprintf(error, RELAY_ERROR_SIZE, "the brokers' metadata: %s", rd_kafka_err2str(err));
		rd_kafka_destroy(t->rk);
		free(t->topic);
		free(t);
		return NULL;
	}
	rd_kafka_metadata_destroy(md);
	return t;
}

/* Produce message i of o; a refusal of the library's settles it at once */
static void
produce_one(RelayTarget *t, OpenBatch *o, const RelayMessage *m, int i)
{
	rd_kafka_headers_t *h = rd_kafka_headers_new(m->nheaders + 1);
	rd_kafka_resp_err_t err;

	for (int k = 0; k < m->nheaders; k++)
		rd_kafka_header_add(h, m->header_names[k], -1, m->header_values[k], -1);
	rd_kafka_header_add(h, "message-id", -1, m->id, -1);
	for (;;)
	{
		err = rd_kafka_producev(t->rk,
								RD_KAFKA_V_TOPIC(t->topic ? t->topic : m->topic),
								RD_KAFKA_V_KEY(m->key, strlen(m->key)),
								RD_KAFKA_V_VALUE((void *) m->body, m->body_len),
								RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
								RD_KAFKA_V_HEADERS(h),
								RD_KAFKA_V_OPAQUE(OPAQUE(o->seq, i)),
								RD_KAFKA_V_END);
		/* The producer's queue full: its reports make room */
		if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL || relay_now() > o->deadline)
			break;
		rd_kafka_poll(t->rk, 10);
	}
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		rd_kafka_headers_destroy(h);
		settle(o, i, err, NULL);
	}
}

/*
 * Produce a batch, all of it at once; its outcomes stay RELAY_DOWN until
 * the delivery reports settle them in finish_batch
 */
static void
kafka_target_start_batch(RelayTarget *t, const RelayMessage *m, int n, RelayResult *results,
						 char (*errors)[RELAY_ERROR_SIZE], int *retry_after)
{
	OpenBatch  *o = calloc(1, sizeof(OpenBatch));

	(void) retry_after;
	o->seq = ++t->next_seq;
	o->n = n;
	o->unsettled = n;
	o->settled = calloc(n, sizeof(bool));
	o->results = results;
	o->errors = errors;
	o->deadline = relay_now() + relay_timeout;
	for (int i = 0; i < n; i++)
		results[i] = RELAY_DOWN;
	t->open[t->nopen++] = o;
	for (int i = 0; i < n; i++)
		produce_one(t, o, &m[i], i);
	rd_kafka_poll(t->rk, 0);
}

/*
 * Poll the delivery reports until every message of the oldest batch has
 * one, or --timeout has passed since it was produced; what has none stays
 * RELAY_DOWN
 */
static void
kafka_target_finish_batch(RelayTarget *t)
{
	OpenBatch  *o = t->open[0];
	double		left;

	while (o->unsettled > 0 && t->fatal[0] == '\0' && (left = o->deadline - relay_now()) > 0)
		rd_kafka_poll(t->rk, left > 0.1 ? 100 : (int) (left * 1000) + 1);
	for (int i = 0; i < o->n; i++)
		if (!o->settled[i])
			snprintf(o->errors[i], RELAY_ERROR_SIZE, "%s", t->fatal[0] ? t->fatal :
					 "no delivery report from the brokers within --timeout");
	free(o->settled);
	free(o);
	t->nopen--;
	memmove(&t->open[0], &t->open[1], t->nopen * sizeof(OpenBatch *));
}

/* What is still queued or in flight is dropped: its batches are settled */
static void
kafka_target_close(RelayTarget *t)
{
	t->nopen = 0;
	rd_kafka_purge(t->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
	rd_kafka_flush(t->rk, 1000);
	rd_kafka_destroy(t->rk);
	free(t->topic);
	free(t);
}

/* The URL's topic is in the brokers' metadata; without one, any will do */
static bool
kafka_target_check(RelayTarget *t, const char *url, char *error)
{
	(void) url;
	return t->topic == NULL || relay_kafka_topic_exists(t->rk, t->topic, error);
}

const RelayTransport relay_kafka = {"kafka://", kafka_target_open,
	kafka_target_start_batch, kafka_target_finish_batch, kafka_target_close, NULL, kafka_target_check};
