/*-------------------------------------------------------------------------
 *
 * nats.c
 *	  inbox-relay's NATS JetStream transport (libnats):
 *	  nats://[user@]host:port/subject[?cacert=FILE]
 *
 * Every message goes to the one subject of the URL.  It carries the
 * outbox id as Nats-Msg-Id, so that the stream's duplicate window drops
 * a message published again (a relay killed after the publish and before
 * its acknowledgement to the database); the outbox key as Outbox-Key, the
 * topic and position as Outbox-Topic and Outbox-Position, Content-Type
 * (application/json, or application/octet-stream for bytes), and the
 * message's own headers.  The secrets file's line for the target is the
 * password of the URL's user, or a token when the URL names no user.  With
 * cacert the connection is TLS, the server verified against that file.
 *
 * A message counts as delivered only on its JetStream publish
 * acknowledgement.  A batch is published at once (js_PublishMsgAsync,
 * start_batch), and its acknowledgements, which the library's thread
 * hands to on_ack, are awaited later (finish_batch), so that the next
 * batch is published while this one is being stored.  An error
 * acknowledgement (a stream's limit, a payload over its maximum) fails its
 * message alone, refused with the server's error code and text; a subject
 * no stream captures has no responder, and its message is retried.  A
 * lost connection, or no acknowledgement within --timeout, finds the
 * target unreachable (RELAY_DOWN): the library does not reconnect behind
 * the loop's back, the loop opens the target again.
 *
 * Header lines are text: a string that would not be one well-formed
 * header (a CR or LF in a value, the key or the topic; a name with a
 * colon, a space or a control character) makes its message refused
 * unsent, and so does a message header named as one the relay sets or
 * starting with "Nats-", which JetStream reads as a directive (a rollup,
 * an expected sequence).  outbox_send refuses such strings already; this
 * guard keeps a row written some other way from injecting a header.
 *
 * relay/nats.c
 *
 *-------------------------------------------------------------------------
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "nats_internal.h"

/* One started batch, until finish_batch */
typedef struct OpenBatch
{
	int			n;
	char	  **ids;			/* the messages' ids, to find an ack's slot */
	bool	   *settled;
	int			left;			/* how many still await their ack */
	int			hint;			/* where the next ack is looked for first */
	RelayResult *results;
	char		(*errors)[RELAY_ERROR_SIZE];
	time_t		deadline;
} OpenBatch;

struct RelayTarget
{
	natsConnection *nc;
	jsCtx	   *js;
	char	   *subject;
	pthread_mutex_t lock;		/* the fields below, which on_ack writes */
	pthread_cond_t acked;
	OpenBatch  *open[RELAY_WINDOW]; /* oldest first */
	int			nopen;
	bool		broken;
	char		broken_text[RELAY_ERROR_SIZE];
	bool		published;		/* an async publish was made */
};

/* The headers the relay sets, which a message's own may not name */
static const char *const reserved_headers[] = {
	"Nats-Msg-Id", "Outbox-Key", "Outbox-Topic", "Outbox-Position", "Content-Type", NULL
};

/* The library's own words for status s: its last error, else s's text */
void
relay_nats_reason(natsStatus s, const char *what, char *error)
{
	const char *last = nats_GetLastError(NULL);

	snprintf(error, RELAY_ERROR_SIZE, "%s: %s", what,
			 last != NULL && last[0] != '\0' ? last : natsStatus_GetText(s));
}

/*
 * An acknowledgement, in the library's thread: the result of its message's
 * slot, found by the Nats-Msg-Id it carries.  An ack no open batch awaits
 * (its batch timed out) is dropped.
 */
static void
on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
	RelayTarget *t = closure;
	const char *id = NULL;

	(void) natsMsgHeader_Get(msg, "Nats-Msg-Id", &id);
	pthread_mutex_lock(&t->lock);
	for (int b = 0; id != NULL && b < t->nopen; b++)
	{
		OpenBatch  *o = t->open[b];
		int			i;

		for (i = 0; i < o->n; i++)
		{
			int			k = (o->hint + i) % o->n;

			if (o->settled[k] || strcmp(o->ids[k], id) != 0)
				continue;
			if (pa != NULL)
				o->results[k] = RELAY_DELIVERED;
			else if (pae != NULL && pae->ErrCode != 0)
			{
				o->results[k] = RELAY_REFUSED;
				snprintf(o->errors[k], RELAY_ERROR_SIZE, "JetStream refused the message: %d %s",
						 (int) pae->ErrCode, pae->ErrText ? pae->ErrText : "");
			}
			else if (pae != NULL && pae->Err == NATS_NO_RESPONDERS)
			{
				o->results[k] = RELAY_RETRY;
				snprintf(o->errors[k], RELAY_ERROR_SIZE,
						 "no JetStream stream captures the subject \"%.200s\" (no responders)", t->subject);
			}
			else
			{
				o->results[k] = RELAY_DOWN;
				snprintf(o->errors[k], RELAY_ERROR_SIZE, "no publish acknowledgement: %s",
						 pae != NULL && pae->ErrText ? pae->ErrText :
						 natsStatus_GetText(pae != NULL ? pae->Err : NATS_ERR));
			}
			o->settled[k] = true;
			o->left--;
			o->hint = k + 1;
			break;
		}
		if (i < o->n)
		{
			if (o->left == 0)
				pthread_cond_broadcast(&t->acked);
			break;
		}
	}
	pthread_mutex_unlock(&t->lock);
	natsMsg_Destroy(msg);
}

