# test/t/037_relay_amqp_alone.pl
#
# inbox-relay's AMQP target against a private RabbitMQ on loopback: a
# message fails alone, confirmations are proven, and the broker's reason
# is recorded.
#   - a queue that refuses publishes (x-max-length=0, x-overflow
#     reject-publish) nacks its message: it stays pending, with an attempt
#     and the reason, never taken for delivered;
#   - one batch whose messages partly route to a queue and partly to none:
#     exactly the routed ones are acknowledged, the others returned with
#     312 NO_ROUTE;
#   - in one batch, a key too long for a routing key (refused before it is
#     published) and a header the broker refuses by closing the channel
#     (CC must be an array), among valid messages of other keys: each valid
#     one reaches its queue exactly once, the bad ones count their attempts
#     alone and end dead, with their reasons;
#   - a missing exchange is recorded as the broker says it: 404 NOT_FOUND;
#   - hostile strings: every form outbox_send accepts reaches the queue as
#     exactly one message, its headers intact and none added; a header name
#     AMQP cannot carry (over 255 bytes), where send takes it, is that
#     message's own failure;
#   - the topology of docs/outbox.md's "RabbitMQ topology": its
#     rabbitmqadmin declarations, made here through pika, and its route,
#     pointed at this broker, deliver a message to the queue.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = InboxTest->node('relay_amqp_alone', conf => "inbox.purge_enabled = off\n");
my $relay = InboxTest::relay_or_skip($node, rabbitmq => 1);

my $tmp = PostgreSQL::Test::Utils::tempdir('relay_amqp_alone');
my $broker_pgid;
END
{
	local $?;
	kill 'KILL', -$broker_pgid if $broker_pgid;
}

my ($amqp_port, $up);
($amqp_port, $broker_pgid, $up) = InboxTest::start_rabbitmq("$tmp/rabbitmq",
	conf => "max_message_size = 4096\n");
ok($up, 'RabbitMQ listens on loopback')
  or BAIL_OUT('RabbitMQ did not start: ' . slurp_file("$tmp/rabbitmq/server.log"));

# The broker's topology, and its queues drained, through pika: a list of
# operations in, the drained messages out, as JSON
my $pika = <<'PY';
import json, os, sys, pika
conn = pika.BlockingConnection(pika.URLParameters(os.environ['AMQP_URL']))
ch = conn.channel()
out = []
def text(v):
    return v.decode('utf-8', 'replace') if isinstance(v, bytes) else v
for op in json.load(sys.stdin):
    if op[0] == 'exchange':
        ch.exchange_declare(op[1], exchange_type=op[2] if len(op) > 2 else 'direct', durable=True)
    elif op[0] == 'queue':
        ch.queue_declare(op[1], durable=True, arguments=op[2] if len(op) > 2 else None)
    elif op[0] == 'transient-queue':
        ch.queue_declare(op[1], durable=False)
    elif op[0] == 'bind':
        ch.queue_bind(op[2], op[1], routing_key=op[3])
    elif op[0] == 'drain':
        while True:
            method, props, body = ch.basic_get(op[1], auto_ack=True)
            if method is None:
                break
            out.append({'id': props.message_id, 'routing_key': method.routing_key,
                        'headers': {k: text(v) for k, v in (props.headers or {}).items()}})
conn.close()
print(json.dumps(out))
PY

sub broker { InboxTest::run_pika($amqp_port, $pika, @_) }

# The ids of queue's messages, each as often as it is there, sorted
sub drained_ids
{
	return sort map { $_->{id} } broker([ 'drain', $_[0] ]);
}

sub sql { return $node->safe_psql('postgres', $_[0]) }

my $base = "amqp://guest\@127.0.0.1:$amqp_port/%2F";
my $secrets = "$tmp/relay.secrets";
my @targets;

sub route
{
	my ($topic, $query, $options) = @_;
	my $target = "$base?$query";
	push @targets, $target;
	PostgreSQL::Test::Utils::append_to_file($secrets, "$target guest\n");
	chmod 0600, $secrets;
	sql("SELECT outbox_route('$topic', '$target'" . ($options ? ", '$options'::jsonb" : '') . ')');
	return $target;
}

