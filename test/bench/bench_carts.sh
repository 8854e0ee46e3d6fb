#!/usr/bin/env bash
# test/bench/bench_carts.sh: optimize_carts on the classic marketplace
# (30,000 products x 1,024 offers = 30.72M rows, random order, stores drawn
# from 4,096 with random fees, two in three free from a random 20.00 ..
# 200.00), 100,000 carts of 10 lines; against an exact PL/pgSQL baseline
# (the same dominance rule in SQL over indexes on offers and carts, then a
# depth-first branch and bound over
# each cart's products) on the first BASELINE_CARTS carts.  Needs a running
# cluster (PGHOST etc.) with gpurec installed.  PRODUCTS, OFFERS_PER_PRODUCT,
# CARTS and BASELINE_CARTS scale it down; DEVICES lists gpurec.device values.
#
# Prints the end-to-end time per device with its phases (gpurec.timing),
# serial count(*) of the offers (the read it is bound by), the baseline's
# time on the same carts, gpurec's time on those carts alone, the ratio, and
# whether both found the same totals.
set -euo pipefail
products=${PRODUCTS:-30000}
per_product=${OFFERS_PER_PRODUCT:-1024}
carts=${CARTS:-100000}
baseline_carts=${BASELINE_CARTS:-1000}
devices=${DEVICES:-cpu}
db=gpurec_bench_carts
export PGDATABASE=$db
source "$(dirname "$0")/lib.sh"

if [ "${REUSE_TABLE:-0}" != 1 ] || [ "$(q -d postgres -c "SELECT count(*) FROM pg_database WHERE datname = '$db'")" = 0 ]; then
	fresh_database
	echo "# loading $((products * per_product)) offers, 4096 stores, $carts carts of 10 lines"
	make_carts_data "$products" "$per_product" "$carts"
	# the baseline looks up one cart's lines and their products' offers
	q -c "CREATE INDEX ON offers (product_id)" -c "CREATE INDEX ON carts (cart_id)" -c "ANALYZE offers" -c "ANALYZE carts"
fi
# the baseline: the exact optimum of one cart, in PL/pgSQL
q <<'SQL'
CREATE OR REPLACE FUNCTION cart_optimum(cart bigint) RETURNS numeric LANGUAGE plpgsql AS $$
#variable_conflict use_column
-- Amounts in cents as bigint (prices and fees have two decimals): an
-- array of fixed-width elements is indexed in constant time, where a
-- numeric[] is walked to its i-th element.
DECLARE
  -- candidates after the dominance rule, per product (1-based): costs and store numbers, cheapest first
  cost bigint[]; store int[]; pn int[]; first int[]; last int[];
  fee bigint[]; free_from bigint[]; share bigint[]; most bigint[];
  never constant bigint := 9223372036854775807;
  n int; m int;
  subtotal bigint[]; potential bigint[]; uses int[]; choice int[];
  items bigint := 0; best bigint; total bigint; bound bigint; rest bigint; lo bigint;
  d int; j int; k int; q int; i int; v bigint; descended boolean;
