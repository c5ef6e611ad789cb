/*-------------------------------------------------------------------------
 *
 * amqp_source.c
 *	  inbox-relay's AMQP source: a RabbitMQ queue, amqp://...?queue=NAME,
 *	  consumed with manual acknowledgements into an inbox (ingest.c).
 *
 * The inlet consumes the queue (basic.consume, no_ack false) with a
 * prefetch (basic.qos) of the subscription's batch, so the broker never
 * has more of the queue in this relay's hands than one batch.  A message
 * is acknowledged (basic.ack) only when the loop says so, after the
 * commit of what it wrote; release() hands back every delivery not
 * acknowledged (basic.nack, requeue), which RabbitMQ puts back in its
 * place in the queue, and a connection that breaks does the same.  So a
 * message leaves the queue only once the database holds it.
 *
 * With two relays on one queue, RabbitMQ hands each some of the
 * messages, and a message released by one may be delivered by the other
 * before the messages after it: a queue declared with
 * x-single-active-consumer has one consumer at a time, the others
 * standing by, and keeps the queue's order.  The relay declares nothing:
 * the queue is the broker's administrator's, and a missing one is the
 * broker's 404 NOT_FOUND, retried.
 *
 * The connection, login and the broker's reasons are the AMQP transport's
 * (amqp_connect.c).
 *
 * relay/amqp_source.c
 *
 *-------------------------------------------------------------------------
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amqp_internal.h"
#include "receive.h"

struct RelayInlet
{
	RelayTarget *t;				/* the connection, as the transport keeps it */
	char	   *queue;
	uint64_t	last_tag;		/* the latest delivery taken, 0 none */
	uint64_t	acked_to;		/* every delivery up to this one acknowledged */
};

static char *
bytes_dup(amqp_bytes_t b)
{
	char	   *s = malloc(b.len + 1);

	memcpy(s, b.bytes, b.len);
	s[b.len] = '\0';
	return s;
}

/*
 * A header's value as text, or NULL for a kind that has none (a table, an
 * array, void, a decimal) and for bytes that are not text (a NUL, or not
 * UTF-8): such a header is left out.  A string holding a NUL sets
 * *refusal: it cannot travel as text, and the message is refused rather
 * than cut short.
 */
static char *
field_text(const amqp_field_value_t *v, const char **refusal)
{
	char		buf[64];

	switch (v->kind)
	{
		case AMQP_FIELD_KIND_UTF8:
			if (memchr(v->value.bytes.bytes, '\0', v->value.bytes.len) != NULL)
				*refusal = "a header value holds a NUL";
			return bytes_dup(v->value.bytes);
		case AMQP_FIELD_KIND_BYTES:
			if (memchr(v->value.bytes.bytes, '\0', v->value.bytes.len) != NULL ||
				!relay_utf8_valid(v->value.bytes.bytes, v->value.bytes.len))
				return NULL;
			return bytes_dup(v->value.bytes);
		case AMQP_FIELD_KIND_BOOLEAN:
			return strdup(v->value.boolean ? "true" : "false");
		case AMQP_FIELD_KIND_I8:
			snprintf(buf, sizeof(buf), "%d", v->value.i8);
			break;
		case AMQP_FIELD_KIND_U8:
			snprintf(buf, sizeof(buf), "%u", v->value.u8);
			break;
		case AMQP_FIELD_KIND_I16:
			snprintf(buf, sizeof(buf), "%d", v->value.i16);
			break;
		case AMQP_FIELD_KIND_U16:
			snprintf(buf, sizeof(buf), "%u", v->value.u16);
			break;
		case AMQP_FIELD_KIND_I32:
			snprintf(buf, sizeof(buf), "%" PRId32, v->value.i32);
			break;
		case AMQP_FIELD_KIND_U32:
			snprintf(buf, sizeof(buf), "%" PRIu32, v->value.u32);
			break;
		case AMQP_FIELD_KIND_I64:
			snprintf(buf, sizeof(buf), "%" PRId64, v->value.i64);
			break;
		case AMQP_FIELD_KIND_U64:
		case AMQP_FIELD_KIND_TIMESTAMP:
			snprintf(buf, sizeof(buf), "%" PRIu64, v->value.u64);
			break;
		case AMQP_FIELD_KIND_F32:
			snprintf(buf, sizeof(buf), "%.9g", v->value.f32);
			break;
		case AMQP_FIELD_KIND_F64:
			snprintf(buf, sizeof(buf), "%.17g", v->value.f64);
			break;
		default:
			return NULL;
	}
	return strdup(buf);
}

