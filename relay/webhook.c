/*-------------------------------------------------------------------------
 *
 * webhook.c
 *	  inbox-relay's HTTP transport: a message is POSTed to the target URL.
 *
 * The message id goes as Idempotency-Key, and as webhook-id with
 * webhook-timestamp; when the target's secret is a Standard Webhooks
 * signing secret ("whsec_" and base64), webhook-signature carries
 * "v1," and the base64 HMAC-SHA256 of "id.timestamp.body" under it.  The
 * body is the payload: JSON (application/json), or the bytes
 * (application/octet-stream).  Outbox-Topic, Outbox-Key and
 * Outbox-Position say where it comes from, and the message's own headers
 * follow them.
 *
 * Every string of a message is data: a header line is built at its full
 * length, and a string that would not be one well-formed header (a CR,
 * LF or other control character in a value, a name outside RFC 9110's
 * token) makes the request unsent and that message refused, naming what
 * is wrong.  outbox_send refuses such strings already; this guard keeps a
 * row written some other way from injecting a header or a request.  A
 * message header named as one the relay sets, or one that frames the
 * request (Host, Content-Length, Transfer-Encoding...), is refused the
 * same way rather than dropped or left to override.
 *
 * A batch's requests go at once, through one multi handle whose
 * connections are kept between batches, at most relay_http_connections of
 * them in flight (the others wait their turn, the oldest batch's first):
 * the messages of a batch are of different keys, so nothing orders them.
 * Each request ends within relay_timeout of its start.  The loop fetches
 * batches of at most relay_http_connections / RELAY_WINDOW for this
 * transport (batch_limit), so that no request waits for a slot; the
 * queue caps the requests in flight whatever happens, HTTP/2 included.
 *
 * A 2xx answer is a delivery.  408, 429 and 5xx, and every failure to get
 * an answer, are retried (after Retry-After when the answer gives one, in
 * seconds); any other answer is refused: the message is dead once its
 * attempts are spent.  A failure records the status, its reason phrase
 * and the first bytes of the answer's body.  A request that could not go
 * out (the name did not resolve, the connection or the TLS handshake
 * failed) found the target unreachable (RELAY_DOWN), and counts no
 * attempt.  Redirects are not followed.
 *
 * relay/webhook.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <ctype.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <sys/time.h>

#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "relay.h"

typedef struct OpenBatch OpenBatch;

/*
 * How much of a failed answer a reason keeps: the status line's reason
 * phrase and the body's first bytes, marked when cut, which together fit
 * RELAY_ERROR_SIZE.
 */
#define REASON_KEEP 64
#define BODY_KEEP 200

/* One request of a started batch */
typedef struct Request
{
	OpenBatch  *batch;
	const RelayMessage *m;		/* until the request starts */
	CURL	   *curl;			/* once it started */
	struct curl_slist *headers;
	RelayResult *result;		/* the batch's slot for this message */
	char	   *error;
	int		   *retry_after;
	bool		done;
	char		reason[REASON_KEEP + 4];	/* the status line's reason phrase */
	char		body[BODY_KEEP + 1];	/* the first bytes of the answer's body */
	size_t		body_len;
	bool		body_more;		/* the body went on past BODY_KEEP */
} Request;

/* A started batch: its requests, oldest first in the queue */
struct OpenBatch
{
	Request    *requests;
	int			n;
	int			next;			/* the first of its requests not started */
	int			pending;		/* requests not answered yet */
};

struct RelayTarget
{
	CURLM	   *multi;			/* kept, so that its connections are reused */
	char	   *url;
	unsigned char *key;			/* the signing key, or NULL */
	int			key_len;
	OpenBatch  *open[RELAY_WINDOW]; /* oldest first */
	int			nopen;
	int			running;		/* requests started and not ended */
};

