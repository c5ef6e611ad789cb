# test/faults/LoadChaos.pm - the killer of the load driver
# (test/faults/load.pl): during the load phase, every --kill-interval
# seconds, the end of a random backend of the run.
#
# With --kill-method sigkill (or auto, when the server runs on this
# machine under this OS user), the backend gets kill -9: with
# restart_after_crash = on the postmaster then restarts every backend, so
# every session of the run is lost at once.  Otherwise (terminate, or auto
# on a remote server) pg_terminate_backend ends that backend alone.
package LoadChaos;

use strict;
use warnings;

use Exporter qw(import);
use Time::HiRes qw(time sleep);

use LoadRun;
use LoadSession;

our @EXPORT = qw(load_phase kill_counts);

my %kills = (sigkill => 0, terminate => 0, workers => 0);
my $killer;          # the killer's own session
my $local_server;    # whether kill -9 can reach the server's processes

# How many backends were ended: by kill -9 (sigkill), by
# pg_terminate_backend (terminate), and how many of them were workers'
sub kill_counts { return %kills; }

# Is $pid a process of a PostgreSQL server (and ours to read)?
sub postgres_process
{
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/comm" or return 0;
	my $comm = <$fh> // '';
	return $comm =~ /^postgres/;
}

# End one backend of the run; true if one was.
sub kill_one
{
	$killer //= quietly { connect_once("$app-killer") };
	return 0 unless $killer;
	my $rows = quietly
	{
		if (!defined $local_server)
		{
			my ($addr) = row($killer, 'SELECT host(inet_server_addr())');
			$local_server = !defined $addr || $addr eq '127.0.0.1' || $addr eq '::1' ? 1 : 0;
		}
		$killer->selectall_arrayref(
			q{SELECT pid, application_name, xact_start IS NOT NULL
			    FROM pg_stat_activity
			   WHERE application_name LIKE $1 AND pid <> pg_backend_pid()
			   ORDER BY pid}, undef, "$app-%");
	};
	if (!$rows)
	{
		drop_connection($killer);
		$killer = undef;
		return 0;
	}
	my @all = grep { $_->[1] !~ /-(killer|setup|check)$/ } @$rows;
	return 0 unless @all;
	# Prefer sessions in a transaction, and in deferred mode the workers.
	my @busy = grep { $_->[2] } @all;
	my @busy_workers = grep { $_->[1] =~ /-worker-/ } @busy;
	my @pool = @busy_workers && rand() < 0.75 ? @busy_workers : @busy ? @busy : @all;
	my ($pid, $name) = @{ $pool[ int rand @pool ] };

	if ($opt{kill_method} ne 'terminate' && $local_server && postgres_process($pid)
		&& kill('KILL', $pid))
	{
		$kills{sigkill}++;
		# The crash restart ends every session, the killer's too.
		drop_connection($killer);
		$killer = undef;
	}
	elsif ($opt{kill_method} eq 'sigkill')
	{
		print STDERR "load.pl: cannot kill -9 backend $pid (server not local, or another OS user): "
		  . "no more kills in this run\n";
		$opt{kill_interval} = 0;
		return 0;
	}
	else
	{
		my ($done) = quietly { row($killer, 'SELECT pg_terminate_backend($1)', $pid) };
		return 0 unless $done;
		$kills{terminate}++;
	}
	$kills{workers}++ if $name =~ /-worker-/;
	printf STDERR "load.pl: t=%.1fs kill %d of %s (backend %d)\n", time - $t_start,
	  $kills{sigkill} + $kills{terminate}, $name, $pid
	  if $opt{progress};
	return 1;
}

# The load phase, in the driver: until it ends (or a consumer has), a
# kill every --kill-interval seconds (0: none).  Then the workers are
# told that the faults are over.
sub load_phase
{
	my $next_kill = $t_start + $opt{kill_interval};
	while (1)
	{
		reap();
		last if running(qr/^consumer/) < $opt{consumers};
		last if defined $t_end && time >= $t_end;
		if ($opt{kill_interval} > 0 && time >= $next_kill)
		{
			# After a failed attempt, try again soon.
			$next_kill = kill_one() ? time + $opt{kill_interval} : time + 0.2;
		}
		sleep 0.05;
	}
	drop_connection($killer);
	$killer = undef;
	signal_children('USR1', qr/^worker/);
}

1;
