#!/usr/bin/env bash
# test/bench/bench_service.sh: the GPU service against a backend's own CUDA,
# in one run, on a machine with GPUs.  Starts two clusters of its own: one
# with gpurec in shared_preload_libraries (the service) and one without
# (every backend its own CUDA context), with the same data.
#   new session: a fresh backend's first call against the same call warm, and
#   for roc_fitness and cheapest_offers plain SQL reading the same rows (a
#   line "... plain SQL: new session ..."): PostgreSQL's own first query
#   devices: cpu, gpu and auto for roc_fitness, similar_users, cheapest_offers
#   (PRODUCTS x PER_PRODUCT offers; 0: none), optimize_carts (CARTS carts of
#   10 lines over those offers; 0: none), and with GEO_USERS users x 20 points
#   (0: none) user_similarity and predict_strength (CANDIDATES candidates) on
#   a hundredth, a tenth and all of the users, and fit_exponent on a
#   hundredth of them (FIT_CANDIDATES candidates, 1, 5 and 25 holdout users
#   of 5 visits, the default exponents, no continuous search), at three
#   sizes each: auto's target is at most 1.1x the faster of cpu and gpu (the
#   CPU does not run predict_strength's full size: minutes)
#   split: each function whose work splits over the GPUs, on every GPU vs on one (gpurec.gpus = 0), warm, at
#   its full size: similar_users (SIMILAR_USERS users x 20 points, 0: none), user_similarity and
#   predict_strength (GEO_USERS users x 20 points, CANDIDATES candidates; GEO_USERS=0: none), roc_fitness
#   (ROC_INDIVIDUALS x ROC_EXAMPLES), optimize_carts (CARTS carts); a line "split NAME: ... = R.RRx" each
#   load: SESSIONS sessions calling roc_fitness for LOAD_S seconds vs one session in a loop
# PHASES="service split load in-process" picks the measurements; STAND_IN=N
# runs the service phases on N stand-in devices (the script's own check on a
# machine without a GPU: its figures are the CPU's).  The data
# are made once; the one cluster is started again with each phase's settings.
# Prints one line per measurement; new session and warm: the medians of five
# backends' first and second calls.  KEEP_DATA=1 keeps BENCH_DIR's cluster
# and data when a run before made them (a later run on the same machine,
# other PHASES, skips making them again).
set -euo pipefail
cd "$(dirname "$0")/../.."
similar_users=${SIMILAR_USERS:-100000}
products=${PRODUCTS:-30000}
per_product=${PER_PRODUCT:-1024}
carts=${CARTS:-100000}
individuals=${ROC_INDIVIDUALS:-1000}
examples=${ROC_EXAMPLES:-100000}
geo_users=${GEO_USERS:-1000000}
candidates=${CANDIDATES:-10000}
fit_candidates=${FIT_CANDIDATES:-1000}
sessions=${SESSIONS:-32}
load_s=${LOAD_S:-60}
base=${BENCH_DIR:-/tmp/gpurec-bench-service}
settings=(-c shared_buffers=4GB -c work_mem=1GB -c max_wal_size=20GB -c jit=off -c max_connections=100
	-c max_worker_processes=32 -c max_parallel_workers=32)
export PGDATABASE=gpurec_bench_service
source test/bench/lib.sh

dir=$base/cluster
# server NAME [settings...]: the one cluster, started again with these settings (the data stays)
server() {
	local name=$1
	shift
	[ -n "${STAND_IN:-}" ] && [ "$name" != in-process ] && set -- "$@" -c gpurec.test_stand_in_devices="$STAND_IN"
	test/cluster.sh stop "$dir"
	test/cluster.sh resume "$dir" "${settings[@]}" "$@" >/dev/null
	echo "# cluster: $name $*"
}

make_data() { # make_data: the tables of every measurement, in $PGDATABASE
	fresh_database
	q <<SQL
SELECT setseed(0.5);
CREATE UNLOGGED TABLE labels AS SELECT array_agg(random() < 0.3) AS labels FROM generate_series(1, $examples);
CREATE UNLOGGED TABLE population AS
  SELECT i AS individual_id,
         (SELECT array_agg(((random() * 100)::int / 100.0)::real) FROM generate_series(1, $examples) WHERE i > 0) AS scores
  FROM generate_series(1, $individuals) i;
CREATE UNLOGGED TABLE points AS
  SELECT (i / 20) AS user_id, random() * 1000 AS x, random() * 1000 AS y
  FROM generate_series(0, $similar_users * 20 - 1) i;
VACUUM ANALYZE population;
VACUUM ANALYZE points;
SQL
	allow_workers population
	allow_workers points
	if [[ " $phases " == *" split "* || " $phases " == *" service "* || -n "${KEEP_DATA:-}" ]] && [ "$geo_users" -gt 0 ]; then
		q <<SQL
CREATE UNLOGGED TABLE geo_points AS
  SELECT (i / 20) AS user_id, random() * 1000 AS x, random() * 1000 AS y FROM generate_series(0, $geo_users * 20 - 1) i;
CREATE UNLOGGED TABLE candidates AS
  SELECT i AS candidate_id, random() * 1000 AS x, random() * 1000 AS y FROM generate_series(1, $candidates) i;
CREATE UNLOGGED TABLE visits AS
  SELECT u AS user_id, 1 + (random() * ($fit_candidates - 1))::int AS candidate_id
  FROM generate_series(0, 24) u, generate_series(1, 5) v;
VACUUM ANALYZE geo_points;
SQL
		allow_workers geo_points
	fi
	[ "$products" -gt 0 ] || return 0
	make_carts_data "$products" "$per_product" "$carts"
	allow_workers offers
}

