# test/t/018_reference.pl
#
# docs/reference.md, the reference of the product, against what the
# product is.  The test fails on anything missing, extra or different:
#
#   - functions: every function of the extension outside schema inbox,
#     each a level-3 heading holding its signature in backticks,
#       ### `name(arg type DEFAULT ..., ...) → result`
#     PostgreSQL parses each heading (a temporary function of that
#     signature), and pg_get_function_arguments and pg_get_function_result
#     of the two must be equal: names, types, defaults and result.  Each
#     function's section has a **Returns:**, an **Errors:** and a
#     **Grant:** line and an example;
#   - grants: with the view inbox_bundles, each function's and view's
#     **Grant:** (bundle `name`, or owner only) is what the view says, and
#     the bundle table lists each bundle's objects;
#   - views: each view of the extension, a level-3 heading `name` under
#     "## Views" with a table | column | type | meaning |, columns and
#     types in order;
#   - settings: one table under "## Settings", a row per inbox.* setting
#     of pg_settings, with its type, default (boot_val and unit), range
#     or values, and context;
#   - SQLSTATEs: one table under "## SQLSTATEs"; the rows raised by
#     "inbox" are exactly the codes of errcode(ERRCODE_...) in src/*.c and
#     of the RAISE statements of sql/inbox.sql; every code and condition
#     name is PostgreSQL's or the extension's; the troubleshooting table
#     has the same codes, and every code an **Errors:** line names is in
#     the table;
#   - alerts: the troubleshooting table of alerts has each alert of
#     monitoring/alerts.yml, with its severity;
#   - the page itself: no development issue numbers, dates, version
#     stories or paths of a machine; code blocks follow the convention of
#     the doc examples; a setting a caller changes is changed for the
#     transaction only (SET LOCAL, set_config(..., true));
#   - the README: its table of bundles (| bundle | for | what it holds |)
#     has every bundle of inbox_bundles, each with the names of its
#     functions and views, and the page is at most 20,000 bytes;
#     docs/README.md, the map of the docs, links every page of docs/.
use strict;
use warnings;
use utf8;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest qw(markdown_code_blocks);
use PostgreSQL::Test::Utils;
use Test::More;
use Encode ();


my $top = "$FindBin::RealBin/../..";

sub read_file
{
	my ($path) = @_;
	open(my $fh, '<:encoding(UTF-8)', $path) or die "cannot read $path: $!";
	local $/;
	my $text = <$fh>;
	close $fh;
	return $text;
}

# Literal SQL text, single-quoted
sub lit
{
	my ($s) = @_;
	$s =~ s/'/''/g;
	return "'$s'";
}

# One failing check with every difference listed, or a passing one
sub none_ok
{
	my ($problems, $name) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	# The page is UTF-8 (its headings hold arrows); the log takes bytes
	return is(Encode::encode('UTF-8', join("\n", @$problems)), '', $name);
}

# The differences between two sets (hash refs of key => 1), as lines
sub set_diff
{
	my ($doc, $real, $what) = @_;
	my @out;
	push @out, "$what missing from the page: $_" for sort grep { !$doc->{$_} } keys %$real;
	push @out, "$what on the page but not in the product: $_" for sort grep { !$real->{$_} } keys %$doc;
	return @out;
}

my $page = read_file("$top/docs/reference.md");
my $readme = read_file("$top/README.md");

# --- the page, parsed ---------------------------------------------------------

# Lines outside code blocks (those of the blocks are empty: $lines[$i] is
# line $i + 1), and the code blocks with their info strings
my ($blocks, $prose) = markdown_code_blocks($page);
my @lines = @$prose;
my @blocks = @$blocks;
die "docs/reference.md: a code block is not closed" if grep { $_->{unclosed} } @blocks;

