# test/t/005_upgrade_dump.pl
#
# The dedup history survives the operations that move it:
#   - ALTER EXTENSION inbox UPDATE from every earlier version keeps every
#     entry, and a message claimed before the update is still a duplicate;
#     EXECUTE grants given to applications on an older version still work
#     after the update (0.4.0 turns the API into entry points in place);
#   - pg_dump and restore keep entries in every state, their payloads and
#     results, and per-scope settings: a message claimed before the dump is
#     a duplicate after the restore, and a pending one can still be taken;
#     scope grants and the applications' EXECUTE grants are restored too.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

# The extension is created in each database below, at the version each needs.
my $node = InboxTest->node('upgrade', conf => "inbox.purge_enabled = off\n", extension => 0);

my $latest = $node->sql(
	"SELECT default_version FROM pg_available_extensions WHERE name = 'inbox'");

# --- update from the first release, one version at a time -------------------
$node->sql('CREATE DATABASE up');
$node->safe_psql('up', "CREATE EXTENSION inbox VERSION '0.1.0'");
$node->safe_psql('up', q{
	SELECT count(inbox_claim('billing', 'INV-' || g, sha256(convert_to(g::text, 'UTF8'))))
	FROM generate_series(1, 500) g;
});
my $before = $node->safe_psql('up',
	"SELECT md5(string_agg(scope || message_id || received_at || payload_hash, ',' ORDER BY scope, message_id)) FROM inbox.entries");

my @path = split /\n/, $node->safe_psql('up',
	"SELECT target FROM pg_extension_update_paths('inbox') WHERE source = '0.1.0' AND target = '$latest'");
ok(@path, "an update path leads from 0.1.0 to $latest");

for my $version ('0.2.0', '0.3.0', $latest)
{
	$node->safe_psql('up', "ALTER EXTENSION inbox UPDATE TO '$version'");
	# An application role as administrators set it up on 0.3.0
	$node->safe_psql('up', q{
		CREATE ROLE upgrade_app;
		GRANT EXECUTE ON FUNCTION inbox_claim(text, text, bytea), inbox_take(text, integer, interval)
			TO upgrade_app;
	}) if $version eq '0.3.0';
	is($node->safe_psql('up', "SELECT extversion FROM pg_extension WHERE extname = 'inbox'"),
		$version, "updated to $version");
	is( $node->safe_psql('up',
			"SELECT md5(string_agg(scope || message_id || received_at || payload_hash, ',' ORDER BY scope, message_id)) FROM inbox.entries"
		),
		$before,
		"every entry is kept, unchanged, by the update to $version");
	is( $node->safe_psql('up',
			"SELECT count(*) FILTER (WHERE inbox_claim('billing', 'INV-' || g, sha256(convert_to(g::text, 'UTF8')))) FROM generate_series(1, 500) g"
		),
		0, "messages claimed before the update are duplicates after it ($version)");
}

is( $node->safe_psql('up', q{
		SET ROLE upgrade_app;
		SELECT inbox_claim('billing', 'INV-1', sha256(convert_to('1', 'UTF8')));
		SELECT count(*) FROM inbox_take('nothing-here');
	}),
	"f\n0",
	'an application role granted EXECUTE on 0.3.0 still calls the API after the update');
is( $node->safe_psql('up',
		"SELECT count(*) FROM pg_proc WHERE proname LIKE 'inbox\\_%' AND has_function_privilege('upgrade_app', oid, 'EXECUTE')"
	),
	2, 'and holds exactly the grants it had');

# The updated database has everything a fresh install has.
$node->sql('CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION inbox');
my $objects = q{
	SELECT string_agg(pg_describe_object(classid, objid, objsubid), E'\n' ORDER BY 1)
	FROM pg_depend
	WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
	  AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'inbox')
};
is($node->safe_psql('up', $objects), $node->safe_psql('fresh', $objects),
	'an updated database has the same objects as a fresh install');
my $columns = q{
	SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum)
	FROM pg_attribute WHERE attrelid = 'inbox.entries'::regclass AND attnum > 0 AND NOT attisdropped
};
is($node->safe_psql('up', $columns), $node->safe_psql('fresh', $columns), 'with the same columns in the same order');
is($node->safe_psql('up', "SELECT inbox_receive('orders', 'after-update', '{}'::jsonb)"),
	't', 'the deferred mode works after the update');

