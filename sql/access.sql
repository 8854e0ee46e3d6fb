-- gpurec for ordinary roles: every role may call the functions, and each
-- inner query runs with that role's own privileges.
CREATE ROLE gpurec_analyst LOGIN;
CREATE TABLE access_offers(product_id int, store_id int, price numeric(10,2));
INSERT INTO access_offers VALUES (1, 10, 5.00), (1, 11, 4.50), (2, 10, 7.25);
CREATE TABLE access_secret(product_id int, store_id int, price numeric(10,2));
INSERT INTO access_secret VALUES (9, 9, 9.99);
GRANT SELECT ON access_offers TO gpurec_analyst;

SET ROLE gpurec_analyst;
SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user;
SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM access_offers');
SELECT * FROM gpurec.improve_carts('SELECT 1 AS cart_id, 1 AS product_id, 10 AS store_id',
                                   'SELECT product_id, store_id, price FROM access_offers');
SELECT * FROM gpurec.roc_fitness('SELECT 1 AS individual_id, true AS label, 0.9 AS score UNION ALL SELECT 1, false, 0.1');
SELECT gpurec.roc_auc('{0.9, 0.1}', '{t, f}');
SELECT * FROM gpurec.user_similarity('SELECT 1 AS user_id, 0 AS x, 0 AS y UNION ALL SELECT 2, 3, 4', 1);
SELECT count(*) >= 0 AS devices_visible FROM gpurec.devices();
-- the inner query keeps the caller's privileges: PostgreSQL's own 42501
\set VERBOSITY sqlstate
SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM access_secret');
\set VERBOSITY default
-- superuser-only settings stay so
SET gpurec.test_fail_gpu_alloc = on;
RESET ROLE;

-- gpurec restricted to chosen roles (the README's recipe): a role not
-- granted reaches neither the functions nor the internals they call
CREATE ROLE gpurec_outsider;
GRANT SELECT ON access_offers TO gpurec_outsider;
REVOKE USAGE ON SCHEMA gpurec, gpurec_internal FROM PUBLIC;
GRANT USAGE ON SCHEMA gpurec, gpurec_internal TO gpurec_analyst;
SET ROLE gpurec_analyst;
SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM access_offers');
SET ROLE gpurec_outsider;
\set VERBOSITY sqlstate
SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM access_offers');
SELECT * FROM gpurec_internal._merge_cheapest_offers(
  ARRAY[gpurec_internal._cheapest_offers_part('SELECT product_id, store_id, price FROM access_offers', 1)], 1);
\set VERBOSITY default
RESET ROLE;
GRANT USAGE ON SCHEMA gpurec, gpurec_internal TO PUBLIC;
REVOKE USAGE ON SCHEMA gpurec, gpurec_internal FROM gpurec_analyst;
REVOKE SELECT ON access_offers FROM gpurec_outsider;
DROP ROLE gpurec_outsider;

DROP TABLE access_offers, access_secret;
DROP ROLE gpurec_analyst;

-- settings: with gpurec in session_preload_libraries they are real from a
-- session's first statement (an enum, not a placeholder string); loading at
-- session start starts no CUDA
SELECT current_user AS admin \gset
CREATE ROLE gpurec_preloaded LOGIN;
ALTER ROLE gpurec_preloaded SET session_preload_libraries = 'gpurec';
ALTER ROLE gpurec_preloaded SET gpurec.timing = on;
\c - gpurec_preloaded
SELECT name, vartype, enumvals FROM pg_settings WHERE name = 'gpurec.device';
SHOW gpurec.timing;
-- the prefix is reserved once gpurec is loaded: a misspelling is an error
SET gpurec.devcie = 'cpu';
\c - :admin
DROP ROLE gpurec_preloaded;
