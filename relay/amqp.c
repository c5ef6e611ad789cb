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
 * once the broker acknowledged it (basic.ack).  A batch (one message per
 * key) is published at once (start_batch), and its confirmations are
 * awaited later (finish_batch): the relay publishes the next batch, whose
 * keys are all others, before it waits for this one's, so that the
 * broker's writes overlap the database's.  Confirmations carry the
 * channel's publish sequence, which places each in its batch.  Messages
 * are published as mandatory: a message no queue would take is returned
 * (basic.return) before its ack, and is retried rather than lost.  A nack
 * is retried; a closed channel or connection fails every open batch, and
 * reopens the target at the next one.  The messages the broker had when
 * it closed them count an attempt; a lost connection, or no confirmation
 * within --timeout, finds the target unreachable (RELAY_DOWN) and counts
 * none.  A broker that stops reading (a resource alarm) can hold a
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

#include <amqp.h>
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>

#include "relay.h"

#define CHANNEL 1
#define DEFAULT_CACERT "/etc/ssl/certs/ca-certificates.crt"

/* A batch published and not yet settled: tags first .. first + published - 1 */
typedef struct OpenBatch
{
	const RelayMessage *m;
	int			n;
	int			published;
	int			unsettled;		/* of the published */
	uint64_t	first;
	bool	   *returned;
	bool	   *settled;
	RelayResult *results;
	char		(*errors)[RELAY_ERROR_SIZE];
	struct timeval deadline;	/* --timeout after it was published */
} OpenBatch;

struct RelayTarget
{
	amqp_connection_state_t conn;
	char	   *exchange;
	char	   *routing_key;	/* NULL: the message's key */
	bool		outbox_headers; /* add outbox-topic, -key and -position */
	uint64_t	published;		/* the channel's publish sequence */
	OpenBatch  *open[RELAY_WINDOW]; /* oldest first */
	int			nopen;
	const char *broken;			/* why the connection is unusable, or NULL */
	bool		refused;		/* the broker closed it: it had the messages */
};

static bool
reply_ok(amqp_rpc_reply_t reply, const char *what, char *error)
{
	if (reply.reply_type == AMQP_RESPONSE_NORMAL)
		return true;
	if (reply.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION)
		snprintf(error, RELAY_ERROR_SIZE, "%s: %s", what, amqp_error_string2(reply.library_error));
	else if (reply.reply.id == AMQP_CONNECTION_CLOSE_METHOD)
	{
		amqp_connection_close_t *c = reply.reply.decoded;

		snprintf(error, RELAY_ERROR_SIZE, "%s: connection closed by the broker: %d %.*s", what,
				 c->reply_code, (int) c->reply_text.len, (char *) c->reply_text.bytes);
	}
	else if (reply.reply.id == AMQP_CHANNEL_CLOSE_METHOD)
	{
		amqp_channel_close_t *c = reply.reply.decoded;

		snprintf(error, RELAY_ERROR_SIZE, "%s: channel closed by the broker: %d %.*s", what,
				 c->reply_code, (int) c->reply_text.len, (char *) c->reply_text.bytes);
	}
	else
		snprintf(error, RELAY_ERROR_SIZE, "%s: the broker answered method %u", what, reply.reply.id);
	return false;
}

static void
amqp_target_close(RelayTarget *t)
{
	if (t->conn != NULL)
	{
		amqp_connection_close(t->conn, AMQP_REPLY_SUCCESS);
		amqp_destroy_connection(t->conn);
	}
	free(t->exchange);
	free(t->routing_key);
	free(t);
}

/*
 * The URL's parameter name as a flag, true or false, *value; absent, the
 * default.  false, with the reason in error, for any other value.
 */
static bool
url_flag(const char *url, const char *name, bool absent, bool *value, char *error)
{
	char	   *flag = relay_url_param(url, name);
	bool		ok = true;

	*value = absent;
	if (flag != NULL && strcmp(flag, "true") == 0)
		*value = true;
	else if (flag != NULL && strcmp(flag, "false") == 0)
		*value = false;
	else if (flag != NULL)
	{
		snprintf(error, RELAY_ERROR_SIZE, "%s must be true or false, not \"%s\"", name, flag);
		ok = false;
	}
	free(flag);
	return ok;
}

