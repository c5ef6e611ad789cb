# test/t/005_upgrade_dump.pl
#
# The dedup history survives the operations that move it:
#   - ALTER EXTENSION inbox UPDATE from every earlier version keeps every
#     entry, and a message claimed before the update is still a duplicate;
#     EXECUTE grants given to applications on an older version still work
#     after the update (0.4.0 turns the API into entry points in place);
#   - no drift: a database created at 0.4.0 and updated to the default
#     version has exactly what a fresh CREATE EXTENSION makes, object by
#     object: function definitions and attributes, ACLs, relations, view
#     definitions, columns, constraints, indexes, triggers, event triggers,
#     comments and the config-dump registrations;
#   - pg_dump and restore keep entries in every state, their payloads and
#     results, and per-scope settings: a message claimed before the dump is
#     a duplicate after the restore, and a pending one can still be taken;
#     scope grants and the applications' EXECUTE grants are restored too;
#   - a plain dump restored into a database of another encoding (LATIN1 to
#     UTF8, UTF8 to LATIN1, SQL_ASCII to UTF8) keeps every entry, ASCII and
#     not, each in the leaf of its bucket, and every id is still a
#     duplicate; an id the target encoding cannot hold stops the restore
#     loudly, and an id too long in UTF-8 is refused when it is claimed.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

# The extension is created in each database below, at the version each needs.
my $node = InboxTest->node('upgrade', conf => "inbox.purge_enabled = off\n", extension => 0);

my $latest = $node->sql(
	"SELECT default_version FROM pg_available_extensions WHERE name = 'inbox'");

# --- update from the first release, one version at a time -------------------
$node->sql('CREATE DATABASE up');
$node->safe_psql('up', "CREATE EXTENSION inbox VERSION '0.1.0'");
# This library serves the SQL of 0.4.0 and later only (013 checks the
# refusal), so the history of 0.1.0 is written as its claims wrote it.
$node->safe_psql('up', q{
	INSERT INTO inbox.entries (scope, message_id, payload_hash)
	SELECT 'billing', 'INV-' || g, sha256(convert_to(g::text, 'UTF8'))
	FROM generate_series(1, 500) g;
});
my $before = $node->safe_psql('up',
	"SELECT md5(string_agg(scope || message_id || received_at || payload_hash, ',' ORDER BY scope, message_id)) FROM inbox.entries");

# The update path from the first release to the default version, as
# ALTER EXTENSION UPDATE follows it ("0.1.0--0.2.0--..."): each version on
# it is taken in turn, so that a new version is covered as soon as its
# update script exists.
my $path = $node->safe_psql('up',
	"SELECT path FROM pg_extension_update_paths('inbox') WHERE source = '0.1.0' AND target = '$latest' AND path IS NOT NULL"
);
ok($path ne '', "an update path leads from 0.1.0 to $latest ($path)");
my (undef, @steps) = split /--/, $path;

for my $version (@steps)
{
	$node->safe_psql('up', "ALTER EXTENSION inbox UPDATE TO '$version'");
	# An application role as administrators set it up on 0.3.0
	$node->safe_psql('up', q{
		CREATE ROLE upgrade_app;
		GRANT EXECUTE ON FUNCTION inbox_claim(text, text, bytea), inbox_take(text, integer, interval)
			TO upgrade_app;
	}) if $version eq '0.3.0';
	is($node->safe_psql('up', "SELECT extversion FROM pg_extension WHERE extname = 'inbox'"),
		$version, "updated to $version");
	is( $node->safe_psql('up',
			"SELECT md5(string_agg(scope || message_id || received_at || payload_hash, ',' ORDER BY scope, message_id)) FROM inbox.entries"
		),
		$before,
		"every entry is kept, unchanged, by the update to $version");
	next if $version lt '0.4.0';
	is( $node->safe_psql('up',
			"SELECT count(*) FILTER (WHERE inbox_claim('billing', 'INV-' || g, sha256(convert_to(g::text, 'UTF8')))) FROM generate_series(1, 500) g"
		),
		0, "messages claimed before the update are duplicates after it ($version)");
}

