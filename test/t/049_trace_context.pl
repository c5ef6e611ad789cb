# test/t/049_trace_context.pl
#
# Headers and trace context end to end.
#   - one trace id, followed: outbox_send in database A under SET LOCAL
#     inbox.traceparent and inbox.tracestate; inbox-relay's amqp:// target
#     publishes it to a private RabbitMQ with the message's headers; a
#     relay on database B ingests that queue (inbox_subscribe) into an
#     inbox; a worker takes it with inbox_take, finds the same trace id in
#     its headers, and completes it;
#   - the postgresql:// target passes a message's headers to an inbox of
#     1.2.0, and leaves them out for one of 1.1.0, saying so once per
#     connection;
#   - hostile AMQP headers on ingest: values that are not strings arrive
#     as text; a 255-byte name, quotes, backslashes and UTF-8 arrive
#     exactly; a NUL, CR or LF, or a name that is no RFC 9110 token make
#     that message alone a reject, recorded and acknowledged, while the
#     messages around it go in; binary values that are not text are left
#     out; the queue is empty at the end.
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

my $node = InboxTest->node('trace_context', conf => "inbox.purge_enabled = off\n");
my $relay = InboxTest::relay_or_skip($node, rabbitmq => 1);

my $tmp = PostgreSQL::Test::Utils::tempdir('trace_context');
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

# The broker through pika: a queue bound to an exchange of its name plus
# "-x"; a queue's count of ready messages; publications, confirmed, whose
# headers are JSON, but for {"hex": "..."}, published as bytes
my $pika = <<'PY';
import json, os, sys, pika
conn = pika.BlockingConnection(pika.URLParameters(os.environ['AMQP_URL']))
ch = conn.channel()
ch.confirm_delivery()
out = []
def value(v):
    return bytes.fromhex(v['hex']) if isinstance(v, dict) else v
for op in json.load(sys.stdin):
    if op[0] == 'queue':
        ch.queue_declare(op[1], durable=True)
        ch.exchange_declare(op[1] + '-x', exchange_type='topic', durable=True)
        ch.queue_bind(op[1], op[1] + '-x', routing_key='#')
    elif op[0] == 'count':
        out.append(ch.queue_declare(op[1], passive=True).method.message_count)
    elif op[0] == 'publish':
        for m in op[2]:
            headers = {k: value(v) for k, v in m.get('headers', {}).items()}
            props = pika.BasicProperties(delivery_mode=2, message_id=m['id'],
                                         content_type='application/json', headers=headers)
            ch.basic_publish(op[1] + '-x', 'k', m['body'].encode('utf-8'), props)
conn.close()
print(json.dumps(out))
PY

sub broker { InboxTest::run_pika($amqp_port, $pika, @_) }
sub ready { (broker([ 'count', $_[0] ]))[0] }

sub sql_in { my ($db, $q) = @_; return $node->safe_psql($db, $q) }

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

sub log_of { return -e $_[0] ? slurp_file($_[0]) : '' }

# Database A sends; database B receives, by ingest and by the
# postgresql:// target.  The relays' role holds the bundles relay and
# receiver in each, and the scopes' grants in B.
$node->safe_psql('postgres', 'CREATE DATABASE b');
sql_in('b', 'CREATE EXTENSION inbox');
sql_in('postgres', q{CREATE ROLE trace_relay LOGIN;
	SELECT inbox_grant_bundle('trace_relay', 'relay')});
sql_in('b', q{SELECT inbox_grant_bundle('trace_relay', 'relay');
	SELECT inbox_grant_bundle('trace_relay', 'receiver');
	SELECT inbox_grant('traced', 'trace_relay');
	SELECT inbox_grant('hostile', 'trace_relay');
	SELECT inbox_grant('direct', 'trace_relay')});

my $base = "amqp://guest\@127.0.0.1:$amqp_port/%2F";
my $secrets = "$tmp/relay.secrets";
my $target = "$base?exchange=orders-x";
my $source = "$base?queue=orders";
my $hostile_source = "$base?queue=hostile";
append_to_file($secrets, "$target guest\n$source guest\n$hostile_source guest\n");
chmod 0600, $secrets;
broker([ 'queue', 'orders' ], [ 'queue', 'hostile' ]);

sub conninfo { 'host=' . $node->host . ' port=' . $node->port . " dbname=$_[0] user=trace_relay" }

