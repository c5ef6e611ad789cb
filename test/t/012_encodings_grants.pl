# test/t/012_encodings_grants.pl
#
# Defects of 0.4.0 that need a database of another encoding, or a restore
# into another cluster, each fixed in 1.0.0:
#   - in a LATIN1 database, a C1 control character in an id reached the
#     server log raw: it is quoted as \uNNNN whatever the encoding;
#   - in a SQL_ASCII database, inbox_receive of a jsonb payload with a
#     non-ASCII byte failed with 22021 from inside the extension: the
#     digest is taken of the bytes as stored;
#   - scope grants were dumped as role OIDs: a grant to a dropped role as a
#     bare number that attaches to whatever role has it elsewhere, and one
#     grantee missing at restore failed the COPY of every grant, which
#     opened every reserved scope.  Grants name their role: a restore
#     keeps every grant, and a grant whose role is missing keeps its scope
#     closed.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = InboxTest->node('encodings', conf => "inbox.purge_enabled = off\n");

# --- LATIN1: C1 controls are quoted ------------------------------------------------
$node->sql(q{CREATE DATABASE latin1 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0});
$node->safe_psql('latin1', 'CREATE EXTENSION inbox');
# The id is "A", NEL (0x85, a C1 control that ends a line on some
# terminals), "B"; sent as bytes, so that no client conversion is involved.
my $id = q{convert_from('\x418542'::bytea, 'LATIN1')};
$node->safe_psql('latin1', "SELECT inbox_claim('c1', $id)");
my ($rc, $out, $err) = $node->psql('latin1',
	"SET inbox.on_duplicate = raise; SELECT inbox_claim('c1', $id)");
like($err, qr/message "A\\u0085B" in scope "c1" was already processed/,
	'a C1 control in a LATIN1 id is quoted as \u0085 in the error');
unlike(slurp_file($node->logfile), qr/A\x85B/, 'and never reaches the server log raw');

# --- SQL_ASCII: a jsonb payload with a non-ASCII byte -------------------------------
$node->sql(q{CREATE DATABASE sqlascii ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0});
$node->safe_psql('sqlascii', 'CREATE EXTENSION inbox');
# {"a": "<0xE9>"}: Latin-1 e-acute, not valid UTF-8
my $payload = q{convert_from('\x7b2261223a2022e9227d'::bytea, 'SQL_ASCII')::jsonb};
is($node->safe_psql('sqlascii', "SELECT inbox_receive('q', 'm-1', $payload)"),
	't', 'inbox_receive takes a jsonb payload with a non-UTF-8 byte in SQL_ASCII');
is( $node->safe_psql('sqlascii',
		q{SELECT payload_hash = sha256('\x7b2261223a2022e9227d'::bytea) FROM inbox.entries WHERE message_id = 'm-1'}),
	't',
	'its digest is that of the text form, byte for byte');
is($node->safe_psql('sqlascii', "SELECT inbox_receive('q', 'm-1', $payload)"),
	'f', 'and a redelivery is a duplicate, not a mismatch');

# --- scope grants across a dump and a restore --------------------------------------
$node->sql(q{
	CREATE DATABASE src;
	CREATE ROLE app_a;
	CREATE ROLE app_b;
	CREATE ROLE app_gone;
});
$node->safe_psql('src', q{
	CREATE EXTENSION inbox;
	GRANT EXECUTE ON FUNCTION inbox_claim(text, text, bytea) TO app_a;
	SELECT inbox_grant('for-a', 'app_a');
	SELECT inbox_grant('for-b', 'app_b');
	SELECT inbox_grant('for-gone', 'app_gone');
});
$node->sql('DROP ROLE app_gone');
my $dump = $node->basedir . '/grants.sql';
$node->command_ok(
	[ 'pg_dump', '--file', $dump, '--dbname', $node->connstr('src') ],
	'pg_dump of a database with scope grants');
my $text = slurp_file($dump);
like($text, qr/^for-gone\tapp_gone\t/m, 'a grant to a dropped role is dumped with its name');
unlike($text, qr/^for-\w+\t\d+\t/m, 'no grant is dumped as a bare role OID');

# app_b is missing where the dump is restored
$node->sql('DROP ROLE app_b');
$node->sql('CREATE DATABASE restored');
$node->command_ok(
	[ 'psql', '-X', '-v', 'ON_ERROR_STOP=1', '--file', $dump, '--dbname', $node->connstr('restored') ],
	'the dump restores, though one grantee is missing');
is($node->safe_psql('restored', 'SELECT count(*) FROM inbox.scope_grants'),
	3, 'and keeps every grant');
is($node->safe_psql('restored', q{SET ROLE app_a; SELECT inbox_claim('for-a', 'm-1')}),
	't', 'a grant whose role exists works');
for my $scope ('for-b', 'for-gone')
{
	my ($rc, $out, $err) = $node->psql('restored',
		"SET ROLE app_a; SELECT inbox_claim('$scope', 'm-1')");
	like($err, qr/permission denied for inbox scope "$scope"/,
		"a scope whose grantee is missing stays closed ($scope)");
}
is( $node->safe_psql('restored',
		q{SELECT string_agg(scope || ':' || coalesce(grantee::text, '-') || ':' || grantee_name, ',' ORDER BY scope) FROM inbox_grants}),
	'for-a:app_a:app_a,for-b:-:app_b,for-gone:-:app_gone',
	'inbox_grants shows which grants name a missing role');

# A role created later under the name gets the grant: grants are by name,
# as every grant pg_dump restores.
$node->sql('CREATE ROLE app_b');
$node->safe_psql('restored', 'GRANT EXECUTE ON FUNCTION inbox_claim(text, text, bytea) TO app_b');
is($node->safe_psql('restored', q{SET ROLE app_b; SELECT inbox_claim('for-b', 'm-1')}),
	't', 'a role created under the granted name may act on the scope');

$node->stop;
done_testing();
