#!/usr/bin/perl
# examples/crash-test.pl - the crash test behind "make examples".
#
#   crash-test.pl [--java CLASSPATH] [--go BINARY] [--seconds N]
#
# For each language given, on one temporary cluster (loopback, a free port,
# the library preloaded), it:
#
#   1. publishes messages to the simulated broker of the examples (a table
#      in a database of its own): every id once or twice, and some ids a
#      second time later with other content (a reused id), released over
#      the chaos window; the broker loses 10% of the acks;
#   2. runs several consumers of each mode (claim, batch, deferred receiver
#      and worker) and, for N seconds, at random moments: kills one with
#      SIGKILL (then restarts it), ends one's database session with
#      pg_terminate_backend (the consumer sees a lost connection), or stalls
#      one with SIGSTOP for 2 to 7 s (a long GC pause: its delivery's
#      visibility or its message's lease runs out, and other consumers meet
#      its uncommitted claim and wait, time out with IB003 and retry);
#   3. lets them drain the broker and the inbox (bounded), stops them, and
#      checks in the databases that every message had exactly one effect
#      with its content, none missing and none doubled; that the reused ids
#      were dead-lettered and never applied; that the deferred scope holds
#      only done messages.
#
# The Go claim consumers run as "forward": each also sends a notice to the
# outbox in its transaction, and every effect must have exactly one notice,
# every notice its effect.
#
# It prints one "ok"/"not ok" line per check and ends with "N passed, N
# failed"; it exits non-zero if a check failed.  Every process it started,
# and the cluster, are stopped however it ends.
#
# The setup is each language's README's: the script runs its SQL blocks
# marked "as=superuser", and each mode connects as the role the README
# gives it, with the bundles, table grants and scope grants it grants.
#
# Run it as a non-root user (initdb refuses root) with PostgreSQL's bindir
# on PATH and the extension installed there, beside the java/ and go/
# directories it runs; examples/run-jvm-go.sh ("make examples") does all
# that.
use strict;
use warnings;
use DBI;
use File::Temp ();
use FindBin;
use Getopt::Long;
use IO::Socket::INET;
use List::Util qw(shuffle);
use POSIX ();
use Time::HiRes qw(sleep time);

my %opt = (seconds => 20);
GetOptions(\%opt, 'java=s', 'go=s', 'seconds=i') or die "usage: $0 [--java CP] [--go BIN] [--seconds N]\n";
my @langs = grep { defined $opt{$_} } qw(java go);
die "crash-test: give --java and/or --go\n" unless @langs;

# How many ids each mode gets, how many of them are reused with other
# content, and how many consumers of each mode run per language.
my %NIDS = (claim => 300, batch => 400, deferred => 300);
my $NREUSED = 6;
my %NPROCS = (claim => 3, batch => 2, receive => 2, work => 2);
my $DRAIN_SECONDS = 90;

# Connect only where this script says: no PG* setting of the caller's
# environment may reach our sessions.
delete $ENV{$_} for grep { /^PG/ } keys %ENV;

my $tmp = File::Temp->newdir('inbox-examples.XXXXXX', TMPDIR => 1);
my $data = "$tmp/data";
my %procs;              # pid => { lang, mode, n }: the consumers running
my $cluster_up = 0;
my ($passed, $failed) = (0, 0);

# Stop every consumer, then the cluster, whatever happened.
sub cleanup
{
	for my $pid (keys %procs)
	{
		kill 'KILL', $pid;
		waitpid($pid, 0);
	}
	%procs = ();
	if ($cluster_up)
	{
		system('pg_ctl', '-D', $data, '-s', '-m', 'immediate', '-w', 'stop');
		$cluster_up = 0;
	}
}
END { my $rc = $?; cleanup(); $? = $rc; }
# Once: a second signal must not cut the cleanup short.
$SIG{INT} = $SIG{TERM} = sub {
	$SIG{INT} = $SIG{TERM} = 'IGNORE';
	print "crash-test: interrupted\n";
	exit 130;
};

sub check
{
	my ($ok, $name) = @_;
	if ($ok) { $passed++; print "ok - $name\n"; }
	else { $failed++; print "not ok - $name\n"; }
	return $ok;
}

# --- the cluster -------------------------------------------------------------

# A port nobody listens on now.  Another process could take it before the
# server does; then the server fails to start and says so.
my $port = do {
	my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 1)
	  or die "crash-test: no free port: $!\n";
	my $p = $s->sockport;
	close $s;
	$p;
};

