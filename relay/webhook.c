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
 * A 2xx answer is a delivery.  408, 429 and 5xx, and every failure to get
 * an answer, are retried (after Retry-After when the answer gives one, in
 * seconds); any other answer is refused: the message is dead once its
 * attempts are spent.  Redirects are not followed.
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

#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "relay.h"

struct RelayTarget
{
	CURL	   *curl;			/* kept, so that its connection is reused */
	char	   *url;
	unsigned char *key;			/* the signing key, or NULL */
	int			key_len;
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
	t->curl = curl_easy_init();
	if (t->curl == NULL)
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
			curl_easy_cleanup(t->curl);
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

static RelayResult
webhook_deliver(RelayTarget *t, const RelayMessage *m, char *error, int *retry_after)
{
	struct curl_slist *headers = NULL;
	char		stamp[32];
	CURLcode	rc;
	long		status = 0;

	snprintf(stamp, sizeof(stamp), "%lld", (long long) time(NULL));
	headers = add_header(headers, "Content-Type", m->binary ? "application/octet-stream" : "application/json");
	headers = add_header(headers, "Idempotency-Key", m->id);
	headers = add_header(headers, "webhook-id", m->id);
	headers = add_header(headers, "webhook-timestamp", stamp);
	headers = add_header(headers, "Outbox-Topic", m->topic);
	headers = add_header(headers, "Outbox-Key", m->key);
	headers = add_header(headers, "Outbox-Position", m->position);
	headers = curl_slist_append(headers, "Expect:");
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
		headers = add_header(headers, "webhook-signature", signature);
		free(to_sign);
	}

	curl_easy_reset(t->curl);
	curl_easy_setopt(t->curl, CURLOPT_URL, t->url);
	curl_easy_setopt(t->curl, CURLOPT_POST, 1L);
	curl_easy_setopt(t->curl, CURLOPT_POSTFIELDS, m->body);
	curl_easy_setopt(t->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) m->body_len);
	curl_easy_setopt(t->curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(t->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(t->curl, CURLOPT_CONNECTTIMEOUT, (long) relay_timeout);
	curl_easy_setopt(t->curl, CURLOPT_TIMEOUT, (long) relay_timeout);
	curl_easy_setopt(t->curl, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(t->curl, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(t->curl, CURLOPT_HEADERDATA, retry_after);
	curl_easy_setopt(t->curl, CURLOPT_WRITEFUNCTION, discard);
	rc = curl_easy_perform(t->curl);
	curl_slist_free_all(headers);
	if (rc != CURLE_OK)
	{
		snprintf(error, RELAY_ERROR_SIZE, "no answer: %s", curl_easy_strerror(rc));
		return RELAY_RETRY;
	}
	curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
	if (status >= 200 && status < 300)
		return RELAY_DELIVERED;
	snprintf(error, RELAY_ERROR_SIZE, "HTTP %ld", status);
	if (status == 408 || status == 429 || status >= 500 || status < 400)
		return RELAY_RETRY;
	return RELAY_REFUSED;
}

static void
webhook_close(RelayTarget *t)
{
	curl_easy_cleanup(t->curl);
	free(t->key);
	free(t->url);
	free(t);
}

const RelayTransport relay_http = {"http://", webhook_open, webhook_deliver, NULL, NULL, webhook_close};
const RelayTransport relay_https = {"https://", webhook_open, webhook_deliver, NULL, NULL, webhook_close};
