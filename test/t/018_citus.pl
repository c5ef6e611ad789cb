# test/t/018_citus.pl
#
# The API on Citus, with inbox.entries distributed by scope and co-located
# with the business table, on a coordinator and two workers (the layout of
# docs/scale-out.md).  What works must work there, and what cannot must be
# refused with the error that says why (src/distributed.c), never fail from
# inside Citus's planner or, worse, give a wrong answer:
#
#   - a claim and its effect commit as one transaction; a duplicate returns
#     false, or raises IB001 under on_duplicate = raise; a different
#     payload under the same id raises IB002; inbox_status reads the entry;
#   - inbox_claim_many and inbox_receive_many (which run one INSERT per id
#     there) give every id its status: claimed, duplicate (also within the
#     batch) and mismatch, and write exactly the claimed ids;
#   - inbox_poll under a lease, then inbox_extend, inbox_fail and
#     inbox_complete by receipt, the completion in the effect's transaction;
#     a message polled under a running lease is not handed out again, and
#     one failed max_attempts times is a dead letter;
#   - refused with 0A000 and their reason: session-bound takes (inbox_take,
#     inbox_poll without a lease) and inbox.claim_timeout;
#   - inbox_forget and inbox_forget_range remove done entries and audit
#     each, with the entry as it was; a forgotten id claims again;
#   - retention: inbox_purge() deletes the done entries past the retention
#     and keeps those inside it and the open messages, at most
#     inbox.purge_batch_size rows a call, and a purged id claims again; the
#     purge worker, which runs on the coordinator only, purges the shards
#     by itself, and no node logs a purge warning;
#   - inbox_stats_reset recounts a scope's entries on the shards, and
#     inbox_stats reports them with the backlog and the dead letters;
#   - DROP EXTENSION is still guarded (2BP01) while entries exist;
#   - an application role may claim alone; a claim and its effect in one
#     transaction give Citus's 25001 (different users on one placement),
#     the limitation docs/scale-out.md describes.  This assertion records
#     the behaviour: if a Citus release lifts it, the test fails and the
#     docs change with it.
#
# Skipped as a whole, in one line, when Citus is not installed for the
# PostgreSQL under test (run it with make test PG_CONFIG=... ONLY=...).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use Test::More;
use PostgreSQL::Test::Utils qw(slurp_file);

my $coord = InboxTest->new('coordinator');
plan skip_all => 'Citus is not installed for this PostgreSQL'
  unless $coord->has_extension('citus');

# Citus connects between nodes over TCP: every node listens on loopback
my @nodes = ($coord, InboxTest->new('worker1'), InboxTest->new('worker2'));
for my $node (@nodes)
{
	$node->init;
	$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'citus,inbox'
listen_addresses = '127.0.0.1'
max_prepared_transactions = 20
citus.shard_count = 4
});
	$node->append_conf('pg_hba.conf', "host all all 127.0.0.1/32 trust\n");
	$node->start;
	$node->sql('CREATE EXTENSION citus');
}
$coord->sql("SELECT citus_set_coordinator_host('127.0.0.1', " . $coord->port . ')');
$coord->sql("SELECT citus_add_node('127.0.0.1', " . $_->port . ')') for @nodes[1, 2];

# The layout: the business table distributed by scope, inbox.entries
# co-located with it (the distribution columns must share collation "C")
$coord->sql(q{
	CREATE EXTENSION inbox;
	CREATE TABLE orders (scope text COLLATE "C" NOT NULL, message_id text NOT NULL, amount int);
	SELECT create_distributed_table('orders', 'scope');
	SELECT create_distributed_table('inbox.entries', 'scope', colocate_with => 'orders');
	CREATE ROLE app LOGIN;
	GRANT SELECT, INSERT ON orders TO app;
	GRANT EXECUTE ON FUNCTION inbox_claim(text, text, bytea) TO app;
});
is($coord->sql(q{SELECT count(*) FROM pg_dist_partition
				  WHERE logicalrelid::text LIKE 'inbox.entries%'}),
	'9', 'inbox.entries and its 8 leaves are distributed');