system("initdb -D '$data' -U postgres -A trust -E UTF8 --locale=C --no-instructions >'$tmp/initdb.log' 2>&1") == 0
  or die "crash-test: initdb failed:\n" . slurp("$tmp/initdb.log");
append("$data/postgresql.conf", <<EOF);
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$tmp'
max_connections = 80
shared_preload_libraries = 'inbox'
# The chaos ends sessions by the dozen; their lines would drown the log.
log_min_messages = warning
EOF
system('pg_ctl', '-D', $data, '-l', "$tmp/server.log", '-s', '-w', '-t', '60', 'start') == 0
  or die "crash-test: the server did not start:\n" . slurp("$tmp/server.log");
$cluster_up = 1;

sub dbh
{
	my ($db) = @_;
	# A statement that hangs must not hang the test: it fails it instead.
	return DBI->connect("dbi:Pg:dbname=$db;host=127.0.0.1;port=$port;options='-c statement_timeout=60s'",
		'postgres', '',
		{ AutoCommit => 1, RaiseError => 1, PrintError => 0 });
}

# The setup of each language's README, as it is written there: its first
# "sql as=superuser db=app" block in the application database (the
# extension, the business table, a role per mode with its bundles, table
# grants and scope grants) and its first "db=broker" one in the broker's.
# The roles belong to the cluster: the second language's CREATE ROLE finds
# them there already.
sub readme_setup
{
	my ($lang) = @_;
	my $readme = "$FindBin::Bin/$lang/README.md";
	open(my $fh, '<', $readme) or die "crash-test: $readme: $!\n";
	my (%sql, $db, $text);
	while (my $line = <$fh>)
	{
		if (!defined $db && $line =~ /^```sql\s+as=superuser\s+db=(\w+)\s*$/)
		{
			($db, $text) = ($1, '');
		}
		elsif (defined $db && $line =~ /^```\s*$/)
		{
			$sql{$db} //= $text;
			undef $db;
		}
		elsif (defined $db)
		{
			$text .= $line;
		}
	}
	die "crash-test: $readme has no \"sql as=superuser db=app\" and \"db=broker\" blocks\n"
	  unless defined $sql{app} && defined $sql{broker};
	return \%sql;
}

sub run_sql
{
	my ($dbh, $sql) = @_;
	for my $statement (grep { /\S/ } split /;\s*\n/, $sql)
	{
		next if eval { $dbh->do($statement); 1 };
		die $@ unless $dbh->state eq '42710' && $statement =~ /^\s*CREATE ROLE/i;
	}
}

# The role each mode connects as, as the READMEs name them
my %ROLE = (claim => 'invoice_claimer', batch => 'invoice_claimer',
	receive => 'invoice_receiver', work => 'invoice_worker');

my $admin = dbh('postgres');
for my $lang (@langs)
{
	$admin->do("CREATE DATABASE app_$lang");
	$admin->do("CREATE DATABASE broker_$lang");
	my $setup = readme_setup($lang);

	# The application database.  invoices has no unique key on message_id
	# on purpose: a double effect must show as a second row, not be hidden
	# by a constraint.
	my $app = dbh("app_$lang");
	run_sql($app, $setup->{app});
	# Killed workers use up attempts; here a message must never die of that.
	$app->do(q{SELECT inbox_set_max_attempts('deferred', 1000)});
	$app->disconnect;

	my $broker = dbh("broker_$lang");
	run_sql($broker, $setup->{broker});
	$broker->do(q{CREATE INDEX ON queue (topic, seq) WHERE state = 'ready'});
	$broker->disconnect;
}

# --- consumers -------------------------------------------------------------

# The URLs of a consumer of $mode whose OS pid is $pid, as its mode's role: its sessions' application_name
# ends with that pid, so that the chaos can find the consumers whose
# session is inside a transaction right now.
sub urls
{
	my ($lang, $mode, $pid) = @_;
	my $role = $ROLE{$mode};
	my $u =
	  $lang eq 'java'
	  ? "jdbc:postgresql://127.0.0.1:$port/%s_java?user=$role&ApplicationName=inbox-example-%s-$pid"
	  : "postgres://$role\@127.0.0.1:$port/%s_go?sslmode=disable&application_name=inbox-example-%s-$pid";
	return (sprintf($u, 'app', $lang), sprintf($u, 'broker', 'broker'));
}

