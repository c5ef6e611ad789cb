# test/t/030_group_faults.pl
#
# Ordered groups under an at-least-once load with faults: per group, the
# effects happen one at a time, in the order the receives committed, with
# no gap, none lost and none doubled.
#
# The driver test/faults/load.pl runs, in deferred mode with --groups:
#
#   - 4 receivers: inbox_receive of each delivery into its group (message
#     n into "g-<n mod 40>"), in autocommit.  Half the deliveries are
#     redeliveries, which must be duplicates.  A receive that stores a
#     message notes it in inbox_load_received in the same statement, after
#     inbox_receive took its group's lock, so that the serial numbers there
#     follow, per group, the commit order of the receives;
#   - 16 workers: inbox_take of a few messages, then per message the effect
#     and inbox_complete in one transaction; 15% of those roll back after
#     the effect and give the message back with inbox_fail (a retry at
#     once), so heads fail and are taken again;
#   - kill -9 of a random backend every 3 seconds, mostly of workers that
#     hold heads: their groups wait until the take finds the owner gone;
#   - the purge worker, deleting done entries as in 010.
#
# inbox.max_attempts is high enough that no message dies: a dead head would
# (rightly) hold its group, and the check wants every group to run to its
# end.  A second, shorter run does the same through inbox_poll under a
# lease and completions by receipt: a killed worker's head comes back when
# its lease runs out.  A third receives three messages in four above the
# default priority (--priorities 3): a group's order wins over them, and a
# head above the default whose worker was killed comes back as any other.
#
# What is proved, per run: the driver's accounting (every received message
# done, one effect each, none stray); and from the database, per group,
# the effects ordered by when they committed are exactly the received
# messages ordered by when their receives committed (no message out of
# order, none missing, none twice); and the groups are empty at the end.
# No timing is asserted.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($node, $log_offset) = InboxTest->load_node('group_faults', "inbox.max_attempts = 1000\n");

# Per group of scope, the positions where the effects (in commit order)
# and the received messages (in receive commit order) disagree
sub order_mismatches
{
	my ($scope) = @_;
	return $node->sql(qq{
		WITH r AS (SELECT group_key, message_id,
						  row_number() OVER (PARTITION BY group_key ORDER BY seq) AS rn
					 FROM inbox_load_received WHERE scope = '$scope'),
			 e AS (SELECT r.group_key, f.message_id,
						  row_number() OVER (PARTITION BY r.group_key ORDER BY f.seq) AS rn
					 FROM inbox_load_effects f
					 JOIN inbox_load_received r ON r.scope = f.scope AND r.message_id = f.message_id
					WHERE f.scope = '$scope')
		SELECT count(*) FROM r FULL JOIN e USING (group_key, rn)
		 WHERE r.message_id IS DISTINCT FROM e.message_id});
}

for my $run (
	[ 'orders', 30, 12, [], 'takes' ],
	[ 'orders-receipts', 20, 13, [ '--receipts', '--lease' => 3, '--poll-wait' => 1 ], 'polls' ],
	[ 'orders-ranked', 20, 14, [ '--priorities' => 3 ], 'takes with priorities' ])
{
	my ($scope, $duration, $seed, $extra, $what) = @$run;
	my %r = $node->run_load_driver(
		[
			'--mode' => 'deferred',
			'--scope' => $scope,
			'--groups' => 40,
			'--receivers' => 4,
			'--workers' => 16,
			'--batch' => 4,
			'--work' => 0.005,
			'--ids' => 6000,
			'--duration' => $duration,
			'--redeliver' => 0.5,
			'--abort' => 0.15,
			'--kill-interval' => 3,
			'--kill-method' => 'sigkill',
			'--drain-timeout' => 90,
			'--seed' => $seed,
			@$extra
		],
		[
			qw(lost doubled stray unacked late errors open dead_with_effect delivered_ids
			  redelivery_share abort_share taken completed kills kills_workers lost_in_hand done dead
			  purged effects)
		]);
	is($r{open}, 0, "$what: every received message ends done");
	is($r{dead}, 0, "$what: none dies");
	is($r{lost}, 0, "$what: lost = 0");
	is($r{doubled}, 0, "$what: doubled = 0");
	is($r{stray}, 0, "$what: no effect for an id that was never delivered");
	is($r{errors}, 0, "$what: no error other than lost connections");
	is($r{effects}, $r{done} + $r{purged}, "$what: one effect row per done message, purged or not");

	# The faults really happened
	cmp_ok($r{delivered_ids}, '>=', 500, "$what: at least 500 distinct ids were received");
	cmp_ok($r{redelivery_share}, '>=', 0.30, "$what: at least 30% of the receives were redeliveries");
	cmp_ok($r{taken}, '>', $r{completed}, "$what: heads were taken again after an abort or a kill");
	cmp_ok($r{kills_workers}, '>=', 1, "$what: workers were killed");
	cmp_ok($r{lost_in_hand}, '>=', 1, "$what: workers lost heads they held to the kills");

	# The order, from the database
	is( $node->sql(qq{SELECT count(*) = count(DISTINCT message_id) AND count(*) = $r{delivered_ids}
						FROM inbox_load_received WHERE scope = '$scope'}),
		't', "$what: each delivered id was received into its group once");
	is(order_mismatches($scope), 0,
		"$what: per group, the effects follow the receives' commit order, with no gap and no repeat");
	is( $node->sql(qq{SELECT count(*) FROM inbox_load_received WHERE scope = '$scope'
						AND group_key NOT IN (SELECT 'g-' || g FROM generate_series(0, 39) g)}),
		0, "$what: every message was in one of the 40 groups");
	# Takes read the index of the priorities above the default in the
	# third run, and never before
	is( $node->sql(qq{SELECT coalesce(sum(idx_scan), 0) > 0 FROM pg_stat_user_indexes
						WHERE indexrelname LIKE 'entries_p%_scope_priority_due_message_id_idx'}),
		$scope eq 'orders-ranked' ? 't' : 'f',
		"$what: " . ($scope eq 'orders-ranked' ? 'takes read' : 'no take read') . ' messages above the default priority');
	is( $node->sql(qq{SELECT (SELECT count(*) FROM inbox.group_members WHERE scope = '$scope')
						 + (SELECT count(*) FROM inbox.groups WHERE scope = '$scope')}),
		0, "$what: the groups are empty at the end, and gone");
}

$node->check_load_aftermath($log_offset);

$node->stop;
done_testing();
