# test/t/006_fuzz.pl
#
# Bad input never hurts: 10,000 random calls of every API function, with
# random text (any Unicode character but NUL and surrogates, control
# characters included), random bytes, empty and huge values, NULL in every
# position, wrong types through text casts, and intervals negative or huge.
# Every call must either succeed or raise a clean error with an expected
# SQLSTATE; the server must not crash; and no entry may exist that no
# successful call made.
#
# The fuzzer runs inside the server (PL/pgSQL, each call in its own
# subtransaction), seeded, so that a failure can be replayed.  The 1.0.0
# functions are among them: batches, streams, forgetting, polls (with
# short or invalid waits), receipts (random, NULL, malformed), delayed and
# batch receives.  It also calls inbox_grant and inbox_revoke, and SETs random values of every
# inbox.* setting.  Then 300 random values go through ALTER SYSTEM: each is
# written or refused with a clear error, and the server reloads them.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = InboxTest->node('fuzz', conf => "inbox.purge_enabled = off\nrestart_after_crash = off\n");
my $log_offset = $node->log_position;

$node->safe_psql(
	'postgres', q{
CREATE TABLE fuzz_log (n int, call text, sqlstate text, message text);
CREATE TABLE fuzz_made (scope text COLLATE "C", message_id text COLLATE "C");
CREATE TABLE fuzz_offsets (scope text COLLATE "C", stream text COLLATE "C");

-- A random text argument: NULL, empty, huge, or random characters.
CREATE FUNCTION rnd_text() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	r float8 := random();
	n int;
	s text := '';
	c int;
BEGIN
	IF r < 0.05 THEN RETURN NULL; END IF;
	IF r < 0.10 THEN RETURN ''; END IF;
	IF r < 0.13 THEN RETURN repeat(chr(65 + (random() * 25)::int), 1000 + (random() * 2000000)::int); END IF;
	IF r < 0.40 THEN RETURN 's' || (random() * 20)::int; END IF;   -- keys that repeat
	n := 1 + (random() * 40)::int;
	FOR i IN 1 .. n LOOP
		IF random() < 0.7 THEN
			c := 1 + (random() * 126)::int;              -- ASCII, controls included
		ELSE
			c := 128 + (random() * 1113000)::int;        -- the rest of Unicode
			IF c BETWEEN 55296 AND 57343 THEN c := 65533; END IF;   -- no surrogates
			IF c > 1114111 THEN c := 1114111; END IF;
		END IF;
		s := s || chr(c);
	END LOOP;
	RETURN s;
END $$;

CREATE FUNCTION rnd_bytea() RETURNS bytea LANGUAGE plpgsql AS $$
DECLARE
	r float8 := random();
BEGIN
	IF r < 0.15 THEN RETURN NULL; END IF;
	IF r < 0.20 THEN RETURN ''::bytea; END IF;
	IF r < 0.23 THEN RETURN decode(repeat('ab', 100000), 'hex'); END IF;
	RETURN decode(string_agg(lpad(to_hex((random() * 255)::int), 2, '0'), ''), 'hex')
	  FROM generate_series(1, 1 + (random() * 80)::int);
END $$;

CREATE FUNCTION rnd_interval() RETURNS text LANGUAGE sql AS $$
	SELECT (ARRAY[NULL, '0', '-1 second', '-1000 years', '1 microsecond', '1 hour',
				  '178000000 years', '1 mon', '-3 days 4 hours', 'garbage', '1e300 seconds'])
		   [1 + (random() * 10)::int]
$$;

CREATE FUNCTION rnd_int() RETURNS text LANGUAGE sql AS $$
	SELECT (ARRAY[NULL, '0', '-1', '1', '5', '10000', '10001', '2147483647',
				  '-2147483648', 'x', '1e10'])[1 + (random() * 10)::int]
$$;

CREATE FUNCTION rnd_bigint() RETURNS text LANGUAGE sql AS $$
	SELECT (ARRAY[NULL, '0', '-1', '1', '5', '7', '9223372036854775807', '-9223372036854775808',
				  '9223372036854775808', 'x', '1e10', (random() * 20)::int::text])[1 + (random() * 11)::int]
$$;

CREATE FUNCTION rnd_bool() RETURNS text LANGUAGE sql AS $$
	SELECT (ARRAY[NULL, 'true', 'false', 'maybe'])[1 + (random() * 3)::int]
$$;

CREATE FUNCTION rnd_time() RETURNS text LANGUAGE sql AS $$
	SELECT (ARRAY[NULL, 'now', '-infinity', 'infinity', '2026-01-01', 'garbage', '294277-01-01',
				  '1999-12-31 23:59:59+14'])[1 + (random() * 7)::int]
$$;

CREATE ROLE fuzz_app;
CREATE FUNCTION rnd_role() RETURNS text LANGUAGE sql AS $$
	SELECT (ARRAY[NULL, 'fuzz_app', 'no_such_role', '', 'pg_monitor', '"fuzz_app"', '0', rnd_text()])
		   [1 + (random() * 7)::int]
$$;

CREATE FUNCTION rnd_setting() RETURNS text LANGUAGE sql AS $$
	SELECT format('SET %s = %L',
		(ARRAY['inbox.on_duplicate', 'inbox.claim_timeout', 'inbox.retention', 'inbox.idle_threshold',
			   'inbox.purge_batch_size', 'inbox.purge_enabled', 'inbox.purge_lock_timeout',
			   'inbox.max_attempts', 'inbox.purge_naptime', 'inbox.max_scopes'])[1 + (random() * 9)::int],
		(ARRAY['0', '-1', '1', '1s', '1 min', '10d', '2147483647', '2147483648', 'on', 'raise',
			   'return', '1e9', 'NaN', '', '5 parsecs', coalesce(rnd_text(), '')])[1 + (random() * 15)::int])
$$;

CREATE FUNCTION rnd_json() RETURNS text LANGUAGE sql AS $$
	SELECT (ARRAY[NULL, '{}', '[]', '"x"', '{"a": 1}', 'not json', '{"deep": [[[[1]]]]}',
				  '{"k": "' || repeat('v', 100000) || '"}', 'null', '1'])[1 + (random() * 9)::int]
$$;

-- Random arrays for inbox_claim_many: NULL, empty, a few random ids (NULL,
-- empty and huge ones among them), more than the limit, or two-dimensional.
CREATE FUNCTION rnd_text_array() RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
	r float8 := random();
BEGIN
	IF r < 0.05 THEN RETURN NULL; END IF;
	IF r < 0.10 THEN RETURN '{}'; END IF;
	IF r < 0.12 THEN RETURN ARRAY(SELECT 'm' || g FROM generate_series(1, 10001) g); END IF;
	IF r < 0.14 THEN RETURN ARRAY[['a'], ['b']]; END IF;
	RETURN ARRAY(SELECT rnd_text() FROM generate_series(1, 1 + (random() * 5)::int));
END $$;

CREATE FUNCTION rnd_bytea_array() RETURNS bytea[] LANGUAGE plpgsql AS $$
BEGIN
	IF random() < 0.3 THEN RETURN NULL; END IF;
	RETURN ARRAY(SELECT rnd_bytea() FROM generate_series(1, 1 + (random() * 5)::int));
END $$;

CREATE PROCEDURE fuzz(calls int) LANGUAGE plpgsql AS $$
DECLARE
	sql text;
	f int;
	st text;
	msg text;
	res text;
	a text;
	b text;
BEGIN
	PERFORM setseed(0.4242);
	FOR n IN 1 .. calls LOOP
		f := (random() * 31)::int;
		a := rnd_text();
		b := rnd_text();
		sql := CASE f
			WHEN 0 THEN format('SELECT inbox_claim(%L, %L, %L::bytea)::text', a, b, rnd_bytea())
			WHEN 1 THEN format('SELECT inbox_claim(%L, %L)::text', a, b)
			WHEN 2 THEN format('SELECT count(*)::text FROM inbox_status(%L, %L)', a, b)
			WHEN 3 THEN format('SELECT inbox_receive(%L, %L, %L::jsonb, %L::bytea)::text', a, b, rnd_json(), rnd_bytea())
			WHEN 4 THEN format('SELECT inbox_receive(%L, %L, %L::bytea)::text', a, b, rnd_bytea())
			WHEN 5 THEN format('SELECT count(*)::text FROM inbox_take(%L, %L::integer, %L::interval)', rnd_text(), rnd_int(), rnd_interval())
			WHEN 6 THEN format('SELECT inbox_complete(%L, %L, %L::jsonb)::text', rnd_text(), rnd_text(), rnd_json())
			WHEN 7 THEN format('SELECT inbox_fail(%L, %L, %L, %L::interval)', rnd_text(), rnd_text(), rnd_text(), rnd_interval())
			WHEN 8 THEN format('SELECT inbox_extend(%L, %L, %L::interval)::text', rnd_text(), rnd_text(), rnd_interval())
			WHEN 9 THEN format('SELECT inbox_requeue(%L, %L)::text', rnd_text(), rnd_text())
			WHEN 10 THEN format('SELECT inbox_set_retention(%L, %L::interval)::text', rnd_text(), rnd_interval())
			WHEN 11 THEN format('SELECT inbox_set_max_attempts(%L, %L::integer)::text', rnd_text(), rnd_int())
			WHEN 12 THEN format('SELECT inbox_result(%L, %L)::text', rnd_text(), rnd_text())
			WHEN 13 THEN format('SELECT inbox_grant(%L, %L)::text', rnd_text(), rnd_role())
			WHEN 14 THEN format('SELECT inbox_revoke(%L, %L)::text', rnd_text(), rnd_role())
			WHEN 15 THEN rnd_setting()
			-- A batch; the ids it claims are recorded in the same statement
			WHEN 16 THEN format('WITH c AS (SELECT * FROM inbox_claim_many(%L, %L::text[], %L::bytea[], %L)), '
								'm AS (INSERT INTO fuzz_made SELECT %L, c.message_id FROM c WHERE c.status = ''claimed'') '
								'SELECT count(*)::text FROM c',
								a, rnd_text_array(), rnd_bytea_array(),
								(ARRAY['raise', 'return', NULL, 'ignore'])[1 + (random() * 3)::int], a)
			WHEN 17 THEN format('SELECT inbox_claim_offset(%L, %L, %L::bigint, %L::boolean)::text',
								a, b, rnd_bigint(), rnd_bool())
			WHEN 18 THEN format('SELECT inbox_claim_offsets(%L, %L, %L::bigint, %L::bigint, %L::boolean)::text',
								a, b, rnd_bigint(), rnd_bigint(), rnd_bool())
			WHEN 19 THEN format('SELECT inbox_forget(%L, %L, %L)::text', a, b, rnd_text())
			WHEN 20 THEN format('SELECT inbox_forget_range(%L, %L::timestamptz, %L::timestamptz, %L)::text',
								a, rnd_time(), rnd_time(), rnd_text())
			WHEN 21 THEN format('SELECT count(*)::text FROM inbox_poll(%L, %L::integer, %L::interval, %L::interval)',
								a, rnd_int(), rnd_interval(),
								(ARRAY[NULL, '0', '-1 s', '10 ms', '61 s', 'infinity'])[1 + (random() * 5)::int])
			WHEN 22 THEN format('SELECT inbox_complete(%L, %L::uuid, %L::jsonb)::text', a,
								(ARRAY[NULL, gen_random_uuid()::text, 'not a uuid'])[1 + (random() * 2)::int], rnd_json())
			WHEN 23 THEN format('SELECT inbox_fail(%L, %L::uuid, %L, %L::interval)', a,
								(ARRAY[NULL, gen_random_uuid()::text])[1 + (random() * 1)::int], rnd_text(), rnd_interval())
			WHEN 24 THEN format('SELECT inbox_receive(%L, %L, %L::jsonb, %L::bytea, %L::timestamptz)::text',
								a, b, rnd_json(), rnd_bytea(), rnd_time())
			-- A batch of receives, recorded like a batch of claims
			WHEN 25 THEN format('WITH c AS (SELECT * FROM inbox_receive_many(%L, %L::text[], '
								'ARRAY(SELECT %L::jsonb FROM generate_series(1, %s)), %L::bytea[], %L::timestamptz, %L)), '
								'm AS (INSERT INTO fuzz_made SELECT %L, c.message_id FROM c WHERE c.status = ''received'') '
								'SELECT count(*)::text FROM c',
								a, rnd_text_array(), rnd_json(), 1 + (random() * 5)::int, rnd_bytea_array(), rnd_time(),
								(ARRAY['raise', 'return', NULL, 'ignore'])[1 + (random() * 3)::int], a)
			-- Ordered groups: a receive into a random group, a batch with
			-- random group keys, and the scope's dead-letter setting
			WHEN 26 THEN format('SELECT inbox_receive(%L, %L, %L::jsonb, group_key => %L)::text',
								a, b, rnd_json(), rnd_text())
			WHEN 27 THEN format('WITH c AS (SELECT * FROM inbox_receive_many(%L, %L::text[], '
								'ARRAY(SELECT %L::jsonb FROM generate_series(1, %s)), group_keys => %L::text[])), '
								'm AS (INSERT INTO fuzz_made SELECT %L, c.message_id FROM c WHERE c.status = ''received'') '
								'SELECT count(*)::text FROM c',
								a, rnd_text_array(), rnd_json(), 1 + (random() * 5)::int, rnd_text_array(), a)
			WHEN 28 THEN format('SELECT inbox_set_group_dead_letters(%L, %L)::text', a,
								(ARRAY['block', 'skip', NULL, 'drop', ''])[1 + (random() * 4)::int])
			-- Priorities: a receive with a random priority, a batch with
			-- random ones, some in a random group
			WHEN 29 THEN format('SELECT inbox_receive(%L, %L, %L::jsonb, priority => %L::integer, group_key => %L)::text',
								a, b, rnd_json(), rnd_int(),
								(ARRAY[NULL, rnd_text()])[1 + (random() * 1)::int])
			WHEN 30 THEN format('WITH c AS (SELECT * FROM inbox_receive_many(%L, %L::text[], '
								'ARRAY(SELECT %L::jsonb FROM generate_series(1, %s)), priorities => %L::integer[])), '
								'm AS (INSERT INTO fuzz_made SELECT %L, c.message_id FROM c WHERE c.status = ''received'') '
								'SELECT count(*)::text FROM c',
								a, rnd_text_array(), rnd_json(), 1 + (random() * 5)::int,
								ARRAY(SELECT rnd_int() FROM generate_series(1, (random() * 6)::int)), a)
			ELSE 'SELECT inbox_purge()::text'
		END;
		BEGIN
			IF f = 15 THEN
				EXECUTE sql;
			ELSE
				EXECUTE sql INTO res;
			END IF;
			st := '00000';
			msg := NULL;
			IF f = 15 THEN
				RESET ALL;   -- keep one accepted value from steering the rest
			END IF;
			IF f IN (0, 1, 3, 4, 24, 26, 29) AND res = 'true' THEN
				INSERT INTO fuzz_made VALUES (a, b);
			END IF;
			IF f IN (17, 18) AND res IS NOT NULL AND res <> 'false' THEN
				INSERT INTO fuzz_offsets VALUES (a, b);
			END IF;
		EXCEPTION WHEN OTHERS THEN
			GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
		END;
		INSERT INTO fuzz_log VALUES (n, left(sql, 200), st, left(msg, 200));
		IF n % 500 = 0 THEN
			COMMIT;
		END IF;
	END LOOP;
END $$;
});

