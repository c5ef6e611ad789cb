#-------------------------------------------------------------------------
#
# relay.sh
#	  inbox-relay to RabbitMQ, sourced by bench.sh on its cluster:
#
#	- throughput: a fixed number of messages pending (1,000 keys), drained
#	  by "inbox-relay --once" against the same number drained by a
#	  hand-written relay (hand_relay.c: SELECT ... FOR UPDATE SKIP LOCKED
#	  LIMIT 100, publish with confirms, DELETE), one process each, the
#	  sides in an order where each follows each other equally often;
#	  messages per second and the machine's CPU per message, medians.
#	  Target: inbox-relay >= 1.0 x the hand-written relay, and >= 0.95 x
#	  the relay of BENCH_RELAY_BASELINE (42e5910 by default: side "base",
#	  built by test/tools/run.sh from git archive, draining into this
#	  extension).  Side
#	  "metrics" is inbox-relay serving --metrics, scraped twice a second
#	  during its drain: what the endpoint costs.  A third side,
#	  "ordered", is the same hand-written relay keeping inbox-relay's order per key (hand_relay.c
#	  ordered: only each key's oldest message in a batch), for the record,
#	  and so is a fourth, "headers": inbox-relay to a target whose URL says
#	  outbox_headers=true, so that its messages also carry the outbox-*
#	  headers (the default target, like the hand-written relays, sends
#	  none).
#	- latency: sends committed at a fixed rate (pgbench -R) while
#	  inbox-relay runs, waiting for commits; a consumer takes each message
#	  and notes how long after its send's statement it arrived; p50 and
#	  p99.  Target: p50 <= 10 ms at 1,000 messages/s.
#	- to another database's inbox: the throughput drain again, to a
#	  postgresql:// target, a database of the same cluster, with each
#	  key's messages in its group there (the default) and with
#	  ordered=off, alternating; messages per second, for the record (no
#	  baseline, no target).
#
# BENCH_RELAY_BASELINE names the baseline's revision ("" for none); run.sh
# passes its relay as BENCH_RELAY_BASELINE_BIN.
# A private RabbitMQ on loopback, stopped with the cluster.  Skipped, with
# one line, without inbox-relay, rabbitmq-server or python3-pika.
#
# test/bench/relay.sh
#
#-------------------------------------------------------------------------

rl_messages=${BENCH_RELAY_MESSAGES:-20000}
rl_rounds=${BENCH_RELAY_ROUNDS:-8}
rl_rate=${BENCH_RELAY_RATE:-1000}
rl_latency_seconds=${BENCH_RELAY_LATENCY_SECONDS:-15}
rl_bin="$(dirname "$(command -v postgres)")/inbox-relay"

echo "## The relay to RabbitMQ"
echo
if ! [ -x "$rl_bin" ] || ! [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] ||
	! python3 -c 'import pika' 2>/dev/null; then
	echo "Skipped: needs inbox-relay, rabbitmq-server and python3-pika (test/tools/ensure-deps.sh)."
	echo
	return 0
fi

. "$here/rabbitmq.sh"

createdb relay_bench
export PGDATABASE=relay_bench
rl_target="amqp://guest@127.0.0.1:$rl_amqp/%2F?routing_key=relay-bench"
rl_headers_target="$rl_target&outbox_headers=true"
rl_latency_target="amqp://guest@127.0.0.1:$rl_amqp/%2F?routing_key=relay-latency"
printf '%s guest\n' "$rl_target" "$rl_headers_target" "$rl_latency_target" >"$work/relay.secrets"
chmod 600 "$work/relay.secrets"
psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<SQL
CREATE EXTENSION inbox;
SELECT outbox_route('relaybench', '$rl_target', '{"max_attempts": 1000}');
SELECT outbox_route('relayheaders', '$rl_headers_target', '{"max_attempts": 1000}');
SELECT outbox_route('relaylatency', '$rl_latency_target', '{"max_attempts": 1000}');
CREATE TABLE hand_relay_outbox (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	key text NOT NULL, payload jsonb NOT NULL);
CREATE TABLE hand_ordered_outbox (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	key text COLLATE "C" NOT NULL, payload jsonb NOT NULL);
CREATE INDEX hand_ordered_outbox_key ON hand_ordered_outbox (key, id);
SQL
cc -O2 -o "$work/hand_relay" "$here/hand_relay.c" -I"$(pg_config --includedir)" \
	-L"$(pg_config --libdir)" -lpq -lrabbitmq || fail "hand_relay.c did not build"
rl_pika purge relay-bench >/dev/null

# The baseline's relay, built by run.sh from git archive of its relay/
rl_base_rev=${BENCH_RELAY_BASELINE_NAME:-}
rl_base_bin=${BENCH_RELAY_BASELINE_BIN:-}
if [ -n "${BENCH_RELAY_BASELINE_WHY:-}" ]; then
	echo "Side base left out: $BENCH_RELAY_BASELINE_WHY"
	echo
