# test/t/032_poll_dead_clients.pl
#
# A waiting take whose client has gone takes nothing (src/wakeup.c).
#
# 16 clients wait in inbox_poll without a lease, so that a message they
# take is theirs until their session ends, and a 17th waits under a lease.
# The 16 client processes are killed with SIGKILL: their server backends
# are left sleeping in the wait, with nobody to send rows to.  Then one
# message is received.  The 17th worker gets it, with attempts = 1, and
# the message is not dead: no attempt was counted for a backend whose
# client was gone.  Without the check, the commit of the receive wakes all
# 17, a dead backend takes the message, counts an attempt, fails to send
# it and ends, and the next dead backend takes it again once the first
# session's end makes it takeable: the message reaches the 17th with more
# attempts than one, or dies.
#
# Then the 16 backends end (bounded by poll_query_until's timeout), and
# each said "connection to client lost" in the server log.
#
# The delay between the receive and the 17th's take is noted, not
# asserted.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use POSIX ();
use PostgreSQL::Test::Utils;
use Test::More;

my $node = InboxTest->node(
	'dead_clients', conf => q{
inbox.purge_enabled = off
max_connections = 40
});

my $scope = 'dead-clients';
my $clients = 16;
my $wait = 60;
my $psql = $node->installed_command('psql');
my $log_start = -s $node->logfile;

# The clients that will die: plain psql processes, whose pid is theirs
my @pids;
for my $i (1 .. $clients)
{
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		open(STDIN, '<', '/dev/null');
		open(STDOUT, '>', '/dev/null');
		open(STDERR, '>', '/dev/null');
		{
			exec($psql, '-X', '-d', $node->connstr('postgres') . ' application_name=doomed',
				'-c', "SELECT * FROM inbox_poll('$scope', 1, NULL, '$wait seconds')");
		};
		POSIX::_exit(127);
	}
	push @pids, $pid;
}

ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = $clients FROM pg_stat_activity "
		  . "WHERE application_name = 'doomed' AND state = 'active' AND wait_event_type = 'Extension'"
	),
	"the $clients clients wait in inbox_poll");

# The 17th worker, waiting under a lease
my $worker = $node->background_psql('postgres', on_error_stop => 0, timeout => 2 * $wait);
my $worker_pid = $worker->query_safe('SELECT pg_backend_pid()');
$worker->query_until(qr/polling/,
	"\\echo polling\n"
	  . "SELECT message_id || ':' || attempts FROM inbox_poll('$scope', 1, '1 minute', '$wait seconds');\n"
	  . "\\echo poll-done\n");
ok( $node->poll_query_until(
		'postgres',
		"SELECT state = 'active' AND wait_event_type = 'Extension' FROM pg_stat_activity WHERE pid = $worker_pid"
	),
	'the 17th worker waits in inbox_poll');

# The clients die; their backends are still asleep in the wait
kill 'KILL', @pids;
waitpid($_, 0) for @pids;
my $left = $node->sql(
	"SELECT count(*) FROM pg_stat_activity WHERE application_name = 'doomed' AND wait_event_type = 'Extension'");
note("backends of killed clients still waiting when the message is received: $left of $clients");

$node->sql(qq{SELECT inbox_receive('$scope', 'm-1', '{}'::jsonb)});

my $out = eval { $worker->query_until(qr/poll-done\r?\n/, '') };
if (!defined $out)
{
	diag("the 17th worker's poll did not return: $@");
	$node->sql("SELECT pg_terminate_backend($worker_pid)");
	$out = 'no return';
}
$out =~ s/poll-done\r?\n//;
is(join(',', split /\r?\n/, $out), 'm-1:1', 'the 17th worker gets the message, at its first attempt');

my ($state, $attempts, $delay_ms) = split /\|/, $node->sql(
	qq{SELECT inbox.state_name(state), attempts,
			  round(extract(epoch FROM taken_at - received_at) * 1000)
	   FROM inbox.entries WHERE scope = '$scope' AND message_id = 'm-1'});
is($state, 'processing', 'the message is held by the 17th worker, not dead');
is($attempts, 1, 'one attempt counted: none for the backends whose clients had gone');
note("delay between the receive and the 17th worker's take: $delay_ms ms");
$worker->quit;

ok( $node->poll_query_until(
		'postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'doomed'"),
	'the backends of the killed clients end');
my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $log_start);
my $lost = () = $log =~ /FATAL:  connection to client lost/g;
is($lost, $clients, 'each of them ended with "connection to client lost"');

$node->stop;
done_testing();
