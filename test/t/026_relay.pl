# test/t/026_relay.pl
#
# inbox-relay, end to end: one outbox routed to an HTTP webhook (a sink
# served by this file), to the inbox of a database in a second cluster
# and to RabbitMQ.
# Every committed message reaches every target under its outbox id, each
# key's messages in commit order, a rolled-back send never; the webhook's
# signature verifies; a failed delivery blocks its key until it succeeds;
# a relay killed between delivering and acknowledging leaves the message
# to be delivered again under the same id, which the other database's
# inbox then takes as a duplicate; a webhook that answers later than the
# relay's --timeout gets the message again, under the same id; the
# requests of a batch are in flight together, at most --connections; a
# running relay is woken by a send's commit and stops cleanly on SIGTERM.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use Digest::SHA qw(hmac_sha256_base64);
use Fcntl;
use IO::Socket::INET;
use IPC::Run;
use MIME::Base64 qw(encode_base64);
use POSIX qw(WNOHANG);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

my $node = InboxTest->node('relay', conf => "inbox.purge_enabled = off\n");
my $relay = InboxTest::relay_or_skip($node);
my $have_rabbitmq = InboxTest::have_rabbitmq();

my $tmp = PostgreSQL::Test::Utils::tempdir('relay');
my ($broker_pgid, @relays);
END
{
	local $?;
	kill 'KILL', -$broker_pgid if $broker_pgid;
	kill 'KILL', -$_ for @relays;
}

# --- the webhook sink ---------------------------------------------------------------
#
# InboxTest's sink: a process per connection, keep-alive, so that
# requests the relay sends at once are served at once.  Each request is
# logged as a line: "id key position signature status", the position counted from the
# key's first (1), which is the first the sink sees of the key, since a
# key's messages come in order.  The first request of key k-fail is
# answered 500, the first of k-429 429 with Retry-After, every request for
# k-404's first message 404; the first of key k-slow only after 6 seconds,
# the first of k-timeout after 4, and each of the keys k-par-* after 1.
# What the processes share (how often each key was seen, its first
# position, the k-par-* requests in flight and their most at once) is in
# files under $tmp/sink, changed under a lock.
my $signing_key = 'relay-test-signing-key-0123456789';
my $sink_log = "$tmp/sink.log";
my $sink_dir = "$tmp/sink";
mkdir $sink_dir or die "mkdir: $!";

# Under the sink's lock: $change->(value) of the shared value $name
sub sink_shared
{
	my ($name, $change) = @_;
	open(my $lock, '>>', "$sink_dir/lock") or die "lock: $!";
	flock($lock, Fcntl::LOCK_EX()) or die "flock: $!";
	my $file = "$sink_dir/" . unpack('H*', $name);
	my $old = -e $file ? slurp_file($file) : undef;
	my $new = $change->($old);
	open(my $out, '>', $file) or die "write: $!";
	print $out $new;
	close $out;
	close $lock;
	return $new;
}

sub sink_value
{
	my ($name) = @_;
	my $file = "$sink_dir/" . unpack('H*', $name);
	return -e $file ? slurp_file($file) : undef;
}

