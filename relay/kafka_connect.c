/*-------------------------------------------------------------------------
 *
 * kafka_connect.c
 *	  inbox-relay: a Kafka client's settings from a kafka:// URL, for the
 *	  transport (kafka.c) and the source (kafka_source.c).
 *
 * kafka://host:port[,host:port...][/topic][?security_protocol=...
 * &sasl_mechanism=...&sasl_username=...&cacert=FILE]: the brokers to
 * start from, the topic, and librdkafka's security.protocol,
 * sasl.mechanisms, sasl.username and ssl.ca.location; the SASL password
 * is the URL's line of the secrets file, never the URL.
 *
 * relay/kafka_connect.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kafka_internal.h"

#define SCHEME "kafka://"

bool
relay_kafka_set(rd_kafka_conf_t *conf, const char *name, const char *value, char *error)
{
	char		why[RELAY_ERROR_SIZE - 64];

	if (rd_kafka_conf_set(conf, name, value, why, sizeof(why)) == RD_KAFKA_CONF_OK)
		return true;
	snprintf(error, RELAY_ERROR_SIZE, "%s: %s", name, why);
	return false;
}

/* librdkafka's log, as the relay's debug output */
static void
log_line(const rd_kafka_t *rk, int level, const char *facility, const char *message)
{
	(void) rk;
	relay_debug(level <= 4 ? 1 : 3, "kafka %s: %s", facility, message);
}

/* The brokers, the security settings and the password, into conf */
bool
relay_kafka_conf(rd_kafka_conf_t *conf, const char *url, const char *secret, char *error)
{
	static const char *const params[][2] = {
		{"security_protocol", "security.protocol"},
		{"sasl_mechanism", "sasl.mechanisms"},
		{"sasl_username", "sasl.username"},
		{"cacert", "ssl.ca.location"},
	};
	const char *hosts = url + strlen(SCHEME);
	char	   *servers = strndup(hosts, strcspn(hosts, "/?#"));
	bool		ok = true;
	bool		sasl = false;

	rd_kafka_conf_set_log_cb(conf, log_line);
	if (servers[0] == '\0')
	{
		snprintf(error, RELAY_ERROR_SIZE, "the URL names no broker: kafka://host:port[,host:port...]/topic");
		ok = false;
	}
	ok = ok && relay_kafka_set(conf, "bootstrap.servers", servers, error) &&
		relay_kafka_set(conf, "client.id", "inbox-relay", error) &&
		relay_kafka_set(conf, "log.connection.close", "false", error) &&
		relay_kafka_set(conf, "allow.auto.create.topics", "false", error);
	for (int i = 0; ok && i < (int) (sizeof(params) / sizeof(params[0])); i++)
	{
		char	   *value = relay_url_param(url, params[i][0]);

		if (value != NULL)
		{
			ok = relay_kafka_set(conf, params[i][1], value, error);
			sasl |= strcmp(params[i][0], "sasl_username") == 0;
		}
		free(value);
	}
	if (ok && sasl && secret != NULL)
		ok = relay_kafka_set(conf, "sasl.password", secret, error);
	free(servers);
	return ok;
}

/* The URL's topic, decoded, or NULL when it names none */
char *
relay_kafka_topic(const char *url)
{
	const char *hosts = url + strlen(SCHEME);
	const char *slash = hosts + strcspn(hosts, "/?#");
	size_t		len;

	if (*slash != '/')
		return NULL;
	slash++;
	len = strcspn(slash, "?#");
	return len > 0 ? relay_url_decode(slash, len) : NULL;
}

/* How long a request for metadata may take: --timeout, at most 10 s */
int
relay_kafka_wait_ms(void)
{
	int			s = relay_timeout < 1 ? 1 : relay_timeout > 10 ? 10 : relay_timeout;

	return s * 1000;
}

/*
 * Whether the brokers know topic; false with their reason otherwise.  All
 * topics are asked for, not this one: a broker that creates topics on
 * demand would create it for a request that names it.
 */
bool
relay_kafka_topic_exists(rd_kafka_t *rk, const char *topic, char *error)
{
	const struct rd_kafka_metadata *md;
	rd_kafka_resp_err_t err;

	err = rd_kafka_metadata(rk, 1, NULL, &md, relay_kafka_wait_ms());
	if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		err = RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
		for (int i = 0; i < md->topic_cnt; i++)
			if (strcmp(md->topics[i].topic, topic) == 0)
				err = md->topics[i].err;
		rd_kafka_metadata_destroy(md);
	}
	if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
		return true;
	snprintf(error, RELAY_ERROR_SIZE, "topic \"%s\": %s", topic, rd_kafka_err2str(err));
	return false;
}
