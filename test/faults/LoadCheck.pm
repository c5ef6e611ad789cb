# test/faults/LoadCheck.pm - the checks of the load driver
# (test/faults/load.pl) at the end of a run, and its report.
#
# The verdict comes from the database, per id delivered at least once:
# how many effect rows it has (the effects table has no unique constraint,
# so a second effect is a second row) and what inbox_status says of it.
# Then the counters the processes reported are added up into the report
# line, and every inconsistency is a failure:
#
#   lost      an id with no effect whose entry is done (or purged)
#   doubled   an id with more than one effect
#   stray     an effect of an id that was never delivered
#   unacked   an id delivered but never acked by the end of the drain
#   late      an uncertain commit resolved past the horizon
#   errors    an error other than a lost session
#   claim mode: effects other than the committed fresh claims
#   deferred mode: a dead message with an effect, a message still open
package LoadCheck;

use strict;
use warnings;

use Exporter qw(import);
use List::Util qw(max);
use Time::HiRes qw(time sleep);

use LoadChaos;
use LoadRun;
use LoadSession;

our @EXPORT = qw(wait_settled final_counts report);

# Deferred mode, once the receivers are done: let the workers go on until
# every received message of @$ids is done or dead, for up to
# --drain-timeout seconds.  $$check is the checking session, connected
# again if it is lost (undef if that fails).  Returns a failure if
# messages are left open.
sub wait_settled
{
	my ($check, $ids) = @_;
	my $open = -1;
	my $until = time + $opt{drain_timeout};
	while (time < $until)
	{
		reap();
		($open) = quietly
		{
			row($$check, q{SELECT count(*) FROM unnest($2::text[]) AS i(id),
					LATERAL inbox_status($1, i.id) AS s
				WHERE s.state IN ('pending', 'processing')}, $scope, $ids)
		};
		if (!defined $open)
		{
			drop_connection($$check);
			$$check = eval { connect_retry("$app-check", 60) };
			$open = -1;
			last unless $$check;
			next;
		}
		last if $open == 0;
		last if !running(qr/^worker/);
		sleep 0.25;
	}
	return $open ? ("$open received messages still open after the drain timeout") : ();
}

# The exactly-once counts of the ids @$ids, from the database (the hash
# of the counts named in the header), and a failure if they could not be
# read.  Ends the checking session.
sub final_counts
{
	my ($check, $ids) = @_;
	my %final;
	my $ok = eval {
		my $stats = $check->selectrow_hashref(
			qq{WITH ids AS (SELECT id FROM unnest(\$2::text[]) AS i(id)),
			   effects AS (SELECT message_id, count(*) AS n FROM $table
			                WHERE scope = \$1 GROUP BY message_id),
			   per_id AS (SELECT i.id, coalesce(e.n, 0) AS n, s.state
			                FROM ids AS i
			                LEFT JOIN effects AS e ON e.message_id = i.id
			                LEFT JOIN LATERAL inbox_status(\$1, i.id) AS s ON true)
			 SELECT count(*) AS delivered_ids,
			        count(*) FILTER (WHERE n > 1) AS doubled,
			        count(*) FILTER (WHERE n = 0 AND coalesce(state, 'done') = 'done') AS lost,
			        count(*) FILTER (WHERE state IS NULL AND n = 1) AS purged,
			        count(*) FILTER (WHERE state = 'done') AS done,
			        count(*) FILTER (WHERE state = 'dead') AS dead,
			        count(*) FILTER (WHERE state = 'dead' AND n > 0) AS dead_with_effect,
			        count(*) FILTER (WHERE state IN ('pending', 'processing')) AS open,
			        (SELECT count(*) FROM $table WHERE scope = \$1) AS effects,
			        (SELECT count(*) FROM effects AS e
			          WHERE NOT EXISTS (SELECT FROM ids WHERE ids.id = e.message_id)) AS stray
			   FROM per_id}, undef, $scope, $ids);
		%final = %$stats;
		1;
	};
	drop_connection($check);
	return (\%final, $ok ? () : ('final check failed: ' . one_line($@)));
}

