# test/faults/LoadSession.pm - the database sessions of the load driver
# (test/faults/load.pl), the statements they run, and the state every
# forked process keeps about its own session.
#
# A process of the run (a consumer, receiver or worker) is a hash made by
# new_process: its name (its sessions' application_name), its session
# (dbh, undef while it has none), its counters (n) and its first errors.
# Any error of a statement is either a lost session (crash restart, kill,
# terminate: connection_lost says which), after which the process connects
# again, or an error of its own, counted by note_error.
package LoadSession;

use strict;
use warnings;

use DBI;
use Exporter qw(import);
use IO::Handle;
use List::Util qw(max min);
use POSIX qw(_exit);
use Time::HiRes qw(time sleep);

use LoadRun;

our @EXPORT = qw(
  %SQL message_id payload prepare_run
  quietly expected_warning one_line
  connect_once connect_retry drop_connection connection_lost run_sql row
  new_process note_error ensure_connected lose_connection child_setup child_main);

# --- the statements ----------------------------------------------------------------

# By name; prepare_run fills them in, as the effect's table is an option.
our %SQL;

sub define_statements
{
	my $hash = q{sha256(pg_catalog.convert_to($3, 'UTF8'))};
	my $guard = q{clock_timestamp() < to_timestamp($4::float8) + make_interval(secs => $5::float8)};
	%SQL = (
		claim => "SELECT inbox_claim(\$1, \$2, $hash), extract(epoch FROM now())::text",
		claim_guarded => "SELECT CASE WHEN $guard THEN inbox_claim(\$1, \$2, $hash) END, "
		  . "extract(epoch FROM now())::text",
		receive => 'SELECT inbox_receive($1, $2, $3::jsonb), extract(epoch FROM now())::text',
		receive_guarded => "SELECT CASE WHEN $guard THEN inbox_receive(\$1, \$2, \$3::jsonb) END, "
		  . "extract(epoch FROM now())::text",
		status => 'SELECT extract(epoch FROM received_at)::text, state FROM inbox_status($1, $2)',
		guard => 'SELECT clock_timestamp() < to_timestamp($1::float8) + make_interval(secs => $2::float8)',
		claim_many => q{SELECT c.status, extract(epoch FROM now())::text
			  FROM inbox_claim_many($1, $2::text[],
					ARRAY(SELECT sha256(pg_catalog.convert_to(p, 'UTF8'))
							FROM unnest($3::text[]) WITH ORDINALITY AS x(p, o) ORDER BY o)) AS c
			 ORDER BY c.ordinality},
		effect => "INSERT INTO $table (scope, message_id, actor, attempt) VALUES (\$1, \$2, \$3, \$4)",
		take => 'SELECT message_id, attempts FROM inbox_take($1, $2)',
		complete => 'SELECT inbox_complete($1, $2, $3::jsonb)',
		fail => q{SELECT inbox_fail($1, $2, $3, interval '0')},
		# --receive-batch: payloads are passed as text, as for one receive
		receive_many => q{SELECT r.status, extract(epoch FROM now())::text
			  FROM inbox_receive_many($1, $2::text[], $3::jsonb[]) AS r
			 ORDER BY r.ordinality},
		# --receipts: each statement also says which server session ran it
		poll => q{SELECT message_id, attempts, receipt, pg_backend_pid()
			  FROM inbox_poll($1, $2, make_interval(secs => $3::float8),
					CASE WHEN $4::float8 > 0 THEN make_interval(secs => $4::float8) END)},
		complete_receipt => 'SELECT inbox_complete($1, $2::uuid, $3::jsonb), pg_backend_pid()',
		fail_receipt => q{SELECT inbox_fail($1, $2::uuid, $3, interval '0')},
	);

	# --priorities N: message n is received at priority n * 7 mod (N + 1),
	# the same for every copy
	my $priority = $opt{priorities} ? ", priority => substr(\$2, 3)::int * 7 % ($opt{priorities} + 1)" : '';
	if ($priority ne '' && !$opt{groups})
	{
		$SQL{receive} = "SELECT inbox_receive(\$1, \$2, \$3::jsonb$priority), extract(epoch FROM now())::text";
		$SQL{receive_guarded} = "SELECT CASE WHEN $guard THEN inbox_receive(\$1, \$2, \$3::jsonb$priority) END, "
		  . "extract(epoch FROM now())::text";
	}
	return unless $opt{groups};

	# --groups N: message n goes to group "g-<n mod N>", and a receive that
	# stores it notes it in inbox_load_received in the same statement,
	# after inbox_receive took its group's lock: the serial numbers of a
	# group's rows there follow the commit order of its receives.
	my $group = "'g-' || (substr(\$2, 3)::int % $opt{groups})";
	for my $name (qw(receive receive_guarded))
	{
		my $call = "inbox_receive(\$1, \$2, \$3::jsonb, group_key => $group$priority)";
		$call = "CASE WHEN $guard THEN $call END" if $name eq 'receive_guarded';
		$SQL{$name} = "WITH r AS (SELECT $call AS fresh), "
		  . "l AS (INSERT INTO inbox_load_received (scope, message_id, group_key) "
		  . "SELECT \$1, \$2, $group FROM r WHERE r.fresh) "
		  . "SELECT r.fresh, extract(epoch FROM now())::text FROM r";
	}
}

