/*-------------------------------------------------------------------------
 *
 * nats_source.c
 *	  inbox-relay's NATS JetStream source: a stream read through a durable
 *	  pull consumer, nats://[user@]host:port/STREAM?consumer=DURABLE,
 *	  into an inbox (ingest.c).
 *
 * The inlet binds a pull subscription to the durable consumer of the
 * stream, and creates the consumer first when the stream has none of that
 * name: explicit acks, from the stream's first message, at most one batch
 * unacknowledged (MaxAckPending).  A consumer made by the stream's
 * administrator is used as it is.  fetch() pulls at most a batch
 * (natsSubscription_Fetch); each message is acknowledged only when the
 * loop says so, after the commit of what it wrote, the last of a batch
 * synchronously, so that the acks are known to have arrived (the server
 * reads a connection's acks in order).  release() naks the messages not
 * acknowledged, in their order, and the server delivers them again before
 * any later one; close() leaves what it holds to the consumer's AckWait.
 *
 * A key's order holds with one relay per consumer when MaxAckPending is at
 * most a batch, as for a consumer the inlet creates: while a batch is
 * unacknowledged, even by a relay that died, the server hands out nothing
 * after it, and a batch's messages come again, in order, before the
 * next.  With a larger MaxAckPending, a relay started again before AckWait
 * ends reads the messages after a batch that died uncommitted before that
 * batch.  Two relays pulling from one consumer share its messages, and
 * each key's order is lost.
 *
 * A message's broker id is its stream sequence; its message id its
 * Nats-Msg-Id header, else STREAM/SEQUENCE; its routing key its subject;
 * its content type its Content-Type header.  Header values are text: a
 * header whose name or first value is not valid UTF-8 is left out, and
 * of a header given several values, the first is kept.
 *
 * relay/nats_source.c
 *
 *-------------------------------------------------------------------------
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "nats_internal.h"

typedef struct Held
{
	uint64_t	seq;
	natsMsg    *msg;
} Held;

struct RelayInlet
{
	natsConnection *nc;
	jsCtx	   *js;
	natsSubscription *sub;
	char	   *stream;
	char	   *consumer;
	Held	   *held;			/* taken and not acknowledged, in order */
	int			nheld;
	int			held_size;
};

/* Whether s is valid UTF-8 */
static bool
utf8_ok(const unsigned char *s)
{
	while (*s)
	{
		int			n = *s < 0x80 ? 0 : (*s & 0xe0) == 0xc0 ? 1 : (*s & 0xf0) == 0xe0 ? 2 :
			(*s & 0xf8) == 0xf0 ? 3 : -1;

		if (n < 0 || (n == 1 && *s < 0xc2))
			return false;
		s++;
		for (; n > 0; n--, s++)
			if ((*s & 0xc0) != 0x80)
				return false;
	}
	return true;
}

/* The stream and the consumer of url; false with the reason */
static bool
url_parts(const char *url, char **stream, char **consumer, char *error)
{
	const char *path = strchr(url + strlen("nats://"), '/');

	*consumer = relay_url_param(url, "consumer");
	*stream = path && path[1] && path[1] != '?' ? relay_url_decode(path + 1, strcspn(path + 1, "?#")) : NULL;
	if (*stream == NULL || *consumer == NULL || (*consumer)[0] == '\0')
	{
		snprintf(error, RELAY_ERROR_SIZE,
				 "the URL needs a stream and a consumer: nats://host:port/STREAM?consumer=DURABLE");
		free(*stream);
		free(*consumer);
		return false;
	}
	return true;
}

static void
inlet_close(RelayInlet *in)
{
	for (int i = 0; i < in->nheld; i++)
		natsMsg_Destroy(in->held[i].msg);
	if (in->sub != NULL)
		natsSubscription_Destroy(in->sub);
	if (in->js != NULL)
		jsCtx_Destroy(in->js);
	if (in->nc != NULL)
	{
		natsConnection_Close(in->nc);
		natsConnection_Destroy(in->nc);
	}
	free(in->held);
	free(in->stream);
	free(in->consumer);
	free(in);
}

/* The JetStream reason of a failed call, with its error code */
static void
js_reason(natsStatus s, jsErrCode jerr, const char *what, char *error)
{
	relay_nats_reason(s, what, error);
	if (jerr != 0)
	{
		size_t		len = strlen(error);

		snprintf(error + len, RELAY_ERROR_SIZE - len, " (JetStream error %d)", (int) jerr);
	}
}