sub command
{
	my ($lang, $mode) = @_;
	# A small, quickly started JVM: consumers are restarted by the dozen.
	return ('java', '-XX:+UseSerialGC', '-XX:TieredStopAtLevel=1', '-Xmx128m', '-cp', $opt{java}, 'Main', $mode)
	  if $lang eq 'java';
	return ($opt{go}, $mode eq 'claim' ? 'forward' : $mode);
}

sub start_consumer
{
	my ($lang, $mode, $n) = @_;
	my $log = "$tmp/$lang-$mode-$n.log";
	my $pid = fork() // die "crash-test: fork: $!\n";
	if ($pid == 0)
	{
		my ($app, $broker) = urls($lang, $mode, $$);    # exec keeps the pid
		open(STDOUT, '>>', $log) or POSIX::_exit(1);
		open(STDERR, '>&', \*STDOUT) or POSIX::_exit(1);
		$ENV{INBOX_APP_URL} = $app;
		$ENV{INBOX_BROKER_URL} = $broker;
		$ENV{INBOX_SCOPE} = $mode =~ /^(receive|work)$/ ? 'deferred' : $mode;
		$ENV{INBOX_LOSE_ACKS} = '0.1';
		$ENV{INBOX_FAIL_RATE} = '0.05';
		$ENV{INBOX_WORK_MS} = '30';
		exec(command($lang, $mode)) or POSIX::_exit(1);
	}
	$procs{$pid} = { lang => $lang, mode => $mode, n => $n };
	return $pid;
}

# Restart whatever exited on its own (a consumer must not): that counts as
# a failure, since only the chaos should end a consumer.
my %unexpected_exits;
sub reap_and_restart
{
	while ((my $pid = waitpid(-1, POSIX::WNOHANG())) > 0)
	{
		my $p = delete $procs{$pid} or next;
		$unexpected_exits{ $p->{lang} }++;
		print "crash-test: $p->{lang} $p->{mode} consumer exited by itself (status $?)\n";
		start_consumer($p->{lang}, $p->{mode}, $p->{n});
	}
}

# --- one language -------------------------------------------------------------

# Messages: {"invoice": ..., "amount": ...}.  The broker releases them
# over the chaos window; a reused id comes 1 to 4 seconds after the original.
sub publish
{
	my ($lang) = @_;
	my $broker = dbh("broker_$lang");
	my %sent;    # topic => id => [amounts published]
	my @rows;
	for my $topic (sort keys %NIDS)
	{
		my @ids = map { sprintf('%s-%s-%05d', $lang, $topic, $_) } 1 .. $NIDS{$topic};
		my %reused = map { $_ => 1 } (shuffle @ids)[0 .. $NREUSED - 1];
		for my $id (@ids)
		{
			my $amount = sprintf('%d.%02d', 1 + int(rand(9999)), int(rand(100)));
			my $at = rand($opt{seconds} * 0.8);
			# The producer retried: a second copy, at once or a little later
			my $copies = rand() < 0.3 ? 2 : 1;
			push @rows, [ $topic, $id, $amount, $at + (rand() < 0.5 ? 0 : rand(0.5)) ] for 1 .. $copies;
			$sent{$topic}{$id} = [$amount];
			if ($reused{$id})
			{
				my $other = sprintf('%.2f', $amount + 1 + int(rand(50)));
				push @rows, [ $topic, $id, $other, $at + 1 + rand(3) ];
				push @{ $sent{$topic}{$id} }, $other;
			}
		}
	}
	my $st = $broker->prepare(
		q{INSERT INTO queue (topic, message_id, payload, visible_at)
		  VALUES (?, ?, json_build_object('invoice', ?::text, 'amount', ?::text)::text,
				  now() + make_interval(secs => ?))});
	$broker->begin_work;
	$st->execute($_->[0], $_->[1], $_->[1], $_->[2], $_->[3]) for shuffle @rows;
	$broker->commit;
	$broker->disconnect;
	return \%sent;
}

