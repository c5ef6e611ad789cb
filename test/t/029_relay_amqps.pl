# test/t/029_relay_amqps.pl
#
# inbox-relay over amqps://: a private RabbitMQ on loopback listens for
# TLS with a certificate for 127.0.0.1 signed by a CA made by the test.
# A route whose target names that CA (cacert=) delivers every message,
# under its id; a route that trusts only the system's CAs is refused at
# the handshake, says so in the relay's log, and leaves its message
# pending, unfetched.  A route to an exchange that does not exist has its channel
# closed by the broker while two batches are in flight: each message is
# published again alone, and refused alone; the relay ends well, and the
# messages stay pending with the broker's reason (404 NOT_FOUND), each
# attempt counted.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = InboxTest->node('relay_amqps', conf => "inbox.purge_enabled = off\n");
my $relay = InboxTest::relay_or_skip($node, rabbitmq => 1);
plan skip_all => 'openssl not found'
  unless system('sh', '-c', 'command -v openssl >/dev/null') == 0;

my $tmp = PostgreSQL::Test::Utils::tempdir('relay_amqps');
my $broker_pgid;
END
{
	local $?;
	kill 'KILL', -$broker_pgid if $broker_pgid;
}

my ($amqp_port, $up, $tls_port, $ca);
($amqp_port, $broker_pgid, $up, $tls_port, $ca) = InboxTest::start_rabbitmq("$tmp/rabbitmq", tls => 1);
ok($up, 'RabbitMQ listens for amqp and amqps on loopback')
  or BAIL_OUT('RabbitMQ did not start: ' . slurp_file("$tmp/rabbitmq/server.log"));

# The queue, declared and later drained over plain AMQP: the ids
sub pika { return sort map { (split / /)[0] } InboxTest::amqp_queue($amqp_port, 'tls-test', @_) }
pika('declare');

my $trusted = "amqps://guest\@127.0.0.1:$tls_port/%2F?routing_key=tls-test&cacert=$ca";
my $untrusted = "amqps://guest\@127.0.0.1:$tls_port/%2F?routing_key=tls-test";
my $nowhere = "amqps://guest\@127.0.0.1:$tls_port/%2F?exchange=no-such-exchange&cacert=$ca";
my $secrets = "$tmp/relay.secrets";
PostgreSQL::Test::Utils::append_to_file($secrets, "$trusted guest\n$untrusted guest\n$nowhere guest\n");
chmod 0600, $secrets;
$node->safe_psql('postgres', qq{
	SELECT outbox_route('secure', '$trusted');
	SELECT outbox_route('unverified', '$untrusted');
	SELECT outbox_route('nowhere', '$nowhere');
	SELECT outbox_send('secure', 'k' || (n % 4), jsonb_build_object('n', n)) FROM generate_series(1, 20) AS n;
	SELECT outbox_send('unverified', 'k', '{"n": 0}'::jsonb);
	SELECT outbox_send('nowhere', 'k' || n, jsonb_build_object('n', n)) FROM generate_series(1, 10) AS n;
});

sub relay_once
{
	my ($target, @extra) = @_;
	my ($out, $err) = ('', '');
	my $conninfo = 'host=' . $node->host . ' port=' . $node->port . ' dbname=postgres';
	my $ok = IPC::Run::run([ $relay, '--once', "--secrets=$secrets", "--target=$target", @extra, $conninfo ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(120));
	return wantarray ? ($ok, $err) : $err;
}

relay_once($trusted);
is(join(',', pika('drain')),
	$node->safe_psql('postgres', q{SELECT string_agg(id::text, ',' ORDER BY id::text) FROM inbox.outbox_messages WHERE topic = 'secure'}),
	'over amqps, the broker got every message once, under its id');
is($node->safe_psql('postgres', qq{SELECT count(*) FROM inbox.outbox_messages AS m WHERE m.topic = 'secure'
	AND NOT EXISTS (SELECT FROM inbox.outbox_deliveries AS d WHERE d.id = m.id AND d.target = '$trusted')}),
	'20', 'and each is acknowledged: its delivery is gone');

my $err = relay_once($untrusted);
like($err, qr/unreachable: .*SSL/i, 'a broker whose certificate the target does not trust is refused')
  or diag($err);
# The relay opens a target before it fetches for it: nothing was leased
is($node->safe_psql('postgres', qq{SELECT state::text || ' ' || attempts || ' ' || (last_error IS NULL)::text
	FROM inbox.outbox_deliveries WHERE target = '$untrusted'}),
	'p 0 true', 'and its message stays pending, never fetched');
my @left = pika('drain');
is(scalar @left, 0, 'nothing reached the broker from it');

# Batches of 5 over 10 keys: the second is published before the first's
# confirmations, and the broker closes the channel under both
my ($ok, $closed) = relay_once($nowhere, '--batch=5');
ok($ok, 'a relay whose channel the broker closed under two batches goes on, and ends well')
  or diag($closed);
like($closed, qr/not delivered: the broker closed the channel: 404 NOT_FOUND - no exchange 'no-such-exchange'/,
	'it says the broker closed the channel, and why');
# The broker had the messages when it closed the channel: each counts
# the attempt, so that a message it always refuses ends as a dead letter
is($node->safe_psql('postgres', qq{SELECT count(*) FILTER (WHERE state = 'p' AND attempts = 1
		AND last_error LIKE '%closed the channel: 404 NOT_FOUND - no exchange%') FROM inbox.outbox_deliveries WHERE target = '$nowhere'}),
	'10', 'every message of both batches is pending again, failed once, with the broker\'s reason');

done_testing();
