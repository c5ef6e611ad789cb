#-------------------------------------------------------------------------
#
# outbox.sh
#	  The outbox's send path, sourced by bench.sh on its cluster: a
#	  producer's transaction (business INSERT + outbox_send) against the
#	  same transaction with pgmq.send (where pgmq is installed) and with a
#	  hand-written outbox that gives the same per-key order, at 10 keys,
#	  1,000 keys and a key per message.  Same clients, fsync and
#	  synchronous_commit as the claim variants.
#
# At few keys the sends of one key wait for each other's commits: that is
# what ordering by commit costs, and the hand-written outbox pays it too.
# pgmq keeps no order per key.  Targets: outbox >= 1.0 x pgmq, >= 0.95 x
# hand-written.  Beside tps, the cluster's CPU per transaction, which other
# load on the machine disturbs much less.
#
# test/bench/outbox.sh
#
#-------------------------------------------------------------------------

ob_seconds=${BENCH_OUTBOX_SECONDS:-15}
ob_rounds=${BENCH_OUTBOX_ROUNDS:-3}

echo "## Outbox: business INSERT + send, one transaction"
echo
echo "- $clients clients, -j $jobs, -M prepared, $ob_seconds s per run, $ob_rounds round(s) rotating the order, medians"
echo

createdb outbox_bench
export PGDATABASE=outbox_bench
psql -X -q -v ON_ERROR_STOP=1 -f "$here/base.sql" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
-- One route, so that every send writes its delivery row as in production
SELECT outbox_route('bench', 'https://bench.example/hook');
CREATE TABLE hand_outbox_keys (key text COLLATE "C" PRIMARY KEY, last bigint NOT NULL);
CREATE TABLE hand_outbox (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	key text COLLATE "C" NOT NULL,
	position bigint NOT NULL,
	payload jsonb NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	sent_at timestamptz
);
-- What its relay would walk: the unsent messages, key by key
CREATE INDEX hand_outbox_unsent ON hand_outbox (key, position) WHERE sent_at IS NULL;
SQL
ob_pgmq=$(sql "SELECT count(*) FROM pg_available_extensions WHERE name = 'pgmq'")
if [ "$ob_pgmq" = 1 ]; then
	sql "CREATE EXTENSION pgmq; SELECT pgmq.create('bench_outbox')" >/dev/null
else
	echo "pgmq is not installed here: the outbox is compared with the hand-written outbox only."
	echo
fi
sql "VACUUM ANALYZE" >/dev/null

# ob_run VARIANT NKEYS: one pgbench run; prints its tps and the cluster's
# CPU per transaction in µs (n/a without /proc), after checking that the
# run wrote messages (one per transaction)
ob_run()
{
	local v=$1 nkeys=$2 tps file count before after ticks0 ticks1
	case $v in
		outbox) file=outbox_send.sql; count="SELECT count(*) FROM inbox.outbox_messages" ;;
		pgmq) file=outbox_pgmq.sql; count="SELECT count(*) FROM pgmq.q_bench_outbox" ;;
		hand) file=outbox_hand.sql; count="SELECT count(*) FROM hand_outbox" ;;
	esac
	sql "CHECKPOINT" >/dev/null
	before=$(sql "$count")
	ticks0=$(cpu_mark)
	tps=$(pgbench_tps "outbox variant $v ($nkeys keys)" -T "$ob_seconds" \
		-D base="$((RANDOM * 100000000000))" -D span=99999999999 -D nkeys="$nkeys" \
		-f "$here/$file") || exit 1
	ticks1=$(cpu_mark)
	after=$(sql "$count")
	[ "$((after - before))" -gt 0 ] || fail "outbox variant $v ($nkeys keys) wrote no message"
	echo "$tps $(cpu_per_tx "$ticks0" "$ticks1" "$((after - before))")"
}

declare -A ob_tps=() ob_med=() ob_cpu=() ob_cpu_med=()
ob_variants=(outbox hand)
[ "$ob_pgmq" = 1 ] && ob_variants+=(pgmq)
for nkeys in 10 1000 0; do
	for ((r = 0; r < ob_rounds; r++)); do
		for ((i = 0; i < ${#ob_variants[@]}; i++)); do
			v=${ob_variants[(i + r) % ${#ob_variants[@]}]}
			read -r tps cpu <<<"$(ob_run "$v" "$nkeys")" || exit 1
			[ -n "$tps" ] || exit 1
			ob_tps[$v.$nkeys]="${ob_tps[$v.$nkeys]:-} $tps"
			ob_cpu[$v.$nkeys]="${ob_cpu[$v.$nkeys]:-} $cpu"
		done
	done
done

# Per key, positions have no gap and no repeat: first .. first + n - 1
bad=$(sql "SELECT count(*) FROM (SELECT key FROM inbox.outbox_messages GROUP BY key
		   HAVING max(position) - min(position) + 1 <> count(*) OR count(DISTINCT position) <> count(*)) x")
[ "$bad" = 0 ] || fail "outbox: $bad keys whose positions are not first .. first + n - 1"

echo "| keys | variant | median tps | min | max | server CPU µs/tx |"
echo "|---|---|---:|---:|---:|---:|"
for nkeys in 10 1000 0; do
	for v in "${ob_variants[@]}"; do
		read -r med min max <<<"$(stats "${ob_tps[$v.$nkeys]}")"
		ob_med[$v.$nkeys]=$med
		ob_cpu_med[$v.$nkeys]=$(cpu_median "${ob_cpu[$v.$nkeys]}")
		echo "| $([ "$nkeys" = 0 ] && echo unique || echo "$nkeys") | $v | $med | $min | $max | ${ob_cpu_med[$v.$nkeys]} |"
	done
done
echo
# ob_ratio NKEYS BASELINE TARGET: the outbox against BASELINE at NKEYS,
# by median tps and, where both were read, by CPU per transaction
ob_ratio()
{
	local label
	label=$([ "$1" = 0 ] && echo "unique keys" || echo "$1 keys")
	awk -v o="${ob_med[outbox.$1]}" -v b="${ob_med[$2.$1]}" -v l="$label" -v n="$2" -v t="$3" \
		-v oc="${ob_cpu_med[outbox.$1]}" -v bc="${ob_cpu_med[$2.$1]}" 'BEGIN {
		printf "%s: outbox/%s %.2f (target %s)", l, n, o / b, t
		if (oc + 0 > 0 && bc + 0 > 0) printf "; by CPU per transaction %.2f", bc / oc
		printf "\n" }'
}
for nkeys in 10 1000 0; do
	ob_ratio "$nkeys" hand 0.95
	if [ "$ob_pgmq" = 1 ]; then
		ob_ratio "$nkeys" pgmq 1.0
	fi
done
echo
export PGDATABASE=bench
