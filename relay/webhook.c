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
 * Outbox-Position say where it comes from.
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
 * attempts are spent.  A request that could not go out (the name did
 * not resolve, the connection or the TLS handshake failed) found the
 * target unreachable (RELAY_DOWN), and counts no attempt.  Redirects are
 * not followed.
 *
 * relay/webhook.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
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

/* Retry-After in seconds, from the answer's headers */
static size_t
on_header(char *buffer, size_t size, size_t n, void *userdata)
{
	int		   *retry_after = userdata;
	size_t		len = size * n;

	if (len > 12 && strncasecmp(buffer, "Retry-After:", 12) == 0)
	{
		char		value[32];
		size_t		vlen = len - 12 < sizeof(value) - 1 ? len - 12 : sizeof(value) - 1;
		char	   *end;
		long		s;

		memcpy(value, buffer + 12, vlen);
		value[vlen] = '\0';
		s = strtol(value, &end, 10);
		if (end != value && s >= 0 && s <= 86400)
			*retry_after = (int) s;
	}
	return len;
}

static size_t
discard(char *ptr, size_t size, size_t n, void *userdata)
{
	return size * n;
}

static struct curl_slist *
add_header(struct curl_slist *list, const char *name, const char *value)
{
	char		line[1024];

	snprintf(line, sizeof(line), "%s: %s", name, value);
	return curl_slist_append(list, line);
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

	snprintf(stamp, sizeof(stamp), "%lld", (long long) time(NULL));
	q->headers = add_header(q->headers, "Content-Type", m->binary ? "application/octet-stream" : "application/json");
	q->headers = add_header(q->headers, "Idempotency-Key", m->id);
	q->headers = add_header(q->headers, "webhook-id", m->id);
	q->headers = add_header(q->headers, "webhook-timestamp", stamp);
	q->headers = add_header(q->headers, "Outbox-Topic", m->topic);
	q->headers = add_header(q->headers, "Outbox-Key", m->key);
	q->headers = add_header(q->headers, "Outbox-Position", m->position);
	q->headers = curl_slist_append(q->headers, "Expect:");
	if (t->key != NULL)
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
		q->headers = add_header(q->headers, "webhook-signature", signature);
		free(to_sign);
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
	curl_easy_setopt(q->curl, CURLOPT_HEADERDATA, q->retry_after);
	curl_easy_setopt(q->curl, CURLOPT_WRITEFUNCTION, discard);
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
	snprintf(q->error, RELAY_ERROR_SIZE, "HTTP %ld", status);
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
