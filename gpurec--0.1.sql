-- gpurec 0.1
-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION gpurec" to load this file. \quit

-- The script makes its schemas itself, so that they are the extension's:
-- DROP EXTENSION removes them, pg_dump writes CREATE EXTENSION alone, and a
-- schema of their name that exists already (made by a role that could
-- then replace the functions every role calls) fails CREATE SCHEMA (42P06).
-- A control file's schema PostgreSQL makes outside the extension, which is
-- why gpurec.control names pg_catalog; every object below names its schema.
CREATE SCHEMA gpurec;

-- Every role that may read the data may call the functions: the schema is
-- open to all, as PostGIS's and pgRouting's are, and each inner query runs
-- with the caller's own privileges (SECURITY INVOKER), so nothing is
-- reachable through gpurec that the caller could not SELECT itself.
GRANT USAGE ON SCHEMA gpurec TO PUBLIC;

COMMENT ON SCHEMA gpurec IS
'gpurec: recommendation and marketplace analytics on the GPU (or every CPU core), each function fed by inner queries; \df+ gpurec.* lists them.';

-- What gpurec's functions and gpurec_shards call, kept out of the user's
-- schema so that \df gpurec.* lists only what users call.  USAGE stays
-- PUBLIC: the read layer's SQL names gpurec_internal._read_columns as the
-- calling role (SECURITY INVOKER), and gpurec_shards' functions, run by
-- any role, name the shards' internals; each of these is safe to call
-- (the aggregate refuses to run outside a gpurec function, the others
-- compute from their arguments or run an inner query as the caller, as the
-- public functions do).  Functions no role calls by name are not granted.
CREATE SCHEMA gpurec_internal;
COMMENT ON SCHEMA gpurec_internal IS
'gpurec''s internals, called by its own functions and by gpurec_shards; not for direct use, and they may change with any version.';
GRANT USAGE ON SCHEMA gpurec_internal TO PUBLIC;

-- The functions in SQL and PL/pgSQL below either set search_path =
-- pg_catalog, pg_temp or, where they run the caller's inner query (which
-- must find the caller's tables), name pg_catalog's functions in full: a
-- role that may create objects on the caller's search_path must not be
-- able to put its own function in the place of one of them.

-- Every function takes its data as inner queries (text), matched by column
-- name, run read-only with the caller's privileges (SECURITY INVOKER).

-- ---------------------------------------------------------------- devices --

CREATE FUNCTION gpurec.devices()
RETURNS TABLE(device_id int, name text, compute_capability text,
              total_memory_bytes bigint, free_memory_bytes bigint, multiprocessors int,
              calls_running int, calls_queued int, memory_used bigint, service_pid int)
AS 'MODULE_PATHNAME', 'gpurec_devices'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec.devices() IS
'The GPUs gpurec uses, one row each: the GPU service''s with its calls running and queued and the memory they hold (gpurec in shared_preload_libraries), else this backend''s own, the service''s columns NULL; no rows without a GPU.';

-- --------------------------------------------------------------- progress --

CREATE FUNCTION gpurec.progress()
RETURNS TABLE(pid int, datname name, usename name, function text, phase text,
              units_done bigint, units_total bigint, unit text,
              started timestamptz, phase_started timestamptz)
AS 'MODULE_PATHNAME', 'gpurec_progress'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec.progress() IS
'Every running gpurec call the caller may see (as pg_stat_activity: its own role''s, all to members of pg_read_all_stats), one row each: its backend, its function, its phase (starting, reading, indexing, computing, writing rows), the units of the phase done and in all (NULL where not known ahead), their unit, and when the call and its phase began.';

-- ------------------------------------------------------------ marketplace --

CREATE FUNCTION gpurec.cheapest_offers(offers_query text, k integer DEFAULT 1)
RETURNS TABLE(product_id bigint, offer_rank integer, store_id bigint, price numeric,
              n_offers bigint)
AS 'MODULE_PATHNAME', 'gpurec_cheapest_offers'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec.cheapest_offers(text, integer) IS
'For each product of offers_query (product_id, store_id, price), its k cheapest offers.';

-- The typed forms: every argument, then id_type, a value (a NULL) of the type
-- the ids come back in: bigint, integer, smallint, uuid, text or varchar, as
-- the inner queries give them (README, "Ids of any type").  Not STRICT, for
-- id_type is NULL: a NULL in another argument gives no rows, as STRICT would.
CREATE FUNCTION gpurec.cheapest_offers(offers_query text, k integer, id_type anyelement)
RETURNS TABLE(product_id anyelement, offer_rank integer, store_id anyelement, price numeric,
              n_offers bigint)
