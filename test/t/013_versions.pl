# test/t/013_versions.pl
#
# Between the library and the SQL objects of a database:
#   - the library serves the SQL of the previous release (0.4.0) until
#     ALTER EXTENSION inbox UPDATE, so that claims never break between
#     "make install" and the update; an older SQL version gets an error
#     that names both versions and the command to run, and the worker
#     says so in the log instead of purging;
#   - a retention setting stored before the library was loaded is read in
#     interval syntax ('30 days'), as users write it; one that does not
#     parse stops the purge, loudly, instead of silently leaving the
#     default of 7 days in force (which purged entries early in 0.4.0).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

# --- settings stored before the library is loaded ---------------------------------
my $node = InboxTest->node('versions', preload => '');

# A session that has not loaded the library takes any inbox.* value, which
# is checked only when the library loads.
my ($rc, $out, $err) = $node->psql('postgres',
	q{SET inbox.retention = '2 weeks'; SELECT (extract(epoch FROM retention) / 86400)::int FROM inbox.settings()});
is($out, '14', "a retention SET as '2 weeks' before the library loads means 14 days");
($rc, $out, $err) = $node->psql('postgres',
	q{SET inbox.retention = 'a fortnight'; SELECT inbox_purge()});
like($err, qr/ERROR:  invalid value for parameter "inbox.retention": "a fortnight"/,
	'one that does not parse stops inbox_purge(), rather than leave the default in force');

# A fresh session has not loaded the library: the value is stored unchecked.
$node->sql(q{ALTER DATABASE postgres SET inbox.retention = '30 days'});
is($node->sql('SELECT (extract(epoch FROM retention) / 86400)::int FROM inbox.settings()'),
	'30', "a retention stored as '30 days' before the library loads means 30 days");

$node->sql(q{ALTER DATABASE postgres SET inbox.retention = 'a month or so'});
($rc, $out, $err) = $node->psql('postgres', 'SELECT inbox_purge()');
like($err, qr/ERROR:  invalid value for parameter "inbox.retention": "a month or so"/,
	'one that does not parse stops inbox_purge()');
like($err, qr/The purge does not run while it is in force/, 'and says why');
is($node->sql(q{SELECT retention IS NULL FROM inbox.settings()}),
	't', 'the settings show no retention in force');
is($node->sql(q{SELECT inbox_claim('s', 'm-1')}), 't', 'claims go on meanwhile');

# With the preload, the value is applied when each session starts; the
# worker refuses too, and says so in the log.
my $log = $node->log_position;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'inbox'
inbox.purge_naptime = 1
});
$node->restart;
($rc, $out, $err) = $node->psql('postgres', 'SELECT inbox_purge()');
like($err, qr/ERROR:  invalid value for parameter "inbox.retention"/,
	'with the preload, inbox_purge() refuses the stored value as well');
ok($node->wait_for_log(qr/inbox purge stopped early: invalid value for parameter "inbox.retention"/, $log),
	'and the worker refuses to purge, in the log');
$node->sql('ALTER DATABASE postgres RESET inbox.retention');
is($node->sql('SELECT inbox_purge()'), '0', 'once it is corrected, the purge runs');

# --- the SQL versions the library serves --------------------------------------------
$node->sql('CREATE DATABASE v040');
$node->safe_psql('v040', q{CREATE EXTENSION inbox VERSION '0.4.0'});
is( $node->safe_psql('v040', q{
		SELECT inbox_claim('b', 'm-1'), inbox_claim('b', 'm-1');
		SELECT inbox_receive('d', 'r-1', '{}'::jsonb);
		SELECT count(*) FROM inbox_status('b', 'm-1');
		SELECT inbox_purge();
		SELECT count(*) FROM inbox_stats WHERE scope = 'b';
	}),
	"t|f\nt\n1\n0\n1",
	'a database still at 0.4.0 is served by this library: claims, receives, status, purge, stats');
$node->safe_psql('v040', 'ALTER EXTENSION inbox UPDATE');
is( $node->safe_psql('v040', q{
		SELECT extversion FROM pg_extension WHERE extname = 'inbox';
		SELECT inbox_claim('b', 'm-1'), inbox_claim('b', 'm-2');
	}),
	"1.2.0\nf|t",
	'and keeps its history through the update');

