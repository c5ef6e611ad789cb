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
# Takes that start at the front (src/front.c) consume up to ~9,000
# messages/s here in the batch variant: 3 rounds of 15 s need 400,000.
def_backlog=${BENCH_DEFERRED_BACKLOG:-600000}

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

#
# A batch of completions against single ones: the receipts of batches of
# 100 polled messages, completed by one inbox_complete_many call, by 100
# inbox_complete statements from the client, or by 100 inbox_complete
# calls in a PL/pgSQL loop, each batch in one transaction.  Every run
# completes a fixed number of batches (BENCH_COMPLETE_TRANSACTIONS per
# client), the order of the two rotated each round; the fill and the
# polls that hand the receipts out are timed too.
#
complete_bench()
{
	local tx=${BENCH_COMPLETE_TRANSACTIONS:-40} rounds=${BENCH_COMPLETE_ROUNDS:-$def_rounds}
	local per_run batches total t0 t1 t2 v r i tps before after res file
	local -A cm_rate=()
	local cm_variants=(single loop many)

	per_run=$((clients * tx))
	batches=$((${#cm_variants[@]} * rounds * per_run))
	total=$((batches * 100))
	echo "## Deferred mode: a batch of completions"
	echo
	echo "- $clients clients, -j $jobs, -M prepared, $tx transactions per client and run, each the completion of 100 receipts; $rounds round(s) rotating the order, medians"
	echo

	psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE TABLE complete_batches (b integer PRIMARY KEY, receipts uuid[] NOT NULL);
CREATE SEQUENCE complete_next;
CREATE FUNCTION complete_singles(p_scope text, p_b integer) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
	r uuid;
	n integer := 0;
BEGIN
	FOR r IN SELECT unnest(receipts) FROM complete_batches WHERE b = p_b LOOP
		PERFORM inbox_complete(p_scope, r);
		n := n + 1;
	END LOOP;
	RETURN n;
END $$;
SQL
	# The 100 statements of one transaction of the client's single calls
	{
		echo "SELECT nextval('complete_next') AS b \\gset"
		echo "BEGIN;"
		for ((i = 1; i <= 100; i++)); do
			echo "SELECT inbox_complete(:scope, (SELECT receipts[$i] FROM complete_batches WHERE b = :b));"
		done
		echo "COMMIT;"
	} >"$work/complete_single.sql"
	t0=$(date +%s.%N)
	sql "SELECT count(*) FROM generate_series(1, $total, 10000) b
		 CROSS JOIN LATERAL inbox_receive_many('complete',
			ARRAY(SELECT 'complete-' || g FROM generate_series(b, least(b + 9999, $total)) g),
			ARRAY(SELECT jsonb_build_object('amount', g) FROM generate_series(b, least(b + 9999, $total)) g))" >/dev/null
	t1=$(date +%s.%N)
	sql "DO \$\$ BEGIN
			FOR i IN 1 .. $batches LOOP
				INSERT INTO complete_batches
				SELECT i, array_agg(receipt) FROM inbox_poll('complete', 100, lease => '1 day');
				IF i % 100 = 0 THEN COMMIT; END IF;
			END LOOP;
		 END \$\$" >/dev/null
	t2=$(date +%s.%N)
	[ "$(sql "SELECT count(*) FROM complete_batches WHERE cardinality(receipts) = 100")" = "$batches" ] ||
		fail "complete: the polls did not hand out $batches batches of 100"
	sql "VACUUM ANALYZE" >/dev/null
	awk -v n="$total" -v b="$batches" -v f="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
		-v p="$(awk -v a="$t1" -v b="$t2" 'BEGIN { print b - a }')" 'BEGIN {
		printf "Fill: %d messages received in batches of 10,000 in %.1f s (%.0f/s); %d polls of 100 under a lease in %.1f s (%.0f messages/s).\n\n",
			n, f, n / f, b, p, n / p }'

	for ((r = 0; r < rounds; r++)); do
		for ((i = 0; i < ${#cm_variants[@]}; i++)); do
			v=${cm_variants[(i + r) % ${#cm_variants[@]}]}
			sql "CHECKPOINT" >/dev/null
			before=$(sql "SELECT count(*) FROM inbox.entries WHERE scope = 'complete' AND state = 'd'")
			case $v in
				single) file=$work/complete_single.sql ;;
				*) file=$here/complete_$v.sql ;;
			esac
			tps=$(pgbench_tps "complete variant $v" -t "$tx" -D scope=complete -f "$file") || exit 1
			after=$(sql "SELECT count(*) FROM inbox.entries WHERE scope = 'complete' AND state = 'd'")
			[ "$((after - before))" = "$((per_run * 100))" ] ||
				fail "complete: variant $v completed $((after - before)) messages, not $((per_run * 100))"
			res=$(awk -v t="$tps" 'BEGIN { printf "%.1f", t * 100 }')
			cm_rate[$v]="${cm_rate[$v]:-} $res"
		done
	done
	[ "$(sql "SELECT count(*) FROM inbox.entries WHERE scope = 'complete' AND state <> 'd'")" = 0 ] ||
		fail "complete: messages of the polled batches were left not done"

	echo "| variant | what one transaction does | completions/s median | min | max |"
	echo "|---|---|---:|---:|---:|"
	for v in "${cm_variants[@]}"; do
		read -r med min max <<<"$(stats "${cm_rate[$v]}")"
		cm_rate[$v]=$med
		case $v in
			single) what="100 inbox_complete statements by receipt from the client" ;;
			loop) what="100 inbox_complete calls by receipt in a PL/pgSQL loop, one statement" ;;
			many) what="inbox_complete_many of 100 receipts" ;;
		esac
		echo "| $v | $what | $med | $min | $max |"
	done
	echo
	awk -v m="${cm_rate[many]}" -v s="${cm_rate[single]}" -v l="${cm_rate[loop]}" 'BEGIN {
		printf "Ratio many/single %.2f (target >= 3.0): %s; many/loop %.2f (context: the calls without their round trips).\n\n",
			m / s, (m / s >= 3.0) ? "met" : "NOT met", m / l }'
}

# BENCH_DEFERRED_PLANS_ONLY=1: only the plan and waiting measurements
if [ "${BENCH_DEFERRED_PLANS_ONLY:-0}" = 1 ]; then
	. "$here/plans.sh"
	return 0
fi
# BENCH_DEFERRED_COMPLETE_ONLY=1: only the batch of completions
if [ "${BENCH_DEFERRED_COMPLETE_ONLY:-0}" = 1 ]; then
	complete_bench
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
# pgmq, where it is installed (it is not packaged for Debian: install its
# SQL files from its source with PGXS), with the same backlog and payloads:
# the queue the deferred mode is compared with.  Nothing of pgmq is
# part of this project.
have_pgmq=$(sql "SELECT count(*) FROM pg_available_extensions WHERE name = 'pgmq'")
if [ "$have_pgmq" = 1 ]; then
	psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE EXTENSION pgmq;
SELECT pgmq.create('bench'), pgmq.create('bench_batch'), pgmq.create('bench_send');
CREATE PROCEDURE pgmq_work(n integer) LANGUAGE plpgsql AS $$
DECLARE
	ids bigint[];
	amounts bigint[];
BEGIN
	SELECT array_agg(r.msg_id), array_agg((r.message->>'amount')::bigint)
	  INTO ids, amounts FROM pgmq.read('bench_batch', 30, n) AS r;
	COMMIT;
	FOR i IN 1 .. coalesce(array_length(ids, 1), 0) LOOP
		INSERT INTO orders (message_id, amount_cents) VALUES ('pgmqb-' || ids[i], amounts[i]);
		PERFORM pgmq.delete('bench_batch', ids[i]);
		COMMIT;
	END LOOP;
END $$;
SQL
	for q in bench bench_batch; do
		sql "SELECT count(*) FROM generate_series(1, $def_backlog, 10000) b
			 CROSS JOIN LATERAL pgmq.send_batch('$q', ARRAY(SELECT jsonb_build_object('amount', g)
															FROM generate_series(b, b + 9999) g))" >/dev/null
	done
else
	echo "pgmq is not installed here: the deferred runs are compared with the hand-written queue only."
	echo
fi
sql "VACUUM ANALYZE" >/dev/null

# def_run VARIANT: one pgbench run; prints "tps messages_per_second"
def_run()
{
	local v=$1 tps before after file scope extra=()
	case $v in
		receive) file=receive.sql; scope=recv
			extra=(-D base="$((RANDOM * 100000000000))" -D span=99999999999) ;;
		one) file=work_one.sql; scope=work-one ;;
		poll) file=work_poll.sql; scope=work-poll ;;
		hand) file=queue_hand.sql; scope=hand ;;
		batch) file=work_batch.sql; scope=work-batch ;;
		claim) file=claim.sql; scope=claim
			extra=(-D base="$((RANDOM * 100000000000))" -D span=99999999999) ;;
		pgmq_one) file=pgmq_one.sql; scope=bench ;;
		pgmq_batch) file=pgmq_batch.sql; scope=bench_batch ;;
		pgmq_send) file=pgmq_send.sql; scope=bench_send
			extra=(-D base="$((RANDOM * 100000000000))" -D span=99999999999) ;;
	esac
	sql "CHECKPOINT" >/dev/null
	case $v in
		receive|claim) before=$(sql "SELECT count(*) FROM inbox.entries WHERE scope = '$scope'") ;;
		hand) before=$(sql "SELECT -count(*) FROM hand_queue") ;;
		pgmq_send) before=$(sql "SELECT count(*) FROM pgmq.q_$scope") ;;
		pgmq_*) before=$(sql "SELECT -count(*) FROM pgmq.q_$scope") ;;
		*) before=$(sql "SELECT count(*) FROM inbox.entries WHERE scope = '$scope' AND state = 'd'") ;;
	esac
	tps=$(pgbench_tps "deferred variant $v" -T "$def_seconds" -D scope="$scope" "${extra[@]}" \
		-f "$here/$file") || exit 1
	case $v in
		receive|claim) after=$(sql "SELECT count(*) FROM inbox.entries WHERE scope = '$scope'") ;;
		hand) after=$(sql "SELECT -count(*) FROM hand_queue") ;;
		pgmq_send) after=$(sql "SELECT count(*) FROM pgmq.q_$scope") ;;
		pgmq_*) after=$(sql "SELECT -count(*) FROM pgmq.q_$scope") ;;
		*) after=$(sql "SELECT count(*) FROM inbox.entries WHERE scope = '$scope' AND state = 'd'") ;;
	esac
	awk -v t="$tps" -v n="$((after - before))" -v s="$def_seconds" \
		'BEGIN { printf "%s %.1f\n", t, n / s }'
}

