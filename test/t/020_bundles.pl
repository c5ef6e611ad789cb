# test/t/020_bundles.pl
#
# The grant bundles, as the roles that use them.  Each bundle is granted
# with inbox_grant_bundle to a login role that is not a superuser and has
# nothing else; that role then runs the loop the documentation gives for
# its bundle, end to end:
#
#   consumer  claim, batch claim, status, result, in one transaction;
#   receiver  every form of receive and receive_many, delayed ones too;
#   worker    poll, complete by receipt (one and a batch), fail by
#             receipt, extend by receipt, take, and the forms by message
#             id;
#   streams   the offset claims;
#   publisher every form of outbox send;
#   relay     the targets, fetch (waiting too), ack and fail; the
#             subscriptions, and a reject of ingest;
#   operator  every view, and requeue of a dead letter, the inbox's and
#             the outbox's; the ingest rejects, and forgetting one.
#
# Then, for every object of every bundle, each role that does not hold
# that bundle gets 42501; every public function of the extension is in a
# bundle or on the owner-only list below (a function a release adds and
# forgets to put in a bundle fails here); revoking takes it all back;
# only the extension's owner may grant or revoke bundles; scope grants
# still apply on top; and an object added to a bundle later (as an update
# script adds it) reaches every role that holds the bundle, also through
# the update from 1.0.0.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

# The public functions that no bundle holds: the owner's alone.
my @owner_only = qw(
  inbox_set_max_attempts inbox_set_group_dead_letters inbox_set_retention inbox_set_content_window inbox_drop_scope
  inbox_grant inbox_revoke inbox_grant_bundle inbox_revoke_bundle
  inbox_purge inbox_stats_reset
  inbox_forget inbox_forget_range inbox_allow_forget inbox_disallow_forget
  inbox_distribute outbox_route outbox_unroute inbox_subscribe inbox_unsubscribe);

my @bundles = qw(consumer receiver worker streams publisher relay operator);

my $node = InboxTest->node('bundles', conf => "inbox.purge_enabled = off\n");
my $schema = $node->sql(q{
	SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
	 WHERE e.extname = 'inbox'});

# SQL as a role; returns (ok, stdout, stderr).  VERBOSITY verbose puts the
# SQLSTATE in every error line.
sub as_role
{
	my ($role, $sql) = @_;
	my ($ret, $out, $err) = $node->psql(
		'postgres', "\\set VERBOSITY verbose\n$sql",
		extra_params => [ '-U', $role, '-v', 'ON_ERROR_STOP=1' ]);
	return ($ret == 0, $out, $err);
}

sub sqlstate_of
{
	my ($err) = @_;
	return $err =~ /ERROR:  ([0-9A-Z]{5}):/ ? $1 : 'none';
}

$node->sql(join ';', map { "CREATE ROLE ${_}_role LOGIN" } @bundles, 'nobody');
for my $bundle (@bundles)
{
	# Twice: the second grant changes nothing and raises nothing
	$node->sql("SELECT inbox_grant_bundle('${bundle}_role', '$bundle')");
	my $acl = $node->sql(
		"SELECT string_agg(coalesce(p.proacl::text, ''), ';' ORDER BY p.oid) FROM pg_proc p WHERE p.proname LIKE 'inbox%' OR p.proname LIKE 'outbox%'");
	$node->sql("SELECT inbox_grant_bundle('${bundle}_role', '$bundle')");
	is( $node->sql(
			"SELECT string_agg(coalesce(p.proacl::text, ''), ';' ORDER BY p.oid) FROM pg_proc p WHERE p.proname LIKE 'inbox%' OR p.proname LIKE 'outbox%'"
		),
		$acl,
		"granting the $bundle bundle twice is the same as once");
}

# --- each bundle's loop, as its role -------------------------------------------------

