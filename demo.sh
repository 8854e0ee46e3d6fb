#!/usr/bin/env bash
# demo.sh: the main job, on a fresh Debian 12 machine as root.  Installs what
# it needs, builds and installs gpurec, starts a throwaway cluster, loads demo
# data (the classic marketplace size: 30,000 products x 1,024 offers), runs
# every function and prints results and timings.  DEMO_PRODUCTS scales it.
set -euo pipefail
cd "$(dirname "$0")"
products=${DEMO_PRODUCTS:-30000}
dir=/tmp/gpurec-demo

if [ -z "${GPUREC_NO_APT:-}" ]; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq make g++ postgresql-15 postgresql-server-dev-15 >/dev/null
fi
export PG_CONFIG=${PG_CONFIG:-pg_config}
make -s -j2 >/dev/null && make -s install >/dev/null
eval "$(test/cluster.sh start $dir -c shared_buffers=1GB -c work_mem=256MB -c max_wal_size=8GB)"
trap 'test/cluster.sh stop $dir' EXIT
export PGDATABASE=postgres

q() { psql -X -v ON_ERROR_STOP=1 "$@"; }
q -q <<SQL
CREATE EXTENSION gpurec;
\echo '== loading $((products * 1024)) offers in random order, and 100,000 carts'
CREATE UNLOGGED TABLE offers AS
  SELECT p AS product_id, s AS store_id, round((1 + random() * 999)::numeric, 2)::numeric(10,2) AS price,
         random() < 0.95 AS in_stock
  FROM generate_series(1, $products) p, generate_series(1, 1024) s ORDER BY random();
CREATE UNLOGGED TABLE carts AS
  SELECT c AS cart_id, 1 + (random() * ($products - 1))::int AS product_id,
         1 + (random() * 1023)::int AS store_id, 1 + (random() * 3)::int AS quantity
  FROM generate_series(1, 100000) c, generate_series(1, 5) line;
VACUUM ANALYZE offers;
VACUUM ANALYZE carts;
SQL

q <<'SQL'
\echo '== the GPUs this backend can use (none is fine: the CPU path gives the same answers)'
SELECT * FROM gpurec.devices();
SET gpurec.timing = on;
\timing on
\echo '== the cheapest offer of every product in stock (first 5 products)'
SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers WHERE in_stock') LIMIT 5;
\echo '== the 3 cheapest offers of every product (count)'
SELECT count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers', 3);
\echo '== smart cart: lines of 500,000 cart lines a cheaper store would serve (first 5, and the total saving)'
SELECT * FROM gpurec.improve_carts('SELECT cart_id, product_id, store_id, quantity FROM carts',
                                   'SELECT product_id, store_id, price FROM offers WHERE in_stock') LIMIT 5;
SELECT count(*) AS lines, sum(saving) AS total_saving
FROM gpurec.improve_carts('SELECT cart_id, product_id, store_id, quantity FROM carts',
                          'SELECT product_id, store_id, price FROM offers WHERE in_stock');
SQL
for extra in test/demo_*.sql; do
	[ -e "$extra" ] && q -f "$extra"
done
