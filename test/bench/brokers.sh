#-------------------------------------------------------------------------
#
# brokers.sh
#	  The relay's ingest, sourced by bench.sh on its cluster:
#
#	- ingest from RabbitMQ: a queue holding a fixed backlog (persistent JSON
#	  messages with a message_id, on 1,000 keys) drained into a scope.
#	  Sides, one queue each, in an order where each follows each other
#	  equally often:
#	    relay    inbox-relay --once --source=URL, default options (batches of
#	             100 into inbox_receive_many, acknowledged after COMMIT), or
#	             those of BENCH_BROKERS_OPTIONS (JSON)
#	    big      the same with batches of 500 (the option batch), for the
#	             record: what a batch's size does to the rate
#	    grouped  the same with group_key "header:key": each key's messages
#	             in its group, for workers that keep its order
#	    ack      the broker's ceiling: a librabbitmq consumer (hand_ingest.c)
#	             that acknowledges without touching any database, prefetch
#	             100, an acknowledgement (multiple) per 100
#	    loop     the loop users write by hand (hand_ingest.c): per message,
#	             inbox_receive in its own transaction, then basic.ack
#	  A drain is timed from its start to its last message in the inbox (the
#	  last transaction's timestamp, received_at) or, for ack, to its
#	  consumer's exit: the relay's --once idles a second at the end before
#	  it exits, which no user waits for.  The fill is timed too, and
#	  reported apart: it is the producer's work, the same for every side.
#	  Targets: relay >= 0.5 x ack; relay / loop reported.  BENCH_BROKERS_SIDES
#	  names fewer sides (at least two), for a profile of one against another.  BENCH_BROKERS_SIDES
#	  names fewer sides (at least two), for a profile of one against another.
#
# A private RabbitMQ on loopback (rabbitmq.sh), stopped with the cluster.
# Skipped, with one line, without inbox-relay, rabbitmq-server or
# librabbitmq-dev.
#
# test/bench/brokers.sh
#
#-------------------------------------------------------------------------

br_messages=${BENCH_BROKERS_MESSAGES:-10000}
br_rounds=${BENCH_BROKERS_ROUNDS:-6}
br_bin="$(dirname "$(command -v postgres)")/inbox-relay"
br_options=${BENCH_BROKERS_OPTIONS:-\{\}}
bt_messages=${BENCH_BROKERS_TARGET_MESSAGES:-20000}
bt_rate=${BENCH_RELAY_RATE:-1000}
bt_latency_seconds=${BENCH_RELAY_LATENCY_SECONDS:-15}

echo "## Ingest: from a broker into an inbox"
echo
if ! [ -x "$br_bin" ] || ! [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] ||
	! python3 -c 'import pika' 2>/dev/null || ! [ -e /usr/include/amqp.h ]; then
	echo "Skipped: needs inbox-relay, rabbitmq-server, python3-pika and librabbitmq-dev (test/tools/ensure-deps.sh)."
	echo
	return 0
fi
. "$here/rabbitmq.sh"

cc -O2 -o "$work/hand_ingest" "$here/hand_ingest.c" -I"$(pg_config --includedir)" \
	-L"$(pg_config --libdir)" -lpq -lrabbitmq || fail "hand_ingest.c did not build"
createdb ingest_bench
br_source()
{
	echo "amqp://guest@127.0.0.1:$rl_amqp/%2F?queue=ingest-$1"
}
printf '%s guest\n' "$(br_source relay)" "$(br_source big)" "$(br_source grouped)" >"$work/ingest.secrets"
chmod 600 "$work/ingest.secrets"
for q in relay big grouped ack loop; do
	rl_pika purge "ingest-$q" >/dev/null