/* The durable consumer, created when the stream has none of its name */
static bool
ensure_consumer(RelayInlet *in, int prefetch, char *error)
{
	jsConsumerInfo *ci = NULL;
	jsErrCode	jerr = 0;
	natsStatus	s = js_GetConsumerInfo(&ci, in->js, in->stream, in->consumer, NULL, &jerr);

	if (s == NATS_OK)
	{
		jsConsumerInfo_Destroy(ci);
		return true;
	}
	if (jerr == JSConsumerNotFoundErr)
	{
		jsConsumerConfig cc;

		jsConsumerConfig_Init(&cc);
		cc.Durable = in->consumer;
		cc.AckPolicy = js_AckExplicit;
		cc.DeliverPolicy = js_DeliverAll;
		cc.MaxAckPending = prefetch;
		jerr = 0;
		s = js_AddConsumer(&ci, in->js, in->stream, &cc, NULL, &jerr);
		if (s == NATS_OK)
		{
			relay_log("created the durable consumer \"%s\" of stream \"%s\"", in->consumer, in->stream);
			jsConsumerInfo_Destroy(ci);
			return true;
		}
	}
	js_reason(s, jerr, jerr == JSStreamNotFoundErr ? "the stream" : "the consumer", error);
	return false;
}

static RelayInlet *
inlet_open(const char *url, const char *secret, const char *options, int prefetch, char *error)
{
	RelayInlet *in = calloc(1, sizeof(RelayInlet));
	jsSubOptions so;
	jsErrCode	jerr = 0;
	natsStatus	s;

	if (!url_parts(url, &in->stream, &in->consumer, error) ||
		(in->nc = relay_nats_connect(url, secret, NULL, NULL, error)) == NULL)
	{
		inlet_close(in);
		return NULL;
	}
	if ((s = natsConnection_JetStream(&in->js, in->nc, NULL)) != NATS_OK)
	{
		relay_nats_reason(s, "JetStream", error);
		inlet_close(in);
		return NULL;
	}
	if (!ensure_consumer(in, prefetch, error))
	{
		inlet_close(in);
		return NULL;
	}
	jsSubOptions_Init(&so);
	so.Stream = in->stream;
	so.Consumer = in->consumer;
	so.ManualAck = true;
	s = js_PullSubscribe(&in->sub, in->js, NULL, in->consumer, NULL, &so, &jerr);
	if (s != NATS_OK)
	{
		js_reason(s, jerr, "binding to the consumer", error);
		in->sub = NULL;
		inlet_close(in);
		return NULL;
	}
	return in;
}

/* msg's header name, by a case-insensitive name, or NULL */
static const char *
header_of(natsMsg *msg, const char **keys, int nkeys, const char *name)
{
	const char *v = NULL;

	for (int i = 0; i < nkeys; i++)
		if (strcasecmp(keys[i], name) == 0 && natsMsgHeader_Get(msg, keys[i], &v) == NATS_OK)
			return v;
	return NULL;
}

/* A message's parts, copied out into m */
static void
take_message(RelayInlet *in, natsMsg *msg, uint64_t seq, RelayIngest *m)
{
	const char **keys = NULL;
	int			nkeys = 0;
	const char *v;
	char		buf[64];

	memset(m, 0, sizeof(*m));
	snprintf(buf, sizeof(buf), "%" PRIu64, seq);
	m->broker_id = strdup(buf);
	if (natsMsgHeader_Keys(msg, &keys, &nkeys) != NATS_OK)
	{
		keys = NULL;
		nkeys = 0;
	}
	if ((v = header_of(msg, keys, nkeys, "Nats-Msg-Id")) != NULL && v[0] != '\0')
		m->message_id = strdup(v);
	else
	{
		m->message_id = malloc(strlen(in->stream) + 32);
		sprintf(m->message_id, "%s/%" PRIu64, in->stream, seq);
	}
	if ((v = header_of(msg, keys, nkeys, "Content-Type")) != NULL)
		m->content_type = strdup(v);
	m->routing_key = strdup(natsMsg_GetSubject(msg));
	m->body_len = natsMsg_GetDataLength(msg);
	m->body = malloc(m->body_len + 1);
	memcpy(m->body, natsMsg_GetData(msg), m->body_len);
	m->body[m->body_len] = '\0';
	if (nkeys > 0)
	{
		m->header_names = calloc(nkeys, sizeof(char *));
		m->header_values = calloc(nkeys, sizeof(char *));
		for (int i = 0; i < nkeys; i++)
		{
			if (natsMsgHeader_Get(msg, keys[i], &v) != NATS_OK || v == NULL ||
				!utf8_ok((const unsigned char *) keys[i]) || !utf8_ok((const unsigned char *) v))
				continue;
			m->header_names[m->nheaders] = strdup(keys[i]);
			m->header_values[m->nheaders++] = strdup(v);
		}
	}
	free((void *) keys);
}

