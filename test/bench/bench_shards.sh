#!/usr/bin/env bash
# test/bench/bench_shards.sh: gpurec_shards' cost, in one run.
#
#   overhead: 10,000 offers on one cluster, and the same offers sharded over
#             CLUSTERS clusters, cheapest_offers through gpurec_shards;
#   weak scaling: each of CLUSTERS clusters holds PRODUCTS x PER_SHARD
#             offers (default 30,000 x 256 = 7.68M; 4 clusters: 30.72M) and
#             INDIVIDUALS x EXAMPLES real[] scores; one cluster's local call
#             on its part against the distributed call on all parts;
#   strong scaling (PARTS "similar"): similar_users on USERS users (default
#             100,000) of POINTS points each (default 20, the size issues 30
#             and 31 measure), on one cluster
#             holding them all against the distributed call over CLUSTERS
#             clusters holding a part each; on the CPU, the first CPU_USERS
#             of them (default 5,000: the CPU's brute force at 100,000
#             takes minutes).
#
# The clusters are the partitions of one PL/Proxy cluster (CLUSTERS a
# power of two), reached from the database coord of the first.
# Starts its own clusters (test/cluster.sh) in $BENCH_DIR-N (default
# /tmp/gpurec-bench-shard-N) and stops them at the end.  The clusters stand for servers of their own, so
# each gets its share of the machine's cores, the baseline cluster as well
# as the shards: its calls read with WORKERS parallel workers (default: the
# share, less one for the calling backend; none on a share of one core)
# and compute on THREADS CPU threads (gpurec.cpu_threads; default: the
# share).  Timings are medians of ROUNDS (default 5; overhead: of 11),
# each in a session that has already made one call (PL/Proxy's connections
# open); every round's pair is printed too.  PARTS picks the measurements
# (default "overhead cheapest roc"; "reference" adds plain SQL's parallel
# sum(price) over one cluster's offers, alone and on every cluster at
# once: what the shared machine does to a read gpurec has no part in).
# TIMING=1 adds every call's gpurec.timing NOTICE: the local ones as psql
# prints them, the shards' as PL/Proxy passes them to the coordinator's
# client, and the phases of each of the local calls made at once.  DEVICES names the devices (default cpu): cpu, gpu, and gpu-mps
# (below).  HUGE_PAGES=on starts the clusters with huge_pages = on, their
# shared buffers on 2 MB pages (as root, the pages the clusters need are
# reserved first); the default, try, finds none reserved on most machines.  KEEP=1 leaves the
# clusters running at the end, with their data, for measurements of one's
# own (stop them with test/cluster.sh stop $BENCH_DIR-N).
set -euo pipefail
cd "$(dirname "$0")/../.."
clusters=${CLUSTERS:-4}
products=${PRODUCTS:-30000}
per_shard=${PER_SHARD:-256}
individuals=${INDIVIDUALS:-250}
examples=${EXAMPLES:-100000}
users=${USERS:-100000}
points=${POINTS:-20}
cpu_users=${CPU_USERS:-5000}
share=$(( $(nproc) / clusters > 0 ? $(nproc) / clusters : 1 ))
workers=${WORKERS:-$(( share - 1 ))}
threads=${THREADS:-$share}
devices=${DEVICES:-cpu}
parts=" ${PARTS:-overhead cheapest roc} "
timing=${TIMING:-0}
rounds=${ROUNDS:-5}
base=${BENCH_DIR:-/tmp/gpurec-bench-shard}
huge_pages=${HUGE_PAGES:-try}
shared_buffers_mb=2048
reserved_huge_pages=0
if [ "$huge_pages" = on ] && [ "$(id -u)" = 0 ]; then
	# each cluster's shared buffers and a little more of its shared memory, in 2 MB pages
	reserved_huge_pages=$(( clusters * (shared_buffers_mb / 2 + 64) ))
	echo "$reserved_huge_pages" >/proc/sys/vm/nr_hugepages
fi