/* Whether s can be a header line's value: no CR, LF or NUL */
static bool
value_ok(const char *s)
{
	return strpbrk(s, "\r\n") == NULL;
}

/* Whether s is a header name: printable ASCII, without a colon or a space */
static bool
name_ok(const char *s)
{
	if (*s == '\0')
		return false;
	for (; *s; s++)
		if (*s <= 0x20 || *s >= 0x7f || *s == ':')
			return false;
	return true;
}

/* Whether each string of m can go as a header; false with the reason */
static bool
message_headers_ok(const RelayMessage *m, char *error)
{
	if (!value_ok(m->key) || !value_ok(m->topic))
	{
		snprintf(error, RELAY_ERROR_SIZE, "not sent: the message's %s holds a CR or LF, "
				 "which a NATS header cannot carry", value_ok(m->key) ? "topic" : "key");
		return false;
	}
	for (int i = 0; i < m->nheaders; i++)
	{
		const char *name = m->header_names[i];

		if (!name_ok(name))
		{
			snprintf(error, RELAY_ERROR_SIZE, "not sent: the header name \"%.64s\" is not a NATS "
					 "header name (a colon, a space or a control character)", name);
			for (char *p = error; *p; p++)
				if (*p == '\r' || *p == '\n')
					*p = ' ';
			return false;
		}
		for (int r = 0; reserved_headers[r] != NULL; r++)
			if (strcasecmp(name, reserved_headers[r]) == 0)
			{
				snprintf(error, RELAY_ERROR_SIZE, "not sent: the header %s is the relay's, "
						 "and a message may not set it", reserved_headers[r]);
				return false;
			}
		if (strncasecmp(name, "Nats-", 5) == 0)
		{
			snprintf(error, RELAY_ERROR_SIZE, "not sent: the header %.64s starts with Nats-, "
					 "which JetStream reads as a directive", name);
			return false;
		}
		if (!value_ok(m->header_values[i]))
		{
			snprintf(error, RELAY_ERROR_SIZE, "not sent: the value of header %.64s holds a CR or LF, "
					 "which a NATS header cannot carry", name);
			return false;
		}
	}
	return true;
}

/* The message to publish for m, or NULL with the reason */
static natsMsg *
message_for(RelayTarget *t, const RelayMessage *m, char *error)
{
	natsMsg    *msg = NULL;
	natsStatus	s;

	s = natsMsg_Create(&msg, t->subject, NULL, m->body, (int) m->body_len);
	if (s == NATS_OK)
		s = natsMsgHeader_Set(msg, "Nats-Msg-Id", m->id);
	if (s == NATS_OK)
		s = natsMsgHeader_Set(msg, "Content-Type", m->binary ? "application/octet-stream" : "application/json");
	if (s == NATS_OK)
		s = natsMsgHeader_Set(msg, "Outbox-Topic", m->topic);
	if (s == NATS_OK)
		s = natsMsgHeader_Set(msg, "Outbox-Key", m->key);
	if (s == NATS_OK)
		s = natsMsgHeader_Set(msg, "Outbox-Position", m->position);
	for (int i = 0; s == NATS_OK && i < m->nheaders; i++)
		s = natsMsgHeader_Set(msg, m->header_names[i], m->header_values[i]);
	if (s != NATS_OK)
	{
		relay_nats_reason(s, "the message could not be built", error);
		natsMsg_Destroy(msg);
		return NULL;
	}
	return msg;
}

static void
target_close(RelayTarget *t)
{
	if (t->js != NULL && t->published)
	{
		natsMsgList pending = {0};

		/* Acks still to come are dropped, and with them their callbacks */
		if (js_PublishAsyncGetPendingList(&pending, t->js) == NATS_OK)
			natsMsgList_Destroy(&pending);
	}
	if (t->nc != NULL)
		natsConnection_Close(t->nc);
	if (t->js != NULL)
		jsCtx_Destroy(t->js);
	if (t->nc != NULL)
		natsConnection_Destroy(t->nc);
	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->acked);
	free(t->subject);
	free(t);
}

