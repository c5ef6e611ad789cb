#-------------------------------------------------------------------------
#
# plans.sh
#	  Whether a take's cost depends on luck, and what waiting costs;
#	  sourced by deferred.sh on its database.
#
#	  One client takes, applies the effect and completes (work_one.sql), in
#	  scopes that differ in one way each from a reference scope of 200,000
#	  pending messages with fresh statistics:
#	    - stale: filled after the last ANALYZE, so the statistics do not
#	      know the scope;
#	    - generic: the reference under plan_cache_mode = force_generic_plan;
#	    - small: 10,000 pending messages (topped up after every run);
#	    - big: 1,000,000 pending messages;
#	    - dead: 200,000 pending behind 200,000 dead letters.
#	  Each should run within 20% of the reference.  Then the latency from a
#	  receive's commit to the return of a waiting inbox_poll, and the CPU
#	  that 50 idle waiting polls burn.
#
# test/bench/plans.sh
#
#-------------------------------------------------------------------------

# Transactions per run: a fixed count rather than a time, so that the
# small scope's backlog stays between 10,000 and 10,000 minus this
plan_tx=${BENCH_PLAN_TRANSACTIONS:-5000}
plan_rounds=${BENCH_PLAN_ROUNDS:-5}
# Pending messages of each scope but the big one.  The reference scope
# serves two conditions (fresh and generic): every run must find messages
# left, at up to some 3,000 a second.
plan_pending=${BENCH_PLAN_PENDING:-200000}

# BENCH_PLAN_ROUNDS=0 skips to the waiting takes
if [ "$plan_rounds" -gt 0 ]; then
echo "## Deferred mode: plans that do not depend on luck"
echo
echo "- 1 client, -M prepared, synchronous_commit = off, $plan_tx transactions per run, $plan_rounds round(s) rotating the order, medians; take 1 + INSERT + complete per transaction"
echo

# fill SCOPE N [PREFIX]: N messages, by batches of 10,000
fill()
{
	local prefix=${3:-$1}
	sql "SELECT count(*) FROM generate_series(1, $2, 10000) b
		 CROSS JOIN LATERAL inbox_receive_many('$1', ARRAY(SELECT '$prefix-' || g FROM generate_series(b, b + 9999) g),
		 ARRAY(SELECT jsonb_build_object('amount', g) FROM generate_series(b, b + 9999) g))" >/dev/null
}

# Keep autovacuum from analyzing the leaves during these runs, which would
# make the stale scope known
for b in 0 1 2 3 4 5 6 7; do
	sql "ALTER TABLE inbox.entries_p$b SET (autovacuum_enabled = off)" >/dev/null
done
fill plan-ref "$plan_pending"
fill plan-big 1000000
fill plan-small 10000
fill plan-dead 200000
sql "UPDATE inbox.entries SET state = 'x', due = NULL, finished_at = now() WHERE scope = 'plan-dead'" >/dev/null
fill plan-dead "$plan_pending" live
sql "VACUUM ANALYZE inbox.entries" >/dev/null
# After the ANALYZE: the statistics know nothing of this scope
fill plan-stale "$plan_pending"

# plan_run CONDITION: messages/s of one client, and the cluster's CPU per
# message in µs ("n/a" where /proc does not tell).  One client's rate
# swings with the machine's noise; the CPU a message costs is the steadier
# measure of what the plan does.
plan_run()
{
	local c=$1 scope=plan-$1 opts="" out tps n ticks0 ticks1
	case $c in
		generic) scope=plan-ref; opts="-c plan_cache_mode=force_generic_plan" ;;
	esac
	# Without the commit's flush, which would otherwise dominate one
	# client's transaction and hide what the take costs
	opts="$opts -c synchronous_commit=off"
	ticks0=$(cpu_mark)
	out=$(PGOPTIONS="$opts" pgbench -n -M prepared -c 1 -t "$plan_tx" -D scope="$scope" \
		-f "$here/work_one.sql" 2>&1) || { echo "$out" >&2; fail "pgbench failed on plan condition $c"; }
	ticks1=$(cpu_mark)
	tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' <<<"$out")
	n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
	[ -n "$tps" ] && [ -n "$n" ] || { echo "$out" >&2; fail "no tps for plan condition $c"; }
	echo "$tps $(cpu_per_tx "$ticks0" "$ticks1" "$n")"
}

