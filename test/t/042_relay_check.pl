# test/t/042_relay_check.pl
#
# inbox-relay check --management=URL, against a private RabbitMQ with its
# management plugin: each AMQP target's exchange must have a binding that
# its messages could follow.
#   - a direct exchange: a binding of the route's very routing key is OK,
#     one of another key is not;
#   - a topic exchange: a pattern (* and #) that matches the routing key
#     is OK, one that does not is not;
#   - a fanout exchange with a binding is OK, whatever the key;
#   - an exchange with no binding FAILs, with a routing key or without;
#   - the default exchange is not asked about;
#   - an exchange in a vhost whose name holds a slash is found (the vhost
#     percent-encoded in the API's path);
#   - the credentials: the URL's user with the password of the secrets
#     file's line for that URL, or the URL's own; never printed; wrong
#     ones FAIL with the API's status;
#   - without --management the bindings are not checked.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use HTTP::Tiny;
use IPC::Run;
use JSON::PP;
use MIME::Base64 qw(encode_base64);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = InboxTest->node('relay_check', conf => "inbox.purge_enabled = off\n");
my $relay = InboxTest::relay_or_skip($node, rabbitmq => 1);
my $tmp = PostgreSQL::Test::Utils::tempdir('relay_check');
my $broker_pgid;
END
{
	local $?;
	kill 'KILL', -$broker_pgid if $broker_pgid;
}

my $mport = PostgreSQL::Test::Cluster::get_free_port();
my ($aport, $up);
($aport, $broker_pgid, $up) = InboxTest::start_rabbitmq("$tmp/rabbitmq", management => $mport);
BAIL_OUT('RabbitMQ did not start: ' . slurp_file("$tmp/rabbitmq/server.log")) unless $up;

# --- the broker's topology, through the management API as guest --------------------
my $http = HTTP::Tiny->new(timeout => 30);
my $api = "http://127.0.0.1:$mport/api";

sub api
{
	my ($method, $path, $body, $user) = @_;
	my $r = $http->request($method, "$api$path", {
		headers => {
			authorization => 'Basic ' . encode_base64($user // 'guest:guest', ''),
			'content-type' => 'application/json' },
		defined $body ? (content => encode_json($body)) : () });
	die "$method $path: $r->{status} $r->{content}" unless $r->{success};
	return $r;
}

# The management API answers as soon as the plugin runs; its first
# request may still find it starting
for (1 .. 100)
{
	last if $http->get("$api/overview", { headers => { authorization => 'Basic ' . encode_base64('guest:guest', '') } })
	  ->{success};
	sleep 1;
}
my $watcher_password = 'w4tch-s3cret';
api('PUT', '/users/watcher', { password => $watcher_password, tags => 'monitoring' });
api('PUT', '/vhosts/shop%2Feu', {});
for my $vhost ('%2F', 'shop%2Feu')
{
	api('PUT', "/permissions/$vhost/$_", { configure => '.*', write => '.*', read => '.*' })
	  for qw(guest watcher);
}
api('PUT', '/queues/%2F/q', { durable => JSON::PP::true });
api('PUT', '/queues/shop%2Feu/q', { durable => JSON::PP::true });
my %exchanges = (
	orders => [ '%2F', 'direct', 'orders.created' ],
	shipments => [ '%2F', 'topic', 'ship.*.eu' ],
	audit => [ '%2F', 'topic', 'audit.#' ],
	fan => [ '%2F', 'fanout', 'ignored' ],
	lonely => [ '%2F', 'topic', undef ],
	lonely_direct => [ '%2F', 'direct', undef ],
	eu_orders => [ 'shop%2Feu', 'direct', 'orders.created' ]);
for my $e (sort keys %exchanges)
{
	my ($vhost, $type, $binding) = @{ $exchanges{$e} };
	api('PUT', "/exchanges/$vhost/$e", { type => $type, durable => JSON::PP::true });
	api('POST', "/bindings/$vhost/e/$e/q/q", { routing_key => $binding }) if defined $binding;
}

# --- the routes ---------------------------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE ROLE relay_user LOGIN;
	SELECT inbox_grant_bundle('relay_user', 'relay');
});
my $conninfo = 'host=' . $node->host . ' port=' . $node->port . ' dbname=postgres user=relay_user';
my $broker = "amqp://guest\@127.0.0.1:$aport";
my %targets = (
	direct_ok => "$broker/%2F?exchange=orders&routing_key=orders.created",
	direct_other => "$broker/%2F?exchange=orders&routing_key=orders.deleted",
	topic_ok => "$broker/%2F?exchange=shipments&routing_key=ship.parcel.eu",
	topic_other => "$broker/%2F?exchange=shipments&routing_key=ship.parcel.us",
	topic_short => "$broker/%2F?exchange=shipments&routing_key=ship.eu",
	hash_none => "$broker/%2F?exchange=audit&routing_key=audit",
	hash_many => "$broker/%2F?exchange=audit&routing_key=audit.a.b.c",
	hash_other => "$broker/%2F?exchange=audit&routing_key=auditor.a",
	fanout => "$broker/%2F?exchange=fan&routing_key=anything",
	unbound => "$broker/%2F?exchange=lonely&routing_key=orders.created",
	unbound_any => "$broker/%2F?exchange=lonely",
	unbound_direct => "$broker/%2F?exchange=lonely_direct",
	default => "$broker/%2F?routing_key=q",
	vhost => "$broker/shop%2Feu?exchange=eu_orders&routing_key=orders.created",
	vhost_other => "$broker/shop%2Feu?exchange=eu_orders&routing_key=orders.deleted");
