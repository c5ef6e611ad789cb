# test/t/048_ingest_nats.pl
#
# Ingest: inbox-relay reads a private nats-server's JetStream stream,
# through a durable pull consumer, into an inbox (inbox_subscribe), as a
# role that holds the bundles relay and receiver only, and acknowledges
# each message only after its commit.
#   - ack after commit: a relay paused between its commit and its
#     acknowledgement (INBOX_RELAY_TEST_PAUSE_ACK) and SIGKILLed there
#     loses nothing: the batch comes again, each message a duplicate,
#     acknowledged; every message is in the inbox once;
#   - the subject as group key: inbox_take workers get each subject's
#     messages in the stream's order;
#   - Nats-Msg-Id is the message id, the stream sequence without it; a
#     re-publication of a stored id is a duplicate; other content under a
#     stored id (IB002) and invalid JSON under application/json (after
#     max_attempts) are rejects, and the messages after them go in;
#     headers arrive;
#   - hostile strings: quotes, backslashes, UTF-8 and a 1,024-byte id
#     arrive exactly; a header value's spaces at its ends do not (NATS
#     headers, as HTTP's, drop them);
#   - faults: the database restarted, the scope's grant revoked for a
#     while, nats-server killed and restarted (its store on disk): nothing
#     lost, nothing doubled, the consumer's num_pending and
#     num_ack_pending at 0 at the end.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes;

my $node = InboxTest->node('ingest_nats', conf => "inbox.purge_enabled = off\n");
my $relay = InboxTest::relay_or_skip($node);
plan(skip_all => 'nats-server or libnats-dev not found (test/tools/ensure-deps.sh)') unless InboxTest::have_nats();
plan(skip_all => 'inbox-relay was built without libnats')
  unless `$relay --version` =~ /^sources: .*\bnats\b/m;

my $tmp = PostgreSQL::Test::Utils::tempdir('ingest_nats');
my ($nats_pgid, @relays);
END
{
	local $?;
	kill 'KILL', -$_ for grep { $_ } $nats_pgid, @relays;
}

my ($port, $up);
($port, $nats_pgid, $up) = InboxTest::start_nats("$tmp/nats");
ok($up, 'nats-server with JetStream listens on loopback')
  or BAIL_OUT('nats-server did not start: ' . slurp_file("$tmp/nats/server.log"));
my $tool = InboxTest::build_nats_tool($tmp);

sub nats { return InboxTest::nats_tool($tool, $port, undef, @_) }

# Publish messages, each [subject, id or '-', content type or '-', body, headers...]
sub publish
{
	InboxTest::nats_tool($tool, $port, join('', map { join("\t", @$_) . "\n" } @_), 'publish');
	return;
}

