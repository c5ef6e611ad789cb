#-------------------------------------------------------------------------
#
# retention.sh
#	  The retention benchmarks: purge throughput, the cost of a running
#	  purge to claims, steady state under the highest ingest the machine
#	  can push, and the table's size at steady state.
#
# Sourced by bench.sh after the claim benchmarks (alone with
# BENCH_SKIP_CLAIMS=1), on the same throwaway cluster, which preloads the
# library.  It uses bench.sh's knobs and helpers (sql, stats, fail,
# cluster_ticks, wait_backends, clk_tck, here, work).  Every phase runs in a
# fresh database of its own, created from base.sql, and the one
# before it is dropped, so no phase inherits another's dead rows or clocks
# (and the claim benchmark's scopes are gone before any retention is
# shortened).
#
# Settings change the way an operator changes them: ALTER SYSTEM and
# pg_reload_conf(), then a wait until a new session sees the new values.
# Throughout, inbox.idle_threshold is 30 days, so that no scope's clock
# ever pauses and "expired" is plain age: older than inbox.retention.
#
# test/bench/retention.sh
#
#-------------------------------------------------------------------------

naptime=1
idle_threshold=2592000			# 30 days
ingest_scopes=4

# set_system NAME VALUE [NAME VALUE ...]: ALTER SYSTEM SET each, reload, and
# wait until a new session sees every value (pg_settings.setting, that is in
# the setting's base unit: pass seconds for inbox.retention).
set_system()
{
	local args=() pairs="" tries
	while [ $# -gt 0 ]; do
		args+=(-c "ALTER SYSTEM SET $1 = '$2'")
		pairs="$pairs${pairs:+, }('$1', '$2')"
		shift 2
	done
	psql -X -q -v ON_ERROR_STOP=1 "${args[@]}" -c "SELECT pg_reload_conf()" >/dev/null
	for ((tries = 0; tries < 200; tries++)); do
		[ "$(sql "SELECT bool_and(s.setting = v.value) FROM (VALUES $pairs) AS v(name, value)
			LEFT JOIN pg_settings AS s USING (name)")" = t ] && return 0
		sleep 0.05
	done
	fail "the server did not take the settings $pairs"
}

# fresh_db NAME: a new database from base.sql, made current;
# the previous current database is dropped.
fresh_db()
{
	local old=$PGDATABASE
	createdb "$1"
	export PGDATABASE=$1
	psql -X -q -v ON_ERROR_STOP=1 -f "$here/base.sql" >/dev/null
	dropdb --force "$old"
}

# now_s: the time, in seconds with decimals
now_s()
{
	date +%s.%N
}

# calc EXPR [FORMAT]: awk arithmetic (the variables must be in the text)
calc()
{
	awk "BEGIN { printf \"${2:-%.1f}\", $1 }"
}

# ge X Y: "met" if X >= Y, else "NOT met"; le X Y likewise
ge()
{
	awk -v x="$1" -v y="$2" 'BEGIN { print (x >= y) ? "met" : "NOT met" }'
}
le()
{
	awk -v x="$1" -v y="$2" 'BEGIN { print (x <= y) ? "met" : "NOT met" }'
}

# counters SCOPE_PATTERN: "claims duplicates rows_purged" of the matching
# scopes, from inbox_stats (shared memory: needs the preload)
counters()
{
	sql "SELECT coalesce(sum(claims), 0) || ' ' || coalesce(sum(duplicates), 0) || ' ' ||
		coalesce(sum(rows_purged), 0) FROM inbox_stats WHERE scope LIKE '$1'"
}

# wait_no_purge_worker: until no purge worker of this database is running
# (after inbox.purge_enabled went off, the running one leaves before its
# next batch; the launcher goes on starting one a naptime, which leaves at
# once)
wait_no_purge_worker()
{
	local tries
	for ((tries = 0; tries < 600; tries++)); do
		[ "$(sql "SELECT count(*) FROM pg_stat_activity
			WHERE backend_type = 'inbox purge' AND datname = current_database()")" = 0 ] && return 0
		sleep 0.05
	done
	fail "a purge worker is still running 30 s after inbox.purge_enabled went off"
}

# want PHASE: whether BENCH_RETENTION_PHASES names PHASE
want()
{
	[[ " $ret_phases " == *" $1 "* ]]
}

leaves_size_sql="SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits
	WHERE inhparent = 'inbox.entries'::regclass"

echo "## Retention"
echo
echo "- started:    $(date -u '+%Y-%m-%d %H:%M:%S UTC'), load avg $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- retention:  inbox.retention = ${retention}s, inbox.idle_threshold = 30 days (no clock" \
	"ever pauses: expired means older than the retention), inbox.purge_naptime = ${naptime}s," \
	"inbox.purge_batch_size = 10000 (the default)"
echo "- every phase runs in a fresh database; autovacuum is off except in the steady-state phase"
echo

set_system inbox.purge_enabled off inbox.retention "$retention" \
	inbox.idle_threshold "$idle_threshold" inbox.purge_naptime "$naptime" autovacuum off

#
# Purge throughput: a backlog of expired entries, drained once by the
# background worker and once by inbox_purge() calls.
#
if want throughput; then

# build_backlog PREFIX: $backlog entries over $backlog_scopes scopes named
# PREFIX-1, PREFIX-2..., claimed by one big statement per scope (all at
# once), then backdated by a day, so all of them are expired; VACUUM
# ANALYZE and CHECKPOINT after, so the drain starts from a clean table.
build_backlog()
{
	local prefix=$1 k n pids=() got
	for ((k = 1; k <= backlog_scopes; k++)); do
		n=$((backlog / backlog_scopes + (k <= backlog % backlog_scopes ? 1 : 0)))
		psql -X -q -A -t -v ON_ERROR_STOP=1 -c "SELECT count(*) FILTER (WHERE
			inbox_claim('$prefix-$k', id, sha256(convert_to(id, 'UTF8'))))
			FROM (SELECT ($k::bigint * 1000000000000000 + i)::text AS id
				  FROM generate_series(1, $n) AS i) AS ids" >"$work/backlog.$k" &
		pids+=($!)
	done
	for k in "${!pids[@]}"; do
		wait "${pids[k]}" || fail "building the backlog of scope $prefix-$((k + 1)) failed"
	done
	# One statement is one transaction, so all of a scope's entries share
	# one received_at (its start).  Spread them as if they had come in at
	# 20,000 claims/s over all the scopes, a day ago: a purge sees them as
	# it sees a real backlog.  (All on one timestamp, the purge's observe
	# step would re-read every entry of the scope at every round: see
	# test/bench/README.md.)
	sql "UPDATE inbox.entries
		SET received_at = now() - interval '1 day'
			+ (message_id::bigint % 1000000000000000) * $backlog_scopes * interval '50 microseconds'
		WHERE scope LIKE '$prefix-%'" >/dev/null
	sql "VACUUM ANALYZE inbox.entries" >/dev/null
	sql "CHECKPOINT" >/dev/null
	got=$(sql "SELECT count(*) FROM inbox.entries WHERE scope LIKE '$prefix-%'
		AND received_at < now() - interval '$retention s'")
	[ "$got" = "$backlog" ] || fail "the backlog holds $got expired entries, expected $backlog"
}

# expired_left PREFIX: whether any entry of the PREFIX-* scopes is still
# expired, "t" or "f", and the rows purged from them so far.  An EXISTS,
# not a count(*), so that polling does not take a CPU away from the purge
# it measures.
expired_left()
{
	sql "SELECT CASE WHEN EXISTS (SELECT FROM inbox.entries WHERE scope LIKE '$1-%'
		AND received_at < now() - interval '$retention s') THEN 't' ELSE 'f' END || ' ' ||
		(SELECT coalesce(sum(rows_purged), 0) FROM inbox_stats WHERE scope LIKE '$1-%')"
}