sub run_language
{
	my ($lang) = @_;
	print "# $lang: publishing, then $opt{seconds} s of SIGKILL, SIGSTOP and lost connections\n";
	my $sent = publish($lang);
	my $app = dbh("app_$lang");
	my $broker = dbh("broker_$lang");

	for my $mode (sort keys %NPROCS)
	{
		start_consumer($lang, $mode, $_) for 1 .. $NPROCS{$mode};
	}

	# The chaos: every 0.2 to 0.8 s, SIGKILL a consumer (restarted at once),
	# stall one, or end one's database session.  Mostly a consumer that is
	# inside a transaction right now, where faults matter most: between the
	# claim and COMMIT, or in COMMIT itself (a worker waiting in inbox_poll
	# is in a transaction too, but only a random pick strikes it there).
	my ($kills, $terminated, $stalls) = (0, 0, 0);
	my %stalled;    # pid => when to resume it
	my $resume = sub {
		my ($all) = @_;
		for my $pid (keys %stalled)
		{
			next unless $all || $stalled{$pid} <= time;
			kill 'CONT', $pid;
			delete $stalled{$pid};
		}
	};
	my $until = time + $opt{seconds};
	while (time < $until)
	{
		sleep(0.2 + rand(0.6));
		reap_and_restart();
		$resume->(0);
		my @mine = grep { $procs{$_}{lang} eq $lang } keys %procs;
		my @busy = grep { $procs{$_} && !$stalled{$_} } @{
			$admin->selectcol_arrayref(
				q{SELECT substring(application_name from '-([0-9]+)$')::int FROM pg_stat_activity
				   WHERE application_name LIKE $1 AND xact_start IS NOT NULL AND state <> 'idle'
					 AND query NOT LIKE '%inbox_poll%'},
				undef, "inbox-example-$lang-%") };
		my $victim = @busy && rand() < 0.7 ? $busy[ int(rand(@busy)) ] : $mine[ int(rand(@mine)) ];
		my $dice = rand();
		if ($dice < 0.45)
		{
			my $p = delete $procs{$victim};
			delete $stalled{$victim};
			kill 'KILL', $victim;
			waitpid($victim, 0);
			$kills++;
			start_consumer($lang, $p->{mode}, $p->{n});
		}
		elsif ($dice < 0.75)
		{
			next if $stalled{$victim};
			kill 'STOP', $victim;
			$stalled{$victim} = time + 2 + rand(5);
			$stalls++;
		}
		else
		{
			$terminated += $admin->selectrow_array(
				q{SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				   WHERE application_name = $1 LIMIT 1) AS t},
				undef, "inbox-example-$lang-$victim");
		}
	}

	$resume->(1);

	# Drain: no delivery left at the broker, no open message in the inbox.
	my $drained = 0;
	my $deadline = time + $DRAIN_SECONDS;
	while (time < $deadline)
	{
		reap_and_restart();
		my ($ready) = $broker->selectrow_array(q{SELECT count(*) FROM queue WHERE state = 'ready'});
		my ($open) = $app->selectrow_array(
			q{SELECT coalesce(sum(pending + processing), 0) FROM inbox_stats WHERE scope = 'deferred'});
		if ($ready == 0 && $open == 0) { $drained = 1; last; }
		sleep(0.5);
	}

	# Stop this language's consumers before looking at the results.
	for my $pid (grep { $procs{$_}{lang} eq $lang } keys %procs)
	{
		kill 'KILL', $pid;
		waitpid($pid, 0);
		delete $procs{$pid};
	}

	# What the consumers logged, counted by event.
	my %events;
	for my $f (glob("$tmp/$lang-*.log"))
	{
		open(my $fh, '<', $f) or next;
		while (<$fh>)
		{
			$events{$1}++ if /^([a-z][a-z0-9-]*[A-Z0-9]*) /;
		}
	}
	print "# $lang: $kills consumers killed with SIGKILL, $stalls stalled, $terminated sessions terminated; events: "
	  . join(', ', map { "$_ $events{$_}" } sort keys %events) . "\n";

	check($kills > 0 && $stalls > 0 && $terminated > 0,
		"$lang: consumers were killed ($kills), stalled ($stalls) and their sessions ended ($terminated)");
	check(!$unexpected_exits{$lang}, "$lang: no consumer exited by itself");
	check($drained, "$lang: the broker and the inbox drained within $DRAIN_SECONDS s after the chaos");

	for my $topic (sort keys %NIDS)
	{
		check_topic($lang, $topic, $sent->{$topic}, $app, $broker);
	}

	if ($lang eq 'go')
	{
		my ($effects, $notices, $matched, $sources) = $app->selectrow_array(q{
			SELECT (SELECT count(*) FROM invoices WHERE scope = 'claim'),
				   (SELECT count(*) FROM inbox.outbox_messages),
				   (SELECT count(*) FROM inbox.outbox_messages AS m
					  JOIN invoices AS i ON i.scope = 'claim' AND i.message_id = m.payload->>'source'
										AND i.amount = (m.payload->>'amount')::numeric),
				   (SELECT count(DISTINCT m.payload->>'source') FROM inbox.outbox_messages AS m)});
		check($effects > 0 && $notices == $effects && $matched == $notices && $sources == $notices,
			"go forward: $effects effects, $notices notices in the outbox, $matched with their effect's "
			  . "id and amount, $sources distinct");
	}

	my ($pending, $processing, $dead) = $app->selectrow_array(
		q{SELECT pending, processing, dead FROM inbox_stats WHERE scope = 'deferred'});
	check(defined $pending && $pending + $processing + $dead == 0,
		"$lang deferred: no message left pending, processing or dead in the inbox");
	$app->disconnect;
	$broker->disconnect;
}