my %expected = (
	direct_ok => 'OK',
	direct_other => 'FAIL: exchange "orders" has no binding for routing key "orders.deleted"',
	topic_ok => 'OK',
	topic_other => 'FAIL: exchange "shipments" has no binding for routing key "ship.parcel.us"',
	topic_short => 'FAIL: exchange "shipments" has no binding for routing key "ship.eu"',
	hash_none => 'OK',
	hash_many => 'OK',
	hash_other => 'FAIL: exchange "audit" has no binding for routing key "auditor.a"',
	fanout => 'OK',
	unbound => 'FAIL: exchange "lonely" has no binding for routing key "orders.created"',
	unbound_any => 'FAIL: exchange "lonely" has no binding',
	unbound_direct => 'FAIL: exchange "lonely_direct" has no binding',
	default => 'OK',
	vhost => 'OK',
	vhost_other => 'FAIL: exchange "eu_orders" has no binding for routing key "orders.deleted"');
my $secrets = "$tmp/secrets";
my $management = "http://watcher\@127.0.0.1:$mport";
PostgreSQL::Test::Utils::append_to_file($secrets,
	join('', map { "$_ guest\n" } sort values %targets) . "$management $watcher_password\n");
chmod 0600, $secrets;
for my $name (sort keys %targets)
{
	$node->safe_psql('postgres', "SELECT outbox_route('$name', '$targets{$name}')");
}

sub check
{
	my (@options) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $relay, 'check', '--timeout=10', "--secrets=$secrets", @options, $conninfo ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(120));
	note($err) if $err ne '';
	my %line;
	for my $l (split /\n/, $out)
	{
		my ($state, $target, $reason) = $l =~ /^(OK|FAIL) (\S+?)(?:: (.*))?$/ or next;
		$line{$target} = $state . (defined $reason ? ": $reason" : '');
	}
	return ($? >> 8, $out, $err, %line);
}

# --- without --management: bindings are not checked -----------------------------------
my ($status, $out, $err, %line) = check();
is($status, 0, 'without --management, every target is OK: bindings are not checked') or diag($out);

# --- with it --------------------------------------------------------------------------
($status, $out, $err, %line) = check("--management=$management");
is($status, 1, 'with --management, a target without a binding makes the exit status 1');
like($out, qr/^OK database\n/, 'the database is OK');
for my $name (sort keys %targets)
{
	is($line{ $targets{$name} }, $expected{$name}, "--management: $name");
}
unlike($out . $err, qr/\Q$watcher_password\E/, 'the password is never printed');

# The password in the URL itself, where the secrets file has none
my $with_password = "http://watcher:$watcher_password\@127.0.0.1:$mport/";
($status, $out, $err, %line) = check("--management=$with_password");
is($line{ $targets{direct_ok} } . ' ' . $line{ $targets{direct_other} },
	'OK FAIL: exchange "orders" has no binding for routing key "orders.deleted"',
	'the URL\'s own password is used');
unlike($out . $err, qr/\Q$watcher_password\E/, 'and never printed');

# Wrong credentials: every AMQP target with an exchange of its own FAILs
($status, $out, $err, %line) = check("--management=http://watcher:wrong\@127.0.0.1:$mport");
is($status, 1, 'wrong credentials make the exit status 1');
is($line{ $targets{direct_ok} },
	"FAIL: the management API at http://127.0.0.1:$mport answered 401 for exchange \"orders\"",
	'and say the API\'s status, without the credentials');
is($line{ $targets{default} }, 'OK', 'the default exchange is not asked about');
unlike($out . $err, qr/wrong/, 'the wrong password is not printed either');

# Nothing listens at the API's address
my $closed = PostgreSQL::Test::Cluster::get_free_port();
($status, $out, $err, %line) = check("--management=http://127.0.0.1:$closed");
like($line{ $targets{fanout} }, qr/^FAIL: the management API at http:\/\/127\.0\.0\.1:$closed: /,
	'an API that cannot be reached FAILs, with the reason');

done_testing();