# The consumer's "num_pending N num_ack_pending N"
sub pending { my ($l) = nats('pending', 'ORDERS', 'D'); $l =~ s/ num_redelivered.*//; return $l }

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

sub count_stored { return sql(qq{SELECT count(*) FROM inbox.entries WHERE scope = 'orders'}) }

sub stored { return sql(q{SELECT string_agg(message_id, ',' ORDER BY message_id) FROM inbox.entries WHERE scope = 'orders'}) }

sub ids { my ($p, $from, $to) = @_; return join(',', map { sprintf('%s%02d', $p, $_) } $from .. $to) }

sub messages
{
	my ($p, $from, $to) = @_;
	return map { [ 'orders.k' . ($_ % 3), sprintf('%s%02d', $p, $_), 'application/json', qq({"n": $_}), "trace=t-$_" ] }
	  $from .. $to;
}

# The scope reserved (a worker's grant): the relay writes by its own grant
sql(q{CREATE ROLE ingest_relay LOGIN; CREATE ROLE orders_worker;
	SELECT inbox_grant('orders', 'orders_worker');
	SELECT inbox_grant_bundle('ingest_relay', 'relay');
	SELECT inbox_grant_bundle('ingest_relay', 'receiver');
	SELECT inbox_grant('orders', 'ingest_relay')});

# The stream, and its consumer: a short AckWait, so that a killed relay's
# batch comes again soon; at most a batch unacknowledged.  The stream's
# duplicate window is one second, so that ids published again later reach
# the relay (within the window, JetStream drops them itself).
nats('stream', 'ORDERS', 'orders.>', 0, 1);
nats('consumer', 'ORDERS', 'D', 3, 10);
my $source = "nats://127.0.0.1:$port/ORDERS?consumer=D";
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

# --- ack after commit: a relay killed between its commit and its ack ----------------------
publish(messages('m', 1, 30));
my $pause = "$tmp/pause";
append_to_file($pause, '');
my $r1_log = "$tmp/relay1.log";
my $r1 = start_relay($r1_log, INBOX_RELAY_TEST_PAUSE_ACK => $pause);
ok(wait_until(60, sub { log_of($r1_log) =~ /test pause: waiting after a commit/ }),
	'the relay commits a batch and pauses before its acknowledgement')
  or diag(log_of($r1_log));
is(count_stored(), 10, 'the batch is in the inbox before the stream is acknowledged');
stop_relay($r1, 'KILL');
unlink $pause;
my $r2_log = "$tmp/relay2.log";
my $r2 = start_relay($r2_log);
ok(wait_until(90, sub { count_stored() == 30 && pending() eq 'num_pending 0 num_ack_pending 0' }),
	'a second relay writes the rest, and acknowledges everything')
  or diag(log_of($r2_log), pending());
is(stored(), ids('m', 1, 30), 'after the kill, every message is in the inbox once');

# --- per-subject order through inbox_take -------------------------------------------------
sql(q{CREATE TABLE taken (n serial, id text, key text)});
my %by_key;
for my $row (split /\n/, sql(q{
		DO $$
		DECLARE r record; got boolean := true;
		BEGIN
			WHILE got LOOP
				got := false;
				FOR r IN SELECT * FROM inbox_take('orders', 100) LOOP
					got := true;
					INSERT INTO taken (id, key) VALUES (r.message_id, r.group_key);
					PERFORM inbox_complete('orders', r.message_id);
				END LOOP;
				COMMIT;
			END LOOP;
		END $$;
		SELECT key || ' ' || id FROM taken ORDER BY n}))
{
	my ($key, $id) = split / /, $row;
	push @{ $by_key{$key} }, $id;
}
is_deeply(\%by_key,
	{ map { my $k = $_; ("orders.k$k" => [ map { sprintf('m%02d', $_) } grep { $_ % 3 == $k } 1 .. 30 ]) } 0 .. 2 },
	'inbox_take hands out each subject\'s messages in the stream\'s order');
is(sql(q{SELECT headers->>'trace' FROM inbox.entries WHERE scope = 'orders' AND message_id = 'm07'}), 't-7',
	'headers arrive with the message')
  if sql(q{SELECT count(*) FROM information_schema.columns WHERE table_schema = 'inbox' AND table_name = 'entries'
	AND column_name = 'headers'});

# --- duplicates, IB002, invalid JSON, no Nats-Msg-Id, bytes ------------------------------
publish([ 'orders.k2', 'm05', 'application/json', '{"n": 5}' ],
	[ 'orders.k0', 'm06', 'application/json', '{"n": "other"}' ]);
ok(wait_until(60, sub { sql('SELECT count(*) FROM inbox_ingest_rejects') == 1 }),
	'other content under a stored id is a reject')
  or diag(log_of($r2_log), pending());
publish([ 'orders.k1', 'bad', 'application/json', '{not json' ],
	[ 'orders.k1', 'm31', 'application/json', '{"n": 31}' ],
	[ 'orders.k2', '-', 'text/plain', 'raw bytes' ]);
ok(wait_until(60, sub { count_stored() == 32 && pending() eq 'num_pending 0 num_ack_pending 0' }),
	'the messages after refused ones go in, and everything is acknowledged')
  or diag(log_of($r2_log), pending());
is(sql('SELECT count(*) FROM inbox_ingest_rejects'), 2, 'two rejects are recorded');
like(sql(q{SELECT string_agg(reason, ' | ' ORDER BY reason) FROM inbox_ingest_rejects}),
	qr/^22P02: invalid input syntax for type json \(after 5 attempts\) \| IB002: .*"m06"/,
	'invalid JSON after max_attempts, and other content under a stored id (IB002)');
is(sql(q{SELECT count(*) FROM inbox.entries WHERE scope = 'orders' AND message_id = 'm05'}), 1,
	'a re-publication of a stored id is a duplicate');
like(sql(q{SELECT message_id || ' ' || encode(payload_bytes, 'escape') FROM inbox.entries
	WHERE scope = 'orders' AND message_id LIKE 'ORDERS/%'}), qr{^ORDERS/\d+ raw bytes$},
	'without Nats-Msg-Id, the id is the stream sequence; text/plain is stored as bytea');

# --- faults: the database restarted, the grant revoked, the server restarted --------------
my $before = count_stored();
$node->stop('immediate');
publish(messages('d', 1, 20));
$node->start;
ok(wait_until(90, sub { count_stored() == $before + 20 && pending() eq 'num_pending 0 num_ack_pending 0' }),
	'messages published while the database is down go in once it is back')
  or diag(log_of($r2_log), pending());

sql(q{SELECT inbox_revoke('orders', 'ingest_relay')});
publish(messages('g', 1, 10));
ok(wait_until(60, sub { log_of($r2_log) =~ /not written, handed back to the broker: 42501/ }),
	'with the grant revoked, the batch is refused with 42501 and handed back')
  or diag(log_of($r2_log));
is(count_stored(), $before + 20, 'nothing of it is in the inbox meanwhile');
sql(q{SELECT inbox_grant('orders', 'ingest_relay')});
ok(wait_until(90, sub { count_stored() == $before + 30 && pending() eq 'num_pending 0 num_ack_pending 0' }),
	'the grant restored, the messages go in')
  or diag(log_of($r2_log), pending());

kill 'KILL', -$nats_pgid;
waitpid($nats_pgid, 0);
($nats_pgid, $up) = InboxTest::run_nats("$tmp/nats");
ok($up, 'nats-server is started again, its store kept');
publish(messages('r', 1, 25));
ok(wait_until(120, sub { count_stored() == $before + 55 && pending() eq 'num_pending 0 num_ack_pending 0' }),
	'after the server\'s restart, the relay reconnects and writes what comes')
  or diag(log_of($r2_log), pending());
stop_relay($r2);
is(sql(q{SELECT count(*) FROM inbox.entries WHERE scope = 'orders' AND message_id ~ '^[dgr]\d\d$'}), 55,
	'nothing lost, nothing doubled through the faults');
is(pending(), 'num_pending 0 num_ack_pending 0', 'the consumer has nothing pending or unacknowledged');

# --- hostile strings: ids and headers arrive exactly, one message each ---------------------------
# NATS headers are text lines: quotes, backslashes, UTF-8 and the longest
# id the inbox keeps travel as they are.  (This file's strings are UTF-8
# bytes; compared in hex.)
my %hostile = (
	'h1' => [ q{it's "quoted" \\ back}, q{a "b" 'c' \\ d} ],
	'h2' => [ "\x{c3}\x{bc}n\x{c3}\x{af}c\x{c3}\x{b8}d\x{c3}\x{a9} \x{e2}\x{9c}\x{93}", "\x{e2}\x{82}\x{ac} 100" ],
	'h3' => [ 'x' x 1024, ' leading and trailing ', 'leading and trailing' ],);
my $r3_log = "$tmp/relay3.log";
my $r3 = start_relay($r3_log);
publish(map { [ 'orders.hostile', $hostile{$_}[0], 'application/json', qq({"h": "$_"}), "x-note=$hostile{$_}[1]" ] }
	  sort keys %hostile);
ok(wait_until(60, sub { sql(q{SELECT count(*) FROM inbox.entries WHERE scope = 'orders' AND payload ? 'h'}) == 3 }),
	'the three messages with hostile ids and headers go in')
  or diag(log_of($r3_log));
stop_relay($r3);
for my $h (sort keys %hostile)
{
	is( sql(qq{SELECT encode(convert_to(message_id, 'UTF8'), 'hex') || ' ' || encode(convert_to(headers ->> 'x-note', 'UTF8'), 'hex')
		FROM inbox.entries WHERE scope = 'orders' AND payload ->> 'h' = '$h'}),
		unpack('H*', $hostile{$h}[0]) . ' ' . unpack('H*', $hostile{$h}[2] // $hostile{$h}[1]),
		"message $h: its id and its header arrive byte for byte"
		  . ($hostile{$h}[2] ? ', but the spaces at the value\'s ends, which NATS, as HTTP, does not keep' : ''));
}

# --- check ----------------------------------------------------------------------------------------
my $missing = "nats://127.0.0.1:$port/MISSING?consumer=D";
sql(qq{SELECT inbox_subscribe('orders', '$missing')});
my ($out, $err) = ('', '');
IPC::Run::run([ $relay, 'check', $conninfo ], '>', \$out, '2>', \$err);
like($out, qr/^OK \Q$source\E$/m, 'check finds a source\'s stream') or diag($out, $err);
like($out, qr/^FAIL \Q$missing\E: the stream: .*10059/m, 'check reports a missing stream');

done_testing();