/* An envelope's message, copied out into m */
static void
take_envelope(RelayInlet *in, const amqp_envelope_t *e, RelayIngest *m)
{
	const amqp_basic_properties_t *p = &e->message.properties;
	char		tag[32];

	memset(m, 0, sizeof(*m));
	snprintf(tag, sizeof(tag), "%" PRIu64, (uint64_t) e->delivery_tag);
	m->broker_id = strdup(tag);
	if (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
		m->message_id = bytes_dup(p->message_id);
	if (p->_flags & AMQP_BASIC_CONTENT_TYPE_FLAG)
		m->content_type = bytes_dup(p->content_type);
	m->routing_key = bytes_dup(e->routing_key);
	m->body_len = e->message.body.len;
	m->body = malloc(m->body_len + 1);
	memcpy(m->body, e->message.body.bytes, m->body_len);
	m->body[m->body_len] = '\0';
	if ((p->_flags & AMQP_BASIC_HEADERS_FLAG) && p->headers.num_entries > 0)
	{
		int			n = p->headers.num_entries;

		m->header_names = calloc(n, sizeof(char *));
		m->header_values = calloc(n, sizeof(char *));
		for (int i = 0; i < n; i++)
		{
			char	   *value = field_text(&p->headers.entries[i].value, &m->header_refusal);
			amqp_bytes_t name = p->headers.entries[i].key;

			if (value == NULL)
				continue;
			if (memchr(name.bytes, '\0', name.len) != NULL)
				m->header_refusal = "a header name holds a NUL";
			m->header_names[m->nheaders] = bytes_dup(name);
			m->header_values[m->nheaders++] = value;
		}
	}
	in->last_tag = e->delivery_tag;
}

static void
inlet_close(RelayInlet *in)
{
	if (in->t != NULL)
		amqp_target_close(in->t);
	free(in->queue);
	free(in);
}

static RelayTarget *
connect_to(const char *url, const char *secret, char *error)
{
	RelayTarget *t = calloc(1, sizeof(RelayTarget));

	t->url = strdup(url);
	t->secret = secret ? strdup(secret) : NULL;
	if (!rmq_connect(t, error))
	{
		amqp_target_close(t);
		return NULL;
	}
	return t;
}

static char *
queue_of(const char *url, char *error)
{
	char	   *queue = relay_url_param(url, "queue");

	if (queue == NULL || queue[0] == '\0' || strlen(queue) > SHORTSTR_MAX)
	{
		snprintf(error, RELAY_ERROR_SIZE, "the URL needs a queue parameter of 1 to %d bytes: "
				 "amqp://user@host:port/vhost?queue=NAME", SHORTSTR_MAX);
		free(queue);
		return NULL;
	}
	return queue;
}

static RelayInlet *
inlet_open(const char *url, const char *secret, const char *options, int prefetch, char *error)
{
	RelayInlet *in = calloc(1, sizeof(RelayInlet));

	(void) options;
	if ((in->queue = queue_of(url, error)) == NULL ||
		(in->t = connect_to(url, secret, error)) == NULL)
	{
		inlet_close(in);
		return NULL;
	}
	amqp_basic_qos(in->t->conn, CHANNEL, 0, (uint16_t) prefetch, 0);
	if (!rmq_reply_ok(amqp_get_rpc_reply(in->t->conn), "basic.qos", error))
	{
		inlet_close(in);
		return NULL;
	}
	amqp_basic_consume(in->t->conn, CHANNEL, amqp_cstring_bytes(in->queue), amqp_empty_bytes,
					   0, 0, 0, amqp_empty_table);
	if (!rmq_reply_ok(amqp_get_rpc_reply(in->t->conn), "consuming the queue", error))
	{
		inlet_close(in);
		return NULL;
	}
	return in;
}

/*
 * What came instead of a delivery: the broker closing the channel or the
 * connection (a queue deleted, the broker stopping), or a consumer
 * cancelled.  Each ends the inlet: the loop opens it again later.  Its
 * reason into error.
 */
static void
not_a_delivery(RelayInlet *in, char *error)
{
	amqp_frame_t frame;

	if (amqp_simple_wait_frame(in->t->conn, &frame) != AMQP_STATUS_OK)
		snprintf(error, RELAY_ERROR_SIZE, "the connection to the broker broke");
	else if (frame.frame_type == AMQP_FRAME_METHOD &&
			 (frame.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD ||
			  frame.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD))
	{
		amqp_rpc_reply_t reply = {.reply_type = AMQP_RESPONSE_SERVER_EXCEPTION};

		reply.reply = frame.payload.method;
		(void) rmq_reply_ok(reply, "consuming", error);
	}
	else
		snprintf(error, RELAY_ERROR_SIZE, "consuming: the broker sent method 0x%08x",
				 frame.frame_type == AMQP_FRAME_METHOD ? frame.payload.method.id : 0);
}

static int
inlet_fetch(RelayInlet *in, RelayIngest *out, int max, int wait_ms, char *error)
{
	int			n = 0;

	if (in->t->broken != NULL)
	{
		snprintf(error, RELAY_ERROR_SIZE, "%s", in->t->broken);
		return -1;
	}
	while (n < max)
	{
		amqp_envelope_t e;
		amqp_rpc_reply_t r;

		/* The first delivery waited for, the rest while they keep coming */
		int			ms = n == 0 ? wait_ms : RELAY_LINGER_MS;
		struct timeval timeout = {ms / 1000, (ms % 1000) * 1000};

		amqp_maybe_release_buffers(in->t->conn);
		r = amqp_consume_message(in->t->conn, &e, &timeout, 0);
		if (r.reply_type == AMQP_RESPONSE_NORMAL)
		{
			take_envelope(in, &e, &out[n++]);
			amqp_destroy_envelope(&e);
			continue;
		}
		if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT)
			break;
		if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
			r.library_error == AMQP_STATUS_UNEXPECTED_STATE)
			not_a_delivery(in, in->t->broken_text);
		else
			(void) rmq_reply_ok(r, "consuming", in->t->broken_text);
		in->t->broken = in->t->broken_text;
		break;
	}
	/* The deliveries taken before the connection broke are the loop's */
	if (n == 0 && in->t->broken != NULL)
	{
		snprintf(error, RELAY_ERROR_SIZE, "%s", in->t->broken);
		return -1;
	}
	return n;
}

