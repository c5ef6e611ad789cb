# test/t/003_pg_cron.pl
#
# The purge without the background worker, scheduled by pg_cron, and pg_cron
# and the worker purging the same backlog at the same time.
#
# Many managed services offer pg_cron but not a library's own background
# worker, so the README tells them to schedule inbox_purge().  This proves
# that this works as written, through pg_cron 1.4 as Debian ships it (jobs
# run over a libpq connection, minute granularity):
#   - SELECT inbox_purge() every minute purges what is past the retention,
#     keeps what is inside it, and the run is recorded as succeeded;
#     inbox_stats.rows_purged counts exactly the rows purged;
#   - a DO block that loops "WHILE inbox_purge() > 0 LOOP COMMIT" drains a
#     backlog many rounds deep in one run: pg_cron sends the command as a
#     single top-level statement, so COMMIT inside DO is allowed;
#   - with the worker enabled while a pg_cron job drains the same backlog,
#     both purge (each is made to do some work before they race), and the
#     two never wait for each other: the server log has no lock wait, no
#     error and no purge that stopped early, every expired entry is gone,
#     every entry inside the retention is kept, no cron run failed, and
#     rows_purged equals the number of expired entries exactly, so no row
#     was deleted or counted twice.
#
# Nothing here asserts how fast anything happens: conditions are polled
# with the framework's generous timeouts.  pg_cron starts jobs on minute
# boundaries, so each of the three scheduled phases waits up to a minute.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

# The README's job, exactly as it shows it, and a loop for a backlog deeper
# than one round.  The loop must be the job's only statement: several
# statements in one command run in an implicit transaction block, where
# COMMIT inside DO fails ("invalid transaction termination"), and so it
# does after an explicit BEGIN.
my $readme_job = q{SELECT inbox_purge()};
my $drain_job =
  q{DO $$BEGIN WHILE inbox_purge() > 0 LOOP COMMIT; END LOOP; END$$};

my $node = InboxTest->new('pg_cron');
# Without pg_cron the server would not even start: skip, so that the other
# files of the run still run.
plan skip_all => 'pg_cron is not installed for this PostgreSQL'
  unless $node->has_extension('pg_cron');
my $host = $node->host;
$node->setup_inbox(
	preload => 'inbox,pg_cron',
	conf => qq{
cron.database_name = 'postgres'
# Test nodes listen on a Unix socket only; pg_cron connects to localhost
# by default.
cron.host = '$host'
# pg_cron alone first: the worker is switched on in the last phase.
inbox.purge_enabled = off
# Backdated entries then simply have an age (no paused retention clock).
inbox.idle_threshold = '365d'
# Any lock wait longer than 10ms is logged, and checked for below.
log_lock_waits = on
deadlock_timeout = '10ms'
# The backend type in every line, to tell the purgers apart.
log_line_prefix = '%m [%p] %b %q%a '
});

# Wait until sessions started from now on see a reloaded setting.
sub reload_and_wait
{
	my ($name, $value) = @_;
	$node->sql('SELECT pg_reload_conf()');
	$node->poll_query_until('postgres', "SHOW $name", $value)
	  or die "$name did not become $value after a reload";
}

sub rows_purged
{
	my ($scope_like) = @_;
	return $node->sql(
		"SELECT coalesce(sum(rows_purged), 0) FROM inbox_stats WHERE scope LIKE '$scope_like'"
	);
}

# Unschedule a job, then wait until none of its runs is still in progress.
sub unschedule
{
	my ($jobid) = @_;
	$node->sql("SELECT cron.unschedule($jobid)");
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM cron.job_run_details WHERE jobid = $jobid AND status NOT IN ('succeeded', 'failed')"
	) or die "a run of job $jobid did not finish";
}

# The server log written since $offset: lines that show a purge waiting for
# a lock, failing, or giving up.
sub bad_log_lines
{
	my ($offset) = @_;
	return grep { /still waiting for|deadlock detected|ERROR:|FATAL:|PANIC:|inbox purge stopped early|inbox launcher could not/ }
	  split /\n/, $node->log_since($offset);
}

$node->sql('CREATE EXTENSION pg_cron');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pg_cron launcher'"
	),
	'the pg_cron scheduler runs');

# --- 1. SELECT inbox_purge() every minute --------------------------------------
my $log_offset = $node->log_position;

$node->claim_aged('orders', 'old-', 200, '8 days');
$node->claim_aged('orders', 'keep-', 100, '6 days');
$node->claim_aged('orders', 'fresh-', 100, '0');