AS 'MODULE_PATHNAME', 'gpurec_cheapest_offers'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION gpurec.cheapest_offers(text, integer, anyelement) IS
'cheapest_offers with product and store ids of any type, returned as id_type (NULL::uuid, NULL::text).';

-- cheapest_offers over shards (extension gpurec_shards): each shard's answer
-- as one bytea, and the coordinator's merge of the shards' answers into the
-- rows one server holding every offer gives.  Internal: gpurec_shards calls
-- them; the bytes are gpurec's own, of this version.
CREATE FUNCTION gpurec_internal._cheapest_offers_part(offers_query text, k integer)
RETURNS bytea
AS 'MODULE_PATHNAME', 'gpurec_cheapest_offers_part'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec_internal._cheapest_offers_part(text, integer) IS
'Internal (gpurec_shards): cheapest_offers(offers_query, k) as one value for _merge_cheapest_offers.';

CREATE FUNCTION gpurec_internal._merge_cheapest_offers(parts bytea[], k integer)
RETURNS TABLE(product_id bigint, offer_rank integer, store_id bigint, price numeric,
              n_offers bigint)
AS 'MODULE_PATHNAME', 'gpurec_merge_cheapest_offers'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec_internal._merge_cheapest_offers(bytea[], integer) IS
'Internal (gpurec_shards): the k cheapest offers per product among the parts of _cheapest_offers_part.';

CREATE FUNCTION gpurec.improve_carts(carts_query text, offers_query text)
RETURNS TABLE(cart_id bigint, product_id bigint, quantity bigint, current_store_id bigint,
              current_price numeric, best_store_id bigint, best_price numeric, saving numeric)
AS 'MODULE_PATHNAME', 'gpurec_improve_carts'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec.improve_carts(text, text) IS
'Smart cart: the cart lines of carts_query (cart_id, product_id, store_id[, quantity]) that a cheaper store, or any store, can serve better.';

CREATE FUNCTION gpurec.improve_carts(carts_query text, offers_query text, id_type anyelement)
RETURNS TABLE(cart_id anyelement, product_id anyelement, quantity bigint, current_store_id anyelement,
              current_price numeric, best_store_id anyelement, best_price numeric, saving numeric)
AS 'MODULE_PATHNAME', 'gpurec_improve_carts'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION gpurec.improve_carts(text, text, anyelement) IS
'improve_carts with cart, product and store ids of any type, returned as id_type (NULL::uuid, NULL::text).';

CREATE FUNCTION gpurec.optimize_carts(carts_query text, offers_query text, shipping_query text)
RETURNS TABLE(cart_id bigint, product_id bigint, quantity bigint, store_id bigint, price numeric,
              total numeric, shipping numeric, stores_used integer, complete boolean,
              current_total numeric, saving numeric)
AS 'MODULE_PATHNAME', 'gpurec_optimize_carts'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec.optimize_carts(text, text, text) IS
'Smart cart with shipping: per cart of carts_query (cart_id, product_id[, quantity][, store_id]) the exact cheapest assignment of its lines to stores of offers_query (product_id, store_id, price), items plus the shipping of every store used (shipping_query: store_id, fee[, free_from]); a row per line.';

CREATE FUNCTION gpurec.optimize_carts(carts_query text, offers_query text, shipping_query text, id_type anyelement)
RETURNS TABLE(cart_id anyelement, product_id anyelement, quantity bigint, store_id anyelement, price numeric,
              total numeric, shipping numeric, stores_used integer, complete boolean,
              current_total numeric, saving numeric)
AS 'MODULE_PATHNAME', 'gpurec_optimize_carts'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION gpurec.optimize_carts(text, text, text, anyelement) IS
'optimize_carts with cart, product and store ids of any type, returned as id_type (NULL::uuid, NULL::text).';

-- ----------------------------------------------------------- ROC fitness --

CREATE FUNCTION gpurec.roc_fitness(scores_query text)
RETURNS TABLE(individual_id bigint, auc float8, fitness float8, n_positive bigint,
              n_negative bigint, lowest_positive_rank bigint, highest_positive_rank bigint)