# Sections: each heading, its level, its text, and its lines up to the
# next heading of the same or a higher level
my @headings;
for my $i (0 .. $#lines)
{
	push @headings, { level => length($1), text => $2, start => $i }
	  if $lines[$i] =~ /^(#{1,6})\s+(.*?)\s*$/;
}
for my $h (0 .. $#headings)
{
	my $end = $#lines;
	for my $k ($h + 1 .. $#headings)
	{
		if ($headings[$k]{level} <= $headings[$h]{level})
		{
			$end = $headings[$k]{start} - 1;
			last;
		}
	}
	$headings[$h]{end} = $end;
}

sub section_lines
{
	my ($h) = @_;
	return @lines[ $h->{start} + 1 .. $h->{end} ];
}

sub blocks_in
{
	my ($h) = @_;
	# A block's line counts from 1, the sections' from 0
	return grep { $_->{line} - 1 > $h->{start} && $_->{line} - 1 <= $h->{end} } @blocks;
}

sub level2
{
	my ($title) = @_;
	my @found = grep { $_->{level} == 2 && $_->{text} eq $title } @headings;
	return $found[0];
}

# The first table in some lines whose header row matches $header: its
# rows, each an array of cells (trimmed)
sub table_rows
{
	my ($header, @in) = @_;
	my ($i, @rows) = (0);
	$i++ while $i <= $#in && $in[$i] !~ $header;
	return () if $i > $#in;
	for my $line (@in[ $i + 2 .. $#in ])
	{
		last unless $line =~ /^\|/;
		my $row = $line;
		$row =~ s/^\|\s*//;
		$row =~ s/\s*\|\s*$//;
		push @rows, [ split /\s*\|\s*/, $row, -1 ];
	}
	return @rows;
}

sub unquote
{
	my ($cell) = @_;
	return $cell =~ /^`([^`]+)`$/ ? $1 : undef;
}

# A bullet of a section: "- **Label:** text", continued by indented lines
sub field
{
	my ($label, @in) = @_;
	my @found;
	for my $i (0 .. $#in)
	{
		next unless $in[$i] =~ /^- \*\*\Q$label\E:\*\*\s*(.*)$/;
		my $text = $1;
		for my $j ($i + 1 .. $#in)
		{
			last unless $in[$j] =~ /^\s{2,}(\S.*)$/;
			$text .= " $1";
		}
		push @found, $text;
	}
	return @found;
}

# A Grant line's value: a bundle name, bundle names in byte order joined
# by ", " (bundles `a`, `b`), or '' for owner only
sub grant_value
{
	my ($text) = @_;
	return $1 if $text =~ /^bundle `(\w+)`\s*$/;
	return join(', ', sort $text =~ /`(\w+)`/g) if $text =~ /^bundles `\w+`(?:, `\w+`)+\s*$/;
	return '' if $text =~ /^owner only\b/;
	return undef;
}

# --- the node ----------------------------------------------------------------

my $node = InboxTest->node('reference');

# The extension's schema, and a way to run SQL whose output lines are
# split into fields on |
my $extschema = $node->sql(
	"SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'inbox'");
sub rows
{
	my ($sql) = @_;
	return map { [ split /\|/, $_, -1 ] } grep { $_ ne '' } split /\n/, $node->sql($sql);
}

my $ext_objects = q{
	SELECT d.objid FROM pg_depend AS d
	 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
	   AND d.refobjid = (SELECT e.oid FROM pg_extension AS e WHERE e.extname = 'inbox')
};

# --- functions -----------------------------------------------------------------

my @fn;    # the function headings: name, args, result, heading index
my @bad_headings;
for my $h (@headings)
{
	next unless $h->{level} == 3;
	next unless $h->{text} =~ /^`(.*)`$/;
	my $inner = $1;
	if ($inner =~ /^(\w+)\((.*)\) → (.+)$/)
	{
		push @fn, { name => $1, args => $2, result => $3, h => $h };
		push @bad_headings, "a \$ in a signature: $inner" if $inner =~ /\$/;
	}
	elsif ($inner !~ /^\w+$/)
	{
		push @bad_headings, "a heading that is neither a signature nor a view: $inner";
	}
}
none_ok(\@bad_headings, 'every backticked level-3 heading is a signature or a view name');
cmp_ok(scalar(@fn), '>=', 1, 'the page has function headings');

# PostgreSQL parses each documented signature: a temporary function each
my $probe = "SET check_function_bodies = off;\nSET client_min_messages = warning;\n"
  . "CREATE TEMP TABLE doc_fn_errors (n int, err text);\n";
for my $n (0 .. $#fn)
{
	next if $fn[$n]{args} =~ /\$/ || $fn[$n]{result} =~ /\$/;
	$probe .= "DO \$d\$ BEGIN EXECUTE \$s\$CREATE FUNCTION pg_temp.doc_fn_$n($fn[$n]{args}) "
	  . "RETURNS $fn[$n]{result} LANGUAGE sql AS 'SELECT NULL'\$s\$; "
	  . "EXCEPTION WHEN OTHERS THEN INSERT INTO doc_fn_errors VALUES ($n, SQLERRM); END \$d\$;\n";
}
$probe .= q{
SELECT 'F', substr(p.proname, 8), pg_get_function_identity_arguments(p.oid),
       pg_get_function_arguments(p.oid), pg_get_function_result(p.oid)
  FROM pg_proc AS p WHERE p.pronamespace = pg_my_temp_schema() AND p.proname LIKE 'doc_fn_%';
SELECT 'E', n, replace(err, '|', '/') FROM doc_fn_errors;
};
my @unparsed;
for my $r (rows($probe))
{
	if ($r->[0] eq 'F')
	{
		my $f = $fn[ $r->[1] ];
		@$f{qw(identity arguments fresult)} = @$r[ 2 .. 4 ];
	}
	else
	{
		my $f = $fn[ $r->[1] ];
		push @unparsed, "$f->{name}($f->{args}) → $f->{result}: $r->[2]";
	}
}
none_ok(\@unparsed, 'PostgreSQL accepts every documented signature');

# The catalog's: every function of the extension outside schema inbox
my @catalog = rows(qq{
	SELECT p.proname, pg_get_function_identity_arguments(p.oid),
	       pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),
	       p.pronamespace::regnamespace::text
	  FROM pg_proc AS p
	 WHERE p.oid IN ($ext_objects AND d.classid = 'pg_proc'::regclass)
	   AND p.pronamespace <> 'inbox'::regnamespace
});
my @stray = map { "$_->[0] is in schema $_->[4]" } grep { $_->[4] ne $extschema } @catalog;
none_ok(\@stray, "every public function is in the extension's schema");
cmp_ok(scalar(@catalog), '>=', 30, 'the extension has its public functions (' . scalar(@catalog) . ')');

my (%doc_fn, %real_fn, @dup);
for my $f (grep { defined $_->{arguments} } @fn)
{
	my $key = "$f->{name}($f->{arguments}) → $f->{fresult}";
	push @dup, "documented twice: $key" if $doc_fn{$key}++;
}
$real_fn{"$_->[0]($_->[2]) → $_->[3]"} = 1 for @catalog;
none_ok([ @dup, set_diff(\%doc_fn, \%real_fn, 'function') ],
	'the documented signatures (names, types, defaults, results) are the functions of the extension');

# Each function's section
my @incomplete;
for my $f (@fn)
{
	my @body = section_lines($f->{h});
	my $what = "$f->{name}($f->{args})";
	for my $label (qw(Returns Errors Grant))
	{
		my $count = () = field($label, @body);
		push @incomplete, "$what: $count **$label:** lines" if $count != 1;
	}
	my ($grant) = field('Grant', @body);
	push @incomplete, "$what: **Grant:** is neither bundle `name` nor owner only: $grant"
	  if defined $grant && !defined grant_value($grant);
	push @incomplete, "$what: no example"
	  unless grep { $_->{info} =~ /^sql\b/ && $_->{text} =~ /\b\Q$f->{name}\E\s*\(/ } blocks_in($f->{h});
}
none_ok(\@incomplete, 'each function has its Returns, Errors and Grant lines and an example');

# --- views -----------------------------------------------------------------------

my $views_section = level2('Views');
ok($views_section, 'the page has a Views section');
my (%doc_views, @view_problems);
for my $h (grep { $_->{level} == 3 && $views_section && $_->{start} > $views_section->{start}
	  && $_->{start} <= $views_section->{end} } @headings)
{
	my ($name) = $h->{text} =~ /^`(\w+)`$/;
	if (!defined $name)
	{
		push @view_problems, "a heading in Views that is not a view name: $h->{text}";
		next;
	}
	my @body = section_lines($h);
	my @cols = table_rows(qr/^\|\s*column\s*\|\s*type\s*\|\s*meaning\s*\|/, @body);
	push @view_problems, "$name: no | column | type | meaning | table" unless @cols;
	for my $c (@cols)
	{
		my ($col, $type) = (unquote($c->[0]), unquote($c->[1] // ''));
		push @view_problems, "$name: a row without a `column` and a `type`: @$c"
		  unless defined $col && defined $type;
		push @{ $doc_views{$name}{cols} }, [ $col // '?', $type // '?' ];
	}
	my @grant = field('Grant', @body);
	push @view_problems, "$name: " . scalar(@grant) . " **Grant:** lines" if @grant != 1;
	$doc_views{$name}{grant} = grant_value($grant[0]) if @grant;
	push @view_problems, "$name: **Grant:** is neither bundle `name` nor owner only"
	  if @grant && !defined grant_value($grant[0]);
	push @view_problems, "$name: documented twice" if $doc_views{$name}{seen}++;
}
none_ok(\@view_problems, 'each view has a heading, a column table and a Grant line');

# The types as PostgreSQL names them (timestamptz is timestamp with time zone)
my %doc_types = map { $_->[1] => 1 } map { @{ $_->{cols} // [] } } values %doc_views;
my %type_name;
if (%doc_types)
{
	$type_name{ $_->[0] } = $_->[1] for rows(q{
CREATE FUNCTION pg_temp.type_of(t text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	RETURN coalesce(to_regtype(t)::text, '?');
EXCEPTION WHEN OTHERS THEN
	RETURN '?';
END $$;
} . 'SELECT t, pg_temp.type_of(t) FROM (VALUES '
		  . join(', ', map { '(' . lit($_) . ')' } sort keys %doc_types) . ') AS v(t)');
}
my %real_views;
for my $r (rows(qq{
	SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod)
	  FROM pg_class AS c JOIN pg_attribute AS a ON a.attrelid = c.oid
	 WHERE c.oid IN ($ext_objects AND d.classid = 'pg_class'::regclass)
	   AND c.relkind = 'v' AND a.attnum > 0 AND NOT a.attisdropped
	 ORDER BY c.relname, a.attnum}))
{
	push @{ $real_views{ $r->[0] } }, "$r->[1] $r->[2]";
}
my @view_diff = set_diff({ map { $_ => 1 } keys %doc_views }, { map { $_ => 1 } keys %real_views }, 'view');
for my $v (sort grep { $real_views{$_} } keys %doc_views)
{
	my $doc = join(', ', map { "$_->[0] " . ($type_name{ $_->[1] } // '?') } @{ $doc_views{$v}{cols} // [] });
	my $real = join(', ', @{ $real_views{$v} });
	push @view_diff, "$v: the page has ($doc), the view ($real)" if $doc ne $real;
}
none_ok(\@view_diff, 'the documented views, columns and types, in order, are those of the extension');

# --- grants and bundles ------------------------------------------------------------

my $bundles_section = level2('Grants and bundles');
ok($bundles_section, 'the page has a Grants and bundles section');
my %doc_bundles;    # bundle => { object name => 1 }
my @bundle_rows = $bundles_section
  ? table_rows(qr/^\|\s*bundle\s*\|/, section_lines($bundles_section)) : ();
ok(scalar(@bundle_rows), 'the page has the table of bundles');
for my $r (@bundle_rows)
{
	my $b = unquote($r->[0]) // '?';
	$doc_bundles{$b}{$_} = 1 for $r->[-1] =~ /`(\w+)`/g;
}

# Grant lines name bundles of the table
my @unknown_bundle;
for my $f (@fn)
{
	my ($g) = field('Grant', section_lines($f->{h}));
	my $v = defined $g ? grant_value($g) : undef;
	next unless defined $v && $v ne '';
	push @unknown_bundle, "$f->{name}($f->{args}): bundle `$_` is not in the table of bundles"
	  for grep { !$doc_bundles{$_} } split /, /, $v;
}
none_ok(\@unknown_bundle, 'every bundle a Grant line names is in the table of bundles');

my $has_bundles = $node->sql("SELECT to_regclass(" . lit("$extschema.inbox_bundles") . ") IS NOT NULL");
SKIP:
{
	skip 'the view inbox_bundles does not exist: Grant lines checked for form only', 3
	  unless $has_bundles eq 't';

	my (%by_function, %by_view, %real_bundles, @unresolved);
	for my $r (rows(q{
		CREATE FUNCTION pg_temp.proc_of(t text) RETURNS oid LANGUAGE plpgsql AS $$
		BEGIN
			RETURN to_regprocedure(t);
		EXCEPTION WHEN OTHERS THEN
			RETURN NULL;
		END $$;
		SELECT b.bundle, b.object_type, b.object, coalesce(p.proname::text, ''),
		       coalesce(pg_get_function_identity_arguments(p.oid), '')
		  FROM inbox_bundles AS b
		  LEFT JOIN pg_proc AS p
		    ON p.oid = CASE WHEN b.object_type = 'function' THEN pg_temp.proc_of(b.object) END}))
	{
		my ($bundle, $type, $object, $proname, $identity) = @$r;
		if ($type eq 'function')
		{
			if ($proname eq '')
			{
				push @unresolved, "inbox_bundles: function $object does not resolve";
				next;
			}
			push @{ $by_function{"$proname($identity)"} }, $bundle;
			$real_bundles{$bundle}{$proname} = 1;
		}
		elsif ($type eq 'view')
		{
			(my $name = $object) =~ s/^.*\.//;
			push @{ $by_view{$name} }, $bundle;
			$real_bundles{$bundle}{$name} = 1;
		}
		else
		{
			push @unresolved, "inbox_bundles: object_type $type of $object";
		}
	}
	none_ok(\@unresolved, 'every object of inbox_bundles is a function or a view that exists');

	my @grant_diff;
	for my $f (grep { defined $_->{identity} } @fn)
	{
		my ($g) = field('Grant', section_lines($f->{h}));
		my $doc = defined $g ? grant_value($g) : undef;
		my $real = join(', ', sort @{ $by_function{"$f->{name}($f->{identity})"} // [] });
		push @grant_diff, "$f->{name}($f->{identity}): the page says "
		  . (!defined $doc ? '(nothing)' : $doc eq '' ? 'owner only' : "bundle $doc")
		  . ', inbox_bundles ' . ($real eq '' ? 'owner only' : "bundle $real")
		  if ($doc // '?') ne $real;
	}
	for my $v (sort keys %doc_views)
	{
		my $doc = $doc_views{$v}{grant};
		my $real = join(', ', sort @{ $by_view{$v} // [] });
		push @grant_diff, "view $v: the page says "
		  . (!defined $doc ? '(nothing)' : $doc eq '' ? 'owner only' : "bundle $doc")
		  . ', inbox_bundles ' . ($real eq '' ? 'owner only' : "bundle $real")
		  if ($doc // '?') ne $real;
	}
	none_ok(\@grant_diff, 'each Grant line is what inbox_bundles says (owner only: in no bundle)');

	my @table_diff = set_diff({ map { $_ => 1 } keys %doc_bundles },
		{ map { $_ => 1 } keys %real_bundles }, 'bundle');
	for my $b (sort grep { $real_bundles{$_} } keys %doc_bundles)
	{
		push @table_diff, map { "bundle $b: $_" }
		  set_diff($doc_bundles{$b}, $real_bundles{$b}, 'object');
	}
	none_ok(\@table_diff, 'the table of bundles lists the objects of each bundle');

	# The README's table of bundles, | bundle | for | what it holds |:
	# every bundle, each with the names of its functions and views
	my @readme_rows = table_rows(qr/^\|\s*bundle\s*\|/, split(/\n/, $readme));
	my %readme_bundles;
	for my $r (@readme_rows)
	{
		my $b = unquote($r->[0]) // "@$r";
		push @table_diff, "README.md: bundle $b has two rows" if $readme_bundles{$b};
		$readme_bundles{$b}{$_} = 1 for $r->[-1] =~ /`(\w+)`/g;
	}
	my @readme_diff = set_diff({ map { $_ => 1 } keys %readme_bundles },
		{ map { $_ => 1 } keys %real_bundles }, 'bundle');
	for my $b (sort grep { $real_bundles{$_} } keys %readme_bundles)
	{
		push @readme_diff, map { "bundle $b: $_" }
		  set_diff($readme_bundles{$b}, $real_bundles{$b}, 'object');
	}
	none_ok([ map { "README.md: $_" } @readme_diff ],
		"the README's table of bundles lists every bundle, with the functions and views of each ("
		  . scalar(keys %real_bundles) . ' bundles)');
}

# --- settings ----------------------------------------------------------------------

my $settings_section = level2('Settings');
ok($settings_section, 'the page has a Settings section');
my @setting_rows = $settings_section
  ? table_rows(qr/^\|\s*setting\s*\|\s*type\s*\|\s*default\s*\|/, section_lines($settings_section))
  : ();
my (%doc_settings, @setting_problems);
for my $r (@setting_rows)
{
	my $name = unquote($r->[0]);
	if (!defined $name || @$r < 7)
	{
		push @setting_problems, "a settings row that is not | `name` | type | default | range | context | ... |: @$r";
		next;
	}
	push @setting_problems, "$name: two rows" if $doc_settings{$name};
	$doc_settings{$name} = $r;
}
my %real_settings;
for my $r (rows(q{
	SELECT name, vartype, boot_val, coalesce(unit, ''), coalesce(min_val, ''),
	       coalesce(max_val, ''), coalesce(array_to_string(enumvals, ','), ''), context
	  FROM pg_settings WHERE name LIKE 'inbox.%'}))
{
	$real_settings{ $r->[0] } = $r;
}
cmp_ok(scalar(keys %real_settings), '>=', 10, 'pg_settings has the inbox settings (' . scalar(keys %real_settings) . ')');
push @setting_problems,
  set_diff({ map { $_ => 1 } keys %doc_settings }, { map { $_ => 1 } keys %real_settings }, 'setting');
my %type_word = (bool => 'boolean', integer => 'integer', real => 'real', enum => 'enum', string => 'string');
for my $name (sort grep { $real_settings{$_} } keys %doc_settings)
{
	my (undef, $vartype, $boot, $unit, $min, $max, $enumvals, $context) = @{ $real_settings{$name} };
	my (undef, $type, $default, $range, $doc_context) = @{ $doc_settings{$name} };
	my $word = $type_word{$vartype} // $vartype;
	push @setting_problems, "$name: type '$type', pg_settings says $word"
	  unless $type =~ /^\Q$word\E\b/;
	push @setting_problems, "$name: default $default, pg_settings says `$boot$unit`"
	  unless $default eq "`$boot$unit`";
	push @setting_problems, "$name: context $doc_context, pg_settings says `$context`"
	  unless $doc_context eq "`$context`";
	my @need =
	    $vartype eq 'integer' || $vartype eq 'real' ? ($min, $max)
	  : $vartype eq 'enum' ? split(/,/, $enumvals)
	  : $vartype eq 'bool' ? ('on', 'off')
	  :                      ();
	for my $v (@need)
	{
		push @setting_problems, "$name: range '$range' does not name `$v`"
		  unless $range =~ /`\Q$v\E`/;
	}
}
none_ok(\@setting_problems,
	'the settings table has every inbox setting with its type, default, range and context');

# --- SQLSTATEs -----------------------------------------------------------------------

# Source text without comments (string literals kept), for C or SQL
sub strip_comments
{
	my ($text, $lang) = @_;
	my $out = '';
	my $i = 0;
	my $n = length $text;
	while ($i < $n)
	{
		my $two = substr($text, $i, 2);
		my $c = substr($text, $i, 1);
		if ($two eq '/*')
		{
			my $end = index($text, '*/', $i + 2);
			$i = $end < 0 ? $n : $end + 2;
			$out .= ' ';
		}
		elsif (($lang eq 'c' && $two eq '//') || ($lang eq 'sql' && $two eq '--'))
		{
			my $end = index($text, "\n", $i);
			$i = $end < 0 ? $n : $end;
		}
		elsif ($c eq "'" || ($lang eq 'c' && $c eq '"'))
		{
			my $j = $i + 1;
			while ($j < $n)
			{
				my $d = substr($text, $j, 1);
				if ($lang eq 'c' && $d eq '\\') { $j += 2; next; }
				if ($d eq $c)
				{
					# '' inside an SQL literal
					if ($lang eq 'sql' && substr($text, $j + 1, 1) eq "'") { $j += 2; next; }
					last;
				}
				$j++;
			}
			$out .= substr($text, $i, $j - $i + 1);
			$i = $j + 1;
		}
		else
		{
			$out .= $c;
			$i++;
		}
	}
	return $out;
}

# ERRCODE_ macros: PostgreSQL's, and the extension's
my %macro;
my ($includedir) = $node->config_data('--includedir-server');
for my $header ("$includedir/utils/errcodes.h", "$top/src/inbox.h")
{
	my $text = read_file($header);
	while ($text =~ /#define\s+(ERRCODE_\w+)\s+MAKE_SQLSTATE\(\s*'(.)'\s*,\s*'(.)'\s*,\s*'(.)'\s*,\s*'(.)'\s*,\s*'(.)'\s*\)/g)
	{
		$macro{$1} = "$2$3$4$5$6";
	}
}
cmp_ok(scalar(keys %macro), '>', 200, 'the SQLSTATE macros are read from utils/errcodes.h and src/inbox.h');
my %known_code = map { $_ => 1 } values %macro;
my %ib_condition;    # IB001 => duplicate, from ERRCODE_INBOX_DUPLICATE
for my $m (grep { /^ERRCODE_INBOX_/ } keys %macro)
{
	(my $cond = lc $m) =~ s/^errcode_inbox_//;
	$ib_condition{ $macro{$m} } = $cond;
}
is(join(',', sort keys %ib_condition), 'IB001,IB002,IB003,IB004,IB005,IB006,IB007',
	'src/inbox.h defines the IB codes');

# What the C code raises: errcode(ERRCODE_...)
my (%raised, @unknown_macro);
for my $file (glob("$top/src/*.c"))
{
	my $code = strip_comments(read_file($file), 'c');
	while ($code =~ /\berrcode\s*\(\s*(ERRCODE_\w+)\s*\)/g)
	{
		if (defined $macro{$1}) { $raised{ $macro{$1} } = 1; }
		else { push @unknown_macro, "$file: $1"; }
	}
}
none_ok(\@unknown_macro, 'every errcode() of src/*.c names a known SQLSTATE');
cmp_ok(scalar(keys %raised), '>=', 10, 'the C code raises SQLSTATEs (' . scalar(keys %raised) . ')');

# What sql/inbox.sql raises: RAISE statements that raise an error
my (%sql_names, @sql_codes);
{
	my $sql = strip_comments(read_file("$top/sql/inbox.sql"), 'sql');
	# String literals are skipped whole: 'raise' is a default value too
	while ($sql =~ /'(?:[^']|'')*'|\bRAISE\b((?:'(?:[^']|'')*'|[^;'])*);/gi)
	{
		next unless defined $1;
		my $body = $1;
		next if $body =~ /^\s*(?:DEBUG|LOG|INFO|NOTICE|WARNING)\b/i || $body =~ /^\s*$/;
		if ($body =~ /^\s*SQLSTATE\s+'(\w{5})'/i)
		{
			push @sql_codes, $1;
		}
		elsif ($body =~ /^\s*(?:EXCEPTION\b|')/i)
		{
			if ($body =~ /\bERRCODE\s*=\s*'([^']+)'/i) { push @sql_codes, $1; }
			else { push @sql_codes, 'P0001'; }
		}
		elsif ($body =~ /^\s*([a-z_][a-z0-9_]*)\b/i)
		{
			push @sql_codes, $1;
		}
	}
}
cmp_ok(scalar(@sql_codes), '>=', 5, 'sql/inbox.sql raises SQLSTATEs (' . scalar(@sql_codes) . ')');

# PL/pgSQL's condition names, resolved by PL/pgSQL itself
my $resolver = q{
CREATE FUNCTION pg_temp.sqlstate_of(c text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION USING ERRCODE = c, MESSAGE = 'probe';
EXCEPTION
	-- OTHERS does not catch these two
	WHEN query_canceled OR assert_failure THEN
		RETURN SQLSTATE;
	WHEN OTHERS THEN
		IF SQLERRM = 'probe' THEN RETURN SQLSTATE; END IF;
		RETURN '?';
END $$;
};

my $sqlstates = level2('SQLSTATEs');
ok($sqlstates, 'the page has a SQLSTATEs section');
my @state_rows = $sqlstates
  ? table_rows(qr/^\|\s*SQLSTATE\s*\|\s*condition\s*\|\s*raised by\s*\|/, section_lines($sqlstates))
  : ();
my (%doc_states, @state_problems);
for my $r (@state_rows)
{
	my ($code, $cond) = (unquote($r->[0]), unquote($r->[1] // ''));
	if (!defined $code || !defined $cond || $code !~ /^[0-9A-Z]{5}$/)
	{
		push @state_problems, "a SQLSTATE row that is not | `code` | `condition` | raised by | when |: @$r";
		next;
	}
	push @state_problems, "$code: two rows" if $doc_states{$code};
	my @by = split /\s*,\s*/, $r->[2] // '';
	push @state_problems, "$code: raised by '$r->[2]' is not a list of inbox, PostgreSQL, Citus"
	  if !@by || grep { !/^(?:inbox|PostgreSQL|Citus)$/ } @by;
	$doc_states{$code} = { cond => $cond, inbox => (grep { $_ eq 'inbox' } @by) ? 1 : 0 };
	push @state_problems, "$code: not a SQLSTATE of PostgreSQL or of the extension"
	  unless $known_code{$code};
}

# Resolve the names of the SQL and of the page in one session
my @names = do
{
	my %seen;
	grep { !$seen{$_}++ } (grep { !/^[0-9A-Z]{5}$/ } @sql_codes),
	  map { $doc_states{$_}{cond} } grep { !/^IB/ } keys %doc_states;
};
my %code_of;
if (@names)
{
	$code_of{ $_->[0] } = $_->[1]
	  for rows($resolver . 'SELECT c, pg_temp.sqlstate_of(c) FROM (VALUES '
		  . join(', ', map { '(' . lit($_) . ')' } @names) . ') AS v(c)');
}
for my $c (@sql_codes)
{
	my $code = $c =~ /^[0-9A-Z]{5}$/ ? $c : $code_of{$c};
	if (!defined $code || $code eq '?')
	{
		push @state_problems, "sql/inbox.sql raises an unknown condition: $c";
		next;
	}
	$raised{$code} = 1;
}
for my $code (sort keys %doc_states)
{
	my $cond = $doc_states{$code}{cond};
	my $want = $code =~ /^IB/ ? $ib_condition{$code} : undef;
	if ($code =~ /^IB/)
	{
		push @state_problems, "$code: condition `$cond`, src/inbox.h says `" . ($want // '?') . '`'
		  unless defined $want && $cond eq $want;
	}
	elsif (($code_of{$cond} // '?') ne $code)
	{
		push @state_problems, "$code: condition `$cond` is SQLSTATE " . ($code_of{$cond} // '?');
	}
}
push @state_problems, set_diff({ map { $_ => 1 } grep { $doc_states{$_}{inbox} } keys %doc_states },
	\%raised, 'SQLSTATE raised by inbox');
none_ok(\@state_problems,
	'the SQLSTATE table has every code the C code and the SQL raise, marked inbox, with its condition');

# Every code an Errors line names is in the table
my @unlisted;
for my $f (@fn)
{
	my ($errors) = field('Errors', section_lines($f->{h}));
	next unless defined $errors;
	for my $code ($errors =~ /`([0-9A-Z]{5})`/g)
	{
		push @unlisted, "$f->{name}($f->{args}): $code" unless $doc_states{$code};
	}
}
none_ok(\@unlisted, 'every SQLSTATE of an Errors line is in the SQLSTATE table');

# --- troubleshooting ---------------------------------------------------------------------

my $troubleshooting = level2('Troubleshooting');
ok($troubleshooting, 'the page has a Troubleshooting section');
my @ts = $troubleshooting ? section_lines($troubleshooting) : ();

my @error_rows = table_rows(qr/^\|\s*SQLSTATE\s*\|\s*what it means\s*\|\s*what to do\s*\|/, @ts);
my (%ts_states, @ts_problems);
for my $r (@error_rows)
{
	my $code = unquote($r->[0]) // "@$r";
	push @ts_problems, "$code: two rows" if $ts_states{$code}++;
	push @ts_problems, "$code: a row without both what it means and what to do"
	  unless @$r == 3 && $r->[1] ne '' && $r->[2] ne '';
}
push @ts_problems, set_diff(\%ts_states, { map { $_ => 1 } keys %doc_states }, 'SQLSTATE of the SQLSTATE table');
none_ok(\@ts_problems, 'the troubleshooting table of errors has each SQLSTATE of the table');

my (@alerts, @alert_problems);
for my $line (split /\n/, read_file("$top/monitoring/alerts.yml"))
{
	if ($line =~ /^\s*-\s*alert:\s*(\S+)/)
	{
		push @alerts, { name => $1 };
	}
	elsif ($line =~ /^\s*severity:\s*(\S+)/ && @alerts)
	{
		$alerts[-1]{severity} = $1;
	}
}
cmp_ok(scalar(@alerts), '>=', 5, 'monitoring/alerts.yml has alerts (' . scalar(@alerts) . ')');
my %doc_alerts;
for my $r (table_rows(qr/^\|\s*alert\s*\|\s*severity\s*\|\s*what it means\s*\|\s*what to do\s*\|/, @ts))
{
	my $name = unquote($r->[0]) // "@$r";
	push @alert_problems, "$name: two rows" if $doc_alerts{$name};
	push @alert_problems, "$name: a row without both what it means and what to do"
	  unless @$r == 4 && $r->[2] ne '' && $r->[3] ne '';
	$doc_alerts{$name} = $r->[1];
}
push @alert_problems,
  set_diff({ map { $_ => 1 } keys %doc_alerts }, { map { $_->{name} => 1 } @alerts }, 'alert');
for my $a (grep { defined $doc_alerts{ $_->{name} } } @alerts)
{
	push @alert_problems, "$a->{name}: severity $doc_alerts{$a->{name}}, alerts.yml says "
	  . ($a->{severity} // '(none)')
	  if $doc_alerts{ $a->{name} } ne ($a->{severity} // '');
}
none_ok(\@alert_problems, 'the troubleshooting table of alerts has each alert of alerts.yml, with its severity');

# --- the page itself ------------------------------------------------------------------------

my @history;
my $month = qr/(?:January|February|March|April|May|June|July|August|September|October|November|December|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)/;
my %hygiene = (
	'an issue number' => qr/\bissues?\s*#?\s*\d+\b|(?<![\w&\/`])#\d+\b|\b(?:PR|pull request)\s*#?\d+/i,
	'a date' => qr/\b(?:19|20)\d\d-[01]\d(?:-[0-3]\d)?\b|\b$month\.?\s+(?:\d{1,2}(?:st|nd|rd|th)?,?\s+)?(?:19|20)\d\d\b|\b\d{1,2}\s+$month\s+(?:19|20)\d\d\b/,
	'a version story' => qr/\b(?:since|until|before|after|from|in|as of)\s+(?:version\s+|v)?\d+\.\d+(?:\.\d+)?\b|\b(?:added|introduced|changed|removed|new)\s+in\b|\b\d+\.\d+\.\d+\b/i,
	'a path of a machine' => qr{(?:^|[\s`'"(=])/(?:work|tmp|home|root|var|srv|mnt|opt)/},
);
my @page_lines = split /\n/, $page;
for my $i (0 .. $#page_lines)
{
	for my $what (sort keys %hygiene)
	{
		push @history, "line " . ($i + 1) . ": $what: $page_lines[$i]" if $page_lines[$i] =~ $hygiene{$what};
	}
}
none_ok(\@history, 'the page has no issue numbers, dates, version stories or machine paths');

my @fences = grep { $_->{info} !~ /^(?:(?:sql|sql fragment|sql error(?: [0-9A-Z]{5})?)(?: as=\w+)?|output)$/ } @blocks;
none_ok([ map { "line $_->{line}: code block with info string '$_->{info}'" } @fences ],
	'every code block is sql, sql fragment, sql error or output');

my @session_set;
for my $i (0 .. $#page_lines)
{
	my $l = $page_lines[$i];
	push @session_set, "line " . ($i + 1) . ": $l"
	  if ($l =~ /\bSET\s+(?:SESSION\s+)?inbox\.\w/i && $l !~ /\bALTER\s+(?:SYSTEM|DATABASE|ROLE|USER)\b/i)
	  || $l =~ /set_config\s*\(\s*'inbox\.[^']*'\s*,\s*(?:'(?:[^']|'')*'|[^,]+)\s*,\s*false\s*\)/i;
}
none_ok(\@session_set, 'a caller changes an inbox setting for its transaction only (SET LOCAL, set_config(..., true))');

# --- the README and the map of docs/ ------------------------------------------------------

cmp_ok(length(Encode::encode('UTF-8', $readme)), '<=', 20000, 'README.md is at most 20,000 bytes');
# The relay's pages, each read whole by someone setting up one broker
for my $page (qw(relay.md ingest.md quickstart-ingest.md))
{
	cmp_ok(-s "$top/docs/$page", '<=', 20000, "docs/$page is at most 20,000 bytes");
}
my $index = read_file("$top/docs/README.md");
my %linked = map { $_ => 1 } grep { !m{/} } $index =~ /\]\(([^)#\s]+\.md)(?:#[^)]*)?\)/g;
my %docs_pages = map { s{^.*/}{}r => 1 } grep { !m{/README\.md$} } glob("$top/docs/*.md");
none_ok([ set_diff(\%linked, \%docs_pages, 'page of docs/') ], 'docs/README.md links every page of docs/');

$node->stop;
done_testing();
