#!/bin/bash
# test/tools/versions.sh - the pre-release check on the other supported
# PostgreSQL versions: build PostgreSQL 18 (and 17) and pg_cron from
# Debian's source packages into private prefixes, then run the whole suite
# ("make test") against each.  CI does not run this; it takes a while (each server build
# is some ten minutes on two cores) and needs Debian's source archives.
#
#   test/tools/versions.sh DIR [VERSION...]    (as root, on Debian 12)
#
# DIR (or VERSIONS_DIR) holds everything this makes, nothing is installed
# elsewhere but the Debian 12 build dependencies:
#   DIR/apt/          a private apt state that knows only the deb-src lines
#                     below, so the machine's own apt setup is untouched
#   DIR/src/          the source packages and their unpacked trees
#   DIR/build/pgNN/   the out-of-tree build of a PG_SOURCE_NN tree
#   DIR/pgNN/         PostgreSQL NN, with pg_cron and then inbox installed
#   DIR/pgNN.log      the build's output
#   DIR/pgNN-test.log the suite's output; its last line is the summary
# VERSION defaults to "18 17".  Each version comes from the suite that has
# its source package: 18 from sid, 17 from trixie.  A version Debian has no
# source package for (16), or one to take from elsewhere, is built from a
# PostgreSQL source tree you already have: set PG_SOURCE_NN (below).
#
# Run it again and it skips what is already done (a downloaded package, an
# unpacked tree, a finished build, an installed pg_cron); only the suite
# runs every time.  Delete DIR/pgNN to rebuild that version.
#
# Variables:
#   PG_SOURCE_NN   build PostgreSQL NN from this source tree (a release
#                  tarball unpacked, or a git checkout of a REL_NN_* tag)
#                  instead of Debian's source package, e.g.
#                  PG_SOURCE_16=~/src/postgresql-16.6.  The tree is left
#                  untouched: the build runs in DIR/build/pgNN.  pg_cron
#                  then comes from sid's pg-cron source package.
#   DEBIAN_MIRROR  the archive to get the source packages from; by default
#                  the one the machine's own apt sources use
#   PG_CRON_SRC    a pg_cron source tree to build when Debian's pg-cron
#                  source package cannot be downloaded (test/t/003 skips
#                  when pg_cron is missing for the version under test)
#   JOBS           make -j (default: the number of cores)
#   BUILD_ONLY=1   build and install, but run no suite
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-${VERSIONS_DIR:-}}
if [ -z "$dir" ]; then
	echo "usage: test/tools/versions.sh DIR [VERSION...]   (or VERSIONS_DIR=DIR)" >&2
	exit 2
fi
[ $# -gt 0 ] && shift
versions=${*:-18 17}
jobs=${JOBS:-$(nproc)}

if [ "$(id -u)" -ne 0 ]; then
	echo "versions.sh: run as root (it installs build dependencies, and the suite runs as user postgres)" >&2
	exit 1
fi

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
apt="$dir/apt"
src="$dir/src"
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$src"

# The source tree given for a version (PG_SOURCE_NN), or nothing
source_of()
{
	local var="PG_SOURCE_$1"
	echo "${!var:-}"
}

# The suite a version's source package comes from; a version built from
# PG_SOURCE_NN takes only pg-cron from Debian, and sid's builds against any
# version.
suite_of()
{
	if [ -n "$(source_of "$1")" ]; then
		echo sid
		return
	fi
	case $1 in
		18) echo sid ;;
		17) echo trixie ;;
		*) echo "versions.sh: no source suite known for PostgreSQL $1; set PG_SOURCE_$1" >&2; return 1 ;;
	esac
}

# Check every version, and the source trees given, before anything is built
for v in $versions; do
	suite_of "$v" >/dev/null || exit 1
	tree=$(source_of "$v")
	[ -n "$tree" ] || continue
	if [ ! -f "$tree/configure" ] || ! grep -q "AC_INIT(\[PostgreSQL\], \[${v}[.a-z]" "$tree/configure.ac" 2>/dev/null; then
		echo "versions.sh: PG_SOURCE_$v=$tree is not a PostgreSQL $v source tree" >&2
		exit 1
	fi
	if [ -f "$tree/config.status" ]; then
		echo "versions.sh: PG_SOURCE_$v=$tree is configured in place; run make distclean there first (the build here is out of tree)" >&2
		exit 1
	fi
