# test/t/027_outbox_e2e.pl
#
# The whole boundary, end to end, under faults: RabbitMQ queue A →
# forwarders (examples/python/forwarder.py) that claim each invoice, write
# it and send a notice to the outbox in one transaction → inbox-relay →
# queue B (single active consumer, prefetch 1) → downstream consumers
# (examples/python/downstream.py) that claim each notice and write it.
# Forwarders take back a tenth of their sends (by a savepoint, or by a
# serialization failure that rolls the transaction back and retries it).
# While it runs, forwarders and the relay are killed with SIGKILL several
# times, and the PostgreSQL server once.  In the end: every invoice has
# exactly one row and one notice, every notice exactly one row
# downstream, no taken-back send arrived, nothing was lost, and each
# customer's notices were applied in the order of their positions.
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

my $top = "$FindBin::RealBin/../..";
my $examples = "$top/examples";
my $invoices = 300;

my $node = InboxTest->node('outbox_e2e', conf => "inbox.purge_enabled = off\nmax_connections = 60\n");
my $relay = InboxTest::relay_or_skip($node, rabbitmq => 1);
plan skip_all => 'python3 with psycopg 3 not found (test/tools/ensure-deps.sh)'
  unless system('python3', '-c', 'import psycopg') == 0;

my $tmp = PostgreSQL::Test::Utils::tempdir('outbox_e2e');
my ($broker_pgid, %procs);
END
{
	local $?;
	kill 'KILL', -$broker_pgid if $broker_pgid;
	kill 'KILL', -$_->{pid} for grep { $_->{pid} } values %procs;
}

my ($amqp_port, $up);
($amqp_port, $broker_pgid, $up) = InboxTest::start_rabbitmq("$tmp/rabbitmq");
ok($up, 'RabbitMQ listens on loopback') or BAIL_OUT('RabbitMQ did not start');
my $amqp_url = "amqp://guest:guest\@127.0.0.1:$amqp_port/%2F";

$node->sql(slurp_file("$examples/schema.sql"));
$node->sql(q{CREATE ROLE relay_user LOGIN; SELECT inbox_grant_bundle('relay_user', 'relay')});
# The last consumer checks each key's order: the outbox's headers carry it
my $target = "amqp://guest\@127.0.0.1:$amqp_port/%2F?routing_key=notices&outbox_headers=true";
$node->sql(qq{SELECT outbox_route('invoice-booked', '$target',
	'{"backoff": "0.2 seconds", "max_backoff": "2 seconds", "max_attempts": 1000}')});
my $secrets = "$tmp/secrets";
append_to_file($secrets, "$target guest\n");
chmod 0600, $secrets;

# Each process in a process group of its own, its output in a log file
my %env = (
	PGHOST => $node->host, PGPORT => $node->port, PGDATABASE => 'postgres',
	PGUSER => scalar(getpwuid($>)), AMQP_URL => $amqp_url, PYTHONUNBUFFERED => 1);
my %spec = (
	(map { ("forwarder$_" => { cmd => [ 'python3', "$examples/python/forwarder.py" ],
				env => { QUEUE => 'invoices-e2e', SCOPE => 'billing', ROLLBACK_RATE => '0.1' } }) } 1 .. 3),
	(map { ("downstream$_" => { cmd => [ 'python3', "$examples/python/downstream.py" ],
				env => { QUEUE => 'notices', SCOPE => 'notices' } }) } 1 .. 2),
	relay => { cmd => [ $relay, "--secrets=$secrets", '--lease=5', '--wait=5', '--batch=50',
			"host=$env{PGHOST} port=$env{PGPORT} dbname=postgres user=relay_user" ], env => {} });

sub start
{
	my ($name) = @_;
	my $s = $spec{$name};
	$procs{$name} = { pid => InboxTest::start_group("$tmp/$name.log", { %env, %{ $s->{env} } }, @{ $s->{cmd} }) };
}

sub kill_hard
{
	my ($name) = @_;
	my $pid = $procs{$name}{pid} or return;
	kill 'KILL', -$pid;
	waitpid($pid, 0);
	$procs{$name}{pid} = undef;
}

