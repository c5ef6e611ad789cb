# test/t/047_nats_target.pl
#
# inbox-relay's nats:// target against a private nats-server with
# JetStream on loopback (its streams made and read by test/tools/nats_tool.c).
#   - each message is in the stream once, with Nats-Msg-Id = its outbox id,
#     Outbox-Key, Content-Type and its own headers, each key's messages in
#     the order of their positions;
#   - a re-publication (the outbox handing out again messages the stream
#     holds, as after a relay killed between the publish and the outbox's
#     acknowledgement) is dropped by JetStream's duplicate window: each id
#     is in the stream once, and the duplicates count as delivered;
#   - hostile strings: a 1,024-byte UTF-8 key, quotes, UTF-8 header values
#     arrive exactly; rows written around outbox_send with a CR/LF in a
#     header value or in the key, a header name with a colon, or a Nats-
#     directive header fail alone, unsent, with the reason;
#   - a message over the stream's maximum size fails alone with
#     JetStream's error, its batch-mates delivered;
#   - a subject no stream captures: the message's error is recorded
#     (outbox_stats.last_error); check reports it, and OK for the others.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = InboxTest->node('nats_target', conf => "inbox.purge_enabled = off\n");
my $relay = InboxTest::relay_or_skip($node);
plan(skip_all => 'nats-server or libnats-dev not found (test/tools/ensure-deps.sh)') unless InboxTest::have_nats();
plan(skip_all => 'inbox-relay was built without libnats')
  unless `$relay --version` =~ /^schemes: .*\bnats\b/m;

my $tmp = PostgreSQL::Test::Utils::tempdir('nats_target');
my $nats_pgid;
END
{
	local $?;
	kill 'KILL', -$nats_pgid if $nats_pgid;
}

my ($port, $up);
($port, $nats_pgid, $up) = InboxTest::start_nats("$tmp/nats");
ok($up, 'nats-server with JetStream listens on loopback')
  or BAIL_OUT('nats-server did not start: ' . slurp_file("$tmp/nats/server.log"));
my $tool = InboxTest::build_nats_tool($tmp);

sub nats { return InboxTest::nats_tool($tool, $port, undef, @_) }

# The messages of a stream, in its order
# (strings as the bytes the stream holds, as the test's own are)
sub stream_messages { return map { JSON::PP->new->decode($_) } nats('read', $_[0]) }

sub sql { return $node->safe_psql('postgres', $_[0]) }

sub quote { my ($s) = @_; $s =~ s/'/''/g; return "'$s'" }

$node->safe_psql('postgres', q{CREATE ROLE relay_user LOGIN; SELECT inbox_grant_bundle('relay_user', 'relay')});
my $conninfo = 'host=' . $node->host . ' port=' . $node->port . ' dbname=postgres user=relay_user';

sub relay_once
{
	my ($target) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $relay, '--once', '--batch=10', "--target=$target", $conninfo ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(120));
	return $err;
}

# Each undelivered message of topic, by key: "state attempts last_error"
sub deliveries
{
	my ($topic) = @_;
	my %by;
	for (split /\n/, sql(qq{SELECT replace(replace(key, E'\r', '<CR>'), E'\n', '<LF>') || '|' || state::text
		|| ' ' || attempts || ' ' || coalesce(last_error, '')
		FROM inbox.outbox_deliveries WHERE topic = '$topic' AND state <> 'd'}))
	{
		my ($k, $v) = split /\|/, $_, 2;
		$by{$k} = $v;
	}
	return \%by;
}

nats('stream', 'ORDERS', 'orders.out');
nats('stream', 'SMALL', 'small.out', 2048);
my $base = "nats://127.0.0.1:$port";

# --- order, ids, headers ------------------------------------------------------------
my $orders = "$base/orders.out";
sql(qq{SELECT outbox_route('orders', '$orders')});
sql(q{SELECT outbox_send('orders', 'k' || (n % 3), jsonb_build_object('n', n), jsonb_build_object('trace', 't-' || n))
	FROM generate_series(1, 30) AS n});