roc() { echo "SELECT sum(auc) FROM gpurec.roc_fitness('SELECT individual_id, scores FROM population WHERE individual_id <= $1', (SELECT labels FROM labels))"; }
similar() { echo "SELECT count(*) FROM gpurec.similar_users('SELECT user_id, x, y FROM points WHERE user_id < $1', 10)"; }
cheapest() { echo "SELECT count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers WHERE product_id <= $1', 1)"; }
# similarity [USERS], strength [USERS]: over the first USERS users (all by default)
similarity() { echo "SELECT count(*) FROM gpurec.user_similarity('SELECT user_id, x, y FROM geo_points WHERE user_id < ${1:-$geo_users}', 0)"; }
strength() { echo "SELECT count(*) FROM gpurec.predict_strength('SELECT user_id, x, y FROM geo_points WHERE user_id < ${1:-$geo_users}', 0, 'SELECT candidate_id, x, y FROM candidates')"; }
# fit HOLDOUT: fit_exponent over a hundredth of the users, HOLDOUT of them holding out their visits
fit() { echo "SELECT sum(mean_auc) FROM gpurec.fit_exponent('SELECT user_id, x, y FROM geo_points WHERE user_id < $((geo_users / 100))', 'SELECT user_id, candidate_id FROM visits WHERE user_id < $1', 'SELECT candidate_id, x, y FROM candidates WHERE candidate_id <= $fit_candidates', tolerance => NULL)"; }
# plain SQL reading the same rows: what PostgreSQL's own first query in a new backend costs beside a warm one
roc_reference() { echo "SELECT sum(cardinality(scores)) FROM population WHERE individual_id <= $1"; }
cheapest_reference() { echo "SELECT sum(price) FROM offers WHERE product_id <= $1"; }
optimize() { echo "SELECT count(*) FROM gpurec.optimize_carts('SELECT cart_id, product_id, quantity FROM carts WHERE cart_id <= $1', 'SELECT product_id, store_id, price FROM offers', 'SELECT store_id, fee, free_from FROM shipping')"; }

# three_devices LABEL FUNCTION SIZE SQL [DEVICES]: new session and warm on cpu, gpu and auto (or DEVICES)
three_devices() {
	local label=$1 what=$2 size=$3 sql=$4 device
	local times
	for device in ${5:-cpu gpu auto}; do
		read -r -a times <<<"$(new_and_warm 5 "$sql" "$parallel SET gpurec.device = $device;")"
		echo "$label $what $size $device: new session ${times[0]} ms, warm ${times[1]} ms"
	done
	# what auto chose, and its estimates; where the GPU path's time goes, in a new session's first call and its second
	notice "$sql" "$parallel SET gpurec.device = auto;" | grep -oP 'Device: .*?(?=\.  |\.$|$)' | sed "s/^/$label $what $size auto: /" || true
	q -c "SET gpurec.timing = on; $parallel SET gpurec.device = gpu;" -c "$sql" -c "$sql" 2>&1 >/dev/null |
		grep -oP '(device gpu, read .*|Read: .*|GPU service: .*)' | paste - - | sed "s/^/$label $what $size gpu, first then second call: /" || true
}

# reference_sessions LABEL FUNCTION SIZE SQL: plain SQL's new session and warm, beside three_devices' lines
reference_sessions() {
	local times
	read -r -a times <<<"$(new_and_warm 5 "$4" "$parallel")"
	echo "$1 $2 $3 plain SQL: new session ${times[0]} ms, warm ${times[1]} ms"
}

devices_and_sessions() { # devices_and_sessions LABEL: cpu/gpu/auto at three sizes, new session vs warm
	local label=$1 n sql device
	for n in $((individuals / 100)) $((individuals / 10)) $individuals; do
		three_devices "$label" roc_fitness "${n}x$examples" "$(roc "$n")"
		reference_sessions "$label" roc_fitness "${n}x$examples" "$(roc_reference "$n")"
	done
	if [ "$products" -gt 0 ]; then
		for n in $((products / 100)) $((products / 10)) $products; do
			three_devices "$label" cheapest_offers "$((n * per_product))" "$(cheapest "$n")"
			reference_sessions "$label" cheapest_offers "$((n * per_product))" "$(cheapest_reference "$n")"
		done
		for n in $((carts / 100)) $((carts / 10)) $carts; do
			[ "$n" -gt 0 ] && three_devices "$label" optimize_carts "${n}carts" "$(optimize "$n")"
		done
	fi
	if [ "$similar_users" -gt 0 ]; then
		for n in $((similar_users / 100)) $((similar_users / 10)) $similar_users; do
			# the full size takes the CPU minutes
			three_devices "$label" similar_users "${n}x20" "$(similar "$n")" "$([ "$n" = "$similar_users" ] || echo cpu) gpu auto"
		done
	fi
	[ "$geo_users" -ge 100 ] || return 0
	for n in $((geo_users / 100)) $((geo_users / 10)) $geo_users; do
		three_devices "$label" user_similarity "${n}x20" "$(similarity "$n")"
		three_devices "$label" predict_strength "${candidates}x${n}x20" "$(strength "$n")" "$([ "$n" = "$geo_users" ] || echo cpu) gpu auto"
	done
	for n in 1 5 25; do
		[ "$n" -lt $((geo_users / 100)) ] || break # a holdout user needs points
		three_devices "$label" fit_exponent "${n}holdout_${fit_candidates}x$((geo_users / 100))x20" "$(fit "$n")"
	done
}

