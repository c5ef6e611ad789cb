#!/bin/bash
#-------------------------------------------------------------------------
#
# bench.sh
#	  What does a claim cost?  pgbench ratios of the consumer transaction
#	  with inbox_claim against the bare business transaction and against
#	  the hand-written SQL inbox, plus a check that a long claiming session
#	  does not grow its backend's memory.  Then retention (retention.sh):
#	  purge throughput, claims with the purge running, steady state under
#	  the highest ingest, and the table's size at steady state.
#
# Absolute tps depend on the machine; the ratios are the result.  All
# variants run on the same throwaway cluster, in an order that rotates
# every round, and the median of the rounds is reported, so that drift
# (tables growing, other load on the machine) spreads over all of them.
#
# The cluster keeps fsync and synchronous_commit on: an inbox exists to
# make an effect durable exactly once, so a figure that does not pay for
# the commit's flush would flatter everything and compare nothing.  It
# preloads the library, as production does (shared_preload_libraries =
# 'inbox': the retention worker and the counters of inbox_stats), with the
# worker switched off (inbox.purge_enabled = off) while claims are measured.
#
# Run by "make bench" (test/tools/run.sh) as an unprivileged OS user with the
# PostgreSQL bindir first on PATH; the extension must be installed.  Knobs
# (environment): BENCH_SECONDS, BENCH_ROUNDS, BENCH_CLIENTS, BENCH_JOBS,
# BENCH_MEMORY_CLAIMS, BENCH_DUP_IDS, BENCH_SKIP_CLAIMS, BENCH_VARIANTS, against the
# release (versus.sh) BENCH_SKIP_VERSUS and BENCH_VERSUS_*, and for retention
# BENCH_SKIP_RETENTION, BENCH_RETENTION_SECONDS, BENCH_PURGE_BACKLOG,
# BENCH_PURGE_SCOPES, BENCH_RETENTION_RUN_SECONDS, BENCH_RETENTION_ROUNDS,
# BENCH_RETENTION_CYCLES, BENCH_INGEST_CLIENTS, BENCH_INGEST_BATCH,
# BENCH_SAMPLE_SECONDS, BENCH_RETENTION_PHASES, for ordered groups
# BENCH_SKIP_GROWTH, BENCH_GROWTH_FILL, BENCH_GROWTH_FILL_ROUNDS,
# BENCH_GROWTH_TRANSACTIONS, BENCH_GROWTH_ROUNDS, BENCH_GROWTH_CLIENTS,
# BENCH_SKIP_GROUPS, BENCH_GROUPS_BACKLOGS, BENCH_GROUPS_GROUPS,
# BENCH_GROUPS_TRANSACTIONS, BENCH_GROUPS_PGMQ_TRANSACTIONS, BENCH_GROUPS_ROUNDS,
# for priorities BENCH_SKIP_PRIORITIES, BENCH_PRIORITIES_BACKLOG,
# BENCH_PRIORITIES_TRANSACTIONS, BENCH_PRIORITIES_ROUNDS, for the outbox
# BENCH_SKIP_OUTBOX, BENCH_OUTBOX_SECONDS, BENCH_OUTBOX_ROUNDS, and for the
# relay BENCH_SKIP_RELAY, BENCH_RELAY_BASELINE, BENCH_RELAY_MESSAGES, BENCH_RELAY_ROUNDS,
# BENCH_RELAY_RATE, BENCH_RELAY_LATENCY_SECONDS, and for ingest from the
# brokers BENCH_SKIP_BROKERS, BENCH_BROKERS_MESSAGES, BENCH_BROKERS_ROUNDS.  See
# test/bench/README.md.
#
# test/bench/bench.sh
#
#-------------------------------------------------------------------------
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)