q() { psql -XAtq -v ON_ERROR_STOP=1 -U postgres "$@"; }
# warm_ms HOST DB SQL: the second of two runs in one session, in ms
warm_ms() {
	q -h "$1" -d "$2" -c '\timing on' -c "$3" -c "$3" | sed -nE 's/^Time: ([0-9.]+) ms.*/\1/p' | tail -1
}
# notices HOST DB SQL [N]: the last N (default 1) gpurec.timing NOTICEs of a
# second call in one session (the shards' come to the coordinator's client)
notices() {
	[ "$timing" = 1 ] || return 0
	# (a call may raise none: the coordinator of roc_fitness calls no gpurec function that times itself)
	q -h "$1" -d "$2" -c "SET gpurec.timing = on" -c "$3" -c "$3" 2>&1 >/dev/null | { grep -A1 'NOTICE:  .*gpurec' || true; } |
		tail -"$((2 * ${4:-1}))" | sed 's/^/  /'
}
# at_once SETTINGS SQL: SQL on every cluster at once, each the second call of
# its session (every session makes its first call, then all wait for one
# moment): what the machine's shared cores, memory and GPU cost by themselves
# With TIMING=1, each call's gpurec.timing NOTICE goes to $base-N/at_once.notice.
at_once() {
	local at=$(( $(date +%s) + 5 )) timed=""
	[ "$timing" = 1 ] && timed="SET gpurec.timing = on;"
	for i in $(seq "$clusters"); do
		q -h "$base-$i" -d bench -c "$1 $2" -c "SELECT pg_sleep($at - extract(epoch FROM clock_timestamp()))" \
			-c "$timed" -c '\timing on' -c "$2" 2>"$base-$i/at_once.notice" |
			sed -nE 's/^Time: ([0-9.]+) ms.*/\1/p' | tail -1 >"$base-$i/at_once" &
	done
	wait
	cat "$base"-*/at_once | sort -n | tr '\n' ' '
}
# at_once_notices: the last at_once's calls, each with its time and phases
at_once_notices() {
	[ "$timing" = 1 ] || return 0
	for i in $(seq "$clusters"); do
		echo "  at once, cluster $i: $(cat "$base-$i/at_once") ms: $(grep -A1 'NOTICE:  gpurec' "$base-$i/at_once.notice" | tail -2 |
			sed -E 's/^(psql:[^ ]* )?NOTICE:  //; s/^DETAIL:  //' | tr '\n' ' ')"
	done
}
# weak_scaling WHAT ONE_PART ALL_PARTS LOCAL_SQL DISTRIBUTED_SQL: one
# cluster's local call on its part against the distributed call on all
# parts (with TIMING=1, the phases of the local call, the shards' and the
# coordinator's), then the local calls on every cluster at once
weak_scaling() {
	local one all ones="" alls=""
	# ROUNDS rounds, a local and a distributed call in each: the machine's
	# speed drifts by up to a third between minutes, and so falls on both
	for _ in $(seq "$rounds"); do
		ones+="$(warm_ms "$base-1" bench "$set_device $4")"$'\n'
		alls+="$(warm_ms "$base-1" coord "$5")"$'\n'
	done
	one=$(printf "%s" "$ones" | median)
	all=$(printf "%s" "$alls" | median)
	echo "  rounds, local / distributed: $(paste -d/ <(printf "%s" "$ones") <(printf "%s" "$alls") | tr '\n' ' ')ms"
	notices "$base-1" bench "$set_device $4"
	notices "$base-1" coord "$5" "$((clusters + 1))" | sed 's/^  /  coordinator: /'
	echo "weak scaling ($label): $1, one cluster $2 $one ms; $clusters clusters $3 $all ms: $(ratio "$all" "$one")x"
	echo "  the $clusters local calls at once, no coordinator (each the second of its session): $(at_once "$set_device" "$4")ms"
	at_once_notices
}
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
runs() { # runs N HOST DB SQL: median of N warm runs
	local n=$1
	shift
	for _ in $(seq "$n"); do warm_ms "$@"; done | median
}

# The device gpu-mps is gpu with NVIDIA's Multi-Process Service started
# first: the clusters' backends then share one GPU context, where without
# it the GPU serves each process's context in turns.  The daemon runs as
# the clusters' user (the servers' backends are its clients) and is
# stopped at the end.
mps_user=$([ "$(id -u)" = 0 ] && echo pgtest || id -un)
mps_control() { if [ "$(id -u)" = 0 ]; then runuser -u "$mps_user" -- nvidia-cuda-mps-control "$@"; else nvidia-cuda-mps-control "$@"; fi; }
mps_started=0
start_mps() {
	[ "$mps_started" = 1 ] && return 0
	if ! command -v nvidia-cuda-mps-control >/dev/null; then
		echo "gpu-mps: no nvidia-cuda-mps-control on this machine" >&2
		return 1
	fi
	mps_control -d
	mps_started=1
}
stop_mps() { [ "$mps_started" = 1 ] && echo quit | mps_control || true; }
cleanup() {
	for i in $(seq "$clusters"); do test/cluster.sh stop "$base-$i"; done
	stop_mps
	[ "$reserved_huge_pages" = 0 ] || echo 0 >/proc/sys/vm/nr_hugepages
}
[ "${KEEP:-0}" = 1 ] || trap cleanup EXIT
# With a GPU for every cluster (a machine of several GPUs), each cluster's
# server sees its own alone, as servers of their own would; otherwise
# they share the machine's.
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ $((clusters & (clusters - 1))) != 0 ]; then
	echo "CLUSTERS must be a power of two (PL/Proxy's partitions)" >&2
	exit 2
