/*-------------------------------------------------------------------------
 *
 * kafka_source.c
 *	  inbox-relay's Kafka source: a topic read by a consumer group,
 *	  kafka://host:port[,host:port...]/topic?group=ID, into an inbox
 *	  (ingest.c).
 *
 * The inlet is a member of consumer group ID that commits nothing on its
 * own (enable.auto.commit and enable.auto.offset.store off) and starts a
 * partition the group has no offset for at its beginning.  A message is
 * acknowledged (its offset plus one committed for its partition,
 * synchronously) only when the loop says so, after the commit of what it
 * wrote; release() seeks each partition back to its first offset not
 * acknowledged, so that its messages come again, in their order.  A
 * relay that dies leaves the group's offsets where its last commit put
 * them: what it wrote after that is read again, and found as duplicates.
 *
 * Two relays in one group share the topic's partitions.  When the group
 * rebalances, a partition taken from this relay is forgotten: what it
 * fetched of it and has not acknowledged is not committed here, and its
 * new owner reads it again from the group's offset; written here already,
 * it is a duplicate there.  Nothing is lost, and each partition, so each
 * key, keeps its order.
 *
 * The message id is the message-id header (the Kafka target's), else the
 * message's place, "topic/partition/offset", which is also its broker id;
 * the routing key is the record's key; the content type is the
 * content-type header.  Headers go to the inbox as text: a value that is
 * not UTF-8, holds a NUL or is null is left out.
 *
 * relay/kafka_source.c
 *
 *-------------------------------------------------------------------------
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kafka_internal.h"

/* What this inlet holds of a partition */
typedef struct Part
{
	int32_t		partition;
	bool		assigned;		/* the group gave it to this relay */
	int64_t		acked_to;		/* its first offset not acknowledged, -1 none
								 * fetched since it was assigned */
	int64_t		fetched_to;		/* after the last offset fetched */
	bool		at_end;			/* read to its end, nothing since */
} Part;

struct RelayInlet
{
	rd_kafka_t *rk;
	char	   *topic;
	Part	   *parts;
	int			nparts;
	char		broken[RELAY_ERROR_SIZE];	/* why the inlet is unusable */
};

static Part *
part_of(RelayInlet *in, int32_t partition)
{
	for (int i = 0; i < in->nparts; i++)
		if (in->parts[i].partition == partition)
			return &in->parts[i];
	in->parts = realloc(in->parts, (in->nparts + 1) * sizeof(Part));
	in->parts[in->nparts] = (Part)
	{
		partition, false, -1, -1, false
	};
	return &in->parts[in->nparts++];
}

/*
 * The group's changes: partitions assigned are read from the group's
 * offsets; partitions revoked are forgotten, what was fetched of them
 * left to their next owner
 */
static void
rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *list, void *opaque)
{
	RelayInlet *in = opaque;

	for (int i = 0; i < list->cnt; i++)
	{
		Part	   *p = part_of(in, list->elems[i].partition);

		p->assigned = err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS;
		p->acked_to = p->fetched_to = -1;
		p->at_end = false;
	}
	relay_log("the group %s %d partition(s) of topic %s", err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS ?
			  "assigned this relay" : "took back", list->cnt, in->topic);
	if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS)
		rd_kafka_assign(rk, list);
	else
		rd_kafka_assign(rk, NULL);
}

static void
inlet_close(RelayInlet *in)
{
	if (in->rk != NULL)
	{
		rd_kafka_consumer_close(in->rk);
		rd_kafka_destroy(in->rk);
	}
	free(in->topic);
	free(in->parts);
	free(in);
}

static char *
topic_of(const char *url, char *error)
{
	char	   *topic = relay_kafka_topic(url);

	if (topic == NULL)
		snprintf(error, RELAY_ERROR_SIZE, "the URL names no topic: kafka://host:port/topic?group=ID");
	return topic;
}

/* The broker's answer to a commit: only a failure is said */
static void
commit_done(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *offsets, void *opaque)
{
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR && err != RD_KAFKA_RESP_ERR__NO_OFFSET)
		relay_log("committing offsets failed (the messages will be read again, as duplicates): %s",
				  rd_kafka_err2str(err));
}

