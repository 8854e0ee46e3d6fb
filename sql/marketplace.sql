-- gpurec marketplace: cheapest_offers and improve_carts
CREATE TABLE offers (product_id integer, store_id bigint, price numeric(10,2), in_stock boolean DEFAULT true);
INSERT INTO offers (product_id, store_id, price) VALUES
  (1, 10, 5.00), (1, 11, 4.50), (1, 12, 4.50), (1, 12, 4.50),  -- tie and a duplicate
  (2, 20, NULL), (2, 21, 'NaN'), (2, 22, 3.00),                 -- NULL price skipped, NaN last
  (3, NULL, 1.00), (NULL, 1, 1.00),                             -- NULL ids skipped
  (4, 40, -1.25),                                               -- one offer, negative
  (5, 51, 7.00), (5, 50, 7.00), (5, 52, 6.99);
-- k defaults to 1
SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers');
SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers', 3);
-- columns by name: extra columns and another order do not matter; WHERE works
SELECT * FROM gpurec.cheapest_offers('SELECT price, in_stock, store_id, product_id FROM offers WHERE in_stock AND product_id <> 1', 2);
-- price is returned as price::numeric of the input type
SELECT * FROM gpurec.cheapest_offers('SELECT product_id::smallint AS product_id, store_id::int AS store_id, (price * 3)::real AS price FROM offers', 2);
SELECT * FROM gpurec.cheapest_offers('SELECT product_id::bigint AS product_id, store_id, price::float8 / 3 AS price FROM offers', 1);
SELECT * FROM gpurec.cheapest_offers($$SELECT product_id, store_id, (price * 100)::bigint AS price FROM offers WHERE price <> 'NaN'$$, 1);
SELECT * FROM gpurec.cheapest_offers($$SELECT * FROM (VALUES (1, 1, 1.5::numeric), (1, 2, 1.50), (1, 3, 1), (1, 4, 'Infinity'), (1, 5, '-Infinity'), (1, 6, 0.000000000000000001)) v(product_id, store_id, price)$$, 6);
-- empty input
SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers WHERE false', 2);
-- NULL arguments: the function is strict
SELECT count(*) FROM gpurec.cheapest_offers(NULL, 2);
SELECT count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers', NULL);
-- errors
SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers', 0);
SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id FROM offers');
SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price::text AS price FROM offers');
SELECT * FROM gpurec.cheapest_offers('SELECT product_id::numeric AS product_id, store_id, price FROM offers');
SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price, price AS price FROM offers');
SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, 123456789012345678901.5 AS price FROM offers');
SELECT * FROM gpurec.cheapest_offers('SELEC 1');
SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM no_such_table');
SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price / 0 AS price FROM offers');
SELECT * FROM gpurec.cheapest_offers('SELECT 1 AS product_id, 1 AS store_id, 1 AS price; SELECT 2');
SELECT * FROM gpurec.cheapest_offers('DELETE FROM offers RETURNING product_id, store_id, price');
SELECT * FROM gpurec.cheapest_offers('WITH d AS (DELETE FROM offers RETURNING *) SELECT product_id, store_id, price FROM d');
SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers FOR UPDATE');
-- a function called by the inner query cannot write either
CREATE FUNCTION sneaky_write() RETURNS boolean LANGUAGE sql VOLATILE
  AS $$ INSERT INTO offers VALUES (99, 99, 1) RETURNING true $$;
SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers WHERE sneaky_write()');
DROP FUNCTION sneaky_write();
SELECT count(*) FROM offers;
-- the caller's privileges apply to the inner query
CREATE ROLE gpurec_reader;
GRANT USAGE ON SCHEMA gpurec TO gpurec_reader;
SET ROLE gpurec_reader;
SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers');
RESET ROLE;
GRANT SELECT ON offers TO gpurec_reader;
SET ROLE gpurec_reader;
SELECT count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers');
RESET ROLE;
REVOKE ALL ON offers FROM gpurec_reader;
REVOKE ALL ON SCHEMA gpurec FROM gpurec_reader;
DROP ROLE gpurec_reader;
-- an error inside a subtransaction is caught, and the next call works
DO $$
BEGIN
  PERFORM * FROM gpurec.cheapest_offers('SELECT product_id, store_id FROM offers');
EXCEPTION WHEN undefined_column THEN
  RAISE NOTICE 'caught: %', SQLERRM;
END $$;
SELECT count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers');

