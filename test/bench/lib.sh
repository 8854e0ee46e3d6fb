# test/bench/lib.sh: what every benchmark script does the same way.  Source
# it after setting PGDATABASE.  Every query runs in a fresh backend, without
# parallel workers unless its settings name $parallel: the PostgreSQL
# baselines are one backend's work; gpurec's calls read with $workers
# parallel workers (WORKERS, default one fewer than the cores: the calling
# backend reads too), and so do the parallel baselines they are compared to.
workers=${WORKERS:-$(($(nproc) > 1 ? $(nproc) - 1 : 1))}
parallel="SET max_parallel_workers_per_gather = $workers; SET max_parallel_workers = $workers;"

q() { psql -XAtq -v ON_ERROR_STOP=1 "$@"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

# run_ms SQL [SETTINGS]: one timed run, in ms
run_ms() {
	q -c "SET max_parallel_workers_per_gather = 0; ${2:-}" -c '\timing on' -c "$1" |
		sed -nE 's/^Time: ([0-9.]+) ms.*/\1/p'
}
# warm_ms SQL [SETTINGS]: the second of two runs in one session, in ms: what
# a pooled or long-lived session pays, gpurec's library and CUDA started already
warm_ms() {
	q -c "SET max_parallel_workers_per_gather = 0; ${2:-}" -c '\timing on' -c "$1" -c "$1" |
		sed -nE 's/^Time: ([0-9.]+) ms.*/\1/p' | tail -1
}
# the median of the numbers on stdin (the lower middle one of an even count)
median() { sort -n | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)] }'; }
# median3 SQL [SETTINGS]: the median of three runs, in ms
median3() { for i in 1 2 3; do run_ms "$@"; done | median; }
# warm3 SQL [SETTINGS]: the median of three warm runs (warm_ms), in ms
warm3() { for i in 1 2 3; do warm_ms "$@"; done | median; }
# notice SQL [SETTINGS]: the gpurec.timing NOTICE of one run, indented
notice() { q -c "SET gpurec.timing = on; ${2:-}" -c "$1" 2>&1 | grep -E 'NOTICE|DETAIL' | sed 's/^/  /' || true; }
# allow_workers TABLE: the planner may give TABLE's scans $workers workers (it gives big tables fewer by default)
allow_workers() { q -c "ALTER TABLE $1 SET (parallel_workers = $workers)"; }
# fresh_database: $PGDATABASE dropped, created again, with gpurec
fresh_database() {
	psql -Xq -d postgres -c "DROP DATABASE IF EXISTS $PGDATABASE" -c "CREATE DATABASE $PGDATABASE"
	q -c "CREATE EXTENSION gpurec"
}
