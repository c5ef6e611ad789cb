/*-------------------------------------------------------------------------
 *
 * kafka_mock.c
 *	  A Kafka cluster for the tests and benchmarks: librdkafka's mock
 *	  cluster, its brokers on loopback, driven by commands on stdin.
 *
 *	  kafka_mock [BROKERS]
 *
 * Prints the bootstrap servers ("127.0.0.1:PORT,...") on a line of its
 * own, then reads one command a line and answers each with "ok" or
 * "error: ..." once it is done:
 *
 *	  topic NAME PARTITIONS        create a topic (replication 1)
 *	  down BROKER | up BROKER      a broker (1..BROKERS) stops answering,
 *	                               its connections closed, or answers again
 *	  error REQUEST COUNT CODE     the next COUNT requests of REQUEST
 *	                               (Produce, Fetch, OffsetCommit or an API
 *	                               key) fail with Kafka error CODE
 *	  clear REQUEST                such errors not yet returned dropped
 *	  quit                         stop, as end of input does
 *
 * The cluster keeps what was produced in memory, for as long as it runs.
 * Built by the test suite (InboxTest::kafka_mock) with
 * cc -o kafka_mock kafka_mock.c $(pkg-config --cflags --libs rdkafka).
 *
 * test/tools/kafka_mock.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

static int
api_key(const char *name)
{
	if (strcasecmp(name, "Produce") == 0)
		return 0;
	if (strcasecmp(name, "Fetch") == 0)
		return 1;
	if (strcasecmp(name, "OffsetCommit") == 0)
		return 8;
	if (strcasecmp(name, "Metadata") == 0)
		return 3;
	return atoi(name);
}

int
main(int argc, char **argv)
{
	int			brokers = argc > 1 ? atoi(argv[1]) : 1;
	char		errstr[512];
	char		line[1024];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_t *rk;
	rd_kafka_mock_cluster_t *mc;

	/* The handle the cluster runs in; it connects to nothing */
	if (rd_kafka_conf_set(conf, "log_level", "0", errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK ||
		(rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr))) == NULL)
	{
		fprintf(stderr, "kafka_mock: %s\n", errstr);
		return 1;
	}
	if ((mc = rd_kafka_mock_cluster_new(rk, brokers > 0 ? brokers : 1)) == NULL)
	{
		fprintf(stderr, "kafka_mock: cannot create the mock cluster\n");
		return 1;
	}
	printf("%s\n", rd_kafka_mock_cluster_bootstraps(mc));
	fflush(stdout);

	while (fgets(line, sizeof(line), stdin) != NULL)
	{
		char		what[64] = "",
					a[512] = "";
		int			b = 0,
					c = 0;
		int			n = sscanf(line, "%63s %511s %d %d", what, a, &b, &c);
		rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;

		if (n <= 0)
			continue;
		if (strcmp(what, "quit") == 0)
			break;
		if (strcmp(what, "topic") == 0 && n >= 3)
			err = rd_kafka_mock_topic_create(mc, a, b, 1);
		else if (strcmp(what, "down") == 0 && n >= 2)
			err = rd_kafka_mock_broker_set_down(mc, atoi(a));
		else if (strcmp(what, "up") == 0 && n >= 2)
			err = rd_kafka_mock_broker_set_up(mc, atoi(a));
		else if (strcmp(what, "error") == 0 && n >= 4)
		{
			rd_kafka_resp_err_t *errors = calloc(b > 0 ? b : 1, sizeof(rd_kafka_resp_err_t));

			for (int i = 0; i < b; i++)
				errors[i] = (rd_kafka_resp_err_t) c;
			rd_kafka_mock_push_request_errors_array(mc, (int16_t) api_key(a), b, errors);
			free(errors);
		}
		else if (strcmp(what, "clear") == 0 && n >= 2)
			rd_kafka_mock_clear_request_errors(mc, (int16_t) api_key(a));
		else
		{
			printf("error: unknown command: %s", line);
			fflush(stdout);
			continue;
		}
		if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
			printf("error: %s\n", rd_kafka_err2str(err));
		else
			printf("ok\n");
		fflush(stdout);
	}
	rd_kafka_mock_cluster_destroy(mc);
	rd_kafka_destroy(rk);
	return 0;
}
