# test/faults/LoadRun.pm - one run of the load driver (test/faults/load.pl):
# its settings, its processes, and the files they report through.
#
# The settings are package variables, exported: the options, the scope and
# the effects table, the redelivery horizon and the clock of the run's
# phases.  The driver sets them before it forks, and every module reads
# them from then on, in the driver and in each forked process alike.
#
# The driver forks the consumers (or receivers) and the workers with spawn
# and keeps track of them by name ("consumer-3", "worker-0").  Each of
# them ends by writing its counters, lists and first errors to a file of
# that name in the run's directory (write_results), which the driver
# merges (read_results).
package LoadRun;

use strict;
use warnings;

use Exporter qw(import);
use File::Temp qw(tempdir);
use Getopt::Long qw(GetOptions);
use List::Util qw(min);
use POSIX qw(WNOHANG);
use Time::HiRes qw(time sleep);

our @EXPORT = qw(
  %opt $deferred $app $scope $table $horizon $t_start $t_end $t_hard $tmpdir
  parse_options bad_usage set_horizon start_clock
  spawn reap running signal_children wait_children exit_failures
  write_results read_results reports_written);

# --- the settings ------------------------------------------------------------------

# The options, each as GetOptions takes it, and its default.  Its value is
# in %opt under its first name, dashes as underscores.
my @options = (
	[ 'connstr|d=s' => '' ],
	[ 'mode=s' => 'claim' ],
	[ 'consumers|receivers=i' => undef ],    # 16 in claim mode, 4 in deferred mode
	[ 'workers=i' => 8 ],
	[ 'ids=i' => 10000 ],
	[ 'duration=f' => 60 ],
	[ 'deliveries=i' => 0 ],
	[ 'redeliver=f' => 0.5 ],
	[ 'redelivery-delay=f' => undef ],    # from the horizon
	[ 'horizon=f' => undef ],             # from the retention
	[ 'abort=f' => 0.15 ],
	[ 'kill-interval=f' => 5 ],
	[ 'kill-method=s' => 'auto' ],
	[ 'batch=i' => 4 ],
	[ 'claim-batch=i' => 1 ],
	[ 'receipts' => 0 ],
	[ 'lease=f' => 5 ],
	[ 'poll-wait=f' => 0 ],
	[ 'receive-batch=i' => 1 ],
	[ 'groups=i' => 0 ],    # deferred mode: messages in that many ordered groups
	[ 'priorities=i' => 0 ],    # deferred mode: messages at priorities 0 to N
	[ 'pooler' => 0 ],
	[ 'work=f' => 0 ],
	[ 'scope=s' => undef ],    # a new one per run
	[ 'table=s' => 'inbox_load_effects' ],
	[ 'drain-timeout=f' => 60 ],
	[ 'seed=i' => 1 ],
	[ 'progress' => 0 ],
);

sub option_name { my ($spec) = @_; return ($spec =~ /^([\w-]+)/)[0] =~ tr/-/_/r; }

our %opt = map { (option_name($_->[0]) => $_->[1]) } @options;

our $deferred;    # --mode deferred
our $app;         # the prefix of application_name of this run's sessions
our $scope;
our $table;
our $horizon;     # seconds after received_at that a redelivery may still come
our $t_start;     # when the first deliveries are due
our $t_end;       # when the load phase ends; undef: once everything was delivered
our $t_hard;      # when the drain gives up
our $tmpdir;      # where the processes write their results

# load.pl's header, up to its first line that is not a comment, is its
# usage.
sub usage
{
	my ($status) = @_;
	open my $self, '<', $0 or die "cannot read $0: $!";
	<$self>;
	while (<$self>)
	{
		last unless s/^# ?//;
		print STDERR $_;
	}
	exit $status;
}

sub bad_usage { print STDERR "load.pl: @_\n"; exit 2; }

# Read the command line into %opt, check it, and set the settings that
# follow from it.  Exits 2 on a usage error.
sub parse_options
{
	GetOptions((map { ($_->[0] => \$opt{ option_name($_->[0]) }) } @options), 'help|h' => sub { usage(0) })
	  or usage(2);

	bad_usage('--mode must be claim or deferred') unless $opt{mode} =~ /^(claim|deferred)$/;
	$deferred = $opt{mode} eq 'deferred';
	$opt{consumers} //= $deferred ? 4 : 16;
	bad_usage('--consumers must be at least 1') if $opt{consumers} < 1;
	bad_usage('--workers must be at least 1') if $deferred && $opt{workers} < 1;
	bad_usage('--ids must be at least 1') if $opt{ids} < 1;
	bad_usage('--duration or --deliveries must be positive')
	  if $opt{duration} < 0 || $opt{deliveries} < 0;
	bad_usage('--redeliver and --abort must be in [0, 1)')
	  if grep { $_ < 0 || $_ >= 1 } $opt{redeliver}, $opt{abort};
	bad_usage('--kill-method must be auto, sigkill or terminate')
	  unless $opt{kill_method} =~ /^(auto|sigkill|terminate)$/;
	bad_usage('--batch must be between 1 and 10000') if $opt{batch} < 1 || $opt{batch} > 10000;
	bad_usage('--claim-batch must be between 1 and 10000')
	  if $opt{claim_batch} < 1 || $opt{claim_batch} > 10000;
	bad_usage('--work must not be negative') if $opt{work} < 0;
	bad_usage('--receipts and --receive-batch need --mode deferred')
	  if !$deferred && ($opt{receipts} || $opt{receive_batch} != 1);
	bad_usage('--lease must be positive') if $opt{lease} <= 0;
	# The driver's statement_timeout (60 s) must not cut a waiting poll short.
	bad_usage('--poll-wait must be between 0 and 30') if $opt{poll_wait} < 0 || $opt{poll_wait} > 30;
	bad_usage('--receive-batch must be between 1 and 10000')
	  if $opt{receive_batch} < 1 || $opt{receive_batch} > 10000;
	bad_usage('--groups needs --mode deferred, and one inbox_receive per delivery')
	  if $opt{groups} && (!$deferred || $opt{receive_batch} != 1);
	bad_usage('--groups must not be negative') if $opt{groups} < 0;
	bad_usage('--priorities needs --mode deferred, and one inbox_receive per delivery')
	  if $opt{priorities} && (!$deferred || $opt{receive_batch} != 1);
	bad_usage('--priorities must be between 0 and 32767')
	  if $opt{priorities} < 0 || $opt{priorities} > 32767;
	bad_usage('--table must be an identifier, optionally schema-qualified')
	  unless $opt{table} =~ /^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$/;

	# Every session of this run carries this prefix in application_name, so
	# that the killer finds them (and only them).  No '_': it is a LIKE
	# wildcard.
	$app = "inbox-load-$$";
	$opt{scope} //= "load-$opt{mode}-" . int(time) . "-$$";
	$scope = $opt{scope};
	$table = $opt{table};
}