fi
partitions=""
for i in $(seq "$clusters"); do
	own_gpu=()
	[ "$gpus" -ge "$clusters" ] && own_gpu=(env CUDA_VISIBLE_DEVICES=$((i - 1)))
	"${own_gpu[@]}" test/cluster.sh start "$base-$i" -c shared_buffers="${shared_buffers_mb}MB" -c huge_pages="$huge_pages" -c work_mem=512MB -c jit=off \
		-c max_worker_processes=32 -c max_parallel_workers=32 \
		-c max_parallel_workers_per_gather="$workers" -c gpurec.cpu_threads="$threads" >/dev/null
	partitions+="${partitions:+, }p$((i - 1)) 'host=$base-$i dbname=bench'"
done
servers="CREATE SERVER shards FOREIGN DATA WRAPPER plproxy OPTIONS ($partitions);
CREATE USER MAPPING FOR CURRENT_USER SERVER shards OPTIONS (user 'postgres');"
echo "# $clusters clusters, $workers parallel workers and $threads CPU threads each, huge_pages $huge_pages, devices: $devices," \
	"$([ "$gpus" -ge "$clusters" ] && echo "a GPU each" || echo "$gpus GPU(s) shared")"

# every cluster loads its part at once
for i in $(seq "$clusters"); do
	(
		q -h "$base-$i" -d postgres -c "CREATE DATABASE bench"
		q -h "$base-$i" -d bench <<SQL
CREATE EXTENSION gpurec;
SET max_parallel_workers_per_gather = 0;
CREATE UNLOGGED TABLE offers AS
  SELECT p AS product_id, $i * 1000000 + s AS store_id,
         round((1 + random() * 999)::numeric, 2)::numeric(10,2) AS price
  FROM generate_series(1, $products) p, generate_series(1, $per_shard) s
  ORDER BY random();
CREATE UNLOGGED TABLE small_offers AS
  SELECT (random() * 999)::int AS product_id, (random() * 99)::bigint AS store_id,
         round((random() * 100)::numeric, 2) AS price
  FROM generate_series(1, 10000 / $clusters);
CREATE UNLOGGED TABLE population AS
  SELECT $i * 100000 + g AS individual_id,
         (SELECT array_agg(random()::real) FROM generate_series(1, $examples) WHERE g > 0) AS scores
  FROM generate_series(1, $individuals) g;
CREATE UNLOGGED TABLE points AS
  SELECT u::bigint AS user_id, random() * 1000 AS x, random() * 1000 AS y
  FROM generate_series(1, $users) u, generate_series(1, $points) p
  WHERE u % $clusters = $i - 1 AND '$parts' LIKE '% similar %';
ALTER TABLE offers SET (parallel_workers = $workers);
ALTER TABLE population SET (parallel_workers = $workers);
VACUUM ANALYZE;
SQL
	) &
done
wait
q -h "$base-1" -d postgres -c "CREATE DATABASE coord" -c "CREATE DATABASE whole"
q -h "$base-1" -d coord -c "CREATE EXTENSION gpurec_shards CASCADE" -c "$servers" 2>/dev/null
q -h "$base-1" -d whole -c "CREATE EXTENSION gpurec" \
	-c "CREATE TABLE small_offers (product_id int, store_id bigint, price numeric)" \
	-c "CREATE TABLE points (user_id bigint, x float8, y float8)"
for i in $(seq "$clusters"); do
	q -h "$base-$i" -d bench -c "COPY small_offers TO STDOUT" | q -h "$base-1" -d whole -c "COPY small_offers FROM STDIN"
	q -h "$base-$i" -d bench -c "COPY points TO STDOUT" | q -h "$base-1" -d whole -c "COPY points FROM STDIN"
done
q -h "$base-1" -d whole -c "VACUUM ANALYZE small_offers" -c "VACUUM ANALYZE points"
# the labels as a table in every database that calls: a 100,000-element
# array does not fit on a command line
labels=$(q -h "$base-1" -d bench -c "SELECT array_agg(random() < 0.3)::text FROM generate_series(1, $examples)")
for i in $(seq "$clusters"); do
	printf "CREATE TABLE labels AS SELECT '%s'::boolean[] AS l;\n" "$labels" | q -h "$base-$i" -d bench
done
printf "CREATE TABLE labels AS SELECT '%s'::boolean[] AS l;\n" "$labels" | q -h "$base-1" -d coord

