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
printf '%s guest\n' "$(br_source relay)" "$(br_source grouped)" >"$work/ingest.secrets"
chmod 600 "$work/ingest.secrets"
for q in relay grouped ack loop; do
	rl_pika purge "ingest-$q" >/dev/null
done
psql -X -q -v ON_ERROR_STOP=1 -d ingest_bench >/dev/null <<SQL
CREATE EXTENSION inbox;
SELECT inbox_subscribe('ingest_relay', '$(br_source relay)', '$br_options');
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
		relay | grouped)
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
read -ra br_sides <<<"${BENCH_BROKERS_SIDES:-relay grouped ack loop}"
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
[ -n "${br_m[relay]:-}" ] && [ -n "${br_m[ack]:-}" ] && [ -n "${br_m[loop]:-}" ] && [ -n "${br_m[grouped]:-}" ] || return 0
[ -n "${br_m[relay]:-}" ] && [ -n "${br_m[ack]:-}" ] && [ -n "${br_m[loop]:-}" ] && [ -n "${br_m[grouped]:-}" ] || return 0
echo
br_ratio=$(awk -v a="${br_m[relay]}" -v b="${br_m[ack]}" 'BEGIN { printf "%.3f", a / b }')
echo "ingest / the broker's ceiling (a consumer that only acknowledges): $br_ratio (target >= 0.5: $(awk -v r="$br_ratio" 'BEGIN { print (r >= 0.5) ? "met" : "NOT met" }'))"
echo "ingest / the hand-written loop (receive, commit, ack per message): $(awk -v a="${br_m[relay]}" -v b="${br_m[loop]}" 'BEGIN { printf "%.3f", a / b }') (no target)"
echo "ingest with group_key / without: $(awk -v a="${br_m[grouped]}" -v b="${br_m[relay]}" 'BEGIN { printf "%.3f", a / b }') (no target: what keeping each key's order costs)"
echo
