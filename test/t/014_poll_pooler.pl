# test/t/014_poll_pooler.pl
#
# inbox_poll's waiting takes, and receipts through a real transaction-mode
# pooler (PgBouncer).
#
# Waiting takes (wait => interval), outcomes only, never timings:
#   - a poll waiting a minute returns the message a receive commits in its
#     scope, and a receive that rolls back does not make it return: it goes
#     on waiting and returns the message committed after.  A missing
#     wake-up would leave it asleep for the minute: each wait is bounded by a
#     60 s IPC::Run timeout, which fails the assertion instead of hanging;
#   - a batch receive (inbox_receive_many), an inbox_fail by receipt and a
#     delayed receive (not_before) end the wait too;
#   - a wait on an empty scope ends empty when it runs out;
#   - a waiting poll is cancelled by pg_cancel_backend (57014), and its
#     session goes on;
#   - it cannot wait under REPEATABLE READ (0A000), nor in a server that
#     does not preload the library (55000), where a poll without wait works.
#
# Receipts through PgBouncer in pool_mode = transaction, where two
# transactions of one client may run on two server sessions (the pooler
# trap of the deferred mode):
#   - a consumer polls a message in one transaction, and in its next one,
#     which the test forces onto another server session by keeping the
#     first one busy, inserts its effect and completes by receipt: that
#     commits, once.  The 0.4.0 completion by message_id in the same place
#     fails with IB004, since the message belongs to the server session that
#     polled it;
#   - extend and fail by receipt from another server session work too;
#   - a load through the pooler (test/faults/load.pl --receipts --pooler):
#     receivers enqueue with inbox_receive_many, 4 workers poll (waiting)
#     with receipts and complete by receipt in a transaction of its own,
#     and server sessions are ended with pg_terminate_backend at random.
#     Every received message ends with exactly one effect row (the effects
#     table has no unique constraint): lost 0, doubled 0.
#
# Skipped as a whole when /usr/sbin/pgbouncer is missing (Debian's
# pgbouncer package; test/tools/ensure-deps.sh installs it).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use DBI;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $pgbouncer = '/usr/sbin/pgbouncer';
plan skip_all => "$pgbouncer not found: install Debian's pgbouncer package (test/tools/ensure-deps.sh)"
  unless -x $pgbouncer;

my $node = InboxTest->node(
	'poll', conf => q{
inbox.purge_enabled = off
# The load below would fill the log with its statements.
log_statement = none
max_connections = 40
});

# --- waiting takes -------------------------------------------------------------

# The longest any wait below may take before it counts as a missing wake-up
my $patience = 60;

# Is the backend $pid asleep in a waiting take?
sub sleeping
{
	my ($pid) = @_;
	return $node->poll_query_until('postgres',
		"SELECT state = 'active' AND wait_event_type = 'Extension' FROM pg_stat_activity WHERE pid = $pid");
}

# A session whose poll of $scope waits for an hour, once its backend sleeps.
# Returns the session and its backend's pid.
sub waiting_poll
{
	my ($scope, $max) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => $patience);
	$s->set_query_timer_restart;
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	$s->query_until(qr/polling/,
		"\\echo polling\n"
		  . "SELECT message_id || ':' || attempts FROM inbox_poll('$scope', $max, '1 minute', '60 seconds') ORDER BY 1;\n"
		  . "\\echo poll-done\n");
	ok(sleeping($pid), "$scope: the poll waits");
	return ($s, $pid);
}

# What the waiting poll of $s returned ("id:attempts,..."), or 'no return'
# if it did not return within the patience.
sub poll_result
{
	my ($s, $pid) = @_;
	my $out = eval { $s->query_until(qr/poll-done\r?\n/, '') };
	if (!defined $out)
	{
		diag("the poll did not return within ${patience}s: $@");
		$node->sql("SELECT pg_terminate_backend($pid)");
		return 'no return';
	}
	$s->quit;
	$out =~ s/poll-done\r?\n//;
	return join(',', split /\r?\n/, $out);
}