# check_drained PREFIX ROWS_PURGED: nothing expired is left, by count(*),
# and the counters say every entry went
check_drained()
{
	local left
	left=$(sql "SELECT count(*) FROM inbox.entries WHERE scope LIKE '$1-%'")
	[ "$left" = 0 ] || fail "$left entries of the $1 backlog are left after the drain"
	[ "$2" = "$backlog" ] || fail "the $1 drain purged $2 entries by the counters, expected $backlog"
}

fresh_db inbox_drain

echo "### Purge throughput"
echo
echo "A backlog of $backlog expired entries over $backlog_scopes scopes (claimed, then backdated" \
	"by a day, VACUUM ANALYZE, CHECKPOINT), drained once by each path."
echo

# (a) the background worker
build_backlog worker
ticks0=$(cpu_mark)
t0=$(now_s)
set_system inbox.purge_enabled on
deadline=$(calc "$t0 + 600" "%d")
drained=1
t_first=""
while :; do
	t=$(now_s)
	read -r left so_far <<<"$(expired_left worker)"
	# the first poll that sees purged rows: the worker had started by then
	[ -z "$t_first" ] && [ "$so_far" != 0 ] && t_first=$t
	[ "$left" = f ] && break
	if [ "${t%.*}" -ge "$deadline" ]; then
		drained=0
		break
	fi
	sleep 0.2
done
t1=$(now_s)
set_system inbox.purge_enabled off
wait_no_purge_worker
worker_cpu=n/a
[ -n "$ticks0" ] && wait_backends && worker_cpu=$(calc "($(cluster_ticks) - $ticks0) / $clk_tck")
read -r _ _ worker_purged <<<"$(counters 'worker-%')"
if [ "$drained" = 1 ]; then
	check_drained worker "$worker_purged"
