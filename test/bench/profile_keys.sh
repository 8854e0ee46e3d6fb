#!/usr/bin/env bash
# test/bench/profile_keys.sh: where a cheapest_offers call with uuid (or
# text) ids spends beside the same call with integer ids, sampled over the
# whole host with perf: CALLS calls of each kind (6) in one session on
# DEVICE (cpu), on the tables bench_keys.sh loads (run it first, with the
# same PRODUCTS and OFFERS_PER_PRODUCT), then every symbol's samples, the
# integer call's subtracted from the other's, the largest differences
# first.  PERF is the perf command (perf); KIND the other kind (uuid).
# Needs a running cluster (PGHOST etc.) with gpurec installed.
set -euo pipefail
perf=${PERF:-perf}
kind=${KIND:-uuid}
calls=${CALLS:-6}
device=${DEVICE:-cpu}
export PGDATABASE=gpurec_bench_keys
source "$(dirname "$0")/lib.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

for k in integer "$kind"; do
	type=bigint
	[ "$k" = integer ] || type=$k
	sql="SELECT count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers_keys_$k', 1, NULL::$type)"
	{
		echo "$parallel SET gpurec.device = $device;"
		for i in $(seq "$calls"); do echo "$sql;"; done
	} >"$dir/calls.sql"
	q -f "$dir/calls.sql" >/dev/null # once unsampled: the tables in the buffers
	$perf record -F 999 -a -o "$dir/$k.data" -- psql -XAtq -v ON_ERROR_STOP=1 -f "$dir/calls.sql" >/dev/null 2>"$dir/record.log" ||
		{ cat "$dir/record.log" >&2; exit 1; }
	echo "$k ids: samples by object"
	$perf report -i "$dir/$k.data" --no-children -n -g none --sort dso 2>/dev/null | grep '%' | head -5
	# "SAMPLES<tab>OBJECT SYMBOL", sorted by symbol for join
	$perf report -i "$dir/$k.data" --no-children -n -g none --sort dso,sym 2>/dev/null | grep -v '^#' | grep '%' |
		awk '{ n = $2; $1 = ""; $2 = ""; sub(/^ +/, ""); print $0 "\t" n }' | LC_ALL=C sort -t$'\t' -k1,1 >"$dir/$k.txt"
done
echo "symbols, $kind less integer (samples), the largest differences"
LC_ALL=C join -t$'\t' -a1 -a2 -e0 -o 0,1.2,2.2 "$dir/integer.txt" "$dir/$kind.txt" |
	awk -F'\t' '{ printf "%7d %7d %7d  %s\n", $3 - $2, $2, $3, $1 }' | sort -n -r | head -${TOP:-30}