/*
 * Connect to the server of url (nats://[user@]host:port/...), with
 * secret as the user's password or, without a user, as a token; TLS
 * against cacert when the URL names one.  closed and closure, when
 * given, hear of the connection's end.  NULL with the reason into error.
 */
natsConnection *
relay_nats_connect(const char *url, const char *secret, natsConnectionHandler closed, void *closure,
				   char *error)
{
	const char *host = url + strlen("nats://");
	size_t		hostlen = strcspn(host, "/?#");
	const char *at = memchr(host, '@', hostlen);
	char	   *user = at ? relay_url_decode(host, at - host) : NULL;
	char	   *cacert = relay_url_param(url, "cacert");
	char		server[512];
	natsOptions *opts = NULL;
	natsConnection *nc = NULL;
	natsStatus	s;

	if (at != NULL)
	{
		hostlen -= at + 1 - host;
		host = at + 1;
	}
	snprintf(server, sizeof(server), "nats://%.*s", (int) hostlen, host);
	s = natsOptions_Create(&opts);
	if (s == NATS_OK)
		s = natsOptions_SetURL(opts, server);
	/* A lost connection is the loop's to reopen, not the library's */
	if (s == NATS_OK)
		s = natsOptions_SetAllowReconnect(opts, false);
	if (s == NATS_OK)
		s = natsOptions_SetTimeout(opts, (int64_t) relay_timeout * 1000);
	if (s == NATS_OK && user != NULL)
		s = natsOptions_SetUserInfo(opts, user, secret ? secret : "");
	else if (s == NATS_OK && secret != NULL)
		s = natsOptions_SetToken(opts, secret);
	if (s == NATS_OK && cacert != NULL)
		s = natsOptions_SetSecure(opts, true);
	if (s == NATS_OK && cacert != NULL)
		s = natsOptions_LoadCATrustedCertificates(opts, cacert);
	if (s == NATS_OK && closed != NULL)
		s = natsOptions_SetClosedCB(opts, closed, closure);
	if (s == NATS_OK)
		s = natsConnection_Connect(&nc, opts);
	if (s != NATS_OK)
	{
		relay_nats_reason(s, "connecting to the NATS server", error);
		nc = NULL;
	}
	natsOptions_Destroy(opts);
	free(user);
	free(cacert);
	return nc;
}

static RelayTarget *
target_open(const char *url, const char *secret, char *error)
{
	RelayTarget *t = calloc(1, sizeof(RelayTarget));
	const char *path = strchr(url + strlen("nats://"), '/');
	jsOptions	jo;
	natsStatus	s;

	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->acked, NULL);
	if (path == NULL || path[1] == '\0' || path[1] == '?')
	{
		snprintf(error, RELAY_ERROR_SIZE, "the URL needs a subject: nats://host:port/subject");
		target_close(t);
		return NULL;
	}
	t->subject = relay_url_decode(path + 1, strcspn(path + 1, "?#"));
	if ((t->nc = relay_nats_connect(url, secret, NULL, NULL, error)) == NULL)
	{
		target_close(t);
		return NULL;
	}
	jsOptions_Init(&jo);
	jo.PublishAsync.AckHandler = on_ack;
	jo.PublishAsync.AckHandlerClosure = t;
	if ((s = natsConnection_JetStream(&t->js, t->nc, &jo)) != NATS_OK)
	{
		relay_nats_reason(s, "JetStream", error);
		target_close(t);
		return NULL;
	}
	return t;
}

static void
start_batch(RelayTarget *t, const RelayMessage *messages, int n, RelayResult *results,
			char (*errors)[RELAY_ERROR_SIZE], int *retry_after)
{
	OpenBatch  *o = calloc(1, sizeof(OpenBatch));

	o->n = n;
	o->ids = calloc(n, sizeof(char *));
	o->settled = calloc(n, sizeof(bool));
	o->results = results;
	o->errors = errors;
	o->deadline = time(NULL) + relay_timeout;
	for (int i = 0; i < n; i++)
	{
		o->ids[i] = strdup(messages[i].id);
		results[i] = RELAY_DOWN;
		retry_after[i] = -1;
	}
	/* In the window first, so that an ack that comes at once finds it */
	pthread_mutex_lock(&t->lock);
	t->open[t->nopen++] = o;
	o->left = n;
	pthread_mutex_unlock(&t->lock);

	for (int i = 0; i < n; i++)
	{
		char		error[RELAY_ERROR_SIZE];
		RelayResult result = RELAY_REFUSED;
		natsMsg    *msg = NULL;
		natsStatus	s = NATS_OK;

		if (message_headers_ok(&messages[i], error) &&
			(msg = message_for(t, &messages[i], error)) != NULL)
		{
			s = js_PublishMsgAsync(t->js, &msg, NULL);
			t->published = true;
			if (s == NATS_OK)
				continue;
			/* Too large for the server is this message's; the rest, the connection's */
			relay_nats_reason(s, "publishing", error);
			result = s == NATS_MAX_PAYLOAD ? RELAY_REFUSED : RELAY_DOWN;
			natsMsg_Destroy(msg);
		}
		pthread_mutex_lock(&t->lock);
		if (!o->settled[i])
		{
			o->results[i] = result;
			snprintf(o->errors[i], RELAY_ERROR_SIZE, "%s", error);
			o->settled[i] = true;
			o->left--;
		}
		pthread_mutex_unlock(&t->lock);
	}
	natsConnection_Flush(t->nc);
}