static RelayTarget *
webhook_open(const char *url, const char *secret, char *error)
{
	RelayTarget *t;
	static bool curl_ready = false;

	if (!curl_ready)
	{
		curl_global_init(CURL_GLOBAL_DEFAULT);
		curl_ready = true;
	}
	t = calloc(1, sizeof(RelayTarget));
	t->url = strdup(url);
	t->multi = curl_multi_init();
	if (t->multi == NULL)
	{
		snprintf(error, RELAY_ERROR_SIZE, "libcurl could not start");
		free(t->url);
		free(t);
		return NULL;
	}
	if (secret != NULL && strncmp(secret, "whsec_", 6) == 0)
	{
		size_t		len = strlen(secret + 6);

		t->key = malloc(len + 3);
		t->key_len = EVP_DecodeBlock(t->key, (const unsigned char *) secret + 6, (int) len);
		if (t->key_len < 0)
		{
			snprintf(error, RELAY_ERROR_SIZE, "the signing secret is not base64 after \"whsec_\"");
			curl_multi_cleanup(t->multi);
			free(t->key);
			free(t->url);
			free(t);
			return NULL;
		}
		/* EVP_DecodeBlock counts the padding as bytes: take them back */
		while (len > 0 && secret[6 + len - 1] == '=')
		{
			t->key_len--;
			len--;
		}
	}
	return t;
}

/*
 * Retry-After in seconds, and the reason phrase of the status line, from
 * the answer's headers.  Each status line (an interim one included)
 * starts the answer over.
 */
static size_t
on_header(char *buffer, size_t size, size_t n, void *userdata)
{
	Request    *q = userdata;
	size_t		len = size * n;

	if (len > 5 && strncmp(buffer, "HTTP/", 5) == 0)
	{
		const char *p = memchr(buffer, ' ', len);
		size_t		o = 0;

		*q->retry_after = -1;
		q->reason[0] = '\0';
		/* "HTTP/1.1 404 Not Found": after the version, the code, a space */
		if (p != NULL)
			p = memchr(p + 1, ' ', len - (p + 1 - buffer));
		if (p != NULL)
		{
			for (p++; p < buffer + len && *p != '\r' && *p != '\n' && o < REASON_KEEP; p++)
				q->reason[o++] = *p;
			if (p < buffer + len && *p != '\r' && *p != '\n')
			{
				memcpy(q->reason + o, "...", 3);	/* cut: marked */
				o += 3;
			}
			q->reason[o] = '\0';
		}
	}
	else if (len > 12 && strncasecmp(buffer, "Retry-After:", 12) == 0)
	{
		char		value[32];
		size_t		vlen = len - 12 < sizeof(value) - 1 ? len - 12 : sizeof(value) - 1;
		char	   *end;
		long		s;

		memcpy(value, buffer + 12, vlen);
		value[vlen] = '\0';
		s = strtol(value, &end, 10);
		if (end != value && s >= 0 && s <= 86400)
			*q->retry_after = (int) s;
	}
	return len;
}

/* The answer's body: its first BODY_KEEP bytes kept, for a failure's reason */
static size_t
on_body(char *ptr, size_t size, size_t n, void *userdata)
{
	Request    *q = userdata;
	size_t		len = size * n;
	size_t		room = BODY_KEEP - q->body_len;

	if (len > room)
		q->body_more = true;
	memcpy(q->body + q->body_len, ptr, len < room ? len : room);
	q->body_len += len < room ? len : room;
	return len;
}

/*
 * Append to out, of room bytes, the len bytes of s as one line of
 * readable text: control characters become spaces, a byte that does not
 * start a whole UTF-8 sequence becomes '?', so that outbox_fail can
 * store it whatever the target answered.  cut marks text that went on.
 */
