#!/usr/bin/perl
#
# test/faults/load.pl - at-least-once load with injected faults against the
# inbox extension, and an exactly-once check at the end.
#
# It plays an at-least-once broker and its consumers, as forked processes
# that each hold one database session, and injects the faults that such a
# broker and such consumers meet:
#
#   - redeliveries of messages that were already processed and acked;
#   - transactions that roll back after the claim and the effect (the
#     message is then not acked, and the broker delivers it again);
#   - kill -9 of a random consumer's backend every --kill-interval seconds.
#     With restart_after_crash = on, the postmaster then restarts every
#     backend: all consumers lose their session, reconnect with retry, and
#     treat the delivery they had in hand as not acked.  A COMMIT whose
#     outcome is unknown is resolved as the README's "Uncertain commits"
#     says: inbox_status, and if it shows no entry, the message is
#     processed again through the normal path.
#
# At the end every message id delivered at least once must have exactly one
# effect row.  The effects table has no unique constraint on purpose: a
# second effect would be a second row.  The driver prints one report line,
#
#   inbox-load: mode=claim ... deliveries=... duplicates_suppressed=...
#               aborts=... kills=... effects=... lost=0 doubled=0 result=ok
#
# and exits 0 only if lost, doubled and every other consistency count are 0.
#
# MODES
#
#   claim     --consumers processes call inbox_claim and insert the effect in
#             one transaction, then COMMIT, then ack.
#   deferred  --consumers processes are receivers: inbox_receive in
#             autocommit, ack, and redeliveries (inbox_receive of the same id
#             again returns false).  --workers processes loop on inbox_take
#             (autocommit, so the take is durable), then insert the effect
#             and inbox_complete in one transaction; some of those roll back
#             after the effect and give the message back with inbox_fail.
#             The run ends when every received message is done or dead.
#             Done ones need exactly one effect row, dead ones none.
#
# DEFERRED VARIANTS
#
#   --receipts        the workers take with inbox_poll (a lease of --lease
#                     seconds, waiting up to --poll-wait seconds for a
#                     message) and complete or fail each message by its
#                     receipt, in a transaction of its own.  A message whose
#                     worker was lost comes back when its lease runs out.  A
#                     completion refused with IB004 (the lease ran out and
#                     another worker took the message) rolls back the effect
#                     and is counted as stale_receipts, not as an error.
#                     The report counts the completions that ran on another
#                     server session than their poll (cross_session): only a
#                     pooler in front makes that happen.
#   --receive-batch N receivers gather up to N due deliveries and receive
#                     them in one transaction with inbox_receive_many.
#   --pooler          the connection string names a transaction-mode pooler
#                     (PgBouncer): no server-side prepared statements, since
#                     consecutive transactions of one client may run on
#                     different server sessions.  The session settings the
#                     driver SETs then stick to whichever server session ran
#                     the SET, so set inbox.on_duplicate = 'return' for the
#                     role or the database as well.
#
# THE BROKER AND THE RETENTION
#
# Broker state lives in the client processes, never in the database, so a
# crash restart cannot make it inconsistent.  Consumer i owns the ids
# n = i (mod consumers) for first deliveries, in a seeded random order,
# spread evenly over --duration.  A delivery that was not acked (rolled
# back, interrupted, or uncertain and found not committed) goes back to the
# same consumer, which delivers it again until it is acked: its owner always
# knows whether an id was acked.  After an ack, with probability --redeliver,
# the broker redelivers the id to another consumer through a pipe, after a
# random delay of up to --redelivery-delay seconds; a redelivery that is
# acked can be redelivered again.
#
# Retention purges an entry once its scope has been active for the
# retention since the entry's received_at, which is the start time of the
# claiming transaction.  So a redelivery is safe from the purge only while it
# comes less than the retention after that time, and a broker whose
# redeliveries come later is outside what the inbox guarantees.  This broker
# keeps inside: the claiming transaction returns now(), which is exactly the
# entry's received_at, and every redelivery carries it.  The redelivery's
# claim (or receive) is guarded on the server:
#
#   CASE WHEN clock_timestamp() < received_at + horizon THEN inbox_claim(...) END
#
# so it runs before received_at + horizon, or not at all (counted as
# "expired": the broker gave up on that redelivery).  The horizon defaults to
# half the server's inbox.retention, and must be below it.  A purge that
# honours the retention can therefore never have removed an entry that a
# redelivery reaches, while a purge that removes entries too early is caught:
# redeliveries come from a few milliseconds to --redelivery-delay seconds
# after the ack, so they also reach entries a few seconds old.
#
# The one delivery that cannot be given up is the retry of an uncertain
# commit.  It is made at once after reconnecting, and counted as "late" if
# that was already past the horizon (then the run cannot tell a purged entry
# from an uncommitted one, and it fails: a timing assumption broke, not
# necessarily the extension).
#
# USAGE
#
#   perl test/faults/load.pl [options] [--connstr 'host=... port=... dbname=...']
#
#   --connstr S         libpq keyword/value string; PG* variables fill the rest
#   --mode M            claim (default) or deferred
#   --consumers N       claim consumers, or deferred receivers (16 / 4)
#   --workers N         deferred workers (8)
#   --ids N             size of the id space (10000)
#   --duration S        load phase in seconds (60); first deliveries are paced
#                       over it.  0: no pacing, as fast as possible, until
#                       every id and its redeliveries were delivered
#   --deliveries N      also end the load phase after about N deliveries
#   --redeliver P       probability that an acked delivery is redelivered (0.5)
#   --redelivery-delay S  longest delay of a redelivery (horizon / 2, at most 5)
#   --horizon S         latest redelivery after received_at (retention / 2)
#   --abort P           probability that a transaction rolls back after the
#                       claim and the effect (claim) or after the effect
#                       (deferred) (0.15)
#   --kill-interval S   seconds between two kills, 0 for none (5)
#   --kill-method M     auto (default), sigkill or terminate.  sigkill sends
#                       kill -9 to the backend: the server must run on this
#                       machine under the same OS user.  auto falls back to
#                       pg_terminate_backend, which ends only that backend.
#   --batch N           deferred: messages per inbox_take (4)
#   --claim-batch N     claim: deliveries per transaction (1).  Above 1, a
#                       consumer gathers up to N due deliveries, claims them
#                       with one inbox_claim_many, inserts the effects of
#                       those claimed, commits, and acks them all
#   --receipts          deferred: inbox_poll and completions by receipt
#   --lease S           with --receipts: the lease of a poll (5)
#   --poll-wait S       with --receipts: how long a poll waits for a message,
#                       0 for not at all (0)
#   --receive-batch N   deferred: deliveries per inbox_receive_many (1: one
#                       inbox_receive per delivery)
#   --pooler            through a transaction-mode pooler (see above)
#   --work S            deferred: seconds of simulated work per message, spent
#                       inside the effect's transaction (0.5 to 1.5 times S),
#                       so that kills land while workers process (0)
#   --scope S           scope to use (default: a new one per run)
#   --table T           effects table, created if missing (inbox_load_effects)
#   --drain-timeout S   longest drain after the load phase (60)
#   --seed N            random seed (1)
#   --progress          a line on stderr at every kill
#
# The load runs in a fresh scope unless --scope is given, and leaves its
# entries and effect rows behind for inspection.  It needs EXECUTE on the
# inbox functions it calls (and, if the scope has grants, one that covers the
# role: inbox_grant), SELECT on pg_stat_activity's application_name of its
# own sessions, and CREATE on the current schema (for --table).  The
# faults of the load phase stop at its end; the drain then delivers what was
# not acked, and (deferred) lets the workers finish every received message.
#
# Exit status: 0 consistent, 1 inconsistent, 2 usage or setup error.
use strict;
use warnings;