my $job = $node->sql(
	"SELECT cron.schedule('inbox-purge', '* * * * *', \$job\$$readme_job\$job\$)"
);
is($node->sql("SELECT command FROM cron.job WHERE jobid = $job"),
	$readme_job, 'the README job is scheduled as written');

ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM inbox.entries WHERE scope = 'orders' AND message_id LIKE 'old-%'"
	),
	'the scheduled inbox_purge() purged the entries past the retention');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM cron.job_run_details WHERE jobid = $job AND status IN ('succeeded', 'failed')"
	),
	'pg_cron recorded the run');
unschedule($job);
is( $node->sql(
		"SELECT string_agg(DISTINCT status, ',') FROM cron.job_run_details WHERE jobid = $job"
	),
	'succeeded',
	'every run of the README job succeeded');
is($node->count_entries('orders', 'keep-'),  100, 'entries inside the retention are kept');
is($node->count_entries('orders', 'fresh-'), 100, 'new entries are kept');
is(rows_purged('orders'), 200, 'inbox_stats.rows_purged counts the 200 purged');
is(join("\n", bad_log_lines($log_offset)), '',
	'no lock wait and no error in the log while pg_cron purged');

# --- 2. a backlog deeper than one round, drained in one run ----------------------
# 3,000 expired entries at 50 per leaf: one round purges at most 8 x 50.
$node->sql('ALTER SYSTEM SET inbox.purge_batch_size = 50');
reload_and_wait('inbox.purge_batch_size', '50');
$log_offset = $node->log_position;

$node->claim_aged('backlog', 'old-', 3000, '8 days');
$node->claim_aged('backlog', 'keep-', 100, '6 days');

my $one_round = $node->sql('BEGIN; SELECT inbox_purge(); ROLLBACK;');
ok($one_round > 0 && $one_round <= 8 * 50,
	"one round purges at most 8 x 50 of the 3,000 (it purged $one_round, rolled back)");

$job = $node->sql(
	"SELECT cron.schedule('inbox-purge-drain', '* * * * *', \$job\$$drain_job\$job\$)"
);
is($node->sql("SELECT command FROM cron.job WHERE jobid = $job"),
	$drain_job, 'the drain job is scheduled as written');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM cron.job_run_details WHERE jobid = $job AND status IN ('succeeded', 'failed')"
	),
	'pg_cron ran the drain job');
# In one snapshot: the runs so far, and what is left.
my $state = $node->sql(
	qq{SELECT (SELECT count(*) FROM cron.job_run_details WHERE jobid = $job),
			  (SELECT string_agg(status || ': ' || coalesce(return_message, ''), '; ')
				 FROM cron.job_run_details WHERE jobid = $job),
			  (SELECT count(*) FROM inbox.entries WHERE scope = 'backlog' AND message_id LIKE 'old-%')}
);
is($state, '1|succeeded: DO|0',
	'one run of the DO block drained all 3,000 expired entries (COMMIT inside DO works under pg_cron)'
);
unschedule($job);
is($node->count_entries('backlog', 'keep-'), 100,
	'entries inside the retention are kept');
is(rows_purged('backlog'), 3000,
	'rows_purged counts the 3,000 once (not the rolled-back round)');
is(join("\n", bad_log_lines($log_offset)), '',
	'no lock wait and no error in the log while the DO block drained');

# --- 3. the worker and pg_cron on one backlog -------------------------------------
# 50,000 expired entries over 100 scopes, 500 per leaf and batch: a batch
# then spans several scopes, so that while one purger is inside a batch
# the other can start a round that wants the same scopes.
#
# Each purger is made to do some work before they race, so that both
# provably purge.  The cron job
#   a. purges one round alone: the worker is still off;
#   b. waits until inbox_stats shows that someone else, the worker, which
#      the test enables meanwhile, has purged as well.  It looks every
#      10ms, so that most of the backlog is left for
#   c. the race: both purge until nothing expired is left.  The cron job
#      starts a round every 0.1s rather than back to back, so that its
#      rounds begin at many different points of the worker's passes (back
#      to back, its rounds would hold every scope nearly all the time, and
#      the worker would skip them all and wait for its next naptime).
# The cron job records what each of its rounds purged, in the round's own
# transaction, and what the worker had purged when the race began; the
# rest of what inbox_stats counts was purged by the worker during the race.
my $race_batch = 500;
$node->sql("ALTER SYSTEM SET inbox.purge_batch_size = $race_batch");
$node->sql('ALTER SYSTEM SET inbox.purge_naptime = 1');
reload_and_wait('inbox.purge_batch_size', $race_batch);
$log_offset = $node->log_position;