# Print what the processes said on stderr (without server notices), the
# errors they reported, the failures (those of @$failures, and those the
# counts show), and the report line; return the exit status.  $got holds
# the merged results (counters n, the workers' prefixed w_; unacked;
# errors), $final the counts from the database, $expected the number of
# processes.
sub report
{
	my ($got, $final, $failures, $expected) = @_;
	my %n = %{ $got->{n} };
	my %final = %$final;
	my @failures = @$failures;
	my %kills = kill_counts();
	my $count = sub { return $n{ $_[0] } // 0; };
	my $share = sub { my ($part) = @_; return sprintf('%.3f', $n{deliveries} ? $part / $n{deliveries} : 0); };

	my @report = (mode => $opt{mode}, scope => $scope, seed => $opt{seed});
	if ($deferred)
	{
		push @report,
		  receivers => $opt{consumers}, workers => $opt{workers}, ids => $opt{ids},
		  delivered_ids => $final{delivered_ids} // 0,
		  deliveries => $count->('deliveries'), received => $count->('fresh'),
		  duplicates_suppressed => $count->('duplicates_suppressed'),
		  redeliveries => $count->('redeliveries'), redelivery_share => $share->($count->('redeliveries')),
		  retries => $count->('retries'), expired => $count->('expired'),
		  uncertain_receives => $count->('uncertain'),
		  takes => $count->('w_takes'), taken => $count->('w_taken'), completed => $count->('w_completed'),
		  aborts => $count->('w_aborts'),
		  abort_share => sprintf('%.3f', $n{w_taken} ? $count->('w_aborts') / $n{w_taken} : 0),
		  failed_dead => $count->('w_fail_dead'), lost_in_hand => $count->('w_in_hand_lost'),
		  uncertain_commits => $count->('w_uncertain_commits');
		push @report, receive_batch => $opt{receive_batch}, receive_batches => $count->('batches')
		  if $opt{receive_batch} > 1;
		push @report, receipts => 1, cross_session => $count->('w_cross_session'),
		  stale_receipts => $count->('w_stale_receipts')
		  if $opt{receipts};
	}
	else
	{
		push @report,
		  consumers => $opt{consumers}, claim_batch => $opt{claim_batch}, batches => $count->('batches'),
		  ids => $opt{ids},
		  delivered_ids => $final{delivered_ids} // 0,
		  deliveries => $count->('deliveries'), first => $count->('first'), retries => $count->('retries'),
		  redeliveries => $count->('redeliveries'), redelivery_share => $share->($count->('redeliveries')),
		  duplicates_suppressed => $count->('duplicates_suppressed'),
		  aborts => $count->('aborts'), abort_share => $share->($count->('aborts')),
		  expired => $count->('expired'), interrupted => $count->('interrupted'),
		  uncertain => $count->('uncertain'), uncertain_committed => $count->('uncertain_committed'),
		  effects_expected => $count->('effects_expected');
	}
	# Every process connects once at its start: only the others are
	# reconnects.
	my $reconnects = $count->('reconnects') + $count->('w_reconnects') - $expected;
	push @report,
	  kills => $kills{sigkill} + $kills{terminate}, kills_sigkill => $kills{sigkill},
	  kills_terminate => $kills{terminate},
	  ($deferred ? (kills_workers => $kills{workers}) : ()),
	  reconnects => max(0, $reconnects),
	  effects => $final{effects} // -1, purged => $final{purged} // -1;
	push @report, done => $final{done} // -1, dead => $final{dead} // -1,
	  dead_with_effect => $final{dead_with_effect} // -1, open => $final{open} // -1
	  if $deferred;
	my $errors = $count->('errors') + $count->('w_errors');
	my @unacked = @{ $got->{unacked} };
	push @report,
	  lost => $final{lost} // -1, doubled => $final{doubled} // -1, stray => $final{stray} // -1,
	  unacked => scalar(@unacked), late => $count->('late'), errors => $errors;

	push @failures, "$final{lost} delivered ids have no effect" if $final{lost};
	push @failures, "$final{doubled} ids have more than one effect" if $final{doubled};
	push @failures, "$final{stray} effect rows for ids never delivered" if $final{stray};
	push @failures, scalar(@unacked) . ' delivered ids were never acked' if @unacked;
	push @failures, "$n{late} uncertain commits resolved past the horizon" if $n{late};
	push @failures, "$errors unexpected errors" if $errors;
	if ($deferred)
	{
		push @failures, "$final{dead_with_effect} dead messages have an effect" if $final{dead_with_effect};
		push @failures, "$final{open} messages are neither done nor dead" if $final{open};
	}
	elsif (%final && $final{effects} != $count->('effects_expected'))
	{
		push @failures, "$final{effects} effect rows, but " . $count->('effects_expected')
		  . ' committed fresh claims';
	}
	push @failures, 'nothing was delivered' if %final && !$final{delivered_ids};

	for my $file (sort glob("$tmpdir/*.stderr"))
	{
		open my $in, '<', $file or next;
		while (<$in>)
		{
			print STDERR $_ unless /^(WARNING|DETAIL|HINT|NOTICE):/;
		}
	}
	print STDERR "load.pl: $_\n" for @{ $got->{errors} };
	print STDERR "load.pl: FAILED: $_\n" for @failures;
	my $line = 'inbox-load:';
	while (my ($k, $v) = splice @report, 0, 2)
	{
		$line .= " $k=$v";
	}
	print "$line result=", (@failures ? 'FAILED' : 'ok'), "\n";
	return @failures ? 1 : 0;
}

1;