# a. A commit wakes the waiting poll, a rollback does not.
{
	my ($s, $pid) = waiting_poll('wake', 1);
	$node->sql(q{BEGIN; SELECT inbox_receive('wake', 'rolled-back', '{}'::jsonb); ROLLBACK});
	# The rollback ended before this look: had it woken the poll, the poll
	# would have found nothing and slept again; it never returns anything.
	$s->{run}->pump_nb;
	is($s->{stdout}, '', 'wake: a receive that rolls back does not end the wait');
	ok(sleeping($pid), 'wake: the poll still waits after the rollback');
	$node->sql(q{SELECT inbox_receive('wake', 'committed', '{}'::jsonb)});
	is(poll_result($s, $pid), 'committed:1',
		'wake: a receive that commits ends the wait with its message, not the rolled back one');
}

# A batch receive commits three messages at once: one wake-up, one take
{
	my ($s, $pid) = waiting_poll('wake-many', 10);
	$node->sql(q{SELECT count(*) FROM inbox_receive_many('wake-many', ARRAY['b1', 'b2', 'b3'],
		ARRAY['{}', '{}', '{}']::jsonb[])});
	is(poll_result($s, $pid), 'b1:1,b2:1,b3:1', 'wake-many: inbox_receive_many ends the wait');
}

# inbox_fail by receipt, from another session, gives the message back
{
	$node->sql(q{SELECT inbox_receive('wake-fail', 'f1', '{}'::jsonb)});
	my $receipt = $node->sql(q{SELECT receipt FROM inbox_poll('wake-fail', 1, '1 minute')});
	my ($s, $pid) = waiting_poll('wake-fail', 1);
	is($node->sql(qq{SELECT inbox_fail('wake-fail', '$receipt'::uuid, 'carrier API: 503')}),
		'pending', 'wake-fail: another session fails the message by its receipt');
	is(poll_result($s, $pid), 'f1:2', 'wake-fail: the failed message ends the wait, as attempt 2');
}

# A delayed message: the receive's commit wakes the poll before the message
# is due; the poll sleeps until it is, and takes it then.
{
	my ($s, $pid) = waiting_poll('wake-later', 1);
	$node->sql(q{SELECT inbox_receive('wake-later', 'later', '{}'::jsonb, NULL,
		clock_timestamp() + interval '1 second')});
	is(poll_result($s, $pid), 'later:1', 'wake-later: a message received with not_before ends the wait');
	is( $node->sql(q{SELECT taken_at >= received_at + interval '1 second' FROM inbox.entries
			WHERE scope = 'wake-later' AND message_id = 'later'}),
		't', 'wake-later: it was taken once due, not before');
}

# b. A wait on an empty scope runs out, empty
is($node->sql(q{SELECT count(*) FROM inbox_poll('empty', 1, '1 minute', '200 ms')}),
	0, 'a wait with nothing to take ends empty');

# c. pg_cancel_backend cancels a waiting poll
{
	my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => $patience);
	$s->set_query_timer_restart;
	$s->query_safe('\set VERBOSITY verbose');
	$s->query_until(qr/polling/,
		"\\echo polling\nSELECT * FROM inbox_poll('cancel', 1, '1 minute', '60 seconds');\n\\echo poll-done\n");
	my $waiting = q{SELECT pid FROM pg_stat_activity
		WHERE query LIKE '%inbox_poll(''cancel''%' AND wait_event_type = 'Extension'
		  AND pid <> pg_backend_pid()};
	ok($node->poll_query_until('postgres', "SELECT count(*) = 1 FROM ($waiting) w"),
		'cancel: the waiting poll shows in pg_stat_activity, waiting on Extension');
	my $pid = $node->sql($waiting);
	is($node->sql("SELECT pg_cancel_backend($pid)"), 't', 'cancel: pg_cancel_backend reaches it');
	my $out = eval { $s->query_until(qr/poll-done\r?\n/, '') };
	ok(defined $out, 'cancel: the poll returns') or diag($@);
	like($s->{stderr}, qr/ERROR:  57014: canceling statement due to user request/,
		'cancel: with SQLSTATE 57014');
	$s->{stderr} = '';
	is($s->query_safe('SELECT 1'), '1', 'cancel: the session goes on');
	$s->quit;
}

