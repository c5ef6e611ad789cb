#!/usr/bin/perl
#
# test/faults/load.pl - at-least-once load with injected faults against the
# inbox extension, and an exactly-once check at the end.
#
# It plays an at-least-once broker and its consumers, as forked processes
# that each hold one database session, and injects the faults that such a
# broker and such consumers meet:
#
#   - redeliveries of messages that were already processed and acked;
#   - transactions that roll back after the claim and the effect (the
#     message is then not acked, and the broker delivers it again);
#   - kill -9 of a random consumer's backend every --kill-interval seconds.
#     With restart_after_crash = on, the postmaster then restarts every
#     backend: all consumers lose their session, reconnect with retry, and
#     treat the delivery they had in hand as not acked.  A COMMIT whose
#     outcome is unknown is resolved as the README's "Uncertain commits"
#     says: inbox_status, and if it shows no entry, the message is
#     processed again through the normal path.
#
# At the end every message id delivered at least once must have exactly one
# effect row.  The effects table has no unique constraint on purpose: a
# second effect would be a second row.  The driver prints one report line,
#
#   inbox-load: mode=claim ... deliveries=... duplicates_suppressed=...
#               aborts=... kills=... effects=... lost=0 doubled=0 result=ok
#
# and exits 0 only if lost, doubled and every other consistency count are 0.
#
# MODES
#
#   claim     --consumers processes call inbox_claim and insert the effect in
#             one transaction, then COMMIT, then ack.
#   deferred  --consumers processes are receivers: inbox_receive in
#             autocommit, ack, and redeliveries (inbox_receive of the same id
#             again returns false).  --workers processes loop on inbox_take
#             (autocommit, so the take is durable), then insert the effect
#             and inbox_complete in one transaction; some of those roll back
#             after the effect and give the message back with inbox_fail.
#             The run ends when every received message is done or dead.
#             Done ones need exactly one effect row, dead ones none.
#
# DEFERRED VARIANTS
#
#   --receipts        the workers take with inbox_poll (a lease of --lease
#                     seconds, waiting up to --poll-wait seconds for a
#                     message) and complete or fail each message by its
#                     receipt, in a transaction of its own.  A message whose
#                     worker was lost comes back when its lease runs out.  A
#                     completion refused with IB004 (the lease ran out and
#                     another worker took the message) rolls back the effect
#                     and is counted as stale_receipts, not as an error.
#                     The report counts the completions that ran on another
#                     server session than their poll (cross_session): only a
#                     pooler in front makes that happen.
#   --receive-batch N receivers gather up to N due deliveries and receive
#                     them in one transaction with inbox_receive_many.
#   --pooler          the connection string names a transaction-mode pooler
#                     (PgBouncer): no server-side prepared statements, since
#                     consecutive transactions of one client may run on
#                     different server sessions.  The session settings the
#                     driver SETs then stick to whichever server session ran
#                     the SET, so set inbox.on_duplicate = 'return' for the
#                     role or the database as well.
#
# THE BROKER AND THE RETENTION
#
# Broker state lives in the client processes, never in the database, so a
# crash restart cannot make it inconsistent.  Consumer i owns the ids
# n = i (mod consumers) for first deliveries, in a seeded random order,
# spread evenly over --duration.  A delivery that was not acked (rolled
# back, interrupted, or uncertain and found not committed) goes back to the
# same consumer, which delivers it again until it is acked: its owner always
# knows whether an id was acked.  After an ack, with probability --redeliver,
# the broker redelivers the id to another consumer through a pipe, after a
# random delay of up to --redelivery-delay seconds; a redelivery that is
# acked can be redelivered again.
#
# Retention purges an entry once its scope has been active for the
# retention since the entry's received_at, which is the start time of the
# claiming transaction.  So a redelivery is safe from the purge only while it
# comes less than the retention after that time, and a broker whose
# redeliveries come later is outside what the inbox guarantees.  This broker
# keeps inside: the claiming transaction returns now(), which is exactly the
# entry's received_at, and every redelivery carries it.  The redelivery's
# claim (or receive) is guarded on the server:
#
#   CASE WHEN clock_timestamp() < received_at + horizon THEN inbox_claim(...) END
#
# so it runs before received_at + horizon, or not at all (counted as
# "expired": the broker gave up on that redelivery).  The horizon defaults to
# half the server's inbox.retention, and must be below it.  A purge that
# honours the retention can therefore never have removed an entry that a
# redelivery reaches, while a purge that removes entries too early is caught:
# redeliveries come from a few milliseconds to --redelivery-delay seconds
# after the ack, so they also reach entries a few seconds old.
#
# The one delivery that cannot be given up is the retry of an uncertain
# commit.  It is made at once after reconnecting, and counted as "late" if
# that was already past the horizon (then the run cannot tell a purged entry
# from an uncommitted one, and it fails: a timing assumption broke, not
# necessarily the extension).
#
# USAGE
#
#   perl test/faults/load.pl [options] [--connstr 'host=... port=... dbname=...']
#
#   --connstr S         libpq keyword/value string; PG* variables fill the rest
#   --mode M            claim (default) or deferred
#   --consumers N       claim consumers, or deferred receivers (16 / 4)
#   --workers N         deferred workers (8)
#   --ids N             size of the id space (10000)
#   --duration S        load phase in seconds (60); first deliveries are paced
#                       over it.  0: no pacing, as fast as possible, until
#                       every id and its redeliveries were delivered
#   --deliveries N      also end the load phase after about N deliveries
#   --redeliver P       probability that an acked delivery is redelivered (0.5)
#   --redelivery-delay S  longest delay of a redelivery (horizon / 2, at most 5)
#   --horizon S         latest redelivery after received_at (retention / 2)
#   --abort P           probability that a transaction rolls back after the
#                       claim and the effect (claim) or after the effect
#                       (deferred) (0.15)
#   --kill-interval S   seconds between two kills, 0 for none (5)
#   --kill-method M     auto (default), sigkill or terminate.  sigkill sends
#                       kill -9 to the backend: the server must run on this
#                       machine under the same OS user.  auto falls back to
#                       pg_terminate_backend, which ends only that backend.
#   --batch N           deferred: messages per inbox_take (4)
#   --claim-batch N     claim: deliveries per transaction (1).  Above 1, a
#                       consumer gathers up to N due deliveries, claims them
#                       with one inbox_claim_many, inserts the effects of
#                       those claimed, commits, and acks them all
#   --receipts          deferred: inbox_poll and completions by receipt
#   --lease S           with --receipts: the lease of a poll (5)
#   --poll-wait S       with --receipts: how long a poll waits for a message,
#                       0 for not at all (0)
#   --receive-batch N   deferred: deliveries per inbox_receive_many (1: one
#                       inbox_receive per delivery)
#   --groups N          deferred: message n is received into the ordered
#                       group "g-<n mod N>", and each receive that stores one
#                       notes it in inbox_load_received, whose order per
#                       group is the commit order of the receives; the
#                       effects table's seq gives the order of the effects
#                       (0: no groups)
#   --priorities N      deferred: message n is received at priority
#                       n * 7 mod (N + 1), every copy alike (0: the default
#                       for all)
#   --pooler            through a transaction-mode pooler (see above)
#   --work S            deferred: seconds of simulated work per message, spent
#                       inside the effect's transaction (0.5 to 1.5 times S),
#                       so that kills land while workers process (0)
#   --scope S           scope to use (default: a new one per run)
#   --table T           effects table, created if missing (inbox_load_effects)
#   --drain-timeout S   longest drain after the load phase (60)
#   --seed N            random seed (1)
#   --progress          a line on stderr at every kill
#
# The load runs in a fresh scope unless --scope is given, and leaves its
# entries and effect rows behind for inspection.  It needs EXECUTE on the
# inbox functions it calls (and, if the scope has grants, one that covers the
# role: inbox_grant), SELECT on pg_stat_activity's application_name of its
# own sessions, and CREATE on the current schema (for --table).  The
# faults of the load phase stop at its end; the drain then delivers what was
# not acked, and (deferred) lets the workers finish every received message.
#
# Exit status: 0 consistent, 1 inconsistent, 2 usage or setup error.

