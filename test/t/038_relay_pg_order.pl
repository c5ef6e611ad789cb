# test/t/038_relay_pg_order.pl
#
# inbox-relay's postgresql:// target, into the inbox of a database in a
# second cluster.
#
# A key's order holds from one database to the next: 20 keys of 50
# messages each go through the relay, which is killed with SIGKILL
# mid-way and started again; on the receiving side 4 workers take with
# inbox_take and record each message's effect, some slowly.  Per key, the
# effects happen in send order, none is lost and none doubled: the relay
# passes the outbox key as the message's group_key there.  (With
# ordered=off in the URL the same run shows effects out of key order.)
#
# A message fails alone: a content window there refuses one message of a
# batch (IB007); only it counts an attempt, and its batch-mates are
# delivered once.  A failure records the SQLSTATE and message of the
# other database (42501 for a role without the grant).  An inbox there
# older than group keys (1.0.0) is served without them, with one line in
# the relay's log.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use IPC::Run;
use POSIX ();
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $node = InboxTest->node('pg_order', conf => "inbox.purge_enabled = off\n");
my $relay = InboxTest::relay_or_skip($node);
my $tmp = PostgreSQL::Test::Utils::tempdir('pg_order');
my @groups;
END
{
	local $?;
	kill 'KILL', -$_ for @groups;
}

my $downstream = InboxTest->node('pg_order_downstream', conf => "max_connections = 40\n");
$node->sql(q{CREATE ROLE relay_user LOGIN; SELECT inbox_grant_bundle('relay_user', 'relay')});
$downstream->safe_psql('postgres', q{
	CREATE ROLE relay_user LOGIN;
	SELECT inbox_grant_bundle('relay_user', 'receiver');
	CREATE ROLE stranger LOGIN;
});
my $conninfo = 'host=' . $node->host . ' port=' . $node->port . ' dbname=postgres user=relay_user';
my $there = 'host=' . $downstream->host . '&port=' . $downstream->port;
my $target = "postgresql:///postgres?$there&user=relay_user&scope=ordered";

sub run_relay_once
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ $relay, '--once', '--lease=5', @_, $conninfo ], '>', \$out, '2>', \$err,
		IPC::Run::timeout(120));
	return $err;
}

# The state of each delivery of a topic: "key state attempts last_error"
sub deliveries
{
	my ($topic) = @_;
	return $node->sql(qq{SELECT string_agg(key || ' ' || state::text || ' ' || attempts || ' ' || coalesce(last_error, ''),
		E'\\n' ORDER BY key) FROM inbox.outbox_deliveries WHERE topic = '$topic'});
}

# --- a key's order, through a relay killed mid-way ------------------------------------
my ($keys, $per_key) = (20, 50);
my $total = $keys * $per_key;

# The workers: take one message, commit the take, apply its effect (one
# in ten of them slowly, so that the others run ahead), and complete it
# in the effect's transaction.  Each stops once every effect is there.
$downstream->safe_psql('postgres', qq{
	CREATE TABLE effects (seq bigserial PRIMARY KEY, key text NOT NULL, n integer NOT NULL, worker integer NOT NULL,
		group_key text);
	CREATE PROCEDURE work(w integer) LANGUAGE plpgsql AS \$\$
	DECLARE
		r record;
		idle integer := 0;
	BEGIN
		LOOP
			SELECT * INTO r FROM inbox_take('ordered', 1);
			COMMIT;
			IF r.message_id IS NULL THEN
				EXIT WHEN (SELECT count(*) FROM effects) >= $total OR idle > 12000;
				idle := idle + 1;
				PERFORM pg_sleep(0.01);
				CONTINUE;
			END IF;
			idle := 0;
			IF (r.payload->>'n')::integer % 10 = 1 THEN
				PERFORM pg_sleep(0.2);
			END IF;
			INSERT INTO effects (key, n, worker, group_key)
				VALUES (r.payload->>'k', (r.payload->>'n')::integer, w, r.group_key);
			PERFORM inbox_complete('ordered', r.message_id);
			COMMIT;
		END LOOP;
	END
	\$\$;
});
my $psql = $downstream->config_data('--bindir') . '/psql';
my @workers = map {
	InboxTest::start_group("$tmp/worker-$_.log", {}, $psql, '-X', '-h', $downstream->host,
		'-p', $downstream->port, '-d', 'postgres', '-c', "CALL work($_)")
} 1 .. 4;
push @groups, @workers;

