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
	local v=$1 nkeys=$2 tps file count before after ticks0="" ticks1="" cpu=n/a
	case $v in
		outbox) file=outbox_send.sql; count="SELECT count(*) FROM inbox.outbox_messages" ;;
		pgmq) file=outbox_pgmq.sql; count="SELECT count(*) FROM pgmq.q_bench_outbox" ;;
		hand) file=outbox_hand.sql; count="SELECT count(*) FROM hand_outbox" ;;
	esac
	sql "CHECKPOINT" >/dev/null
	before=$(sql "$count")
	[ "$clk_tck" -gt 0 ] && wait_backends && ticks0=$(cluster_ticks)
	tps=$(pgbench_tps "outbox variant $v ($nkeys keys)" -T "$ob_seconds" \
		-D base="$((RANDOM * 100000000000))" -D span=99999999999 -D nkeys="$nkeys" \
		-f "$here/$file") || exit 1
	[ -n "$ticks0" ] && wait_backends && ticks1=$(cluster_ticks)
	after=$(sql "$count")
	[ "$((after - before))" -gt 0 ] || fail "outbox variant $v ($nkeys keys) wrote no message"
	[ -n "$ticks1" ] && cpu=$(((ticks1 - ticks0) * 1000000 / clk_tck / (after - before)))
	echo "$tps $cpu"
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

# Per key, positions have no gap and no repeat: 1 .. n
bad=$(sql "SELECT count(*) FROM (SELECT key FROM inbox.outbox_messages GROUP BY key
		   HAVING max(position) <> count(*) OR count(DISTINCT position) <> count(*)) x")
[ "$bad" = 0 ] || fail "outbox: $bad keys whose positions are not 1 .. n"

echo "| keys | variant | median tps | min | max | server CPU µs/tx |"
echo "|---|---|---:|---:|---:|---:|"
for nkeys in 10 1000 0; do
	for v in "${ob_variants[@]}"; do
		read -r med min max <<<"$(stats "${ob_tps[$v.$nkeys]}")"
		ob_med[$v.$nkeys]=$med
		ob_cpu_med[$v.$nkeys]=n/a
		case ${ob_cpu[$v.$nkeys]} in
			*n/a*) ;;
			*)
				read -r cpu _ <<<"$(stats "${ob_cpu[$v.$nkeys]}")"
				ob_cpu_med[$v.$nkeys]=${cpu%.0}
				;;
		esac
		echo "| $([ "$nkeys" = 0 ] && echo unique || echo "$nkeys") | $v | $med | $min | $max | ${ob_cpu_med[$v.$nkeys]} |"
	done
done
echo
for nkeys in 10 1000 0; do
	label=$([ "$nkeys" = 0 ] && echo "unique keys" || echo "$nkeys keys")
	awk -v o="${ob_med[outbox.$nkeys]}" -v h="${ob_med[hand.$nkeys]}" -v l="$label" \
		-v oc="${ob_cpu_med[outbox.$nkeys]}" -v hc="${ob_cpu_med[hand.$nkeys]}" 'BEGIN {
		printf "%s: outbox/hand %.2f (target 0.95)", l, o / h
		if (oc + 0 > 0 && hc + 0 > 0) printf "; by CPU per transaction %.2f", hc / oc
		printf "\n" }'
	if [ "$ob_pgmq" = 1 ]; then
		awk -v o="${ob_med[outbox.$nkeys]}" -v p="${ob_med[pgmq.$nkeys]}" -v l="$label" \
			-v oc="${ob_cpu_med[outbox.$nkeys]}" -v pc="${ob_cpu_med[pgmq.$nkeys]}" 'BEGIN {
			printf "%s: outbox/pgmq %.2f (target 1.0)", l, o / p
			if (oc + 0 > 0 && pc + 0 > 0) printf "; by CPU per transaction %.2f", pc / oc
			printf "\n" }'
	fi
done
echo
export PGDATABASE=bench
