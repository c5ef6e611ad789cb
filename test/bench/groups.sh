#-------------------------------------------------------------------------
#
# groups.sh
#	  Ordered groups in the deferred mode, sourced by bench.sh on its
#	  cluster: take 1 + effect + complete (work_one.sql) in a scope whose
#	  messages are spread over 1,000 groups, against the same workload in a
#	  scope without groups and, where the installed pgmq has FIFO groups,
#	  against pgmq.read_grouped_head + delete (pgmq_grouped.sql), each at
#	  two backlogs: the cost must not grow with the backlog.
#
# Each run is a fixed number of transactions; afterwards the scope (or
# queue) is topped up to its backlog again, untimed, so that every run
# meets the same backlog and no run can find its queue empty.  Variants
# rotate within a round; medians of the rounds.  The bench checks that
# every completed message has exactly one order.
#
# test/bench/groups.sh
#
#-------------------------------------------------------------------------

gr_sizes=${BENCH_GROUPS_BACKLOGS:-10000 1000000}
gr_groups=${BENCH_GROUPS_GROUPS:-1000}
gr_tx=${BENCH_GROUPS_TRANSACTIONS:-8000}
# read_grouped_head reads every message of its queue per call: at a large
# backlog, a run of gr_tx transactions would take hours
gr_pgmq_tx=${BENCH_GROUPS_PGMQ_TRANSACTIONS:-160}
gr_rounds=${BENCH_GROUPS_ROUNDS:-3}

echo "## Ordered groups: take 1 + effect + complete"
echo
echo "- $clients clients, -j $jobs, -M prepared, $gr_tx transactions per run ($gr_pgmq_tx for pgmq), $gr_rounds round(s) rotating the order, medians"
echo "- backlogs: $gr_sizes messages over $gr_groups groups, topped up after every run"
echo

createdb groups_bench
export PGDATABASE=groups_bench
psql -X -q -v ON_ERROR_STOP=1 -f "$here/base.sql" >/dev/null
gr_pgmq=$(sql "SELECT count(*) FROM pg_available_extensions WHERE name = 'pgmq'")
if [ "$gr_pgmq" = 1 ]; then
	sql "CREATE EXTENSION pgmq" >/dev/null
	gr_pgmq=$(sql "SELECT count(*) FROM pg_proc WHERE proname = 'read_grouped_head'
				   AND pronamespace = 'pgmq'::regnamespace")
fi
[ "$gr_pgmq" = 1 ] ||
	echo "The installed pgmq has no read_grouped_head (pgmq 1.8 and later): groups are compared with the ungrouped scope only."$'\n'

declare -A gr_next=()

# gr_fill KIND NAME FROM COUNT: messages FROM .. FROM + COUNT - 1 into
# scope (or queue) NAME: kind g with group keys, u without, q into pgmq
gr_fill()
{
	local kind=$1 name=$2 from=$3 n=$4 b last
	for ((b = from; b < from + n; b += 10000)); do
		last=$((b + 9999 < from + n - 1 ? b + 9999 : from + n - 1))
		case $kind in
			g) sql "SELECT count(*) FROM inbox_receive_many('$name',
					ARRAY(SELECT '$name-' || g FROM generate_series($b, $last) g),
					ARRAY(SELECT jsonb_build_object('amount', g) FROM generate_series($b, $last) g),
					group_keys => ARRAY(SELECT 'k-' || g % $gr_groups FROM generate_series($b, $last) g))" ;;
			u) sql "SELECT count(*) FROM inbox_receive_many('$name',
					ARRAY(SELECT '$name-' || g FROM generate_series($b, $last) g),
					ARRAY(SELECT jsonb_build_object('amount', g) FROM generate_series($b, $last) g))" ;;
			q) sql "SELECT count(*) FROM pgmq.send_batch('$name',
					ARRAY(SELECT jsonb_build_object('amount', g) FROM generate_series($b, $last) g),
					ARRAY(SELECT jsonb_build_object('x-pgmq-group', 'k-' || g % $gr_groups)
							FROM generate_series($b, $last) g))" ;;
		esac >/dev/null
	done
	gr_next[$name]=$((from + n))
}

# The scope or queue of variant V at backlog SIZE
gr_name() { echo "$1_$2"; }