AS 'MODULE_PATHNAME', 'gpurec_roc_fitness_rows'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec.roc_fitness(text) IS
'ROC fitness (AUC - 0.5) of every individual of scores_query (individual_id, label, score: one row per example).';

CREATE FUNCTION gpurec.roc_fitness(population_query text, labels anycompatiblearray)
RETURNS TABLE(individual_id bigint, auc float8, fitness float8, n_positive bigint,
              n_negative bigint, lowest_positive_rank bigint, highest_positive_rank bigint)
AS 'MODULE_PATHNAME', 'gpurec_roc_fitness_arrays'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec.roc_fitness(text, anycompatiblearray) IS
'ROC fitness of every individual of population_query (individual_id, scores real[] or double precision[]) against labels (boolean[], or integers 0 and 1).';

-- The typed form of both: labels NULL reads a scores query (a form of its
-- own, roc_fitness(text, anyelement), would make roc_fitness(q, '{t,f}')
-- ambiguous).
CREATE FUNCTION gpurec.roc_fitness(query text, labels anycompatiblearray, id_type anyelement)
RETURNS TABLE(individual_id anyelement, auc float8, fitness float8, n_positive bigint,
              n_negative bigint, lowest_positive_rank bigint, highest_positive_rank bigint)
AS 'MODULE_PATHNAME', 'gpurec_roc_fitness_typed'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION gpurec.roc_fitness(text, anycompatiblearray, anyelement) IS
'roc_fitness with individual ids of any type, returned as id_type (NULL::uuid, NULL::text): labels NULL reads query as a scores query (individual_id, label, score), else as a population query (individual_id, scores).';

CREATE FUNCTION gpurec.roc_auc(scores float8[], labels anycompatiblearray)
RETURNS float8
AS 'MODULE_PATHNAME', 'gpurec_roc_auc'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION gpurec.roc_auc(float8[], anycompatiblearray) IS
'AUC of one individual''s scores against labels (boolean[], or integers 0 and 1), ties counting half; NULL without a positive or a negative.';

-- ------------------------------------------------------------- geospatial --
-- Users are sets of points (points_query: user_id, x, y).  Similarity of user
-- B to user A: 1 / the mean, over A's points, of the distance to B's nearest
-- point, each distance floored at epsilon.  metric 'euclidean' on (x, y), or
-- 'haversine': x = longitude, y = latitude in degrees, metres on a sphere of
-- radius 6371008.8 m.  epsilon NULL (the default) is the metric's own: 1e-9
-- under euclidean, 10 metres under haversine.  A NULL in any other argument
-- but max_distance returns no rows, as STRICT would.

CREATE FUNCTION gpurec.user_similarity(points_query text, main_user bigint,
                                metric text DEFAULT 'euclidean', epsilon float8 DEFAULT NULL)
RETURNS TABLE(user_id bigint, similarity float8, mean_min_distance float8)
AS 'MODULE_PATHNAME', 'gpurec_user_similarity'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION gpurec.user_similarity(text, bigint, text, float8) IS
'The similarity of every other user of points_query (user_id, x, y) to main_user, and the raw mean of main_user''s nearest distances to it.';

CREATE FUNCTION gpurec.user_similarity(points_query text, main_user anyelement, metric text, epsilon float8,
                                id_type anyelement)
RETURNS TABLE(user_id anyelement, similarity float8, mean_min_distance float8)
AS 'MODULE_PATHNAME', 'gpurec_user_similarity'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION gpurec.user_similarity(text, anyelement, text, float8, anyelement) IS
'user_similarity with user ids of any type: main_user and the user_id returned are of id_type (NULL::uuid, NULL::text).';

CREATE FUNCTION gpurec.similar_users(points_query text, k integer DEFAULT 10,
                              metric text DEFAULT 'euclidean', epsilon float8 DEFAULT NULL)
RETURNS TABLE(user_id bigint, rank integer, other_user_id bigint, similarity float8)
AS 'MODULE_PATHNAME', 'gpurec_similar_users'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION gpurec.similar_users(text, integer, text, float8) IS
'For every user of points_query (user_id, x, y), the k other users most similar to it; equal similarities rank the lower other_user_id first.';

