# test/t/021_layers.pl
#
# The layout of the C sources (src/README.md): test/tools/layers.pl
# passes on src/, and fails on a copy broken each way it guards against:
# an include that runs up a layer, an extern declared in a .c file, a
# file with no place in the layer map, and a .c file over 850 lines.
# Likewise relay/ (relay/README.md): a transport includes relay.h only,
# never daemon.h, and no .c file passes 700 lines.
# Also: src/README.md's map names the file of every C entry point.
use strict;
use warnings;

use File::Copy qw(copy);
use File::Temp qw(tempdir);
use FindBin;
use Test::More;

my $top = "$FindBin::RealBin/../..";
my $check = "$top/test/tools/layers.pl";

# Run the check on dir: its exit status and everything it printed
sub layers
{
	my ($dir) = @_;
	my $out = `perl "$check" "$dir" 2>&1`;
	return ($? >> 8, $out);
}

# A fresh copy of src/ (or of $tree), with edit applied to it
sub broken_copy
{
	my ($edit, $tree) = @_;
	$tree //= 'src';
	my $dir = tempdir(CLEANUP => 1);
	opendir(my $dh, "$top/$tree") or die "$tree: $!";
	for my $f (grep { /\.[ch]$/ } readdir($dh))
	{
		copy("$top/$tree/$f", "$dir/$f") or die "copy $f: $!";
	}
	closedir($dh);
	$edit->($dir);
	return $dir;
}

sub append_to
{
	my ($file, $text) = @_;
	open(my $fh, '>>', $file) or die "$file: $!";
	print $fh $text;
	close($fh);
}

my ($rc, $out) = layers("$top/src");
is($rc, 0, 'the sources pass the layer check') or diag($out);
like($out, qr/all downward/, 'the check reports its summary');

# spi.c is in the base layer; deferred.h belongs to a feature
($rc, $out) = layers(broken_copy(sub { append_to("$_[0]/spi.c", "#include \"deferred.h\"\n") }));
is($rc, 1, 'an include that runs up a layer fails');
like($out, qr/spi\.c:\d+: includes deferred\.h, of deferred \(features\), above spi \(base\)/,
	'and the message names the file, the header and both layers');

($rc, $out) = layers(broken_copy(sub { append_to("$_[0]/keys.c", "extern void inbox_take_1_0(void);\n") }));
is($rc, 1, 'an extern declared in a .c file fails');
like($out, qr/keys\.c:\d+: declares an extern/, 'and the message names it');

($rc, $out) = layers(broken_copy(sub { append_to("$_[0]/unmapped.c", "/* new */\n") }));
is($rc, 1, 'a file without a place in the layer map fails');
like($out, qr/unmapped\.c: not in the layer map/, 'and the message says so');

($rc, $out) = layers(broken_copy(sub { append_to("$_[0]/claim.c", "/* padding */\n" x 200) }));
is($rc, 1, 'a .c file over 850 lines fails');
like($out, qr/claim\.c: \d+ lines, more than 850/, 'and the message gives its length');

# The relay: a transport includes relay.h only, and no .c file passes 700
# lines
($rc, $out) = layers("$top/relay");
is($rc, 0, 'the relay passes the layer check') or diag($out);
($rc, $out) = layers(broken_copy(sub { append_to("$_[0]/webhook.c", "#include \"daemon.h\"\n") }, 'relay'));
is($rc, 1, 'a transport that includes daemon.h fails');
like($out, qr/webhook\.c:\d+: includes daemon\.h, of daemon \(a child's loop\), above webhook \(transports\)/,
	'and the message names the transport and the header');
($rc, $out) = layers(broken_copy(sub { append_to("$_[0]/batch.c", "#include \"daemon.h\"\n") }, 'relay'));
is($rc, 0, 'a module of the loop may include daemon.h') or diag($out);
($rc, $out) = layers(broken_copy(sub { append_to("$_[0]/inbox-relay.c", "/* padding */\n" x 200) }, 'relay'));
is($rc, 1, 'a relay .c file over 700 lines fails');
like($out, qr/inbox-relay\.c: \d+ lines, more than 700/, 'and the message gives its length');

# src/README.md maps every SQL-callable C symbol to its file
my $readme = do { local $/; open(my $fh, '<', "$top/src/README.md") or die $!; <$fh> };
for my $file (sort glob("$top/src/*.c"))
{
	my $text = do { local $/; open(my $fh, '<', $file) or die $!; <$fh> };
	(my $name = $file) =~ s{.*/}{};
	for my $symbol ($text =~ /PG_FUNCTION_INFO_V1\((\w+)\)/g)
	{
		ok($readme =~ /`\Q$symbol\E`[^\n]*`\Q$name\E`/,
			"src/README.md maps $symbol to $name");
	}
}

done_testing();
