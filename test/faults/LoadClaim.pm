# test/faults/LoadClaim.pm - the claim mode of the load driver
# (test/faults/load.pl): each consumer claims a delivery with inbox_claim
# (or a batch with inbox_claim_many) and inserts the effect of each fresh
# claim in the same transaction, then commits, then acks.
#
# Faults: with probability --abort, the transaction rolls back after the
# claims and the effects (not acked: delivered again).  A session lost
# before COMMIT cannot have committed (delivered again).  A session lost
# during COMMIT leaves the outcome unknown: it is resolved as the README's
# "Uncertain commits" says, with inbox_status, and a delivery whose entry
# is not there is processed again through the normal path.
package LoadClaim;

use strict;
use warnings;

use Exporter qw(import);
use Time::HiRes qw(time);

use LoadBroker;
use LoadRun;
use LoadSession;

our @EXPORT = qw(claim_one claim_batch);

# One delivery, one transaction
sub claim_one
{
	my ($c, $d) = @_;
	my $n = $c->{n};
	my $mid = message_id($d->{id});
	my ($phase, $fresh, $t0, $abort) = ('connect');
	my $ok = eval {
		my $dbh = ensure_connected($c);
		$phase = 'claim';
		$dbh->begin_work;
		if ($d->{kind} eq 'redelivery')
		{
			# Only inside the horizon; a redelivery past it is given up.
			($fresh, $t0) = row($dbh, $SQL{claim_guarded}, $scope, $mid, payload($d->{id}),
				$d->{t0}, $horizon);
			if (!defined $fresh)
			{
				$dbh->rollback;
				$phase = 'expired';
				return 1;
			}
		}
		else
		{
			($fresh, $t0) = row($dbh, $SQL{claim}, $scope, $mid, payload($d->{id}));
		}
		count_delivery($n, $d, $fresh);
		$phase = 'effect';
		run_sql($dbh, $SQL{effect}, $scope, $mid, $c->{name}, $d->{attempt}) if $fresh;
		if ($c->{loading} && rand() < $opt{abort})
		{
			$dbh->rollback;
			$abort = 1;
			return 1;
		}
		$phase = 'commit';
		$dbh->commit;
		1;
	};
	if ($ok)
	{
		if ($phase eq 'expired')
		{
			$n->{expired}++;
			return;
		}
		claims_ended($c, [$d], [$fresh], $t0, $abort);
		return;
	}
	resolve_claims($c, [$d], [$fresh], $t0)
	  if failed_transaction($c, $@, $phase, 'commit', $mid, [$d]);
}

# With --claim-batch: the deliveries @$ds claimed together by
# inbox_claim_many, in one transaction with their effects.  Each is
# counted, acked or delivered again as claim_one does it.
sub claim_batch
{
	my ($c, $ds) = @_;
	my ($phase, $t0, $abort, $fresh, @live, %expired) = ('connect');
	my $ok = eval {
		my $dbh = ensure_connected($c);
		$phase = 'claim';
		$dbh->begin_work;
		@live = live_deliveries($c, $dbh, $ds, \%expired);
		if (!@live)
		{
			$dbh->rollback;
			return 1;
		}
		($fresh, $t0) = batch_call($c, $dbh, 'claim_many', 'claimed', \@live);
		count_delivery($c->{n}, $live[$_], $fresh->[$_]) for 0 .. $#live;
		$phase = 'effect';
		for my $k (grep { $fresh->[$_] } 0 .. $#live)
		{
			run_sql($dbh, $SQL{effect}, $scope, message_id($live[$k]{id}), $c->{name}, $live[$k]{attempt});
		}
		if ($c->{loading} && rand() < $opt{abort})
		{
			$dbh->rollback;
			$abort = 1;
			return 1;
		}
		$phase = 'commit';
		$dbh->commit;
		1;
	};
	if ($ok)
	{
		claims_ended($c, \@live, $fresh, $t0, $abort);
		return;
	}
	# Every delivery not given up, including those the guard had not
	# reached when the error came
	my @all = grep { !$expired{$_} } @$ds;
	resolve_claims($c, \@live, $fresh, $t0)
	  if failed_transaction($c, $@, $phase, 'commit', 'a batch of ' . scalar(@all), \@all);
}

# The claiming transaction of the deliveries @$ds ended as planned.
# Rolled back on purpose ($abort): each is delivered again.  Committed:
# each is acked; the fresh ones ($fresh->[k] true) made an effect, and
# their entries' received_at is the transaction's start, $t0.
sub claims_ended
{
	my ($c, $ds, $fresh, $t0, $abort) = @_;
	my $n = $c->{n};
	for my $k (0 .. $#$ds)
	{
		my $d = $ds->[$k];
		if ($abort)
		{
			$n->{aborts}++;
			requeue($c, $d);
			next;
		}
		$n->{effects_expected}++ if $fresh->[$k];
		acked($c, $d, $fresh->[$k] ? $t0 : $d->{t0});
	}
}

# The COMMIT of the deliveries @$ds was lost with the session: it
# committed or not, as a whole.  Each delivery is resolved as a single
# one would be (README, "Uncertain commits").
sub resolve_claims
{
	my ($c, $ds, $fresh, $t0) = @_;
	my $n = $c->{n};
	$n->{uncertain}++;
	for my $k (0 .. $#$ds)
	{
		my $d = $ds->[$k];
		my $received_at = resolve_uncertain($c, $d, $t0);
		if (defined $received_at)
		{
			$n->{uncertain_committed}++;
			$n->{effects_expected}++ if $fresh->[$k];
			acked($c, $d, $fresh->[$k] ? $received_at : $d->{t0});
		}
		else
		{
			# Step 2: process it again through inbox_claim.
			$n->{uncertain_not_committed}++;
			requeue($c, $d);
		}
	}
}

# After a lost COMMIT: did it commit?  (README, "Uncertain commits", step 1)
# Returns the entry's received_at (epoch) if it did, undef if not.
sub resolve_uncertain
{
	my ($c, $d, $t0) = @_;
	while (1)
	{
		my $dbh = ensure_connected($c);
		my @row = eval { row($dbh, $SQL{status}, $scope, message_id($d->{id})) };
		if (!$@)
		{
			check_late($c, $t0);
			return $row[0];
		}
		if (!connection_lost($dbh))
		{
			note_error($c, "inbox_status: $@");
			return undef;
		}
		lose_connection($c);
		return undef if time > $t_hard;
	}
}

1;
