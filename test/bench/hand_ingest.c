/*
 * test/bench/hand_ingest.c - what test/bench/brokers.sh measures the
 * relay's ingest from RabbitMQ against, and how it fills the queue:
 *
 *   hand_ingest fill HOST PORT QUEUE N PREFIX
 *		publish N persistent JSON messages, message_id PREFIX-i, routing
 *		key k(i % 1000), with publisher confirms, all confirmed
 *   hand_ingest ack HOST PORT QUEUE N
 *		the broker's ceiling: consume N messages with manual acks and a
 *		prefetch of 100, acknowledging every 100th (multiple) and the
 *		last, touching no database
 *   hand_ingest loop HOST PORT QUEUE N CONNINFO SCOPE
 *		the loop users write by hand: per message, inbox_receive in its own
 *		transaction (autocommit: receive, commit), then basic.ack
 *
 * RabbitMQ's default user (guest) on vhost "/".
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <libpq-fe.h>

#define PREFETCH 100

static void
die(const char *what, const char *why)
{
	fprintf(stderr, "hand_ingest: %s: %s\n", what, why);
	exit(1);
}

static void
check_rpc(amqp_rpc_reply_t r, const char *what)
{
	if (r.reply_type != AMQP_RESPONSE_NORMAL)
		die(what, r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION ?
			amqp_error_string2(r.library_error) : "the broker refused");
}

static amqp_connection_state_t
connect_to(const char *host, int port)
{
	amqp_connection_state_t c = amqp_new_connection();
	amqp_socket_t *sock = amqp_tcp_socket_new(c);

	if (sock == NULL || amqp_socket_open(sock, host, port) != AMQP_STATUS_OK)
		die("connect", host);
	check_rpc(amqp_login(c, "/", 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, "guest", "guest"), "login");
	amqp_channel_open(c, 1);
	check_rpc(amqp_get_rpc_reply(c), "channel.open");
	return c;
}

static void
fill(amqp_connection_state_t c, const char *queue, long n, const char *prefix)
{
	char		id[128],
				key[32],
				body[128];
	long		confirmed = 0;

	amqp_confirm_select(c, 1);
	check_rpc(amqp_get_rpc_reply(c), "confirm.select");
	for (long i = 0; i < n; i++)
	{
		amqp_basic_properties_t p;

		snprintf(id, sizeof(id), "%s-%ld", prefix, i);
		snprintf(key, sizeof(key), "k%ld", i % 1000);
		snprintf(body, sizeof(body), "{\"n\": %ld, \"key\": \"%s\"}", i, key);
		memset(&p, 0, sizeof(p));
		p._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
			AMQP_BASIC_MESSAGE_ID_FLAG;
		p.content_type = amqp_cstring_bytes("application/json");
		p.delivery_mode = 2;
		p.message_id = amqp_cstring_bytes(id);
		/* the default exchange routes by queue name: the key goes as a header */
		{
			amqp_table_entry_t h;

			h.key = amqp_cstring_bytes("key");
			h.value.kind = AMQP_FIELD_KIND_UTF8;
			h.value.value.bytes = amqp_cstring_bytes(key);
			p._flags |= AMQP_BASIC_HEADERS_FLAG;
			p.headers.num_entries = 1;
			p.headers.entries = &h;
			if (amqp_basic_publish(c, 1, amqp_cstring_bytes(""), amqp_cstring_bytes(queue), 0, 0, &p,
								   amqp_cstring_bytes(body)) != AMQP_STATUS_OK)
				die("publish", queue);
		}
	}
	/* every confirmation (acks may be multiple) */
	while (confirmed < n)
	{
		amqp_frame_t f;

		if (amqp_simple_wait_frame(c, &f) != AMQP_STATUS_OK)
			die("confirm", "connection lost");
		if (f.frame_type == AMQP_FRAME_METHOD && f.payload.method.id == AMQP_BASIC_ACK_METHOD)
		{
			amqp_basic_ack_t *a = f.payload.method.decoded;

			confirmed = a->multiple ? (long) a->delivery_tag : confirmed + 1;
		}
		else if (f.frame_type == AMQP_FRAME_METHOD)
			die("confirm", "not an ack");
	}
}

static void
drain(amqp_connection_state_t c, const char *queue, long n, PGconn *db, const char *scope)
{
	long		got = 0;

	amqp_basic_qos(c, 1, 0, PREFETCH, 0);
	check_rpc(amqp_get_rpc_reply(c), "basic.qos");
	amqp_basic_consume(c, 1, amqp_cstring_bytes(queue), amqp_empty_bytes, 0, 0, 0, amqp_empty_table);
	check_rpc(amqp_get_rpc_reply(c), "basic.consume");
	while (got < n)
	{
		amqp_envelope_t e;
		bool		ack;

		amqp_maybe_release_buffers(c);
		check_rpc(amqp_consume_message(c, &e, NULL, 0), "consume");
		got++;
		if (db != NULL)
		{
			char	   *id = strndup(e.message.properties.message_id.bytes,
									 e.message.properties.message_id.len);
			char	   *body = strndup(e.message.body.bytes, e.message.body.len);
			const char *params[3] = {scope, id, body};
			PGresult   *res = PQexecParams(db, "SELECT inbox_receive($1, $2, $3::jsonb)",
										   3, NULL, params, NULL, NULL, 0);

			if (PQresultStatus(res) != PGRES_TUPLES_OK)
				die("inbox_receive", PQerrorMessage(db));
			PQclear(res);
			free(id);
			free(body);
			ack = true;
		}
		else
			ack = got % PREFETCH == 0 || got == n;
		if (ack && amqp_basic_ack(c, 1, e.delivery_tag, db == NULL) != AMQP_STATUS_OK)
			die("ack", queue);
		amqp_destroy_envelope(&e);
	}
}

int
main(int argc, char **argv)
{
	amqp_connection_state_t c;
	PGconn	   *db = NULL;

	if (argc < 6)
		die("usage", "fill|ack|loop HOST PORT QUEUE N [PREFIX | CONNINFO SCOPE]");
	c = connect_to(argv[2], atoi(argv[3]));
	if (strcmp(argv[1], "fill") == 0 && argc == 7)
		fill(c, argv[4], atol(argv[5]), argv[6]);
	else if (strcmp(argv[1], "ack") == 0)
		drain(c, argv[4], atol(argv[5]), NULL, NULL);
	else if (strcmp(argv[1], "loop") == 0 && argc == 8)
	{
		db = PQconnectdb(argv[6]);
		if (PQstatus(db) != CONNECTION_OK)
			die("connect", PQerrorMessage(db));
		drain(c, argv[4], atol(argv[5]), db, argv[7]);
		PQfinish(db);
	}
	else
		die("usage", argv[1]);
	amqp_channel_close(c, 1, AMQP_REPLY_SUCCESS);
	amqp_connection_close(c, AMQP_REPLY_SUCCESS);
	amqp_destroy_connection(c);
	return 0;
}
