# test/t/015_monitoring.pl
#
# The monitoring kit of monitoring/, against the real exporter:
#   - Debian's prometheus-postgres-exporter runs with
#     monitoring/postgres_exporter.yml, as a role that has only what
#     docs/monitoring.md says to grant (SELECT on inbox_stats), over two
#     databases (--auto-discover-databases --include-databases).  Known
#     traffic goes in first: claims, a rolled-back claim, duplicates, a
#     mismatch (IB002), receives with a redelivery, one delayed and one
#     overdue, a message in hand, a dead letter, a purge, and a scope whose
#     purge is late.  /metrics, scraped over loopback, has every inbox
#     series with the value that traffic implies, with the right TYPE, and
#     no scrape error;
#   - a scope reserved with inbox_grant is hidden from the exporter's role
#     until that role is granted the scope, as docs/monitoring.md says;
#   - after a restart without shared_preload_libraries, the counters are
#     NaN and pg_settings_inbox_max_scopes is gone (alert InboxNotPreloaded
#     relies on that), while the backlog is still right;
#   - monitoring/grafana-dashboard.json parses, and every metric name in
#     every panel's (and variable's) PromQL is one the exporter exported;
#   - every metric name of monitoring/alerts.yml is one too; promtool (from
#     Debian's prometheus package) accepts the rules (check rules), lints
#     the inbox metrics (check metrics), and runs monitoring/alerts_test.yml,
#     in which each alert fires on a bad series and stays quiet on a good
#     one (test rules).
#
# Skipped as a whole, with one line, when the exporter is missing; the
# promtool part is skipped, with one line, when promtool is missing
# (test/tools/ensure-deps.sh installs both).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use HTTP::Tiny;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $exporter = '/usr/bin/prometheus-postgres-exporter';
plan skip_all =>
  "$exporter not found: install Debian's prometheus-postgres-exporter package (test/tools/ensure-deps.sh)"
  unless -x $exporter;

my $kit = "$FindBin::RealBin/../../monitoring";
my $queries = "$kit/postgres_exporter.yml";

# inbox.idle_threshold is long so that the backdated entries below read as
# silence, not as pauses of their scope's retention clock; the purge runs
# only when the test calls inbox_purge(), so that its counts are known.
my $node = InboxTest->node(
	'monitoring', conf => q{
inbox.purge_enabled = off
inbox.idle_threshold = '365d'
});
$node->sql('CREATE DATABASE app2');
$node->safe_psql('app2', 'CREATE EXTENSION inbox');

# The exporter's role: LOGIN and the one grant docs/monitoring.md gives, in
# each database.  No pg_monitor, no superuser.
$node->sql('CREATE ROLE inbox_monitor LOGIN; CREATE ROLE billing_app');
$node->safe_psql($_, 'GRANT SELECT ON inbox_stats, outbox_stats TO inbox_monitor') for qw(postgres app2);

# --- known traffic ----------------------------------------------------------------

# billing (claim mode): 5 claims, one more rolled back (counted: a claim is
# counted when decided), 3 redeliveries, 1 redelivery with other content.
$node->sql(q{
	SELECT inbox_claim('billing', 'b' || g, sha256(('invoice ' || g)::bytea)) FROM generate_series(1, 5) g;
	BEGIN; SELECT inbox_claim('billing', 'b6'); ROLLBACK;
	SELECT inbox_claim('billing', 'b' || g, sha256(('invoice ' || g)::bytea)) FROM generate_series(1, 3) g;
});
my ($rc, $out, $err) = $node->psql('postgres',
	q{\set VERBOSITY verbose
	  SELECT inbox_claim('billing', 'b4', sha256('altered'::bytea))});
like($err, qr/ERROR:  IB002/, 'traffic: the altered redelivery raises IB002');