fi
worker_s=$(calc "$t1 - $t0" "%.2f")
worker_rate=$(calc "$worker_purged / ($t1 - $t0)" "%.0f")
worker_start=$(calc "${t_first:-$t1} - $t0" "%.2f")
worker_rate_first=$(calc "$worker_purged / ($t1 - ${t_first:-$t0})" "%.0f")
sql "VACUUM inbox.entries" >/dev/null

# (b) inbox_purge(), one call a transaction, until it returns 0
build_backlog sql
ticks0=$(cpu_mark)
calls=0
sql_purged=0
t0=$(now_s)
while :; do
	n=$(sql "SELECT inbox_purge()")
	calls=$((calls + 1))
	sql_purged=$((sql_purged + n))
	[ "$n" = 0 ] && break
	[ "$calls" -gt $((backlog / 1000 + 100)) ] && fail "inbox_purge() still returns rows after $calls calls"
done
t1=$(now_s)
sql_cpu=n/a
[ -n "$ticks0" ] && wait_backends && sql_cpu=$(calc "($(cluster_ticks) - $ticks0) / $clk_tck")
check_drained sql "$sql_purged"
read -r _ _ n <<<"$(counters 'sql-%')"
[ "$n" = "$sql_purged" ] || fail "inbox_purge() returned $sql_purged rows in all, the counters say $n"
sql_s=$(calc "$t1 - $t0" "%.2f")
sql_rate=$(calc "$sql_purged / ($t1 - $t0)" "%.0f")

cpu_per_row()
{
	[ "$1" = n/a ] && { echo n/a; return; }
	calc "$1 * 1000000 / $2" "%.1f"
}

echo "| path | rows purged | seconds | rows/s | server CPU s | server CPU µs/row |"
echo "|---|---:|---:|---:|---:|---:|"
if [ "$drained" = 1 ]; then
	echo "| background worker: from ALTER SYSTEM SET inbox.purge_enabled = on + reload until no" \
		"expired entry is left (polled every 0.2 s) | $worker_purged | $worker_s | $worker_rate |" \
		"$worker_cpu | $(cpu_per_row "$worker_cpu" "$worker_purged") |"
else
	echo "| background worker: NOT drained after $worker_s s (rows/s is what it purged in that time)" \
		"| $worker_purged | $worker_s | $worker_rate | $worker_cpu | $(cpu_per_row "$worker_cpu" "$worker_purged") |"
fi
echo "| \`SELECT inbox_purge()\`, one call a transaction (a new psql each), until it returns 0:" \
	"$calls calls | $sql_purged | $sql_s | $sql_rate | $sql_cpu | $(cpu_per_row "$sql_cpu" "$sql_purged") |"
echo
if [ -n "$t_first" ] && [ "$drained" = 1 ]; then
	echo "The worker's first purged rows showed $worker_start s after the switch (its pass starts" \
		"within a naptime, and the poll is every 0.2 s): from there it drained" \
		"$worker_rate_first rows/s."
	echo
fi
echo "Both must outrun the ingest they serve: target ≥ 20,000 rows/s (the ingest target below)."
echo
echo "| path | rows/s | target | |"
echo "|---|---:|---|---|"
echo "| background worker | $worker_rate | ≥ 20000 | $( [ "$drained" = 1 ] && ge "$worker_rate" 20000 || echo "NOT met (not drained)") |"
echo "| inbox_purge() loop | $sql_rate | ≥ 20000 | $(ge "$sql_rate" 20000) |"
echo

fi # throughput

#
# Claims with the purge running and without: the (c) transaction of the
# claim benchmark (claim.sql), rounds alternating inbox.purge_enabled on
# and off.  A run with the purge on starts with no backlog (the worker has
# drained what piled up while it was off, untimed), so it measures the
# steady purge of what expires during the run; the table holds more than
# a retention of entries from the warm-up on.
#
if want claims; then

set_system inbox.purge_enabled on
fresh_db inbox_claims
claims_run_no=0
declare -A purge_results purge_cpu