BEGIN
  -- one query: the cart's lines, each store's best offer of their
  -- products (through the indexes on carts and offers), the dominance rule
  -- (against the least cost + fee over the product's other stores, from
  -- its two least), the products and stores numbered, the stores' shipping
  WITH lines AS (SELECT product_id, sum(quantity) AS quantity FROM carts WHERE cart_id = cart GROUP BY product_id),
  best_offers AS (SELECT o.product_id, o.store_id, (min(o.price) * l.quantity * 100)::bigint AS cost
                  FROM lines l JOIN offers o USING (product_id) GROUP BY o.product_id, o.store_id, l.quantity),
  with_fee AS (SELECT b.*, coalesce((s.fee * 100)::bigint, 0) AS fee, (s.free_from * 100)::bigint AS free_from
               FROM best_offers b LEFT JOIN shipping s USING (store_id)),
  ranked AS (SELECT w.*, row_number() OVER (PARTITION BY product_id ORDER BY cost + fee, store_id) AS r FROM with_fee w),
  two_least AS (SELECT ranked.*, min(cost + fee) FILTER (WHERE r = 1) OVER product AS least,
                       min(cost + fee) FILTER (WHERE r = 2) OVER product AS second
                FROM ranked WINDOW product AS (PARTITION BY product_id)),
  kept AS (SELECT * FROM two_least WHERE CASE WHEN r = 1 THEN second ELSE least END IS NULL
                                        OR cost <= fee + CASE WHEN r = 1 THEN second ELSE least END),
  numbered AS (SELECT k.*, dense_rank() OVER (ORDER BY product_id) AS p, dense_rank() OVER (ORDER BY store_id) AS s FROM kept k),
  stores AS (SELECT s, max(fee) AS fee, max(free_from) AS free_from, count(*) AS offering, sum(greatest(cost, 0)) AS most
             FROM numbered GROUP BY s)
  SELECT (SELECT array_agg(cost ORDER BY p, cost, s) FROM numbered),
         (SELECT array_agg(s::int ORDER BY p, cost, s) FROM numbered),
         (SELECT array_agg(p::int ORDER BY p, cost, s) FROM numbered),
         (SELECT max(p) FROM numbered), (SELECT max(s) FROM numbered),
         (SELECT array_agg(fee ORDER BY s) FROM stores),
         (SELECT array_agg(coalesce(free_from, never) ORDER BY s) FROM stores),
         (SELECT array_agg(CASE WHEN free_from IS NULL OR most < free_from THEN fee / offering ELSE 0 END ORDER BY s) FROM stores),
         (SELECT array_agg(most ORDER BY s) FROM stores)
    INTO cost, store, pn, n, m, fee, free_from, share, most;
  IF n IS NULL THEN RETURN 0; END IF;
  -- each product's candidates in the flattened arrays
  first := array_fill(0, ARRAY[n + 1]); last := array_fill(0, ARRAY[n + 1]);
  FOR i IN 1 .. array_length(pn, 1) LOOP
    IF i = 1 OR pn[i] <> pn[i - 1] THEN first[pn[i]] := i; END IF;
    last[pn[i]] := i;
  END LOOP;
  subtotal := array_fill(0::bigint, ARRAY[m]); uses := array_fill(0, ARRAY[m]); choice := array_fill(0, ARRAY[n]);
  -- the first total to beat: greedy, each product at its least cost plus the fee of a store it opens
  FOR q IN 1 .. n LOOP
    lo := never;
    FOR i IN first[q] .. last[q] LOOP
      v := cost[i] + CASE WHEN uses[store[i]] > 0 THEN 0 ELSE fee[store[i]] END;
      IF v < lo THEN lo := v; j := i; END IF;
    END LOOP;
    uses[store[j]] := uses[store[j]] + 1; subtotal[store[j]] := subtotal[store[j]] + cost[j]; items := items + cost[j];
  END LOOP;
  best := items;
  FOR k IN 1 .. m LOOP
    IF uses[k] > 0 AND subtotal[k] < free_from[k] THEN best := best + fee[k]; END IF;
  END LOOP;
  items := 0; subtotal := array_fill(0::bigint, ARRAY[m]); uses := array_fill(0, ARRAY[m]);
  -- potential[k]: the positive costs that products not yet placed could still bring store k
  potential := most;
  -- depth-first: choice[d] is the candidate tried at depth d (0: none yet)
  d := 1;
  LOOP
    IF d > n THEN
      total := items;
      FOR k IN 1 .. m LOOP
        IF uses[k] > 0 AND subtotal[k] < free_from[k] THEN total := total + fee[k]; END IF;
      END LOOP;
      best := least(best, total);
      d := d - 1;
      CONTINUE;
    END IF;
    j := choice[d];
    IF j > 0 THEN
      k := store[j]; items := items - cost[j]; subtotal[k] := subtotal[k] - cost[j]; uses[k] := uses[k] - 1;
      j := j + 1;
    ELSE
      j := first[d];
      FOR i IN first[d] .. last[d] LOOP
        potential[store[i]] := potential[store[i]] - greatest(cost[i], 0);
      END LOOP;
    END IF;
    descended := false;
    WHILE j <= last[d] LOOP
      k := store[j]; items := items + cost[j]; subtotal[k] := subtotal[k] + cost[j]; uses[k] := uses[k] + 1;
      -- bound: items, the fees of used stores that can no longer become free, the rest at cost plus share
      rest := 0;
      FOR q IN d + 1 .. n LOOP
        lo := never;
        FOR i IN first[q] .. last[q] LOOP
          EXIT WHEN cost[i] >= lo;
          v := cost[i] + CASE WHEN uses[store[i]] > 0 THEN 0 ELSE share[store[i]] END;
          IF v < lo THEN lo := v; END IF;
        END LOOP;
        rest := rest + lo;
      END LOOP;
      bound := items + rest;
      FOR i IN 1 .. m LOOP
        IF uses[i] > 0 AND subtotal[i] + potential[i] < free_from[i] THEN bound := bound + fee[i]; END IF;
      END LOOP;
      IF bound <= best THEN
        choice[d] := j; descended := true; EXIT;
      END IF;
      items := items - cost[j]; subtotal[k] := subtotal[k] - cost[j]; uses[k] := uses[k] - 1;
      j := j + 1;
    END LOOP;
    IF descended THEN
      d := d + 1;
    ELSE
      choice[d] := 0;
      FOR i IN first[d] .. last[d] LOOP
        potential[store[i]] := potential[store[i]] + greatest(cost[i], 0);
      END LOOP;
      EXIT WHEN d = 1;
      d := d - 1;
    END IF;
  END LOOP;
  RETURN (best::numeric / 100)::numeric(20, 2);
