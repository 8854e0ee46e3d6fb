#!/usr/bin/env bash
# demo.sh: the main job, on a fresh Debian 12 machine as root.
#
# Installs what it needs (apt-get; GPUREC_NO_APT=1 skips that), builds and
# installs gpurec, starts a throwaway cluster (test/cluster.sh, as the
# unprivileged user pgtest, stopped on exit), then shows every function on
# demo data, each beside the plain-SQL way where there is one, with timings:
#
#   test/demo_market.sql  cheapest_offers, improve_carts, optimize_carts (the marketplace:
#                         DEMO_PRODUCTS products x 1,024 stores, default 30,000)
#   test/demo_geo.sql     user_similarity, similar_users, predict_strength,
#                         fit_exponent (a check-in history, test/data/checkins.sql)
#   test/demo_roc.sql     roc_fitness (long and array formats), roc_auc
#
# About 2 minutes on 2 CPU cores at the default size (1 for DEMO_PRODUCTS=3000),
# after the build.  DEMO_DIR: the throwaway cluster's directory (default
# /tmp/gpurec-demo).
set -Eeuo pipefail
cd "$(dirname "$0")"
trap 'echo "demo.sh stopped: the step above failed (server log: $dir/server.log)" >&2' ERR
products=${DEMO_PRODUCTS:-30000}
dir=${DEMO_DIR:-/tmp/gpurec-demo}
log=$dir-build.log
case $products in '' | *[!0-9]* | 0*) echo "DEMO_PRODUCTS must be a positive number, not '$products'" >&2; exit 2 ;; esac

