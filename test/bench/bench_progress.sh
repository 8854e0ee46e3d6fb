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
# Prints each round's times, the medians and the fastest runs (on a shared
# machine the fastest is the least disturbed).  Needs a running cluster (PGHOST
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

declare -A times
echo "# ms per statement; track_progress on, then off, in each round"
for round in $(seq "$rounds"); do
	line="round $round:"
	for kind in short scalar long; do
		for track in on off; do
			ms=$(warm_ms "${!kind}" "$settings SET gpurec.track_progress = $track;")
			times[$kind.$track]+="$ms "
			line+=" $kind/$track $ms"
		done
	done
	echo "$line"
done
med() { tr ' ' '\n' <<<"${times[$1]}" | grep . | median; }
fastest() { tr ' ' '\n' <<<"${times[$1]}" | grep . | sort -n | head -1; }
for stat in med fastest; do
	for kind in short scalar long; do
		on=$($stat "$kind.on")
		off=$($stat "$kind.off")
		case $kind in
		short) per="per call: $(awk -v a="$on" -v b="$off" -v n="$calls" 'BEGIN { printf "%.2f us on, %.2f us off", 1000 * a / n, 1000 * b / n }')" ;;
		scalar) per="per row: $(awk -v a="$on" -v b="$off" -v n="$rows" 'BEGIN { printf "%.2f us on, %.2f us off", 1000 * a / n, 1000 * b / n }')" ;;
		long) per="$users users" ;;
		esac
		echo "$stat $kind: on $on ms, off $off ms, on/off $(ratio "$on" "$off") ($per)"
	done
done