my ($rc, $out, $err) = $node->psql('postgres', 'CALL fuzz(10000)');
is($rc, 0, 'the fuzzer ran to the end') or diag($err);

is($node->safe_psql('postgres', 'SELECT count(*) FROM fuzz_log'),
	10000, '10,000 calls were made');

# Every outcome is a success or an error of an expected class:
#   22 data exception (our checks, casts of the fuzzer's own arguments,
#      out-of-range intervals, refused setting values), 54 program limit,
#   IB the extension's own, 42725/42883 function resolution, 0A000 feature
#   not supported, 42704 a role name that names no role (or a scope that
#   names none, for inbox_forget), 42602 a role name that is not a name,
#   55P02 a setting that cannot change in a session, 55000 a forget of a
#   message that is not processed yet.
my $unexpected = $node->safe_psql(
	'postgres', q{
	SELECT string_agg(DISTINCT sqlstate || ' ' || message, E'\n')
	FROM fuzz_log
	WHERE sqlstate <> '00000' AND left(sqlstate, 2) NOT IN ('22', '54', 'IB')
	  AND sqlstate NOT IN ('42725', '42883', '0A000', '42704', '55P02', '42602', '55000')
});
is($unexpected, '', 'every failing call raised an expected SQLSTATE')
  or diag($unexpected);
