# test/t/036_plan_audit.pl
#
# The per-message paths under the worst honest conditions: every table of
# ours holds at least 200,000 rows of other scopes and topics, analyzed
# before the tested scopes and topics existed, so that the statistics
# know nothing of them.  Two passes, plan_cache_mode = force_generic_plan
# and auto, each in a new session (so plans are made anew), run every API
# that works per message: claims, single and batch; receives plain,
# grouped, with a priority, delayed, with headers, and inbox_receive_many
# (with headers too); take and
# poll, then complete (by id and by receipt), fail, extend and requeue;
# a group's release; offsets; the content window; outbox_send (with a
# trace context too), outbox_send_many, fetch, ack and fail.  It fails when:
#   - auto_explain shows one of our statements scanning one of our
#     tables sequentially, or an index of ours with a condition on the
#     scope (or topic) alone, outside the short allow-list below of
#     statements whose job is per scope;
#   - the shared buffers a call touches (EXPLAIN (ANALYZE, BUFFERS) of the
#     top-level call, the least of three) grow by more than 1.5 times
#     between a scope (and topic) of 1,000 messages and one of 100,000:
#     that catches the C paths auto_explain cannot see.
#
# Nothing here depends on time: plans and buffer counts only.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = InboxTest->node(
	'plan_audit',
	preload => 'inbox,auto_explain',
	conf => q{
autovacuum = off
auto_explain.log_min_duration = -1
auto_explain.log_nested_statements = on
auto_explain.log_verbose = on
auto_explain.log_level = LOG
inbox.retention = '365d'
inbox.purge_naptime = 3600
max_prepared_transactions = 0
});

# --- other scopes and topics: 200,000 rows in every table -------------------
# INBOX_AUDIT_OTHER_ROWS makes them fewer, to watch an old build fail
# without waiting for its slow fill
my $other = $ENV{INBOX_AUDIT_OTHER_ROWS} // 200_000;
$node->sql(qq{
	SELECT count(*) FROM generate_series(1, $other, 10000) b
	CROSS JOIN LATERAL inbox_receive_many('other-' || (b % 7),
		ARRAY(SELECT 'o-' || g FROM generate_series(b, b + 9999) g),
		ARRAY(SELECT '{}'::jsonb FROM generate_series(b, b + 9999) g),
		group_keys => ARRAY(SELECT 'k-' || (g % 500) FROM generate_series(b, b + 9999) g));
	SELECT inbox_set_content_window('other-claims', '30 days', 'reject');
	SELECT count(*) FROM generate_series(1, $other, 10000) b
	CROSS JOIN LATERAL inbox_claim_many('other-claims',
		ARRAY(SELECT 'c-' || g FROM generate_series(b, b + 9999) g),
		ARRAY(SELECT sha256(('c-' || g)::bytea) FROM generate_series(b, b + 9999) g));
	SELECT count(inbox_claim_offset('other-streams', 's-' || g, 1)) FROM generate_series(1, $other) g;
	SELECT count(inbox_set_retention('other-' || g, '30 days')) FROM generate_series(1, $other) g;
	SELECT count(outbox_route('other-topic-' || t, 'https://sink.invalid/' || t)) FROM generate_series(0, $other) t;
	SELECT count(*) FROM generate_series(1, $other, 10000) b
	CROSS JOIN LATERAL outbox_send_many('other-topic-' || (b % 4),
		ARRAY(SELECT 'key-' || (g % 1000) FROM generate_series(b, b + 9999) g),
		ARRAY(SELECT '{}'::jsonb FROM generate_series(b, b + 9999) g));
	VACUUM ANALYZE;
});

