#-------------------------------------------------------------------------
#
# rabbitmq.sh
#	  A private RabbitMQ on loopback for the bench's parts that need one
#	  (relay.sh, brokers.sh), sourced by each: the first starts it, on free
#	  ports, and it is stopped with the bench's cluster; later ones find it
#	  running (rl_amqp set).  rl_pika runs the small pika script below
#	  against it.
#
# test/bench/rabbitmq.sh
#
#-------------------------------------------------------------------------

[ -n "${rl_amqp:-}" ] && return 0

rl_port()
{
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
rl_dir=$work/rabbitmq
mkdir -p "$rl_dir"
rl_amqp=$(rl_port)
rl_dist=$(rl_port)
rl_epmd=$(rl_port)
echo "listeners.tcp.default = 127.0.0.1:$rl_amqp" >"$rl_dir/rabbitmq.conf"
echo "[]." >"$rl_dir/enabled_plugins"
(
	export HOME=$rl_dir ERL_EPMD_PORT=$rl_epmd ERL_EPMD_ADDRESS=127.0.0.1 \
		RABBITMQ_NODENAME="inbox-bench-$rl_amqp@localhost" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
		RABBITMQ_NODE_PORT=$rl_amqp RABBITMQ_DIST_PORT=$rl_dist \
		RABBITMQ_MNESIA_BASE="$rl_dir/mnesia" RABBITMQ_LOG_BASE="$rl_dir/log" \
		RABBITMQ_PID_FILE="$rl_dir/rabbitmq.pid" RABBITMQ_CONFIG_FILE="$rl_dir/rabbitmq.conf" \
		RABBITMQ_ENABLED_PLUGINS_FILE="$rl_dir/enabled_plugins" \
		RABBITMQ_CONF_ENV_FILE="$rl_dir/no-rabbitmq-env.conf" \
		RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS='-kernel inet_dist_use_interface {127,0,0,1}'
	exec setsid sh -c "epmd -port $rl_epmd -address 127.0.0.1 & exec /usr/lib/rabbitmq/bin/rabbitmq-server" \
		>"$rl_dir/server.log" 2>&1 </dev/null
) &
rl_pgid=$!
disown "$rl_pgid"

# Stopped with the bench's cluster, however the script ends, after what
# an earlier part asked for
if declare -F cluster_before_cleanup >/dev/null; then
	eval "rl_earlier_cleanup() $(declare -f cluster_before_cleanup | tail -n +2)"
fi
cluster_before_cleanup()
{
	kill -KILL -- "-$rl_pgid" 2>/dev/null
	declare -F rl_earlier_cleanup >/dev/null && rl_earlier_cleanup "$@"
	return 0
}

rl_pika()
{
	AMQP_URL="amqp://guest:guest@127.0.0.1:$rl_amqp/%2F" python3 - "$@" <<'PY'
import os, sys, time, json, pika
params = pika.URLParameters(os.environ['AMQP_URL'])
what = sys.argv[1]
if what == 'wait':
    for _ in range(1800):
        try:
            pika.BlockingConnection(params).close()
            sys.exit(0)
        except Exception:
            time.sleep(0.1)
    sys.exit(1)
conn = pika.BlockingConnection(params)
ch = conn.channel()
ch.queue_declare(sys.argv[2], durable=True)
if what == 'purge':
    print(ch.queue_purge(sys.argv[2]).method.message_count)
elif what == 'latency':
    # consume for the given seconds; latency of each message against the
    # epoch in its payload
    seconds = float(sys.argv[3])
    lat = []
    end = time.time() + seconds
    for method, props, body in ch.consume(sys.argv[2], auto_ack=True, inactivity_timeout=0.5):
        if method is not None:
            lat.append(time.time() - float(json.loads(body)['t']))
        if time.time() > end:
            break
    lat.sort()
    if not lat:
        print('0 0 0')
    else:
        print(len(lat), '%.1f' % (1000 * lat[len(lat) // 2]), '%.1f' % (1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))]))
conn.close()
PY
}
rl_pika wait || fail "RabbitMQ did not start: $(tail -n 20 "$rl_dir/server.log")"