CREATE FUNCTION gpurec.similar_users(points_query text, k integer, metric text, epsilon float8, id_type anyelement)
RETURNS TABLE(user_id anyelement, rank integer, other_user_id anyelement, similarity float8)
AS 'MODULE_PATHNAME', 'gpurec_similar_users'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION gpurec.similar_users(text, integer, text, float8, anyelement) IS
'similar_users with user ids of any type, returned as id_type (NULL::uuid, NULL::text); equal similarities rank the lower other_user_id first, in the ids'' order (uuid bytewise, text bytewise).';

CREATE FUNCTION gpurec.predict_strength(points_query text, main_user bigint, candidates_query text,
                                 exponent float8 DEFAULT 2, max_distance float8 DEFAULT NULL,
                                 min_similarity float8 DEFAULT 0,
                                 metric text DEFAULT 'euclidean', epsilon float8 DEFAULT NULL)
RETURNS TABLE(candidate_id bigint, strength float8)
AS 'MODULE_PATHNAME', 'gpurec_predict_strength'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION gpurec.predict_strength(text, bigint, text, float8, float8, float8, text, float8) IS
'For each row of candidates_query (candidate_id, x, y), in input order: the sum over the other users B at least min_similarity similar to main_user of similarity x the sum over B''s points within max_distance (NULL: all) of max(distance, epsilon)^-exponent.';

CREATE FUNCTION gpurec.predict_strength(points_query text, main_user anyelement, candidates_query text,
                                 exponent float8, max_distance float8, min_similarity float8,
                                 metric text, epsilon float8, id_type anycompatible)
RETURNS TABLE(candidate_id anycompatible, strength float8)
AS 'MODULE_PATHNAME', 'gpurec_predict_strength'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION gpurec.predict_strength(text, anyelement, text, float8, float8, float8, text, float8, anycompatible) IS
'predict_strength with ids of any type: main_user of the user_id type, candidate_id returned as id_type (NULL::uuid, NULL::text).';

CREATE FUNCTION gpurec.fit_exponent(points_query text, holdout_query text, candidates_query text,
                             exponents float8[] DEFAULT '{1,1.5,2,2.5,3}',
                             max_distance float8 DEFAULT NULL, min_similarity float8 DEFAULT 0,
                             metric text DEFAULT 'euclidean', epsilon float8 DEFAULT NULL,
                             tolerance float8 DEFAULT 0.001)
RETURNS TABLE(exponent float8, mean_auc float8, users bigint,
              fitted_exponent float8, fitted_mean_auc float8)
AS 'MODULE_PATHNAME', 'gpurec_fit_exponent'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION gpurec.fit_exponent(text, text, text, float8[], float8, float8, text, float8, float8) IS
'For each exponent: the mean, over the users of holdout_query (user_id, candidate_id) with a visited and an unvisited candidate, of the AUC of predict_strength''s ranking of all candidates.  On every row, the same fitted_exponent and its fitted_mean_auc: the best mean AUC found by golden-section search between the grid''s best exponent''s neighbours, to tolerance (NULL: no search).';

-- ---------------------------------------------------------- parallel read --

-- gpurec's own, for reading inner queries with PostgreSQL's parallel workers
-- (src/read/aggregate.cpp): each worker builds engine columns from its share
-- of the rows and sends them as its partial state.  Not for direct use: it
-- refuses to run outside a gpurec function.

-- COST: converting a row into columns is real work, and a row may carry a
-- whole array; at the default cost of 1 the planner keeps a few thousand rows
-- of big arrays (a table it may split, as its parallel_workers allows) in
-- one backend, as the parallel plan's start-up seems to cost more.
CREATE FUNCTION gpurec_internal._read_columns_transition(internal, text, VARIADIC "any")
RETURNS internal
AS 'MODULE_PATHNAME', 'gpurec_read_columns_transition'
LANGUAGE C PARALLEL SAFE COST 1000;

CREATE FUNCTION gpurec_internal._read_columns_serialize(internal)
RETURNS bytea
AS 'MODULE_PATHNAME', 'gpurec_read_columns_serialize'
LANGUAGE C STRICT PARALLEL SAFE;

CREATE FUNCTION gpurec_internal._read_columns_deserialize(bytea, internal)
RETURNS internal
AS 'MODULE_PATHNAME', 'gpurec_read_columns_deserialize'
LANGUAGE C STRICT PARALLEL SAFE;

CREATE FUNCTION gpurec_internal._read_columns_combine(internal, internal)
RETURNS internal
AS 'MODULE_PATHNAME', 'gpurec_read_columns_combine'
LANGUAGE C PARALLEL SAFE;

