#!/bin/bash
# examples/run-jvm-go.sh - the entry point behind "make examples": builds the
# Java and Go consumer examples and runs their crash test
# (examples/crash-test.pl).
#
# As root on a fresh Debian 12 machine it first installs what is missing:
# the packages of test/tools/ensure-deps.sh, then the JDK, PostgreSQL's JDBC
# driver, Go and pgx from Debian (not needed by "make test", hence here).
# It builds the extension and installs it into a private copy of the
# server's tree in a temporary directory (test/tools/tmp_install.sh), never
# into the system's PostgreSQL, then builds and runs everything there as the
# unprivileged "postgres" OS user (initdb refuses root).  Run as another
# user, it needs those packages installed already.
#
#   EXAMPLES="java go"   the languages to run (default both)
#   EXAMPLES_SECONDS=20  how long consumers are killed, per language
#
# The Go example builds offline, in GOPATH mode against Debian's packaged
# sources (/usr/share/gocode); no module proxy is needed.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
export PG_CONFIG
langs=${EXAMPLES:-java go}
seconds=${EXAMPLES_SECONDS:-20}
jdbc=/usr/share/java/postgresql.jar
gopath=/usr/share/gocode

# A failure before the crash test ran still ends with the closing line.
fail()
{
	echo "run-jvm-go: $*" >&2
	echo "0 passed, 1 failed"
	exit 1
}

bash "$top/test/tools/ensure-deps.sh" || fail "missing packages"

extra="default-jdk-headless libpostgresql-jdbc-java golang-go golang-github-jackc-pgx-v4-dev"
missing=""
for p in $extra; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
	[ "$(id -u)" -eq 0 ] || fail "missing packages:$missing (run as root, or apt-get install them)"
	echo "run-jvm-go: installing$missing"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/inbox-examples.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp -r "$top/examples/java" "$top/examples/go" "$top/examples/crash-test.pl" "$work/"

# The extension goes into a private copy of the server's tree, never into
# the system's PostgreSQL; the crash test runs that copy's binaries.  The
# system's files are fingerprinted before and compared after
# (test/tools/system_pg.sh), as run.sh does for make test.
. "$top/test/tools/system_pg.sh"
make -C "$top" -s PG_CONFIG="$PG_CONFIG" all >/dev/null || fail "the extension does not build"
PG_CONFIG=$(bash "$top/test/tools/tmp_install.sh" "$work/tmp_install" "$top") ||
	fail "the extension does not build or install"
export PG_CONFIG
if [ "$(id -u)" -eq 0 ]; then
	chown -R postgres "$work"
	# setpriv execs in place (runuser forks, and puts the command out of
	# reach of the terminal's Ctrl-C): the crash test must get the signal
	# to stop its consumers and its cluster.
	runner=(setpriv --reuid=postgres --regid=postgres --init-groups
		env HOME="$work" USER=postgres LOGNAME=postgres TMPDIR="$work")
else
	runner=(env TMPDIR="$work")
fi
as_runner() { "${runner[@]}" "$@"; }

args=()
for lang in $langs; do
	case $lang in
		java)
			as_runner nice -n 10 javac -Xlint:all -Werror -d "$work/java-build" -cp "$jdbc" \
				"$work"/java/*.java || fail "the Java example does not build"
			args+=(--java "$jdbc:$work/java-build")
			;;
		go)
			as_runner env GO111MODULE=off GOPATH="$gopath" GOFLAGS= GOCACHE="$work/gocache" \
				sh -c "cd '$work/go' && nice -n 10 go vet . && nice -n 10 go build -o '$work/inbox-example-go' ." ||
				fail "the Go example does not build"
			args+=(--go "$work/inbox-example-go")
			;;
		*) fail "unknown language in EXAMPLES: $lang" ;;
	esac
done

# In the background, so that a signal to this script is passed on and the
# crash test's own cleanup (its consumers, its cluster) ends before the
# EXIT trap removes the directory they run in.
"${runner[@]}" PATH="$("$PG_CONFIG" --bindir):$PATH" \
	perl "$work/crash-test.pl" --seconds "$seconds" "${args[@]}" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' INT TERM
status=0
wait "$child" || status=$?
while kill -0 "$child" 2>/dev/null; do
	wait "$child" || status=$?
done
system_pg_unchanged run-jvm-go || status=1
exit "$status"