my ($http_port) = InboxTest::start_http_sink(request => sub {
	my ($r) = @_;
	my %h = %{ $r->{headers} };
	my $body = $r->{body};
	my $key = $h{'outbox-key'} // '';
	my $expected = hmac_sha256_base64("$h{'webhook-id'}.$h{'webhook-timestamp'}.$body", $signing_key);
	$expected .= '=' while length($expected) % 4;
	my $sig = ($h{'webhook-signature'} // '') eq "v1,$expected" ? 'signed' : 'unsigned';
	my $first = sink_shared("seen $key", sub { ($_[0] // 0) + 1 }) == 1;
	my $position = $h{'outbox-position'} // '';
	my $base = sink_shared("base $key", sub { $_[0] // $position });
	$position = $position - $base + 1 if $position ne '';
	my $status = ($key eq 'k-fail' && $first) ? 500
	  : ($key eq 'k-429' && $first) ? 429
	  : ($key eq 'k-404' && $position eq '1') ? 404
	  : 200;
	open(my $log, '>>', $sink_log) or die;
	syswrite($log, "start $key\n") if $key eq 'k-slow' && $first;
	sleep 6 if $key eq 'k-slow' && $first;
	sleep 4 if $key eq 'k-timeout' && $first;
	if ($key =~ /^k-par-/)
	{
		my $now = sink_shared('par in flight', sub { ($_[0] // 0) + 1 });
		sink_shared('par most', sub { ($_[0] // 0) > $now ? $_[0] : $now });
		sleep 1;
		sink_shared('par in flight', sub { $_[0] - 1 });
	}
	syswrite($log, join(' ', $h{'idempotency-key'} // '-', $key, $position || '-',
			$sig, $status, $body) . "\n");
	close $log;
	return ($status, 'X', $status == 429 ? ['Retry-After: 1'] : []);
});

sub sink_lines
{
	return () unless -e $sink_log;
	return grep { !/^start / } split /\n/, slurp_file($sink_log);
}

# --- RabbitMQ -----------------------------------------------------------------------
my ($amqp_port, $amqp_base, $amqp_target);
if ($have_rabbitmq)
{
	my $up;
	($amqp_port, $broker_pgid, $up) = InboxTest::start_rabbitmq("$tmp/rabbitmq");
	ok($up, 'RabbitMQ listens on loopback')
	  or BAIL_OUT('RabbitMQ did not start: ' . slurp_file("$tmp/rabbitmq/server.log"));
	$amqp_base = "amqp://guest\@127.0.0.1:$amqp_port/%2F?routing_key=relay-test";
	# With the outbox's own headers, which the checks below read
	$amqp_target = "$amqp_base&outbox_headers=true";
}
else
{
	diag('RabbitMQ or python3-pika missing: the AMQP target is left out');
}

# The queue, declared before anything is published, and drained by pika
sub pika { return InboxTest::amqp_queue($amqp_port, 'relay-test', @_) }

# Lines "id key position ...", each position counted from the lowest of
# its key among them (1): a key's first position is the clock's reading
sub relative
{
	my %min;
	for (@_)
	{
		my (undef, $k, $p) = split / /;
		$min{$k} = $p if $p =~ /^\d+$/ && (!defined $min{$k} || $p < $min{$k});
	}
	return map {
		my @f = split / /;
		$f[2] = $f[2] - $min{ $f[1] } + 1 if $f[2] =~ /^\d+$/;
		join ' ', @f
	} @_;
}
pika('declare') if $have_rabbitmq;

# --- the databases, the routes and the secrets ----------------------------------------
# The other database is in a cluster of its own
# Its log names each connection's application_name
my $downstream = InboxTest->node('downstream', conf => "log_connections = on\n");
$node->safe_psql('postgres', q{
	CREATE ROLE relay_user LOGIN;
	SELECT inbox_grant_bundle('relay_user', 'relay');
});
$downstream->safe_psql('postgres', q{
	CREATE ROLE relay_user LOGIN;
	SELECT inbox_grant_bundle('relay_user', 'receiver');
});

my $host = $node->host;
my $port = $node->port;
my $webhook = "http://127.0.0.1:$http_port/hook";
my $pg_target = 'postgresql:///postgres?host=' . $downstream->host . '&port=' . $downstream->port
  . '&user=relay_user&scope=orders';
my @targets = ($webhook, $pg_target, $amqp_target ? ($amqp_target) : ());
# The webhook's route makes a message dead at its second failed attempt
$node->sql("SELECT outbox_route('orders', '$_', '{\"backoff\": \"1 second\""
	  . ($_ eq $webhook ? ', "max_attempts": 2' : '') . "}')") for @targets;

my $secrets = "$tmp/secrets";
PostgreSQL::Test::Utils::append_to_file($secrets,
	"# target secret\n$webhook whsec_" . encode_base64($signing_key, '') . "\n"
	  . ($amqp_target ? "$amqp_target guest\n" : ''));
chmod 0600, $secrets;
my $conninfo = "host=$host port=$port dbname=postgres user=relay_user";

my $last_relay_log = '';
sub run_relay_once
{
	my @extra = @_;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ $relay, '--once', "--secrets=$secrets", '--lease=5', @extra, $conninfo ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(120));
	note($err) if $err ne '';
	$last_relay_log = $err;
	return $ok;
}

# A relay in the background, in a process group of its own
sub start_relay
{
	my $pid = InboxTest::start_group("$tmp/relay.log", {}, $relay, "--secrets=$secrets", @_, $conninfo);
	push @relays, $pid;
	return $pid;
}

# --- messages: two transactions interleaved on k1, a rollback, a batch, bytes ----------
$node->sql(q{
	BEGIN;
	SELECT outbox_send('orders', 'k1', '{"n": 1}'::jsonb, '{"trace": "t-1"}'::jsonb);
	SELECT outbox_send('orders', 'k2', '{"n": 1}'::jsonb);
	COMMIT;
	BEGIN;
	SELECT outbox_send('orders', 'k1', '{"n": 2}'::jsonb);
	SELECT outbox_send('orders', 'k3', '{"n": 1}'::jsonb);
	COMMIT;
	BEGIN;
	SELECT outbox_send('orders', 'k1', '{"n": 99}'::jsonb);
	ROLLBACK;
	SELECT outbox_send('orders', 'k-fail', '{"n": 1}'::jsonb);
	SELECT outbox_send('orders', 'k-fail', '{"n": 2}'::jsonb);
	SELECT count(*) FROM outbox_send_many('orders', ARRAY['k2', 'k3'], ARRAY['{"n": 2}', '{"n": 2}']::jsonb[]);
	SELECT outbox_send('orders', 'k4', '\x0001ff'::bytea);
	SELECT outbox_send('orders', 'k-429', '{"n": 1}'::jsonb);
	SELECT outbox_send('orders', 'k-404', '{"n": 1}'::jsonb);
	SELECT outbox_send('orders', 'k-404', '{"n": 2}'::jsonb);
});
my $held = qr/^k-(?:fail|429|404)#/;
my %id_of = map { my ($k, $p, $id) = split /\|/; ("$k#$p" => $id) } split /\n/,
  $node->sql('SELECT key, position - min(position) OVER (PARTITION BY topic, key) + 1, id
	FROM inbox.outbox_messages ORDER BY key, position');
my $n = keys %id_of;
is($n, 12, 'twelve messages committed, the rolled-back one not');
ok(!(grep { /k1#3/ } keys %id_of), 'k1 has no third message');

ok(run_relay_once(), 'inbox-relay --once ends well');

# The webhook: each message once, signed, under its id; k-fail's first
# attempt failed, and its second message waits behind it
my @hook = sink_lines();
my %hook_got = map { my @f = split / /; ("$f[1]#$f[2]" => [@f]) } grep { / 200 / } @hook;
is_deeply([ sort keys %hook_got ], [ sort grep { !/$held/ } keys %id_of ],
	'the webhook got every message but those of the keys whose head failed');
ok((grep { $hook_got{$_}[0] eq $id_of{$_} } keys %hook_got) == keys %hook_got,
	'each under its outbox id as Idempotency-Key');
ok(!(grep { !/ signed / } @hook), 'every request is signed with the route\'s secret');
is(scalar(grep { / k-fail 1 \S+ 500 / } @hook), 1, 'k-fail#1 failed once');
ok(!(grep { / k-fail 2 / } @hook), 'k-fail#2 is not sent while k-fail#1 is failing');
my @k1 = map { (split / /)[2] } grep { / k1 / } @hook;
is("@k1", '1 2', 'k1 arrives in commit order');

# The other database: every message, by id, in its inbox
is($downstream->safe_psql('postgres', q{SELECT count(*) FROM inbox.entries WHERE scope = 'orders'}),
	$n, 'the other database received every message');
is($downstream->safe_psql('postgres',
		q{SELECT string_agg(message_id, ',' ORDER BY message_id) FROM inbox.entries}),
	join(',', sort values %id_of), 'under their outbox ids');

# RabbitMQ: every message, persistent, under its id, with its headers
if ($have_rabbitmq)
{
	my @got = relative(pika('drain'));
	is(scalar @got, $n, 'RabbitMQ got every message');
	my %by = map { my @f = split / /; ("$f[1]#$f[2]" => [@f]) } @got;
	ok((grep { $by{$_} && $by{$_}[0] eq $id_of{$_} } keys %id_of) == $n, 'each with its outbox id as message_id');
	ok(!(grep { (split / /)[3] ne '2' } @got), 'every message persistent (delivery mode 2)');
	is($by{'k1#1'}[5], 't-1', 'the message\'s headers are AMQP headers');
	is($by{'k4#1'}[4], 'application/octet-stream', 'a bytea payload goes as bytes');
	my @ak1 = map { (split / /)[2] } grep { / k1 / } @got;
	is("@ak1", '1 2', 'k1 arrives in commit order');
}

# After the backoff, k-fail's first message succeeds, then its second
my $done = 0;
for (1 .. 60)
{
	run_relay_once();
	my @l = sink_lines();
	$done = (grep { / k-fail 2 \S+ 200 / } @l) && (grep { / k-429 1 \S+ 200 / } @l)
	  && (grep { / k-404 2 \S+ 200 / } @l) and last;
	sleep 0.5;
}
ok($done, 'the held keys are delivered once their head succeeds or is dead');
my @kf = map { join '/', (split / /)[2, 4] } grep { / k-fail / } sink_lines();
is("@kf", '1/500 1/200 2/200', 'k-fail: the failure, its retry, then the next message');
my @k429 = map { join '/', (split / /)[2, 4] } grep { / k-429 / } sink_lines();
is("@k429", '1/429 1/200', 'k-429: answered 429, retried');
my @k404 = map { join '/', (split / /)[2, 4] } grep { / k-404 / } sink_lines();
is("@k404", '1/404 1/404 2/200', 'k-404: refused at both attempts, dead, then the next message');
is($node->sql(qq{SELECT d.key || '#' || (d.position - min(m.position) + 1) || ' ' || d.last_error
		FROM outbox_dead_letters AS d JOIN inbox.outbox_messages AS m USING (topic, key)
		WHERE d.target = '$webhook' GROUP BY d.key, d.position, d.last_error}),
	'k-404#1 HTTP 404 X', 'the refused message is a dead letter, with its error: the status and reason phrase');

# --- a relay killed between delivering and acknowledging ------------------------------
$node->sql(q{SELECT outbox_send('orders', 'k-slow', '{"n": 1}'::jsonb)});
my $killed = start_relay('--lease=3', "--target=$webhook");
my $started = 0;
for (1 .. 600)
{
	$started = -e $sink_log && slurp_file($sink_log) =~ /^start k-slow$/m and last;
	sleep 0.1;
}
ok($started, 'the relay is delivering k-slow');
kill 'KILL', -$killed;
waitpid($killed, 0);
@relays = grep { $_ != $killed } @relays;
sleep 3.5;    # the lease runs out
$done = 0;
for (1 .. 60)
{
	# Its lease outlasts what the sink still sleeps on the first request
	run_relay_once('--lease=10');
	$done = (grep { / k-slow / } sink_lines()) >= 2 and last;
	sleep 0.5;
}
my @slow = map { (split / /)[0] } grep { / k-slow / } sink_lines();
is(scalar @slow, 2, 'k-slow was delivered again after the relay died unacknowledged');
ok(@slow == 2 && $slow[0] eq $slow[1] && $slow[0] eq $node->sql(q{SELECT id FROM inbox.outbox_messages WHERE key = 'k-slow'}),
	'both times under the same id');
is($node->sql(q{SELECT count(*) FROM inbox.outbox_deliveries AS d JOIN inbox.outbox_messages AS m USING (id)
	WHERE m.key = 'k-slow' AND d.target = '} . $webhook . q{'}), '0', 'and the second time is acknowledged: its delivery is gone');

# The same for the other database: a delivery that was not acknowledged
# is made again, and the inbox there takes it as a duplicate (its
# delivery row, which the acknowledgement deleted, is written again)
$node->sql(qq{INSERT INTO inbox.outbox_deliveries (id, target, topic, key, position)
	SELECT id, '$pg_target', topic, key, position FROM inbox.outbox_messages WHERE key = 'k2'
	  AND position = (SELECT min(position) FROM inbox.outbox_messages WHERE key = 'k2')});
ok(run_relay_once(), 'a relay delivers the unacknowledged message again');
is($downstream->safe_psql('postgres', q{SELECT count(*) FROM inbox.entries WHERE scope = 'orders'}),
	$n + 1, 'the other database holds each message once (with k-slow)');
is($node->sql(qq{SELECT state FROM inbox.outbox_deliveries WHERE target = '$pg_target'}), '',
	'and every delivery there is acknowledged');

# --- the other database takes a batch in one statement ------------------------------
# Topic mirror goes only there.  Three keys' heads with JSON payloads, one
# with bytes (quotes and backslashes in both), and m2's id received there
# before with other content: m1, m3 and m4 arrive, the JSON ones in one
# transaction, and m2 alone is refused, with inbox_receive's error.
$node->sql("SELECT outbox_route('mirror', '$pg_target', '{\"backoff\": \"1 hour\"}')");
$node->sql(q{
	SELECT outbox_send('mirror', 'm1', '{"q": "a \"quoted\" back\\\\slash"}'::jsonb);
	SELECT outbox_send('mirror', 'm2', '{"n": 2}'::jsonb);
	SELECT outbox_send('mirror', 'm3', '{"n": 3}'::jsonb);
	SELECT outbox_send('mirror', 'm4', '\x00225c22ff'::bytea);
});
my %mirror = map { my ($k, $id) = split /\|/; ($k => $id) } split /\n/,
  $node->sql(q{SELECT key, id FROM inbox.outbox_messages WHERE topic = 'mirror'});
$downstream->safe_psql('postgres', qq{SELECT inbox_receive('orders', '$mirror{m2}', '{"n": "other"}'::jsonb)});
ok(run_relay_once("--target=$pg_target"), 'a relay delivers the mirror topic');
is($node->sql(q{SELECT string_agg(m.key || ':' || coalesce(d.state::text, 'sent'), ' ' ORDER BY m.key)
		FROM inbox.outbox_messages AS m LEFT JOIN inbox.outbox_deliveries AS d USING (id)
		WHERE m.topic = 'mirror'}),
	'm1:sent m2:p m3:sent m4:sent', 'every message of the batch is delivered but the one received before with other content');
like($node->sql(qq{SELECT last_error FROM inbox.outbox_deliveries WHERE id = '$mirror{m2}'}),
	qr/already received with a different payload/, 'which fails with the other inbox\'s error');
my $mirror_ids = join(',', map { "'$mirror{$_}'" } qw(m1 m3 m4));
is($downstream->safe_psql('postgres', qq{SELECT string_agg(coalesce(payload::text, encode(payload_bytes, 'hex')), ' | '
		ORDER BY message_id = '$mirror{m4}', payload::text) FROM inbox.entries WHERE message_id IN ($mirror_ids)}),
	'{"n": 3} | {"q": "a \"quoted\" back\\\\slash"} | 00225c22ff', 'with their payloads intact');
is($downstream->safe_psql('postgres', qq{SELECT count(DISTINCT xmin::text) FROM inbox.entries
		WHERE message_id IN ('$mirror{m1}', '$mirror{m3}')}),
	'1', 'the JSON ones received in one transaction');

# Two payloads of 9 MB: more than one statement carries, so two
# statements, each message intact; a longer lease, so that the default
# timeout leaves a loaded machine time for 18 MB
$node->sql(q{
	SELECT outbox_send('mirror', k, decode(repeat(md5(k), 9 * 1024 * 1024 / 16), 'hex'))
	  FROM (VALUES ('m5'), ('m6')) AS v (k);
});
ok(run_relay_once("--target=$pg_target", '--lease=60'), 'a relay delivers two large payloads');
my $large = $node->sql(q{SELECT string_agg(id::text, ''',''') FROM inbox.outbox_messages WHERE key IN ('m5', 'm6')});
is($downstream->safe_psql('postgres', qq{SELECT string_agg(md5(payload_bytes), ' ' ORDER BY md5(payload_bytes)),
		count(DISTINCT xmin::text) FROM inbox.entries WHERE message_id IN ('$large')}),
	join(' ', sort map { $node->sql("SELECT md5(decode(repeat(md5('$_'), 9 * 1024 * 1024 / 16), 'hex'))") } qw(m5 m6))
	  . '|2', 'intact, in two statements');

# The URL's own connection parameters win over the relay's defaults
# (application_name), and its options are kept beside the statement
# timeout the relay adds: a search_path without the extension's schema
# makes the message fail there
my $pg_named = "$pg_target&application_name=mirror-app&options=-c%20search_path%3Dnowhere";
$node->sql("SELECT outbox_route('named', '$pg_named', '{\"backoff\": \"1 hour\"}')");
$node->sql(q{SELECT outbox_send('named', 'n1', '{"n": 1}'::jsonb)});
ok(run_relay_once("--target=$pg_named"), 'a relay runs to a target whose URL sets options');
like(slurp_file($downstream->logfile), qr/application_name=mirror-app/,
	'the URL\'s application_name is the one the other database sees');
like($node->sql(q{SELECT d.last_error FROM inbox.outbox_deliveries AS d JOIN inbox.outbox_messages AS m USING (id)
		WHERE m.topic = 'named'}), qr/inbox_receive.* does not exist/,
	'and its options apply there: with that search_path, the message fails');
$node->sql("SELECT outbox_unroute('named', '$pg_named')");

# A batch of a JSON and a bytea payload takes two statements there; both
# together must end within --timeout of the batch's start.  With the
# other inbox locked, the first waits out the whole of it, and the second
# is not run: nothing is left of it.
my $pg_slow = "$pg_target&connect_timeout=7";
$node->sql("SELECT outbox_route('slow', '$pg_slow', '{\"backoff\": \"1 hour\"}')");
$node->sql(q{SELECT outbox_send('slow', 's1', '{"n": 1}'::jsonb); SELECT outbox_send('slow', 's2', '\x01'::bytea)});
my $locker = $downstream->background_psql('postgres');
$locker->query_safe('BEGIN; LOCK TABLE inbox.entries IN ACCESS EXCLUSIVE MODE');
ok(run_relay_once("--target=$pg_slow", '--timeout=2'), 'a relay runs to a target that does not answer in time');
$locker->query_safe('ROLLBACK');
$locker->quit;
is($node->sql(q{SELECT string_agg(m.key || ': ' || d.last_error, ' | ' ORDER BY m.key)
		FROM inbox.outbox_deliveries AS d JOIN inbox.outbox_messages AS m USING (id) WHERE m.topic = 'slow'}),
	's1: 57014: canceling statement due to statement timeout | s2: no time left within --timeout for this message',
	'the first statement ends at --timeout, and the second is not run');
$node->sql("SELECT outbox_unroute('slow', '$pg_slow')");

# The other database restarts under a running relay: the batch sent on the
# lost connection finds the target down, the relay opens it again, and the
# messages arrive after their backoff
$node->sql("SELECT outbox_route('later', '$pg_target', '{\"backoff\": \"1 second\"}')");
$node->sql(q{SELECT outbox_send('later', 'l0', '{"n": 0}'::jsonb)});
my $steady = start_relay('--wait=1', "--target=$pg_target");
my $later_sent = sub {
	return $node->sql(q{SELECT count(*) FROM inbox.outbox_messages AS m WHERE m.topic = 'later'
		AND NOT EXISTS (SELECT FROM inbox.outbox_deliveries AS d WHERE d.id = m.id)});
};
$done = 0;
for (1 .. 600)
{
	$done = $later_sent->() eq '1' and last;
	sleep 0.1;
}
ok($done, 'a running relay delivers to the other database');
$downstream->restart;
$node->sql(q{SELECT outbox_send('later', 'l' || i, jsonb_build_object('n', i)) FROM generate_series(1, 3) AS i});
$done = 0;
for (1 .. 600)
{
	$done = $later_sent->() eq '4' and last;
	sleep 0.1;
}
ok($done, 'after the other database restarted, the relay delivers there again');
like(slurp_file("$tmp/relay.log"), qr/scope=orders: the target is unreachable/,
	'having found the target down on its lost connection');
my $later_ids = $node->sql(q{SELECT string_agg(quote_literal(id::text), ',') FROM inbox.outbox_messages
	WHERE topic = 'later'});
is($downstream->safe_psql('postgres', qq{SELECT count(*) FROM inbox.entries WHERE message_id IN ($later_ids)}),
	'4', 'each message there once');
kill 'TERM', $steady;
waitpid($steady, 0);
@relays = grep { $_ != $steady } @relays;

# --- RabbitMQ without the outbox's own headers --------------------------------------
# By default, and with outbox_headers=false, the message's headers only;
# a value other than true or false keeps the target closed, and says why
if ($have_rabbitmq)
{
	my $lean = "$amqp_base&outbox_headers=false";
	my $unsure = "$amqp_base&outbox_headers=maybe";
	$node->sql("SELECT outbox_route('plain', '$amqp_base'); SELECT outbox_route('lean', '$lean');"
		  . " SELECT outbox_route('unsure', '$unsure')");
	PostgreSQL::Test::Utils::append_to_file($secrets, "$amqp_base guest\n$lean guest\n$unsure guest\n");
	my $id = $node->sql(q{SELECT outbox_send('plain', 'p1', '{"n": 1}'::jsonb, '{"trace": "t-9"}'::jsonb)});
	my $lean_id = $node->sql(q{SELECT outbox_send('lean', 'p1', '{"n": 1}'::jsonb, '{"trace": "t-8"}'::jsonb)});
	$node->sql(q{SELECT outbox_send('unsure', 'p1', '{"n": 1}'::jsonb)});
	pika('drain');
	ok(run_relay_once("--target=$amqp_base"), 'a relay delivers to a target that does not name outbox_headers');
	ok(run_relay_once("--target=$lean"), 'a relay delivers to a target with outbox_headers=false');
	my ($out, $err) = ('', '');
	IPC::Run::run([ $relay, '--once', "--secrets=$secrets", "--target=$unsure", $conninfo ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(60));
	like($err, qr/outbox_headers must be true or false, not "maybe"/,
		'a target with outbox_headers=maybe is not opened, and the relay says why');
	is($node->sql(q{SELECT d.state FROM inbox.outbox_deliveries AS d JOIN inbox.outbox_messages AS m USING (id)
		WHERE m.topic = 'unsure'}), 'p', 'its message stays pending');
	my @got = pika('drain');
	is_deeply(\@got, [ "$id None None 2 application/json t-9", "$lean_id None None 2 application/json t-8" ],
		'each message arrives with its own headers and not the outbox\'s, by default as with false');
}

# --- RabbitMQ: a message no queue takes -----------------------------------------------
# Published as mandatory, the broker returns it: it stays pending, with the
# reason, and is tried again after the route's backoff
if ($have_rabbitmq)
{
	my $nowhere = "amqp://guest\@127.0.0.1:$amqp_port/%2F?routing_key=no-such-queue";
	$node->sql("SELECT outbox_route('nowhere', '$nowhere')");
	PostgreSQL::Test::Utils::append_to_file($secrets, "$nowhere guest\n");
	$node->sql(q{SELECT outbox_send('nowhere', 'n1', '{"n": 1}'::jsonb)});
	run_relay_once("--target=$nowhere");
	is($node->sql(q{SELECT d.state::text || ' ' || d.attempts || ' ' || d.last_error FROM inbox.outbox_deliveries AS d
		JOIN inbox.outbox_messages AS m USING (id) WHERE m.topic = 'nowhere'}),
		'p 1 312 NO_ROUTE: no queue took the message (exchange "", routing key "no-such-queue")',
		'a message no queue takes is returned by the broker, and stays pending with the reason');
}

# --- a webhook slower than the relay's timeout ----------------------------------------
# The relay gives up after --timeout, records the failure, and delivers
# the message again after the route's backoff, under the same id
$node->sql(q{SELECT outbox_send('orders', 'k-timeout', '{"n": 1}'::jsonb)});
my $impatient = start_relay('--timeout=2', '--wait=1', "--target=$webhook");
$done = 0;
for (1 .. 600)
{
	$done = $node->sql(q{SELECT count(*) FROM inbox.outbox_deliveries AS d JOIN inbox.outbox_messages AS m USING (id)
		WHERE m.key = 'k-timeout' AND d.target = '} . $webhook . q{'}) eq '0' and last;
	sleep 0.1;
}
ok($done, 'a message whose webhook answered too late is delivered at its next attempt');
kill 'TERM', $impatient;
waitpid($impatient, 0);
@relays = grep { $_ != $impatient } @relays;
# The sink logs the first request once it answers it, after its 4 seconds
my @late;
for (1 .. 600)
{
	@late = map { (split / /)[0] } grep { / k-timeout / } sink_lines();
	last if @late >= 2;
	sleep 0.1;
}
ok(@late == 2 && $late[0] eq $late[1]
	  && $late[0] eq $node->sql(q{SELECT id FROM inbox.outbox_messages WHERE key = 'k-timeout'}),
	'the webhook got it twice, under the same id')
  or diag(join("\n", @late));
like(slurp_file("$tmp/relay.log"), qr/k-timeout.*not delivered: no answer: Timeout was reached/,
	'the relay says the webhook did not answer in time');
my $late_failures = () = slurp_file("$tmp/relay.log") =~ /k-timeout[^\n]*not delivered/g;
is($late_failures, 1, 'in two attempts: one that failed, and the delivery');

# --- requests at once ----------------------------------------------------------------
# A batch holds one message per key, so the relay sends its requests at
# once; the two batches in flight together hold at most --connections
# messages.  The sink holds each k-par-* request for a second, and counts
# how many it holds at once.
sink_shared('par most', sub { 0 });
$node->sql(join '',
	map { "SELECT outbox_send('orders', 'k-par-$_', '{\"n\": 1}'::jsonb);\n" } 1 .. 8);
ok(run_relay_once('--lease=60', "--target=$webhook", '--connections=4'),
	'inbox-relay --once --connections=4 delivers k-par-1 to k-par-8');
like($last_relay_log, qr/hook: connected to the database; delivering \(batches of 2, lease 60 s, timeout 29 s\)/,
	'to a webhook, a batch holds half of --connections; the timeout is half the lease less a second');
my $most = sink_value('par most');
ok($most >= 2 && $most <= 4, 'requests are in flight together, never more than --connections')
  or diag("at most $most at once");
is(scalar(grep { / k-par-\d+ 1 signed 200 / } sink_lines()), 8, 'each k-par-* message delivered once');

# --- a webhook that cannot be reached -------------------------------------------------
# Nothing listens on the target's port: no request goes out, so the
# attempts do not count (outbox_fail's reached => false), and the message
# waits through the outage instead of going dead at its one attempt; the
# relay says the target is unreachable, and --once stops there.  Once a
# server answers on that port, the message goes out.
my $closed_socket = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 1, ReuseAddr => 1)
  or die "listen: $!";
my $closed_port = $closed_socket->sockport;
close $closed_socket;
my $down = "http://127.0.0.1:$closed_port/hook";
$node->sql("SELECT outbox_route('outage', '$down', '{\"max_attempts\": 1, \"backoff\": \"1 second\"}')");
$node->sql(q{SELECT outbox_send('outage', 'k-out', '{"n": 1}'::jsonb)});
my $outage_state = sub {
	$node->sql(qq{SELECT d.state::text || ' ' || d.attempts || ' ' || (d.last_error LIKE 'no answer: %')::text
		FROM inbox.outbox_deliveries AS d WHERE d.target = '$down'});
};
for my $try (1 .. 3)
{
	# Due at once, so that each run tries it
	$node->sql("UPDATE inbox.outbox_deliveries SET due = now() WHERE target = '$down'");
	ok(run_relay_once("--target=$down"), "a relay whose webhook cannot be reached ends well ($try)");
	like($last_relay_log, qr/the target is unreachable: stopping/, "and says the target is unreachable ($try)");
	is($outage_state->(), 'p 0 true', "the message is pending, its attempts not counted ($try)");
}
is($node->sql(q{SELECT count(*) FROM outbox_dead_letters WHERE topic = 'outage'}), '0',
	'an outage makes no dead letter');
my $back = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $closed_port, Listen => 1, ReuseAddr => 1)
  or die "listen on $closed_port: $!";
my $back_pid = fork() // die "fork: $!";
if ($back_pid == 0)
{
	$SIG{__DIE__} = sub { warn @_; POSIX::_exit(1) };
	# Never waits longer than the test would
	alarm 60;
	my $c = $back->accept or POSIX::_exit(1);
	my $length = 0;
	while (defined(my $hl = <$c>))
	{
		$length = $1 if $hl =~ /^content-length:\s*(\d+)/i;
		last if $hl =~ /^\r?\n$/;
	}
	read($c, my $body, $length);
	print $c "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
	close $c;
	POSIX::_exit(0);
}
close $back;
$node->sql("UPDATE inbox.outbox_deliveries SET due = now() WHERE target = '$down'");
ok(run_relay_once("--target=$down"), 'a relay delivers to the webhook once it answers');
kill 'KILL', $back_pid;
waitpid($back_pid, 0);
is($node->sql("SELECT count(*) FROM inbox.outbox_deliveries WHERE target = '$down'"), '0',
	'the message waited for it, and is delivered');
$node->sql("SELECT outbox_unroute('outage', '$down')");

# --- a running relay: woken by a commit, stopped by SIGTERM ----------------------------
my $running = start_relay('--wait=30', "--target=$webhook");
sleep 1;
$node->sql(q{SELECT outbox_send('orders', 'k5', '{"n": 1}'::jsonb)});
$done = 0;
for (1 .. 600)
{
	$done = grep { / k5 1 / } sink_lines() and last;
	sleep 0.1;
}
ok($done, 'a running relay delivers a message sent after it started waiting');
kill 'TERM', $running;
my $waited = 0;
for (1 .. 300)
{
	$waited = waitpid($running, WNOHANG) and last;
	sleep 0.1;
}
ok($waited == $running && $? == 0, 'SIGTERM stops it, with status 0');
@relays = grep { $_ != $running } @relays;
# Every acknowledgement of the running relays still held its lease: the
# relay compares outbox_ack_many's count with what it acknowledged
unlike(slurp_file("$tmp/relay.log"), qr/had run out of lease/,
	'no acknowledgement of a running relay found its message leased again');

# --- refusals ---------------------------------------------------------------------------
my ($out, $err) = ('', '');
IPC::Run::run([ $relay, '--batch=0', $conninfo ], '>', \$out, '2>', \$err);
like($err, qr/--batch must be an integer between 1 and 1000/, 'a bad option is refused');
IPC::Run::run([ $relay, '--connections=1', $conninfo ], '>', \$out, '2>', \$err);
like($err, qr/--connections must be an integer between 2 and 1000/,
	'fewer connections than the batches in flight are refused');
chmod 0644, $secrets;
ok(!IPC::Run::run([ $relay, '--once', "--secrets=$secrets", "--target=$webhook", $conninfo ], '>', \$out, '2>', \$err),
	'a secrets file that others can read stops the relay');
like($err, qr/readable by group or others/, 'and says why');

done_testing();
