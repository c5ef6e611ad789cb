# test/t/008_failover.pl
#
# A primary fails (an immediate shutdown: every process dies at once, as
# after kill -9) and its streaming standby is promoted, while a consumer
# claims messages and applies their effects (one transaction each).  A
# message counts as acked when the consumer saw its COMMIT return.  After the
# promotion the same consumer redelivers every message to the new primary.
#
#   - synchronous replication (synchronous_standby_names = '*',
#     synchronous_commit = on): no acked message is lost: each has its claim
#     and exactly one effect on the new primary, and its redelivery is a
#     duplicate.  At the crash two messages are in flight: one whose COMMIT
#     waits for the (by then unreachable) standby, committed on the old
#     primary only and never acked, and one whose transaction is still open.
#     Both are processed once on the new primary;
#   - asynchronous replication: the standby stops receiving WAL (its
#     primary_conninfo is emptied) before a last batch, so the acked commits
#     of that batch exist only on the old primary and are lost with it.  Even
#     so, on the promoted standby an effect exists exactly when its claim
#     does, and redelivering everything leaves one effect and one claim per
#     message: the lost messages are processed again, the others are
#     duplicates.
#
# The transaction still open at the crash was opened while the standby was
# streaming and caught up, so a claim that committed on its own, apart from
# its effect, would show on the standby as a claim without an effect.  The
# old primary, started on its own afterwards, shows that what the standby
# lacks had committed there (the unacked sync COMMIT, the async batch).
#
# Nothing here asserts how fast anything happens: conditions are polled.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest qw(invoice_payload);
use PostgreSQL::Test::Utils;
use Test::More;

my $messages = 500;    # delivered before the crash, m1 .. m500
my $lagging = 50;      # async: the last ones, acked while the standby is cut off

# The consumer: one transaction per delivery.  Returns 'applied' or
# 'duplicate' once COMMIT has returned (the message may then be acked), and
# undef if anything failed.
sub deliver
{
	my ($session, $id) = @_;
	my ($out, $failed) = $session->query(
		"BEGIN;\nSELECT consume_invoice('$id', '" . invoice_payload($id) . "');\nCOMMIT;");
	return $failed ? undef : $out;
}

# Per message m1 .. m$messages: its entries and its effects on $node
sub holdings
{
	my ($node) = @_;
	my %held;
	for my $line (split /\n/, $node->safe_psql('postgres', qq{
		SELECT 'm' || g,
			   (SELECT count(*) FROM inbox.entries e WHERE e.scope = 'billing' AND e.message_id = 'm' || g),
			   (SELECT count(*) FROM invoices i WHERE i.message_id = 'm' || g)
		  FROM generate_series(1, $messages) g}))
	{
		my ($id, $entries, $effects) = split /\|/, $line;
		$held{$id} = { entries => $entries, effects => $effects };
	}
	return %held;
}