CREATE FUNCTION gpurec_internal._read_columns_final(internal)
RETURNS bigint
AS 'MODULE_PATHNAME', 'gpurec_read_columns_final'
LANGUAGE C PARALLEL SAFE;

CREATE AGGREGATE gpurec_internal._read_columns(text, VARIADIC "any") (
    SFUNC = gpurec_internal._read_columns_transition,
    STYPE = internal,
    SERIALFUNC = gpurec_internal._read_columns_serialize,
    DESERIALFUNC = gpurec_internal._read_columns_deserialize,
    COMBINEFUNC = gpurec_internal._read_columns_combine,
    FINALFUNC = gpurec_internal._read_columns_final,
    PARALLEL = SAFE
);

COMMENT ON AGGREGATE gpurec_internal._read_columns(text, VARIADIC "any") IS
'Internal (the read layer): engine columns from an inner query''s rows, read by PostgreSQL''s parallel workers; refuses to run outside a gpurec function.';

COMMENT ON FUNCTION gpurec_internal._read_columns_transition(internal, text, VARIADIC "any") IS
'Internal: _read_columns'' transition, a row into this process''s columns.';
COMMENT ON FUNCTION gpurec_internal._read_columns_serialize(internal) IS
'Internal: _read_columns'' serialization, a parallel worker''s columns as bytes for the leader.';
COMMENT ON FUNCTION gpurec_internal._read_columns_deserialize(bytea, internal) IS
'Internal: _read_columns'' deserialization, a worker''s bytes back into columns.';
COMMENT ON FUNCTION gpurec_internal._read_columns_combine(internal, internal) IS
'Internal: _read_columns'' combine, two processes'' columns joined.';
COMMENT ON FUNCTION gpurec_internal._read_columns_final(internal) IS
'Internal: _read_columns'' final, the columns handed to the calling gpurec function (the value is a row count).';

-- The aggregate's support functions: PostgreSQL checks EXECUTE on them for
-- the aggregate's owner, not for the role that calls the aggregate.
REVOKE EXECUTE ON FUNCTION gpurec_internal._read_columns_transition(internal, text, VARIADIC "any"),
                           gpurec_internal._read_columns_serialize(internal),
                           gpurec_internal._read_columns_deserialize(bytea, internal),
                           gpurec_internal._read_columns_combine(internal, internal),
                           gpurec_internal._read_columns_final(internal)
    FROM PUBLIC;

-- ------------------------------------------------- gpurec_shards' shard side --

-- What gpurec_shards asks of a shard beyond gpurec's own functions, in the
-- schema of internal objects: users call none of these.
CREATE FUNCTION gpurec_internal.raise_error(sqlstate text, message text, detail text, hint text)
RETURNS void
AS 'MODULE_PATHNAME', 'gpurec_raise_error'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION gpurec_internal.raise_error(text, text, text, text) IS
'Internal (gpurec_shards): raises ERROR sqlstate with message, and detail and hint where not NULL.';

-- The carts functions over partitions, in gpurec's binary form (one bytea
-- a part; src/cart_shards.hpp): every offer of a query as one part (an
-- OffersPart), a shipping query read as optimize_carts reads it, and
-- improve_carts' and optimize_carts' rows of a partition's carts against
-- the offers of the partitions' parts (offers_parts, in partition order)
-- and that shipping, prices in their own type with every digit and bit;
-- the coordinator's merges of the partitions' rows (in partition order)
-- into one server's rows in its order.
CREATE FUNCTION gpurec_internal._offers_part(offers_query text, products bigint[], pair_products bigint[],
                                             pair_stores bigint[])
RETURNS bytea
AS 'MODULE_PATHNAME', 'gpurec_offers_part'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION gpurec_internal._offers_part(text, bigint[], bigint[], bigint[]) IS
'Internal (gpurec_shards): of offers_query (product_id, store_id, price), read as improve_carts (pairs given) or optimize_carts (pair_products NULL) reads it, each of products'' cheapest offer and the cheapest at each pair''s store (at every store where pair_products is NULL), as one value for _improve_carts_part and _optimize_carts_part.';

CREATE FUNCTION gpurec_internal._cart_products(carts_query text)
RETURNS TABLE(cart_id bigint, product_id bigint)
AS 'MODULE_PATHNAME', 'gpurec_cart_products'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec_internal._cart_products(text) IS
'Internal (gpurec_shards): the distinct (cart_id, product_id) of the lines optimize_carts reads from carts_query.';