note $node->safe_psql('postgres',
	"SELECT string_agg(sqlstate || ': ' || n, ', ' ORDER BY n DESC) FROM (SELECT sqlstate, count(*) AS n FROM fuzz_log GROUP BY 1) s");
cmp_ok($node->safe_psql('postgres', "SELECT count(*) FROM fuzz_log WHERE sqlstate = '00000'"),
	'>', 1000, 'and many calls succeeded, so the valid paths were exercised too');

# No entry that no successful claim or receive made; none malformed.
is( $node->safe_psql(
		'postgres', q{
	SELECT count(*) FROM inbox.entries
	WHERE octet_length(scope) NOT BETWEEN 1 AND 256
	   OR octet_length(message_id) NOT BETWEEN 1 AND 1024
	   OR octet_length(payload_hash) NOT BETWEEN 1 AND 64
	   OR (state <> 'd' AND payload IS NULL AND payload_bytes IS NULL)
}),
	0, 'no partial or malformed entry exists');
is( $node->safe_psql(
		'postgres', q{
	SELECT count(*) FROM inbox.entries e
	WHERE NOT EXISTS (SELECT FROM fuzz_made f WHERE f.scope = e.scope AND f.message_id = e.message_id)
}),
	0, 'every entry was made by a call that succeeded');