seconds=${BENCH_SECONDS:-20}
rounds=${BENCH_ROUNDS:-3}
clients=${BENCH_CLIENTS:-8}
jobs=${BENCH_JOBS:-2}
memory_claims=${BENCH_MEMORY_CLAIMS:-1000000}
dup_ids=${BENCH_DUP_IDS:-100000}
skip_claims=${BENCH_SKIP_CLAIMS:-0}
skip_retention=${BENCH_SKIP_RETENTION:-0}
retention=${BENCH_RETENTION_SECONDS:-15}
backlog=${BENCH_PURGE_BACKLOG:-1000000}
backlog_scopes=${BENCH_PURGE_SCOPES:-4}
ret_run_seconds=${BENCH_RETENTION_RUN_SECONDS:-30}
ret_rounds=${BENCH_RETENTION_ROUNDS:-3}
cycles=${BENCH_RETENTION_CYCLES:-5}
ingest_clients=${BENCH_INGEST_CLIENTS:-2}
ingest_batch=${BENCH_INGEST_BATCH:-50}
sample_seconds=${BENCH_SAMPLE_SECONDS:-3}
ret_phases=${BENCH_RETENTION_PHASES:-throughput claims steady}

for knob in seconds rounds clients jobs memory_claims dup_ids retention backlog \
	backlog_scopes ret_run_seconds ret_rounds cycles ingest_clients ingest_batch \
	sample_seconds; do
	if ! [[ ${!knob} =~ ^[1-9][0-9]*$ ]]; then
		echo "bench.sh: $knob must be a positive integer, not \"${!knob}\"" >&2
		exit 2
	fi
done
for knob in skip_claims skip_retention; do
	if ! [[ ${!knob} =~ ^[01]$ ]]; then
		echo "bench.sh: BENCH_${knob^^} must be 0 or 1, not \"${!knob}\"" >&2
		exit 2
	fi
done
for phase in $ret_phases; do
	case $phase in
		throughput | claims | steady) ;;
		*) echo "bench.sh: BENCH_RETENTION_PHASES: unknown phase \"$phase\"" \
			"(throughput, claims, steady)" >&2
		   exit 2 ;;
	esac
done
if [ "$ret_run_seconds" -le "$retention" ]; then
	# Otherwise a run with the purge on would end before anything it
	# claimed could expire.
	echo "bench.sh: BENCH_RETENTION_RUN_SECONDS must be longer than BENCH_RETENTION_SECONDS" >&2
	exit 2
fi
if [ "$cycles" -lt 3 ]; then
	# Cycle 1 has nothing to purge; "stops growing" needs two cycles after it.
	echo "bench.sh: BENCH_RETENTION_CYCLES must be at least 3" >&2
	exit 2
fi
if [ "$sample_seconds" -gt "$retention" ]; then
	echo "bench.sh: BENCH_SAMPLE_SECONDS must be at most BENCH_RETENTION_SECONDS" >&2
	exit 2
fi
if [ "$ingest_batch" -gt 999 ] || [ "$backlog_scopes" -gt 64 ] || [ "$backlog" -lt "$backlog_scopes" ]; then
	# ingest.sql's ids are r * 1000 + i; each backlog scope has ids of its own
	echo "bench.sh: BENCH_INGEST_BATCH must be at most 999, BENCH_PURGE_SCOPES at most 64" \
		"and at most BENCH_PURGE_BACKLOG" >&2
	exit 2
fi
if [ "$memory_claims" -lt 20000 ]; then
	# The warm-up alone is 10,000 claims, and the check needs some after it.
	echo "bench.sh: BENCH_MEMORY_CLAIMS must be at least 20000" >&2
	exit 2
fi
if [ "$rounds" -gt 150 ]; then
	echo "bench.sh: BENCH_ROUNDS must be at most 150 (see the id ranges below)" >&2
	exit 2
fi

for prog in initdb pg_ctl psql pgbench postgres createdb dropdb; do
	command -v "$prog" >/dev/null || {
		echo "bench.sh: $prog not found; put PostgreSQL's bindir first on PATH" >&2
		exit 2
	}
done

#
# The throwaway cluster (test/tools/cluster.sh): reached through a socket
# in its own directory only, so no port can clash with another cluster on
# the machine and nothing outside this user can connect to it; stopped and
# removed on any exit, including ^C.
#
# shellcheck source=test/tools/cluster.sh
. "$here/../tools/cluster.sh"
cluster_create bench $((20000 + RANDOM % 20000)) --no-sync
export PGDATABASE=bench
# shellcheck disable=SC2034	# retention.sh keeps its files in $work
work=$cluster_dir
data=$cluster_data

