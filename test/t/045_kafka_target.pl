# test/t/045_kafka_target.pl
#
# inbox-relay's Kafka target against librdkafka's mock cluster
# (test/tools/kafka_mock.c, three brokers on loopback), read back with
# confluent-kafka:
#   - per-key order: six keys of fifty messages, each key in one partition
#     in its send order, each message there with its message-id header (the
#     outbox id) and its own headers; through produce requests failed by
#     the brokers (retried by the idempotent producer), and a relay
#     SIGKILLed mid-run and started again: nothing lost, and a message
#     produced twice only as a repeat of one the killed relay had produced
#     and not acknowledged, its key's order kept;
#   - the brokers down, then up: what was sent meanwhile is delivered, in
#     order, no attempt counted;
#   - hostile strings: a 1,024-byte key, UTF-8, quotes, a 255-byte header
#     name, a 6,000-byte header value, 100 headers: each message arrives
#     once, its key and headers byte for byte;
#   - a message over the producer's message.max.bytes fails alone, with
#     librdkafka's reason in outbox_stats.last_error, its neighbours
#     delivered;
#   - check: a route to a topic the brokers do not have fails it.
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

my $node = InboxTest->node('kafka_target', conf => "inbox.purge_enabled = off\n");
my $relay = InboxTest::relay_or_skip($node, kafka => 1);
my $tmp = PostgreSQL::Test::Utils::tempdir('kafka_target');
my @relays;
END
{
	local $?;
	kill 'KILL', -$_ for @relays;
}

my $mock = InboxTest::start_kafka_mock($tmp, brokers => 3);
my $bs = $mock->{bootstrap};
ok($bs =~ /^127\.0\.0\.1:\d+(,127\.0\.0\.1:\d+){2}$/, 'the mock cluster has three brokers on loopback');
InboxTest::kafka_mock($mock, $_) for 'topic orders 4', 'topic hostile 1', 'topic big 2';

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

sub log_of { return -e $_[0] ? slurp_file($_[0]) : '' }

my $conninfo = 'host=' . $node->host . ' port=' . $node->port . ' dbname=postgres';