done

# The Debian archive this machine's apt uses (deb822 or one-line format),
# not the security archive.
mirror=${DEBIAN_MIRROR:-$(
	{ cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
		awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }'
	  cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
		awk 'tolower($1) == "uris:" && $2 !~ /security/ && $2 ~ /debian/ { print $2; exit }'
	} | head -n 1)}
if [ -z "$mirror" ]; then
	echo "versions.sh: no Debian archive found in /etc/apt; set DEBIAN_MIRROR" >&2
	exit 1
fi

aptopts=(-o "Dir::State::Lists=$apt/lists" -o "Dir::Etc::SourceList=$apt/sources.list"
	-o "Dir::Etc::SourceParts=/dev/null" -o "Dir::Cache=$apt/cache")

# --- the private apt state -------------------------------------------------
want=""
for v in $versions; do
	want="$want$(printf 'deb-src %s %s main\n' "$mirror" "$(suite_of "$v")")"$'\n'
done
want=$(printf '%s' "$want" | sort -u)
if [ "$(cat "$apt/sources.list" 2>/dev/null)" != "$want" ] ||
	! ls "$apt"/lists/*Sources* >/dev/null 2>&1; then
	printf '%s\n' "$want" >"$apt/sources.list"
	echo "versions.sh: apt-get update (source lists only, private state)"
	apt-get "${aptopts[@]}" -q update >/dev/null
fi

# --- build dependencies, from Debian 12 -------------------------------------
# A minimal server: no ICU, LZ4 or zstd; OpenSSL and readline as usual.
# Release tarballs of 18 carry no generated parser files: bison and flex.
deps="build-essential bison flex pkg-config libreadline-dev zlib1g-dev libssl-dev
	libipc-run-perl libdbd-pg-perl dpkg-dev"
# A tree from PG_SOURCE_NN is built with ICU, PostgreSQL's default
for v in $versions; do
	if [ -n "$(source_of "$v")" ]; then
		deps="$deps libicu-dev"
	fi
done
missing=""
for p in $deps; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
		missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "versions.sh: installing$missing"
	apt-get update -qq
	# shellcheck disable=SC2086
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# fetch_source PACKAGE SUITE [DPKG-SOURCE-OPTION...] - download and unpack
# the source package of PACKAGE as SUITE has it into $src, once; prints the
# unpacked tree's path.
fetch_source()
{
	local pkg=$1 suite=$2 version tree
	shift 2
	version=$(apt-get "${aptopts[@]}" -q --print-uris source "$pkg/$suite" 2>/dev/null |
		sed -n "s/.*'.*_\([^_]*\)\.dsc'.*/\1/p" | head -n 1)
	[ -n "$version" ] || return 1
	tree="$src/$pkg-$version"
	if [ ! -d "$tree" ]; then
		(cd "$src" &&
			apt-get "${aptopts[@]}" -q --download-only source "$pkg/$suite" >&2 &&
			dpkg-source --no-check "$@" -x "${pkg}_${version}.dsc" "$tree" >&2) || return 1
	fi
	echo "$tree"
}

