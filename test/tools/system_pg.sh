#!/bin/bash
# test/tools/system_pg.sh - sourced by test/tools/run.sh and
# examples/run-jvm-go.sh before they switch PG_CONFIG to their private copy
# of the server (tmp_install.sh): it fingerprints the files of the system's
# PostgreSQL that an install would write (PG_CONFIG's bindir, pkglibdir and
# extension directory), and system_pg_unchanged WHO says afterwards whether
# they are unchanged, returning 1 when they are not.
system_pg_dirs="$("$PG_CONFIG" --bindir) $("$PG_CONFIG" --pkglibdir) $("$PG_CONFIG" --sharedir)/extension"
# shellcheck disable=SC2086
system_pg_fingerprint() { find $system_pg_dirs -printf '%p %s %T@ %m\n' 2>/dev/null | sort | md5sum; }
system_pg_before=$(system_pg_fingerprint)

system_pg_unchanged()
{
	if [ "$(system_pg_fingerprint)" = "$system_pg_before" ]; then
		echo "$1: the system's PostgreSQL is unchanged ($system_pg_dirs)"
	else
		echo "$1: the system's PostgreSQL changed during the run ($system_pg_dirs)" >&2
		return 1
	fi
}
