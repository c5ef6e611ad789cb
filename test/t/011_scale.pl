# test/t/011_scale.pl
#
# Failures that appeared only at scale, each fixed in 1.0.0:
#   - the purge works for 100,000 scopes at the default
#     max_locks_per_transaction, whether one inbox_purge() does a whole
#     round in one transaction or the background worker does it: it holds
#     a few locks whatever the number of scopes (0.4.0 took one advisory
#     lock per scope and held them to commit, so that every pass failed
#     with "out of shared memory", and so did other sessions meanwhile);
#     a claim running meanwhile never fails;
#   - inbox.max_scopes is a hard limit on the shared counters (0.4.0's hash
#     grew past it into the server's spare shared memory), and the counters
#     of dropped databases and of dropped extensions are reclaimed.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use Test::More;

my $scopes = 100_000;

# --- 100,000 scopes ---------------------------------------------------------------
my $node = InboxTest->node('scale',
	conf => "inbox.purge_enabled = off\nmax_locks_per_transaction = 64\n");

# One entry per scope, a day old, inserted directly: claiming them one by
# one would only make the test slower.
$node->sql(qq{
	INSERT INTO inbox.entries (scope, message_id, bucket, received_at)
	SELECT 'scope-' || g, 'm-1', inbox.bucket('scope-' || g, 'm-1'), now() - interval '1 day'
	  FROM generate_series(1, $scopes) g;
});

# A whole round in one transaction, with a retention that expires every
# entry, while another session claims in scopes of its own.
my $purger = $node->background_psql('postgres', on_error_stop => 0);
$purger->query_safe("SET inbox.retention = '1s'; SET inbox.purge_batch_size = 1000000;");
$purger->query_safe('BEGIN');
my $purged = $purger->query('SELECT inbox_purge()');
is($purged, $scopes, "one inbox_purge() purges an entry in each of $scopes scopes");
my $locks = $purger->query('SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid()');
# At most two locks (a read and a write mode) per relation of the extension
# (its tables, their leaves and indexes), and a few more (the transaction's
# own, the purge's per leaf), whatever the number of scopes.
my $relations = $node->sql(q{SELECT count(*) FROM pg_class WHERE relnamespace = 'inbox'::regnamespace});
ok($locks =~ /^\d+$/ && $locks < 2 * $relations + 20,
	"and holds a few locks, not one per scope ($locks, for $relations relations in schema inbox)");
is( $node->sql(q{
		SELECT count(*) FILTER (WHERE inbox_claim('meanwhile-' || g, 'm-1'))
		FROM generate_series(1, 1000) g
	}),
	1000,
	'a session claiming while that transaction is open never fails');
$purger->query_safe('COMMIT');
$purger->quit;
is($node->sql("SELECT count(*) FROM inbox.entries WHERE scope LIKE 'scope-%'"),
	0, 'the purge committed');

# The background worker, round after round, with a log to check.
$node->sql(qq{
	INSERT INTO inbox.entries (scope, message_id, bucket, received_at)
	SELECT 'scope-' || g, 'm-2', inbox.bucket('scope-' || g, 'm-2'), now() - interval '1 day'
	  FROM generate_series(1, $scopes) g;
});
my $log = $node->log_position;
$node->append_conf('postgresql.conf', qq{
inbox.purge_enabled = on
inbox.purge_naptime = 1
inbox.retention = '1s'
inbox.purge_batch_size = 20000
});
$node->reload;
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM inbox.entries WHERE scope LIKE 'scope-%'"),
	"the worker purges the $scopes scopes");
my $since = $node->log_since($log);
unlike($since, qr/out of shared memory|max_locks_per_transaction/,
	'without running out of lock space');
unlike($since, qr/inbox purge stopped early/, 'and without a pass stopping early');

# --- inbox.max_scopes ---------------------------------------------------------------
my $small = InboxTest->node('max_scopes',
	conf => "inbox.purge_enabled = off\ninbox.max_scopes = 100\ninbox.purge_naptime = 1\n");
$small->sql(q{SELECT count(inbox_claim('s-' || g, 'm')) FROM generate_series(1, 1000) g});
is($small->sql('SELECT count(*) FROM inbox.scope_counters()'),
	100, 'claims in 1,000 scopes leave exactly inbox.max_scopes = 100 of them counted');
is($small->sql("SELECT count(inbox_claim('s-' || g, 'again')) FROM generate_series(1, 1000) g"),
	1000, 'and scopes beyond the limit are still claimed');

# Counters of an extension dropped in a database are reclaimed: the purge
# worker, which runs in every database, finds the extension gone.
$small->sql('DROP EXTENSION inbox CASCADE');
$small->sql('CREATE DATABASE other');
$small->safe_psql('other', 'CREATE EXTENSION inbox');
ok( $small->poll_query_until('other', q{
		SELECT count(inbox_claim('o-' || g, md5(random()::text))) = 100
		   AND (SELECT count(*) FROM inbox.scope_counters()) = 100
		FROM generate_series(1, 100) g
	}),
	'once the extension is dropped in one database, its counters go and another database gets them');

# Counters of a dropped database are reclaimed: the launcher, which lists
# the databases, finds it gone.
$small->sql('CREATE EXTENSION inbox');
is($small->sql(q{SELECT count(inbox_claim('p-' || g, 'm')) FROM generate_series(1, 10) g}),
	10, 'while the counters are full, claims go on');
is($small->sql('SELECT count(*) FROM inbox.scope_counters()'), 0, 'uncounted');
$small->sql('DROP DATABASE other');
ok( $small->poll_query_until('postgres', q{
		SELECT count(inbox_claim('p-' || g, md5(random()::text))) = 10
		   AND (SELECT count(*) FROM inbox.scope_counters()) = 10
		FROM generate_series(1, 10) g
	}),
	'once that database is dropped, its counters are reclaimed and new scopes are counted');

$small->stop;
$node->stop;
done_testing();
