# test/t/025_outbox_wake.pl
#
# A relay waiting in outbox_fetch is woken by the commit of a send to its
# target, not by a send that rolls back, and not by a send to another
# target; an acknowledgement wakes a relay waiting for the key's next
# message; COMMIT PREPARED, from another session, ends a wait too.  Each
# wait is 60 seconds: a fetch that returns well before its end was woken.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $node = InboxTest->node('outbox_wake',
	conf => "inbox.purge_enabled = off\nmax_prepared_transactions = 2\n");
my $patience = 90;

$node->sql(q{
	SELECT outbox_route('orders', 'https://a.example/hook');
	SELECT outbox_route('audit', 'https://b.example/hook');
});

sub sleeping
{
	my ($pid) = @_;
	return $node->poll_query_until('postgres',
		"SELECT state = 'active' AND wait_event_type = 'Extension' FROM pg_stat_activity WHERE pid = $pid");
}

# A session waiting in outbox_fetch for target; returns it and its pid
sub waiting_fetch
{
	my ($target, $what) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => $patience);
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	$s->query_until(qr/fetching/,
		"\\echo fetching\n"
		  . "SELECT key || '#' || position FROM outbox_fetch('$target', 10, '1 minute', '60 seconds') ORDER BY 1;\n"
		  . "\\echo fetch-done\n");
	ok(sleeping($pid), "$what: the fetch waits");
	return ($s, $pid);
}

# What the waiting fetch returned, or 'no return' within the patience
sub fetch_result
{
	my ($s, $pid) = @_;
	my $out = eval { $s->query_until(qr/fetch-done\r?\n/, '') };
	if (!defined $out)
	{
		diag("the fetch did not return within ${patience}s: $@");
		$node->sql("SELECT pg_terminate_backend($pid)");
		return 'no return';
	}
	$s->quit;
	$out =~ s/fetch-done\r?\n//;
	return join(',', map { relative($_) } split /\r?\n/, $out);
}

# "key#position", the position counted from the key's first (1): a key's
# first position is the clock's reading
sub relative
{
	my ($key, $position) = split /#/, shift;
	my $first = $node->sql(qq{SELECT min(position) FROM inbox.outbox_messages WHERE key = '$key'});
	return "$key#" . ($position - $first + 1);
}

# A commit wakes the waiting fetch; a rollback and another target's send do not
{
	my ($s, $pid) = waiting_fetch('https://a.example/hook', 'commit');
	$node->sql(q{BEGIN; SELECT outbox_send('orders', 'rolled-back', '{}'::jsonb); ROLLBACK});
	$node->sql(q{SELECT outbox_send('audit', 'elsewhere', '{}'::jsonb)});
	$s->{run}->pump_nb;
	is($s->{stdout}, '', 'commit: a rolled-back send and a send to another target do not end the wait');
	ok(sleeping($pid), 'commit: the fetch still waits');
	my $started = time;
	$node->sql(q{SELECT outbox_send('orders', 'k', '{"n": 1}'::jsonb), outbox_send('orders', 'k', '{"n": 2}'::jsonb)});
	is(fetch_result($s, $pid), 'k#1', 'commit: the send that commits ends the wait with the key\'s head');
	cmp_ok(time - $started, '<', 30, 'commit: well before the wait\'s end');
}

# The key's next message waits for the head's acknowledgement; the
# acknowledgement, from another session, wakes the relay (the head's
# receipt is made from its lease's seed and address, as the fetch made it)
{
	my $receipt = $node->sql(q{
		SELECT inbox.outbox_receipt(receipt, ctid) FROM inbox.outbox_deliveries WHERE key = 'k'
		   AND position = (SELECT min(position) FROM inbox.outbox_messages WHERE key = 'k')});
	my ($s, $pid) = waiting_fetch('https://a.example/hook', 'ack');
	my $started = time;
	is($node->sql(qq{SELECT outbox_ack('$receipt')}), 't', 'ack: another session acknowledges the head');
	is(fetch_result($s, $pid), 'k#2', 'ack: the acknowledgement ends the wait with the key\'s next message');
	cmp_ok(time - $started, '<', 30, 'ack: well before the wait\'s end');
}

# A prepared send wakes nobody at its PREPARE, nor at its COMMIT PREPARED,
# which runs in another session and calls the extension back nowhere: the
# fetch looks again each second where transactions can be prepared, and
# finds it then
{
	my ($s, $pid) = waiting_fetch('https://a.example/hook', 'prepared');
	$node->sql(q{BEGIN; SELECT outbox_send('orders', 'p', '{}'::jsonb); PREPARE TRANSACTION 'outbox-wake'});
	$s->{run}->pump_nb;
	is($s->{stdout}, '', 'prepared: a prepared send does not end the wait');
	my $started = time;
	$node->sql(q{COMMIT PREPARED 'outbox-wake'});
	is(fetch_result($s, $pid), 'p#1', 'prepared: COMMIT PREPARED ends the wait with the message');
	cmp_ok(time - $started, '<', 30, 'prepared: well before the wait\'s end');
}

done_testing();