# claims_run MODE SECONDS LABEL: one pgbench run of claim.sql in scope
# "claims" with the purge MODE (on/off), which must be set already
claims_run()
{
	local mode=$1 secs=$2 label=$3 out processed failed tps n cpu_us
	local o0 o1 c0 c1 p0 p1 ticks0 ticks1 rows_at_start
	claims_run_no=$((claims_run_no + 1))
	local base=$((claims_run_no * 10000000000000000))

	sql "CHECKPOINT" >/dev/null
	o0=$(sql "SELECT count(*) FROM orders")
	read -r c0 _ p0 <<<"$(counters claims)"
	rows_at_start=$(sql "SELECT count(*) FROM inbox.entries WHERE scope = 'claims'")
	ticks0=$(cpu_mark)
	if ! out=$(pgbench -n -M prepared -c "$clients" -j "$jobs" -T "$secs" \
		-D base="$base" -D span=9999999999999999 -D scope=claims \
		-f "$here/claim.sql" 2>&1); then
		echo "$out" >&2
		fail "pgbench failed on the claim run with the purge $mode"
	fi
	ticks1=$(cpu_mark)
	o1=$(sql "SELECT count(*) FROM orders")
	read -r c1 _ p1 <<<"$(counters claims)"

	processed=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
	failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' <<<"$out")
	tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' <<<"$out")
	if [ -z "$processed" ] || [ -z "$tps" ] || [ "${failed:-0}" != 0 ]; then
		echo "$out" >&2
		fail "cannot read a clean result of the claim run with the purge $mode from pgbench"
	fi
	n=$processed
	[ $((o1 - o0)) = "$n" ] || fail "claim run $claims_run_no: $n transactions added $((o1 - o0)) orders"
	[ $((c1 - c0)) = "$n" ] || fail "claim run $claims_run_no: $n transactions counted $((c1 - c0)) claims"
	# A run with the purge off must purge nothing, one with it on must
	# have purged: otherwise the comparison compares nothing.
	if [ "$mode" = off ] && [ "$p1" != "$p0" ]; then
		fail "claim run $claims_run_no purged $((p1 - p0)) rows with the purge off"
	fi
	if [ "$mode" = on ] && [ "$p1" = "$p0" ] && [ "$label" != warm-up ]; then
		fail "claim run $claims_run_no purged nothing with the purge on"
	fi
	cpu_us=$(cpu_per_tx "$ticks0" "$ticks1" "$n")
	printf '| %s | %s | %.1f | %d | %d | %d | %s |\n' "$label" "$mode" "$tps" "$n" \
		"$rows_at_start" $((p1 - p0)) "$cpu_us"
	if [ "$label" != warm-up ]; then
		purge_results[$mode]="${purge_results[$mode]:-} $tps"
		purge_cpu[$mode]="${purge_cpu[$mode]:-} $cpu_us"
	fi
}

# purge_mode on|off: switch the worker; "on" also waits until it has
# drained whatever expired while it was off (no entry older than the
# retention plus two naptimes), so that the run measures the steady purge
purge_mode()
{
	local tries
	set_system inbox.purge_enabled "$1"
	if [ "$1" = off ]; then
		wait_no_purge_worker
		return
	fi
	for ((tries = 0; tries < 3000; tries++)); do
		[ "$(sql "SELECT EXISTS (SELECT FROM inbox.entries WHERE scope = 'claims'
			AND received_at < now() - interval '$((retention + 2 * naptime)) s')")" = f ] && return 0
		sleep 0.2
	done
	fail "the purge did not drain the claims scope within 600 s"
}

claims_warmup=$((retention + 10))
echo "### Claims with the purge running and without"
echo
echo "The (c) transaction (claim.sql: inbox_claim + the business INSERT), pgbench -c $clients" \
	"-j $jobs -M prepared -T $ret_run_seconds, $ret_rounds round(s) each with the purge on and off," \
	"the order alternating; CHECKPOINT before every run.  Before a run with the purge on, the" \
	"worker drains what expired while it was off (untimed).  A ${claims_warmup}s warm-up with the" \
	"purge on comes first, so the table holds more than a retention of entries from the first" \
	"timed run on.  Autovacuum is off (as in the claim benchmark)."
echo
echo "| run | purge | tps | transactions | entries at start | rows purged during the run | server CPU µs/tx |"
echo "|---|---|---:|---:|---:|---:|---:|"
claims_run on "$claims_warmup" warm-up
for ((r = 0; r < ret_rounds; r++)); do
	if ((r % 2 == 0)); then order=(on off); else order=(off on); fi
	for mode in "${order[@]}"; do
		purge_mode "$mode"
		claims_run "$mode" "$ret_run_seconds" "round $((r + 1))"
	done
done
echo
read -r tps_on on_lo on_hi <<<"$(stats "${purge_results[on]}")"
read -r tps_off off_lo off_hi <<<"$(stats "${purge_results[off]}")"
cpu_on=n/a
cpu_off=n/a
case "${purge_cpu[on]}${purge_cpu[off]}" in
	*n/a*) ;;
	*) read -r cpu_on _ <<<"$(stats "${purge_cpu[on]}")"
	   read -r cpu_off _ <<<"$(stats "${purge_cpu[off]}")" ;;
esac
purge_ratio=$(calc "$tps_on / $tps_off" "%.3f")
echo "| purge | median tps | min | max | server CPU µs/tx |"
echo "|---|---:|---:|---:|---:|"
echo "| on | $tps_on | $on_lo | $on_hi | ${cpu_on%.0} |"
echo "| off | $tps_off | $off_lo | $off_hi | ${cpu_off%.0} |"
echo
echo "| ratio | value | target | |"
echo "|---|---:|---|---|"
echo "| tps with / without the purge | $purge_ratio | ≥ 0.90 | $(ge "$purge_ratio" 0.90) |"
if [ "$cpu_on" != n/a ]; then
	echo "| server CPU µs/tx with / without (context) | $(calc "$cpu_on / $cpu_off" "%.3f") | | |"
fi
echo

fi # claims

