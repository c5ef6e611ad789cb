# test/citus/citus.pl
#
# The API on Citus, on a coordinator and two workers, with the inbox
# distributed beside the business table by inbox_distribute() (the layout
# of docs/scale-out.md), and used by the README's roles with the README's
# grants, given before the distribution.  What works must work there, and
# what cannot must be refused with the error that says why
# (src/distributed.c), never fail from inside Citus's planner or, worse,
# give a wrong answer:
#
#   - inbox_distribute refuses a business table it cannot co-locate with
#     (collation, type, not distributed) and an application; it
#     distributes inbox.entries co-located, makes inbox.scope_grants a
#     reference table, delegates the six entry points of an effect's
#     transaction, and carries the EXECUTE grants to the workers;
#   - an application role claims and writes its effect in one transaction
#     (Citus's 25001 without the delegation); a rollback leaves nothing; a
#     duplicate returns false, or raises IB001 when inbox.on_duplicate
#     reaches the worker (SET LOCAL propagated, ALTER ROLE); a delegated
#     call under a session's SET, which would not reach it, is refused;
#     a different payload raises IB002;
#   - inbox_claim_many with its effect; the one-statement form gives 25001;
#   - scope grants are enforced on the workers, and a grant or revoke
#     reaches them at once;
#   - a concurrent claim of an id in flight waits on the worker and learns
#     the outcome; inbox.claim_timeout bounds that wait (IB003);
#   - the deferred mode by receipt, each step as its role: receive, poll
#     under a lease, extend, fail, complete in the effect's transaction,
#     dead letters, which an operator reads, as the grants;
#   - refused with 0A000 and their reason: content windows (and
#     inbox_distribute while a scope keeps one), session-bound takes (inbox_take,
#     inbox_poll without a lease), inbox.claim_timeout in a claim the
#     coordinator runs, and calls with a FROM clause of one row, which
#     crash Citus 13.2 (the server must stay up);
#   - retention by inbox_purge() and by the purge worker (on the
#     coordinator only), forget, statistics read by an operator;
#   - the counters in inbox_stats on the coordinator: each node's, summed
#     per scope (claims and duplicates exact, whichever node counted
#     them); inbox_stats_reset clears them on every node;
#   - a short pgbench load as the application role, with redeliveries:
#     nothing doubled, nothing lost;
#   - DROP EXTENSION is guarded while entries exist; without them it drops
#     the extension on every node, and it can be created again.
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

# The layout: the business table distributed by scope, then the inbox
# beside it with inbox_distribute().  The roles and grants are the README's,
# given before the inbox is distributed: inbox_distribute() must carry them
# to the workers, where the delegated calls run.
$coord->sql(q{
	CREATE EXTENSION inbox;
	CREATE TABLE orders (scope text COLLATE "C" NOT NULL, message_id text NOT NULL, amount int);
	SELECT create_distributed_table('orders', 'scope');
	CREATE ROLE billing_consumer LOGIN;
	CREATE ROLE shipping_receiver LOGIN;
	CREATE ROLE shipping_worker LOGIN;
	CREATE ROLE ops LOGIN;
	CREATE ROLE intruder LOGIN;
	GRANT SELECT, INSERT ON orders TO billing_consumer, shipping_worker, intruder;
	GRANT EXECUTE ON FUNCTION inbox_claim(text, text, bytea), inbox_status(text, text),
		inbox_claim_many(text, text[], bytea[], text), inbox_result(text, text) TO billing_consumer, intruder;
	GRANT EXECUTE ON FUNCTION inbox_receive(text, text, jsonb, bytea, timestamptz, text, integer, jsonb),
		inbox_receive_many(text, text[], jsonb[], bytea[], timestamptz, text, text[], integer[], jsonb[]) TO shipping_receiver;
	GRANT EXECUTE ON FUNCTION inbox_poll(text, integer, interval, interval),
		inbox_complete(text, uuid, jsonb), inbox_fail(text, uuid, text, interval),
		inbox_extend(text, uuid, interval), inbox_result(text, text) TO shipping_worker;
	GRANT SELECT ON inbox_stats, inbox_dead_letters, inbox_grants TO ops;
	SELECT inbox_grant('billing', 'billing_consumer');
});

