#!/bin/bash
#-------------------------------------------------------------------------
#
# tmp_install.sh DEST [SRC]
#	  A private copy of the PostgreSQL that PG_CONFIG names, at DEST, with
#	  the extension and the relay built in SRC (the work tree by default)
#	  installed into it.  Prints the copy's pg_config.  What make test,
#	  make demo, make bench and make examples run: nothing of the system's
#	  PostgreSQL is written, so two checkouts can test at the same time.
#	  SRC= (empty) copies the server only, for baseline.sh to install a
#	  release into.
#
# The copy holds the server's bindir, pkglibdir and sharedir at the same
# paths under DEST, so the relocatable server, and its pg_config, find
# their files there; the headers (libpq's and the server's) are linked, not
# copied: builds read them, nothing writes them.  A copy already at DEST is refreshed: the
# server's files are copied again only when the server changed.
#
# test/tools/tmp_install.sh
#
#-------------------------------------------------------------------------
set -euo pipefail

dest=$1
src=${2-$(cd "$(dirname "$0")/../.." && pwd)}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}

bindir=$("$PG_CONFIG" --bindir)
pkglibdir=$("$PG_CONFIG" --pkglibdir)
sharedir=$("$PG_CONFIG" --sharedir)
includedirs=$("$PG_CONFIG" --includedir --includedir-server)

stamp="$dest/.server"
server="$("$PG_CONFIG" --version) $bindir $(stat -c %Y "$bindir/postgres" "$pkglibdir" "$sharedir/extension" | tr '\n' ' ')"
if [ "$(cat "$stamp" 2>/dev/null)" != "$server" ]; then
	rm -rf "$dest"
	for d in "$bindir" "$pkglibdir" "$sharedir"; do
		mkdir -p "$dest$d"
		cp -a "$d/." "$dest$d/"
	done
	# Each header directory is linked, unless it lies under one linked
	# already (a link must never be made through another into the system)
	linked=''
	for d in $includedirs; do
		case "$d/" in "$linked"/*) [ -n "$linked" ] && continue ;; esac
		if [ -d "$d" ]; then
			mkdir -p "$(dirname "$dest$d")"
			ln -sfn "$d" "$dest$d"
			linked=$d
		fi
	done
	# The extension's files come only from SRC (or the caller)
	rm -f "$dest$pkglibdir"/inbox.so "$dest$bindir"/inbox-relay \
		"$dest$sharedir"/extension/inbox.control "$dest$sharedir"/extension/inbox--*.sql
	printf '%s\n' "$server" >"$stamp"
fi

if [ -n "$src" ]; then
	make -C "$src" -s PG_CONFIG="$PG_CONFIG" DESTDIR="$dest" install >/dev/null
	# The relay, where it was built: into the copy's bindir, where the
	# tests look for it (make install puts it in $(PREFIX)/bin)
	if [ -x "$src/relay/inbox-relay" ]; then
		make -C "$src/relay" -s PG_CONFIG="$PG_CONFIG" bindir="$dest$bindir" install >/dev/null
	fi
fi
echo "$dest$bindir/pg_config"