# --- each version --------------------------------------------------------------
status=0
summary=""
for v in $versions; do
	suite=$(suite_of "$v")
	prefix="$dir/pg$v"
	log="$dir/pg$v.log"
	pg_config="$prefix/bin/pg_config"

	if [ -n "$(source_of "$v")" ] &&
		{ [ ! -x "$pg_config" ] || [ ! -f "$prefix/.built" ]; }; then
		# A source tree of the user's: built out of tree (a VPATH build),
		# so the tree stays as it was.  Configured as Debian's packages are
		# where the suite can tell: TAP tests, OpenSSL, ICU, debug symbols.
		# A git tree has no generated parser files: bison and flex, above.
		tree=$(cd "$(source_of "$v")" && pwd)
		build="$dir/build/pg$v"
		mkdir -p "$build"
		echo "versions.sh: building PostgreSQL $v from $tree in $build into $prefix (log: $log)"
		(
			cd "$build"
			[ -f config.status ] ||
				"$tree/configure" --prefix="$prefix" --enable-tap-tests --with-openssl \
					--with-icu --enable-debug --without-lz4 --without-zstd
			make -j"$jobs"
			make install
			make -j"$jobs" -C contrib install
			make -C src/test/perl install
			make -C src/test/isolation install
		) >"$log" 2>&1 || {
			echo "versions.sh: the build of PostgreSQL $v failed; see $log" >&2
			status=1
			continue
		}
		touch "$prefix/.built"
	elif [ ! -x "$pg_config" ] || [ ! -f "$prefix/.built" ]; then
		# Without Debian's patches: they move the library directory to
		# /usr/lib/postgresql/NN and the default socket directory to
		# /var/run/postgresql, out of the private prefix.
		tree=$(fetch_source "postgresql-$v" "$suite" --skip-patches) || {
			echo "versions.sh: no source package postgresql-$v in $suite" >&2
			status=1
			continue
		}
		echo "versions.sh: building $(basename "$tree") into $prefix (log: $log)"
		(
			cd "$tree"
			[ -f config.status ] ||
				./configure --prefix="$prefix" --enable-tap-tests --with-openssl \
					--without-icu --without-lz4 --without-zstd
			make -j"$jobs"
			make install
			make -j"$jobs" -C contrib install
			# PGXS's prove_installcheck and pg_isolation_regress come from
			# the prefix
			make -C src/test/perl install
			make -C src/test/isolation install
		) >"$log" 2>&1 || {
			echo "versions.sh: the build of PostgreSQL $v failed; see $log" >&2
			status=1
			continue
		}
		touch "$prefix/.built"
	fi

	# pg_cron, for test/t/003_pg_cron.pl
	pkglibdir=$("$pg_config" --pkglibdir)
	if [ ! -f "$pkglibdir/pg_cron.so" ]; then
		cron_tree=""
		if cron_tree=$(fetch_source pg-cron "$suite"); then
			:
		elif [ -n "${PG_CRON_SRC:-}" ]; then
			cron_tree=$PG_CRON_SRC
		fi
		if [ -n "$cron_tree" ]; then
			echo "versions.sh: building pg_cron from $cron_tree for PostgreSQL $v"
			(make -C "$cron_tree" clean PG_CONFIG="$pg_config" &&
				make -C "$cron_tree" PG_CONFIG="$pg_config" &&
				make -C "$cron_tree" install PG_CONFIG="$pg_config") >>"$log" 2>&1 || {
				echo "versions.sh: the pg_cron build for $v failed; see $log" >&2
				status=1
			}
		else
			echo "versions.sh: pg_cron's source could not be had (set PG_CRON_SRC); test/t/003 will skip on $v" >&2
		fi
	fi

	# The suite runs as user postgres, who must read the prefix.
	chmod -R a+rX "$prefix"
	if ! runuser -u postgres -- test -x "$pg_config" 2>/dev/null; then
		echo "versions.sh: user postgres cannot reach $prefix; choose a DIR it can read" >&2
		status=1
		continue
	fi

	if [ -n "${BUILD_ONLY:-}" ]; then
		summary="$summary$v: built, $("$pg_config" --version)"$'\n'
		continue
	fi

	echo "versions.sh: make test on PostgreSQL $("$pg_config" --version | awk '{ print $2 }')"
	make -C "$top" clean PG_CONFIG="$pg_config" >/dev/null
	if make -C "$top" test PG_CONFIG="$pg_config" >"$dir/pg$v-test.log" 2>&1; then
		:
	else
		status=1
	fi
	make -C "$top" clean PG_CONFIG="$pg_config" >/dev/null
	summary="$summary$v: $(tail -n 1 "$dir/pg$v-test.log")"$'\n'
done

printf '%s' "$summary"
exit $status
