# test/t/002_retention_worker.pl
#
# The retention worker on a server that changes under it:
#   - the launcher shows in pg_stat_activity and serves every database
#     that has the extension, with no list of databases anywhere;
#   - an entry just inside the retention is kept, one just past it goes;
#   - a per-scope retention overrides the setting, and SIGHUP changes it;
#   - kill -9 and an immediate shutdown: the work resumes afterwards;
#   - DROP DATABASE and DROP EXTENSION succeed while a purge worker is
#     connected and busy;
#   - downtime safety: a scope idle, or a cluster stopped, for longer than
#     the retention keeps every entry from before, and redeliveries are
#     duplicates, until the scope has been active for the retention again.
#
# Nothing here asserts how fast anything happens: conditions are polled.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

# A long idle threshold first: backdated entries then simply have an age.
my $node = InboxTest->node(
	'retention', conf => q{
inbox.purge_naptime = 1
inbox.retention = '1h'
inbox.idle_threshold = '365d'
# The test framework turns this off; the kill -9 below needs it.
restart_after_crash = on
});

# --- the launcher -----------------------------------------------------------
ok($node->wait_for_launcher, 'the launcher runs, with backend_type "inbox launcher"');
is($node->sql(
		"SELECT datname IS NULL FROM pg_stat_activity WHERE backend_type = 'inbox launcher'"),
	't', 'the launcher connects to no database');

# --- just inside versus just past the retention ------------------------------
$node->claim_aged('edge', 'past-', 3, '1 hour 5 minutes');
$node->claim_aged('edge', 'inside-', 3, '50 minutes');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM inbox.entries WHERE scope = 'edge' AND message_id LIKE 'past-%'"),
	'entries just past the retention are purged by the worker');
is($node->count_entries('edge', 'inside-'), 3,
	'entries just inside the retention are kept');
is($node->sql("SELECT rows_purged FROM inbox_stats WHERE scope = 'edge'"),
	3, 'inbox_stats counts the rows the worker purged');

# --- per-scope retention -------------------------------------------------------
$node->sql("SELECT inbox_set_retention('short', '10 minutes')");
$node->claim_aged('short', 's-', 2, '20 minutes');
$node->claim_aged('normal', 'n-', 2, '20 minutes');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM inbox.entries WHERE scope = 'short'"),
	'a per-scope retention purges its scope sooner');
is($node->count_entries('normal', 'n-'), 2,
	'other scopes keep the default retention');

# --- SIGHUP changes the retention ------------------------------------------------
$node->sql("ALTER SYSTEM SET inbox.retention = '15min'");
$node->reload;
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM inbox.entries WHERE scope = 'normal'"),
	'after a reload the shorter retention applies');
is($node->count_entries('edge', 'inside-'), 0,
	'and applies to every scope without its own');

# --- a second database, with no configuration -----------------------------------
$node->sql('CREATE DATABASE second');
$node->safe_psql('second', 'CREATE EXTENSION inbox');
$node->claim_aged('billing', 'b-', 5, '2 hours', db => 'second');
ok($node->poll_query_until('second',
		"SELECT count(*) = 0 FROM inbox.entries WHERE scope = 'billing'"),
	'a database where the extension was just created is served');

# --- SIGTERM: a clean exit, and the postmaster brings the launcher back ----------
my $log_offset = $node->log_position;
my $term_pid = $node->launcher_pid;
$node->sql("SELECT pg_terminate_backend($term_pid)");
ok($node->wait_for_launcher($term_pid), 'after SIGTERM the launcher exits and is started again');
like($node->log_since($log_offset),
	qr/terminating background worker "inbox launcher" due to administrator command/,
	'the launcher exits on SIGTERM as every backend does');
$node->no_crash_since($log_offset, 'no crash and no restart of the other backends');

# --- kill -9, then an immediate shutdown -------------------------------------------
my $pid = $node->launcher_pid;
kill 'KILL', $pid;
ok($node->wait_for_launcher($pid), 'after kill -9 the postmaster restarts the launcher');
$node->claim_aged('after-kill', 'k-', 3, '2 hours');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM inbox.entries WHERE scope = 'after-kill'"),
	'and the purge resumes');

$node->stop('immediate');
$node->start;
$node->claim_aged('after-crash', 'c-', 3, '2 hours');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM inbox.entries WHERE scope = 'after-crash'"),
	'the purge works again after a crash restart');