commas() { # 30720000 -> 30,720,000
	local n=$1 s=
	while [ ${#n} -gt 3 ]; do s=,${n: -3}$s; n=${n:0:${#n}-3}; done
	echo "$n$s"
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }
# step "what is happening" command...: one line, "... done in N s", and the
# command's own output only when it fails.
step() {
	local what=$1 t
	shift
	printf '%s... ' "$what"
	t=$(now)
	if "$@" >>"$log" 2>&1; then
		echo "done in $(since "$t")"
	else
		echo "FAILED; its output:"
		tail -40 "$log"
		exit 1
	fi
}

start=$(now)
offers=$((products * 1024))
echo "gpurec demo: GPU-speed recommendation and marketplace analytics inside PostgreSQL 15."
echo "Every step says what it does and how long it took: about $((offers / 30000000 + 1)) minute$([ $offers -lt 30000000 ] || echo s) on 2 CPU cores, after the build."
echo "Marketplace size: $(commas "$products") products x 1,024 stores = $(commas $offers) offers (DEMO_PRODUCTS sets the"
echo "number of products: 30,000 by default, the classic marketplace size; DEMO_PRODUCTS=3000 for a tenth)."
echo
echo "== Setup (build output goes to $log)"
: >"$log"
if [ -z "${GPUREC_NO_APT:-}" ]; then
	export DEBIAN_FRONTEND=noninteractive
	step "installing make, g++ and PostgreSQL 15 with apt-get (GPUREC_NO_APT=1 skips this)" \
		bash -c 'apt-get update -q && apt-get install -y -q make g++ postgresql-15 postgresql-server-dev-15'
fi
export PG_CONFIG=${PG_CONFIG:-pg_config}
if [ -n "${NVCC+set}" ] && [ -z "$NVCC" ]; then
	kind="CPU-only, as NVCC is set empty (about 15 s on 2 cores the first time)"
elif command -v nvcc >/dev/null 2>&1 || [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
	kind="with its CUDA kernels (nvcc found; about 1.5 minutes on 2 cores the first time)"
else
	kind="CPU-only, as no nvcc was found (about 15 s on 2 cores the first time)"
fi
step "building gpurec $kind" make -j"$(nproc)"
step "installing it into PostgreSQL's directories (make install)" make install
trap 'test/cluster.sh stop $dir' EXIT
printf '%s... ' "starting a throwaway cluster in $dir as user pgtest (stopped at the end)"
t=$(now)
cluster_env=$(test/cluster.sh start $dir -c shared_buffers=1GB -c work_mem=256MB -c max_wal_size=8GB 2>>"$log") ||
	{ echo "FAILED; see $log and $dir/server.log"; exit 1; }
eval "$cluster_env"
echo "done in $(since "$t")"
export PGDATABASE=postgres

q() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }
q -c 'CREATE EXTENSION gpurec'
echo "CREATE EXTENSION gpurec: its functions live in schema gpurec."

echo
echo "== Devices"
q <<'SQL'
SELECT count(*) > 0 AS has_gpu FROM gpurec.devices() \gset
\if :has_gpu
\echo 'gpurec.devices(): the GPUs this backend can use.  gpurec.device = auto (the default) uses one for large'
\echo 'inputs and the CPU for small ones; the answers are the same either way.'
SELECT * FROM gpurec.devices();
\else
\echo 'gpurec.devices() returns no rows: no GPU is usable here, so every function runs on the CPU (all cores),'
\echo 'with the same answers a GPU gives.  With a GPU, gpurec.device = auto (the default) uses it for large inputs.'
\echo
\endif
SQL
# The load runs as one INSERT per core, each over a slice of a scrambled
# order of all (product, store) pairs: offer j is product j / 1024 + 1, store
# j % 1024 + 1, with j = i x 2654435761 mod the number of offers (a prime
# above any number of offers here, so every pair comes once).  Prices as a
# market has them: each product its list price (1.00 to 200.00, from its id),
# each store its price level (0.90 to 1.10 of list, from its id), and each
# offer within 8% of the two, so that the cheapest store of a product is
# about a fifth below a typical one, not a hundredth of it.
echo "== Marketplace data"
loaders=$(nproc)
[ "$loaders" -le 8 ] || loaders=8
printf '%s\n%s\n%s... ' \
	"loading $(commas $offers) offers: $(commas "$products") products x 1,024 stores, each store a price level within 10% of" \
	"  the product's list price and each offer within 8% of that, 5% out of stock," \
	"  in scrambled order, with $loaders INSERTs at once (about $((offers / 2000000 + 2)) s on 2 cores), then VACUUM ANALYZE"
t=$(now)
q -c 'CREATE UNLOGGED TABLE offers (product_id integer, store_id integer, price numeric(10,2), in_stock boolean)'
pids=()
for ((k = 0; k < loaders; k++)); do
	q -c "INSERT INTO offers
	      SELECT j / 1024 + 1, j % 1024 + 1,
	             round((1 + (j / 1024 + 1) * 2654435761 % 19901 / 100.0)                -- the product's list price
	                   * (0.9 + (j % 1024 + 1) * 40503 % 201 / 1000.0)                  -- the store's price level
	                   * (0.92 + random() * 0.16)::numeric, 2)::numeric(10,2), random() >= 0.05
	      FROM (SELECT i * 2654435761 % $offers AS j
	            FROM generate_series($offers::bigint * $k / $loaders, $offers::bigint * ($k + 1) / $loaders - 1) i) s" &
	pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
q -c 'VACUUM ANALYZE offers'
echo "done in $(since "$t")"

# psql reads the scripts from stdin, so that NOTICE lines carry no file:line prefix.
q -v products="$products" <test/demo_market.sql
q <test/demo_geo.sql
q <test/demo_roc.sql

echo "== Summary (the whole demo took $(since "$start"))"
cat <<EOF
- gpurec.devices(): the GPUs gpurec can use; without one, every function runs on
  the CPU and gives the same answers.
- Marketplace, on $(commas $offers) offers: cheapest_offers (the k cheapest offers of
  every product), improve_carts (every cart line a cheaper store would serve)
  and optimize_carts (each whole cart at its least cost, items plus the
  shipping of every store it uses, exactly).
- Geospatial recommender, on a check-in history in London, Berlin and Paris:
  user_similarity, similar_users, predict_strength (where will a user go?) and
  fit_exponent (which distance exponent predicts later visits best).
- ROC fitness for genetic algorithms: roc_fitness on a whole population at once,
  in long (one row per example) and array (one row per individual) formats,
  and roc_auc for one individual.
- Beside the plain-SQL way: the same answers, with the timings above.
Read more in README.md: "Inner queries" (how the query arguments are read),
"Marketplace", "Geospatial recommender", "ROC fitness for genetic algorithms",
"Settings" (gpurec.device, gpurec.timing; its NOTICE's DETAIL, left out here, says how each query was read)
and "Tests"; BENCHMARKS.md for timings on a 2-core
machine and on an H100 GPU.
The throwaway cluster in $dir stops now; the demo data goes with it.
EOF