my ($ok, $out, $err) = as_role(
	'consumer_role', q{
	BEGIN;
	SELECT inbox_claim('billing', 'inv-1', sha256('one'));
	SELECT inbox_claim('billing', 'inv-1', sha256('one'));
	SELECT string_agg(status, ',' ORDER BY ordinality)
	  FROM inbox_claim_many('billing', ARRAY['inv-1', 'inv-2', 'inv-3'], NULL);
	COMMIT;
	SELECT count(*) FROM inbox_status('billing', 'inv-2');
	SELECT inbox_result('billing', 'inv-2') IS NULL;
});
ok($ok, 'consumer: claim, claim_many, status and result run as the consumer role') or diag($err);
is($out, "t\nf\nduplicate,claimed,claimed\n1\nt", 'consumer: the claims decide as they do for the owner');

($ok, $out, $err) = as_role(
	'receiver_role', q{
	SELECT inbox_receive('shipping', 'm-1', '{"n": 1}'::jsonb);
	SELECT inbox_receive('shipping', 'm-2', '\x02'::bytea);
	SELECT inbox_receive('shipping', 'm-3', '{"n": 3}'::jsonb, NULL, now());
	SELECT inbox_receive('shipping', 'm-4', '\x04'::bytea, NULL, now());
	SELECT count(*) FROM inbox_receive_many('shipping', ARRAY['m-5', 'm-6'], ARRAY['{}', '{}']::jsonb[]);
	SELECT count(*) FROM inbox_receive_many('shipping', ARRAY['m-7', 'm-8'], ARRAY['\x07', '\x08']::bytea[],
											 not_before => now());
});
ok($ok, 'receiver: every form of receive and receive_many runs as the receiver role') or diag($err);
is($out, "t\nt\nt\nt\n2\n2", 'receiver: eight messages received');

# The documented worker loop: poll with a lease, then complete, fail or
# extend by the receipt the poll handed out, each in its own transaction.
($ok, $out, $err) = as_role(
	'worker_role', q{
	SELECT message_id, receipt FROM inbox_poll('shipping', 1, lease => '30 s', wait => '1 s') \gset
	SELECT inbox_complete('shipping', :'receipt'::uuid, '{"done": true}');
	SELECT array_agg(receipt) AS receipts FROM inbox_poll('shipping', 2, lease => '30 s') \gset
	SELECT string_agg(status, ',') FROM inbox_complete_many('shipping', :'receipts'::uuid[]);
	SELECT message_id, receipt FROM inbox_poll('shipping', 1, lease => '30 s') \gset
	SELECT inbox_extend('shipping', :'receipt'::uuid, '60 s') > now();
	SELECT inbox_fail('shipping', :'receipt'::uuid, 'out of stock', retry_after => '0 s');
	BEGIN;
	SELECT message_id AS taken FROM inbox_take('shipping', 1, '30 s') \gset
	SELECT inbox_extend('shipping', :'taken', '60 s') > now();
	SELECT inbox_complete('shipping', :'taken');
	COMMIT;
	BEGIN;
	SELECT message_id AS taken FROM inbox_take('shipping', 1) \gset
	SELECT inbox_fail('shipping', :'taken', 'retry later', '1 hour');
	COMMIT;
});
ok($ok, 'worker: poll, complete, complete_many, extend and fail by receipt, and take, complete, extend and fail by id, as the worker role')
  or diag($err);
is($out, "\ncompleted,completed\nt\npending\nt\n\npending", 'worker: each step gives what it gives the owner')
  or diag($out);

($ok, $out, $err) = as_role(
	'streams_role', q{
	SELECT inbox_claim_offset('ledger', 'partition-0', 1);
	SELECT inbox_claim_offset('ledger', 'partition-0', 1);
	SELECT inbox_claim_offsets('ledger', 'partition-0', 1, 5);
});
ok($ok, 'streams: the offset claims run as the streams role') or diag($err);
is($out, "t\nf\n2", 'streams: the mark advances');

# The outbox: a publisher sends, a relay delivers
$node->sql(q{SELECT outbox_route('orders', 'https://hooks.example/orders', '{"max_attempts": 1}')});
$node->sql(q{SELECT inbox_subscribe('orders-in', 'amqp://rabbit.example/v?queue=q')});
($ok, $out, $err) = as_role(
	'publisher_role', q{
	BEGIN;
	SELECT outbox_send('orders', 'o-1', '{"n": 1}'::jsonb) IS NOT NULL;
	SELECT outbox_send('orders', 'o-2', '\x02'::bytea, '{"h": "1"}') IS NOT NULL;
	SELECT cardinality(outbox_send_many('orders', ARRAY['o-3', 'o-4'], ARRAY['{}', '{}']::jsonb[]));
	COMMIT;
});
ok($ok, 'publisher: every form of outbox send runs as the publisher role') or diag($err);
is($out, "t\nt\n2", 'publisher: four messages sent');

