/*-------------------------------------------------------------------------
 *
 * amqp.c
 *	  inbox-relay's AMQP 0-9-1 transport (RabbitMQ):
 *	  amqp://user@host:port/vhost?exchange=NAME&routing_key=KEY
 *
 * The exchange defaults to the default exchange (""), the routing key to
 * the message's key.  The password is the target's line of the secrets
 * file (a route never holds one).  Messages are persistent (delivery mode
 * 2), carry the outbox id as message_id (what the next consumer's claim
 * needs), the content type, and the message's headers as AMQP headers.
 * With outbox_headers=true in the URL they also carry outbox-topic,
 * outbox-key and outbox-position, for consumers that check a key's order;
 * off by default, since the broker decodes and stores every header of
 * every message.
 *
 * The channel is in confirm mode, and a message counts as delivered only
 * once the broker acknowledged it (basic.ack; a multiple ack covers the
 * channel's tags up to its own).  A batch (one message per key) is
 * published at once (start_batch), and its confirmations are awaited
 * later (finish_batch): the relay publishes the next batch, whose keys are
 * all others, before it waits for this one's, so that the broker's writes
 * overlap the database's.  Messages are published as mandatory: a message
 * no queue would take is returned (basic.return, NO_ROUTE) before its ack,
 * and is retried rather than lost; a nack is retried too.
 *
 * A message fails alone.  One the broker could not take as frames (a
 * routing key or a header name over 255 bytes, headers over a frame) or
 * would refuse (a string header CC or BCC) is refused before it is
 * published.  When the broker closes the channel or
 * the connection because of one (a header it refuses, a payload over its
 * limit), each message still unconfirmed is published again alone, to
 * find that one (recover).  Every failure carries the broker's reason:
 * its reply code and text.  A lost connection, or no confirmation within
 * --timeout, finds the target unreachable (RELAY_DOWN) and counts no
 * attempt.  A broker that stops reading (a resource alarm) can hold a
 * publish: rabbitmq-c waits for its socket without a deadline.
 *
 * amqps:// is the same over TLS, the broker's certificate and host name
 * verified against the CA file of the cacert parameter, Debian's bundle
 * by default.
 *
 * relay/amqp.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "amqp_internal.h"

/*
 * Whether the broker can take m: false, with the reason, for a message
 * whose routing key or a header name is longer than a short string, whose
 * properties do not fit in one frame, or with a header the broker
 * refuses.  The library would cut a header name's length silently, and
 * send a publish whose content header it then cannot write, and the
 * broker would close the connection under every message in flight;
 * checked before, the message fails alone.
 */
static bool
message_fits(RelayTarget *t, const RelayMessage *m, char *error)
{
	const char *routing_key = t->routing_key ? t->routing_key : m->key;
	/* frame header, class, weight, body size, flags, end */
	size_t		frame = 7 + 2 + 2 + 8 + 2 + 1;
	size_t		frame_max = (size_t) amqp_get_frame_max(t->conn);
	int			i;

	if (strlen(routing_key) > SHORTSTR_MAX)
	{
		snprintf(error, RELAY_ERROR_SIZE,
				 "the routing key (the message's key \"%.*s%s) is %zu bytes, over AMQP's %d: "
				 "name a routing_key in the route's URL",
				 rmq_shown_len(m->key), m->key, rmq_shown_cut(m->key), strlen(m->key), SHORTSTR_MAX);
		return false;
	}
	/* content type, delivery mode, message id, the headers' table */
	frame += 1 + strlen("application/octet-stream") + 1 + 1 + strlen(m->id) + 4;
	for (i = 0; i < m->nheaders; i++)
	{
		if (strlen(m->header_names[i]) > SHORTSTR_MAX)
		{
			snprintf(error, RELAY_ERROR_SIZE,
					 "the header name \"%.*s%s is %zu bytes, over AMQP's %d",
					 rmq_shown_len(m->header_names[i]), m->header_names[i], rmq_shown_cut(m->header_names[i]),
					 strlen(m->header_names[i]), SHORTSTR_MAX);
			return false;
		}
		/*
		 * RabbitMQ routes a message to the extra routing keys of an array
		 * header CC or BCC, and closes the channel under a string one.
		 */
		if (strcmp(m->header_names[i], "CC") == 0 || strcmp(m->header_names[i], "BCC") == 0)
		{
			snprintf(error, RELAY_ERROR_SIZE,
					 "the header %s is the broker's list of extra routing keys, an array: "
					 "headers are strings here", m->header_names[i]);
			return false;
		}
		frame += 1 + strlen(m->header_names[i]) + 1 + 4 + strlen(m->header_values[i]);
	}
	if (t->outbox_headers)
		frame += 3 * (1 + strlen("outbox-position") + 1 + 4) +
			strlen(m->topic) + strlen(m->key) + strlen(m->position);
	if (frame > frame_max)
	{
		snprintf(error, RELAY_ERROR_SIZE,
				 "the message's properties and headers take %zu bytes, more than a frame of the broker's (%zu)",
				 frame, frame_max);
		return false;
	}
	return true;
}

