#!/usr/bin/env bash
# test/bench/bench_progress.sh: what gpurec.progress costs a call, by
# gpurec.track_progress on against off in ROUNDS (5) interleaved rounds, each
# in one session (warm):
#   - a short call, CALLS (2000) times in a PL/pgSQL loop: cheapest_offers
#     over 10 offers (a row in gpurec.progress shown and emptied per call);
#   - a scalar called per row: roc_auc over ROWS (20000) rows of 16 examples;
#   - a longer call: similar_users over USERS (1000) users of 20 points on
#     the CPU (users counted by the worker threads, published at every
#     interrupt point).
# Prints each round's times and their medians: the backend's CPU time
# (all its threads), which other load on the machine disturbs less, and the
# wall time.  Needs a running cluster (PGHOST
# etc.; superuser: gpurec.track_progress is a superuser's setting).
set -euo pipefail
rounds=${ROUNDS:-5}
calls=${CALLS:-2000}
rows=${ROWS:-20000}
users=${USERS:-1000}
db=gpurec_bench_progress
export PGDATABASE=$db
source "$(dirname "$0")/lib.sh"
fresh_database
q -c "CREATE TABLE tiny AS SELECT g::bigint AS product_id, g::bigint AS store_id, 1.5 AS price FROM generate_series(1, 10) g"
q -c "CREATE TABLE scored AS SELECT i, array_agg(((i * 31 + g * 17) % 97)::float8) AS scores, array_agg(g % 3 = 0) AS labels
        FROM generate_series(1, $rows) i, generate_series(1, 16) g GROUP BY i"
q -c "CREATE TABLE points AS SELECT (g % $users)::bigint AS user_id, (g * 7919 % 10007) / 100.0 AS x,
        (g * 104729 % 10009) / 100.0 AS y FROM generate_series(1, $users * 20) g" -c "ANALYZE"

short="DO \$\$ BEGIN FOR i IN 1..$calls LOOP
         PERFORM count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM tiny', 1);
       END LOOP; END \$\$"
scalar="SELECT sum(gpurec.roc_auc(scores, labels)) FROM scored"
long="SELECT count(*) FROM gpurec.similar_users('SELECT user_id, x, y FROM points', 10)"
settings="SET gpurec.device = cpu;"

# cpu_wall SQL SETTINGS: the second of two runs in one session: the CPU time
# of the backend's threads (their /proc/self/task/*/schedstat, in ns; gpurec's
# worker threads are kept between calls) and the wall time, in ms
cpu_wall() {
	local ns="SELECT sum(split_part(pg_read_file('/proc/self/task/' || t || '/schedstat'), ' ', 1)::bigint)
	          FROM pg_ls_dir('/proc/self/task') t"
	q -c "SET max_parallel_workers_per_gather = 0; $2" -c "$1" -c "$ns" -c '\timing on' -c "$1" -c '\timing off' -c "$ns" |
		sed -nE 's/^Time: ([0-9.]+) ms.*/\1/p; /^[0-9]{6,}$/p' | tr '\n' ' ' |
		awk '{ printf "%.1f %.1f\n", ($3 - $1) / 1e6, $2 }'
}

declare -A cpu wall
echo "# backend CPU ms / wall ms per statement; track_progress on, then off, in each round"
for round in $(seq "$rounds"); do
	line="round $round:"
	for kind in short scalar long; do
		for track in on off; do
			read -r c w < <(cpu_wall "${!kind}" "$settings SET gpurec.track_progress = $track;")
			cpu[$kind.$track]+="$c "
			wall[$kind.$track]+="$w "
			line+=" $kind/$track $c/$w"
		done
	done
	echo "$line"
done
med() { local -n from=$1; tr ' ' '\n' <<<"${from[$2]}" | grep . | median; }
for measure in cpu wall; do
	for kind in short scalar long; do
		on=$(med "$measure" "$kind.on")
		off=$(med "$measure" "$kind.off")
		case $kind in
		short) n=$calls per="call" ;;
		scalar) n=$rows per="row" ;;
		long) n=1 per="call" ;;
		esac
		echo "median $measure $kind: on $on ms, off $off ms, on/off $(ratio "$on" "$off"), on - off per $per" \
			"$(awk -v a="$on" -v b="$off" -v n="$n" 'BEGIN { printf "%.3f us", 1000 * (a - b) / n }')"
	done
done