# 1.1.0 and 1.2.0 only add SQL objects: a database still at 1.0.0 or
# 1.1.0 is served by the same entry points, and purged by the worker,
# until it is updated.
$node->sql('CREATE DATABASE v100');
$node->safe_psql('v100', q{CREATE EXTENSION inbox VERSION '1.0.0'});
is( $node->safe_psql('v100', q{
		SELECT inbox_claim('b', 'm-1'), inbox_claim('b', 'm-1');
		SELECT inbox_receive('d', 'r-1', '{}'::jsonb);
		SELECT inbox_purge();
	}),
	"t|f\nt\n0",
	'a database still at 1.0.0 is served by this library: claims, receives, purge');
$node->sql('CREATE DATABASE v110');
$node->safe_psql('v110', q{CREATE EXTENSION inbox VERSION '1.1.0'});
is( $node->safe_psql('v110', q{
		SELECT inbox_claim('b', 'm-1'), inbox_claim('b', 'm-1');
		SELECT inbox_receive('d', 'r-1', '{}'::jsonb, group_key => 'g');
		SELECT outbox_send('t', 'k', '{}'::jsonb) IS NOT NULL;
		SELECT inbox_purge();
	}),
	"t|f\nt\nt\n0",
	'a database still at 1.1.0 is served by this library: claims, receives, sends, purge');
# Its takes return 1.1.0's columns, and its receives and sends are those of
# a table without headers, whatever the trace context set
is( $node->safe_psql('v110', q{
		SELECT inbox_receive('d', 'r-2', '{}'::jsonb, NULL, NULL, NULL, 3);
		SELECT count(*) FROM inbox_receive_many('d', ARRAY['r-3'], ARRAY['\x03']::bytea[]);
		SELECT string_agg(message_id || ':' || coalesce(group_key, '-'), ' ' ORDER BY message_id)
		  FROM inbox_take('d', 10);
		SELECT string_agg(message_id, ' ') FROM inbox_poll('d', 10);
		BEGIN;
		SET LOCAL inbox.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
		SELECT outbox_send('t', 'k', '{}'::jsonb) IS NOT NULL;
		COMMIT;
		SELECT (SELECT count(*) FROM inbox_take('d', 1)) + (SELECT count(*) FROM inbox_poll('d', 1));
	}),
	"t\n1\nr-1:g r-2:- r-3:-\n\nt\n0",
	'and takes with its columns, messages above the default priority too, and sends with a trace context set');

$log = $node->log_position;
$node->sql('CREATE DATABASE v030');
$node->safe_psql('v030', q{CREATE EXTENSION inbox VERSION '0.3.0'});
($rc, $out, $err) = $node->psql('v030', q{SELECT inbox_claim('b', 'm-1')});
like($err, qr/inbox library 1\.2\.0 cannot serve version 0\.3\.0 of extension inbox/,
	'a database at 0.3.0 gets an error that names both versions');
like($err, qr/HINT:  Run ALTER EXTENSION inbox UPDATE in this database\./, 'and what to run');
ok( $node->wait_for_log(
		qr/inbox purge skips database "v030": library 1\.2\.0 cannot serve version 0\.3\.0/, $log),
	'the worker skips that database, and says why in the log');

# A whole pass of the worker, from one visit of v030 to the next, went
# through v100 and v110 too
my $pass = $node->log_position;
ok($node->wait_for_log(qr/inbox purge skips database "v030"/, $pass), 'the worker came back to v030');
ok(!$node->log_contains(qr/inbox purge skips database "v100"/, $log),
	'the worker does not skip the database at 1.0.0');
ok(!$node->log_contains(qr/inbox purge skips database "v110"/, $log),
	'nor the database at 1.1.0');

# The upgrade notes: CHANGELOG.md's "Upgrading" of 1.1.0 lists, with the
# identity that replaces it and its bundle, every function of the
# extension's schema whose identity 1.0.0 has and 1.1.0 lacks: a GRANT or
# REVOKE by that identity fails after the update.
my ($notes) = slurp_file("$FindBin::RealBin/../../CHANGELOG.md")
  =~ /^## 1\.1\.0\b.*?^### Upgrading\n(.*?)(?=^##)/ms;
