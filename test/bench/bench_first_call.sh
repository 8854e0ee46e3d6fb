#!/usr/bin/env bash
# test/bench/bench_first_call.sh: what a new session's first call costs more
# than its later ones, in the calling backend's page faults.  In each of
# SESSIONS (3) new sessions, cheapest_offers on PRODUCTS x 1,024 offers
# (3,000: 3.07M) three times, with WORKERS parallel workers (the bench's
# default: the cores less one) on DEVICE (gpu); per call its time, the
# backend's minor page faults (its threads' included: /proc/PID/stat), the
# read and the join of the workers' columns (gpurec.timing).  Needs a running
# cluster (PGHOST etc.) with gpurec installed, and psql's \! to read /proc
# on the server's machine (run it there).
set -euo pipefail
products=${PRODUCTS:-3000}
sessions=${SESSIONS:-3}
device=${DEVICE:-gpu}
export PGDATABASE=gpurec_bench_first
source "$(dirname "$0")/lib.sh"
if [ "$(q -d postgres -c "SELECT count(*) FROM pg_database WHERE datname = '$PGDATABASE'")" = 0 ]; then
	fresh_database
fi
if [ "$(q -c "SELECT count(*) FROM pg_class WHERE relname = 'offers'")" = 0 ] ||
	[ "$(q -c "SELECT count(*) FROM offers")" != $((products * 1024)) ]; then
	q -c "DROP TABLE IF EXISTS offers, shipping, carts"
	make_carts_data "$products" 1024 0 >/dev/null
	allow_workers offers
fi
call="SELECT count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers', 1)"
echo "# $(nproc) cores; $workers workers; gpurec.device = $device; commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
for session in $(seq "$sessions"); do
	psql -Xq 2>&1 <<SQL | grep -E '^faults|^Time|NOTICE|DETAIL' |
$parallel SET gpurec.device = $device; SET gpurec.timing = on;
\timing on
SELECT pg_backend_pid() AS pid \gset
\setenv PID :pid
\! echo "faults \$(awk '{print \$10}' /proc/\$PID/stat)"
$call;
\! echo "faults \$(awk '{print \$10}' /proc/\$PID/stat)"
$call;
\! echo "faults \$(awk '{print \$10}' /proc/\$PID/stat)"
$call;
\! echo "faults \$(awk '{print \$10}' /proc/\$PID/stat)"
SQL
		awk -v session="$session" '
			/^faults/ { if (n++) printf "session %d call %d: %s ms, %d page faults, read %s ms, join %s ms\n", session, n - 1, took, $2 - last, read, join; last = $2 }
			/^Time/ { took = $2 }
			/NOTICE/ { match($0, /read [0-9.]+/); read = substr($0, RSTART + 5, RLENGTH - 5) }
			/DETAIL/ { join = "-"; if (match($0, /(joined in|taken in) [0-9.]+/)) { s = substr($0, RSTART, RLENGTH); sub(/.* /, "", s); join = s } }'
done