load() { # load LABEL: SESSIONS sessions for LOAD_S seconds, then one session as long
	local label=$1 sql calls errors
	sql="$(roc $((individuals / 10)));"
	rm -f "$base"/load.*
	for i in $(seq "$sessions"); do
		(
			end=$((SECONDS + load_s))
			while [ $SECONDS -lt $end ]; do
				if q -c "SET gpurec.device = gpu" -c "$sql" >/dev/null 2>>"$base/load.err.$i"; then echo ok; else echo err; fi
			done >"$base/load.$i"
		) &
	done
	wait
	calls=$(cat "$base"/load.[0-9]* | grep -c ok || true)
	errors=$(cat "$base"/load.[0-9]* | grep -c err || true)
	echo "$label $sessions sessions x ${load_s} s roc_fitness $((individuals / 10))x$examples gpu: $calls calls ($(ratio "$calls" "$load_s")/s), $errors errors; first error: $(cat "$base"/load.err.* | head -1)"
	calls=0
	end=$((SECONDS + load_s))
	while [ $SECONDS -lt $end ]; do
		q -c "SET gpurec.device = gpu" -c "$sql" >/dev/null && calls=$((calls + 1))
	done
	echo "$label 1 session x ${load_s} s roc_fitness $((individuals / 10))x$examples gpu: $calls calls ($(ratio "$calls" "$load_s")/s)"
}

mkdir -p "$base"
echo "# $(nproc) cores; GPUs: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
phases=${PHASES:-service split load in-process}
if [ -n "${KEEP_DATA:-}" ] && [ -f "$base/data-made" ]; then
	export PGHOST=$dir PGUSER=postgres # each phase's server() starts the stopped cluster
	echo "# data kept from the run before: $(cat "$base/data-made")"
else
	rm -f "$base/data-made"
	eval "$(test/cluster.sh start "$dir" "${settings[@]}")"
	export PGDATABASE=gpurec_bench_service
	make_data
	echo "geo users $geo_users, made $(date -u +%H:%M)" >"$base/data-made"
fi

if [[ " $phases " == *" service "* ]]; then
	server service -c shared_preload_libraries=gpurec
	q -c "SELECT device_id, name, service_pid FROM gpurec.devices()" | sed 's/^/# service device: /'
	devices_and_sessions service
fi
if [[ " $phases " == *" split "* ]]; then
	# NAME SQL per line: the calls that split, at their full sizes
	split_calls=$(
		[ "$similar_users" -gt 0 ] && echo "similar_users_${similar_users}x20 $(similar "$similar_users")"
		[ "$geo_users" -gt 0 ] && echo "user_similarity_${geo_users}x20 $(similarity)"
		[ "$geo_users" -gt 0 ] && echo "predict_strength_${candidates}x${geo_users}x20 $(strength)"
		echo "roc_fitness_${individuals}x$examples $(roc "$individuals")"
		[ "$products" -gt 0 ] && echo "optimize_carts_${carts}carts $(optimize "$carts")"
		true
	)
	declare -A one_gpu
	server service-one-gpu -c shared_preload_libraries=gpurec -c gpurec.gpus=0
	while read -r name sql; do
		one_gpu[$name]=$(warm_ms "$sql" "$parallel SET gpurec.device = gpu;")
		echo "split $name gpu, one GPU:"
		notice "$sql" "$parallel SET gpurec.device = gpu;"
	done <<<"$split_calls"
	server service -c shared_preload_libraries=gpurec
	gpus=$(q -c "SELECT count(*) FROM gpurec.devices()")
	while read -r name sql; do
		all=$(warm_ms "$sql" "$parallel SET gpurec.device = gpu;")
		echo "split $name gpu, warm: one GPU ${one_gpu[$name]} ms, $gpus GPUs $all ms = $(ratio "$all" "${one_gpu[$name]}")x"
		notice "$sql" "$parallel SET gpurec.device = gpu;"
	done <<<"$split_calls"
fi
if [[ " $phases " == *" load "* ]]; then
	server service -c shared_preload_libraries=gpurec
	load service
fi
if [[ " $phases " == *" in-process "* ]]; then
	server in-process
	devices_and_sessions in-process
fi
test/cluster.sh stop "$dir"