# shipping (deferred mode): 3 receives and 1 delayed an hour; 1
# redelivery; 1 message in hand under a one-hour lease; the oldest of the
# rest made due 10 minutes ago.
$node->sql(q{
	SELECT inbox_receive('shipping', 's' || g, jsonb_build_object('order', g)) FROM generate_series(1, 3) g;
	SELECT inbox_receive('shipping', 's4', '{"order": 4}'::jsonb, NULL, now() + interval '1 hour');
	SELECT inbox_receive('shipping', 's1', '{"order": 1}'::jsonb);
	SELECT message_id FROM inbox_poll('shipping', 1, '1 hour');
	UPDATE inbox.entries SET due = now() - interval '10 minutes'
	 WHERE scope = 'shipping' AND message_id = 's3';
	SELECT inbox.forget_front('shipping');  -- moved by hand: the front must hear of it
});
# parcels: one message, one attempt allowed, failed: a dead letter.
is( $node->sql(q{
	SELECT inbox_receive('parcels', 'p1', '{}'::jsonb);
	SELECT inbox_set_max_attempts('parcels', 1);
	SELECT inbox_fail('parcels', receipt, 'carrier API: 503') FROM inbox_poll('parcels', 1, '1 minute');
}), "t\n\ndead", 'traffic: the failed message of parcels is dead');

# the outbox: three messages for one target; the first delivered, the
# second failed and waiting to retry, the third in hand, sent 10 minutes
# ago.
is( $node->sql(q{
	SELECT outbox_route('orders', 'amqp://mq.example/v');
	SELECT count(outbox_send('orders', 'o' || g, jsonb_build_object('n', g))) FROM generate_series(1, 3) g;
	CREATE TEMP TABLE held AS SELECT key, receipt FROM outbox_fetch('amqp://mq.example/v', 3, '1 hour');
	SELECT outbox_ack(receipt) FROM held WHERE key = 'o1';
	SELECT outbox_fail(receipt, 'broker: 503', '1 hour') FROM held WHERE key = 'o2';
	UPDATE inbox.outbox_deliveries SET queued_at = now() - interval '10 minutes' WHERE key = 'o3';
}), "\n3\nt\npending", 'traffic: the outbox has one message sent, one failed, one in hand');

# archive: 4 entries past the 7-day retention and 2 fresh, one purge.
# late: entries 7 days and 2 hours old, kept by a 30-day retention during
# the purge (which registers the scope), then the retention is 7 days: the
# oldest entry is 2 hours overdue.
$node->claim_aged('archive', 'old-', 4, '8 days');
$node->claim_aged('archive', 'new-', 2, '0');
$node->claim_aged('late', 'old-', 3, '7 days 2 hours');
$node->claim_aged('late', 'new-', 1, '0');
$node->sql(q{SELECT inbox_set_retention('late', '30 days')});
my $before_purge = $node->sql('SELECT extract(epoch FROM now())');
is($node->sql('SELECT inbox_purge()'), 4, 'traffic: the purge deletes the 4 old entries of archive');
my $after_purge = $node->sql('SELECT extract(epoch FROM clock_timestamp())');
$node->sql(q{SELECT inbox_set_retention('late', '7 days')});

# app2: the same scope name in another database
$node->safe_psql('app2', q{SELECT inbox_claim('billing', 'x' || g) FROM generate_series(1, 2) g});

# secret: reserved to billing_app, so hidden from the exporter's role
$node->sql(q{
	SELECT inbox_grant('secret', 'billing_app');
	SELECT inbox_claim('secret', 'z1');
});

# --- the exporter -------------------------------------------------------------------

my $dir = PostgreSQL::Test::Utils::tempdir('exporter');
my $port = PostgreSQL::Test::Cluster::get_free_port();
my ($exporter_run, $exporter_out) = (undef, "$dir/exporter.log");

sub start_exporter
{
	local $ENV{DATA_SOURCE_NAME} = sprintf('host=%s port=%d dbname=postgres user=inbox_monitor sslmode=disable',
		$node->host, $node->port);
	$exporter_run = IPC::Run::start(
		[
			$exporter, "--extend.query-path=$queries",
			"--web.listen-address=127.0.0.1:$port",
			'--auto-discover-databases', '--include-databases=postgres,app2'
		],
		'<', \undef, '>>', $exporter_out, '2>>', $exporter_out);
}