#
# Steady state: the highest ingest this machine can push (ingest.sql:
# $ingest_batch claims a transaction, synchronous_commit off for these
# sessions only), the worker on, autovacuum on, for $cycles retentions.
# A sampler reads the counters every $sample_seconds s.
#
if want steady; then

fresh_db inbox_steady
av_settings=(autovacuum on autovacuum_naptime 1 autovacuum_vacuum_scale_factor 0.05
	autovacuum_vacuum_insert_scale_factor 0.05 autovacuum_vacuum_cost_limit 2000)
set_system inbox.purge_enabled on "${av_settings[@]}"
sql "CHECKPOINT" >/dev/null
duration=$((cycles * retention))
samples=$work/samples
sample_sql="SELECT extract(epoch FROM clock_timestamp())::numeric(20,3),
	coalesce(sum(claims), 0), coalesce(sum(duplicates), 0), coalesce(sum(rows_purged), 0),
	coalesce(extract(epoch FROM max(purge_lag))::numeric(10,1), 0),
	coalesce(sum(entries_retained), 0),
	($leaves_size_sql),
	(SELECT coalesce(sum(n_dead_tup), 0) || ' ' || coalesce(sum(autovacuum_count), 0)
	   FROM pg_stat_all_tables WHERE schemaname = 'inbox' AND relname LIKE 'entries\\_p%')
	FROM inbox_stats WHERE scope LIKE 'ingest-%'"
sample()
{
	psql -X -q -A -t -F ' ' -v ON_ERROR_STOP=1 -c "$sample_sql"
}

sample >"$samples"
read -r t_start _ <"$samples"
rm -f "$work/sampler.stop"
(
	i=0
	while [ ! -e "$work/sampler.stop" ]; do
		i=$((i + 1))
		# Every $sample_seconds s, plus an offset that moves by 0.37 s a
		# sample (modulo 1 s): the worker's passes start every naptime
		# (1 s) on the dot, and samples in step with them would read
		# purge_lag at the same point of every pass.
		sleep "$(awk -v t="$t_start" -v i="$i" -v s="$sample_seconds" -v now="$(now_s)" \
			'BEGIN { o = i * 0.37; d = t + i * s + o - int(o) - now; printf "%.3f", (d > 0 ? d : 0) }')"
		[ -e "$work/sampler.stop" ] && break
		sample >>"$samples" || exit 1
	done
) &
sampler=$!
ticks0=$(cpu_mark)
# The purge goes off as the ingest ends: a purge that went on after the
# last claim would shrink the live rows (a retention's worth of entries,
# less what expires meanwhile) under a table sized for more, and make the
# size ratio below worse than any moment of the steady state.
(
	sleep "$duration"
	set_system inbox.purge_enabled off
) &
stopper=$!
if ! out=$(PGOPTIONS="-c synchronous_commit=off" pgbench -n -M prepared -c "$ingest_clients" \
	-j "$jobs" -T "$duration" -D scopes="$ingest_scopes" -D batch="$ingest_batch" \
	-f "$here/ingest.sql" 2>&1); then
	echo "$out" >&2
	touch "$work/sampler.stop"
	wait "$stopper" || true
	fail "pgbench failed on the ingest"
fi
touch "$work/sampler.stop"
wait "$stopper" || fail "switching the purge off at the end of the ingest failed"
wait_no_purge_worker
wait "$sampler" || fail "the sampler failed"
# The last sample is taken now; one the sampler took just before, less
# than half an interval earlier, would only add a meaningless rate.
sample >"$work/last_sample"
read -r t_last _ <"$work/last_sample"
read -r t_prev _ < <(tail -n 1 "$samples")
if [ "$(calc "($t_last - $t_prev) < $sample_seconds / 2" "%d")" = 1 ] && [ "$(wc -l <"$samples")" -gt 1 ]; then
	sed -i '$d' "$samples"
fi
cat "$work/last_sample" >>"$samples"
steady_cpu=""
[ -n "$ticks0" ] && wait_backends && steady_cpu=$(cluster_ticks)
set_system autovacuum off
load_steady=$(cut -d' ' -f1-3 /proc/loadavg)

processed=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' <<<"$out")
ingest_tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' <<<"$out")
if [ -z "$processed" ] || [ -z "$ingest_tps" ] || [ "${failed:-0}" != 0 ]; then
	echo "$out" >&2
	fail "cannot read a clean result of the ingest from pgbench"
fi
read -r claims dups purged <<<"$(counters 'ingest-%')"
[ $((claims + dups)) = $((processed * ingest_batch)) ] ||
	fail "the ingest ran $processed transactions of $ingest_batch claims, the counters say" \
		"$claims claims and $dups duplicates"
live=$(sql "SELECT count(*) FROM inbox.entries WHERE scope LIKE 'ingest-%'")
[ "$live" = $((claims - purged)) ] ||
	fail "inbox.entries holds $live entries, but $claims were claimed and $purged purged"

