#!/usr/bin/env bash
# test/bench/bench_first_call.sh: what a backend's first GPU call costs beyond
# its later ones (CUDA's start, the kernels' first load), on OFFERS offers
# (2,000,000 by default, 200,000 products; k = 10, as the old
# statement-timeout-during-output test called it).  Needs a running cluster
# with gpurec and a GPU.  In one fresh session: gpurec.devices() (CUDA
# starts), then three calls with gpurec.timing; in another fresh session
# three calls without devices() first.
set -euo pipefail
offers=${OFFERS:-2000000}
db=gpurec_bench_first
export PGDATABASE=$db
source "$(dirname "$0")/lib.sh"
fresh_database
q -c "CREATE UNLOGGED TABLE offers AS SELECT 1 + (random() * 199999)::bigint AS product_id, (random() * 999)::bigint AS store_id, round((random() * 1000)::numeric, 2) AS price FROM generate_series(1, $offers)" -c "VACUUM ANALYZE offers"
call="SELECT count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers', 10)"
echo "# a fresh session: devices() first, then three calls"
q -c "SET gpurec.device = gpu" -c "SET gpurec.timing = on" -c '\timing on' -c "SELECT count(*) FROM gpurec.devices()" -c "$call" -c "$call" -c "$call" 2>&1 | grep -E 'Time|NOTICE' | sed 's/^/  /'
echo "# a fresh session: three calls"
q -c "SET gpurec.device = gpu" -c "SET gpurec.timing = on" -c '\timing on' -c "$call" -c "$call" -c "$call" 2>&1 | grep -E 'Time|NOTICE' | sed 's/^/  /'
