#-------------------------------------------------------------------------
#
# priorities.sh
#	  Priorities in the deferred mode, sourced by bench.sh on its cluster:
#	  take 1 + effect + complete (work_one.sql), 8 clients, in scopes that
#	  differ in their priorities only:
#	    - plain: every message of the default priority, in a leaf of
#	      inbox.entries where no message ever had another (the reference);
#	    - neighbour: the same, in the leaf of the two scopes below, so that
#	      its takes first ask whether the scope has priorities;
#	    - mixed: one message in ten at priority 5, the others default;
#	    - levels: every message above the default, over priorities 1 to 4;
#	    - stale: as mixed, filled after the last ANALYZE, so that the
#	      statistics do not know it.
#	  Then the plain and mixed scopes again under plan_cache_mode =
#	  force_generic_plan.
#
# Each run is a fixed number of transactions; afterwards its scope is
# topped up to its backlog again, untimed, so that every run meets the
# same backlog and no run can find its scope empty.  Variants rotate
# within a round; medians of the rounds.  The bench checks that every
# completed message has exactly one order, and that in the mixed scope no
# message of the default priority was completed while one at priority 5
# had waited since before it was due.
#
# test/bench/priorities.sh
#
#-------------------------------------------------------------------------

pr_backlog=${BENCH_PRIORITIES_BACKLOG:-100000}
pr_tx=${BENCH_PRIORITIES_TRANSACTIONS:-8000}
pr_rounds=${BENCH_PRIORITIES_ROUNDS:-3}

echo "## Priorities: take 1 + effect + complete"
echo
echo "- $clients clients, -j $jobs, -M prepared, $pr_tx transactions per run, $pr_rounds round(s) rotating the order, medians"
echo "- each scope holds $pr_backlog pending messages, topped up after every run"
echo

createdb priorities_bench
export PGDATABASE=priorities_bench
psql -X -q -v ON_ERROR_STOP=1 -f "$here/base.sql" >/dev/null

# pr_scope PREFIX LEAF: the first name PREFIX-N whose entries live in leaf
# LEAF of inbox.entries
pr_scope()
{
	sql "SELECT s FROM generate_series(1, 1000) n, LATERAL (SELECT '$1-' || n AS s) x
		 WHERE inbox.bucket(s, 'm') >> 11 = $2 ORDER BY n LIMIT 1"
}

declare -A pr_name=() pr_next=()
pr_name[plain]=$(pr_scope plain 0)
pr_name[neighbour]=$(pr_scope neighbour 1)
pr_name[mixed]=$(pr_scope mixed 1)
pr_name[levels]=$(pr_scope levels 1)
pr_name[stale]=$(pr_scope stale 1)

# pr_fill VARIANT FROM COUNT: messages FROM .. FROM + COUNT - 1 into the
# variant's scope, with its priorities
pr_fill()
{
	local v=$1 from=$2 n=$3 name=${pr_name[$1]} b last prio
	for ((b = from; b < from + n; b += 10000)); do
		last=$((b + 9999 < from + n - 1 ? b + 9999 : from + n - 1))
		case $v in
			plain | neighbour) prio="NULL" ;;
			mixed | stale) prio="ARRAY(SELECT CASE WHEN g % 10 = 0 THEN 5 END FROM generate_series($b, $last) g)" ;;
			levels) prio="ARRAY(SELECT 1 + g % 4 FROM generate_series($b, $last) g)" ;;
		esac
		sql "SELECT count(*) FROM inbox_receive_many('$name',
				ARRAY(SELECT '$name-' || g FROM generate_series($b, $last) g),
				ARRAY(SELECT jsonb_build_object('amount', g) FROM generate_series($b, $last) g),
				priorities => $prio)" >/dev/null
	done
	pr_next[$v]=$((from + n))
}

pr_variants=(plain neighbour mixed levels stale plain-generic mixed-generic)
for v in plain neighbour mixed levels; do
	pr_fill "$v" 1 "$pr_backlog"
