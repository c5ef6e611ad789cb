#!/usr/bin/perl
# test/tools/pgxn-check.pl ZIP - check a PGXN release zip before it is
# published: its META.json against the PGXN Meta Spec 1.0.0
# (https://pgxn.org/meta/spec.txt), and the zip against its META.json and
# inbox.control.  "make dist" runs it on the zip it made, and so does
# test/t/017_packages.pl.  Neither Debian nor npm packages a validator of
# that spec (the reference one is PGXN::Meta::Validator, on CPAN only), so
# the rules are written out here.  Core Perl modules only.
#
# Prints one line per problem and exits 1 if there is any; prints
# "pgxn-check: ZIP: valid" and exits 0 otherwise.
use strict;
use warnings;
use File::Basename qw(basename);
use IO::Uncompress::Unzip qw($UnzipError);
use JSON::PP;

my $zip = shift or die "usage: test/tools/pgxn-check.pl ZIP\n";
my @problems;
sub problem { push @problems, join('', @_); }

# --- the zip's members ------------------------------------------------------------------

my %member;    # name => content (directories have none)
{
	my $u = IO::Uncompress::Unzip->new($zip)
	  or die "pgxn-check: cannot read $zip: $UnzipError\n";
	my $status = 1;
	while ($status > 0)
	{
		my $name = $u->getHeaderInfo->{Name};
		my ($content, $buf) = ('');
		$content .= $buf while ($status = $u->read($buf)) > 0;
		die "pgxn-check: $zip: $name: $UnzipError\n" if $status < 0;
		$member{$name} = $content;
		$status = $u->nextStream;
	}
	die "pgxn-check: $zip: $UnzipError\n" if $status < 0;
}

# Everything sits under one directory, NAME-VERSION/, as PGXN expects.
my ($prefix) = (sort keys %member)[0] =~ m{^([^/]+/)};
$prefix //= '';
for my $name (sort keys %member)
{
	problem("$name: outside the top directory $prefix") if index($name, $prefix) != 0;
}
my %file = map { substr($_, length $prefix) => $member{$_} }
  grep { !m{/$} && index($_, $prefix) == 0 } keys %member;

# --- META.json against the spec ---------------------------------------------------------

# The spec's value types
my $version_re = qr/^(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)(?:-?[A-Za-z][0-9A-Za-z-]*)?$/;
sub is_string  { my ($v) = @_; return defined $v && !ref $v && length $v; }
sub is_term    { my ($v) = @_; return is_string($v) && length $v >= 2 && $v !~ m{[\s/\\[:cntrl:]]}; }
sub is_tag     { my ($v) = @_; return is_string($v) && length $v <= 255 && $v !~ m{[/\\[:cntrl:]]}; }
sub is_version { my ($v) = @_; return is_string($v) && $v =~ $version_re; }
sub is_map     { return ref $_[0] eq 'HASH'; }
sub is_list    { return ref $_[0] eq 'ARRAY'; }

# A version range: 0 (any), a version (at least it), or comparisons
# joined by commas: ">= 1.2.0, != 1.5.0, < 2.0.0".
sub is_range
{
	my ($v) = @_;
	return 0 unless defined $v && !ref $v;
	return 1 if $v eq '0';
	for my $part (split /\s*,\s*/, $v, -1)
	{
		my ($op, $ver) = $part =~ /^\s*(==|!=|>=|<=|>|<)?\s*(\S+)\s*$/ or return 0;
		return 0 unless is_version($ver);
	}
	return 1;
}

my %license = map { $_ => 1 } qw(agpl_3 apache_1_1 apache_2_0 artistic_1
  artistic_2 bsd freebsd gfdl_1_2 gfdl_1_3 gpl_1 gpl_2 gpl_3 lgpl_2_1 lgpl_3_0
  mit mozilla_1_0 mozilla_1_1 openssl perl_5 postgresql qpl_1_0 ssleay sun
  zlib open_source restricted unrestricted unknown);
my %phase = map { $_ => 1 } qw(configure build runtime test develop);
my %relation = map { $_ => 1 } qw(requires recommends suggests conflicts);
my %status = map { $_ => 1 } qw(stable testing unstable);
my %required = map { $_ => 1 } qw(abstract license maintainer meta-spec name provides version);
my %optional = map { $_ => 1 } qw(description generated_by no_index prereqs release_status resources tags);

# Keys beginning with x_ or X_ are custom and allowed anywhere.
sub custom { return $_[0] =~ /^x_/i; }

sub check_keys
{
	my ($where, $map, $allowed) = @_;
	for my $k (sort keys %$map)
	{
		problem("$where: unknown key \"$k\"") unless $allowed->{$k} || custom($k);
	}
}