/*
 * Wait for the acks of the oldest batch, until relay_timeout after its
 * start or the connection's end (looked at every tenth of a second: a
 * callback of the connection's end could outlive the target); what has
 * none is RELAY_DOWN
 */
static void
finish_batch(RelayTarget *t)
{
	OpenBatch  *o;
	struct timespec until;

	pthread_mutex_lock(&t->lock);
	o = t->open[0];
	while (o->left > 0 && !t->broken && time(NULL) < o->deadline)
	{
		if (natsConnection_IsClosed(t->nc))
		{
			snprintf(t->broken_text, RELAY_ERROR_SIZE, "the connection to the NATS server was lost");
			t->broken = true;
			break;
		}
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += 100 * 1000 * 1000;
		if (until.tv_nsec >= 1000 * 1000 * 1000)
		{
			until.tv_sec++;
			until.tv_nsec -= 1000 * 1000 * 1000;
		}
		pthread_cond_timedwait(&t->acked, &t->lock, &until);
	}
	for (int i = 0; i < o->n; i++)
		if (!o->settled[i])
			snprintf(o->errors[i], RELAY_ERROR_SIZE, "%s", t->broken ? t->broken_text :
					 "no publish acknowledgement within --timeout");
	if (o->left > 0 && !t->broken)
	{
		/* A server that stopped answering is one to reconnect to */
		snprintf(t->broken_text, RELAY_ERROR_SIZE, "no publish acknowledgement within --timeout");
		t->broken = true;
	}
	memmove(&t->open[0], &t->open[1], (RELAY_WINDOW - 1) * sizeof(OpenBatch *));
	t->nopen--;
	pthread_mutex_unlock(&t->lock);
	for (int i = 0; i < o->n; i++)
		free(o->ids[i]);
	free(o->ids);
	free(o->settled);
	free(o);
}

/*
 * JetStream's name of the stream that captures subject, asked of the
 * server ($JS.API.STREAM.NAMES with a subject filter): false with the
 * reason when none does or the server does not answer
 */
bool
relay_nats_stream_of(natsConnection *nc, const char *subject, char *stream, size_t size, char *error)
{
	RelayText	req = {0};
	natsMsg    *reply = NULL;
	natsStatus	s;
	const char *data,
			   *p;

	relay_text_printf(&req, "{\"subject\":\"");
	for (const char *c = subject; *c; c++)
		relay_text_printf(&req, (*c == '"' || *c == '\\') ? "\\%c" : "%c", *c);
	relay_text_printf(&req, "\"}");
	s = natsConnection_Request(&reply, nc, "$JS.API.STREAM.NAMES", req.data, (int) req.len,
							   (int64_t) relay_timeout * 1000);
	free(req.data);
	if (s != NATS_OK)
	{
		relay_nats_reason(s, "asking JetStream for the subject's stream (is JetStream enabled?)", error);
		return false;
	}
	data = natsMsg_GetData(reply);
	p = data ? strstr(data, "\"streams\":[\"") : NULL;
	if (p == NULL)
	{
		snprintf(error, RELAY_ERROR_SIZE, "no JetStream stream captures the subject \"%.200s\"", subject);
		natsMsg_Destroy(reply);
		return false;
	}
	p += strlen("\"streams\":[\"");
	snprintf(stream, size, "%.*s", (int) strcspn(p, "\""), p);
	natsMsg_Destroy(reply);
	return true;
}

/* A stream captures the URL's subject: nothing is published */
static bool
target_check(RelayTarget *t, const char *url, char *error)
{
	char		stream[256];

	return relay_nats_stream_of(t->nc, t->subject, stream, sizeof(stream), error);
}

const RelayTransport relay_nats = {"nats://", target_open, start_batch, finish_batch, target_close, NULL, target_check};
