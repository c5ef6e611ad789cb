#-------------------------------------------------------------------------
#
# growth.sh
#	  What a receive costs as its scope grows from nothing, with
#	  statistics that have never seen the scope; sourced by bench.sh on its
#	  cluster.  Two measures, each timed whole, as a user waits for it:
#	    - a fill of 100,000 messages into a fresh scope in one statement
#	      (one transaction), grouped over 100 groups against plain; rounds
#	      rotate the order, medians of seconds;
#	    - receives, one per transaction (receive_grouped.sql against
#	      receive.sql), into a fresh scope each, in growth_rounds rounds of
#	      a fixed number of transactions: the scopes grow by that much a
#	      round, and the last round's rate against the first says whether
#	      a receive's cost follows the scope's size; the grouped rate
#	      against the plain one in the same rounds says what a group costs.
#	  The tables hold other scopes' messages, analyzed before the tested
#	  scopes existed.
#
# test/bench/growth.sh
#
#-------------------------------------------------------------------------

growth_fill=${BENCH_GROWTH_FILL:-100000}
growth_fill_rounds=${BENCH_GROWTH_FILL_ROUNDS:-3}
growth_tx=${BENCH_GROWTH_TRANSACTIONS:-1500}
growth_rounds=${BENCH_GROWTH_ROUNDS:-8}
growth_clients=${BENCH_GROWTH_CLIENTS:-2}

echo "## A fresh scope: fills and receives as it grows"
echo
echo "- other scopes: 200,000 messages (half grouped), analyzed before the tested scopes exist; autovacuum off"
echo "- fill: $growth_fill messages in one statement, grouped (100 groups) and plain, $growth_fill_rounds round(s) rotating, medians of seconds"
echo "- receives: $growth_clients clients, -M prepared, $growth_tx transactions a round, $growth_rounds rounds; grouped and plain alternate within a round"
echo

createdb growth_bench
export PGDATABASE=growth_bench
psql -X -q -v ON_ERROR_STOP=1 -f "$here/base.sql" >/dev/null
sql "SELECT count(*) FROM generate_series(1, 200000, 10000) b
	 CROSS JOIN LATERAL inbox_receive_many('other-' || (b % 7),
		ARRAY(SELECT 'o-' || g FROM generate_series(b, b + 9999) g),
		ARRAY(SELECT '{}'::jsonb FROM generate_series(b, b + 9999) g),
		group_keys => CASE WHEN b % 20000 = 1
					  THEN ARRAY(SELECT 'k-' || (g % 500) FROM generate_series(b, b + 9999) g) END)" >/dev/null
sql "VACUUM ANALYZE" >/dev/null

# growth_seconds SQL: the wall-clock seconds of one statement, as psql's
# \timing reports it
growth_seconds()
{
	psql -X -q -v ON_ERROR_STOP=1 <<<"\\timing on
$1" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | awk '{ printf "%.2f", $1 / 1000 }'
}

declare -A growth_s=()
for ((r = 0; r < growth_fill_rounds; r++)); do
	for v in $( ((r % 2)) && echo "plain grouped" || echo "grouped plain"); do
		scope="fill-$v-$r"
		key=$([ "$v" = grouped ] && echo ", group_key => 'g' || (g % 100)" || true)
		sql "CHECKPOINT" >/dev/null
		s=$(growth_seconds "SELECT count(inbox_receive('$scope', 'm-' || g, jsonb_build_object('amount', g)$key))
							  FROM generate_series(1, $growth_fill) g")
		[ -n "$s" ] || fail "growth: no time for the $v fill"
		growth_s[$v]="${growth_s[$v]:-} $s"
	done
done
read -r fill_g fill_g_min fill_g_max <<<"$(stats "${growth_s[grouped]}")"
read -r fill_p fill_p_min fill_p_max <<<"$(stats "${growth_s[plain]}")"
echo "| fill of $growth_fill in one statement | seconds median | min | max |"
echo "|---|---:|---:|---:|"
echo "| grouped | $fill_g | $fill_g_min | $fill_g_max |"
echo "| plain | $fill_p | $fill_p_min | $fill_p_max |"
echo
awk -v g="$fill_g" -v p="$fill_p" 'BEGIN { printf "Grouped fill / plain fill: %.2f (target <= 3.0).\n\n", g / p }'

declare -A growth_tps=()
for ((r = 0; r < growth_rounds; r++)); do
	for v in $( ((r % 2)) && echo "plain grouped" || echo "grouped plain"); do
		file=$([ "$v" = grouped ] && echo receive_grouped.sql || echo receive.sql)
		tps=$(clients=$growth_clients pgbench_tps "growth $v round $r" -t "$((growth_tx / growth_clients))" \
			-D scope="growth-$v" -D base=0 -D span=1000000000000 -f "$here/$file") || exit 1
		growth_tps[$v,$r]=$tps
		growth_tps[$v]="${growth_tps[$v]:-} $tps"
	done
done
echo "| round | scope's messages before | grouped tps | plain tps |"
echo "|---:|---:|---:|---:|"
for ((r = 0; r < growth_rounds; r++)); do
	echo "| $((r + 1)) | $((r * growth_tx)) | ${growth_tps[grouped,$r]} | ${growth_tps[plain,$r]} |"
done
echo
last=$((growth_rounds - 1))
read -r med_g _ _ <<<"$(stats "${growth_tps[grouped]}")"
read -r med_p _ _ <<<"$(stats "${growth_tps[plain]}")"
awk -v f="${growth_tps[grouped,0]}" -v l="${growth_tps[grouped,$last]}" -v pf="${growth_tps[plain,0]}" \
	-v pl="${growth_tps[plain,$last]}" -v g="$med_g" -v p="$med_p" 'BEGIN {
	printf "Grouped receive, last round / first round: %.2f (target >= 0.9); plain: %.2f.\n", l / f, pl / pf
	printf "Grouped receive / plain receive, medians of the same rounds: %.2f (target >= 0.7).\n", g / p }'
n=$(sql "SELECT count(*) FROM inbox.entries WHERE scope = 'growth-grouped' AND due IS NOT NULL")
[ "$n" -le 100 ] || fail "growth: $n grouped messages are due, more than one head per group"
echo
export PGDATABASE=bench
