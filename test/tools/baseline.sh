#!/bin/bash
#-------------------------------------------------------------------------
#
# baseline.sh REV DEST
#	  A private copy of the PostgreSQL that PG_CONFIG names, with the
#	  extension as it was at the git revision REV (a release tag) installed
#	  in it instead of the work tree's: what test/bench/versus.sh runs
#	  beside the new build.  Prints the copy's bindir.  A release whose tag
#	  this clone lacks is found by its version in inbox.control.
#
# The copy is tmp_install.sh's, at DEST/root; nothing outside DEST is
# written.  REV is built
# from git archive, against the same server headers as the new build.
# Fails, with one line on stderr, where REV is not in this clone.
#
# test/tools/baseline.sh
#
#-------------------------------------------------------------------------
set -euo pipefail

rev=$1
dest=$2
top=$(cd "$(dirname "$0")/../.." && pwd)
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}

git_top() { git -C "$top" -c safe.directory='*' "$@"; }

# A release without its tag here (a clone that did not fetch tags): the
# last commit at which inbox.control named its version, the parent of the
# newest commit that changed it to another
if ! git_top rev-parse -q --verify "$rev^{commit}" >/dev/null 2>&1 && [[ $rev =~ ^v?([0-9]+\.[0-9]+\.[0-9]+)$ ]]; then
	version=${BASH_REMATCH[1]}
	after=''
	for c in $(git_top log --format=%H -- inbox.control 2>/dev/null); do
		control=$(git_top show "$c:inbox.control")
		if grep -q "^default_version = '$version'$" <<<"$control"; then
			[ -n "$after" ] && rev=$(git_top rev-parse "$after~1")
			break
		fi
		after=$c
	done
fi
if ! git_top rev-parse -q --verify "$rev^{commit}" >/dev/null 2>&1; then
	echo "baseline.sh: $rev is not in this clone (git fetch --tags, or a clone rather than an archive)" >&2
	exit 1
fi

mkdir -p "$dest/src"
git_top archive "$rev" | tar -xf - -C "$dest/src"
make -C "$dest/src" -s PG_CONFIG="$PG_CONFIG" all >"$dest/build.log" 2>&1 || {
	tail -n 20 "$dest/build.log" >&2
	echo "baseline.sh: $rev does not build" >&2
	exit 1
}
# The server alone, then only REV's files of the extension
pg_config=$(bash "$top/test/tools/tmp_install.sh" "$dest/root" "")
make -C "$dest/src" -s PG_CONFIG="$PG_CONFIG" DESTDIR="$dest/root" install >>"$dest/build.log" 2>&1
rm -rf "$dest/src"
"$pg_config" --bindir