sub relay_once
{
	my ($target) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $relay, '--once', "--secrets=$secrets", "--target=$target", conninfo('postgres') ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(120));
	return $err;
}

# --- one trace id, from outbox_send to the worker -------------------------------------
my $trace_id = '4bf92f3577b34da6a3ce929d0e0e4736';
my $traceparent = "00-$trace_id-00f067aa0ba902b7-01";
my $tracestate = 'rojo=00f067aa0ba902b7,congo=t61rcWkgMzE';
sql_in('postgres', qq{SELECT outbox_route('orders', '$target')});
my $id = sql_in('postgres', qq{
	BEGIN;
	SET LOCAL inbox.traceparent = '$traceparent';
	SET LOCAL inbox.tracestate = '$tracestate';
	SELECT outbox_send('orders', 'o-1', '{"order": 1}'::jsonb, '{"x-tenant": "acme"}');
	COMMIT;
});
is( sql_in('postgres', qq{SELECT headers->>'traceparent', headers->>'tracestate', headers->>'x-tenant'
		FROM inbox.outbox_messages WHERE id = '$id'}),
	"$traceparent|$tracestate|acme", 'the send stored the trace context of SET LOCAL with its own headers');
is(sql_in('postgres', q{SELECT current_setting('inbox.traceparent')}), '',
	'and the setting is gone after the commit');

my $out = relay_once($target);
is(sql_in('postgres', q{SELECT count(*) FROM inbox.outbox_deliveries WHERE topic = 'orders' AND state = 'p'}),
	'0', 'the amqp:// target published it') or diag($out);

sql_in('b', qq{SELECT inbox_subscribe('traced', '$source', '{"batch": 10}')});
my $ingest_log = "$tmp/ingest.log";
push @relays, InboxTest::start_group($ingest_log, {}, $relay, "--secrets=$secrets", conninfo('b'));
ok( wait_until(60, sub { sql_in('b', q{SELECT count(*) FROM inbox.entries WHERE scope = 'traced'}) == 1 }),
	'ingest wrote it into the inbox of database B')
  or diag(log_of($ingest_log));

# The worker: take, read the trace id, complete
my $worker = sql_in('b', q{
	BEGIN;
	CREATE TEMP TABLE got AS SELECT * FROM inbox_take('traced', 10);
	SELECT message_id, split_part(headers->>'traceparent', '-', 2), headers->>'tracestate',
		   headers->>'x-tenant', payload->>'order' FROM got;
	SELECT inbox_complete('traced', message_id) FROM got;
	COMMIT;
});
is($worker, "$id|$trace_id|$tracestate|acme|1\n",
	'the worker took it with the same trace id, tracestate and headers, under the outbox id, and completed it');
is(sql_in('b', q{SELECT state FROM inbox.entries WHERE scope = 'traced'}), 'd', 'it is done');

# --- hostile headers on ingest ------------------------------------------------------
my $long = 'n' x 255;
my @hostile = (
	{ id => 'h01', body => '{"n": 1}', headers => { 'x-quote' => qq{a "quoted" \\ back\\slash}, 'x-utf8' => "h\x{e9}llo \x{1f600}" } },
	{ id => 'h02', body => '{"n": 2}', headers => { 'x-crlf' => "a\r\nx-injected: 1" } },
	{ id => 'h03', body => '{"n": 3}', headers => { $long => 'long name' } },
	{ id => 'h04', body => '{"n": 4}', headers => { 'x-nul' => "a\x00b" } },
	{ id => 'h05', body => '{"n": 5}', headers => { 'bad name' => 'v' } },
	{ id => 'h06', body => '{"n": 6}', headers => { 'x-int' => 42, 'x-true' => JSON::PP::true, 'x-long' => 5000000000 } },
	{ id => 'h07', body => '{"n": 7}', headers => { 'x-bin' => { hex => 'fffe00' }, 'x-text-bytes' => { hex => '6f6b' } } },
	{ id => 'h08', body => '{"n": 8}', headers => { 'x-lf' => "line\n" } },
	{ id => 'h09', body => '{"n": 9}', headers => { "na\x00me" => 'v' } },
	{ id => 'h10', body => '{"n": 10}' },
);
broker([ 'publish', 'hostile', \@hostile ]);
sql_in('b', qq{SELECT inbox_subscribe('hostile', '$hostile_source', '{"batch": 20}')});
ok( wait_until(60, sub {
		sql_in('b', q{SELECT (SELECT count(*) FROM inbox.entries WHERE scope = 'hostile')
			+ (SELECT count(*) FROM inbox.ingest_rejects WHERE scope = 'hostile')}) == 10 && ready('hostile') == 0 }),
	'every hostile message is stored or rejected, and the queue is empty')
  or diag(log_of($ingest_log));