is( $node->safe_psql('up', q{
		SET ROLE upgrade_app;
		SELECT inbox_claim('billing', 'INV-1', sha256(convert_to('1', 'UTF8')));
		SELECT count(*) FROM inbox_take('nothing-here');
	}),
	"f\n0",
	'an application role granted EXECUTE on 0.3.0 still calls the API after the update');
is( $node->safe_psql('up',
		"SELECT count(*) FROM pg_proc WHERE proname LIKE 'inbox\\_%' AND has_function_privilege('upgrade_app', oid, 'EXECUTE')"
	),
	2, 'and holds exactly the grants it had');

# The updated database has everything a fresh install has.
$node->sql('CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION inbox');
my $objects = q{
	SELECT string_agg(pg_describe_object(classid, objid, objsubid), E'\n' ORDER BY pg_describe_object(classid, objid, objsubid))
	FROM pg_depend
	WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
	  AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'inbox')
};
is($node->safe_psql('up', $objects), $node->safe_psql('fresh', $objects),
	'an updated database has the same objects as a fresh install');
my $columns = q{
	SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum)
	FROM pg_attribute WHERE attrelid = 'inbox.entries'::regclass AND attnum > 0 AND NOT attisdropped
};
is($node->safe_psql('up', $columns), $node->safe_psql('fresh', $columns), 'with the same columns in the same order');
is($node->safe_psql('up', "SELECT inbox_receive('orders', 'after-update', '{}'::jsonb)"),
	't', 'the deferred mode works after the update');

# --- no drift between an update and a fresh install ----------------------------
# 'fresh' was created at the default version directly; 'updated' is created
# at 0.4.0 and updated to the default version.  While the default is 0.4.0
# the two ran the same scripts; once a version has an install script of its
# own, this compares that script with the update scripts, object by object.
# Each category below is a listing, one "object<TAB>line" row per line of
# what the catalogs say about each object, in an order that does not depend
# on OIDs; the two databases' listings must be equal.
$node->sql('CREATE DATABASE updated');
$node->safe_psql('updated', "CREATE EXTENSION inbox VERSION '0.4.0'");
$node->safe_psql('updated', 'ALTER EXTENSION inbox UPDATE');
is($node->safe_psql('updated', "SELECT extversion FROM pg_extension WHERE extname = 'inbox'"),
	$latest, "a database created at 0.4.0 is updated to the default version, $latest");