static RelayInlet *
inlet_open(const char *url, const char *secret, const char *options, int prefetch, char *error)
{
	RelayInlet *in = calloc(1, sizeof(RelayInlet));
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	char	   *group = relay_url_param(url, "group");
	rd_kafka_topic_partition_list_t *topics;
	rd_kafka_resp_err_t err;

	(void) options;
	(void) prefetch;
	rd_kafka_conf_set_opaque(conf, in);
	rd_kafka_conf_set_rebalance_cb(conf, rebalance);
	rd_kafka_conf_set_offset_commit_cb(conf, commit_done);
	if ((in->topic = topic_of(url, error)) == NULL)
		;
	else if (group == NULL || group[0] == '\0')
		snprintf(error, RELAY_ERROR_SIZE, "the URL needs a group parameter: kafka://host:port/topic?group=ID");
	else if (relay_kafka_conf(conf, url, secret, error) &&
			 relay_kafka_set(conf, "group.id", group, error) &&
			 relay_kafka_set(conf, "enable.auto.commit", "false", error) &&
			 relay_kafka_set(conf, "enable.auto.offset.store", "false", error) &&
			 relay_kafka_set(conf, "auto.offset.reset", "earliest", error) &&
			 relay_kafka_set(conf, "enable.partition.eof", "true", error) &&
			 relay_kafka_set(conf, "session.timeout.ms", "10000", error) &&
			 relay_kafka_set(conf, "heartbeat.interval.ms", "1000", error) &&
			 /*
			  * Read ahead as librdkafka does by default (a local queue of
			  * up to 16 MB): unlike a queue's prefetch, what a Kafka
			  * consumer has read ahead is held nowhere but here, and a
			  * small local queue starves its fetcher between refills
			  */
			 relay_kafka_set(conf, "queued.max.messages.kbytes", "16384", error) &&
			 (in->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, error, RELAY_ERROR_SIZE)) != NULL)
		conf = NULL;
	free(group);
	if (conf != NULL)
		rd_kafka_conf_destroy(conf);
	if (in->rk == NULL || !relay_kafka_topic_exists(in->rk, in->topic, error))
	{
		inlet_close(in);
		return NULL;
	}
	rd_kafka_poll_set_consumer(in->rk);
	topics = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(topics, in->topic, RD_KAFKA_PARTITION_UA);
	err = rd_kafka_subscribe(in->rk, topics);
	rd_kafka_topic_partition_list_destroy(topics);
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		snprintf(error, RELAY_ERROR_SIZE, "subscribing to topic \"%s\": %s", in->topic, rd_kafka_err2str(err));
		inlet_close(in);
		return NULL;
	}
	return in;
}

/* Whether the len bytes of s are UTF-8 without a NUL */
static bool
utf8_text(const unsigned char *s, size_t len)
{
	for (size_t i = 0; i < len;)
	{
		int			follow = s[i] < 0x80 ? 0 : (s[i] & 0xE0) == 0xC0 ? 1 :
			(s[i] & 0xF0) == 0xE0 ? 2 : (s[i] & 0xF8) == 0xF0 ? 3 : -1;
		uint32_t	c = follow == 0 ? s[i] : follow == 1 ? s[i] & 0x1F : follow == 2 ? s[i] & 0x0F : s[i] & 0x07;

		if (s[i] == 0 || follow < 0 || i + follow >= len + (follow == 0 ? 1 : 0))
			return false;
		for (int k = 1; k <= follow; k++)
		{
			if ((s[i + k] & 0xC0) != 0x80)
				return false;
			c = (c << 6) | (s[i + k] & 0x3F);
		}
		/* Neither overlong, nor a surrogate, nor past U+10FFFF */
		if ((follow == 1 && c < 0x80) || (follow == 2 && (c < 0x800 || (c >= 0xD800 && c <= 0xDFFF))) ||
			(follow == 3 && (c < 0x10000 || c > 0x10FFFF)))
			return false;
		i += 1 + follow;
	}
	return true;
}

static char *
bytes_dup(const void *p, size_t len)
{
	char	   *s = malloc(len + 1);

	if (len > 0)
		memcpy(s, p, len);
	s[len] = '\0';
	return s;
}

