#-------------------------------------------------------------------------
#
# versus.sh
#	  The new build against the last release, sourced by bench.sh after
#	  the claim variants: the same transactions on two clusters with the
#	  same settings, one running the work tree's library and SQL, the other
#	  the release's (test/tools/baseline.sh builds it into a private copy
#	  of the server, whose bindir run.sh passes as BENCH_BASELINE_BINDIR).
#	  Target: no median ratio new/release below 0.97.
#
# Each run is a fixed number of transactions per client, never a fixed
# time, so a faster build cannot run a take on an empty queue: every take
# scope holds more pending messages than all rounds take, checked after
# each run.  The two clusters alternate within each variant, the side
# that goes first alternating every round, and the variants rotate, so a
# neighbour's load spreads over both sides.  Only one cluster works at a
# time; the other is idle.
#
# Knobs: BENCH_VERSUS_ROUNDS (5), BENCH_VERSUS_SCALE (1: multiplies every
# transaction count), BENCH_VERSUS_VARIANTS, BENCH_SKIP_VERSUS=1.
#
# test/bench/versus.sh
#
#-------------------------------------------------------------------------

vs_rounds=${BENCH_VERSUS_ROUNDS:-5}
vs_scale=${BENCH_VERSUS_SCALE:-1}
read -r -a vs_variants <<<"${BENCH_VERSUS_VARIANTS:-c c2 c1 cm2 cm c0 receive one poll}"
vs_release=${BENCH_BASELINE_NAME:-the release}

echo "## The new build against $vs_release"
echo
if [ -z "${BENCH_BASELINE_BINDIR:-}" ]; then
	echo "Skipped: ${BENCH_BASELINE_WHY:-no build of the release to compare with}."
	echo
	return 0
fi

# Transactions per client and run, and what each run does
declare -A vs_tx=([c]=600 [c2]=600 [c1]=600 [cm2]=30 [cm]=30 [c0]=1500
	[receive]=1000 [one]=400 [poll]=400)
declare -A vs_file=([c]=claim.sql [c2]=claim_const.sql [c1]=claim_one.sql
	[cm2]=claim_many_two.sql [cm]=claim_many.sql [c0]=claim_alone.sql
	[receive]=receive.sql [one]=work_one.sql [poll]=work_poll.sql)
for v in "${vs_variants[@]}"; do
	[ -n "${vs_tx[$v]:-}" ] || fail "BENCH_VERSUS_VARIANTS: unknown variant \"$v\""
done
[[ $vs_rounds =~ ^[1-9][0-9]*$ ]] && [[ $vs_scale =~ ^[1-9][0-9]*$ ]] ||
	fail "BENCH_VERSUS_ROUNDS and BENCH_VERSUS_SCALE must be positive integers"

# The release's cluster: the settings of this one, its own socket directory
vs_base_dir=$cluster_dir/release
mkdir -p "$vs_base_dir"
"$BENCH_BASELINE_BINDIR/initdb" -D "$vs_base_dir/data" -A trust -E UTF8 --locale=C --no-sync \
	>"$vs_base_dir/initdb.log" 2>&1 || { cat "$vs_base_dir/initdb.log" >&2; fail "initdb of the release's cluster failed"; }
vs_base_port=$((PGPORT + 1))
sed -e "s|^unix_socket_directories = .*|unix_socket_directories = '$vs_base_dir'|" \
	-e "s|^port = .*|port = $vs_base_port|" "$data/postgresql.conf" >"$vs_base_dir/data/postgresql.conf"
cp "$data/postgresql.auto.conf" "$vs_base_dir/data/postgresql.auto.conf"

# Stopped with the bench's cluster, however the script ends
cluster_before_cleanup()
{
	[ -f "$vs_base_dir/data/postmaster.pid" ] &&
		"$BENCH_BASELINE_BINDIR/pg_ctl" -D "$vs_base_dir/data" -s -m immediate -w stop >/dev/null 2>&1
	return 0
}
"$BENCH_BASELINE_BINDIR/pg_ctl" -D "$vs_base_dir/data" -l "$vs_base_dir/server.log" -s -w -t 60 start >/dev/null || {
	tail -n 40 "$vs_base_dir/server.log" >&2
	fail "the release's cluster did not start"
}

# on SIDE CMD...: run CMD against the new build's cluster or the release's
on()
{
	local side=$1
	shift
	if [ "$side" = new ]; then
		PGHOST=$cluster_dir PGPORT=$PGPORT PGDATABASE=versus "$@"
	else
		PGHOST=$vs_base_dir PGPORT=$vs_base_port PGDATABASE=versus "$@"
	fi
}

