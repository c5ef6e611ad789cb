# test/t/028_relay_failover.pl
#
# inbox-relay follows a failover.  The outbox's database is a primary with
# a streaming standby; the relay connects with both hosts and
# target_session_attrs=read-write, and delivers to the inbox of a
# database in a third cluster.  Messages are sent before the primary
# stops (immediate shutdown, as after kill -9) and after its standby is
# promoted; the relay, running all along, reconnects to the new primary
# by itself and delivers them all.  Each message reaches the other inbox
# exactly once under its outbox id: those whose acknowledgement died with
# the old primary are delivered again and taken there as duplicates.
#
# Nothing here asserts how fast anything happens: conditions are polled.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $primary = InboxTest->node(
	'outbox_primary',
	init => { allows_streaming => 1 },
	conf => "inbox.purge_enabled = off\n");
my $relay = InboxTest::relay_or_skip($primary);

my $tmp = PostgreSQL::Test::Utils::tempdir('relay_failover');
my $relay_pid;
END
{
	local $?;
	kill 'KILL', -$relay_pid if $relay_pid;
}

my $downstream = InboxTest->node('failover_downstream');
$downstream->safe_psql('postgres', q{
	CREATE ROLE relay_user LOGIN;
	SELECT inbox_grant_bundle('relay_user', 'receiver');
});
my $target = 'postgresql:///postgres?host=' . $downstream->host . '&port=' . $downstream->port
  . '&user=relay_user&scope=notices';
$primary->safe_psql('postgres', qq{
	CREATE ROLE relay_user LOGIN;
	SELECT inbox_grant_bundle('relay_user', 'relay');
	SELECT outbox_route('notices', '$target', '{"backoff": "1 second", "max_attempts": 1000}');
});

$primary->backup('base');
my $standby = InboxTest->new('outbox_standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
$primary->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_replication WHERE state = 'streaming'")
  or die 'the standby does not stream';

# Both hosts, the primary first; only a writable one is taken
my $conninfo = 'host=' . $primary->host . ',' . $standby->host
  . ' port=' . $primary->port . ',' . $standby->port
  . ' dbname=postgres user=relay_user target_session_attrs=read-write connect_timeout=5';
$relay_pid = InboxTest::start_group("$tmp/relay.log", {}, $relay, '--wait=1', '--lease=5', $conninfo);

sub send_batch
{
	my ($node, $from, $to) = @_;
	$node->safe_psql('postgres', qq{
		SELECT outbox_send('notices', 'k' || (n % 5), jsonb_build_object('n', n))
		  FROM generate_series($from, $to) AS n});
}

sub downstream_count
{
	return $downstream->safe_psql('postgres',
		q{SELECT count(*) FROM inbox.entries WHERE scope = 'notices'});
}

sub wait_for_downstream
{
	my ($n) = @_;
	for (1 .. 1800)
	{
		return 1 if downstream_count() == $n;
		sleep 0.1;
	}
	return 0;
}

send_batch($primary, 1, 100);
ok(wait_for_downstream(100), 'the relay delivers from the primary');

# More sends, replicated, then the primary dies with them pending or in
# flight, and the standby is promoted
send_batch($primary, 101, 200);
$primary->wait_for_catchup($standby, 'replay', $primary->lsn('write'));
$primary->stop('immediate');
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the standby was not promoted';
send_batch($standby, 201, 300);

ok(wait_for_downstream(300), 'the relay, still running, delivers everything from the new primary')
  or diag(slurp_file("$tmp/relay.log"));
ok($standby->poll_query_until('postgres',
		q{SELECT count(*) = 0 FROM inbox.outbox_deliveries}),
	'and every delivery is acknowledged there');

# Exactly the messages of the outbox, each once, under its id
my $ids = $standby->safe_psql('postgres', q{SELECT string_agg(id::text, ',' ORDER BY id) FROM inbox.outbox_messages});
is($downstream->safe_psql('postgres',
		q{SELECT string_agg(message_id, ',' ORDER BY message_id::uuid) FROM inbox.entries WHERE scope = 'notices'}),
	$ids, 'the other inbox holds each outbox message once, under its id');
is($downstream->safe_psql('postgres',
		q{SELECT count(DISTINCT payload->>'n') FROM inbox.entries WHERE scope = 'notices'}),
	'300', 'with its payload');

my $log = slurp_file("$tmp/relay.log");
my $connected = () = $log =~ /notices: connected to the database; delivering /g;
ok($connected >= 2, 'the relay connected again after the failover') or diag($log);

kill 'TERM', $relay_pid;
waitpid($relay_pid, 0);
is($? >> 8, 0, 'SIGTERM stops it');
$relay_pid = undef;

done_testing();
