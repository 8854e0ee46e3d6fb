#!/usr/bin/env bash
# test/bench/bench_keys.sh: issue 33's target for ids of any type, in one
# short run: cheapest_offers on PRODUCTS x OFFERS_PER_PRODUCT offers (30,000
# x 1,024 = 30.72M) and similar_users on USERS users x 20 points (100,000;
# CPU_USERS on the CPU, 5,000 by default: its brute force at 100,000 takes
# minutes), each with integer, uuid and text ids, on each of DEVICES (gpu
# cpu).  With GEO_USERS (0: none), user_similarity on GEO_USERS users x 20
# points too, on each device: a read of many distinct ids, whose join of
# the workers' columns codes them all.  Every call in a fresh backend, the kinds interleaved in each of
# ROUNDS rounds (3), medians; each kind's ratio to the integer time (the
# target: at most 1.15x).  Beside them, plain SQL on the same tables: the
# scan (sum(price)) and the cheapest price of each product (GROUP BY), each
# kind's ratio to the integer table's.  Needs a running cluster (PGHOST etc.) with gpurec
# installed; the tables stay in gpurec_bench_keys for the next run of the
# same sizes.
#
# Each kind has a table of its own, all three alike, (product_id, store_id,
# price), holding the same rows: a kind's call reads its
# ids as the table's first columns, as a table keyed by them holds them (in
# one table of all three, the uuid and text calls alone would walk past the
# columns before theirs in every row).  Offers in store order, each store's
# offers over every product (a product's offers spread over the whole
# table, as in a shuffled one); uuids md5 of the integer, text
# 'SKU-00000001' and 'store-1'.
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
loaded() { [ "$(q -c "SELECT count(*) FROM pg_class WHERE relname = 'offers_keys_$1'")" = 1 ] &&
	[ "$(q -c "SELECT count(*) FROM offers_keys_$1")" = "$rows" ]; }
if ! loaded integer || ! loaded uuid || ! loaded text; then
	echo "# loading $rows offers ($products products x $per_product stores) thrice: integer, uuid and text ids"
	q -c "DROP TABLE IF EXISTS offers_keys, offers_keys_integer, offers_keys_uuid, offers_keys_text" \
		-c "CREATE UNLOGGED TABLE offers_keys_integer (product_id int, store_id int, price numeric(10,2))" \
		-c "CREATE UNLOGGED TABLE offers_keys_uuid (product_id uuid, store_id uuid, price numeric(10,2))" \
		-c "CREATE UNLOGGED TABLE offers_keys_text (product_id text, store_id text, price numeric(10,2))"
	# on up to 16 sessions at once, a share of the stores each: serially, 30.72M rows take minutes;
	# each session's rows go into the three tables alike (a CTE read thrice is made once)
	loaders=$(($(nproc) < 16 ? $(nproc) : 16))
	pids=()
	for share in $(seq 0 $((loaders - 1))); do
		q -c "WITH o AS (
		  SELECT p.id AS product, s.id AS store, round((1 + random() * 999)::numeric, 2) AS price
		  FROM (SELECT id FROM generate_series(1, $per_product) id WHERE id % $loaders = $share) s
		  CROSS JOIN generate_series(1, $products) p(id)),
		i AS (INSERT INTO offers_keys_integer SELECT product, store, price FROM o),
		u AS (INSERT INTO offers_keys_uuid SELECT md5(product::text)::uuid, md5('store ' || store)::uuid, price FROM o)
		INSERT INTO offers_keys_text SELECT 'SKU-' || lpad(product::text, 8, '0'), 'store-' || store, price FROM o" &
		pids+=($!)
	done
	for pid in "${pids[@]}"; do wait "$pid"; done
	for kind in integer uuid text; do q -c "VACUUM ANALYZE offers_keys_$kind"; done
fi
for kind in integer uuid text; do allow_workers "offers_keys_$kind"; done

