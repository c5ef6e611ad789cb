#!/usr/bin/perl
# test/tools/layers.pl [DIR] - check the layout of the C sources of src/
# (the default) or of relay/.
#
# The C files are layered: the extension's (src/README.md) as init, entry
# points and processes, features, engine, base; the relay's (relay/README.md)
# as the supervisor and its commands, a child's loop, the transports, and
# what they all use.  Within that order every module has a rank, below.  A
# file may include the headers of its own module and of modules ranked
# after it, never before: so includes run one way, and neither an include
# nor a call (which needs a declaration from a header) can close a circle.
# So a transport of the relay includes relay.h only, never daemon.h, and
# calls nothing of the loop.  A .c file declares nothing extern itself, so
# every call from another file goes through a header this check sees.  A
# new file must be given a place below.  No .c file may pass 850 lines in
# src/, 700 in relay/.
#
# Which tree DIR holds is told by its relay.h.  Exits 1 and names each
# violation; prints a one-line summary otherwise.
use strict;
use warnings;

my $src = shift // 'src';
my $relay = -e "$src/relay.h";
my $max_lines = $relay ? 700 : 850;

# The relay's, top to bottom.  The heartbeat and metrics the loop reports
# to rank below the loop, and the transports below all that knows of
# daemon.h.
my @relay_layers = (
	[
		'supervisor and commands' =>
		  [ supervisor => qw(inbox-relay.c options.c) ],
		[ check => qw(check.c check.h) ],
		[ management => qw(management.c management.h) ],
	],
	[
		'a child\'s loop' =>
		  [ loop => qw(loop.c) ],
		[ ingest => qw(ingest.c) ],
		[ metrics => qw(metrics.c metrics.h) ],
		[ heartbeat => qw(heartbeat.c) ],
		[ batch => qw(batch.c batch.h) ],
		[ secrets => qw(secrets.c) ],
		[ transport_table => qw(transports.c) ],
		[ daemon => qw(daemon.h) ],
	],
	[
		transports =>
		  [ amqp => qw(amqp.c amqp_connect.c amqp_source.c amqp_internal.h) ],
		[ nats => qw(nats.c nats_source.c nats_internal.h) ],
		[ kafka => qw(kafka.c kafka_connect.c kafka_source.c kafka_internal.h) ],
		[ webhook => qw(webhook.c) ],
		[ postgres => qw(postgres.c) ],
	],
	[ base => [ receive => qw(receive.c receive.h) ], [ relay => qw(relay.h log.c text.c url.c) ] ],
);

# The extension's, top to bottom; each module with the files it owns.
my @src_layers = (
	[ init => [ init => qw(init.c) ] ],
	[
		'entry points and processes' =>
		  [ access => qw(access.c) ],
		[ worker => qw(worker.c worker.h) ],
		[ compat_0_4 => qw(compat_0_4.c) ],
	],
	[
		features =>
		  [ claim_many => qw(claim_many.c claim_many_args.c claim_many.h) ],
		[ complete_many => qw(complete_many.c) ],
		[ complete => qw(complete.c complete.h) ],
		[ claim => qw(claim.c claim.h claim_internal.h) ],
		[ deferred => qw(deferred.c deferred_settle.c deferred.h deferred_internal.h) ],
		[ offsets => qw(offsets.c) ],
		[ forget => qw(forget.c forget.h) ],
		[ purge => qw(purge.c purge_steps.c purge.h) ],
		[ outbox => qw(outbox.c outbox_check.c outbox.h) ],
		[ guard => qw(guard.c) ],
		[ window => qw(window.c window.h) ],
		[ groups => qw(groups.c groups.h) ],
		[ priorities => qw(priorities.c priorities.h) ],
	],
	[
		engine =>
		  [ events => qw(events.c events.h) ],
		[ conflicts => qw(conflicts.c conflicts.h) ],
		[ direct => qw(direct.c direct_complete.c direct.h direct_internal.h) ],
		[ locate => qw(locate.c locate.h) ],
		[ direct_layout => qw(direct_layout.c direct_layout.h) ],
		[ session => qw(session.c session.h) ],
		[ front => qw(front.c front.h) ],
		[ wakeup => qw(wakeup.c wakeup.h) ],
		[ stats => qw(stats.c stats.h) ],
		[ depth => qw(depth.c depth_count.c depth.h depth_internal.h) ],
	],
	[
		base =>
		  [ distributed => qw(distributed.c distributed.h) ],
		[ spi => qw(spi.c spi.h) ],
		[ keys => qw(keys.c keys.h) ],
		[ version => qw(version.c version.h) ],
		[ entries => qw(entries.h) ],
		[ constants => qw(inbox.h) ],
		[ compat => qw(compat.h) ],
	],
);
my @layers = $relay ? @relay_layers : @src_layers;

my (%module_of, %rank_of, %layer_of);
my $rank = 0;
for my $layer (@layers)
{
	my ($name, @modules) = @$layer;
	for my $m (@modules)
	{
		my ($module, @files) = @$m;
		$rank_of{$module} = $rank++;
		$layer_of{$module} = $name;
		$module_of{$_} = $module for @files;
	}
}

opendir(my $dh, $src) or die "layers.pl: cannot read $src: $!\n";
my @files = sort grep { /\.[ch]$/ } readdir($dh);
closedir($dh);
die "layers.pl: no C sources in $src\n" unless @files;

my @errors;
my ($arrows, $longest, $longest_file) = (0, 0, '');
for my $file (@files)
{
	my $module = $module_of{$file};
	unless (defined $module)
	{
		push @errors, "$file: not in the layer map of test/tools/layers.pl (give it a place)";
		next;
	}
	open(my $fh, '<', "$src/$file") or die "layers.pl: $src/$file: $!\n";
	my $lines = 0;
	while (my $line = <$fh>)
	{
		$lines++;
		if ($line =~ /^\s*#\s*include\s+"([^"]+)"/)
		{
			my $header = $1;
			next unless -e "$src/$header";    # PostgreSQL's own
			my $to = $module_of{$header};
			next unless defined $to;          # reported as unmapped
			next if $to eq $module;
			$arrows++;
			push @errors,
			  sprintf("%s:%d: includes %s, of %s (%s), above %s (%s)",
				$file, $lines, $header, $to, $layer_of{$to}, $module, $layer_of{$module})
			  if $rank_of{$to} < $rank_of{$module};
		}
		push @errors, "$file:$lines: declares an extern in a .c file; put it in a header"
		  if $file =~ /\.c$/ && $line =~ /^\s*extern\s/;
	}
	close($fh);
	if ($file =~ /\.c$/ && $lines > $max_lines)
	{
		push @errors, "$file: $lines lines, more than $max_lines: split it by concern";
	}
	($longest, $longest_file) = ($lines, $file)
	  if $file =~ /\.c$/ && $lines > $longest;
}

if (@errors)
{
	print STDERR "layers.pl: $_\n" for @errors;
	exit 1;
}
printf "layers: %d files, %d include arrows between modules, all downward; longest .c file %s (%d lines)\n",
  scalar(@files), $arrows, $longest_file, $longest;
exit 0;