use DBI;
use Fcntl qw(F_GETFL F_SETFL O_NONBLOCK);
use File::Temp qw(tempdir);
use Getopt::Long qw(GetOptions);
use IO::Handle;
use List::Util qw(min max shuffle sum0);
use POSIX qw(WNOHANG ceil _exit);
use Time::HiRes qw(time sleep);

$| = 1;

my %opt = (
	connstr => '',
	mode => 'claim',
	consumers => undef,
	workers => 8,
	ids => 10000,
	duration => 60,
	deliveries => 0,
	redeliver => 0.5,
	redelivery_delay => undef,
	horizon => undef,
	abort => 0.15,
	kill_interval => 5,
	kill_method => 'auto',
	batch => 4,
	claim_batch => 1,
	receipts => 0,
	lease => 5,
	poll_wait => 0,
	receive_batch => 1,
	pooler => 0,
	work => 0,
	scope => undef,
	table => 'inbox_load_effects',
	drain_timeout => 60,
	seed => 1,
	progress => 0,
);

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

GetOptions(
	'connstr|d=s' => \$opt{connstr},
	'mode=s' => \$opt{mode},
	'consumers|receivers=i' => \$opt{consumers},
	'workers=i' => \$opt{workers},
	'ids=i' => \$opt{ids},
	'duration=f' => \$opt{duration},
	'deliveries=i' => \$opt{deliveries},
	'redeliver=f' => \$opt{redeliver},
	'redelivery-delay=f' => \$opt{redelivery_delay},
	'horizon=f' => \$opt{horizon},
	'abort=f' => \$opt{abort},
	'kill-interval=f' => \$opt{kill_interval},
	'kill-method=s' => \$opt{kill_method},
	'batch=i' => \$opt{batch},
	'claim-batch=i' => \$opt{claim_batch},
	'receipts' => \$opt{receipts},
	'lease=f' => \$opt{lease},
	'poll-wait=f' => \$opt{poll_wait},
	'receive-batch=i' => \$opt{receive_batch},
	'pooler' => \$opt{pooler},
	'work=f' => \$opt{work},
	'scope=s' => \$opt{scope},
	'table=s' => \$opt{table},
	'drain-timeout=f' => \$opt{drain_timeout},
	'seed=i' => \$opt{seed},
	'progress' => \$opt{progress},
	'help|h' => sub { usage(0) },
) or usage(2);