# Downstream first, so that queue B exists before the relay publishes
start($_) for qw(downstream1 downstream2);
for (1 .. 300)
{
	last if -e "$tmp/downstream1.log" && slurp_file("$tmp/downstream1.log") =~ /applying/;
	sleep 0.1;
}
{
	my ($out, $err) = ('', '');
	local @ENV{ keys %env } = values %env;
	local $ENV{QUEUE} = 'invoices-e2e';
	IPC::Run::run([ 'python3', "$examples/python/publish.py", '--count', $invoices,
			'--duplicates', '0.2', '--prefix', 'e2e-', '--seed', '27' ],
		'>', \$out, '2>', \$err, init => sub { chdir "$examples/python" })
	  or BAIL_OUT("publish.py failed: $err");
}
start($_) for qw(forwarder1 forwarder2 forwarder3 relay);

# Faults while it runs: a forwarder killed every 3 s, the relay every 7 s,
# the server once
my ($forwarder_kills, $relay_kills, $t0) = (0, 0, time);
my $server_restarted = 0;
while (time - $t0 < 40)
{
	sleep 1;
	my $t = int(time - $t0);
	if ($t % 3 == 0)
	{
		my $victim = 'forwarder' . (1 + int(rand(3)));
		kill_hard($victim);
		start($victim);
		$forwarder_kills++;
	}
	if ($t % 7 == 0)
	{
		kill_hard('relay');
		start('relay');
		$relay_kills++;
	}
	if ($t >= 20 && !$server_restarted)
	{
		$node->stop('immediate');
		$node->start;
		$server_restarted = 1;
	}
}
note("killed forwarders $forwarder_kills times, the relay $relay_kills times, the server once");

# Then let it finish: every invoice's notice applied downstream
my $done = 0;
for (1 .. 1800)
{
	$done = $node->safe_psql('postgres', 'SELECT count(DISTINCT source) FROM notices') == $invoices
	  and last;
	sleep 0.2;
}
ok($done, "every invoice's notice reached the downstream consumer");
sleep 2;    # a duplicate still on its way would show below
for my $name (sort keys %procs)
{
	next unless $procs{$name}{pid};
	kill 'TERM', -$procs{$name}{pid};
	waitpid($procs{$name}{pid}, 0);
	$procs{$name}{pid} = undef;
}

is($node->sql('SELECT count(*), count(DISTINCT message_id) FROM invoices'), "$invoices|$invoices",
	'one invoice per message, none doubled');
is($node->sql(q{SELECT count(*), count(DISTINCT payload->>'source') FROM inbox.outbox_messages}),
	"$invoices|$invoices", 'one notice sent per invoice');
is($node->sql(q{SELECT count(*) FROM inbox.outbox_messages WHERE payload->>'attempt' LIKE '%-rb'}), '0',
	'no taken-back send was committed');
is($node->sql('SELECT count(*), count(DISTINCT message_id), count(DISTINCT source) FROM notices'),
	"$invoices|$invoices|$invoices", 'one notice applied downstream per invoice, none doubled');
is($node->sql(q{SELECT count(*) FROM notices WHERE attempt LIKE '%-rb'}), '0',
	'no taken-back send arrived downstream');
is($node->sql(q{SELECT count(*) FROM notices n LEFT JOIN inbox.outbox_messages m ON m.id::text = n.message_id
	WHERE m.id IS NULL OR m.key <> n.customer OR m.position <> n.position}), '0',
	'each notice arrived under its outbox id, with its key and position');
is($node->sql(q{SELECT count(*) FROM (SELECT position - min(position) OVER (PARTITION BY customer) + 1 AS position,
	row_number() OVER (PARTITION BY customer ORDER BY seq) AS rn FROM notices) AS x WHERE position <> rn}), '0',
	"each customer's notices were applied in the order of their positions, without a gap");
is($node->sql(q{SELECT count(*) FROM outbox_stats WHERE pending > 0 OR dead > 0}), '0',
	'nothing is left pending or dead in the outbox');

my $logs = join '', map { -e "$tmp/$_.log" ? slurp_file("$tmp/$_.log") : '' } sort keys %spec;
ok($logs =~ /taken back by a savepoint/ && $logs =~ /40001, retrying the transaction/,
	'sends were taken back both ways');
note('notices the relay delivered again and the claim downstream took as duplicates: '
	  . $node->sql(q{SELECT duplicates FROM inbox_stats WHERE scope = 'notices'}));
ok($forwarder_kills >= 5 && $relay_kills >= 3 && $server_restarted, 'the faults were injected');

done_testing();