/* Publish one message, mandatory and persistent; its confirmation is awaited apart */
static int
publish(RelayTarget *t, const RelayMessage *m)
{
	amqp_basic_properties_t props;
	amqp_table_entry_t *entries = calloc(m->nheaders + 3, sizeof(amqp_table_entry_t));
	amqp_bytes_t body = {m->body_len, (void *) m->body};
	int			i,
				rc;

	for (i = 0; i < m->nheaders; i++)
	{
		entries[i].key = amqp_cstring_bytes(m->header_names[i]);
		entries[i].value.kind = AMQP_FIELD_KIND_UTF8;
		entries[i].value.value.bytes = amqp_cstring_bytes(m->header_values[i]);
	}
	if (t->outbox_headers)
	{
		entries[i].key = amqp_cstring_bytes("outbox-topic");
		entries[i].value.kind = AMQP_FIELD_KIND_UTF8;
		entries[i++].value.value.bytes = amqp_cstring_bytes(m->topic);
		entries[i].key = amqp_cstring_bytes("outbox-key");
		entries[i].value.kind = AMQP_FIELD_KIND_UTF8;
		entries[i++].value.value.bytes = amqp_cstring_bytes(m->key);
		entries[i].key = amqp_cstring_bytes("outbox-position");
		entries[i].value.kind = AMQP_FIELD_KIND_UTF8;
		entries[i++].value.value.bytes = amqp_cstring_bytes(m->position);
	}

	memset(&props, 0, sizeof(props));
	props._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
		AMQP_BASIC_MESSAGE_ID_FLAG | (i > 0 ? AMQP_BASIC_HEADERS_FLAG : 0);
	props.content_type = amqp_cstring_bytes(m->binary ? "application/octet-stream" : "application/json");
	props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
	props.message_id = amqp_cstring_bytes(m->id);
	props.headers.num_entries = i;
	props.headers.entries = entries;

	rc = amqp_basic_publish(t->conn, CHANNEL, amqp_cstring_bytes(t->exchange),
							amqp_cstring_bytes(t->routing_key ? t->routing_key : m->key),
							1, 0, &props, body);
	free(entries);
	return rc;
}

static void
settle(OpenBatch *o, int i, RelayResult result)
{
	if (o->tags[i] != 0)
		o->unsettled--;
	o->tags[i] = 0;
	o->settled[i] = true;
	o->results[i] = result;
}

/*
 * Publish message i of o: refused alone when it cannot be framed; a
 * failed write makes the connection unusable.
 */
static void
publish_one(RelayTarget *t, OpenBatch *o, int i)
{
	int			rc;

	if (!message_fits(t, &o->m[i], o->errors[i]))
	{
		settle(o, i, RELAY_REFUSED);
		return;
	}
	rc = publish(t, &o->m[i]);
	if (rc != AMQP_STATUS_OK)
	{
		snprintf(o->errors[i], RELAY_ERROR_SIZE, "publish: %s", amqp_error_string2(rc));
		t->broken = "a publish failed";
		return;
	}
	o->tags[i] = ++t->published;
	o->returned[i] = false;
	o->unsettled++;
}

/*
 * Settle the messages a confirmation covers: delivery_tag, and with
 * multiple every earlier tag of the channel not settled yet.
 */
static void
settle_confirmation(RelayTarget *t, bool ack, uint64_t tag, bool multiple)
{
	int			b,
				i;

	for (b = 0; b < t->nopen; b++)
	{
		OpenBatch  *o = t->open[b];

		for (i = 0; i < o->n; i++)
		{
			uint64_t	mine = o->tags[i];

			if (mine == 0 || !(mine == tag || (multiple && mine < tag)))
				continue;
			if (ack && !o->returned[i])
				settle(o, i, RELAY_DELIVERED);
			else
			{
				/* A returned message's error holds the broker's reason already */
				if (!ack)
					snprintf(o->errors[i], RELAY_ERROR_SIZE,
							 "the broker refused the message (basic.nack), as a queue does that is full "
							 "with x-overflow=reject-publish");
				settle(o, i, RELAY_RETRY);
			}
		}
	}
}

