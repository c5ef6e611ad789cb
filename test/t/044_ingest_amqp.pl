# test/t/044_ingest_amqp.pl
#
# Ingest: inbox-relay reads a private RabbitMQ's queue into an inbox
# (inbox_subscribe), as a role that holds the bundles relay and receiver
# only, and acknowledges the broker only after its commit.
#   - ack after commit: a relay paused between its commit and its
#     acknowledgement (INBOX_RELAY_TEST_PAUSE_ACK) and SIGKILLed there
#     loses nothing: the next relay finds the batch delivered again, takes
#     each message for a duplicate and acknowledges it; every message is
#     in the inbox once, and the queue is empty;
#   - the routing key as group key: inbox_take workers get each key's
#     messages in the queue's order;
#   - a re-publication of a stored id is a duplicate, acknowledged; other
#     content under a stored id (IB002), a message without an id, and
#     invalid JSON under application/json (after max_attempts) are
#     recorded in inbox_ingest_rejects, with their payload and headers,
#     and acknowledged, and the messages after them go in; a payload of
#     another content type is stored as bytea;
#   - faults: the database restarted, the scope's grant revoked for a
#     while, the broker restarted: nothing lost, nothing doubled, the
#     queue at 0 at the end;
#   - a source's process beats in outbox_relays, with what it wrote;
#   - two relays on one queue declared x-single-active-consumer: one
#     consumes, the other stands by and takes over when the first is
#     killed, and each key keeps its order.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes;

my $node = InboxTest->node('ingest_amqp', conf => "inbox.purge_enabled = off\n");
my $relay = InboxTest::relay_or_skip($node, rabbitmq => 1);

my $tmp = PostgreSQL::Test::Utils::tempdir('ingest_amqp');
my ($broker_pgid, @relays);
END
{
	local $?;
	kill 'KILL', -$_ for grep { $_ } $broker_pgid, @relays;
}

my ($amqp_port, $up);
($amqp_port, $broker_pgid, $up) = InboxTest::start_rabbitmq("$tmp/rabbitmq");
ok($up, 'RabbitMQ listens on loopback')
  or BAIL_OUT('RabbitMQ did not start: ' . slurp_file("$tmp/rabbitmq/server.log"));

# The broker through pika: a list of operations in, one answer each out
# (a queue's count of ready messages; nothing for the others), as JSON.
# Publications are confirmed, and persistent.
my $pika = <<'PY';
import json, os, sys, pika
conn = pika.BlockingConnection(pika.URLParameters(os.environ['AMQP_URL']))
ch = conn.channel()
ch.confirm_delivery()
out = []
for op in json.load(sys.stdin):
    if op[0] == 'queue':
        ch.queue_declare(op[1], durable=True, arguments=op[2] if len(op) > 2 else None)
        ch.exchange_declare(op[1] + '-x', exchange_type='topic', durable=True)
        ch.queue_bind(op[1], op[1] + '-x', routing_key='#')
    elif op[0] == 'count':
        out.append(ch.queue_declare(op[1], passive=True).method.message_count)
    elif op[0] == 'publish':
        for m in op[2]:
            props = pika.BasicProperties(delivery_mode=2, message_id=m.get('id'),
                                         content_type=m.get('type', 'application/json'),
                                         headers=m.get('headers'))
            ch.basic_publish(op[1] + '-x', m.get('key', 'none'), m['body'].encode('utf-8'), props)
conn.close()
print(json.dumps(out))
PY

sub broker { InboxTest::run_pika($amqp_port, $pika, @_) }

sub publish { broker([ 'publish', $_[0], $_[1] ]) }
sub ready { (broker([ 'count', $_[0] ]))[0] }

# Take and complete everything scope holds, as workers do, until nothing is
# left; each key's message ids in the order they were taken (a take sees
# only a group's head, and completing it frees the next once committed)
sub take_all
{
	my ($scope) = @_;
	my %by_key;
	for my $row (split /\n/, sql(qq{TRUNCATE taken;
		DO \$\$
		DECLARE r record; got boolean := true;
		BEGIN
			WHILE got LOOP
				got := false;
				FOR r IN SELECT * FROM inbox_take('$scope', 100) LOOP
					got := true;
					INSERT INTO taken (id, key) VALUES (r.message_id, r.group_key);
					PERFORM inbox_complete('$scope', r.message_id);
				END LOOP;
				COMMIT;
			END LOOP;
		END \$\$;
		SELECT key || ' ' || id FROM taken ORDER BY n}))
	{
		my ($key, $id) = split / /, $row;
		push @{ $by_key{$key} }, $id;
	}
	return %by_key;
}

