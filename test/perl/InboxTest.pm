# test/perl/InboxTest.pm - what the TAP files under test/t share.
#
# InboxTest is a PostgreSQL::Test::Cluster with the helpers each file used
# to define for itself: a node that preloads the library and has the
# extension (InboxTest->node), SQL in database postgres ($node->sql),
# entries claimed and backdated, counted, the purge launcher, the server log
# since a point and the crash checks on it, waiting for a crash restart,
# and the load driver of the fault-injection tests (test/faults/load.pl)
# with the checks of what came after it: the server log, and exactly one
# effect per message in the driver's effects table.  The consumer of the
# README, which the fault tests drive, is here too, and the reader of the
# fenced code blocks of a Markdown page, which the documentation tests use.
#
# A TAP file finds it beside its own directory, so that prove needs no -I
# flag, whoever runs it and from where:
#
#   use FindBin;
#   use lib "$FindBin::RealBin/../perl";
#   use InboxTest;
package InboxTest;

use strict;
use warnings;
use Exporter qw(import);
use File::Basename ();
use IO::Socket::INET ();
use IPC::Run ();
use JSON::PP ();
use POSIX ();
use Time::HiRes ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils ();
use Test::More ();

# PostgreSQL::Test::Cluster->new blesses into the class it is called on.
# Nothing is imported into this package: an imported function would hide
# the Cluster method of the same name (PostgreSQL::Test::Utils exports
# command_ok, Cluster has a command_ok method that sets up the node's
# environment first), so Test::More and the framework are called by their
# full names.
our @ISA = ('PostgreSQL::Test::Cluster');
our @EXPORT_OK = qw(invoice_payload markdown_code_blocks);

# --- the node ------------------------------------------------------------------

# A started node, set up as setup_inbox says.
sub node
{
	my ($class, $name, %opts) = @_;
	return $class->new($name)->setup_inbox(%opts);
}

