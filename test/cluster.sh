#!/usr/bin/env bash
# test/cluster.sh start DIR [-c name=value ...]   initdb + start a throwaway cluster
# test/cluster.sh stop DIR
# test/cluster.sh resume DIR [-c name=value ...]   starts a stopped cluster again
#
# The cluster listens only on a Unix socket in DIR and runs as the
# unprivileged user pgtest when called as root (the server refuses root).
# Uses the initdb/pg_ctl on PATH, else the newest /usr/lib/postgresql/*/bin.
# `start` prints the environment a client needs.
set -euo pipefail
action=${1:?usage: cluster.sh start|stop DIR}
dir=${2:?usage: cluster.sh start|stop DIR}
shift 2
if ! command -v initdb >/dev/null 2>&1; then
	bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
	export PATH="$bin:$PATH"
fi
as_user=()
if [ "$(id -u)" = 0 ]; then
	id pgtest >/dev/null 2>&1 || useradd -r -M -s /bin/false pgtest 2>/dev/null || useradd -M pgtest
	as_user=(runuser -u pgtest --)
fi
run() { "${as_user[@]}" env PATH="$PATH" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" "$@"; }
# The server outlives this script, so it must not keep what the script
# inherited open: run under `flock FILE ...`, it held the lock until it was
# stopped, and every other holder waited on it.
start_server() {
	(
		for fd in $(seq 3 63); do eval "exec $fd>&-"; done
		run pg_ctl -D "$dir/db" -l "$dir/server.log" -w -t 60 -o "-k $dir -c listen_addresses= $*" start >/dev/null
	)
}

case "$action" in
start)
	rm -rf "$dir"
	mkdir -p "$dir"
	[ ${#as_user[@]} -eq 0 ] || chown pgtest "$dir"
	run initdb -D "$dir/db" -A trust -U postgres >"$dir/initdb.log" 2>&1
	start_server "$@"
	echo "export PGHOST=$dir PGUSER=postgres PGDATABASE=postgres"
	;;
resume)
	start_server "$@"
	;;
stop)
	run pg_ctl -D "$dir/db" -m fast -w stop >/dev/null 2>&1 || true
	;;
*)
	echo "usage: cluster.sh start|resume|stop DIR" >&2
	exit 2
	;;
esac