sub sql { return $node->safe_psql('postgres', $_[0]) }

sub wait_until
{
	my ($seconds, $cond) = @_;
	for (1 .. 10 * $seconds)
	{
		return 1 if $cond->();
		Time::HiRes::sleep(0.1);
	}
	return 0;
}

# The relay's role: the bundles relay and receiver, and the scope's grant
sql(q{CREATE ROLE ingest_relay LOGIN; CREATE ROLE orders_worker;
	SELECT inbox_grant_bundle('ingest_relay', 'relay');
	SELECT inbox_grant_bundle('ingest_relay', 'receiver');
	SELECT inbox_grant('orders', 'orders_worker');
	SELECT inbox_grant('orders', 'ingest_relay')});

my $base = "amqp://guest\@127.0.0.1:$amqp_port/%2F";
my $secrets = "$tmp/relay.secrets";
my $source = "$base?queue=orders";
append_to_file($secrets, "$source guest\n");
chmod 0600, $secrets;
broker([ 'queue', 'orders' ]);
sql(qq{SELECT inbox_subscribe('orders', '$source', '{"batch": 10, "group_key": "routing_key"}')});

my $conninfo = 'host=' . $node->host . ' port=' . $node->port . ' dbname=postgres user=ingest_relay';

# Start a relay (a process group of its own), its log at $log
sub start_relay
{
	my ($log, %env) = @_;
	my $pid = InboxTest::start_group($log, \%env, $relay, "--secrets=$secrets", $conninfo);
	push @relays, $pid;
	return $pid;
}

sub stop_relay
{
	my ($pid, $signal) = @_;
	kill $signal // 'TERM', -$pid;
	waitpid($pid, 0);
	@relays = grep { $_ != $pid } @relays;
}

sub log_of { return -e $_[0] ? slurp_file($_[0]) : '' }

# The ids stored in scope, each as often as it is there
sub stored
{
	return sql(qq{SELECT string_agg(message_id, ',' ORDER BY message_id) FROM inbox.entries
		WHERE scope = '$_[0]'});
}

sub count_stored { return sql(qq{SELECT count(*) FROM inbox.entries WHERE scope = '$_[0]'}) }

sub ids { my ($p, $from, $to) = @_; return join(',', map { sprintf('%s%02d', $p, $_) } $from .. $to) }

# --- ack after commit: a relay killed between its commit and its ack ----------------------
# Thirty messages, three keys; batches of ten.  The first relay commits
# its first batch, then waits before its acknowledgement, and is
# SIGKILLed there.  A relay that acknowledged before its commit would
# lose that batch.
publish('orders', [ map { { id => sprintf('m%02d', $_), key => 'k' . ($_ % 3), body => qq({"n": $_}) } } 1 .. 30 ]);
my $pause = "$tmp/pause";
append_to_file($pause, '');
my $r1_log = "$tmp/relay1.log";
my $r1 = start_relay($r1_log, INBOX_RELAY_TEST_PAUSE_ACK => $pause);
ok(wait_until(60, sub { log_of($r1_log) =~ /test pause: waiting after a commit/ }),
	'the relay commits a batch and pauses before its acknowledgement')
  or diag(log_of($r1_log));
is(count_stored('orders'), 10, 'the batch is in the inbox before the broker is acknowledged');
stop_relay($r1, 'KILL');
unlink $pause;

my $r2_log = "$tmp/relay2.log";
my $r2 = start_relay($r2_log);
ok(wait_until(60, sub { count_stored('orders') == 30 && ready('orders') == 0 }),
	'a second relay writes the rest')
  or diag(log_of($r2_log));
