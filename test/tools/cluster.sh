# shellcheck shell=bash
# test/tools/cluster.sh - a throwaway PostgreSQL cluster for the script that
# sources it (test/bench/bench.sh, test/demo/demo.sh).  Bash; PostgreSQL's
# bindir first on PATH; not as root (initdb refuses root).
#
#   cluster_create NAME PORT [INITDB_OPTION...]
#       initdb, with trust authentication, UTF8 and the C locale, in a new
#       directory ${TMPDIR:-/tmp}/inbox-NAME.XXXXXX.  The server listens on
#       no TCP address, only on a socket in that directory named by PORT,
#       so that nothing outside this OS user reaches it and no port can
#       clash with another server's.  Every PG* variable of the caller's
#       environment is unset (no service file, PGOPTIONS or PGUSER may
#       reach the script's sessions), and PGHOST and PGPORT name the
#       cluster.  From then on, however the script ends (error, ^C, kill),
#       the EXIT trap stops the server and removes the directory.
#   cluster_conf
#       appends its standard input to the cluster's postgresql.conf.
#   cluster_start
#       starts the server, or shows the end of its log and exits 1.
#   cluster_free_port CANDIDATE...
#       prints the first candidate that no other server here uses (its
#       socket in /tmp or /var/run/postgresql, or a TCP listener on
#       127.0.0.1), or returns 1.
#
# After cluster_create: cluster_dir (the directory), cluster_data (the
# data directory), cluster_log (the server log).  cluster_running is set
# once the server has started; cluster_interrupted once SIGINT or SIGTERM
# ended the script (exit status 130 or 143).  A script that defines
# cluster_before_cleanup has it called first in the EXIT trap, with the
# exit status, while the server still runs and its log is still there.

cluster_create()
{
	local name=$1 port=$2 v
	shift 2

	for v in $(compgen -v PG); do
		unset "$v"
	done

	cluster_dir=$(mktemp -d "${TMPDIR:-/tmp}/inbox-$name.XXXXXX")
	cluster_data=$cluster_dir/data
	cluster_log=$cluster_dir/server.log
	# shellcheck disable=SC2034	# for the sourcing script
	cluster_running='' cluster_interrupted=''
	trap cluster_cleanup EXIT
	trap 'cluster_interrupted=1; exit 130' INT
	trap 'cluster_interrupted=1; exit 143' TERM

	export PGHOST=$cluster_dir PGPORT=$port

	initdb -D "$cluster_data" -A trust -E UTF8 --locale=C "$@" >"$cluster_dir/initdb.log" 2>&1 || {
		cat "$cluster_dir/initdb.log" >&2
		echo "${0##*/}: initdb failed" >&2
		exit 1
	}
	cluster_conf <<-EOF

		# test/tools/cluster.sh: reached through its own socket only
		listen_addresses = ''
		unix_socket_directories = '$cluster_dir'
		port = $port
	EOF
}

cluster_conf()
{
	cat >>"$cluster_data/postgresql.conf"
}

cluster_start()
{
	pg_ctl -D "$cluster_data" -l "$cluster_log" -s -w -t 60 start >/dev/null || {
		tail -n 40 "$cluster_log" >&2
		echo "${0##*/}: the server did not start" >&2
		exit 1
	}
	# shellcheck disable=SC2034	# for the sourcing script
	cluster_running=1
}

# The EXIT trap.  The server is a throwaway: an immediate stop is enough.
# shellcheck disable=SC2317	# only the trap calls it
cluster_cleanup()
{
	local rc=$?

	trap - EXIT INT TERM
	set +e
	if declare -F cluster_before_cleanup >/dev/null; then
		cluster_before_cleanup "$rc"
	fi
	if [ -f "$cluster_data/postmaster.pid" ]; then
		pg_ctl -D "$cluster_data" -s -m immediate -w stop >/dev/null 2>&1
	fi
	rm -rf "$cluster_dir"
	exit "$rc"
}

cluster_free_port()
{
	local p dir

	for p in "$@"; do
		for dir in /tmp /var/run/postgresql; do
			[ -e "$dir/.s.PGSQL.$p" ] && continue 2
		done
		(: <"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
		echo "$p"
		return 0
	done
	return 1
}
