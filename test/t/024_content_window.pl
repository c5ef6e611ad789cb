# test/t/024_content_window.pl
#
# Content windows on a server that changes under them:
#   - a window, and the contents it holds, survive a restart and an
#     immediate shutdown: the same content under a new id is still
#     rejected (IB007, naming the first id) afterwards;
#   - a backend that cached "no window" for a scope sees a window set by
#     another session from that session's commit on;
#   - the retention worker removes a content once its window has passed,
#     and the content is then a fresh first; a listed content duplicate
#     goes with the scope's retention.
#
# Nothing here asserts how fast anything happens: conditions are polled.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = InboxTest->node(
	'content_window', conf => q{
inbox.purge_naptime = 1
inbox.retention = '1h'
inbox.idle_threshold = '365d'
});

# IB007 of a claim, with its message: "SQLSTATE message"
sub claim_error
{
	my ($scope, $id, $content) = @_;
	my ($rc, $out, $err) = $node->psql('postgres',
		"\\set VERBOSITY verbose\nSELECT inbox_claim('$scope', '$id', sha256('$content'))");
	return $err =~ /ERROR:  (\w{5}): (.*)/ ? "$1 $2" : "none: $out";
}

# --- the window survives a restart ------------------------------------------------
$node->sql(q{
	SELECT inbox_set_content_window('payments', '1 hour', 'reject');
	SELECT inbox_claim('payments', 'P-1', sha256('pay 100 to ann'));
});
$node->restart;
is(claim_error('payments', 'P-2', 'pay 100 to ann'),
	'IB007 message "P-2" in scope "payments" repeats the content of message "P-1"',
	'after a restart, the same content under a new id is rejected, naming the first');
$node->stop('immediate');
$node->start;
is(claim_error('payments', 'P-3', 'pay 100 to ann'),
	'IB007 message "P-3" in scope "payments" repeats the content of message "P-1"',
	'after an immediate shutdown too');
is($node->sql("SELECT inbox_claim('payments', 'P-1', sha256('pay 100 to ann'))"),
	'f', 'the redelivery of the first id is an ordinary duplicate');

# --- a window set elsewhere applies from its commit on ------------------------------
my $session = $node->background_psql('postgres', on_error_stop => 0);
is($session->query_safe(
		"SELECT inbox_claim('late', 'L-1', sha256('x')) AND inbox_claim('late', 'L-2', sha256('x'))"),
	't', 'without a window, the same content under two ids is claimed twice');
$node->sql("SELECT inbox_set_content_window('late', '1 hour', 'reject')");
$session->query("SELECT inbox_claim('late', 'L-3', sha256('y'))");
$session->query("SELECT inbox_claim('late', 'L-4', sha256('y'))");
like($session->{stderr}, qr/repeats the content of message "L-3"/,
	'a backend that claimed the scope before sees the window set by another session');
$session->quit;

# --- the worker purges what the window no longer needs -------------------------------
$node->sql(q{
	SELECT inbox_set_content_window('audit', '1 hour', 'warn');
	SELECT inbox_claim('audit', 'A-1', sha256('login ann')), inbox_claim('audit', 'A-2', sha256('login ann'));
	UPDATE inbox.content_window SET seen_at = seen_at - interval '61 minutes', expires_at = expires_at - interval '61 minutes'
	 WHERE scope = 'payments';
	UPDATE inbox.content_duplicates SET seen_at = seen_at - interval '61 minutes', expires_at = expires_at - interval '61 minutes'
	 WHERE scope = 'audit';
});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM inbox.content_window WHERE scope = 'payments'"),
	'the worker removes a content once its window has passed');
is($node->sql("SELECT count(*) FROM inbox.content_window WHERE scope = 'audit'"),
	1, 'and keeps the contents still inside their window');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM inbox_content_duplicates WHERE scope = 'audit'"),
	'a listed content duplicate goes with the scope\'s retention');
is($node->sql("SELECT inbox_claim('payments', 'P-4', sha256('pay 100 to ann'))"),
	't', 'past the window, the same content is a fresh first');

$node->stop;
done_testing();