# measure NAME SQL_INTEGER SQL_UUID SQL_TEXT: the three kinds on every device
# (the device "plain": plain SQL, which no setting of gpurec touches)
measure() {
	local name=$1 device kind round ms integer_ms settings
	declare -A sql=([integer]=$2 [uuid]=$3 [text]=$4) runs=()
	for device in $devices; do
		settings="$parallel SET gpurec.device = $device;"
		[ "$device" = plain ] && settings=$parallel
		for round in $(seq "$rounds"); do
			for kind in integer uuid text; do
				runs[$kind]+="$(run_ms "${sql[$kind]}" "$settings")"$'\n'
			done
		done
		integer_ms=$(printf '%s' "${runs[integer]}" | median)
		echo "$name ($device), integer ids: $integer_ms ms (rounds: $(printf '%s' "${runs[integer]}" | tr '\n' ' '))"
		for kind in uuid text; do
			ms=$(printf '%s' "${runs[$kind]}" | median)
			echo "$name ($device), $kind ids: $ms ms = $(ratio "$ms" "$integer_ms")x the integer time" \
				"(rounds: $(printf '%s' "${runs[$kind]}" | tr '\n' ' '))"
		done
		[ "$device" = plain ] || notice "${sql[text]}" "$settings"
		runs=()
	done
}

offers="FROM gpurec.cheapest_offers('SELECT"
measure "cheapest_offers $rows" \
	"SELECT count(*) $offers product_id, store_id, price FROM offers_keys_integer', 1, NULL::bigint)" \
	"SELECT count(*) $offers product_id, store_id, price FROM offers_keys_uuid', 1, NULL::uuid)" \
	"SELECT count(*) $offers product_id, store_id, price FROM offers_keys_text', 1, NULL::text)"
# the plain-SQL way on the same tables, in the same rounds' manner: what the
# kinds' tables cost PostgreSQL itself to scan (a uuid row is 16 bytes an id,
# an integer 4), and to group by product (its hash of each row's id)
plain_scan=() plain_group=()
for kind in integer uuid text; do
	plain_scan+=("SELECT sum(price) FROM offers_keys_$kind")
	plain_group+=("SELECT count(*) FROM (SELECT product_id, min(price) FROM offers_keys_$kind GROUP BY product_id) g")
done
devices=plain measure "plain SQL's scan, sum(price), $rows offers" "${plain_scan[@]}"
devices=plain measure "plain SQL's min(price) by product_id, $rows offers" "${plain_group[@]}"

# points_table N: the table of N users x 20 points, each user's id as an integer, a uuid and a text, loaded once
points_table() {
	if [ "$(q -c "SELECT count(*) FROM pg_class WHERE relname = 'points_keys_$1'")" = 0 ]; then
		echo "# loading $1 users x 20 points with integer, uuid and text ids"
		q <<SQL
CREATE UNLOGGED TABLE points_keys_$1 AS
  SELECT u AS user_id, md5(u::text)::uuid AS user_uuid, 'user-' || u AS user_text,
         random() * 10000 AS x, random() * 10000 AS y
  FROM generate_series(1, $1) u, generate_series(1, 20) i;
VACUUM ANALYZE points_keys_$1;
SQL
	fi
	allow_workers "points_keys_$1"
}

all_devices=$devices
for device in $all_devices; do
	n=$users
	[ "$device" = cpu ] && n=$cpu_users
	points_table "$n"
	similar="FROM gpurec.similar_users('SELECT"
	devices=$device measure "similar_users $n users" \
		"SELECT count(*) $similar user_id, x, y FROM points_keys_$n', 10, 'euclidean', NULL, NULL::bigint)" \
		"SELECT count(*) $similar user_uuid AS user_id, x, y FROM points_keys_$n', 10, 'euclidean', NULL, NULL::uuid)" \
		"SELECT count(*) $similar user_text AS user_id, x, y FROM points_keys_$n', 10, 'euclidean', NULL, NULL::text)"
done

geo_users=${GEO_USERS:-0}
if [ "$geo_users" -gt 0 ]; then
	points_table "$geo_users"
	similarity="FROM gpurec.user_similarity('SELECT"
	devices=$all_devices measure "user_similarity $geo_users users" \
		"SELECT count(*) $similarity user_id, x, y FROM points_keys_$geo_users', 1)" \
		"SELECT count(*) $similarity user_uuid AS user_id, x, y FROM points_keys_$geo_users', md5('1')::uuid, 'euclidean', NULL, NULL::uuid)" \
		"SELECT count(*) $similarity user_text AS user_id, x, y FROM points_keys_$geo_users', 'user-1'::text, 'euclidean', NULL, NULL::text)"
fi
