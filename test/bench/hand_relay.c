/*
 * test/bench/hand_relay.c - the hand-written relay that test/bench/relay.sh
 * measures inbox-relay against: the loop users write around an outbox
 * table.  In a transaction: SELECT ... ORDER BY id LIMIT 100 FOR UPDATE
 * SKIP LOCKED; publish each message (persistent, message_id, with publisher
 * confirms) and wait for every confirmation; DELETE them; COMMIT.  Until
 * the table is empty.
 *
 * With "ordered", the same loop keeps inbox-relay's order per key: each
 * batch takes only the oldest message of each key (a skip scan of an
 * index on (key, id), as users write it with a recursive query), so a
 * key's next message is published only after the previous one was
 * confirmed and deleted.  It reads hand_ordered_outbox.
 *
 *   hand_relay CONNINFO HOST PORT QUEUE [ordered]
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <libpq-fe.h>

static const char *const plain_sql =
"SELECT id, key, payload FROM hand_relay_outbox ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED";

/* The oldest message of each key, for 100 keys */
static const char *const ordered_sql =
"WITH RECURSIVE heads AS ("
" (SELECT o.key, o.id FROM hand_ordered_outbox AS o ORDER BY o.key, o.id LIMIT 1)"
" UNION ALL"
" SELECT n.key, n.id FROM heads AS h CROSS JOIN LATERAL"
" (SELECT o.key, o.id FROM hand_ordered_outbox AS o WHERE o.key > h.key"
"  ORDER BY o.key, o.id LIMIT 1) AS n) "
"SELECT o.id, o.key, o.payload FROM hand_ordered_outbox AS o "
"WHERE o.id IN (SELECT h.id FROM heads AS h LIMIT 100) "
"ORDER BY o.id FOR UPDATE SKIP LOCKED";

static void
die(const char *what)
{
	fprintf(stderr, "hand_relay: %s\n", what);
	exit(1);
}

static PGresult *
run(PGconn *conn, const char *sql, int n, const char *const *params, ExecStatusType want)
{
	PGresult   *res = PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);

	if (PQresultStatus(res) != want)
		die(PQerrorMessage(conn));
	return res;
}

int
main(int argc, char **argv)
{
	PGconn	   *conn;
	amqp_connection_state_t amqp;
	amqp_socket_t *sock;
	uint64_t	published = 0;
	long		total = 0;
	bool		ordered;

	if (argc != 5 && !(argc == 6 && strcmp(argv[5], "ordered") == 0))
		die("usage: hand_relay CONNINFO HOST PORT QUEUE [ordered]");
	ordered = argc == 6;
	conn = PQconnectdb(argv[1]);
	if (PQstatus(conn) != CONNECTION_OK)
		die(PQerrorMessage(conn));
	amqp = amqp_new_connection();
	sock = amqp_tcp_socket_new(amqp);
	if (amqp_socket_open(sock, argv[2], atoi(argv[3])) != AMQP_STATUS_OK)
		die("cannot connect to RabbitMQ");
	if (amqp_login(amqp, "/", 0, AMQP_DEFAULT_FRAME_SIZE, 0, AMQP_SASL_METHOD_PLAIN,
				   "guest", "guest").reply_type != AMQP_RESPONSE_NORMAL)
		die("login");
	amqp_channel_open(amqp, 1);
	amqp_confirm_select(amqp, 1);
	if (amqp_get_rpc_reply(amqp).reply_type != AMQP_RESPONSE_NORMAL)
		die("confirm.select");

	for (;;)
	{
		PGresult   *res;
		int			n,
					i;
		uint64_t	last;
		char	   *ids;
		size_t		len = 0;

		PQclear(run(conn, "BEGIN", 0, NULL, PGRES_COMMAND_OK));
		res = run(conn, ordered ? ordered_sql : plain_sql, 0, NULL, PGRES_TUPLES_OK);
		n = PQntuples(res);
		if (n == 0)
		{
			PQclear(res);
			PQclear(run(conn, "COMMIT", 0, NULL, PGRES_COMMAND_OK));
			break;
		}
		ids = malloc((size_t) n * 24 + 3);
		ids[len++] = '{';
		for (i = 0; i < n; i++)
		{
			amqp_basic_properties_t props;

			memset(&props, 0, sizeof(props));
			props._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
				AMQP_BASIC_MESSAGE_ID_FLAG;
			props.content_type = amqp_cstring_bytes("application/json");
			props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
			props.message_id = amqp_cstring_bytes(PQgetvalue(res, i, 0));
			if (amqp_basic_publish(amqp, 1, amqp_cstring_bytes(""), amqp_cstring_bytes(argv[4]), 0, 0,
								   &props, amqp_cstring_bytes(PQgetvalue(res, i, 2))) != AMQP_STATUS_OK)
				die("publish");
			len += sprintf(ids + len, "%s%s", i ? "," : "", PQgetvalue(res, i, 0));
		}
		ids[len++] = '}';
		ids[len] = '\0';
		last = published + n;
		while (published < last)
		{
			amqp_frame_t frame;

			if (amqp_simple_wait_frame(amqp, &frame) != AMQP_STATUS_OK)
				die("waiting for confirmations");
			if (frame.frame_type == AMQP_FRAME_METHOD && frame.payload.method.id == AMQP_BASIC_ACK_METHOD)
			{
				amqp_basic_ack_t *ack = frame.payload.method.decoded;

				published = ack->multiple ? ack->delivery_tag : published + 1;
			}
			else if (frame.frame_type == AMQP_FRAME_METHOD)
				die("the broker did not confirm");
		}
		{
			const char *params[1] = {ids};

			PQclear(run(conn, ordered ? "DELETE FROM hand_ordered_outbox WHERE id = ANY ($1::bigint[])" :
						"DELETE FROM hand_relay_outbox WHERE id = ANY ($1::bigint[])", 1, params,
						PGRES_COMMAND_OK));
		}
		PQclear(run(conn, "COMMIT", 0, NULL, PGRES_COMMAND_OK));
		PQclear(res);
		free(ids);
		total += n;
	}
	printf("%ld\n", total);
	amqp_connection_close(amqp, AMQP_REPLY_SUCCESS);
	amqp_destroy_connection(amqp);
	PQfinish(conn);
	return 0;
}
