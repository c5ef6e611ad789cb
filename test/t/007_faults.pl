# test/t/007_faults.pl
#
# Faults around one consumer transaction, each repeated with fresh message
# ids, and each ending with exactly one effect per message.  The business
# table has no unique constraint, so a double effect shows as two rows and a
# lost one as none.
#
#   a. crash before COMMIT: kill -9 of the consumer's backend after the claim
#      and the effect (the postmaster restarts every backend).  Neither the
#      claim nor the effect survives, and the redelivery is processed as new;
#   b. COMMIT done, ack lost: an immediate shutdown right after COMMIT
#      returned, then crash recovery.  The redelivery is a duplicate (false,
#      or IB001 with inbox.on_duplicate = raise);
#   c. the business change fails after the claim (division by zero in a
#      consumer function; a CHECK violation in the README's psql script
#      consumer under ON_ERROR_STOP).  The claim goes with the rolled-back
#      transaction, and the retry with the fixed statement is processed;
#   d. COMMIT outcome unknown to the client, the README's "Uncertain commits"
#      procedure (a row from inbox_status: ack; no row: process again through
#      inbox_claim).  COMMIT is held deterministically, either after its commit
#      record (waiting for a synchronous standby that never connects) or before
#      it (a deferred trigger waiting for an advisory lock).  Then:
#        - the connection is terminated: committed, or not committed;
#        - the backend is killed with kill -9: committed, or not committed;
#        - the client dies and the old transaction is still in flight: there
#          is no row yet, the redelivery's inbox_claim waits for the old
#          transaction (seen in pg_locks), and returns false when it commits,
#          true when it aborts.
#
# Nothing here asserts how fast anything happens: conditions are polled.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest qw(invoice_payload);
use PostgreSQL::Test::Utils;
use Test::More;

# Repetitions of each scenario, each with its own message ids
my $runs = 5;

# Streaming allowed: synchronous replication needs WAL senders.
my $node = InboxTest->node(
	'faults',
	init => { allows_streaming => 1 },
	conf => q{
inbox.purge_enabled = off
# The test framework turns this off; the kill -9 below needs it.
restart_after_crash = on
# A synchronous standby that never connects.  A session that sets
# synchronous_commit = on then waits in COMMIT after its commit record is
# flushed: committed locally, but COMMIT has not returned to the client.
# Every other session commits locally and does not wait.
synchronous_standby_names = 'ghost'
synchronous_commit = local
});

# The effect, invoices, and the consumer of the README, consume_invoice
$node->sql($InboxTest::invoice_consumer);
$node->sql(q{
	-- A commit-time check that a transaction can ask to hold: COMMIT then
	-- waits for advisory lock 7007 before its commit record is written.
	CREATE FUNCTION hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF current_setting('fault.hold_commit', true) = 'on' THEN
			PERFORM pg_advisory_xact_lock_shared(7007);
		END IF;
		RETURN NULL;
	END $$;
	CREATE CONSTRAINT TRIGGER hold_commit AFTER INSERT ON invoices
		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION hold_commit();

	-- The same consumer before a bug fix: it divides by a quantity of 0.
	CREATE FUNCTION consume_invoice_buggy(message_id text, payload jsonb) RETURNS text
	LANGUAGE plpgsql AS $$
	BEGIN
		IF NOT inbox_claim('billing', message_id, sha256(convert_to(payload::text, 'UTF8'))) THEN
			RETURN 'duplicate';
		END IF;
		INSERT INTO invoices (message_id, number, customer, amount, unit_price)
		VALUES (message_id, payload->>'number', payload->>'customer',
				(payload->>'amount')::numeric,
				(payload->>'amount')::numeric / (payload->>'quantity')::numeric);
		RETURN 'applied';
	END $$;
});

# One delivery through the consumer function, in its own transaction
sub deliver
{
	my ($id) = @_;
	return $node->sql("BEGIN; SELECT consume_invoice('$id', '" . invoice_payload($id) . "'); COMMIT;");
}

# What the database holds for a message, as seen by a new session
sub state_of
{
	my ($id) = @_;
	return $node->sql(qq{
		SELECT 'entries ' || (SELECT count(*) FROM inbox_status('billing', '$id'))
			|| ', effects ' || (SELECT count(*) FROM invoices WHERE message_id = '$id')});
}

