#!/bin/bash
# test/tools/run.sh MODE - the entry point behind "make test", "make demo" and
# "make bench".
#
# On a fresh Debian 12 machine, as root, it installs the packages that are
# missing, builds and installs the extension, and then runs MODE as the
# unprivileged "postgres" OS user (initdb refuses root) on a private copy of
# the tree, so the checkout itself may live where that user cannot write or
# even read.  Run as another user, it builds and runs in place and expects
# the extension to be installable by that user (or already installed).
#
#   test   pg_regress, isolation and TAP suites, each on temporary instances;
#          ONLY=test/t/NNN_name.pl (make test ONLY=...) runs that TAP file alone;
#          SUITES="regress isolation" (make test SUITES=...) runs only those
#   demo   test/demo/demo.sh: the at-least-once scenario on a throwaway cluster
#   bench  test/bench/bench.sh: pgbench ratios, see test/bench/README
set -euo pipefail

mode=${1:?usage: test/tools/run.sh test|demo|bench}
top=$(cd "$(dirname "$0")/../.." && pwd)
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
export PG_CONFIG

bash "$top/test/tools/ensure-deps.sh"

# Build and install.  Errors and warnings (which -Werror makes errors) show.
# PGXS keeps object files built against another PostgreSQL's headers
# (they are newer than the sources), and the library would then fail to
# load: build from clean whenever the server's headers change.
built_for=$("$PG_CONFIG" --version)" $("$PG_CONFIG" --includedir-server)"
if [ "$(cat "$top/.built-for" 2>/dev/null)" != "$built_for" ]; then
	make -C "$top" -s PG_CONFIG="$PG_CONFIG" clean >/dev/null
	printf '%s\n' "$built_for" >"$top/.built-for"
fi
make -C "$top" -s PG_CONFIG="$PG_CONFIG" all >/dev/null

if [ "$(id -u)" -eq 0 ]; then
	runner=postgres
	work=$(mktemp -d "${TMPDIR:-/tmp}/inbox-$mode.XXXXXX")
	trap 'rm -rf "$work"' EXIT
	# The tracked files plus the untracked ones a developer is working on
	(cd "$top" && { git ls-files -co --exclude-standard 2>/dev/null || find . -type f -not -path './.git/*'; } |
		tar -cf - -T -) | tar -xf - -C "$work"
	as_runner() { runuser -u "$runner" -- env PG_CONFIG="$PG_CONFIG" PATH="$bindir:$PATH" "$@"; }
else
	work=$top
	as_runner() { env PG_CONFIG="$PG_CONFIG" PATH="$bindir:$PATH" "$@"; }
fi

# The extension and the relay go into a private copy of the server's tree
# (tmp_install/, as PostgreSQL's own "make check" does), never into the
# system's PostgreSQL: everything below runs that copy's pg_config and
# binaries.  The system's files are fingerprinted before and compared
# after (system_pg.sh), so a run that wrote there says so and fails.
. "$top/test/tools/system_pg.sh"
PG_CONFIG=$(bash "$top/test/tools/tmp_install.sh" "$work/tmp_install" "$top")
export PG_CONFIG
[ "$(id -u)" -eq 0 ] && chown -R "$runner" "$work"

bindir=$("$PG_CONFIG" --bindir)