#
# Settings.  fsync, synchronous_commit and full_page_writes are written out
# even where they are the default: they are what this benchmark is about.
# Checkpoints happen only where the script asks for them (before each run,
# so that every run pays the same full-page images after a checkpoint), and
# autovacuum is off so that it cannot land in one variant's run and not in
# another's; the tables are insert-only, so there is nothing for it to
# clean up anyway.  The library is preloaded, as in production, but its
# purge worker is off: the claim variants measure claims only (retention.sh
# switches it, and autovacuum, with ALTER SYSTEM where it needs them).
#
cluster_conf <<EOF

# test/bench/bench.sh
max_connections = 80
shared_buffers = 256MB
fsync = on
synchronous_commit = on
full_page_writes = on
wal_level = replica
max_wal_size = 8GB
checkpoint_timeout = 1h
autovacuum = off
log_checkpoints = on
shared_preload_libraries = 'inbox'
inbox.purge_enabled = off
EOF

cluster_start
createdb bench

sql()
{
	psql -X -q -A -t -v ON_ERROR_STOP=1 -c "$1"
}

fail()
{
	echo "bench.sh: $*" >&2
	exit 1
}

# pgbench_tps WHAT ARGS...: one throughput run, pgbench with the clients,
# jobs and prepared statements of every such run and ARGS; prints its tps.
# Fails, naming WHAT and showing pgbench's output, if pgbench fails or
# reports no tps.
pgbench_tps()
{
	local what=$1 out tps
	shift
	if ! out=$(pgbench -n -M prepared -c "$clients" -j "$jobs" "$@" 2>&1); then
		echo "$out" >&2
		fail "pgbench failed on $what"
	fi
	tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' <<<"$out")
	[ -n "$tps" ] || { echo "$out" >&2; fail "no tps for $what"; }
	echo "$tps"
}

# stats LIST: "median min max" of whitespace-separated numbers
stats()
{
	tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -g | awk '
		{ x[NR] = $1 }
		END {
			m = (NR % 2) ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2
			printf "%.1f %.1f %.1f\n", m, x[1], x[NR]
		}'
}

#
# Server CPU per transaction.  On a small machine the variants are bound by
# CPU rather than by the commit's flush, and CPU time per transaction is
# much less disturbed by other load on the machine than tps is, so it is
# reported next to tps.  It is the CPU of every process of the cluster
# during the run: the backends, which have exited and been reaped by then
# (the postmaster's cutime and cstime), plus the auxiliary processes that
# are still alive (walwriter, checkpointer...).  Linux /proc only; without
# it the column says n/a.
#
postmaster_pid=$(head -n 1 "$data/postmaster.pid")
clk_tck=$(getconf CLK_TCK 2>/dev/null || echo 0)
[ -r "/proc/$postmaster_pid/stat" ] && [[ $clk_tck =~ ^[1-9][0-9]*$ ]] || clk_tck=0

# cluster_procs: "pid ppid utime stime cutime cstime" (clock ticks) of the
# postmaster and each of its children.  The fields are read after "(comm)",
# whatever spaces comm holds.  No subshell per process: this runs often.
cluster_procs()
{
	local p line
	local -a f
	for p in /proc/[0-9]*; do
		read -r line 2>/dev/null <"$p/stat" || continue
		read -r -a f <<<"${line##*) }"
		if [ "${p#/proc/}" = "$postmaster_pid" ] || [ "${f[1]}" = "$postmaster_pid" ]; then
			echo "${p#/proc/} ${f[1]} ${f[11]} ${f[12]} ${f[13]} ${f[14]}"
		fi
	done
}

# wait_backends: until no client backend of the cluster is left (each psql
# and pgbench connection leaves one behind for a moment after it exits).
# Their titles read "postgres: USER DATABASE [local] ..."; the auxiliary
# processes' and the background workers' do not.
wait_backends()
{
	local tries pid rest title busy
	for ((tries = 0; tries < 200; tries++)); do
		busy=0
		while read -r pid rest; do
			title=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || continue
			case $title in
				*" [local] "*) busy=1 ;;
			esac
		done < <(cluster_procs)
		[ $busy = 0 ] && return 0
		sleep 0.05
	done
	return 1
}

# cluster_ticks: CPU of the cluster so far, in clock ticks
cluster_ticks()
{
	local pid ut st cut cst t=0
	while read -r pid _ ut st cut cst; do
		if [ "$pid" = "$postmaster_pid" ]; then
			t=$((t + cut + cst))
		else
			t=$((t + ut + st))
		fi
	done < <(cluster_procs)
	echo "$t"
}