# --- DROP DATABASE and DROP EXTENSION with a busy purge worker ----------------------
# Small batches over a large backlog keep the worker connected for a while.
$node->sql('ALTER SYSTEM SET inbox.purge_batch_size = 20');
$node->reload;
for my $db ('dropme', 'dropext')
{
	$node->sql("CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION inbox');
	$node->safe_psql($db, q{
		SELECT count(inbox_claim('bulk-' || (g % 50), 'm-' || g)) FROM generate_series(1, 60000) g;
		UPDATE inbox.entries SET received_at = now() - interval '2 hours';
	});
}
my $launcher = $node->launcher_pid;

ok( $node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_type = 'inbox purge' AND datname = 'dropme'"
	),
	'a purge worker is connected to the database (backend_type "inbox purge")');
my ($rc, $out, $err) = $node->psql('postgres', 'DROP DATABASE dropme');
is($rc, 0, 'DROP DATABASE succeeds while the purge worker is busy there')
  or diag($err);

ok( $node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_type = 'inbox purge' AND datname = 'dropext'"
	),
	'a purge worker is busy in the other database');
($rc, $out, $err) = $node->psql('dropext', 'DROP EXTENSION inbox CASCADE');
is($rc, 0, 'DROP EXTENSION succeeds while the purge worker is busy there')
  or diag($err);
is($node->safe_psql('dropext', "SELECT count(*) FROM pg_extension WHERE extname = 'inbox'"),
	0, 'the extension is gone');
is($node->launcher_pid, $launcher, 'the launcher carried on through both');
$node->sql('ALTER SYSTEM RESET inbox.purge_batch_size');
$node->reload;

# --- downtime safety ---------------------------------------------------------------
# Real time now: pauses start after 3 s of silence, and the two scopes keep
# entries for 12 s of activity.
$node->sql("ALTER SYSTEM SET inbox.idle_threshold = '3s'");
$node->reload;
for my $scope ('idle', 'down')
{
	$node->sql("SELECT inbox_set_retention('$scope', '12 seconds')");
	$node->sql("SELECT count(inbox_claim('$scope', 'old-' || g)) FROM generate_series(1, 5) g");
}

# Idle for longer than the retention while the server and the worker run.
sleep(16);
is($node->count_entries('idle', 'old-'), 5,
	'a scope idle for longer than the retention keeps its entries');
is( $node->sql(
		"SELECT count(*) FILTER (WHERE inbox_claim('idle', 'old-' || g)) FROM generate_series(1, 5) g"),
	0, 'and their redeliveries are duplicates');

# Down for longer than the retention.
$node->stop;
sleep(14);
$node->start;

is( $node->sql(
		"SELECT count(*) FILTER (WHERE inbox_claim('down', 'old-' || g)) FROM generate_series(1, 5) g"),
	0, 'after a downtime longer than the retention, redeliveries are duplicates');

# Activity resumes: new messages once a second.  Until the scope has been
# active for the retention (12 s; checked with 4 s to spare), nothing from
# before the outage may go.
my $resumed = time();
my $n = 0;
my $early_checks = 0;
my $kept_early = 1;
while (time() - $resumed < 8)
{
	$n++;
	$node->sql("SELECT inbox_claim('down', 'new-$n')");
	my $left = $node->count_entries('down', 'old-');
	# Only meaningful if the check itself ran before the 12 s were up.
	if (time() - $resumed < 8)
	{
		$early_checks++;
		$kept_early = 0 if $left != 5;
	}
	usleep(1_000_000);
}
ok($early_checks > 0 && $kept_early,
	"no entry from before the outage is purged before the scope has been active for the retention ($early_checks checks)");

# Once it has been active long enough, they go (while activity goes on).
my $gone = 0;
for my $i (1 .. 120)
{
	$n++;
	$node->sql("SELECT inbox_claim('down', 'new-$n')");
	if ($node->count_entries('down', 'old-') == 0)
	{
		$gone = 1;
		last;
	}
	usleep(1_000_000);
}
ok($gone, 'after the retention of renewed activity, entries from before the outage are purged');
cmp_ok(time() - $resumed, '>=', 12,
	'and not before the scope had been active for the retention');

$node->stop;
done_testing();