/* A record, copied out into m */
static void
take_record(RelayInlet *in, const rd_kafka_message_t *r, RelayIngest *m)
{
	rd_kafka_headers_t *h = NULL;
	char		place[512];
	Part	   *p = part_of(in, r->partition);

	memset(m, 0, sizeof(*m));
	snprintf(place, sizeof(place), "%s/%" PRId32 "/%" PRId64, rd_kafka_topic_name(r->rkt), r->partition, r->offset);
	m->broker_id = strdup(place);
	if (r->key != NULL)
		m->routing_key = bytes_dup(r->key, r->key_len);
	m->body_len = r->len;
	m->body = bytes_dup(r->payload, r->len);
	if (rd_kafka_message_headers(r, &h) == RD_KAFKA_RESP_ERR_NO_ERROR && rd_kafka_header_cnt(h) > 0)
	{
		size_t		n = rd_kafka_header_cnt(h);
		const char *name;
		const void *value;
		size_t		size;

		m->header_names = calloc(n, sizeof(char *));
		m->header_values = calloc(n, sizeof(char *));
		for (size_t i = 0; rd_kafka_header_get_all(h, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR; i++)
		{
			if (value == NULL || !utf8_text(value, size) || !utf8_text((const unsigned char *) name, strlen(name)))
			{
				relay_debug(1, "message %s: header \"%s\" left out: not text", place, name);
				continue;
			}
			m->header_names[m->nheaders] = strdup(name);
			m->header_values[m->nheaders] = bytes_dup(value, size);
			if (m->message_id == NULL && strcasecmp(name, "message-id") == 0 && size > 0)
				m->message_id = bytes_dup(value, size);
			if (m->content_type == NULL && strcasecmp(name, "content-type") == 0)
				m->content_type = bytes_dup(value, size);
			m->nheaders++;
		}
	}
	if (m->message_id == NULL)
		m->message_id = strdup(place);
	if (p->acked_to < 0)
		p->acked_to = r->offset;
	p->fetched_to = r->offset + 1;
}

/* Whether a consumer's error ends the inlet, rather than passes */
static bool
ends_inlet(rd_kafka_resp_err_t err)
{
	return err == RD_KAFKA_RESP_ERR__FATAL || err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
		err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC || err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
		err == RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED;
}

static int
inlet_fetch(RelayInlet *in, RelayIngest *out, int max, int wait_ms, char *error)
{
	int			n = 0;
	double		until = relay_now() + wait_ms / 1000.0;

	while (n < max && in->broken[0] == '\0')
	{
		/* Until a first message or wait_ms, then while they keep coming */
		int			left = n == 0 ? (int) ((until - relay_now()) * 1000) : RELAY_LINGER_MS;
		rd_kafka_message_t *r = rd_kafka_consumer_poll(in->rk, left > 0 ? left : 0);

		if (r == NULL)
		{
			if (n > 0 || left <= 0)
				break;
			continue;
		}
		if (r->err == RD_KAFKA_RESP_ERR_NO_ERROR || r->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
			part_of(in, r->partition)->at_end = r->err != RD_KAFKA_RESP_ERR_NO_ERROR;
		if (r->err == RD_KAFKA_RESP_ERR_NO_ERROR)
			take_record(in, r, &out[n++]);
		else if (ends_inlet(r->err))
			snprintf(in->broken, RELAY_ERROR_SIZE, "consuming: %s: %s", rd_kafka_err2str(r->err),
					 rd_kafka_message_errstr(r));
		else if (r->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
			relay_debug(1, "consuming: %s", rd_kafka_message_errstr(r));
		rd_kafka_message_destroy(r);
	}
	if (n == 0 && in->broken[0] != '\0')
	{
		snprintf(error, RELAY_ERROR_SIZE, "%s", in->broken);
		return -1;
	}
	return n;
}

/* A broker id's partition and offset: "topic/partition/offset" */
static void
place_of(const char *broker_id, int32_t *partition, int64_t *offset)
{
	const char *o = strrchr(broker_id, '/');
	const char *p = o - 1;

	while (p > broker_id && *p != '/')
		p--;
	*partition = (int32_t) strtol(p + 1, NULL, 10);
	*offset = strtoll(o + 1, NULL, 10);
}

/*
 * Commit, for each partition of m[0..n) this relay still holds, the
 * offset after the last of them: synchronously, so that the loop goes on
 * only once the group has it
 */
static bool
inlet_ack(RelayInlet *in, const RelayIngest *m, int n, char *error)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(in->nparts + 1);
	rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;

	for (int i = 0; i < n; i++)
	{
		int32_t		partition;
		int64_t		offset;
		rd_kafka_topic_partition_t *e;

		place_of(m[i].broker_id, &partition, &offset);
		if (!part_of(in, partition)->assigned)
			continue;			/* revoked: its new owner reads it again */
		e = rd_kafka_topic_partition_list_find(list, in->topic, partition);
		if (e == NULL)
			e = rd_kafka_topic_partition_list_add(list, in->topic, partition);
		else if (e->offset > offset + 1)
			continue;
		e->offset = offset + 1;
	}
	/*
	 * Committed without waiting for the broker's answer: what matters is
	 * that no offset is committed before the database commit, and these
	 * messages are in the inbox.  A commit that does not reach the broker
	 * (a relay killed first, a broker gone) leaves them to be read again,
	 * found as duplicates and acknowledged then; commit_done logs it.
	 */
	if (list->cnt > 0)
		err = rd_kafka_commit(in->rk, list, 1);
	if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
		for (int i = 0; i < list->cnt; i++)
		{
			Part	   *p = part_of(in, list->elems[i].partition);

			if (list->elems[i].offset > p->acked_to)
				p->acked_to = list->elems[i].offset;
		}
	else
		snprintf(error, RELAY_ERROR_SIZE, "committing the offsets: %s", rd_kafka_err2str(err));
	rd_kafka_topic_partition_list_destroy(list);
	return err == RD_KAFKA_RESP_ERR_NO_ERROR;
}

/* Each partition back to its first offset not acknowledged */
static void
inlet_release(RelayInlet *in)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(in->nparts + 1);

	for (int i = 0; i < in->nparts; i++)
	{
		Part	   *p = &in->parts[i];

		if (!p->assigned || p->acked_to < 0 || p->fetched_to <= p->acked_to)
			continue;
		rd_kafka_topic_partition_list_add(list, in->topic, p->partition)->offset = p->acked_to;
		p->fetched_to = p->acked_to;
		p->at_end = false;
	}
	if (list->cnt > 0)
	{
		rd_kafka_error_t *e = rd_kafka_seek_partitions(in->rk, list, relay_kafka_wait_ms());

		if (e != NULL)
		{
			/* Not sought back: read again from the group's offsets */
			snprintf(in->broken, RELAY_ERROR_SIZE, "seeking back: %s", rd_kafka_error_string(e));
			rd_kafka_error_destroy(e);
		}
		for (int i = 0; i < list->cnt && in->broken[0] == '\0'; i++)
			if (list->elems[i].err != RD_KAFKA_RESP_ERR_NO_ERROR)
				snprintf(in->broken, RELAY_ERROR_SIZE, "seeking back partition %" PRId32 ": %s",
						 list->elems[i].partition, rd_kafka_err2str(list->elems[i].err));
	}
	rd_kafka_topic_partition_list_destroy(list);
}

/* The brokers reached, and the topic in their metadata */
static bool
source_check(const char *url, const char *secret, char *error)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	char	   *topic = topic_of(url, error);
	rd_kafka_t *rk = NULL;
	bool		ok = false;

	if (topic != NULL && relay_kafka_conf(conf, url, secret, error) &&
		(rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, error, RELAY_ERROR_SIZE)) != NULL)
	{
		conf = NULL;
		ok = relay_kafka_topic_exists(rk, topic, error);
		rd_kafka_destroy(rk);
	}
	if (conf != NULL)
		rd_kafka_conf_destroy(conf);
	free(topic);
	return ok;
}

/* Every partition the group assigned this relay read to its end */
static bool
inlet_at_end(RelayInlet *in)
{
	bool		any = false;

	for (int i = 0; i < in->nparts; i++)
	{
		if (!in->parts[i].assigned)
			continue;
		if (!in->parts[i].at_end)
			return false;
		any = true;
	}
	return any;
}

const RelaySource relay_kafka_source = {"kafka://", inlet_open, inlet_fetch, inlet_ack, inlet_release, inlet_close,
source_check, inlet_at_end};