# Wait for a session whose connection the server closed: psql exits by
# itself.  Returns its exit status and what it printed on stderr.
sub session_lost
{
	my ($session) = @_;
	$session->{run}->finish;
	return ($session->{run}->result, $session->{stderr});
}

# Ids used by each scenario; tally() reports and checks their effects.
my %ids;
my @order;

sub new_id
{
	my ($scenario, $run) = @_;
	push @order, $scenario unless $ids{$scenario};
	my $id = "$scenario-$run";
	push @{ $ids{$scenario} }, $id;
	return $id;
}

sub tally
{
	my ($scenario) = @_;
	my @ids = @{ $ids{$scenario} };
	my $list = join(',', map { "'$_'" } @ids);
	my ($effects, $doubled, $lost) = split /\|/, $node->sql(qq{
		SELECT coalesce(sum(n), 0), count(*) FILTER (WHERE n > 1), count(*) FILTER (WHERE n = 0)
		  FROM (SELECT (SELECT count(*) FROM invoices WHERE message_id = id) AS n
				  FROM unnest(ARRAY[$list]) AS id) c});
	note "scenario $scenario: runs "
	  . scalar(@ids)
	  . ", effects $effects, doubled $doubled, lost $lost";
	is("$effects/$doubled/$lost", scalar(@ids) . '/0/0',
		"$scenario: one effect per message over " . scalar(@ids) . ' runs');
}

# --- a. crash before COMMIT -------------------------------------------------------
for my $run (1 .. $runs)
{
	my $id = new_id('crash-before-commit', $run);
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	$s->query_safe('BEGIN');
	is($s->query_safe("SELECT consume_invoice('$id', '" . invoice_payload($id) . "')"),
		'applied', "$id: claimed and applied, not committed");
	my $offset = $node->log_position;
	kill 'KILL', $pid;
	$node->wait_crash_restart($offset);
	$s->quit;

	is(state_of($id), 'entries 0, effects 0',
		"$id: after the crash neither the claim nor the effect exists");
	is(deliver($id), 'applied', "$id: the redelivery is processed as new");
	is(state_of($id), 'entries 1, effects 1', "$id: one claim, one effect");
}
tally('crash-before-commit');

# --- b. COMMIT done, ack lost ------------------------------------------------------
for my $run (1 .. $runs)
{
	my $id = new_id('ack-lost', $run);
	is(deliver($id), 'applied', "$id: processed, COMMIT returned");
	# The consumer dies before its ack, and the server with it.
	$node->stop('immediate');
	$node->start;

	is(deliver($id), 'duplicate', "$id: after crash recovery the redelivery is a duplicate");
	my ($rc, $out, $err) = $node->psql('postgres',
		"\\set VERBOSITY verbose\nSET inbox.on_duplicate = raise;\n"
		  . "BEGIN; SELECT consume_invoice('$id', '" . invoice_payload($id) . "'); COMMIT;");
	like($err, qr/ERROR:\s+IB001:/,
		"$id: with inbox.on_duplicate = raise the redelivery raises IB001");
	is(state_of($id), 'entries 1, effects 1', "$id: one claim, one effect");
}
tally('ack-lost');