sub start_relay
{
	my ($log, $target) = @_;
	my $pid = InboxTest::start_group($log, {}, $relay, '--timeout=5', '--batch=20', "--target=$target", $conninfo);
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

sub pending { sql(qq{SELECT count(*) FROM inbox.outbox_deliveries WHERE topic = '$_[0]'}) }

# The records of topic, by key (as text): [ value's n, message-id, headers ]
sub read_topic
{
	my ($topic) = @_;
	my ($records) = InboxTest::run_kafka($bs, [ 'read', $topic ]);
	return @$records;
}

sub unhex { defined $_[0] ? pack('H*', $_[0]) : undef }

# --- per-key order, produce errors, a relay killed mid-run -----------------------------------
my $orders = "kafka://$bs/orders";
sql(qq{SELECT outbox_route('orders', '$orders')});
my @keys = map { "key-$_" } 1 .. 6;
my %id_of;
for my $n (1 .. 50)
{
	for my $row (split /\n/, sql(join ';', map {
		qq{SELECT '$_ $n ' || outbox_send('orders', '$_', '{"n": $n}'::jsonb, '{"trace": "t-$_-$n"}'::jsonb)}
	} @keys))
	{
		my ($k, $i, $id) = split / /, $row;
		$id_of{$id} = "$k $i";
	}
}
is(scalar keys %id_of, 300, '300 messages sent');

# The brokers fail produce requests (NOT_ENOUGH_REPLICAS, retriable)
InboxTest::kafka_mock($mock, 'error Produce 8 19');
my $r1_log = "$tmp/relay1.log";
my $r1 = start_relay($r1_log, $orders);
ok(wait_until(120, sub { pending('orders') <= 200 }), 'a first relay delivers some')
  or diag(log_of($r1_log));
stop_relay($r1, 'KILL');
my $r2_log = "$tmp/relay2.log";
my $r2 = start_relay($r2_log, $orders);
ok(wait_until(120, sub { pending('orders') == 0 }), 'a second relay delivers the rest')
  or diag(log_of($r2_log));

# --- the brokers down, then up ------------------------------------------------------------
InboxTest::kafka_mock($mock, "down $_") for 1 .. 3;
for my $n (51 .. 60)
{
	for my $row (split /\n/, sql(join ';', map {
		qq{SELECT '$_ $n ' || outbox_send('orders', '$_', '{"n": $n}'::jsonb, '{"trace": "t-$_-$n"}'::jsonb)}
	} @keys))
	{
		my ($k, $i, $id) = split / /, $row;
		$id_of{$id} = "$k $i";
	}
}
ok(wait_until(60, sub { log_of($r2_log) =~ /the target is unreachable/ }), 'the relay finds the brokers down')
  or diag(log_of($r2_log));
is(pending('orders'), 60, 'nothing is taken for delivered while they are down');
is(sql(q{SELECT max(attempts) FROM inbox.outbox_deliveries WHERE topic = 'orders'}), 0,
	'and no attempt is counted');
InboxTest::kafka_mock($mock, "up $_") for 1 .. 3;
ok(wait_until(120, sub { pending('orders') == 0 }), 'the brokers up, the rest is delivered')
  or diag(log_of($r2_log));
stop_relay($r2);
is(sql(q{SELECT count(*) FROM outbox_dead_letters}), 0, 'nothing went dead');


my @records = read_topic('orders');
my (%seq, %partitions, @bad);
for my $r (@records)
{
	my $key = unhex($r->{key});
	my ($n) = unhex($r->{value}) =~ /"n": (\d+)/;
	my %h = map { ($_->[0] => unhex($_->[1])) } @{ $r->{headers} };
	push @{ $seq{$key} }, $n;
	$partitions{$key}{ $r->{partition} } = 1;
	push @bad, "$key $n: message-id " . ($h{'message-id'} // 'none')
	  unless defined $h{'message-id'} && ($id_of{ $h{'message-id'} } // '') eq "$key $n";
	push @bad, "$key $n: trace " . ($h{trace} // 'none') unless ($h{trace} // '') eq "t-$key-$n";
	push @bad, "$key $n: headers " . join(',', sort keys %h) unless join(',', sort keys %h) eq 'message-id,trace';
}
is_deeply(\@bad, [], 'each record carries its outbox id as message-id and its own headers, no others');
is_deeply([ grep { keys %{ $partitions{$_} } != 1 } @keys ], [], 'each key is in one partition');
# A key's records in partition order, a repeat removed: its send order.
# A repeat is a message the killed relay produced and did not acknowledge,
# produced again before the key's next.
my (%first, $repeats);
for my $k (@keys)
{
	my %seen;
	$first{$k} = [ grep { !$seen{$_}++ } @{ $seq{$k} } ];
	$repeats += @{ $seq{$k} } - @{ $first{$k} };
	my @runs = grep { $seq{$k}[$_] < $seq{$k}[ $_ - 1 ] } 1 .. $#{ $seq{$k} };
	is(scalar @runs, 0, "$k: never an older message after a newer one")
	  or diag(join ' ', @{ $seq{$k} });
}
is_deeply(\%first, { map { ($_ => [ 1 .. 60 ]) } @keys }, 'every message of every key arrived, in send order');
cmp_ok($repeats, '<=', 6 * 2, 'a message is repeated only after the kill, at most a batch in flight per key')
  or diag(join "\n", map { "$_: @{ $seq{$_} }" } @keys);

# --- hostile strings ------------------------------------------------------------------------
my $hostile = "kafka://$bs/hostile";
sql(qq{SELECT outbox_route('hostile', '$hostile')});
my $long_key = 'k-long-' . ('é' x 508) . 'z';    # 1,024 bytes
my $name_255 = 'X-' . ('n' x 253);
my $long_value = join '', map { chr(0x21 + $_ % 94) } 1 .. 6000;
my %sent = (
	'k-unicode-ключ-鍵-🔑' => { 'X-U' => 'значение 🔑' },
	'k "quoted" \'single\' \\back' => { 'X-Q' => q{"a" 'b' \\c} },
	'k with  spaces ' => {},
	$long_key => {},
	'k-name-255' => { $name_255 => 'v' },
	'k-long-value' => { 'X-Long' => $long_value },
	'k-many' => { map { ("X-H$_" => "value $_") } 1 .. 100 },
	'k-empty-value' => { 'X-Empty' => '' },
);

sub quote { my ($s) = @_; $s =~ s/'/''/g; return "'$s'" }

sub json_string
{
	my ($s) = @_;
	$s =~ s/(["\\])/\\$1/g;
	return "\"$s\"";
}
sql(join '', map {
	my $h = $sent{$_};
	"SELECT outbox_send('hostile', " . quote($_) . ", '{}'::jsonb, "
	  . quote('{' . join(',', map { json_string($_) . ':' . json_string($h->{$_}) } sort keys %$h) . '}')
	  . "::jsonb);\n"
} sort keys %sent);
my ($out, $err) = ('', '');
IPC::Run::run([ $relay, '--once', "--target=$hostile", $conninfo ], '>', \$out, '2>', \$err,
	IPC::Run::timeout(120));
is(pending('hostile'), 0, 'every hostile message is delivered') or diag($err);
my %got;
for my $r (read_topic('hostile'))
{
	my %h = map { ($_->[0] => unhex($_->[1])) } @{ $r->{headers} };
	delete $h{'message-id'};
	push @{ $got{ unhex($r->{key}) } }, \%h;
}
is_deeply(\%got, { map { ($_ => [ $sent{$_} ]) } keys %sent },
	'each arrives once, its key and headers byte for byte');

# --- a message too large fails alone -----------------------------------------------------------
my $big = "kafka://$bs/big";
sql(qq{SELECT outbox_route('big', '$big');
	SELECT outbox_send('big', 'b1', '{"n": 1}'::jsonb);
	SELECT outbox_send('big', 'b2', jsonb_build_object('pad', repeat('x', 1100000)));
	SELECT outbox_send('big', 'b3', '{"n": 3}'::jsonb)});
IPC::Run::run([ $relay, '--once', "--target=$big", $conninfo ], '>', \$out, '2>', \$err, IPC::Run::timeout(120));
is(sql(q{SELECT string_agg(key || ' ' || attempts, ',' ORDER BY key) FROM inbox.outbox_deliveries WHERE topic = 'big'}),
	'b2 1', 'the message over message.max.bytes stays pending with one attempt')
  or diag($err);
like(sql(q{SELECT last_error FROM outbox_stats WHERE topic = 'big'}), qr/Message size too large/,
	'with the reason in outbox_stats.last_error');
is(join(',', sort map { unhex($_->{key}) } read_topic('big')), 'b1,b3', 'its neighbours are delivered');

# --- check -----------------------------------------------------------------------------------
my $missing = "kafka://$bs/missing";
sql(qq{SELECT outbox_route('gone', '$missing')});
IPC::Run::run([ $relay, 'check', '--timeout=5', $conninfo ], '>', \$out, '2>', \$err, IPC::Run::timeout(120));
like($out, qr/^OK \Q$orders\E$/m, 'check finds the topic of a route');
like($out, qr/^FAIL \Q$missing\E: .*Unknown topic/m, 'check reports a topic the brokers do not have')
  or diag($out, $err);

InboxTest::stop_kafka_mock($mock);
done_testing();
