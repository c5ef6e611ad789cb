# test/t/016_examples.pl
#
# The consumer examples (examples/*) against a real RabbitMQ and a real
# server: first each README's steps, in their written order, as the roles
# it names (see "each example's README" below for what runs how); then the
# Python and Node.js consumers with crashes, as the READMEs' roles.
#
# Six streams, one queue and one scope each: python-claim, python-batch,
# python-deferred, node-claim, node-batch, node-deferred.  Each runs its
# language's consumers of that mode: 2 claim consumers (consumer.py,
# consumer.js), 2 batch consumers (batch_consumer.py, batch-consumer.js), or
# a receiver and 2 workers (receiver, worker: inbox_receive, then
# inbox_poll with a lease and a wait, inbox_complete by receipt).  The
# language's own publisher (publish.py, publish.js) sends 120 invoices per
# stream in three bursts, about 30% of them twice, and one poison invoice
# (negative amount: it can never apply).  Once all 120 are applied (checked
# then, before any replay could make up for a lost one), round 2 sends 30
# replays of invoices already applied, one invoice again with other content
# (IB002), and 10 new invoices at a time to a stream whose queue ran dry
# while some of its planned faults (which fire only in transactions that
# apply something) have yet to fire.
#
# Meanwhile:
#   - each consumer slot is started with fault specs, one per start
#     (EXAMPLE_FAULT, the examples' test hook): SIGKILL of itself before
#     COMMIT (mid-transaction), after COMMIT before the ack, after a poll
#     with messages in hand; and the database connection dropped before
#     COMMIT and after COMMIT, which the README's uncertain-commit procedure
#     must sort out: after a drop, a consumer runs that check before
#     anything else, or shows no check and was SIGKILLed first ("it
#     committed" is asserted per claim and deferred stream; "not
#     committed, processing again" per language, since a copy of the same
#     message that another consumer committed meanwhile rightly turns the
#     first into the second);
#   - random SIGKILLs of consumers (but not of one between a dropped
#     connection and its uncertain-commit check) and pg_terminate_backend
#     of their backends; every dead consumer is restarted;
#   - the claim streams find their first invoice claimed by an open
#     transaction of the test: their claim times out (inbox.claim_timeout,
#     IB003) and is retried until the test rolls back, then applies it.  The
#     batch streams run under REPEATABLE READ with no claim timeout: their
#     claim waits for the test's transaction, which then commits the claim
#     and the effect: 40001, retried, a duplicate.
#
# At the end, per stream: every invoice has exactly one row in invoices
# (no unique constraint there: a double effect would be two rows), none is
# missing, the poison has none and was dead-lettered (claim and batch: to
# the dead-letter queue; deferred: inbox_dead_letters after its attempts),
# the conflicting copy is in the dead-letter queue and its content was
# never applied, the queues are empty, and no consumer exited other than by
# our SIGKILL or, at the end, cleanly on SIGTERM.
#
# Skipped as a whole without rabbitmq-server, node and npm, or python3 with
# psycopg and pika (test/tools/ensure-deps.sh installs them).  The Node modules
# come from npm ci (examples/node/package-lock.json).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use File::Basename qw(basename);
use IO::Socket::INET;
use IPC::Run;
use POSIX qw(WNOHANG WIFSIGNALED WTERMSIG WIFEXITED WEXITSTATUS);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

my $top = "$FindBin::RealBin/../..";
my $examples = "$top/examples";
my $rabbitmq_server = '/usr/lib/rabbitmq/bin/rabbitmq-server';
my $python = '/usr/bin/python3';

sub on_path
{
	my ($name) = @_;
	return scalar grep { -x "$_/$name" } split /:/, $ENV{PATH};
}

plan skip_all => "$rabbitmq_server not found: install Debian's rabbitmq-server (test/tools/ensure-deps.sh)"
  unless -x $rabbitmq_server && on_path('epmd');
plan skip_all => 'node or npm not found: install Debian\'s nodejs and npm (test/tools/ensure-deps.sh)'
  unless on_path('node') && on_path('npm');
plan skip_all => "$python with psycopg 3 and pika not found: install python3-psycopg python3-pika"
  unless system($python, '-c', 'import psycopg, pika') == 0;

my $tmp = PostgreSQL::Test::Utils::tempdir('examples');
my $logdir = "$tmp/logs";
mkdir $logdir or die "mkdir $logdir: $!";

# Every process this file starts, so that END stops them even on failure
my %slots;           # consumer slots, by name
my $broker_pgid;     # RabbitMQ and its epmd, one process group
my @holds;           # psql sessions of the test that hold claims
my @readme_groups;   # process groups of the READMEs' shell steps

END
{
	local $?;
	for my $s (values %slots)
	{
		next unless $s->{pid};
		kill 'KILL', $s->{pid};
		waitpid($s->{pid}, 0);
	}
	if ($broker_pgid)
	{
		kill 'KILL', -$broker_pgid;
		waitpid($broker_pgid, 0);
	}
	$_->{run}->kill_kill for grep { $_->{run} && $_->{run}->pumpable } @holds;
	kill 'KILL', -$_ for @readme_groups;
}