# The horizon and the redelivery delay, from the retention the server
# applies to the scope (seconds).  Exits 2 when the options contradict it.
sub set_horizon
{
	my ($retention) = @_;
	$horizon = $opt{horizon} // $retention / 2;
	bad_usage("--horizon ($horizon s) must be positive and below the retention ($retention s)")
	  if $horizon <= 0 || $horizon >= $retention;
	$opt{redelivery_delay} //= min($horizon / 2, 5);
	bad_usage('--redelivery-delay must be below the horizon')
	  if $opt{redelivery_delay} < 0 || $opt{redelivery_delay} >= $horizon;
}

# The clock of the phases, and the run's directory (removed when the
# driver exits).
sub start_clock
{
	$t_start = time + 0.5;    # leaves time for every child to connect
	$t_end = $opt{duration} > 0 ? $t_start + $opt{duration} : undef;
	$t_hard = ($t_end // $t_start + 3600) + $opt{drain_timeout};
	$tmpdir = tempdir('inbox-load-XXXXXX', TMPDIR => 1, CLEANUP => 1);
}

# --- the processes (in the driver) ------------------------------------------------

my %children;    # pid => name
my %exited;      # name => exit status

# Fork the process $name, which runs $main (which exits, never returns).
sub spawn
{
	my ($name, $main) = @_;
	my $pid = fork // die "fork: $!";
	$main->() if $pid == 0;
	$children{$pid} = $name;
}

# Note the exit status of every process that has ended.
sub reap
{
	for my $pid (keys %children)
	{
		my $got = waitpid($pid, WNOHANG);
		next unless $got == $pid || $got == -1;
		$exited{ $children{$pid} } = $got == -1 ? -1 : $?;
		delete $children{$pid};
	}
}

# The processes running whose names match $pattern
sub running
{
	my ($pattern) = @_;
	return scalar grep { $_ =~ $pattern } values %children;
}

sub signal_children
{
	my ($signal, $pattern) = @_;
	kill $signal, grep { $children{$_} =~ $pattern } keys %children;
}

# Wait until the processes whose names match $pattern have ended.  Past
# $deadline, kill -9 them, and return $failure (nothing otherwise).
sub wait_children
{
	my ($pattern, $deadline, $failure) = @_;
	while (1)
	{
		reap();
		return unless running($pattern);
		if (time > $deadline)
		{
			signal_children('KILL', $pattern);
			sleep 0.5;
			reap();
			return $failure;
		}
		sleep 0.05;
	}
}

# A failure for each process that exited with a status other than 0
sub exit_failures
{
	return map { "$_ exited with status $exited{$_}" } grep { $exited{$_} } sort keys %exited;
}

# --- the results files -------------------------------------------------------------

# Write a process's results to $file: its counters (hash ref), lists of
# ids (hash ref: list name => array ref) and errors (array ref), one per
# line.  The file appears whole or not at all.
sub write_results
{
	my ($file, $n, $lists, $errors) = @_;
	open my $out, '>', "$file.tmp" or die "$file.tmp: $!";
	print $out "n $_ $n->{$_}\n" for sort keys %$n;
	for my $list (sort keys %$lists)
	{
		print $out "$list $_\n" for @{ $lists->{$list} };
	}
	print $out "error $_\n" for @$errors;
	close $out or die "$file.tmp: $!";
	rename "$file.tmp", $file or die "rename $file: $!";
}

# Merge into $got the results of the processes whose files match the glob
# $pattern: counters summed into $got->{n} under "$prefix<name>", the ids
# of the consumers' lists "delivered" (into the hash $got->{delivered})
# and "unacked", and the errors.
sub read_results
{
	my ($got, $pattern, $prefix) = @_;
	for my $file (sort glob("$tmpdir/$pattern"))
	{
		open my $in, '<', $file or die "$file: $!";
		while (<$in>)
		{
			chomp;
			my ($what, $rest) = split / /, $_, 2;
			if ($what eq 'n')
			{
				my ($k, $v) = split / /, $rest;
				$got->{n}{"$prefix$k"} += $v;
			}
			elsif ($what eq 'delivered') { $got->{delivered}{$rest} = 1; }
			elsif ($what eq 'unacked') { push @{ $got->{unacked} }, $rest; }
			elsif ($what eq 'error') { push @{ $got->{errors} }, $rest; }
		}
	}
}

# How many processes wrote their results
sub reports_written
{
	my $reported = () = glob("$tmpdir/*-*[0-9]");
	return $reported;
}

1;