sub failover
{
	my ($mode) = @_;
	my $sync = $mode eq 'sync';

	my $primary = InboxTest->node(
		"${mode}_primary",
		init => { allows_streaming => 1 },
		conf => "inbox.purge_enabled = off\nsynchronous_commit = on\n");
	# The effect, invoices, and the consumer of the README, consume_invoice
	$primary->sql($InboxTest::invoice_consumer);

	$primary->backup('base');
	my $standby = InboxTest->new("${mode}_standby");
	$standby->init_from_backup($primary, 'base', has_streaming => 1);
	$standby->start;
	# Synchronous from now on; the setting is not in the standby's copy of
	# the configuration, so once promoted it waits for no standby of its own.
	if ($sync)
	{
		$primary->safe_psql('postgres', "ALTER SYSTEM SET synchronous_standby_names = '*'");
		$primary->reload;
	}
	$primary->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_replication WHERE state = 'streaming'"
		  . ($sync ? " AND sync_state = 'sync'" : ''))
	  or die "$mode: the standby does not stream";

	# The messages in flight at the crash; every other one is delivered in
	# order before it.
	my @in_flight = $sync ? ("m$messages", 'm' . ($messages - 1)) : ("m$messages");
	my $last_streamed = $sync ? $messages - 2 : $messages - 1 - $lagging;

	my %acked;
	my $consumer = $primary->background_psql('postgres', on_error_stop => 0);
	$consumer->set_query_timer_restart;
	my $deliver_range = sub {
		my ($from, $to) = @_;
		for my $i ($from .. $to)
		{
			my $result = deliver($consumer, "m$i");
			$acked{"m$i"} = 1 if defined $result && $result eq 'applied';
		}
	};

	$deliver_range->(1, int($last_streamed / 2));
	# A second consumer opens a transaction and leaves it open: claim and
	# effect done, no COMMIT yet.
	my $open = $primary->background_psql('postgres', on_error_stop => 0);
	$open->query_safe('BEGIN');
	is($open->query_safe("SELECT consume_invoice('$in_flight[0]', '" . invoice_payload($in_flight[0]) . "')"),
		'applied', "$mode: a transaction in flight has claimed $in_flight[0] and applied its effect");
	$deliver_range->(int($last_streamed / 2) + 1, $last_streamed);
	$primary->wait_for_catchup($standby, 'replay');

	# The standby is cut off: it keeps what it has, and receives nothing more.
	$standby->safe_psql('postgres', "ALTER SYSTEM SET primary_conninfo = ''");
	$standby->reload;
	$standby->poll_query_until('postgres', 'SELECT count(*) = 0 FROM pg_stat_wal_receiver')
	  or die "$mode: the WAL receiver did not stop";
	$primary->poll_query_until('postgres', 'SELECT count(*) = 0 FROM pg_stat_replication')
	  or die "$mode: the WAL sender did not stop";

	if ($sync)
	{
		# The COMMIT of the next message now waits for the standby, after its
		# commit record: committed on the primary, not acked.
		$consumer->query_until(qr/delivering/,
			"\\echo delivering\nBEGIN;\nSELECT consume_invoice('$in_flight[1]', '"
			  . invoice_payload($in_flight[1]) . "');\nCOMMIT;\n");
		ok( $primary->poll_query_until('postgres',
				"SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep'"),
			"sync: the COMMIT of $in_flight[1] waits for the standby");
	}
	else
	{
		# Acked by the primary alone: these are lost with it.
		$deliver_range->($last_streamed + 1, $messages - 1);
	}

	# The primary crashes with that load in flight, and the standby takes over.
	$primary->stop('immediate');
	$consumer->{run}->finish;
	$open->{run}->finish;
	$standby->promote;
	$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die "$mode: the standby was not promoted";

	# What the new primary holds, before any redelivery
	my %held = holdings($standby);
	my @ids = map { "m$_" } 1 .. $messages;
	my @torn = grep { $held{$_}{entries} != $held{$_}{effects} } @ids;
	my @doubled = grep { $held{$_}{effects} > 1 || $held{$_}{entries} > 1 } @ids;
	my @lost = grep { $acked{$_} && $held{$_}{effects} == 0 } @ids;
	my @kept = grep { $held{$_}{effects} == 1 } @ids;
	is(scalar(keys %acked), $messages - @in_flight,
		"$mode: every message delivered outside the crash was acked");
	is(join(',', @torn), '',
		"$mode: on the promoted standby an effect exists exactly when its claim does");
	is(join(',', @doubled), '', "$mode: no message has two effects");
	if ($sync)
	{
		is(join(',', @lost), '', 'sync: no acked message is lost');
	}
	else
	{
		ok(@lost > 0, 'async: acked messages were lost with the old primary');
	}

	# The old primary, started on its own, shows what went down with it:
	# commits the standby never received.
	$primary->start;
	my %old = holdings($primary);
	$primary->stop;
	my @only_old = grep { $old{$_}{effects} == 1 && $held{$_}{effects} == 0 } @ids;
	is(join(',', @only_old), join(',', $sync ? $in_flight[1] : @lost),
		$sync
		? "sync: only $in_flight[1], whose COMMIT never returned, had committed on the old primary alone"
		: 'async: the lost acked messages had committed on the old primary alone');

	# Every message is delivered again, through the same consumer.
	my $redelivery = $standby->background_psql('postgres', on_error_stop => 0);
	$redelivery->set_query_timer_restart;
	my (@duplicates, @applied, @failed);
	for my $id (@ids)
	{
		my $result = deliver($redelivery, $id);
		if (!defined $result)
		{
			push @failed, $id;
		}
		elsif ($result eq 'duplicate')
		{
			push @duplicates, $id;
		}
		else
		{
			push @applied, $id;
		}
	}
	$redelivery->quit;
	is(join(',', @failed), '', "$mode: every redelivery commits");
	is(join(',', @applied), join(',', grep { $held{$_}{entries} == 0 } @ids),
		"$mode: exactly the messages the new primary had no claim for are processed again");
	if ($sync)
	{
		is(scalar(grep { !$acked{$_} } @duplicates), 0,
			'sync: every duplicate is a message that was acked');
		is(scalar(grep { $acked{$_} } @duplicates), scalar(keys %acked),
			'sync: every acked message is a duplicate on the new primary');
	}

	my %after = holdings($standby);
	my @doubled_after = grep { $after{$_}{effects} > 1 } @ids;
	my @missing_after = grep { $after{$_}{effects} == 0 } @ids;
	is(join(',', grep { $after{$_}{entries} != 1 || $after{$_}{effects} != 1 } @ids), '',
		"$mode: after the redelivery every message has one claim and one effect");
	is($standby->safe_psql('postgres', 'SELECT count(*) FROM invoices'), $messages,
		"$mode: and there is no other effect");

	note "failover $mode: messages $messages, acked "
	  . scalar(keys %acked)
	  . ', in flight '
	  . scalar(@in_flight)
	  . ', kept by the standby '
	  . scalar(@kept)
	  . ', acked lost '
	  . scalar(@lost)
	  . ', redelivered: duplicates '
	  . scalar(@duplicates)
	  . ', reprocessed '
	  . scalar(@applied)
	  . ', torn before redelivery '
	  . scalar(@torn)
	  . ', after redelivery: doubled '
	  . scalar(@doubled_after)
	  . ', lost '
	  . scalar(@missing_after);

	$standby->stop;
}

failover('sync');
failover('async');

done_testing();