# Initialise and start the node, and create the extension in database
# postgres.  Options:
#   conf       lines appended to postgresql.conf
#   preload    shared_preload_libraries: 'inbox' unless given ('' for none)
#   extension  0 to leave the extension uncreated
#   init       a hash ref of options for init (allows_streaming => 1)
# Returns the node, so that new and setup_inbox can be chained.
sub setup_inbox
{
	my ($self, %opts) = @_;
	my $preload = $opts{preload} // 'inbox';
	$self->init(%{ $opts{init} // {} });
	$self->append_conf('postgresql.conf',
		($preload eq '' ? '' : "shared_preload_libraries = '$preload'\n")
		  . ($opts{conf} // ''));
	$self->start;
	$self->sql('CREATE EXTENSION inbox') if $opts{extension} // 1;
	return $self;
}

# True when the extension $name is installed for the PostgreSQL this node
# runs: its control file in the share directory and its library, so that a
# test that needs it can skip instead of failing to start the server.
sub has_extension
{
	my ($self, $name) = @_;
	my ($sharedir, $pkglibdir) = $self->config_data('--sharedir', '--pkglibdir');
	return -f "$sharedir/extension/$name.control" && -f "$pkglibdir/$name.so";
}

# SQL in database postgres, which every test uses most; other databases
# go through safe_psql.
sub sql
{
	my ($self, $query) = @_;
	return $self->safe_psql('postgres', $query);
}

# --- entries ---------------------------------------------------------------------

# Claim $n messages "$prefix<i>" in $scope, then backdate them by $age, in
# one transaction.  Options: db (default postgres); scopes => $k spreads
# them over the $k scopes "$scope-0" .. "$scope-<k-1>".
sub claim_aged
{
	my ($self, $scope, $prefix, $n, $age, %opts) = @_;
	my ($scope_expr, $scope_match) =
	  defined $opts{scopes}
	  ? ("'$scope-' || (g % $opts{scopes})", "LIKE '$scope-%'")
	  : ("'$scope'", "= '$scope'");
	$self->safe_psql(
		$opts{db} // 'postgres', qq{
		BEGIN;
		SELECT count(inbox_claim($scope_expr, '$prefix' || g)) FROM generate_series(1, $n) g;
		UPDATE inbox.entries SET received_at = now() - interval '$age'
		 WHERE scope $scope_match AND message_id LIKE '$prefix%';
		COMMIT;
	});
}

# The entries of the scopes matching the LIKE pattern $scope whose ids
# start with $prefix.  Option: db (default postgres).
sub count_entries
{
	my ($self, $scope, $prefix, %opts) = @_;
	return $self->safe_psql($opts{db} // 'postgres',
		"SELECT count(*) FROM inbox.entries WHERE scope LIKE '$scope' AND message_id LIKE '$prefix%'"
	);
}

# --- the purge launcher ----------------------------------------------------------

sub launcher_pid
{
	my ($self) = @_;
	return $self->sql(
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'inbox launcher'");
}

# Wait until exactly one launcher runs, one other than $old_pid if given
# (the launcher was stopped and must have been started again).  True if it
# did before the framework's timeout.
sub wait_for_launcher
{
	my ($self, $old_pid) = @_;
	return $self->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'inbox launcher'"
		  . (defined $old_pid ? " AND pid <> $old_pid" : ''));
}

# --- the server log --------------------------------------------------------------

# Where the log ends now: checks read only what is written after it.
sub log_position
{
	my ($self) = @_;
	return -s $self->logfile;
}

sub log_since
{
	my ($self, $offset) = @_;
	return PostgreSQL::Test::Utils::slurp_file($self->logfile, $offset);
}

# What the log shows when a backend crashed or the server panicked.
our $crash_pattern =
  qr/terminated by signal|server process .* was terminated|all server processes terminated|PANIC/;

# The test: nothing crashed since $offset.
sub no_crash_since
{
	my ($self, $offset, $name) = @_;
	# Failures point at the test file's line, not this one.
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	return Test::More::unlike($self->log_since($offset), $crash_pattern, $name);
}

# Wait until the postmaster has restarted everything after a backend crash
# that happened after $offset in the log.  Polling for a connection alone
# could succeed before the postmaster has even noticed the crash.
sub wait_crash_restart
{
	my ($self, $offset) = @_;
	$self->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
	$self->poll_query_until('postgres', 'SELECT true')
	  or die 'the server did not come back after the crash';
}

# --- the consumer of the README -------------------------------------------------

# The business table and the README's consumer function, which
# test/t/007_faults.pl and test/t/008_failover.pl drive.  The table has no
# unique constraint, so a second effect is a second row.  amount has a
# CHECK and unit_price divides by the quantity, so that a consumer can be
# made to fail after its claim.
our $invoice_consumer = q{
	CREATE TABLE invoices (
		message_id text NOT NULL,
		number text,
		customer text,
		amount numeric NOT NULL CHECK (amount >= 0),
		unit_price numeric
	);

	-- The consumer of the README, called once per delivery
	CREATE FUNCTION consume_invoice(message_id text, payload jsonb) RETURNS text
	LANGUAGE plpgsql AS $$
	BEGIN
		IF NOT inbox_claim('billing', message_id, sha256(convert_to(payload::text, 'UTF8'))) THEN
			RETURN 'duplicate';
		END IF;
		INSERT INTO invoices (message_id, number, customer, amount, unit_price)
		VALUES (message_id, payload->>'number', payload->>'customer',
				(payload->>'amount')::numeric,
				(payload->>'amount')::numeric / nullif((payload->>'quantity')::numeric, 0));
		RETURN 'applied';
	END $$;
};

# The message with id $id, as the broker delivers it to consume_invoice
sub invoice_payload
{
	my ($id) = @_;
	return qq({"number": "$id", "customer": "ACME", "amount": 120, "quantity": 0});
}

# --- the load driver of the fault-injection tests ----------------------------------

my $load_driver = File::Basename::dirname(__FILE__) . '/../faults/load.pl';

# A started node set up for test/faults/load.pl, and the log offset its
# checks start from.  $extra_conf is appended to the shared settings.
sub load_node
{
	my ($class, $name, $extra_conf) = @_;
	my $node = $class->node(
		$name, conf => q{
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
	return ($node, $node->log_position);
}

# Run the driver against the node with the given options; assert that it
# found the run consistent and printed its report; return the report's
# fields (the names in @$expected default to -1 when missing, so that every
# later assertion on them fails instead of warning).
sub run_load_driver
{
	my ($self, $options, $expected) = @_;
	# Failures point at the test file's line, not this one.
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my @cmd = ($^X, $load_driver, '--connstr' => $self->connstr('postgres'), @$options);
	my ($out, $err) = ('', '');
	my $ran = eval {
		IPC::Run::run(\@cmd, '<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(170));
	};
	my $status = $?;
	Test::More::diag("driver: $@") if $@;
	Test::More::ok($ran && $status == 0, 'the load driver finds the run consistent (exit status 0)')
	  or Test::More::diag("exit status $status\nstdout:\n$out\nstderr:\n$err");

	my ($report) = $out =~ /^(inbox-load: .*)$/m;
	Test::More::ok(defined $report, 'the driver prints its report line');
	$report //= '';
	Test::More::note($report);
	my %r = $report =~ /(\w+)=(\S+)/g;
	$r{$_} //= -1 for @$expected;
	return %r;
}

# After the load: the purge launcher is back after the crash restarts, the
# log shows at least 3 kill -9s, and no other error.
sub check_load_aftermath
{
	my ($self, $log_offset) = @_;
	# Failures point at the test file's line, not this one.
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	Test::More::ok($self->wait_for_launcher, 'the purge launcher runs again after the crash restarts');

	my $log = $self->log_since($log_offset);
	# A killed backend is a "server process" in 15's log, a "client backend"
	# (its backend type) in 18's.
	my $crashes = () =
	  $log =~ /(?:server process|client backend) \(PID \d+\) was terminated by signal 9/g;
	Test::More::cmp_ok($crashes, '>=', 3, "the log shows the kill -9s ($crashes crash restarts)");
	my @unexpected = grep {
		/\b(ERROR|FATAL|PANIC|WARNING):|terminated by signal (?!9\b)|exited with exit code [^0]/
		  && !/FATAL:  the database system is (in recovery mode|not yet accepting connections|starting up)/
	} split /\n/, $log;
	Test::More::is(scalar(@unexpected), 0, 'the server log has no error besides those of the crash restarts')
	  or Test::More::diag(join("\n", @unexpected[ 0 .. ($#unexpected < 19 ? $#unexpected : 19) ]));
}

# The effects the driver wrote, read from the database rather than from
# its report.  Its table, inbox_load_effects, has no unique constraint, so
# a message processed twice has two rows there.

# The test: no message of $scope has more than one effect row.
sub no_double_effect
{
	my ($self, $scope, $name) = @_;
	# Failures point at the test file's line, not this one.
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	return Test::More::is(
		$self->sql(
			qq{SELECT count(*) FROM (SELECT message_id FROM inbox_load_effects
				WHERE scope = '$scope' GROUP BY message_id HAVING count(*) > 1) AS d}),
		0, $name);
}

# The test, for the deferred mode: every entry of $scope still in
# inbox.entries is done with exactly one effect row, or dead with none.
sub entries_match_effects
{
	my ($self, $scope, $name) = @_;
	# Failures point at the test file's line, not this one.
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	return Test::More::is(
		$self->sql(
			qq{SELECT count(*) FROM inbox.entries AS e
				CROSS JOIN LATERAL (SELECT count(*) AS n FROM inbox_load_effects AS f
									 WHERE f.scope = e.scope AND f.message_id = e.message_id) AS f
				WHERE e.scope = '$scope'
				  AND NOT ((e.state = 'd' AND f.n = 1) OR (e.state = 'x' AND f.n = 0))}),
		0, $name);
}

# --- Markdown ------------------------------------------------------------------------

# The fenced code blocks of the Markdown text $markdown, and its prose.
# Returns two array refs:
#   - the blocks in order, each a hash of
#       info      the info string after the opening fence, trimmed
#       line      the line number of the opening fence, from 1
#       text      the lines between the fences, each ending in a newline,
#                 without the opening fence's indentation (a block inside
#                 a list item is indented)
#       adjacent  true when only blank lines separate it from the block
#                 before it
#       unclosed  true when the text ends before the block's closing fence
#   - the lines of the text (without newlines), those of the blocks and
#     their fences made empty, so that headings, tables and words are
#     found in the prose only: element i is line i + 1.
# A fence is three or more backticks or tildes after at most some spaces;
# the block ends at a line of the same character, at least as many of it,
# and nothing else but spaces.
sub markdown_code_blocks
{
	my ($markdown) = @_;
	my (@blocks, @prose, $open);
	my $since_last = '';
	my $number = 0;
	for my $line (split /\n/, $markdown)
	{
		$number++;
		if (!$open)
		{
			if ($line =~ /^( *)(`{3,}|~{3,})\s*(.*?)\s*$/)
			{
				# Copies: the match below resets $1 to $3.
				my ($indent, $fence, $info) = ($1, $2, $3);
				$open = {
					info => $info,
					line => $number,
					indent => length $indent,
					fence => $fence,
					text => '',
					adjacent => ($since_last !~ /\S/ && @blocks > 0),
				};
				push @prose, '';
			}
			else
			{
				$since_last .= "$line\n";
				push @prose, $line;
			}
			next;
		}
		push @prose, '';
		my ($fence, $char) = ($open->{fence}, substr($open->{fence}, 0, 1));
		if ($line =~ /^ *\Q$fence\E\Q$char\E*\s*$/)
		{
			push @blocks, $open;
			($open, $since_last) = (undef, '');
			next;
		}
		(my $text = $line) =~ s/^ {0,$open->{indent}}//;
		$open->{text} .= "$text\n";
	}
	push @blocks, { %$open, unclosed => 1 } if $open;
	delete @$_{qw(indent fence)} for @blocks;
	return (\@blocks, \@prose);
}

# --- processes ------------------------------------------------------------------

# Start @cmd in a process group of its own, with %$env added to its
# environment, stdin from /dev/null and stdout and stderr appended to
# $log.  Returns its pid, which is also the group's: the caller kills the
# group (kill 'KILL', -$pid) in its END block, whatever happened.
sub start_group
{
	my ($log, $env, @cmd) = @_;
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		setpgrp(0, 0);
		@ENV{ keys %$env } = values %$env;
		open(STDIN, '<', '/dev/null');
		open(STDOUT, '>>', $log);
		open(STDERR, '>&', \*STDOUT);
		{ exec(@cmd) };
		POSIX::_exit(127);
	}
	return $pid;
}

# --- an HTTP sink -------------------------------------------------------------------

# A webhook served by the test: a process listening on 127.0.0.1, at a
# port of the system's choosing, that serves each connection in a process
# of its own, so that requests a relay sends at once are served at once.
# Options, one of:
#   request => sub { my ($r) = @_; ... }: the connection is kept alive and
#     each request on it read as a request line, header lines and
#     Content-Length bytes of body; the sub is given a hash ref (line,
#     method, path, headers by lower-case name, body) and returns the
#     answer: (status, reason phrase, a ref to a list of header lines,
#     body), each optional (200, "OK" for 200 and "X" otherwise, none,
#     empty);
#   connection => sub { my ($socket, $n) = @_; ... }: serves the n-th
#     connection itself, from its raw bytes.
# Returns (port, pid).  Its process group is killed when the test ends;
# its processes never run the test's END blocks, which would stop the
# clusters.
my @http_sinks;
my $http_sinks_owner = $$;

END
{
	local $?;
	if ($$ == $http_sinks_owner)
	{
		kill 'KILL', -$_ for @http_sinks;
	}
}

sub start_http_sink
{
	my (%opts) = @_;
	my $listen = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 128, ReuseAddr => 1)
	  or die "listen: $!";
	my $port = $listen->sockport;
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		setpgrp(0, 0);
		$SIG{__DIE__} = sub { warn @_; POSIX::_exit(1) };
		# A relay that gave up on an answer has closed its end
		$SIG{PIPE} = 'IGNORE';
		$SIG{CHLD} = 'IGNORE';
		my $n = 0;
		while (my $c = $listen->accept)
		{
			$n++;
			my $child = fork() // die "fork: $!";
			if ($child != 0)
			{
				close $c;
				next;
			}
			if ($opts{connection})
			{
				$opts{connection}->($c, $n);
			}
			else
			{
				serve_http_requests($c, $opts{request});
			}
			close $c;
			POSIX::_exit(0);
		}
		POSIX::_exit(0);
	}
	# Its own process group from here on, whichever of the two runs first
	setpgrp($pid, $pid);
	close $listen;
	push @http_sinks, $pid;
	return ($port, $pid);
}

# The requests of connection $c, each answered with what $handler returns
sub serve_http_requests
{
	my ($c, $handler) = @_;
	while (defined(my $line = <$c>))
	{
		my ($method, $path) = $line =~ m{^(\S+) (\S+)};
		my %h;
		while (defined(my $hl = <$c>))
		{
			$hl =~ s/\r?\n$//;
			last if $hl eq '';
			my ($k, $v) = split /:\s*/, $hl, 2;
			$h{ lc $k } = $v;
		}
		my $body = '';
		read($c, $body, $h{'content-length'} // 0);
		my ($status, $reason, $headers, $answer) =
		  $handler->({ line => $line, method => $method, path => $path, headers => \%h, body => $body });
		$status //= 200;
		$reason //= $status == 200 ? 'OK' : 'X';
		$answer //= '';
		print $c "HTTP/1.1 $status $reason\r\n"
		  . join('', map { "$_\r\n" } @{ $headers // [] })
		  . 'Content-Length: ' . length($answer) . "\r\n\r\n$answer";
	}
	return;
}

# --- inbox-relay and RabbitMQ -----------------------------------------------------

# The path of inbox-relay beside $node's binaries; the test is skipped,
# with one line, where it is not built, and with rabbitmq => 1 also where
# RabbitMQ or python3-pika is missing.
sub relay_or_skip
{
	my ($node, %opts) = @_;
	my $relay = $node->config_data('--bindir') . '/inbox-relay';
	Test::More::plan(skip_all => "$relay not found: the relay is built where librabbitmq-dev, "
		  . 'libcurl4-openssl-dev and libssl-dev are installed')
	  unless -x $relay;
	Test::More::plan(skip_all => 'rabbitmq-server or python3-pika not found (test/tools/ensure-deps.sh)')
	  if $opts{rabbitmq} && !have_rabbitmq();
	Test::More::plan(skip_all => 'librdkafka-dev or python3-confluent-kafka not found, or the relay '
		  . 'was built without kafka:// (test/tools/ensure-deps.sh)')
	  if $opts{kafka} && !have_kafka($relay);
	return $relay;
}

# Whether a private RabbitMQ can run here, and pika talk to it
sub have_rabbitmq
{
	return -x '/usr/lib/rabbitmq/bin/rabbitmq-server'
	  && system('python3', '-c', 'import pika') == 0;
}

# Queue $queue of the RabbitMQ on loopback port $port (user guest),
# through pika: 'declare' declares it (durable); 'drain' also takes every
# message in it and returns one line each: "message_id outbox-key
# outbox-position delivery_mode content_type trace" (a header missing is
# None, trace "-").
my $pika_queue = <<'PY';
import os, sys, pika
conn = pika.BlockingConnection(pika.URLParameters(os.environ['AMQP_URL']))
ch = conn.channel()
ch.queue_declare(sys.argv[2], durable=True)
if sys.argv[1] == 'drain':
    while True:
        method, props, body = ch.basic_get(sys.argv[2], auto_ack=True)
        if method is None:
            break
        h = props.headers or {}
        print(props.message_id, h.get('outbox-key'), h.get('outbox-position'),
              props.delivery_mode, props.content_type, h.get('trace', '-'))
conn.close()
PY
sub amqp_queue
{
	my ($port, $queue, $what) = @_;
	my ($out, $err) = ('', '');
	local $ENV{AMQP_URL} = "amqp://guest:guest\@127.0.0.1:$port/%2F";
	IPC::Run::run([ 'python3', '-c', $pika_queue, $what, $queue ], '>', \$out, '2>', \$err)
	  or die "pika $what $queue: $err";
	return split /\n/, $out;
}

# Run a test's own pika script against the RabbitMQ at $port, as guest on
# the default vhost: @ops go to its stdin as JSON, and what it prints on
# stdout, a JSON array, comes back as a list.  Dies with its stderr.
sub run_pika
{
	my ($port, $script, @ops) = @_;
	my ($out, $err) = ('', '');
	local $ENV{AMQP_URL} = "amqp://guest:guest\@127.0.0.1:$port/%2F";
	IPC::Run::run([ 'python3', '-c', $script ], '<', \JSON::PP::encode_json(\@ops), '>', \$out, '2>', \$err)
	  or die "pika: $err";
	return @{ JSON::PP::decode_json($out) };
}


# Each RabbitMQ started, by its directory: its environment, its command
# and its listeners, for run_rabbitmq
my %rabbitmq_started;

# Start a private RabbitMQ (Debian's rabbitmq-server) in directory $rdir,
# listening on loopback only, with its own epmd, in a process group of its
# own; wait until it accepts connections.  Returns (AMQP port, process
# group, whether it is up).  The caller kills the group (kill 'KILL',
# -$pgid) in its END block, whatever happened.  With tls => 1 it also
# listens for amqps, with a certificate for 127.0.0.1 signed by a CA made
# here: then (AMQP port, group, up, amqps port, the CA's file).  With
# conf => TEXT, the lines of TEXT are added to its rabbitmq.conf.  With
# management => PORT, the management plugin (its HTTP API) is enabled and
# listens on 127.0.0.1 at PORT, and is waited for too.
sub start_rabbitmq
{
	my ($rdir, %opts) = @_;
	my $server = '/usr/lib/rabbitmq/bin/rabbitmq-server';
	my ($amqp_port, $dist_port, $epmd_port, $tls_port) =
	  map { PostgreSQL::Test::Cluster::get_free_port() } 1 .. 4;
	mkdir $rdir or die "mkdir $rdir: $!";
	PostgreSQL::Test::Utils::append_to_file("$rdir/rabbitmq.conf",
		"listeners.tcp.default = 127.0.0.1:$amqp_port\n" . ($opts{conf} // ''));
	if ($opts{tls})
	{
		make_tls_certificates($rdir);
		PostgreSQL::Test::Utils::append_to_file("$rdir/rabbitmq.conf",
			"listeners.ssl.default = 127.0.0.1:$tls_port\n"
			  . "ssl_options.cacertfile = $rdir/ca.pem\n"
			  . "ssl_options.certfile = $rdir/server.pem\n"
			  . "ssl_options.keyfile = $rdir/server.key\n"
			  . "ssl_options.verify = verify_none\n"
			  . "ssl_options.fail_if_no_peer_cert = false\n");
	}
	PostgreSQL::Test::Utils::append_to_file("$rdir/rabbitmq.conf",
		"management.tcp.ip = 127.0.0.1\nmanagement.tcp.port = $opts{management}\n")
	  if $opts{management};
	PostgreSQL::Test::Utils::append_to_file("$rdir/enabled_plugins",
		$opts{management} ? "[rabbitmq_management].\n" : "[].\n");
	my %env = (
		HOME => $rdir,    # the Erlang cookie goes there
		ERL_EPMD_PORT => $epmd_port,
		ERL_EPMD_ADDRESS => '127.0.0.1',
		RABBITMQ_NODENAME => "inbox-test-$amqp_port\@localhost",
		RABBITMQ_NODE_IP_ADDRESS => '127.0.0.1',
		RABBITMQ_NODE_PORT => $amqp_port,
		RABBITMQ_DIST_PORT => $dist_port,
		RABBITMQ_MNESIA_BASE => "$rdir/mnesia",
		RABBITMQ_LOG_BASE => "$rdir/log",
		RABBITMQ_PID_FILE => "$rdir/rabbitmq.pid",
		RABBITMQ_CONFIG_FILE => "$rdir/rabbitmq.conf",
		RABBITMQ_ENABLED_PLUGINS_FILE => "$rdir/enabled_plugins",
		RABBITMQ_CONF_ENV_FILE => "$rdir/no-rabbitmq-env.conf",
		# Erlang distribution on loopback too
		RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS => '-kernel inet_dist_use_interface {127,0,0,1}');
	my @cmd = ('sh', '-c', "epmd -port $epmd_port -address 127.0.0.1 & cd '$rdir' && exec '$server'");
	$rabbitmq_started{$rdir} = [ \%env, \@cmd, [ $amqp_port, 180 ], $opts{tls} ? ([ $tls_port, 60 ]) : (),
		$opts{management} ? ([ $opts{management}, 60 ]) : () ];
	my ($pgid, $up) = run_rabbitmq($rdir);
	return ($amqp_port, $pgid, $up, $opts{tls} ? ($tls_port, "$rdir/ca.pem") : ());
}

# The RabbitMQ of $rdir started (again, after start_rabbitmq, once the
# caller killed its group: its durable queues and persistent messages
# kept, on the same ports); waited for until each listener accepts
# connections.  Returns (process group, whether it is up).
sub run_rabbitmq
{
	my ($rdir) = @_;
	my ($env, $cmd, @listeners) = @{ $rabbitmq_started{$rdir} };
	my $pgid = start_group("$rdir/server.log", $env, @$cmd);
	# Each listener, as long as the broker runs: AMQP, then amqps and the
	# management API
	my $up = 1;
	for my $listener (@listeners)
	{
		my ($port, $seconds) = @$listener;
		$up = 0;
		for (1 .. 10 * $seconds)
		{
			my $socket = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp');
			if ($socket)
			{
				close $socket;
				$up = 1;
				last;
			}
			last if waitpid($pgid, POSIX::WNOHANG()) != 0;
			Time::HiRes::sleep(0.1);
		}
		last unless $up;
	}
	return ($pgid, $up);
}

# A CA and a server certificate for 127.0.0.1 that it signed, in $dir (the
# address as a DNS name too: librabbitmq matches the host against those):
# ca.pem, server.pem, server.key
sub make_tls_certificates
{
	my ($dir) = @_;
	my @quiet = ('>', '/dev/null', '2>', "$dir/openssl.log");
	IPC::Run::run([ 'openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2',
			'-subj', '/CN=inbox test CA', '-keyout', "$dir/ca.key", '-out', "$dir/ca.pem" ], @quiet)
	  or die 'openssl: the CA: ' . PostgreSQL::Test::Utils::slurp_file("$dir/openssl.log");
	IPC::Run::run([ 'openssl', 'req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=127.0.0.1',
			'-keyout', "$dir/server.key", '-out', "$dir/server.csr" ], @quiet)
	  or die 'openssl: the request: ' . PostgreSQL::Test::Utils::slurp_file("$dir/openssl.log");
	PostgreSQL::Test::Utils::append_to_file("$dir/server.ext", "subjectAltName = IP:127.0.0.1, DNS:127.0.0.1\n");
	IPC::Run::run([ 'openssl', 'x509', '-req', '-in', "$dir/server.csr", '-CA', "$dir/ca.pem",
			'-CAkey', "$dir/ca.key", '-CAcreateserial', '-days', '2', '-extfile', "$dir/server.ext",
			'-out', "$dir/server.pem" ], @quiet)
	  or die 'openssl: the certificate: ' . PostgreSQL::Test::Utils::slurp_file("$dir/openssl.log");
	chmod 0644, "$dir/server.key";
	return;
}

# --- NATS JetStream -------------------------------------------------------------------

# Debian's nats-server (in /usr/sbin)
sub nats_server
{
	return (grep { -x $_ } '/usr/sbin/nats-server', '/usr/bin/nats-server')[0] // '/usr/sbin/nats-server';
}

# Whether a private nats-server can run here and test/tools/nats_tool.c be
# built (libnats-dev, nats-server)
sub have_nats
{
	return -x nats_server() && system('pkg-config --exists libnats') == 0;
}

# test/tools/nats_tool.c built into $dir; its path.  Dies with the
# compiler's words.
sub build_nats_tool
{
	my ($dir) = @_;
	my $src = File::Basename::dirname(__FILE__) . "/../tools/nats_tool.c";
	my $tool = "$dir/nats_tool";
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'sh', '-c', "cc -O1 -o '$tool' '$src' \$(pkg-config --cflags --libs libnats)" ],
		'>', \$out, '2>', \$err)
	  or die "building nats_tool: $err";
	return $tool;
}

# Run nats_tool against the server at $port: @args after the URL, $stdin
# (optional) on its stdin; its stdout's lines.  Dies with its stderr.
sub nats_tool
{
	my ($tool, $port, $stdin, @args) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $tool, "nats://127.0.0.1:$port", @args ], '<', \($stdin // ''), '>', \$out, '2>', \$err,
		IPC::Run::timeout(60))
	  or die "nats_tool @args: $err";
	return split /\n/, $out;
}

# Each nats-server started, by its directory: its port
my %nats_started;

# Start a private nats-server with JetStream (nats-server -js), listening
# on loopback at a free port, its store in $dir/store, in a process group
# of its own; wait until it accepts connections.  Returns (port, process
# group, whether it is up).  The caller kills the group in its END block.
sub start_nats
{
	my ($dir) = @_;
	mkdir $dir or die "mkdir $dir: $!";
	$nats_started{$dir} = PostgreSQL::Test::Cluster::get_free_port();
	my ($pgid, $up) = run_nats($dir);
	return ($nats_started{$dir}, $pgid, $up);
}

# The nats-server of $dir started (again, after start_nats, once the
# caller killed its group: its streams and consumers kept on disk, on the
# same port); returns (process group, whether it is up)
sub run_nats
{
	my ($dir) = @_;
	my $port = $nats_started{$dir};
	my $pgid = start_group("$dir/server.log", {}, nats_server(), '-js', '-a', '127.0.0.1',
		'-p', $port, '-sd', "$dir/store");
	for (1 .. 300)
	{
		my $socket = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp');
		if ($socket)
		{
			close $socket;
			# JetStream is ready once the server logs it
			return ($pgid, 1)
			  if PostgreSQL::Test::Utils::slurp_file("$dir/server.log") =~ /Server is ready/;
		}
		last if waitpid($pgid, POSIX::WNOHANG()) != 0;
		Time::HiRes::sleep(0.1);
	}
	return ($pgid, 0);
}

# --- Kafka ----------------------------------------------------------------------

# Whether a mock Kafka cluster can be built here, confluent-kafka read
# it, and $relay serves kafka://
sub have_kafka
{
	my ($relay) = @_;
	my ($out, $err) = ('', '');
	return system('pkg-config --exists rdkafka') == 0
	  && system('python3', '-c', 'import confluent_kafka') == 0
	  && IPC::Run::run([ $relay, '--version' ], '>', \$out, '2>', \$err)
	  && $out =~ /^schemes: .*\bkafka\b/m;
}

# Start librdkafka's mock cluster (test/tools/kafka_mock.c, built into
# $dir once) with $opts{brokers} brokers (1 by default) on loopback.
# Returns a handle for kafka_mock and stop_kafka_mock; $mock->{bootstrap}
# is its "host:port,..." list.  It stops when its input ends, with the
# test at the latest.
sub start_kafka_mock
{
	my ($dir, %opts) = @_;
	my $program = "$dir/kafka_mock";
	my $source = File::Basename::dirname(__FILE__) . '/../tools/kafka_mock.c';
	unless (-x $program)
	{
		my $build = "cc -O1 -o '$program' '$source' \$(pkg-config --cflags --libs rdkafka) 2>&1";
		my $said = `$build`;
		die "building the Kafka mock: $said" if $?;
	}
	my %mock = (in => '', out => '', err => '', timer => IPC::Run::timeout(60));
	$mock{harness} = IPC::Run::start([ $program, $opts{brokers} // 1 ],
		'<', \$mock{in}, '>', \$mock{out}, '2>', \$mock{err}, $mock{timer});
	$mock{harness}->pump until $mock{out} =~ /\n/;
	($mock{bootstrap}) = $mock{out} =~ /^(\S+)/;
	$mock{out} = '';
	return \%mock;
}

# One command to the mock ("topic orders 4", "down 1", "up 1", "error
# Produce 5 19"...), waited for; dies with its error
sub kafka_mock
{
	my ($mock, $command) = @_;
	$mock->{timer}->start(60);
	$mock->{in} .= "$command\n";
	$mock->{harness}->pump until $mock->{out} =~ /^(ok|error.*)$/m;
	my $answer = $1;
	$mock->{out} = '';
	die "kafka_mock $command: $answer" if $answer ne 'ok';
	return;
}

sub stop_kafka_mock
{
	my ($mock) = @_;
	$mock->{in} .= "quit\n";
	$mock->{harness}->finish;
	return;
}

# The Kafka of $bootstrap through confluent-kafka: @ops go to the script's
# stdin as JSON, one answer each comes back.
#   [ 'read', TOPIC ]: every record of the topic, partition by partition,
#     each { partition, offset, key, value, headers => [[name, value]] }
#     with key, value and header values in hex (undef for null);
#   [ 'produce', TOPIC, [ { key, value, headers => [[name, value]] } ] ]:
#     produced and flushed (values as text; key_hex instead of key, and a
#     third element 'hex' after a header's value, for bytes in hex; a
#     header value undef is null);
#   [ 'lag', TOPIC, GROUP ]: the sum over the partitions of the high
#     watermark less the group's committed offset (the low watermark when
#     it has none).
my $kafka_py = <<'PY';
import json, os, sys
from confluent_kafka import Consumer, Producer, TopicPartition
bs = os.environ['KAFKA_BOOTSTRAP']
def hexs(b):
    return None if b is None else b.hex()
def consumer(group):
    return Consumer({'bootstrap.servers': bs, 'group.id': group, 'enable.auto.commit': False,
                     'log_level': 0})
out = []
for op in json.load(sys.stdin):
    if op[0] == 'read':
        c = consumer('inbox-test-reader')
        parts = c.list_topics(op[1], timeout=10).topics[op[1]].partitions
        recs = []
        for p in sorted(parts):
            lo, hi = c.get_watermark_offsets(TopicPartition(op[1], p), timeout=10)
            if hi <= lo:
                continue
            c.assign([TopicPartition(op[1], p, lo)])
            got = 0
            while got < hi - lo:
                m = c.poll(10)
                if m is None:
                    raise Exception('reading %s/%d: nothing in 10 s' % (op[1], p))
                if m.error():
                    continue
                recs.append({'partition': p, 'offset': m.offset(), 'key': hexs(m.key()),
                             'value': hexs(m.value()),
                             'headers': [[k, hexs(v)] for k, v in (m.headers() or [])]})
                got += 1
            c.unassign()
        c.close()
        out.append(recs)
    elif op[0] == 'produce':
        p = Producer({'bootstrap.servers': bs, 'enable.idempotence': True, 'log_level': 0})
        for m in op[2]:
            key = bytes.fromhex(m['key_hex']) if 'key_hex' in m else \
                m['key'].encode('utf-8') if m.get('key') is not None else None
            p.produce(op[1], value=m['value'].encode('utf-8'), key=key,
                      headers=[(h[0], None if h[1] is None else bytes.fromhex(h[1]) if len(h) > 2
                                else h[1].encode('utf-8')) for h in m.get('headers', [])])
            p.poll(0)
        if p.flush(30) != 0:
            raise Exception('not every message was produced')
        out.append(None)
    elif op[0] == 'lag':
        c = consumer(op[2])
        parts = c.list_topics(op[1], timeout=10).topics[op[1]].partitions
        lag = 0
        for tp in c.committed([TopicPartition(op[1], p) for p in parts], timeout=10):
            lo, hi = c.get_watermark_offsets(tp, timeout=10)
            lag += hi - (tp.offset if tp.offset >= 0 else lo)
        c.close()
        out.append(lag)
print(json.dumps(out))
PY

sub run_kafka
{
	my ($bootstrap, @ops) = @_;
	my ($out, $err) = ('', '');
	local $ENV{KAFKA_BOOTSTRAP} = $bootstrap;
	IPC::Run::run([ 'python3', '-c', $kafka_py ], '<', \JSON::PP::encode_json(\@ops), '>', \$out,
		'2>', \$err, IPC::Run::timeout(300))
	  or die "confluent-kafka: $err";
	return @{ JSON::PP::decode_json($out) };
}

1;