# cpu_mark: cluster_ticks once no client backend is left; nothing without
# /proc (or when the backends do not go)
cpu_mark()
{
	[ "$clk_tck" -gt 0 ] && wait_backends && cluster_ticks
	return 0
}

# cpu_per_tx TICKS0 TICKS1 N: the cluster's CPU between two marks, in µs
# per transaction over N transactions; n/a without both marks or with none
cpu_per_tx()
{
	if [ -n "$1" ] && [ -n "$2" ] && [ "$3" -gt 0 ]; then
		echo $((($2 - $1) * 1000000 / clk_tck / $3))
	else
		echo n/a
	fi
}

# circuit N: a closed walk through 0 .. N-1 in which each ordered pair
# of distinct numbers is consecutive exactly once (an Eulerian circuit of
# the complete directed graph, by Hierholzer's algorithm), the return to
# its start left out: N(N - 1) numbers from 0
circuit()
{
	awk -v n="$1" 'BEGIN {
		sp = 0; stack[sp++] = 0; m = 0
		while (sp > 0) {
			v = stack[sp - 1]
			if (used[v] < n - 1) {
				used[v]++
				stack[sp++] = (v + used[v]) % n
			} else
				path[m++] = stack[--sp]
		}
		for (i = m - 1; i > 0; i--)
			printf "%d%s", path[i], (i > 1 ? " " : "\n")
	}'
}

# cpu_median LIST: the median of cpu_per_tx readings, n/a if one is
cpu_median()
{
	local cpu
	case $1 in
		*n/a*) echo n/a ;;
		*)
			read -r cpu _ <<<"$(stats "$1")"
			echo "${cpu%.0}"
			;;
	esac
}

if [ "$skip_claims" = 0 ]; then
	psql -X -q -v ON_ERROR_STOP=1 -v dup_ids="$dup_ids" -f "$here/setup.sql" >/dev/null
fi

#
# The header: enough about the machine and the settings for someone else to
# judge the figures.
#
cpu_model=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -n 1)
mem_total=$(awk '/^MemTotal:/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
settings_sql="SELECT string_agg(name || '=' || current_setting(name), ', ' ORDER BY name)
	FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes',
	'wal_sync_method', 'shared_buffers', 'max_connections', 'wal_level', 'max_wal_size',
	'checkpoint_timeout', 'autovacuum', 'wal_buffers', 'work_mem', 'shared_preload_libraries',
	'inbox.purge_enabled')"

echo "# inbox benchmark"
echo
echo "- started:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "- machine:    $(nproc) CPUs ($cpu_model), $mem_total RAM, $(uname -sr)"
echo "- load avg:   $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min, at start)"
echo "- PostgreSQL: $(sql 'SELECT version()')"
echo "- pgbench:    $(pgbench --version)"
echo "- settings:   $(sql "$settings_sql")"
if [ "$skip_claims" = 0 ]; then
	echo "- runs:       pgbench -c $clients -j $jobs -M prepared -T $seconds, $rounds round(s)," \
		"order rotated every round, CHECKPOINT before every run"
	echo "- (d) draws from $dup_ids ids claimed before the runs"
fi
echo

#
# The claim benchmark, up to "fi # skip_claims" (BENCH_SKIP_CLAIMS=1 skips
# it).
#
if [ "$skip_claims" = 0 ]; then

#
# The variants: name, script, scope, and a short description for the table.
#
all_variants="a b0 b c d cw h c2 h1 c1 hb cm2 hb1 cm c0 o"
# BENCH_VARIANTS="c0 o" runs a subset (ratios need both of their variants)
read -r -a variants <<<"${BENCH_VARIANTS:-$all_variants}"
for v in "${variants[@]}"; do
	case " $all_variants " in
		*" $v "*) ;;
		*) echo "bench.sh: unknown variant in BENCH_VARIANTS: $v" >&2; exit 2 ;;
	esac
done
declare -A script scope desc
script=([a]=bare.sql [b0]=handmade_flat.sql [b]=handmade.sql [c]=claim.sql [d]=claim.sql [cw]=claim.sql
	[h]=hand.sql [c2]=claim_const.sql [h1]=hand_one.sql [c1]=claim_one.sql
	[hb]=hand_batch.sql [cm2]=claim_many_two.sql [hb1]=hand_batch_one.sql [cm]=claim_many.sql [c0]=claim_alone.sql [o]=offset.sql)