# --- the tested scopes and topics, which the statistics never saw ------------
# fill(SCOPE, N): N messages, a quarter claims, a quarter plain receives,
# half grouped over 100 groups; and N outbox messages over 100 keys
sub fill
{
	my ($name, $n) = @_;
	my $q = $n / 4;
	my $batch = $q < 10000 ? $q : 10000;
	$node->sql(qq{
		SELECT inbox_set_content_window('$name', '30 days', 'warn');
		SELECT count(*) FROM generate_series(1, $q, $batch) b
		CROSS JOIN LATERAL inbox_claim_many('$name',
			ARRAY(SELECT 'fc-' || g FROM generate_series(b, b + $batch - 1) g),
			ARRAY(SELECT sha256(('$name-fc-' || g)::bytea) FROM generate_series(b, b + $batch - 1) g));
		SELECT count(*) FROM generate_series(1, $q, $batch) b
		CROSS JOIN LATERAL inbox_receive_many('$name',
			ARRAY(SELECT 'fp-' || g FROM generate_series(b, b + $batch - 1) g),
			ARRAY(SELECT '{}'::jsonb FROM generate_series(b, b + $batch - 1) g));
		SELECT count(*) FROM generate_series(1, 2 * $q, $batch) b
		CROSS JOIN LATERAL inbox_receive_many('$name',
			ARRAY(SELECT 'fg-' || g FROM generate_series(b, b + $batch - 1) g),
			ARRAY(SELECT '{}'::jsonb FROM generate_series(b, b + $batch - 1) g),
			group_keys => ARRAY(SELECT 'g-' || (g % 100) FROM generate_series(b, b + $batch - 1) g));
		SELECT count(*) FROM generate_series(1, $n, $batch) b
		CROSS JOIN LATERAL inbox_claim_offsets('$name', 'f-' || (b % 100), b, b + $batch - 1);
		SELECT outbox_route('$name', 'https://sink.invalid/$name');
		SELECT count(*) FROM generate_series(1, $n, $batch) b
		CROSS JOIN LATERAL outbox_send_many('$name',
			ARRAY(SELECT 'key-' || (g % 100) FROM generate_series(b, b + $batch - 1) g),
			ARRAY(SELECT '{}'::jsonb FROM generate_series(b, b + $batch - 1) g));
	});
}
fill('small', 1_000);
fill('big', 100_000);

# The shared buffers the top-level call touches, from its plan
$node->sql(q{
	CREATE SCHEMA audit;
	CREATE TABLE audit.buffers (pass text, name text, scope text, blocks bigint);
	CREATE FUNCTION audit.blocks(q text) RETURNS bigint LANGUAGE plpgsql AS $$
	DECLARE
		j json;
	BEGIN
		EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ' || q INTO j;
		RETURN (j->0->'Plan'->>'Shared Hit Blocks')::bigint
			 + (j->0->'Plan'->>'Shared Read Blocks')::bigint;
	END $$;
	SELECT inbox_set_max_attempts('small', 1), inbox_set_max_attempts('big', 1);
});

