# test/t/046_ingest_kafka.pl
#
# Ingest from Kafka: inbox-relay reads a topic of librdkafka's mock cluster
# (test/tools/kafka_mock.c, three brokers on loopback) into an inbox as a
# member of a consumer group (inbox_subscribe('scope',
# 'kafka://.../topic?group=ID')), as a role that holds the bundles relay
# and receiver only, and commits the group's offsets only after its
# database commit.
#   - offsets after the commit: a relay paused between its commit and its
#     offsets' (INBOX_RELAY_TEST_PAUSE_ACK) and SIGKILLed there loses
#     nothing: the next one reads the batch again and finds duplicates;
#   - the record key as group key: inbox_take workers get each key's
#     messages in the partition's order;
#   - the message-id header as the id, else topic/partition/offset; a
#     duplicate is acknowledged; other content under a stored id (IB002)
#     and invalid JSON under content-type application/json (after
#     max_attempts) are rejects, with their headers; text/plain is bytea;
#   - faults: the database restarted, the scope's grant revoked with a
#     relay SIGKILLed meanwhile, the brokers down and up;
#   - two relays in one group: the partitions shared, one stopped and
#     another joining (rebalances): each key keeps its order;
#   - hostile strings: ids with quotes, UTF-8 and spaces, a 1,024-byte
#     key, a tab, arrive exactly, one message each; a header value that is
#     not UTF-8 (or holds a NUL) is left out, and a message-id such is
#     replaced by topic/partition/offset;
#   - at the end nothing is lost or doubled, and each group's lag (the high
#     watermarks less the committed offsets, read with confluent-kafka) is 0;
#   - check: the topic found, a missing one reported.
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

my $node = InboxTest->node('ingest_kafka', conf => "inbox.purge_enabled = off\n");
my $relay = InboxTest::relay_or_skip($node, kafka => 1);
my $tmp = PostgreSQL::Test::Utils::tempdir('ingest_kafka');
my @relays;
END
{
	local $?;
	kill 'KILL', -$_ for @relays;
}

my $mock = InboxTest::start_kafka_mock($tmp, brokers => 3);
my $bs = $mock->{bootstrap};
InboxTest::kafka_mock($mock, $_) for 'topic orders 3', 'topic shipments 4';

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

