/*-------------------------------------------------------------------------
 *
 * nats_tool.c
 *	  A NATS JetStream client for the tests (and benchmarks) of the relay's
 *	  nats:// target and source, built by the test suite with
 *	  cc nats_tool.c $(pkg-config --cflags --libs libnats).
 *
 *	  nats_tool URL stream STREAM SUBJECT [MAX_MSG_SIZE [DUPLICATE_WINDOW_S]]
 *	      create a file stream capturing SUBJECT (a two-minute
 *	      duplicate window by default; MAX_MSG_SIZE 0 for none)
 *	  nats_tool URL consumer STREAM DURABLE ACK_WAIT_S MAX_ACK_PENDING
 *	      create a durable pull consumer with explicit acks
 *	  nats_tool URL publish
 *	      publish the lines of stdin, each SUBJECT TAB ID TAB TYPE TAB BODY
 *	      followed by TAB NAME=VALUE headers ("-" for no id, no type);
 *	      each publish acknowledged by the stream
 *	  nats_tool URL read STREAM
 *	      print each message of STREAM as a JSON line: seq, subject,
 *	      headers (each name's first value), data
 *	  nats_tool URL pending STREAM DURABLE
 *	      print "num_pending N num_ack_pending N num_redelivered N"
 *
 *	  URL is nats://host:port.  Exits 1 with the reason on stderr.
 *
 * test/tools/nats_tool.c
 *
 *-------------------------------------------------------------------------
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nats/nats.h>

static void
check(natsStatus s, jsErrCode jerr, const char *what)
{
	if (s == NATS_OK)
		return;
	fprintf(stderr, "nats_tool: %s: %s (%s, JetStream error %d)\n", what, natsStatus_GetText(s),
			nats_GetLastError(NULL), (int) jerr);
	exit(1);
}

static void
json_string(const char *s, int len)
{
	putchar('"');
	for (int i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static void
publish(jsCtx *js)
{
	char	   *line = NULL;
	size_t		size = 0;
	ssize_t		len;

	while ((len = getline(&line, &size, stdin)) > 0)
	{
		char	   *fields[64];
		int			nf = 0;
		natsMsg    *msg = NULL;
		jsPubAck   *pa = NULL;
		jsErrCode	jerr = 0;

		if (line[len - 1] == '\n')
			line[--len] = '\0';
		for (char *p = line; nf < 64;)
		{
			fields[nf++] = p;
			if ((p = strchr(p, '\t')) == NULL)
				break;
			*p++ = '\0';
		}
		if (nf < 4)
		{
			fprintf(stderr, "nats_tool: publish: a line needs SUBJECT ID TYPE BODY\n");
			exit(1);
		}
		check(natsMsg_Create(&msg, fields[0], NULL, fields[3], (int) strlen(fields[3])), 0, "a message");
		if (strcmp(fields[1], "-") != 0)
			check(natsMsgHeader_Set(msg, "Nats-Msg-Id", fields[1]), 0, "a header");
		if (strcmp(fields[2], "-") != 0)
			check(natsMsgHeader_Set(msg, "Content-Type", fields[2]), 0, "a header");
		for (int i = 4; i < nf; i++)
		{
			char	   *eq = strchr(fields[i], '=');

			if (eq == NULL)
				continue;
			*eq = '\0';
			check(natsMsgHeader_Add(msg, fields[i], eq + 1), 0, "a header");
		}
		check(js_PublishMsg(&pa, js, msg, NULL, &jerr), jerr, "publishing");
		jsPubAck_Destroy(pa);
		natsMsg_Destroy(msg);
	}
	free(line);
}

static void
read_stream(jsCtx *js, const char *stream)
{
	jsStreamInfo *si = NULL;
	jsErrCode	jerr = 0;

	check(js_GetStreamInfo(&si, js, stream, NULL, &jerr), jerr, "the stream");
	for (uint64_t seq = si->State.FirstSeq; si->State.Msgs > 0 && seq <= si->State.LastSeq; seq++)
	{
		natsMsg    *msg = NULL;
		const char **keys = NULL;
		int			nkeys = 0;

		if (js_GetMsg(&msg, js, stream, seq, NULL, &jerr) != NATS_OK)
			continue;			/* deleted */
		printf("{\"seq\":%" PRIu64 ",\"subject\":", seq);
		json_string(natsMsg_GetSubject(msg), (int) strlen(natsMsg_GetSubject(msg)));
		printf(",\"headers\":{");
		if (natsMsgHeader_Keys(msg, &keys, &nkeys) == NATS_OK)
			for (int i = 0; i < nkeys; i++)
			{
				const char *v = "";

				natsMsgHeader_Get(msg, keys[i], &v);
				printf("%s", i ? "," : "");
				json_string(keys[i], (int) strlen(keys[i]));
				putchar(':');
				json_string(v, (int) strlen(v));
			}
		free((void *) keys);
		printf("},\"data\":");
		json_string(natsMsg_GetData(msg), natsMsg_GetDataLength(msg));
		printf("}\n");
		natsMsg_Destroy(msg);
	}
	jsStreamInfo_Destroy(si);
}

