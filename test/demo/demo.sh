#!/bin/bash
#-------------------------------------------------------------------------
#
# demo.sh
#	  The at-least-once scenario behind "make demo": a simulated broker
#	  delivers every message two or three times, in shuffled order, to
#	  consumers running in parallel, some of which crash or receive an
#	  altered payload; the inbox must still turn this into exactly one
#	  business effect per message.
#
# Everything runs on a throwaway cluster in a fresh temporary directory,
# which the EXIT trap stops and removes however the script ends.  The
# verdict is computed from the database, not from the broker's counters:
# each message sent must have exactly one invoice row with the amount of
# its original payload.  The counters are cross-checked as well.
#
# Run it as a non-root user (initdb refuses root) with PostgreSQL's bindir
# first on PATH and the extension installed; test/tools/run.sh does both.
#
# test/demo/demo.sh
#
#-------------------------------------------------------------------------
set -euo pipefail

# Reproducible: the same seed gives the same messages, copies, order and
# faults.  Only which of two concurrent copies wins a claim is left to the
# scheduler, and the outcome must not depend on it.
SEED=${INBOX_DEMO_SEED:-4242}
RANDOM=$SEED

NMESSAGES=80
NCONSUMERS=4
NCRASH_BEFORE=6			# messages whose first delivery dies before COMMIT
NCRASH_AFTER=6			# messages whose first delivery dies after COMMIT
NALTERED=5				# messages re-sent later with a different payload
MAX_ROUNDS=10			# the broker gives up if acks never arrive

started=$SECONDS
verdict=

die()
{
	echo "demo.sh: $*" >&2
	exit 1
}

#
# The cluster (test/tools/cluster.sh): in a fresh temporary directory,
# reached through its socket there only, stopped and removed by the EXIT
# trap however the script ends.  None of the caller's PG* settings reaches
# our sessions.
#
# shellcheck source=test/tools/cluster.sh
. "$(cd "$(dirname "$0")" && pwd)/../tools/cluster.sh"

# With no TCP listener and the socket in our own directory, the port only
# names the socket file; still, take one that no other server here uses,
# so that ps, logs and a mistyped PGHOST can never confuse the two.
port=$(cluster_free_port $((54320 + $$ % 100)) $((55400 + $$ % 100)) 54399 55499 56789) ||
	die "no free port among the candidates"

# Before the cluster goes: background consumers are stopped first so that
# none is left connecting.  If the script fails before reaching a verdict
# (and was not interrupted), the end of the server log is shown, unless
# the server did not even start (cluster_start showed it then).
# shellcheck disable=SC2317	# only the trap calls it
cluster_before_cleanup()
{
	local rc=$1

	# shellcheck disable=SC2046
	kill $(jobs -p) 2>/dev/null
	wait 2>/dev/null
	if [ "$rc" -ne 0 ] && [ -z "$verdict" ] && [ -z "$cluster_interrupted" ] &&
		[ -n "$cluster_running" ] && [ -s "$cluster_log" ]; then
		echo "--- last lines of the server log ---" >&2
		tail -n 20 "$cluster_log" >&2
	fi
}

cluster_create demo "$port" -U postgres --no-instructions
tmp=$cluster_dir
cluster_conf <<EOF
max_connections = 20
# A demo must end: a claim stuck behind a lost transaction is an error.
statement_timeout = '30s'
# Log every claim that waits for a concurrent copy, so they can be counted
log_lock_waits = on
deadlock_timeout = '1ms'
EOF
cluster_start

export PGDATABASE=postgres PGUSER=postgres

# psql as the script uses it: no psqlrc, no chatter, unaligned tuples only
sql()
{
	psql -X -q -At -v ON_ERROR_STOP=1 "$@"
}

#
# The schema: the extension, the consumer's business table, and what the
# producer sent (for the final check only; consumers never read it).
#
# invoices has no unique key on message_id or invoice_no on purpose: such a
# key would deduplicate on its own and hide what the inbox does.  A double
# effect must show up as a second row.
#
sql <<'EOF'
CREATE EXTENSION inbox;