static RelayTarget *
amqp_target_open(const char *url, const char *secret, char *error)
{
	struct amqp_connection_info info;
	char	   *base = relay_url_without_query(url);
	RelayTarget *t = calloc(1, sizeof(RelayTarget));
	amqp_socket_t *socket;
	struct timeval timeout = {relay_timeout, 0};
	int			rc;

	t->exchange = relay_url_param(url, "exchange");
	if (t->exchange == NULL)
		t->exchange = strdup("");
	t->routing_key = relay_url_param(url, "routing_key");
	if (!url_flag(url, "outbox_headers", false, &t->outbox_headers, error))
	{
		free(base);
		amqp_target_close(t);
		return NULL;
	}

	amqp_default_connection_info(&info);
	if (amqp_parse_url(base, &info) != AMQP_STATUS_OK)
	{
		snprintf(error, RELAY_ERROR_SIZE, "not an AMQP URL: amqp://user@host:port/vhost?exchange=...&routing_key=...");
		free(base);
		amqp_target_close(t);
		return NULL;
	}
	if (secret != NULL)
		info.password = (char *) secret;

	t->conn = amqp_new_connection();
	/* Login, opening the channel and confirm mode: within --timeout each */
	amqp_set_handshake_timeout(t->conn, &timeout);
	amqp_set_rpc_timeout(t->conn, &timeout);
	if (info.ssl)
	{
		char	   *cacert = relay_url_param(url, "cacert");

		socket = amqp_ssl_socket_new(t->conn);
		if (socket != NULL)
		{
			amqp_ssl_socket_set_verify_peer(socket, 1);
			amqp_ssl_socket_set_verify_hostname(socket, 1);
			rc = amqp_ssl_socket_set_cacert(socket, cacert ? cacert : DEFAULT_CACERT);
			if (rc != AMQP_STATUS_OK)
			{
				snprintf(error, RELAY_ERROR_SIZE, "cannot read the CA file \"%s\": %s",
						 cacert ? cacert : DEFAULT_CACERT, amqp_error_string2(rc));
				free(cacert);
				free(base);
				amqp_target_close(t);
				return NULL;
			}
		}
		free(cacert);
	}
	else
		socket = amqp_tcp_socket_new(t->conn);
	if (socket == NULL)
	{
		snprintf(error, RELAY_ERROR_SIZE, "cannot create a socket");
		free(base);
		amqp_target_close(t);
		return NULL;
	}
	rc = amqp_socket_open_noblock(socket, info.host, info.port, &timeout);
	if (rc != AMQP_STATUS_OK)
	{
		snprintf(error, RELAY_ERROR_SIZE, "cannot connect to %s:%d: %s", info.host, info.port,
				 amqp_error_string2(rc));
		free(base);
		amqp_destroy_connection(t->conn);
		t->conn = NULL;
		amqp_target_close(t);
		return NULL;
	}
	if (!reply_ok(amqp_login(t->conn, info.vhost, 0, AMQP_DEFAULT_FRAME_SIZE, 0,
							 AMQP_SASL_METHOD_PLAIN, info.user, info.password), "login", error) ||
		(amqp_channel_open(t->conn, CHANNEL),
		 !reply_ok(amqp_get_rpc_reply(t->conn), "opening a channel", error)) ||
		(amqp_confirm_select(t->conn, CHANNEL),
		 !reply_ok(amqp_get_rpc_reply(t->conn), "publisher confirms", error)))
	{
		free(base);
		amqp_target_close(t);
		return NULL;
	}
	free(base);
	return t;
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

/* Settle the messages of the open batches that a confirmation covers */
static void
settle_confirmation(RelayTarget *t, bool ack, uint64_t tag, bool multiple)
{
	int			b,
				i;

	for (b = 0; b < t->nopen; b++)
	{
		OpenBatch  *o = t->open[b];

		for (i = 0; i < o->published; i++)
		{
			uint64_t	mine = o->first + i;

			if (o->settled[i] || !(mine == tag || (multiple && mine <= tag)))
				continue;
			o->settled[i] = true;
			o->unsettled--;
			if (ack && !o->returned[i])
				o->results[i] = RELAY_DELIVERED;
			else
			{
				o->results[i] = RELAY_RETRY;
				if (ack)
					snprintf(o->errors[i], RELAY_ERROR_SIZE,
							 "no queue took the message (exchange \"%s\", routing key \"%s\")",
							 t->exchange, t->routing_key ? t->routing_key : o->m[i].key);
				else
					snprintf(o->errors[i], RELAY_ERROR_SIZE, "the broker refused the message (nack)");
			}
		}
	}
}

/* A returned message: it carries no delivery tag, so find it by its id */
static void
note_return(RelayTarget *t, const amqp_message_t *message)
{
	int			b,
				i;

	if (!(message->properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG))
		return;
	for (b = 0; b < t->nopen; b++)
		for (i = 0; i < t->open[b]->published; i++)
		{
			const char *id = t->open[b]->m[i].id;

			if (message->properties.message_id.len == strlen(id) &&
				memcmp(message->properties.message_id.bytes, id, strlen(id)) == 0)
				t->open[b]->returned[i] = true;
		}
}

/*
 * Publish a batch, all of it at once; its outcomes stay RELAY_DOWN until
 * finish_batch settles them.  At most RELAY_WINDOW batches are open.
 */
static void
amqp_target_start_batch(RelayTarget *t, const RelayMessage *m, int n, RelayResult *results,
						char (*errors)[RELAY_ERROR_SIZE], int *retry_after)
{
	OpenBatch  *o = calloc(1, sizeof(OpenBatch));
	int			i,
				rc;

	o->m = m;
	o->n = n;
	o->first = t->published + 1;
	o->returned = calloc(n, sizeof(bool));
	o->settled = calloc(n, sizeof(bool));
	o->results = results;
	o->errors = errors;
	for (i = 0; i < n; i++)
		results[i] = RELAY_DOWN;
	for (i = 0; i < n && t->broken == NULL; i++)
	{
		rc = publish(t, &m[i]);
		if (rc != AMQP_STATUS_OK)
		{
			snprintf(errors[i], RELAY_ERROR_SIZE, "publish: %s", amqp_error_string2(rc));
			t->broken = "a publish failed";
			break;
		}
		t->published++;
		o->published++;
	}
	o->unsettled = o->published;
	gettimeofday(&o->deadline, NULL);
	o->deadline.tv_sec += relay_timeout;
	t->open[t->nopen++] = o;
}

/*
 * Wait for the confirmations of the oldest open batch, noting those of
 * later ones that arrive meanwhile.  What is unconfirmed at the end (the
 * connection broke, or no answer within --timeout of the batch's
 * publication) stays RELAY_DOWN.
 */
static void
amqp_target_finish_batch(RelayTarget *t)
{
	OpenBatch  *o = t->open[0];
	struct timeval now;
	int			i,
				rc;

	while (o->unsettled > 0 && t->broken == NULL)
	{
		amqp_frame_t frame;
		struct timeval left;

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
			t->broken = amqp_error_string2(rc);
			break;
		}
		switch (frame.payload.method.id)
		{
			case AMQP_CHANNEL_CLOSE_METHOD:
				t->broken = "the broker closed the channel";
				t->refused = true;
				break;
			case AMQP_CONNECTION_CLOSE_METHOD:
				t->broken = "the broker closed the connection";
				t->refused = true;
				break;
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
					amqp_message_t message;

					if (amqp_read_message(t->conn, frame.channel, &message, 0).reply_type ==
						AMQP_RESPONSE_NORMAL)
					{
						note_return(t, &message);
						amqp_destroy_message(&message);
					}
					break;
				}
			default:
				break;
		}
	}
	/*
	 * A message the broker had when it closed the channel or the
	 * connection was refused by it, and counts an attempt (a message it
	 * cannot take dies after its attempts); one it never got, or whose
	 * connection was lost or went unanswered, found it unreachable.
	 */
	if (t->broken != NULL)
		for (i = 0; i < o->n; i++)
			if (!o->settled[i])
			{
				if (o->errors[i][0] == '\0')
					snprintf(o->errors[i], RELAY_ERROR_SIZE, "%s: %s",
							 i < o->published ? "waiting for the confirmation" : "not published", t->broken);
				if (t->refused && i < o->published)
					o->results[i] = RELAY_RETRY;
			}
	free(o->returned);
	free(o->settled);
	free(o);
	t->nopen--;
	memmove(&t->open[0], &t->open[1], t->nopen * sizeof(OpenBatch *));
}

const RelayTransport relay_amqp = {"amqp://", amqp_target_open,
	amqp_target_start_batch, amqp_target_finish_batch, amqp_target_close, NULL, NULL};
const RelayTransport relay_amqps = {"amqps://", amqp_target_open,
	amqp_target_start_batch, amqp_target_finish_batch, amqp_target_close, NULL, NULL};