# The SQLSTATE of the error $sql raises on $n, or 'no error'
sub sqlstate
{
	my ($n, $sql) = @_;
	my ($ret, $out, $err) = $n->psql('postgres', "\\set VERBOSITY verbose\n$sql");
	return $err =~ /ERROR:  ([0-9A-Z]{5}):/ ? $1 : "no error ($err)";
}

# d. Conditions a waiting poll needs
is( sqlstate($node, q{BEGIN ISOLATION LEVEL REPEATABLE READ;
		SELECT * FROM inbox_poll('rr', 1, '1 minute', '1 second')}),
	'0A000', 'a poll cannot wait under REPEATABLE READ (0A000)');

my $plain = InboxTest->node('no_preload', preload => '');
is(sqlstate($plain, q{SELECT * FROM inbox_poll('np', 1, '1 minute', '1 second')}),
	'55000', 'without shared_preload_libraries a poll cannot wait (55000)');
$plain->sql(q{SELECT inbox_receive('np', 'n1', '{}'::jsonb)});
my ($np_id, $np_receipt) =
  split /\|/, $plain->sql(q{SELECT message_id, receipt FROM inbox_poll('np', 1, '1 minute')});
is($np_id, 'n1', 'without shared_preload_libraries a poll without wait takes the message');
$plain->sql(qq{SELECT inbox_complete('np', '$np_receipt'::uuid)});
is($plain->sql(q{SELECT state FROM inbox_status('np', 'n1')}), 'done', 'and completes it by receipt');
$plain->stop;

# --- PgBouncer, pool_mode = transaction --------------------------------------------

my $user = getpwuid($<);
my $bdir = PostgreSQL::Test::Utils::tempdir('pgbouncer');
my $bport = PostgreSQL::Test::Cluster::get_free_port();
my ($host, $port) = ($node->host, $node->port);
PostgreSQL::Test::Utils::append_to_file("$bdir/userlist.txt", qq{"$user" ""\n});
# "postgres" for the single consumer below, "load" for the load driver:
# both reach database postgres, each through its own pool.
PostgreSQL::Test::Utils::append_to_file(
	"$bdir/pgbouncer.ini", qq{
[databases]
postgres = host=$host port=$port dbname=postgres pool_size=3
load = host=$host port=$port dbname=postgres pool_size=4

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bport
unix_socket_dir =
auth_type = trust
auth_file = $bdir/userlist.txt
pool_mode = transaction
default_pool_size = 2
max_client_conn = 100
logfile = $bdir/pgbouncer.log
pidfile = $bdir/pgbouncer.pid
});
my $bouncer = IPC::Run::start([ $pgbouncer, "$bdir/pgbouncer.ini" ],
	'<', \undef, '>', "$bdir/stdout", '2>', "$bdir/stderr");
END { $bouncer->kill_kill if $bouncer && $bouncer->pumpable; }

sub bouncer_connect
{
	my ($db) = @_;
	return DBI->connect("dbi:Pg:host=127.0.0.1;port=$bport;dbname=$db", $user, '',
		{ AutoCommit => 1, RaiseError => 1, PrintError => 0, PrintWarn => 0, pg_server_prepare => 0 });
}

my $consumer;
for (1 .. 10 * $PostgreSQL::Test::Utils::timeout_default)
{
	$consumer = eval { bouncer_connect('postgres') } and last;
	sleep 0.1;
}
ok($consumer, 'PgBouncer accepts connections')
  or BAIL_OUT('PgBouncer did not start: ' . slurp_file("$bdir/pgbouncer.log"));

# The SQLSTATE of an error of $code on $dbh, or 'ok'; a transaction the
# error left open is rolled back.
sub outcome
{
	my ($dbh, $code) = @_;
	my $ok = eval { $code->(); 1 };
	my $state = $dbh->state;
	$dbh->rollback unless $dbh->{AutoCommit};
	return $ok ? 'ok' : $state;
}

