# test/t/043_relay_webhook_strings.pl
#
# Strings are data on a webhook.  A raw-socket sink on 127.0.0.1 keeps the
# bytes of every connection as they came, and this file parses them
# strictly afterwards: each request is a request line, header lines that
# are each one RFC 9110 field (a token, a colon, a value of visible
# characters, spaces and tabs), an empty line, and exactly Content-Length
# bytes of body; nothing may be left over on a connection.  Every hostile
# form outbox_send lets through (keys of every kind of character up to
# 1,024 bytes, quotes, spaces, header names of 255 bytes, long values,
# many headers) arrives as exactly one such request per message, with its
# strings whole.  Rows written around outbox_send (as the superuser
# could) with a CR/LF in a key or a header value, or a header name that
# is not a token, are never sent: each is that message's refusal, with an
# attempt and the reason, and its batch-mates arrive once.  A message
# header named as one the relay sets is refused the same way.  A 404
# records the status, its reason phrase and the first bytes of the body.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use InboxTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = InboxTest->node('webhook_strings', conf => "inbox.purge_enabled = off\n");
my $relay = InboxTest::relay_or_skip($node);

my $tmp = PostgreSQL::Test::Utils::tempdir('webhook_strings');
my $raw_dir = "$tmp/raw";
mkdir $raw_dir or die "mkdir: $!";

# --- the sink ----------------------------------------------------------------------------
# InboxTest's: a process per connection, served here from its raw bytes.
# It finds where each request ends only to answer it (the end of the
# header block, then Content-Length bytes), and appends every byte it read
# to the connection's file.  The request of
# key k-404 is answered 404 with a body longer than a reason keeps.
my $not_found_body = 'no hook here: ' . ('x' x 300);
my ($port) = InboxTest::start_http_sink(connection => sub {
	my ($c, $n) = @_;
	open(my $raw, '>>:raw', "$raw_dir/conn-$$-$n") or die "open: $!";
	my $buf = '';
	while (1)
	{
		my $end = index($buf, "\r\n\r\n");
		if ($end < 0)
		{
			my $got = sysread($c, $buf, 65536, length $buf);
			last unless $got;
			syswrite($raw, substr($buf, length($buf) - $got));
			next;
		}
		my $head = substr($buf, 0, $end);
		my ($length) = $head =~ /\r\ncontent-length:[ \t]*(\d+)/i;
		$length //= 0;
		while (length($buf) < $end + 4 + $length)
		{
			my $got = sysread($c, $buf, 65536, length $buf);
			last unless $got;
			syswrite($raw, substr($buf, length($buf) - $got));
		}
		last if length($buf) < $end + 4 + $length;
		substr($buf, 0, $end + 4 + $length, '');
		if ($head =~ /\r\nOutbox-Key: k-404\r\n/)
		{
			print $c "HTTP/1.1 404 Not Found\r\nContent-Length: " . length($not_found_body)
			  . "\r\n\r\n$not_found_body";
		}
		else
		{
			print $c "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
		}
	}
	close $raw;
});