CREATE FUNCTION gpurec_internal._shipping_part(shipping_query text)
RETURNS bytea
AS 'MODULE_PATHNAME', 'gpurec_shipping_part'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec_internal._shipping_part(text) IS
'Internal (gpurec_shards): shipping_query (store_id, fee, free_from) as optimize_carts reads it, as one value for _optimize_carts_part.';

CREATE FUNCTION gpurec_internal._cart_pairs(carts_query text)
RETURNS TABLE(product_id bigint, store_id bigint)
AS 'MODULE_PATHNAME', 'gpurec_cart_pairs'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec_internal._cart_pairs(text) IS
'Internal (gpurec_shards): the distinct (product_id, store_id) of the lines improve_carts reads from carts_query.';

CREATE FUNCTION gpurec_internal._improve_carts_part(carts_query text, offers_parts bytea[])
RETURNS bytea
AS 'MODULE_PATHNAME', 'gpurec_improve_carts_part'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec_internal._improve_carts_part(text, bytea[]) IS
'Internal (gpurec_shards): improve_carts of carts_query against the offers of the partitions'' _offers_part, as one value for _merge_improve_carts.';

CREATE FUNCTION gpurec_internal._optimize_carts_part(carts_query text, offers_parts bytea[], shipping_part bytea)
RETURNS bytea
AS 'MODULE_PATHNAME', 'gpurec_optimize_carts_part'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec_internal._optimize_carts_part(text, bytea[], bytea) IS
'Internal (gpurec_shards): optimize_carts of carts_query against the offers of the partitions'' _offers_part and the shipping of _shipping_part, as one value for _merge_optimize_carts.';

CREATE FUNCTION gpurec_internal._merge_improve_carts(parts bytea[])
RETURNS TABLE(cart_id bigint, product_id bigint, quantity bigint, current_store_id bigint,
              current_price numeric, best_store_id bigint, best_price numeric, saving numeric)
AS 'MODULE_PATHNAME', 'gpurec_merge_improve_carts'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec_internal._merge_improve_carts(bytea[]) IS
'Internal (gpurec_shards): improve_carts'' rows of the partitions'' _improve_carts_part, in one server''s order.';

CREATE FUNCTION gpurec_internal._merge_optimize_carts(parts bytea[])
RETURNS TABLE(cart_id bigint, product_id bigint, quantity bigint, store_id bigint, price numeric,
              total numeric, shipping numeric, stores_used integer, complete boolean,
              current_total numeric, saving numeric)
AS 'MODULE_PATHNAME', 'gpurec_merge_optimize_carts'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec_internal._merge_optimize_carts(bytea[]) IS
'Internal (gpurec_shards): optimize_carts'' rows of the partitions'' _optimize_carts_part, in one server''s order.';

-- The distinct users of a points query as the geospatial functions read it:
-- the coordinator refuses a user that two shards hold.
CREATE FUNCTION gpurec_internal._points_users(points_query text, metric text)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'gpurec_points_users'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec_internal._points_users(text, text) IS
'Internal (gpurec_shards): the distinct users of points_query, as the geospatial functions read it, ascending.';

-- The geospatial family over partitions, in gpurec's binary form (one
-- bytea a part; src/geo_shards.hpp): a partition's points of some users
-- (every user where users is NULL) for the coordinator, and its parts of
-- user_similarity, similar_users (the lists of part `part` of `parts` of
-- the users) and predict_strength, each computed with the partition's own
-- points and remote_points' of the users it holds none of (the points the
-- coordinator gathered, NULL for none; user_similarity and predict_strength
-- take the main user's alone); the coordinator's merges of the
-- partitions' parts (in partition order), a user that two hold being
-- ERROR 22023 naming cluster's partitions.
CREATE FUNCTION gpurec_internal._geo_points_part(points_query text, users bigint[], metric text, epsilon float8)
RETURNS bytea
AS 'MODULE_PATHNAME', 'gpurec_geo_points_part'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION gpurec_internal._geo_points_part(text, bigint[], text, float8) IS
'Internal (gpurec_shards): the points of the given users (all where NULL) as the geospatial functions read them, for _merge_geo_points.';

CREATE FUNCTION gpurec_internal._merge_geo_points(cluster text, parts bytea[])
RETURNS bytea
AS 'MODULE_PATHNAME', 'gpurec_merge_geo_points'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec_internal._merge_geo_points(text, bytea[]) IS
'Internal (gpurec_shards): the partitions'' _geo_points_part as one (NULL where no point), each user on one partition.';