# Sessions that each hold a server session of pool "postgres" in an open
# transaction, until one holds $pid's.  PgBouncer hands out the server
# session used last first, so the first holder normally gets it; the pool
# has 3 server sessions, so 2 holders at most still leave one to the
# consumer.
sub hold_server_session
{
	my ($pid) = @_;
	my @holders;
	for (1 .. 2)
	{
		my $h = bouncer_connect('postgres');
		$h->begin_work;
		push @holders, $h;
		my ($held) = $h->selectrow_array('SELECT pg_backend_pid()');
		return @holders if $held == $pid;
	}
	fail("no holder got server session $pid");
	return @holders;
}

sub release { $_->rollback, $_->disconnect for @_; }

$node->sql(q{
	CREATE TABLE pooled_effects (message_id text NOT NULL, server_pid integer NOT NULL);
	SELECT inbox_receive('pool', 'order-1', '{"order": 1}'::jsonb);
	SELECT inbox_receive('pool', 'order-2', '{"order": 2}'::jsonb);
});

# The consumer's first transaction: the poll
my ($mid, $receipt, $poll_pid) = $consumer->selectrow_array(
	q{SELECT message_id, receipt, pg_backend_pid() FROM inbox_poll('pool', 1, lease => '1 minute')});
is($mid, 'order-1', 'pooler: the consumer polls a message');

my @holders = hold_server_session($poll_pid);

# Its next transaction: the 0.4.0 completion, by message_id
my $trap_pid;
is( outcome(
		$consumer,
		sub {
			$consumer->begin_work;
			($trap_pid) = $consumer->selectrow_array('SELECT pg_backend_pid()');
			$consumer->do('INSERT INTO pooled_effects VALUES ($1, pg_backend_pid())', undef, $mid);
			$consumer->do(q{SELECT inbox_complete('pool', $1)}, undef, $mid);
			$consumer->commit;
		}),
	'IB004',
	'pooler: inbox_complete(scope, message_id) on another server session fails with IB004 (the pooler trap)');
isnt($trap_pid, $poll_pid, 'pooler: that transaction ran on another server session than the poll');

# The same transaction, completed by receipt
my $effect_pid;
is( outcome(
		$consumer,
		sub {
			$consumer->begin_work;
			($effect_pid) = $consumer->selectrow_array('SELECT pg_backend_pid()');
			$consumer->do('INSERT INTO pooled_effects VALUES ($1, pg_backend_pid())', undef, $mid);
			$consumer->do(q{SELECT inbox_complete('pool', $1::uuid, '{"shipment": "S-1"}')},
				undef, $receipt);
			$consumer->commit;
		}),
	'ok',
	'pooler: inbox_complete(scope, receipt) on another server session commits');
isnt($effect_pid, $poll_pid, 'pooler: that transaction ran on another server session than the poll');
release(@holders);

is( $node->sql(q{SELECT count(*) || ':' || count(DISTINCT server_pid) FROM pooled_effects
		WHERE message_id = 'order-1'}),
	'1:1', 'pooler: the effect committed once');
is( $node->sql(q{SELECT state || ' ' || (inbox_result('pool', 'order-1')->>'shipment')
		FROM inbox_status('pool', 'order-1')}),
	'done S-1', 'pooler: the message is done, with its result');
is( outcome(
		$consumer,
		sub { $consumer->do(q{SELECT inbox_complete('pool', $1::uuid)}, undef, $receipt) }),
	'IB004', 'pooler: the receipt of a completed message is stale (IB004)');

# Extend and fail by receipt, from another server session too
my ($receipt2, $lease2, $poll_pid2) = $consumer->selectrow_array(
	q{SELECT receipt, lease_until, pg_backend_pid() FROM inbox_poll('pool', 1, lease => '1 minute')});