$node->sql(qq{SELECT outbox_route('ordered', '$target', '{"backoff": "1 second", "max_attempts": 1000}')});
$node->sql(qq{
	SELECT count(outbox_send('ordered', k, jsonb_build_object('k', k, 'n', n)))
	FROM (SELECT 'key-' || k AS k, n FROM generate_series(1, $per_key) AS n, generate_series(1, $keys) AS k
		  ORDER BY n, k) AS s});

my $received = sub {
	$downstream->safe_psql('postgres', q{SELECT count(*) FROM inbox.entries WHERE scope = 'ordered'});
};
my $relay_pid = InboxTest::start_group("$tmp/relay.log", {}, $relay, '--wait=1', '--lease=5', '--batch=5',
	"--target=$target", $conninfo);
push @groups, $relay_pid;
my $at_kill = 0;
for (1 .. 3000)
{
	$at_kill = $received->();
	last if $at_kill >= $total / 5;
	sleep 0.02;
}
kill 'KILL', -$relay_pid;
waitpid($relay_pid, 0);
@groups = grep { $_ != $relay_pid } @groups;
ok($at_kill > 0 && $at_kill < $total, "the relay was killed mid-way ($at_kill of $total received there)");

$relay_pid = InboxTest::start_group("$tmp/relay.log", {}, $relay, '--wait=1', '--lease=5', '--batch=5',
	"--target=$target", $conninfo);
push @groups, $relay_pid;
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 0 FROM inbox.outbox_deliveries WHERE topic = 'ordered'}),
	'a relay started again delivers the rest');
kill 'TERM', $relay_pid;
waitpid($relay_pid, 0);
@groups = grep { $_ != $relay_pid } @groups;

# The workers end once every effect is there
for my $w (@workers)
{
	my $done = 0;
	for (1 .. 1800)
	{
		$done = waitpid($w, POSIX::WNOHANG()) and last;
		sleep 0.1;
	}
	ok($done, "worker $w ended");
}
@groups = grep { my $w = $_; !grep { $_ == $w } @workers } @groups;

is($downstream->safe_psql('postgres', q{SELECT count(*), count(DISTINCT (key, n)) FROM effects}),
	"$total|$total", 'every message had its effect, once');
is($downstream->safe_psql('postgres', q{SELECT count(*) FROM (SELECT key FROM effects GROUP BY key
		HAVING array_agg(n ORDER BY seq) <> array(SELECT generate_series(1, } . $per_key . q{))) AS s}),
	'0', 'per key, the effects happened in send order')
  or diag($downstream->safe_psql('postgres', q{SELECT key, array_agg(n ORDER BY seq) FROM effects GROUP BY key
	HAVING array_agg(n ORDER BY seq) <> array(SELECT generate_series(1, } . $per_key . q{)) LIMIT 3}));
my $workers_used = $downstream->safe_psql('postgres', q{SELECT count(DISTINCT worker) FROM effects});
ok($workers_used > 1, "the effects were spread over the workers ($workers_used)");
is($downstream->safe_psql('postgres', q{SELECT count(*) FROM effects WHERE group_key IS DISTINCT FROM key}),
	'0', 'each message was taken in the group of its outbox key');

# --- a message fails alone: IB007 under a content window there --------------------------
# The window refuses content already received under another id: w4's.  In
# one batch with w1 to w3, w4 alone counts an attempt.
my $windowed = "postgresql:///postgres?$there&user=relay_user&scope=windowed";
$downstream->safe_psql('postgres', q{
	SELECT inbox_set_content_window('windowed', '1 hour', 'reject');
	SELECT inbox_receive('windowed', 'earlier', '{"same": true}'::jsonb);
});
$node->sql(qq{SELECT outbox_route('windowed', '$windowed', '{"backoff": "1 hour", "max_attempts": 5}')});
$node->sql(q{
	SELECT outbox_send('windowed', 'w' || i, jsonb_build_object('n', i)) FROM generate_series(1, 3) AS i;
	SELECT outbox_send('windowed', 'w4', '{"same": true}'::jsonb);
});
my $log = run_relay_once("--target=$windowed");
like(deliveries('windowed'), qr/^w4 p 1 IB007: \S.*$/,
	'only the message the window refuses is left, with one attempt and the SQLSTATE and message')
  or diag($log);