scope=([a]=bench [b0]=bench [b]=bench [c]=bench [d]=dup [cw]=windowed [h]=billing [c2]=bench
	[h1]=billing [c1]=bench [hb]=billing [cm2]=bench [hb1]=billing [cm]=bench [c0]=bench [o]=streams)
desc=(
	[a]="bare business transaction: INSERT into orders"
	[b0]="hand-written inbox, unpartitioned table (context)"
	[b]="hand-written inbox: INSERT ON CONFLICT + SELECT hash + INSERT"
	[c]="inbox_claim() (fresh) + INSERT"
	[d]="inbox_claim() of a duplicate, no INSERT"
	[cw]="inbox_claim() (fresh) + INSERT, in a scope with a content window"
	[h]="the SQL users copy: one statement + INSERT, constant hash"
	[c2]="inbox_claim() with the constant hash of (h) + INSERT"
	[h1]="hand-written, claim and effect in one statement"
	[c1]="INSERT ... WHERE inbox_claim(), one statement"
	[hb]="hand-written batch of 100 ids, mismatch count, then multi-row INSERT (tps = batches/s)"
	[cm2]="inbox_claim_many() of 100 ids, then multi-row INSERT (tps = batches/s)"
	[hb1]="hand-written batch of 100 ids and its INSERT in one statement (tps = batches/s)"
	[cm]="INSERT of the ids inbox_claim_many() claimed, one statement (tps = batches/s)"
	[c0]="inbox_claim() alone (claims/s)"
	[o]="inbox_claim_offset() alone, a stream per client (claims/s)"
)

#
# Ids.  Every run draws its ids from a range of its own, [base + 1, base +
# span], with base = run number * 10^16, so no id is ever drawn by two runs
# and a fresh claim is always fresh; within a run, two clients draw the
# same id with odds of about 1 in 10^5 even at 10^6 transactions (the
# row-count checks below would report it).  Ids stay below 2^63: hence the
# cap on the number of runs.
#
span=9999999999999999
run_no=0

counts_sql="SELECT (SELECT count(*) FROM orders) || ' ' ||
	(SELECT count(*) FROM inbox.entries WHERE scope = 'bench') || ' ' ||
	(SELECT count(*) FROM inbox.entries WHERE scope = 'dup') || ' ' ||
	(SELECT count(*) FROM handmade_inbox) || ' ' ||
	(SELECT count(*) FROM handmade_inbox_flat) || ' ' ||
	(SELECT count(*) FROM hand_inbox)"

declare -A results cpu_results