($ok, $out, $err) = as_role(
	'relay_role', q{
	SELECT count(*) FROM outbox_targets();
	CREATE TEMP TABLE held AS SELECT key, receipt FROM outbox_fetch('https://hooks.example/orders', 10, '30 s', '1 s');
	SELECT count(*) FROM held;
	SELECT bool_and(outbox_ack(receipt)) FROM held WHERE key <> 'o-4';
	SELECT outbox_fail(receipt, 'HTTP 410') FROM held WHERE key = 'o-4';
	SELECT outbox_report('https://hooks.example/orders', 'cannot connect');
	SELECT count(*) FROM outbox_schemes();
	SELECT source FROM inbox_subscriptions;
	SELECT count(*) FROM inbox_source_schemes();
	SELECT inbox_ingest_reject('orders-in', 'amqp://rabbit.example/v?queue=q', '7', 'no message id', '\x07', NULL);
});
ok($ok, 'relay: targets, fetch, ack, fail, report, the schemes, the subscriptions and a reject run as the relay role')
  or diag($err);
is($out, "1\n4\nt\ndead\n1\n8\namqp://rabbit.example/v?queue=q\n4\n",
	'relay: four fetched, three delivered, one dead, one route reported, one reject recorded');

# A dead letter for the operator to requeue
$node->sql(q{
	SELECT inbox_set_max_attempts('dead-end', 1);
	SELECT inbox_receive('dead-end', 'poison', '{}'::jsonb);
	SELECT inbox_fail('dead-end', message_id, 'bad') FROM inbox_take('dead-end', 1);
});
($ok, $out, $err) = as_role(
	'operator_role', q{
	SELECT count(*) > 0 FROM inbox_stats;
	SELECT message_id FROM inbox_dead_letters;
	SELECT count(*) FROM inbox_grants;
	SELECT count(*) FROM inbox_forget_log;
	SELECT count(*) FROM inbox_content_duplicates;
	SELECT count(*) FROM inbox_bundles WHERE bundle = 'operator';
	SELECT inbox_requeue('dead-end', 'poison');
	SELECT count(*) FROM inbox_dead_letters;
	SELECT sum(sent) FROM outbox_stats;
	SELECT count(*) FROM outbox_routes;
	SELECT outbox_requeue(id) FROM outbox_dead_letters;
	SELECT count(*) FROM outbox_dead_letters;
	SELECT last_error FROM outbox_stats;
	SELECT count(*) FROM outbox_schemes();
	SELECT count(*) FROM inbox_subscriptions;
	SELECT count(*) FROM inbox_source_schemes();
	SELECT inbox_ingest_forget(id) FROM inbox_ingest_rejects WHERE broker_id = '7';
	SELECT count(*) FROM inbox_ingest_rejects;
});
ok($ok, 'operator: every view, requeue and the schemes, as the operator role') or diag($err);
is($out, "t\npoison\n0\n0\n0\n17\n\n0\n3\n1\n1\n0\ncannot connect\n8\n1\n4\n\n0",
	'operator: the dead letters were seen and requeued, the ingest reject forgotten');

# --- what each role may not do --------------------------------------------------------

# Every object of every bundle, with a statement that uses it: a call with
# NULL arguments of the right types (privileges are checked before the
# function runs), or a SELECT from the view.
my @objects = map { [ split /\|/ ] } split /\n/, $node->sql(q{
	SELECT b.bundle, b.object_type, b.object,
		   CASE b.object_type
			   WHEN 'function' THEN
				   format('SELECT %s(%s)', p.oid::regproc,
						  (SELECT string_agg('NULL::' || format_type(t, NULL), ', ' ORDER BY i)
							 FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY AS a(t, i)))
			   ELSE format('SELECT * FROM %s', b.object)
		   END
	  FROM inbox_bundles b
	  LEFT JOIN pg_proc p ON p.oid = CASE WHEN b.object_type = 'function' THEN b.object::regprocedure END
	 ORDER BY b.bundle, b.object});