if [[ $parts == *" reference "* ]]; then
	# PostgreSQL's own parallel read, with no gpurec in it (the same workers)
	sum_sql="SELECT sum(price) FROM offers"
	echo "reference: plain SQL's $sum_sql, one cluster alone $(runs 5 "$base-1" bench "$sum_sql") ms;" \
		"on the $clusters clusters at once $(at_once "" "$sum_sql")ms"
fi
for label in $devices; do
	device=$label
	if [ "$label" = gpu-mps ]; then
		start_mps || continue
		device=gpu
	fi
	set_device="SET gpurec.device = $device;"
	for i in $(seq "$clusters"); do # the shards' sessions use the same device
		q -h "$base-1" -d coord -c "ALTER SERVER shards OPTIONS (SET p$((i - 1)) 'host=$base-$i dbname=bench options=''-c gpurec.device=$device -c gpurec.timing=$([ "$timing" = 1 ] && echo on || echo off)''')"
	done
	if [[ $parts == *" overhead "* ]]; then
		small_local=$(runs 11 "$base-1" whole "$set_device SELECT count(*) FROM gpurec.cheapest_offers('SELECT * FROM small_offers', 2)")
		small_dist=$(runs 11 "$base-1" coord "$set_device SELECT count(*) FROM gpurec_shards.cheapest_offers('shards', 'SELECT * FROM small_offers', 2)")
		echo "overhead ($label): cheapest_offers on 10,000 offers, k = 2: one cluster $small_local ms, over $clusters shards $small_dist ms: +$(awk -v a="$small_dist" -v b="$small_local" 'BEGIN { printf "%.1f", a - b }') ms (target: at most +5 ms)"
	fi
	if [[ $parts == *" cheapest "* ]]; then
		weak_scaling cheapest_offers "$((products * per_shard)) offers" "$((clusters * products * per_shard)) offers" \
			"SELECT count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers')" \
			"SELECT count(*) FROM gpurec_shards.cheapest_offers('shards', 'SELECT product_id, store_id, price FROM offers')"
	fi
	if [[ $parts == *" roc "* ]]; then
		weak_scaling roc_fitness "$individuals x $examples real[]" "$((clusters * individuals)) individuals" \
			"SELECT count(*) FROM gpurec.roc_fitness('SELECT individual_id, scores FROM population', (SELECT l FROM labels))" \
			"SELECT count(*) FROM gpurec_shards.roc_fitness('shards', 'SELECT individual_id, scores FROM population', (SELECT l FROM labels))"
		empty="SELECT count(*) FROM gpurec_shards.roc_fitness('shards', 'SELECT individual_id, scores FROM population WHERE false', (SELECT l FROM labels))"
		echo "  the distributed call on no individual (labels sent, shards called): $(runs 3 "$base-1" coord "$empty") ms"
	fi
	if [[ $parts == *" similar "* ]]; then
		# strong scaling: the same users on one cluster, then divided
		n=$users
		[ "$device" = cpu ] && [ "$cpu_users" -lt "$users" ] && n=$cpu_users
		points_sql="SELECT * FROM points WHERE user_id <= $n"
		one=$(runs 3 "$base-1" whole "$set_device SELECT count(*) FROM gpurec.similar_users('$points_sql', 10)")
		all=$(runs 3 "$base-1" coord "SELECT count(*) FROM gpurec_shards.similar_users('shards', '$points_sql', 10)")
		echo "strong scaling ($label): similar_users, $n users x $points points, k = 10: one cluster $one ms;" \
			"$clusters clusters $all ms: $(ratio "$all" "$one")x (target: at most 0.35x)"
		if [ "$timing" = 1 ]; then
			# the distributed call by steps: the points gathered (and merged);
			# those and the partitions' ranking (the points sent to each,
			# ranked, the lists back); the whole adds the lists' merge and rows
			gather="gpurec_shards_internal.points_part('shards', gpurec_shards_internal.partitions('shards'), '$points_sql', NULL, 'euclidean', NULL)"
			gathered=$(runs 3 "$base-1" coord "SELECT length($gather)")
			ranked=$(runs 3 "$base-1" coord "SELECT sum(length(part)) FROM gpurec_shards_internal.similar_users_part('shards',
				gpurec_shards_internal.partitions('shards'), '$points_sql', $clusters, 10, 'euclidean', NULL, $gather)")
			echo "  by steps: the points gathered $gathered ms; and ranked on the partitions $ranked ms; the whole $all ms"
		fi
		notices "$base-1" whole "$set_device SELECT count(*) FROM gpurec.similar_users('$points_sql', 10)"
		notices "$base-1" coord "SELECT count(*) FROM gpurec_shards.similar_users('shards', '$points_sql', 10)" "$((2 * clusters + 1))" |
			sed 's/^  /  coordinator: /'
	fi
done
