# test/t/023_purge_scale.pl
#
# A purge pass costs what changed, not what exists:
#   - an idle pass (nothing new, nothing expired) runs as many statements
#     over 100,000 scopes as over 1,000, observes no scope and sweeps none;
#     a full pass, which sweeps every scope, runs as many statements too;
#   - when 1% of the scopes resume after a pause (a claim each: their
#     clocks run again, and their oldest entries expire 5 s later) and
#     another 1% get a shorter retention, the worker, at the default
#     naptime, purges exactly the expired entries of those scopes, and
#     within two of its passes after the one running at the change;
#   - the time of an idle pass and of SELECT count(*) FROM inbox_stats at
#     30,000 and 100,000 scopes, and the idle worker's CPU over a minute at
#     100,000, are reported as notes: nothing here asserts a time.
#
# Every scope holds two entries, both older than inbox.idle_threshold (1h),
# so that its clock is paused: "last", received 65 minutes ago, and
# "edge", received 1 hour less 5 s before it.  With a retention of 2h the
# clock has counted 2h less 5 s of activity since "edge" (the hour up to
# "last", and the hour after it), so "edge" is kept, 5 s short of its
# retention, until the scope's clock runs again.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = InboxTest->new('purge_scale');
plan skip_all => 'pg_stat_statements is not installed for this PostgreSQL'
  unless $node->has_extension('pg_stat_statements');
$node->setup_inbox(
	preload => 'inbox,pg_stat_statements',
	conf => q{
inbox.max_scopes = 100100
inbox.retention = '2h'
inbox.purge_enabled = off
pg_stat_statements.track = all
pg_stat_statements.max = 5000
track_functions = all
# No autovacuum worker in the CPU figures; the test vacuums itself
autovacuum = off
});
$node->sql('CREATE EXTENSION pg_stat_statements');

# Dropping the counters drops the purge's hints, and with them the time of
# its last sweep: the next pass is full, and sweeps every leaf.  Otherwise
# a pass sweeps one leaf at the earliest 37 s after the last sweep, so the
# passes that follow a full pass sweep nothing.
my $full = 'DO $$BEGIN PERFORM inbox.forget_counters(NULL); END$$;';

# Scopes scope-$from .. scope-$to, two entries each, observed by a full pass
sub load
{
	my ($from, $to) = @_;
	$node->sql(qq{
		INSERT INTO inbox.entries (scope, message_id, bucket, received_at)
		SELECT 'scope-' || g, m.id, inbox.bucket('scope-' || g, m.id), now() - m.age
		  FROM generate_series($from, $to) AS g
		 CROSS JOIN (VALUES ('edge', interval '125 minutes' - interval '5 seconds'),
							('last', interval '65 minutes')) AS m(id, age);
	});
	$node->sql('VACUUM ANALYZE inbox.entries');
	is($node->sql("$full SELECT inbox_purge()"),
		0, "a full pass observes scopes $from to $to and purges nothing");
	$node->sql('VACUUM ANALYZE inbox.scopes');
}

