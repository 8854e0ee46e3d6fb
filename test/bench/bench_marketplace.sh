#!/usr/bin/env bash
# test/bench/bench_marketplace.sh: cheapest_offers on the classic marketplace
# size (30,000 products x 1,024 offers = 30.72M rows, random order), against
# the plain-SQL ways, in one run.  Needs a running cluster (PGHOST etc.) with
# gpurec installed.  PRODUCTS and OFFERS_PER_PRODUCT scale it down.
#
# Prints one line per measurement, with gpurec's speed against DISTINCT ON
# and a serial sum(price), and its backend memory per offer.
set -euo pipefail
products=${PRODUCTS:-30000}
per_product=${OFFERS_PER_PRODUCT:-1024}
devices=${DEVICES:-cpu}
db=gpurec_bench
export PGDATABASE=$db
source "$(dirname "$0")/lib.sh"

# REUSE_TABLE=1 keeps the offers of an earlier run of the same size
if [ "${REUSE_TABLE:-0}" != 1 ] || [ "$(q -d postgres -c "SELECT count(*) FROM pg_database WHERE datname = '$db'")" = 0 ] ||
	[ "$(q -c "SELECT count(*) FROM offers" 2>/dev/null)" != "$((products * per_product))" ]; then
	fresh_database
	echo "# loading $((products * per_product)) offers ($products products x $per_product offers, random order)"
	q <<SQL
SET max_parallel_workers_per_gather = 0;
CREATE UNLOGGED TABLE offers AS
  SELECT p AS product_id, s AS store_id,
         round((1 + random() * 999)::numeric, 2)::numeric(10,2) AS price
  FROM generate_series(1, $products) p, generate_series(1, $per_product) s
  ORDER BY random();
VACUUM ANALYZE offers;
SQL
fi
rows=$(q -c "SELECT count(*) FROM offers")

gpurec_sql="SELECT count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers')"
sum_sql="SELECT sum(price) FROM offers"
distinct_sql="SELECT count(*) FROM (SELECT DISTINCT ON (product_id) product_id, store_id, price FROM offers ORDER BY product_id, price, store_id) s"

# three rounds, each running every query once, so that load from elsewhere
# falls on all of them alike; the medians are compared
declare -A runs
for round in 1 2 3; do
	if [ "${BASELINES:-1}" = 1 ]; then
		runs[sum]+="$(run_ms "$sum_sql")"$'\n'
		runs[distinct]+="$(run_ms "$distinct_sql")"$'\n'
	fi
	for device in $devices; do
		runs[$device]+="$(run_ms "$gpurec_sql" "SET gpurec.device = $device;")"$'\n'
	done
done
if [ "${BASELINES:-1}" = 1 ]; then
	sum_ms=$(printf '%s' "${runs[sum]}" | median)
	distinct_ms=$(printf '%s' "${runs[distinct]}" | median)
	echo "serial sum(price):                 $sum_ms ms"
	echo "DISTINCT ON (product_id):          $distinct_ms ms"
else
	sum_ms=1 distinct_ms=1
fi
for device in $devices; do
	ms=$(printf '%s' "${runs[$device]}" | median)
	echo "gpurec.cheapest_offers ($device):   $ms ms"
	echo "  vs DISTINCT ON: $(ratio "$distinct_ms" "$ms")x faster; vs serial sum: $(ratio "$ms" "$sum_ms")x its time"
	# the phase split, from gpurec.timing
	q -c "SET gpurec.device = $device; SET gpurec.timing = on;" \
		-c "SELECT count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers')" \
		-c "SELECT count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers')" \
		-c "SELECT count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers')" 2>&1 |
		grep -E 'NOTICE' | sed 's/^/  /' || true
	# peak memory of a fresh backend doing one call, read while it lives
	hwm_kb=$(q -c "SET gpurec.device = $device" -c "SELECT count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers')" \
		-c "SELECT (regexp_match(pg_read_file('/proc/' || pg_backend_pid() || '/status'), 'VmHWM:\s+(\d+)'))[1]" | tail -1)
	base_kb=$(q -c "SELECT (regexp_match(pg_read_file('/proc/' || pg_backend_pid() || '/status'), 'VmHWM:\s+(\d+)'))[1]" | tail -1)
	echo "  peak backend memory: $hwm_kb kB (an idle backend: $base_kb kB) = $(ratio "$(( (hwm_kb - base_kb) * 1024 ))" "$rows") bytes per offer"
done