# --- pg_dump and restore ----------------------------------------------------------
$node->sql('CREATE DATABASE src');
$node->safe_psql('src', 'CREATE EXTENSION inbox');
$node->safe_psql('src', q{
	SELECT inbox_claim('billing', 'INV-1', sha256('one'));
	SELECT inbox_receive('orders', 'pending-1', '{"n": 1}'::jsonb);
	SELECT inbox_receive('orders', 'done-1', '{"n": 2}'::jsonb);
	SELECT inbox_receive('orders', 'dead-1', '\x0102'::bytea);
	SELECT inbox_set_retention('billing', '30 days');
	SELECT inbox_set_max_attempts('orders', 1);
	CREATE ROLE dump_app;
	GRANT EXECUTE ON FUNCTION inbox_claim(text, text, bytea) TO dump_app;
	SELECT inbox_grant('billing', 'dump_app');
	SELECT inbox_grant('orders', 'upgrade_app');
});
# done-1 completed with a result, dead-1 failed into the dead letters.
$node->safe_psql('src', q{
	CREATE FUNCTION finish() RETURNS void LANGUAGE plpgsql AS $$
	DECLARE m record;
	BEGIN
		FOR m IN SELECT * FROM inbox_take('orders', 10) WHERE message_id <> 'pending-1' LOOP
			IF m.message_id = 'done-1' THEN
				PERFORM inbox_complete('orders', m.message_id, '{"shipment": "S-1"}');
			ELSE
				PERFORM inbox_fail('orders', m.message_id, 'bad EDI');
			END IF;
		END LOOP;
	END $$;
	SELECT finish();
	-- pending-1 was taken too by that call; put it back as the test needs it
	UPDATE inbox.entries SET state = 'p', owner_session = NULL, attempts = 0
	 WHERE message_id = 'pending-1';
});
my $state = q{
	SELECT string_agg(concat_ws('|', scope, message_id, state, received_at, payload_hash,
								payload, payload_bytes, attempts, last_error, result),
					  E'\n' ORDER BY scope, message_id)
	FROM inbox.entries
};
my $src_state = $node->safe_psql('src', $state);
is(scalar(my @lines = split(/\n/, $src_state)), 4, 'the source holds four entries to compare');
is(join('', map { (split /\|/)[2] } @lines), 'dxdp',
	'in states done, dead, done and pending') or diag($src_state);
my $settings = "SELECT string_agg(concat_ws('|', scope, retention, max_attempts), ',' ORDER BY scope) FROM inbox.scopes WHERE retention IS NOT NULL OR max_attempts IS NOT NULL";
my $src_settings = $node->safe_psql('src', $settings);

my $dump = $node->basedir . '/src.dump';
$node->command_ok(
	[ 'pg_dump', '--format=custom', '--file', $dump, '--dbname', $node->connstr('src') ],
	'pg_dump of a database using the extension');
$node->sql('CREATE DATABASE restored');
$node->command_ok(
	[ 'pg_restore', '--exit-on-error', '--dbname', $node->connstr('restored'), $dump ],
	'pg_restore into a new database');

is($node->safe_psql('restored', $state), $src_state,
	'every entry is restored with its state, times, hashes, payloads, attempts, errors and results');
is($node->safe_psql('restored', $settings), $src_settings, 'per-scope settings are restored');
is($node->safe_psql('restored', "SELECT string_agg(scope || ':' || grantee, ',' ORDER BY scope) FROM inbox_grants"),
	'billing:dump_app,orders:upgrade_app', 'scope grants are restored, by role name');
is( $node->safe_psql('restored', q{
		SET ROLE dump_app;
		SELECT inbox_claim('billing', 'INV-1', sha256('one'));
	}),
	'f', 'and so is the EXECUTE grant of an application role, which acts on its scope');
is($node->safe_psql('restored', "SELECT inbox_claim('billing', 'INV-1', sha256('one'))"),
	'f', 'a message claimed before the dump is a duplicate after the restore');
is($node->safe_psql('restored', "SELECT message_id FROM inbox_take('orders')"),
	'pending-1', 'a pending message can still be taken');
is($node->safe_psql('restored', "SELECT inbox_result('orders', 'done-1')"),
	'{"shipment": "S-1"}', 'a stored result is still there');
is($node->safe_psql('restored', "SELECT message_id FROM inbox_dead_letters"),
	'dead-1', 'and so is the dead letter');
my ($rc, $out, $err) = $node->psql('restored', q{
	SET ROLE dump_app;
	SELECT inbox_claim('orders', 'not-yours');
});
like($err, qr/permission denied for inbox scope "orders"/,
	'a scope granted to another role stays closed after the restore');

$node->stop;
done_testing();
