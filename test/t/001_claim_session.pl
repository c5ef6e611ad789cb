# test/t/001_claim_session.pl
#
# The claim path in one long-lived backend, on a server that does NOT
# preload the library (as on a managed service):
#   - inbox_claim works once the extension is created, nothing else needed;
#   - a backend that makes many claims (new, duplicate and mismatching) does
#     not grow: per-call memory dies with the call, and the kept plans are
#     made once.  The bench repeats this with 1,000,000 claims.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

# Durability is not under test here; memory is.
my $node = InboxTest->node('claim_session', preload => '', conf => "synchronous_commit = off\n");
is($node->sql('SHOW shared_preload_libraries'), '', 'the library is not preloaded');
is( $node->sql("SELECT inbox_claim('s', 'm1'), inbox_claim('s', 'm1')"),
	't|f', 'claims work without shared_preload_libraries');

# Claims in batches, committing every 10,000, so that a leak per call would
# add up while a leak per transaction could not hide either.
$node->sql(
	q{
CREATE PROCEDURE claim_many(n int, tag text) LANGUAGE plpgsql AS $$
DECLARE
	dup boolean;
BEGIN
	FOR i IN 1..n LOOP
		-- a new claim, then its duplicate
		PERFORM inbox_claim('mem', tag || i, sha256(convert_to(i::text, 'UTF8')));
		dup := NOT inbox_claim('mem', tag || i, sha256(convert_to(i::text, 'UTF8')));
		IF NOT dup THEN
			RAISE EXCEPTION 'claim % was not a duplicate', tag || i;
		END IF;
		-- every 100th, a payload mismatch, caught like a consumer would
		IF i % 100 = 0 THEN
			BEGIN
				PERFORM inbox_claim('mem', tag || i, sha256('other'));
				RAISE EXCEPTION 'mismatch not detected';
			EXCEPTION WHEN SQLSTATE 'IB002' THEN
				NULL;
			END;
		END IF;
		IF i % 10000 = 0 THEN
			COMMIT;
		END IF;
	END LOOP;
END $$;
CREATE FUNCTION backend_bytes() RETURNS bigint LANGUAGE sql
	AS 'SELECT sum(total_bytes)::bigint FROM pg_backend_memory_contexts';
});

# One session: warm up, measure, claim a lot more, measure again.
my $out = $node->sql(
	q{
CALL claim_many(20000, 'warm-');
SELECT backend_bytes();
CALL claim_many(200000, 'run-');
SELECT backend_bytes();
SELECT count(*) FROM inbox.entries WHERE scope = 'mem';
});
my ($before, $after, $rows) = split /\n/, $out;
note "backend memory: $before bytes after warm-up, $after bytes after 200,000 more claims";
is($rows, 220000, 'every new claim was recorded once');

# A leak of even 2 bytes per call would show as 800 kB here.
cmp_ok($after - $before, '<', 64 * 1024,
	'backend memory does not grow with the number of claims');

$node->stop;
done_testing();