declare -A plan_tps=() plan_cpu=()
conds=(ref small stale generic big dead)
for ((r = 0; r < plan_rounds; r++)); do
	for ((i = 0; i < ${#conds[@]}; i++)); do
		c=${conds[(i + r) % ${#conds[@]}]}
		res=$(plan_run "$c") || exit 1
		# the small scope is topped up to its 10,000 pending again
		[ "$c" = small ] && sql "SELECT count(*) FROM inbox_receive_many('plan-small',
			ARRAY(SELECT 'top-$r-' || g FROM generate_series(1, $plan_tx) g),
			ARRAY(SELECT jsonb_build_object('amount', g) FROM generate_series(1, $plan_tx) g))" >/dev/null
		read -r t u <<<"$res"
		plan_tps[$c]="${plan_tps[$c]:-} $t"
		[ "$u" != n/a ] && plan_cpu[$c]="${plan_cpu[$c]:-} $u"
	done
done

for b in 0 1 2 3 4 5 6 7; do
	sql "ALTER TABLE inbox.entries_p$b RESET (autovacuum_enabled)" >/dev/null
done

read -r ref_med _ <<<"$(stats "${plan_tps[ref]}")"
ref_cpu=n/a
[ -n "${plan_cpu[ref]:-}" ] && read -r ref_cpu _ <<<"$(stats "${plan_cpu[ref]}")"
echo "| condition | messages/s median | min | max | ratio to fresh | server CPU µs/message, median | CPU ratio to fresh (target ≤ 1.20) |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for c in "${conds[@]}"; do
	read -r med min max <<<"$(stats "${plan_tps[$c]}")"
	cpu=n/a
	[ -n "${plan_cpu[$c]:-}" ] && read -r cpu _ <<<"$(stats "${plan_cpu[$c]}")"
	case $c in
		ref) what="fresh statistics, $((plan_pending / 1000))k pending" ;;
		stale) what="statistics that do not know the scope" ;;
		generic) what="plan_cache_mode = force_generic_plan" ;;
		small) what="10k pending" ;;
		big) what="1M pending" ;;
		dead) what="$((plan_pending / 1000))k pending behind 200k dead letters" ;;
	esac
	awk -v w="$what" -v m="$med" -v a="$min" -v b="$max" -v r="$ref_med" -v u="$cpu" -v ru="$ref_cpu" \
		'BEGIN { cr = (u == "n/a" || ru == "n/a" || ru == 0) ? "n/a" : sprintf("%.2f", u / ru)
				 printf "| %s | %s | %s | %s | %.2f | %s | %s |\n", w, m, a, b, m / r, u, cr }'
done
echo

fi

#
# Waiting takes.  Latency: a poll waits in one session; another receives
# and notes the time just before its COMMIT; the poll notes the time it
# returns.  Idle CPU: 50 sessions each wait in inbox_poll (up to 60 s) on a
# scope that gets nothing, against the same 10 s without them.
#
echo "## Deferred mode: waiting takes"
echo
lat=""
for k in 1 2 3 4 5; do
	tmp=$(mktemp)
	psql -X -q -A -t -c "SELECT extract(epoch FROM clock_timestamp()) FROM inbox_poll('wake', 1, wait => '30 s')" >"$tmp" &
	poller=$!
	# until the poll sleeps
	for ((t = 0; t < 200; t++)); do
		[ "$(sql "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Extension' AND query LIKE '%inbox_poll(''wake''%'")" = 1 ] && break
		sleep 0.05
	done
	sent=$(psql -X -q -A -t -v ON_ERROR_STOP=1 <<SQL | tail -n 1
BEGIN;
SELECT inbox_receive('wake', 'w-$k-$RANDOM$RANDOM', '{}'::jsonb) \gset
SELECT extract(epoch FROM clock_timestamp());
COMMIT;
SQL
)
	wait "$poller"
	got=$(cat "$tmp"); rm -f "$tmp"
	[ -n "$got" ] || fail "a waiting poll returned nothing after a receive committed"
	lat="$lat $(awk -v a="$got" -v b="$sent" 'BEGIN { printf "%.2f", (a - b) * 1000 }')"
done
read -r med min max <<<"$(stats "$lat")"
echo "- wake-up latency, receive's COMMIT to the poll's return (includes the commit's flush): median $med ms, min $min, max $max (5 runs)"

if [ "$clk_tck" != 0 ]; then
	t0=$(cluster_ticks); sleep 10; t1=$(cluster_ticks)
	pids=()
	for ((k = 0; k < 50; k++)); do
		psql -X -q -A -t -c "SELECT count(*) FROM inbox_poll('idle', 1, wait => '60 s')" >/dev/null 2>&1 &
		pids+=($!)
	done
	for ((t = 0; t < 200; t++)); do
		[ "$(sql "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Extension'")" = 50 ] && break
		sleep 0.1
	done
	# measured once all of them sleep, so that their connections' start
	# and end fall outside the 10 s
	t2=$(cluster_ticks); sleep 10; t3=$(cluster_ticks)
	sql "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity WHERE wait_event_type = 'Extension'" >/dev/null
	wait "${pids[@]}" || true   # the cancelled polls exit with an error
	awk -v a=$((t1 - t0)) -v b=$((t3 - t2)) -v hz="$clk_tck" 'BEGIN {
		printf "- CPU of the cluster over 10 s: %.2f%% of one core idle, %.2f%% with 50 polls waiting; the waiters cost %.2f%% of one core (target: at most 1%%)\n",
			100 * a / hz / 10, 100 * b / hz / 10, 100 * (b - a) / hz / 10 }'
fi
echo