CREATE FUNCTION gpurec_internal._geo_points_users(points bytea)
RETURNS TABLE(user_id bigint, n_points bigint)
AS 'MODULE_PATHNAME', 'gpurec_geo_points_users'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec_internal._geo_points_users(bytea) IS
'Internal (gpurec_shards): the distinct users of a _geo_points_part, in id order, with their number of points.';

CREATE FUNCTION gpurec_internal._user_similarity_part(points_query text, main_user bigint, metric text,
                                                      epsilon float8, remote_points bytea)
RETURNS bytea
AS 'MODULE_PATHNAME', 'gpurec_user_similarity_part'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION gpurec_internal._user_similarity_part(text, bigint, text, float8, bytea) IS
'Internal (gpurec_shards): a partition''s user_similarity, the main user''s points from remote_points where it holds none, for _merge_user_similarity.';

CREATE FUNCTION gpurec_internal._similar_users_part(points_query text, k integer, metric text, epsilon float8,
                                                    part integer, parts integer, remote_points bytea)
RETURNS bytea
AS 'MODULE_PATHNAME', 'gpurec_similar_users_part'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION gpurec_internal._similar_users_part(text, integer, text, float8, integer, integer, bytea) IS
'Internal (gpurec_shards): similar_users'' lists of part part of parts of the users, against the partition''s and remote_points'' points, for _merge_similar_users.';

CREATE FUNCTION gpurec_internal._candidates_part(candidates_query text, metric text)
RETURNS bytea
AS 'MODULE_PATHNAME', 'gpurec_candidates_part'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec_internal._candidates_part(text, text) IS
'Internal (gpurec_shards): candidates_query (candidate_id, x, y) read as predict_strength reads it, its points checked, in its order as one value for _predict_strength_part.';

CREATE FUNCTION gpurec_internal._candidate_ids(part bytea)
RETURNS TABLE(n bigint, candidate_id bigint)
AS 'MODULE_PATHNAME', 'gpurec_candidate_ids'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec_internal._candidate_ids(bytea) IS
'Internal (gpurec_shards): the candidate ids of a _candidates_part, each with its place n (from 1).';

CREATE FUNCTION gpurec_internal._holdout_rows(holdout_query text)
RETURNS TABLE(user_id bigint, candidate_id bigint)
AS 'MODULE_PATHNAME', 'gpurec_holdout_rows'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec_internal._holdout_rows(text) IS
'Internal (gpurec_shards): holdout_query (user_id, candidate_id) read as fit_exponent reads it.';

CREATE FUNCTION gpurec_internal._predict_strength_part(points_query text, main_user bigint, candidates bytea,
                                                       exponent float8, max_distance float8,
                                                       min_similarity float8, metric text, epsilon float8,
                                                       remote_points bytea)
RETURNS bytea
AS 'MODULE_PATHNAME', 'gpurec_predict_strength_part'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION gpurec_internal._predict_strength_part(text, bigint, bytea, float8, float8, float8, text, float8, bytea) IS
'Internal (gpurec_shards): the strengths a partition''s users give each candidate of candidates (a _candidates_part), in their order, for _merge_strengths.';

CREATE FUNCTION gpurec_internal._merge_user_similarity(cluster text, parts bytea[])
RETURNS TABLE(user_id bigint, similarity float8, mean_min_distance float8)
AS 'MODULE_PATHNAME', 'gpurec_merge_user_similarity'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec_internal._merge_user_similarity(text, bytea[]) IS
'Internal (gpurec_shards): user_similarity''s rows of the partitions'' parts, in user_id order.';

CREATE FUNCTION gpurec_internal._merge_similar_users(cluster text, points bytea, parts bytea[])
RETURNS TABLE(user_id bigint, rank integer, other_user_id bigint, similarity float8)
AS 'MODULE_PATHNAME', 'gpurec_merge_similar_users'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION gpurec_internal._merge_similar_users(text, bytea, bytea[]) IS
'Internal (gpurec_shards): similar_users'' lists of the partitions'' parts, every user of points (the merged _geo_points_part, NULL for none) ranked once.';

