#!/usr/bin/env bash
# test/bench/bench_keys.sh: issue 33's target for ids of any type, in one
# short run: cheapest_offers on PRODUCTS x OFFERS_PER_PRODUCT offers (30,000
# x 1,024 = 30.72M) and similar_users on USERS users x 20 points (100,000;
# CPU_USERS on the CPU, 5,000 by default: its brute force at 100,000 takes
# minutes), each with integer, uuid and text ids, on each of DEVICES (gpu
# cpu).  Every call in a fresh backend, the kinds interleaved in each of
# ROUNDS rounds (3), medians; each kind's ratio to the integer time (the
# target: at most 1.15x).  Needs a running cluster (PGHOST etc.) with gpurec
# installed; the tables stay in gpurec_bench_keys for the next run of the
# same sizes.
#
# One table holds all three kinds side by side, so every kind reads the same
# rows: offers in store order, each store's offers over every product (a
# product's offers spread over the whole table, as in a shuffled one),
# uuids md5 of the integer, text 'SKU-00000001' and 'store-1'.
set -euo pipefail
products=${PRODUCTS:-30000}
per_product=${OFFERS_PER_PRODUCT:-1024}
users=${USERS:-100000}
cpu_users=${CPU_USERS:-5000}
devices=${DEVICES:-gpu cpu}
rounds=${ROUNDS:-3}
export PGDATABASE=gpurec_bench_keys
source "$(dirname "$0")/lib.sh"

if [ "$(q -d postgres -c "SELECT count(*) FROM pg_database WHERE datname = '$PGDATABASE'")" = 0 ]; then
	fresh_database
fi
rows=$((products * per_product))
if [ "$(q -c "SELECT count(*) FROM pg_class WHERE relname = 'offers_keys'")" = 0 ] ||
	[ "$(q -c "SELECT count(*) FROM offers_keys")" != "$rows" ]; then
	echo "# loading $rows offers ($products products x $per_product stores) with integer, uuid and text ids"
	# on up to 16 sessions at once, a share of the stores each: serially, 30.72M rows take minutes
	q -c "DROP TABLE IF EXISTS offers_keys" -c "CREATE UNLOGGED TABLE offers_keys (product_id int, store_id int,
	  price numeric(10,2), product_uuid uuid, store_uuid uuid, product_sku text, store_sku text)"
	loaders=$(($(nproc) < 16 ? $(nproc) : 16))
	pids=()
	for share in $(seq 0 $((loaders - 1))); do
		q -c "INSERT INTO offers_keys
		  SELECT p.id, s.id, round((1 + random() * 999)::numeric, 2), p.uuid, s.uuid, p.sku, s.sku
		  FROM (SELECT id, md5('store ' || id)::uuid AS uuid, 'store-' || id AS sku
		        FROM generate_series(1, $per_product) id WHERE id % $loaders = $share) s
		  CROSS JOIN (SELECT id, md5(id::text)::uuid AS uuid, 'SKU-' || lpad(id::text, 8, '0') AS sku
		              FROM generate_series(1, $products) id) p" &
		pids+=($!)
	done
	for pid in "${pids[@]}"; do wait "$pid"; done
	q -c "VACUUM ANALYZE offers_keys"
fi
allow_workers offers_keys

# measure NAME SQL_INTEGER SQL_UUID SQL_TEXT: the three kinds on every device
measure() {
	local name=$1 device kind round ms integer_ms
	declare -A sql=([integer]=$2 [uuid]=$3 [text]=$4) runs=()
	for device in $devices; do
		for round in $(seq "$rounds"); do
			for kind in integer uuid text; do
				runs[$kind]+="$(run_ms "${sql[$kind]}" "$parallel SET gpurec.device = $device;")"$'\n'
			done
		done
		integer_ms=$(printf '%s' "${runs[integer]}" | median)
		echo "$name ($device), integer ids: $integer_ms ms (rounds: $(printf '%s' "${runs[integer]}" | tr '\n' ' '))"
		for kind in uuid text; do
			ms=$(printf '%s' "${runs[$kind]}" | median)
			echo "$name ($device), $kind ids: $ms ms = $(ratio "$ms" "$integer_ms")x the integer time" \
				"(rounds: $(printf '%s' "${runs[$kind]}" | tr '\n' ' '))"
		done
		notice "${sql[text]}" "$parallel SET gpurec.device = $device;"
		runs=()
	done
}

offers="FROM gpurec.cheapest_offers('SELECT"
measure "cheapest_offers $rows" \
	"SELECT count(*) $offers product_id, store_id, price FROM offers_keys', 1, NULL::bigint)" \
	"SELECT count(*) $offers product_uuid AS product_id, store_uuid AS store_id, price FROM offers_keys', 1, NULL::uuid)" \
	"SELECT count(*) $offers product_sku AS product_id, store_sku AS store_id, price FROM offers_keys', 1, NULL::text)"

all_devices=$devices
for device in $all_devices; do
	n=$users
	[ "$device" = cpu ] && n=$cpu_users
	if [ "$(q -c "SELECT count(*) FROM pg_class WHERE relname = 'points_keys_$n'")" = 0 ]; then
		echo "# loading $n users x 20 points with integer, uuid and text ids"
		q <<SQL
CREATE UNLOGGED TABLE points_keys_$n AS
  SELECT u AS user_id, md5(u::text)::uuid AS user_uuid, 'user-' || u AS user_text,
         random() * 10000 AS x, random() * 10000 AS y
  FROM generate_series(1, $n) u, generate_series(1, 20) i;
VACUUM ANALYZE points_keys_$n;
SQL
	fi
	allow_workers "points_keys_$n"
	similar="FROM gpurec.similar_users('SELECT"
	devices=$device measure "similar_users $n users" \
		"SELECT count(*) $similar user_id, x, y FROM points_keys_$n', 10, 'euclidean', NULL, NULL::bigint)" \
		"SELECT count(*) $similar user_uuid AS user_id, x, y FROM points_keys_$n', 10, 'euclidean', NULL, NULL::uuid)" \
		"SELECT count(*) $similar user_text AS user_id, x, y FROM points_keys_$n', 10, 'euclidean', NULL, NULL::text)"
done
