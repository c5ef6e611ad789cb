# test/t/041_relay_watch.pl
#
# Watching the relay:
#   - inbox-relay check: one line per routed target, OK or the reason, and
#     a non-zero exit status when one fails (a target at a port where
#     nothing listens); 0 once every target is OK; nothing delivered;
#   - outbox_relays: one row per running relay process (its target, host
#     and pid, started, last fetch, delivered and failed), readable by the
#     operator bundle and not by the relay's role; a process killed with
#     SIGKILL leaves it within 10 s, and the process started in its place
#     has a row of its own;
#   - --metrics=HOST:PORT: Prometheus text, scraped by Debian's prometheus
#     and linted by promtool; the delivered counter does not go down when
#     the child is killed with SIGKILL; every inbox_relay_ metric of
#     monitoring/alerts.yml and of the dashboard is one the relay exports;
#   - the endpoint ends with the relay.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use HTTP::Tiny;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Sys::Hostname;
use Test::More;
use Time::HiRes qw(sleep time);

my $node = InboxTest->node('relay_watch', conf => "inbox.purge_enabled = off\n");
my $relay = InboxTest::relay_or_skip($node);
my $tmp = PostgreSQL::Test::Utils::tempdir('relay_watch');
my $kit = "$FindBin::RealBin/../../monitoring";
my @groups;
END
{
	local $?;
	kill 'KILL', -$_ for @groups;
}

$node->safe_psql('postgres', q{
	CREATE DATABASE down;
	CREATE ROLE relay_user LOGIN;
	CREATE ROLE ops LOGIN;
	SELECT inbox_grant_bundle('relay_user', 'relay');
	SELECT inbox_grant_bundle('ops', 'operator');
});
$node->safe_psql('down', q{
	CREATE EXTENSION inbox;
	SELECT inbox_grant_bundle('relay_user', 'receiver');
});
my $host = $node->host;
my $port = $node->port;
my $conninfo = "host=$host port=$port dbname=postgres user=relay_user";
my $good = "postgresql:///down?host=$host&port=$port&user=relay_user&scope=orders";
my $closed_port = PostgreSQL::Test::Cluster::get_free_port();
my $bad = "postgresql:///down?host=127.0.0.1&port=$closed_port&user=relay_user&scope=orders";
$node->sql(qq{
	SELECT outbox_route('orders', '$good');
	SELECT outbox_route('lost', '$bad');
	SELECT outbox_send('orders', 'k' || g, jsonb_build_object('n', g)) FROM generate_series(1, 5) g;
});

# --- inbox-relay check -----------------------------------------------------------

sub check
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ $relay, 'check', '--timeout=3', $conninfo ], '>', \$out, '2>', \$err,
		IPC::Run::timeout(60));
	note($err) if $err ne '';
	return ($? >> 8, $out);
}
my ($status, $out) = check();
is($status, 1, 'check: a failing target makes the exit status 1');
my @lines = split /\n/, $out;
is(scalar(@lines), 3, 'check: a line for the database and one per target') or diag($out);
is($lines[0], 'OK database', 'check: the database is OK');
ok((grep { $_ eq "OK $good" } @lines), 'check: the good target is OK') or diag($out);
like((grep { /^FAIL \Q$bad\E: / } @lines)[0] // '', qr/^FAIL \Q$bad\E: .*\S/,
	'check: the target where nothing listens FAILs, with the reason') or diag($out);
is($node->safe_psql('down', 'SELECT count(*) FROM inbox.entries'), 0, 'check: nothing was delivered');
is($node->safe_psql('postgres', "SELECT pending FROM outbox_stats WHERE target = '$good'"),
	5, 'check: nothing was fetched or acknowledged');

$node->sql(qq{SELECT outbox_unroute('lost', '$bad')});
($status, $out) = check();
is($status, 0, 'check: every target OK, exit status 0');
is($out, "OK database\nOK $good\n", 'check: and its lines');