# The statements one inbox_purge() runs inside the call (not top-level),
# the scopes it observed (inbox.observe_leaf's rows) and the leaves it swept
sub statements_of_a_pass
{
	my ($set) = @_;
	$node->sql('SELECT pg_stat_statements_reset()');
	$node->sql(($set // '') . 'SELECT inbox_purge()');
	return $node->sql(q{
		SELECT coalesce(sum(calls) FILTER (WHERE NOT toplevel), 0) || '|' ||
			   coalesce(sum(rows) FILTER (WHERE query LIKE '%inbox.observe_leaf(%'), 0) || '|' ||
			   coalesce(sum(calls) FILTER (WHERE query LIKE '%inbox.sweep_leaf(%'), 0)
		  FROM pg_stat_statements
	});
}

# Milliseconds taken by the query $sql, three times, in one transaction;
# with $full_passes, each inbox_purge() in it is a full pass
sub timed
{
	my ($sql, $full_passes) = @_;
	my $set = $full_passes ? 'PERFORM inbox.forget_counters(NULL);' : '';
	return $node->sql(qq{
		CREATE FUNCTION pg_temp.timed() RETURNS text LANGUAGE plpgsql AS \$\$
		DECLARE
			t timestamptz;
			out text := '';
		BEGIN
			$set
			FOR i IN 1 .. 3 LOOP
				t := clock_timestamp();
				PERFORM ($sql);
				out := out || round(extract(epoch FROM clock_timestamp() - t) * 1000) || ' ms ';
			END LOOP;
			RETURN out;
		END \$\$;
		SELECT pg_temp.timed();
	});
}

# --- 1,000 scopes -------------------------------------------------------------------
load(1, 1000);
my ($idle_1k, $observed, $swept) = split /\|/, statements_of_a_pass();
is("$observed|$swept", '0|0', 'an idle pass over 1,000 scopes observes none and sweeps none');
my ($full_1k) = split /\|/, statements_of_a_pass($full);
note("1,000 scopes: $idle_1k statements in an idle pass, $full_1k in a full pass");

# --- 30,000 scopes -------------------------------------------------------------------
load(1001, 30000);
note('30,000 scopes: an idle inbox_purge(): ' . timed('SELECT inbox_purge()'));
note('30,000 scopes: SELECT count(*) FROM inbox_stats: '
	  . timed('SELECT count(*) FROM inbox_stats'));
note('30,000 scopes: a full pass: ' . timed('SELECT inbox_purge()', 1));

# --- 100,000 scopes ------------------------------------------------------------------
load(30001, 100000);
my ($idle_100k, $observed_100k, $swept_100k) = split /\|/, statements_of_a_pass();
is($idle_100k, $idle_1k,
	"an idle pass runs as many statements over 100,000 scopes as over 1,000 ($idle_1k)");
is("$observed_100k|$swept_100k", '0|0', 'and observes none and sweeps none');
my ($full_100k) = split /\|/, statements_of_a_pass($full);
is($full_100k, $full_1k,
	"a full pass, which sweeps every scope, runs as many statements over 100,000 scopes as over 1,000 ($full_1k)");
is($node->sql(q{SELECT count(*) FROM pg_stat_user_functions
				 WHERE schemaname = 'inbox' AND funcname = 'observe'}),
	0, 'no pass observed a scope by itself (inbox.observe)');
note('100,000 scopes: an idle inbox_purge(): ' . timed('SELECT inbox_purge()'));
note('100,000 scopes: SELECT count(*) FROM inbox_stats: '
	  . timed('SELECT count(*) FROM inbox_stats'));
note('100,000 scopes: a full pass: ' . timed('SELECT inbox_purge()', 1));
is($node->sql('SELECT count(*) FROM inbox_stats'), 100000, 'inbox_stats has a row per scope');

# --- the worker, idle, at the default naptime ----------------------------------------
# Its passes, counted by the one statement each round runs first
my $rounds = q{SELECT coalesce(sum(calls), 0) FROM pg_stat_statements
				WHERE query LIKE 'SELECT s FROM inbox.purge_due(%'};
$node->sql(q{ALTER SYSTEM SET inbox.purge_enabled = on; SELECT pg_reload_conf()});
my $before = $node->sql($rounds);
ok($node->poll_query_until('postgres', "SELECT ($rounds) > $before"),
	'the worker runs its passes');

# CPU in clock ticks of the postmaster's ended children (each purge
# worker lives for one pass) and of the launcher, from /proc
my $postmaster = (split /\n/, slurp_file($node->data_dir . '/postmaster.pid'))[0];
my $launcher = $node->launcher_pid;
sub ticks
{
	my ($pid) = @_;
	my @f = split ' ', slurp_file("/proc/$pid/stat");
	return $f[13] + $f[14] + $f[15] + $f[16];
}
if (-r "/proc/$postmaster/stat")
{
	my ($r0, $c0) = ($node->sql($rounds), ticks($postmaster) + ticks($launcher));
	sleep 60;
	my ($r1, $c1) = ($node->sql($rounds), ticks($postmaster) + ticks($launcher));
	my $hz = `getconf CLK_TCK` || 100;
	chomp $hz;
	note(sprintf('100,000 scopes: the idle worker used %.2f%% of a core over 60 s, %d passes',
		100 * ($c1 - $c0) / $hz / 60, $r1 - $r0));
}

# --- 1% of the scopes resume, 1% get a shorter retention -----------------------------
# The claims leave hints; the retention overrides bring the schedules forward.
$node->sql(q{
	SELECT count(inbox_claim('scope-' || g, 'new')) FROM generate_series(1, 100000, 100) AS g;
	SELECT count(inbox_set_retention('scope-' || g, '7190 seconds'))
	  FROM generate_series(2, 100000, 100) AS g;
});
my $at_change = $node->sql($rounds);
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 0 FROM inbox.entries
		 WHERE message_id = 'edge' AND substr(scope, 7)::int % 100 IN (1, 2)}),
	'the worker purges the expired entries of the 2% of the scopes');
my $passes = $node->sql($rounds) - $at_change;
ok($passes <= 3,
	"within two passes after the one running at the change ($passes passes began since)");
is( $node->sql(q{SELECT count(*) FILTER (WHERE message_id = 'edge') || '|' ||
						count(*) FILTER (WHERE message_id = 'last') || '|' ||
						count(*) FILTER (WHERE message_id = 'new')
				   FROM inbox.entries}),
	'98000|100000|1000',
	'exactly their expired entries go: every other scope keeps its entries, and no newer entry goes');
is($node->sql('SELECT sum(rows_purged) FROM inbox_stats'),
	2000, 'inbox_stats counts the 2,000 rows purged');

$node->stop;
done_testing();
