/*-------------------------------------------------------------------------
 *
 * amqp_connect.c
 *	  inbox-relay's AMQP transport: connecting to the broker, logging in,
 *	  the channel in confirm mode, the broker's reasons, and the check of
 *	  "inbox-relay check".  What is published, and how it is confirmed, is
 *	  in amqp.c.
 *
 * relay/amqp_connect.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>

#include "amqp_internal.h"

bool
rmq_reply_ok(amqp_rpc_reply_t reply, const char *what, char *error)
{
	if (reply.reply_type == AMQP_RESPONSE_NORMAL)
		return true;
	if (reply.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION)
		snprintf(error, RELAY_ERROR_SIZE, "%s: %s", what, amqp_error_string2(reply.library_error));
	else if (reply.reply.id == AMQP_CONNECTION_CLOSE_METHOD)
	{
		amqp_connection_close_t *c = reply.reply.decoded;

		snprintf(error, RELAY_ERROR_SIZE, "%s: the broker closed the connection: %d %.*s", what,
				 c->reply_code, (int) c->reply_text.len, (char *) c->reply_text.bytes);
	}
	else if (reply.reply.id == AMQP_CHANNEL_CLOSE_METHOD)
	{
		amqp_channel_close_t *c = reply.reply.decoded;

		snprintf(error, RELAY_ERROR_SIZE, "%s: the broker closed the channel: %d %.*s", what,
				 c->reply_code, (int) c->reply_text.len, (char *) c->reply_text.bytes);
	}
	else
		snprintf(error, RELAY_ERROR_SIZE, "%s: the broker answered method %u", what, reply.reply.id);
	return false;
}

/* The length of s an error shows, and the words that say it was cut */
int
rmq_shown_len(const char *s)
{
	return strlen(s) > SHOWN_MAX ? SHOWN_MAX : (int) strlen(s);
}

const char *
rmq_shown_cut(const char *s)
{
	return strlen(s) > SHOWN_MAX ? "...\" (cut)" : "\"";
}

void
rmq_disconnect(RelayTarget *t)
{
	if (t->conn != NULL)
	{
		amqp_connection_close(t->conn, AMQP_REPLY_SUCCESS);
		amqp_destroy_connection(t->conn);
		t->conn = NULL;
	}
}

void
amqp_target_close(RelayTarget *t)
{
	rmq_disconnect(t);
	free(t->url);
	free(t->secret);
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

/* Open the channel, in confirm mode: its publish sequence starts again */
bool
rmq_channel_open(RelayTarget *t, char *error)
{
	amqp_channel_open(t->conn, CHANNEL);
	if (!rmq_reply_ok(amqp_get_rpc_reply(t->conn), "opening a channel", error))
		return false;
	amqp_confirm_select(t->conn, CHANNEL);
	if (!rmq_reply_ok(amqp_get_rpc_reply(t->conn), "publisher confirms", error))
		return false;
	t->published = 0;
	return true;
}

/* Connect to t's URL, log in and open the channel; false with the reason */
bool
rmq_connect(RelayTarget *t, char *error)
{
	struct amqp_connection_info info;
	char	   *base = relay_url_without_query(t->url);
	amqp_socket_t *socket;
	struct timeval timeout = {relay_timeout, 0};
	int			rc;
	bool		ok = false;

	amqp_default_connection_info(&info);
	if (amqp_parse_url(base, &info) != AMQP_STATUS_OK)
	{
		snprintf(error, RELAY_ERROR_SIZE, "not an AMQP URL: amqp://user@host:port/vhost?exchange=...&routing_key=...");
		free(base);
		return false;
	}
	if (t->secret != NULL)
		info.password = t->secret;

	t->conn = amqp_new_connection();
	/* Login, opening the channel and confirm mode: within --timeout each */
	amqp_set_handshake_timeout(t->conn, &timeout);
	amqp_set_rpc_timeout(t->conn, &timeout);
	if (info.ssl)
	{
		char	   *cacert = relay_url_param(t->url, "cacert");

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
				goto out;
			}
		}
		free(cacert);
	}
	else
		socket = amqp_tcp_socket_new(t->conn);
	if (socket == NULL)
	{
		snprintf(error, RELAY_ERROR_SIZE, "cannot create a socket");
		goto out;
	}
	rc = amqp_socket_open_noblock(socket, info.host, info.port, &timeout);
	if (rc != AMQP_STATUS_OK)
	{
		snprintf(error, RELAY_ERROR_SIZE, "cannot connect to %s:%d: %s", info.host, info.port,
				 amqp_error_string2(rc));
		amqp_destroy_connection(t->conn);
		t->conn = NULL;
		goto out;
	}
	ok = rmq_reply_ok(amqp_login(t->conn, info.vhost, 0, AMQP_DEFAULT_FRAME_SIZE, 0,
							 AMQP_SASL_METHOD_PLAIN, info.user, info.password), "login", error) &&
		rmq_channel_open(t, error);