# The objects compared: every relation of schema inbox or of the extension
# (tables, partitions, views, sequences), and every function of schema
# inbox, of the extension's schema or of the extension.  Each query below
# starts its WITH clause with these.
my $ours = q{
	ext AS (SELECT oid, extowner, extnamespace FROM pg_extension WHERE extname = 'inbox'),
	member AS (
		SELECT d.classid, d.objid FROM pg_depend d, ext
		 WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'),
	rel AS (
		SELECT c.oid FROM pg_class c
		 WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f', 'c')
		   AND (c.relnamespace = 'inbox'::regnamespace
				OR c.oid IN (SELECT objid FROM member WHERE classid = 'pg_class'::regclass))),
	fn AS (
		SELECT p.oid FROM pg_proc p, ext
		 WHERE p.pronamespace IN ('inbox'::regnamespace, ext.extnamespace)
			OR p.oid IN (SELECT objid FROM member WHERE classid = 'pg_proc'::regclass))
};

# A role as the listings show it: the extension's owner (whoever ran
# CREATE EXTENSION) as OWNER, so that databases set up by different roles
# compare equal; PUBLIC as PUBLIC; any other role by name.
sub role
{
	my ($oid) = @_;
	return "CASE $oid WHEN 0 THEN 'PUBLIC' WHEN (SELECT extowner FROM ext) THEN 'OWNER' ELSE ${oid}::regrole::text END";
}

# The lines of an ACL, one per grantee and privilege.  A NULL ACL means the
# default privileges of the object's kind ($kind and $owner for acldefault),
# which are spelled out, so that NULL and the same privileges granted
# explicitly are equal.  A column's NULL ACL grants nothing: no $kind.
sub acl_lines
{
	my ($acl, $kind, $owner) = @_;
	$acl = "coalesce($acl, acldefault($kind, $owner))" if defined $kind;
	return qq{(SELECT string_agg(l, E'\\n' ORDER BY l) FROM (
		SELECT ${\ role('a.grantee') } || ': ' || a.privilege_type
			   || CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END
			   || ' (granted by ' || ${\ role('a.grantor') } || ')' AS l
		  FROM aclexplode($acl) a) x)};
}

# Each category: a name, and a query of (object, text) rows.  Categories
# that an extension may well have none of are marked; every other must list
# something, or its query is broken and would compare nothing.
my @categories = (
	[
		'functions: definition, owner, SECURITY DEFINER, SET, volatility, parallel safety, strictness',
		qq{SELECT pg_describe_object('pg_proc'::regclass, p.oid, 0),
			concat_ws(E'\\n',
				'member of the extension: ' || (p.oid IN (SELECT objid FROM member WHERE classid = 'pg_proc'::regclass)),
				'owner: ' || ${\ role('p.proowner') },
				'kind: ' || p.prokind::text,
				'security definer: ' || p.prosecdef,
				'config: ' || coalesce(array_to_string(p.proconfig, ', '), '(none)'),
				'volatility: ' || p.provolatile::text,
				'parallel: ' || p.proparallel::text,
				'strict: ' || p.proisstrict,
				'leakproof: ' || p.proleakproof,
				CASE WHEN p.prokind = 'a' THEN 'aggregate' ELSE pg_get_functiondef(p.oid) END)
		   FROM pg_proc p WHERE p.oid IN (SELECT oid FROM fn)}
	],
	[
		'ACLs of the functions, relations, their columns and schema inbox',
		qq{SELECT pg_describe_object('pg_proc'::regclass, p.oid, 0), ${\ acl_lines('p.proacl', q{'f'}, 'p.proowner') }
			 FROM pg_proc p WHERE p.oid IN (SELECT oid FROM fn)
		   UNION ALL
		   SELECT pg_describe_object('pg_class'::regclass, c.oid, 0),
				  ${\ acl_lines('c.relacl', q{CASE c.relkind WHEN 'S' THEN 's'::"char" ELSE 'r'::"char" END}, 'c.relowner') }
			 FROM pg_class c WHERE c.oid IN (SELECT oid FROM rel)
		   UNION ALL
		   SELECT pg_describe_object('pg_class'::regclass, a.attrelid, a.attnum),
				  ${\ acl_lines('a.attacl') }
			 FROM pg_attribute a
			WHERE a.attrelid IN (SELECT oid FROM rel) AND a.attacl IS NOT NULL
		   UNION ALL
		   SELECT pg_describe_object('pg_namespace'::regclass, n.oid, 0), ${\ acl_lines('n.nspacl', q{'n'}, 'n.nspowner') }
			 FROM pg_namespace n WHERE n.nspname = 'inbox'}
	],
	[
		'relations: kind, owner, options (security_barrier), partitioning, row security',
		qq{SELECT pg_describe_object('pg_class'::regclass, c.oid, 0),
			concat_ws(E'\\n',
				'kind: ' || c.relkind::text,
				'member of the extension: ' || (c.oid IN (SELECT objid FROM member WHERE classid = 'pg_class'::regclass)),
				'owner: ' || ${\ role('c.relowner') },
				'persistence: ' || c.relpersistence::text,
				'options: ' || coalesce(array_to_string(c.reloptions, ', '), '(none)'),
				'row security: ' || c.relrowsecurity || ', forced: ' || c.relforcerowsecurity,
				'replica identity: ' || c.relreplident::text,
				'partition key: ' || pg_get_partkeydef(c.oid),
				'partition of: ' || (SELECT i.inhparent::regclass::text FROM pg_inherits i WHERE i.inhrelid = c.oid)
					|| ' ' || pg_get_expr(c.relpartbound, c.oid))
		   FROM pg_class c WHERE c.oid IN (SELECT oid FROM rel)}
	],
	[
		'view definitions',
		q{SELECT pg_describe_object('pg_class'::regclass, c.oid, 0), pg_get_viewdef(c.oid)
		   FROM pg_class c WHERE c.oid IN (SELECT oid FROM rel) AND c.relkind IN ('v', 'm')}
	],
	[
		'columns: name, type, NOT NULL, default, collation, in order',
		q{SELECT pg_describe_object('pg_class'::regclass, c.oid, 0),
			string_agg(concat_ws(' ', quote_ident(a.attname), format_type(a.atttypid, a.atttypmod),
					CASE WHEN a.attnotnull THEN 'NOT NULL' END,
					'DEFAULT ' || pg_get_expr(d.adbin, d.adrelid),
					'COLLATE ' || (SELECT quote_ident(co.collname) FROM pg_collation co WHERE co.oid = a.attcollation),
					CASE a.attidentity WHEN 'a' THEN 'GENERATED ALWAYS AS IDENTITY'
									   WHEN 'd' THEN 'GENERATED BY DEFAULT AS IDENTITY' END,
					CASE WHEN a.attgenerated = 's' THEN 'GENERATED ALWAYS (STORED)' END),
				E'\n' ORDER BY a.attnum)
		   FROM pg_class c
		   JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		   LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		  WHERE c.oid IN (SELECT oid FROM rel)
		  GROUP BY c.oid}
	],
	[
		'constraints',
		q{SELECT pg_describe_object('pg_constraint'::regclass, co.oid, 0),
			co.contype::text || ': ' || pg_get_constraintdef(co.oid)
				|| CASE WHEN co.conislocal THEN '' ELSE ' (inherited)' END
		   FROM pg_constraint co WHERE co.conrelid IN (SELECT oid FROM rel)}
	],
	[
		'indexes',
		q{SELECT pg_describe_object('pg_class'::regclass, i.indexrelid, 0),
			pg_get_indexdef(i.indexrelid)
				|| CASE WHEN i.indisvalid THEN '' ELSE ' (invalid)' END
				|| CASE WHEN i.indisclustered THEN ' (clustered)' ELSE '' END
		   FROM pg_index i WHERE i.indrelid IN (SELECT oid FROM rel)}
	],
	[
		'triggers',
		q{SELECT pg_describe_object('pg_trigger'::regclass, t.oid, 0),
			pg_get_triggerdef(t.oid) || ' (enabled: ' || t.tgenabled::text || ')'
		   FROM pg_trigger t WHERE t.tgrelid IN (SELECT oid FROM rel) AND NOT t.tgisinternal},
		'may be empty'
	],
	[
		'event triggers: event, tags, function',
		qq{SELECT pg_describe_object('pg_event_trigger'::regclass, e.oid, 0),
			concat_ws(E'\\n',
				'event: ' || e.evtevent,
				'tags: ' || coalesce(array_to_string(e.evttags, ', '), '(all)'),
				'function: ' || e.evtfoid::regprocedure,
				'enabled: ' || e.evtenabled::text,
				'owner: ' || ${\ role('e.evtowner') })
		   FROM pg_event_trigger e},
		'may be empty'
	],
	[
		'comments on the extension, schema inbox, and every object and column compared',
		q{SELECT pg_describe_object(o.classid, o.objid, o.objsubid), coalesce(d.description, '(no comment)')
		   FROM (SELECT classid, objid, 0 AS objsubid FROM member
				 UNION SELECT 'pg_extension'::regclass, oid, 0 FROM ext
				 UNION SELECT 'pg_namespace'::regclass, 'inbox'::regnamespace, 0
				 UNION SELECT 'pg_class'::regclass, oid, 0 FROM rel
				 UNION SELECT 'pg_class'::regclass, attrelid, attnum FROM pg_attribute
						WHERE attrelid IN (SELECT oid FROM rel) AND attnum > 0 AND NOT attisdropped
				 UNION SELECT 'pg_proc'::regclass, oid, 0 FROM fn
				 UNION SELECT 'pg_class'::regclass, indexrelid, 0 FROM pg_index WHERE indrelid IN (SELECT oid FROM rel)
				 UNION SELECT 'pg_constraint'::regclass, oid, 0 FROM pg_constraint WHERE conrelid IN (SELECT oid FROM rel)
				 UNION SELECT 'pg_trigger'::regclass, oid, 0 FROM pg_trigger
						WHERE tgrelid IN (SELECT oid FROM rel) AND NOT tgisinternal
				 UNION SELECT 'pg_event_trigger'::regclass, oid, 0 FROM pg_event_trigger) o
		   LEFT JOIN pg_description d
			 ON d.classoid = o.classid AND d.objoid = o.objid AND d.objsubid = o.objsubid}
	],
	[
		'config-dump registrations (pg_extension_config_dump)',
		q{SELECT pg_describe_object('pg_class'::regclass, c.cfg, 0), 'condition: ' || coalesce(nullif(c.cond, ''), '(none)')
		   FROM ext, pg_extension e, unnest(e.extconfig, e.extcondition) AS c(cfg, cond)
		  WHERE e.oid = ext.oid}
	]);

# A listing of a database: "object<TAB>line" rows, objects in name order,
# the lines of each object in their own order.
sub listing
{
	my ($db, $query) = @_;
	return $node->safe_psql(
		$db, qq{
		WITH $ours, listed(object, body) AS ($query)
		SELECT object || E'\\t' || line
		  FROM listed, regexp_split_to_table(coalesce(body, '(null)'), E'\\n') WITH ORDINALITY AS l(line, n)
		 ORDER BY object COLLATE "C", n});
}

# The lines of @$a that are not in @$b ("-") and those of @$b that are not
# in @$a ("+"), in order, leaving out a longest common subsequence of the
# two: what changed, without the lines around it.
sub line_diff
{
	my ($a, $b) = @_;
	my ($n, $m) = (scalar(@$a), scalar(@$b));
	# $common[$i][$j]: the length of the longest common subsequence of
	# @$a from $i on and @$b from $j on
	my @common;
	for my $i (reverse 0 .. $n)
	{
		for my $j (reverse 0 .. $m)
		{
			$common[$i][$j] =
				($i == $n || $j == $m) ? 0
			  : $a->[$i] eq $b->[$j] ? $common[ $i + 1 ][ $j + 1 ] + 1
			  : $common[ $i + 1 ][$j] >= $common[$i][ $j + 1 ] ? $common[ $i + 1 ][$j]
			  :                                                   $common[$i][ $j + 1 ];
		}
	}
	my ($i, $j, @diff) = (0, 0);
	while ($i < $n || $j < $m)
	{
		if ($i < $n && $j < $m && $a->[$i] eq $b->[$j])
		{
			$i++;
			$j++;
		}
		elsif ($i < $n && ($j == $m || $common[ $i + 1 ][$j] >= $common[$i][ $j + 1 ]))
		{
			push @diff, "  - $a->[$i++]";
		}
		else
		{
			push @diff, "  + $b->[$j++]";
		}
	}
	return @diff;
}

# The objects whose lines differ between two listings, and for each the
# lines that differ: "-" the fresh install's, "+" the updated database's.
sub listing_diff
{
	my ($fresh, $updated) = @_;
	my (%lines, @objects);
	for my $side ([ '-', $fresh ], [ '+', $updated ])
	{
		my ($sign, $text) = @$side;
		for my $row (split /\n/, $text)
		{
			my ($object, $line) = split /\t/, $row, 2;
			push @objects, $object unless $lines{$object};
			push @{ $lines{$object}{$sign} }, $line // '';
		}
	}
	my ($differ, @diff) = (0);
	for my $object (@objects)
	{
		my $a = $lines{$object}{'-'};
		my $b = $lines{$object}{'+'};
		next if $a && $b && join("\n", @$a) eq join("\n", @$b);
		$differ++;
		push @diff,
		  $a && $b ? "$object:" : "$object: only in the " . ($a ? 'fresh install' : 'updated database'),
		  line_diff($a // [], $b // []);
	}
	return ($differ, @diff);
}

for my $category (@categories)
{
	my ($what, $query, $may_be_empty) = @$category;
	my $fresh = listing('fresh', $query);
	my ($differ, @diff) = listing_diff($fresh, listing('updated', $query));
	my %objects = map { (split /\t/)[0] => 1 } split /\n/, $fresh;
	note "$what: " . scalar(keys %objects) . ' objects compared';
	if ($fresh eq '' && !$may_be_empty)
	{
		$differ++;
		push @diff, 'the fresh install lists nothing: the query finds no object';
	}
	is($differ, 0, "$what: the same after an update from 0.4.0 as after a fresh install")
	  or diag(join("\n", @diff));
}

# --- pg_dump and restore ----------------------------------------------------------
$node->sql('CREATE DATABASE src');
$node->safe_psql('src', 'CREATE EXTENSION inbox');
$node->safe_psql('src', q{
	SELECT inbox_claim('billing', 'INV-1', sha256('one'));
	SELECT inbox_receive('orders', 'pending-1', '{"n": 1}'::jsonb);
	SELECT inbox_receive('orders', 'done-1', '{"n": 2}'::jsonb);
	SELECT inbox_receive('orders', 'dead-1', '\x0102'::bytea);
	SELECT inbox_set_retention('billing', '30 days');
	SELECT inbox_set_max_attempts('orders', 1);
	CREATE ROLE dump_app;
	GRANT EXECUTE ON FUNCTION inbox_claim(text, text, bytea) TO dump_app;
	SELECT inbox_grant('billing', 'dump_app');
	SELECT inbox_grant('orders', 'upgrade_app');
	SELECT inbox_claim_offset('billing', 'partition-0', 7);
	SELECT inbox_claim('billing', 'FORGET-ME');
	SELECT inbox_forget('billing', 'FORGET-ME', 'dump test');
	SELECT inbox_allow_forget('dump_app');
});
# done-1 completed with a result, dead-1 failed into the dead letters.
$node->safe_psql('src', q{
	CREATE FUNCTION finish() RETURNS void LANGUAGE plpgsql AS $$
	DECLARE m record;
	BEGIN
		FOR m IN SELECT * FROM inbox_take('orders', 10) WHERE message_id <> 'pending-1' LOOP
			IF m.message_id = 'done-1' THEN
				PERFORM inbox_complete('orders', m.message_id, '{"shipment": "S-1"}');
			ELSE
				PERFORM inbox_fail('orders', m.message_id, 'bad EDI');
			END IF;
		END LOOP;
	END $$;
	SELECT finish();
	-- pending-1 was taken too by that call; put it back as the test needs it
	UPDATE inbox.entries SET state = 'p', owner_session = NULL, attempts = 0
	 WHERE message_id = 'pending-1';
	SELECT inbox.forget_front(scope) FROM inbox.entries WHERE message_id = 'pending-1';
});
my $state = q{
	SELECT string_agg(concat_ws('|', scope, message_id, state, received_at, payload_hash,
								payload, payload_bytes, attempts, last_error, result),
					  E'\n' ORDER BY scope, message_id)
	FROM inbox.entries
};
my $src_state = $node->safe_psql('src', $state);
is(scalar(my @lines = split(/\n/, $src_state)), 4, 'the source holds four entries to compare');
is(join('', map { (split /\|/)[2] } @lines), 'dxdp',
	'in states done, dead, done and pending') or diag($src_state);
my $settings = "SELECT string_agg(concat_ws('|', scope, retention, max_attempts), ',' ORDER BY scope) FROM inbox.scopes WHERE retention IS NOT NULL OR max_attempts IS NOT NULL";
my $src_settings = $node->safe_psql('src', $settings);
my $streams = q{
	SELECT (SELECT string_agg(scope || '/' || stream || '=' || seq, ',') FROM inbox.offsets) || ' '
		|| (SELECT string_agg(message_id || ':' || reason || ':' || (entry->>'state'), ',') FROM inbox.forget_log) || ' '
		|| (SELECT string_agg(grantee, ',') FROM inbox.forget_grants)
};
my $src_streams = $node->safe_psql('src', $streams);
is($src_streams, 'billing/partition-0=7 FORGET-ME:dump test:d dump_app',
	'the source has a stream offset, a forget audit row and a role allowed to forget');

my $dump = $node->basedir . '/src.dump';
$node->command_ok(
	[ 'pg_dump', '--format=custom', '--file', $dump, '--dbname', $node->connstr('src') ],
	'pg_dump of a database using the extension');
$node->sql('CREATE DATABASE restored');
$node->command_ok(
	[ 'pg_restore', '--exit-on-error', '--dbname', $node->connstr('restored'), $dump ],
	'pg_restore into a new database');

is($node->safe_psql('restored', $state), $src_state,
	'every entry is restored with its state, times, hashes, payloads, attempts, errors and results');
is($node->safe_psql('restored', $settings), $src_settings, 'per-scope settings are restored');
is($node->safe_psql('restored', $streams), $src_streams,
	'stream offsets, the forget audit and the roles allowed to forget are restored');
is($node->safe_psql('restored', "SELECT inbox_claim_offset('billing', 'partition-0', 7)"),
	'f', 'a sequence number claimed before the dump is a duplicate after the restore');
is($node->safe_psql('restored', "SELECT string_agg(scope || ':' || grantee, ',' ORDER BY scope) FROM inbox_grants"),
	'billing:dump_app,orders:upgrade_app', 'scope grants are restored, by role name');
is( $node->safe_psql('restored', q{
		SET ROLE dump_app;
		SELECT inbox_claim('billing', 'INV-1', sha256('one'));
	}),
	'f', 'and so is the EXECUTE grant of an application role, which acts on its scope');
is($node->safe_psql('restored', "SELECT inbox_claim('billing', 'INV-1', sha256('one'))"),
	'f', 'a message claimed before the dump is a duplicate after the restore');
is($node->safe_psql('restored', "SELECT message_id FROM inbox_take('orders')"),
	'pending-1', 'a pending message can still be taken');
is($node->safe_psql('restored', "SELECT inbox_result('orders', 'done-1')"),
	'{"shipment": "S-1"}', 'a stored result is still there');
is($node->safe_psql('restored', "SELECT message_id FROM inbox_dead_letters"),
	'dead-1', 'and so is the dead letter');
my ($rc, $out, $err) = $node->psql('restored', q{
	SET ROLE dump_app;
	SELECT inbox_claim('orders', 'not-yours');
});
like($err, qr/permission denied for inbox scope "orders"/,
	'a scope granted to another role stays closed after the restore');

# --- restore into another encoding ------------------------------------------------
# The ids: 300 ASCII ones and 60 with non-ASCII letters that LATIN1 holds,
# built on the server from their UTF-8 bytes, so that each database holds
# the same characters in its own encoding (SQL_ASCII keeps the bytes).
my $ids = q{
	(SELECT 'ascii-' || g AS id FROM generate_series(1, 300) AS g
	 UNION ALL
	 SELECT convert_from('\xc3a9'::bytea, 'UTF8') || 't' || g || convert_from('\xc39f'::bytea, 'UTF8')
	   FROM generate_series(1, 60) AS g) AS ids
};
# Every stored id, as UTF-8 bytes, in order, and where each sits
my $history = q{
	SELECT count(*) || ' ' || md5(string_agg(encode(convert_to(message_id, 'UTF8'), 'hex'), ','
											 ORDER BY convert_to(message_id, 'UTF8')))
	  FROM inbox.entries
};
my $misplaced = q{
	SELECT count(*) FROM inbox.entries
	 WHERE tableoid::regclass::text <> 'inbox.entries_p' || (bucket >> 11)
		OR bucket <> inbox.bucket(scope, message_id)
};
for my $pair ([ 'LATIN1', 'UTF8' ], [ 'UTF8', 'LATIN1' ], [ 'SQL_ASCII', 'UTF8' ])
{
	my ($from, $to) = @$pair;
	my ($src, $dst) = (lc("enc_${from}_$to") . '_src', lc("enc_${from}_$to") . '_dst');
	$node->sql("CREATE DATABASE $_ ENCODING '" . ($_ eq $src ? $from : $to)
		  . "' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
	  for ($src, $dst);
	$node->safe_psql($src, 'CREATE EXTENSION inbox');
	is($node->safe_psql($src, "SELECT count(*) FILTER (WHERE inbox_claim('edi', id)) FROM $ids"),
		'360', "$from: 360 ids claimed, 60 of them not ASCII");
	my $before = $node->safe_psql($src, $history);

	# A plain dump, as pg_dump writes it by default: each leaf's rows are
	# COPYed into that leaf, in the source's encoding, which the restore
	# converts.  ON_ERROR_STOP is how a plain dump is meant to be restored.
	my $file = $node->basedir . "/$src.sql";
	$node->command_ok([ 'pg_dump', '--file', $file, '--dbname', $node->connstr($src) ],
		"$from: plain pg_dump");
	$node->command_ok(
		[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-f', $file, '-d', $node->connstr($dst) ],
		"$from: restored into $to");

	is($node->safe_psql($dst, $history), $before, "$from to $to: every entry is restored, ASCII or not");
	is($node->safe_psql($dst, $misplaced), '0', "$from to $to: each in the leaf of its bucket");
	is($node->safe_psql($dst, "SELECT count(*) FILTER (WHERE inbox_claim('edi', id)) FROM $ids"),
		'0', "$from to $to: and every id is still a duplicate");
}

# An id that the target encoding cannot hold fails the restore, loudly.
# The way out (docs/storage.md): restore into a database whose encoding
# holds every id, such as UTF8.
$node->sql(q{CREATE DATABASE greek_src ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0});
$node->sql(q{CREATE DATABASE greek_dst ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0});
$node->safe_psql('greek_src', q{
	CREATE EXTENSION inbox;
	SELECT inbox_claim('edi', 'ascii-' || g) FROM generate_series(1, 50) AS g;
	SELECT inbox_claim('edi', convert_from('\xcea9'::bytea, 'UTF8'));
});
my $greek = $node->basedir . '/greek.sql';
$node->command_ok([ 'pg_dump', '--file', $greek, '--dbname', $node->connstr('greek_src') ],
	'a UTF8 database holding an id with a Greek letter is dumped');
($rc, $out, $err) = $node->psql('greek_dst', undef,
	extra_params => [ '-v', 'ON_ERROR_STOP=1', '-f', $greek ]);
isnt($rc, 0, 'its restore into LATIN1 stops with an error');
like($err, qr/has no equivalent in encoding "LATIN1"/, 'that names the character it cannot convert');

# SQL_ASCII into LATIN1 reinterprets non-ASCII bytes as other characters:
# such a key's stored bucket is not its bucket there, and the restore stops
# on the bucket CHECK rather than leave a key that would be claimed twice.
$node->sql(q{CREATE DATABASE bytes_src ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0});
$node->sql(q{CREATE DATABASE bytes_dst ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0});
$node->safe_psql('bytes_src', q{
	CREATE EXTENSION inbox;
	SELECT inbox_claim('edi', convert_from('\xc3a9'::bytea, 'UTF8') || 't' || g) FROM generate_series(1, 40) AS g;
});
my $bytes = $node->basedir . '/bytes.sql';
$node->command_ok([ 'pg_dump', '--file', $bytes, '--dbname', $node->connstr('bytes_src') ],
	'an SQL_ASCII database with non-ASCII ids is dumped');
($rc, $out, $err) = $node->psql('bytes_dst', undef,
	extra_params => [ '-v', 'ON_ERROR_STOP=1', '-f', $bytes ]);
isnt($rc, 0, 'its restore into LATIN1 stops with an error');
like($err, qr/violates check constraint "entries_bucket"/,
	'on the bucket check, as a reinterpreted key would otherwise be claimed twice');

# A LATIN1 id within the limit in LATIN1 but not in UTF-8 is refused when
# claimed, so a dump never holds an id that a UTF8 restore must refuse.
($rc, $out, $err) = $node->psql($node->safe_psql('postgres', q{
		SELECT datname FROM pg_database WHERE datname LIKE 'enc_latin1%src'}),
	q{SELECT inbox_claim('edi', repeat(convert_from('\xc3a9'::bytea, 'UTF8'), 600))});
like($err, qr/message_id is too long.*\n.*600 bytes long, and 1200 bytes long in UTF-8/,
	'a LATIN1 id of 600 bytes, 1200 in UTF-8, is refused with 22001');

$node->stop;
done_testing();