#
# The size at the end: a plain VACUUM, then all leaves with their indexes
# against the live rows copied into a fresh table with the same columns
# and the same indexes, inserted in the order they arrived with the
# indexes in place, as a table that never purged would hold them (and
# VACUUMed too, for the same visibility map and free space map forks).
#
# index_kind_sql: what an index of pg_index "i" is, by its definition
# rather than its name (the copy's indexes are named after the copy)
index_kind_sql="CASE WHEN i.indisprimary THEN 'primary key'
	WHEN i.indpred IS NULL THEN '(scope, received_at)' ELSE 'partial indexes' END"

# sizes RELATIONS_SQL: "total heap pkey received_at_index partial_indexes"
# in bytes, summed over the relations (heap: pg_table_size, with its FSM
# and VM forks and TOAST).  The partial indexes (since 0.3.0 the one on
# messages not yet done) hold nothing for claims.
sizes()
{
	sql "SELECT (SELECT sum(pg_total_relation_size(r)) || ' ' || sum(pg_table_size(r))
				   FROM ($1) AS rels(r)) || ' ' ||
			string_agg(coalesce(b, 0)::text, ' ' ORDER BY k)
		FROM (VALUES (1, 'primary key'), (2, '(scope, received_at)'), (3, 'partial indexes'))
			 AS kinds(k, kind)
		LEFT JOIN (SELECT $index_kind_sql AS kind, sum(pg_relation_size(i.indexrelid)) AS b
					 FROM pg_index AS i WHERE i.indrelid IN ($1) GROUP BY 1) AS x USING (kind)"
}
leaves_sql="SELECT inhrelid FROM pg_inherits WHERE inhparent = 'inbox.entries'::regclass"
read -r size_steady steady_heap steady_pkey steady_rcv steady_part <<<"$(sizes "$leaves_sql")"
sql "VACUUM inbox.entries" >/dev/null
read -r size_total size_heap size_pkey size_rcv size_part <<<"$(sizes "$leaves_sql")"
# The same again in inbox.entries' own layout (its hash partitions), for
# context: a transaction's entries share one received_at, and an index that
# holds all of them deduplicates them into fewer tuples than eight leaves'
# indexes can, so the single table flatters the live size of multi-claim
# transactions.
psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<'EOF'
CREATE TABLE live_copy (LIKE inbox.entries INCLUDING ALL);
INSERT INTO live_copy SELECT * FROM inbox.entries ORDER BY received_at;
VACUUM live_copy;
SELECT format('CREATE TABLE live_copy_part (LIKE inbox.entries INCLUDING ALL) PARTITION BY %s',
			  pg_get_partkeydef('inbox.entries'::regclass))
\gexec
SELECT format('CREATE TABLE live_copy_part_%s PARTITION OF live_copy_part %s', c.relname,
			  pg_get_expr(c.relpartbound, c.oid))
  FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'inbox.entries'::regclass
\gexec
INSERT INTO live_copy_part SELECT * FROM inbox.entries ORDER BY received_at;
VACUUM live_copy_part;
EOF
read -r copy_total copy_heap copy_pkey copy_rcv copy_part <<<"$(sizes "SELECT 'live_copy'::regclass")"
read -r pcopy_total pcopy_heap pcopy_pkey pcopy_rcv pcopy_part <<<"$(sizes "SELECT inhrelid FROM pg_inherits
	WHERE inhparent = 'live_copy_part'::regclass")"
size_ratio=$(calc "$size_total / $copy_total" "%.2f")
bytes_per_row=$(calc "$copy_total / $live" "%.2f")

echo "### Steady state at the highest ingest"
echo
echo "ingest.sql: one statement claims $ingest_batch fresh ids a transaction, in $ingest_scopes" \
	"scopes; pgbench -c $ingest_clients -j $jobs -M prepared -T $duration ($cycles retentions)," \
	"synchronous_commit off for these sessions only; the worker on.  Autovacuum on, with" \
	"settings for a queue-like table at this time scale (a table that turns over every" \
	"${retention}s): $(printf '%s = %s, ' "${av_settings[@]:2}" | sed 's/, $//').  Sampled every" \
	"${sample_seconds}s from inbox_stats (claims, rows_purged, max purge_lag, entries_retained)," \
	"pg_total_relation_size of the leaves and pg_stat_all_tables; rows = claims − rows purged."
echo

awk -v bpr="$bytes_per_row" '
	function mb(b) { return sprintf("%.1f", b / 1048576) }
	NR == 1 { t0 = $1; pt = $1; pc = $2; pp = $4; next }
	{
		dt = $1 - pt
		printf "| %.1f | %.0f | %.0f | %.1f | %d | %d | %d | %d | %s | %.2f |\n",
			$1 - t0, ($2 - pc) / dt, ($4 - pp) / dt, $5, $2 - $4, $6, $8, $9, mb($7),
			(($2 - $4) > 0 ? $7 / (($2 - $4) * bpr) : 0)
		pt = $1; pc = $2; pp = $4
	}' "$samples" >"$work/sample_rows"
