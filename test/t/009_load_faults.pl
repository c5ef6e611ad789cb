# test/t/009_load_faults.pl
#
# Exactly one effect per message under an at-least-once load with faults,
# in claim mode (inbox_claim and the effect in one transaction), then with
# batches (inbox_claim_many and the batch's effects in one transaction).
#
# The driver test/faults/load.pl runs 16 consumer processes over a fixed id
# space, each with its own database session, and injects at the same time:
#
#   - redeliveries of messages already processed and acked (at least 30% of
#     all deliveries): the claim must return false and the effect must be
#     skipped;
#   - transactions that roll back after the claim and the effect (at least
#     10%): the message is not acked and is delivered again, and its claim
#     must then return true once more;
#   - kill -9 of a random consumer's backend every 4 seconds: the postmaster
#     restarts every backend, every consumer reconnects, and what was in
#     flight is delivered again.  A COMMIT whose outcome is lost is resolved
#     as the README's "Uncertain commits" says;
#   - the purge worker, with a 10 s retention and a 1 s naptime, deleting
#     entries while redeliveries still arrive.
#
# The broker never redelivers later than 5 s (half the retention) after the
# received_at of the claim that processed the message: each redelivery's
# claim is guarded on the server by clock_timestamp() < received_at + 5 s
# (see the driver's header).  So a purge that honours the retention never
# removes an entry a redelivery still needs, while a purge that removes an
# entry early shows up as a second effect: redeliveries arrive from a few
# milliseconds up to 2.5 s after the ack.
#
# What is proved: every id delivered at least once has exactly one row in
# the effects table (which has no unique constraint, so a double effect
# would be a second row), with all of these faults happening at once; the
# purge did delete entries meanwhile; and the server logged nothing but the
# crash restarts.  Nothing here asserts how fast anything happens: the load
# phase lasts a fixed time and the checks are on counts.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($node, $log_offset) = InboxTest->load_node('load_faults');

# Run the driver twice: single claims for 40 s of load, then batches of up
# to 20 deliveries per inbox_claim_many for 25 s; each then drains what was
# not acked.
for my $run ([ 'billing', 1, 40 ], [ 'billing-batch', 20, 25 ])
{
	my ($scope, $claim_batch, $duration) = @$run;
	my $what = $claim_batch > 1 ? "batches of $claim_batch" : 'single claims';
	my %r = $node->run_load_driver(
		[
			'--mode' => 'claim',
			'--scope' => $scope,
			'--claim-batch' => $claim_batch,
			'--consumers' => 16,
			'--ids' => 12000,
			'--duration' => $duration,
			'--redeliver' => 0.5,
			'--abort' => 0.15,
			'--kill-interval' => 4,
			'--kill-method' => 'sigkill',
			'--drain-timeout' => 60,
			'--seed' => 9
		],
		[
			qw(lost doubled stray unacked late errors consumers delivered_ids deliveries
			  redelivery_share abort_share kills purged effects uncertain batches)
		]);

	# Exactly once
	is($r{lost}, 0, "$what: lost = 0: every id delivered at least once has an effect");
	is($r{doubled}, 0, "$what: doubled = 0: no id has a second effect");
	is($r{stray}, 0, "$what: no effect for an id that was never delivered");
	is($r{unacked}, 0, "$what: every delivered id was acked by the end of the drain");
	is($r{errors}, 0, "$what: the consumers met no error other than lost connections");
	is($r{late}, 0, "$what: every uncertain commit was resolved inside the redelivery horizon");

	# The faults really happened, in the proportions asked for
	cmp_ok($r{consumers}, '>=', 16, "$what: at least 16 concurrent consumers");
	cmp_ok($r{delivered_ids}, '>=', 1000, "$what: at least 1,000 distinct ids were delivered");
	cmp_ok($r{redelivery_share}, '>=', 0.30,
		"$what: at least 30% of the deliveries were redeliveries of acked messages");
	cmp_ok($r{abort_share}, '>=', 0.10,
		"$what: at least 10% of the deliveries rolled back after the claim and the effect");
	cmp_ok($r{kills}, '>=', 3, "$what: at least 3 consumer backends were killed with kill -9");
	cmp_ok($r{purged}, '>', 0, "$what: the purge worker deleted entries of this run while it went on");
	if ($claim_batch > 1)
	{
		cmp_ok($r{deliveries} / ($r{batches} || 1), '>', 1.5,
			"$what: the deliveries were claimed in batches (more than 1.5 per inbox_claim_many)");
	}
	else
	{
		is($r{batches}, 0, "$what: no batch was used");
	}

	# The same facts, from the database rather than from the driver
	$node->no_double_effect($scope, "$what: the effects table has no message with two effects");
	is($node->sql(qq{SELECT count(DISTINCT message_id) FROM inbox_load_effects WHERE scope = '$scope'}),
		$r{delivered_ids}, "$what: it has one effect for each delivered id");
	# The purge goes on after the driver counted: entries left can only be fewer.
	cmp_ok($node->sql(qq{SELECT count(*) FROM inbox.entries WHERE scope = '$scope'}),
		'<=', $r{delivered_ids} - $r{purged},
		"$what: inbox.entries agrees: at most delivered - purged entries are left");
}
$node->check_load_aftermath($log_offset);

$node->stop;
done_testing();
