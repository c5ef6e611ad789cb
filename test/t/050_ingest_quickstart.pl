# test/t/050_ingest_quickstart.pl
#
# docs/quickstart-ingest.md runs as a newcomer runs it: every block of the
# page, in order, against a private RabbitMQ and a database "app":
#   - a sh block in bash (set -e) in a directory of its own, with the
#     relay's and the server's bindir on PATH; the page's broker
#     (localhost:5672) is the private one, and its connection string
#     ("dbname=app ...") reaches this cluster;
#   - the sql blocks as the role each names (as=owner: the superuser
#     that creates the extension), consecutive blocks of one role in one
#     session, as a reader's psql would run them; each output block
#     compared with what psql printed, trailing spaces and blank lines at
#     both ends aside.
# At the end the queue is empty and each message is in the inbox once.
# t/019 leaves the page to this test (its runner comment), so a block it
# cannot run without a broker is still run.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use File::Basename qw(dirname);
use InboxTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $page = "$FindBin::RealBin/../../docs/quickstart-ingest.md";
my $node = InboxTest->node('ingest_quickstart', extension => 0);
my $relay = InboxTest::relay_or_skip($node, rabbitmq => 1);
plan(skip_all => 'amqp-publish not found (amqp-tools, test/tools/ensure-deps.sh)')
  unless grep { -x "$_/amqp-publish" } split /:/, $ENV{PATH};

my $tmp = PostgreSQL::Test::Utils::tempdir('ingest_quickstart');
my $broker_pgid;
END
{
	local $?;
	kill 'KILL', -$broker_pgid if $broker_pgid;
}
my ($amqp_port, $up);
($amqp_port, $broker_pgid, $up) = InboxTest::start_rabbitmq("$tmp/rabbitmq");
ok($up, 'RabbitMQ listens on loopback')
  or BAIL_OUT('RabbitMQ did not start: ' . slurp_file("$tmp/rabbitmq/server.log"));
$node->safe_psql('postgres', 'CREATE DATABASE app');

my $text = slurp_file($page);
like($text, qr/<!-- run by test\/t\/050_ingest_quickstart\.pl/, 'the page names this test as its runner');
my ($blocks) = InboxTest::markdown_code_blocks($text);

# The page's broker and database are this test's
my $host = $node->host;
my $port = $node->port;
sub local_text
{
	my ($s) = @_;
	$s =~ s/localhost:5672/127.0.0.1:$amqp_port/g;
	$s =~ s/'dbname=app /'host=$host port=$port dbname=app /g;
	return $s;
}

my $superuser = $node->safe_psql('postgres', 'SELECT current_user');
my $psql = $node->installed_command('psql');
my $path = dirname($relay) . ":$ENV{PATH}";
my ($sh_count, $sql_count, $output_count) = (0, 0, 0);

# The blocks, consecutive sql blocks of one role as one psql session
my @runs;
for my $block (@$blocks)
{
	my ($lang, @words) = split /\s+/, $block->{info};
	my ($as) = map { /^as=(.*)$/ ? $1 : () } @words;
	if ($lang eq 'sql')
	{
		if (@runs && $runs[-1]{kind} eq 'sql' && $runs[-1]{as} eq $as)
		{
			push @{ $runs[-1]{blocks} }, $block;
		}
		else
		{
			push @runs, { kind => 'sql', as => $as, blocks => [$block] };
		}
	}
	elsif ($lang eq 'output')
	{
		fail("the output block at line $block->{line} follows an sql block")
		  unless @runs && $runs[-1]{kind} eq 'sql' && $block->{adjacent};
		$runs[-1]{blocks}[-1]{expected} = $block->{text};
	}
	elsif ($lang eq 'sh')
	{
		push @runs, { kind => 'sh', blocks => [$block] };
	}
	else
	{
		fail("the block at line $block->{line} is sh, sql or output: $block->{info}");
	}
}

sub trimmed
{
	my ($s) = @_;
	$s =~ s/[ \t]+$//mg;
	$s =~ s/^\n+//;
	$s =~ s/\n+$//;
	return $s;
}

for my $run (@runs)
{
	my $first = $run->{blocks}[0];
	if ($run->{kind} eq 'sh')
	{
		$sh_count++;
		my ($out, $err) = ('', '');
		local $ENV{PATH} = $path;
		my $ok = IPC::Run::run([ 'bash', '-e', '-c', "cd '$tmp' && " . local_text($first->{text}) ],
			'>', \$out, '2>', \$err, IPC::Run::timeout(120));
		ok($ok, "sh block at line $first->{line} runs") or diag("stdout:\n$out\nstderr:\n$err");
		next;
	}
	my $user = $run->{as} eq 'owner' ? $superuser : $run->{as};
	my $in = '';
	my $n = 0;
	for my $block (@{ $run->{blocks} })
	{
		$sql_count++;
		$n++;
		$in .= local_text($block->{text}) . "\n\\echo '--- end of block $n ---'\n";
	}
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ $psql, '-X', '-v', 'ON_ERROR_STOP=1', '-d', "host=$host port=$port dbname=app user=$user" ],
		'<', \$in, '>', \$out, '2>', \$err, IPC::Run::timeout(120));
	ok($ok, "sql block(s) from line $first->{line} run as $run->{as}") or diag("stderr:\n$err");
	my @parts = split /^--- end of block \d+ ---\n/m, $out;
	for my $i (0 .. $#{ $run->{blocks} })
	{
		my $block = $run->{blocks}[$i];
		next unless defined $block->{expected};
		$output_count++;
		# psql's command tags may be left out of an output block
		my $got = trimmed(join "\n", grep { !/^(?:BEGIN|COMMIT|ROLLBACK|CREATE [A-Z ]+|GRANT|INSERT 0 \d+)$/ }
			  split /\n/, $parts[$i] // '');
		is($got, trimmed($block->{expected}), "the output of the sql block at line $block->{line}");
	}
}
ok($sh_count >= 4 && $sql_count >= 3 && $output_count >= 2,
	"the page has its steps: $sh_count sh, $sql_count sql and $output_count output blocks");

# The queue is empty, and each id is in the inbox once
my ($ready) = InboxTest::run_pika($amqp_port, <<'PY');
import json, os, pika
conn = pika.BlockingConnection(pika.URLParameters(os.environ['AMQP_URL']))
print(json.dumps([conn.channel().queue_declare('orders', passive=True).method.message_count]))
PY
is($ready, 0, 'the queue is empty: every copy was acknowledged');
is($node->safe_psql('app', "SELECT string_agg(message_id, ' ' ORDER BY message_id) FROM inbox.entries WHERE scope = 'orders'"),
	'ord-1001 ord-1002', 'each message is in the inbox once: the second copy was a duplicate');

done_testing();