# What every take scope needs: every round's messages, and as many again
vs_backlog=$((2 * vs_rounds * clients * vs_scale * ${vs_tx[one]}))
for side in new release; do
	on "$side" createdb versus
	on "$side" psql -X -q -v ON_ERROR_STOP=1 -f "$here/base.sql" >/dev/null
	for s in one poll; do
		on "$side" psql -X -q -A -t -v ON_ERROR_STOP=1 -c "SELECT count(*) FROM generate_series(1, $vs_backlog, 10000) b
			CROSS JOIN LATERAL inbox_receive_many('vs-$s', ARRAY(SELECT '$s-' || g FROM generate_series(b, least(b + 9999, $vs_backlog)) g),
			ARRAY(SELECT jsonb_build_object('amount', g) FROM generate_series(b, least(b + 9999, $vs_backlog)) g))" >/dev/null
	done
	on "$side" psql -X -q -v ON_ERROR_STOP=1 -c "VACUUM ANALYZE" >/dev/null
done
echo "- PostgreSQL $(on release psql -X -A -t -c 'SHOW server_version') on both; the release's cluster reports" \
	"inbox $(on release psql -X -A -t -c "SELECT extversion FROM pg_extension WHERE extname = 'inbox'")," \
	"the new build's $(on new psql -X -A -t -c "SELECT extversion FROM pg_extension WHERE extname = 'inbox'")"
echo "- pgbench -c $clients -j $jobs -M prepared, a fixed number of transactions per run," \
	"$vs_rounds rounds, CHECKPOINT before every run; each take scope starts with $vs_backlog pending messages"
echo

vs_counter=0
declare -A vs_results=()

# vs_run VARIANT SIDE: one run; appends its tps to vs_results[VARIANT/SIDE]
vs_run()
{
	local v=$1 side=$2 n=$((vs_tx[$1] * vs_scale)) out tps scope before after expect
	vs_counter=$((vs_counter + 1))
	case $v in
		one | poll) scope=vs-$v ;;
		receive) scope=vs-recv ;;
		*) scope=vs-claim ;;
	esac
	on "$side" psql -X -q -c "CHECKPOINT" >/dev/null
	case $v in
		one | poll) before=$(on "$side" psql -X -A -t -c "SELECT count(*) FROM inbox.entries WHERE scope = '$scope' AND state = 'd'") ;;
		*) before=$(on "$side" psql -X -A -t -c "SELECT count(*) FROM inbox.entries WHERE scope = '$scope'") ;;
	esac
	if ! out=$(on "$side" pgbench -n -M prepared -c "$clients" -j "$jobs" -t "$n" \
		-D base="$((vs_counter * 10000000000000))" -D span=999999999999 -D scope="$scope" \
		-f "$here/${vs_file[$v]}" 2>&1); then
		echo "$out" >&2
		fail "pgbench failed on ($v) against the $side build"
	fi
	tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' <<<"$out")
	[ -n "$tps" ] || { echo "$out" >&2; fail "no tps for ($v) against the $side build"; }
	case $v in
		one | poll) after=$(on "$side" psql -X -A -t -c "SELECT count(*) FROM inbox.entries WHERE scope = '$scope' AND state = 'd'")
			expect=$((clients * n)) ;;
		cm2 | cm) after=$(on "$side" psql -X -A -t -c "SELECT count(*) FROM inbox.entries WHERE scope = '$scope'")
			expect=$((100 * clients * n)) ;;
		*) after=$(on "$side" psql -X -A -t -c "SELECT count(*) FROM inbox.entries WHERE scope = '$scope'")
			expect=$((clients * n)) ;;
	esac
	# Ids are drawn at random from a range of the run's own: a rare repeat
	# makes a duplicate, never more rows than transactions
	if [ $((after - before)) -gt "$expect" ] || [ $((after - before)) -lt $((expect * 99 / 100)) ]; then
		fail "($v) against the $side build ran $((clients * n)) transactions but added $((after - before)) rows, expected $expect"
	fi
	vs_results[$v/$side]="${vs_results[$v/$side]:-} $tps"
}

for ((r = 0; r < vs_rounds; r++)); do
	for ((k = 0; k < ${#vs_variants[@]}; k++)); do
		v=${vs_variants[(k + r) % ${#vs_variants[@]}]}
		if [ $((r % 2)) = 0 ]; then
			vs_run "$v" new
			vs_run "$v" release
		else
			vs_run "$v" release
			vs_run "$v" new
		fi
	done
done

echo "| variant | transaction | new median tps | release median tps | new/release | target | |"
echo "|---|---|---:|---:|---:|---|---|"
for v in "${vs_variants[@]}"; do
	read -r vs_new _ <<<"$(stats "${vs_results[$v/new]}")"
	read -r vs_old _ <<<"$(stats "${vs_results[$v/release]}")"
	vs_ratio=$(awk -v x="$vs_new" -v y="$vs_old" 'BEGIN { printf "%.3f", x / y }')
	vs_status=$(awk -v v="$vs_ratio" 'BEGIN { print (v >= 0.97) ? "met" : "NOT met" }')
	echo "| $v | ${vs_file[$v]} | $vs_new | $vs_old | $vs_ratio | ≥ 0.97 | $vs_status |"
done
echo