CREATE FUNCTION gpurec_internal._merge_strengths(parts bytea[])
RETURNS TABLE(n bigint, strength float8)
AS 'MODULE_PATHNAME', 'gpurec_merge_strengths'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec_internal._merge_strengths(bytea[]) IS
'Internal (gpurec_shards): each candidate''s (n: its place) strength, the partitions'' _predict_strength_part added in partition order.';

-- roc_fitness over partitions: each partition's rows as one bytea (ids and
-- exact counts), and the coordinator's merge of the partitions' parts, in
-- partition order, into one server's rows (roc_fitness' or roc_auc's); an
-- individual that two parts hold is ERROR 22023 naming cluster's
-- partitions.
CREATE FUNCTION gpurec_internal._roc_fitness_part(query text, labels anycompatiblearray)
RETURNS bytea
AS 'MODULE_PATHNAME', 'gpurec_roc_fitness_part'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION gpurec_internal._roc_fitness_part(text, anycompatiblearray) IS
'Internal (gpurec_shards): roc_fitness(query) (labels NULL) or roc_fitness(query, labels) as one value for _merge_roc_fitness and _merge_roc_auc.';

-- labels as gpurec_shards sends them to every partition: two bits a
-- label, where PL/Proxy would send a boolean[] as its text, two bytes a
-- label that every partition parses
CREATE FUNCTION gpurec_internal._labels_pack(labels anycompatiblearray)
RETURNS bytea
AS 'MODULE_PATHNAME', 'gpurec_labels_pack'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION gpurec_internal._labels_pack(anycompatiblearray) IS
'Internal (gpurec_shards): labels (NULLs kept) as a bytea that _labels_unpack turns back into them.';

CREATE FUNCTION gpurec_internal._labels_unpack(packed bytea)
RETURNS boolean[]
AS 'MODULE_PATHNAME', 'gpurec_labels_unpack'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION gpurec_internal._labels_unpack(bytea) IS
'Internal (gpurec_shards): the labels _labels_pack was given, as a boolean[] with lower bound 1.';

CREATE FUNCTION gpurec_internal._merge_roc_fitness(cluster text, parts bytea[])
RETURNS TABLE(individual_id bigint, auc float8, fitness float8, n_positive bigint,
              n_negative bigint, lowest_positive_rank bigint, highest_positive_rank bigint)
AS 'MODULE_PATHNAME', 'gpurec_merge_roc_fitness'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec_internal._merge_roc_fitness(text, bytea[]) IS
'Internal (gpurec_shards): roc_fitness'' rows of every individual of the partitions'' parts (_roc_fitness_part, in partition order).';

CREATE FUNCTION gpurec_internal._merge_roc_auc(cluster text, parts bytea[])
RETURNS TABLE(individual_id bigint, auc float8)
AS 'MODULE_PATHNAME', 'gpurec_merge_roc_auc'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec_internal._merge_roc_auc(text, bytea[]) IS
'Internal (gpurec_shards): each individual''s AUC from the partitions'' parts (_roc_fitness_part of a population query, in partition order).';

-- gpurec_shards' refusal of a key whose rows two partitions hold: the
-- merges' own error (22023), for its checks in SQL.
CREATE FUNCTION gpurec_internal.refuse_split(what text, key bigint, cluster text, part integer, other_part integer)
RETURNS boolean
AS 'MODULE_PATHNAME', 'gpurec_refuse_split'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION gpurec_internal.refuse_split(text, bigint, text, integer, integer) IS
'Internal (gpurec_shards): raises ERROR 22023, the what (user, cart, individual) key is on partitions part and other_part of cluster.';

-- fit_exponent's continuous search for a coordinator that evaluates the
-- mean AUCs over its partitions: given the grid's means and every round's
-- means so far, the next round's exponents (a row each) or the fit (one
-- row, probe NULL), as fit_exponent's own search goes.
CREATE FUNCTION gpurec_internal._exponent_search(exponents float8[], grid_means float8[], tolerance float8,
                                                 probed_means float8[])
RETURNS TABLE(probe float8, fitted_exponent float8, fitted_mean_auc float8)
AS 'MODULE_PATHNAME', 'gpurec_exponent_search'
LANGUAGE C IMMUTABLE STRICT;

COMMENT ON FUNCTION gpurec_internal._exponent_search(float8[], float8[], float8, float8[]) IS
'Internal (gpurec_shards): fit_exponent''s search replayed from the means so far: the next exponents to evaluate, or the fitted exponent and its mean AUC.';