# Its process beats in outbox_relays, as a target's does: 20 new messages
# written and acknowledged, and the 10 of the killed relay's batch, found
# again as duplicates and acknowledged
ok(wait_until(30, sub { sql(qq{SELECT delivered FROM outbox_relays WHERE target = '$source'}) eq '30' }),
	'the source\'s process has its row in outbox_relays, with what it wrote and acknowledged')
  or diag(sql('SELECT target, delivered, failed FROM outbox_relays'));
stop_relay($r2);
is(stored('orders'), ids('m', 1, 30), 'after the kill, every message is in the inbox once');
is(ready('orders'), 0, 'and the queue is empty: the batch delivered again was acknowledged as duplicates');

# --- per-key order through inbox_take ---------------------------------------------------
# Each take sees only a group's head; completing it frees the next,
# once committed.
sql(q{CREATE TABLE taken (n serial, id text, key text)});
my %taken = take_all('orders');
is_deeply(
	\%taken,
	{ map { my $k = $_; ("k$k" => [ map { sprintf('m%02d', $_) } grep { $_ % 3 == $k } 1 .. 30 ]) } 0 .. 2 },
	'inbox_take hands out each routing key\'s messages in the queue\'s order');

# --- duplicates, IB002, invalid JSON, no id, binary -------------------------------------
my $r3_log = "$tmp/relay3.log";
my $r3 = start_relay($r3_log);
# Alone, so that its batch is written at once, not message by message
publish('orders', [ { key => 'k1', body => 'no id here', type => 'text/plain' } ]);
ok(wait_until(60, sub { sql('SELECT count(*) FROM inbox_ingest_rejects') == 1 && ready('orders') == 0 }),
	'a message without an id is recorded as a reject, and acknowledged')
  or diag(log_of($r3_log));
publish('orders', [
	{ id => 'm05', key => 'k2', body => '{"n": 5}' },
	{ id => 'm06', key => 'k0', body => '{"n": "other"}', headers => { trace => 't-6' } },
	{ id => 'bad', key => 'k1', body => '{not json' },
	{ id => 'm31', key => 'k1', body => '{"n": 31}' },
	{ id => 'b32', key => 'k2', body => 'raw bytes', type => 'text/plain' } ]);
ok(wait_until(60, sub { count_stored('orders') == 32 && ready('orders') == 0 }),
	'the messages after refused ones go in')
  or diag(log_of($r3_log));
ok(wait_until(30, sub { sql('SELECT count(*) FROM inbox_ingest_rejects') == 3 }), 'three rejects are recorded')
  or diag(log_of($r3_log));
stop_relay($r3);
is(ready('orders'), 0, 'and every message, refused or not, is acknowledged');
is(stored('orders'), ids('m', 1, 31) =~ s/^/b32,/r, 'the duplicate m05 is stored once, b32 and m31 are in');
is(sql(q{SELECT payload_bytes FROM inbox.entries WHERE scope = 'orders' AND message_id = 'b32'}),
	'\x' . unpack('H*', 'raw bytes'), 'a text/plain payload is stored as bytea');
my %rejects = map { my ($p, $r) = split /\|/, $_, 2; ($p => $r) } split /\n/,
  sql(q{SELECT convert_from(payload, 'UTF8') || '|' || reason || '|' || coalesce(headers::text, '')
	|| '|' || (broker_id <> '')::text || '|' || scope || '|' || (source LIKE 'amqp://%')::text
	FROM inbox_ingest_rejects});
like($rejects{'{"n": "other"}'}, qr/^IB002: .*"m06".*\|\{"trace": "t-6"\}\|true\|orders\|true$/,
	'other content under a stored id: an IB002 reject with its payload, headers and broker id');
like($rejects{'{not json'}, qr/^22P02: invalid input syntax for type json \(after 5 attempts\)\|/,
	'invalid JSON under application/json: a reject after max_attempts');
like($rejects{'no id here'}, qr/^no message id: /, 'a message without an id: a reject at once');
is(scalar(() = log_of($r3_log) =~ /message bad \(broker id \d+\) refused: 22P02/g), 5,
	'the invalid JSON was tried 5 times');

