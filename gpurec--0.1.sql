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

-- ----------------------------------------------------------- ROC fitness --

CREATE FUNCTION roc_fitness(scores_query text)
RETURNS TABLE(individual_id bigint, auc float8, fitness float8, n_positive bigint,
              n_negative bigint, lowest_positive_rank bigint, highest_positive_rank bigint)
AS 'MODULE_PATHNAME', 'gpurec_roc_fitness_rows'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION roc_fitness(text) IS
'ROC fitness (AUC - 0.5) of every individual of scores_query (individual_id, label, score: one row per example).';

CREATE FUNCTION roc_fitness(population_query text, labels boolean[])
RETURNS TABLE(individual_id bigint, auc float8, fitness float8, n_positive bigint,
              n_negative bigint, lowest_positive_rank bigint, highest_positive_rank bigint)
AS 'MODULE_PATHNAME', 'gpurec_roc_fitness_arrays'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION roc_fitness(text, boolean[]) IS
'ROC fitness of every individual of population_query (individual_id, scores real[] or double precision[]) against labels.';

CREATE FUNCTION roc_auc(scores float8[], labels boolean[])
RETURNS float8
AS 'MODULE_PATHNAME', 'gpurec_roc_auc'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION roc_auc(float8[], boolean[]) IS
'AUC of one individual''s scores against labels, ties counting half; NULL without a positive or a negative.';
