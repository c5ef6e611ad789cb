#-------------------------------------------------------------------------
#
# depth.sh
#	  What inbox_depth costs a call at a backlog, sourced by bench.sh on its
#	  cluster: a scope filled with BENCH_DEPTH_BACKLOG pending messages
#	  (the fill is timed), then rounds of BENCH_DEPTH_CALLS calls in one
#	  statement, timed on the server, so the figure is the call's own cost
#	  without a round trip.  For context, in the same rounds, the count of
#	  the scope's rows that inbox_depth replaces, and the scope's row of
#	  inbox_stats; each of those runs BENCH_DEPTH_COUNTS times.  Variants
#	  rotate within a round; medians of the rounds.  The bench checks that
#	  inbox_depth equals the count.
#
# test/bench/depth.sh
#
#-------------------------------------------------------------------------

dp_backlog=${BENCH_DEPTH_BACKLOG:-100000}
dp_calls=${BENCH_DEPTH_CALLS:-20000}
dp_counts=${BENCH_DEPTH_COUNTS:-20}
dp_rounds=${BENCH_DEPTH_ROUNDS:-5}

echo "## Depth: inbox_depth at a backlog"
echo
echo "- $dp_backlog pending messages in one scope; $dp_calls calls of inbox_depth per round ($dp_counts of the others), $dp_rounds round(s) rotating the order, medians, milliseconds per call on the server"
echo

createdb depth_bench
export PGDATABASE=depth_bench
psql -X -q -v ON_ERROR_STOP=1 -f "$here/base.sql" >/dev/null

dp_start=$(date +%s.%N)
for ((b = 1; b <= dp_backlog; b += 10000)); do
	last=$((b + 9999 < dp_backlog ? b + 9999 : dp_backlog))
	sql "SELECT count(*) FROM inbox_receive_many('depth',
			ARRAY(SELECT 'd-' || g FROM generate_series($b, $last) g),
			ARRAY(SELECT jsonb_build_object('amount', g) FROM generate_series($b, $last) g))" >/dev/null
done
dp_end=$(date +%s.%N)
sql "VACUUM ANALYZE inbox.entries" >/dev/null
awk -v n="$dp_backlog" -v s="$dp_start" -v e="$dp_end" \
	'BEGIN { printf "- fill: %d messages in %.1f s, 10,000 a statement\n", n, e - s }'

# The first call after a start counts the scope once: outside the rounds
sql "SELECT * FROM inbox_depth('depth')" >/dev/null
dp_depth=$(sql "SELECT pending || '/' || due || '/' || processing FROM inbox_depth('depth')")
dp_rows=$(sql "SELECT count(*) FILTER (WHERE state = 'p') || '/' ||
					  count(*) FILTER (WHERE state = 'p' AND due <= clock_timestamp()) || '/' ||
					  count(*) FILTER (WHERE state = 'r')
				 FROM inbox.entries WHERE scope = 'depth'")
[ "$dp_depth" = "$dp_rows" ] || fail "inbox_depth says $dp_depth, the rows $dp_rows"

# dp_time N SQL: milliseconds per run of SQL, N runs in one statement.
# SQL names i, the run's number, so that each run executes again.
dp_time()
{
	sql "SELECT (extract(epoch FROM clock_timestamp() - t0) * 1000 / $1)::numeric(12, 4)
		   FROM (SELECT clock_timestamp() AS t0) AS s,
				LATERAL (SELECT count(*) FROM generate_series(1, $1) AS i,
						 LATERAL ($2) AS x) AS r"
}

declare -A dp_ms=()
dp_variants=(depth count stats)
for ((r = 0; r < dp_rounds; r++)); do
	for ((k = 0; k < ${#dp_variants[@]}; k++)); do
		v=${dp_variants[$(((k + r) % ${#dp_variants[@]}))]}
		case $v in
			depth) ms=$(dp_time "$dp_calls" "SELECT * FROM inbox_depth('depth' || left(i::text, 0))") ;;
			count) ms=$(dp_time "$dp_counts" "SELECT count(*) FILTER (WHERE state = 'p') AS p,
					count(*) FILTER (WHERE state = 'p' AND due <= clock_timestamp()) AS d,
					count(*) FILTER (WHERE state = 'r') AS r
					FROM inbox.entries WHERE scope = 'depth' AND state <> 'd' AND state <> 'x' AND i > 0") ;;
			stats) ms=$(dp_time "$dp_counts" "SELECT pending FROM inbox_stats WHERE scope = 'depth' AND i > 0") ;;
		esac
		dp_ms[$v]+=" $ms"
	done
done

printf '| %-38s | %10s | %10s | %10s |\n' "call" "median ms" "min" "max"
printf '|%s|%s|%s|%s|\n' "----------------------------------------" "------------" "------------" "------------"
for v in "${dp_variants[@]}"; do
	read -r med lo hi < <(tr ' ' '\n' <<<"${dp_ms[$v]}" | sed '/^$/d' | sort -g | awk '
		{ x[NR] = $1 }
		END { m = (NR % 2) ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2
			  printf "%.4f %.4f %.4f\n", m, x[1], x[NR] }')
	case $v in
		depth) label="inbox_depth('depth')" ;;
		count) label="count of the scope's open rows" ;;
		stats) label="inbox_stats, the scope's row" ;;
	esac
	printf '| %-38s | %10s | %10s | %10s |\n' "$label" "$med" "$lo" "$hi"
	[ "$v" = depth ] && dp_median=$med
done
echo
if awk -v m="$dp_median" 'BEGIN { exit !(m <= 0.1) }'; then
	echo "depth target (at most 0.1 ms a call at $dp_backlog pending): met ($dp_median ms)"
else
	echo "depth target (at most 0.1 ms a call at $dp_backlog pending): NOT met ($dp_median ms)"
fi
echo