my $stored = decode_json(sql_in('b', q{SELECT coalesce(jsonb_object_agg(message_id, coalesce(headers, 'null')), '{}')
	FROM inbox.entries WHERE scope = 'hostile'}));
is_deeply(
	$stored,
	{
		h01 => { 'x-quote' => qq{a "quoted" \\ back\\slash}, 'x-utf8' => "h\x{e9}llo \x{1f600}" },
		h03 => { $long => 'long name' },
		h06 => { 'x-int' => '42', 'x-true' => 'true', 'x-long' => '5000000000' },
		h07 => { 'x-text-bytes' => 'ok' },
		h10 => undef,
	},
	'quotes, backslashes, UTF-8 and a 255-byte name arrive exactly; numbers and booleans as text; '
	  . 'bytes that are not text are left out');
is( sql_in('b', q{SELECT string_agg(broker_id IS NOT NULL || ' ' || reason, E'\n' ORDER BY payload)
		FROM inbox.ingest_rejects WHERE scope = 'hostile'}),
	join("\n",
		'true headers the inbox cannot keep: a header value holds CR or LF',
		'true headers the inbox cannot keep: a header value holds a NUL',
		'true headers the inbox cannot keep: a header name is not an RFC 9110 token',
		'true headers the inbox cannot keep: a header value holds CR or LF',
		'true headers the inbox cannot keep: a header name holds a NUL'),
	'a NUL, CR or LF, or a name that is no token makes that message alone a reject, with its reason');

# --- the postgresql:// target: headers to 1.2.0, none to 1.1.0 ---------------------------
my $there = 'host=' . $node->host . '&port=' . $node->port;
my $direct = "postgresql:///b?$there&user=trace_relay&scope=direct";
sql_in('postgres', qq{SELECT outbox_route('direct', '$direct')});
sql_in('postgres', qq{
	BEGIN;
	SET LOCAL inbox.traceparent = '$traceparent';
	SELECT outbox_send('direct', 'd-1', '{"n": 1}'::jsonb);
	SELECT outbox_send('direct', 'd-2', '\\x02'::bytea, '{"x-kind": "bytes"}');
	COMMIT;
	SELECT outbox_send('direct', 'd-3', '{"n": 3}'::jsonb);
});
$out = relay_once($direct);
is( sql_in('b', q{SELECT string_agg(coalesce(headers->>'traceparent', '-') || ' ' || coalesce(headers->>'x-kind', '-'),
		E'\n' ORDER BY message_id) FROM inbox_take('direct', 10)}),
	"$traceparent -\n$traceparent bytes\n- -",
	'the postgresql:// target passes each message\'s headers, JSON and bytes alike, and none for one without')
  or diag($out);

sql_in('postgres', 'CREATE DATABASE v110');
sql_in('v110', q{CREATE EXTENSION inbox VERSION '1.1.0'});
my $old = "postgresql:///v110?$there&scope=legacy";
sql_in('postgres', qq{SELECT outbox_route('legacy', '$old', '{"backoff": "1 second"}')});
sql_in('postgres', qq{BEGIN; SET LOCAL inbox.traceparent = '$traceparent';
	SELECT outbox_send('legacy', 'l-1', '{"n": 1}'::jsonb, '{"x-a": "1"}'); COMMIT;});
my $log = relay_once($old);
is(sql_in('v110', q{SELECT count(*) FROM inbox.entries WHERE scope = 'legacy'}), '1',
	'an inbox at 1.1.0 receives the message, without its headers')
  or diag($log);
my $lines = () = $log =~ /the inbox there keeps no headers/g;
is($lines, 1, 'and the relay says so once for its connection') or diag($log);

kill 'TERM', -$_ for @relays;
waitpid($_, 0) for @relays;
@relays = ();
done_testing();