my $log = relay_once($orders);
my @got = stream_messages('ORDERS');
my %sent = map { my ($id, $k, $p, $n) = split /\|/; ($id => [ $k, $p, $n ]) } split /\n/,
  sql(q{SELECT id || '|' || key || '|' || position || '|' || (payload->>'n') FROM inbox.outbox_messages WHERE topic = 'orders'});
is(scalar @got, 30, 'thirty messages in the stream') or diag($log);
is_deeply([ sort map { $_->{headers}{'Nats-Msg-Id'} } @got ], [ sort keys %sent ],
	'each outbox id once, as Nats-Msg-Id');
is(scalar(grep { my $s = $sent{ $_->{headers}{'Nats-Msg-Id'} };
			$s && $_->{headers}{'Outbox-Key'} eq $s->[0] && $_->{headers}{'Outbox-Position'} eq $s->[1]
			  && $_->{headers}{trace} eq "t-$s->[2]" && $_->{headers}{'Content-Type'} eq 'application/json'
			  && decode_json($_->{data})->{n} == $s->[2] } @got), 30,
	'each with its Outbox-Key, Outbox-Position, Content-Type, trace header and payload');
my %positions;
push @{ $positions{ $_->{headers}{'Outbox-Key'} } }, $_->{headers}{'Outbox-Position'} for @got;
is(scalar(grep { my @p = @{ $positions{$_} }; join(',', @p) eq join(',', sort { $a <=> $b } @p) } keys %positions), 3,
	'each key\'s messages are in the stream in the order of their positions');

# --- a re-publication is dropped by the duplicate window -------------------------------
# The outbox hands the delivered messages out again, as it does when a
# relay is killed after the publish and before its acknowledgement: the
# same ids, published again.
sql(q{INSERT INTO inbox.outbox_deliveries (id, target, topic, key, position)
	SELECT id, (SELECT target FROM outbox_routes WHERE topic = 'orders'), topic, key, position
	FROM inbox.outbox_messages WHERE topic = 'orders'
	ON CONFLICT (id, target) DO UPDATE SET state = 'p', due = now(), attempts = 0, finished_at = NULL});
is(sql(q{SELECT count(*) FROM inbox.outbox_deliveries WHERE topic = 'orders' AND state = 'p'}), 30,
	'the thirty messages are pending again');
$log = relay_once($orders);
is(sql(q{SELECT count(*) FROM inbox.outbox_deliveries WHERE topic = 'orders' AND state = 'p'}), 0,
	'the re-publication is acknowledged by JetStream') or diag($log);
@got = stream_messages('ORDERS');
is(scalar @got, 30, 'and the stream still holds each id once: JetStream dropped the duplicates');