my $meta;
if (!defined $file{'META.json'})
{
	problem('META.json: not in the top directory of the zip');
}
elsif (!eval { $meta = JSON::PP->new->utf8->decode($file{'META.json'}); 1 })
{
	(my $err = $@) =~ s/\s+$//;
	problem("META.json: not valid JSON: $err");
}
elsif (!is_map($meta))
{
	problem('META.json: not a JSON object');
	undef $meta;
}

if ($meta)
{
	for my $k (sort keys %required)
	{
		problem("META.json: required key \"$k\" missing") unless exists $meta->{$k};
	}
	check_keys('META.json', $meta, { %required, %optional });

	problem('META.json: name must be a term (2 or more characters, no space or slash)')
	  if exists $meta->{name} && !is_term($meta->{name});
	problem("META.json: version \"", $meta->{version} // 'null', "\" is not a semantic version (X.Y.Z)")
	  if exists $meta->{version} && !is_version($meta->{version});
	for my $k (qw(abstract description generated_by))
	{
		problem("META.json: $k must be a non-empty string")
		  if exists $meta->{$k} && !is_string($meta->{$k});
	}

	my $m = $meta->{maintainer};
	problem('META.json: maintainer must be a string or a non-empty list of strings')
	  if exists $meta->{maintainer}
	  && !(is_string($m) || (is_list($m) && @$m && !grep { !is_string($_) } @$m));

	my $l = $meta->{license};
	if (exists $meta->{license})
	{
		if (is_string($l) || is_list($l))
		{
			my @names = is_list($l) ? @$l : ($l);
			problem('META.json: license list is empty') unless @names;
			problem("META.json: license \"", $_ // 'null', "\" is not one the spec names")
			  for grep { !defined $_ || ref $_ || !$license{$_} } @names;
		}
		elsif (is_map($l))
		{
			problem('META.json: license map is empty') unless %$l;
			problem("META.json: license \"$_\" must map to a URL")
			  for grep { !is_string($l->{$_}) } sort keys %$l;
		}
		else
		{
			problem('META.json: license must be a string, a list or a map');
		}
	}

	my $ms = $meta->{'meta-spec'};
	if (exists $meta->{'meta-spec'})
	{
		if (!is_map($ms))
		{
			problem('META.json: meta-spec must be a map');
		}
		else
		{
			check_keys('META.json: meta-spec', $ms, { version => 1, url => 1 });
			problem("META.json: meta-spec version must be \"1.0.0\", the spec checked here")
			  unless ($ms->{version} // '') eq '1.0.0';
			problem('META.json: meta-spec url must be a string')
			  if exists $ms->{url} && !is_string($ms->{url});
		}
	}

	my $p = $meta->{provides};
	if (exists $meta->{provides})
	{
		if (!is_map($p) || !%$p)
		{
			problem('META.json: provides must be a non-empty map');
		}
		else
		{
			for my $ext (sort keys %$p)
			{
				my $e = $p->{$ext};
				my $w = "META.json: provides.$ext";
				problem("$w: the name is not a term") unless is_term($ext);
				if (!is_map($e))
				{
					problem("$w: must be a map");
					next;
				}
				check_keys($w, $e, { map { $_ => 1 } qw(file version abstract docfile) });
				problem("$w: version \"", $e->{version} // 'null', "\" is not a semantic version")
				  unless is_version($e->{version});
				for my $k (qw(abstract))
				{
					problem("$w: $k must be a non-empty string")
					  if exists $e->{$k} && !is_string($e->{$k});
				}
				for my $k (qw(file docfile))
				{
					next if $k eq 'docfile' && !exists $e->{$k};
					if (!is_string($e->{$k}))
					{
						problem("$w: $k must be a path");
					}
					elsif (!exists $file{ $e->{$k} })
					{
						problem("$w: $k $e->{$k} is not in the zip");
					}
				}
			}
		}
	}

	my $pr = $meta->{prereqs};
	if (exists $meta->{prereqs})
	{
		if (!is_map($pr))
		{
			problem('META.json: prereqs must be a map');
		}
		else
		{
			for my $ph (sort keys %$pr)
			{
				my $w = "META.json: prereqs.$ph";
				next if custom($ph);
				problem("$w: unknown phase") unless $phase{$ph};
				if (!is_map($pr->{$ph}))
				{
					problem("$w: must be a map");
					next;
				}
				for my $rel (sort keys %{ $pr->{$ph} })
				{
					next if custom($rel);
					problem("$w.$rel: unknown relation") unless $relation{$rel};
					my $deps = $pr->{$ph}{$rel};
					if (!is_map($deps))
					{
						problem("$w.$rel: must be a map");
						next;
					}
					for my $d (sort keys %$deps)
					{
						problem("$w.$rel.$d: the name is not a term") unless is_term($d);
						problem("$w.$rel.$d: \"", $deps->{$d} // 'null', "\" is not a version range")
						  unless is_range($deps->{$d});
					}
				}
			}
		}
	}

	problem("META.json: release_status must be stable, testing or unstable")
	  if exists $meta->{release_status}
	  && !(defined $meta->{release_status} && !ref $meta->{release_status} && $status{ $meta->{release_status} });

	if (exists $meta->{tags})
	{
		my $t = $meta->{tags};
		if (!is_list($t))
		{
			problem('META.json: tags must be a list');
		}
		else
		{
			problem("META.json: tag \"", $_ // 'null', "\" is not a tag (1 to 255 characters, no slash)")
			  for grep { !is_tag($_) } @$t;
		}
	}

	if (exists $meta->{no_index})
	{
		my $n = $meta->{no_index};
		if (!is_map($n))
		{
			problem('META.json: no_index must be a map');
		}
		else
		{
			check_keys('META.json: no_index', $n, { file => 1, directory => 1 });
			for my $k (grep { !custom($_) } sort keys %$n)
			{
				my $v = $n->{$k};
				problem("META.json: no_index.$k must be a path or a list of paths")
				  unless is_string($v) || (is_list($v) && !grep { !is_string($_) } @$v);
			}
		}
	}

	if (exists $meta->{resources})
	{
		my $r = $meta->{resources};
		if (!is_map($r))
		{
			problem('META.json: resources must be a map');
		}
		else
		{
			check_keys('META.json: resources', $r,
				{ homepage => 1, bugtracker => 1, repository => 1 });
			problem('META.json: resources.homepage must be a URL')
			  if exists $r->{homepage} && !is_string($r->{homepage});
			for my $k (qw(bugtracker repository))
			{
				next unless exists $r->{$k};
				my %keys = $k eq 'bugtracker' ? (web => 1, mailto => 1) : (url => 1, web => 1, type => 1);
				if (!is_map($r->{$k}) || !%{ $r->{$k} })
				{
					problem("META.json: resources.$k must be a non-empty map");
					next;
				}
				check_keys("META.json: resources.$k", $r->{$k}, \%keys);
				problem("META.json: resources.$k.$_ must be a string")
				  for grep { !is_string($r->{$k}{$_}) } sort keys %{ $r->{$k} };
			}
		}
	}
}

# --- the zip against META.json and inbox.control ------------------------------------------

if ($meta && is_string($meta->{name}) && is_string($meta->{version}))
{
	my $dist = "$meta->{name}-$meta->{version}";
	problem("zip: the top directory is $prefix, META.json says $dist/")
	  unless $prefix eq "$dist/";
	problem("zip: named ", basename($zip), ", META.json says $dist.zip")
	  unless basename($zip) eq "$dist.zip";
}

# Every extension this zip provides has its control file, whose
# default_version is the version META.json gives it; the release's own
# version is that of the extension of the same name.
if ($meta && is_map($meta->{provides}))
{
	for my $ext (sort keys %{ $meta->{provides} })
	{
		my $control = $file{"$ext.control"};
		if (!defined $control)
		{
			problem("zip: $ext.control, for provides.$ext, is missing");
			next;
		}
		my ($default) = $control =~ /^\s*default_version\s*=\s*'([^']*)'/m;
		my $e = $meta->{provides}{$ext};
		problem("zip: $ext.control has no default_version") unless defined $default;
		next unless defined $default && is_map($e);
		problem("zip: $ext.control says default_version $default, META.json provides.$ext.version ",
			$e->{version} // 'null')
		  unless $default eq ($e->{version} // '');
		problem("zip: $ext.control says default_version $default, META.json version ",
			$meta->{version} // 'null')
		  if $ext eq ($meta->{name} // '') && $default ne ($meta->{version} // '');
	}
}

# What a build needs is there: the Makefile, and the C source of every
# object it lists.
if (defined $file{Makefile})
{
	(my $mk = $file{Makefile}) =~ s/\\\n/ /g;
	my ($objs) = $mk =~ /^OBJS\s*=\s*(.*)$/m;
	for my $o (split ' ', $objs // '')
	{
		(my $c = $o) =~ s/\.o$/.c/;
		problem("zip: $c, for $o in the Makefile's OBJS, is missing") unless exists $file{$c};
	}
}
else
{
	problem('zip: Makefile is missing');
}
for my $f (qw(LICENSE README.md))
{
	problem("zip: $f is missing") unless exists $file{$f};
}

# No build products, test output or earlier releases
for my $f (sort keys %file)
{
	problem("zip: $f is a build product or test output")
	  if $f =~ /\.(?:o|so|bc|a|deb|zip)$/
	  || $f =~ m{^(?:results|output_iso|tmp_check|tmp_check_iso|tmp_regress|log|dist)/}
	  || $f =~ m{^regression\.(?:diffs|out)$}
	  || ($meta && is_string($meta->{name}) && is_string($meta->{version})
		&& $f eq "sql/$meta->{name}--$meta->{version}.sql");    # the build makes it from sql/inbox.sql
}

if (@problems)
{
	print "pgxn-check: $zip: $_\n" for @problems;
	exit 1;
}
print "pgxn-check: $zip: valid\n";