# Every request the sink got, parsed strictly from the raw bytes: a list
# of hashes (headers, in order, as [name, value] pairs; the body), and
# the faults found, each a string.
sub received
{
	my (@requests, @faults);
	opendir(my $d, $raw_dir) or die "opendir: $!";
	for my $f (sort grep { /^conn-/ } readdir $d)
	{
		open(my $in, '<:raw', "$raw_dir/$f") or die "open: $!";
		local $/;
		my $bytes = <$in> // '';
		close $in;
		while ($bytes ne '')
		{
			my $end = index($bytes, "\r\n\r\n");
			if ($end < 0)
			{
				push @faults, "$f: bytes after the last request: " . length($bytes);
				last;
			}
			my @lines = split /\r\n/, substr($bytes, 0, $end), -1;
			my $start = shift @lines;
			push @faults, "$f: request line \"$start\"" unless $start eq 'POST /hook HTTP/1.1';
			my (@headers, $length);
			for my $l (@lines)
			{
				if ($l =~ /^([!#\$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*([^\x00-\x08\x0a-\x1f\x7f]*)$/)
				{
					push @headers, [ $1, $2 ];
					if (lc $1 eq 'content-length')
					{
						push @faults, "$f: two Content-Length" if defined $length;
						$length = $2;
					}
				}
				else
				{
					push @faults, "$f: malformed header line \"" . substr($l, 0, 80) . '"';
				}
			}
			$length //= 0;
			my $body = substr($bytes, $end + 4, $length);
			push @faults, "$f: body shorter than Content-Length" if length($body) < $length;
			substr($bytes, 0, $end + 4 + $length, '');
			push @requests, { headers => \@headers, body => $body };
		}
	}
	closedir $d;
	return (\@requests, \@faults);
}

# The values of header $name (case-insensitive) in request $r
sub header
{
	my ($r, $name) = @_;
	return map { $_->[1] } grep { lc $_->[0] eq lc $name } @{ $r->{headers} };
}

# --- routes and messages -----------------------------------------------------------------
$node->sql(q{CREATE ROLE relay_user LOGIN; SELECT inbox_grant_bundle('relay_user', 'relay')});
my $webhook = "http://127.0.0.1:$port/hook";
$node->sql(qq{SELECT outbox_route('hostile', '$webhook', '{"backoff": "1 hour", "max_attempts": 3}')});
my $conninfo = 'host=' . $node->host . ' port=' . $node->port . ' dbname=postgres user=relay_user';

# What outbox_send lets through, one message per key; each key and header
# is checked below against what the sink read.  The strings are UTF-8
# bytes, as the sink reads them.
my $long_key = 'k-long-' . ('é' x 508) . 'z';    # 1,024 bytes
my $name_255 = 'X-' . ('n' x 253);
my $long_value = join '', map { chr(0x21 + $_ % 94) } 1 .. 6000;
my %sent = (
	'k-unicode-ключ-鍵-🔑' => {},
	'k "quoted" \'single\'' => {},
	'k with  spaces ' => {},
	'k;semi,comma:colon=eq&amp%25' => {},
	$long_key => {},
	'k-name-255' => { $name_255 => 'v' },
	'k-long-value' => { 'X-Long' => $long_value },
	'k-many' => { map { ("X-H$_" => "value $_") } 1 .. 100 },
	'k-token-name' => { q{X!#$%&'*+-.^_`|~9} => 'token' },
	'k-value-chars' => { 'X-Odd' => qq{a\tb "c" ;d, é 🔑 \\e} },
	'k-empty-value' => { 'X-Empty' => '' },
	'k-404' => {},
);
my $psql_send = join '', map {
	my $k = $_;
	my $h = $sent{$k};
	my $json = '{' . join(',', map { json_string($_) . ':' . json_string($h->{$_}) } sort keys %$h) . '}';
	"SELECT outbox_send('hostile', " . quote($k) . ", jsonb_build_object('k', " . quote($k) . '::text), '
	  . quote($json) . "::jsonb);\n"
} sort keys %sent;
$node->sql($psql_send);

sub quote
{
	my ($s) = @_;
	$s =~ s/'/''/g;
	return "'$s'";
}

sub json_string
{
	my ($s) = @_;
	$s =~ s/(["\\])/\\$1/g;
	$s =~ s/\t/\\t/g;
	return "\"$s\"";
}

# Rows no outbox_send writes, as the superuser could: a key with CR/LF
# that would inject a header and a second request, a header value with
# CR/LF, a header name that is not a token, a message header the relay
# sets itself
my @forged = (
	[ q{E'k-crlf\r\nX-Injected: key\r\n\r\nPOST /smuggled HTTP/1.1'}, 'NULL' ],
	[ q{'k-value-crlf'}, q{'{"X-Trace": "t\r\nX-Injected: value"}'} ],
	[ q{'k-name-space'}, q{'{"X Injected": "v"}'} ],
	[ q{'k-name-colon'}, q{'{"X-Injected:": "v"}'} ],
	[ q{'k-reserved'}, q{'{"content-length": "0"}'} ],
);
for my $f (@forged)
{
	$node->sql(qq{
		WITH m AS (
			INSERT INTO inbox.outbox_messages (id, topic, key, position, payload, headers)
			VALUES (gen_random_uuid(), 'hostile', $f->[0], 1, '{"forged": true}', $f->[1])
			RETURNING id, topic, key, position)
		INSERT INTO inbox.outbox_deliveries (id, target, topic, key, position)
		SELECT id, '$webhook', topic, key, position FROM m});
}

my ($out, $err) = ('', '');
ok(IPC::Run::run([ $relay, '--once', '--lease=30', "--target=$webhook", $conninfo ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(120)),
	'inbox-relay --once ends well');
note($err);

# --- what the sink got -----------------------------------------------------------------------
my ($requests, $faults) = received();
is_deeply($faults, [], 'every request the sink read is well-formed, and nothing follows the last');
my %by_key;
push @{ $by_key{ (header($_, 'Outbox-Key'))[0] // '' } }, $_ for @$requests;
is(scalar @$requests, scalar keys %sent, 'exactly one request per message that outbox_send took');
is_deeply([ sort keys %by_key ], [ sort keys %sent ], 'one for each of their keys, each key whole');
ok(!(grep { $_->[0] =~ /injected/i } map { @{ $_->{headers} } } @$requests), 'no injected header');
ok(!(grep { $_->{body} =~ /forged/ } @$requests), 'no forged row was sent');
my $idempotency = grep { scalar(header($_, 'Idempotency-Key')) == 1 && scalar(header($_, 'Content-Length')) == 1 }
  @$requests;
is($idempotency, scalar @$requests, 'each with one Idempotency-Key and one Content-Length');

for my $k (sort keys %sent)
{
	my $r = $by_key{$k}[0] or next;
	my %got = map { ($_->[0] => $_->[1]) } grep { $_->[0] =~ /^X/ } @{ $r->{headers} };
	(my $label = substr($k, 0, 20)) =~ s/[^\x20-\x7e]/?/g;
	is_deeply(\%got, $sent{$k}, "the headers of $label arrive whole");
}

# The forged rows: each refused unsent, with an attempt and the reason
my %state = map { my ($k, $s) = split /\|/, $_, 2; ($k => $s) } split /\n/, $node->sql(q{
	SELECT replace(replace(key, E'\r', '<CR>'), E'\n', '<LF>'), state::text || ' ' || attempts || ' ' || last_error
	FROM inbox.outbox_deliveries WHERE topic = 'hostile' ORDER BY key});
like($state{'k-crlf<CR><LF>X-Injected: key<CR><LF><CR><LF>POST /smuggled HTTP/1.1'},
	qr/^p 1 not sent: the message's key holds a CR or LF/, 'a key with CR/LF is not sent, and costs an attempt');
like($state{'k-value-crlf'}, qr/^p 1 not sent: the value of header X-Trace holds a CR or LF/,
	'a header value with CR/LF is not sent');
like($state{'k-name-space'}, qr/^p 1 not sent: the header name "X Injected" is not an HTTP token/,
	'a header name with a space is not sent');
like($state{'k-name-colon'}, qr/^p 1 not sent: the header name "X-Injected:" is not an HTTP token/,
	'a header name with a colon is not sent');
like($state{'k-reserved'}, qr/^p 1 not sent: the header Content-Length is the relay's/,
	'a message header the relay sets is not sent');

# The 404: status, reason phrase and the body's first bytes, marked cut
like($state{'k-404'}, qr/^p 1 HTTP 404 Not Found: no hook here: x{100,}\.\.\.$/,
	'a 404 records the status, its reason and the first bytes of the body');
ok(length($state{'k-404'}) < 300, 'only the first bytes of the body');
is(scalar(keys %state), 6, 'every other message is delivered');

done_testing();