cmp_ok($node->safe_psql('postgres', 'SELECT count(*) FROM fuzz_made'), '>', 100,
	'(and there are entries to check)');

is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM inbox.offsets o
	WHERE octet_length(o.scope) NOT BETWEEN 1 AND 256 OR octet_length(o.stream) NOT BETWEEN 1 AND 1024
	   OR o.seq < 0
	   OR NOT EXISTS (SELECT FROM fuzz_offsets f WHERE f.scope = o.scope AND f.stream = o.stream)
}),
	0, 'every stream offset was made by a call that succeeded, and none is malformed');

# Every member of an ordered group is a message stored by a receive that
# succeeded, in a group of its scope, with a well-formed key; a group's
# members are pending, processing or dead, and at most one is takeable
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM inbox.group_members m
	WHERE octet_length(m.group_key) NOT BETWEEN 1 AND 1024
	   OR NOT EXISTS (SELECT FROM inbox.groups g WHERE g.scope = m.scope AND g.group_key = m.group_key)
	   OR NOT EXISTS (SELECT FROM inbox.entries e WHERE e.scope = m.scope AND e.message_id = m.message_id
					  AND e.state IN ('p', 'r', 'x'))
}),
	0, 'every group member is a stored, open message of a group of its scope');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM (
		SELECT m.scope, m.group_key FROM inbox.group_members m
		JOIN inbox.entries e ON e.scope = m.scope AND e.message_id = m.message_id
		WHERE NOT m.skipped AND e.due IS NOT NULL
		GROUP BY 1, 2 HAVING count(*) > 1) x
}),
	0, 'no group has two messages a take could hand out');
