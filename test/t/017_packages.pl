# test/t/017_packages.pl
#
# The packages (docs/packaging.md), built from a git repository made here
# out of a copy of the tree, so that the tree itself is never written to:
#   - "make dist" writes inbox-X.Y.Z.zip holding exactly HEAD's files, and
#     test/tools/pgxn-check.pl finds its META.json valid per the PGXN Meta Spec;
#     commits that break META.json (a version that is not semantic, a
#     missing required key, a license the spec does not name, an unknown
#     prerequisite phase, a provided file that is not there, a version the
#     control file contradicts) each make "make dist" fail and leave no
#     zip behind;
#   - "make deb", run by this unprivileged user, builds
#     postgresql-NN-inbox with pg_buildext and debhelper; the package is
#     unpacked with dpkg -x over a copy of PostgreSQL NN from which the
#     machine's own inbox files were removed, and a cluster of that copy
#     loads the library from the copy (its maps say so), creates the
#     extension at the package's version, and claims.
use strict;
use warnings;
use Cwd qw(abs_path);
use FindBin;
use IPC::Run qw(run);
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $top = abs_path("$FindBin::RealBin/../..");

sub have { my ($cmd) = @_; return !system("command -v $cmd >/dev/null 2>&1"); }

plan skip_all => 'git is not installed: make dist archives HEAD (test/tools/ensure-deps.sh installs it)'
  unless have('git');

# Run a command; returns (exit status, stdout and stderr together).
sub cmd
{
	my @cmd = @_;
	my $out = '';
	run(\@cmd, '>', \$out, '2>&1');
	return ($? >> 8, $out);
}

sub slurp { my ($f) = @_; return PostgreSQL::Test::Utils::slurp_file($f); }

sub spew
{
	my ($f, $text) = @_;
	open(my $fh, '>', $f) or die "$f: $!";
	print $fh $text;
	close $fh or die "$f: $!";
}

# Absolute: make -C and the scripts change directory (tempdir is relative
# to the current directory when TESTDIR is not set).
my $tmp = abs_path(PostgreSQL::Test::Utils::tempdir());
my $src = "$tmp/src";
my $out = "$tmp/out";

# The files git would see in the tree (the copy test/tools/run.sh makes has no
# .git, and what it ignores is test output), committed in a repository of
# our own: "git add" reads the tree and writes only into that repository,
# then "reset --hard" writes the committed files out beside it.
my @git = ('git', '-C', $src, '-c', 'user.name=inbox test', '-c', 'user.email=test@invalid',
	'-c', 'init.defaultBranch=main', '-c', 'commit.gpgsign=false', '-c', 'core.quotePath=false');
sub git { my @args = @_; my ($rc, $o) = cmd(@git, @args); die "git @args: $o" if $rc; return $o; }
mkdir $src or die "$src: $!";
git('init', '-q');
git("--work-tree=$top", 'add', '-A');
git('commit', '-q', '-m', 'snapshot');
git('reset', '-q', '--hard');
my @tracked = sort split /\n/, git('ls-files');

my ($version) = slurp("$src/inbox.control") =~ /^default_version = '([^']+)'/m;
ok(defined $version, "inbox.control gives the version: $version");

# --- make dist ----------------------------------------------------------------------------

my $zip = "$out/inbox-$version.zip";
my ($rc, $log) = cmd('make', '-C', $src, '-s', 'dist', "DISTDIR=$out");
is($rc, 0, 'make dist succeeds') or diag($log);
like($log, qr/pgxn-check: \Q$zip\E: valid/, 'and finds META.json valid');
ok(-f $zip, "it wrote $zip");

my @members;
{
	my ($zrc, $zout) = cmd('perl', '-MIO::Uncompress::Unzip=$UnzipError', '-e', q{
		my $u = IO::Uncompress::Unzip->new($ARGV[0]) or die $UnzipError;
		do { print $u->getHeaderInfo->{Name}, "\n" } while $u->nextStream > 0;
	}, $zip);
	@members = $zrc ? () : grep { !m{/$} } split /\n/, $zout;
}
is_deeply([ sort @members ], [ map { "inbox-$version/$_" } @tracked ],
	"the zip holds HEAD's files, all under inbox-$version/");

my ($prc, $plog) = cmd('perl', "$src/test/tools/pgxn-check.pl", $zip);
is($prc, 0, 'test/tools/pgxn-check.pl accepts it on its own too') or diag($plog);

