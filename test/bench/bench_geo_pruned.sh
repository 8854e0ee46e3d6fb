#!/usr/bin/env bash
# test/bench/bench_geo_pruned.sh: similar_users (k = 10) pruned through the
# spatial index against the brute force, on check-in-like points.
# Needs a running cluster (PGHOST etc.) with gpurec installed.
#
# Data (make_checkins): USERS users of 20 points each.  Clustered: 200
# cities placed at random on the globe; each user picks one to three of
# them and each of its points lies around one of those, a normal spread of
# SPREAD_KM (3) km in each direction.  Uniform: every point anywhere on the
# globe.  Columns lon, lat (degrees, for haversine) and x, y (metres on a
# sinusoidal projection of the same points, for euclidean).
#
# Runs (each end to end, one run, in a fresh backend; its gpurec.timing
# NOTICE says how many point pairs the pruned search examined, and the
# backend's CPU seconds, its threads' included, say what the run cost on a
# machine that others share):
#   CLUSTERED_USERS (100,000, euclidean; 0 skips it), BOTH_USERS (20,000,
#     both metrics) with gpurec.geo_pruning = auto;
#   BRUTE_USERS (5,000) clustered and uniform, both metrics, auto against
#     off (the brute force), with the answers compared;
#   SQL_USERS (300) against plain SQL (a cross join; BASELINES=0 skips it).
# DEVICES ("cpu") lists the values of gpurec.device to run; on a GPU host
# "gpu cpu" sets the two against each other, each pruned (on the GPU the
# CPU lists each user's possible others and the GPU compares them;
# BENCHMARKS.md has the command).
set -euo pipefail
clustered_users=${CLUSTERED_USERS:-100000}
both_users=${BOTH_USERS:-20000}
brute_users=${BRUTE_USERS:-5000}
sql_users=${SQL_USERS:-300}
spread_km=${SPREAD_KM:-3}
devices=${DEVICES:-cpu}
db=gpurec_bench_geo_pruned
export PGDATABASE=$db
source "$(dirname "$0")/lib.sh"

# make_checkins TABLE USERS clustered|uniform
make_checkins() {
	q <<SQL
SET max_parallel_workers_per_gather = 0;
SELECT setseed(0.31);
DROP TABLE IF EXISTS cities;
CREATE TEMP TABLE cities AS
  SELECT c AS city, -180 + 360 * random() AS lon, degrees(asin(2 * random() - 1)) * 0.8 AS lat
  FROM generate_series(1, 200) c;
DROP TABLE IF EXISTS $1;
CREATE UNLOGGED TABLE $1 AS
WITH users AS (
  SELECT u AS user_id, 1 + floor(random() * 3)::int AS homes,
         ARRAY[1 + floor(random() * 200)::int, 1 + floor(random() * 200)::int, 1 + floor(random() * 200)::int] AS homes_at
  FROM generate_series(1, $2) u),
points AS (
  SELECT user_id, homes_at[1 + floor(random() * homes)::int] AS city,
         sqrt(-2 * ln(1 - random())) * $spread_km AS km, 2 * pi() * random() AS angle,
         -180 + 360 * random() AS any_lon, degrees(asin(2 * random() - 1)) AS any_lat
  FROM users, generate_series(1, 20)),
placed AS (
  SELECT user_id,
         CASE WHEN '$3' = 'uniform' THEN any_lon
              ELSE c.lon + km * cos(angle) / (111.195 * cos(radians(c.lat))) END AS lon,
         CASE WHEN '$3' = 'uniform' THEN any_lat
              ELSE greatest(-90, least(90, c.lat + km * sin(angle) / 111.195)) END AS lat
  FROM points JOIN cities c USING (city))
SELECT user_id, lon - 360 * floor((lon + 180) / 360) AS lon, lat,
       radians(lon - 360 * floor((lon + 180) / 360)) * 6371008.8 * cos(radians(lat)) AS x,
       radians(lat) * 6371008.8 AS y
FROM placed;
VACUUM ANALYZE $1;
SQL
	allow_workers "$1"
}

# similar TABLE METRIC: the call, its columns by metric
similar() {
	if [ "$2" = haversine ]; then
		echo "SELECT * FROM gpurec.similar_users('SELECT user_id, lon AS x, lat AS y FROM $1', 10, 'haversine')"
	else
		echo "SELECT * FROM gpurec.similar_users('SELECT user_id, x, y FROM $1', 10, 'euclidean')"
	fi
}