cmp_ok(scalar(@objects), '>=', 26, 'inbox_bundles lists the objects of the bundles (' . scalar(@objects) . ')');
is( join(',', sort { $a cmp $b } keys %{ { map { $_->[0] => 1 } @objects } }),
	join(',', sort @bundles),
	'the bundles are consumer, operator, publisher, receiver, relay, streams and worker');

# An object in several bundles is given by each of them
my %holds = map { join($;, "$_->[0]_role", $_->[2]) => 1 } @objects;
my @wrong;
for my $role ((map { "${_}_role" } @bundles), 'nobody_role')
{
	for my $object (grep { "$_->[0]_role" ne $role && !$holds{ $role, $_->[2] } } @objects)
	{
		my ($ok, $out, $err) = as_role($role, $object->[3]);
		push @wrong, "$role: $object->[3]: " . ($ok ? 'ran' : sqlstate_of($err))
		  unless !$ok && sqlstate_of($err) eq '42501';
	}
}
is(scalar(@wrong), 0, 'each object of a bundle gives 42501 to every role that does not hold the bundle')
  or diag(join "\n", @wrong);

# No public function outside the bundles but the owner's own
my $unbundled = $node->sql(qq{
	SELECT string_agg(p.oid::regprocedure::text, ', ' ORDER BY 1)
	  FROM pg_proc p
	  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
	  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'inbox'
	 WHERE p.pronamespace = '$schema'::regnamespace
	   AND p.oid NOT IN (SELECT object::regprocedure FROM inbox_bundles WHERE object_type = 'function')
	   AND p.proname <> ALL (ARRAY['@{[ join "','", @owner_only ]}'])});
is($unbundled, '', 'every public function is in a bundle or on the owner-only list');
my $stale = $node->sql(qq{
	SELECT string_agg(n, ', ') FROM unnest(ARRAY['@{[ join "','", @owner_only ]}']) AS n
	 WHERE NOT EXISTS (SELECT FROM pg_proc p WHERE p.proname = n AND p.pronamespace = '$schema'::regnamespace)
	    OR n IN (SELECT p.proname FROM inbox_bundles b JOIN pg_proc p ON p.oid = CASE WHEN b.object_type = 'function' THEN b.object::regprocedure END)});
is($stale, '', 'every name on the owner-only list is a public function in no bundle');
is( $node->sql(qq{
		SELECT string_agg(c.relname, ', ')
		  FROM pg_class c
		  JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'
		  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'inbox'
		 WHERE c.relnamespace = '$schema'::regnamespace AND c.relkind = 'v'
		   AND c.oid NOT IN (SELECT object::regclass FROM inbox_bundles WHERE object_type = 'view')}),
	'', 'every view is in the operator bundle');

# The owner-only functions stay the owner's
@wrong = ();
for my $role (map { "${_}_role" } @bundles)
{
	my $granted = $node->sql(qq{
		SELECT string_agg(p.oid::regprocedure::text, ', ')
		  FROM pg_proc p
		 WHERE p.pronamespace = '$schema'::regnamespace
		   AND p.proname = ANY (ARRAY['@{[ join "','", @owner_only ]}'])
		   AND has_function_privilege('$role', p.oid, 'EXECUTE')});
	push @wrong, "$role: $granted" if $granted ne '';
}
is(scalar(@wrong), 0, 'no bundle gives an owner-only function') or diag(join "\n", @wrong);

# --- who may grant, and what bad arguments get ---------------------------------------------

($ok, $out, $err) = as_role('worker_role', q{SELECT inbox_grant_bundle('worker_role', 'consumer')});
is(sqlstate_of($err), '42501', 'a role that is not the owner cannot grant a bundle (no EXECUTE)');
$node->sql('GRANT EXECUTE ON FUNCTION inbox_grant_bundle(regrole, text), inbox_revoke_bundle(regrole, text) TO nobody_role');
($ok, $out, $err) = as_role('nobody_role', q{SELECT inbox_grant_bundle('nobody_role', 'consumer')});
is(sqlstate_of($err), '42501', 'nor with EXECUTE on it: the entry point wants the owner');
like($err, qr/Only the owner of extension inbox or a superuser may call inbox_grant_bundle/,
	'and says who may');
