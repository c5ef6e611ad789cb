# test/t/004_deferred_recovery.pl
#
# Exact recovery in the deferred mode, with real sessions that end:
#   - a message taken by a live worker is not handed to anyone else;
#   - when the worker's session ends (disconnect, pg_terminate_backend,
#     kill -9 and the crash restart that follows), the next inbox_take gets
#     the message at once: no timeout is involved;
#   - every take counts, so a message that kills its worker every time
#     ends up dead instead of looping;
#   - no message is lost between receive and done, and each is completed
#     exactly once.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = InboxTest->node(
	'deferred', conf => q{
inbox.purge_enabled = off
restart_after_crash = on
});

$node->sql(q{
	CREATE TABLE shipments (message_id text, worker text);
	SELECT count(inbox_receive('ship', 'm' || g, jsonb_build_object('n', g))) FROM generate_series(1, 5) g;
	UPDATE inbox.entries SET received_at = received_at + (substr(message_id, 2)::int * interval '1 second'),
		due = due - interval '1 hour' + (substr(message_id, 2)::int * interval '1 second');
	SELECT inbox.forget_front('ship');  -- moved by hand: the front must hear of it
});

# A worker session that takes one message and keeps it.
my $worker = $node->background_psql('postgres');
my $taken = $worker->query_safe("SELECT message_id FROM inbox_take('ship')");
is($taken, 'm1', 'the worker takes the oldest message');
my $worker_pid = $worker->query_safe('SELECT pg_backend_pid()');

is($node->sql("SELECT string_agg(message_id, ',') FROM inbox_take('ship', 10)"),
	'm2,m3,m4,m5', 'another session gets the others, never the live worker\'s');
# That session has ended too (safe_psql disconnects): its messages are free.
is($node->sql("SELECT string_agg(message_id || ':' || attempts, ',') FROM inbox_take('ship', 10)"),
	'm2:2,m3:2,m4:2,m5:2',
	'messages of a session that disconnected are taken again at once, as a new attempt');
is($node->sql("SELECT state FROM inbox.entries WHERE message_id = 'm1'"),
	'r', 'the live worker still holds its message');

# pg_terminate_backend ends the worker: its message is free at once.
$node->sql("SELECT pg_terminate_backend($worker_pid)");
$worker->quit;
$node->poll_query_until('postgres',
	"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $worker_pid");
is($node->sql("SELECT message_id || ':' || attempts FROM inbox_take('ship') WHERE message_id = 'm1'"),
	'm1:2', 'after pg_terminate_backend the message is taken again');

# kill -9: the postmaster restarts every backend; the message survives the
# crash as processing, and its owner is gone, so it is taken again.
$node->sql("SELECT inbox_receive('crash', 'crash-1', '{}'::jsonb)");
my $victim = $node->background_psql('postgres', on_error_stop => 0);
is($victim->query_safe("SELECT message_id FROM inbox_take('crash')"),
	'crash-1', 'a worker takes a message');
my $victim_pid = $victim->query_safe('SELECT pg_backend_pid()');
my $offset = $node->log_position;
kill 'KILL', $victim_pid;
$node->wait_crash_restart($offset);
$victim->quit;
is($node->sql("SELECT state FROM inbox.entries WHERE message_id = 'crash-1'"),
	'r', 'after the crash restart the message is still marked processing');
is($node->sql("SELECT message_id || ':' || attempts FROM inbox_take('crash', 10)"),
	'crash-1:2', 'and the next take gets it, as attempt 2');

# A message that kills its worker every time ends up dead.
$node->sql("SELECT inbox_set_max_attempts('poison', 3)");
$node->sql("SELECT inbox_receive('poison', 'p1', '{}'::jsonb)");
for my $round (1 .. 3)
{
	my $w = $node->background_psql('postgres', on_error_stop => 0);
	$w->query_safe("SELECT message_id FROM inbox_take('poison')");
	my $pid = $w->query_safe('SELECT pg_backend_pid()');
	my $offset = $node->log_position;
	kill 'KILL', $pid;
	$node->wait_crash_restart($offset);
	$w->quit;
}
is($node->sql("SELECT count(*) FROM inbox_take('poison')"), 0,
	'after its last attempt a message whose worker keeps dying is not taken again');
is($node->sql("SELECT attempts || ':' || last_error FROM inbox_dead_letters WHERE message_id = 'p1'"),
	'3:worker lost during the last allowed attempt', 'it is a dead letter');

# Nothing lost, nothing done twice: complete everything still open, one
# effect per message in the transaction of its completion.
$node->sql(q{
	CREATE FUNCTION drain() RETURNS integer LANGUAGE plpgsql AS $$
	DECLARE
		m record;
		n integer := 0;
	BEGIN
		FOR m IN SELECT 'ship' AS scope, t.message_id FROM inbox_take('ship', 100) AS t
				 UNION ALL
				 SELECT 'crash', t.message_id FROM inbox_take('crash', 100) AS t LOOP
			INSERT INTO shipments VALUES (m.message_id, 'drain');
			PERFORM inbox_complete(m.scope, m.message_id);
			n := n + 1;
		END LOOP;
		RETURN n;
	END $$;
});
# Messages held by the sessions above are free now; m2..m5 were taken by a
# session that has ended.
is($node->sql('SELECT drain()'), 6, 'the remaining messages are taken and completed');
is($node->sql("SELECT count(*) FROM inbox.entries WHERE scope IN ('ship', 'crash') AND state <> 'd'"),
	0, 'every received message ends done');
is( $node->sql(q{SELECT count(*) FROM (SELECT message_id FROM shipments GROUP BY 1 HAVING count(*) <> 1) d}),
	0, 'exactly one effect per message');
is($node->sql('SELECT count(DISTINCT message_id) FROM shipments'), 6, 'and none is missing');

$node->stop;
done_testing();
