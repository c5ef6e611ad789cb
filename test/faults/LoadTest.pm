# test/faults/LoadTest.pm - what test/t/009_load_faults.pl and
# test/t/010_deferred_faults.pl share: a cluster set up for the load (kill -9
# needs restart_after_crash, the purge runs on a short retention), one run of
# the driver test/faults/load.pl with its report parsed, and the checks of
# what came after: the purge launcher is back, and the server log holds the
# crash restarts and nothing else.
package LoadTest;

use strict;
use warnings;
use FindBin;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $driver = "$FindBin::RealBin/../faults/load.pl";

# A started cluster with the extension, and the log offset its checks start
# from.  $extra_conf is appended to the shared settings.
sub start_node
{
	my ($name, $extra_conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf(
		'postgresql.conf', q{
shared_preload_libraries = 'inbox'
# The test framework turns this off; the kill -9 of the load needs it.
restart_after_crash = on
# The framework logs every statement; the log is read for errors instead.
log_statement = none
max_connections = 60
inbox.purge_enabled = on
inbox.purge_naptime = 1
inbox.retention = 10
inbox.idle_threshold = '1h'
} . ($extra_conf // ''));
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION inbox');
	return ($node, -s $node->logfile);
}

# Run the driver against the node with the given options; assert that it
# found the run consistent and printed its report; return the report's
# fields (the names in @$expected default to -1 when missing, so that every
# later assertion on them fails instead of warning).
sub run_driver
{
	my ($node, $options, $expected) = @_;
	my @cmd = ($^X, $driver, '--connstr' => $node->connstr('postgres'), @$options);
	my ($out, $err) = ('', '');
	my $ran = eval {
		IPC::Run::run(\@cmd, '<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(170));
	};
	my $status = $?;
	diag("driver: $@") if $@;
	ok($ran && $status == 0, 'the load driver finds the run consistent (exit status 0)')
	  or diag("exit status $status\nstdout:\n$out\nstderr:\n$err");

	my ($report) = $out =~ /^(inbox-load: .*)$/m;
	ok(defined $report, 'the driver prints its report line');
	$report //= '';
	note($report);
	my %r = $report =~ /(\w+)=(\S+)/g;
	$r{$_} //= -1 for @$expected;
	return %r;
}

# After the load: the purge launcher is back after the crash restarts, the
# log shows at least 3 kill -9s, and no other error.
sub check_aftermath
{
	my ($node, $log_offset) = @_;
	ok( $node->poll_query_until('postgres',
			q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'inbox launcher'}),
		'the purge launcher runs again after the crash restarts');

	my $log = substr(slurp_file($node->logfile), $log_offset);
	my $crashes = () = $log =~ /server process \(PID \d+\) was terminated by signal 9/g;
	cmp_ok($crashes, '>=', 3, "the log shows the kill -9s ($crashes crash restarts)");
	my @unexpected = grep {
		/\b(ERROR|FATAL|PANIC|WARNING):|terminated by signal (?!9\b)|exited with exit code [^0]/
		  && !/FATAL:  the database system is (in recovery mode|not yet accepting connections|starting up)/
	} split /\n/, $log;
	is(scalar(@unexpected), 0, 'the server log has no error besides those of the crash restarts')
	  or diag(join("\n", @unexpected[ 0 .. ($#unexpected < 19 ? $#unexpected : 19) ]));
}

1;