# --- hostile strings ---------------------------------------------------------------------
# (Headers checked by what their message's payload says, also read as bytes)
my $long_key = 'k-long-' . ('é' x 508) . 'z';    # 1,024 bytes
my %hostile = (
	$long_key => {},
	'k "quoted" \'single\'' => { 'X-Quote' => q{"q" 'single'} },
	'k-unicode-ключ-🔑' => { 'X-Note' => 'ü é 🔑 ключ' },
	'k;semi,comma:colon=eq' => { 'X-Tab' => "a\tb" },
);
nats('stream', 'HOSTILE', 'hostile.out');
my $hostile_target = "$base/hostile.out";
sql(qq{SELECT outbox_route('hostile', '$hostile_target')});
sql(join '', map {
	my $k = $_;
	# (the JSON of the header bytes, kept bytes: psql reads UTF-8)
	my $h = JSON::PP->new->canonical->encode($hostile{$k});
	utf8::downgrade($h);
	"SELECT outbox_send('hostile', " . quote($k) . ', jsonb_build_object(\'k\', ' . quote($k) . '::text), '
	  . quote($h) . "::jsonb);\n"
} sort keys %hostile);
# Rows outbox_send does not write, as the superuser could
for my $f ([ q{E'k-crlf\r\nX-Injected: key'}, 'NULL' ], [ q{'k-value-crlf'}, q{'{"X-Trace": "t\r\nX-Injected: v"}'} ],
	[ q{'k-name-colon'}, q{'{"X-Injected:": "v"}'} ], [ q{'k-rollup'}, q{'{"Nats-Rollup": "all"}'} ])
{
	sql(qq{WITH m AS (
			INSERT INTO inbox.outbox_messages (id, topic, key, position, payload, headers)
			VALUES (gen_random_uuid(), 'hostile', $f->[0], 1, '{"forged": true}', $f->[1])
			RETURNING id, topic, key, position)
		INSERT INTO inbox.outbox_deliveries (id, target, topic, key, position)
		SELECT id, '$hostile_target', topic, key, position FROM m});
}
$log = relay_once($hostile_target);
@got = stream_messages('HOSTILE');
my %by_key = map { ($_->{headers}{'Outbox-Key'} => $_) } @got;
is(scalar @got, scalar keys %hostile, 'one message per key outbox_send took, none of the forged rows') or diag($log);
for my $k (sort keys %hostile)
{
	my $m = $by_key{$k};
	(my $label = substr($k, 0, 16)) =~ s/[^\x20-\x7e]/?/g;
	ok($m && JSON::PP->new->decode($m->{data})->{k} eq $k, "the key $label arrives whole")
	  or diag(explain([ keys %by_key ]));
	is_deeply({ map { ($_ => $m->{headers}{$_}) } grep { /^X-/ } keys %{ $m->{headers} // {} } }, $hostile{$k},
		"the headers of $label arrive whole");
}
my $d = deliveries('hostile');
like($d->{'k-crlf<CR><LF>X-Injected: key'}, qr/^p 1 not sent: the message's key holds a CR or LF/,
	'a key with CR/LF is not sent, and costs its own attempt');
like($d->{'k-value-crlf'}, qr/^p 1 not sent: the value of header X-Trace holds a CR or LF/,
	'a header value with CR/LF is not sent');
like($d->{'k-name-colon'}, qr/^p 1 not sent: the header name "X-Injected:" is not a NATS header name/,
	'a header name with a colon is not sent');
like($d->{'k-rollup'}, qr/^p 1 not sent: the header Nats-Rollup starts with Nats-/,
	'a JetStream directive header is not sent');
is(scalar keys %$d, 4, 'every other message is delivered');

# --- a message over the stream's maximum fails alone -------------------------------------
my $small = "$base/small.out";
sql(qq{SELECT outbox_route('small', '$small');
	SELECT outbox_send('small', 'a', '{"n": 1}'::jsonb);
	SELECT outbox_send('small', 'big', jsonb_build_object('big', repeat('b', 4000)));
	SELECT outbox_send('small', 'c', '{"n": 3}'::jsonb)});
$log = relay_once($small);
$d = deliveries('small');
like($d->{big}, qr/^p 1 JetStream refused the message: \d+ message size exceeds maximum allowed/,
	'a message over the stream\'s maximum size fails with JetStream\'s error') or diag($log);
is(join(',', sort map { $_->{headers}{'Outbox-Key'} } stream_messages('SMALL')), 'a,c',
	'its batch-mates are in the stream');

# --- a subject no stream captures --------------------------------------------------------
my $nowhere = "$base/nowhere.out";
sql(qq{SELECT outbox_route('nowhere', '$nowhere');
	SELECT outbox_send('nowhere', 'n1', '{"n": 1}'::jsonb)});
relay_once($nowhere);
like(sql(q{SELECT last_error FROM outbox_stats WHERE topic = 'nowhere'}),
	qr/^no JetStream stream captures the subject "nowhere\.out"/,
	'a subject without a stream: the error is in outbox_stats.last_error');

my ($out, $err) = ('', '');
IPC::Run::run([ $relay, 'check', $conninfo ], '>', \$out, '2>', \$err);
like($out, qr/^OK \Q$orders\E$/m, 'check finds the stream of a target\'s subject') or diag($out, $err);
like($out, qr/^FAIL \Q$nowhere\E: no JetStream stream captures the subject "nowhere\.out"/m,
	'check reports a subject no stream captures');
is(scalar(stream_messages('ORDERS')), 30, 'and check published nothing');

done_testing();