# --- the database ------------------------------------------------------------------

my $node = InboxTest->node(
	'examples', conf => q{
inbox.purge_enabled = off
log_statement = none
max_connections = 60
});
$node->sql(PostgreSQL::Test::Utils::slurp_file("$examples/schema.sql"));

# --- RabbitMQ, private, on loopback --------------------------------------------------

my ($amqp_port, $broker_up);
($amqp_port, $broker_pgid, $broker_up) = InboxTest::start_rabbitmq("$tmp/rabbitmq");
my $amqp_url = "amqp://guest:guest\@127.0.0.1:$amqp_port/%2F";
ok($broker_up, 'RabbitMQ listens on loopback')
  or BAIL_OUT('RabbitMQ did not start: ' . PostgreSQL::Test::Utils::slurp_file("$tmp/rabbitmq/server.log"));

# --- the Node.js modules -------------------------------------------------------------

{
	my ($out, $err) = ('', '');
	my $ok = eval {
		IPC::Run::run(
			[ 'npm', 'ci', '--no-audit', '--no-fund', '--loglevel=error' ],
			'<', \undef, '>', \$out, '2>', \$err,
			init => sub {
				chdir "$examples/node" or die;
				@ENV{qw(HOME npm_config_cache npm_config_update_notifier)} =
				  ($tmp, "$tmp/npm-cache", 'false');
			},
			IPC::Run::timeout(300));
	};
	ok($ok, 'npm ci installs pg and amqplib from examples/node/package-lock.json')
	  or BAIL_OUT("npm ci failed: $@\n$out\n$err");
}

# --- each example's README, step by step, as its roles ---------------------------------
#
# Every fenced block of examples/*/README.md that runs is run, in the order
# written, each README in a database of its own, on this cluster and broker:
#
#   sql as=ROLE [db=NAME]  psql as ROLE (as=superuser: the test's superuser,
#                          for setup and checks), in the README's database,
#                          or in its database NAME (Java and Go: app, broker);
#                          it must succeed.  An "output" block right after
#                          gives what it must print (aligned, no footer):
#                          it runs again until it does, since consumers work
#                          in the background meanwhile (at most 120 s).
#   sh                     bash -e from a directory that has examples/, with
#                          PGHOST, PGPORT, PGDATABASE and AMQP_URL of this
#                          test and PGUSER a role that does not exist: a
#                          program that does not say as which role it runs
#                          cannot connect.  Commands ending in "&" run on
#                          until the README's last block; then SIGTERM (and
#                          SIGKILL 30 s later).  Only the Python and Node.js
#                          READMEs' sh blocks run: Java and Go need a JDK and
#                          Go, which make examples installs and tests.
#   sh install, sh env     not run (the packages; the test sets the variables)
#
# The broker's address in the READMEs, 127.0.0.1:5672, is this test's.
# Any other sql block fails the test: each one must say as whom it runs.
# The roles a README creates are dropped after it, with its databases.

my $no_role = 'readme_step_without_pguser';

sub readme_psql
{
	my ($dir, $db, $role, $sql) = @_;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run(
		[
			'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-P', 'footer=off',
			'-h', $node->host, '-p', $node->port, '-d', $db,
			$role eq 'superuser' ? () : ('-U', $role), '-f', '-'
		],
		'<', \$sql, '>', \$out, '2>', \$err,
		init => sub { chdir $dir or die "chdir $dir: $!" });
	s/[ \t]+$//mg, s/\A\s*\n|\s+\z//g for $out;
	return ($ok, $out, $err);
}

