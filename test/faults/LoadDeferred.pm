# test/faults/LoadDeferred.pm - the deferred mode of the load driver
# (test/faults/load.pl): receivers and workers.
#
# The receivers are the broker's consumers: inbox_receive of a delivery
# in autocommit (or, with --receive-batch, inbox_receive_many of a batch
# in one transaction), then ack.  A receive whose session was lost may or
# may not have committed: it is delivered again at once, and a second
# receive of a received message returns false.
#
# The workers loop on inbox_take (autocommit, so that the take is
# durable), or with --receipts on inbox_poll under a lease; per message
# they insert the effect and complete it in one transaction.  With
# probability --abort during the load phase, that transaction rolls back
# after the effect and the worker gives the message back with inbox_fail.
package LoadDeferred;

use strict;
use warnings;

use Exporter qw(import);
use Time::HiRes qw(time sleep);

use LoadBroker;
use LoadRun;
use LoadSession;

our @EXPORT = qw(receive_one receive_batch run_worker);

# --- the receivers -----------------------------------------------------------------

# One delivery to the receiver, in autocommit
sub receive_one
{
	my ($c, $d) = @_;
	my $mid = message_id($d->{id});
	my ($phase, $fresh, $t0) = ('connect');
	my $ok = eval {
		my $dbh = ensure_connected($c);
		$phase = 'receive';
		if ($d->{kind} eq 'redelivery')
		{
			# Only inside the horizon; a redelivery past it is given up.
			($fresh, $t0) = row($dbh, $SQL{receive_guarded}, $scope, $mid, payload($d->{id}),
				$d->{t0}, $horizon);
			if (!defined $fresh)
			{
				$phase = 'expired';
				return 1;
			}
		}
		else
		{
			check_late($c, $d->{maybe_at}) if $d->{maybe_at};
			($fresh, $t0) = row($dbh, $SQL{receive}, $scope, $mid, payload($d->{id}));
		}
		1;
	};
	if ($ok)
	{
		if ($phase eq 'expired')
		{
			$c->{n}{expired}++;
			return;
		}
		receives_ended($c, [$d], [$fresh], $t0);
		return;
	}
	# The receive commits by itself: its outcome is unknown if the session
	# was lost during it.
	receives_uncertain($c, [$d]) if failed_transaction($c, $@, $phase, 'receive', $mid, [$d]);
}

# With --receive-batch: the deliveries @$ds received together by
# inbox_receive_many, in one transaction.  Each is counted, acked or
# delivered again as receive_one does it; redeliveries past their horizon
# are given up.
sub receive_batch
{
	my ($c, $ds) = @_;
	my ($phase, $t0, $fresh, @live, %expired) = ('connect');
	my $ok = eval {
		my $dbh = ensure_connected($c);
		$phase = 'receive';
		$dbh->begin_work;
		@live = live_deliveries($c, $dbh, $ds, \%expired);
		if (!@live)
		{
			$dbh->rollback;
			return 1;
		}
		($fresh, $t0) = batch_call($c, $dbh, 'receive_many', 'received', \@live);
		$phase = 'commit';
		$dbh->commit;
		1;
	};
	if ($ok)
	{
		receives_ended($c, \@live, $fresh, $t0);
		return;
	}
	my @all = grep { !$expired{$_} } @$ds;
	receives_uncertain($c, \@live)
	  if failed_transaction($c, $@, $phase, 'commit', 'a batch of ' . scalar(@all), \@all);
}