done
# Keep autovacuum from analyzing the leaves during these runs, which would
# make the stale scope known
for b in 0 1 2 3 4 5 6 7; do
	sql "ALTER TABLE inbox.entries_p$b SET (autovacuum_enabled = off)" >/dev/null
done
sql "VACUUM ANALYZE" >/dev/null
# After the ANALYZE: the statistics know nothing of this scope
pr_fill stale 1 "$pr_backlog"
[ "$(sql "SELECT count(*) FROM inbox.entries WHERE priority IS NOT NULL
		  AND inbox.bucket(scope, message_id) >> 11 = 0")" = 0 ] ||
	fail "priorities: the plain scope's leaf holds messages above the default"

# pr_run VARIANT: one run; prints its tps, then tops the backlog up
pr_run()
{
	local v=${1%-generic} opts="" tps left name
	name=${pr_name[$v]}
	[ "$v" != "$1" ] && opts="-c plan_cache_mode=force_generic_plan"
	sql "CHECKPOINT" >/dev/null
	tps=$(PGOPTIONS="$opts" pgbench_tps "priorities variant $1" -t "$((pr_tx / clients))" \
		-D scope="$name" -f "$here/work_one.sql") || exit 1
	left=$(sql "SELECT count(*) FROM inbox.entries WHERE scope = '$name' AND state = 'p'")
	[ "$left" -gt 0 ] || fail "priorities: $name ran out of messages"
	pr_fill "$v" "${pr_next[$v]}" "$((pr_backlog - left))"
	echo "$tps"
}

declare -A pr_tps=() pr_med=()
for ((r = 0; r < pr_rounds; r++)); do
	for ((i = 0; i < ${#pr_variants[@]}; i++)); do
		v=${pr_variants[(i + r) % ${#pr_variants[@]}]}
		# a subshell: pr_next is read back from the database
		tps=$(pr_run "$v") || exit 1
		pr_tps[$v]="${pr_tps[$v]:-} $tps"
		b=${v%-generic}
		pr_next[$b]=$(($(sql "SELECT max(substr(message_id, length('${pr_name[$b]}') + 2)::bigint)
							  FROM inbox.entries WHERE scope = '${pr_name[$b]}'") + 1))
	done
done

# Every completed message has exactly one order
bad=$(sql "SELECT count(*) FROM (SELECT e.message_id FROM inbox.entries e
		   LEFT JOIN orders o ON o.message_id = e.message_id
		   GROUP BY e.message_id, e.state HAVING (e.state = 'd') <> (count(o.order_id) = 1)) x")
[ "$bad" = 0 ] || fail "priorities: $bad messages whose order count disagrees with their state"
# In the mixed scope, no message of the default priority was taken while
# one at priority 5, due before that take, was still pending: takes ran
# within inbox.priority_age of every due, so priorities were strict
late=$(sql "SELECT count(*) FROM inbox.entries d
			 WHERE d.scope = '${pr_name[mixed]}' AND d.state = 'd' AND d.priority IS NULL
			   AND EXISTS (SELECT FROM inbox.entries h
							WHERE h.scope = d.scope AND h.priority = 5 AND h.state = 'p'
							  AND h.received_at < d.taken_at - interval '1 second')")
[ "$late" = 0 ] || fail "priorities: $late messages of the default priority taken before a due one at 5"

for b in 0 1 2 3 4 5 6 7; do
	sql "ALTER TABLE inbox.entries_p$b RESET (autovacuum_enabled)" >/dev/null
done

echo "| variant | transactions/s median | min | max | ratio to plain |"
echo "|---|---:|---:|---:|---:|"
read -r pr_ref _ <<<"$(stats "${pr_tps[plain]}")"
for v in "${pr_variants[@]}"; do
	read -r med min max <<<"$(stats "${pr_tps[$v]}")"
	awk -v v="$v" -v m="$med" -v lo="$min" -v hi="$max" -v r="$pr_ref" \
		'BEGIN { printf "| %s | %s | %s | %s | %.2f |\n", v, m, lo, hi, m / r }'
done
echo
echo "Every completed message has exactly one order; in the mixed scope, no message of the default priority was taken while one at priority 5 had waited pending."
echo