# --- c. the business change fails --------------------------------------------------
for my $run (1 .. $runs)
{
	# The consumer function: the effect divides by zero after the claim.
	my $id = new_id('business-error-function', $run);
	my ($rc, $out, $err) = $node->psql('postgres',
		"BEGIN; SELECT consume_invoice_buggy('$id', '" . invoice_payload($id) . "'); COMMIT;");
	ok($rc != 0 && $err =~ /division by zero/,
		"$id: the effect fails after the claim (division by zero)");
	is(state_of($id), 'entries 0, effects 0',
		"$id: the rolled-back transaction took the claim with it");
	is(deliver($id), 'applied', "$id: the retry with the fixed consumer is processed");
	is(state_of($id), 'entries 1, effects 1', "$id: one claim, one effect");

	# The README's psql script, no savepoint, ON_ERROR_STOP: the INSERT
	# violates the CHECK and psql stops with the transaction open; the
	# session ends and the transaction is rolled back.
	$id = new_id('business-error-script', $run);
	my $script = sub {
		my ($sign) = @_;
		return qq{
\\set message_id '$id'
\\set payload '{"number": "$id", "customer": "ACME", "amount": 120}'
BEGIN;
SELECT inbox_claim('billing', :'message_id', sha256(convert_to(:'payload', 'UTF8'))) AS fresh \\gset
\\if :fresh
  INSERT INTO invoices (message_id, number, customer, amount)
  SELECT :'message_id', p->>'number', p->>'customer', $sign(p->>'amount')::numeric
  FROM (SELECT :'payload'::jsonb AS p) AS msg;
\\endif
COMMIT;
SELECT :'fresh';
};
	};
	($rc, $out, $err) = $node->psql('postgres', $script->('-'), on_error_stop => 1);
	ok($rc == 3 && $err =~ /violates check constraint/,
		"$id: the script stops on the CHECK violation after the claim");
	is(state_of($id), 'entries 0, effects 0',
		"$id: the open transaction ended with the session, claim included");
	($rc, $out, $err) = $node->psql('postgres', $script->(''), on_error_stop => 1);
	is("$rc:$out", '0:t', "$id: the retry with the fixed statement claims and commits");
	is(state_of($id), 'entries 1, effects 1', "$id: one claim, one effect");
}
tally('business-error-function');
tally('business-error-script');

# --- d. uncertain COMMIT -------------------------------------------------------------
# Deliver $id in a new session and send COMMIT, which stays blocked: with
# $hold = 'syncrep' after its commit record (waiting for the ghost standby),
# with 'trigger' before it (the deferred trigger waits for advisory lock 7007,
# which the caller holds).  Returns the session, its pid and its xid.
sub blocked_commit
{
	my ($id, $hold) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	$s->query_safe($hold eq 'syncrep'
		? 'SET synchronous_commit = on'
		: 'SET fault.hold_commit = on');
	$s->query_safe('BEGIN');
	my $result = $s->query_safe("SELECT consume_invoice('$id', '" . invoice_payload($id) . "')");
	die "$id: the first delivery was not applied: $result" if $result ne 'applied';
	my $xid = $s->query_safe('SELECT pg_current_xact_id()::xid');
	$s->query_until(qr/committing/, "\\echo committing\nCOMMIT;\n");
	my $event = $hold eq 'syncrep' ? 'SyncRep' : 'advisory';
	$node->poll_query_until('postgres',
		"SELECT wait_event = '$event' FROM pg_stat_activity WHERE pid = $pid")
	  or die "$id: COMMIT is not held ($event)";
	return ($s, $pid, $xid);
}

# A session holding advisory lock 7007, which holds COMMITs in the trigger
sub lock_holder
{
	my $h = $node->background_psql('postgres', on_error_stop => 0);
	$h->set_query_timer_restart;
	$h->query_safe('SELECT pg_advisory_lock(7007)');
	return $h;
}

sub release_holder
{
	my ($h) = @_;
	$h->query('SELECT pg_advisory_unlock_all()');
	$h->quit;
}

# The README's procedure after a COMMIT whose outcome the client never
# heard, from a new session: a row means committed, so ack; no row means
# process again through the consumer.
sub recover_uncertain
{
	my ($id) = @_;
	return 'ack' if $node->sql("SELECT count(*) FROM inbox_status('billing', '$id')") == 1;
	return deliver($id);
}

# The same procedure when the old transaction is still in flight: no row
# yet, and the redelivery's inbox_claim must wait for the old transaction.
# $release ends the old transaction; returns what the redelivery did.
sub recover_in_flight
{
	my ($id, $old_xid, $release) = @_;
	is($node->sql("SELECT count(*) FROM inbox_status('billing', '$id')"), 0,
		"$id: no row yet while the old transaction is in flight");
	my $r = $node->background_psql('postgres');
	$r->set_query_timer_restart;
	my $rpid = $r->query_safe('SELECT pg_backend_pid()');
	$r->query_until(qr/redelivering/,
		"\\echo redelivering\nBEGIN;\nSELECT consume_invoice('$id', '" . invoice_payload($id) . "');\n");
	ok( $node->poll_query_until(
			'postgres', qq{
		SELECT count(*) = 1
		  FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		 WHERE l.pid = $rpid AND l.locktype = 'transactionid' AND NOT l.granted
		   AND l.transactionid = '$old_xid' AND a.wait_event = 'transactionid'}),
		"$id: the redelivery's inbox_claim waits for the old transaction");
	$release->();
	my $result = $r->query_safe('COMMIT');
	$r->quit;
	return $result;
}

