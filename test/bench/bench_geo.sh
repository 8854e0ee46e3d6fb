#!/usr/bin/env bash
# test/bench/bench_geo.sh: the geospatial recommender at the sizes below.
# Needs a running cluster (PGHOST etc.) with gpurec installed.
#   similarity  user_similarity, USERS (1,000,000) x 20 points, main user of
#               64 points: compute-phase pair rate; and on CPU_USERS (10,000)
#               x 20 points against the plain-SQL cross join
#   similar     similar_users, SIMILAR_USERS (100,000) x 20 points, k = 10,
#               end to end (the CPU gets SIMILAR_CPU_USERS, 2,000)
#   predict     predict_strength, CANDIDATES (10,000) against the USERS x 20
#               points, exponent 2: compute phase
#   keys        similar_users as in `similar`, with integer, uuid and text
#               user ids on one table (the target: at most 1.15x the
#               integer time), medians of ROUNDS (5) fresh backends
# SECTIONS picks sections, DEVICES="cpu gpu" the devices.  Rates are set
# against an H100 SXM's fp32 limit in pairs/s: 6.7e12 for a distance and its
# minimum (5 fp32 instructions at 33.5e12/s), 4.2e12 for a strength term
# (bound by fp32 reciprocals); test/bench/geo_compute_bench.cpp explains.
# The "compute" of a GPU call is its kernels; copying the points and
# grouping them per user on the device is its "transfer".
set -euo pipefail
users=${USERS:-1000000}
cpu_users=${CPU_USERS:-10000}
similar_users=${SIMILAR_USERS:-100000}
similar_cpu_users=${SIMILAR_CPU_USERS:-2000}
candidates=${CANDIDATES:-10000}
sections=${SECTIONS:-similarity similar predict}
devices=${DEVICES:-cpu}
similarity_fp32=${SIMILARITY_FP32_LIMIT:-6.7e12}
strength_fp32=${STRENGTH_FP32_LIMIT:-4.2e12}
db=gpurec_bench_geo
export PGDATABASE=$db
source "$(dirname "$0")/lib.sh"
# the gpurec.timing NOTICEs of three runs in fresh backends, into $notices; the least compute into $ms
three_runs() {
	notices=$(for i in 1 2 3; do notice "$@"; done)
	ms=$(sed -nE 's/.*compute ([0-9.]+) ms.*/\1/p' <<<"$notices" | sort -n | head -1)
}
# peak memory of a fresh backend doing one call, less an idle one's, per point
bytes_per_point() {
	local hwm base
	hwm=$(q -c "$2" -c "$1" -c "SELECT (regexp_match(pg_read_file('/proc/' || pg_backend_pid() || '/status'), 'VmHWM:\s+(\d+)'))[1]" | tail -1)
	base=$(q -c "SELECT (regexp_match(pg_read_file('/proc/' || pg_backend_pid() || '/status'), 'VmHWM:\s+(\d+)'))[1]" | tail -1)
	ratio "$(((hwm - base) * 1024))" "$3"
}
# USER_COUNT users of 20 random points in a 10 km square, and user 0 of 64 points
make_points() {
	q <<SQL
SET max_parallel_workers_per_gather = 0;
DROP TABLE IF EXISTS $1;
CREATE UNLOGGED TABLE $1 AS
  SELECT u AS user_id, random() * 10000 AS x, random() * 10000 AS y
  FROM generate_series(1, $2) u, generate_series(1, 20) i
  UNION ALL
  SELECT 0, random() * 10000, random() * 10000 FROM generate_series(1, 64);
VACUUM ANALYZE $1;
SQL
	allow_workers "$1"
}
fresh_database

if [[ " $sections " == *" similarity "* ]]; then
	echo "# user_similarity: $users users x 20 points, main user of 64 points"
	make_points pts "$users"
	points=$((users * 20 + 64))
	pairs=$((64 * points))
	sql="SELECT count(*) FROM gpurec.user_similarity('SELECT user_id, x, y FROM pts', 0)"
	for device in $devices; do
		three_runs "$sql" "$parallel SET gpurec.device = $device;"
		echo "user_similarity ($device): compute $ms ms for $pairs pairs = $(awk -v p=$pairs -v m="$ms" 'BEGIN { printf "%.3g", p / m * 1000 }') pairs/s (fp32 limit $similarity_fp32)"
		echo "$notices"
		echo "  end to end: $(median3 "$sql" "$parallel SET gpurec.device = $device;") ms (median of 3)"
		echo "  warm session: $(warm3 "$sql" "$parallel SET gpurec.device = $device;") ms (median of 3)"
		echo "  peak backend memory: $(bytes_per_point "$sql" "SET gpurec.device = $device" "$points") bytes per point"
	done

	echo "# user_similarity on the CPU against plain SQL: $cpu_users users x 20 points"
	make_points pts_small "$cpu_users"
	if [ "${BASELINES:-1}" = 1 ]; then
		cross_join="SELECT count(*) FROM (
		  SELECT b.user_id, avg(d) AS mean_min_distance
		  FROM (SELECT a.ctid AS main_point, b.user_id, min(sqrt((a.x - b.x)^2 + (a.y - b.y)^2)) AS d
		        FROM pts_small a, pts_small b WHERE a.user_id = 0 AND b.user_id <> 0
		        GROUP BY 1, 2) b
		  GROUP BY 1) s"
		sql_ms=$(run_ms "$cross_join")
		echo "plain-SQL cross join: $sql_ms ms"
	else
		sql_ms=0
	fi
	small="SELECT count(*) FROM gpurec.user_similarity('SELECT user_id, x, y FROM pts_small', 0)"
	ms=$(median3 "$small" "$parallel SET gpurec.device = cpu;")
	echo "user_similarity (cpu): $ms ms = $(ratio "$sql_ms" "$ms")x faster than the cross join"
	notice "$small" "$parallel SET gpurec.device = cpu;"
