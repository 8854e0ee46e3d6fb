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
allow_workers offers
rows=$(q -c "SELECT count(*) FROM offers")

gpurec_sql="SELECT count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers')"
sum_sql="SELECT sum(price) FROM offers"
count_sql="SELECT count(*) FROM offers"
distinct_sql="SELECT count(*) FROM (SELECT DISTINCT ON (product_id) product_id, store_id, price FROM offers ORDER BY product_id, price, store_id) s"
serial_read="SET gpurec.parallel_workers = 0;"

# ROUNDS rounds (default 5), each running every query once, gpurec's call
# both in a new backend and as a session's second call, so that load from
# elsewhere falls on all of them alike; the medians are compared
declare -A runs
for round in $(seq "${ROUNDS:-5}"); do
	if [ "${BASELINES:-1}" = 1 ]; then
		runs[sum]+="$(run_ms "$sum_sql")"$'\n'
		runs[psum]+="$(run_ms "$sum_sql" "$parallel")"$'\n'
		runs[count]+="$(run_ms "$count_sql")"$'\n'
		runs[pcount]+="$(run_ms "$count_sql" "$parallel")"$'\n'
		[ "${DISTINCT:-1}" = 1 ] && runs[distinct]+="$(run_ms "$distinct_sql")"$'\n'
	fi
	for device in $devices; do
		runs[$device]+="$(run_ms "$gpurec_sql" "$parallel SET gpurec.device = $device;")"$'\n'
		runs[warm_$device]+="$(warm_ms "$gpurec_sql" "$parallel SET gpurec.device = $device;")"$'\n'
		runs[serial_$device]+="$(run_ms "$gpurec_sql" "$parallel $serial_read SET gpurec.device = $device;")"$'\n'
	done
done
if [ "${BASELINES:-1}" = 1 ]; then
	sum_ms=$(printf '%s' "${runs[sum]}" | median)
	psum_ms=$(printf '%s' "${runs[psum]}" | median)
	count_ms=$(printf '%s' "${runs[count]}" | median)
	pcount_ms=$(printf '%s' "${runs[pcount]}" | median)
	distinct_ms=$(printf "%s" "${runs[distinct]:-}" | median)
	[ -n "$distinct_ms" ] || distinct_ms=1 # DISTINCT=0 skips it
	echo "# $rows offers, $workers parallel workers and the calling backend ($(nproc) cores)"
	echo "serial sum(price):                 $sum_ms ms"
	echo "parallel sum(price):               $psum_ms ms (rounds: $(printf '%s' "${runs[psum]}" | tr '\n' ' '))"
	echo "serial count(*):                   $count_ms ms ($(ratio "$(awk -v m="$count_ms" -v r="$rows" 'BEGIN { print m * 1e6 / r }')" 1) ns a row)"
	echo "parallel count(*):                 $pcount_ms ms ($(ratio "$(awk -v m="$pcount_ms" -v r="$rows" -v p="$workers" 'BEGIN { print m * 1e6 * (p + 1) / r }')" 1) ns a row per process)"
	echo "DISTINCT ON (product_id):          $distinct_ms ms"
else
	sum_ms=1 psum_ms=1 distinct_ms=1 pcount_ms=1
fi
for device in $devices; do
	ms=$(printf '%s' "${runs[$device]}" | median)
	warm=$(printf '%s' "${runs[warm_$device]}" | median)
	serial_ms=$(printf '%s' "${runs[serial_$device]}" | median)
	echo "gpurec.cheapest_offers ($device), parallel read:   $ms ms (rounds: $(printf '%s' "${runs[$device]}" | tr '\n' ' '))"
	echo "gpurec.cheapest_offers ($device), serial read:     $serial_ms ms"
	echo "gpurec.cheapest_offers ($device), parallel read, warm session: $warm ms (rounds: $(printf '%s' "${runs[warm_$device]}" | tr '\n' ' '))"
	echo "  vs DISTINCT ON: $(ratio "$distinct_ms" "$ms")x faster; vs serial sum: $(ratio "$ms" "$sum_ms")x its time;" \
		"vs parallel sum: $(ratio "$ms" "$psum_ms")x (warm: $(ratio "$warm" "$psum_ms")x); serial read vs serial sum: $(ratio "$serial_ms" "$sum_ms")x"
	# the phase split, from gpurec.timing; the read rate per process beside count(*)'s
	notices=$(for i in 1 2 3; do notice "$gpurec_sql" "$parallel SET gpurec.device = $device;"; done)
	printf '%s\n' "$notices"
	read_ms=$(printf '%s\n' "$notices" | sed -nE 's/.*read ([0-9.]+) ms.*/\1/p' | median)
	echo "  parallel read: $(ratio "$(awk -v m="$read_ms" -v r="$rows" -v p="$workers" 'BEGIN { print m * 1e6 * (p + 1) / r }')" 1) ns a row per process"
	# peak memory of a fresh backend doing one call, read while it lives
	hwm_kb=$(q -c "$parallel SET gpurec.device = $device" -c "SELECT count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers')" \
		-c "SELECT (regexp_match(pg_read_file('/proc/' || pg_backend_pid() || '/status'), 'VmHWM:\s+(\d+)'))[1]" | tail -1)
	base_kb=$(q -c "SELECT (regexp_match(pg_read_file('/proc/' || pg_backend_pid() || '/status'), 'VmHWM:\s+(\d+)'))[1]" | tail -1)
	echo "  peak backend memory: $hwm_kb kB (an idle backend: $base_kb kB) = $(ratio "$(( (hwm_kb - base_kb) * 1024 ))" "$rows") bytes per offer"
done

