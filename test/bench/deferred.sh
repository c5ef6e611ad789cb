#-------------------------------------------------------------------------
#
# deferred.sh
#	  The deferred mode's throughput, sourced by bench.sh on its cluster:
#	  receive, the worker's two ways of taking and completing, and the
#	  claim path on the same cluster and table for comparison, with the
#	  same clients, fsync and synchronous_commit as the claim variants.
#
# Workers must never run dry during a run (pgbench's \gset fails on an
# empty take), so each worker scope is filled with more pending messages
# than the fastest run can process, and the bench checks afterwards that
# every message it counts as processed is done and has exactly one order.
#
# test/bench/deferred.sh
#
#-------------------------------------------------------------------------

def_seconds=${BENCH_DEFERRED_SECONDS:-15}
def_rounds=${BENCH_DEFERRED_ROUNDS:-3}
def_backlog=${BENCH_DEFERRED_BACKLOG:-400000}

echo "## Deferred mode: receive, take, complete"
echo
echo "- $clients clients, -j $jobs, -M prepared, $def_seconds s per run, $def_rounds round(s) rotating the order, medians"
echo "- every worker scope holds $def_backlog pending messages before the runs"
echo

createdb deferred_bench
export PGDATABASE=deferred_bench
# The extension and the business table, as in the retention phases
psql -X -q -v ON_ERROR_STOP=1 -f "$here/base.sql" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE PROCEDURE bench_work(p_scope text, n integer) LANGUAGE plpgsql AS $$
DECLARE
	ids text[];
	amounts bigint[];
BEGIN
	SELECT array_agg(t.message_id), array_agg((t.payload->>'amount')::bigint)
	  INTO ids, amounts FROM inbox_take(p_scope, n) AS t;
	COMMIT;
	FOR i IN 1 .. coalesce(array_length(ids, 1), 0) LOOP
		INSERT INTO orders (message_id, amount_cents) VALUES (ids[i], amounts[i]);
		PERFORM inbox_complete(p_scope, ids[i]);
		COMMIT;
	END LOOP;
END $$;
SQL

# BENCH_DEFERRED_PLANS_ONLY=1: only the plan and waiting measurements
if [ "${BENCH_DEFERRED_PLANS_ONLY:-0}" = 1 ]; then
	. "$here/plans.sh"
	return 0
fi

for s in one batch poll; do
	sql "SELECT count(*) FROM generate_series(1, $def_backlog, 10000) b
		 CROSS JOIN LATERAL inbox_receive_many('work-$s', ARRAY(SELECT '$s-' || g FROM generate_series(b, b + 9999) g),
		 ARRAY(SELECT jsonb_build_object('amount', g) FROM generate_series(b, b + 9999) g))" >/dev/null
done
# The hand-written queue, with the same backlog and payloads
sql "CREATE TABLE hand_queue (id bigserial PRIMARY KEY, message_id text NOT NULL, payload jsonb NOT NULL);
	 INSERT INTO hand_queue (message_id, payload)
	 SELECT 'hand-' || g, jsonb_build_object('amount', g) FROM generate_series(1, $def_backlog) g" >/dev/null
sql "VACUUM ANALYZE" >/dev/null