cmp_ok($node->safe_psql('postgres', 'SELECT count(*) FROM inbox.group_members'), '>', 10,
	'(and there are group members to check)');

# A stored priority is above the default (the default is NULL) and within
# range, on a message of the deferred mode
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM inbox.entries
	WHERE priority IS NOT NULL AND (priority NOT BETWEEN 1 AND 32767 OR payload IS NULL AND payload_bytes IS NULL)
}),
	0, 'every stored priority is above the default, within range, on a received message');
cmp_ok($node->safe_psql('postgres', 'SELECT count(*) FROM inbox.entries WHERE priority IS NOT NULL'), '>', 5,
	'(and there are priorities to check)');
for my $f ([ 17, 'inbox_claim_offset' ], [ 18, 'inbox_claim_offsets' ], [ 19, 'inbox_forget' ],
	[ 20, 'inbox_forget_range' ])
{
	my ($n, $name) = @$f;
	cmp_ok($node->safe_psql('postgres', "SELECT count(*) FROM fuzz_log WHERE call LIKE 'SELECT $name(%' AND sqlstate = '00000'"),
		'>', 5, "$name succeeded several times");
}
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM inbox.forget_log WHERE reason IS NULL OR octet_length(reason) NOT BETWEEN 1 AND 1024}),
	0, 'every forget audit row has a reason within the limit');