/*
 * Acknowledge m[0..n): at once up to the last (multiple) when they are all
 * the deliveries after the last acknowledged, one by one otherwise
 */
static bool
inlet_ack(RelayInlet *in, const RelayIngest *m, int n, char *error)
{
	bool		contiguous = true;

	for (int i = 0; i < n && contiguous; i++)
		contiguous = strtoull(m[i].broker_id, NULL, 10) == in->acked_to + 1 + i;
	for (int i = contiguous ? n - 1 : 0; i < n; i++)
	{
		uint64_t	tag = strtoull(m[i].broker_id, NULL, 10);

		if (amqp_basic_ack(in->t->conn, CHANNEL, tag, contiguous) != AMQP_STATUS_OK)
		{
			snprintf(error, RELAY_ERROR_SIZE, "acknowledging delivery %" PRIu64 " failed", tag);
			return false;
		}
		if (contiguous)
			in->acked_to = tag;
	}
	return true;
}

/* Every delivery not acknowledged, back into the queue in its place */
static void
inlet_release(RelayInlet *in)
{
	/* Only with a delivery outstanding: the broker refuses a tag it knows not */
	if (in->last_tag > in->acked_to)
		amqp_basic_nack(in->t->conn, CHANNEL, in->last_tag, 1, 1);
	in->acked_to = in->last_tag;
}

/* The queue declared passively: a missing one is 404 NOT_FOUND */
static bool
source_check(const char *url, const char *secret, char *error)
{
	char	   *queue = queue_of(url, error);
	RelayTarget *t;
	bool		ok;

	if (queue == NULL || (t = connect_to(url, secret, error)) == NULL)
	{
		free(queue);
		return false;
	}
	amqp_queue_declare(t->conn, CHANNEL, amqp_cstring_bytes(queue), 1, 0, 0, 0, amqp_empty_table);
	ok = rmq_reply_ok(amqp_get_rpc_reply(t->conn), "queue", error);
	amqp_target_close(t);
	free(queue);
	return ok;
}

const RelaySource relay_amqp_source = {"amqp://", inlet_open, inlet_fetch, inlet_ack, inlet_release, inlet_close, source_check, NULL};
const RelaySource relay_amqps_source = {"amqps://", inlet_open, inlet_fetch, inlet_ack, inlet_release, inlet_close, source_check, NULL};