/*
 * A returned message (basic.return, before its ack): no queue took it.  It
 * carries no delivery tag, so it is found by its id.
 */
static void
note_return(RelayTarget *t, const amqp_basic_return_t *r, const amqp_message_t *message)
{
	int			b,
				i;

	if (!(message->properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG))
		return;
	for (b = 0; b < t->nopen; b++)
		for (i = 0; i < t->open[b]->n; i++)
		{
			OpenBatch  *o = t->open[b];
			const char *id = o->m[i].id;
			const char *key = t->routing_key ? t->routing_key : o->m[i].key;

			if (o->tags[i] == 0 || message->properties.message_id.len != strlen(id) ||
				memcmp(message->properties.message_id.bytes, id, strlen(id)) != 0)
				continue;
			o->returned[i] = true;
			snprintf(o->errors[i], RELAY_ERROR_SIZE,
					 "%d %.*s: no queue took the message (exchange \"%s\", routing key \"%.*s%s)",
					 r->reply_code, (int) r->reply_text.len, (char *) r->reply_text.bytes,
					 t->exchange, rmq_shown_len(key), key, rmq_shown_cut(key));
		}
}

/*
 * Read the broker's frames until message i of o is settled (every one of
 * o with i -1), the broker closes the channel or the connection (t->closed
 * says why), the connection breaks, or o's deadline passes (t->broken).
 * A close is answered at once, as the protocol wants.
 */