$node->claim_aged('busy', 'old-', 50000, '8 days', scopes => 100);
$node->claim_aged('busy', 'keep-', 1000, '6 days', scopes => 100);
$node->sql(q{
	CREATE TABLE cron_rounds (round bigserial, purged bigint NOT NULL,
							  at timestamptz NOT NULL DEFAULT clock_timestamp());
	CREATE TABLE cron_race (started timestamptz NOT NULL, worker_purged bigint NOT NULL);
});
my $race_job = q{DO $$
DECLARE
	n bigint;
	worker bigint;
	deadline timestamptz := clock_timestamp() + interval '150 seconds';
BEGIN
	-- a. one round alone
	n := inbox_purge();
	INSERT INTO cron_rounds (purged) VALUES (n);
	COMMIT;
	-- b. wait until the worker has purged too
	LOOP
		worker := (SELECT coalesce(sum(rows_purged), 0) FROM inbox_stats
					WHERE scope LIKE 'busy-%')
				  - (SELECT sum(purged) FROM cron_rounds);
		EXIT WHEN worker > 0 OR clock_timestamp() > deadline;
		PERFORM pg_sleep(0.01);
	END LOOP;
	INSERT INTO cron_race VALUES (clock_timestamp(), worker);
	COMMIT;
	-- c. race the worker until nothing expired is left
	LOOP
		n := inbox_purge();
		INSERT INTO cron_rounds (purged) VALUES (n);
		COMMIT;
		EXIT WHEN NOT EXISTS (SELECT FROM inbox.entries
							  WHERE scope LIKE 'busy-%' AND message_id LIKE 'old-%')
			   OR clock_timestamp() > deadline;
		PERFORM pg_sleep(0.1);
	END LOOP;
END$$};
$job = $node->sql(
	"SELECT cron.schedule('inbox-purge-race', '* * * * *', \$job\$$race_job\$job\$)"
);

# a.
ok($node->poll_query_until('postgres', 'SELECT count(*) > 0 FROM cron_rounds'),
	'the cron job purged its first round');
my $cron_first = $node->sql('SELECT purged FROM cron_rounds ORDER BY round LIMIT 1');
ok($cron_first > 0 && $cron_first <= 8 * $race_batch,
	"pg_cron purged one round alone: $cron_first rows");

# b.
$node->sql('ALTER SYSTEM SET inbox.purge_enabled = on');
reload_and_wait('inbox.purge_enabled', 'on');
ok($node->poll_query_until('postgres', 'SELECT count(*) > 0 FROM cron_race'),
	'the cron job saw the worker purge');
my $worker_first = $node->sql('SELECT worker_purged FROM cron_race');
ok($worker_first > 0,
	"the worker purged while the cron job waited: $worker_first rows");

# c.
my $worker_seen = 0;
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
while (time() < $deadline)
{
	my ($seen, $left) = split /\|/, $node->sql(
		q{SELECT (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'inbox purge'),
				 (SELECT count(*) FROM inbox.entries WHERE scope LIKE 'busy-%' AND message_id LIKE 'old-%')});
	$worker_seen += $seen;
	last if $left == 0;
	usleep(100_000);
}
is($node->count_entries('busy-%', 'old-'), 0,
	'every one of the 50,000 expired entries is gone');
is($node->count_entries('busy-%', 'keep-'), 1000,
	'every entry inside the retention is kept');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM cron.job_run_details WHERE jobid = $job AND status IN ('succeeded', 'failed')"
	),
	'the cron run finished');
unschedule($job);
note "an 'inbox purge' backend was in pg_stat_activity at $worker_seen samples";

# Both purgers have finished; the last counts are folded in at commit.
$node->poll_query_until('postgres',
	"SELECT coalesce(sum(rows_purged), 0) >= 50000 FROM inbox_stats WHERE scope LIKE 'busy-%'"
);
my $cron_total = $node->sql('SELECT sum(purged) FROM cron_rounds');
my ($cron_raced, $race_rounds, $race_secs) = split /\|/, $node->sql(
	q{SELECT coalesce(sum(purged), 0), count(*), extract(epoch FROM max(at) - min(started))::numeric(10,2)
		FROM cron_rounds, cron_race WHERE at > started});
note "pg_cron purged $cron_total rows, $cron_raced of them in $race_rounds rounds"
  . " over the ${race_secs}s of the race; the worker purged the rest";
is(rows_purged('busy-%'), 50000,
	'rows_purged totals exactly the 50,000 expired entries: none counted twice');
cmp_ok(50000 - $cron_total, '>=', $worker_first,
	'what pg_cron did not purge, the worker did, at least what it purged alone');
is( $node->sql(
		"SELECT count(*) FROM cron.job_run_details WHERE status <> 'succeeded'"),
	0,
	'no pg_cron run failed');
is(join("\n", bad_log_lines($log_offset)), '',
	'no lock wait, no error and no purge that stopped early while both purged');

$node->stop;
done_testing();
