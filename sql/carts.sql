-- gpurec.optimize_carts: the cheapest whole cart, items plus shipping
\set VERBOSITY terse
CREATE TABLE offers (product_id integer, store_id bigint, price numeric);
INSERT INTO offers VALUES
  (1, 10, 5.00), (1, 20, 4.90), (1, 20, 4.9),    -- two spellings of one price: the fewer decimals
  (2, 10, 3), (2, 20, 3.50),
  (3, 30, 1.00),                                  -- store 30 has no shipping row: ships free
  (4, 10, 2.00), (4, 20, 2.00),                   -- a tie of price
  (NULL, 10, 0.01), (1, NULL, 0.01), (1, 10, NULL); -- NULLs skip the offer
CREATE TABLE shipping (store_id bigint, fee numeric, free_from numeric);
INSERT INTO shipping VALUES (10, 2.50, 8), (20, 3, NULL), (NULL, 1, 1);
CREATE TABLE carts (cart_id bigint, product_id bigint, quantity integer, store_id bigint);
INSERT INTO carts VALUES
  (1, 1, 1, 20), (1, 2, 1, 20),                   -- store 10 reaches free shipping at exactly 8.00
  (2, 1, 2, NULL), (2, 99, 1, 10),                -- nobody offers 99: incomplete, no current total
  (3, 1, 1, 10), (3, 1, 2, 10), (3, 3, 1, 30),    -- duplicated lines: one demand, one store
  (4, 4, 1, NULL),                                -- a tie: the lower store id
  (5, 2, NULL, 10),                               -- NULL quantity counts as 1
  (NULL, 1, 1, 10), (6, NULL, 1, 10);             -- NULL ids skip the line
SELECT * FROM gpurec.optimize_carts('SELECT * FROM carts', 'SELECT * FROM offers', 'SELECT * FROM shipping')
  ORDER BY cart_id, product_id, quantity;
-- the parameter names, and columns matched by name; quantity and store_id are optional
SELECT cart_id, product_id, quantity, store_id, price, total, shipping, stores_used, complete, current_total, saving
  FROM gpurec.optimize_carts(carts_query => 'SELECT product_id, cart_id FROM carts',
                             offers_query => 'SELECT price, store_id, product_id FROM offers',
                             shipping_query => 'SELECT fee, store_id FROM shipping')
  ORDER BY cart_id, product_id, quantity;
-- free_from: just below the subtotal is free, just above is not
SELECT cart_id, store_id, total, shipping FROM gpurec.optimize_carts(
  'SELECT 1 AS cart_id, 2 AS product_id', 'SELECT * FROM offers',
  'SELECT store_id, fee, 3 AS free_from FROM shipping') ORDER BY 1;
SELECT cart_id, store_id, total, shipping FROM gpurec.optimize_carts(
  'SELECT 1 AS cart_id, 2 AS product_id', 'SELECT * FROM offers',
  'SELECT store_id, fee, 3.01 AS free_from FROM shipping') ORDER BY 1;
-- integer prices and fees; no shipping at all
SELECT * FROM gpurec.optimize_carts('SELECT 7 AS cart_id, 1 AS product_id, 3 AS quantity',
  'SELECT product_id, store_id, (price * 100)::bigint AS price FROM offers WHERE price IS NOT NULL',
  'SELECT 10 AS store_id, 250 AS fee WHERE false');
-- consolidating: three cheap stores lose to one store with free shipping
SELECT * FROM gpurec.optimize_carts(
  'SELECT 1 AS cart_id, p AS product_id FROM generate_series(1, 3) p',
  'SELECT p AS product_id, p AS store_id, 1.00 AS price FROM generate_series(1, 3) p
   UNION ALL SELECT p, 9, 1.10 FROM generate_series(1, 3) p',
  'SELECT s AS store_id, 4.99 AS fee, CASE WHEN s = 9 THEN 3.30 END AS free_from FROM (VALUES (1), (2), (3), (9)) v(s)')
  ORDER BY product_id;
-- empty inputs
SELECT count(*) FROM gpurec.optimize_carts('SELECT * FROM carts WHERE false', 'SELECT * FROM offers', 'SELECT * FROM shipping');
SELECT * FROM gpurec.optimize_carts('SELECT 1 AS cart_id, 1 AS product_id', 'SELECT * FROM offers WHERE false', 'SELECT * FROM shipping');
-- 32 distinct products are solved; 33 are refused
SELECT count(*), min(total), max(stores_used) FROM gpurec.optimize_carts(
  'SELECT 1 AS cart_id, p AS product_id FROM generate_series(1, 32) p',
  'SELECT p AS product_id, s AS store_id, (p % 7 + s)::numeric AS price FROM generate_series(1, 32) p, generate_series(1, 3) s',
  'SELECT s AS store_id, 2 AS fee FROM generate_series(1, 3) s');
\set VERBOSITY default
SELECT * FROM gpurec.optimize_carts(
  'SELECT 1 AS cart_id, p AS product_id FROM generate_series(1, 33) p',
  'SELECT p AS product_id, 1 AS store_id, 1 AS price FROM generate_series(1, 33) p',
  'SELECT 1 AS store_id, 1 AS fee');
