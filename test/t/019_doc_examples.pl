# test/t/019_doc_examples.pl
#
# The SQL in the documentation runs, and shows what it says it shows.
#
# The convention of every page (README.md and docs/*.md), by the info
# string of a fenced code block:
#
#   sql            runnable: run, and must succeed
#   sql error      run, and must fail (an ERROR from the server, or a psql
#                  error such as an invalid command); "sql error IB006"
#                  also names the SQLSTATE its last error must have
#   sql fragment   shown only, never run (parameters such as $1, elisions)
#   output         the expected output of the runnable block right before it
#                  (only blank lines between the two).  It is compared with
#                  what psql printed, after trimming trailing spaces of each
#                  line and blank lines at both ends; psql's command tags
#                  (BEGIN, INSERT 0 1, CREATE EXTENSION ...) may be left out
#                  of it.  After a "sql error" block, the error messages
#                  (without psql's "psql:<stdin>:N: " prefix) follow what
#                  was printed on stdout.
#
# Each sql or sql error block names the role it runs as, with a word
# "as=NAME" after the kind:
#
#   ```sql as=shipping_worker       connected as that role, which must exist
#                                   by then, log in, and not be a superuser
#   ```sql error IB002 as=billing_consumer
#   ```sql as=owner                 as the superuser that creates the
#                                   extension and owns it: the setup (the
#                                   extension, roles, business tables,
#                                   grants) and the owner-only functions
#
# A runnable block without it fails, and is not run: nothing runs as the
# superuser unless the page says so.  A fragment may carry one too.
#
# Each page runs in a database of its own, created empty (the page creates
# the extension itself), on a server with shared_preload_libraries =
# 'inbox', in one psql session that reconnects (\connect) when the role
# changes from one block to the next: psql variables carry over every
# block, temporary tables and an open transaction only between blocks of
# the same role.  After the page, its database and the roles it created are
# dropped, since roles belong to the whole cluster.
#
# Whatever runs must be safe behind a transaction-mode pooler, so a run
# block must not change a setting for the session: no SET other than SET
# LOCAL (SET CONSTRAINTS and SET TRANSACTION are per transaction; ALTER
# ROLE/DATABASE ... SET are not statements that start with SET), and no
# set_config(..., false).  The consumer examples (examples/**/*.py, .js,
# .go, .java) are checked for the same: no set_config(..., false), no plain
# SET inbox.*, no inbox.* setting among a connection's startup options.
#
# A page that needs more than a database to run (a broker, the relay)
# says so in a comment, "<!-- run by test/t/NNN_name.pl -->": that test
# runs every block of it, and this one only checks its blocks' form.
#
# Each assertion names the page, the block's number among the page's sql
# blocks and its line.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest qw(markdown_code_blocks);
use File::Find ();
use IPC::Run ();
use PostgreSQL::Test::Utils;
use Test::More;

my $top = "$FindBin::RealBin/../..";

# --- reading a page ---------------------------------------------------------------