sub bad_usage { print STDERR "load.pl: @_\n"; exit 2; }

bad_usage('--mode must be claim or deferred') unless $opt{mode} =~ /^(claim|deferred)$/;
my $deferred = $opt{mode} eq 'deferred';
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
bad_usage('--claim-batch must be between 1 and 10000') if $opt{claim_batch} < 1 || $opt{claim_batch} > 10000;
bad_usage('--work must not be negative') if $opt{work} < 0;
bad_usage('--receipts and --receive-batch need --mode deferred')
  if !$deferred && ($opt{receipts} || $opt{receive_batch} != 1);
bad_usage('--lease must be positive') if $opt{lease} <= 0;
# The driver's statement_timeout (60 s) must not cut a waiting poll short.
bad_usage('--poll-wait must be between 0 and 30') if $opt{poll_wait} < 0 || $opt{poll_wait} > 30;
bad_usage('--receive-batch must be between 1 and 10000')
  if $opt{receive_batch} < 1 || $opt{receive_batch} > 10000;
bad_usage('--table must be an identifier, optionally schema-qualified')
  unless $opt{table} =~ /^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$/;

# Every session of this run carries this prefix in application_name, so
# that the killer finds them (and only them).  No '_': it is a LIKE wildcard.
my $app = "inbox-load-$$";
$opt{scope} //= "load-$opt{mode}-" . int(time) . "-$$";

my $scope = $opt{scope};
my $table = $opt{table};

# --- connections ----------------------------------------------------------

# Server notices (the crash restart's WARNING) and DBI's complaints about
# handles whose connection died are expected here; anything else shows.
sub expected_warning
{
	return $_[0] =~ /^(WARNING|DETAIL|HINT|NOTICE):|DESTROY|rollback|ineffective|no connection to the server/;
}

sub quietly(&) { my ($code) = @_; local $SIG{__WARN__} = sub { }; return eval { $code->() }; }

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