\set VERBOSITY terse
-- NULL arguments: the function is strict
SELECT count(*) FROM gpurec.optimize_carts(NULL, 'SELECT * FROM offers', 'SELECT * FROM shipping');
SELECT count(*) FROM gpurec.optimize_carts('SELECT * FROM carts', NULL, 'SELECT * FROM shipping');
SELECT count(*) FROM gpurec.optimize_carts('SELECT * FROM carts', 'SELECT * FROM offers', NULL);
-- errors, each as its SQLSTATE and message
CREATE FUNCTION err(query text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE query;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
SELECT err($e$SELECT * FROM gpurec.optimize_carts('SELECT 1 AS cart_id, 1 AS product_id, 0 AS quantity', 'SELECT * FROM offers', 'SELECT * FROM shipping')$e$);
SELECT err($e$SELECT * FROM gpurec.optimize_carts('SELECT 1 AS cart_id, 1 AS product_id', 'SELECT * FROM offers', 'SELECT 10 AS store_id, -1 AS fee')$e$);
SELECT err($e$SELECT * FROM gpurec.optimize_carts('SELECT 1 AS cart_id, 1 AS product_id', 'SELECT * FROM offers', 'SELECT 10 AS store_id, NULL::numeric AS fee')$e$);
SELECT err($e$SELECT * FROM gpurec.optimize_carts('SELECT 1 AS cart_id, 1 AS product_id', 'SELECT * FROM offers', $$SELECT 10 AS store_id, 'NaN'::numeric AS fee$$)$e$);
SELECT err($e$SELECT * FROM gpurec.optimize_carts('SELECT 1 AS cart_id, 1 AS product_id', 'SELECT * FROM offers', $$SELECT 10 AS store_id, 1 AS fee, 'NaN'::numeric AS free_from$$)$e$);
SELECT err($e$SELECT * FROM gpurec.optimize_carts('SELECT 1 AS cart_id, 1 AS product_id', 'SELECT * FROM offers', 'SELECT 10 AS store_id, 1 AS fee UNION ALL SELECT 10, 2')$e$);
SELECT err($e$SELECT * FROM gpurec.optimize_carts('SELECT 1 AS cart_id, 1 AS product_id', 'SELECT product_id, store_id, price::float8 AS price FROM offers', 'SELECT * FROM shipping')$e$);
SELECT err($e$SELECT * FROM gpurec.optimize_carts('SELECT 1 AS cart_id, 1 AS product_id', 'SELECT * FROM offers', 'SELECT store_id, fee::real AS fee FROM shipping')$e$);
SELECT err($e$SELECT * FROM gpurec.optimize_carts('SELECT 1 AS cart_id, 1 AS product_id', $$SELECT 1 AS product_id, 10 AS store_id, 'Infinity'::numeric AS price$$, 'SELECT * FROM shipping')$e$);
SELECT err($e$SELECT * FROM gpurec.optimize_carts('SELECT 1 AS cart_id, 1 AS product_id, 1000000000 AS quantity', 'SELECT 1 AS product_id, 10 AS store_id, 1000000000.00 AS price', 'SELECT * FROM shipping')$e$);
SELECT err($e$SELECT * FROM gpurec.optimize_carts('SELECT 1 AS cart_id, 1 AS product_id', 'SELECT * FROM offers', 'SELECT 10 AS store_id, 1000000000000000000 AS fee')$e$);
SELECT err($e$SELECT * FROM gpurec.optimize_carts('SELECT 1 AS product_id', 'SELECT * FROM offers', 'SELECT * FROM shipping')$e$);
SELECT err($e$SELECT * FROM gpurec.optimize_carts('SELECT 1 AS cart_id, 1 AS product_id', 'SELECT product_id, store_id FROM offers', 'SELECT * FROM shipping')$e$);
SELECT err($e$SELECT * FROM gpurec.optimize_carts('SELECT 1 AS cart_id, 1 AS product_id', 'SELECT * FROM offers', 'SELECT store_id FROM shipping')$e$);
SELECT err($e$SELECT * FROM gpurec.optimize_carts('SELECT 1 AS cart_id, 1 AS product_id', 'SELECT * FROM offers', 'SELECT store_id, fee::text AS fee FROM shipping')$e$);
SELECT err($e$SELECT * FROM gpurec.optimize_carts('SELECT 1 AS cart_id, 1 AS product_id', 'SELECT * FROM offers', 'DELETE FROM shipping RETURNING *')$e$);
-- only the offers of products in some cart are read: an offer of another
-- product whose price gpurec cannot hold (past a 64-bit key at its scale)
-- is dropped before its price is converted, where cheapest_offers, which
-- reads every offer, stops on it
SELECT cart_id, product_id, store_id, price, total FROM gpurec.optimize_carts('SELECT 1 AS cart_id, 1 AS product_id', $$SELECT * FROM offers UNION ALL SELECT 999, 10, 1e30$$, 'SELECT * FROM shipping');
SELECT err($e$SELECT * FROM gpurec.cheapest_offers($$SELECT * FROM offers UNION ALL SELECT 999, 10, 1e30$$)$e$);
-- misspelled optional columns are noticed, every one of them, and each
-- row then takes the defaults: no current store, quantity 1, never free
SELECT cart_id, quantity, shipping, total FROM gpurec.optimize_carts(
  'SELECT 1 AS cart_id, 1 AS product_id, 5 AS qty, 10 AS store',
  'SELECT * FROM offers', 'SELECT store_id, fee, 50 AS freefrom FROM shipping');
-- the regression database is shared with the other tests
DROP TABLE carts, offers, shipping;
DROP FUNCTION err(text);