is($downstream->safe_psql('postgres', q{SELECT string_agg(payload->>'n', ' ' ORDER BY payload->>'n')
		FROM inbox.entries WHERE scope = 'windowed' AND message_id <> 'earlier'}),
	'1 2 3', 'its batch-mates are received there, once');

# --- the reason: 42501 for a role without the grant there --------------------------------
my $denied = "postgresql:///postgres?$there&user=stranger&scope=denied";
$node->sql(qq{SELECT outbox_route('denied', '$denied', '{"backoff": "1 hour"}')});
$node->sql(q{SELECT outbox_send('denied', 'd1', '{"n": 1}'::jsonb)});
run_relay_once("--target=$denied");
like(deliveries('denied'), qr/^d1 p 1 42501: permission denied for function inbox_receive/,
	'a refusal records the SQLSTATE and the message of the other database');

# --- an inbox there older than group keys ------------------------------------------------
# Its superuser connects (1.0.0 has no bundles); the messages are received
# in no group, and the relay says so once for its connection
$downstream->safe_psql('postgres', 'CREATE DATABASE v100');
$downstream->safe_psql('v100', q{CREATE EXTENSION inbox VERSION '1.0.0'});
my $old = "postgresql:///v100?$there&scope=legacy";
$node->sql(qq{SELECT outbox_route('legacy', '$old', '{"backoff": "1 second"}')});
$node->sql(q{SELECT outbox_send('legacy', 'l1', jsonb_build_object('n', i)) FROM generate_series(1, 3) AS i});
$log = '';
for (1 .. 3)
{
	$log .= run_relay_once("--target=$old");
}
is($downstream->safe_psql('v100', q{SELECT count(*) FROM inbox.entries WHERE scope = 'legacy'}),
	'3', 'an inbox at 1.0.0 receives the messages, without group keys');
my $lines = () = $log =~ /the inbox there has no group keys/g;
is($lines, 3, 'and each run of the relay says so once, for its connection') or diag($log);

# --- ordered=off, and a value it does not know ------------------------------------------
my $unordered = "$target&ordered=off";
$node->sql(qq{SELECT outbox_route('unordered', '$unordered', '{"backoff": "1 hour"}')});
$node->sql(q{SELECT outbox_send('unordered', 'u1', '{"k": "u1", "n": 1}'::jsonb)});
run_relay_once("--target=$unordered");
is($downstream->safe_psql('postgres', q{SELECT count(*) FROM inbox.entries WHERE scope = 'ordered'
		AND payload->>'k' = 'u1'} . q{; SELECT count(*) FROM inbox.group_members WHERE scope = 'ordered'}),
	"1\n0", 'ordered=off receives the message in no group');
# outbox_route refuses a value of ordered it does not know; a route row
# written some other way keeps the target closed, and the relay says why
my $unsure = "$target&ordered=maybe";
my ($rc, $out, $err) = $node->psql('postgres',
	qq{SELECT outbox_route('unsure', '$unsure', '{"backoff": "1 hour"}')});
like($err, qr/ordered/, 'outbox_route refuses ordered=maybe');
$node->safe_psql('postgres', qq{INSERT INTO inbox.outbox_routes (topic, target, options)
	VALUES ('unsure', '$unsure', '{"backoff": "1 hour"}')});
$node->sql(q{SELECT outbox_send('unsure', 'x1', '{"n": 1}'::jsonb)});
like(run_relay_once("--target=$unsure"), qr/ordered must be on or off, not "maybe"/,
	'ordered=maybe keeps the target closed, and the relay says why');

done_testing();