sub run_readme
{
	my ($lang) = @_;
	my $readme = "examples/$lang/README.md";
	my ($blocks) = InboxTest::markdown_code_blocks(slurp_file("$top/$readme"));
	my $dir = PostgreSQL::Test::Utils::tempdir("readme-$lang");
	symlink($examples, "$dir/examples") or die "symlink: $!";
	my $base = "readme_$lang";
	my %dbs;    # NAME => database
	my $roles_before = $node->sql('SELECT string_agg(rolname, \',\') FROM pg_roles');
	my @groups;    # process groups of the sh blocks, each with its background commands
	my $log = "$logdir/readme-$lang.log";
	my $steps = 0;

	my $database = sub {
		my ($name) = @_;
		my $db = defined $name ? "${base}_$name" : $base;
		$node->sql(qq{CREATE DATABASE "$db"}) unless $dbs{$db}++;
		return $db;
	};

	for my $i (0 .. $#$blocks)
	{
		my $block = $blocks->[$i];
		my ($kind, @words) = split ' ', $block->{info};
		my %attr = map { /^(\w+)=(\S+)$/ ? ($1, $2) : ($_, 1) } @words;
		my $where = "$readme:$block->{line}";
		(my $text = $block->{text}) =~ s/127\.0\.0\.1:5672\b/127.0.0.1:$amqp_port/g;
		$kind //= '';
		if ($kind eq 'sql')
		{
			if (!defined $attr{as})
			{
				fail("$where: an sql block says as which role it runs (as=ROLE)");
				next;
			}
			my $db = $database->($attr{db});
			my $next = $blocks->[ $i + 1 ];
			$steps++;
			if ($next && ($next->{info} // '') eq 'output' && $next->{adjacent})
			{
				(my $want = $next->{text}) =~ s/[ \t]+$//mg;
				$want =~ s/\A\s*\n|\s+\z//g;
				my ($ok, $out, $err);
				my $deadline = time + 120;
				do
				{
					sleep 0.5 if defined $ok;
					($ok, $out, $err) = readme_psql($dir, $db, $attr{as}, $text);
				} while (!($ok && $out eq $want) && time < $deadline);
				is($out, $want, "$where: as $attr{as}, it prints what the README shows")
				  or diag("$err\n--- what the programs logged ---\n" . (-f $log ? slurp_file($log) : ''));
			}
			else
			{
				my ($ok, $out, $err) = readme_psql($dir, $db, $attr{as}, $text);
				ok($ok, "$where: as $attr{as}, it runs") or diag($err);
			}
		}
		elsif ($kind eq 'sh' && !$attr{install} && !$attr{env} && $lang =~ /^(python|node)$/)
		{
			$steps++;
			my $db = $database->(undef);
			my $pid = fork() // die "fork: $!";
			if ($pid == 0)
			{
				POSIX::setpgid(0, 0);
				chdir $dir or POSIX::_exit(126);
				@ENV{qw(PGHOST PGPORT PGDATABASE PGUSER AMQP_URL HOME npm_config_cache npm_config_update_notifier)} =
				  ($node->host, $node->port, $db, $no_role, $amqp_url, $tmp, "$tmp/npm-cache", 'false');
				delete $ENV{PGOPTIONS};
				open(STDIN, '<', '/dev/null');
				open(STDOUT, '>>', $log);
				open(STDERR, '>&', \*STDOUT);
				print "--- $where\n";
				{ exec('bash', '-e', '-c', $text) };
				POSIX::_exit(127);
			}
			push @groups, $pid;
			push @readme_groups, $pid;
			my $deadline = time + 300;
			my $done = 0;
			while (!($done = waitpid($pid, WNOHANG) > 0) && time < $deadline) { sleep 0.1; }
			ok($done && $? == 0, "$where: the shell steps run")
			  or diag(slurp_file($log));
		}
	}
	cmp_ok($steps, '>', 0, "$readme: has steps to run");

	# The background commands, and with them the bash that started them
	kill 'TERM', -$_ for @groups;
	my $deadline = time + 30;
	sleep 0.25 while time < $deadline && grep { kill 0, -$_ } @groups;
	kill 'KILL', -$_ for grep { kill 0, -$_ } @groups;
	$node->sql(qq{DROP DATABASE "$_" WITH (FORCE)}) for keys %dbs;
	my %before = map { $_ => 1 } split /,/, $roles_before;
	for my $role (grep { !$before{$_} } split /,/, $node->sql('SELECT string_agg(rolname, \',\') FROM pg_roles'))
	{
		$node->sql(qq{DROP ROLE "$role"});
	}
}

run_readme($_) for qw(python node java go);

# The consumers connect as the roles the Python and Node.js READMEs give
# them, with the same bundles and table grants (their scopes here are
# open: no scope grants)
$node->sql(q{
CREATE ROLE invoice_consumer LOGIN;
SELECT inbox_grant_bundle('invoice_consumer', 'consumer');
GRANT INSERT ON invoices TO invoice_consumer;
CREATE ROLE invoice_receiver LOGIN;
SELECT inbox_grant_bundle('invoice_receiver', 'receiver'), inbox_grant_bundle('invoice_receiver', 'consumer');
CREATE ROLE invoice_worker LOGIN;
SELECT inbox_grant_bundle('invoice_worker', 'worker'), inbox_grant_bundle('invoice_worker', 'consumer');
GRANT INSERT ON invoices TO invoice_worker;
});
my %role_of = (claim => 'invoice_consumer', batch => 'invoice_consumer',
	receiver => 'invoice_receiver', worker => 'invoice_worker');

# --- the streams -----------------------------------------------------------------------

my $ids = 120;       # invoices per stream
my %run = (python => [$python], node => ['node']);
my %script = (
	python => {
		claim => 'python/consumer.py',
		batch => 'python/batch_consumer.py',
		receiver => 'python/receiver.py',
		worker => 'python/worker.py',
		publish => 'python/publish.py'
	},
	node => {
		claim => 'node/consumer.js',
		batch => 'node/batch-consumer.js',
		receiver => 'node/receiver.js',
		worker => 'node/worker.js',
		publish => 'node/publish.js'
	});

# The slots of each mode, each with the faults its successive starts inject
my %faults = (
	claim => [
		[ 'before-commit:kill:2', 'before-commit:drop:2' ],
		[ 'after-commit:kill:3', 'after-commit:drop:2' ]
	],
	batch => [
		[ 'before-commit:kill:1', 'before-commit:drop:1' ],
		[ 'after-commit:kill:2', 'after-commit:drop:1' ]
	],
	receiver => [
		[ 'before-commit:kill:2', 'after-commit:kill:3', 'before-commit:drop:2', 'after-commit:drop:2' ]
	],
	worker => [
		[ 'after-poll:kill:1', 'after-commit:kill:2', 'before-commit:drop:1' ],
		[ 'before-commit:kill:2', 'after-commit:drop:1' ]
	]);

my @streams;
for my $lang (qw(python node))
{
	for my $mode (qw(claim batch deferred))
	{
		my $name = "$lang-$mode";
		my %env = (
			PGHOST => $node->host,
			PGPORT => $node->port,
			PGUSER => scalar(getpwuid($<)),
			PGDATABASE => 'postgres',
			AMQP_URL => $amqp_url,
			QUEUE => "$lang.$mode",
			SCOPE => $name,
			CLAIM_TIMEOUT_MS => 1000);
		if ($mode eq 'batch')
		{
			# Wait for a held claim, under REPEATABLE READ: 40001 when it commits
			%env = (%env, BATCH_SIZE => 8, CLAIM_TIMEOUT_MS => 0,
				PGOPTIONS => '-c default_transaction_isolation=repeatable\ read');
		}
		my $stream = {
			name => $name,
			lang => $lang,
			mode => $mode,
			queue => "$lang.$mode",
			prefix => "$name-",
			planned => 0
		};
		push @streams, $stream;
		for my $role ($mode eq 'deferred' ? qw(receiver worker) : ($mode))
		{
			my $i = 0;
			for my $specs (@{ $faults{$role} })
			{
				my $slot = "$name-$role-" . $i++;
				$stream->{planned} += @$specs;
				$slots{$slot} = {
					name => $slot,
					stream => $name,
					cmd => [ @{ $run{$lang} }, "$examples/$script{$lang}{$role}" ],
					env => {
						%env,
						PGUSER => $role_of{$role},
						$role eq 'worker'
						? (BATCH_SIZE => 5, LEASE => 3, WAIT => 2, RETRY_AFTER => 0.1)
						: ()
					},
					specs => [@$specs],
					starts => 0,
				};
			}
		}
	}
}
# Attempts a message may take before it is dead: the poison's are spent
# quickly (RETRY_AFTER 0.1 s).  Another message uses one more only when a
# worker that polled it is lost (killed, or its backend ended): at most 25 +
# 25 + 3 times here, so none of them can die.
$node->sql("SELECT inbox_set_max_attempts('$_->{name}', 60)") for grep { $_->{mode} eq 'deferred' } @streams;

# --- processes -----------------------------------------------------------------------

my @unexpected;      # consumer exits other than ours
my %wait_status;     # of each consumer process that ended, by its log file
my %stats = (test_kills => 0, terminations => 0);

sub fault_fired
{
	my ($s) = @_;
	return 1 unless $s->{spec};
	return -f $s->{log} && PostgreSQL::Test::Utils::slurp_file($s->{log}) =~ /fault injected/;
}

sub start_slot
{
	my ($s) = @_;
	# A fault that did not fire (the slot was killed first) is tried again.
	$s->{spec} = shift @{ $s->{specs} } // '' if !$s->{spec} || fault_fired($s);
	$s->{log} = "$logdir/$s->{name}-" . ++$s->{starts} . '.log';
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		my %env = (%{ $s->{env} }, EXAMPLE_FAULT => $s->{spec});
		@ENV{ keys %env } = values %env;
		open(STDIN, '<', '/dev/null');
		open(STDOUT, '>', $s->{log});
		open(STDERR, '>&', \*STDOUT);
		{ exec(@{ $s->{cmd} }) };
		POSIX::_exit(127);
	}
	$s->{pid} = $pid;
}

# Reap the consumers that ended; count the exits that were not ours
sub reap
{
	my ($stopping) = @_;
	for my $s (values %slots)
	{
		next unless $s->{pid} && waitpid($s->{pid}, WNOHANG) > 0;
		my $status = $?;
		$s->{pid} = undef;
		$wait_status{ $s->{log} } = $status;
		next if WIFSIGNALED($status) && WTERMSIG($status) == 9;    # ours, or its fault hook
		next if $stopping && WIFEXITED($status) && WEXITSTATUS($status) == 0;
		push @unexpected, "$s->{name} (start $s->{starts}) ended with wait status $status: "
		  . PostgreSQL::Test::Utils::slurp_file($s->{log});
	}
}

sub publish
{
	my ($stream, @args) = @_;
	my ($out, $err) = ('', '');
	local @ENV{qw(AMQP_URL QUEUE)} = ($amqp_url, $stream->{queue});
	my $ok = eval {
		IPC::Run::run([ @{ $run{ $stream->{lang} } }, "$examples/$script{$stream->{lang}}{publish}",
				'--prefix', $stream->{prefix}, @args ],
			'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(60));
	};
	die "publish to $stream->{name} failed: $@ $out $err" unless $ok;
}

# "QUEUE READY CONSUMERS" of each queue
sub queue_counts
{
	my ($out, $err) = ('', '');
	local $ENV{AMQP_URL} = $amqp_url;
	IPC::Run::run([ $python, "$top/test/tools/queues.py", 'count', @_ ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(60))
	  or die "queues.py: $err";
	return map { my @f = split; ($f[0] => { ready => $f[1], consumers => $f[2] }) } split /\n/, $out;
}

sub logs_of
{
	my ($stream) = @_;
	return join '', map { PostgreSQL::Test::Utils::slurp_file($_) } glob("$logdir/$stream-*.log");
}

# One step of the chaos: now and then, SIGKILL a random consumer whose
# injected fault already fired, or end a random consumer's backend.
my ($next_kill, $next_terminate) = (time + 1, time + 1.5);

# True while a consumer is between its dropped connection and the
# uncertain-commit check that follows (its log is one process's)
sub awaits_check
{
	my ($s) = @_;
	return 0 unless -f $s->{log};
	my $log = PostgreSQL::Test::Utils::slurp_file($s->{log});
	return $log =~ /.*fault injected: drop(.*)\z/s && $1 !~ /uncertain commit of /;
}

sub chaos
{
	# Not before the held claims did their work: a consumer killed while it
	# waits for one would never report its IB003 or 40001.
	return unless held_claims_done();
	if (time >= $next_kill && $stats{test_kills} < 25)
	{
		# Nor one that has yet to report the uncertain-commit check after its
		# dropped connection: the checks below count on these reports.  (The
		# check of each drop still allows for a kill there, in the moment
		# between reading the log and the kill.)
		my @victims = grep { $_->{pid} && fault_fired($_) && !awaits_check($_) } values %slots;
		# A slot whose fault fired without killing it (a dropped
		# connection) gets its next fault at its next start.
		my @due = grep { @{ $_->{specs} } } @victims;
		@victims = @due if @due;
		if (@victims)
		{
			kill 'KILL', $victims[ int rand @victims ]{pid};
			$stats{test_kills}++;
		}
		$next_kill = time + 0.7;
	}
	if (time >= $next_terminate && $stats{terminations} < 25)
	{
		$stats{terminations} += $node->sql(q{
			SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity
			 WHERE application_name LIKE 'inbox-example %' ORDER BY random() LIMIT 1) AS v});
		$next_terminate = time + 0.9;
	}
}

# Keep the consumers running until $done->() is true, with chaos if asked.
# False if that did not happen within $seconds.
sub supervise
{
	my ($seconds, $with_chaos, $done) = @_;
	my $deadline = time + $seconds;
	my $last_check = 0;
	while (time < $deadline)
	{
		reap(0);
		start_slot($_) for grep { !$_->{pid} } values %slots;
		chaos() if $with_chaos;
		if (time - $last_check >= 1)
		{
			return 1 if $done->();
			$last_check = time;
		}
		sleep 0.25;
	}
	return 0;
}

# SIGTERM: each consumer finishes what it has in hand and exits 0.
sub stop_consumers
{
	my @running = grep { $_->{pid} } values %slots;
	kill 'TERM', map { $_->{pid} } @running;
	for (1 .. 4 * 30)
	{
		reap(1);
		last unless grep { $_->{pid} } @running;
		sleep 0.25;
	}
	for my $s (grep { $_->{pid} } @running)
	{
		push @unexpected, "$s->{name} did not stop within 30 s of SIGTERM";
		kill 'KILL', $s->{pid};
		waitpid($s->{pid}, 0);
		$wait_status{ $s->{log} } = $?;
		$s->{pid} = undef;
	}
}

my $ids_applied = q{
	SELECT count(DISTINCT message_id) FROM invoices
	 WHERE message_id LIKE '%s%%' AND message_id <> '%spoison'};

# --- round 1: publish, with a claim held in each claim and batch stream --------------

# The claim streams' first invoice is claimed by the test's transaction, to
# be rolled back: their consumers get IB003 until then.  The batch streams'
# is claimed and applied by the test's transaction, to be committed while
# a consumer waits for it: 40001 under REPEATABLE READ.
for my $stream (grep { $_->{mode} ne 'deferred' } @streams)
{
	my $id = "$stream->{prefix}000001";
	my $hold = $node->background_psql('postgres');
	$stream->{hold_pid} = $hold->query_safe('SELECT pg_backend_pid()');
	$hold->query_safe("BEGIN; SELECT inbox_claim('$stream->{name}', '$id')");
	$hold->query_safe(qq{INSERT INTO invoices (message_id, number, customer, amount, applied_by)
		VALUES ('$id', 'INV-000001', 'customer-1', 1.01, 'the test, its held claim')})
	  if $stream->{mode} eq 'batch';
	$stream->{hold} = $hold;
	push @holds, $hold;
}

for my $round (0 .. 2)
{
	my $ids_of_round = join ',', map { $round * 40 + $_ } 1 .. 40;
	for my $stream (@streams)
	{
		publish($stream, '--ids', $ids_of_round, '--duplicates', '0.3',
			$round == 2 ? ('--poison') : ());
	}
	# Consumers start after the first round, then run with the others.
	next if $round == 0;
	supervise(3, 1, sub { 0 });
}

# True once each stream that found a held claim retried after it
sub held_claims_done
{
	for my $stream (grep { $_->{mode} ne 'deferred' } @streams)
	{
		next if $stream->{retried};
		return 0 if $stream->{hold};
		my $retry = $stream->{mode} eq 'claim' ? 'IB003' : '40001';
		return 0 unless logs_of($stream->{name}) =~ /$retry, retrying/;
		$stream->{retried} = 1;
	}
	return 1;
}

# Release the holds when the consumers ran into them
sub release_holds
{
	for my $stream (grep { $_->{hold} } @streams)
	{
		my $logs = logs_of($stream->{name});
		my $id = "$stream->{prefix}000001";
		if ($stream->{mode} eq 'claim' && $logs =~ /\Q$id\E: IB003, retrying/)
		{
			$stream->{hold}->query_safe('ROLLBACK');
		}
		elsif (
			$stream->{mode} eq 'batch'
			&& $node->sql(qq{SELECT count(*) FROM pg_stat_activity
				WHERE application_name = 'inbox-example $stream->{lang} batch'
				  AND $stream->{hold_pid} = ANY (pg_blocking_pids(pid))}))
		{
			$stream->{hold}->query_safe('COMMIT');
		}
		else
		{
			next;
		}
		$stream->{hold}->quit;
		$stream->{hold} = undef;
	}
	return !grep { $_->{hold} } @streams;
}

my $round1_done = supervise(
	100, 1,
	sub {
		return 0 unless release_holds();
		for my $stream (@streams)
		{
			return 0 if $node->sql(sprintf($ids_applied, $stream->{prefix}, $stream->{prefix})) != $ids;
			return 0
			  if $stream->{mode} eq 'deferred'
			  && !$node->sql(
				"SELECT count(*) FROM inbox_dead_letters WHERE scope = '$stream->{name}' AND message_id = '$stream->{prefix}poison'");
		}
		return 1;
	});
ok($round1_done, 'round 1: every stream applied its 120 invoices, under crashes (and the deferred poisons died)');
# Checked now, since a replay of round 2 could make up for a lost invoice
for my $stream (@streams)
{
	is($node->sql(sprintf($ids_applied, $stream->{prefix}, $stream->{prefix})),
		$ids, "$stream->{name}: round 1: none of the $ids invoices is missing");
}

# --- round 2: replays, a conflicting copy, and new invoices while faults remain ---

for my $stream (@streams)
{
	publish($stream, '--ids', join(',', map { 2 * $_ } 1 .. 30));
	publish($stream, '--ids', '7', '--conflict');
	$stream->{published} = $ids;
	$stream->{topped_up} = 0;
}

# A fault fires in a transaction that applies something: a stream whose
# slots still have faults to inject gets 10 new invoices whenever its queue
# runs dry (at most 20 times).
sub top_up
{
	my ($stream, $ready) = @_;
	return if $ready || $stream->{topped_up} >= 20;
	return unless grep { $_->{stream} eq $stream->{name} && (!fault_fired($_) || @{ $_->{specs} }) } values %slots;
	my $first = $stream->{published} + 1;
	$stream->{published} += 10;
	$stream->{topped_up}++;
	publish($stream, '--ids', join(',', $first .. $stream->{published}));
}

my @dead_queues = map { $_->{queue} . ".dead" } @streams;
my $round2_done = supervise(
	100, 1,
	sub {
		my %q = queue_counts((map { $_->{queue} } @streams), @dead_queues);
		top_up($_, $q{ $_->{queue} }{ready}) for @streams;
		return 0 if grep { $q{ $_->{queue} }{ready} != 0 } @streams;
		# The conflicting copy, and in the claim and batch streams the poison
		return 0 if grep { $q{ $_->{queue} . '.dead' }{ready} < ($_->{mode} eq 'deferred' ? 1 : 2) } @streams;
		return 0 if grep { !fault_fired($_) || @{ $_->{specs} } } values %slots;
		for my $stream (@streams)
		{
			return 0 if $node->sql(sprintf($ids_applied, $stream->{prefix}, $stream->{prefix})) != $stream->{published};
		}
		return 1;
	});
ok($round2_done,
	'round 2: the replays, the conflicts and the new invoices were consumed, and every injected fault fired')
  or diag(join "\n",
	(map { "$_->{name}: fault $_->{spec}, left @{$_->{specs}}" } grep { !fault_fired($_) || @{ $_->{specs} } } values %slots),
	(map { "$_->{name}: " . $node->sql(sprintf($ids_applied, $_->{prefix}, $_->{prefix})) . " of $_->{published} applied" } @streams));
note(join ', ', map { "$_->{name}: $_->{published} invoices" } @streams);

stop_consumers();

# What the consumers had prefetched but not processed went back to the
# queue when they stopped: consume it without chaos, until nothing is left.
for my $pass (1 .. 5)
{
	my %q = queue_counts(map { $_->{queue} } @streams);
	my @left = grep { $q{ $_->{queue} }{ready} > 0 } @streams;
	last unless @left;
	note('consuming what is left in ' . join(', ', map { $_->{name} } @left));
	supervise(20, 0, sub {
		my %q = queue_counts(map { $_->{queue} } @left);
		return !grep { $q{ $_->{queue} }{ready} > 0 } @left;
	});
	stop_consumers();
}

# --- what came of it ---------------------------------------------------------------

my %q = queue_counts(map { $_->{queue} } @streams);
for my $stream (@streams)
{
	my ($name, $p) = ($stream->{name}, $stream->{prefix});
	my $logs = logs_of($name);

	is("$q{$stream->{queue}}{ready} $q{$stream->{queue}}{consumers}", '0 0',
		"$name: the queue is empty, every delivery acked or dead-lettered");

	my ($missing, $doubled, $stray) = split /\|/, $node->sql(qq{
		WITH expected AS (SELECT '$p' || lpad(g::text, 6, '0') AS id FROM generate_series(1, $stream->{published}) AS g),
		     applied AS (SELECT message_id AS id, count(*) AS n FROM invoices WHERE message_id LIKE '$p%' GROUP BY 1)
		SELECT (SELECT count(*) FROM expected LEFT JOIN applied USING (id) WHERE applied.id IS NULL),
		       (SELECT count(*) FROM applied WHERE n > 1),
		       (SELECT count(*) FROM applied LEFT JOIN expected USING (id) WHERE expected.id IS NULL)});
	is($missing, 0, "$name: no invoice is missing");
	is($doubled, 0, "$name: no invoice was applied twice");
	is($stray, 0, "$name: nothing else was applied (not the poison)");
	is($node->sql("SELECT string_agg(amount::text, ',') FROM invoices WHERE message_id = '${p}000007'"),
		'7.07', "$name: invoice 7 has its first content, not the conflicting copy's");

	my $dead = '';
	IPC::Run::run([ $python, "$top/test/tools/queues.py", 'dead', "$stream->{queue}.dead" ],
		'<', \undef, '>', \$dead, init => sub { $ENV{AMQP_URL} = $amqp_url });
	my @dead = sort map { (split / /)[0] . ($_ =~ /999999\.99/ ? ' (conflicting copy)' : '') } split /\n/, $dead;
	is( join(', ', @dead),
		join(', ', "${p}000007 (conflicting copy)", $stream->{mode} eq 'deferred' ? () : ("${p}poison")),
		"$name: the dead-letter queue holds the conflicting copy"
		  . ($stream->{mode} eq 'deferred' ? '' : ' and the poison') . ', once each');
	like($logs, qr/ALERT \Q${p}000007\E: IB002/, "$name: the mismatch raised an alert in the log");

	if ($stream->{mode} eq 'deferred')
	{
		is( $node->sql(qq{SELECT string_agg(state::text || ' ' || n, ', ' ORDER BY state) FROM
				(SELECT state, count(*) AS n FROM inbox.entries WHERE scope = '$name' GROUP BY state) AS s}),
			"d $stream->{published}, x 1", "$name: every received invoice is done, and the poison dead");
		is($node->sql("SELECT message_id FROM inbox_dead_letters WHERE scope = '$name'"),
			"${p}poison", "$name: the dead letter is the poison");
		# Given back with inbox_fail; the last attempt may instead end with a
		# worker the test killed, and the take after the lease marks it dead
		like($logs, qr/\Q${p}poison\E: 23514: .*now (pending|dead)/, "$name: the worker gave the poison back with inbox_fail");
	}
	else
	{
		is($node->sql("SELECT count(*) FROM inbox.entries WHERE scope = '$name'"),
			$stream->{published}, "$name: one inbox entry per invoice, none for the poison");
		like($logs, $stream->{mode} eq 'claim' ? qr/\Q${p}000001\E: IB003, retrying/ : qr/40001, retrying/,
			"$name: a transaction was retried after "
			  . ($stream->{mode} eq 'claim' ? 'IB003 (claim timeout)' : '40001 (REPEATABLE READ)'));
	}

	# The uncertain-commit procedure after the dropped connections.  After
	# COMMIT, inbox_status always shows the commit of a single message.  A
	# batch counts as committed only when every id's entry has the hash of
	# this batch's copy: a batch that also holds a conflicting copy (or the
	# poison, never written) is processed again, which is safe, and shows
	# "not committed" whatever the COMMIT did.  Before COMMIT the status
	# shows none, unless another consumer committed a copy of the same
	# message meanwhile: "not committed" is asserted per language, below.
	if ($stream->{mode} ne 'batch')
	{
		like($logs, qr/uncertain commit of .*: it committed/,
			"$name: after a connection lost past COMMIT, the status showed it committed");
	}
	# After each dropped connection the consumer's next step is the
	# uncertain-commit check (see drop_followup): none may go on without it.
	my ($checked, @unchecked) = (0);
	for my $file (sort glob("$logdir/$name-*.log"))
	{
		my @lines = split /\n/, PostgreSQL::Test::Utils::slurp_file($file);
		for my $i (0 .. $#lines)
		{
			next unless $lines[$i] =~ /^\[(\d+)\] fault injected: drop/;
			my $pid = $1;
			my @after = grep { /^\[$pid\] / } @lines[ $i + 1 .. $#lines ];
			my ($verdict, $why) = drop_followup(\@after, $wait_status{$file});
			$checked++ if $verdict eq 'checked';
			push @unchecked, "$file: $lines[$i]: $why" if $verdict eq 'unchecked';
			note("$name: SIGKILLed after a drop, before its check: "
				  . join(' | ', $lines[$i], @after) . ' (' . basename($file) . ')')
			  if $verdict eq 'killed';
		}
	}
	is(scalar(@unchecked), 0,
		"$name: each consumer that went on after a dropped connection went through the uncertain-commit check first")
	  or diag(join "\n", @unchecked);
	# Not vacuous: the chaos spares a consumer that awaits its check.
	cmp_ok($checked, '>', 0, "$name: a dropped connection was followed by the uncertain-commit check ($checked)");
	my $injected = () = $logs =~ /fault injected:/g;
	is($injected, $stream->{planned}, "$name: each planned fault fired once ($stream->{planned})");
}

# What a consumer process logged after a "fault injected: drop" line (its
# lines after it, "[pid] " first) and how it ended (its wait status, undef
# if it did not end) -> ('checked' | 'killed' | 'unchecked', why).
#
# The drop fails the step in hand with a lost connection: the consumer
# reports it at once, "database connection lost while processing <id>" (or
# "a batch"), backs off and reconnects, and then runs the README's
# uncertain-commit check for that message or batch before anything else:
# "uncertain commit of <id>: it committed" or "...: not committed,
# processing again" ("a batch of <n>" for a batch).  Until the check, it
# may report only that: the same lost connection again (the test ends
# backends too), a failed connection attempt, or node-postgres's error
# event on a connection the server ended.  Any other line first means that
# it went on without the check.  A consumer whose log ends before the check
# must have been SIGKILLed before it could run it (the test's chaos spares
# a consumer that awaits its check, but may read its log just before the
# drop); one that ended otherwise (cleanly on SIGTERM, say) or did not end
# never ran it.
sub drop_followup
{
	my ($after, $status) = @_;
	my $subject;    # the message or batch in hand
	for my $line (@$after)
	{
		(my $text = $line) =~ s/^\[\d+\] //;
		if ($text =~ /^database connection lost while processing (.+?): /)
		{
			return ('unchecked', "the lost connection of $subject, then: $line")
			  if defined $subject && $1 ne $subject;
			$subject = $1;
			next;
		}
		return ('unchecked', "the first line after the drop is not the lost connection: $line")
		  unless defined $subject;
		next if $text =~ /^(cannot connect to the database |database connection error: )/;
		if ($text =~ /^uncertain commit of (.+?): (it committed|not committed)/)
		{
			my $of = $1;
			return ('checked', '') if $of eq $subject || $of =~ /^\Q$subject\E of \d+$/;
		}
		return ('unchecked', "went on before the uncertain-commit check of $subject: $line");
	}
	return ('killed', '') if defined $status && WIFSIGNALED($status) && WTERMSIG($status) == 9;
	return ('unchecked',
		'no uncertain-commit check, and the consumer '
		  . (defined $status ? "ended with wait status $status, not SIGKILL" : 'did not end'));
}

for my $lang (qw(python node))
{
	like(join('', map { logs_of($_->{name}) } grep { $_->{lang} eq $lang } @streams),
		qr/uncertain commit of .*: not committed, processing again/,
		"$lang: after a connection lost before COMMIT, the status showed no commit, and the message was processed again");
}

is(scalar(@unexpected), 0, 'no consumer exited other than by SIGKILL, or cleanly on SIGTERM')
  or diag(join "\n---\n", @unexpected);
cmp_ok($stats{test_kills}, '>', 0, "the test killed consumers at random ($stats{test_kills})");
cmp_ok($stats{terminations}, '>', 0, "the test ended consumers' backends ($stats{terminations})");

kill 'KILL', -$broker_pgid;
waitpid($broker_pgid, 0);
$broker_pgid = undef;
$node->stop;
done_testing();