is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM inbox.scope_grants g
	WHERE octet_length(g.scope) NOT BETWEEN 1 AND 256 OR g.grantee IS NULL
}),
	0, 'no malformed scope grant exists');
cmp_ok($node->safe_psql('postgres', "SELECT count(*) FROM fuzz_log WHERE call LIKE 'SET %' AND sqlstate = '00000'"),
	'>', 20, 'some random settings were accepted');
cmp_ok($node->safe_psql('postgres', "SELECT count(*) FROM fuzz_log WHERE call LIKE 'SET %' AND sqlstate = '22023'"),
	'>', 100, 'and many were refused with 22023');

# ALTER SYSTEM: every value is written, or refused with a message that names
# the setting; the server reloads whatever was written.
srand(4242);
my @settings = qw(inbox.on_duplicate inbox.claim_timeout inbox.retention inbox.idle_threshold
  inbox.purge_batch_size inbox.purge_enabled inbox.purge_lock_timeout inbox.max_attempts
  inbox.purge_naptime inbox.max_scopes);
my @values = ('0', '-1', '1', '30s', '2 h', '10d', '2147483647', '2147483648', 'on', 'off',
	'raise', 'return', '1e9', 'NaN', '', '5 parsecs', "1'; SELECT pg_sleep(10); --", '%s%n',
	"\\", '1.5', '  7 ', '0x10', '99999999999999999999999');
my ($written, $refused, $unclear) = (0, 0, '');
for my $i (1 .. 300)
{
	my $name = $settings[ int(rand(@settings)) ];
	my $value = $values[ int(rand(@values)) ];
	$value .= chr(33 + int(rand(90))) x int(rand(3)) if rand() < 0.3;
	(my $quoted = $value) =~ s/'/''/g;
	my ($rc, $out, $err) = $node->psql('postgres', "ALTER SYSTEM SET $name = '$quoted'");
	if ($rc == 0) { $written++; next; }
	$refused++;
	$unclear .= "$name = '$value': $err\n"
	  unless $err =~ /ERROR:  (invalid value for parameter|.* is outside the valid range for parameter|parameter) "\Q$name\E"/;
}
is($unclear, '', 'every refused ALTER SYSTEM value got an error naming the setting');
note "ALTER SYSTEM: $written values written, $refused refused";
cmp_ok($refused, '>', 100, 'most random values were refused');
$node->reload;
is($node->safe_psql('postgres', 'SELECT 1'), 1, 'the server reloaded what was written');
$node->safe_psql('postgres', 'ALTER SYSTEM RESET ALL');
$node->reload;

$node->no_crash_since($log_offset, 'the server never crashed');
is($node->safe_psql('postgres', 'SELECT 1'), 1, 'and still answers');

$node->stop;
done_testing();