CREATE TABLE invoices (
	id serial PRIMARY KEY,
	message_id text NOT NULL,
	invoice_no text NOT NULL,
	buyer text NOT NULL,
	amount numeric(12,2) NOT NULL,
	currency text NOT NULL,
	booked_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE demo_sent (
	message_id text PRIMARY KEY,
	payload text NOT NULL
);

-- Consumers run as an ordinary role, granted only what they need.
CREATE ROLE billing LOGIN;
GRANT EXECUTE ON FUNCTION inbox_claim(text, text, bytea) TO billing;
GRANT INSERT ON invoices TO billing;
GRANT USAGE ON SEQUENCE invoices_id_seq TO billing;
EOF

#
# One delivery, as a consumer processes it: claim and effect in one
# transaction, then the ack.  The outcome word it prints stands for the
# consumer's own log; the broker acks every outcome except a crash.
#
# A crash is simulated by ending the session at the given point: the
# server sees the connection drop, exactly as when the process dies, and
# rolls back whatever was not committed.  It strikes whatever the claim
# returned, so the second field (the claim's result) says whether an
# effect was in flight.
#
cat >"$tmp/consumer.sql" <<'EOF'
BEGIN;
SELECT inbox_claim('billing', :'id', sha256(convert_to(:'payload', 'UTF8'))) AS claimed \gset
\if :ERROR
	-- IB002: same id, different content.  Nothing may be applied; the
	-- message goes to the dead-letter queue (which acks it).
	ROLLBACK;
	SELECT CASE :'LAST_ERROR_SQLSTATE' WHEN 'IB002' THEN 'mismatch -'
		ELSE 'error ' || :'LAST_ERROR_SQLSTATE' END;
	\q
\endif
\if :claimed
	INSERT INTO invoices (message_id, invoice_no, buyer, amount, currency)
	SELECT :'id', p->>'invoice_no', p->>'buyer', (p->>'amount')::numeric,
		p->>'currency'
	FROM (SELECT CAST(:'payload' AS jsonb) AS p) AS delivery;
	\if :ERROR
		ROLLBACK;
		\echo error :LAST_ERROR_SQLSTATE
		\q
	\endif
	-- Booking takes a moment, as real work does; a concurrent copy of
	-- this message meanwhile waits in its inbox_claim.
	SELECT pg_sleep(0.02) AS booked \gset
\endif
\if :crash_before
	\echo crashed-before-commit :claimed
	\q
\endif
COMMIT;
\if :ERROR
	\echo error :LAST_ERROR_SQLSTATE
	\q
\endif
\if :crash_after
	\echo crashed-after-commit :claimed
	\q
\endif
\if :claimed
	\echo applied t
\else
	\echo duplicate f
\endif
EOF

#
# The producer: EDI INVOIC messages with a JSON payload
#
buyers=("ACME GmbH" "Globex SA" "Initech Ltd" "Umbrella BV" "Hooli Inc")
ids=()
payloads=()
altered=()
for ((i = 0; i < NMESSAGES; i++)); do
	printf -v ids[i] 'INVOIC-%06d' $((100 + i * 7))
	cents=$((RANDOM * 3 % 99000 + 1000))
	body=$(printf '"invoice_no": "INV-2024-%05d", "buyer": "%s", "currency": "EUR"' \
		$((i + 1)) "${buyers[RANDOM % ${#buyers[@]}]}")
	printf -v payloads[i] '{"unh": "%s", %s, "amount": %d.%02d}' \
		"${ids[i]}" "$body" $((cents / 100)) $((cents % 100))
	# The producer bug: the same id re-sent later with a corrected amount
	cents=$((cents + 1000))
	printf -v altered[i] '{"unh": "%s", %s, "amount": %d.%02d}' \
		"${ids[i]}" "$body" $((cents / 100)) $((cents % 100))
done
for ((i = 0; i < NMESSAGES; i++)); do
	printf '%s\t%s\n' "${ids[i]}" "${payloads[i]}"
done | sql -c "COPY demo_sent FROM STDIN"

#
# The broker
#
# Deliveries are numbered; for each one we keep the message, whether it
# carries the original or the altered payload, the fault injected, the
# delivery it redelivers (if any), and the outcome the consumer reported.
#
d_msg=()
d_variant=()
d_fault=()
d_parent=()
d_word=()
d_claimed=()
ndeliveries=0
queue=()

enqueue()
{
	d_msg[ndeliveries]=$1
	d_variant[ndeliveries]=$2
	d_fault[ndeliveries]=$3
	d_parent[ndeliveries]=$4
	queue+=("$ndeliveries")
	ndeliveries=$((ndeliveries + 1))
}

# Fisher-Yates, in this shell: RANDOM in a subshell would not be seeded
shuffle_queue()
{
	local i j t

	for ((i = ${#queue[@]} - 1; i > 0; i--)); do
		j=$((RANDOM % (i + 1)))
		t=${queue[i]}
		queue[i]=${queue[j]}
		queue[j]=$t
	done
}

# Which messages get which trouble: disjoint sets, drawn from the seed
order=()
for ((i = 0; i < NMESSAGES; i++)); do
	order[i]=$i
done
for ((i = NMESSAGES - 1; i > 0; i--)); do
	j=$((RANDOM % (i + 1)))
	t=${order[i]}
	order[i]=${order[j]}
	order[j]=$t
done
fault=()
for ((k = 0; k < NCRASH_BEFORE + NCRASH_AFTER + NALTERED; k++)); do
	if ((k < NCRASH_BEFORE)); then
		fault[order[k]]=before
	elif ((k < NCRASH_BEFORE + NCRASH_AFTER)); then
		fault[order[k]]=after
	else
		fault[order[k]]=altered
	fi
done

# Every message two or three times.  Half of the messages come as a burst
# (a producer retrying its publish), their copies next to each other in
# the queue, so that different consumers get them at the same moment; the
# other copies are scattered.  The first copy of a message in delivery
# order carries its crash, if it has one.
units=()
for ((i = 0; i < NMESSAGES; i++)); do
	queue=()
	for ((c = 2 + RANDOM % 2; c > 0; c--)); do
		enqueue "$i" original none ""
	done
	if ((RANDOM % 2 == 0)); then
		units+=("${queue[*]}")
	else
		units+=("${queue[@]}")
	fi
done
queue=("${units[@]}")
shuffle_queue
# shellcheck disable=SC2206	# split the bursts back into deliveries
queue=(${queue[*]})
declare -A first_seen=()
for seq in "${queue[@]}"; do
	i=${d_msg[seq]}
	if [ -z "${first_seen[$i]:-}" ]; then
		first_seen[$i]=1
		case ${fault[i]:-} in
			before | after) d_fault[seq]=${fault[i]} ;;
		esac
	fi
done

# One consumer: reads delivery numbers, prints "number outcome claimed".
# It runs in the background, so it must not die on psql's exit status.
# What psql says on stderr is kept per delivery, for the report and for
# diagnosing an unexpected outcome.
mkdir "$tmp/stderr"
consume()
{
	local n=$1 seq i payload before after out

	while read -r seq; do
		i=${d_msg[seq]}
		payload=${payloads[i]}
		[ "${d_variant[seq]}" = altered ] && payload=${altered[i]}
		before=off
		after=off
		[ "${d_fault[seq]}" = before ] && before=on
		[ "${d_fault[seq]}" = after ] && after=on
		out=$(PGUSER=billing PGAPPNAME=consumer-$n \
			psql -X -q -At -v ON_ERROR_STOP=0 \
			-v id="${ids[i]}" -v payload="$payload" \
			-v crash_before=$before -v crash_after=$after \
			-f "$tmp/consumer.sql" 2>"$tmp/stderr/$seq") || true
		echo "$seq ${out:-error none}"
	done
}

committed=()			# messages whose effect is known to be committed
altered_sent=()
round=0
while ((${#queue[@]} > 0)); do
	round=$((round + 1))
	((round <= MAX_ROUNDS)) || die "deliveries still unacked after $MAX_ROUNDS rounds"

	# Hand the queue out round-robin and let the consumers race
	for ((n = 1; n <= NCONSUMERS; n++)); do
		: >"$tmp/round.$n"
	done
	for ((k = 0; k < ${#queue[@]}; k++)); do
		echo "${queue[k]}" >>"$tmp/round.$(((k % NCONSUMERS) + 1))"
	done
	pids=()
	for ((n = 1; n <= NCONSUMERS; n++)); do
		consume "$n" <"$tmp/round.$n" >"$tmp/round.$n.out" &
		pids+=($!)
	done
	for pid in "${pids[@]}"; do
		wait "$pid" || die "a consumer process failed"
	done

	# Collect the outcomes: an ack removes a delivery, a crash (no ack)
	# puts the message back in the queue, without a fault this time.
	queue=()
	while read -r seq word claimed; do
		d_word[seq]=$word
		d_claimed[seq]=$claimed
		i=${d_msg[seq]}
		case $word in
			applied) committed[i]=1 ;;
			duplicate | mismatch) ;;
			crashed-before-commit)
				enqueue "$i" "${d_variant[seq]}" none "$seq"
				;;
			crashed-after-commit)
				[ "$claimed" = t ] && committed[i]=1
				enqueue "$i" "${d_variant[seq]}" none "$seq"
				;;
			*)
				cat "$tmp/stderr/$seq" >&2
				die "delivery $seq of ${ids[i]}: unexpected outcome \"$word $claimed\""
				;;
		esac
	done < <(cat "$tmp"/round.*.out)

	# The altered copies come once the original is committed, as a
	# producer's re-send would; before that they would race the original
	# and whichever came first would win.
	for ((i = 0; i < NMESSAGES; i++)); do
		if [ "${fault[i]:-}" = altered ] && [ -n "${committed[i]:-}" ] &&
			[ -z "${altered_sent[i]:-}" ]; then
			altered_sent[i]=1
			enqueue "$i" altered none ""
		fi
	done
	shuffle_queue
done

#
# The report
#
count_word()
{
	local w=$1 c=0 s

	for ((s = 0; s < ndeliveries; s++)); do
		[ "${d_word[s]:-}" = "$w" ] && c=$((c + 1))
	done
	echo "$c"
}

applied=$(count_word applied)
duplicates=$(count_word duplicate)
mismatches=$(count_word mismatch)
crashed_before=$(count_word crashed-before-commit)
crashed_after=$(count_word crashed-after-commit)
redeliveries=0
altered_deliveries=0
before_holding=0
after_holding=0
redelivery_problems=()
for ((s = 0; s < ndeliveries; s++)); do
	[ "${d_variant[s]}" = altered ] && altered_deliveries=$((altered_deliveries + 1))
	case ${d_word[s]} in
		crashed-before-commit) [ "${d_claimed[s]}" = t ] && before_holding=$((before_holding + 1)) ;;
		crashed-after-commit) [ "${d_claimed[s]}" = t ] && after_holding=$((after_holding + 1)) ;;
	esac
	p=${d_parent[s]}
	[ -n "$p" ] || continue
	redeliveries=$((redeliveries + 1))
	# What the redelivery of a crash must come to
	if [ "${d_word[p]}" = crashed-after-commit ] && [ "${d_word[s]}" != duplicate ]; then
		redelivery_problems+=("${ids[d_msg[s]]}: redelivered after a commit, but ${d_word[s]}")
	fi
	if [ "${d_word[p]}" = crashed-before-commit ] &&
		[ "${d_word[s]}" != applied ] && [ "${d_word[s]}" != duplicate ]; then
		redelivery_problems+=("${ids[d_msg[s]]}: redelivered after a rollback, but ${d_word[s]}")
	fi
done
effects=$((applied + after_holding))
# Claims that found a concurrent copy's claim uncommitted and waited for
# its end (log_lock_waits): the server log is their only trace.
waits=$(grep -c 'still waiting for ShareLock on transaction' "$cluster_log" || true)

printf 'inbox demo: %d consumers, at-least-once broker, seed %s, %d s\n' \
	"$NCONSUMERS" "$SEED" $((SECONDS - started))
printf '  %-36s %4d\n' "messages sent" "$NMESSAGES"
printf '  %-36s %4d  (%d rounds)\n' "deliveries" "$ndeliveries" "$round"
printf '  %-36s %4d  (%d of them ack lost in a crash)\n' "effects applied" "$effects" "$after_holding"
printf '  %-36s %4d\n' "duplicates suppressed" "$duplicates"
printf '  %-36s %4d  (the holder committed or crashed)\n' "claims waiting for a concurrent copy" "$waits"
printf '  %-36s %4d  (IB002, rolled back, dead-lettered)\n' "altered payloads caught" "$mismatches"
# What such a consumer sees, once
awk '/^psql:[^ ]* ERROR: / { sub(/^psql:[^ ]* /, ""); print "      e.g. " $0; exit }' \
	"$tmp"/stderr/* 2>/dev/null || true
printf '  %-36s %4d  (%d with claim and effect rolled back)\n' "crashes before commit" "$crashed_before" "$before_holding"
printf '  %-36s %4d  (%d with an effect committed)\n' "crashes after commit, before ack" "$crashed_after" "$after_holding"
printf '  %-36s %4d\n' "redeliveries of unacked messages" "$redeliveries"

# The counters must add up
problems=("${redelivery_problems[@]}")
((effects == NMESSAGES)) ||
	problems+=("effects applied ($effects) != messages ($NMESSAGES)")
((applied + duplicates + mismatches + crashed_before + crashed_after == ndeliveries)) ||
	problems+=("outcomes do not add up to $ndeliveries deliveries")
((redeliveries == crashed_before + crashed_after)) ||
	problems+=("redeliveries ($redeliveries) != crashes ($((crashed_before + crashed_after)))")
((mismatches == altered_deliveries && altered_deliveries == NALTERED)) ||
	problems+=("mismatches ($mismatches) != altered payloads sent ($altered_deliveries of $NALTERED)")
if ((${#problems[@]} == 0)); then
	echo "consistency: OK"
else
	for p in "${problems[@]}"; do
		echo "consistency: FAIL: $p"
	done
fi

# The verdict, from the database alone: per message sent, how many invoice
# rows, with which amount, and what the inbox recorded.
read -r nsent missing doubled wrong_amount wrong_hash stray nrows nentries < <(sql -F ' ' <<'EOF'
WITH per_message AS (
	SELECT s.message_id,
		count(i.id) AS n,
		coalesce(bool_and(i.amount = (s.payload::jsonb->>'amount')::numeric), false) AS amount_ok,
		coalesce((SELECT st.payload_hash = sha256(convert_to(s.payload, 'UTF8'))
				  FROM inbox_status('billing', s.message_id) AS st), false) AS hash_ok
	FROM demo_sent AS s LEFT JOIN invoices AS i USING (message_id)
	GROUP BY s.message_id, s.payload
)
SELECT count(*),
	count(*) FILTER (WHERE n = 0),
	count(*) FILTER (WHERE n > 1),
	count(*) FILTER (WHERE n = 1 AND NOT amount_ok),
	count(*) FILTER (WHERE NOT hash_ok),
	(SELECT count(*) FROM invoices
	 WHERE message_id NOT IN (SELECT message_id FROM demo_sent)),
	(SELECT count(*) FROM invoices),
	(SELECT count(*) FROM inbox.entries WHERE scope = 'billing')
FROM per_message;
EOF
)

printf 'database: %d messages, %d invoice rows, %d inbox entries; ' "$nsent" "$nrows" "$nentries"
printf 'missing %d, doubled %d, wrong amount %d, wrong hash %d, stray %d\n' \
	"$missing" "$doubled" "$wrong_amount" "$wrong_hash" "$stray"

verdict=reached
status=0
if ((nsent == NMESSAGES && nrows == NMESSAGES && nentries == NMESSAGES &&
	missing + doubled + wrong_amount + wrong_hash + stray == 0)); then
	echo "exactly-once: OK"
else
	echo "exactly-once: FAIL"
	status=1
fi
((${#problems[@]} == 0)) || status=1
exit $status