sub stop_exporter
{
	$exporter_run->kill_kill if $exporter_run && $exporter_run->pumpable;
	$exporter_run = undef;
}

# Stopped whatever happens, a failed assertion or a die.
END { stop_exporter(); }

my $http = HTTP::Tiny->new(timeout => 30);

# The body of /metrics, once the exporter answers; undef if it never does.
sub scrape
{
	for (1 .. 10 * $PostgreSQL::Test::Utils::timeout_default)
	{
		my $res = $http->get("http://127.0.0.1:$port/metrics");
		return $res->{content} if $res->{success};
		last if !$exporter_run->pumpable;
		sleep 0.1;
	}
	return undef;
}

# Samples and types of a scrape: { name => { "k=v,k=v" (sorted, server
# left out) => value } } and { name => type }
sub parse_metrics
{
	my ($text) = @_;
	my (%samples, %types);
	for my $line (split /\n/, $text)
	{
		if ($line =~ /^# TYPE (\S+) (\S+)/)
		{
			$types{$1} = $2;
			next;
		}
		next if $line =~ /^#/ || $line !~ /\S/;
		my ($name, $labels, $value) = $line =~ /^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/
		  or next;
		my %l = ($labels // '') =~ /(\w+)="((?:[^"\\]|\\.)*)"/g;
		delete $l{server};
		$samples{$name}{ join(',', map { "$_=$l{$_}" } sort keys %l) } = $value;
	}
	return (\%samples, \%types);
}

start_exporter();
my $body = scrape();
ok(defined $body, 'the exporter serves /metrics on loopback')
  or diag(slurp_file($exporter_out));
$body //= '';
my ($m, $types) = parse_metrics($body);

# The value of $name for the labels given (database postgres unless said)
sub value
{
	my ($name, %l) = @_;
	$l{datname} //= 'postgres';
	my $key = join(',', map { "$_=$l{$_}" } sort keys %l);
	return $m->{$name}{$key} // 'absent';
}

is($m->{pg_up}{''} // 'absent', 1, 'pg_up is 1: the exporter reached the server');
is($m->{pg_exporter_user_queries_load_error}
	  && (grep { $_ != 0 } values %{ $m->{pg_exporter_user_queries_load_error} }) ? 1 : 0,
	0, 'the queries file loads (pg_exporter_user_queries_load_error is 0)');
is($m->{pg_exporter_last_scrape_error}{''} // 'absent',
	0, 'no query failed as the role with only SELECT on inbox_stats (pg_exporter_last_scrape_error is 0)')
  or diag(slurp_file($exporter_out));

is($m->{pg_settings_inbox_max_scopes}{''} // 'absent',
	1000, 'the preloaded library shows in pg_settings_inbox_max_scopes (InboxNotPreloaded relies on it)');

# The queries file: metric name => usage, for every non-label column
my %defined;
{
	my $namespace;
	my $metric;
	for (split /\n/, slurp_file($queries))
	{
		$namespace = $1 if /^(\w+):\s*$/;
		$metric = "${namespace}_$1" if /^\s+- (\w+):\s*$/;
		$defined{$metric} = lc $1 if /^\s+usage: "(\w+)"/ && $1 ne 'LABEL';
	}
}
cmp_ok(scalar(keys %defined), '>=', 15, 'the queries file defines the inbox metrics');
for my $name (sort keys %defined)
{
	is($types->{$name} // 'absent', $defined{$name}, "$name is exported, as a $defined{$name}");
}
like($_, qr/_total$/, "$_: a counter's name ends in _total") for grep { $defined{$_} eq 'counter' } keys %defined;

# billing
is(value('inbox_claims_total', scope => 'billing'), 6, 'billing: 6 claims (5 committed, 1 rolled back)');
is(value('inbox_duplicates_total', scope => 'billing'), 3, 'billing: 3 duplicates');
is(value('inbox_mismatches_total', scope => 'billing'), 1, 'billing: 1 mismatch');
is(value('inbox_content_duplicates_total', scope => 'billing'), 0, 'billing: no content sent twice');
is(value('inbox_pending', scope => 'billing'), 0, 'billing: nothing pending in claim mode');
is(value('inbox_clock_state', scope => 'billing', clock => 'unknown'),
	0, 'billing: the purge has seen the scope (clock not unknown)');
is(value('inbox_clock_state', scope => 'billing', clock => 'running'), 1, 'billing: its clock runs');
is(value('inbox_entries_retained', scope => 'billing'), 5, 'billing: 5 entries retained');
is(value('inbox_retention_seconds', scope => 'billing'), 7 * 86400, 'billing: retention 7 days, in seconds');

# shipping
is(value('inbox_claims_total', scope => 'shipping'), 4, 'shipping: 4 receives');
is(value('inbox_duplicates_total', scope => 'shipping'), 1, 'shipping: 1 redelivered receive');
is(value('inbox_pending', scope => 'shipping'), 3, 'shipping: 3 pending, the delayed one included');
is(value('inbox_processing', scope => 'shipping'), 1, 'shipping: 1 in hand');
is(value('inbox_dead', scope => 'shipping'), 0, 'shipping: no dead letter');
my $age = value('inbox_oldest_pending_age_seconds', scope => 'shipping');
ok($age =~ /^[\d.e+]+$/ && $age >= 600 && $age < 3600,
	"shipping: the oldest due message has waited 10 minutes, the delayed one does not count ($age s)");

# parcels
is(value('inbox_dead', scope => 'parcels'), 1, 'parcels: 1 dead letter');
is(value('inbox_failures_total', scope => 'parcels'), 1, 'parcels: 1 failure');
is(value('inbox_pending', scope => 'parcels'), 0, 'parcels: nothing pending');
is(value('inbox_oldest_pending_age_seconds', scope => 'parcels'), 0, 'parcels: oldest pending age 0 when none');

# archive: the purge
is(value('inbox_rows_purged_total', scope => 'archive'), 4, 'archive: 4 rows purged');
is(value('inbox_entries_retained', scope => 'archive'), 2, 'archive: 2 entries retained');
my $last = value('inbox_last_purge_timestamp_seconds', scope => 'archive');
ok($last =~ /^[\d.e+]+$/ && $last >= $before_purge - 1 && $last <= $after_purge + 1,
	"archive: the last purge's time is the purge's ($before_purge <= $last <= $after_purge)");
is(value('inbox_purge_lag_seconds', scope => 'archive'), 0, 'archive: no purge lag after the purge');
is(value('inbox_last_purge_timestamp_seconds', scope => 'billing'),
	'NaN', 'billing: no purge time, nothing of it was purged');

# late: 2 hours overdue
my $lag = value('inbox_purge_lag_seconds', scope => 'late');
ok($lag =~ /^[\d.e+]+$/ && $lag >= 7200 - 60 && $lag <= 7200 + 600,
	"late: the oldest entry is about 2 hours overdue ($lag s)");
is(value('inbox_rows_purged_total', scope => 'late'), 0, 'late: nothing purged');

# the other database, and the per-database series
is(value('inbox_claims_total', scope => 'billing', datname => 'app2'), 2, 'app2: billing has its own 2 claims');
is(value('inbox_database_scopes', datname => 'app2'), 1, 'app2: 1 scope');
is(value('inbox_database_scopes', datname => 'postgres'),
	5, 'postgres: 5 scopes visible to the exporter (the reserved one hidden)');
is(value('inbox_database_scopes_counted', datname => 'postgres'), 5, 'postgres: all 5 counted');

# the outbox
my @route = (topic => 'orders', target => 'amqp://mq.example/v');
is(value('inbox_outbox_pending', @route), 2, 'outbox: 2 pending (the failed one and the one in hand)');
is(value('inbox_outbox_sent_total', @route), 1, 'outbox: 1 sent');
is(value('inbox_outbox_failed', @route), 1, 'outbox: 1 failed, waiting to retry');
is(value('inbox_outbox_dead', @route), 0, 'outbox: no dead letter');
my $outbox_age = value('inbox_outbox_oldest_pending_age_seconds', @route);
ok($outbox_age =~ /^[\d.e+]+$/ && $outbox_age >= 600 && $outbox_age < 3600,
	"outbox: the oldest pending message was sent 10 minutes ago ($outbox_age s)");

# the reserved scope
is(value('inbox_claims_total', scope => 'secret'), 'absent', 'secret: hidden from a role without its grant');
$node->sql(q{SELECT inbox_grant('secret', 'inbox_monitor')});
($m, $types) = parse_metrics(scrape() // '');
is(value('inbox_claims_total', scope => 'secret'), 1, 'secret: shown once the exporter role has its grant');

# --- the dashboard ----------------------------------------------------------------

my %exported = map { $_ => 1 } keys %$m;

# Names that look like metrics in a PromQL expression: identifiers of the
# exporter's namespaces, outside strings
sub metric_names
{
	my ($expr) = @_;
	(my $bare = $expr) =~ s/"(?:[^"\\]|\\.)*"//g;
	my %n = map { $_ => 1 } $bare =~ /(?<![\w.\$])((?:inbox|pg)_[A-Za-z0-9_:]+)/g;
	return sort keys %n;
}

# The relay's own series (inbox-relay --metrics) come from the relay, not
# the exporter: t/041 checks them against the relay's endpoint.
sub relay_metric { return $_[0] =~ /^inbox_relay_/ }

my $dashboard = eval { decode_json(slurp_file("$kit/grafana-dashboard.json")) };
ok($dashboard, 'grafana-dashboard.json parses') or diag($@);
$dashboard //= {};
my @panels;
my @queue = @{ $dashboard->{panels} // [] };
while (my $p = shift @queue)
{
	push @queue, @{ $p->{panels} } if $p->{panels};
	push @panels, $p unless ($p->{type} // '') eq 'row';
}
cmp_ok(scalar(@panels), '>=', 6, 'the dashboard has its panels (' . scalar(@panels) . ')');
my @exprs;
for my $p (@panels)
{
	my @t = grep { defined $_->{expr} } @{ $p->{targets} // [] };
	ok(@t, "panel \"$p->{title}\" has a PromQL query");
	push @exprs, map { [ "panel \"$p->{title}\"", $_->{expr} ] } @t;
}
for my $v (@{ $dashboard->{templating}{list} // [] })
{
	my $q = ref $v->{query} ? $v->{query}{query} : $v->{query};
	# label_values(...) is Grafana's, not PromQL: its metric is checked, not its syntax
	push @exprs, [ "variable \$$v->{name}", $q, 'grafana' ] if ($v->{type} // '') eq 'query';
}
for (@exprs)
{
	my ($where, $expr) = @$_;
	my @names = metric_names($expr);
	ok(@names, "$where: its query names a metric");
	ok($exported{$_} || relay_metric($_), "$where: $_ is exported") for @names;
}

# --- the alert rules --------------------------------------------------------------

# The expressions of the rule file: "expr: ..." on one line, or "expr: |"
# and the lines indented deeper.
my $rules_file = "$kit/alerts.yml";
my @rule_exprs;
{
	my ($indent, $block);
	for (split /\n/, slurp_file($rules_file))
	{
		if (defined $indent)
		{
			if (/^(\s*)\S/ && length($1) > $indent) { $block .= "$_\n"; next; }
			push @rule_exprs, $block;
			undef $indent;
		}
		if (/^(\s*)(?:- )?expr:\s*[|>]-?\s*$/) { ($indent, $block) = (length($1), ''); }
		elsif (/^\s*(?:- )?expr:\s*(.+)$/) { push @rule_exprs, $1; }
	}
	push @rule_exprs, $block if defined $indent;
}
cmp_ok(scalar(@rule_exprs), '>=', 8, 'alerts.yml has its rules (' . scalar(@rule_exprs) . ' expressions)');
for my $expr (@rule_exprs)
{
	my @names = metric_names($expr);
	(my $short = $expr) =~ s/\s+/ /g;
	ok(@names, "alert rule names a metric: $short");
	ok($exported{$_} || relay_metric($_), "alert rule: $_ is exported") for @names;
}

SKIP:
{
	my $promtool = '/usr/bin/promtool';
	skip "$promtool not found: install Debian's prometheus package (test/tools/ensure-deps.sh)", 4
	  unless -x $promtool;

	my ($o, $e) = ('', '');
	my $ok = IPC::Run::run([ $promtool, 'check', 'rules', $rules_file ], '<', \undef, '>', \$o, '2>', \$e);
	ok($ok, 'promtool check rules accepts alerts.yml') or diag("$o$e");

	# The inbox part of the scrape, with its HELP and TYPE lines
	my $inbox_text = join('', map { "$_\n" } grep { /^(# (HELP|TYPE) )?inbox_/ } split /\n/, $body);
	($o, $e) = ('', '');
	$ok = IPC::Run::run([ $promtool, 'check', 'metrics' ], '<', \$inbox_text, '>', \$o, '2>', \$e);
	ok($ok && $o . $e !~ /\S/, 'promtool check metrics finds nothing to say about the inbox metrics')
	  or diag("$o$e");

	# The dashboard's PromQL parses: each query as a recording rule, with
	# Grafana's variables replaced by what they stand for
	my $exprs_file = "$dir/dashboard-exprs.yml";
	my $rules = "groups:\n  - name: dashboard\n    rules:\n";
	my $i = 0;
	for (grep { !$_->[2] } @exprs)
	{
		(my $expr = $_->[1]) =~ s/\$__rate_interval/5m/g;
		$expr =~ s/\$(datname|scope)/.*/g;
		$expr =~ s/'/''/g;
		$i++;
		$rules .= "      - record: dashboard_query_$i\n        expr: '$expr'\n";
	}
	PostgreSQL::Test::Utils::append_to_file($exprs_file, $rules);
	($o, $e) = ('', '');
	$ok = IPC::Run::run([ $promtool, 'check', 'rules', $exprs_file ], '<', \undef, '>', \$o, '2>', \$e);
	ok($ok, "promtool parses every PromQL query of the dashboard ($i)") or diag("$o$e");

	($o, $e) = ('', '');
	$ok = IPC::Run::run([ $promtool, 'test', 'rules', "$kit/alerts_test.yml" ],
		'<', \undef, '>', \$o, '2>', \$e);
	ok($ok, 'promtool test rules: each alert fires on a bad series and stays quiet on a good one')
	  or diag("$o$e");
}

# --- without the preload ------------------------------------------------------------

# The exporter reconnects by itself after the restart: scrape until a
# scrape reaches the server with no query failing.
$node->adjust_conf('postgresql.conf', 'shared_preload_libraries', "''");
$node->restart;
my $ok_scrape;
for (1 .. 10 * $PostgreSQL::Test::Utils::timeout_default)
{
	($m, $types) = parse_metrics(scrape() // '');
	last if $ok_scrape = ($m->{pg_up}{''} // 0) == 1 && ($m->{pg_exporter_last_scrape_error}{''} // 1) == 0;
	sleep 0.1;
}
ok($ok_scrape, 'no preload: the exporter scrapes the restarted server without error')
  or diag(slurp_file($exporter_out));
is($m->{pg_settings_inbox_max_scopes}{''} // 'absent',
	'absent', 'no preload: pg_settings_inbox_max_scopes is absent, as InboxNotPreloaded expects');
is(value('inbox_claims_total', scope => 'billing'), 'NaN', 'no preload: the counters are NaN');
is(value('inbox_database_scopes_counted'), 0, 'no preload: no scope counted');
is(value('inbox_pending', scope => 'shipping'), 3, 'no preload: the backlog is still there');

stop_exporter();
$node->stop;
done_testing();
