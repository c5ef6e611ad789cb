# test/t/022_poll_unannounced.pl
#
# A waiting inbox_poll finds the messages that no commit announces as soon
# as a take that does not wait would: at its next full scan, which a
# scope's takes run at least once a second (FRONT_FULL_SCAN_MS,
# src/front.h), not at the end of its wait.  No commit that noted the
# scope makes them takeable, so nothing wakes the poll for them:
#   - a row written without the extension's functions, by COPY into its
#     leaf as a data-only restore writes it, due an hour ago, before the
#     scope's front, so that only a full scan finds it;
#   - a message made takeable again by an UPDATE by hand;
#   - a receive committed by COMMIT PREPARED, whose commit wakes nobody:
#     where max_prepared_transactions is above 0, every wait on a commit
#     (a poll's, as an outbox_fetch's, t/025) ends at least once a second
#     to look again (WAKEUP_PREPARED_LOOK_MS, src/wakeup.c), besides the
#     poll's full scan.
#
# Each poll may wait 60 seconds.  What it returns says whether it had
# waited less than 45 of them, by the server's own clock
# (clock_timestamp() - statement_timestamp() in the poll's statement):
# the only assertion on time, which a poll that looks again about once a
# second meets by far, and which only a wait that ran to its end misses.
# (A poll that sleeps to its deadline does find the message then, with the
# full scan of its last look.)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = InboxTest->node(
	'unannounced', conf => q{
inbox.purge_enabled = off
max_prepared_transactions = 2
});

# The poll's wait, and the part of it a poll must not reach
my $wait = 60;
my $bound = 45;

# A session whose poll of $scope waits, once its backend sleeps: its first
# look has found nothing, and moved the scope's front up to then.
sub waiting_poll
{
	my ($scope) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 2 * $wait);
	$s->set_query_timer_restart;
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	$s->query_until(qr/polling/,
		"\\echo polling\n"
		  . "SELECT message_id || ':' || attempts || ':' || "
		  . "CASE WHEN clock_timestamp() - statement_timestamp() < interval '$bound seconds' "
		  . "THEN 'early' ELSE 'at the end of its wait' END "
		  . "FROM inbox_poll('$scope', 1, '1 minute', '$wait seconds');\n"
		  . "\\echo poll-done\n");
	ok( $node->poll_query_until(
			'postgres',
			"SELECT state = 'active' AND wait_event_type = 'Extension' FROM pg_stat_activity WHERE pid = $pid"
		),
		"$scope: the poll waits");
	return ($s, $pid);
}

# What the poll of $s returned, or 'no return' if it never did
sub poll_result
{
	my ($s, $pid) = @_;
	my $out = eval { $s->query_until(qr/poll-done\r?\n/, '') };
	if (!defined $out)
	{
		diag("the poll did not return: $@");
		$node->sql("SELECT pg_terminate_backend($pid)");
		return 'no return';
	}
	$s->quit;
	$out =~ s/poll-done\r?\n//;
	return join(',', split /\r?\n/, $out);
}

# A data-only restore: COPY into the scope's leaf, no extension function
{
	my ($leaf, $bucket) = split /\|/,
	  $node->sql(q{SELECT inbox.bucket('copied', 'c-1') / 2048, inbox.bucket('copied', 'c-1')});
	my $due = $node->sql(q{SELECT now() - interval '1 hour'});
	my ($s, $pid) = waiting_poll('copied');
	$node->sql(
		"COPY inbox.entries_p$leaf (scope, message_id, bucket, state, payload, due) FROM stdin;\n"
		  . "copied\tc-1\t$bucket\tp\t{}\t$due\n\\.\n");
	is(poll_result($s, $pid), 'c-1:1:early',
		'a row restored by COPY ends the wait early, though due before the front');
}

# An UPDATE by hand makes a leased message takeable again
{
	$node->sql(q{SELECT inbox_receive('updated', 'u-1', '{}'::jsonb)});
	$node->sql(q{SELECT count(*) FROM inbox_poll('updated', 1, '10 minutes')});
	my ($s, $pid) = waiting_poll('updated');
	$node->sql(
		q{UPDATE inbox.entries SET state = 'p', owner_session = NULL, lease_until = NULL,
			receipt = NULL, due = now() - interval '1 hour'
		  WHERE scope = 'updated' AND message_id = 'u-1'});
	is(poll_result($s, $pid), 'u-1:2:early', 'a message given back by an UPDATE by hand ends the wait early');
}

# COMMIT PREPARED runs in a transaction that noted nothing: it wakes nobody
{
	my ($s, $pid) = waiting_poll('prepared');
	$node->sql(
		q{BEGIN; SELECT inbox_receive('prepared', 'p-1', '{}'::jsonb); PREPARE TRANSACTION 'receive'});
	$node->sql(q{COMMIT PREPARED 'receive'});
	is(poll_result($s, $pid), 'p-1:1:early', 'a receive committed by COMMIT PREPARED ends the wait early');
}

$node->stop;
done_testing();