# Message n's id and payload
sub message_id { return "m-$_[0]"; }
sub payload { my ($n) = @_; return sprintf('{"n": %d, "amount": %d}', $n, ($n * 7919) % 100000); }

# --- connections -----------------------------------------------------------------

# Server notices (the crash restart's WARNING) and DBI's complaints about
# handles whose connection died are expected here; anything else shows.
sub expected_warning
{
	return $_[0] =~ /^(WARNING|DETAIL|HINT|NOTICE):|DESTROY|rollback|ineffective|no connection to the server/;
}

sub quietly(&) { my ($code) = @_; local $SIG{__WARN__} = sub { }; return eval { $code->() }; }

sub one_line { my ($s) = @_; $s //= ''; $s =~ s/\s+/ /g; $s =~ s/ at \S+ line \d+\.?\s*$//; return $s; }

sub connect_once
{
	my ($name) = @_;
	my $dbh = DBI->connect("dbi:Pg:$opt{connstr} application_name=$name", '', '',
		{ AutoCommit => 1, RaiseError => 1, PrintError => 0, PrintWarn => 0,
		  # A statement prepared on one server session is unknown to the
		  # next one a pooler hands out.
		  ($opt{pooler} ? (pg_server_prepare => 0) : ()) });
	# Duplicates are reported as false whatever the role's setting says;
	# a statement that never hangs forever turns a wedge into an error.
	$dbh->do(q{SET inbox.on_duplicate = 'return'});
	$dbh->do(q{SET statement_timeout = '60s'});
	return $dbh;
}

# Connect, retrying while the server restarts after a crash.
sub connect_retry
{
	my ($name, $patience) = @_;
	my $deadline = time + $patience;
	my $delay = 0.02;
	while (1)
	{
		my $dbh = quietly { connect_once($name) };
		return $dbh if $dbh;
		my $err = $@ || $DBI::errstr || 'unknown error';
		die "could not connect within ${patience}s: $err" if time > $deadline;
		sleep $delay;
		$delay = min($delay * 2, 0.25);
	}
}

sub drop_connection
{
	my ($dbh) = @_;
	return unless $dbh;
	quietly { $dbh->disconnect };
}

# After an error: did the session die (crash restart, kill, terminate)?
# DBD::Pg's SQLSTATE after a lost connection is not reliable, ping is.
sub connection_lost
{
	my ($dbh) = @_;
	return 1 unless $dbh;
	my $alive = quietly { $dbh->ping };
	return !$alive;
}

# Run a cached statement that returns no rows
sub run_sql
{
	my ($dbh, $sql, @bind) = @_;
	$dbh->prepare_cached($sql)->execute(@bind);
}

# One row of a cached statement
sub row
{
	my ($dbh, $sql, @bind) = @_;
	my $sth = $dbh->prepare_cached($sql);
	$sth->execute(@bind);
	my @row = $sth->fetchrow_array;
	$sth->finish;
	return @row;
}

# --- the setup -------------------------------------------------------------------

# Before anything else: define the statements; check that the functions
# can be called (this also loads the library, so that inbox.* settings are
# defined); create the effects table, which must hold nothing of the
# scope yet.  Returns the retention that applies to the scope, in
# seconds.  Exits 2 on failure.
sub prepare_run
{
	define_statements();
	my $dbh = eval { connect_retry("$app-setup", 15) };
	if (!$dbh)
	{
		print STDERR "load.pl: $@\n";
		exit 2;
	}
	my $retention;
	my $ok = eval {
		row($dbh, 'SELECT count(*) FROM inbox_status($1, $2)', $scope, 'm-0');
		($retention) = row($dbh,
			q{SELECT extract(epoch FROM current_setting('inbox.retention')::interval)::float8});
		my ($override) = quietly
		{
			row($dbh, 'SELECT extract(epoch FROM retention)::float8 FROM inbox_stats WHERE scope = $1',
				$scope)
		};
		$retention = $override if defined $override && $override < $retention;
		# seq: the order the effects committed in, within a group
		$dbh->do("CREATE TABLE IF NOT EXISTS $table (
			scope text NOT NULL, message_id text NOT NULL, actor text NOT NULL,
			attempt integer, applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
			seq bigserial)");
		$dbh->do("CREATE TABLE IF NOT EXISTS inbox_load_received (
			scope text NOT NULL, message_id text NOT NULL, group_key text NOT NULL, seq bigserial)")
		  if $opt{groups};
		my ($rows) = row($dbh, "SELECT count(*) FROM $table WHERE scope = \$1", $scope);
		die "the effects table already has $rows rows for scope \"$scope\"; choose another --scope\n"
		  if $rows > 0;
		1;
	};
	if (!$ok)
	{
		print STDERR 'load.pl: setup failed: ', one_line($@), "\n";
		exit 2;
	}
	drop_connection($dbh);
	return $retention;
}

# --- a process and its session -----------------------------------------------------

# The state of a process named $name, with the counters @counters at 0
sub new_process
{
	my ($name, @counters) = @_;
	return {
		name => $name,
		dbh => undef,
		n => { map { $_ => 0 } @counters },
		errors => [],
	};
}

# An error of the process's own: counted, and the first five kept
sub note_error
{
	my ($c, $what) = @_;
	$c->{n}{errors}++;
	push @{ $c->{errors} }, "$c->{name}: " . one_line($what) if @{ $c->{errors} } < 5;
}

# The process's session, connected again if it was lost
sub ensure_connected
{
	my ($c) = @_;
	return $c->{dbh} if $c->{dbh};
	$c->{dbh} = connect_retry($c->{name}, max(30, $t_hard - time));
	$c->{n}{reconnects}++;
	return $c->{dbh};
}

sub lose_connection
{
	my ($c) = @_;
	drop_connection($c->{dbh});
	$c->{dbh} = undef;
}

# First thing in a forked process whose results file is $file: its
# stderr goes to a file, relayed by the driver at the end without the
# server notices that libpq prints itself (a crash restart's WARNING
# arrives during connection startup, before DBD::Pg can take it).  A
# consumer whose peer is gone must not die of SIGPIPE.
sub child_setup
{
	my ($file) = @_;
	open STDERR, '>', "$tmpdir/$file.stderr" or die "$tmpdir/$file.stderr: $!";
	STDERR->autoflush(1);
	$SIG{PIPE} = 'IGNORE';
	$SIG{__WARN__} = sub { print STDERR @_ unless expected_warning($_[0]) };
}

# The rest of the life of the process $c: wait for the start, run $body,
# count it fatal if it died, write the counters (and the lists $lists
# returns, if given) to $file for the driver, and exit.
sub child_main
{
	my ($c, $file, $body, $lists) = @_;
	my $fatal = eval {
		sleep max(0, $t_start - time);
		$body->();
		0;
	} // do { note_error($c, "fatal: $@"); 1 };
	lose_connection($c);
	$c->{n}{fatal} = $fatal;
	write_results("$tmpdir/$file", $c->{n}, $lists ? $lists->() : {}, $c->{errors});
	_exit($fatal ? 1 : 0);    # no END blocks in a child: the driver owns the run's directory
}

1;
