-- demo.sh, marketplace: cheapest_offers and improve_carts on the offers table
-- demo.sh loaded (psql variable products: products x 1,024 stores), each
-- beside the plain-SQL way.  Read by psql -X -q from stdin.
SET gpurec.timing = on;
-- the timing NOTICE's DETAIL says how each inner query was read: for
-- whoever tunes gpurec, not for the demo's reader
\set VERBOSITY terse
SELECT to_char(:products, 'FM999,999,999') AS products_c,
       to_char(:products * 1024, 'FM999,999,999') AS offers_c,
       (:products * 1024 + 500000) / 1000000 + 1 AS plain_guess,
       (:products * 1024 + 3000000) / 6000000 + 1 AS cheapest_guess,
       (:products * 1024 + 1500000) / 3000000 + 2 AS carts_guess \gset

\echo
\echo '== Marketplace: the cheapest offers of every product'
\echo 'gpurec.timing is on: each gpurec call adds one NOTICE line with the device it ran on (cpu or gpu) and'
\echo 'its milliseconds: reading the rows of its query (read), moving data to and from the GPU (transfer, 0 on'
\echo 'the CPU), the algorithm itself (compute) and returning rows (output).'
\echo
\echo '-- the 3 cheapest in-stock offers of each of the' :products_c 'products, among all' :offers_c 'offers'
\echo '   (about' :cheapest_guess 's on 2 CPU cores):'
\echo '   gpurec.cheapest_offers(''SELECT product_id, store_id, price FROM offers WHERE in_stock'', 3)'
SELECT clock_timestamp() AS t0 \gset
CREATE TEMP TABLE cheapest3 AS
  SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers WHERE in_stock', 3);
SELECT extract(epoch FROM clock_timestamp() - :'t0') AS gpurec_s, to_char(count(*), 'FM999,999,999') AS n
FROM cheapest3 \gset
SELECT round(:gpurec_s, 2) AS secs \gset
\echo '  ' :n 'rows in' :secs 's; products 1 and 2 (n_offers: how many stores have the product in stock):'
SELECT * FROM cheapest3 WHERE product_id <= 2 ORDER BY product_id, offer_rank;

\echo '-- the same in plain SQL, a row_number() window over all the offers (it sorts them: about' :plain_guess 's on 2 cores):'
\echo '   SELECT product_id, offer_rank, store_id, price'
\echo '   FROM (SELECT product_id, store_id, price,'
\echo '                row_number() OVER (PARTITION BY product_id ORDER BY price, store_id) AS offer_rank'
\echo '         FROM offers WHERE in_stock) o'
\echo '   WHERE offer_rank <= 3'
SELECT clock_timestamp() AS t0 \gset
CREATE TEMP TABLE plain_cheapest3 AS
  SELECT product_id, offer_rank, store_id, price
  FROM (SELECT product_id, store_id, price,
               row_number() OVER (PARTITION BY product_id ORDER BY price, store_id) AS offer_rank
        FROM offers WHERE in_stock) o
  WHERE offer_rank <= 3;
SELECT extract(epoch FROM clock_timestamp() - :'t0') AS plain_s \gset
CREATE TEMP TABLE gpurec_cheapest3 AS SELECT product_id, offer_rank, store_id, price FROM cheapest3;
SELECT format('   plain SQL %s s, gpurec %s s (%sx); rows that differ: %s of %s',
              round(:plain_s, 2), round(:gpurec_s, 2), round(:plain_s / :gpurec_s, 1),
              (SELECT count(*) FROM ((TABLE plain_cheapest3 EXCEPT ALL TABLE gpurec_cheapest3)
                                     UNION ALL (TABLE gpurec_cheapest3 EXCEPT ALL TABLE plain_cheapest3)) d),
              to_char((SELECT count(*) FROM plain_cheapest3), 'FM999,999,999')) AS line \gset
\echo :line
\echo '   gpurec''s time is mostly read: PostgreSQL running the inner query and handing over its rows.'

-- Carts as shoppers fill them: each of 100,000 shoppers has a home store
-- and a second one, and puts 5 products (quantity 1 to 4) in a cart, four
-- in five at the home store and the others at the second, without looking
-- at the other 1,022 stores, and whether or not the store has the product
-- in stock today.  Every 2,000th cart has a 6th line: a product no store
-- offers yet.
CREATE TEMP TABLE carts AS
  WITH shoppers AS MATERIALIZED (
    SELECT c, 1 + (random() * 1023)::int AS home, 1 + (random() * 1023)::int AS second
    FROM generate_series(1, 100000) c)
  SELECT c AS cart_id, 1 + (random() * (:products - 1))::int AS product_id,
         CASE WHEN random() < 0.8 THEN home ELSE second END AS store_id, 1 + (random() * 3)::int AS quantity
  FROM shoppers, generate_series(1, 5) line
  UNION ALL
  SELECT c, :products + 1 + (c / 2000) % 10, home, 1
  FROM shoppers WHERE c % 2000 = 0;
ANALYZE carts;
SELECT to_char(count(*), 'FM999,999,999') AS lines FROM carts \gset