($ok, $out, $err) = as_role('nobody_role', q{SELECT inbox_revoke_bundle('worker_role', 'worker')});
is(sqlstate_of($err), '42501', 'nor revoke one');

my ($ret, $o, $e) = $node->psql('postgres', "\\set VERBOSITY verbose\nSELECT inbox_grant_bundle('worker_role', 'workers')");
is(sqlstate_of($e), '22023', 'an unknown bundle is 22023');
like($e, qr/HINT:  The bundles are consumer, operator, publisher, receiver, relay, streams, worker\./, 'and the hint lists the bundles');
($ret, $o, $e) = $node->psql('postgres', "\\set VERBOSITY verbose\nSELECT inbox_grant_bundle(NULL, 'worker')");
is(sqlstate_of($e), '22004', 'a NULL role is 22004');
($ret, $o, $e) = $node->psql('postgres', "\\set VERBOSITY verbose\nSELECT inbox_revoke_bundle('worker_role', NULL)");
is(sqlstate_of($e), '22004', 'a NULL bundle is 22004');

# --- scope grants on top ----------------------------------------------------------------

$node->sql(q{
	CREATE ROLE other_consumer LOGIN;
	SELECT inbox_grant_bundle('other_consumer', 'consumer');
	SELECT inbox_grant('reserved', 'consumer_role');
});
($ok, $out, $err) = as_role('consumer_role', q{SELECT inbox_claim('reserved', 'r-1')});
is($out, 't', 'a scope reserved to a role: that role claims in it');
($ok, $out, $err) = as_role('other_consumer', q{SELECT inbox_claim('reserved', 'r-2')});
is(sqlstate_of($err), '42501', 'another holder of the consumer bundle gets 42501 there');
like($err, qr/permission denied for inbox scope "reserved"/, 'for the scope');

# --- revoking ----------------------------------------------------------------------------

$node->sql(q{SELECT inbox_revoke_bundle('worker_role', 'worker'), inbox_revoke_bundle('worker_role', 'worker')});
($ok, $out, $err) = as_role('worker_role', q{SELECT count(*) FROM inbox_poll('shipping', 1)});
is(sqlstate_of($err), '42501', 'after inbox_revoke_bundle (twice), the worker role gets 42501 from inbox_poll');
is( $node->sql(qq{
		SELECT count(*) FROM inbox_bundles b
		 WHERE b.bundle = 'worker' AND has_function_privilege('worker_role', b.object::regprocedure, 'EXECUTE')}),
	'0', 'and holds nothing of the bundle');
is( $node->sql(q{SELECT has_function_privilege('consumer_role', 'inbox_claim(text, text, bytea)', 'EXECUTE')}),
	't', 'other roles keep their bundles');

# --- an object in two bundles --------------------------------------------------------------
# inbox_depth is in both worker and consumer: revoking one bundle leaves
# it to a role that still holds the other, and revoking both takes it
$node->sql(q{
	CREATE ROLE both_role LOGIN;
	SELECT inbox_grant_bundle('both_role', 'worker'), inbox_grant_bundle('both_role', 'consumer');
	SELECT inbox_revoke_bundle('both_role', 'consumer');
});
($ok, $out, $err) = as_role('both_role', q{SELECT pending FROM inbox_depth('shipping')});
ok($ok, 'a role that keeps the worker bundle still calls inbox_depth after the consumer bundle is revoked')
  or diag($err);
($ok, $out, $err) = as_role('both_role', q{SELECT inbox_claim('shipping', 'both-1')});
is(sqlstate_of($err), '42501', 'while what only the consumer bundle held is gone');
$node->sql(q{SELECT inbox_revoke_bundle('both_role', 'worker')});
($ok, $out, $err) = as_role('both_role', q{SELECT pending FROM inbox_depth('shipping')});
is(sqlstate_of($err), '42501', 'and revoking the other bundle too takes inbox_depth');