# The deliveries @$ds were received ($fresh->[k] true, at $t0, the
# transaction's start) or found received already: each is counted and
# acked with its entry's received_at.
sub receives_ended
{
	my ($c, $ds, $fresh, $t0) = @_;
	for my $k (0 .. $#$ds)
	{
		my $d = $ds->[$k];
		count_delivery($c->{n}, $d, $fresh->[$k]);
		my $chain = $fresh->[$k] ? $t0 : $d->{t0};
		# A retry that found the message already received: its
		# received_at is what later redeliveries must respect.
		($chain) = quietly { row($c->{dbh}, $SQL{status}, $scope, message_id($d->{id})) }
		  if !defined $chain;
		acked($c, $d, $chain);
	}
}

# The receives of the deliveries @$ds may or may not have committed:
# each is delivered again, at once.
sub receives_uncertain
{
	my ($c, $ds) = @_;
	$c->{n}{uncertain} += @$ds;
	requeue($c, $_, maybe_at => time) for @$ds;
}

# --- the workers -------------------------------------------------------------------

# The worker $i, in its forked process: takes (or polls) and processes
# messages until SIGTERM; after SIGUSR1 (the load phase is over) it
# injects no more faults.  Never returns.
sub run_worker
{
	my ($i) = @_;
	child_setup("worker-$i");
	srand($opt{seed} * 15485863 + $i * 32452843 + 7);
	close_pipes();
	my ($stop, $calm) = (0, 0);
	$SIG{TERM} = sub { $stop = 1 };
	$SIG{USR1} = sub { $calm = 1 };
	my $c = new_process("$app-worker-$i",
		qw(takes taken completed aborts fail_dead in_hand_lost
		  uncertain_commits reconnects errors cross_session stale_receipts));
	$c->{i} = $i;
	child_main($c, "worker-$i", sub { work($c, \$stop, \$calm) });
}

# The worker's loop, until $$stop (or long past the drain timeout)
sub work
{
	my ($c, $stop, $calm) = @_;
	my $n = $c->{n};
	until ($$stop || time > $t_hard + 60)
	{
		my $faults = !$$calm && (!defined $t_end || time < $t_end);
		my $dbh = ensure_connected($c);
		# A take, or with --receipts a poll: rows of (message_id,
		# attempts) or (message_id, attempts, receipt, server pid)
		my $batch = eval {
			$opt{receipts}
			  ? $dbh->selectall_arrayref($dbh->prepare_cached($SQL{poll}), undef,
				$scope, $opt{batch}, $opt{lease}, $opt{poll_wait})
			  : $dbh->selectall_arrayref($dbh->prepare_cached($SQL{take}), undef,
				$scope, $opt{batch});
		};
		if (!$batch)
		{
			my $err = $@;
			note_error($c, ($opt{receipts} ? 'inbox_poll' : 'inbox_take') . ": $err")
			  unless connection_lost($dbh);
			lose_connection($c);
			next;
		}
		$n->{takes}++;
		$n->{taken} += @$batch;
		if (!@$batch)
		{
			# A poll that waited has slept already.
			sleep 0.02 unless $opt{receipts} && $opt{poll_wait} > 0;
			next;
		}
		my $left = @$batch;
		for my $m (@$batch)
		{
			my ($mid, $attempt, $receipt, $poll_pid) = @$m;
			# What names the message: its id for the session that took
			# it, its receipt for any session
			my $key = $opt{receipts} ? $receipt : $mid;
			my ($phase, $abort) = ('effect');
			my $ok = eval {
				$dbh->begin_work;
				run_sql($dbh, $SQL{effect}, $scope, $mid, $c->{name}, $attempt);
				sleep($opt{work} * (0.5 + rand())) if $opt{work} > 0;
				if ($faults && rand() < $opt{abort})
				{
					$dbh->rollback;
					$abort = 1;
					$phase = 'fail';
					my ($state) = row($dbh, $opt{receipts} ? $SQL{fail_receipt} : $SQL{fail},
						$scope, $key, 'injected abort after the effect');
					$n->{fail_dead}++ if $state eq 'dead';
					return 1;
				}
				$phase = 'complete';
				my (undef, $pid) = row($dbh, $opt{receipts} ? $SQL{complete_receipt} : $SQL{complete},
					$scope, $key, qq({"worker": $c->{i}, "attempt": $attempt}));
				$phase = 'commit';
				$dbh->commit;
				$n->{cross_session}++ if $opt{receipts} && $pid != $poll_pid;
				1;
			};
			if ($ok)
			{
				$left--;
				$n->{ $abort ? 'aborts' : 'completed' }++;
				next;
			}
			my $err = $@;
			if ($opt{receipts} && ($phase eq 'complete' || $phase eq 'fail')
				&& ($dbh->state // '') eq 'IB004')
			{
				# The lease ran out and another worker took the message:
				# this effect rolls back, the other worker's counts.
				quietly { $dbh->rollback } if $phase eq 'complete';
				$left--;
				$n->{stale_receipts}++;
				next;
			}
			if (!connection_lost($dbh))
			{
				# Whatever went wrong, the session ends, so that the
				# messages it holds are free for the others at once
				# (with --receipts, once their leases run out).
				note_error($c, "$phase of $mid: $err");
			}
			$n->{uncertain_commits}++ if $phase eq 'commit';
			$n->{in_hand_lost} += $left;
			lose_connection($c);
			last;
		}
	}
}

1;