# Every id: exactly one effect, whose amount is one the producer sent for
# it.  Every acked delivery carried that amount; every dead-lettered one
# another amount (a reused id, never applied).  A reused id has at least
# one dead-lettered delivery, an id sent with one content none.
sub check_topic
{
	my ($lang, $topic, $sent, $app, $broker) = @_;
	my %effects;
	my $rows = $app->selectall_arrayref(q{SELECT message_id, amount FROM invoices WHERE scope = ?}, undef, $topic);
	push @{ $effects{ $_->[0] } }, $_->[1] + 0 for @$rows;

	my ($missing, $doubled, $unknown, $wrong) = (0, 0, 0, 0);
	for my $id (keys %$sent)
	{
		my $n = scalar @{ $effects{$id} // [] };
		$missing++ if $n == 0;
		$doubled++ if $n > 1;
		$wrong++ if $n == 1 && !grep { $_ + 0 == $effects{$id}[0] } @{ $sent->{$id} };
	}
	$unknown = grep { !exists $sent->{$_} } keys %effects;
	my $nids = keys %$sent;
	check($missing == 0 && $doubled == 0 && $unknown == 0 && $wrong == 0,
		"$lang $topic: $nids messages, " . scalar(@$rows)
		  . " effects: $missing missing, $doubled doubled, $wrong with content never sent, $unknown unknown");

	my $deliveries = $broker->selectall_arrayref(
		q{SELECT message_id, (payload::json->>'amount')::numeric, state, deliveries FROM queue WHERE topic = ?},
		undef, $topic);
	my ($acked_other, $dead_same, $redelivered) = (0, 0, 0);
	my %dead;
	for my $d (@$deliveries)
	{
		my ($id, $amount, $state, $count) = @$d;
		$redelivered++ if $count > 1;
		my $applied = $effects{$id} ? $effects{$id}[0] : undef;
		next unless defined $applied;
		if ($state eq 'acked') { $acked_other++ if $amount + 0 != $applied; }
		elsif ($state eq 'dead') { $dead{$id}++; $dead_same++ if $amount + 0 == $applied; }
	}
	my @reused = grep { @{ $sent->{$_} } > 1 } keys %$sent;
	my $reused_not_dead = grep { !$dead{$_} } @reused;
	my $single_dead = grep { @{ $sent->{$_} } == 1 } keys %dead;
	check($acked_other == 0 && $dead_same == 0 && $reused_not_dead == 0 && $single_dead == 0,
		"$lang $topic: " . scalar(@reused) . " reused ids dead-lettered, never applied "
		  . "($acked_other acked with other content, $dead_same dead-lettered with the applied content, "
		  . "$reused_not_dead reused ids not dead-lettered, $single_dead other ids dead-lettered); "
		  . "$redelivered deliveries were redelivered");
}

sub slurp { my ($f) = @_; open(my $fh, '<', $f) or return ''; local $/; return <$fh>; }
sub append { my ($f, $s) = @_; open(my $fh, '>>', $f) or die "crash-test: $f: $!\n"; print $fh $s; close $fh; }

my $started = time;
# A run that dies half-way still ends with its closing line, as a failure.
for my $lang (@langs)
{
	next if eval { run_language($lang); 1 };
	check(0, "$lang: the crash test ran to its end: $@");
	last;
}
printf "# %.0f s in all\n", time - $started;
print "$passed passed, $failed failed\n";
if ($failed)
{
	print "--- last lines of the server log ---\n", `tail -n 20 '$tmp/server.log'`;
	exit 1;
}
exit 0;
