# test/t/010_deferred_faults.pl
#
# Exactly one effect per message under an at-least-once load with faults,
# in deferred mode (inbox_receive now, inbox_take + effect + inbox_complete
# later).
#
# The driver test/faults/load.pl runs, at the same time:
#
#   - 4 receiver processes, the broker's consumers: inbox_receive in
#     autocommit, then ack.  At least 30% of the receives are redeliveries of
#     messages already received, which must return false, whatever state the
#     message is in by then (pending, processing, done, dead);
#   - 8 worker processes: inbox_take of a few messages (a durable take), then
#     per message the effect and inbox_complete in one transaction.  Some of
#     those transactions roll back after the effect; the worker then gives
#     the message back with inbox_fail;
#   - kill -9 of a random backend every 4 seconds, mostly of workers that are
#     in the middle of a transaction.  The postmaster restarts every backend:
#     the messages the workers held are taken again at once (their owner
#     session is gone), and receives in flight are delivered again.  Each
#     message takes the worker about 10 ms inside the effect's transaction,
#     so the kills do land while workers hold messages;
#   - the purge worker, with a 10 s retention, deleting done entries while
#     redeliveries still arrive.  As in 009, the broker never redelivers
#     later than 5 s (half the retention) after a message's received_at,
#     which its guarded receive enforces on the server.
#
# inbox.max_attempts is 3, so a message whose three attempts all fail (an
# injected rollback or a kill each) is dead: a few die, and they are
# counted.  The run ends when every received message is done or dead.
#
# A second, shorter run drives the same faults through the 1.0.0 API:
# receivers enqueue in batches with inbox_receive_many, and workers take
# with inbox_poll, waiting up to 1 s for a message, under a 5 s lease, then
# complete or fail each message by its receipt.  A message whose worker was
# killed comes back when its lease runs out instead of at once.
#
# What is proved: every received message ends done or dead (or done and
# then purged); each done one has exactly one effect row and each dead one
# none, so no message is lost or processed twice; the effects table (no
# unique constraint) agrees; and the server logged nothing but the crash
# restarts.  No timing is asserted: the load phase lasts a fixed time and the
# checks are on counts.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($node, $log_offset) = InboxTest->load_node('deferred_faults', "inbox.max_attempts = 3\n");

# 40 s of load; then the receivers deliver what was not acked, and the
# workers go on until every received message is done or dead.
my %r = $node->run_load_driver(
	[
		'--mode' => 'deferred',
		'--scope' => 'shipping',
		'--receivers' => 4,
		'--workers' => 8,
		'--batch' => 4,
		'--work' => 0.01,
		'--ids' => 8000,
		'--duration' => 40,
		'--redeliver' => 0.5,
		'--abort' => 0.15,
		'--kill-interval' => 4,
		'--kill-method' => 'sigkill',
		'--drain-timeout' => 60,
		'--seed' => 10
	],
	[
		qw(lost doubled stray unacked late errors open dead_with_effect delivered_ids received
		  redelivery_share abort_share taken completed aborts kills kills_workers lost_in_hand done dead
		  purged effects)
	]);

# Every received message ends done or dead, with one effect or none
is($r{open}, 0, 'every received message ends done or dead, none is left pending or processing');
is($r{lost}, 0, 'lost = 0: every message done (or done and purged) has its effect');
is($r{doubled}, 0, 'doubled = 0: no message has a second effect');
is($r{dead_with_effect}, 0, 'no dead message has an effect');
is($r{stray}, 0, 'no effect for an id that was never delivered');
is($r{unacked}, 0, 'every delivered id was acked by a receiver by the end of the drain');
is($r{errors}, 0, 'receivers and workers met no error other than lost connections');
is($r{late}, 0, 'every uncertain receive was retried inside the redelivery horizon');
is($r{done} + $r{purged} + $r{dead}, $r{delivered_ids},
	'done + purged + dead = delivered ids');
is($r{effects}, $r{done} + $r{purged}, 'one effect row per done message, purged or not');
cmp_ok($r{done} + $r{purged}, '>=', 0.9 * $r{delivered_ids},
	"at least 90% of the messages are done ($r{dead} dead)");