static void
read_frames(RelayTarget *t, OpenBatch *o, int i)
{
	while ((i < 0 ? o->unsettled > 0 : !o->settled[i]) && t->broken == NULL && t->closed[0] == '\0')
	{
		amqp_frame_t frame;
		struct timeval now,
					left;
		int			rc;

		gettimeofday(&now, NULL);
		timersub(&o->deadline, &now, &left);
		if (left.tv_sec < 0)
		{
			t->broken = "no confirmation from the broker in time";
			break;
		}
		amqp_maybe_release_buffers(t->conn);
		rc = amqp_simple_wait_frame_noblock(t->conn, &frame, &left);
		if (rc == AMQP_STATUS_TIMEOUT || (rc == AMQP_STATUS_OK && frame.frame_type != AMQP_FRAME_METHOD))
			continue;
		if (rc != AMQP_STATUS_OK)
		{
			snprintf(t->broken_text, RELAY_ERROR_SIZE, "%s", amqp_error_string2(rc));
			t->broken = t->broken_text;
			break;
		}
		switch (frame.payload.method.id)
		{
			case AMQP_CHANNEL_CLOSE_METHOD:
				{
					amqp_channel_close_t *c = frame.payload.method.decoded;
					amqp_channel_close_ok_t ok = {0};

					snprintf(t->closed, RELAY_ERROR_SIZE, "the broker closed the channel: %d %.*s",
							 c->reply_code, (int) c->reply_text.len, (char *) c->reply_text.bytes);
					t->closed_connection = false;
					amqp_send_method(t->conn, CHANNEL, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
					break;
				}
			case AMQP_CONNECTION_CLOSE_METHOD:
				{
					amqp_connection_close_t *c = frame.payload.method.decoded;
					amqp_connection_close_ok_t ok = {0};

					snprintf(t->closed, RELAY_ERROR_SIZE, "the broker closed the connection: %d %.*s",
							 c->reply_code, (int) c->reply_text.len, (char *) c->reply_text.bytes);
					t->closed_connection = true;
					amqp_send_method(t->conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
					break;
				}
			case AMQP_BASIC_ACK_METHOD:
				{
					amqp_basic_ack_t *a = frame.payload.method.decoded;

					settle_confirmation(t, true, a->delivery_tag, a->multiple);
					break;
				}
			case AMQP_BASIC_NACK_METHOD:
				{
					amqp_basic_nack_t *a = frame.payload.method.decoded;

					settle_confirmation(t, false, a->delivery_tag, a->multiple);
					break;
				}
			case AMQP_BASIC_RETURN_METHOD:
				{
					amqp_basic_return_t r = *(amqp_basic_return_t *) frame.payload.method.decoded;
					amqp_message_t message;

					/* reply_text stays valid: reading the message reuses no buffer */
					if (amqp_read_message(t->conn, frame.channel, &message, 0).reply_type ==
						AMQP_RESPONSE_NORMAL)
					{
						note_return(t, &r, &message);
						amqp_destroy_message(&message);
					}
					break;
				}
			default:
				break;
		}
	}
}

/*
 * After the broker closed the channel or the connection: open it again,
 * the close's reason forgotten.  false, the connection unusable, when it
 * cannot be.
 */
static bool
reopen(RelayTarget *t)
{
	bool		ok;

	if (t->closed_connection)
	{
		amqp_destroy_connection(t->conn);
		t->conn = NULL;
		ok = rmq_connect(t, t->broken_text);
	}
	else
		ok = rmq_channel_open(t, t->broken_text);
	t->closed[0] = '\0';
	if (!ok)
		t->broken = t->broken_text;
	return ok;
}

/*
 * The broker closed the channel or the connection under the open
 * batches, because of one of their messages (a header it refuses, a
 * payload over its size limit) or of the route (a missing exchange).  The
 * close took every confirmation still due with it, and the broker dropped
 * what came after the message it refused.  So each message not settled is
 * published again alone, and its confirmation awaited: the one the broker
 * closes the channel under again is that message's own failure, with the
 * broker's reason, and counts an attempt for it only; the others are
 * confirmed, returned or nacked on their own.  A message that came before
 * the refused one and whose confirmation the close cut off may have
 * reached its queue already: it is published again, as after a lost
 * connection.
 */
static void
recover(RelayTarget *t)
{
	int			b,
				i;

	for (b = 0; b < t->nopen; b++)
		for (i = 0; i < t->open[b]->n; i++)
			if (t->open[b]->tags[i] != 0)
			{
				t->open[b]->tags[i] = 0;
				t->open[b]->unsettled--;
			}
	if (!reopen(t))
		return;
	for (b = 0; b < t->nopen; b++)
	{
		OpenBatch  *o = t->open[b];

		for (i = 0; i < o->n; i++)
		{
			if (o->settled[i])
				continue;
			o->errors[i][0] = '\0';
			publish_one(t, o, i);
			if (t->broken != NULL)
				return;
			read_frames(t, o, i);
			if (t->closed[0] != '\0')
			{
				memcpy(o->errors[i], t->closed, RELAY_ERROR_SIZE);
				settle(o, i, RELAY_REFUSED);
				if (!reopen(t))
					return;
			}
			else if (t->broken != NULL)
				return;
		}
	}
}

/*
 * Publish a batch, all of it at once; its outcomes stay RELAY_DOWN until
 * finish_batch settles them, but for a message that cannot be framed,
 * refused at once.  At most RELAY_WINDOW batches are open.
 */
static void
amqp_target_start_batch(RelayTarget *t, const RelayMessage *m, int n, RelayResult *results,
						char (*errors)[RELAY_ERROR_SIZE], int *retry_after)
{
	OpenBatch  *o = calloc(1, sizeof(OpenBatch));
	int			i;

	(void) retry_after;
	o->m = m;
	o->n = n;
	o->tags = calloc(n, sizeof(uint64_t));
	o->returned = calloc(n, sizeof(bool));
	o->settled = calloc(n, sizeof(bool));
	o->results = results;
	o->errors = errors;
	for (i = 0; i < n; i++)
		results[i] = RELAY_DOWN;
	gettimeofday(&o->deadline, NULL);
	o->deadline.tv_sec += relay_timeout;
	t->open[t->nopen++] = o;
	for (i = 0; i < n && t->broken == NULL; i++)
		publish_one(t, o, i);
}

/*
 * Wait for the confirmations of the oldest open batch, noting those of
 * later ones that arrive meanwhile; when the broker closes the channel or
 * the connection, find the message it refused (recover).  What is
 * unconfirmed at the end (the connection broke, or no answer within
 * --timeout of the batch's publication) stays RELAY_DOWN.
 */
static void
amqp_target_finish_batch(RelayTarget *t)
{
	OpenBatch  *o = t->open[0];
	int			i;

	while (t->broken == NULL && o->unsettled > 0)
	{
		read_frames(t, o, -1);
		if (t->closed[0] != '\0')
			recover(t);
	}
	if (t->broken != NULL)
		for (i = 0; i < o->n; i++)
			if (!o->settled[i] && o->errors[i][0] == '\0')
				snprintf(o->errors[i], RELAY_ERROR_SIZE, "%s: %s",
						 o->tags[i] != 0 ? "waiting for the confirmation" : "not published", t->broken);
	free(o->tags);
	free(o->returned);
	free(o->settled);
	free(o);
	t->nopen--;
	memmove(&t->open[0], &t->open[1], t->nopen * sizeof(OpenBatch *));
}

const RelayTransport relay_amqp = {"amqp://", amqp_target_open,
	amqp_target_start_batch, amqp_target_finish_batch, amqp_target_close, NULL, amqp_target_check};
const RelayTransport relay_amqps = {"amqps://", amqp_target_open,
	amqp_target_start_batch, amqp_target_finish_batch, amqp_target_close, NULL, amqp_target_check};