-- improve_carts
CREATE TABLE carts (cart_id bigint, product_id bigint, store_id bigint, quantity integer);
INSERT INTO carts VALUES
  (100, 1, 10, 2),     -- 5.00 at 10, 4.50 at 11: saving 0.50 x 2
  (100, 1, 11, 1),     -- already the cheapest store: not returned
  (100, 1, 12, 1),     -- same price as the best, not strictly cheaper: not returned
  (100, 2, 21, 3),     -- NaN at 21, 3.00 at 22
  (101, 2, 29, 1),     -- store 29 does not offer product 2
  (101, 9, 90, 1),     -- nobody offers product 9
  (101, 5, 51, NULL),  -- NULL quantity counts as 1: 7.00 at 51, 6.99 at 52
  (101, NULL, 51, 1),  -- NULL id: skipped
  (102, 4, 40, 5);     -- only offer: not returned
SELECT * FROM gpurec.improve_carts('SELECT * FROM carts', 'SELECT product_id, store_id, price FROM offers');
-- quantity is optional
SELECT * FROM gpurec.improve_carts('SELECT cart_id, product_id, store_id FROM carts WHERE cart_id = 100', 'SELECT product_id, store_id, price FROM offers');
SELECT * FROM gpurec.improve_carts('SELECT cart_id, product_id, store_id FROM carts WHERE false', 'SELECT product_id, store_id, price FROM offers');
SELECT * FROM gpurec.improve_carts('SELECT cart_id, product_id, store_id FROM carts', 'SELECT product_id, store_id, price FROM offers WHERE false');
SELECT * FROM gpurec.improve_carts('SELECT cart_id, product_id, store_id, 0 AS quantity FROM carts', 'SELECT product_id, store_id, price FROM offers');
SELECT * FROM gpurec.improve_carts('SELECT cart_id, product_id FROM carts', 'SELECT product_id, store_id, price FROM offers');

-- a materialized view over cheapest_offers, refreshed plainly and concurrently
CREATE MATERIALIZED VIEW cheapest3 AS
  SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM public.offers', 3);
CREATE UNIQUE INDEX ON cheapest3 (product_id, offer_rank);
SELECT * FROM cheapest3 WHERE product_id = 5 ORDER BY offer_rank;
INSERT INTO offers VALUES (5, 53, 0.99);
REFRESH MATERIALIZED VIEW cheapest3;
SELECT * FROM cheapest3 WHERE product_id = 5 ORDER BY offer_rank;
DELETE FROM offers WHERE store_id = 53;
INSERT INTO offers VALUES (6, 60, 1.00);
REFRESH MATERIALIZED VIEW CONCURRENTLY cheapest3;
SELECT * FROM cheapest3 WHERE product_id IN (5, 6) ORDER BY product_id, offer_rank;
DROP MATERIALIZED VIEW cheapest3;

-- domains are accepted wherever their base type is
CREATE DOMAIN money2 AS numeric(10,2) CHECK (VALUE >= 0);
CREATE DOMAIN product_key AS int;
SELECT * FROM gpurec.cheapest_offers($$SELECT 1::product_key AS product_id, 7 AS store_id, 4.5::money2 AS price
                                       UNION ALL SELECT 1::product_key, 3, 4.25::money2$$, 2);
DROP DOMAIN money2, product_key;

-- a numeric column is held exactly at its largest number of decimals: a
-- value that does not fit beside the others is named with its column
SELECT * FROM gpurec.cheapest_offers('SELECT * FROM (VALUES (1, 1, 1000000000000::numeric), (1, 2, 0.0000001)) v(product_id, store_id, price)');
SELECT * FROM gpurec.cheapest_offers('SELECT * FROM (VALUES (1, 1, 0.0000001), (1, 2, 1000000000000::numeric)) v(product_id, store_id, price)');
SELECT * FROM gpurec.cheapest_offers('SELECT 1 AS product_id, 1 AS store_id, 12345678901234567890::numeric AS price');
SELECT * FROM gpurec.cheapest_offers('SELECT 1 AS product_id, 1 AS store_id, 0.1234567890123456789::numeric AS price');
SELECT price FROM gpurec.cheapest_offers('SELECT 1 AS product_id, 1 AS store_id, 1234567890123456789::numeric AS price');

-- a misspelled optional column is noticed: every line then counts once
SELECT cart_id, quantity FROM gpurec.improve_carts(
  'SELECT 1 AS cart_id, 1 AS product_id, 10 AS store_id, 2 AS qty',
  'SELECT 1 AS product_id, 11 AS store_id, 1.00 AS price');
-- an empty inner query says so
SELECT * FROM gpurec.cheapest_offers('');
SELECT * FROM gpurec.cheapest_offers('  -- nothing here
');
-- trailing zeros past 18 decimals do not count (33/100.0 has 20 decimals, two of them significant),
-- and the price comes back spelled as the input was
SELECT price, price::text = (33/100.0)::text AS same_spelling, n_offers FROM gpurec.cheapest_offers(
  'SELECT 1 AS product_id, s AS store_id, CASE WHEN s = 1 THEN 33/100.0 ELSE 1000000 + s END AS price FROM generate_series(1, 3) s');