fi

if [[ " $sections " == *" similar "* ]]; then
	for device in $devices; do
		n=$similar_users
		[ "$device" = cpu ] && n=$similar_cpu_users
		echo "# similar_users ($device): $n users x 20 points, k = 10"
		make_points pts_similar "$n"
		sql="SELECT count(*) FROM gpurec.similar_users('SELECT user_id, x, y FROM pts_similar WHERE user_id > 0', 10)"
		end_to_end=$(median3 "$sql" "$parallel SET gpurec.device = $device;")
		pairs=$(awk -v n="$n" 'BEGIN { printf "%.0f", (n * 20) * (n * 20) }')
		echo "similar_users ($device): $end_to_end ms end to end (median of 3); $pairs pairs"
		notice_line=$(notice "$sql" "$parallel SET gpurec.device = $device;")
		echo "$notice_line"
		c=$(sed -nE 's/.*compute ([0-9.]+) ms.*/\1/p' <<<"$notice_line")
		echo "  compute rate: $(awk -v p="$pairs" -v m="$c" 'BEGIN { printf "%.3g", p / m * 1000 }') pairs/s (fp32 limit $similarity_fp32)"
	done
fi

if [[ " $sections " == *" predict "* ]]; then
	echo "# predict_strength: $candidates candidates against $users users x 20 points, exponent 2"
	[ "$(q -c "SELECT to_regclass('pts') IS NOT NULL")" = t ] || make_points pts "$users"
	q -c "DROP TABLE IF EXISTS cands" -c "CREATE UNLOGGED TABLE cands AS SELECT c AS candidate_id, random() * 10000 AS x, random() * 10000 AS y FROM generate_series(1, $candidates) c"
	points=$((users * 20 + 64))
	pairs=$((candidates * points))
	sql="SELECT count(*) FROM gpurec.predict_strength('SELECT user_id, x, y FROM pts', 0, 'SELECT * FROM cands')"
	for device in $devices; do
		if [ "$device" = cpu ] && [ "${PREDICT_ON_CPU:-0}" != 1 ]; then
			echo "predict_strength (cpu): skipped ($pairs pairs; PREDICT_ON_CPU=1 runs it)"
			continue
		fi
		three_runs "$sql" "$parallel SET gpurec.device = $device;"
		echo "predict_strength ($device): compute $ms ms for $pairs pairs = $(awk -v p=$pairs -v m="$ms" 'BEGIN { printf "%.3g", p / m * 1000 }') pairs/s (fp32 limit $strength_fp32)"
		echo "$notices"
		echo "  peak backend memory: $(bytes_per_point "$sql" "SET gpurec.device = $device" "$points") bytes per point"
	done
fi

if [[ " $sections " == *" keys "* ]]; then
	for device in $devices; do
		n=$similar_users
		[ "$device" = cpu ] && n=$similar_cpu_users
		echo "# similar_users ($device) with integer, uuid and text user ids: $n users x 20 points, k = 10"
		make_points pts_keys "$n"
		q -c "ALTER TABLE pts_keys ADD COLUMN user_uuid uuid, ADD COLUMN user_text text" \
			-c "UPDATE pts_keys SET user_uuid = md5(user_id::text)::uuid, user_text = 'user-' || user_id" -c "VACUUM ANALYZE pts_keys"
		declare -A key_sql=(
			[integer]="SELECT count(*) FROM gpurec.similar_users('SELECT user_id, x, y FROM pts_keys WHERE user_id > 0', 10)"
			[uuid]="SELECT count(*) FROM gpurec.similar_users('SELECT user_uuid AS user_id, x, y FROM pts_keys WHERE user_id > 0', 10, 'euclidean', NULL, NULL::uuid)"
			[text]="SELECT count(*) FROM gpurec.similar_users('SELECT user_text AS user_id, x, y FROM pts_keys WHERE user_id > 0', 10, 'euclidean', NULL, NULL::text)"
		)
		declare -A key_runs=()
		for round in $(seq "${ROUNDS:-5}"); do
			for kind in integer uuid text; do
				key_runs[$kind]+="$(run_ms "${key_sql[$kind]}" "$parallel SET gpurec.device = $device;")"$'\n'
			done
		done
		integer_ms=$(printf '%s' "${key_runs[integer]}" | median)
		echo "similar_users ($device), integer ids: $integer_ms ms (rounds: $(printf '%s' "${key_runs[integer]}" | tr '\n' ' '))"
		for kind in uuid text; do
			ms=$(printf '%s' "${key_runs[$kind]}" | median)
			echo "similar_users ($device), $kind ids:    $ms ms = $(ratio "$ms" "$integer_ms")x the integer time (rounds: $(printf '%s' "${key_runs[$kind]}" | tr '\n' ' '))"
			notice "${key_sql[$kind]}" "$parallel SET gpurec.device = $device;"
		done
	done
fi