($status, $out) = (0, '');
IPC::Run::run([ $relay, 'check', "host=$host port=$closed_port dbname=postgres" ], '>', \$out, '2>', \my $err);
is($? >> 8, 1, 'check: a database that cannot be reached makes the exit status 1');
is($out, "FAIL database: cannot connect\n", 'check: and says so');

# --- a relay with --metrics --------------------------------------------------------

my $mport = PostgreSQL::Test::Cluster::get_free_port();
my $supervisor = InboxTest::start_group("$tmp/relay.log", {}, $relay, '--wait=1', "--metrics=127.0.0.1:$mport",
	$conninfo);
push @groups, $supervisor;

# A bounded wait for $cond
sub wait_for
{
	my ($cond, $seconds) = @_;
	my $end = time + ($seconds // $PostgreSQL::Test::Utils::timeout_default);
	while (time < $end)
	{
		my $v = $cond->();
		return $v if $v;
		sleep 0.1;
	}
	return undef;
}

sub relays
{
	return $node->safe_psql('postgres',
		q{SELECT target, host, pid, started_at <= now(), last_fetch_at IS NOT NULL, delivered, failed
		    FROM outbox_relays ORDER BY pid}, extra_params => [ '-U', 'ops' ]);
}

ok(wait_for(sub { relays() =~ /\|5\|0$/ }), 'outbox_relays: the relay reports the five messages delivered')
  or diag(relays() . "\n" . slurp_file("$tmp/relay.log"));
my ($row) = relays();
my ($target, $rhost, $child, $started, $fetched, $delivered, $failed) = split /\|/, $row;
is($target, $good, 'outbox_relays: its target');
is($rhost, hostname(), 'outbox_relays: its host');
ok($child != $supervisor && kill(0, $child), "outbox_relays: its pid, the child's ($child), not the supervisor's");
is("$started|$fetched", 't|t', 'outbox_relays: started, and its last fetch');
my ($rc, $o, $e) = $node->psql('postgres', 'SELECT * FROM outbox_relays', extra_params => [ '-U', 'relay_user' ]);
like($e, qr/permission denied/, 'outbox_relays: the relay bundle writes it, and does not read it');

# --- the endpoint --------------------------------------------------------------------

my $http = HTTP::Tiny->new(timeout => 10);
sub scrape
{
	my $r = $http->get("http://127.0.0.1:$mport/metrics");
	return $r->{success} ? $r->{content} : undef;
}

sub value
{
	my ($body, $series) = @_;
	return $body =~ /^\Q$series\E (\S+)$/m ? $1 : undef;
}
my $body = wait_for(sub { my $b = scrape(); $b && (value($b, qq{inbox_relay_delivered_total{target="$good"}}) // 0) == 5 && $b });
ok($body, 'metrics: delivered_total is 5') or diag(scrape() // 'no answer');
$body //= '';
is(value($body, qq{inbox_relay_failed_total{target="$good"}}), 0, 'metrics: failed_total 0');
is(value($body, qq{inbox_relay_dead_total{target="$good"}}), 0, 'metrics: dead_total 0');
is(value($body, qq{inbox_relay_in_flight{target="$good"}}), 0, 'metrics: nothing in flight');
is(value($body, qq{inbox_relay_up{target="$good"}}), 1, 'metrics: up');
my $count = value($body, qq{inbox_relay_batch_duration_seconds_count{target="$good"}}) // 0;
cmp_ok($count, '>=', 1, "metrics: batches counted ($count)");
is(value($body, qq{inbox_relay_batch_duration_seconds_bucket{target="$good",le="+Inf"}}),
	$count, 'metrics: the +Inf bucket holds every batch');
is($http->get("http://127.0.0.1:$mport/other")->{status}, 404, 'metrics: another path is 404');

my %exported;
$exported{$1} = 1 while $body =~ /^# TYPE (\S+) /mg;

SKIP:
{
	my $promtool = '/usr/bin/promtool';
	skip "$promtool not found: install Debian's prometheus package (test/tools/ensure-deps.sh)", 1
	  unless -x $promtool;
	my ($po, $pe) = ('', '');
	my $ok = IPC::Run::run([ $promtool, 'check', 'metrics' ], '<', \$body, '>', \$po, '2>', \$pe);
	ok($ok && $po . $pe !~ /\S/, 'promtool check metrics finds nothing to say') or diag("$po$pe");
}

# Debian's prometheus scrapes it, as a job named inbox-relay
SKIP:
{
	my $prometheus = '/usr/bin/prometheus';
	skip "$prometheus not found: install Debian's prometheus package (test/tools/ensure-deps.sh)", 1
	  unless -x $prometheus;
	my $pport = PostgreSQL::Test::Cluster::get_free_port();
	append_to_file("$tmp/prometheus.yml", qq{global:
  scrape_interval: 1s
scrape_configs:
  - job_name: inbox-relay
    static_configs:
      - targets: ['127.0.0.1:$mport']
});
	push @groups, InboxTest::start_group("$tmp/prometheus.log", {}, $prometheus,
		"--config.file=$tmp/prometheus.yml", "--storage.tsdb.path=$tmp/tsdb",
		"--web.listen-address=127.0.0.1:$pport");
	my $query = sub {
		my $r = $http->get("http://127.0.0.1:$pport/api/v1/query?query="
			  . 'sum(inbox_relay_delivered_total%7Bjob%3D%22inbox-relay%22%7D)');
		return undef unless $r->{success};
		my $res = decode_json($r->{content})->{data}{result} // [];
		return @$res ? $res->[0]{value}[1] : undef;
	};
	is(wait_for(sub { ($query->() // 0) == 5 }, 60) ? 5 : $query->(), 5,
		'prometheus scrapes the endpoint: 5 delivered')
	  or diag(slurp_file("$tmp/prometheus.log"));
}

# Every relay metric of the alerts and the dashboard is one the relay exports
my @names;
push @names, /\b(inbox_relay_[a-z_]+)/g for slurp_file("$kit/alerts.yml"), slurp_file("$kit/grafana-dashboard.json");
my %seen;
@names = grep { !$seen{$_}++ } map { s/_(bucket|sum|count)$//r } @names;
cmp_ok(scalar(@names), '>=', 4, 'the alerts and the dashboard use the relay\'s metrics (' . scalar(@names) . ')');
ok($exported{$_}, "$_ is exported by the relay") for @names;

# --- SIGKILL of the child ------------------------------------------------------------

kill 'KILL', $child;
ok(wait_for(sub { relays() !~ /\|$child\|/ }, 10), 'outbox_relays: the killed process\'s row is gone within 10 s')
  or diag(relays());
my $next = wait_for(sub { my ($r) = relays(); $r && (split /\|/, $r)[2] != $child && (split /\|/, $r)[2] }, 30);
ok($next, "outbox_relays: the process started in its place has its row ($next)") or diag(relays());
$body = scrape() // '';
is(value($body, qq{inbox_relay_delivered_total{target="$good"}}), 5,
	'metrics: delivered_total did not go down with the killed child');

$node->sql(q{SELECT outbox_send('orders', 'k' || g, jsonb_build_object('n', g)) FROM generate_series(6, 8) g});
ok(wait_for(sub { (value(scrape() // '', qq{inbox_relay_delivered_total{target="$good"}}) // 0) == 8 }),
	'metrics: and counts on from there: 8') or diag(scrape());
ok(wait_for(sub { relays() =~ /\|3\|0$/ }), 'outbox_relays: the new process counts since its start: 3')
  or diag(relays());
is($node->safe_psql('down', 'SELECT count(DISTINCT message_id) FROM inbox.entries'), 8,
	'every message arrived');

# --- the endpoint ends with the relay ------------------------------------------------

kill 'TERM', $supervisor;
waitpid($supervisor, 0);
ok(wait_for(sub { !scrape() }, 10), 'the endpoint is gone once the relay stopped');
ok(wait_for(sub { relays() eq '' }, 10), 'outbox_relays is empty once the relay stopped');

done_testing();