# timed TABLE METRIC PRUNING: one end-to-end run in ms, and the pruning figures of its NOTICE
timed() {
	local sql settings ms examined out cpu
	sql="SELECT count(*) FROM ($(similar "$1" "$2")) s"
	settings="$parallel SET gpurec.device = $device; SET gpurec.geo_pruning = $3;"
	out=$(q -c "SET max_parallel_workers_per_gather = 0; SET gpurec.timing = on; $settings" -c '\timing on' -c "$sql" \
		-c "SELECT 'cpu ' || (split_part(s, ' ', 14)::bigint + split_part(s, ' ', 15)::bigint)
		    FROM pg_read_file('/proc/' || pg_backend_pid() || '/stat') s" 2>&1)
	ms=$(sed -nE 's/^Time: ([0-9.]+) ms.*/\1/p' <<<"$out" | head -1)
	cpu=$(sed -nE 's/^cpu ([0-9]+)$/\1/p' <<<"$out")
	examined=$(grep -oE 'pruned: [^;]*' <<<"$out" | head -1 || true)
	echo "similar_users ($device) $2 $(q -c "SELECT count(DISTINCT user_id) FROM $1") users, geo_pruning = $3: $ms ms, backend CPU $(awk -v t="$cpu" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", t / hz }') s${examined:+; $examined}"
}

# same_answers TABLE METRIC: the pruned rows are the brute force's
same_answers() {
	local sql
	sql=$(similar "$1" "$2")
	q -c "SET gpurec.device = $device" -c "SET gpurec.geo_pruning = on" \
		-c "CREATE TEMP TABLE pruned AS $sql" -c "SET gpurec.geo_pruning = off" \
		-c "CREATE TEMP TABLE brute AS $sql" \
		-c "SELECT CASE WHEN count(*) = 0 THEN '  answers identical' ELSE '  ANSWERS DIFFER: ' || count(*) || ' rows' END
		    FROM ((TABLE pruned EXCEPT ALL TABLE brute) UNION ALL (TABLE brute EXCEPT ALL TABLE pruned)) d"
}

fresh_database
echo "# host: $(nproc) cores, load $(cut -d" " -f1-3 /proc/loadavg); gpurec.device in: $devices; commit $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo '?')"

if [ "$clustered_users" -gt 0 ]; then
	echo "# clustered, $clustered_users users x 20 points, euclidean, auto"
	make_checkins big "$clustered_users" clustered
	for device in $devices; do timed big euclidean auto; done
fi

echo "# clustered, $both_users users x 20 points, both metrics, auto"
make_checkins mid "$both_users" clustered
for device in $devices; do
	timed mid euclidean auto
	timed mid haversine auto
done

for kind in clustered uniform; do
	echo "# $kind, $brute_users users x 20 points: auto against the brute force (off), and pruning forced (on)"
	make_checkins "small_$kind" "$brute_users" "$kind"
	for device in $devices; do
		for metric in euclidean haversine; do
			timed "small_$kind" "$metric" off
			timed "small_$kind" "$metric" auto
			timed "small_$kind" "$metric" on
			same_answers "small_$kind" "$metric"
		done
	done
done

if [ "${BASELINES:-1}" = 1 ]; then
	device=cpu
	echo "# clustered, $sql_users users x 20 points, euclidean: gpurec (cpu) against plain SQL"
	make_checkins tiny "$sql_users" clustered
	plain="SELECT count(*) FROM (
	  SELECT user_id, other, row_number() OVER (PARTITION BY user_id ORDER BY sim DESC, other) AS rank
	  FROM (SELECT a_user AS user_id, b_user AS other, count(*) / sum(greatest(d, 1e-9)) AS sim
	        FROM (SELECT a.user_id AS a_user, a.ctid AS a_point, b.user_id AS b_user,
	                     min(sqrt((a.x - b.x)^2 + (a.y - b.y)^2)) AS d
	              FROM tiny a JOIN tiny b ON a.user_id <> b.user_id GROUP BY 1, 2, 3) m
	        GROUP BY 1, 2) s) r WHERE rank <= 10"
	echo "plain SQL: $(run_ms "$plain") ms"
	timed tiny euclidean auto
	timed tiny euclidean off
fi