\echo
\echo '== Marketplace: smart cart'
\echo '-- 100,000 shopping carts,' :lines 'lines (product, store, quantity; 50 of them for products no store'
\echo '   offers yet), each filled at its shopper''s home store and second store: which lines would a'
\echo '   cheaper store serve? (about' :carts_guess 's on 2 CPU cores)'
\echo '   gpurec.improve_carts(''SELECT cart_id, product_id, store_id, quantity FROM carts'','
\echo '                        ''SELECT product_id, store_id, price FROM offers WHERE in_stock'')'
SELECT clock_timestamp() AS t0 \gset
CREATE TEMP TABLE better AS
  SELECT *, CASE WHEN best_price IS NULL THEN 'c: no store offers the product'
                 WHEN current_price IS NULL THEN 'b: out of stock at the cart''s store'
                 ELSE 'a: cheaper at another store' END AS kind
  FROM gpurec.improve_carts('SELECT cart_id, product_id, store_id, quantity FROM carts',
                            'SELECT product_id, store_id, price FROM offers WHERE in_stock');
SELECT round(extract(epoch FROM clock_timestamp() - :'t0')::numeric, 2) AS secs,
       to_char(count(*), 'FM999,999,999') AS n FROM better \gset
\echo '  ' :n 'of the' :lines 'lines come back, in' :secs 's (the others are at their cheapest store already):'
SELECT substr(kind, 4) AS line_kind, count(*) AS lines, sum(saving) AS total_saving FROM better GROUP BY kind ORDER BY kind;
\echo 'Two lines of each kind.  saving = (current_price - best_price) x quantity.  Where the cart''s store does'
\echo 'not offer the product (out of stock there), current_price and saving are NULL; where no store offers it'
\echo 'at all, best_store_id, best_price and saving are NULL too:'
SELECT cart_id, product_id, quantity, current_store_id, current_price, best_store_id, best_price, saving
FROM (SELECT *, row_number() OVER (PARTITION BY kind ORDER BY cart_id, product_id) AS n FROM better) b
WHERE n <= 2 ORDER BY kind, cart_id, product_id;

-- Shipping: every store a fee of 0.00 .. 9.99, two stores in three free from
-- a subtotal of 50.00 .. 200.00.
CREATE TEMP TABLE shipping AS
  SELECT s AS store_id, round((random() * 9.99)::numeric, 2) AS fee,
         CASE WHEN s % 3 <> 0 THEN round((50 + random() * 150)::numeric, 2) END AS free_from
  FROM generate_series(1, 1024) s;

\echo
\echo '== Marketplace: the cheapest whole cart, shipping included'
\echo '-- the first 2,000 carts again, now with each store''s shipping fee (free above a subtotal at two'
\echo '   stores in three): every line moved so that items + shipping is least, exactly, all carts at once'
\echo '   gpurec.optimize_carts(''SELECT cart_id, product_id, store_id, quantity FROM carts WHERE cart_id <= 2000'','
\echo '                         ''SELECT product_id, store_id, price FROM offers WHERE in_stock'','
\echo '                         ''SELECT store_id, fee, free_from FROM shipping'')'
SELECT clock_timestamp() AS t0 \gset
CREATE TEMP TABLE optimal AS
  SELECT * FROM gpurec.optimize_carts('SELECT cart_id, product_id, store_id, quantity FROM carts WHERE cart_id <= 2000',
                                      'SELECT product_id, store_id, price FROM offers WHERE in_stock',
                                      'SELECT store_id, fee, free_from FROM shipping');
SELECT round(extract(epoch FROM clock_timestamp() - :'t0')::numeric, 2) AS secs \gset
\echo '  in' :secs 's; per cart: its total now (current stores) and at the optimum, and how many stores it uses:'
SELECT count(*) AS carts, sum(current_total) AS current_totals, sum(total) FILTER (WHERE current_total IS NOT NULL) AS optimal_totals,
       sum(saving) AS saving, round(avg(stores_used), 2) AS mean_stores_used,
       count(*) FILTER (WHERE NOT complete) AS carts_with_an_unoffered_product
FROM (SELECT DISTINCT cart_id, total, current_total, saving, stores_used, complete FROM optimal) c;
SELECT format('Where every line is in stock at its store today, optimize_carts saves %s %% of what the carts cost now:',
              round(100 * sum(saving) / sum(current_total), 1)) AS saving_line,
       format('their shoppers'' own stores (%s a cart on average, shipping included) against the best of all 1,024,',
              round(avg(current_stores), 2)) AS stores_line
FROM (SELECT DISTINCT cart_id, saving, current_total FROM optimal WHERE current_total IS NOT NULL) o
JOIN (SELECT cart_id, count(DISTINCT store_id) AS current_stores FROM carts WHERE cart_id <= 2000 GROUP BY cart_id) c
  USING (cart_id) \gset
\echo :saving_line
\echo :stores_line
\echo 'store prices being within a tenth of a product''s list price, and offers within 8% of that.'
\echo 'One cart, line by line (its store, price, and the cart''s total and shipping):'
SELECT cart_id, product_id, quantity, store_id, price, total, shipping, stores_used
FROM optimal WHERE cart_id = (SELECT min(cart_id) FROM optimal WHERE saving > 0) ORDER BY product_id;