# The fenced code blocks of a Markdown file, in order, as
# InboxTest::markdown_code_blocks reads them (info, line, text, adjacent,
# unclosed), each with its kind by the convention above: sql, error,
# fragment, output, other (not SQL) or unknown (SQL with an info string
# the convention does not have), and for "sql error XXXXX" the SQLSTATE.
# The info string is quoted in lower case, its words one space apart.
sub code_blocks
{
	my ($file) = @_;
	my ($blocks) = markdown_code_blocks(slurp_file($file));
	for my $block (@$blocks)
	{
		my ($lang, $rest) = map { lc } $block->{info} =~ /^([^`\s]*)\s*(.*)$/;
		# The role, "as=name" anywhere among the words; the rest is the kind
		my @words = split /\s+/, $rest;
		my @as = map { /^as=(.*)$/ ? $1 : () } @words;
		$rest = join(' ', grep { !/^as=/ } @words);
		$block->{as} = $as[0] if @as == 1 && $as[0] =~ /^[a-z_][a-z0-9_]*$/;
		$block->{bad_as} = join(' ', map { "as=$_" } @as) if @as && !defined $block->{as};
		$block->{kind} =
		    $lang eq 'output' ? 'output'
		  : $lang ne 'sql' ? 'other'
		  : $rest eq '' ? 'sql'
		  : $rest =~ /^fragment\b/ ? 'fragment'
		  : $rest =~ /^error(?:\s+([0-9A-Z]{5}))?$/i ? 'error'
		  : 'unknown';
		$block->{info} = join(' ', grep { $_ ne '' } $lang, $rest, map { "as=$_" } @as);
		$block->{sqlstate} = $block->{kind} eq 'error' && $rest =~ /^error\s+(\S{5})$/ ? uc $1 : undef;
	}
	return @$blocks;
}

# --- the pooler-safety checks ---------------------------------------------------------

# SQL with its comments and psql meta-commands blanked out, and the
# contents of its string literals too unless $keep_strings.  Each character
# keeps its place, so that what is found in the result can be quoted from
# the SQL.  Dollar-quoted bodies are kept as code: a function or DO block
# can set things too.  An opening delimiter becomes ";", as a body starts
# a statement; a closing one blanks.
sub strip_sql
{
	my ($sql, $keep_strings) = @_;
	my ($out, @dollars) = ('');
	my $n = length $sql;
	my $i = 0;
	my $blank = sub { return $_[0] =~ s/[^\n]/ /gr };
	while ($i < $n)
	{
		my $rest = substr($sql, $i);
		my $tok;
		if ($rest =~ /^--[^\n]*/ || $rest =~ /^\/\*.*?\*\//s)
		{
			$tok = $&;
			$out .= $blank->($tok);
		}
		elsif ($rest =~ /^(?:[eE]'(?:[^'\\]|\\.|'')*'|'(?:[^']|'')*')/s)
		{
			$tok = $&;
			$out .= $keep_strings ? $tok : "'" . $blank->(substr($tok, 1, -1)) . "'";
		}
		elsif ($rest =~ /^"(?:[^"]|"")*"/)
		{
			$tok = $&;
			$out .= $tok;
		}
		elsif ($rest =~ /^\$(?:[A-Za-z_]\w*)?\$/)
		{
			$tok = $&;
			if (@dollars && $dollars[-1] eq $tok)
			{
				pop @dollars;
				$out .= $blank->($tok);
			}
			else
			{
				push @dollars, $tok;
				$out .= ';' . $blank->(substr($tok, 1));
			}
		}
		elsif ($rest =~ /^\\[^\n]*/)
		{
			# a psql meta-command runs to the end of its line
			$tok = $&;
			$out .= $blank->($tok);
		}
		else
		{
			$tok = substr($sql, $i, 1);
			$out .= $tok;
		}
		$i += length $tok;
	}
	return $out;
}

# The arguments of a call whose "(" is at $start in $code, split at the
# top level; strings are whole in $code.
sub call_arguments
{
	my ($code, $start) = @_;
	my ($depth, $arg, @args) = (0, '');
	pos($code) = $start;
	while ($code =~ /\G('(?:[^']|'')*'|"(?:[^"]|"")*"|[(),]|[^'"(),]+)/gc)
	{
		my $tok = $1;
		if ($tok eq '(')
		{
			$depth++;
			next if $depth == 1;
		}
		elsif ($tok eq ')')
		{
			$depth--;
			if ($depth == 0)
			{
				push @args, $arg;
				return @args;
			}
		}
		elsif ($tok eq ',' && $depth == 1)
		{
			push @args, $arg;
			$arg = '';
			next;
		}
		$arg .= $tok;
	}
	return @args;
}

# What in the SQL text $sql changes a setting for the session: a list of
# short descriptions, empty if nothing does.
sub session_settings
{
	my ($sql) = @_;
	my @found;
	my $code = strip_sql($sql, 0);
	while ($code =~
		/(?:\A|;|\b(?:BEGIN|THEN|ELSE|LOOP)\b)\s*\K(SET\s+(?!LOCAL\b|CONSTRAINTS\b|TRANSACTION\b)[^;\n]*)/gi
	  )
	{
		(my $what = substr($sql, $-[1], $+[1] - $-[1])) =~ s/\s+/ /g;
		push @found, "a session-level $what";
	}
	my $with_strings = strip_sql($sql, 1);
	while ($with_strings =~ /\bset_config\s*(?=\()/gi)
	{
		my @args = call_arguments($with_strings, pos($with_strings));
		next unless @args >= 3;
		(my $is_local = lc $args[2]) =~ s/^\s+|\s+$//g;
		$is_local =~ s/::\s*(?:boolean|bool)$//;
		$is_local =~ s/^'(.*)'$/$1/;
		push @found, "set_config(..., $is_local) for the session"
		  if $is_local =~ /^(?:false|f|off|no|n|0)$/;
	}
	return @found;
}

# The lines of a consumer example (a program, with its SQL in strings)
# that set inbox.* for the session.
sub example_session_settings
{
	my ($file) = @_;
	open(my $fh, '<', $file) or die "cannot open $file: $!";
	my @found;
	while (my $line = <$fh>)
	{
		push @found, "line $.: $line"
		  if $line =~ /\bset_config\s*\((?:[^()]|\([^()]*\))*?,\s*['"]?(?:false|off|f)['"]?\s*\)/i
		  || $line =~ /\bSET\s+(?:SESSION\s+)?["'`]?inbox\./i
		  || $line =~ /-c\s*["']?inbox\./;
	}
	close $fh;
	return @found;
}

# --- running a page -------------------------------------------------------------------

# What a block is compared with: the lines without trailing spaces, and
# without blank lines at the ends.
sub normalise
{
	my ($text) = @_;
	my @lines = map { s/\s+$//r } split /\n/, $text, -1;
	shift @lines while @lines && $lines[0] eq '';
	pop @lines while @lines && $lines[-1] eq '';
	return join("\n", @lines);
}

# The same without psql's command tags, which never start with a space as
# the lines of a result do.
sub without_tags
{
	my ($text) = @_;
	return join("\n",
		grep { !/^[A-Z]+(?: [A-Z]+)*(?: \d+)*$/ } split /\n/, normalise($text));
}

# The last line of a block that is not blank nor a comment ends its
# statement (";"), or is a psql meta-command, or sends the buffer with \g.
# A block that leaves a statement open would swallow the next block.
sub ends_its_statement
{
	my ($text) = @_;
	my @lines = grep { /\S/ && !/^\s*--/ } split /\n/, $text;
	return 1 unless @lines;
	my $last = $lines[-1];
	$last =~ s/\s+--[^'"]*$//;
	return $last =~ /;\s*$/ || $last =~ /^\s*\\/ || $last =~ /\\g\w*(?:\s+\S+)*\s*$/;
}

my $node = InboxTest->node('docs', extension => 0);
my $psql = $node->installed_command('psql');
my $superuser = $node->safe_psql('postgres', 'SELECT current_user');
my $block_timeout = 180;

my @pages = ('README.md', map { s{^\Q$top\E/}{}r } sort glob("$top/docs/*.md"));
my $page_number = 0;

for my $page (@pages)
{
	$page_number++;
	my @blocks = code_blocks("$top/$page");

	# Number the sql blocks of the page, and tie each output block to the
	# run block right before it.
	my ($sql_number, $previous) = (0, undef);
	for my $block (@blocks)
	{
		if ($block->{unclosed})
		{
			fail("$page: the code block at line $block->{line} is closed");
		}
		if ($block->{bad_as})
		{
			fail("$page: the role \"$block->{bad_as}\" at line $block->{line} is one as=NAME, a plain role name");
		}
		if ($block->{kind} eq 'unknown')
		{
			fail("$page: the info string \"$block->{info}\" at line $block->{line} is sql, sql error [SQLSTATE] or sql fragment");
		}
		if ($block->{kind} =~ /^(?:sql|error|fragment|unknown)$/)
		{
			$block->{number} = ++$sql_number;
			$block->{name} = "$page, sql block $sql_number (line $block->{line})";
		}
		elsif ($block->{kind} eq 'output')
		{
			if ($previous && $block->{adjacent} && $previous->{kind} =~ /^(?:sql|error)$/
				&& !$previous->{expected})
			{
				$previous->{expected} = $block;
			}
			else
			{
				fail("$page: the output block at line $block->{line} follows a runnable sql block");
			}
		}
		$previous = $block;
	}
	my @run = grep { $_->{kind} eq 'sql' || $_->{kind} eq 'error' } @blocks;

	# Pooler safety, before anything runs
	for my $block (@run)
	{
		my @found = session_settings($block->{text});
		ok(!@found, "$block->{name}: changes no setting for the session")
		  or diag(join("\n", @found));
	}

	next unless @run;

	# A page that needs more than a database (a broker, the relay) names
	# the test that runs all of it, in a comment: "<!-- run by test/t/... -->"
	if (slurp_file("$top/$page") =~ /<!-- run by (test\/t\/\S+\.pl)\b/)
	{
		ok(-f "$top/$1", "$page: run by $1, which exists");
		next;
	}

	my $roles_before = $node->sql('SELECT string_agg(oid::text, \',\') FROM pg_roles');
	my $db = "doc_$page_number";
	$node->sql("CREATE DATABASE $db");

	# psql starts as the superuser, the owner
	my $role = 'owner';
	my ($in, $out, $err) = ('', '', '');
	my $timer = IPC::Run::timer($block_timeout);
	my $h = IPC::Run::start([ $psql, '-X', '-f', '-', '-d', $node->connstr($db) ],
		'<', \$in, '>', \$out, '2>', \$err, $timer);
	my $alive = 1;

	for my $block (@run)
	{
		my $name = $block->{name};
		my $must_fail = $block->{kind} eq 'error';
		if (!$alive)
		{
			fail("$name: " . ($must_fail ? 'fails' : 'runs') . ' (psql is gone)');
			next;
		}
		if (!ends_its_statement($block->{text}))
		{
			fail("$name: ends its last statement (with ; or a psql meta-command)");
			next;
		}
		if (!defined $block->{as})
		{
			fail("$name: names the role it runs as (as=NAME, or as=owner for the superuser)");
			next;
		}
		if ($block->{as} ne $role)
		{
			my $user = $block->{as} eq 'owner' ? $superuser : $block->{as};
			if ($block->{as} ne 'owner')
			{
				my $what = $node->safe_psql('postgres',
					"SELECT CASE WHEN rolsuper THEN 'superuser' WHEN NOT rolcanlogin THEN 'nologin' ELSE 'ok' END"
					  . " FROM pg_roles WHERE rolname = '$user'");
				if ($what ne 'ok')
				{
					fail("$name: runs as $user, a role that "
						  . ($what eq '' ? 'does not exist' : $what eq 'nologin' ? 'cannot log in' : 'is a superuser'));
					next;
				}
			}
			# Quietly: psql would print "You are now connected ..."
			$in .= "\\set QUIET on\n\\connect - $user\n\\unset QUIET\n";
			$role = $block->{as};
		}

		my $marker = "--- end of $name ---";
		$in .= "\\set LAST_ERROR_SQLSTATE 00000\n"
		  . $block->{text}
		  . "\n\\echo '$marker' :LAST_ERROR_SQLSTATE\n\\warn '$marker'\n";
		$timer->start($block_timeout);
		my $finished = eval {
			$h->pump
			  until ($out =~ /^\Q$marker\E (\S+)\n/m && $err =~ /^\Q$marker\E\n/m)
			  || !$h->pumpable;
			1;
		};
		my ($stdout, $sqlstate, $stderr);
		if ($out =~ /^(.*?)^\Q$marker\E (\S+)\n/ms)
		{
			($stdout, $sqlstate) = ($1, $2);
			$out = substr($out, $+[0]);
		}
		if ($err =~ /^(.*?)^\Q$marker\E\n/ms)
		{
			$stderr = $1;
			$err = substr($err, $+[0]);
		}
		if (!$finished || !defined $stdout || !defined $stderr)
		{
			fail("$name: " . ($must_fail ? 'fails' : 'runs') . ' (it did not finish)');
			diag("psql: " . ($@ || 'ended') . "\nstdout:\n$out\nstderr:\n$err");
			$alive = 0;
			next;
		}

		my $failed = $sqlstate ne '00000'
		  || $stderr =~ /^psql:[^\n]*?:\d+: (?:ERROR|FATAL|PANIC|error):/m;
		if ($must_fail)
		{
			ok($failed, "$name: fails, as its info string says")
			  or diag("stdout:\n$stdout");
			note("$name failed with:\n$stderr");
			if ($failed && defined $block->{sqlstate})
			{
				is($sqlstate, $block->{sqlstate}, "$name: fails with SQLSTATE $block->{sqlstate}");
			}
		}
		else
		{
			ok(!$failed, "$name: runs")
			  or diag("stderr:\n$stderr");
		}

		if (my $expected = $block->{expected})
		{
			my $actual = $stdout;
			if ($must_fail)
			{
				(my $messages = $stderr) =~ s/^psql:[^\n]*?:\d+: //mg;
				$actual .= $messages;
			}
			my $want = normalise($expected->{text});
			my $got = normalise($actual) eq $want ? normalise($actual) : without_tags($actual);
			is($got, $want, "$name: prints the output block at line $expected->{line}");
		}
	}

	if ($alive)
	{
		$in .= "\\q\n";
		eval { $h->finish; 1 } or diag("psql: $@");
	}
	else
	{
		$h->kill_kill;
	}

	# The page's database and roles go; the next page starts clean.
	$node->sql("DROP DATABASE $db WITH (FORCE)");
	my @roles = split /\n/,
	  $node->sql("SELECT quote_ident(rolname) FROM pg_roles WHERE oid <> ALL ('{$roles_before}'::oid[]) ORDER BY 1");
	my $dropped = 1;
	for my $role (@roles)
	{
		my ($ret, $o, $e) = $node->psql('postgres', "DROP ROLE $role");
		if ($ret != 0)
		{
			$dropped = 0;
			diag("DROP ROLE $role: $e");
		}
	}
	ok($dropped, "$page: its database and its roles (" . (join(', ', @roles) || 'none') . ') are dropped');
}

# --- the consumer examples -------------------------------------------------------------

my @examples;
File::Find::find(
	{
		wanted => sub {
			if (-d $_ && /^(?:node_modules|__pycache__|target|vendor|build)$/)
			{
				$File::Find::prune = 1;
				return;
			}
			push @examples, $File::Find::name if -f $_ && /\.(?:py|js|go|java)$/;
		},
		no_chdir => 0,
	},
	"$top/examples");
for my $file (sort @examples)
{
	(my $name = $file) =~ s{^\Q$top\E/}{};
	my @found = example_session_settings($file);
	ok(!@found, "$name: sets no inbox.* setting for the session")
	  or diag(join('', @found));
}

$node->stop;
done_testing();