static void
append_text(char *out, size_t room, const char *s, size_t len, bool cut)
{
	size_t		o = strlen(out);

	for (size_t i = 0; i < len && o + 4 < room;)
	{
		unsigned char c = (unsigned char) s[i];
		size_t		seq = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 :
			(c & 0xF8) == 0xF0 ? 4 : 0;
		size_t		k;

		if (seq == 1)
		{
			out[o++] = (c < 0x20 || c == 0x7F) ? ' ' : (char) c;
			i++;
			continue;
		}
		for (k = 1; seq > 1 && k < seq && i + k < len; k++)
			if (((unsigned char) s[i + k] & 0xC0) != 0x80)
				break;
		if (seq > 1 && k == seq && o + seq + 4 < room)
		{
			memcpy(out + o, s + i, seq);
			o += seq;
			i += seq;
		}
		else if (seq > 1 && i + k == len && cut)
			break;				/* a sequence the cut split: dropped, and marked */
		else
		{
			out[o++] = '?';
			i++;
		}
	}
	if (cut && o + 4 < room)
	{
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = '\0';
}

static void
append_str(char *out, const char *s)
{
	append_text(out, RELAY_ERROR_SIZE, s, strlen(s), false);
}

/*
 * Why a string cannot be a header's value, or NULL when it can: a value
 * is one line of visible characters, spaces and tabs (RFC 9110's
 * field-value), so a CR, a LF or another control character would end the
 * line or make it malformed.  NUL cannot occur: the strings come from
 * text columns.
 */
static const char *
value_fault(const char *s)
{
	for (; *s; s++)
	{
		unsigned char c = (unsigned char) *s;

		if (c == '\r' || c == '\n')
			return "a CR or LF";
		if ((c < 0x20 && c != '\t') || c == 0x7F)
			return "a control character";
	}
	return NULL;
}

/* Whether s is a header name: RFC 9110's token, at least one character */
static bool
name_ok(const char *s)
{
	if (*s == '\0')
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char) *s) && strchr("!#$%&'*+-.^_`|~", *s) == NULL)
			return false;
	return true;
}

/*
 * The headers a message's own may not name: those the relay sets, and
 * those that frame the request or the connection, which a second copy
 * would make ambiguous.
 */
static const char *const reserved_headers[] = {
	"Content-Type", "Content-Length", "Transfer-Encoding", "Host", "Connection",
	"Keep-Alive", "Expect", "TE", "Trailer", "Upgrade", "Proxy-Connection",
	"Idempotency-Key", "webhook-id", "webhook-timestamp", "webhook-signature",
	"Outbox-Topic", "Outbox-Key", "Outbox-Position", NULL
};

/*
 * Whether each string of m can go as a header; false, with the reason in
 * error, when one cannot, so that the message is refused unsent.
 */
static bool
message_headers_ok(const RelayMessage *m, char *error)
{
	const char *const fields[][2] = {
		{"topic", m->topic}, {"key", m->key}, {"position", m->position}, {"id", m->id}
	};
	const char *fault;

	for (int i = 0; i < 4; i++)
		if ((fault = value_fault(fields[i][1])) != NULL)
		{
			snprintf(error, RELAY_ERROR_SIZE, "not sent: the message's %s holds %s, which an HTTP header cannot carry",
					 fields[i][0], fault);
			return false;
		}
	for (int i = 0; i < m->nheaders; i++)
	{
		const char *name = m->header_names[i];

		if (!name_ok(name))
		{
			error[0] = '\0';
			append_str(error, "not sent: the header name \"");
			append_text(error, RELAY_ERROR_SIZE - 64, name, strlen(name) < 64 ? strlen(name) : 64,
						strlen(name) > 64);
			append_str(error, "\" is not an HTTP token");
			return false;
		}
		for (int r = 0; reserved_headers[r] != NULL; r++)
			if (strcasecmp(name, reserved_headers[r]) == 0)
			{
				snprintf(error, RELAY_ERROR_SIZE, "not sent: the header %s is the relay's or frames the request, "
						 "and a message may not set it", reserved_headers[r]);
				return false;
			}
		if ((fault = value_fault(m->header_values[i])) != NULL)
		{
			snprintf(error, RELAY_ERROR_SIZE, "not sent: the value of header %.64s%s holds %s, which an HTTP header cannot carry",
					 name, strlen(name) > 64 ? "..." : "", fault);
			return false;
		}
	}
	return true;
}