# run_variant NAME SECONDS LABEL: one pgbench run; appends "tps" to
# results[NAME] unless LABEL is "warm-up".
run_variant()
{
	local v=$1 secs=$2 label=$3 out before after processed failed tps
	local -a b a exp

	run_no=$((run_no + 1))
	local base=$((run_no * (span + 1)))
	[ "$v" = d ] && base=0
	local vspan=$span
	[ "$v" = d ] && vspan=$dup_ids

	sql "CHECKPOINT" >/dev/null
	before=$(sql "$counts_sql")
	local ticks0 ticks1 cpu_us
	ticks0=$(cpu_mark)
	if ! out=$(pgbench -n -M prepared -c "$clients" -j "$jobs" -T "$secs" \
		-D base="$base" -D span="$vspan" -D scope="${scope[$v]}" -D seq=0 \
		-f "$here/${script[$v]}" 2>&1); then
		echo "$out" >&2
		echo "bench.sh: pgbench failed on variant ($v)" >&2
		exit 1
	fi
	ticks1=$(cpu_mark)
	after=$(sql "$counts_sql")

	processed=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
	failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' <<<"$out")
	tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' <<<"$out")
	if [ -z "$processed" ] || [ -z "$tps" ] || [ "${failed:-0}" != 0 ]; then
		echo "$out" >&2
		echo "bench.sh: cannot read a clean result of variant ($v) from pgbench" >&2
		exit 1
	fi

	#
	# Check that the run did what its variant claims: every transaction of
	# (a), (b0), (b) and (c) wrote one order (and one inbox row where it
	# has one); (d) wrote nothing at all.  A figure for a transaction that
	# silently did something else is worse than no figure.
	#
	read -r -a b <<<"$before"
	read -r -a a <<<"$after"
	local n=$processed
	case $v in
		a | cw) exp=("$n" 0 0 0 0 0) ;;
		b0) exp=("$n" 0 0 0 "$n" 0) ;;
		b) exp=("$n" 0 0 "$n" 0 0) ;;
		c | c2 | c1) exp=("$n" "$n" 0 0 0 0) ;;
		c0) exp=(0 "$n" 0 0 0 0) ;;
		o) exp=(0 0 0 0 0 0) ;;
		d) exp=(0 0 0 0 0 0) ;;
		h | h1) exp=("$n" 0 0 0 0 "$n") ;;
		hb | hb1) exp=($((100 * n)) 0 0 0 0 $((100 * n))) ;;
		cm | cm2) exp=($((100 * n)) $((100 * n)) 0 0 0 0) ;;
	esac
	local i names=(orders inbox.entries/bench inbox.entries/dup handmade_inbox handmade_inbox_flat hand_inbox)
	for i in 0 1 2 3 4 5; do
		if [ $((a[i] - b[i])) -ne "${exp[i]}" ]; then
			echo "bench.sh: variant ($v) run $run_no processed $n transactions but added" \
				"$((a[i] - b[i])) rows to ${names[i]}, expected ${exp[i]}" >&2
			exit 1
		fi
	done

	# (o) every claim was new: each client's stream ends at its number of
	# transactions, so the marks add up to all of them
	if [ "$v" = o ]; then
		local marks
		marks=$(sql "SELECT coalesce(sum(seq), 0) FROM inbox.offsets WHERE scope = 'streams' AND stream LIKE 'run-$base-%'")
		if [ "$marks" -ne "$n" ]; then
			echo "bench.sh: variant (o) run $run_no processed $n transactions, but its streams' marks add up to $marks" >&2
			exit 1
		fi
	fi

	cpu_us=$(cpu_per_tx "$ticks0" "$ticks1" "$n")
	printf '| %s | %s | %.1f | %d | %s |\n' "$label" "$v" "$tps" "$n" "$cpu_us"
	if [ "$label" != warm-up ]; then
		results[$v]="${results[$v]:-} $tps"
		cpu_results[$v]="${cpu_results[$v]:-} $cpu_us"
	fi
}

#
# A short untimed warm-up of every variant first, so that round 1 does not
# pay alone for empty caches and first-time plans.
#
warmup=$((seconds < 3 ? seconds : 3))
echo "## Every run, in the order run"
echo
echo "| run | variant | tps | transactions | server CPU µs/tx |"
echo "|---|---|---:|---:|---:|"
for v in "${variants[@]}"; do
	run_variant "$v" "$warmup" warm-up
done

for ((r = 0; r < rounds; r++)); do
	order=()
	for ((k = 0; k < ${#variants[@]}; k++)); do
		order+=("${variants[(k + r) % ${#variants[@]}]}")
	done
	for v in "${order[@]}"; do
		run_variant "$v" "$seconds" "round $((r + 1))"
	done
done
echo

declare -A median
echo "## Median tps over $rounds round(s) of ${seconds}s"
echo
echo "| variant | transaction | median tps | min | max | server CPU µs/tx |"
echo "|---|---|---:|---:|---:|---:|"
for v in "${variants[@]}"; do
	read -r med lo hi <<<"$(stats "${results[$v]}")"
	median[$v]=$med
	cpu=$(cpu_median "${cpu_results[$v]}")
	echo "| $v | ${desc[$v]} | $med | $lo | $hi | $cpu |"
done
echo

# ratio X Y TARGET_OP TARGET: one row of the ratio table
ratio()
{
	local x=$1 y=$2 op=$3 target=$4 value status
	# A subset (BENCH_VARIANTS) may lack one side
	[ -n "${median[$x]:-}" ] && [ -n "${median[$y]:-}" ] || return 0
	value=$(awk -v x="${median[$x]}" -v y="${median[$y]}" 'BEGIN { printf "%.3f", x / y }')
	case $op in
		ge) status=$(awk -v v="$value" -v t="$target" 'BEGIN { print (v >= t) ? "met" : "NOT met" }')
			echo "| $x/$y | $value | ≥ $target | $status |" ;;
		gt) status=$(awk -v v="$value" -v t="$target" 'BEGIN { print (v > t) ? "met" : "NOT met" }')
			echo "| $x/$y | $value | > $target | $status |" ;;
		*) echo "| $x/$y | $value | (context) | |" ;;
	esac
}