# Each call: a name, a statement to run first (not measured, may be
# empty), and the measured call.  {S} is the scope (and topic), {N} a
# number new at every call.  A temporary table holds what a call needs
# from the one before it (a receipt), so that reading it touches no
# shared buffer.
my @calls = (
	[ 'claim', '', q{SELECT inbox_claim('{S}', 'c-{N}', sha256('{S}-c-{N}'::bytea))} ],
	[ 'claim, a content seen before', '',
		q{SELECT inbox_claim('{S}', 'cw-{N}', sha256('{S}-fc-7'::bytea))} ],
	[ 'claim_many', '',
		q{SELECT count(*) FROM inbox_claim_many('{S}', ARRAY['cm-{N}-1', 'cm-{N}-2', 'cm-{N}-3'])} ],
	[ 'claim, a duplicate', '', q{SELECT inbox_claim('{S}', 'fc-7')} ],
	[ 'receive', '', q{SELECT inbox_receive('{S}', 'r-{N}', '{}'::jsonb)} ],
	[ 'receive, grouped', '',
		q{SELECT inbox_receive('{S}', 'rg-{N}', '{}'::jsonb, group_key => 'g-7')} ],
	[ 'receive, a new group', '',
		q{SELECT inbox_receive('{S}', 'rn-{N}', '{}'::jsonb, group_key => 'new-{N}')} ],
	[ 'receive, a priority', '',
		q{SELECT inbox_receive('{S}', 'rp-{N}', '{}'::jsonb, priority => 5)} ],
	[ 'receive, delayed', '',
		q{SELECT inbox_receive('{S}', 'rd-{N}', '{}'::jsonb, not_before => now() + '1 day')} ],
	[ 'receive, headers', '',
		q{SELECT inbox_receive('{S}', 'rh-{N}', '{}'::jsonb, headers => '{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}')} ],
	[ 'receive, headers and a priority', '',
		q{SELECT inbox_receive('{S}', 'rhp-{N}', '\x01'::bytea, priority => 4, headers => '{"h": "v"}')} ],
	[ 'receive_many, headers', '',
		q{SELECT count(*) FROM inbox_receive_many('{S}', ARRAY['rmh-{N}-1', 'rmh-{N}-2'],
			ARRAY['{}', '{}']::jsonb[], headers => ARRAY['{"h": "1"}', NULL]::jsonb[])} ],
	[ 'receive_many, grouped', '',
		q{SELECT count(*) FROM inbox_receive_many('{S}', ARRAY['rm-{N}-1', 'rm-{N}-2'],
			ARRAY['{}', '{}']::jsonb[], group_keys => ARRAY['g-8', 'g-9'])} ],
	[ 'take', '', q{SELECT count(*) FROM inbox_take('{S}', 1)} ],
	[ 'complete by id',
		q{TRUNCATE pg_temp.held; INSERT INTO pg_temp.held SELECT message_id, NULL FROM inbox_take('{S}', 1)},
		q{SELECT inbox_complete('{S}', (SELECT id FROM pg_temp.held))} ],
	[ 'poll', '', q{SELECT count(*) FROM inbox_poll('{S}', 1)} ],
	[ 'complete by receipt, a group released',
		q{TRUNCATE pg_temp.held; INSERT INTO pg_temp.held SELECT message_id, receipt FROM inbox_poll('{S}', 1)},
		q{SELECT inbox_complete('{S}', (SELECT receipt FROM pg_temp.held))} ],
	[ 'extend',
		q{TRUNCATE pg_temp.held; INSERT INTO pg_temp.held SELECT message_id, receipt FROM inbox_poll('{S}', 1)},
		q{SELECT inbox_extend('{S}', (SELECT receipt FROM pg_temp.held), '1 minute')} ],
	[ 'fail, dead',
		q{TRUNCATE pg_temp.held; INSERT INTO pg_temp.held SELECT message_id, receipt FROM inbox_poll('{S}', 1)},
		q{SELECT inbox_fail('{S}', (SELECT receipt FROM pg_temp.held), 'audit')} ],
	[ 'requeue',
		q{TRUNCATE pg_temp.held; INSERT INTO pg_temp.held SELECT message_id, receipt FROM inbox_poll('{S}', 1);
		  SELECT inbox_fail('{S}', (SELECT receipt FROM pg_temp.held), 'audit')},
		q{SELECT inbox_requeue('{S}', (SELECT id FROM pg_temp.held))} ],
	[ 'claim_offset', '', q{SELECT inbox_claim_offset('{S}', 'f-7', 1000000 + {N})} ],
	[ 'outbox_send', '', q{SELECT outbox_send('{S}', 'key-7', '{}'::jsonb) IS NOT NULL} ],
	[ 'outbox_send_many', '',
		q{SELECT cardinality(outbox_send_many('{S}', ARRAY['key-8', 'key-9'], ARRAY['{}', '{}']::jsonb[]))} ],
	[ 'outbox_send, a trace context', '',
		q{SELECT outbox_send('{S}', 'key-7', '{}'::jsonb, '{"h": "v"}') IS NOT NULL
			FROM (SELECT set_config('inbox.traceparent',
									'00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', true)) AS t} ],
	[ 'outbox_fetch', '', q{SELECT count(*) FROM outbox_fetch('https://sink.invalid/{S}', 1)} ],
	[ 'outbox_ack',
		q{TRUNCATE pg_temp.held; INSERT INTO pg_temp.held SELECT id::text, receipt FROM outbox_fetch('https://sink.invalid/{S}', 1)},
		q{SELECT outbox_ack((SELECT receipt FROM pg_temp.held))} ],
	[ 'outbox_fail',
		q{TRUNCATE pg_temp.held; INSERT INTO pg_temp.held SELECT id::text, receipt FROM outbox_fetch('https://sink.invalid/{S}', 1)},
		q{SELECT outbox_fail((SELECT receipt FROM pg_temp.held), 'audit')} ],
);

# Index reads on the scope (or topic) alone that are the statement's job,
# reviewed: the index, a pattern of the statement's text, and why.  A
# sequential scan is never allowed.
my @allowed = (
	[ qr/^scopes_pkey$/, qr/FROM inbox\.scopes AS s WHERE s\.scope/,
		q{a scope's own settings: the scope is inbox.scopes' whole key} ],
	[ qr/^outbox_routes_pkey$/, qr/FROM inbox\.outbox_routes AS r|CROSS JOIN inbox\.outbox_routes AS r/,
		q{the routes of a topic: a send delivers to each of them} ],
	[ qr/^entries_p\d_scope_priority_due_message_id_idx$/, qr/pg_catalog\.max\(x\.priority\)/,
		q{the highest priority a scope has pending: one row from the end of its part of entries_ranked} ],
);

