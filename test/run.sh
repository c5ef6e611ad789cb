#!/bin/bash
# test/run.sh MODE - the entry point behind "make test", "make demo" and
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
#          ONLY=test/t/NNN_name.pl (make test ONLY=...) runs that TAP file alone
#   demo   test/demo/demo.sh: the at-least-once scenario on a throwaway cluster
#   bench  test/bench/bench.sh: pgbench ratios, see test/bench/README
set -euo pipefail

mode=${1:?usage: test/run.sh test|demo|bench}
top=$(cd "$(dirname "$0")/.." && pwd)
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
export PG_CONFIG

bash "$top/test/ensure-deps.sh"

# Build and install.  Errors and warnings (which -Werror makes errors) show.
make -C "$top" -s PG_CONFIG="$PG_CONFIG" all >/dev/null

# True when the installed extension is byte for byte what was just built.
# Reinstalling replaces the library under running servers (a server that
# loads it at that moment fails with 58P01), so only do it when needed.
installed_is_current()
{
	local lib share f
	lib=$("$PG_CONFIG" --pkglibdir)
	share=$("$PG_CONFIG" --sharedir)/extension
	cmp -s "$top/inbox.so" "$lib/inbox.so" || return 1
	cmp -s "$top/inbox.control" "$share/inbox.control" || return 1
	for f in "$top"/sql/inbox--*.sql; do
		cmp -s "$f" "$share/$(basename "$f")" || return 1
	done
}

if installed_is_current; then
	:
elif [ "$(id -u)" -eq 0 ] || [ -w "$("$PG_CONFIG" --pkglibdir)" ]; then
	make -C "$top" -s PG_CONFIG="$PG_CONFIG" install >/dev/null
elif ! [ -f "$("$PG_CONFIG" --sharedir)/extension/inbox.control" ]; then
	echo "run.sh: cannot install into $("$PG_CONFIG" --pkglibdir); run as root" >&2
	exit 1
fi

if [ "$(id -u)" -eq 0 ]; then
	runner=postgres
	work=$(mktemp -d "${TMPDIR:-/tmp}/inbox-$mode.XXXXXX")
	trap 'rm -rf "$work"' EXIT
	# The tracked files plus the untracked ones a developer is working on
	(cd "$top" && { git ls-files -co --exclude-standard 2>/dev/null || find . -type f -not -path './.git/*'; } |
		tar -cf - -T -) | tar -xf - -C "$work"
	chown -R "$runner" "$work"
	as_runner() { runuser -u "$runner" -- env PG_CONFIG="$PG_CONFIG" "$@"; }
else
	work=$top
	as_runner() { "$@"; }
fi

bindir=$("$PG_CONFIG" --bindir)

case "$mode" in
	test)
		log="$work/test-output.log"
		status=0
		# One suite at a time, so a failure in one still runs the others.
		suites="regress isolation tap"
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
			# shellcheck disable=SC2086
			if ! as_runner make -C "$work" -s PG_CONFIG="$PG_CONFIG" $vars installcheck 2>&1 | tee -a "$log"; then
				status=1
				echo "run.sh: the $suite suite failed" >&2
				for f in "$work/regression.diffs" "$work/output_iso/regression.diffs"; do
					[ -f "$f" ] && cat "$f"
				done
				if [ $suite = tap ] && [ -d "$work/tmp_check/log" ]; then
					tail -n 60 "$work"/tmp_check/log/*.log || true
				fi
			fi
		done
		# One closing line that counts every test of every suite
		passed=$(grep -cE '^(ok [0-9]+|test [a-z_0-9]+ +\.\.\. ok|     [a-z_0-9]+ +\.\.\. ok)' "$log" || true)
		failed=$(grep -cE '^(not ok [0-9]+|.* \.\.\. FAILED)' "$log" || true)
		echo "inbox: $passed passed, $failed failed"
		[ "$failed" -eq 0 ] || status=1
		exit $status
		;;
	demo)
		as_runner env PATH="$bindir:$PATH" bash "$work/test/demo/demo.sh"
		;;
	bench)
		as_runner env PATH="$bindir:$PATH" bash "$work/test/bench/bench.sh" "${@:2}"
		;;
	*)
		echo "usage: test/run.sh test|demo|bench" >&2
		exit 2
		;;
esac