# def_run VARIANT: one pgbench run; prints "tps messages_per_second"
def_run()
{
	local v=$1 out tps before after file scope extra=()
	case $v in
		receive) file=receive.sql; scope=recv
			extra=(-D base="$((RANDOM * 100000000000))" -D span=99999999999) ;;
		one) file=work_one.sql; scope=work-one ;;
		poll) file=work_poll.sql; scope=work-poll ;;
		hand) file=queue_hand.sql; scope=hand ;;
		batch) file=work_batch.sql; scope=work-batch ;;
		claim) file=claim.sql; scope=claim
			extra=(-D base="$((RANDOM * 100000000000))" -D span=99999999999) ;;
	esac
	sql "CHECKPOINT" >/dev/null
	case $v in
		receive|claim) before=$(sql "SELECT count(*) FROM inbox.entries WHERE scope = '$scope'") ;;
		hand) before=$(sql "SELECT -count(*) FROM hand_queue") ;;
		*) before=$(sql "SELECT count(*) FROM inbox.entries WHERE scope = '$scope' AND state = 'd'") ;;
	esac
	if ! out=$(pgbench -n -M prepared -c "$clients" -j "$jobs" -T "$def_seconds" \
		-D scope="$scope" "${extra[@]}" -f "$here/$file" 2>&1); then
		echo "$out" >&2
		fail "pgbench failed on deferred variant $v"
	fi
	tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' <<<"$out")
	[ -n "$tps" ] || { echo "$out" >&2; fail "no tps for deferred variant $v"; }
	case $v in
		receive|claim) after=$(sql "SELECT count(*) FROM inbox.entries WHERE scope = '$scope'") ;;
		hand) after=$(sql "SELECT -count(*) FROM hand_queue") ;;
		*) after=$(sql "SELECT count(*) FROM inbox.entries WHERE scope = '$scope' AND state = 'd'") ;;
	esac
	awk -v t="$tps" -v n="$((after - before))" -v s="$def_seconds" \
		'BEGIN { printf "%s %.1f\n", t, n / s }'
}

declare -A def_msgs=() def_med=()
variants=(receive one poll hand batch claim)
for ((r = 0; r < def_rounds; r++)); do
	for ((i = 0; i < ${#variants[@]}; i++)); do
		v=${variants[(i + r) % ${#variants[@]}]}
		# def_run runs in a subshell: its fail() cannot stop the bench
		res=$(def_run "$v") || exit 1
		read -r _ msgs <<<"$res"
		def_msgs[$v]="${def_msgs[$v]:-} $msgs"
	done
done

# Every message a worker completed has exactly one order, and no message
# was completed without being taken by exactly one worker.
bad=$(sql "SELECT count(*) FROM (SELECT e.message_id FROM inbox.entries e
		   LEFT JOIN orders o ON o.message_id = e.message_id
		   WHERE e.scope IN ('work-one', 'work-batch', 'work-poll') AND e.state = 'd'
		   GROUP BY e.scope, e.message_id HAVING count(o.order_id) <> 1) x")
[ "$bad" = 0 ] || fail "deferred: $bad completed messages without exactly one order"
left=$(sql "SELECT count(*) FROM inbox.entries WHERE scope IN ('work-one', 'work-batch', 'work-poll') AND state = 'r'")

echo "| variant | what one transaction does | messages/s median | min | max |"
echo "|---|---|---:|---:|---:|"
for v in receive one poll hand batch claim; do
	read -r med min max <<<"$(stats "${def_msgs[$v]}")"
	def_med[$v]=$med
	case $v in
		poll) what="inbox_poll 1 (lease, receipt) + INSERT + inbox_complete by receipt, one transaction" ;;
		hand) what="hand-written queue: DELETE ... SKIP LOCKED LIMIT 1 RETURNING + INSERT, one transaction" ;;
		receive) what="inbox_receive of a new message (autocommit)" ;;
		one) what="inbox_take 1 + INSERT + inbox_complete, one transaction" ;;
		batch) what="CALL: durable inbox_take of 10, then INSERT + inbox_complete per message, each committed" ;;
		claim) what="inbox_claim + INSERT (variant c), same cluster" ;;
	esac
	echo "| $v | $what | $med | $min | $max |"
done
echo
echo "Every completed message has exactly one order ($bad without). $left message(s) were left processing by workers pgbench stopped mid-batch; their sessions have ended, so the next take would recover them."
echo
awk -v o="${def_med[one]}" -v p="${def_med[poll]}" -v h="${def_med[hand]}" 'BEGIN {
	printf "Ratios: one/hand %.2f, poll/hand %.2f (the hand-written queue deduplicates nothing and keeps no history).\n\n", o / h, p / h }'

. "$here/plans.sh"
