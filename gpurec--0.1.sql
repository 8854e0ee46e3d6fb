-- gpurec 0.1
-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION gpurec" to load this file. \quit

-- Every function takes its data as inner queries (text), matched by column
-- name, run read-only with the caller's privileges (SECURITY INVOKER).

-- ---------------------------------------------------------------- devices --

CREATE FUNCTION devices()
RETURNS TABLE(device_id int, name text, compute_capability text,
              total_memory_bytes bigint, free_memory_bytes bigint, multiprocessors int)
AS 'MODULE_PATHNAME', 'gpurec_devices'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION devices() IS
'The GPUs this backend can use; no rows without one.';

-- ------------------------------------------------------------ marketplace --

CREATE FUNCTION cheapest_offers(offers_query text, k integer DEFAULT 1)
RETURNS TABLE(product_id bigint, offer_rank integer, store_id bigint, price numeric,
              n_offers bigint)
AS 'MODULE_PATHNAME', 'gpurec_cheapest_offers'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION cheapest_offers(text, integer) IS
'For each product of offers_query (product_id, store_id, price), its k cheapest offers.';

CREATE FUNCTION improve_carts(carts_query text, offers_query text)
RETURNS TABLE(cart_id bigint, product_id bigint, quantity bigint, current_store_id bigint,
              current_price numeric, best_store_id bigint, best_price numeric, saving numeric)
AS 'MODULE_PATHNAME', 'gpurec_improve_carts'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION improve_carts(text, text) IS
'Smart cart: the cart lines of carts_query (cart_id, product_id, store_id[, quantity]) that a cheaper store, or any store, can serve better.';
