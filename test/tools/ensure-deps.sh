#!/bin/bash
# test/tools/ensure-deps.sh - install the Debian packages that building, testing
# and the demo need, but only those that are missing.
#
# Run as root on a fresh Debian 12 machine this brings in PostgreSQL 15, its
# server headers and PGXS, pg_cron, IPC::Run (for the TAP tests), DBD::Pg
# (for the fault-injection load drivers those tests call) and PgBouncer (for
# the pooler test).  Run as anyone else it only checks, and says what to
# install.
set -eu

PKGS="postgresql-15 postgresql-server-dev-15 postgresql-15-cron libipc-run-perl libdbd-pg-perl pgbouncer"
PKGS="$PKGS rabbitmq-server python3-psycopg python3-pika nodejs$(command -v npm >/dev/null || echo ' npm')"  # test/t/016_examples.pl: RabbitMQ, the Python and Node.js examples (npm only where nodejs does not bring it)
PKGS="$PKGS prometheus-postgres-exporter prometheus"  # test/t/015_monitoring.pl: the exporter, and promtool for the alert rules
PKGS="$PKGS postgresql-server-dev-all debhelper git"  # make deb (pg_buildext, dh --with pgxs_loop) and make dist (git archive); test/t/017
PKGS="$PKGS librabbitmq-dev libcurl4-openssl-dev libssl-dev pkg-config"  # the relay, relay/inbox-relay (AMQP, webhooks, the signature's HMAC); test/t/026
PKGS="$PKGS librdkafka-dev libnats-dev nats-server kcat python3-confluent-kafka"  # the relay's Kafka and NATS JetStream targets and sources, and their tests (a mock Kafka cluster, nats-server -js)
PKGS="$PKGS amqp-tools"  # docs/ingest.md's quickstart, run by its test (amqp-declare-queue, amqp-publish)

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing="$missing $p"
	fi
done

[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "ensure-deps: missing packages:$missing" >&2
	echo "ensure-deps: run as root, or: sudo apt-get install -y$missing" >&2
	exit 1
fi

echo "ensure-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
# Install without starting the packages' services (PostgreSQL's main cluster,
# RabbitMQ, Prometheus, the exporter, PgBouncer): the tests start servers
# of their own, on loopback and free ports.  This is Debian's policy-rc.d
# convention; a machine that has its own policy is left with it.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\n# test/tools/ensure-deps.sh: no service starts during its install\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	trap 'rm -f "$policy"' EXIT
fi
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