# count_results SUITE LOG - print "PASSED FAILED" for one suite, from the
# summary its runner printed: pg_regress and pg_isolation_regress end with
# "All N tests passed." or "M of N tests failed." (with ", K ... ignored"
# when some failures are ignored; those count as failed here), prove with
# "Files=F, Tests=N, ..." and "Result: PASS|FAIL|NOTESTS", after a "Test
# Summary Report" that has a "(Wstat: W ... Tests: T Failed: M)" line for
# every file that failed.  A file that failed no subtest but exited non-zero
# or broke its plan (it died) counts as one failure.  A suite with no
# summary, or that ran no test at all, counts as one failure.  Says why on
# stderr, and names the TAP files that were skipped.
count_results()
{
	perl -e '
		my ($suite, $log) = @ARGV;
		my ($tests, $subtests_failed, $failed, $result) = (undef, 0, 0, "");
		open(my $fh, "<", $log)
		  or do { print STDERR "run.sh: no output of the $suite suite\n"; print "0 1\n"; exit; };
		my ($file, $counted);
		while (<$fh>)
		{
			if ($suite eq "tap")
			{
				$tests = $1 if /^Files=\d+, Tests=(\d+),/;
				$result = $1 if /^Result: (\w+)/;
				print STDERR "run.sh: skipped $1: $2\n" if /^(\S+) \.+ skipped: (.*)$/;
				if (/^(\S+)\s+\(Wstat: (\d+).* Tests: \d+ Failed: (\d+)\)$/)
				{
					($file, $counted) = ($1, $3 > 0);
					$subtests_failed += $3;
					if (!$counted && $2 != 0)
					{
						print STDERR "run.sh: $file exited with wait status $2\n";
						($failed, $counted) = ($failed + 1, 1);
					}
				}
				elsif (defined $file && !$counted && /^\s+Parse errors: (.*)/)
				{
					print STDERR "run.sh: $file: $1\n";
					($failed, $counted) = ($failed + 1, 1);
				}
			}
			elsif (/^[#\s]*All (\d+) tests passed\./)
			{
				$tests = $1;
			}
			elsif (/^[#\s]*(\d+) of (\d+) tests failed/)
			{
				($tests, $subtests_failed) = ($2, $1);
			}
			elsif (/^[#\s]*(\d+) of (\d+) tests passed, \d+ failed test\(s\) ignored/)
			{
				($tests, $subtests_failed) = ($2, $2 - $1);
			}
		}
		$failed += $subtests_failed;
		if (!defined $tests)
		{
			print STDERR "run.sh: the $suite suite printed no summary\n";
			($tests, $failed) = ($subtests_failed, $failed + 1);
		}
		elsif ($tests == 0)
		{
			print STDERR "run.sh: the $suite suite ran no test\n";
			$failed++;
		}
		elsif ($result eq "FAIL" && $failed == 0)
		{
			print STDERR "run.sh: prove says FAIL\n";
			$failed++;
		}
		printf "%d %d\n", $tests - $subtests_failed, $failed;
	' "$@"
}

case "$mode" in
	test)
		log="$work/test-output.log"
		# Each suite's output on its own too, to count from its summary
		suite_logs=$(mktemp -d "${TMPDIR:-/tmp}/inbox-logs.XXXXXX")
		if [ "$work" = "$top" ]; then
			trap 'rm -rf "$suite_logs"' EXIT
		else
			trap 'rm -rf "$suite_logs" "$work"' EXIT
		fi
		status=0
		passed=0
		failed=0
		# One suite at a time, so a failure in one still runs the others.
		suites=${SUITES:-regress isolation tap}
		only=${ONLY:-}
		if [ -n "$only" ]; then
			[ -f "$work/$only" ] || { echo "run.sh: no such test: $only" >&2; exit 2; }
			suites=tap
		fi
		for suite in $suites; do
			case $suite in
				regress) vars="ISOLATION= TAP_TESTS=" ;;
				isolation) vars="REGRESS= TAP_TESTS=" ;;
				tap) vars="REGRESS= ISOLATION= PROVE_FLAGS=--verbose${only:+ PROVE_TESTS=$only}" ;;
			esac
			suite_log="$suite_logs/$suite.log"
			suite_status=0
			# shellcheck disable=SC2086
			as_runner make -C "$work" -s PG_CONFIG="$PG_CONFIG" $vars installcheck 2>&1 |
				tee "$suite_log" || suite_status=$?
			cat "$suite_log" >>"$log"
			counts=$(count_results "$suite" "$suite_log") || counts="0 1"
			read -r suite_passed suite_failed <<<"$counts"
			if [ "$suite_status" -ne 0 ] && [ "$suite_failed" -eq 0 ]; then
				# The runner failed without a failing test to show for it
				# (a server that did not start, a build error): count it.
				echo "run.sh: the $suite suite exited with status $suite_status" >&2
				suite_failed=1
			fi
			passed=$((passed + suite_passed))
			failed=$((failed + suite_failed))
			if [ "$suite_status" -ne 0 ] || [ "$suite_failed" -ne 0 ]; then
				status=1
				echo "run.sh: the $suite suite failed" >&2
				for f in "$work/regression.diffs" "$work/output_iso/regression.diffs"; do
					[ -f "$f" ] && cat "$f"
				done
				if [ "$suite" = tap ] && [ -d "$work/tmp_check/log" ]; then
					tail -n 60 "$work"/tmp_check/log/*.log || true
				fi
			fi
		done
		system_pg_unchanged run.sh || { status=1; failed=$((failed + 1)); }
		# One closing line that counts every test of every suite
		echo "inbox: $passed passed, $failed failed"
		exit $status
		;;
	demo)
		as_runner bash "$work/test/demo/demo.sh"
		system_pg_unchanged run.sh
		;;
	bench)
		# The last release, built into a private copy of the server, for
		# test/bench/versus.sh to run beside the new build
		release=${BENCH_BASELINE:-v1.1.0}
		baseline_bindir='' baseline_why=''
		if [ "${BENCH_SKIP_VERSUS:-0}" = 0 ] && [ "${BENCH_SKIP_CLAIMS:-0}" = 0 ]; then
			baseline=$(mktemp -d "${TMPDIR:-/tmp}/inbox-release.XXXXXX")
			trap 'rm -rf "$work" "$baseline"' EXIT
			[ "$work" = "$top" ] && trap 'rm -rf "$baseline"' EXIT
			if baseline_bindir=$(bash "$top/test/tools/baseline.sh" "$release" "$baseline" 2>"$baseline/why"); then
				[ "$(id -u)" -eq 0 ] && chown -R "$runner" "$baseline"
			else
				baseline_bindir='' baseline_why="$release could not be built: $(tail -n 1 "$baseline/why")"
			fi
		fi
		# The relay of BENCH_RELAY_BASELINE (a revision), built from git
		# archive of its relay/ alone, for test/bench/relay.sh's side base
		relay_rev=${BENCH_RELAY_BASELINE-42e5910}
		relay_base_bin='' relay_base_why=''
		if [ "${BENCH_SKIP_RELAY:-0}" = 0 ] && [ -n "$relay_rev" ]; then
			relay_base=$(mktemp -d "${TMPDIR:-/tmp}/inbox-relay-base.XXXXXX")
			trap 'rm -rf "$work" "${baseline:-}" "$relay_base"' EXIT
			[ "$work" = "$top" ] && trap 'rm -rf "${baseline:-}" "$relay_base"' EXIT
			if git -C "$top" -c safe.directory='*' archive "$relay_rev" relay 2>"$relay_base/why" |
				tar -xf - -C "$relay_base" 2>>"$relay_base/why" &&
				make -C "$relay_base/relay" -s PG_CONFIG="$PG_CONFIG" >>"$relay_base/why" 2>&1; then
				relay_base_bin=$relay_base/relay/inbox-relay
				[ "$(id -u)" -eq 0 ] && chown -R "$runner" "$relay_base"
			else
				relay_base_why="the relay of $relay_rev could not be built: $(tail -n 1 "$relay_base/why")"
			fi
		fi
		as_runner env BENCH_BASELINE_BINDIR="$baseline_bindir" \
			BENCH_BASELINE_NAME="$release" BENCH_BASELINE_WHY="$baseline_why" \
			BENCH_RELAY_BASELINE_BIN="$relay_base_bin" BENCH_RELAY_BASELINE_NAME="$relay_rev" \
			BENCH_RELAY_BASELINE_WHY="$relay_base_why" \
			bash "$work/test/bench/bench.sh" "${@:2}"
		system_pg_unchanged run.sh
		;;
	*)
		echo "usage: test/tools/run.sh test|demo|bench" >&2
		exit 2
		;;
esac