/*
 * Append the header "name: value" to *list, at its whole length; false
 * when memory ran out.  An empty value goes as "name;", libcurl's form
 * for it ("name:" alone would remove the header).
 */
static bool
add_header(struct curl_slist **list, const char *name, const char *value)
{
	size_t		size = strlen(name) + strlen(value) + 3;
	char	   *line = malloc(size);
	struct curl_slist *longer;

	if (line == NULL)
		return false;
	if (*value == '\0')
		snprintf(line, size, "%s;", name);
	else
		snprintf(line, size, "%s: %s", name, value);
	longer = curl_slist_append(*list, line);
	free(line);
	if (longer == NULL)
		return false;
	*list = longer;
	return true;
}

/*
 * Start the request of q's message: its clock (--timeout) starts now, and
 * webhook-timestamp is now.
 */
static void
request_start(RelayTarget *t, Request *q)
{
	const RelayMessage *m = q->m;
	char		stamp[32];
	bool		ok = true;

	if (!message_headers_ok(m, q->error))
	{
		*q->result = RELAY_REFUSED;
		q->done = true;
		return;
	}
	snprintf(stamp, sizeof(stamp), "%lld", (long long) time(NULL));
	ok = ok && add_header(&q->headers, "Content-Type", m->binary ? "application/octet-stream" : "application/json");
	ok = ok && add_header(&q->headers, "Idempotency-Key", m->id);
	ok = ok && add_header(&q->headers, "webhook-id", m->id);
	ok = ok && add_header(&q->headers, "webhook-timestamp", stamp);
	ok = ok && add_header(&q->headers, "Outbox-Topic", m->topic);
	ok = ok && add_header(&q->headers, "Outbox-Key", m->key);
	ok = ok && add_header(&q->headers, "Outbox-Position", m->position);
	for (int i = 0; ok && i < m->nheaders; i++)
		ok = add_header(&q->headers, m->header_names[i], m->header_values[i]);
	if (ok)
	{
		struct curl_slist *longer = curl_slist_append(q->headers, "Expect:");

		ok = longer != NULL;
		if (ok)
			q->headers = longer;
	}
	if (ok && t->key != NULL)
	{
		size_t		signed_len = strlen(m->id) + strlen(stamp) + 2 + m->body_len;
		unsigned char *to_sign = malloc(signed_len);
		unsigned char mac[EVP_MAX_MD_SIZE];
		unsigned int mac_len = 0;
		unsigned char b64[4 * EVP_MAX_MD_SIZE / 3 + 8];
		char		signature[sizeof(b64) + 4];
		size_t		o;

		o = (size_t) sprintf((char *) to_sign, "%s.%s.", m->id, stamp);
		memcpy(to_sign + o, m->body, m->body_len);
		HMAC(EVP_sha256(), t->key, t->key_len, to_sign, signed_len, mac, &mac_len);
		EVP_EncodeBlock(b64, mac, (int) mac_len);
		snprintf(signature, sizeof(signature), "v1,%s", b64);
		ok = add_header(&q->headers, "webhook-signature", signature);
		free(to_sign);
	}
	if (!ok)
	{
		snprintf(q->error, RELAY_ERROR_SIZE, "the relay ran out of memory for the request's headers");
		*q->result = RELAY_RETRY;
		q->done = true;
		return;
	}

	q->curl = curl_easy_init();
	if (q->curl == NULL)
	{
		snprintf(q->error, RELAY_ERROR_SIZE, "libcurl could not start a request");
		*q->result = RELAY_RETRY;
		q->done = true;
		return;
	}
	curl_easy_setopt(q->curl, CURLOPT_PRIVATE, q);
	curl_easy_setopt(q->curl, CURLOPT_URL, t->url);
	curl_easy_setopt(q->curl, CURLOPT_POST, 1L);
	/* Copied: the batch's messages may be freed before the request ends */
	curl_easy_setopt(q->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) m->body_len);
	curl_easy_setopt(q->curl, CURLOPT_COPYPOSTFIELDS, m->body);
	curl_easy_setopt(q->curl, CURLOPT_HTTPHEADER, q->headers);
	curl_easy_setopt(q->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(q->curl, CURLOPT_CONNECTTIMEOUT, (long) relay_timeout);
	curl_easy_setopt(q->curl, CURLOPT_TIMEOUT, (long) relay_timeout);
	curl_easy_setopt(q->curl, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(q->curl, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(q->curl, CURLOPT_HEADERDATA, q);
	curl_easy_setopt(q->curl, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(q->curl, CURLOPT_WRITEDATA, q);
	if (curl_multi_add_handle(t->multi, q->curl) != CURLM_OK)
	{
		snprintf(q->error, RELAY_ERROR_SIZE, "libcurl could not start a request");
		*q->result = RELAY_RETRY;
		q->done = true;
		return;
	}
	t->running++;
}

/* The outcome of an ended request, from libcurl's code and the status */
static void
request_end(Request *q, CURLcode rc)
{
	long		status = 0;

	q->done = true;
	if (rc != CURLE_OK)
	{
		/*
		 * No address, no connection, no TLS handshake: the target could
		 * not be reached, and the request did not go out.  Any other
		 * failure may come after the target got it.
		 */
		bool		unreached = rc == CURLE_COULDNT_RESOLVE_PROXY || rc == CURLE_COULDNT_RESOLVE_HOST ||
			rc == CURLE_COULDNT_CONNECT || rc == CURLE_SSL_CONNECT_ERROR ||
			rc == CURLE_PEER_FAILED_VERIFICATION;

		snprintf(q->error, RELAY_ERROR_SIZE, "no answer: %s", curl_easy_strerror(rc));
		*q->result = unreached ? RELAY_DOWN : RELAY_RETRY;
		return;
	}
	curl_easy_getinfo(q->curl, CURLINFO_RESPONSE_CODE, &status);
	if (status >= 200 && status < 300)
	{
		*q->result = RELAY_DELIVERED;
		return;
	}
	/* "HTTP 404 Not Found: " and the body's first bytes, as readable text */
	snprintf(q->error, RELAY_ERROR_SIZE, "HTTP %ld", status);
	if (q->reason[0] != '\0')
	{
		append_str(q->error, " ");
		append_str(q->error, q->reason);
	}
	if (q->body_len > 0)
	{
		append_str(q->error, ": ");
		append_text(q->error, RELAY_ERROR_SIZE, q->body, q->body_len, q->body_more);
	}
	if (status == 408 || status == 429 || status >= 500 || status < 400)
		*q->result = RELAY_RETRY;
	else
		*q->result = RELAY_REFUSED;
}

/*
 * Start queued requests, the oldest batch's first, while fewer than
 * relay_http_connections are in flight.  The cap is kept here, not by
 * libcurl's connection limits, which HTTP/2 would bypass by multiplexing
 * requests over one connection.
 */
static void
fill(RelayTarget *t)
{
	for (int b = 0; b < t->nopen && t->running < relay_http_connections; b++)
	{
		OpenBatch  *o = t->open[b];

		while (o->next < o->n && t->running < relay_http_connections)
		{
			Request    *q = &o->requests[o->next++];

			request_start(t, q);
			if (q->done)
				o->pending--;	/* could not start: answered already */
		}
	}
}

/*
 * Let libcurl move the requests in flight on, record those that ended, in
 * whichever open batch, and start queued ones in their place.
 */
static void
progress(RelayTarget *t)
{
	CURLMsg    *msg;
	int			running;
	int			left;

	do
	{
		curl_multi_perform(t->multi, &running);
		while ((msg = curl_multi_info_read(t->multi, &left)) != NULL)
		{
			Request    *q = NULL;

			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &q);
			if (q == NULL || q->done)
				continue;
			request_end(q, msg->data.result);
			curl_multi_remove_handle(t->multi, q->curl);
			t->running--;
			q->batch->pending--;
		}
		running = t->running;
		fill(t);
	} while (t->running > running);	/* started some: let them go out */
}

/*
 * Queue a batch's requests, each a message of its own key (a batch never
 * holds two of one key), and start as many as relay_http_connections
 * allows with the requests in flight.  Their outcomes stay RELAY_DOWN
 * until finish_batch fills them.
 */
static void
webhook_start_batch(RelayTarget *t, const RelayMessage *m, int n, RelayResult *results,
					char (*errors)[RELAY_ERROR_SIZE], int *retry_after)
{
	OpenBatch  *o = calloc(1, sizeof(OpenBatch));

	o->requests = calloc(n, sizeof(Request));
	o->n = n;
	o->pending = n;
	for (int i = 0; i < n; i++)
	{
		Request    *q = &o->requests[i];

		q->batch = o;
		q->m = &m[i];
		q->result = &results[i];
		q->error = errors[i];
		q->retry_after = &retry_after[i];
		results[i] = RELAY_DOWN;
	}
	t->open[t->nopen++] = o;
	progress(t);				/* starts what the cap allows */
}

/*
 * Wait for the answers to the oldest started batch, recording those of
 * later ones that arrive meanwhile.  Each request ends within --timeout
 * of its start (CURLOPT_TIMEOUT); the deadline below only guards against
 * waiting for ever on a request libcurl lost, which is then retried.
 */
static void
webhook_finish_batch(RelayTarget *t)
{
	OpenBatch  *o = t->open[0];
	struct timeval deadline;

	gettimeofday(&deadline, NULL);
	deadline.tv_sec += 2L * relay_timeout + 10;
	while (o->pending > 0)
	{
		struct timeval now,
					left;

		gettimeofday(&now, NULL);
		timersub(&deadline, &now, &left);
		if (left.tv_sec < 0)
			break;
		if (curl_multi_poll(t->multi, NULL, 0, 1000, NULL) != CURLM_OK)
			sleep(1);			/* no busy loop while libcurl cannot wait */
		progress(t);
	}
	for (int i = 0; i < o->n; i++)
	{
		Request    *q = &o->requests[i];

		if (!q->done)
		{
			snprintf(q->error, RELAY_ERROR_SIZE, "no answer: %s",
					 q->curl != NULL ? "the request did not end" : "not sent");
			*q->result = RELAY_RETRY;
			if (q->curl != NULL)
			{
				curl_multi_remove_handle(t->multi, q->curl);
				t->running--;
			}
		}
		if (q->curl != NULL)
			curl_easy_cleanup(q->curl);
		curl_slist_free_all(q->headers);
	}
	free(o->requests);
	free(o);
	t->nopen--;
	memmove(&t->open[0], &t->open[1], t->nopen * sizeof(OpenBatch *));
	fill(t);
}

/*
 * The batches in flight together hold at most --connections messages, so
 * that every request starts with its batch, and ends within --timeout of
 * it (see main()).
 */
static int
webhook_batch_limit(void)
{
	return relay_http_connections / RELAY_WINDOW;
}

static void
webhook_close(RelayTarget *t)
{
	while (t->nopen > 0)
		webhook_finish_batch(t);
	curl_multi_cleanup(t->multi);
	free(t->key);
	free(t->url);
	free(t);
}

const RelayTransport relay_http = {"http://", webhook_open,
	webhook_start_batch, webhook_finish_batch, webhook_close, webhook_batch_limit, NULL};
const RelayTransport relay_https = {"https://", webhook_open,
	webhook_start_batch, webhook_finish_batch, webhook_close, webhook_batch_limit, NULL};