fi
rl_metrics_port=$(rl_port)

# Each side's topic and target (inbox-relay) or table (hand_relay.c);
# side pg, another database's inbox, is drained after the latency run
rl_pg_target="postgresql:///relay_inbox?scope=mirror"
rl_pgoff_target="postgresql:///relay_inbox?scope=mirroroff&ordered=off"
declare -A rl_topic=([inbox]=relaybench [base]=relaybench [metrics]=relaybench
	[headers]=relayheaders [pg]=relaymirror [pgoff]=relaymirroroff)
declare -A rl_to=([inbox]=$rl_target [base]=$rl_target [metrics]=$rl_target
	[headers]=$rl_headers_target [pg]=$rl_pg_target [pgoff]=$rl_pgoff_target)
declare -A rl_exe=([inbox]=$rl_bin [base]=$rl_base_bin [metrics]=$rl_bin [headers]=$rl_bin [pg]=$rl_bin
	[pgoff]=$rl_bin)
declare -A rl_extra=([metrics]="--metrics=127.0.0.1:$rl_metrics_port")
declare -A rl_table=([hand]=hand_relay_outbox [ordered]=hand_ordered_outbox)

# rl_fill SIDE: rl_messages messages pending on 1,000 keys
rl_fill()
{
	if [ -n "${rl_topic[$1]:-}" ]; then
		sql "SELECT count(*) FROM generate_series(0, $rl_messages / 1000 - 1) AS b,
			LATERAL outbox_send_many('${rl_topic[$1]}',
				ARRAY(SELECT 'k' || k FROM generate_series(1, 1000) AS k),
				ARRAY(SELECT jsonb_build_object('n', b * 1000 + k) FROM generate_series(1, 1000) AS k))" >/dev/null
	else
		sql "INSERT INTO ${rl_table[$1]} (key, payload)
			SELECT 'k' || (n % 1000), jsonb_build_object('n', n) FROM generate_series(1, $rl_messages) AS n" >/dev/null
	fi
	sql "VACUUM ANALYZE" >/dev/null
}

# rl_delivered SIDE: what SIDE's target holds: the broker's queue,
# emptied, or the other database's inbox
rl_delivered()
{
	if [[ $1 == pg* ]]; then
		psql -X -tA -d relay_inbox -c "SELECT count(*) FROM inbox.entries"
	else
		rl_pika purge relay-bench
	fi
}

# rl_busy: the machine's busy CPU ticks so far (every process: the
# cluster, the broker and the relay), nothing without /proc
rl_busy()
{
	[ "$clk_tck" -gt 0 ] && [ -r /proc/stat ] && awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat
	return 0
}

# rl_drain SIDE: drain it; prints messages per second and the machine's
# CPU per message in µs (n/a without /proc): what the drain cost every
# process, whatever else the machine was doing at the time
rl_drain()
{
	local t0 t1 before got b0 b1 scraper=""
	before=$([[ $1 == pg* ]] && rl_delivered "$1" || echo 0)
	if [ "$1" = metrics ]; then
		(while :; do
			curl -s "http://127.0.0.1:$rl_metrics_port/metrics" >/dev/null
			sleep 0.5
		done) &
		scraper=$!
	fi
	b0=$(rl_busy)
	t0=$(date +%s.%N)
	if [ -n "${rl_topic[$1]:-}" ]; then
		"${rl_exe[$1]}" --once --batch=100 --secrets="$work/relay.secrets" --target="${rl_to[$1]}" \
			${rl_extra[$1]:-} "dbname=relay_bench" 2>>"$work/relay.log" ||
			fail "inbox-relay ($1) failed: $(tail -n 5 "$work/relay.log")"
	else
		"$work/hand_relay" "dbname=relay_bench" 127.0.0.1 "$rl_amqp" relay-bench \
			$([ "$1" = ordered ] && echo ordered) >/dev/null || fail "hand_relay failed"
	fi
	t1=$(date +%s.%N)
	b1=$(rl_busy)
	if [ -n "$scraper" ]; then
		kill "$scraper" 2>/dev/null
		wait "$scraper" 2>/dev/null
	fi
	got=$(($(rl_delivered "$1") - before))
	[ "$got" = "$rl_messages" ] || fail "the $1 relay delivered $got messages, not $rl_messages"
	awk -v n="$rl_messages" -v a="$t0" -v b="$t1" -v c0="$b0" -v c1="$b1" -v hz="$clk_tck" \
		'BEGIN { printf "%.0f ", n / (b - a); if (c0 == "" || c1 == "") print "n/a"; else printf "%.1f\n", (c1 - c0) * 1000000 / hz / n }'
}