# The faults really happened
cmp_ok($r{delivered_ids}, '>=', 1000, 'at least 1,000 distinct ids were received');
cmp_ok($r{redelivery_share}, '>=', 0.30,
	'at least 30% of the receives were redeliveries of received messages');
cmp_ok($r{abort_share}, '>=', 0.10,
	'at least 10% of the taken messages were rolled back after their effect');
cmp_ok($r{taken}, '>', $r{completed}, 'messages were taken again after an abort or a kill');
cmp_ok($r{kills}, '>=', 3, 'at least 3 backends were killed with kill -9');
cmp_ok($r{kills_workers}, '>=', 1, 'workers were among them');
cmp_ok($r{lost_in_hand}, '>=', 1, 'workers lost messages they held to the kills');
cmp_ok($r{purged}, '>', 0, 'the purge worker deleted done entries while the load went on');

# The same facts, from the database rather than from the driver
$node->no_double_effect('shipping', 'the effects table has no message with two effects');
$node->entries_match_effects('shipping', 'every entry left is done with an effect, or dead without one');
is($node->sql(q{SELECT count(*) FROM inbox_dead_letters WHERE scope = 'shipping'}),
	$r{dead}, 'inbox_dead_letters lists the dead ones');
# The receipts variant: the same faults, the same accounting
my %p = $node->run_load_driver(
	[
		'--mode' => 'deferred',
		'--scope' => 'shipping-receipts',
		'--receivers' => 4,
		'--receive-batch' => 8,
		'--workers' => 8,
		'--receipts',
		'--lease' => 5,
		'--poll-wait' => 1,
		'--batch' => 4,
		'--work' => 0.01,
		'--ids' => 4000,
		'--duration' => 20,
		'--redeliver' => 0.5,
		'--abort' => 0.15,
		'--kill-interval' => 3,
		'--kill-method' => 'sigkill',
		'--drain-timeout' => 60,
		'--seed' => 11
	],
	[
		qw(lost doubled stray unacked late errors open dead_with_effect delivered_ids
		  redelivery_share abort_share taken completed kills kills_workers lost_in_hand done dead
		  purged effects receive_batches stale_receipts)
	]);
is($p{open}, 0, 'receipts: every received message ends done or dead');
is($p{lost}, 0, 'receipts: lost = 0');
is($p{doubled}, 0, 'receipts: doubled = 0');
is($p{dead_with_effect}, 0, 'receipts: no dead message has an effect');
is($p{stray}, 0, 'receipts: no effect for an id that was never delivered');
is($p{unacked}, 0, 'receipts: every delivered id was acked by a receiver');
is($p{errors}, 0, 'receipts: no error other than lost connections and stale receipts');
is($p{late}, 0, 'receipts: every uncertain receive was retried inside the redelivery horizon');
is($p{done} + $p{purged} + $p{dead}, $p{delivered_ids}, 'receipts: done + purged + dead = delivered ids');
is($p{effects}, $p{done} + $p{purged}, 'receipts: one effect row per done message, purged or not');
cmp_ok($p{delivered_ids}, '>=', 500, 'receipts: at least 500 distinct ids were received');
cmp_ok($p{receive_batches}, '>', 0, 'receipts: receivers enqueued with inbox_receive_many');
cmp_ok($p{redelivery_share}, '>=', 0.30, 'receipts: at least 30% of the receives were redeliveries');
cmp_ok($p{taken}, '>', $p{completed}, 'receipts: messages were polled again after an abort or a kill');
cmp_ok($p{kills}, '>=', 3, 'receipts: at least 3 backends were killed with kill -9');
cmp_ok($p{lost_in_hand}, '>=', 1, 'receipts: workers lost messages they held to the kills');
note("receipts: $p{dead} dead, $p{stale_receipts} stale receipts");
$node->entries_match_effects('shipping-receipts',
	'receipts: every entry left is done with an effect, or dead without one');

$node->check_load_aftermath($log_offset);

$node->stop;
done_testing();