# Records into topic: [ id or undef, key, body, content type ]
sub produce
{
	my ($topic, @m) = @_;
	InboxTest::run_kafka($bs, [ 'produce', $topic, [ map {
		{ key => $_->[1], value => $_->[2],
		  headers => [ defined $_->[0] ? ([ 'message-id', $_->[0] ]) : (),
			  [ 'content-type', $_->[3] // 'application/json' ] ] }
	} @m ] ]);
}

sub lag { (InboxTest::run_kafka($bs, [ 'lag', $_[0], $_[1] ]))[0] }

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

sql(q{CREATE ROLE ingest_relay LOGIN; CREATE ROLE orders_worker;
	SELECT inbox_grant_bundle('ingest_relay', 'relay');
	SELECT inbox_grant_bundle('ingest_relay', 'receiver');
	SELECT inbox_grant('orders', 'orders_worker');
	SELECT inbox_grant('orders', 'ingest_relay');
	SELECT inbox_grant('shipments', 'ingest_relay');
	CREATE TABLE taken (n serial, id text, key text)});

my $source = "kafka://$bs/orders?group=g1";
sql(qq{SELECT inbox_subscribe('orders', '$source', '{"batch": 10, "group_key": "routing_key"}')});
my $conninfo = 'host=' . $node->host . ' port=' . $node->port . ' dbname=postgres user=ingest_relay';

sub start_relay
{
	my ($log, %env) = @_;
	my $pid = InboxTest::start_group($log, \%env, $relay, $conninfo);
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

sub stored
{
	return sql(qq{SELECT string_agg(message_id, ',' ORDER BY message_id) FROM inbox.entries
		WHERE scope = '$_[0]'});
}

sub count_stored { return sql(qq{SELECT count(*) FROM inbox.entries WHERE scope = '$_[0]'}) }

sub ids { my ($p, $from, $to) = @_; return join(',', map { sprintf('%s%02d', $p, $_) } $from .. $to) }

# --- offsets after the commit: a relay killed between the two ------------------------------
produce('orders', map { [ sprintf('m%02d', $_), 'k' . ($_ % 3), qq({"n": $_}) ] } 1 .. 30);
my $pause = "$tmp/pause";
append_to_file($pause, '');
my $r1_log = "$tmp/relay1.log";
my $r1 = start_relay($r1_log, INBOX_RELAY_TEST_PAUSE_ACK => $pause);
ok(wait_until(60, sub { log_of($r1_log) =~ /test pause: waiting after a commit/ }),
	'the relay commits a batch and pauses before committing its offsets')
  or diag(log_of($r1_log));
my $first = count_stored('orders');
ok($first > 0 && $first <= 10, 'the batch is in the inbox before the offsets are committed');
is(lag('orders', 'g1'), 30, 'and the group has committed nothing');
stop_relay($r1, 'KILL');
unlink $pause;

my $r2_log = "$tmp/relay2.log";
my $r2 = start_relay($r2_log);
ok(wait_until(60, sub { count_stored('orders') == 30 && lag('orders', 'g1') == 0 }),
	'a second relay writes the rest, and commits every offset')
  or diag(log_of($r2_log));
is(stored('orders'), ids('m', 1, 30), 'after the kill, every message is in the inbox once');

my %taken = take_all('orders');
is_deeply(
	\%taken,
	{ map { my $k = $_; ("k$k" => [ map { sprintf('m%02d', $_) } grep { $_ % 3 == $k } 1 .. 30 ]) } 0 .. 2 },
	'inbox_take hands out each record key\'s messages in the partition\'s order');

# --- ids, duplicates, rejects, content types --------------------------------------------------
produce('orders',
	[ 'm05', 'k2', '{"n": 5}' ],
	[ 'm06', 'k0', '{"n": "other"}' ],
	[ 'bad', 'k1', '{not json' ],
	[ 'm31', 'k1', '{"n": 31}' ],
	[ 'b32', 'k2', 'raw bytes', 'text/plain' ],
	[ undef, 'k0', '{"no": "id"}' ]);
ok(wait_until(90, sub { count_stored('orders') == 33 && lag('orders', 'g1') == 0 }),
	'the messages after refused ones go in, and every offset is committed')
  or diag(log_of($r2_log));
ok(wait_until(30, sub { sql('SELECT count(*) FROM inbox_ingest_rejects') == 2 }), 'two rejects are recorded')
  or diag(log_of($r2_log));
is(sql(q{SELECT string_agg(message_id, ',') FROM inbox.entries WHERE scope = 'orders' AND message_id !~ '^[mb]\d\d$'}),
	sql(q{SELECT 'orders/' || p || '/' || o FROM (SELECT 1) AS x, LATERAL (SELECT NULL) AS y(z),
		LATERAL (SELECT split_part(message_id, '/', 2) AS p, split_part(message_id, '/', 3) AS o
			FROM inbox.entries WHERE scope = 'orders' AND message_id LIKE 'orders/%') AS w}),
	'a record without a message-id header is stored under topic/partition/offset');
is(sql(q{SELECT count(*) FROM inbox.entries WHERE scope = 'orders' AND message_id ~ '^orders/\d+/\d+$'}), 1,
	'once');
is(sql(q{SELECT payload_bytes FROM inbox.entries WHERE scope = 'orders' AND message_id = 'b32'}),
	'\x' . unpack('H*', 'raw bytes'), 'a text/plain payload is stored as bytea');
my %rejects = map { my ($p, $r) = split /\|/, $_, 2; ($p => $r) } split /\n/,
  sql(q{SELECT convert_from(payload, 'UTF8') || '|' || reason || '|' || coalesce(headers::text, '')
	|| '|' || broker_id FROM inbox_ingest_rejects});
like($rejects{'{"n": "other"}'}, qr/^IB002: .*"m06".*\|\{"message-id": "m06", "content-type": "application\/json"\}\|orders\/\d+\/\d+$/,
	'other content under a stored id: an IB002 reject with its headers and topic/partition/offset');
like($rejects{'{not json'}, qr/^22P02: invalid input syntax for type json \(after 5 attempts\)\|/,
	'invalid JSON under application/json: a reject after max_attempts');

# --- faults: the database restarted, the grant revoked under a kill, the brokers down ----------
my $before = count_stored('orders');
$node->stop('immediate');
produce('orders', map { [ sprintf('d%02d', $_), 'k' . ($_ % 3), qq({"n": $_}) ] } 1 .. 20);
$node->start;
ok(wait_until(90, sub { count_stored('orders') == $before + 20 && lag('orders', 'g1') == 0 }),
	'messages produced while the database is down go in once it is back')
  or diag(log_of($r2_log));

# The grant revoked: 42501 is transient, the batch sought back and tried
# again; a relay killed meanwhile leaves the offsets before it
sql(q{SELECT inbox_revoke('orders', 'ingest_relay')});
produce('orders', map { [ sprintf('g%02d', $_), 'k' . ($_ % 3), qq({"n": $_}) ] } 1 .. 10);
ok(wait_until(60, sub { log_of($r2_log) =~ /not written, handed back to the broker: 42501/ }),
	'with the grant revoked, the batch is refused with 42501 and handed back')
  or diag(log_of($r2_log));
stop_relay($r2, 'KILL');
is(lag('orders', 'g1'), 10, 'its offsets are not committed');
my $r3_log = "$tmp/relay3.log";
my $r3 = start_relay($r3_log);
sql(q{SELECT inbox_grant('orders', 'ingest_relay')});
ok(wait_until(90, sub { count_stored('orders') == $before + 30 && lag('orders', 'g1') == 0 }),
	'the grant restored, a new relay writes them')
  or diag(log_of($r3_log));

# The brokers down while the relay waits, then up
InboxTest::kafka_mock($mock, "down $_") for 1 .. 3;
sleep 3;
InboxTest::kafka_mock($mock, "up $_") for 1 .. 3;
produce('orders', map { [ sprintf('r%02d', $_), 'k' . ($_ % 3), qq({"n": $_}) ] } 1 .. 25);
ok(wait_until(120, sub { count_stored('orders') == $before + 55 && lag('orders', 'g1') == 0 }),
	'after the brokers were down, what is produced goes in')
  or diag(log_of($r3_log));
stop_relay($r3);
is(sql(q{SELECT count(*) FROM inbox.entries WHERE scope = 'orders' AND message_id ~ '^[dgr]\d\d$'}), 55,
	'nothing lost, nothing doubled through the faults');
is(sql('SELECT count(*) FROM inbox_ingest_rejects'), 2, 'and none was taken for a reject');

# --- two relays in one group, rebalances ---------------------------------------------------------
my $ship = "kafka://$bs/shipments?group=g2";
sql(qq{SELECT inbox_subscribe('shipments', '$ship', '{"batch": 5, "group_key": "routing_key"}')});
my %log = map { ($_ => "$tmp/relay-$_.log") } 'a', 'b', 'c';
my %pid = map { ($_ => start_relay($log{$_})) } 'a', 'b';
ok(wait_until(60, sub { !grep { log_of($log{$_}) !~ /the group assigned this relay [1-9]/ } 'a', 'b' }),
	'both relays of the group are given partitions')
  or diag(log_of($log{a}), log_of($log{b}));
produce('shipments', map { [ sprintf('s%02d', $_), 'k' . ($_ % 6), qq({"n": $_}) ] } 1 .. 60);
ok(wait_until(60, sub { count_stored('shipments') >= 20 }), 'they write');
stop_relay($pid{a});
ok(wait_until(90, sub { count_stored('shipments') == 60 && lag('shipments', 'g2') == 0 }),
	'one stopped, the other takes its partitions and writes the rest')
  or diag(log_of($log{b}));
$pid{c} = start_relay($log{c});
ok(wait_until(60, sub { log_of($log{c}) =~ /the group assigned this relay [1-9]/ }), 'a relay joins the group')
  or diag(log_of($log{c}));
produce('shipments', map { [ sprintf('s%02d', $_), 'k' . ($_ % 6), qq({"n": $_}) ] } 61 .. 90);
ok(wait_until(90, sub { count_stored('shipments') == 90 && lag('shipments', 'g2') == 0 }),
	'the two write what comes next, and the group\'s lag is 0')
  or diag(log_of($log{b}), log_of($log{c}));
stop_relay($pid{$_}) for 'b', 'c';
is(stored('shipments'), ids('s', 1, 90), 'nothing lost or doubled across the rebalances');
my %ship_taken = take_all('shipments');
is_deeply(
	\%ship_taken,
	{ map { my $k = $_; ("k$k" => [ map { sprintf('s%02d', $_) } grep { $_ % 6 == $k } 1 .. 90 ]) } 0 .. 5 },
	'each key keeps its order across the rebalances');
is(lag('orders', 'g1'), 0, 'the lag of the first group is 0 at the end');

# --- hostile strings: ids, keys and headers arrive exactly, one message each ----------------
# Bytes are given in hex: the strings of this file are UTF-8 bytes.
sub hex_of { return unpack('H*', $_[0]) }
InboxTest::kafka_mock($mock, 'topic strings 1');
sql(q{SELECT inbox_grant('strings', 'ingest_relay')});
my $strings = "kafka://$bs/strings?group=g4";
sql(qq{SELECT inbox_subscribe('strings', '$strings', '{"group_key": "routing_key"}')});
my $long_key = 'k-long-' . ('é' x 508) . 'z';    # 1,024 bytes
my %hostile = (
	q{id "quoted" 'single' \\back ключ 🔑} => 'k "q" ключ',
	'id-long-key' => $long_key,
	'id with  spaces, ; = &' => "k\ttab",
);
InboxTest::run_kafka($bs, [ 'produce', 'strings', [
	(map { { key_hex => hex_of($hostile{$_}), value => '{}',
		headers => [ [ 'message-id', hex_of($_), 'hex' ], [ 'X-Bin', 'ff00fe', 'hex' ] ] } } sort keys %hostile),
	{ key_hex => hex_of('k-bad-id'), value => '{}', headers => [ [ 'message-id', 'c3', 'hex' ] ] } ] ]);
my $rs = start_relay("$tmp/relay-strings.log");
ok(wait_until(60, sub { count_stored('strings') == 4 && lag('strings', 'g4') == 0 }),
	'hostile ids and keys go in, each once')
  or diag(log_of("$tmp/relay-strings.log"));
stop_relay($rs);
my %got = map { split /\x01/, $_, 2 } split /\x02/,
  sql(q{SELECT string_agg(message_id || chr(1) || group_key, chr(2)) FROM inbox_take('strings', 10)});
is_deeply(\%got, { %hostile, 'strings/0/3' => 'k-bad-id' },
	'ids and keys byte for byte; a message-id that is not UTF-8 left out for topic/partition/offset');

# --- check ------------------------------------------------------------------------------------
my $missing = "kafka://$bs/missing?group=g3";
sql(qq{SELECT inbox_subscribe('orders', '$missing')});
my ($out, $err) = ('', '');
IPC::Run::run([ $relay, 'check', '--timeout=5', $conninfo ], '>', \$out, '2>', \$err, IPC::Run::timeout(120));
like($out, qr/^OK \Q$source\E$/m, 'check finds the topic of a source');
like($out, qr/^FAIL \Q$missing\E: topic "missing": .*Unknown topic/m, 'check reports a missing topic')
  or diag($out, $err);
sql(qq{SELECT inbox_unsubscribe('orders', '$missing')});

InboxTest::stop_kafka_mock($mock);
done_testing();
