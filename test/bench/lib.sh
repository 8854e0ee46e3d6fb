# test/bench/lib.sh: what every benchmark script does the same way.  Source
# it after setting PGDATABASE; every query runs in a fresh backend, without
# parallel workers, so that a figure is one backend's work.

q() { psql -XAtq -v ON_ERROR_STOP=1 "$@"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

# run_ms SQL [SETTINGS]: one timed run, in ms
run_ms() {
	q -c "SET max_parallel_workers_per_gather = 0; ${2:-}" -c '\timing on' -c "$1" |
		sed -nE 's/^Time: ([0-9.]+) ms.*/\1/p'
}
# the median of three numbers on stdin
median() { sort -n | sed -n 2p; }
# median3 SQL [SETTINGS]: the median of three runs, in ms
median3() { for i in 1 2 3; do run_ms "$@"; done | median; }
# notice SQL [SETTINGS]: the gpurec.timing NOTICE of one run, indented
notice() { q -c "SET gpurec.timing = on; ${2:-}" -c "$1" 2>&1 | grep NOTICE | sed 's/^/  /' || true; }
# fresh_database: $PGDATABASE dropped, created again, with gpurec
fresh_database() {
	psql -Xq -d postgres -c "DROP DATABASE IF EXISTS $PGDATABASE" -c "CREATE DATABASE $PGDATABASE"
	q -c "CREATE EXTENSION gpurec"
}