gr_variants=(grouped ungrouped)
[ "$gr_pgmq" = 1 ] && gr_variants+=(pgmq)
for size in $gr_sizes; do
	gr_fill g "$(gr_name grouped "$size")" 1 "$size"
	gr_fill u "$(gr_name ungrouped "$size")" 1 "$size"
	if [ "$gr_pgmq" = 1 ]; then
		sql "SELECT pgmq.create('$(gr_name pgmq "$size")')" >/dev/null
		gr_fill q "$(gr_name pgmq "$size")" 1 "$size"
	fi
done
sql "VACUUM ANALYZE" >/dev/null

# gr_run VARIANT SIZE: one run; prints its tps, then tops the backlog up
gr_run()
{
	local v=$1 size=$2 name tps file kind left tx=$gr_tx
	name=$(gr_name "$v" "$size")
	case $v in
		grouped) file=work_one.sql; kind=g ;;
		ungrouped) file=work_one.sql; kind=u ;;
		pgmq) file=pgmq_grouped.sql; kind=q; tx=$gr_pgmq_tx ;;
	esac
	sql "CHECKPOINT" >/dev/null
	tps=$(pgbench_tps "groups variant $v at $size" -t "$((tx / clients))" -D scope="$name" \
		-f "$here/$file") || exit 1
	case $kind in
		q) left=$(sql "SELECT count(*) FROM pgmq.q_$name") ;;
		*) left=$(sql "SELECT count(*) FROM inbox.entries WHERE scope = '$name' AND state = 'p'") ;;
	esac
	[ "$left" -gt 0 ] || fail "groups: $name ran out of messages"
	gr_fill "$kind" "$name" "${gr_next[$name]}" "$((size - left))"
	echo "$tps"
}

declare -A gr_tps=() gr_med=()
for ((r = 0; r < gr_rounds; r++)); do
	for size in $gr_sizes; do
		for ((i = 0; i < ${#gr_variants[@]}; i++)); do
			v=${gr_variants[(i + r) % ${#gr_variants[@]}]}
			# a subshell: fail() cannot stop the bench, and gr_next is
			# read back from the database instead
			tps=$(gr_run "$v" "$size") || exit 1
			gr_tps[$v,$size]="${gr_tps[$v,$size]:-} $tps"
			name=$(gr_name "$v" "$size")
			if [ "$v" = pgmq ]; then
				gr_next[$name]=$(($(sql "SELECT max(msg_id) FROM pgmq.q_$name") + 1))
			else
				gr_next[$name]=$(($(sql "SELECT max(substr(message_id, length('$name') + 2)::bigint)
										  FROM inbox.entries WHERE scope = '$name'") + 1))
			fi
		done
	done
done

# Every completed message has exactly one order
bad=$(sql "SELECT count(*) FROM (SELECT e.message_id FROM inbox.entries e
		   LEFT JOIN orders o ON o.message_id = e.message_id
		   WHERE e.scope LIKE 'grouped%' OR e.scope LIKE 'ungrouped%'
		   GROUP BY e.message_id, e.state HAVING (e.state = 'd') <> (count(o.order_id) = 1)) x")
[ "$bad" = 0 ] || fail "groups: $bad messages whose order count disagrees with their state"

echo "| variant | backlog | transactions/s median | min | max |"
echo "|---|---:|---:|---:|---:|"
for size in $gr_sizes; do
	for v in "${gr_variants[@]}"; do
		read -r med min max <<<"$(stats "${gr_tps[$v,$size]}")"
		gr_med[$v,$size]=$med
		echo "| $v | $size | $med | $min | $max |"
	done
done
echo
for size in $gr_sizes; do
	awk -v g="${gr_med[grouped,$size]}" -v u="${gr_med[ungrouped,$size]}" -v s="$size" 'BEGIN {
		printf "At %s: grouped/ungrouped %.2f (target >= 0.8)", s, g / u }'
	if [ "$gr_pgmq" = 1 ]; then
		awk -v g="${gr_med[grouped,$size]}" -v p="${gr_med[pgmq,$size]}" 'BEGIN {
			printf ", grouped/pgmq %.2f (target >= 1.0)", g / p }'
	fi
	echo "."
done
echo
echo "Every completed message has exactly one order, and no pending one has any."
echo
