#!/bin/bash
# test/tools/packages.sh deb|dist - what "make deb" and "make dist" run.
#
#   deb   the Debian binary packages postgresql-NN-inbox, built with
#         Debian's PostgreSQL extension tooling (pg_buildext, dh with the
#         pgxs_loop addon, debian/control.in) for every PostgreSQL NN >= 15
#         whose postgresql-server-dev-NN is installed
#         (PG_SUPPORTED_VERSIONS=installed; set it to "15 16" to choose).
#         It builds from a copy of the files git sees (tracked, and
#         untracked but not ignored: the work tree as it is, like
#         test/tools/run.sh), or of the whole tree outside a git checkout, so
#         that the work tree is never written to.
#   dist  the PGXN release zip inbox-X.Y.Z.zip: "git archive" of HEAD,
#         so only committed files, under the prefix inbox-X.Y.Z/; then
#         test/tools/pgxn-check.pl validates its META.json and its contents, and
#         a zip that fails is deleted.
#
# Both write into DISTDIR (default dist/, relative to the top directory,
# ignored by git) and print the paths of what they wrote.  Root is not
# needed: Rules-Requires-Root is "no", so dpkg-deb records root as owner
# of every file without fakeroot.
set -euo pipefail

what=${1:?usage: test/tools/packages.sh deb|dist}
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"

out=${DISTDIR:-dist}
mkdir -p "$out"
out=$(cd "$out" && pwd)

version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" inbox.control)
[ -n "$version" ] || { echo "packages.sh: no default_version in inbox.control" >&2; exit 1; }

in_git() { git rev-parse --is-inside-work-tree >/dev/null 2>&1; }

# Uncommitted changes matter to dist (they are left out) and to a deb
# someone means to publish (they are built in): say so, do not refuse.
dirty_note()
{
	local n
	n=$(git status --porcelain --untracked-files=normal | wc -l)
	[ "$n" -eq 0 ] || echo "packages.sh: note: $n path(s) differ from HEAD ($(git rev-parse --short HEAD)); $1" >&2
}

case "$what" in
	deb)
		missing=""
		command -v pg_buildext >/dev/null || missing="$missing postgresql-common"
		command -v dpkg-buildpackage >/dev/null || missing="$missing dpkg-dev"
		command -v dh >/dev/null || missing="$missing debhelper"
		[ -f /usr/share/perl5/Debian/Debhelper/Sequence/pgxs_loop.pm ] ||
			missing="$missing postgresql-server-dev-all"
		if [ -n "$missing" ]; then
			echo "packages.sh: make deb needs:$missing (test/tools/ensure-deps.sh installs them, as root)" >&2
			exit 1
		fi

		build=$(mktemp -d "${TMPDIR:-/tmp}/inbox-deb.XXXXXX")
		trap 'rm -rf "$build"' EXIT
		src="$build/inbox-$version"
		mkdir "$src"
		if in_git; then
			dirty_note "the package is built from the work tree as it is"
			# Files deleted but not yet "git rm"ed are listed too: skip them.
			git ls-files -co --exclude-standard -z |
				while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
				tar --null -cf - -T - | tar -xf - -C "$src"
			origin="git commit $(git rev-parse --short HEAD)"
		else
			# An unpacked release: everything but the output directory.
			# The package's clean step runs "make clean" before building.
			tar --exclude=./.git --exclude="./$(realpath --relative-to="$top" "$out")" -cf - . |
				tar -xf - -C "$src"
			origin="a tree outside git"
		fi

		cd "$src"
		# The changelog names the version, which comes from inbox.control;
		# the maintainer is debian/control.in's unless DEBFULLNAME and
		# DEBEMAIL say otherwise.
		maint=$(sed -n 's/^Maintainer: //p' debian/control.in)
		if [ -n "${DEBFULLNAME:-}" ] && [ -n "${DEBEMAIL:-}" ]; then
			maint="$DEBFULLNAME <$DEBEMAIL>"
		fi
		cat >debian/changelog <<-EOF
			inbox ($version) unstable; urgency=medium

			  * Built by "make deb" from $origin.

			 -- $maint  $(date -R)
		EOF

		export PG_SUPPORTED_VERSIONS=${PG_SUPPORTED_VERSIONS:-installed}
		versions=$(pg_buildext supported-versions | xargs)
		if [ -z "$versions" ]; then
			echo "packages.sh: no PostgreSQL version to build for: debian/pgversions asks for $(xargs <debian/pgversions)," \
				"PG_SUPPORTED_VERSIONS=$PG_SUPPORTED_VERSIONS gives: $(/usr/share/postgresql-common/supported-versions | xargs)" >&2
			exit 1
		fi
		echo "packages.sh: building inbox $version for PostgreSQL $versions"
		# debian/control lists one package per version built
		pg_buildext updatecontrol
		dpkg-buildpackage -b --no-sign
		cd "$top"
		debs=("$build"/*.deb)
		[ -e "${debs[0]}" ] || { echo "packages.sh: dpkg-buildpackage made no .deb" >&2; exit 1; }
		cp "${debs[@]}" "$out/"
		for d in "${debs[@]}"; do echo "$out/$(basename "$d")"; done
		;;
	dist)
		if ! in_git; then
			echo "packages.sh: make dist archives git's HEAD: run it in a git checkout" >&2
			exit 1
		fi
		dirty_note "the zip holds HEAD only, without them"
		# The version HEAD's control file gives, as the zip holds HEAD
		version=$(git show HEAD:inbox.control | sed -n "s/^default_version = '\(.*\)'/\1/p")
		zip="$out/inbox-$version.zip"
		rm -f "$zip"
		git archive --format=zip --prefix="inbox-$version/" -o "$zip" HEAD
		if ! perl test/tools/pgxn-check.pl "$zip"; then
			rm -f "$zip"
			echo "packages.sh: $zip is not a valid PGXN release; deleted" >&2
			exit 1
		fi
		echo "$zip"
		;;
	*)
		echo "usage: test/tools/packages.sh deb|dist" >&2
		exit 2
		;;
esac