# The comment above, up to the blank line, is what --help prints.  The
# driver's parts are the modules beside it:
#
#   LoadRun.pm      the options, the run's settings and clock, its processes
#                   and the files through which they report
#   LoadSession.pm  sessions, the statements, the setup, a process's state
#   LoadBroker.pm   what each consumer delivers when; redeliveries; settling
#   LoadClaim.pm    claim mode: the consumers' transactions
#   LoadDeferred.pm deferred mode: the receivers and the workers
#   LoadChaos.pm    the kills of the load phase
#   LoadCheck.pm    the exactly-once check and the report
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use Time::HiRes qw(time);

use LoadBroker;
use LoadChaos;
use LoadCheck;
use LoadClaim;
use LoadDeferred;
use LoadRun;
use LoadSession;

$| = 1;

parse_options();
set_horizon(prepare_run());
start_clock();

# The consumers (receivers) and the workers, each a process of its own
open_pipes();
for my $i (0 .. $opt{consumers} - 1)
{
	spawn("consumer-$i",
		$deferred
		? sub { run_consumer($i, \&receive_one, \&receive_batch) }
		: sub { run_consumer($i, \&claim_one, \&claim_batch) });
}
if ($deferred)
{
	for my $i (0 .. $opt{workers} - 1)
	{
		spawn("worker-$i", sub { run_worker($i) });
	}
}
close_pipes();
srand($opt{seed});
$SIG{__WARN__} = sub { print STDERR @_ unless expected_warning($_[0]) };

my @failures;
load_phase();

# The drain: the consumers (receivers) deliver what was not acked, then
# exit.
push @failures, wait_children(qr/^consumer/, $t_hard + 30, 'consumers still running after the drain timeout');
my $got = { n => {}, delivered => {}, unacked => [], errors => [] };
read_results($got, 'consumer-*[0-9]', '');
my @ids = map { message_id($_) } sort { $a <=> $b } keys %{ $got->{delivered} };

my $check = eval { connect_retry("$app-check", 60) };
push @failures, "cannot connect for the final check: $@" unless $check;
# Deferred: the workers go on until every received message is done or dead.
push @failures, wait_settled(\$check, \@ids) if $deferred && $check;
signal_children('TERM', qr/./);
push @failures, wait_children(qr/./, time + 30, 'workers did not stop');
read_results($got, 'worker-*[0-9]', 'w_');
push @failures, exit_failures();
my $expected = $opt{consumers} + ($deferred ? $opt{workers} : 0);
my $reported = reports_written();
push @failures, "only $reported of $expected processes reported" if $reported != $expected;

# The exactly-once check, per id delivered at least once
my $final = {};
if ($check)
{
	($final, my @failed) = final_counts($check, \@ids);
	push @failures, @failed;
}
exit report($got, $final, \@failures, $expected);
