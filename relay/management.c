/*-------------------------------------------------------------------------
 *
 * management.c
 *	  inbox-relay check --management=URL: whether an AMQP target's exchange
 *	  has a binding that its messages could follow, from RabbitMQ's HTTP
 *	  management API.
 *
 * A passive declare sees an exchange, never its bindings, and a message
 * that no binding routes comes back as NO_ROUTE only once it is sent.  For
 * each AMQP target with an exchange of its own (the default exchange
 * routes by queue name, which the AMQP check already declares), this asks
 * the management API for the exchange's type and the bindings it is the
 * source of, and looks for one that a message with the route's routing
 * key would follow: a direct exchange's binding of that very key, a topic
 * exchange's whose pattern matches it (* one word, # any number), any
 * binding of a fanout or headers exchange (or one of a type not known
 * here).  A route without routing_key publishes under each message's key,
 * which can be anything: there any binding will do.
 *
 * The API answers JSON, which the database the check is connected to reads
 * (jsonb): the relay links no JSON parser of its own.  The credentials are
 * the management URL's user, with the password of the secrets file's line
 * for that URL or else the URL's own; they are never printed, as the URL
 * is shown without them.
 *
 * relay/management.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "daemon.h"
#include "management.h"

/* The management API: its URL without user info, and the credentials */
typedef struct Management
{
	char	   *base;			/* scheme://host:port[/path], no final / */
	char	   *user;			/* NULL: no authentication */
	char	   *password;
} Management;

static void
management_parse(const char *url, Management *m)
{
	const char *rest = strstr(url, "://");
	size_t		authority,
				scheme;
	const char *at;

	memset(m, 0, sizeof(*m));
	rest = rest ? rest + 3 : url;
	scheme = rest - url;
	authority = strcspn(rest, "/?#");
	at = memchr(rest, '@', authority);
	if (at != NULL)
	{
		const char *colon = memchr(rest, ':', at - rest);

		m->user = relay_url_decode(rest, (colon ? colon : at) - rest);
		if (colon != NULL)
			m->password = relay_url_decode(colon + 1, at - colon - 1);
		authority -= at + 1 - rest;
		rest = at + 1;
	}
	authority += strcspn(rest + authority, "?#");
	while (authority > 0 && rest[authority - 1] == '/')
		authority--;
	m->base = malloc(scheme + authority + 1);
	memcpy(m->base, url, scheme);
	memcpy(m->base + scheme, rest, authority);
	m->base[scheme + authority] = '\0';
	if (m->user != NULL)
	{
		char	   *secret = relay_secret_for(url);

		if (secret != NULL)
		{
			free(m->password);
			m->password = secret;
		}
	}
}

static void
management_free(Management *m)
{
	free(m->base);
	free(m->user);
	free(m->password);
}

static size_t
on_body(char *data, size_t size, size_t n, void *arg)
{
	relay_text_append((RelayText *) arg, data, size * n);
	return size * n;
}

/*
 * GET path of the API into body: its HTTP status, or 0 with error filled
 * when no answer came
 */
static long
management_get(CURL *curl, const Management *m, const char *path, RelayText *body, char *error)
{
	char	   *url = malloc(strlen(m->base) + strlen(path) + 1);
	char		curl_error[CURL_ERROR_SIZE] = "";
	long		status = 0;
	CURLcode	rc;

	sprintf(url, "%s%s", m->base, path);
	body->len = 0;
	curl_easy_reset(curl);
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, (long) relay_timeout);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT, (long) relay_timeout);
	curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, curl_error);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, body);
	if (m->user != NULL)
	{
		curl_easy_setopt(curl, CURLOPT_USERNAME, m->user);
		curl_easy_setopt(curl, CURLOPT_PASSWORD, m->password ? m->password : "");
	}
	rc = curl_easy_perform(curl);
	if (rc == CURLE_OK)
		curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
	else
		snprintf(error, RELAY_ERROR_SIZE, "the management API at %s: %s", m->base,
				 curl_error[0] ? curl_error : curl_easy_strerror(rc));
	relay_text_append(body, "", 1);
	free(url);
	return status;
}

/*
 * The rows of query over the JSON text json (the query's $1), or NULL with
 * error filled when it is not JSON of the shape the query reads
 */
static PGresult *
json_rows(PGconn *conn, const char *query, const char *json, char *error)
{
	PGresult   *res = PQexecParams(conn, query, 1, NULL, &json, NULL, NULL, 0);

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		const char *msg = PQresultErrorMessage(res);

		snprintf(error, RELAY_ERROR_SIZE, "the management API's answer is not readable: %.*s",
				 (int) strcspn(msg, "\n"), msg);
		PQclear(res);
		return NULL;
	}
	return res;
}

/* The next word of a topic, or NULL when s ends after its len bytes */
static const char *
next_word(const char *s, size_t len)
{
	return s[len] == '.' ? s + len + 1 : NULL;
}

/*
 * Whether the words of key match those of a topic binding's pattern,
 * each NULL once no word is left: * takes one word, # none or more
 */
