# test/t/039_relay_daemon.pl
#
# inbox-relay as a daemon, against an HTTP sink served by this file:
# - --version names the schemes the relay serves, as outbox_schemes() does;
# - a child paused between its fetch and its send until its lease ran
#   out (the test-only pause point) does not send its stale batch, while
#   another relay delivers the keys' next messages: per key, no delivery
#   goes back in position;
# - a message whose headers cannot be read fails alone, its batch-mates
#   delivered;
# - a route added while the relay runs with --refresh=3600 is picked up
#   (on the routes' notification) and delivered to; dropped likewise;
# - a child that fails at once is started again after 1, 2, 4 ... s;
# - a relay built without librdkafka and libnats (RELAY_WITHOUT) leaves
#   kafka and nats out of --version, and its target of a scheme it does
#   not serve is not restarted;
# - children die with their supervisor (SIGKILL), and a new relay
#   delivers what they had leased;
# - --verbose logs per batch, and twice per delivery.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use IPC::Run;
use POSIX qw(WNOHANG);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

my $node = InboxTest->node('relay_daemon', conf => "inbox.purge_enabled = off\n");
my $relay = InboxTest::relay_or_skip($node);

my $tmp = PostgreSQL::Test::Utils::tempdir('relay_daemon');
my $top = "$FindBin::RealBin/../..";
my @groups;
END
{
	local $?;
	kill 'KILL', -$_ for @groups;
}