declare -A rl_rates=() rl_cpus=()
rl_sides=(inbox hand ordered headers)
[ -n "$rl_base_bin" ] && rl_sides+=(base)
if "$rl_bin" --help | grep -q -- --metrics; then
	rl_sides+=(metrics)
fi
# One uncounted drain of each side first: the broker's queue, the
# relays' first connections and the tables' first pages are warm for
# every counted drain.  They end with the circuit's last side (below), so
# that the first counted drain follows the side that each later pass's
# first drain follows.
rl_n=${#rl_sides[@]}
read -ra rl_circuit <<<"$(circuit "$rl_n")"
for ((k = 1; k <= rl_n; k++)); do
	side=${rl_sides[(rl_circuit[-1] + k) % rl_n]}
	rl_fill "$side"
	rl_drain "$side" >/dev/null || exit 1
done
# Each side's drains come in the order of a circuit through the sides in
# which each side follows each other side exactly once, repeated: a drain
# leaves the broker and the cluster work that lands on the side after it,
# and a fixed cycle would always hand that work to the same side.
# BENCH_RELAY_ROUNDS drains of each side, rounded up to whole circuits
# (n - 1 drains of each side apiece).
rl_passes=$(((rl_rounds + rl_n - 2) / (rl_n - 1)))
echo "- throughput: $rl_messages messages on 1,000 keys per run, one relay process, batches of 100, one uncounted drain of each side, then $((rl_passes * (rl_n - 1))) drains of each side, each side after each other equally often, medians"
echo
for ((k = 0; k < rl_passes * ${#rl_circuit[@]}; k++)); do
	side=${rl_sides[rl_circuit[k % ${#rl_circuit[@]}]]}
	rl_fill "$side"
	sql "CHECKPOINT" >/dev/null
	out=$(rl_drain "$side") || exit 1
	read -r v c <<<"$out"
	echo "| drain $((k + 1)) | $side | $v msg/s | $c µs/msg |"
	rl_rates[$side]="${rl_rates[$side]:-} $v"
	rl_cpus[$side]="${rl_cpus[$side]:-} $c"
done
read -r rl_inbox_m _ _ <<<"$(stats "${rl_rates[inbox]}")"
read -r rl_hand_m _ _ <<<"$(stats "${rl_rates[hand]}")"
read -r rl_ordered_m _ _ <<<"$(stats "${rl_rates[ordered]}")"
read -r rl_headers_m _ _ <<<"$(stats "${rl_rates[headers]}")"
rl_cpu_inbox=$(cpu_median "${rl_cpus[inbox]}")
rl_cpu_hand=$(cpu_median "${rl_cpus[hand]}")
rl_ratio=$(awk -v a="$rl_inbox_m" -v b="$rl_hand_m" 'BEGIN { printf "%.3f", a / b }')
echo
echo "| relay | median msg/s | machine CPU µs/msg |"
echo "|---|---:|---:|"
echo "| inbox-relay | $rl_inbox_m | $rl_cpu_inbox |"
echo "| hand-written | $rl_hand_m | $rl_cpu_hand |"
echo "| hand-written, ordered per key | $rl_ordered_m | $(cpu_median "${rl_cpus[ordered]}") |"
echo "| inbox-relay, outbox_headers=true | $rl_headers_m | $(cpu_median "${rl_cpus[headers]}") |"
if [ -n "${rl_rates[base]:-}" ]; then
	read -r rl_base_m _ _ <<<"$(stats "${rl_rates[base]}")"
	echo "| inbox-relay of $rl_base_rev | $rl_base_m | $(cpu_median "${rl_cpus[base]}") |"
fi
if [ -n "${rl_rates[metrics]:-}" ]; then
	read -r rl_metrics_m _ _ <<<"$(stats "${rl_rates[metrics]}")"
	echo "| inbox-relay, --metrics scraped twice a second | $rl_metrics_m | $(cpu_median "${rl_cpus[metrics]}") |"
fi
echo
echo "inbox-relay / hand-written: $rl_ratio (target >= 1.0: $(awk -v r="$rl_ratio" 'BEGIN { print (r >= 1.0) ? "met" : "NOT met" }'))"
echo "inbox-relay / hand-written ordered per key: $(awk -v a="$rl_inbox_m" -v b="$rl_ordered_m" 'BEGIN { printf "%.3f", a / b }') (no target: the same order per key)"
if [ -n "${rl_base_m:-}" ]; then
	rl_base_ratio=$(awk -v a="$rl_inbox_m" -v b="$rl_base_m" 'BEGIN { printf "%.3f", a / b }')
	echo "inbox-relay / inbox-relay of $rl_base_rev: $rl_base_ratio (target >= 0.95: $(awk -v r="$rl_base_ratio" 'BEGIN { print (r >= 0.95) ? "met" : "NOT met" }'))"
fi
if [ -n "${rl_metrics_m:-}" ]; then
	echo "inbox-relay with --metrics / without: $(awk -v a="$rl_metrics_m" -v b="$rl_inbox_m" 'BEGIN { printf "%.3f", a / b }') (no target: what the endpoint costs)"
fi
echo "inbox-relay with outbox_headers=true / hand-written: $(awk -v a="$rl_headers_m" -v b="$rl_hand_m" 'BEGIN { printf "%.3f", a / b }') (no target: with the three outbox-* headers)"
if [ "$rl_cpu_inbox" != n/a ]; then
	echo "machine CPU per message, hand-written / inbox-relay: $(awk -v a="$rl_cpu_hand" -v b="$rl_cpu_inbox" 'BEGIN { printf "%.3f", a / b }') (above 1: inbox-relay's delivery costs the machine less)"
fi
echo

# Latency: sends at a fixed rate while the relay waits for their commits
rl_pika purge relay-latency >/dev/null
"$rl_bin" --batch=100 --wait=10 --secrets="$work/relay.secrets" --target="$rl_latency_target" \
	"dbname=relay_bench" 2>>"$work/relay.log" &
rl_relay=$!
cat >"$work/latency.sql" <<'SQL'
\set k random(1, 1000)
SELECT outbox_send('relaylatency', 'k' || :k, jsonb_build_object('t', extract(epoch FROM clock_timestamp())));
SQL
rl_pika latency relay-latency $((rl_latency_seconds + 3)) >"$work/latency.out" &
rl_consumer=$!
sleep 1
pgbench -n -c 4 -j 2 -R "$rl_rate" -T "$rl_latency_seconds" -f "$work/latency.sql" relay_bench >/dev/null 2>&1 ||
	fail "pgbench of the latency run failed"
wait "$rl_consumer"
kill -TERM "$rl_relay"
wait "$rl_relay"
read -r rl_n rl_p50 rl_p99 <"$work/latency.out"
echo "- latency: $rl_rate sends/s for $rl_latency_seconds s (pgbench -R, 4 clients), inbox-relay waiting for commits; from the send's statement to the consumer"
echo
echo "| messages | p50 ms | p99 ms |"
echo "|---:|---:|---:|"
echo "| $rl_n | $rl_p50 | $rl_p99 |"
echo
echo "p50 target <= 10 ms: $(awk -v p="$rl_p50" 'BEGIN { print (p <= 10) ? "met" : "NOT met" }')"
echo

# To another database's inbox: the same drain, to a database of this
# cluster (the relay's connection to it takes PGHOST and PGPORT)
createdb relay_inbox
psql -X -q -v ON_ERROR_STOP=1 -d relay_inbox -c "CREATE EXTENSION inbox" >/dev/null
sql "SELECT outbox_route('relaymirror', '$rl_pg_target', '{\"max_attempts\": 1000}'),
	outbox_route('relaymirroroff', '$rl_pgoff_target', '{\"max_attempts\": 1000}')" >/dev/null
# Each key's messages go in its group there (the default), or in none
# (ordered=off): what keeping the order downstream costs.  The two sides
# in the order ABBA, repeated.
declare -A rl_db_rates=([pg]="" [pgoff]="")
for ((r = 0; r < rl_rounds; r++)); do
	for side in $( ((r % 2 == 0)) && echo pg pgoff || echo pgoff pg); do
		rl_fill "$side"
		sql "CHECKPOINT" >/dev/null
		out=$(rl_drain "$side") || exit 1
		read -r v _ <<<"$out"
		rl_db_rates[$side]="${rl_db_rates[$side]} $v"
	done
done
read -r rl_pg_m rl_pg_min rl_pg_max <<<"$(stats "${rl_db_rates[pg]}")"
read -r rl_pgoff_m rl_pgoff_min rl_pgoff_max <<<"$(stats "${rl_db_rates[pgoff]}")"
echo "- to another database's inbox (a database of the same cluster): $rl_messages messages on 1,000 keys per run, batches of 100, $rl_rounds run(s) of each side"
echo
echo "| receiving side | median msg/s | min | max |"
echo "|---|---:|---:|---:|"
echo "| each key in its group (default) | $rl_pg_m | $rl_pg_min | $rl_pg_max |"
echo "| ordered=off | $rl_pgoff_m | $rl_pgoff_min | $rl_pgoff_max |"
echo
echo "in groups / ordered=off: $(awk -v a="$rl_pg_m" -v b="$rl_pgoff_m" 'BEGIN { printf "%.3f", a / b }') (no target: what keeping each key's order downstream costs)"
echo
export PGDATABASE=bench