ok(defined $notes, 'CHANGELOG.md has an Upgrading section under 1.1.0');
my @notes = map { [ /^\|\s*`([^`]+)`\s*\|\s*`([^`]+)`\s*\|\s*`(\w+)`\s*\|/ ] }
  grep { /^\|\s*`/ } split /\n/, $notes // '';
cmp_ok(scalar(@notes), '>=', 1, 'the Upgrading section has a table of identities (' . scalar(@notes) . ' rows)');
my $identities = q{
	SELECT p.oid::regprocedure::text FROM pg_proc AS p
	  JOIN pg_depend AS d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
	  JOIN pg_extension AS e ON e.oid = d.refobjid AND e.extname = 'inbox'
	 WHERE p.pronamespace = e.extnamespace ORDER BY 1};
my $resolve = sub {
	my ($db, @names) = @_;
	return () unless @names;
	return split /\n/, $node->safe_psql($db,
		'SELECT coalesce(to_regprocedure(n)::text, \'(none) \' || n) FROM unnest(ARRAY['
		  . join(', ', map { "'$_'" } @names) . ']) WITH ORDINALITY AS u(n, i) ORDER BY i');
};
my %in_100 = map { $_ => 1 } split /\n/, $node->safe_psql('v100', $identities);
my @documented_old = $resolve->('v100', map { $_->[0] } @notes);
$node->safe_psql('v100', q{ALTER EXTENSION inbox UPDATE TO '1.1.0'});
is( $node->safe_psql('v100', q{
		SELECT extversion FROM pg_extension WHERE extname = 'inbox';
		SELECT inbox_claim('b', 'm-1'), count(*) FROM inbox_bundles;
	}),
	"1.1.0\nf|45",
	'and keeps its history through the update to 1.1.0, which adds the bundles, content windows, the outbox '
	  . 'and ordered groups (one receive per payload type in place of two)');
my %in_110 = map { $_ => 1 } split /\n/, $node->safe_psql('v100', $identities);
my @lost = sort grep { !$in_110{$_} } keys %in_100;
is(join("\n", sort @documented_old), join("\n", @lost),
	'the Upgrading notes list every function identity that 1.0.0 has and 1.1.0 lacks, and nothing else');
my @documented_new = $resolve->('v100', map { $_->[1] } @notes);
is(join("\n", grep { /^\(none\)/ || !$in_110{$_} } @documented_new), '',
	'each identity that replaces one is a function of 1.1.0');
my %bundle_of = map { split /\|/ } split /\n/, $node->safe_psql('v100',
	q{SELECT to_regprocedure(object)::text || '|' || bundle FROM inbox_bundles WHERE object_type = 'function'});
is( join("\n", map { "$documented_new[$_] " . ($bundle_of{ $documented_new[$_] } // 'owner only') } 0 .. $#notes),
	join("\n", map { "$documented_new[$_] $notes[$_][2]" } 0 .. $#notes),
	'and the bundle the notes name for it holds it');
# 1.2.0 keeps every function identity of 1.1.0 but those its Upgrading
# notes list, with the identity that replaces each, and every call shape of
# 1.0.0 and 1.1.0, positional and named, resolves and runs as before in
# both updated databases.
my ($notes_120) = slurp_file("$FindBin::RealBin/../../CHANGELOG.md")
  =~ /^## 1\.2\.0\b.*?^### Upgrading\n(.*?)(?=^##)/ms;
ok(defined $notes_120, 'CHANGELOG.md has an Upgrading section under 1.2.0');
my @notes_120 = map { [ /^\|\s*`([^`]+)`\s*\|\s*`([^`]+)`\s*\|\s*`(\w+)`\s*\|/ ] }
  grep { /^\|\s*`/ } split /\n/, $notes_120 // '';
my @documented_110 = $resolve->('v110', map { $_->[0] } @notes_120);
my %in_110_v110 = map { $_ => 1 } split /\n/, $node->safe_psql('v110', $identities);
for my $db ('v100', 'v110')
{
	$node->safe_psql($db, 'ALTER EXTENSION inbox UPDATE');
	is($node->safe_psql($db, q{SELECT extversion FROM pg_extension WHERE extname = 'inbox'}),
		'1.2.0', "$db is updated to 1.2.0");
}
my %in_120 = map { $_ => 1 } split /\n/, $node->safe_psql('v110', $identities);
is($node->safe_psql('v100', 'SELECT count(*) FROM inbox_bundles'), '52',
	'the update to 1.2.0 adds ingest to the bundles: the subscriptions, the source schemes and the rejects');
is(join("\n", sort grep { !$in_120{$_} } keys %in_110_v110), join("\n", sort @documented_110),
	'1.2.0 has every function identity of 1.1.0 but those its Upgrading notes list');