int
main(int argc, char **argv)
{
	natsConnection *nc = NULL;
	jsCtx	   *js = NULL;
	jsErrCode	jerr = 0;

	if (argc < 3)
	{
		fprintf(stderr, "usage: nats_tool URL stream|consumer|publish|read|pending ...\n");
		return 1;
	}
	check(natsConnection_ConnectTo(&nc, argv[1]), 0, "connecting");
	check(natsConnection_JetStream(&js, nc, NULL), 0, "JetStream");
	if (strcmp(argv[2], "stream") == 0 && argc >= 5)
	{
		jsStreamConfig sc;
		jsStreamInfo *si = NULL;
		const char *subjects[1] = {argv[4]};

		jsStreamConfig_Init(&sc);
		sc.Name = argv[3];
		sc.Subjects = subjects;
		sc.SubjectsLen = 1;
		sc.Storage = js_FileStorage;
		sc.Duplicates = (int64_t) 120 * 1000 * 1000 * 1000;
		if (argc >= 6 && atoi(argv[5]) > 0)
			sc.MaxMsgSize = atoi(argv[5]);
		if (argc >= 7)
			sc.Duplicates = (int64_t) atoi(argv[6]) * 1000 * 1000 * 1000;
		check(js_AddStream(&si, js, &sc, NULL, &jerr), jerr, "creating the stream");
		jsStreamInfo_Destroy(si);
	}
	else if (strcmp(argv[2], "consumer") == 0 && argc >= 7)
	{
		jsConsumerConfig cc;
		jsConsumerInfo *ci = NULL;

		jsConsumerConfig_Init(&cc);
		cc.Durable = argv[4];
		cc.AckPolicy = js_AckExplicit;
		cc.AckWait = (int64_t) atoi(argv[5]) * 1000 * 1000 * 1000;
		cc.MaxAckPending = atoi(argv[6]);
		check(js_AddConsumer(&ci, js, argv[3], &cc, NULL, &jerr), jerr, "creating the consumer");
		jsConsumerInfo_Destroy(ci);
	}
	else if (strcmp(argv[2], "publish") == 0)
		publish(js);
	else if (strcmp(argv[2], "read") == 0 && argc >= 4)
		read_stream(js, argv[3]);
	else if (strcmp(argv[2], "pending") == 0 && argc >= 5)
	{
		jsConsumerInfo *ci = NULL;

		check(js_GetConsumerInfo(&ci, js, argv[3], argv[4], NULL, &jerr), jerr, "the consumer");
		printf("num_pending %" PRIu64 " num_ack_pending %" PRId64 " num_redelivered %" PRId64 "\n",
			   ci->NumPending, ci->NumAckPending, ci->NumRedelivered);
		jsConsumerInfo_Destroy(ci);
	}
	else
	{
		fprintf(stderr, "nats_tool: unknown command or missing arguments: %s\n", argv[2]);
		return 1;
	}
	jsCtx_Destroy(js);
	natsConnection_Destroy(nc);
	return 0;
}