sub one_line { my ($s) = @_; $s //= ''; $s =~ s/\s+/ /g; $s =~ s/ at \S+ line \d+\.?\s*$//; return $s; }

# --- the SQL ----------------------------------------------------------------

my $HASH = q{sha256(pg_catalog.convert_to($3, 'UTF8'))};
my $GUARD = q{clock_timestamp() < to_timestamp($4::float8) + make_interval(secs => $5::float8)};
my %SQL = (
	claim => "SELECT inbox_claim(\$1, \$2, $HASH), extract(epoch FROM now())::text",
	claim_guarded => "SELECT CASE WHEN $GUARD THEN inbox_claim(\$1, \$2, $HASH) END, "
	  . "extract(epoch FROM now())::text",
	receive => 'SELECT inbox_receive($1, $2, $3::jsonb), extract(epoch FROM now())::text',
	receive_guarded => "SELECT CASE WHEN $GUARD THEN inbox_receive(\$1, \$2, \$3::jsonb) END, "
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

sub message_id { return "m-$_[0]"; }
sub payload { my ($n) = @_; return sprintf('{"n": %d, "amount": %d}', $n, ($n * 7919) % 100000); }

# --- setup ----------------------------------------------------------------

my ($horizon, $retention);
{
	my $dbh = eval { connect_retry("$app-setup", 15) };
	if (!$dbh)
	{
		print STDERR "load.pl: $@\n";
		exit 2;
	}
	my $ok = eval {
		# Loads the library (so inbox.* settings are defined) and checks EXECUTE
		row($dbh, 'SELECT count(*) FROM inbox_status($1, $2)', $scope, 'm-0');
		($retention) = row($dbh,
			q{SELECT extract(epoch FROM current_setting('inbox.retention')::interval)::float8});
		my ($override) = quietly
		{
			row($dbh, 'SELECT extract(epoch FROM retention)::float8 FROM inbox_stats WHERE scope = $1',
				$scope)
		};
		$retention = $override if defined $override && $override < $retention;
		$dbh->do("CREATE TABLE IF NOT EXISTS $table (
			scope text NOT NULL, message_id text NOT NULL, actor text NOT NULL,
			attempt integer, applied_at timestamptz NOT NULL DEFAULT clock_timestamp())");
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
}
$horizon = $opt{horizon} // $retention / 2;
bad_usage("--horizon ($horizon s) must be positive and below the retention ($retention s)")
  if $horizon <= 0 || $horizon >= $retention;
$opt{redelivery_delay} //= min($horizon / 2, 5);
bad_usage('--redelivery-delay must be below the horizon')
  if $opt{redelivery_delay} < 0 || $opt{redelivery_delay} >= $horizon;

# --- the consumers (claim) and receivers (deferred) ---------------------------

my $t_start = time + 0.5;    # leaves time for every child to connect
my $t_end = $opt{duration} > 0 ? $t_start + $opt{duration} : undef;
my $t_hard = ($t_end // $t_start + 3600) + $opt{drain_timeout};
my $tmpdir = tempdir('inbox-load-XXXXXX', TMPDIR => 1, CLEANUP => 1);

# One pipe per consumer: redeliveries of acked ids from the others.
my (@pipe_r, @pipe_w);
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

# State of one consumer or receiver
sub new_consumer
{
	my ($i) = @_;
	srand($opt{seed} * 7919 + $i * 104729 + 1);
	my @slice = shuffle(grep { $_ % $opt{consumers} == $i } 1 .. $opt{ids});
	my $quota = $opt{deliveries} ? ceil($opt{deliveries} / $opt{consumers}) : 0;
	return {
		i => $i,
		name => "$app-" . ($deferred ? 'receiver' : 'consumer') . "-$i",
		dbh => undef,
		slice => \@slice,
		next => 0,
		quota => $quota,
		loading => 1,
		busy_at => 0,      # last delivery made or redelivery received
		retry => [],       # not acked: delivered again by this consumer
		pending => [],     # redeliveries of acked ids, sorted by due time
		inbuf => '',
		acked => {},
		delivered => [],
		n => { map { $_ => 0 } qw(deliveries first retries redeliveries fresh duplicates_suppressed
			  aborts expired interrupted uncertain uncertain_committed uncertain_not_committed
			  effects_expected reconnects errors late redeliveries_sent redeliveries_dropped
			  batches) },
		errors => [],
	};
}

sub note_error
{
	my ($c, $what) = @_;
	$c->{n}{errors}++;
	push @{ $c->{errors} }, "$c->{name}: " . one_line($what) if @{ $c->{errors} } < 5;
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

# A delivery claimed or received (fresh) or found a duplicate, in the counters
sub count_delivery
{
	my ($n, $d, $fresh) = @_;
	$n->{deliveries}++;
	$n->{ $d->{kind} eq 'first' ? 'first' : $d->{kind} eq 'retry' ? 'retries' : 'redeliveries' }++;
	$n->{ $fresh ? 'fresh' : 'duplicates_suppressed' }++;
}

# claim mode: one delivery, one transaction
sub claim_delivery
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
		}
		elsif ($abort)
		{
			$n->{aborts}++;
			requeue($c, $d);
		}
		else
		{
			$n->{effects_expected}++ if $fresh;
			acked($c, $d, $fresh ? $t0 : $d->{t0});
		}
		return;
	}

	my $err = $@;
	if (!connection_lost($c->{dbh}))
	{
		note_error($c, "$phase of $mid: $err");
		quietly { $c->{dbh}->rollback };
		requeue($c, $d);
		return;
	}
	lose_connection($c);
	if ($phase ne 'commit')
	{
		# Nothing can have committed: not acked, deliver it again.
		$n->{interrupted}++;
		requeue($c, $d);
		return;
	}
	$n->{uncertain}++;
	my $received_at = resolve_uncertain($c, $d, $t0);
	if (defined $received_at)
	{
		$n->{uncertain_committed}++;
		$n->{effects_expected}++ if $fresh;
		acked($c, $d, $fresh ? $received_at : $d->{t0});
	}
	else
	{
		# Step 2: process it again through inbox_claim.
		$n->{uncertain_not_committed}++;
		requeue($c, $d);
	}
}

# claim mode with --claim-batch: deliveries claimed together, in one
# transaction with their effects, by inbox_claim_many.  Each delivery is
# counted, acked or delivered again exactly as claim_delivery does it.
sub claim_batch_delivery
{
	my ($c, $ds) = @_;
	my $n = $c->{n};
	my ($phase, $t0, $abort, @live, @fresh, %expired) = ('connect');
	my $ok = eval {
		my $dbh = ensure_connected($c);
		$phase = 'claim';
		$dbh->begin_work;
		# A redelivery past its horizon is given up, as claim_delivery's
		# guard does it.  The batch's claim follows within milliseconds, far
		# inside the retention, of which the horizon is at most half.
		@live = ();
		for my $d (@$ds)
		{
			if ($d->{kind} eq 'redelivery' && !(row($dbh, $SQL{guard}, $d->{t0}, $horizon))[0])
			{
				$n->{expired}++;
				$expired{$d} = 1;
				next;
			}
			push @live, $d;
		}
		if (!@live)
		{
			$dbh->rollback;
			return 1;
		}
		my $rows = $dbh->selectall_arrayref($dbh->prepare_cached($SQL{claim_many}), undef, $scope,
			[ map { message_id($_->{id}) } @live ], [ map { payload($_->{id}) } @live ]);
		die 'inbox_claim_many returned ' . scalar(@$rows) . ' rows for ' . scalar(@live) . " ids\n"
		  unless @$rows == @live;
		$n->{batches}++;
		@fresh = map { $_->[0] eq 'claimed' ? 1 : 0 } @$rows;
		$t0 = $rows->[0][1];
		for my $k (0 .. $#live)
		{
			my $d = $live[$k];
			count_delivery($n, $d, $fresh[$k]);
		}
		$phase = 'effect';
		for my $k (grep { $fresh[$_] } 0 .. $#live)
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
		for my $k (0 .. $#live)
		{
			my $d = $live[$k];
			if ($abort)
			{
				$n->{aborts}++;
				requeue($c, $d);
				next;
			}
			$n->{effects_expected}++ if $fresh[$k];
			acked($c, $d, $fresh[$k] ? $t0 : $d->{t0});
		}
		return;
	}

	my $err = $@;
	# Every delivery not given up, including those the guard had not
	# reached when the error came
	my @all = grep { !$expired{$_} } @$ds;
	if (!connection_lost($c->{dbh}))
	{
		note_error($c, "$phase of a batch of " . scalar(@all) . ": $err");
		quietly { $c->{dbh}->rollback };
		requeue($c, $_) for @all;
		return;
	}
	lose_connection($c);
	if ($phase ne 'commit')
	{
		$n->{interrupted} += @all;
		requeue($c, $_) for @all;
		return;
	}
	# The batch committed or not, as a whole; each delivery is resolved as
	# a single one would be (README, "Uncertain commits").
	$n->{uncertain}++;
	for my $k (0 .. $#live)
	{
		my $d = $live[$k];
		my $received_at = resolve_uncertain($c, $d, $t0);
		if (defined $received_at)
		{
			$n->{uncertain_committed}++;
			$n->{effects_expected}++ if $fresh[$k];
			acked($c, $d, $fresh[$k] ? $received_at : $d->{t0});
		}
		else
		{
			$n->{uncertain_not_committed}++;
			requeue($c, $d);
		}
	}
}

# deferred mode: one delivery to the receiver, in autocommit
sub receive_delivery
{
	my ($c, $d) = @_;
	my $n = $c->{n};
	my $mid = message_id($d->{id});
	my ($phase, $fresh, $t0) = ('connect');
	my $ok = eval {
		my $dbh = ensure_connected($c);
		$phase = 'receive';
		if ($d->{kind} eq 'redelivery')
		{
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
			$n->{expired}++;
			return;
		}
		count_delivery($n, $d, $fresh);
		my $chain = $fresh ? $t0 : $d->{t0};
		if (!defined $chain)
		{
			# A retry that found the message already received: its
			# received_at is what later redeliveries must respect.
			($chain) = quietly { row($c->{dbh}, $SQL{status}, $scope, $mid) };
		}
		acked($c, $d, $chain);
		return;
	}
	my $err = $@;
	if (!connection_lost($c->{dbh}))
	{
		note_error($c, "$phase of $mid: $err");
		requeue($c, $d);
		return;
	}
	lose_connection($c);
	# The receive may or may not have committed: deliver it again, at once.
	$n->{ $phase eq 'receive' ? 'uncertain' : 'interrupted' }++;
	requeue($c, $d, $phase eq 'receive' ? (maybe_at => time) : ());
}

# deferred mode with --receive-batch: deliveries received together, in one
# transaction, by inbox_receive_many.  Each delivery is counted, acked or
# delivered again as receive_delivery does it; redeliveries past their
# horizon are given up, as claim_batch_delivery does it.
sub receive_batch_delivery
{
	my ($c, $ds) = @_;
	my $n = $c->{n};
	my ($phase, $t0, @live, @fresh, %expired) = ('connect');
	my $ok = eval {
		my $dbh = ensure_connected($c);
		$phase = 'receive';
		$dbh->begin_work;
		@live = ();
		for my $d (@$ds)
		{
			if ($d->{kind} eq 'redelivery' && !(row($dbh, $SQL{guard}, $d->{t0}, $horizon))[0])
			{
				$n->{expired}++;
				$expired{$d} = 1;
				next;
			}
			check_late($c, $d->{maybe_at}) if $d->{maybe_at} && $d->{kind} ne 'redelivery';
			push @live, $d;
		}
		if (!@live)
		{
			$dbh->rollback;
			return 1;
		}
		my $rows = $dbh->selectall_arrayref($dbh->prepare_cached($SQL{receive_many}), undef, $scope,
			[ map { message_id($_->{id}) } @live ], [ map { payload($_->{id}) } @live ]);
		die 'inbox_receive_many returned ' . scalar(@$rows) . ' rows for ' . scalar(@live) . " ids\n"
		  unless @$rows == @live;
		$n->{batches}++;
		@fresh = map { $_->[0] eq 'received' ? 1 : 0 } @$rows;
		$t0 = $rows->[0][1];
		$phase = 'commit';
		$dbh->commit;
		1;
	};
	if ($ok)
	{
		for my $k (0 .. $#live)
		{
			my $d = $live[$k];
			count_delivery($n, $d, $fresh[$k]);
			my $chain = $fresh[$k] ? $t0 : $d->{t0};
			# A retry that found the message already received: its
			# received_at is what later redeliveries must respect.
			($chain) = quietly { row($c->{dbh}, $SQL{status}, $scope, message_id($d->{id})) }
			  if !defined $chain;
			acked($c, $d, $chain);
		}
		return;
	}

	my $err = $@;
	my @all = grep { !$expired{$_} } @$ds;
	if (!connection_lost($c->{dbh}))
	{
		note_error($c, "$phase of a batch of " . scalar(@all) . ": $err");
		quietly { $c->{dbh}->rollback };
		requeue($c, $_) for @all;
		return;
	}
	lose_connection($c);
	if ($phase ne 'commit')
	{
		$n->{interrupted} += @all;
		requeue($c, $_) for @all;
		return;
	}
	# The batch may or may not have committed: deliver it again, at once.
	$n->{uncertain} += @live;
	requeue($c, $_, maybe_at => time) for @live;
}

# A child's stderr goes to a file, relayed by the parent at the end without
# the server notices that libpq prints itself (a crash restart's WARNING
# arrives during connection startup, before DBD::Pg can take it).
sub capture_stderr
{
	my ($name) = @_;
	open STDERR, '>', "$tmpdir/$name.stderr" or die "$tmpdir/$name.stderr: $!";
	STDERR->autoflush(1);
}

sub run_consumer
{
	my ($i) = @_;
	capture_stderr("consumer-$i");
	my $c = new_consumer($i);
	$SIG{PIPE} = 'IGNORE';
	$SIG{__WARN__} = sub { print STDERR @_ unless expected_warning($_[0]) };
	for my $j (0 .. $#pipe_r)
	{
		close $pipe_r[$j] unless $j == $i;
	}
	my $fatal = eval {
		sleep max(0, $t_start - time);
		while (1)
		{
			if (time > $t_hard)
			{
				note_error($c, 'drain timeout');
				last;
			}
			my $d = next_delivery($c);
			my $batch_size = $deferred ? $opt{receive_batch} : $opt{claim_batch};
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
				$deferred ? receive_batch_delivery($c, \@batch) : claim_batch_delivery($c, \@batch);
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
			$deferred ? receive_delivery($c, $d) : claim_delivery($c, $d);
		}
		0;
	} // do { note_error($c, "fatal: $@"); 1 };
	lose_connection($c);
	my @unacked = grep { !$c->{acked}{$_} } @{ $c->{delivered} };
	$c->{n}{fatal} = $fatal;
	write_results("$tmpdir/consumer-$i", $c->{n},
		{ delivered => $c->{delivered}, unacked => \@unacked }, $c->{errors});
	_exit($fatal ? 1 : 0);    # no END blocks in a child: the parent owns the temp dir
}

# --- the workers (deferred) --------------------------------------------------

sub run_worker
{
	my ($i) = @_;
	capture_stderr("worker-$i");
	srand($opt{seed} * 15485863 + $i * 32452843 + 7);
	$SIG{PIPE} = 'IGNORE';
	$SIG{__WARN__} = sub { print STDERR @_ unless expected_warning($_[0]) };
	close $_ for @pipe_r;
	my ($stop, $calm) = (0, 0);
	$SIG{TERM} = sub { $stop = 1 };
	$SIG{USR1} = sub { $calm = 1 };    # the load phase is over: no more faults
	my $c = {
		name => "$app-worker-$i",
		dbh => undef,
		n => { map { $_ => 0 } qw(takes taken completed aborts fail_dead in_hand_lost
			  uncertain_commits reconnects errors cross_session stale_receipts) },
		errors => [],
	};
	my $n = $c->{n};
	my $fatal = eval {
		sleep max(0, $t_start - time);
		until ($stop || time > $t_hard + 60)
		{
			my $faults = !$calm && (!defined $t_end || time < $t_end);
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
						$scope, $key, qq({"worker": $i, "attempt": $attempt}));
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
		0;
	} // do { note_error($c, "fatal: $@"); 1 };
	lose_connection($c);
	$n->{fatal} = $fatal;
	write_results("$tmpdir/worker-$i", $n, {}, $c->{errors});
	_exit($fatal ? 1 : 0);    # no END blocks in a child: the parent owns the temp dir
}

# --- the parent: fork, kill, wait, check ----------------------------------------

my %children;    # pid => name
my %exited;      # name => exit status

for my $i (0 .. $opt{consumers} - 1)
{
	my $pid = fork // die "fork: $!";
	if ($pid == 0) { run_consumer($i); }
	$children{$pid} = "consumer-$i";
}
if ($deferred)
{
	for my $i (0 .. $opt{workers} - 1)
	{
		my $pid = fork // die "fork: $!";
		if ($pid == 0) { run_worker($i); }
		$children{$pid} = "worker-$i";
	}
}
close $_ for @pipe_r, @pipe_w;
srand($opt{seed});
$SIG{__WARN__} = sub { print STDERR @_ unless expected_warning($_[0]) };

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

sub consumers_running { return scalar grep { /^consumer/ } values %children; }

# The killer
my %kills = (sigkill => 0, terminate => 0, workers => 0);
my $killer;
my $local_server;

sub postgres_process
{
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/comm" or return 0;
	my $comm = <$fh> // '';
	return $comm =~ /^postgres/;
}

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

{
	my $next_kill = $t_start + $opt{kill_interval};
	while (1)
	{
		reap();
		last if consumers_running() < $opt{consumers};
		last if defined $t_end && time >= $t_end;
		if ($opt{kill_interval} > 0 && time >= $next_kill)
		{
			$next_kill = kill_one() ? time + $opt{kill_interval} : time + 0.2;
		}
		sleep 0.05;
	}
	drop_connection($killer);
	$killer = undef;
	kill 'USR1', grep { $children{$_} =~ /^worker/ } keys %children;
}

# Drain: the consumers (receivers) deliver what was not acked, then exit.
my @failures;
while (consumers_running())
{
	reap();
	if (time > $t_hard + 30)
	{
		push @failures, 'consumers still running after the drain timeout';
		kill 'KILL', grep { $children{$_} =~ /^consumer/ } keys %children;
		sleep 0.5;
		reap();
		last;
	}
	sleep 0.05;
}

# Merge what the children report: counters ("n name value", summed under
# $prefix.name), and for consumers the ids delivered and left unacked.
my (%n, %delivered, @unacked, @errors);

sub read_reports
{
	my ($pattern, $prefix) = @_;
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
				$n{"$prefix$k"} += $v;
			}
			elsif ($what eq 'delivered') { $delivered{$rest} = 1; }
			elsif ($what eq 'unacked') { push @unacked, $rest; }
			elsif ($what eq 'error') { push @errors, $rest; }
		}
	}
}
read_reports('consumer-*[0-9]', '');
my @ids = map { message_id($_) } sort { $a <=> $b } keys %delivered;

my $check = eval { connect_retry("$app-check", 60) };
push @failures, "cannot connect for the final check: $@" unless $check;

# Deferred: the workers go on until every received message is done or dead.
my %final;
if ($deferred && $check)
{
	my $open = -1;
	my $until = time + $opt{drain_timeout};
	while (time < $until)
	{
		reap();
		($open) = quietly
		{
			row($check, q{SELECT count(*) FROM unnest($2::text[]) AS i(id),
					LATERAL inbox_status($1, i.id) AS s
				WHERE s.state IN ('pending', 'processing')}, $scope, \@ids)
		};
		if (!defined $open)
		{
			drop_connection($check);
			$check = eval { connect_retry("$app-check", 60) };
			$open = -1;
			last unless $check;
			next;
		}
		last if $open == 0;
		last if !grep { /^worker/ } values %children;
		sleep 0.25;
	}
	push @failures, "$open received messages still open after the drain timeout" if $open;
}
kill 'TERM', keys %children;
{
	my $until = time + 30;
	while (%children && time < $until)
	{
		reap();
		sleep 0.05;
	}
	if (%children)
	{
		push @failures, 'workers did not stop';
		kill 'KILL', keys %children;
		sleep 0.5;
		reap();
	}
}
read_reports('worker-*[0-9]', 'w_');
for my $name (sort keys %exited)
{
	push @failures, "$name exited with status $exited{$name}" if $exited{$name};
}
my $expected_children = $opt{consumers} + ($deferred ? $opt{workers} : 0);
my $reported = () = glob("$tmpdir/*-*[0-9]");
push @failures, "only $reported of $expected_children processes reported" if $reported != $expected_children;

# The exactly-once check, per id delivered at least once.
if ($check)
{
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
			   FROM per_id}, undef, $scope, \@ids);
		%final = %$stats;
		1;
	};
	push @failures, 'final check failed: ' . one_line($@) unless $ok;
	drop_connection($check);
}

# --- the report ------------------------------------------------------------------

my $kills = $kills{sigkill} + $kills{terminate};
my @report = (mode => $opt{mode}, scope => $scope, seed => $opt{seed});
my $share = sub { my ($part) = @_; return sprintf('%.3f', $n{deliveries} ? $part / $n{deliveries} : 0); };
if ($deferred)
{
	push @report,
	  receivers => $opt{consumers}, workers => $opt{workers}, ids => $opt{ids},
	  delivered_ids => $final{delivered_ids} // 0,
	  deliveries => $n{deliveries} // 0, received => $n{fresh} // 0,
	  duplicates_suppressed => $n{duplicates_suppressed} // 0,
	  redeliveries => $n{redeliveries} // 0, redelivery_share => $share->($n{redeliveries} // 0),
	  retries => $n{retries} // 0, expired => $n{expired} // 0,
	  uncertain_receives => $n{uncertain} // 0,
	  takes => $n{w_takes} // 0, taken => $n{w_taken} // 0, completed => $n{w_completed} // 0,
	  aborts => $n{w_aborts} // 0,
	  abort_share => sprintf('%.3f', $n{w_taken} ? ($n{w_aborts} // 0) / $n{w_taken} : 0),
	  failed_dead => $n{w_fail_dead} // 0, lost_in_hand => $n{w_in_hand_lost} // 0,
	  uncertain_commits => $n{w_uncertain_commits} // 0;
	push @report, receive_batch => $opt{receive_batch}, receive_batches => $n{batches} // 0
	  if $opt{receive_batch} > 1;
	push @report, receipts => 1, cross_session => $n{w_cross_session} // 0,
	  stale_receipts => $n{w_stale_receipts} // 0
	  if $opt{receipts};
}
else
{
	push @report,
	  consumers => $opt{consumers}, claim_batch => $opt{claim_batch}, batches => $n{batches} // 0,
	  ids => $opt{ids},
	  delivered_ids => $final{delivered_ids} // 0,
	  deliveries => $n{deliveries} // 0, first => $n{first} // 0, retries => $n{retries} // 0,
	  redeliveries => $n{redeliveries} // 0, redelivery_share => $share->($n{redeliveries} // 0),
	  duplicates_suppressed => $n{duplicates_suppressed} // 0,
	  aborts => $n{aborts} // 0, abort_share => $share->($n{aborts} // 0),
	  expired => $n{expired} // 0, interrupted => $n{interrupted} // 0,
	  uncertain => $n{uncertain} // 0, uncertain_committed => $n{uncertain_committed} // 0,
	  effects_expected => $n{effects_expected} // 0;
}
my $reconnects = sum0(map { $n{$_} // 0 } qw(reconnects w_reconnects)) - $expected_children;
push @report,
  kills => $kills, kills_sigkill => $kills{sigkill}, kills_terminate => $kills{terminate},
  ($deferred ? (kills_workers => $kills{workers}) : ()),
  reconnects => max(0, $reconnects),
  effects => $final{effects} // -1, purged => $final{purged} // -1;
push @report, done => $final{done} // -1, dead => $final{dead} // -1,
  dead_with_effect => $final{dead_with_effect} // -1, open => $final{open} // -1
  if $deferred;
my $errors = sum0(map { $n{$_} // 0 } qw(errors w_errors));
push @report,
  lost => $final{lost} // -1, doubled => $final{doubled} // -1, stray => $final{stray} // -1,
  unacked => scalar(@unacked), late => $n{late} // 0, errors => $errors;

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
elsif (%final && $final{effects} != ($n{effects_expected} // 0))
{
	push @failures, "$final{effects} effect rows, but $n{effects_expected} committed fresh claims";
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
print STDERR "load.pl: $_\n" for @errors;
print STDERR "load.pl: FAILED: $_\n" for @failures;
my $line = 'inbox-load:';
while (my ($k, $v) = splice @report, 0, 2)
{
	$line .= " $k=$v";
}
print "$line result=", (@failures ? 'FAILED' : 'ok'), "\n";
exit(@failures ? 1 : 0);
