# test/faults/LoadBroker.pm - the broker of the load driver
# (test/faults/load.pl): what each consumer (claim mode) or receiver
# (deferred mode) delivers, when, and how often.
#
# Broker state lives in the consumer processes, never in the database, so
# that a crash restart cannot make it inconsistent.  Consumer i owns the
# ids n = i (mod consumers), delivered first in a seeded random order,
# spread over the load phase.  A delivery that was not acked goes back to
# the same consumer (requeue), which delivers it again until it is acked.
# After an ack, the broker may redeliver the id to another consumer,
# through a pipe, after a random delay (schedule_redelivery); that
# consumer's claim or receive of it is guarded on the server by the
# horizon (live_deliveries, or the guarded statements).
#
# How a delivery is made is the mode's: run_consumer takes the functions
# that make one delivery and a batch of them (LoadClaim, LoadDeferred),
# which settle each delivery with the helpers here.
package LoadBroker;

use strict;
use warnings;

use Exporter qw(import);
use Fcntl qw(F_GETFL F_SETFL O_NONBLOCK);
use List::Util qw(max min shuffle);
use POSIX qw(ceil);
use Time::HiRes qw(time sleep);

use LoadRun;
use LoadSession;

our @EXPORT = qw(
  open_pipes close_pipes run_consumer
  requeue acked check_late count_delivery
  live_deliveries batch_call failed_transaction);

# --- the pipes of the redeliveries --------------------------------------------------

# One pipe per consumer: redeliveries of acked ids from the others
my (@pipe_r, @pipe_w);

# In the driver, before it forks the consumers
sub open_pipes
{
	for my $i (0 .. $opt{consumers} - 1)
	{
		pipe(my $r, my $w) or die "pipe: $!";
		for my $fh ($r, $w)
		{
			my $flags = fcntl($fh, F_GETFL, 0) or die "fcntl: $!";
			fcntl($fh, F_SETFL, $flags | O_NONBLOCK) or die "fcntl: $!";
		}
		push @pipe_r, $r;
		push @pipe_w, $w;
	}
}

# In the driver once it has forked, and in the workers: they use none
sub close_pipes
{
	close $_ for @pipe_r, @pipe_w;
}

