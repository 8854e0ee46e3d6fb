#!/usr/bin/env bash
# test/bench/bench_fresh_backend.sh: what a new backend costs
# cheapest_offers on the CPU beyond its second call, in ROUNDS (5)
# interleaved rounds on OFFERS offers (30,720,000) of 30,000 cyclic product
# ids.  Each round: PostgreSQL's parallel sum(price) in a new backend, then
# cheapest_offers in a new backend and again in it, with the calling
# backend's minor page faults before, between and after.  Then the same on
# 10 offers, where only a call's fixed costs show, and LOAD 'gpurec'.
# Needs a running cluster (PGHOST etc.; superuser, for /proc/self/stat).
set -euo pipefail
offers=${OFFERS:-30720000}
rounds=${ROUNDS:-5}
db=gpurec_bench_fresh
export PGDATABASE=$db
source "$(dirname "$0")/lib.sh"
fresh_database
q -c "CREATE TABLE tiny AS SELECT g::bigint AS product_id, g::bigint AS store_id, 1.5 AS price FROM generate_series(1, 10) g"
q -c "$parallel" -c "CREATE UNLOGGED TABLE offers AS
        SELECT g % 30000 + 1 AS product_id, (g * 7919) % 1000 AS store_id,
               round(((g * 104729) % 100000) / 100.0, 2) AS price
        FROM generate_series(1::bigint, $offers) g" -c "VACUUM ANALYZE offers"
allow_workers offers
settings="$parallel SET gpurec.device = cpu;"
faults="SELECT split_part(pg_read_file('/proc/self/stat'), ' ', 10)"
call="SELECT count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers', 1)"
echo "# $offers offers, $workers parallel workers; ms, and the calling backend's minor faults in each call"
for round in $(seq "$rounds"); do
	psum=$(run_ms "SELECT sum(price) FROM offers" "$parallel")
	# minor faults, time, minor faults, time, minor faults (the counts' lines skipped)
	read -r f0 t1 f1 t2 f2 < <(q -c "$settings" -c "$faults" -c '\timing on' -c "$call" -c '\timing off' -c "$faults" \
		-c '\timing on' -c "$call" -c '\timing off' -c "$faults" | sed -nE 's/^Time: ([0-9.]+) ms.*/\1/p; /^[0-9]+$/p' |
		grep -v '^30000$' | tr '\n' ' '
		echo)
	echo "round $round: parallel sum $psum; cheapest_offers new backend $t1 ($((f1 - f0)) faults), second call $t2 ($((f2 - f1)) faults)"
done
tiny="SELECT count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM tiny', 1)"
echo "# 10 offers: a new backend's call, its second call (ms)"
for round in 1 2 3; do
	echo "  $(q -c "$settings" -c '\timing on' -c "$tiny" -c "$tiny" | sed -nE 's/^Time: ([0-9.]+) ms.*/\1/p' | tr '\n' ' ')"
done
echo "# LOAD 'gpurec' in a new backend (ms): $(q -c '\timing on' -c "LOAD 'gpurec'" | sed -nE 's/^Time: ([0-9.]+) ms.*/\1/p')"
