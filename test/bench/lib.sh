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
# new_and_warm N SQL [SETTINGS]: "NEW WARM", the medians over N sessions of
# each new backend's first call and of its second, in ms: the two figures of
# one set of backends, so that a new session is compared with the same
# backends warm, under the same load
new_and_warm() {
	local n=$1 i pairs
	shift
	pairs=$(for i in $(seq "$n"); do
		q -c "SET max_parallel_workers_per_gather = 0; ${2:-}" -c '\timing on' -c "$1" -c "$1" |
			sed -nE 's/^Time: ([0-9.]+) ms.*/\1/p' | tail -2 | paste -sd' '
	done)
	echo "$(cut -d' ' -f1 <<<"$pairs" | median) $(cut -d' ' -f2 <<<"$pairs" | median)"
}
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
# make_carts_data PRODUCTS PER_PRODUCT CARTS: the tables of optimize_carts' benchmarks, in $PGDATABASE:
# offers (PRODUCTS x PER_PRODUCT, random order, numeric(10,2) prices), shipping (4,096 stores with
# random fees, two in three shipping free from a random 20.00-200.00) and CARTS carts of 10 lines
make_carts_data() {
	q <<SQL
SET max_parallel_workers_per_gather = 0; -- random() follows setseed() in this backend only
SELECT setseed(0.42);
CREATE UNLOGGED TABLE offers AS
  SELECT p AS product_id, (s - 1) * 4 + p % 4 + 1 AS store_id,
         round((1 + random() * 999)::numeric, 2)::numeric(10,2) AS price
  FROM generate_series(1, $1) p, generate_series(1, $2) s
  ORDER BY random();
CREATE UNLOGGED TABLE shipping AS
  SELECT s AS store_id, round((random() * 20)::numeric, 2)::numeric(10,2) AS fee,
         CASE WHEN random() < 2.0 / 3 THEN round((20 + random() * 180)::numeric, 2)::numeric(10,2) END AS free_from
  FROM generate_series(1, 4096) s;
CREATE UNLOGGED TABLE carts AS
  SELECT c AS cart_id, 1 + (hashint8(c * 16 + k) & 2147483647) % $1 AS product_id,
         1 + (hashint8(-c * 16 - k) & 2147483647) % 3 AS quantity
  FROM generate_series(1, $3) c, generate_series(1, 10) k;
VACUUM ANALYZE offers; VACUUM ANALYZE shipping; VACUUM ANALYZE carts;
SQL
}