# psql's error output for $sql, '' if it succeeded
sub fails
{
	my ($node, $sql, %opts) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', $sql,
		extra_params => [ '-v', 'VERBOSITY=verbose', @{ $opts{params} // [] } ]);
	return $ret == 0 ? '' : $err;
}

# --- inbox_distribute ---------------------------------------------------------------

$coord->sql(q{
	CREATE TABLE loose (scope text NOT NULL);
	SELECT create_distributed_table('loose', 'scope', colocate_with => 'none');
	CREATE TABLE numbered (scope int NOT NULL);
	SELECT create_distributed_table('numbered', 'scope', colocate_with => 'none');
	CREATE TABLE plain (scope text COLLATE "C");
});
like(fails($coord, q{SELECT inbox_distribute('loose')}),
	qr/42P21: the distribution column scope of table public.loose has collation "default", not "C"/,
	'inbox_distribute refuses a business table whose scope column is not of collation "C"');
like(fails($coord, q{SELECT inbox_distribute('numbered')}),
	qr/42804: the distribution column scope of table public.numbered is of type integer, not text/,
	'inbox_distribute refuses a distribution column that is not text');
like(fails($coord, q{SELECT inbox_distribute('plain')}),
	qr/42809: table public.plain is not distributed by hash/,
	'inbox_distribute refuses a table that is not distributed');
like(fails($coord, q{SET ROLE billing_consumer; SELECT inbox_distribute('orders')}),
	qr/42501/, 'inbox_distribute is not for applications');
is($coord->sql(q{SELECT count(*) FROM pg_dist_partition WHERE logicalrelid::text LIKE 'inbox.%'}),
	'0', 'and nothing was distributed by the refusals');

$coord->sql(q{SELECT inbox_set_content_window('billing', '1 hour', 'reject')});
like(fails($coord, q{SELECT inbox_distribute('orders')}),
	qr/0A000: inbox_distribute cannot distribute an inbox whose scopes keep content windows/,
	'inbox_distribute refuses while a scope keeps a content window');
$coord->sql(q{SELECT inbox_set_content_window('billing', NULL, 'off')});
is(fails($coord, q{SELECT inbox_distribute('orders')}), '', 'inbox_distribute(orders)');
is( $coord->sql(q{
		SELECT string_agg(logicalrelid::text || ':' || partmethod::text, ' ' ORDER BY logicalrelid::text)
		  FROM pg_dist_partition WHERE logicalrelid::text LIKE 'inbox.%'
			AND logicalrelid::text NOT LIKE 'inbox.entries\_p%'}),
	'inbox.entries:h inbox.scope_grants:n',
	'inbox.entries is distributed by hash, inbox.scope_grants is a reference table');
is( $coord->sql(q{
		SELECT count(*) FROM pg_dist_partition
		 WHERE logicalrelid::text LIKE 'inbox.entries%'
		   AND colocationid = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'orders'::regclass)}),
	'9', 'inbox.entries and its 8 leaves are co-located with orders');
is( $coord->sql(q{
		SELECT count(*) FROM pg_dist_object
		 WHERE classid = 'pg_proc'::regclass AND objid = ANY (inbox.delegated_functions())
		   AND force_delegation AND distribution_argument_index = 0}),
	'6', 'the six entry points of an effect\'s transaction are delegated by their scope');
is($coord->sql(q{SELECT inbox_distribute('orders')}), '', 'inbox_distribute again changes nothing');
is( join(' ', map {
			$_->sql(q{SELECT has_function_privilege('billing_consumer', 'inbox_claim(text, text, bytea)', 'EXECUTE')
						  AND NOT has_function_privilege('shipping_receiver', 'inbox_claim(text, text, bytea)', 'EXECUTE')})
		} @nodes[1, 2]),
	't t', 'the EXECUTE privileges given before inbox_distribute reached the workers');

# --- claims, as the application role ----------------------------------------------

is( $coord->sql(q{
		SET ROLE billing_consumer;
		BEGIN;
		SELECT inbox_claim('billing', 'm1', '\x01');
		INSERT INTO orders VALUES ('billing', 'm1', 10);
		COMMIT;
		SELECT inbox_claim('billing', 'm1', '\x01');
		SELECT count(*) FROM orders WHERE message_id = 'm1';}),
	"t\nf\n1", 'an application role claims and writes its effect in one transaction; the duplicate returns false');
is( $coord->sql(q{
		SET ROLE billing_consumer;
		BEGIN;
		SELECT inbox_claim('billing', 'm2', '\x02');
		INSERT INTO orders VALUES ('billing', 'm2', 10);
		ROLLBACK;
		SELECT inbox_claim('billing', 'm2', '\x02');}),
	"t\nt", 'a claim rolled back with its effect leaves nothing: the message claims again');
like(fails($coord, q{SET ROLE billing_consumer; SELECT inbox_claim('billing', 'm1', '\x02')}),
	qr/IB002/, 'a different payload under the same id raises IB002');
is($coord->sql(q{SET ROLE billing_consumer; SELECT state FROM inbox_status('billing', 'm1')}),
	'done', 'inbox_status reads the entry');

# Settings reach a delegated call by SET LOCAL (under
# citus.propagate_set_commands = 'local') or by ALTER ROLE; a session's SET
# stays on the coordinator (docs/scale-out.md)
like(fails($coord, q{SET ROLE billing_consumer; SET inbox.on_duplicate = raise; SELECT inbox_claim('billing', 'm1', '\x01')}),
	qr/0A000: inbox cannot call a delegated function under a session's inbox\.on_duplicate/,
	'a session SET of inbox.on_duplicate, which would not reach the worker, is refused');
like(fails($coord, q{SET ROLE billing_consumer; SET inbox.claim_timeout = 100; SELECT * FROM inbox_claim_many('billing', ARRAY['m1'])}),
	qr/0A000: inbox cannot call a delegated function under a session's inbox\.on_duplicate or inbox\.claim_timeout/,
	'and so is one of inbox.claim_timeout, for a delegated call FROM the function');
like(fails($coord, q{SET ROLE billing_consumer; SET inbox.on_duplicate = raise; SELECT count(inbox_claim('billing', 'm1', '\x01'))}),
	qr/IB001/, 'a call that is not delegated runs on the coordinator, which has the setting: IB001');
like(
	fails($coord, q{
		SET ROLE billing_consumer;
		BEGIN;
		SET LOCAL citus.propagate_set_commands = 'local';
		SET LOCAL inbox.on_duplicate = raise;
		SELECT inbox_claim('billing', 'm1', '\x01');}),
	qr/IB001/, 'SET LOCAL, propagated, reaches it: the duplicate raises IB001');
$coord->sql(q{ALTER ROLE billing_consumer SET inbox.on_duplicate = raise});
like(fails($coord, q{SELECT inbox_claim('billing', 'm1', '\x01')}, params => [ '-U', 'billing_consumer' ]),
	qr/IB001/, 'ALTER ROLE ... SET reaches it on the workers');
$coord->sql(q{ALTER ROLE billing_consumer RESET inbox.on_duplicate});

# The batch: SELECT * FROM inbox_claim_many(...) is delegated like a claim
is( $coord->sql(q{
		SET ROLE billing_consumer;
		BEGIN;
		SELECT ordinality || ':' || message_id || ':' || status
		  FROM inbox_claim_many('billing', ARRAY['m1', 'b1', 'b2', 'b1'], NULL);
		INSERT INTO orders VALUES ('billing', 'b1', 1), ('billing', 'b2', 1);
		COMMIT;}),
	"1:m1:duplicate\n2:b1:claimed\n3:b2:claimed\n4:b1:duplicate",
	'inbox_claim_many and the effect in one transaction: duplicates, earlier and within the batch, and claims');
is( $coord->sql(q{
		SET ROLE billing_consumer;
		SELECT message_id || ':' || status
		  FROM inbox_claim_many('billing', ARRAY['m1', 'b3'], ARRAY['\x02', '\x03']::bytea[],
								on_mismatch => 'return')}),
	"m1:mismatch\nb3:claimed", 'inbox_claim_many returns a mismatch as a status when asked');
like(fails($coord, q{SET ROLE billing_consumer; SELECT * FROM inbox_claim_many('billing', ARRAY['b4', 'm1'], ARRAY['\x04', '\x02']::bytea[])}),
	qr/IB002/, 'by default a mismatch raises IB002 for the whole batch');
is( $coord->sql(q{SELECT string_agg(message_id, ' ' ORDER BY message_id) FROM inbox.entries
				   WHERE scope = 'billing'}),
	'b1 b2 b3 m1 m2', 'exactly the claimed ids were written (b4 rolled back with its batch)');
like(
	fails($coord, q{
		SET ROLE billing_consumer;
		INSERT INTO orders SELECT 'billing', c.message_id, 1
		  FROM inbox_claim_many('billing', ARRAY['b5'], NULL) AS c WHERE c.status = 'claimed';}),
	qr/25001/,
	'the one-statement form is not delegated: Citus refuses two users on one placement (docs/scale-out.md)');

# Scope grants are read on the workers, where the delegated calls run.
# One session throughout: its calls as intruder reuse one connection to
# the worker, whose backend caches the grants, so a grant or revoke must
# reach that cache, not only a new backend.
{
	my $s = $coord->background_psql('postgres', on_error_stop => 0);
	$s->query_safe('\set VERBOSITY verbose');
	my $as_intruder = sub {
		my ($id) = @_;
		my $out = $s->query(qq{SET ROLE intruder; SELECT inbox_claim('billing', '$id'); RESET ROLE;});
		my $err = $s->{stderr};
		$s->{stderr} = '';		# query() keeps it for the next query otherwise
		return $err ne '' ? $err : $out;
	};
	like($as_intruder->('i0'), qr/42501: permission denied for inbox scope "billing"/,
		'a role not granted a reserved scope is refused on the worker');
	$s->query_safe(q{SELECT inbox_grant('billing', 'intruder')});
	is($as_intruder->('i1'), 't', 'inbox_grant reaches the worker\'s cache of the grants at once');
	$s->query_safe(q{SELECT inbox_revoke('billing', 'intruder')});
	like($as_intruder->('i2'), qr/42501/, 'and so does inbox_revoke');
	$s->quit;
}

# Streams: the offsets stay on the coordinator (inbox.offsets is local),
# and a stream claim commits with its effect on the worker
$coord->sql(q{GRANT EXECUTE ON FUNCTION inbox_claim_offset(text, text, bigint, boolean) TO billing_consumer});
is( $coord->sql(q{
		SET ROLE billing_consumer;
		BEGIN;
		SELECT inbox_claim_offset('billing', 'stream-1', 1);
		INSERT INTO orders VALUES ('billing', 'stream-1:1', 1);
		COMMIT;
		SELECT inbox_claim_offset('billing', 'stream-1', 1);
		BEGIN;
		SELECT inbox_claim_offset('billing', 'stream-1', 2);
		INSERT INTO orders VALUES ('billing', 'stream-1:2', 1);
		ROLLBACK;
		SELECT inbox_claim_offset('billing', 'stream-1', 2);}),
	"t\nf\nt\nt", 'inbox_claim_offset with its effect, a duplicate, and a rollback that claims again');

# One transaction may claim in scopes held by two workers: each delegated
# call goes to its scope's worker over the caller's connection, and Citus
# commits the transaction on both
my $elsewhere = $coord->sql(q{
	SELECT s FROM generate_series(1, 100) AS g, LATERAL (SELECT 'elsewhere-' || g AS s) AS x
	 WHERE (SELECT nodeport FROM citus_shards
			 WHERE shardid = get_shard_id_for_distribution_column('orders', x.s))
		<> (SELECT nodeport FROM citus_shards
			 WHERE shardid = get_shard_id_for_distribution_column('orders', 'billing'))
	 ORDER BY g LIMIT 1});
is( $coord->sql(qq{
		SET ROLE billing_consumer;
		BEGIN;
		SELECT inbox_claim('billing', 'two-1');
		INSERT INTO orders VALUES ('billing', 'two-1', 1);
		SELECT inbox_claim('$elsewhere', 'two-2');
		INSERT INTO orders VALUES ('$elsewhere', 'two-2', 1);
		COMMIT;
		SELECT count(*) FROM orders WHERE message_id LIKE 'two-%';}),
	"t\nt\n2", 'claims and effects in two scopes on two workers commit in one transaction');

# Concurrency: a second claim of an id in flight waits on the worker, and
# learns the first one's outcome
sub lock_waiter_on_a_worker
{
	for (1 .. 10 * $PostgreSQL::Test::Utils::timeout_default)
	{
		for my $worker (@nodes[1, 2])
		{
			return 1
			  if $worker->sql(q{SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'}) > 0;
		}
		select(undef, undef, undef, 0.1);
	}
	return 0;
}

sub concurrent_claim
{
	my ($id, $end) = @_;
	my $first = $coord->background_psql('postgres');
	$first->query_safe(qq{SET ROLE billing_consumer; BEGIN; SELECT inbox_claim('billing', '$id')});
	my $second = $coord->background_psql('postgres', on_error_stop => 0);
	$second->query_until(qr/started/, qq{SET ROLE billing_consumer;
\\echo started
SELECT inbox_claim('billing', '$id');
});
	ok(lock_waiter_on_a_worker(), "the second claim of $id waits for the first on the worker");
	$first->query_safe(qq{INSERT INTO orders VALUES ('billing', '$id', 1)}) if $end eq 'COMMIT';
	$first->query_safe($end);
	$first->quit;
	my $answer = $second->query_safe(q{SELECT 'done'});
	$second->quit;
	return $answer;
}
like(concurrent_claim('cc1', 'COMMIT'), qr/^f\s+done$/,
	'the first committed: the waiting claim returns false');
like(concurrent_claim('cc2', 'ROLLBACK'), qr/^t\s+done$/,
	'the first rolled back: the waiting claim claims');
{
	my $first = $coord->background_psql('postgres');
	$first->query_safe(q{SET ROLE billing_consumer; BEGIN; SELECT inbox_claim('billing', 'cc3')});
	like(
		fails($coord, q{
			SET ROLE billing_consumer;
			BEGIN;
			SET LOCAL citus.propagate_set_commands = 'local';
			SET LOCAL inbox.claim_timeout = 200;
			SELECT inbox_claim('billing', 'cc3');}),
		qr/IB003/, 'inbox.claim_timeout bounds a delegated claim\'s wait on the worker: IB003');
	$first->query_safe('ROLLBACK');
	$first->quit;
}

# --- the deferred mode, by receipt -------------------------------------------------------------------

# The receiver stores, the worker polls under a lease and completes by
# receipt in the effect's transaction; each as its own role
is( $coord->sql(q{
		SET ROLE shipping_receiver;
		SELECT string_agg(message_id || ':' || status, ' ' ORDER BY ordinality)
		  FROM inbox_receive_many('jobs', ARRAY['j1', 'j2', 'j1'],
								  ARRAY['{"n": 1}', '{"n": 2}', '{"n": 1}']::jsonb[])}),
	'j1:received j2:received j1:duplicate', 'inbox_receive_many');
my ($id, $receipt) = split /\|/,
  $coord->sql(q{SET ROLE shipping_worker; SELECT message_id || '|' || receipt FROM inbox_poll('jobs', 1, '10 minutes')});
is($id, 'j1', 'inbox_poll under a lease takes the oldest message');
is($coord->sql(q{SET ROLE shipping_worker; SELECT count(*) FROM inbox_poll('jobs', 5, '10 minutes') WHERE message_id = 'j1'}),
	'0', 'a message polled under a running lease is not handed out again');
is($coord->sql(qq{SET ROLE shipping_worker; SELECT inbox_extend('jobs', '$receipt'::uuid, '20 minutes') > now() + interval '15 minutes'}),
	't', 'inbox_extend by receipt');
is($coord->sql(qq{SET ROLE shipping_worker; SELECT inbox_fail('jobs', '$receipt'::uuid, 'try again')}),
	'pending', 'inbox_fail by receipt puts the message back');
($id, $receipt) = split /\|/,
  $coord->sql(q{SET ROLE shipping_worker; SELECT message_id || '|' || receipt FROM inbox_poll('jobs', 1, '10 minutes') WHERE message_id = 'j1'});
like( $coord->sql(qq{
		SET ROLE shipping_worker;
		BEGIN;
		INSERT INTO orders VALUES ('jobs', '$id', 1);
		SELECT inbox_extend('jobs', '$receipt'::uuid, '20 minutes');
		SELECT inbox_complete('jobs', '$receipt'::uuid, '{"ok": true}');
		COMMIT;
		SELECT inbox_result('jobs', '$id');}),
	qr/^20\d\d-.*\n\n\{"ok": true\}$/, 'inbox_extend and inbox_complete by receipt in the effect\'s transaction; the result is kept');

# j2 was polled by the batch poll above: fail it until it dies
$coord->sql(q{SELECT inbox_set_max_attempts('jobs', 2)});
for my $round (1 .. 3)
{
	my $r = $coord->sql(q{SELECT receipt FROM inbox.entries WHERE scope = 'jobs' AND message_id = 'j2' AND state = 'r'})
	  || $coord->sql(q{SET ROLE shipping_worker; SELECT receipt FROM inbox_poll('jobs', 1, '10 minutes')});
	last if $r eq '';
	$coord->sql(qq{SET ROLE shipping_worker; SELECT inbox_fail('jobs', '$r'::uuid, 'broken')});
}
is($coord->sql(q{SET ROLE ops; SELECT message_id || ':' || attempts FROM inbox_dead_letters WHERE scope = 'jobs'}),
	'j2:2', 'a message failed max_attempts times is a dead letter, which an operator sees');
is($coord->sql(q{SET ROLE ops; SELECT scope || ':' || grantee FROM inbox_grants}),
	'billing:billing_consumer', 'an operator reads the grants');

# Citus 13 crashes the server when it delegates a distributed function
# called with a FROM clause of one row; the inbox refuses those forms of
# its calls (src/distributed.c), and the server stays up
for my $from (q{(SELECT 1) AS s}, q{(VALUES ('billing')) AS v(s)}, q{(SELECT * FROM (SELECT 1) AS a) AS b})
{
	like(fails($coord, qq{SET ROLE billing_consumer; SELECT inbox_claim('billing', 'from-1') FROM $from}),
		qr/0A000: inbox cannot call a delegated function with a FROM clause of one row/,
		"a claim FROM $from is refused");
}
is($coord->sql(q{SET ROLE billing_consumer; SELECT inbox_claim(v.s, v.i) FROM (VALUES ('billing', 'from-2'), ('billing', 'from-3')) AS v(s, i)}),
	"t\nt", 'FROM VALUES of two rows is not delegated, and works');
is($coord->sql(q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'}) > 0 ? 'up' : 'down',
	'up', 'and the server never restarted');
unlike(slurp_file($coord->logfile), qr/terminated by signal/, 'no backend of the coordinator crashed');

# --- refused, with their reason ----------------------------------------------------------

my %refused = (
	'inbox_take' => q{SELECT * FROM inbox_take('jobs', 1)},
	'inbox_poll without a lease' => q{SELECT * FROM inbox_poll('jobs', 1, NULL)},
	'inbox.claim_timeout, in a claim the coordinator runs' =>
	  q{SET inbox.claim_timeout = 100; SELECT count(inbox_claim('billing', 'c' || g)) FROM (VALUES (1), (2)) AS v(g)},
	'a content window' => q{SELECT inbox_set_content_window('billing', '1 hour', 'reject')},
	'a receive into an ordered group' => q{SELECT inbox_receive('jobs', 'g1', '{}'::jsonb, group_key => 'k')},
	'a batch received into ordered groups' =>
	  q{SELECT count(*) FROM inbox_receive_many('jobs', ARRAY['g2'], ARRAY['{}']::jsonb[], group_keys => ARRAY['k'])},
	'a receive with a priority' => q{SELECT inbox_receive('jobs', 'p1', '{}'::jsonb, priority => 3)},
	'a batch received with priorities' =>
	  q{SELECT count(*) FROM inbox_receive_many('jobs', ARRAY['p2'], ARRAY['{}']::jsonb[], priorities => ARRAY[3])},
);
for my $api (sort keys %refused)
{
	like(fails($coord, $refused{$api}),
		qr/ERROR:  0A000: inbox cannot .* when inbox\.entries is distributed by Citus/,
		"$api is refused with its reason");
}
is($coord->sql(q{SELECT count(*) FROM inbox.entries WHERE message_id IN ('c1', 'g1', 'g2')}),
	'0', 'the refused claim and receives wrote nothing');
is(fails($coord, q{SELECT inbox_set_content_window('billing', NULL, 'off')}), '',
	'turning a content window off works');
is($coord->sql(q{SELECT count(*) FROM inbox.scopes WHERE content_window IS NOT NULL}),
	'0', 'and no scope keeps one');
like(fails($nodes[1], q{SELECT inbox_purge()}),
	qr/0A000: inbox cannot purge on a Citus worker \(inbox_purge\)/,
	'inbox_purge() on a worker is refused: the coordinator purges');

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
		SET ROLE ops;
		SELECT entries_retained || ' ' || dead || ' ' || pending || ' ' || (oldest_entry IS NOT NULL)
		  FROM inbox_stats WHERE scope = 'jobs'}),
	'2 1 0 true', 'inbox_stats_reset recounts, and inbox_stats reads the shards: retained, dead, pending');

# The counters are each node's, and a delegated claim is counted on the
# worker that ran it: inbox_stats on the coordinator sums them over every
# node (src/distributed.c), and inbox_stats_reset forgets them on every node.
# Two scopes, one on each worker; in the first, two claims the coordinator
# runs itself (a call in an expression is not delegated)
my ($tally_a, $tally_b) = split /\n/, $coord->sql(q{
	SELECT scope FROM (SELECT DISTINCT ON (port) scope, g
						 FROM (SELECT 'tally-' || g AS scope, g,
									  (SELECT nodeport FROM citus_shards
										WHERE shardid = get_shard_id_for_distribution_column('orders', 'tally-' || g)) AS port
								 FROM generate_series(1, 100) AS g) AS s
						ORDER BY port, g) AS x
	 ORDER BY g});
is( $coord->sql(qq{
		SET ROLE billing_consumer;
		SELECT inbox_claim('$tally_a', 't1');
		SELECT inbox_claim('$tally_a', 't2');
		SELECT inbox_claim('$tally_a', 't1');
		SELECT inbox_claim('$tally_b', 't1');
		SELECT inbox_claim('$tally_b', 't1');
		SELECT inbox_claim('$tally_b', 't1');
		SELECT count(*) FILTER (WHERE inbox_claim('$tally_a', 't' || g)) FROM generate_series(3, 4) AS g;}),
	"t\nt\nf\nt\nf\nf\n2", 'claims through the coordinator, in a scope on each worker');
my @counted = map {
	$_->sql(qq{SELECT string_agg(scope || ':' || claims || ':' || duplicates, ' ' ORDER BY scope = '$tally_b')
				 FROM inbox.node_counters() WHERE scope IN ('$tally_a', '$tally_b')})
} @nodes;
is( join(' ', $counted[0], sort @counted[1, 2]),
	join(' ', "$tally_a:2:0", sort("$tally_a:2:1", "$tally_b:1:2")),
	'each claim was counted by the node that ran it: the delegated ones on the workers');
is( $coord->sql(qq{
		SET ROLE ops;
		SELECT scope || ' ' || claims || ' ' || duplicates || ' ' || mismatches
		  FROM inbox_stats WHERE scope IN ('$tally_a', '$tally_b') ORDER BY scope = '$tally_b'}),
	"$tally_a 4 1 0\n$tally_b 1 2 0",
	'inbox_stats on the coordinator counts every node\'s claims and duplicates, read by an operator');
is( $coord->sql(qq{
		SELECT inbox_stats_reset();
		SET ROLE ops;
		SELECT count(claims) FROM inbox_stats WHERE scope IN ('$tally_a', '$tally_b')}),
	"\n0", 'inbox_stats_reset on the coordinator clears them');
is( join(' ', map { $_->sql(q{SELECT count(*) FROM inbox.node_counters() WHERE scope LIKE 'tally-%'}) } @nodes),
	'0 0 0', 'on every node');

# --- load: the application's consumer, concurrent, with redeliveries --------------------------

# 4 clients claim ids drawn from 300, in 8 scopes, for 5 seconds: many
# redeliveries, many concurrent; an effect is written only for a claim
$coord->pgbench(
	'--no-vacuum --client=4 --time=5 --protocol=prepared --username=billing_consumer',
	0, [qr{processed: [1-9]}], [qr{^$}], 'load as the application role',
	{ 'load.sql' => q{
\set m random(1, 300)
BEGIN;
SELECT inbox_claim('load-' || (:m % 8), 'm' || :m, '\x0102') AS claimed \gset
\if :claimed
INSERT INTO orders VALUES ('load-' || (:m % 8), 'm' || :m, 1);
\endif
COMMIT;
} });
is( $coord->sql(q{
		SELECT (SELECT count(*) FROM (SELECT FROM orders WHERE scope LIKE 'load-%'
									  GROUP BY scope, message_id HAVING count(*) > 1) AS d)
			|| ' ' || (SELECT count(*) FROM inbox.entries AS e WHERE e.scope LIKE 'load-%'
						  AND NOT EXISTS (SELECT FROM orders AS o WHERE o.scope = e.scope AND o.message_id = e.message_id))
			|| ' ' || (SELECT count(*) FROM orders AS o WHERE o.scope LIKE 'load-%'
						  AND NOT EXISTS (SELECT FROM inbox.entries AS e WHERE o.scope = e.scope AND o.message_id = e.message_id))}),
	'0 0 0', 'under load: no effect doubled, no claim without its effect, no effect without its claim');

# --- dropping the extension ---------------------------------------------------------------

like(fails($coord, q{DROP EXTENSION inbox}), qr/2BP01/,
	'DROP EXTENSION is guarded while entries exist');
is( $coord->sql(q{
		DELETE FROM inbox.entries;
		DROP EXTENSION inbox;
		SELECT count(*) FROM pg_namespace WHERE nspname = 'inbox';
		SELECT count(*) FROM pg_dist_partition WHERE logicalrelid::text LIKE 'inbox.%';
		SELECT count(*) FROM pg_dist_object WHERE classid = 'pg_proc'::regclass
		   AND NOT EXISTS (SELECT FROM pg_proc WHERE oid = objid);}),
	"0\n0\n0", 'without entries, DROP EXTENSION inbox drops it, and Citus forgets its tables and functions');
is(join(' ', map { $_->sql(q{SELECT count(*) FROM pg_namespace WHERE nspname = 'inbox'}) } @nodes[1, 2]),
	'0 0', 'on the workers too');
is( $coord->sql(q{
		CREATE EXTENSION inbox;
		SET client_min_messages = warning;
		SELECT inbox_distribute('orders');
		SELECT inbox_claim('billing', 'again');}),
	"\nt", 'and it can be created and distributed again');
is($coord->sql(q{DROP EXTENSION inbox CASCADE; SELECT count(*) FROM pg_namespace WHERE nspname = 'inbox'}),
	'0', 'with CASCADE, DROP EXTENSION drops it with its entries');

$_->stop for reverse @nodes;
done_testing();