static int
inlet_fetch(RelayInlet *in, RelayIngest *out, int max, int wait_ms, char *error)
{
	natsMsgList list = {0};
	jsErrCode	jerr = 0;
	natsStatus	s;
	int			n = 0;

	if (natsConnection_IsClosed(in->nc))
	{
		snprintf(error, RELAY_ERROR_SIZE, "the connection to the NATS server was lost");
		return -1;
	}
	s = natsSubscription_Fetch(&list, in->sub, max, wait_ms, &jerr);
	if (s == NATS_TIMEOUT && list.Count == 0)
		return 0;
	if (s != NATS_OK && list.Count == 0)
	{
		js_reason(s, jerr, "fetching", error);
		return -1;
	}
	if (in->nheld + list.Count > in->held_size)
	{
		in->held_size = in->nheld + list.Count + 16;
		in->held = realloc(in->held, in->held_size * sizeof(Held));
	}
	for (int i = 0; i < list.Count; i++)
	{
		natsMsg    *msg = list.Msgs[i];
		jsMsgMetaData *meta = NULL;

		list.Msgs[i] = NULL;
		if (n >= max || natsMsg_GetMetaData(&meta, msg) != NATS_OK)
		{
			/* Not a stream's message: nothing to acknowledge */
			natsMsg_Destroy(msg);
			continue;
		}
		take_message(in, msg, meta->Sequence.Stream, &out[n++]);
		in->held[in->nheld].seq = meta->Sequence.Stream;
		in->held[in->nheld++].msg = msg;
		jsMsgMetaData_Destroy(meta);
	}
	natsMsgList_Destroy(&list);
	return n;
}

/* The held message of stream sequence seq: its index, or -1 */
static int
held_index(RelayInlet *in, uint64_t seq)
{
	for (int i = 0; i < in->nheld; i++)
		if (in->held[i].seq == seq)
			return i;
	return -1;
}

/*
 * Acknowledge m[0..n): each, and the last synchronously, so that the
 * server is known to have them all
 */
static bool
inlet_ack(RelayInlet *in, const RelayIngest *m, int n, char *error)
{
	bool		ok = true;

	for (int i = 0; i < n; i++)
	{
		int			k = held_index(in, strtoull(m[i].broker_id, NULL, 10));
		natsStatus	s;
		jsErrCode	jerr = 0;

		if (k < 0)
			continue;
		s = i == n - 1 ? natsMsg_AckSync(in->held[k].msg, NULL, &jerr) : natsMsg_Ack(in->held[k].msg, NULL);
		if (s != NATS_OK && ok)
		{
			js_reason(s, jerr, "acknowledging", error);
			ok = false;
		}
		natsMsg_Destroy(in->held[k].msg);
		memmove(&in->held[k], &in->held[k + 1], (in->nheld - k - 1) * sizeof(Held));
		in->nheld--;
	}
	return ok;
}

/* Every message not acknowledged, delivered again in its order */
static void
inlet_release(RelayInlet *in)
{
	for (int i = 0; i < in->nheld; i++)
	{
		natsMsg_Nak(in->held[i].msg, NULL);
		natsMsg_Destroy(in->held[i].msg);
	}
	in->nheld = 0;
}

/* The stream is there; its consumer, missing, would be created */
static bool
source_check(const char *url, const char *secret, char *error)
{
	char	   *stream,
			   *consumer;
	natsConnection *nc;
	jsCtx	   *js = NULL;
	jsStreamInfo *si = NULL;
	jsErrCode	jerr = 0;
	natsStatus	s;

	if (!url_parts(url, &stream, &consumer, error))
		return false;
	if ((nc = relay_nats_connect(url, secret, NULL, NULL, error)) == NULL)
	{
		free(stream);
		free(consumer);
		return false;
	}
	s = natsConnection_JetStream(&js, nc, NULL);
	if (s == NATS_OK)
		s = js_GetStreamInfo(&si, js, stream, NULL, &jerr);
	if (s != NATS_OK)
		js_reason(s, jerr, "the stream", error);
	else
		jsStreamInfo_Destroy(si);
	if (js != NULL)
		jsCtx_Destroy(js);
	natsConnection_Close(nc);
	natsConnection_Destroy(nc);
	free(stream);
	free(consumer);
	return s == NATS_OK;
}

const RelaySource relay_nats_source = {"nats://", inlet_open, inlet_fetch, inlet_ack, inlet_release, inlet_close, source_check, NULL};