for my $run (1 .. $runs)
{
	# Committed, then the connection is terminated during the wait: the
	# client is never told that COMMIT succeeded.
	my $id = new_id('uncertain-committed', $run);
	my ($s, $pid, $xid) = blocked_commit($id, 'syncrep');
	$node->sql("SELECT pg_terminate_backend($pid)");
	my ($rc, $err) = session_lost($s);
	ok($rc != 0 && $err =~ /canceling the wait for synchronous replication and terminating connection/,
		"$id: the connection drops during COMMIT, after the commit record");
	is(recover_uncertain($id), 'ack', "$id: inbox_status has the row: ack");
	is(deliver($id), 'duplicate', "$id: a later redelivery is a duplicate");
	is(state_of($id), 'entries 1, effects 1', "$id: one claim, one effect");

	# Not committed: the connection is terminated while COMMIT runs the
	# deferred trigger, before the commit record.
	$id = new_id('uncertain-aborted', $run);
	my $h = lock_holder();
	($s, $pid, $xid) = blocked_commit($id, 'trigger');
	$node->sql("SELECT pg_terminate_backend($pid)");
	($rc, $err) = session_lost($s);
	ok($rc != 0 && $err =~ /terminating connection due to administrator command/,
		"$id: the connection drops during COMMIT, before the commit record");
	is(recover_uncertain($id), 'applied', "$id: no row, processed again");
	is(state_of($id), 'entries 1, effects 1', "$id: one claim, one effect");
	release_holder($h);

	# kill -9 of the backend waiting after its commit record: crash
	# recovery replays the commit.
	$id = new_id('uncertain-crash-committed', $run);
	($s, $pid, $xid) = blocked_commit($id, 'syncrep');
	my $offset = $node->log_position;
	kill 'KILL', $pid;
	$node->wait_crash_restart($offset);
	session_lost($s);
	is(recover_uncertain($id), 'ack', "$id: after the crash inbox_status has the row: ack");
	is(state_of($id), 'entries 1, effects 1', "$id: one claim, one effect");

	# kill -9 of the backend before its commit record
	$id = new_id('uncertain-crash-aborted', $run);
	$h = lock_holder();
	($s, $pid, $xid) = blocked_commit($id, 'trigger');
	$offset = $node->log_position;
	kill 'KILL', $pid;
	$node->wait_crash_restart($offset);
	session_lost($s);
	$h->quit;    # its connection went with the crash
	is(recover_uncertain($id), 'applied', "$id: after the crash there is no row: processed again");
	is(state_of($id), 'entries 1, effects 1', "$id: one claim, one effect");

	# The client dies while the old transaction waits after its commit
	# record; the wait is then cancelled, and the transaction commits.
	$id = new_id('in-flight-committed', $run);
	($s, $pid, $xid) = blocked_commit($id, 'syncrep');
	$s->{run}->kill_kill;
	is( recover_in_flight(
			$id, $xid,
			sub { $node->sql("SELECT pg_cancel_backend($pid)"); }),
		'duplicate',
		"$id: the old transaction committed: the waiting claim returns false");
	is(state_of($id), 'entries 1, effects 1', "$id: one claim, one effect");

	# The client dies while the old transaction waits before its commit
	# record; then its backend is terminated, and the transaction aborts.
	$id = new_id('in-flight-aborted', $run);
	$h = lock_holder();
	($s, $pid, $xid) = blocked_commit($id, 'trigger');
	$s->{run}->kill_kill;
	is( recover_in_flight(
			$id, $xid,
			sub { $node->sql("SELECT pg_terminate_backend($pid)"); }),
		'applied',
		"$id: the old transaction aborted: the waiting claim returns true");
	is(state_of($id), 'entries 1, effects 1', "$id: one claim, one effect");
	release_holder($h);

	# The old backends are gone before the next run.
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE wait_event IN ('SyncRep', 'advisory')")
	  or die 'a held COMMIT is left over';
}
tally($_) for grep { /^(uncertain|in-flight)/ } @order;

is($node->sql('SELECT count(*) FROM invoices'), scalar(map { @{ $ids{$_} } } @order),
	'in all, one effect per message and no stray effect');

$node->stop;
done_testing();