# --- faults: the database restarted, the grant revoked, the broker killed ----------------
# One relay throughout, its pause point armed only for the broker's kill
my $r4_log = "$tmp/relay4.log";
my $r4 = start_relay($r4_log, INBOX_RELAY_TEST_PAUSE_ACK => $pause);
publish('orders', [ { id => 'w01', key => 'k0', body => '{}' } ]);
ok(wait_until(60, sub { count_stored('orders') == 33 }), 'a fresh relay writes a message')
  or diag(log_of($r4_log));
my $before = count_stored('orders');

# New options apply to the running relay
sql(qq{SELECT inbox_subscribe('orders', '$source', '{"batch": 3, "group_key": "routing_key"}')});
ok(wait_until(30, sub { log_of($r4_log) =~ /the subscription's options changed: opening the source again/ }),
	'a change of the options reopens the source')
  or diag(log_of($r4_log));

# The database stopped at once under the relay's connection, messages
# published meanwhile, started again
$node->stop('immediate');
publish('orders', [ map { { id => sprintf('d%02d', $_), key => 'k' . ($_ % 3), body => qq({"n": $_}) } } 1 .. 20 ]);
$node->start;
ok(wait_until(90, sub { count_stored('orders') == $before + 20 && ready('orders') == 0 }),
	'messages published while the database is down go in once it is back')
  or diag(log_of($r4_log));

# The scope's grant revoked: 42501 is transient, retried, never acknowledged
sql(q{SELECT inbox_revoke('orders', 'ingest_relay')});
publish('orders', [ map { { id => sprintf('g%02d', $_), key => 'k' . ($_ % 3), body => qq({"n": $_}) } } 1 .. 10 ]);
ok(wait_until(60, sub { log_of($r4_log) =~ /not written, handed back to the broker: 42501/ }),
	'with the grant revoked, the batch is refused with 42501 and handed back')
  or diag(log_of($r4_log));
is(count_stored('orders'), $before + 20, 'nothing of it is in the inbox meanwhile');
sql(q{SELECT inbox_grant('orders', 'ingest_relay')});
ok(wait_until(90, sub { count_stored('orders') == $before + 30 && ready('orders') == 0 }),
	'the grant restored, the messages go in')
  or diag(log_of($r4_log));
is(sql('SELECT count(*) FROM inbox_ingest_rejects'), 3, 'and none was taken for a reject');

# The broker killed while the relay holds a committed batch unacknowledged;
# started again, it delivers the batch again: duplicates, acknowledged
append_to_file($pause, '');
my $paused = () = log_of($r4_log) =~ /test pause: waiting after a commit/g;
publish('orders', [ map { { id => sprintf('r%02d', $_), key => 'k' . ($_ % 3), body => qq({"n": $_}) } } 1 .. 25 ]);
ok(wait_until(60, sub { (() = log_of($r4_log) =~ /test pause: waiting after a commit/g) > $paused }),
	'the relay pauses after a commit')
  or diag(log_of($r4_log));
kill 'KILL', -$broker_pgid;
waitpid($broker_pgid, 0);
unlink $pause;
($broker_pgid, $up) = InboxTest::run_rabbitmq("$tmp/rabbitmq");
ok($up, 'the broker is started again');
ok(wait_until(120, sub { count_stored('orders') == $before + 55 && ready('orders') == 0 }),
	'after the broker\'s restart, every message is in the inbox')
  or diag(log_of($r4_log));
stop_relay($r4);
is(ready('orders'), 0, 'and the queue is empty');
is(sql(q{SELECT count(*) FROM inbox.entries WHERE scope = 'orders' AND message_id ~ '^[dgr]\d\d$'}), 55,
	'nothing lost, nothing doubled through the faults');

# --- two relays on one queue, single active consumer ----------------------------------------
# Both relays read the subscription; the queue gives one of them its
# messages, the other stands by.  The active one commits a batch and is
# killed before its acknowledgement; the other takes over from the
# batch's first message.  Without x-single-active-consumer the two would
# each take every other message and commit them side by side.
my $sac = "$base?queue=shipments";
append_to_file($secrets, "$sac guest\n");
broker([ 'queue', 'shipments', { 'x-single-active-consumer' => JSON::PP::true } ]);
sql(qq{SELECT inbox_subscribe('shipments', '$sac', '{"batch": 5, "group_key": "routing_key"}');
	SELECT inbox_grant('shipments', 'ingest_relay')});
append_to_file($pause, '');
my %sac_log = map { ($_ => "$tmp/relay-sac-$_.log") } 'a', 'b';
my %sac_pid = map { ($_ => start_relay($sac_log{$_}, INBOX_RELAY_TEST_PAUSE_ACK => $pause)) } 'a', 'b';
publish('shipments', [ map { { id => sprintf('s%02d', $_), key => 'k' . ($_ % 3), body => qq({"n": $_}) } } 1 .. 60 ]);
my $active;
ok(wait_until(60, sub { ($active) = grep { log_of($sac_log{$_}) =~ /test pause/ } 'a', 'b'; $active }),
	'one relay commits a batch');
stop_relay($sac_pid{$active}, 'KILL');
unlink $pause;
my ($standby) = grep { $_ ne $active } 'a', 'b';
ok(wait_until(90, sub { count_stored('shipments') == 60 && ready('shipments') == 0 }),
	'the standby relay takes over and writes the rest')
  or diag(log_of($sac_log{$standby}));
stop_relay($sac_pid{$standby});
is(ready('shipments'), 0, 'the queue is empty');
my %sac_taken = take_all('shipments');
is_deeply(
	\%sac_taken,
	{ map { my $k = $_; ("k$k" => [ map { sprintf('s%02d', $_) } grep { $_ % 3 == $k } 1 .. 60 ]) } 0 .. 2 },
	'each key keeps the queue\'s order across the takeover');

# --- --version and check ----------------------------------------------------------------------
my ($out, $err) = ('', '');
IPC::Run::run([ $relay, '--version' ], '>', \$out, '2>', \$err);
my ($sources) = $out =~ /^sources: (.*)$/m;
is($sources, sql(q{SELECT string_agg(scheme, ' ' ORDER BY scheme) FROM inbox_source_schemes()}),
	'--version names the sources inbox_source_schemes() lists');
my $missing = "$base?queue=missing";
append_to_file($secrets, "$missing guest\n");
sql(qq{SELECT inbox_subscribe('orders', '$missing')});
IPC::Run::run([ $relay, 'check', "--secrets=$secrets", $conninfo ], '>', \$out, '2>', \$err);
like($out, qr/^OK \Q$source\E$/m, 'check opens a source and finds its queue');
like($out, qr/^FAIL \Q$missing\E: queue: the broker closed the channel: 404 NOT_FOUND/m,
	'check reports a source whose queue is missing')
  or diag($out, $err);
sql(qq{SELECT inbox_unsubscribe('orders', '$missing')});

# --- a content window: the same content under a new id (IB007) ----------------------------
sql(q{SELECT inbox_set_content_window('orders', '1 hour', 'reject')});
my $r5_log = "$tmp/relay5.log";
my $r5 = start_relay($r5_log);
publish('orders', [ { id => 'c01', key => 'k0', body => '{"content": 1}' } ]);
ok(wait_until(60, sub { sql(q{SELECT count(*) FROM inbox.entries WHERE message_id = 'c01'}) == 1 }),
	'a first content goes in')
  or diag(log_of($r5_log));
publish('orders', [ map { { id => "c0$_->[0]", key => 'k1', body => qq({"content": $_->[1]}) } } [ 2, 2 ], [ 4, 1 ], [ 3, 3 ] ]);
ok(wait_until(60, sub { sql(q{SELECT count(*) FROM inbox.entries WHERE message_id IN ('c02', 'c03')}) == 2
		  && ready('orders') == 0 }),
	'the batch-mates of a content sent again under a new id go in')
  or diag(log_of($r5_log));
stop_relay($r5);
is(ready('orders'), 0, 'the content sent again (IB007) is acknowledged');
is(sql(q{SELECT count(*) FROM inbox.entries WHERE scope = 'orders' AND message_id LIKE 'c%'}), 3,
	'and not stored');
like(log_of($r5_log), qr/message c04 \(broker id \d+\) not stored: IB007/, 'the relay says why');

done_testing();