# --- an object added to a bundle later -----------------------------------------------------

# As an update script adds a function: inbox.bundle_add grants it to the
# roles that hold the bundle, and to no other.
$node->sql(q{
	CREATE DATABASE later;
});
$node->safe_psql('later', q{
	CREATE EXTENSION inbox;
	CREATE ROLE later_receiver;
	CREATE ROLE later_partial;
	SELECT inbox_grant_bundle('later_receiver', 'receiver');
	GRANT EXECUTE ON FUNCTION inbox_receive(text, text, jsonb, bytea, timestamptz, text, integer, jsonb) TO later_partial;
	CREATE FUNCTION inbox_receive_later(scope text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
	REVOKE ALL ON FUNCTION inbox_receive_later(text) FROM PUBLIC;
	SELECT inbox.bundle_add('receiver', 'function', 'public.inbox_receive_later(text)');
});
is( $node->safe_psql('later', q{
		SELECT has_function_privilege('later_receiver', 'inbox_receive_later(text)', 'EXECUTE'),
			   has_function_privilege('later_partial', 'inbox_receive_later(text)', 'EXECUTE'),
			   has_function_privilege('consumer_role', 'inbox_receive_later(text)', 'EXECUTE')}),
	't|f|f',
	'a function added to a bundle later reaches the roles that hold the bundle, and no other');

# The update from 1.0.0 adds inbox_bundles to the operator bundle: an
# operator set up on 1.0.0 with every other object of it gets it.
$node->sql('CREATE DATABASE from_1_0');
$node->safe_psql('from_1_0', q{
	CREATE EXTENSION inbox VERSION '1.0.0';
	CREATE ROLE old_operator;
	CREATE ROLE old_watcher;
	GRANT SELECT ON inbox_stats, inbox_dead_letters, inbox_grants, inbox_forget_log TO old_operator;
	GRANT EXECUTE ON FUNCTION inbox_requeue(text, text) TO old_operator;
	GRANT SELECT ON inbox_stats TO old_watcher;
	ALTER EXTENSION inbox UPDATE TO '1.1.0';
});
is( $node->safe_psql('from_1_0', q{
		SELECT has_table_privilege('old_operator', 'inbox_bundles', 'SELECT'),
			   has_table_privilege('old_watcher', 'inbox_bundles', 'SELECT')}),
	't|f',
	'the update from 1.0.0 grants inbox_bundles to a role that held the rest of the operator bundle, not to others');
# That grant is the administrator's, not one of the extension's initial
# privileges: pg_dump keeps it
my $dump = '';
IPC::Run::run([ 'pg_dump', '--schema-only', '-d', $node->connstr('from_1_0') ], '>', \$dump)
  or die 'pg_dump failed';
like($dump, qr/GRANT SELECT ON TABLE \w+\.inbox_bundles TO old_operator;/,
	'pg_dump dumps the grant the update gave, so that a restore keeps it');


# 1.1.0 replaces 1.0.0's receive functions by one form per payload type
# with group_key and priority last: the roles that could execute the old forms can
# execute the new one, and pg_dump keeps those grants.
$node->safe_psql('from_1_0', q{
	DROP EXTENSION inbox;
	CREATE EXTENSION inbox VERSION '1.0.0';
	CREATE ROLE old_receiver LOGIN;
	CREATE ROLE old_partial LOGIN;
	GRANT EXECUTE ON FUNCTION inbox_receive(text, text, jsonb, bytea),
		inbox_receive(text, text, jsonb, bytea, timestamptz),
		inbox_receive(text, text, bytea, bytea),
		inbox_receive(text, text, bytea, bytea, timestamptz),
		inbox_receive_many(text, text[], jsonb[], bytea[], timestamptz, text),
		inbox_receive_many(text, text[], bytea[], bytea[], timestamptz, text),
		inbox_take(text, integer, interval), inbox_poll(text, integer, interval, interval) TO old_receiver;
	GRANT EXECUTE ON FUNCTION inbox_receive(text, text, bytea, bytea) TO old_partial WITH GRANT OPTION;
	ALTER EXTENSION inbox UPDATE TO '1.1.0';
});
is( $node->safe_psql('from_1_0', q{
		SELECT string_agg(p.oid::regprocedure::text || '=' || has_function_privilege('old_receiver', p.oid, 'EXECUTE')
						  || '/' || has_function_privilege('old_partial', p.oid, 'EXECUTE'), ' ' ORDER BY 1)
		  FROM pg_proc p
		 WHERE p.proname IN ('inbox_receive', 'inbox_receive_many') AND p.pronamespace = 'public'::regnamespace}),
	'inbox_receive(text,text,bytea,bytea,timestamp with time zone,text,integer)=true/true '
	  . 'inbox_receive(text,text,jsonb,bytea,timestamp with time zone,text,integer)=true/false '
	  . 'inbox_receive_many(text,text[],bytea[],bytea[],timestamp with time zone,text,text[],integer[])=true/false '
	  . 'inbox_receive_many(text,text[],jsonb[],bytea[],timestamp with time zone,text,text[],integer[])=true/false',
	'the update leaves one receive per payload type, each granted to the roles that could execute its 1.0.0 forms');
is( $node->safe_psql('from_1_0', q{
		SELECT has_function_privilege('old_receiver', 'inbox_take(text, integer, interval)', 'EXECUTE'),
			   has_function_privilege('old_receiver', 'inbox_poll(text, integer, interval, interval)', 'EXECUTE'),
			   has_function_privilege('old_partial', 'inbox_take(text, integer, interval)', 'EXECUTE'),
			   (SELECT string_agg(object, ' ' ORDER BY object) FROM inbox_bundles WHERE bundle = 'worker'
				  AND (object LIKE 'inbox_take%' OR object LIKE 'inbox_poll%'))}),
	't|t|f|inbox_poll(text,integer,interval,interval) inbox_take(text,integer,interval)',
	'the takes, made again with their group_key column, keep their grants and their bundle');
is( $node->safe_psql('from_1_0', q{
		SELECT string_agg(object, ' ' ORDER BY object) FROM inbox_bundles WHERE bundle = 'receiver'}),
	'inbox_receive(text,text,bytea,bytea,timestamp with time zone,text,integer) '
	  . 'inbox_receive(text,text,jsonb,bytea,timestamp with time zone,text,integer) '
	  . 'inbox_receive_many(text,text[],bytea[],bytea[],timestamp with time zone,text,text[],integer[]) '
	  . 'inbox_receive_many(text,text[],jsonb[],bytea[],timestamp with time zone,text,text[],integer[])',
	'the receiver bundle holds the new forms');
my ($rok, $rout, $rerr) = (0, '', '');
$rok = $node->psql('from_1_0', q{SELECT inbox_receive('g', 'm-1', '{}'::jsonb, group_key => 'k')},
	stdout => \$rout, stderr => \$rerr, extra_params => [ '-U', 'old_receiver' ]);
is("$rok|$rout", '0|t', 'a role granted the receive on 1.0.0 receives into a group after the update')
  or diag($rerr);
($rok, $rout, $rerr) = (0, '', '');
$rok = $node->psql('from_1_0', q{SELECT message_id || '/' || group_key FROM inbox_poll('g', 1, '1 minute')},
	stdout => \$rout, stderr => \$rerr, extra_params => [ '-U', 'old_receiver' ]);
is("$rok|$rout", '0|m-1/k', 'and polls it with its group key')
  or diag($rerr);
$dump = '';
IPC::Run::run([ 'pg_dump', '--schema-only', '-d', $node->connstr('from_1_0') ], '>', \$dump)
  or die 'pg_dump failed';
like(
	$dump,
	qr/GRANT ALL ON FUNCTION \w+\.inbox_receive\(scope text, message_id text, payload jsonb, payload_hash bytea, not_before timestamp with time zone, group_key text, priority integer\) TO old_receiver;/,
	'pg_dump dumps the grants the update carried over');
like(
	$dump,
	qr/GRANT ALL ON FUNCTION \w+\.inbox_receive\(scope text, message_id text, payload bytea, [^)]*\) TO old_partial WITH GRANT OPTION;/,
	'with their grant option');

$node->stop;
done_testing();