END $$;
SQL
allow_workers offers
rows=$(q -c "SELECT count(*) FROM offers")
# call CARTS_WHERE [OFFERS_WHERE]: optimize_carts' rows counted, the timed
# query (a DISTINCT over the million rows would time the consumer as well)
call() {
	echo "SELECT count(*) FROM gpurec.optimize_carts('SELECT cart_id, product_id, quantity FROM carts $1', 'SELECT product_id, store_id, price FROM offers ${2:-}', 'SELECT store_id, fee, free_from FROM shipping')"
}
# totals SQL: its carts and the sum of their totals, to compare with the baseline
totals() { echo "SELECT count(*), sum(total) FROM (SELECT DISTINCT cart_id, total FROM ${1#SELECT count(*) FROM }) t"; }
gpurec_sql=$(call "")
# the baseline's carts: with every offer, and with the offers of their
# products alone (what the baseline reads through its index)
small_all_sql=$(call "WHERE cart_id <= $baseline_carts")
small_sql=$(call "WHERE cart_id <= $baseline_carts" "WHERE product_id IN (SELECT product_id FROM carts WHERE cart_id <= $baseline_carts)")
baseline_sql="SELECT count(*), sum(cart_optimum(cart_id)) FROM generate_series(1, $baseline_carts) cart_id"

echo "# $rows offers, $carts carts; $workers parallel workers and the calling backend ($(nproc) cores)"
echo "serial count(*) of the offers: $(median3 "SELECT count(*) FROM offers") ms"
for device in $devices; do
	echo "gpurec.optimize_carts ($device), $carts carts: $(median3 "$gpurec_sql" "$parallel SET gpurec.device = $device;") ms"
	notice "$gpurec_sql" "$parallel SET gpurec.device = $device;"
	# a session's second call: gpurec's library (and CUDA, on the GPU) started already
	echo "  in a warm session: $(warm3 "$gpurec_sql" "$parallel SET gpurec.device = $device;") ms"
	q -c "SET max_parallel_workers_per_gather = 0; SET gpurec.timing = on; $parallel SET gpurec.device = $device;" \
		-c "$gpurec_sql" -c "$gpurec_sql" 2>&1 | grep NOTICE | tail -1 | sed 's/^/  /' || true
done
small_all_ms=$(median3 "$small_all_sql" "$parallel SET gpurec.device = cpu;")
small_ms=$(median3 "$small_sql" "$parallel SET gpurec.device = cpu;")
baseline_ms=$(run_ms "$baseline_sql")
echo "gpurec.optimize_carts (cpu), $baseline_carts carts, every offer: $small_all_ms ms; the offers of their products: $small_ms ms"
echo "PL/pgSQL exact baseline, $baseline_carts carts:  $baseline_ms ms ($(ratio "$baseline_ms" "$small_all_ms")x gpurec's time with every offer, $(ratio "$baseline_ms" "$small_ms")x with their products' offers)"
mine=$(q -c "$parallel SET gpurec.device = cpu;" -c "$(totals "$small_sql")" | tail -1)
theirs=$(q -c "$baseline_sql")
echo "same optimum (carts|sum of totals): gpurec $mine, baseline $theirs: $([ "$mine" = "$theirs" ] && echo yes || echo NO)"