echo "| t (s) | claims/s | rows purged/s | purge_lag (s) | rows | entries_retained | dead tuples (stats) | autovacuums | size (MB) | size / live size (est.) |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
cat "$work/sample_rows"
echo

#
# Per retention cycle: the sample nearest to the end of each cycle.  Cycle 1
# has nothing to purge yet (nothing is a retention old); from cycle 2 on
# the purge has steady work.  "rows / one retention of ingest" divides the
# rows at the end of a cycle by what the cycle's claims/s bring in over a
# retention: a purge that keeps up holds that much plus its lag, one that
# falls behind holds more and more.  It is the row count's growth with the
# swings of the ingest (another load on the machine, say) taken out.
#
awk -v r="$retention" -v n="$cycles" -v bpr="$bytes_per_row" '
	{ t[NR] = $1; c[NR] = $2; p[NR] = $4; lag[NR] = $5; size[NR] = $7; m = NR }
	END {
		prev = 1
		for (k = 1; k <= n; k++) {
			best = 0
			for (i = 1; i <= m; i++) {
				d = t[i] - t[1] - k * r; if (d < 0) d = -d
				if (best == 0 || d < bestd) { best = i; bestd = d }
			}
			maxlag = 0
			for (i = prev + 1; i <= best; i++) if (lag[i] > maxlag) maxlag = lag[i]
			dt = t[best] - t[prev]
			rows = c[best] - p[best]
			cr = (dt > 0 ? (c[best] - c[prev]) / dt : 0)
			printf "%d %.1f %.0f %.0f %.1f %d %.3f %d %.2f\n", k, t[best] - t[1], cr,
				(dt > 0 ? (p[best] - p[prev]) / dt : 0), maxlag, rows,
				(cr > 0 ? rows / (cr * r) : 0), size[best],
				(rows > 0 ? size[best] / (rows * bpr) : 0)
			prev = best
		}
	}' "$samples" >"$work/cycles"
echo "| cycle | ends at (s) | claims/s | rows purged/s | max purge_lag (s) | rows at end | rows / one retention of ingest | size at end (MB) | size / live size (est.) |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
awk '{ printf "| %d | %.1f | %d | %d | %.1f | %d | %.3f | %.1f | %.2f |\n", $1, $2, $3, $4, $5, $6, $7, $8 / 1048576, $9 }' "$work/cycles"
echo
echo "The estimated size ratio divides the size by rows × the bytes per live row of the fresh copy below."
echo

ingest_rate=$(calc "$claims / ($duration)" "%.0f")
# Steady cycles: 2 to the last.  Their rates, the largest rows / one
# retention of ingest, the raw row count's growth from the end of cycle 2
# to the end of the last, and their largest purge_lag.
read -r steady_claims steady_purged steady_lag steady_rows rows2 rowsn <<<"$(awk '
	NR >= 2 { c += $3; p += $4; k++; if ($5 > lag) lag = $5; if ($7 > rr) rr = $7 }
	NR == 2 { r2 = $6 }
	{ rn = $6 }
	END { printf "%.0f %.0f %.1f %.3f %d %d\n", c / k, p / k, lag, rr, r2, rn }' "$work/cycles")"
growth=$(calc "$rowsn / $rows2" "%.3f")
lag_limit=$((5 * naptime))
rows_limit=$(calc "1 + $lag_limit / $retention" "%.2f")
rows_status=$(le "$steady_rows" "$rows_limit")
lag_status=$(le "$steady_lag" "$lag_limit")
if [ "$rows_status" = met ] && [ "$lag_status" = met ]; then keeps=met; else keeps="NOT met"; fi

echo "| measure | value | target | |"
echo "|---|---:|---|---|"
echo "| ingest over the whole run (claims/s, from the counters; pgbench: $(calc "$ingest_tps" "%.0f") tx/s × $ingest_batch) | $ingest_rate | ≥ 20000 | $(ge "$ingest_rate" 20000) |"
echo "| claims/s, cycles 2-$cycles | $steady_claims | (context) | |"
echo "| rows purged/s, cycles 2-$cycles | $steady_purged | (context) | |"
echo "| largest rows / one retention of ingest, cycles 2-$cycles (the rows stop growing) | $steady_rows | ≤ $rows_limit (one retention + 5 naptimes) | $rows_status |"
echo "| largest purge_lag sampled in cycles 2-$cycles (s) | $steady_lag | ≤ $lag_limit (5 naptimes) | $lag_status |"
echo "| the purge keeps up with the ingest | | both of the above | $keeps |"
echo "| rows at the end of cycle $cycles / at the end of cycle 2, raw (context: follows the ingest's swings) | $growth | | |"
echo "| duplicates among the claims (random ids colliding) | $dups | (context) | |"
if [ -n "$steady_cpu" ]; then
	echo "| server CPU µs per claim (claims, purge and autovacuum) | $(calc "($steady_cpu - $ticks0) * 1000000 / $clk_tck / $claims") | (context) | |"