done
psql -X -q -v ON_ERROR_STOP=1 -d ingest_bench >/dev/null <<SQL
CREATE EXTENSION inbox;
SELECT inbox_subscribe('ingest_relay', '$(br_source relay)', '$br_options');
SELECT inbox_subscribe('ingest_big', '$(br_source big)', '$br_options'::jsonb || '{"batch": 500}');
SELECT inbox_subscribe('ingest_grouped', '$(br_source grouped)',
	'$br_options'::jsonb || '{"group_key": "header:key"}');
SQL

# br_fill SIDE ROUND: br_messages messages in SIDE's queue; prints the
# producer's rate
br_fill()
{
	local t0 t1
	t0=$(date +%s.%N)
	"$work/hand_ingest" fill 127.0.0.1 "$rl_amqp" "ingest-$1" "$br_messages" "$1-$2" ||
		fail "filling ingest-$1 failed"
	t1=$(date +%s.%N)
	awk -v n="$br_messages" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f\n", n / (b - a) }'
}

# br_drain SIDE: drain SIDE's queue; prints messages per second
br_drain()
{
	local t0 t1 got
	t0=$(date +%s.%N)
	case $1 in
		relay | big | grouped)
			"$br_bin" --once --secrets="$work/ingest.secrets" --source="$(br_source "$1")" \
				"dbname=ingest_bench" 2>>"$work/ingest.log" ||
				fail "inbox-relay ($1) failed: $(tail -n 5 "$work/ingest.log")"
			;;
		ack)
			"$work/hand_ingest" ack 127.0.0.1 "$rl_amqp" ingest-ack "$br_messages" ||
				fail "the acknowledging consumer failed"
			;;
		loop)
			"$work/hand_ingest" loop 127.0.0.1 "$rl_amqp" ingest-loop "$br_messages" \
				"dbname=ingest_bench" ingest_loop || fail "the hand-written loop failed"
			;;
	esac
	t1=$(date +%s.%N)
	if [ "$1" != ack ]; then
		# the end: the last transaction that wrote into the scope
		read -r got t1 <<<"$(psql -X -tA -F ' ' -d ingest_bench -c "SELECT count(*),
			extract(epoch FROM max(received_at)) FROM inbox.entries
			WHERE scope = 'ingest_$1' AND received_at >= to_timestamp($t0)")"
		[ "$got" = "$br_messages" ] || fail "side $1 wrote $got messages, not $br_messages"
	fi
	[ "$(rl_pika purge "ingest-$1")" = 0 ] || fail "side $1 left messages in its queue"
	awk -v n="$br_messages" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f\n", n / (b - a) }'
}