# Each breakage committed makes make dist fail, say why and leave no zip.
# META.json is changed through its parsed form, so that a reformatted
# file breaks no pattern here.
sub meta_with
{
	my ($change) = @_;
	my $json = JSON::PP->new->pretty->canonical;
	my $m = $json->decode(slurp("$src/META.json"));
	$change->($m);
	return $json->encode($m);
}
my $control = slurp("$src/inbox.control");
my @broken = (
	[ 'a version that is not semantic',
		'META.json', meta_with(sub { $_[0]{version} = '1.0' }),
		qr/version "1\.0" is not a semantic version/ ],
	[ 'a missing required key',
		'META.json', meta_with(sub { delete $_[0]{license} }),
		qr/required key "license" missing/ ],
	[ 'a license the spec does not name',
		'META.json', meta_with(sub { $_[0]{license} = 'PostgreSQL License' }),
		qr/license "PostgreSQL License" is not one the spec names/ ],
	[ 'a prerequisite phase the spec does not know',
		'META.json', meta_with(sub { $_[0]{prereqs}{run} = delete $_[0]{prereqs}{runtime} }),
		qr/prereqs\.run: unknown phase/ ],
	[ 'a provided file that is not in the zip',
		'META.json', meta_with(sub { $_[0]{provides}{inbox}{file} = "sql/inbox--$version.sql" }),
		qr{provides\.inbox: file sql/inbox--\Q$version\E\.sql is not in the zip} ],
	[ 'a control file that says another version',
		'inbox.control', $control =~ s/^default_version = '[^']+'/default_version = '9.9.9'/mr,
		qr/inbox\.control says default_version 9\.9\.9, META\.json provides\.inbox\.version \Q$version\E/ ],
);
for my $b (@broken)
{
	my ($what, $file, $text, $expect) = @$b;
	my $orig = slurp("$src/$file");
	die "the breakage '$what' changed nothing" if $text eq $orig;
	spew("$src/$file", $text);
	git('commit', '-q', '-a', '-m', "break: $what");
	unlink $zip;
	my ($brc, $blog) = cmd('make', '-C', $src, '-s', 'dist', "DISTDIR=$out");
	isnt($brc, 0, "make dist fails on $what");
	like($blog, $expect, '  and says why') or diag($blog);
	my @zips = glob("$out/*.zip");
	is_deeply(\@zips, [], '  and leaves no zip');
	spew("$src/$file", $orig);
	git('commit', '-q', '-a', '-m', "restore: $what");
}

# --- make deb -----------------------------------------------------------------------------

# The PostgreSQL under test, if it is a Debian package's, is the one the
# package is installed into.
my ($major) = (cmd('pg_config', '--version'))[1] =~ /PostgreSQL (\d+)/
  or die 'pg_config --version gives no major version';
my $system = "/usr/lib/postgresql/$major";
my $share = "/usr/share/postgresql/$major";
my @missing = grep { !have($_) } qw(pg_buildext dpkg-buildpackage dh dpkg-deb);
push @missing, 'the pgxs_loop addon of postgresql-server-dev-all'
  unless -f '/usr/share/perl5/Debian/Debhelper/Sequence/pgxs_loop.pm';
push @missing, "postgresql-server-dev-$major (no $system/bin/pg_config)"
  unless -x "$system/bin/pg_config";