declare -A def_msgs=() def_med=()
variants=(receive one poll hand batch claim)
[ "$have_pgmq" = 1 ] && variants+=(pgmq_send pgmq_one pgmq_batch)
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
# A worker scope or queue that ran dry was measured taking nothing
dry=$(sql "SELECT string_agg(s, ', ') FROM unnest(ARRAY['work-one', 'work-batch', 'work-poll']) s
		   WHERE NOT EXISTS (SELECT FROM inbox.entries e WHERE e.scope = s AND e.state = 'p')")
[ -z "$dry" ] || fail "deferred: scope(s) $dry ran out of pending messages; raise BENCH_DEFERRED_BACKLOG"
if [ "$have_pgmq" = 1 ]; then
	dry=$(sql "SELECT (SELECT count(*) FROM pgmq.q_bench) * (SELECT count(*) FROM pgmq.q_bench_batch)")
	[ "$dry" != 0 ] || fail "deferred: a pgmq queue ran out of messages; raise BENCH_DEFERRED_BACKLOG"
fi

echo "| variant | what one transaction does | messages/s median | min | max |"
echo "|---|---|---:|---:|---:|"
for v in "${variants[@]}"; do
	read -r med min max <<<"$(stats "${def_msgs[$v]}")"
	def_med[$v]=$med
	case $v in
		poll) what="inbox_poll 1 (lease, receipt) + INSERT + inbox_complete by receipt, one transaction" ;;
		hand) what="hand-written queue: DELETE ... SKIP LOCKED LIMIT 1 RETURNING + INSERT, one transaction" ;;
		receive) what="inbox_receive of a new message (autocommit)" ;;
		one) what="inbox_take 1 + INSERT + inbox_complete, one transaction" ;;
		batch) what="CALL: durable inbox_take of 10, then INSERT + inbox_complete per message, each committed" ;;
		claim) what="inbox_claim + INSERT (variant c), same cluster" ;;
		pgmq_send) what="pgmq.send of a new message (autocommit)" ;;
		pgmq_one) what="pgmq.read 1 (30 s) + INSERT + pgmq.delete, one transaction" ;;
		pgmq_batch) what="CALL: pgmq.read of 10 (committed), then INSERT + pgmq.delete per message, each committed" ;;
	esac
	echo "| $v | $what | $med | $min | $max |"
done
echo
echo "Every completed message has exactly one order ($bad without). $left message(s) were left processing by workers pgbench stopped mid-batch; their sessions have ended, so the next take would recover them."
echo
awk -v o="${def_med[one]}" -v p="${def_med[poll]}" -v h="${def_med[hand]}" 'BEGIN {
	printf "Ratios: one/hand %.2f, poll/hand %.2f (the hand-written queue deduplicates nothing and keeps no history).\n\n", o / h, p / h }'
if [ "$have_pgmq" = 1 ]; then
	awk -v o="${def_med[one]}" -v p="${def_med[poll]}" -v b="${def_med[batch]}" -v r="${def_med[receive]}" \
		-v po="${def_med[pgmq_one]}" -v pb="${def_med[pgmq_batch]}" -v ps="${def_med[pgmq_send]}" 'BEGIN {
		printf "Against pgmq (targets 1.0): one/pgmq_one %.2f, poll/pgmq_one %.2f, batch/pgmq_batch %.2f, receive/pgmq_send %.2f.\n\n",
			o / po, p / po, b / pb, r / ps }'
fi

complete_bench

. "$here/plans.sh"
