#!/usr/bin/env bash
# test/bench/ab_builds.sh NAME=SOURCE.tgz ...: earlier builds against this
# tree's, interleaved in one run on one host, where timings of separate runs
# (separate hosts) differ by more than what a change gains.  Each tarball is
# a `git archive` of a commit (git archive 9992232 | gzip > .gpu/old.tgz);
# each is built, and each round puts every build in turn in place (a new
# backend loads it) and times, in a new session per function: the call in
# that new backend, then its second call in the same session.  For the GPU
# machine, after test/gpu_run.sh has unpacked .gpu's PostgreSQL into
# /tmp/pgroot (or set PG_CONFIG).  ROUNDS (4) rounds; OUT (/tmp) gets the
# table and every build's gpurec.timing NOTICEs.
#   users x 20 points: user_similarity on the GPU and the CPU (USERS, 1M)
#   1,000 x EXAMPLES (100k) real[]: roc_fitness (arrays) on the GPU
# WORK=output instead times the writing of many rows of numerics on the
# CPU (gpurec.timing's output phase, no GPU needed): optimize_carts over
# CARTS (100,000) carts of 10 lines, and cheapest_offers with k = 32 over
# its 30,000 x 32 offers (960,000 rows).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp}
users=${USERS:-1000000}
examples=${EXAMPLES:-100000}
if [ -z "${PG_CONFIG:-}" ]; then
	source /tmp/pgroot/env.sh
	export PG_CONFIG=/tmp/pgroot/usr/lib/postgresql/15/bin/pg_config
fi
names=()
for build in "$@"; do
	name=${build%%=*}
	mkdir -p "/tmp/ab-$name" && tar xzf "${build#*=}" -C "/tmp/ab-$name" || exit 1
	(cd "/tmp/ab-$name" && make -s -j"$(nproc)" PG_CONFIG="$PG_CONFIG" >/dev/null 2>&1) || { echo "$name: build failed"; exit 1; }
	cp "/tmp/ab-$name/gpurec.so" "/tmp/gpurec_$name.so"
	names+=("$name")
done
make -s -j"$(nproc)" PG_CONFIG="$PG_CONFIG" >/dev/null 2>&1 && make -s install PG_CONFIG="$PG_CONFIG" >/dev/null || { echo "build failed"; exit 1; }
cp gpurec.so /tmp/gpurec_this.so
names+=(this)
lib=$($PG_CONFIG --pkglibdir)
eval "$(test/cluster.sh start /tmp/gpurec-ab -c shared_buffers=4GB -c work_mem=1GB -c max_wal_size=20GB -c jit=off -c max_worker_processes=32 -c max_parallel_workers=32)"
trap 'test/cluster.sh stop /tmp/gpurec-ab' EXIT
export PGDATABASE=gpurec_ab
# a new file, not the old one overwritten: backends still running have it mapped
use() { cp "/tmp/gpurec_$1.so" "$lib/gpurec.so.new" && mv "$lib/gpurec.so.new" "$lib/gpurec.so"; }
if [ "${WORK:-}" = output ]; then
	source test/bench/lib.sh
	fresh_database && make_carts_data 30000 32 "${CARTS:-100000}" >/dev/null || exit 1
	optimize="SELECT count(*) FROM gpurec.optimize_carts('SELECT cart_id, product_id, quantity FROM carts', 'SELECT product_id, store_id, price FROM offers', 'SELECT store_id, fee, free_from FROM shipping')"
	cheapest="SELECT count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers', 32)"
	# a new session: the call twice; prints both calls' output phases in ms
	outputs() {
		psql -X -At -c "SET gpurec.timing = on; SET gpurec.device = cpu;" -c "$1" -c "$1" 2>&1 |
			sed -nE 's/.*, output ([0-9.]+) ms.*/\1/p' | tr '\n' ' '
	}
	for round in $(seq "${ROUNDS:-4}"); do
		for name in "${names[@]}"; do
			use "$name"
			echo "round $round $name: optimize_carts output $(outputs "$optimize")| cheapest_offers output $(outputs "$cheapest")"
		done
	done | tee "$out/ab.log"
	exit 0
fi
psql -Xq -d postgres -c "DROP DATABASE IF EXISTS gpurec_ab" -c "CREATE DATABASE gpurec_ab"
psql -Xq -v ON_ERROR_STOP=1 -c "CREATE EXTENSION gpurec" -c "SET max_parallel_workers_per_gather = 0" \
	-c "CREATE UNLOGGED TABLE pts AS SELECT u AS user_id, random() * 10000 AS x, random() * 10000 AS y FROM generate_series(1, $users) u, generate_series(1, 20) i UNION ALL SELECT 0, random() * 10000, random() * 10000 FROM generate_series(1, 64)" \
	-c "VACUUM ANALYZE pts" -c "ALTER TABLE pts SET (parallel_workers = 15)" \
	-c "CREATE UNLOGGED TABLE population WITH (fillfactor = 10) AS SELECT i AS individual_id, (SELECT array_agg(((random() * 100)::int / 100.0)::real) FROM generate_series(1, $examples) WHERE i > 0) AS scores FROM generate_series(1, 1000) i" \
	-c "CREATE UNLOGGED TABLE labels AS SELECT array_agg(random() < 0.3) AS labels FROM generate_series(1, $examples)" \
	-c "VACUUM ANALYZE population" -c "ALTER TABLE population SET (parallel_workers = 15)" || exit 1
settings="SET max_parallel_workers_per_gather = 15; SET max_parallel_workers = 15; SET gpurec.timing = on;"
similarity="SELECT count(*) FROM gpurec.user_similarity('SELECT user_id, x, y FROM pts', 0)"
roc="SELECT sum(auc) FROM gpurec.roc_fitness('SELECT individual_id, scores FROM population', (SELECT labels FROM labels))"
# a new session: the call twice; prints "new-backend second-call" in ms
calls() {
	psql -X -At -c "$settings SET gpurec.device = $2;" -c '\timing on' -c "$1" -c "$1" 2>>"$out/ab-notices-$3.log" |
		sed -nE 's/^Time: ([0-9.]+) ms.*/\1/p' | tr '\n' ' '
}
for round in $(seq "${ROUNDS:-4}"); do
	for name in "${names[@]}"; do
		use "$name"
		echo "round $round $name: user_similarity gpu $(calls "$similarity" gpu "$name")| cpu $(calls "$similarity" cpu "$name")| roc_fitness gpu $(calls "$roc" gpu "$name")"
	done
done | tee "$out/ab.log"