my $n = 0;
foreach my $mode ('force_generic_plan', 'auto')
{
	my $script = qq{
		SET plan_cache_mode = $mode;
		CREATE TEMPORARY TABLE held (id text, receipt uuid);
	};
	# Warm up each call in both scopes (the backend's kept plans, the
	# caches), then log and measure three times each
	foreach my $round (0 .. 3)
	{
		$script .= "SET auto_explain.log_min_duration = 0;\n" if $round == 1;
		foreach my $c (@calls)
		{
			foreach my $scope ('small', 'big')
			{
				$n++;
				my ($prep, $call) = map { my $s = $_; $s =~ s/\{S\}/$scope/g; $s =~ s/\{N\}/$n/g; $s } ($c->[1], $c->[2]);
				$script .= "$prep;\n" if $prep ne '';
				if ($round == 0)
				{
					$script .= "$call;\n";
				}
				else
				{
					(my $quoted = $call) =~ s/'/''/g;
					$script .= "INSERT INTO audit.buffers VALUES ('$mode', '$c->[0]', '$scope', audit.blocks('$quoted'));\n";
				}
			}
		}
	}
	my $from = $node->log_position;
	my ($rc, $out, $err) = $node->psql('postgres', $script, on_error_stop => 1);
	is($rc, 0, "$mode: every call ran") or diag($err);
	my $log = $node->log_since($from);

	# --- auto_explain: no scan of ours on the scope alone, no seq scan ----
	my @bad;
	foreach my $entry (split /LOG:  duration: /, $log)
	{
		next unless $entry =~ /Query Text: (.*?)\n\s*\S[^\n]*\(cost=/s;
		(my $query = $1) =~ s/\s+/ /g;
		next if $query =~ /audit\.|EXPLAIN|pg_temp\.held|^\s*SET /;
		my @lines = split /\n/, $entry;
		for (my $i = 0; $i < @lines; $i++)
		{
			if ($lines[$i] =~ /Seq Scan on inbox\.(\w+)/)
			{
				push @bad, "a sequential scan of inbox.$1 in: $query";
			}
			elsif ($lines[$i] =~ /(?:Index Scan|Index Only Scan|Bitmap Index Scan)(?: Backward)? (?:using|on) (\w+)(?: on inbox\.(\w+))?/)
			{
				my ($index, $table) = ($1, $2 // '');
				for (my $j = $i + 1; $j < @lines && $lines[$j] !~ /->/; $j++)
				{
					next unless $lines[$j] =~ /Index Cond: (.*)/;
					my $cond = $1;
					my @parts = split / AND /, $cond;
					next unless @parts == 1 && $cond =~ /\b(?:scope|topic)\b/;
					next if grep { $index =~ $_->[0] && $query =~ $_->[1] } @allowed;
					push @bad, "$index ($table) read on $cond alone in: $query";
				}
			}
		}
	}
	my %seen;
	@bad = grep { !$seen{$_}++ } @bad;
	is(scalar(@bad), 0, "$mode: no statement of ours reads a scope or topic whole, nor a table sequentially")
	  or diag(join("\n", @bad));
	ok($log =~ /Query Text: .*inbox\.entries_p\d/, "$mode: auto_explain logged our nested statements");
}

# --- shared buffers: the same at 1,000 messages and at 100,000 ---------------
my $growth = $node->sql(q{
	WITH least_of AS (
		SELECT pass, name, scope, min(blocks) AS blocks FROM audit.buffers GROUP BY 1, 2, 3)
	SELECT s.pass || ': ' || s.name || ': ' || s.blocks || ' -> ' || b.blocks
	  FROM least_of s JOIN least_of b USING (pass, name)
	 WHERE s.scope = 'small' AND b.scope = 'big'
	   AND b.blocks > 1.5 * greatest(s.blocks, 1)
	 ORDER BY 1});
is($growth, '', 'no call touches more than 1.5 times the buffers in a scope of 100,000 as in one of 1,000')
  or diag($growth);
my $measured = $node->sql(q{SELECT count(DISTINCT (pass, name)) FROM audit.buffers});
is($measured, 2 * scalar(@calls), 'every call was measured in both passes');
note($node->sql(q{
	SELECT pass || ': ' || name || ': ' || min(blocks) FILTER (WHERE scope = 'small') || ' -> '
		|| min(blocks) FILTER (WHERE scope = 'big')
	  FROM audit.buffers GROUP BY pass, name ORDER BY pass, name}));

$node->stop;
done_testing();