fi
echo
if [ "$(ge "$ingest_rate" 20000)" = met ]; then
	echo "This machine reached the 20,000 claims/s of ingest: $ingest_rate claims/s, purged as it came in: $keeps."
else
	echo "This machine did NOT reach 20,000 claims/s of ingest: the most it pushed was $ingest_rate" \
		"claims/s (load avg at the end: $load_steady), purged as it came in: $keeps."
fi
echo
echo "#### Size at steady state"
echo
mb()
{
	calc "$1 / 1048576"
}
echo "| | rows | heap (MB) | primary key (MB) | (scope, received_at) (MB) | partial indexes (MB) | total (MB) |"
echo "|---|---:|---:|---:|---:|---:|---:|"
echo "| inbox.entries, all leaves, at the end of the ingest | $live | $(mb "$steady_heap") |" \
	"$(mb "$steady_pkey") | $(mb "$steady_rcv") | $(mb "$steady_part") | $(mb "$size_steady") |"
echo "| inbox.entries, all leaves, after a plain VACUUM | $live | $(mb "$size_heap") |" \
	"$(mb "$size_pkey") | $(mb "$size_rcv") | $(mb "$size_part") | $(mb "$size_total") |"
echo "| the live rows alone: a fresh table, same columns and indexes | $live | $(mb "$copy_heap") |" \
	"$(mb "$copy_pkey") | $(mb "$copy_rcv") | $(mb "$copy_part") | $(mb "$copy_total") |"
echo "| the live rows alone, in inbox.entries' partitions (context) | $live | $(mb "$pcopy_heap") |" \
	"$(mb "$pcopy_pkey") | $(mb "$pcopy_rcv") | $(mb "$pcopy_part") | $(mb "$pcopy_total") |"
echo
echo "| ratio | value | target | |"
echo "|---|---:|---|---|"
echo "| size after VACUUM / live size | $size_ratio | ≤ 1.5 | $(le "$size_ratio" 1.5) |"
echo "| heap / live heap (context) | $(calc "$size_heap / $copy_heap" "%.2f") | | |"
echo "| primary key / live primary key (context) | $(calc "$size_pkey / $copy_pkey" "%.2f") | | |"
echo "| (scope, received_at) / live (scope, received_at) (context) | $(calc "$size_rcv / $copy_rcv" "%.2f") | | |"
echo "| size at the end of the ingest / live size (context) | $(calc "$size_steady / $copy_total" "%.2f") | | |"
echo "| size after VACUUM / live size in the same partitions (context) | $(calc "$size_total / $pcopy_total" "%.2f") | | |"
echo

#
# Where the indexes' extra size is: pgstatindex (contrib pgstattuple, if
# it is installed) over the leaves' indexes after the VACUUM, against the
# copy's.  Context only: nothing fails without it.
#
if psql -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION pgstattuple" >/dev/null 2>&1; then
	echo "| index (after the VACUUM) | leaf pages | avg leaf density (%) | deleted pages | empty pages |"
	echo "|---|---:|---:|---:|---:|"
	sql "SELECT '| ' || k || ' | ' || sum(leaf_pages) || ' | ' ||
			coalesce(round((sum(avg_leaf_density * leaf_pages) / nullif(sum(leaf_pages), 0))::numeric, 1)::text,
					 'n/a') || ' | ' ||
			sum(deleted_pages) || ' | ' || sum(empty_pages) || ' |'
		FROM (SELECT CASE WHEN i.indrelid = 'live_copy'::regclass THEN 'copy: ' ELSE 'inbox.entries: ' END ||
					 $index_kind_sql AS k,
					 s.*
				FROM pg_index AS i, pgstatindex(i.indexrelid) AS s
			   WHERE i.indrelid IN ($leaves_sql) OR i.indrelid = 'live_copy'::regclass) AS x
		GROUP BY k ORDER BY k LIKE 'copy%', k DESC"
	echo
else
	echo "(pgstattuple is not installed: no index page statistics.)"
	echo
fi

fi # steady

# Leave the cluster as bench.sh set it up for whatever runs next: its
# postgresql.conf settings (the worker off, autovacuum off, the default
# retention), and no database of this part.
psql -X -q -v ON_ERROR_STOP=1 -c "ALTER SYSTEM RESET ALL" -c "SELECT pg_reload_conf()" >/dev/null
for ((tries = 0; tries < 200; tries++)); do
	[ "$(sql "SELECT current_setting('inbox.retention') = '7d' AND current_setting('autovacuum') = 'off'
		AND current_setting('inbox.purge_enabled') = 'off'")" = t ] && break
	sleep 0.05
done
[ "$tries" -lt 200 ] || fail "the server did not go back to its settings after ALTER SYSTEM RESET ALL"
old_db=$PGDATABASE
export PGDATABASE=postgres
[ "$old_db" = postgres ] || dropdb --force "$old_db"