sub read_redeliveries
{
	my ($c) = @_;
	my $fh = $pipe_r[ $c->{i} ];
	while (1)
	{
		my $got = sysread($fh, my $buf, 65536);
		last unless $got;
		$c->{inbuf} .= $buf;
	}
	while ($c->{inbuf} =~ s/^(\d+) (\S+) (\S+)\n//)
	{
		my $d = { id => $1, kind => 'redelivery', t0 => $2, due => $3, attempt => 1 };
		$c->{busy_at} = time;
		if (!$c->{loading})
		{
			$c->{n}{redeliveries_dropped}++;
			next;
		}
		my $p = $c->{pending};
		my $k = @$p;
		$k-- while $k > 0 && $p->[ $k - 1 ]{due} > $d->{due};
		splice @$p, $k, 0, $d;
	}
}

# The broker redelivers an acked id to another consumer, later.
sub schedule_redelivery
{
	my ($c, $id, $t0) = @_;
	return unless $c->{loading} && defined $t0 && rand() < $opt{redeliver};
	my $to = $c->{i};
	$to = int(rand($opt{consumers} - 1) + $c->{i} + 1) % $opt{consumers} if $opt{consumers} > 1;
	my $line = sprintf("%d %s %.6f\n", $id, $t0, time + rand($opt{redelivery_delay}));
	my $wrote = syswrite($pipe_w[$to], $line);
	if (defined $wrote && $wrote == length $line)
	{
		$c->{n}{redeliveries_sent}++;
	}
	else
	{
		$c->{n}{redeliveries_dropped}++;    # pipe full: the broker skips one
	}
}

# --- what a consumer delivers next --------------------------------------------------

# State of one consumer or receiver
sub new_consumer
{
	my ($i) = @_;
	srand($opt{seed} * 7919 + $i * 104729 + 1);
	my @slice = shuffle(grep { $_ % $opt{consumers} == $i } 1 .. $opt{ids});
	my $c = new_process("$app-" . ($deferred ? 'receiver' : 'consumer') . "-$i",
		qw(deliveries first retries redeliveries fresh duplicates_suppressed
		  aborts expired interrupted uncertain uncertain_committed uncertain_not_committed
		  effects_expected reconnects errors late redeliveries_sent redeliveries_dropped
		  batches));
	%$c = (
		%$c,
		i => $i,
		slice => \@slice,
		next => 0,
		quota => $opt{deliveries} ? ceil($opt{deliveries} / $opt{consumers}) : 0,
		loading => 1,
		busy_at => 0,      # last delivery made or redelivery received
		retry => [],       # not acked: delivered again by this consumer
		pending => [],     # redeliveries of acked ids, sorted by due time
		inbuf => '',
		acked => {},
		delivered => [],
	);
	return $c;
}

sub still_loading
{
	my ($c) = @_;
	return 0 unless $c->{loading};
	my $n = $c->{n};
	if ((defined $t_end && time >= $t_end)
		|| ($c->{quota} && $n->{deliveries} >= $c->{quota})
		|| (!defined $t_end && $c->{next} >= @{ $c->{slice} } && !@{ $c->{pending} }
			&& time - $c->{busy_at} > $opt{redelivery_delay} + 1))
	{
		$c->{loading} = 0;
	}
	return $c->{loading};
}

# When the k-th first delivery of the slice is due
sub first_due
{
	my ($c, $k) = @_;
	return $t_start unless defined $t_end;
	return $t_start + $opt{duration} * $k / max(1, scalar @{ $c->{slice} });
}

# The delivery to make next, or undef to wait; 'done' when drained.
sub next_delivery
{
	my ($c) = @_;
	read_redeliveries($c);
	my $loading = still_loading($c);
	while (my $d = shift @{ $c->{retry} })
	{
		# Once the load phase is over, acked ids need no more redeliveries.
		if (!$loading && $d->{kind} eq 'redelivery')
		{
			$c->{n}{redeliveries_dropped}++;
			next;
		}
		return $d;
	}
	if (!$loading)
	{
		$c->{n}{redeliveries_dropped} += @{ $c->{pending} };
		$c->{pending} = [];
		return 'done';
	}
	my $now = time;
	if (@{ $c->{pending} } && $c->{pending}[0]{due} <= $now)
	{
		return shift @{ $c->{pending} };
	}
	if ($c->{next} < @{ $c->{slice} } && first_due($c, $c->{next}) <= $now)
	{
		my $id = $c->{slice}[ $c->{next}++ ];
		push @{ $c->{delivered} }, $id;
		return { id => $id, kind => 'first', attempt => 1 };
	}
	return undef;
}

# --- a consumer process -----------------------------------------------------------

# The consumer (or receiver) $i, in its forked process: delivers until
# drained, each delivery with $deliver->($c, $delivery), or, when the
# mode's batch size is above 1, each batch of due deliveries with
# $deliver_batch->($c, [ $delivery, ... ]).  Never returns.
sub run_consumer
{
	my ($i, $deliver, $deliver_batch) = @_;
	child_setup("consumer-$i");
	my $c = new_consumer($i);
	for my $j (0 .. $#pipe_r)
	{
		close $pipe_r[$j] unless $j == $i;
	}
	my $batch_size = $deferred ? $opt{receive_batch} : $opt{claim_batch};
	child_main(
		$c, "consumer-$i",
		sub {
			while (1)
			{
				if (time > $t_hard)
				{
					note_error($c, 'drain timeout');
					last;
				}
				my $d = next_delivery($c);
				if ($batch_size > 1 && ref $d)
				{
					# Gather what else is due, up to the batch size, lingering
					# up to 50 ms for more while the load goes on, as a batch
					# consumer does (Kafka's fetch.max.wait.ms)
					my @batch = ($d);
					my $linger = time + 0.05;
					while (@batch < $batch_size)
					{
						my $more = next_delivery($c);
						if (ref $more)
						{
							push @batch, $more;
							next;
						}
						last if !defined $more && !$c->{loading};
						last if defined $more || time >= $linger;
						sleep 0.005;
					}
					$c->{busy_at} = time;
					$deliver_batch->($c, \@batch);
					next;
				}
				last if defined $d && $d eq 'done';
				if (!defined $d)
				{
					my $wait = 0.02;
					$wait = min($wait, $c->{pending}[0]{due} - time) if @{ $c->{pending} };
					$wait = min($wait, first_due($c, $c->{next}) - time) if $c->{next} < @{ $c->{slice} };
					sleep max($wait, 0.001);
					next;
				}
				$c->{busy_at} = time;
				$deliver->($c, $d);
			}
		},
		# The ids this consumer delivered first, and those never acked
		sub {
			return {
				delivered => $c->{delivered},
				unacked => [ grep { !$c->{acked}{$_} } @{ $c->{delivered} } ]
			};
		});
}

# --- settling a delivery ------------------------------------------------------------

# A delivery that was not acked goes back to its consumer.
sub requeue
{
	my ($c, $d, %also) = @_;
	my $again = { %$d, %also, attempt => $d->{attempt} + 1 };
	$again->{kind} = 'retry' if $again->{kind} eq 'first';
	if ($again->{attempt} > 50)
	{
		note_error($c, "message $d->{id} given up after 50 attempts");
		return;
	}
	push @{ $c->{retry} }, $again;
}

# The delivery $d was processed, or found processed already; $t0 is the
# received_at of its entry, which any redelivery must respect.
sub acked
{
	my ($c, $d, $t0) = @_;
	$c->{acked}{ $d->{id} } = 1 unless $d->{kind} eq 'redelivery';
	schedule_redelivery($c, $d->{id}, $t0);
}

# Is it too late to tell a purged entry from an uncommitted one?
sub check_late
{
	my ($c, $t0) = @_;
	if (defined $t0 && time > $t0 + $horizon)
	{
		$c->{n}{late}++;
		note_error($c, sprintf('an uncertain commit was resolved %.1fs after received_at, past the horizon',
				time - $t0));
	}
}

# A delivery claimed or received (fresh) or found a duplicate, in the counters
sub count_delivery
{
	my ($n, $d, $fresh) = @_;
	$n->{deliveries}++;
	$n->{ $d->{kind} eq 'first' ? 'first' : $d->{kind} eq 'retry' ? 'retries' : 'redeliveries' }++;
	$n->{ $fresh ? 'fresh' : 'duplicates_suppressed' }++;
}

# The deliveries of the batch @$ds to make, in the transaction of $dbh:
# a redelivery past its horizon (checked on the server) is given up,
# counted as expired and marked in %$expired.  The batch's claim or
# receive follows within milliseconds, far inside the retention, of which
# the horizon is at most half.  A delivery made again after an uncertain
# receive is checked for lateness.
sub live_deliveries
{
	my ($c, $dbh, $ds, $expired) = @_;
	my @live;
	for my $d (@$ds)
	{
		if ($d->{kind} eq 'redelivery' && !(row($dbh, $SQL{guard}, $d->{t0}, $horizon))[0])
		{
			$c->{n}{expired}++;
			$expired->{$d} = 1;
			next;
		}
		check_late($c, $d->{maybe_at}) if $d->{maybe_at} && $d->{kind} ne 'redelivery';
		push @live, $d;
	}
	return @live;
}

# Claim or receive the deliveries @$live with one call of the statement
# $SQL{$name} (claim_many or receive_many: a row per id, in their order,
# with its status and the transaction's start).  Returns whether each was
# fresh (its status is $fresh_status), and that start, which is the
# received_at of the fresh ones.
sub batch_call
{
	my ($c, $dbh, $name, $fresh_status, $live) = @_;
	my $rows = $dbh->selectall_arrayref($dbh->prepare_cached($SQL{$name}), undef, $scope,
		[ map { message_id($_->{id}) } @$live ], [ map { payload($_->{id}) } @$live ]);
	die "inbox_$name returned " . scalar(@$rows) . ' rows for ' . scalar(@$live) . " ids\n"
	  unless @$rows == @$live;
	$c->{n}{batches}++;
	return ([ map { $_->[0] eq $fresh_status ? 1 : 0 } @$rows ], $rows->[0][1]);
}

# After the statements of the deliveries @$ds died with $err in $phase
# ($what names the deliveries in the message).  A session still alive had
# an error of its own: counted, its transaction rolled back, and the
# deliveries made again.  A session lost in $uncertain_phase may or may
# not have committed: returns true, for the caller to resolve.  Lost
# before, it cannot have: the deliveries are made again, counted as
# interrupted.
sub failed_transaction
{
	my ($c, $err, $phase, $uncertain_phase, $what, $ds) = @_;
	if (!connection_lost($c->{dbh}))
	{
		note_error($c, "$phase of $what: $err");
		quietly { $c->{dbh}->rollback } unless $c->{dbh}{AutoCommit};
		requeue($c, $_) for @$ds;
		return 0;
	}
	lose_connection($c);
	return 1 if $phase eq $uncertain_phase;
	$c->{n}{interrupted} += @$ds;
	requeue($c, $_) for @$ds;
	return 0;
}

1;