# --- the sink -----------------------------------------------------------------------
# InboxTest's: a process per connection, keep-alive.  Each request is a
# line of $sink_log, "path key position", appended at once, in the order
# served.  Requests for keys ks-* are answered after 0.3 s.
my $sink_log = "$tmp/sink.log";
my ($http_port) = InboxTest::start_http_sink(request => sub {
	my ($r) = @_;
	my $key = $r->{headers}{'outbox-key'} // '-';
	sleep 0.3 if $key =~ /^ks-/;
	open(my $log, '>>', $sink_log) or die;
	syswrite($log, "$r->{path} $key " . ($r->{headers}{'outbox-position'} // '-') . "\n");
	close $log;
	return 200;
});

sub sink_lines
{
	my ($path) = @_;
	return () unless -e $sink_log;
	return map { my @f = split / /; [ @f[ 1, 2 ] ] } grep { /^\Q$path\E / } split /\n/,
	  slurp_file($sink_log);
}

# Wait up to $seconds for $cond->(), true once it holds
sub wait_until
{
	my ($seconds, $cond) = @_;
	my $deadline = time() + $seconds;
	while (time() < $deadline)
	{
		return 1 if $cond->();
		sleep 0.1;
	}
	return $cond->() ? 1 : 0;
}

sub log_of
{
	my ($file) = @_;
	return -e $file ? slurp_file($file) : '';
}

$node->safe_psql('postgres', q{
	CREATE ROLE relay_user LOGIN;
	SELECT inbox_grant_bundle('relay_user', 'relay');
	CREATE ROLE stranger LOGIN;
});
my $conninfo = 'host=' . $node->host . ' port=' . $node->port . ' dbname=postgres user=relay_user';
my $hook = "http://127.0.0.1:$http_port/hook";

# A relay in the background, in a process group of its own
sub start_relay
{
	my ($log, $env, @args) = @_;
	my $bin = ref $args[0] eq 'SCALAR' ? ${ shift @args } : $relay;
	my $pid = InboxTest::start_group($log, $env, $bin, @args);
	push @groups, $pid;
	return $pid;
}

sub stop_relay
{
	my ($pid) = @_;
	kill 'TERM', $pid;
	wait_until(30, sub { waitpid($pid, WNOHANG) != 0 });
	kill 'KILL', -$pid;
}

# Per key, the positions delivered, in the order served; whether each
# goes forward
sub in_order
{
	my (@lines) = @_;
	my %last;
	for (@lines)
	{
		my ($k, $p) = @$_;
		return 0 if defined $last{$k} && $p <= $last{$k};
		$last{$k} = $p;
	}
	return 1;
}

# --- --version and the SQL's schemes --------------------------------------------------
my ($out, $err) = ('', '');
ok(IPC::Run::run([ $relay, '--version' ], '>', \$out, '2>', \$err), 'inbox-relay --version ends well');
my @version = split /\n/, $out;
like($version[0], qr/^inbox-relay \d+\.\d+\.\d+$/, '--version: line 1 names the version');
like($version[1], qr/^schemes: [a-z]+( [a-z]+)*$/, '--version: line 2 lists the schemes');
my ($schemes) = $version[1] =~ /^schemes: (.*)$/;
SKIP:
{
	skip 'outbox_schemes() does not exist in this build of the extension', 1
	  unless $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_proc WHERE proname = 'outbox_schemes'") > 0;
	is(join(' ', sort split / /, $schemes),
		$node->safe_psql('postgres', q{SELECT string_agg(scheme, ' ' ORDER BY scheme) FROM outbox_schemes()}),
		'the schemes of --version are those of outbox_schemes()');
}

# --- no delivery after the lease --------------------------------------------------------
# Relay A fetches ka's and kb's first messages, and waits at the pause
# point until its lease (3 s) has run out.  Relay B then delivers every
# message of both keys.  Released, A must not send its stale batch.
$node->sql("SELECT outbox_route('orders', '$hook', '{\"backoff\": \"1 second\"}')");
$node->sql(q{
	SELECT outbox_send('orders', k, pg_catalog.jsonb_build_object('n', n))
	FROM unnest(ARRAY['ka', 'kb']) AS k, generate_series(1, 4) AS n ORDER BY n, k;
});
my $pause = "$tmp/pause";
PostgreSQL::Test::Utils::append_to_file($pause, '');
my $a_log = "$tmp/relay-a.log";
my $a = start_relay($a_log, { INBOX_RELAY_TEST_PAUSE => $pause },
	'-v', '--lease=3', '--wait=1', "--target=$hook", $conninfo);
ok(wait_until(30, sub { log_of($a_log) =~ /test pause: waiting after a fetch/ }),
	'relay A fetched, and waits at the pause point');
my $b_log = "$tmp/relay-b.log";
my $b = start_relay($b_log, {}, '--wait=1', "--target=$hook", $conninfo);
ok(wait_until(60, sub { sink_lines('/hook') >= 8 }),
	'relay B delivers the eight messages once A\'s lease ran out');
stop_relay($b);
unlink $pause or die "unlink: $!";
ok(wait_until(30, sub { log_of($a_log) =~ /is not sent|batch of \d+ settled/ }),
	'relay A, released, settles or drops its batch');
like(log_of($a_log), qr/a batch of 2 message\(s\) is not sent: [\d.]+ s of its lease are left/,
	'relay A says it does not send the batch whose lease ran out');
my @hook = sink_lines('/hook');
is(scalar @hook, 8, 'each message reached the sink once');
ok(in_order(@hook), 'per key, no delivery goes back in position')
  or diag(join("\n", map { "@$_" } @hook));
stop_relay($a);

# --- a message whose headers cannot be read fails alone -----------------------------------
# outbox_send refuses such headers: the row is changed under it, as an
# older outbox may hold one
$node->sql("SELECT outbox_route('hdr', '$hook', '{\"max_attempts\": 1, \"backoff\": \"1 second\"}')");
$node->sql(q{
	SELECT outbox_send('hdr', k, '{"n": 1}'::jsonb, '{"trace": "t"}'::jsonb)
	FROM unnest(ARRAY['kc', 'kd', 'ke']) AS k;
	UPDATE inbox.outbox_messages SET headers = '[1, 2]' WHERE topic = 'hdr' AND key = 'kd';
});
IPC::Run::run([ $relay, '--once', '-vv', '--lease=5', "--target=$hook", $conninfo ],
	'>', \$out, '2>', \$err, IPC::Run::timeout(60));
note($err);
is_deeply([ sort map { $_->[0] } grep { $_->[0] =~ /^k[cde]$/ } sink_lines('/hook') ], [ 'kc', 'ke' ],
	'the batch-mates of the unreadable message are delivered');
is($node->safe_psql('postgres', q{SELECT state::text || ' ' || attempts FROM inbox.outbox_deliveries
	WHERE topic = 'hdr' AND key = 'kd'}), 'x 1', 'the unreadable message counts one attempt, and is dead');
like($err, qr/cannot read its headers/, 'the relay says why');
like($err, qr/batch of 2 sent .*batch of 3 settled: 2 delivered, 1 not/s, '-v: a line per batch');
is(scalar(() = $err =~ /message \S+ \(key "k[ce]", position \d+\) delivered/g), 2,
	'-vv: a line per delivered message');
unlike(log_of($b_log), qr/batch of|delivered$/m, 'without --verbose, neither');

# --- routes picked up and dropped within a second of their change ---------------------------
# outbox_route and outbox_unroute notify; the NOTIFY beside them stands for
# that where this build of the extension lacks it (a second one is harmless)
my $late = "http://127.0.0.1:$http_port/late";
my $r_log = "$tmp/relay-routes.log";
my $r = start_relay($r_log, {}, '--refresh=3600', '--wait=1', $conninfo);
ok(wait_until(30, sub { log_of($r_log) =~ /target \Q$hook\E: process \d+ started/ }),
	'the relay started a process for the route it read');
$node->sql("BEGIN; SELECT outbox_route('late', '$late'); SELECT pg_notify('inbox_outbox_routes', '$late');
	COMMIT; SELECT outbox_send('late', 'kl', '{\"n\": 1}'::jsonb)");
ok(wait_until(15, sub { sink_lines('/late') >= 1 }),
	'a route added while the relay runs with --refresh=3600 is delivered to');
like(log_of($r_log), qr/target \Q$late\E picked up/, 'the relay says it picked the target up');
$node->sql("BEGIN; SELECT outbox_unroute('late', '$late'); SELECT pg_notify('inbox_outbox_routes', '$late');
	COMMIT");
ok(wait_until(15, sub { log_of($r_log) =~ /target \Q$late\E dropped/ }),
	'a route dropped is noticed, and the relay says so');
stop_relay($r);

# --- supervisor backoff ----------------------------------------------------------------------
# A role without the relay bundle: each child's fetch is refused, and it
# ends at once
my $f_log = "$tmp/relay-fail.log";
my $f = start_relay($f_log, {}, "--target=$hook",
	'host=' . $node->host . ' port=' . $node->port . ' dbname=postgres user=stranger');
ok(wait_until(60, sub { log_of($f_log) =~ /starting it again in 4 s/ }),
	'the failing child was started again three times');
stop_relay($f);
my @delays = log_of($f_log) =~ /starting it again in (\d+) s/g;
is("@delays[0 .. 2]", '1 2 4', 'the delays double: 1, 2, 4 s');
my $starts = () = log_of($f_log) =~ /process \d+ started/g;
cmp_ok($starts, '<=', scalar(@delays) + 1, 'one start per delay, no more');

# --- a scheme this relay does not serve ------------------------------------------------------
# A relay built without librdkafka and libnats (RELAY_WITHOUT, as on a
# machine without them) serves the other schemes, and leaves kafka and
# nats out of --version.  A route to kafka:// is then not served: the
# child records the reason as the route's last error (outbox_report), and
# is not started again.
my $lean_src = "$tmp/lean";
my ($make_out, $make_err) = ('', '');
ok( IPC::Run::run(
		[
			'sh', '-c',
			"mkdir -p '$lean_src/relay' && cp '$top/inbox.control' '$lean_src/' && "
			  . "cp '$top'/relay/*.c '$top'/relay/*.h '$top/relay/Makefile' '$lean_src/relay/' && "
			  . "make -s -C '$lean_src/relay' RELAY_WITHOUT='kafka nats' PG_CONFIG='"
			  . $node->config_data('--bindir') . "/pg_config'"
		],
		'>', \$make_out, '2>', \$make_err),
	'the relay builds without Kafka and NATS (RELAY_WITHOUT)') or diag($make_err);
my $lean = "$lean_src/relay/inbox-relay";
($out, $err) = ('', '');
IPC::Run::run([ $lean, '--version' ], '>', \$out, '2>', \$err);
my ($lean_schemes) = $out =~ /^schemes: (.*)$/m;
my ($lean_sources) = $out =~ /^sources: (.*)$/m;
is(join(' ', sort split / /, $lean_schemes), join(' ', sort grep { !/^(?:kafka|nats)$/ } split / /, $schemes),
	'without the libraries, --version lists every scheme but kafka and nats');
is($lean_sources, 'amqp amqps', 'and every source but kafka and nats');
like($schemes, qr/\bkafka\b.*\bnats\b|\bnats\b.*\bkafka\b/, 'with them, it lists kafka and nats');
my $kafka = 'kafka://127.0.0.1:9/orders';
$node->safe_psql('postgres', "SELECT outbox_route('unserved', '$kafka')");
my $u_log = "$tmp/relay-unserved.log";
my $u = start_relay($u_log, {}, \$lean, "--target=$kafka", $conninfo);
my $unserved_error = sub {
	$node->safe_psql('postgres', q{SELECT coalesce(last_error, '(none)') || ' / ' || (last_error_at IS NOT NULL)
		FROM outbox_stats WHERE topic = 'unserved'});
};
ok(wait_until(30, sub { $unserved_error->() =~ /serves no such scheme/ }),
	'the route\'s last error is recorded');
like($unserved_error->(), qr/^this relay serves no such scheme; it serves: \Q$lean_schemes\E \/ true$/,
	'outbox_stats: last_error says the scheme is not served, and names those served; last_error_at is set');
like(log_of($u_log), qr/no transport for this target/, 'the relay says it serves no such scheme');
unlike(log_of($u_log), qr/recording that failure failed/, 'recording the failure did not fail');
sleep 3;
my $u_starts = () = log_of($u_log) =~ /process \d+ started/g;
is($u_starts, 1, 'a target of a scheme not served is not started again');
stop_relay($u);
$node->safe_psql('postgres', "SELECT outbox_unroute('unserved', '$kafka')");

# --- children die with their supervisor ------------------------------------------------------
$node->sql("SELECT outbox_route('slow', '$hook', '{\"backoff\": \"1 second\"}')");
$node->sql(q{
	SELECT outbox_send('slow', 'ks-' || k, pg_catalog.jsonb_build_object('n', n))
	FROM generate_series(1, 16) AS k, generate_series(1, 3) AS n ORDER BY n, k;
});
my $k_log = "$tmp/relay-killed.log";
my $k = start_relay($k_log, {}, '--lease=3', '--wait=1', "--target=$hook", $conninfo);
ok(wait_until(30, sub { grep { $_->[0] =~ /^ks-/ } sink_lines('/hook') }), 'the relay delivers');
my @children = log_of($k_log) =~ /process (\d+) started/g;
ok(@children > 0, 'the relay started its children');
kill 'KILL', $k;
waitpid($k, 0);

# A child reparented to a process that does not reap it is a zombie: dead
sub alive
{
	my ($pid) = @_;
	return 0 unless kill 0, $pid;
	my $stat = -e "/proc/$pid/stat" ? slurp_file("/proc/$pid/stat") : '';
	return $stat !~ /^\d+ \(.*\) [ZX]/;
}
ok(wait_until(2, sub { !grep { alive($_) } @children }),
	'no child is left 2 s after its supervisor was killed')
  or diag("left: " . join(' ', grep { alive($_) } @children));
my $n_log = "$tmp/relay-next.log";
my $next = start_relay($n_log, {}, '--wait=1', "--target=$hook", $conninfo);
ok(wait_until(60, sub {
			$node->safe_psql('postgres', q{SELECT count(*) FROM inbox.outbox_deliveries WHERE topic = 'slow'}) == 0
		}),
	'a new relay delivers what the killed one had leased');
stop_relay($next);
my %ks = map { ($_->[0] . '#' . $_->[1] => 1) } grep { $_->[0] =~ /^ks-/ } sink_lines('/hook');
is(scalar keys %ks, 48, 'every message of the slow topic reached the sink');

done_testing();
