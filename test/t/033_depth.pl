# test/t/033_depth.pl
#
# inbox_depth(scope) equals a count of the scope's rows (pending, due at
# the clock, processing) at every step:
#   - after receives, takes, completions and failures, each committed;
#   - after a rolled-back transaction and a rolled-back savepoint;
#   - across a transaction still open while the scope is first counted,
#     which commits after the count;
#   - while two clients receive, take and complete, and the scope is
#     counted again and again (inbox.forget_front drops its counters):
#     every first count meets commits that run beside it;
#   - after a crash restart (shared memory lost), by an immediate stop and
#     by kill -9 of a backend that held an uncommitted receive.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = InboxTest->node(
	'depth', conf => q{
inbox.purge_enabled = off
restart_after_crash = on
});

sub depth_matches
{
	my ($scope, $label) = @_;
	my $r = $node->sql(qq{
		SELECT format('%s/%s/%s', d.pending, d.due, d.processing),
			   format('%s/%s/%s', c.p, c.d, c.r)
		  FROM inbox_depth('$scope') AS d,
			   (SELECT count(*) FILTER (WHERE state = 'p') AS p,
					   count(*) FILTER (WHERE state = 'p' AND due <= clock_timestamp()) AS d,
					   count(*) FILTER (WHERE state = 'r') AS r
				  FROM inbox.entries WHERE scope = '$scope') AS c});
	my ($depth, $rows) = split /\|/, $r;
	is($depth, $rows, "$label: inbox_depth $depth equals the rows");
}

# Committed changes of every kind
$node->sql(q{
	SELECT count(*) FROM inbox_receive_many('q', ARRAY(SELECT 'm' || g FROM generate_series(1, 200) g),
		ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 200)));
	SELECT count(*) FROM inbox_poll('q', 50, '10 minutes');
});
depth_matches('q', 'receives and a poll');
$node->sql(q{
	SELECT count(inbox_complete('q', receipt)) FROM (SELECT receipt FROM inbox.entries
		WHERE scope = 'q' AND state = 'r' ORDER BY message_id LIMIT 20) AS r;
	SELECT count(inbox_fail('q', receipt, 'again')) FROM (SELECT receipt FROM inbox.entries
		WHERE scope = 'q' AND state = 'r' ORDER BY message_id LIMIT 10) AS r;
	SELECT count(inbox_fail('q', receipt, 'later', interval '1 hour')) FROM (SELECT receipt FROM inbox.entries
		WHERE scope = 'q' AND state = 'r' ORDER BY message_id LIMIT 5) AS r;
	SELECT count(inbox_receive('q', 'd' || g, '{}'::jsonb, not_before => now() + interval '1 hour'))
	  FROM generate_series(1, 3) g;
});
depth_matches('q', 'completions, failures, delays');

# Rollbacks
$node->sql(q{
	BEGIN;
	SELECT count(*) FROM inbox_receive_many('q', ARRAY['x1', 'x2'], ARRAY['{}', '{}']::jsonb[]);
	SELECT count(*) FROM inbox_take('q', 5);
	ROLLBACK;
});
depth_matches('q', 'a rolled-back transaction');
$node->sql(q{
	BEGIN;
	SELECT count(*) FROM inbox_take('q', 2);
	SAVEPOINT s;
	SELECT inbox_receive('q', 'y1', '{}'::jsonb);
	SELECT count(*) FROM inbox_take('q', 3);
	ROLLBACK TO SAVEPOINT s;
	COMMIT;
});
depth_matches('q', 'a rolled-back savepoint');

# A transaction open across the scope's first count, committed after it
my $open = $node->background_psql('postgres');
$open->query_safe(q{BEGIN; SELECT count(*) FROM inbox_receive_many('fresh',
	ARRAY(SELECT 'f' || g FROM generate_series(1, 30) g), ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 30)))});
is($node->sql(q{SELECT pending FROM inbox_depth('fresh')}), '0', 'an uncommitted receive is not counted');
$open->query_safe('COMMIT');
depth_matches('fresh', 'a commit after the first count');
$open->quit;

# First counts among concurrent commits
my $script = "${PostgreSQL::Test::Utils::tmp_check}/depth.sql";
PostgreSQL::Test::Utils::append_to_file($script, q{
\set id random(1, 1000000000)
SELECT inbox_receive('race', 'r' || :id || '-' || :client_id, '{}'::jsonb);
SELECT inbox_receive('race', 's' || :id || '-' || :client_id, '{}'::jsonb);
SELECT count(inbox_complete('race', receipt)) FROM inbox_poll('race', 1, '1 minute');
});
my ($out, $err) = ('', '');
my $bench = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '2', '-t', '400', '-f', $script, '-d', $node->connstr('postgres') ],
	'>', \$out, '2>', \$err);
my $recounts = 0;
while ($bench->pumpable)
{
	$node->sql(q{SELECT inbox.forget_front('race')});
	$node->sql(q{SELECT * FROM inbox_depth('race')});
	$recounts++;
	last if $recounts >= 200;
}
$bench->finish;
is($?, 0, 'the clients ran') or diag($err);
ok($recounts > 1, "the scope was counted again while clients committed ($recounts times)");
depth_matches('race', 'first counts among concurrent commits');

# A crash restart: shared memory is lost, the first call counts
$node->stop('immediate');
$node->start;
depth_matches('q', 'after an immediate stop');
$node->sql(q{SELECT count(*) FROM inbox_take('q', 7)});
depth_matches('q', 'a take after the restart');

my $victim = $node->background_psql('postgres', on_error_stop => 0);
$victim->query_safe(q{BEGIN; SELECT inbox_receive('q', 'lost', '{}'::jsonb)});
my $victim_pid = $victim->query_safe('SELECT pg_backend_pid()');
my $offset = $node->log_position;
kill 'KILL', $victim_pid;
$victim->quit;
$node->wait_crash_restart($offset);
depth_matches('q', 'after kill -9 of a backend');
depth_matches('race', 'another scope after kill -9');

done_testing();
