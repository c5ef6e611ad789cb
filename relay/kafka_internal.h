/*-------------------------------------------------------------------------
 *
 * kafka_internal.h
 *	  inbox-relay: what the Kafka transport (kafka.c) and the Kafka source
 *	  (kafka_source.c) share, in kafka_connect.c: a client's settings from
 *	  a kafka:// URL and the secrets file, and the brokers' metadata.
 *
 * relay/kafka_internal.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_RELAY_KAFKA_INTERNAL_H
#define INBOX_RELAY_KAFKA_INTERNAL_H

#include <librdkafka/rdkafka.h>

#include "relay.h"

extern bool relay_kafka_set(rd_kafka_conf_t *conf, const char *name, const char *value, char *error);
extern bool relay_kafka_conf(rd_kafka_conf_t *conf, const char *url, const char *secret, char *error);
extern char *relay_kafka_topic(const char *url);
extern int	relay_kafka_wait_ms(void);
extern bool relay_kafka_topic_exists(rd_kafka_t *rk, const char *topic, char *error);

#endif							/* INBOX_RELAY_KAFKA_INTERNAL_H */