# psql's error output for $sql, '' if it succeeded
sub fails
{
	my ($node, $sql, %opts) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', $sql,
		extra_params => [ '-v', 'VERBOSITY=verbose', @{ $opts{params} // [] } ]);
	return $ret == 0 ? '' : $err;
}

# --- claims ----------------------------------------------------------------------

is( $coord->sql(q{
		BEGIN;
		SELECT inbox_claim('billing', 'm1', '\x01');
		INSERT INTO orders VALUES ('billing', 'm1', 10);
		COMMIT;
		SELECT inbox_claim('billing', 'm1', '\x01');
		SELECT count(*) FROM orders WHERE message_id = 'm1';}),
	"t\nf\n1", 'a claim and its effect commit together; the duplicate returns false');
like(fails($coord, q{SET inbox.on_duplicate = raise; SELECT inbox_claim('billing', 'm1', '\x01')}),
	qr/IB001/, 'a duplicate raises IB001 under on_duplicate = raise');
like(fails($coord, q{SELECT inbox_claim('billing', 'm1', '\x02')}),
	qr/IB002/, 'a different payload under the same id raises IB002');
is($coord->sql(q{SELECT state FROM inbox_status('billing', 'm1')}),
	'done', 'inbox_status reads the entry');

is( $coord->sql(q{
		SELECT string_agg(message_id || ':' || status, ' ' ORDER BY ordinality)
		  FROM inbox_claim_many('billing', ARRAY['m1', 'b1', 'b2', 'b1'], NULL)}),
	'm1:duplicate b1:claimed b2:claimed b1:duplicate',
	'inbox_claim_many: duplicates, earlier and within the batch, and claims');
is( $coord->sql(q{
		SELECT string_agg(message_id || ':' || status, ' ' ORDER BY ordinality)
		  FROM inbox_claim_many('billing', ARRAY['m1', 'b3'], ARRAY['\x02', '\x03']::bytea[],
								on_mismatch => 'return')}),
	'm1:mismatch b3:claimed', 'inbox_claim_many returns a mismatch as a status when asked');
like(fails($coord, q{SELECT * FROM inbox_claim_many('billing', ARRAY['b4', 'm1'], ARRAY['\x04', '\x02']::bytea[])}),
	qr/IB002/, 'by default a mismatch raises IB002 for the whole batch');
is( $coord->sql(q{SELECT string_agg(message_id, ' ' ORDER BY message_id) FROM inbox.entries
				   WHERE scope = 'billing'}),
	'b1 b2 b3 m1', 'exactly the claimed ids were written (b4 rolled back with its batch)');

# --- the deferred mode, by receipt -------------------------------------------------------------------

is( $coord->sql(q{
		SELECT string_agg(message_id || ':' || status, ' ' ORDER BY ordinality)
		  FROM inbox_receive_many('jobs', ARRAY['j1', 'j2', 'j1'],
								  ARRAY['{"n": 1}', '{"n": 2}', '{"n": 1}']::jsonb[])}),
	'j1:received j2:received j1:duplicate', 'inbox_receive_many');
my ($id, $receipt) = split /\|/,
  $coord->sql(q{SELECT message_id || '|' || receipt FROM inbox_poll('jobs', 1, '10 minutes')});
is($id, 'j1', 'inbox_poll under a lease takes the oldest message');
is($coord->sql(q{SELECT count(*) FROM inbox_poll('jobs', 5, '10 minutes') WHERE message_id = 'j1'}),
	'0', 'a message polled under a running lease is not handed out again');
is($coord->sql(qq{SELECT inbox_extend('jobs', '$receipt'::uuid, '20 minutes') > now() + interval '15 minutes'}),
	't', 'inbox_extend by receipt');
is($coord->sql(qq{SELECT inbox_fail('jobs', '$receipt'::uuid, 'try again')}),
	'pending', 'inbox_fail by receipt puts the message back');
($id, $receipt) = split /\|/,
  $coord->sql(q{SELECT message_id || '|' || receipt FROM inbox_poll('jobs', 1, '10 minutes') WHERE message_id = 'j1'});
is( $coord->sql(qq{
		BEGIN;
		INSERT INTO orders VALUES ('jobs', '$id', 1);
		SELECT inbox_complete('jobs', '$receipt'::uuid, '{"ok": true}');
		COMMIT;
		SELECT inbox_result('jobs', '$id');}),
	qq{\n{"ok": true}}, 'inbox_complete by receipt in the effect\'s transaction; the result is kept');

# j2 was polled by the batch poll above: fail it until it dies
$coord->sql(q{SELECT inbox_set_max_attempts('jobs', 2)});
for my $round (1 .. 3)
{
	my $r = $coord->sql(q{SELECT receipt FROM inbox.entries WHERE scope = 'jobs' AND message_id = 'j2' AND state = 'r'})
	  || $coord->sql(q{SELECT receipt FROM inbox_poll('jobs', 1, '10 minutes')});
	last if $r eq '';
	$coord->sql(qq{SELECT inbox_fail('jobs', '$r'::uuid, 'broken')});
}
is($coord->sql(q{SELECT message_id || ':' || attempts FROM inbox_dead_letters WHERE scope = 'jobs'}),
	'j2:2', 'a message failed max_attempts times is a dead letter');

# --- refused, with their reason ----------------------------------------------------------

my %refused = (
	'inbox_take' => q{SELECT * FROM inbox_take('jobs', 1)},
	'inbox_poll without a lease' => q{SELECT * FROM inbox_poll('jobs', 1, NULL)},
	'inbox.claim_timeout' => q{SET inbox.claim_timeout = 100; SELECT inbox_claim('billing', 'c1')},
);
for my $api (sort keys %refused)
{
	like(fails($coord, $refused{$api}),
		qr/ERROR:  0A000: inbox cannot .* when inbox\.entries is distributed by Citus/,
		"$api is refused with its reason");
}
is($coord->sql(q{SELECT count(*) FROM inbox.entries WHERE message_id = 'c1'}),
	'0', 'the refused claim wrote nothing');

# --- retention -----------------------------------------------------------------------------

is( $coord->sql(q{
		SET inbox.idle_threshold = '365d';
		SELECT count(inbox_claim('ret', 'past-' || g)) FROM generate_series(1, 3) g;
		SELECT count(inbox_claim('ret', 'inside-' || g)) FROM generate_series(1, 3) g;
		SELECT count(*) FROM inbox_receive('ret', 'open-1', '{}'::jsonb);
		UPDATE inbox.entries SET received_at = now() - interval '7 days 1 minute'
		 WHERE scope = 'ret' AND message_id LIKE 'past-%';
		UPDATE inbox.entries SET received_at = now() - interval '6 days 23 hours 59 minutes'
		 WHERE scope = 'ret' AND message_id LIKE 'inside-%';
		UPDATE inbox.entries SET received_at = now() - interval '30 days'
		 WHERE scope = 'ret' AND message_id = 'open-1';
		SELECT inbox_purge();
		SELECT string_agg(message_id, ' ' ORDER BY message_id) FROM inbox.entries WHERE scope = 'ret';
		SELECT inbox_claim('ret', 'past-1');}),
	"3
3
1
3
inside-1 inside-2 inside-3 open-1
t",
	'inbox_purge deletes what is past the retention, keeps the rest and open messages; a purged id claims again');
is( $coord->sql(q{
		SET inbox.idle_threshold = '365d';
		SET inbox.purge_batch_size = 2;
		SELECT count(inbox_claim('bat', 'b-' || g)) FROM generate_series(1, 5) g;
		UPDATE inbox.entries SET received_at = now() - interval '8 days' WHERE scope = 'bat';
		SELECT inbox_purge() <= 2;
		SELECT count(*) >= 3 FROM inbox.entries WHERE scope = 'bat';}),
	"5
t
t", 'inbox_purge deletes at most inbox.purge_batch_size rows a call');

# The worker: retention 1 hour for scope 'auto', whose entries are 2 hours old
$coord->sql(q{SELECT count(inbox_claim('auto', 'a-' || g)) FROM generate_series(1, 4) g;
			  UPDATE inbox.entries SET received_at = now() - interval '2 hours' WHERE scope = 'auto';
			  SELECT inbox_set_retention('auto', '1 hour');});
for my $node (@nodes)
{
	$node->append_conf('postgresql.conf', "inbox.purge_naptime = '1s'\ninbox.idle_threshold = '365d'\n");
	$node->reload;
}
ok( $coord->poll_query_until('postgres',
		q{SELECT count(*) = 0 FROM inbox.entries WHERE scope = 'auto'}),
	'the purge worker purges the shards');
for my $node (@nodes)
{
	unlike(slurp_file($node->logfile), qr/inbox purge stopped early/,
		$node->name . ' logged no purge warning');
}

# --- forget ----------------------------------------------------------------------------------

is( $coord->sql(q{
		SELECT inbox_forget('billing', 'b1', 'replay b1');
		SELECT inbox_forget_range('ret', '-infinity', 'infinity', 'replay ret');
		SELECT string_agg(coalesce(message_id, '-') || ':' || coalesce(entry->>'message_id', '-'), ' '
						  ORDER BY message_id)
		  FROM inbox.forget_log;
		SELECT inbox_claim('billing', 'b1');}),
	"t
4
b1:b1 inside-1:inside-1 inside-2:inside-2 inside-3:inside-3 past-1:past-1
t",
	'inbox_forget and inbox_forget_range remove done entries, audit each with its entry; the id claims again');

# --- statistics -----------------------------------------------------------------------------

$coord->sql(q{SELECT inbox_stats_reset()});
is( $coord->sql(q{
		SELECT entries_retained || ' ' || dead || ' ' || pending || ' ' || (oldest_entry IS NOT NULL)
		  FROM inbox_stats WHERE scope = 'jobs'}),
	'2 1 0 true', 'inbox_stats_reset recounts, and inbox_stats reads the shards: retained, dead, pending');

like(fails($coord, q{DROP EXTENSION inbox}), qr/2BP01/,
	'DROP EXTENSION is guarded while entries exist');

# --- an application role ------------------------------------------------------------------

is($coord->sql(q{SET ROLE app; SELECT inbox_claim('shop', 'a1')}),
	't', 'an application role claims alone');
like(
	fails($coord, q{
		SET ROLE app;
		BEGIN;
		SELECT inbox_claim('shop', 'a2');
		INSERT INTO orders VALUES ('shop', 'a2', 1);
		COMMIT;}),
	qr/25001/,
	'an application role cannot write its effect where its claim wrote (docs/scale-out.md)');
is($coord->sql(q{SELECT count(*) FROM inbox.entries WHERE message_id = 'a2'}),
	'0', 'and nothing of that transaction remains');

$_->stop for reverse @nodes;
done_testing();