sub relay_once
{
	my ($target, $batch) = @_;
	my ($out, $err) = ('', '');
	my $conninfo = 'host=' . $node->host . ' port=' . $node->port . ' dbname=postgres';
	IPC::Run::run([ $relay, '--once', '--batch=' . ($batch // 100), "--secrets=$secrets", "--target=$target", $conninfo ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(120));
	return $err;
}

# Each delivery of topic to its target, by key: "state attempts last_error"
sub deliveries
{
	my ($topic) = @_;
	my %by;
	for (split /\n/, sql(qq{SELECT key || '|' || state::text || ' ' || attempts || ' ' || coalesce(last_error, '')
		FROM inbox.outbox_deliveries WHERE topic = '$topic'}))
	{
		my ($k, $v) = split /\|/, $_, 2;
		$by{$k} = $v;
	}
	return \%by;
}

# What is pending again is due now: the next --once takes it
sub due_now { sql("UPDATE inbox.outbox_deliveries SET due = now() WHERE topic = '$_[0]'") }

# --- a nack is not a confirmation ---------------------------------------------------
broker([ 'queue', 'full', { 'x-max-length' => 0, 'x-overflow' => 'reject-publish' } ]);
my $full = route('full', 'routing_key=full');
sql(q{SELECT outbox_send('full', 'f1', '{"n": 1}'::jsonb)});
my $log = relay_once($full);
like(deliveries('full')->{f1}, qr/^p 1 .*basic\.nack/,
	'a message the queue refuses (reject-publish) is nacked: pending, one attempt, the reason')
  or diag($log);
my @in_full = drained_ids('full');
is(scalar @in_full, 0, 'and it is not in the queue');

# --- routed and unroutable in one batch ------------------------------------------------
# Batches of 50, in key order.  The first routes to a queue in memory,
# which confirms at once: the broker acknowledges the batch with one
# multiple ack while the relay fetches the next, all unroutable (n...),
# and the relay reads that ack once the second batch is published.  So a
# relay that settled one message more than the ack covers takes the
# second batch's first message for delivered; one that took a return for
# a confirmation takes them all.  The last batch mixes the two kinds.
broker([ 'exchange', 'mixed' ], [ 'transient-queue', 'mixed-q' ],
	map { [ 'bind', 'mixed', 'mixed-q', $_ ] } (map { sprintf('a%02d', $_) } 1 .. 50), (map { "z$_" } 1 .. 5));
my $mixed = route('mixed', 'exchange=mixed');
sql(q{SELECT outbox_send('mixed', k, jsonb_build_object('k', k))
	FROM (SELECT pg_catalog.format('a%s', pg_catalog.lpad(n::text, 2, '0')) FROM generate_series(1, 50) AS n
		  UNION ALL SELECT pg_catalog.format('n%s', pg_catalog.lpad(n::text, 3, '0')) FROM generate_series(1, 50) AS n
		  UNION ALL SELECT 'z' || n FROM generate_series(1, 5) AS n
		  UNION ALL SELECT 'zz' || n FROM generate_series(1, 5) AS n) AS v(k)});
$log = relay_once($mixed, 50);
my $mixed_d = deliveries('mixed');
is(join(',', sort keys %$mixed_d), join(',', (map { sprintf('n%03d', $_) } 1 .. 50), map { "zz$_" } 1 .. 5),
	'of batches partly routed, exactly the routed messages are acknowledged')
  or diag($log);
is(scalar(grep { /^p 1 312 NO_ROUTE: no queue took the message \(exchange "mixed", routing key "(n\d+|zz\d)"\)$/ }
		values %$mixed_d), 55, 'each unroutable one is pending, one attempt, with 312 NO_ROUTE');
is(join(',', drained_ids('mixed-q')),
	sql(q{SELECT string_agg(id::text, ',' ORDER BY id::text) FROM inbox.outbox_messages
		WHERE topic = 'mixed' AND (key LIKE 'a%' OR key LIKE 'z_')}),
	'the queue holds each routed message once');

# --- bad messages among good ones: each fails alone ------------------------------------
# The route names no routing_key: the key is the routing key.  In one
# batch, among valid messages: a key too long for a routing key and a
# header CC the broker would refuse (refused before publishing), and a
# payload over the broker's max_message_size, under which the broker
# closes the channel.  That one's key comes first in its batch, so that
# no valid message was published before it: those after it the broker
# dropped, and they are published again, each alone, once.
my $long_key = 'k' x 300;
broker([ 'exchange', 'alone-x' ], [ 'queue', 'alone-q' ],
	map { [ 'bind', 'alone-x', 'alone-q', $_ ] } '0-big', 'cc', map { "a$_" } 1 .. 6);
my $alone = route('alone', 'exchange=alone-x', '{"max_attempts": 2}');
sql(qq{SELECT outbox_send('alone', '0-big', jsonb_build_object('big', repeat('b', 10000)));
	SELECT outbox_send('alone', 'a' || n, jsonb_build_object('n', n)) FROM generate_series(1, 3) AS n;
	SELECT outbox_send('alone', 'cc', '{"n": 0}'::jsonb, '{"CC": "someone"}'::jsonb);
	SELECT outbox_send('alone', '$long_key', '{"n": 0}'::jsonb);
	SELECT outbox_send('alone', 'a' || n, jsonb_build_object('n', n)) FROM generate_series(4, 6) AS n});
$log = relay_once($alone);
my $alone_d = deliveries('alone');
like($alone_d->{'0-big'},
	qr/^p 1 the broker closed the channel: 406 PRECONDITION_FAILED - message size \d+ is larger than configured max size 4096$/,
	'a message the broker closes the channel under: that message alone counts the attempt, with the reason')
  or diag($log);
like($alone_d->{cc}, qr/^p 1 the header CC is the broker's list of extra routing keys, an array/,
	'a header the broker would refuse: that message alone counts the attempt, with the reason');
like($alone_d->{$long_key}, qr/^p 1 the routing key \(the message's key "k{64}\.\.\." \(cut\)\) is 300 bytes, over AMQP's 255/,
	'a key too long for a routing key: that message alone counts the attempt, with the reason');
is(join(',', sort grep { !/^(0-big|cc|k+)$/ } keys %$alone_d), '', 'every valid message of the batch is acknowledged');
due_now('alone');
relay_once($alone);
is(sql(q{SELECT string_agg(key, ',' ORDER BY key) || ' ' || min(attempts) || ' ' || max(attempts)
	FROM outbox_dead_letters WHERE topic = 'alone'}), "0-big,cc,$long_key 2 2",
	'after their attempts, the three bad messages are dead letters');
is(join(',', drained_ids('alone-q')),
	sql(q{SELECT string_agg(id::text, ',' ORDER BY id::text) FROM inbox.outbox_messages
		WHERE topic = 'alone' AND key LIKE 'a%'}),
	'the queue holds each valid message exactly once, and none of the bad ones');

# --- the broker's reason -------------------------------------------------------------
my $nowhere = route('nowhere', 'exchange=no-such-exchange');
sql(q{SELECT outbox_send('nowhere', 'n1', '{"n": 1}'::jsonb)});
relay_once($nowhere);
like(deliveries('nowhere')->{n1},
	qr/^p 1 the broker closed the channel: 404 NOT_FOUND - no exchange 'no-such-exchange' in vhost '\/'$/,
	'a missing exchange is recorded as the broker said it: 404 NOT_FOUND');

# --- hostile strings ----------------------------------------------------------------
# Each form is sent on its own: the ones outbox_send refuses are left out.
# Key and headers as SQL expressions.
broker([ 'queue', 'hostile' ]);
my $hostile = route('hostile', 'routing_key=hostile&outbox_headers=true');
my @forms = (
	[ 'unicode key', q{'ключ-🔑-ü'}, 'NULL' ],
	[ 'quotes in the key', q{'it''s "quoted" \\ back'}, 'NULL' ],
	[ 'spaces in the key', q{'  with  spaces  '}, 'NULL' ],
	[ 'a 1,024-byte key', q{repeat('x', 1024)}, 'NULL' ],
	[ 'a 255-byte key', q{repeat('y', 255)}, 'NULL' ],
	[ 'CR LF in the key', q{'a' || chr(13) || chr(10) || 'Injected: yes'}, 'NULL' ],
	[ 'a tab in the key', q{'a' || chr(9) || 'b'}, 'NULL' ],
	[ 'a long header value', q{'long-value'}, q{jsonb_build_object('trace', repeat('long text ', 3000))} ],
	[ 'many headers', q{'many'}, q{(SELECT jsonb_object_agg('h' || n, 'v' || n) FROM generate_series(1, 200) AS n)} ],
	[ 'a 255-byte header name', q{'name-255'}, q{jsonb_build_object(repeat('n', 255), 'v')} ],
	[ 'unicode and quotes in a value', q{'uvalue'}, q{jsonb_build_object('note', 'ü "q" ''s'' 🔑')} ],
	[ 'CR LF in a value', q{'crlf-value'}, q{jsonb_build_object('trace', 'a' || chr(13) || chr(10) || 'Injected: yes')} ],
	[ 'CR LF in a name', q{'crlf-name'}, q{jsonb_build_object('x' || chr(13) || chr(10) || 'Injected', 'v')} ],
	[ 'a colon in a name', q{'colon-name'}, q{jsonb_build_object('a:b', 'v')} ],
	[ 'an outbox header of its own', q{'own-outbox'}, q{jsonb_build_object('outbox-extra', 'v')} ],
	[ 'a 256-byte header name', q{'name-256'}, q{jsonb_build_object(repeat('m', 256), 'v')} ],
);
my (%sent, @refused);
for my $form (@forms)
{
	my ($label, $key, $headers) = @$form;
	my ($rc, $id, $err) = $node->psql('postgres',
		"SELECT outbox_send('hostile', $key, jsonb_build_object('form', '$label'), $headers)");
	if ($rc == 0) { $sent{$id} = $label }
	else { push @refused, $label }
}
note('outbox_send refused: ' . join('; ', @refused)) if @refused;
$log = relay_once($hostile);

# The messages as the database has them: the headers jsonb as text pairs
my %expected;
for my $row (@{ decode_json(sql(q{SELECT coalesce(json_agg(json_build_object('id', m.id, 'key', m.key,
		'position', m.position::text, 'headers', (SELECT coalesce(json_object_agg(h.key, h.value), '{}')
			FROM jsonb_each_text(m.headers) AS h))), '[]') FROM inbox.outbox_messages AS m WHERE m.topic = 'hostile'})) })
{
	$expected{ $row->{id} } = {
		%{ $row->{headers} },
		'outbox-topic' => 'hostile',
		'outbox-key' => $row->{key},
		'outbox-position' => $row->{position}
	};
}
my %got;
push @{ $got{ $_->{id} } }, $_ for broker([ 'drain', 'hostile' ]);
my $too_long = sql(q{SELECT m.id FROM inbox.outbox_messages AS m WHERE m.topic = 'hostile'
	AND EXISTS (SELECT FROM jsonb_object_keys(m.headers) AS k WHERE octet_length(k) > 255)});
for my $id (sort keys %sent)
{
	if ($too_long ne '' && $id eq $too_long)
	{
		ok(!$got{$id}, "$sent{$id}: AMQP cannot carry it, and it is not in the queue");
		like(deliveries('hostile')->{'name-256'}, qr/^p 1 the header name "m{64}\.\.\." \(cut\) is 256 bytes, over AMQP's 255$/,
			"$sent{$id}: it is that message's own failure, with the reason");
		next;
	}
	is(scalar @{ $got{$id} // [] }, 1, "$sent{$id}: exactly one message in the queue") or diag($log);
	is_deeply($got{$id}[0]{headers}, $expected{$id}, "$sent{$id}: its headers intact, none added");
}
is(scalar(grep { !$sent{$_} } keys %got), 0, 'nothing else reached the queue');

# --- the documented topology ------------------------------------------------------------
my $page = slurp_file("$FindBin::RealBin/../../docs/outbox.md");
my ($section) = $page =~ /^## RabbitMQ topology\n(.*?)^## /ms;
my ($blocks) = InboxTest::markdown_code_blocks($section // '');
my ($route_sql) = map { $_->{text} } grep { $_->{info} =~ /^sql as=/ } @$blocks;
my ($admin) = map { $_->{text} } grep { $_->{info} eq 'sh' } @$blocks;
ok(defined $route_sql && defined $admin, 'docs/outbox.md has the topology section, its route and its declarations');
my @ops;
for (split /\n/, $admin // '')
{
	if (/declare exchange name=(\S+) type=(\S+)/) { push @ops, [ 'exchange', $1, $2 ] }
	elsif (/declare queue name=(\S+)/) { push @ops, [ 'queue', $1 ] }
	elsif (/declare binding source=(\S+) destination=(\S+) routing_key='?([^'\s]+)'?/) { push @ops, [ 'bind', $1, $2, $3 ] }
	else { fail("a declaration this test does not read: $_") }
}
broker(@ops);
(my $doc_sql = $route_sql // '') =~ s{amqp://relay\@rabbit\.internal/}{amqp://guest\@127.0.0.1:$amqp_port/}g;
sql($doc_sql);
my ($doc_topic, $doc_target) = $doc_sql =~ /outbox_route\('([^']+)', '([^']+)'/;
PostgreSQL::Test::Utils::append_to_file($secrets, "$doc_target guest\n");
sql("SELECT outbox_send('$doc_topic', 'parcel-7', '{\"n\": 1}'::jsonb)");
$log = relay_once($doc_target);
my ($queue) = map { $_->[2] } grep { $_->[0] eq 'bind' } @ops;
is(join(',', drained_ids($queue)), sql("SELECT id FROM inbox.outbox_messages WHERE topic = '$doc_topic'"),
	'the documented route and topology deliver a message to the queue') or diag($log);

done_testing();