static bool
topic_match(const char *pattern, const char *key)
{
	size_t		plen,
				klen;

	if (pattern == NULL)
		return key == NULL;
	plen = strcspn(pattern, ".");
	if (plen == 1 && pattern[0] == '#')
		return topic_match(next_word(pattern, plen), key) ||
			(key != NULL && topic_match(pattern, next_word(key, strcspn(key, "."))));
	if (key == NULL)
		return false;
	klen = strcspn(key, ".");
	if (!(plen == 1 && pattern[0] == '*') &&
		(plen != klen || strncmp(pattern, key, plen) != 0))
		return false;
	return topic_match(next_word(pattern, plen), next_word(key, klen));
}

/*
 * Whether a binding of binding_key on an exchange of type would take a
 * message published under routing_key (NULL: any key)
 */
static bool
binding_takes(const char *type, const char *binding_key, const char *routing_key)
{
	if (routing_key == NULL)
		return true;
	if (strcmp(type, "direct") == 0)
		return strcmp(binding_key, routing_key) == 0;
	if (strcmp(type, "topic") == 0)
		return topic_match(binding_key, routing_key);
	return true;
}

/*
 * The vhost of an AMQP URL, decoded, as librabbitmq reads it: "/" when
 * the URL has no path
 */
static char *
amqp_vhost(const char *target)
{
	const char *rest = strstr(target, "://") + 3;
	const char *path = rest + strcspn(rest, "/?#");

	if (*path != '/')
		return strdup("/");
	return relay_url_decode(path + 1, strcspn(path + 1, "?#"));
}

/*
 * For an AMQP target with an exchange of its own, whether a binding of
 * that exchange would take its messages: true, or false with error
 * filled.  Other targets have nothing to check here.
 */
bool
relay_bindings_check(PGconn *conn, const char *management, const char *target, char *error)
{
	static bool curl_ready = false;
	char	   *exchange,
			   *routing_key,
			   *vhost,
			   *e_vhost,
			   *e_exchange,
			   *path;
	Management m;
	CURL	   *curl;
	RelayText	body = {0};
	PGresult   *res = NULL;
	char	   *type = NULL;
	long		status;
	bool		ok = false;
	int			i;

	if (strncmp(target, "amqp://", 7) != 0 && strncmp(target, "amqps://", 8) != 0)
		return true;
	exchange = relay_url_param(target, "exchange");
	if (exchange == NULL || exchange[0] == '\0')
	{
		free(exchange);
		return true;
	}
	if (!curl_ready)
	{
		curl_global_init(CURL_GLOBAL_DEFAULT);
		curl_ready = true;
	}
	if ((curl = curl_easy_init()) == NULL)
	{
		snprintf(error, RELAY_ERROR_SIZE, "libcurl could not start a request");
		free(exchange);
		return false;
	}
	routing_key = relay_url_param(target, "routing_key");
	vhost = amqp_vhost(target);
	management_parse(management, &m);
	e_vhost = curl_easy_escape(curl, vhost, 0);
	e_exchange = curl_easy_escape(curl, exchange, 0);
	path = malloc(strlen(e_vhost) + strlen(e_exchange) + 64);
	sprintf(path, "/api/exchanges/%s/%s", e_vhost, e_exchange);

	status = management_get(curl, &m, path, &body, error);
	if (status == 404)
		snprintf(error, RELAY_ERROR_SIZE, "the management API at %s knows no exchange \"%s\" in vhost \"%s\"",
				 m.base, exchange, vhost);
	else if (status != 200 && status != 0)
		snprintf(error, RELAY_ERROR_SIZE, "the management API at %s answered %ld for exchange \"%s\"",
				 m.base, status, exchange);
	if (status != 200 ||
		(res = json_rows(conn, "SELECT $1::pg_catalog.jsonb OPERATOR(pg_catalog.->>) 'type'",
						 body.data, error)) == NULL)
		goto out;
	type = strdup(PQntuples(res) == 1 && !PQgetisnull(res, 0, 0) ? PQgetvalue(res, 0, 0) : "");
	PQclear(res);
	res = NULL;

	strcat(path, "/bindings/source");
	status = management_get(curl, &m, path, &body, error);
	if (status != 200 && status != 0)
		snprintf(error, RELAY_ERROR_SIZE, "the management API at %s answered %ld for the bindings of exchange \"%s\"",
				 m.base, status, exchange);
	if (status != 200 ||
		(res = json_rows(conn, "SELECT b OPERATOR(pg_catalog.->>) 'routing_key' "
						 "FROM pg_catalog.jsonb_array_elements($1::pg_catalog.jsonb) AS b",
						 body.data, error)) == NULL)
		goto out;
	for (i = 0; i < PQntuples(res) && !ok; i++)
		ok = binding_takes(type, PQgetvalue(res, i, 0), routing_key);
	if (!ok && routing_key != NULL)
		snprintf(error, RELAY_ERROR_SIZE, "exchange \"%s\" has no binding for routing key \"%s\"",
				 exchange, routing_key);
	else if (!ok)
		snprintf(error, RELAY_ERROR_SIZE, "exchange \"%s\" has no binding", exchange);
out:
	PQclear(res);
	free(type);
	free(body.data);
	free(path);
	curl_free(e_vhost);
	curl_free(e_exchange);
	curl_easy_cleanup(curl);
	management_free(&m);
	free(vhost);
	free(routing_key);
	free(exchange);
	return ok;
}