my @documented_120 = $resolve->('v110', map { $_->[1] } @notes_120);
is(join("\n", grep { /^\(none\)/ || !$in_120{$_} } @documented_120), '',
	'each identity that replaces one is a function of 1.2.0');
%bundle_of = map { split /\|/ } split /\n/, $node->safe_psql('v110',
	q{SELECT to_regprocedure(object)::text || '|' || bundle FROM inbox_bundles WHERE object_type = 'function'});
is( join("\n", map { "$documented_120[$_] " . ($bundle_of{ $documented_120[$_] } // 'owner only') } 0 .. $#notes_120),
	join("\n", map { "$documented_120[$_] $notes_120[$_][2]" } 0 .. $#notes_120),
	'and the bundle the notes name for it holds it');
my $shapes = q{
	SELECT inbox_claim('c', 'm-1'), inbox_claim(scope => 'c', message_id => 'm-2', payload_hash => '\x01');
	SELECT inbox_claim_many('c', ARRAY['m-3', 'm-4']) IS NOT NULL;
	SELECT count(*) FROM inbox_status(scope => 'c', message_id => 'm-1');
	SELECT inbox_receive('r', 'r-1', '{"a": 1}'::jsonb), inbox_receive('r', 'r-2', '\x0102'::bytea),
		   inbox_receive(scope => 'r', message_id => 'r-3', payload => '{}'::jsonb, not_before => NULL),
		   inbox_receive('r', 'r-4', '{}'::jsonb, NULL, NULL, 'g', 0);
	SELECT count(*) FROM inbox_receive_many('r', ARRAY['r-5', 'r-6'], ARRAY['{}', '{}']::jsonb[]);
	SELECT count(*) FROM inbox_receive_many(scope => 'r', message_ids => ARRAY['r-7'],
											payloads => ARRAY['\x07']::bytea[], group_keys => ARRAY['g']);
	SELECT count(*) FROM inbox_take('r', 2);
	SELECT count(*) FROM inbox_take(scope => 'r', max_messages => 10, lease => '1 minute');
	SELECT inbox_complete('r', 'r-1', NULL), inbox_fail(scope => 'r', message_id => 'r-2', error => 'e');
	SELECT outbox_send('t', 'k', '{}'::jsonb) IS NOT NULL,
		   outbox_send(topic => 't', key => 'k', payload => '\x01'::bytea, headers => '{"h": "v"}') IS NOT NULL;
	SELECT cardinality(outbox_send_many('t', ARRAY['k1', 'k2'], ARRAY['{}', '{}']::jsonb[]));
	SELECT inbox_claim_offset('s', 'stream', 1), (SELECT pending FROM inbox_depth('r')) >= 0;
};
# 1.2.0's own shapes, on the updated databases: headers last, by position
# and by name, taken back last
my $shapes_120 = q{
	SELECT inbox_receive('h', 'h-1', '{}'::jsonb, NULL, NULL, NULL, 0, '{"a": "1"}'),
		   inbox_receive(scope => 'h', message_id => 'h-2', payload => '\x02'::bytea, headers => '{"b": "2"}');
	SELECT count(*) FROM inbox_receive_many('h', ARRAY['h-3'], ARRAY['{}']::jsonb[], NULL, NULL, 'raise', NULL, NULL,
											ARRAY['{"c": "3"}']::jsonb[]);
	SELECT string_agg(message_id || '=' || headers::text, ' ' ORDER BY message_id) FROM inbox_take('h', 10);
};
for my $db ('v100', 'v110')
{
	my ($src, $sout, $serr) = $node->psql($db, $shapes);
	is($serr, '', "$db at 1.2.0: the call shapes of 1.0.0 and 1.1.0 resolve without error");
	like($sout, qr/\At\|t\nt\nt\n1\nt\|t\|t\|t\n2\n1\n2\n4\n\|pending\nt\|t\n2\nt\|t\z/,
		"$db at 1.2.0: and answer as before") or diag($sout);
	is($node->safe_psql($db, $shapes_120),
		qq{t|t\n1\nh-1={"a": "1"} h-2={"b": "2"} h-3={"c": "3"}},
		"$db at 1.2.0: receives take headers last, and takes return them");
}
$node->safe_psql('v030', 'ALTER EXTENSION inbox UPDATE');
is($node->safe_psql('v030', q{SELECT inbox_claim('b', 'm-1')}),
	't', 'after the update, it is served');

$node->stop;
done_testing();