declare -A br_rates=() br_fills=()
read -ra br_sides <<<"${BENCH_BROKERS_SIDES:-relay big grouped ack loop}"
br_n=${#br_sides[@]}
read -ra br_circuit <<<"$(circuit "$br_n")"
# One uncounted drain of each side, ending with the circuit's last side
for ((k = 1; k <= br_n; k++)); do
	side=${br_sides[(br_circuit[-1] + k) % br_n]}
	br_fill "$side" "warm" >/dev/null
	br_drain "$side" >/dev/null || exit 1
done
br_passes=$(((br_rounds + br_n - 2) / (br_n - 1)))
echo "- ingest from RabbitMQ: $br_messages persistent JSON messages on 1,000 keys per drain, one process per side, one uncounted drain of each side, then $((br_passes * (br_n - 1))) drains of each side, each side after each other equally often, medians"
echo
for ((k = 0; k < br_passes * ${#br_circuit[@]}; k++)); do
	side=${br_sides[br_circuit[k % ${#br_circuit[@]}]]}
	f=$(br_fill "$side" "$k") || exit 1
	sql "CHECKPOINT" >/dev/null
	v=$(br_drain "$side") || exit 1
	echo "| drain $((k + 1)) | $side | $v msg/s | fill $f msg/s |"
	br_rates[$side]="${br_rates[$side]:-} $v"
	br_fills[$side]="${br_fills[$side]:-} $f"
done
declare -A br_m=()
echo
echo "| side | median msg/s | min | max | its fill, median msg/s |"
echo "|---|---:|---:|---:|---:|"
for side in "${br_sides[@]}"; do
	read -r m lo hi <<<"$(stats "${br_rates[$side]}")"
	read -r fm _ _ <<<"$(stats "${br_fills[$side]}")"
	br_m[$side]=$m
	echo "| $side | $m | $lo | $hi | $fm |"
done
if [ -n "${br_m[relay]:-}" ] && [ -n "${br_m[ack]:-}" ] && [ -n "${br_m[loop]:-}" ] && [ -n "${br_m[grouped]:-}" ]; then
	echo
	br_ratio=$(awk -v a="${br_m[relay]}" -v b="${br_m[ack]}" 'BEGIN { printf "%.3f", a / b }')
	echo "ingest / the broker's ceiling (a consumer that only acknowledges): $br_ratio (target >= 0.5: $(awk -v r="$br_ratio" 'BEGIN { print (r >= 0.5) ? "met" : "NOT met" }'))"
	echo "ingest / the hand-written loop (receive, commit, ack per message): $(awk -v a="${br_m[relay]}" -v b="${br_m[loop]}" 'BEGIN { printf "%.3f", a / b }') (no target)"
	echo "ingest with group_key / without: $(awk -v a="${br_m[grouped]}" -v b="${br_m[relay]}" 'BEGIN { printf "%.3f", a / b }') (no target: what keeping each key's order costs)"
	[ -n "${br_m[big]:-}" ] &&
		echo "ingest in batches of 500 / the broker's ceiling: $(awk -v a="${br_m[big]}" -v b="${br_m[ack]}" 'BEGIN { printf "%.3f", a / b }') (for the record)"
fi
echo

# --- the targets: RabbitMQ, Kafka, NATS JetStream ----------------------------
# The same backlog drained by inbox-relay --once to each target, in an
# order where each follows each other equally often; then, for each, sends
# at a fixed rate (pgbench -R) while the relay waits for commits, and the
# time from each send's transaction to its acknowledgement in the outbox
# (the target confirmed it), recorded by a trigger on the deliveries.
echo "## The relay's targets: RabbitMQ, Kafka and NATS JetStream"
echo
declare -A bt_to=([amqp]="amqp://guest@127.0.0.1:$rl_amqp/%2F?routing_key=bench-target")
bt_sides=(amqp)
bt_why=""
if command -v nats-server >/dev/null && pkg-config --exists libnats && "$br_bin" --version | grep -qw nats; then
	bt_nats_port=$(rl_port)
	mkdir -p "$work/nats"
	setsid nats-server -js -a 127.0.0.1 -p "$bt_nats_port" -sd "$work/nats/store" \
		>"$work/nats/server.log" 2>&1 </dev/null &
	bt_nats_pid=$!
	disown "$bt_nats_pid"
	if declare -F cluster_before_cleanup >/dev/null; then
		eval "bt_earlier_cleanup() $(declare -f cluster_before_cleanup | tail -n +2)"
	fi
	cluster_before_cleanup()
	{
		kill -KILL "$bt_nats_pid" 2>/dev/null
		declare -F bt_earlier_cleanup >/dev/null && bt_earlier_cleanup "$@"
		return 0
	}
	cc -O2 -o "$work/nats_tool" "$here/../tools/nats_tool.c" $(pkg-config --cflags --libs libnats) ||
		fail "nats_tool.c did not build"
	for _ in $(seq 100); do
		grep -q "Server is ready" "$work/nats/server.log" && break
		sleep 0.1
	done
	"$work/nats_tool" "nats://127.0.0.1:$bt_nats_port" stream BENCH bench.out 0 1 >/dev/null ||
		fail "the NATS stream could not be made: $(tail -n 5 "$work/nats/server.log")"
	bt_to[nats]="nats://127.0.0.1:$bt_nats_port/bench.out"
	bt_sides+=(nats)
else
	bt_why="$bt_why NATS (nats-server, libnats-dev and a relay built with it);"
fi
if "$br_bin" --version | grep -qw kafka && python3 -c 'import confluent_kafka' 2>/dev/null; then
	cc -O2 -o "$work/kafka_mock" "$here/../tools/kafka_mock.c" $(pkg-config --cflags --libs rdkafka) ||
		fail "kafka_mock.c did not build"
	mkfifo "$work/kafka.in"
	setsid "$work/kafka_mock" 1 <"$work/kafka.in" >"$work/kafka.out" 2>"$work/kafka.err" &
	bt_kafka_pid=$!
	disown "$bt_kafka_pid"
	exec 7>"$work/kafka.in"
	if declare -F cluster_before_cleanup >/dev/null; then
		eval "bk_earlier_cleanup() $(declare -f cluster_before_cleanup | tail -n +2)"
	fi
	cluster_before_cleanup()
	{
		kill -KILL "$bt_kafka_pid" 2>/dev/null
		declare -F bk_earlier_cleanup >/dev/null && bk_earlier_cleanup "$@"
		return 0
	}
	for _ in $(seq 100); do
		[ -s "$work/kafka.out" ] && break
		sleep 0.1
	done
	bt_kafka=$(head -n 1 "$work/kafka.out")
	echo "topic bench-out 4" >&7
	echo "topic ingest-in 4" >&7
	for _ in $(seq 100); do
		[ "$(grep -c '^ok' "$work/kafka.out")" = 2 ] && break
		sleep 0.1
	done
	[ "$(grep -c '^ok' "$work/kafka.out")" = 2 ] || fail "the Kafka mock did not make its topics: $(cat "$work/kafka.out" "$work/kafka.err")"
	bt_to[kafka]="kafka://$bt_kafka/bench-out"
	bt_sides+=(kafka)
else
	bt_why="$bt_why Kafka (librdkafka-dev, python3-confluent-kafka and a relay built with it);"
fi
if [ -n "$bt_why" ]; then
	echo "Left out:$bt_why"
	echo
fi

createdb target_bench
psql -X -q -v ON_ERROR_STOP=1 -d target_bench >/dev/null <<SQL
CREATE EXTENSION inbox;
CREATE TABLE bench_latency (target text, ms double precision);
CREATE FUNCTION bench_acked() RETURNS trigger LANGUAGE plpgsql SET search_path = public AS \$\$
BEGIN
	INSERT INTO public.bench_latency VALUES (OLD.target,
		1000 * extract(epoch FROM clock_timestamp() - OLD.queued_at));
	RETURN NULL;
END \$\$;
CREATE TRIGGER bench_acked AFTER DELETE ON inbox.outbox_deliveries
	FOR EACH ROW WHEN (OLD.topic LIKE 'lat-%') EXECUTE FUNCTION public.bench_acked();
SQL
: >"$work/target.secrets"
for side in "${bt_sides[@]}"; do
	sql_t() { psql -X -q -tA -v ON_ERROR_STOP=1 -d target_bench -c "$1"; }
	sql_t "SELECT outbox_route('tp-$side', '${bt_to[$side]}', '{\"max_attempts\": 1000}'),
		outbox_route('lat-$side', '${bt_to[$side]}', '{\"max_attempts\": 1000}')" >/dev/null
	[ "$side" = amqp ] && printf '%s guest\n' "${bt_to[$side]}" >>"$work/target.secrets"
done
chmod 600 "$work/target.secrets"

# bt_drain SIDE: bt_messages messages on 1,000 keys to SIDE's target;
# prints messages per second
bt_drain()
{
	local t0 t1 left
	psql -X -q -tA -d target_bench -c "SELECT count(*) FROM generate_series(0, $bt_messages / 1000 - 1) AS b,
		LATERAL outbox_send_many('tp-$1', ARRAY(SELECT 'k' || k FROM generate_series(1, 1000) AS k),
			ARRAY(SELECT jsonb_build_object('n', b * 1000 + k) FROM generate_series(1, 1000) AS k))" >/dev/null
	psql -X -q -d target_bench -c "VACUUM ANALYZE" -c "CHECKPOINT" >/dev/null
	t0=$(date +%s.%N)
	"$br_bin" --once --batch=100 --secrets="$work/target.secrets" --target="${bt_to[$1]}" \
		"dbname=target_bench" 2>>"$work/target.log" || fail "inbox-relay to $1 failed: $(tail -n 5 "$work/target.log")"
	t1=$(date +%s.%N)
	left=$(psql -X -tA -d target_bench -c "SELECT count(*) FROM inbox.outbox_deliveries WHERE target = '${bt_to[$1]}'")
	[ "$left" = 0 ] || fail "the relay to $1 left $left messages undelivered"
	[ "$1" = amqp ] && rl_pika purge bench-target >/dev/null
	awk -v n="$bt_messages" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f\n", n / (b - a) }'
}

rl_pika purge bench-target >/dev/null
declare -A bt_rates=()
bt_n=${#bt_sides[@]}
if [ "$bt_n" -ge 2 ]; then
	read -ra bt_circuit <<<"$(circuit "$bt_n")"
	for ((k = 1; k <= bt_n; k++)); do
		bt_drain "${bt_sides[(bt_circuit[-1] + k) % bt_n]}" >/dev/null || exit 1
	done
	bt_passes=$(((br_rounds + bt_n - 2) / (bt_n - 1)))
	echo "- throughput: $bt_messages messages on 1,000 keys per drain, inbox-relay --once, batches of 100, one uncounted drain of each target, then $((bt_passes * (bt_n - 1))) drains of each, each after each other equally often, medians"
	echo
	for ((k = 0; k < bt_passes * ${#bt_circuit[@]}; k++)); do
		side=${bt_sides[bt_circuit[k % ${#bt_circuit[@]}]]}
		v=$(bt_drain "$side") || exit 1
		echo "| drain $((k + 1)) | $side | $v msg/s |"
		bt_rates[$side]="${bt_rates[$side]:-} $v"
	done
fi

# Latency: bt_rate sends a second for bt_latency_seconds to each target
# in turn, the relay waiting for commits
declare -A bt_lat=()
for side in "${bt_sides[@]}"; do
	"$br_bin" --batch=100 --wait=10 --secrets="$work/target.secrets" --target="${bt_to[$side]}" \
		"dbname=target_bench" 2>>"$work/target.log" &
	bt_relay=$!
	printf '\\set k random(1, 1000)\nSELECT outbox_send('"'lat-$side'"', '"'k'"' || :k, '"'{}'"'::jsonb);\n' \
		>"$work/latency-$side.sql"
	pgbench -n -c 4 -j 2 -R "$bt_rate" -T "$bt_latency_seconds" -f "$work/latency-$side.sql" target_bench \
		>/dev/null 2>&1 || fail "pgbench of the $side latency run failed"
	for _ in $(seq 100); do
		[ "$(psql -X -tA -d target_bench -c "SELECT count(*) FROM inbox.outbox_deliveries WHERE topic = 'lat-$side'")" = 0 ] && break
		sleep 0.1
	done
	kill -TERM "$bt_relay"
	wait "$bt_relay"
	bt_lat[$side]=$(psql -X -tA -F ' ' -d target_bench -c "SELECT count(*),
		round((percentile_cont(0.5) WITHIN GROUP (ORDER BY ms))::numeric, 1),
		round((percentile_cont(0.99) WITHIN GROUP (ORDER BY ms))::numeric, 1)
		FROM bench_latency WHERE target = '${bt_to[$side]}'")
done
[ "${bt_sides[0]}" = amqp ] && rl_pika purge bench-target >/dev/null

echo
echo "| target | median msg/s | min | max | latency: messages | p50 ms | p99 ms |"
echo "|---|---:|---:|---:|---:|---:|---:|"
declare -A bt_m=()
for side in "${bt_sides[@]}"; do
	m=n/a lo=n/a hi=n/a
	[ -n "${bt_rates[$side]:-}" ] && read -r m lo hi <<<"$(stats "${bt_rates[$side]}")"
	bt_m[$side]=$m
	read -r ln l50 l99 <<<"${bt_lat[$side]}"
	echo "| $side | $m | $lo | $hi | $ln | $l50 | $l99 |"
done
echo
echo "(latency: from the send's transaction to its acknowledgement in the outbox, the target having confirmed it; $bt_rate sends/s for $bt_latency_seconds s, 4 clients)"
echo
for side in "${bt_sides[@]}"; do
	[ "$side" = amqp ] && continue
	r=$(awk -v a="${bt_m[$side]}" -v b="${bt_m[amqp]}" 'BEGIN { printf "%.3f", a / b }')
	echo "$side / RabbitMQ: $r (target >= 0.5: $(awk -v r="$r" 'BEGIN { print (r >= 0.5) ? "met" : "NOT met" }'))"
done
echo

# --- ingest from Kafka and NATS JetStream: the rates -------------------------
# br_messages JSON messages with an id header on 1,000 keys, put in the
# topic or stream first (the fill, timed apart), then drained into a scope
# by inbox-relay --once --source, br_rounds times; messages per second
# from the relay's start to the last transaction that wrote into the scope.
bi_sides=()
if [ -n "${bt_to[nats]:-}" ]; then
	"$work/nats_tool" "nats://127.0.0.1:$bt_nats_port" stream INGEST ingest.in 0 1 >/dev/null ||
		fail "the NATS stream INGEST could not be made"
	psql -X -q -v ON_ERROR_STOP=1 -d ingest_bench -c "SELECT inbox_subscribe('ingest_nats',
		'nats://127.0.0.1:$bt_nats_port/INGEST?consumer=bench')" >/dev/null
	bi_sides+=(nats)
fi
if [ -n "${bt_to[kafka]:-}" ]; then
	psql -X -q -v ON_ERROR_STOP=1 -d ingest_bench -c "SELECT inbox_subscribe('ingest_kafka',
		'kafka://$bt_kafka/ingest-in?group=bench')" >/dev/null
	bi_sides+=(kafka)
fi
declare -A bi_source=([nats]="nats://127.0.0.1:${bt_nats_port:-0}/INGEST?consumer=bench"
	[kafka]="kafka://${bt_kafka:-}/ingest-in?group=bench")

# bi_fill SIDE ROUND: br_messages messages into SIDE's topic or stream;
# prints the producer's rate
bi_fill()
{
	local t0 t1
	t0=$(date +%s.%N)
	case $1 in
		nats)
			awk -v n="$br_messages" -v r="$2" 'BEGIN { for (i = 0; i < n; i++)
				printf "ingest.in\t%s-%d\tapplication/json\t{\"n\": %d}\tkey=k%d\n", r, i, i, i % 1000 }' |
				"$work/nats_tool" "nats://127.0.0.1:$bt_nats_port" publish >/dev/null || fail "filling NATS failed"
			;;
		kafka)
			KAFKA_BOOTSTRAP=$bt_kafka python3 - "$br_messages" "$2" <<'PY' || fail "filling Kafka failed"
import os, sys
from confluent_kafka import Producer
n, r = int(sys.argv[1]), sys.argv[2]
p = Producer({'bootstrap.servers': os.environ['KAFKA_BOOTSTRAP'], 'enable.idempotence': True,
              'linger.ms': 5})
failed = []
for i in range(n):
    p.produce('ingest-in', value=('{"n": %d}' % i).encode(), key=('k%d' % (i % 1000)).encode(),
              headers=[('message-id', ('%s-%d' % (r, i)).encode()), ('content-type', b'application/json')],
              on_delivery=lambda err, msg: err and failed.append(err))
    p.poll(0)
p.flush(60)
sys.exit(1 if failed or len(p) else 0)
PY
			;;
	esac
	t1=$(date +%s.%N)
	awk -v n="$br_messages" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f\n", n / (b - a) }'
}

if [ ${#bi_sides[@]} -gt 0 ]; then
	echo "## Ingest from Kafka and NATS JetStream"
	echo
	echo "- $br_messages JSON messages with an id header on 1,000 keys per drain, inbox-relay --once --source, default options, $br_rounds drains of each source after one uncounted, medians"
	echo
	echo "| source | median msg/s | min | max | once reading, msg/s | to the first write, ms | its fill, msg/s | a bare consumer, msg/s |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|"
	for side in "${bi_sides[@]}"; do
		rates="" fills="" reading="" starts=""
		for ((k = 0; k <= br_rounds; k++)); do
			f=$(bi_fill "$side" "$side-$k") || exit 1
			sql "CHECKPOINT" >/dev/null
			t0=$(date +%s.%N)
			"$br_bin" --once --source="${bi_source[$side]}" "dbname=ingest_bench" 2>>"$work/ingest.log" ||
				fail "inbox-relay (ingest from $side) failed: $(tail -n 5 "$work/ingest.log")"
			read -r got tf t1 <<<"$(psql -X -tA -F ' ' -d ingest_bench -c "SELECT count(*),
				extract(epoch FROM min(received_at)), extract(epoch FROM max(received_at)) FROM inbox.entries
				WHERE scope = 'ingest_$side' AND received_at >= to_timestamp($t0)")"
			[ "$got" = "$br_messages" ] || fail "ingest from $side wrote $got messages, not $br_messages"
			[ "$k" = 0 ] && continue
			rates="$rates $(awk -v n="$br_messages" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", n / (b - a) }')"
			reading="$reading $(awk -v n="$br_messages" -v a="$tf" -v b="$t1" 'BEGIN { printf "%.0f", n / (b - a) }')"
			starts="$starts $(awk -v a="$t0" -v b="$tf" 'BEGIN { printf "%.0f", 1000 * (b - a) }')"
			fills="$fills $f"
		done
		ceiling=n/a
		if [ "$side" = kafka ]; then
			# A consumer that only reads and commits, from its first message
			ceiling=$(KAFKA_BOOTSTRAP=$bt_kafka python3 - "$br_messages" <<'PY'
import os, sys, time
from confluent_kafka import Consumer, TopicPartition
n = int(sys.argv[1])
c = Consumer({'bootstrap.servers': os.environ['KAFKA_BOOTSTRAP'], 'group.id': 'ceiling-%d' % time.time_ns(),
              'enable.auto.commit': False, 'auto.offset.reset': 'latest'})
c.subscribe(['ingest-in'])
got, t0 = 0, None
# the newest n messages: each partition from its end less its share
while not c.assignment():
    c.poll(0.1)
ends = [c.get_watermark_offsets(p) for p in c.assignment()]
total = sum(h - l for l, h in ends)
for p, (l, h) in zip(c.assignment(), ends):
    c.seek(TopicPartition(p.topic, p.partition, max(l, h - n * (h - l) // total)))
while got < n:
    m = c.poll(1.0)
    if m is None or m.error():
        continue
    t0 = t0 or time.time()
    got += 1
    if got % 100 == 0:
        c.commit(asynchronous=True)
print('%.0f' % (n / (time.time() - t0)))
c.close()
PY
)
		fi
		read -r m lo hi <<<"$(stats "$rates")"
		read -r rm _ _ <<<"$(stats "$reading")"
		read -r sm _ _ <<<"$(stats "$starts")"
		read -r fm _ _ <<<"$(stats "$fills")"
		echo "| $side | $m | $lo | $hi | $rm | $sm | $fm | $ceiling |"
	done
	echo
fi