echo "## Ratios of the medians"
echo
echo "| ratio | value | target | |"
echo "|---|---:|---|---|"
ratio c2 h ge 1.0
ratio cm2 hb ge 1.1
ratio cm hb1 ge 1.0
ratio c1 h1 ge 0.95
ratio o c0 ge 1.5
ratio c b ge 1.0
ratio c b0 none 0
ratio c a ge 0.85
ratio cw c ge 0.85
ratio h a none 0
ratio d c gt 1
echo

#
# The memory check.  One session claims BENCH_MEMORY_CLAIMS fresh ids and
# reads its own backend's memory after a warm-up of 10,000 claims (every
# cache and kept plan exists by then) and at the end.  synchronous_commit
# is off here only: this part measures memory, not the flush.
#
echo "## Backend memory over $memory_claims claims in one session"
echo
start_s=$(date +%s.%N)
mem=$(psql -X -q -A -t -v ON_ERROR_STOP=1 <<EOF
SET synchronous_commit = off;
CALL bench_memory_claims(1, 10000);
SELECT sum(total_bytes) FROM pg_backend_memory_contexts;
CALL bench_memory_claims(10001, $((memory_claims - 10000)));
SELECT sum(total_bytes) FROM pg_backend_memory_contexts;
EOF
)
end_s=$(date +%s.%N)
read -r -d '' _ warm_bytes peak_bytes end_bytes <<<"$(tr '\n' ' ' <<<"$mem")" || true
growth=$((end_bytes - warm_bytes))
claimed=$(sql "SELECT count(*) FROM inbox.entries WHERE scope = 'memory'")
if [ "$claimed" -ne "$memory_claims" ]; then
	echo "bench.sh: the memory check claimed $claimed ids, expected $memory_claims" >&2
	exit 1
fi

#
# "No growth" allows one 8 kB block: a context may keep a freed block
# around.  A leak of even a few bytes per claim shows as many blocks.
#
status=$(( growth <= 8192 ? 1 : 0 ))
echo "| measure | bytes |"
echo "|---|---:|"
echo "| after 10,000 claims (warm-up) | $warm_bytes |"
echo "| largest sample after a COMMIT in between | $peak_bytes |"
echo "| after $memory_claims claims | $end_bytes |"
echo "| growth | $growth |"
echo
awk -v n="$((memory_claims))" -v s="$start_s" -v e="$end_s" \
	'BEGIN { printf "%d claims in %.1f s (%.0f claims/s, synchronous_commit off)\n", n, e - s, n / (e - s) }'
if [ "$status" = 1 ]; then
	echo "memory target (no growth): met"
else
	echo "memory target (no growth): NOT met"
fi
echo
fi # skip_claims

if [ "$skip_claims" = 0 ] && [ "${BENCH_SKIP_VERSUS:-0}" = 0 ]; then
	. "$here/versus.sh"
fi
if [ "$skip_retention" = 0 ]; then
	. "$here/retention.sh"
fi
if [ "${BENCH_SKIP_DEFERRED:-0}" = 0 ]; then
	. "$here/deferred.sh"
fi
if [ "${BENCH_SKIP_GROWTH:-0}" = 0 ]; then
	. "$here/growth.sh"
fi
if [ "${BENCH_SKIP_GROUPS:-0}" = 0 ]; then
	. "$here/groups.sh"
fi
if [ "${BENCH_SKIP_DEPTH:-0}" = 0 ]; then
	. "$here/depth.sh"
fi
if [ "${BENCH_SKIP_PRIORITIES:-0}" = 0 ]; then
	. "$here/priorities.sh"
fi
if [ "${BENCH_SKIP_OUTBOX:-0}" = 0 ]; then
	. "$here/outbox.sh"
fi
if [ "${BENCH_SKIP_RELAY:-0}" = 0 ]; then
	. "$here/relay.sh"
fi
if [ "${BENCH_SKIP_BROKERS:-0}" = 0 ]; then
	. "$here/brokers.sh"
fi
echo "- finished:   $(date -u '+%Y-%m-%d %H:%M:%S UTC'), load avg $(cut -d' ' -f1-3 /proc/loadavg)"