@holders = hold_server_session($poll_pid2);
my ($extend_pid, $extended) = $consumer->selectrow_array(
	q{SELECT pg_backend_pid(), inbox_extend('pool', $1::uuid, '10 minutes') > $2::timestamptz},
	undef, $receipt2, $lease2);
is($extended, 1, 'pooler: inbox_extend by receipt on another server session moves the lease');
my ($fail_pid, $state) = $consumer->selectrow_array(
	q{SELECT pg_backend_pid(), inbox_fail('pool', $1::uuid, 'carrier API: 503')}, undef, $receipt2);
is($state, 'pending', 'pooler: inbox_fail by receipt on another server session gives it back');
ok($extend_pid != $poll_pid2 && $fail_pid != $poll_pid2,
	'pooler: both ran on another server session than the poll');
release(@holders);
is( join(',', $consumer->selectrow_array(q{SELECT message_id, attempts FROM inbox_poll('pool', 1)})),
	'order-2,2', 'pooler: the failed message is polled again, as attempt 2');
$consumer->disconnect;

# --- a load through the pooler ------------------------------------------------------

# A SET sticks to the server session that ran it, whichever client comes
# next: the driver's settings are the database's.
$node->sql(q{ALTER DATABASE postgres SET inbox.on_duplicate = 'return'});
my $log_offset = $node->log_position;

# run_load_driver passes the node's own connection string first: the later
# --connstr, PgBouncer's, is the one the driver keeps (Getopt::Long).
my %r = $node->run_load_driver(
	[
		'--connstr' => "host=127.0.0.1 port=$bport dbname=load user=$user",
		'--pooler',
		'--mode' => 'deferred',
		'--scope' => 'pooled',
		'--receivers' => 2,
		'--receive-batch' => 8,
		'--workers' => 4,
		'--receipts',
		'--lease' => 3,
		'--poll-wait' => 1,
		'--batch' => 4,
		'--work' => 0.005,
		'--ids' => 3000,
		'--duration' => 15,
		'--redeliver' => 0.3,
		'--abort' => 0.1,
		'--kill-interval' => 1.5,
		'--kill-method' => 'terminate',
		'--drain-timeout' => 60,
		'--seed' => 14
	],
	[
		qw(lost doubled stray unacked late errors open dead_with_effect delivered_ids
		  receive_batches lost_in_hand taken completed aborts kills kills_workers done dead
		  effects cross_session stale_receipts)
	]);

is($r{open}, 0, 'load: every received message ends done or dead');
is($r{lost}, 0, 'load: lost = 0: every done message has its effect');
is($r{doubled}, 0, 'load: doubled = 0: no message has a second effect');
is($r{dead_with_effect}, 0, 'load: no dead message has an effect');
is($r{stray}, 0, 'load: no effect for an id that was never delivered');
is($r{unacked}, 0, 'load: every delivered id was acked by a receiver');
is($r{errors}, 0, 'load: no error other than lost connections and stale receipts');
is($r{effects}, $r{done}, 'load: one effect row per done message');
cmp_ok($r{delivered_ids}, '>=', 500, 'load: at least 500 distinct ids were received');
cmp_ok($r{receive_batches}, '>', 0, 'load: receivers enqueued with inbox_receive_many');
cmp_ok($r{cross_session}, '>', 0,
	"load: completions ran on another server session than their poll ($r{cross_session})");
cmp_ok($r{kills}, '>=', 3, "load: server sessions were terminated ($r{kills})");
cmp_ok($r{kills_workers}, '>=', 1, 'load: workers were among them');
cmp_ok($r{taken}, '>', $r{completed}, 'load: messages were polled again after an abort or a lost worker');
note("stale receipts: $r{stale_receipts}, lost in hand: $r{lost_in_hand}, dead: $r{dead}");

$node->no_double_effect('pooled', 'load: the effects table has no message with two effects');
$node->entries_match_effects('pooled', 'load: every entry is done with one effect, or dead without one');
$node->no_crash_since($log_offset, 'load: no backend crashed');

$bouncer->kill_kill;
$bouncer = undef;
$node->stop;
done_testing();
