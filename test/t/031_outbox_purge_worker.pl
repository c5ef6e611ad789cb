# test/t/031_outbox_purge_worker.pl
#
# The purge worker's loop over the outbox goes on past a key's last
# message that a sender holds back.  That message is the oldest, so it
# takes a slot of every batch, and each batch deletes less than a batch:
# one pass of the worker must still delete every other expired message,
# and keep the held one and its key's row.  The naptime is an hour, and a
# pass runs when the launcher starts: the server is restarted to run
# exactly one, and the sender's transaction is a prepared one, which the
# restart keeps.  A loop that ended after its first short batch would
# leave the messages to the next pass, an hour away, and the poll below
# would time out.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $others = 20;

my $node = InboxTest->node(
	'outbox_purge_worker', conf => q{
inbox.purge_naptime = 3600
inbox.purge_batch_size = 2
inbox.outbox_retention = '1s'
max_prepared_transactions = 2
});

# No route: a message is delivered to every route as soon as it commits.
# The held key's message first, each message in a transaction of its own,
# so that it is the oldest.
$node->sql("SELECT outbox_send('t', 'held', '{\"n\": 0}'::jsonb)");
$node->safe_psql('postgres', join '',
	map { "SELECT outbox_send('t', 'k$_', '{\"n\": $_}'::jsonb);\n" } 1 .. $others);
$node->sql(q{
	BEGIN;
	SELECT outbox_send('t', 'held', '{"n": "later"}'::jsonb);
	PREPARE TRANSACTION 'holds_key';
});
# Past the retention, on the clock and on the positions' scale
sleep(1.5);

$node->restart;
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM inbox.outbox_messages WHERE key <> 'held'"),
	'one pass of the worker purges every expired message past a held one');
is($node->sql(q{
	SELECT count(*) FROM inbox.outbox_messages m
	  JOIN inbox.outbox_keys k USING (topic, key)
	 WHERE m.key = 'held' AND m.position = k.last}),
	1, 'the last message of the key a sender holds stays, with its row');
is($node->sql("SELECT count(*) FROM inbox.outbox_keys WHERE key <> 'held'"),
	0, 'the purged keys lost their rows');

# Once the sender commits, the old message is no longer its key's last,
# and the next pass deletes it; the new one, once expired, goes with the
# key's row.
$node->sql("COMMIT PREPARED 'holds_key'");
sleep(1.5);
$node->restart;
ok( $node->poll_query_until('postgres',
		"SELECT (SELECT count(*) FROM inbox.outbox_messages) + (SELECT count(*) FROM inbox.outbox_keys) = 0"),
	'after the sender commits, the next pass purges the key and its messages');

$node->stop;
done_testing();