SKIP:
{
	skip 'packaging tools absent: ' . join(', ', @missing) . ' (test/tools/ensure-deps.sh installs them)', 1
	  if @missing;

	# Only for the version under test, whatever else is installed
	($rc, $log) = cmd('env', "PG_SUPPORTED_VERSIONS=$major", 'make', '-C', $src, '-s', 'deb',
		"DISTDIR=$out");
	is($rc, 0, "make deb succeeds as OS user " . getpwuid($>)) or diag($log);
	is(git('status', '--porcelain'), '', 'and leaves the tree as it was');

	my $deb = "$out/postgresql-$major-inbox_${version}_" . `dpkg --print-architecture`;
	chomp $deb;
	$deb .= '.deb';
	skip "no package to install", 1 unless ok(-f $deb, "it wrote $deb");

	my %field = map { /^(\S+): (.*)$/ ? ($1, $2) : () } split /\n/, (cmd('dpkg-deb', '-f', $deb))[1];
	is($field{Package}, "postgresql-$major-inbox", 'the package is named after the PostgreSQL version');
	is($field{Version}, $version, 'its version is inbox.control\'s default_version');
	like($field{Depends}, qr/(?:^|, )postgresql-$major\b/, "it depends on postgresql-$major");

	# What the package holds: the library and every script make install
	# puts beside the control file.
	my @files = map { m{ \./(\S+)$} ? $1 : () } split /\n/, (cmd('dpkg-deb', '-c', $deb))[1];
	my %in_deb = map { $_ => 1 } @files;
	my @scripts = ("inbox--$version.sql", map { s{.*/}{}r }
		  grep { m{^sql/inbox--[^/]+\.sql$} && !m{^sql/inbox--\Q$version\E\.sql$} } @tracked);
	my @want = ("usr/lib/postgresql/$major/lib/inbox.so",
		map { "usr/share/postgresql/$major/extension/$_" } 'inbox.control', @scripts);
	is_deeply([ grep { !$in_deb{$_} } @want ], [],
		'it holds the library, the control file and ' . scalar(@scripts) . ' scripts');
	ok(!(grep { /inbox-relay/ } @files), 'but not the relay, which is a package of its own');

	# The relay's package: the program, its unit, its libraries
	(my $relay_deb = $deb) =~ s{postgresql-$major-inbox_}{inbox-relay_};
	ok(-f $relay_deb, "it wrote $relay_deb too");
	my %relay_field = map { /^(\S+): (.*)$/ ? ($1, $2) : () } split /\n/, (cmd('dpkg-deb', '-f', $relay_deb))[1];
	my %in_relay = map { m{ \./(\S+)$} ? ($1 => 1) : () } split /\n/, (cmd('dpkg-deb', '-c', $relay_deb))[1];
	ok($in_relay{'usr/bin/inbox-relay'}
		  && ($in_relay{'lib/systemd/system/inbox-relay@.service'} || $in_relay{'usr/lib/systemd/system/inbox-relay@.service'}),
		'the relay package holds the program and its systemd unit')
	  or diag(join "\n", sort keys %in_relay);
	like($relay_field{Depends} // '', qr/librabbitmq.*libcurl|libcurl.*librabbitmq/, 'and depends on its libraries');

	# A copy of PostgreSQL, in the layout of the package's paths (the
	# postgres and pg_config binaries find their share directory relative
	# to their own), without the inbox files of the machine's own install.
	my $root = "$tmp/root";
	($rc, $log) = cmd('bash', '-c', 'set -e; mkdir -p "$1$(dirname "$2")" "$1$(dirname "$3")";'
		  . ' cp -a "$2" "$1$2"; cp -a "$3" "$1$3";'
		  . ' rm -rf "$1$2"/lib/inbox.so "$1$2"/lib/bitcode/inbox "$1$2"/lib/bitcode/inbox.index.bc "$1$3"/extension/inbox[.-]*',
		'-', $root, $system, $share);
	is($rc, 0, "PostgreSQL $major copied into a private root") or diag($log);
	my $bindir = "$root$system/bin";
	is((cmd("$bindir/pg_config", '--pkglibdir'))[1], "$root$system/lib\n", 'whose pg_config finds its own lib directory');
	is((cmd("$bindir/pg_config", '--sharedir'))[1], "$root$share\n", '  and its own share directory');
	is_deeply([ glob("$root$system/lib/inbox* $root$share/extension/inbox*") ], [],
		'the copy holds no inbox file before the package is unpacked');

	($rc, $log) = cmd('dpkg', '-x', $deb, $root);
	is($rc, 0, 'dpkg -x unpacks the package over it') or diag($log);
	ok(-f "$root$system/lib/inbox.so", 'the library is now in the copy');

	my $node = PostgreSQL::Test::Cluster->new('deb', install_path => "$root$system");
	$node->init;
	$node->append_conf('postgresql.conf', "shared_preload_libraries = 'inbox'\n");
	$node->start;

	# The postmaster preloaded the library: its memory maps say from where.
	my ($pid) = slurp($node->data_dir . '/postmaster.pid') =~ /^(\d+)/;
	my @maps = grep { m{/inbox\.so$} } map { (split ' ', $_, 6)[5] // () } split /\n/, slurp("/proc/$pid/maps");
	my %mapped = map { $_ => 1 } @maps;
	is_deeply([ sort keys %mapped ], ["$root$system/lib/inbox.so"],
		'the server runs the library from the package, in the copy');
	is(readlink("/proc/$pid/exe"), "$root$system/bin/postgres", 'and is the copy\'s postgres');
	is($node->safe_psql('postgres', q{SELECT setting FROM pg_config WHERE name = 'SHAREDIR'}),
		"$root$share", 'which reads extensions from the copy\'s share directory');

	$node->safe_psql('postgres', 'CREATE EXTENSION inbox');
	is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'inbox'}),
		$version, "CREATE EXTENSION inbox installs version $version, the package's");
	is($node->safe_psql('postgres', q{SELECT inbox_claim('packages', 'm-1')}), 't', 'a first claim is true');
	is($node->safe_psql('postgres', q{SELECT inbox_claim('packages', 'm-1')}), 'f', 'its duplicate is false');
	$node->stop;
}

done_testing();