out:
	if (!ok)
		rmq_disconnect(t);
	free(base);
	return ok;
}

RelayTarget *
amqp_target_open(const char *url, const char *secret, char *error)
{
	RelayTarget *t = calloc(1, sizeof(RelayTarget));

	t->url = strdup(url);
	t->secret = secret ? strdup(secret) : NULL;
	t->exchange = relay_url_param(url, "exchange");
	if (t->exchange == NULL)
		t->exchange = strdup("");
	t->routing_key = relay_url_param(url, "routing_key");
	if (!url_flag(url, "outbox_headers", false, &t->outbox_headers, error))
	{
		amqp_target_close(t);
		return NULL;
	}
	/* The route's own names: every message would fail on them */
	if (strlen(t->exchange) > SHORTSTR_MAX ||
		(t->routing_key != NULL && strlen(t->routing_key) > SHORTSTR_MAX))
	{
		snprintf(error, RELAY_ERROR_SIZE, "the %s in the URL is over %d bytes",
				 strlen(t->exchange) > SHORTSTR_MAX ? "exchange" : "routing_key", SHORTSTR_MAX);
		amqp_target_close(t);
		return NULL;
	}
	if (!rmq_connect(t, error))
	{
		amqp_target_close(t);
		return NULL;
	}
	return t;
}

/*
 * For "inbox-relay check": the exchange the route publishes to, declared
 * passively (a missing one is NOT_FOUND); with the default exchange, the
 * queue that routing_key names, since that exchange delivers to the queue
 * of the routing key's name.  Nothing is published.  A failed declaration
 * closes the channel, which is opened again.
 */
bool
amqp_target_check(RelayTarget *t, const char *url, char *error)
{
	char		what[SHORTSTR_MAX + 16];

	(void) url;
	if (t->exchange[0] != '\0')
	{
		snprintf(what, sizeof(what), "exchange \"%s\"", t->exchange);
		amqp_exchange_declare(t->conn, CHANNEL, amqp_cstring_bytes(t->exchange),
							  amqp_cstring_bytes("direct"), 1, 0, 0, 0, amqp_empty_table);
	}
	else if (t->routing_key != NULL)
	{
		snprintf(what, sizeof(what), "queue \"%s\"", t->routing_key);
		amqp_queue_declare(t->conn, CHANNEL, amqp_cstring_bytes(t->routing_key), 1, 0, 0, 0,
						   amqp_empty_table);
	}
	else
		return true;
	if (rmq_reply_ok(amqp_get_rpc_reply(t->conn), what, error))
		return true;
	{
		amqp_rpc_reply_t reply = amqp_get_rpc_reply(t->conn);

		if (reply.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
			reply.reply.id == AMQP_CHANNEL_CLOSE_METHOD)
		{
			amqp_channel_close_ok_t ok = {0};

			amqp_send_method(t->conn, CHANNEL, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
			if (!rmq_channel_open(t, t->broken_text))
				t->broken = t->broken_text;
		}
		else
			t->broken = "the check failed";
	}
	return false;
}

