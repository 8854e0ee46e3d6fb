-- gpurec_shards 0.1: gpurec's functions over data sharded across servers.
-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION gpurec_shards" to load this file. \quit

-- A shard is a foreign server of dblink_fdw (with a user mapping) whose
-- database has gpurec installed and holds a part of the data under the same
-- names as every other shard.  Each function here takes the shards as an
-- array of server names, sends every shard its part of the work at once
-- (dblink's asynchronous queries), and merges what comes back so that the
-- answer is the one a single server holding all rows gives.  The inner
-- queries that read sharded data (offers, carts, points, scores, population)
-- run on every shard; candidates_query and holdout_query, small tables every
-- shard needs whole, run on the coordinator.
--
-- dblink is the only engine used; it stays behind the four functions of the
-- first part (connect, send, gather, abandon), so that a change of engine
-- (postgres_fdw, PL/Proxy) would touch them alone.

GRANT USAGE ON SCHEMA @extschema@ TO PUBLIC;

-- ------------------------------------------------------ reaching the shards --

-- RAISE with a SQLSTATE, message, detail and hint any of which may be NULL
-- (RAISE ... USING refuses a NULL option).
CREATE FUNCTION _raise(sqlstate text, message text, detail text DEFAULT NULL, hint text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF detail IS NOT NULL AND hint IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = sqlstate, MESSAGE = message, DETAIL = detail, HINT = hint;
    ELSIF detail IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = sqlstate, MESSAGE = message, DETAIL = detail;
    ELSIF hint IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = sqlstate, MESSAGE = message, HINT = hint;
    ELSE
        RAISE EXCEPTION USING ERRCODE = sqlstate, MESSAGE = message;
    END IF;
END $$;

-- The dblink connection of each shard, opened on first use and kept for the
-- session (a call then costs no connection set-up).  A kept connection is
-- checked with one round trip and opened again when it has died (its server
-- restarted, say).  Connections are per role, so that SET ROLE never reuses
-- another role's user mapping.
CREATE FUNCTION _connect(shards text[])
RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    shard text;
    conn text;
    conns text[] := '{}';
    st text;
    msg text;
    det text;
BEGIN
    IF coalesce(cardinality(shards), 0) = 0 THEN
        PERFORM gpurec_shards._raise('22023', 'no shards given', NULL,
            'Name one foreign server per shard, as in ARRAY[''shard_1'', ''shard_2''].');
    END IF;
    FOREACH shard IN ARRAY shards LOOP
        IF shard IS NULL THEN
            PERFORM gpurec_shards._raise('22004', 'a shard name is NULL');
        END IF;
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_foreign_server WHERE srvname = shard) THEN
            PERFORM gpurec_shards._raise('42704', format('shard "%s" is not a foreign server', shard), NULL,
                'Declare each shard with CREATE SERVER ... FOREIGN DATA WRAPPER dblink_fdw and CREATE USER MAPPING.');
        END IF;
        conn := format('gpurec_shards:%s:%s', current_user, shard);
        IF conn = ANY (conns) THEN
            PERFORM gpurec_shards._raise('22023', format('shard "%s" is named twice', shard));
        END IF;
        IF conn = ANY (coalesce(dblink_get_connections(), '{}')) THEN
            BEGIN
                IF dblink_is_busy(conn) = 1 THEN
                    PERFORM dblink_cancel_query(conn);
                    RAISE EXCEPTION 'busy';
                END IF;
                PERFORM FROM dblink(conn, 'SELECT 1') AS t(one integer);
            EXCEPTION WHEN OTHERS THEN
                PERFORM dblink_disconnect(conn);
            END;
        END IF;
        IF NOT conn = ANY (coalesce(dblink_get_connections(), '{}')) THEN
            BEGIN
                PERFORM dblink_connect(conn, shard);
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
                PERFORM gpurec_shards._raise(st, format('shard "%s" is unreachable: %s', shard, msg),
                                             nullif(det, ''));
            END;
        END IF;
        conns := conns || conn;
    END LOOP;
    RETURN conns;
END $$;

-- Cancels what the shards are still running for this call and closes their
-- connections (the next call opens new ones): after an error or a cancel no
-- shard keeps working and no connection is left half read.
CREATE FUNCTION _abandon(conns text[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    conn text;
BEGIN
    FOREACH conn IN ARRAY coalesce(conns, '{}') LOOP
        IF conn = ANY (coalesce(dblink_get_connections(), '{}')) THEN
            BEGIN
                IF dblink_is_busy(conn) = 1 THEN
                    PERFORM dblink_cancel_query(conn);
                END IF;
                PERFORM dblink_disconnect(conn);
            EXCEPTION WHEN OTHERS THEN
                NULL;  -- a connection already broken has nothing left to cancel
            END;
        END IF;
    END LOOP;
END $$;

-- Runs queries[i] on shards[i] (one query: the same on every shard), all at
-- once, and returns every shard's rows prefixed by the shard's position, in
-- the shard's order.  `columns` is the column definition list of the rows
-- (names and types, the types without commas), which the caller's own
-- column definition list repeats after "shard integer".  A shard's error is
-- raised with its own SQLSTATE, detail and hint, the message naming the
-- shard; cancel and statement_timeout cancel every shard's query.
--
-- A shard's rows travel as ONE row of arrays, an array per column: dblink
-- reads a result row by row, as text, and builds a tuple of each, which
-- costs the coordinator far more than the shards' whole answer when it is
-- tens of thousands of rows.  The arrays' elements keep everything of the
-- values (a numeric's scale, a float8's every bit), and the coordinator
-- unnests them in lockstep, in their order.  The shard's answer thus
-- travels in one message, and a message is at most 1 GB.  A query that
-- returns its answer as one row already (gpurec_internal._cheapest_offers_part's
-- bytea) is sent as it is, with as_arrays false: an array around one value
-- would only be quoted on the shard and parsed again here.
CREATE FUNCTION _gather(shards text[], queries text[], columns text, as_arrays boolean DEFAULT true)
RETURNS SETOF record LANGUAGE plpgsql AS $$
DECLARE
    n integer := cardinality(shards);
    conns text[];
    i integer;
    busy boolean;
    rounds integer := 0;
    st text;
    msg text;
    det text;
    hnt text;
    names text;          -- "product_id, price"
    aggregates text;     -- "array_agg(q.product_id), array_agg(q.price)"
    array_columns text;  -- "product_id bigint[], price numeric[]"
    unnested text;       -- "unnest(t.product_id), unnest(t.price)"
BEGIN
    IF cardinality(queries) = 1 AND n > 1 THEN
        queries := array_fill(queries[1], ARRAY[n]);
    END IF;
    IF as_arrays THEN
        SELECT string_agg(format('%I', c.name), ', ' ORDER BY c.n),
               string_agg(format('array_agg(q.%I)', c.name), ', ' ORDER BY c.n),
               string_agg(format('%I %s[]', c.name, c.type), ', ' ORDER BY c.n),
               string_agg(format('unnest(t.%I)', c.name), ', ' ORDER BY c.n)
          INTO names, aggregates, array_columns, unnested
          FROM (SELECT d.n, split_part(d.col, ' ', 1) AS name, substr(d.col, strpos(d.col, ' ') + 1) AS type
                FROM unnest(regexp_split_to_array(btrim(columns), '\s*,\s*')) WITH ORDINALITY AS d(col, n)) c;
    END IF;
    conns := gpurec_shards._connect(shards);
    BEGIN
        FOR i IN 1 .. n LOOP
            -- as arrays: a plain aggregate over the query takes its rows in
            -- their order, and every column's array from the same pass
            IF dblink_send_query(conns[i], CASE WHEN as_arrays
                                           THEN format('SELECT %s FROM (%s) AS q(%s)', aggregates, queries[i], names)
                                           ELSE queries[i] END) <> 1 THEN
                PERFORM gpurec_shards._raise('08006', format('could not send the query to shard "%s"', shards[i]),
                                             nullif(dblink_error_message(conns[i]), 'OK'));
            END IF;
        END LOOP;
        -- wait in gpurec_internal._pause, which answers cancel and statement_timeout:
        -- dblink_get_result would wait in libpq, deaf to both (and dblink
        -- does not show the connections' sockets, on which a wait could
        -- sleep until an answer comes).  The first rounds are short, so
        -- that a shard's answer of a millisecond or two is not kept
        -- waiting for a whole millisecond round; then rounds of a
        -- millisecond, as pg_sleep's, cost the coordinator nothing that
        -- shows.  Each dblink_is_busy also reads what has arrived, so every
        -- connection is asked each round: a shard whose results are not
        -- read stalls once its socket is full.
        LOOP
            busy := false;
            FOR i IN 1 .. n LOOP
                busy := (dblink_is_busy(conns[i]) = 1) OR busy;
            END LOOP;
            EXIT WHEN NOT busy;
            rounds := rounds + 1;
            PERFORM gpurec_internal._pause(CASE WHEN rounds <= 40 THEN 100 ELSE 1000 END);
        END LOOP;
        FOR i IN 1 .. n LOOP
            BEGIN
                IF as_arrays THEN
                    -- unnest in the select list: the arrays zip row by row,
                    -- in order, without being materialized first
                    RETURN QUERY EXECUTE format('SELECT %s, %s FROM dblink_get_result(%L) AS t(%s)',
                                                i, unnested, conns[i], array_columns);
                ELSE
                    RETURN QUERY EXECUTE format('SELECT %s, t.* FROM dblink_get_result(%L) AS t(%s)',
                                                i, conns[i], columns);
                END IF;
                -- the end of the query's results: the connection is free again
                PERFORM FROM dblink_get_result(conns[i]) AS t(done text);
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
                                        det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
                PERFORM gpurec_shards._abandon(conns);
                PERFORM gpurec_shards._raise(st, format('shard "%s": %s', shards[i], msg),
                                             nullif(det, ''), nullif(hnt, ''));
            END;
        END LOOP;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM gpurec_shards._abandon(conns);
        RAISE;
    END;
END $$;

-- Raises ERROR 22023 when a key (an individual, a user) came from more than
-- one shard: its rows were split, and no shard saw them all.
CREATE FUNCTION _check_not_split(what text, key bigint, shards text[], first_shard integer, other_shard integer)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM gpurec_shards._raise('22023',
        format('%s %s is on more than one shard ("%s" and "%s")', what, key,
               shards[least(first_shard, other_shard)], shards[greatest(first_shard, other_shard)]),
        NULL, format('Shard the data by %s: all rows of one %s on one shard.', what, what));
    RETURN false;
END $$;

-- A literal array of floats that reads back as the very same doubles
-- (float8 output is exact under extra_float_digits >= 1, the default).
CREATE FUNCTION _float_array(vals float8[])
RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT coalesce(vals, '{}')::text $$;

-- ------------------------------------------------------------ marketplace --

CREATE FUNCTION cheapest_offers(shards text[], offers_query text, k integer DEFAULT 1)
RETURNS TABLE(product_id bigint, offer_rank integer, store_id bigint, price numeric,
              n_offers bigint)
LANGUAGE plpgsql VOLATILE STRICT AS $$
BEGIN
    -- the engine's own check of k, on no parts, before any shard works
    PERFORM gpurec_internal._merge_cheapest_offers('{}', k);
    -- each shard's k cheapest of each product hold the k cheapest of all
    -- shards.  A shard sends its ranking as one bytea (the prices in their
    -- type with every digit, its count of each product's offers), and the
    -- engine ranks the shards' rows again in its own order (price,
    -- store_id, fewest decimals) and adds the counts: the single server's
    -- rows, in its order.
    RETURN QUERY
    SELECT m.product_id, m.offer_rank, m.store_id, m.price, m.n_offers
    FROM gpurec_internal._merge_cheapest_offers(
             ARRAY(SELECT t.part
                   FROM gpurec_shards._gather(shards,
                            ARRAY[format('SELECT gpurec_internal._cheapest_offers_part(%L, %s)', offers_query, k)],
                            'part bytea', false) AS t(shard integer, part bytea)
                   ORDER BY t.shard),
             k) AS m;
END $$;

COMMENT ON FUNCTION cheapest_offers(text[], text, integer) IS
'gpurec.cheapest_offers over offers sharded by any column: each shard''s k cheapest per product, merged by gpurec_internal._merge_cheapest_offers.';

CREATE FUNCTION improve_carts(shards text[], carts_query text, offers_query text)
RETURNS TABLE(cart_id bigint, product_id bigint, quantity bigint, current_store_id bigint,
              current_price numeric, best_store_id bigint, best_price numeric, saving numeric)
LANGUAGE plpgsql VOLATILE STRICT AS $$
DECLARE
    no_offers constant text :=
        'SELECT 1::bigint AS product_id, 1::bigint AS store_id, 1::numeric AS price WHERE false';
    pair_products bigint[];
    pair_stores bigint[];
    products bigint[];
    offer_products bigint[];
    offer_stores bigint[];
    offer_prices numeric[];
BEGIN
    -- 1. the (product, current store) pairs of every shard's carts, as the
    --    engine reads them (with no offers every cart line comes back)
    SELECT array_agg(p.product_id ORDER BY p.product_id, p.store_id),
           array_agg(p.store_id ORDER BY p.product_id, p.store_id),
           array_agg(DISTINCT p.product_id)
      INTO pair_products, pair_stores, products
      FROM (SELECT DISTINCT t.product_id, t.store_id
            FROM gpurec_shards._gather(shards,
                     ARRAY[format('SELECT DISTINCT product_id, current_store_id '
                                  'FROM gpurec.improve_carts(%L, %L)', carts_query, no_offers)],
                     'product_id bigint, store_id bigint')
                 AS t(shard integer, product_id bigint, store_id bigint)) p;
    IF products IS NULL THEN
        RETURN;
    END IF;
    -- 2. what a line's answer depends on, from every shard's offers: the
    --    cheapest offer of each product, and the cheapest offer of each pair
    --    at its current store (ties fewest decimals first, as the engine)
    SELECT array_agg(o.product_id), array_agg(o.store_id), array_agg(o.price::numeric)
      INTO offer_products, offer_stores, offer_prices
      FROM (SELECT DISTINCT t.product_id, t.store_id, t.price
            FROM gpurec_shards._gather(shards,
                     ARRAY[format('SELECT product_id, store_id, price::text FROM gpurec.cheapest_offers(%L, 1) '
                                  'UNION ALL '
                                  '(SELECT DISTINCT ON (product_id, store_id) product_id, store_id, price::text '
                                  ' FROM gpurec.cheapest_offers(%L, 2147483647) '
                                  ' ORDER BY product_id, store_id, offer_rank)',
                                  format('SELECT o.* FROM (%s) o WHERE o.product_id = ANY (%L::bigint[])',
                                         offers_query, products),
                                  format('SELECT o.* FROM (%s) o JOIN unnest(%L::bigint[], %L::bigint[]) '
                                         'AS pair(product_id, store_id) '
                                         'ON o.product_id = pair.product_id AND o.store_id = pair.store_id',
                                         offers_query, pair_products, pair_stores))],
                     'product_id bigint, store_id bigint, price text')
                 AS t(shard integer, product_id bigint, store_id bigint, price text)) o;
    -- 3. every shard improves its own carts against those offers
    RETURN QUERY
    SELECT t.cart_id, t.product_id, t.quantity, t.current_store_id, t.current_price,
           t.best_store_id, t.best_price, t.saving
    FROM gpurec_shards._gather(shards,
             ARRAY[format('SELECT * FROM gpurec.improve_carts(%L, %L)', carts_query,
                          format('SELECT r.product_id, r.store_id, r.price '
                                 'FROM unnest(%L::bigint[], %L::bigint[], %L::numeric[]) AS r(product_id, store_id, price)',
                                 coalesce(offer_products, '{}'), coalesce(offer_stores, '{}'),
                                 coalesce(offer_prices, '{}')))],
             'cart_id bigint, product_id bigint, quantity bigint, current_store_id bigint, '
             'current_price numeric, best_store_id bigint, best_price numeric, saving numeric')
         AS t(shard integer, cart_id bigint, product_id bigint, quantity bigint, current_store_id bigint,
              current_price numeric, best_store_id bigint, best_price numeric, saving numeric)
    ORDER BY t.cart_id, t.product_id, t.current_store_id, t.quantity;
END $$;

COMMENT ON FUNCTION improve_carts(text[], text, text) IS
'gpurec.improve_carts over carts sharded by cart and offers sharded by any column.';

-- ------------------------------------------------------------ ROC fitness --

-- Every shard's roc_fitness rows (shard_query: the call each shard makes),
-- refusing an individual that two shards returned.
CREATE FUNCTION _roc_fitness(shards text[], shard_query text)
RETURNS TABLE(individual_id bigint, auc float8, fitness float8, n_positive bigint,
              n_negative bigint, lowest_positive_rank bigint, highest_positive_rank bigint)
LANGUAGE sql VOLATILE AS $$
    SELECT t.individual_id, t.auc, t.fitness, t.n_positive, t.n_negative,
           t.lowest_positive_rank, t.highest_positive_rank
    FROM (SELECT t.*, lag(t.shard) OVER (PARTITION BY t.individual_id ORDER BY t.shard) AS other_shard
          FROM gpurec_shards._gather(shards, ARRAY[shard_query],
                   'individual_id bigint, auc float8, fitness float8, n_positive bigint, n_negative bigint, '
                   'lowest_positive_rank bigint, highest_positive_rank bigint')
               AS t(shard integer, individual_id bigint, auc float8, fitness float8, n_positive bigint,
                    n_negative bigint, lowest_positive_rank bigint, highest_positive_rank bigint)) t
    WHERE t.other_shard IS NULL
       OR gpurec_shards._check_not_split('individual', t.individual_id, shards, t.other_shard, t.shard)
    ORDER BY t.individual_id;
$$;

-- The labels in a shard's query: packed (a bit a label) and in base64, as a
-- shard's parser scans a literal character by character, and boolean[]'s
-- text is 2 characters a label (the 200 kB of 100,000 labels took each
-- shard about 7 ms to scan and parse).
CREATE FUNCTION _labels_literal(labels anycompatiblearray)
RETURNS text LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT format('gpurec_internal._labels_unpack(decode(%L, ''base64''))', encode(gpurec_internal._labels_pack(labels), 'base64'));
$$;

CREATE FUNCTION roc_fitness(shards text[], scores_query text)
RETURNS TABLE(individual_id bigint, auc float8, fitness float8, n_positive bigint,
              n_negative bigint, lowest_positive_rank bigint, highest_positive_rank bigint)
LANGUAGE sql VOLATILE STRICT AS $$
    SELECT * FROM gpurec_shards._roc_fitness(shards, format('SELECT * FROM gpurec.roc_fitness(%L)', scores_query));
$$;

COMMENT ON FUNCTION roc_fitness(text[], text) IS
'gpurec.roc_fitness (long format) over examples sharded by individual.';

CREATE FUNCTION roc_fitness(shards text[], population_query text, labels anycompatiblearray)
RETURNS TABLE(individual_id bigint, auc float8, fitness float8, n_positive bigint,
              n_negative bigint, lowest_positive_rank bigint, highest_positive_rank bigint)
LANGUAGE sql VOLATILE STRICT AS $$
    SELECT * FROM gpurec_shards._roc_fitness(shards,
        format('SELECT * FROM gpurec.roc_fitness(%L, %s)', population_query, gpurec_shards._labels_literal(labels)));
$$;

COMMENT ON FUNCTION roc_fitness(text[], text, anycompatiblearray) IS
'gpurec.roc_fitness (array format) over a population sharded by individual.';

CREATE FUNCTION roc_auc(shards text[], population_query text, labels anycompatiblearray)
RETURNS TABLE(individual_id bigint, auc float8)
LANGUAGE sql VOLATILE STRICT AS $$
    SELECT t.individual_id, t.auc
    FROM (SELECT t.*, lag(t.shard) OVER (PARTITION BY t.individual_id ORDER BY t.shard) AS other_shard
          FROM gpurec_shards._gather(shards,
                   ARRAY[format('SELECT p.individual_id, gpurec.roc_auc(p.scores::float8[], %s) '
                                'FROM (%s) AS p WHERE p.individual_id IS NOT NULL AND p.scores IS NOT NULL',
                                gpurec_shards._labels_literal(labels), population_query)],
                   'individual_id bigint, auc float8')
               AS t(shard integer, individual_id bigint, auc float8)) t
    WHERE t.other_shard IS NULL
       OR gpurec_shards._check_not_split('individual', t.individual_id, shards, t.other_shard, t.shard)
    ORDER BY t.individual_id;
$$;

COMMENT ON FUNCTION roc_auc(text[], text, anycompatiblearray) IS
'gpurec.roc_auc of every individual of population_query (individual_id, scores) on every shard.';

-- ------------------------------------------------------------- geospatial --

-- The points of the given users on every shard, as the engine reads them
-- (rows with a NULL skipped, coordinates as double precision).
CREATE FUNCTION _points_of(shards text[], points_query text, users bigint[])
RETURNS TABLE(shard integer, user_id bigint, x float8, y float8)
LANGUAGE sql VOLATILE AS $$
    SELECT t.shard, t.user_id, t.x, t.y
    FROM gpurec_shards._gather(shards,
             ARRAY[format('SELECT q.user_id, q.x::float8, q.y::float8 FROM (%s) AS q '
                          'WHERE q.x IS NOT NULL AND q.y IS NOT NULL AND %s',
                          points_query,
                          CASE WHEN users IS NULL THEN 'q.user_id IS NOT NULL'
                               ELSE format('q.user_id = ANY (%L::bigint[])', users) END)],
             'user_id bigint, x float8, y float8')
         AS t(shard integer, user_id bigint, x float8, y float8);
$$;

-- A shard's points query: its own points but the given user's, and that
-- user's points from wherever they are, so that every shard measures its
-- users against the same main user.
CREATE FUNCTION _points_with_user(points_query text, user_id bigint, xs float8[], ys float8[])
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT format('SELECT q.user_id, q.x, q.y FROM (%s) AS q WHERE q.user_id IS DISTINCT FROM %s '
                  'UNION ALL SELECT %s::bigint, m.x, m.y FROM unnest(%L::float8[], %L::float8[]) AS m(x, y)',
                  points_query, user_id, user_id,
                  gpurec_shards._float_array(xs), gpurec_shards._float_array(ys));
$$;

-- The candidates query's rows, read on the coordinator in their order, as a
-- query every shard can run to get the same rows in the same order.
CREATE FUNCTION _candidates_literal(candidates_query text, OUT query text, OUT ids bigint[])
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    xs float8[];
    ys float8[];
BEGIN
    EXECUTE format('SELECT array_agg(c.candidate_id::bigint), array_agg(c.x::float8), array_agg(c.y::float8) '
                   'FROM (%s) AS c WHERE c.candidate_id IS NOT NULL AND c.x IS NOT NULL AND c.y IS NOT NULL',
                   candidates_query)
       INTO ids, xs, ys;
    query := format('SELECT c.candidate_id, c.x, c.y FROM unnest(%L::bigint[], %L::float8[], %L::float8[]) '
                    'WITH ORDINALITY AS c(candidate_id, x, y, n) ORDER BY c.n',
                    coalesce(ids, '{}'), gpurec_shards._float_array(xs), gpurec_shards._float_array(ys));
END $$;

CREATE FUNCTION user_similarity(shards text[], points_query text, main_user bigint,
                                metric text DEFAULT 'euclidean', epsilon float8 DEFAULT NULL)
RETURNS TABLE(user_id bigint, similarity float8, mean_min_distance float8)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    xs float8[];
    ys float8[];
BEGIN
    IF shards IS NULL OR points_query IS NULL OR main_user IS NULL OR metric IS NULL THEN
        RETURN;  -- as gpurec.user_similarity: a NULL argument, no rows
    END IF;
    -- the engine's argument checks on the main user alone
    PERFORM gpurec.user_similarity(format('SELECT %s::bigint AS user_id, 0::float8 AS x, 0::float8 AS y', main_user),
                                   main_user, metric, epsilon);
    SELECT array_agg(p.x), array_agg(p.y) INTO xs, ys
      FROM gpurec_shards._points_of(shards, points_query, ARRAY[main_user]) p;
    IF xs IS NULL THEN
        -- the engine's own error for a main user without points
        PERFORM gpurec.user_similarity('SELECT 1::bigint AS user_id, 0::float8 AS x, 0::float8 AS y WHERE false',
                                       main_user, metric, epsilon);
    END IF;
    -- the similarity of a user to the main user needs the two users' points
    -- only: each shard measures its own users
    RETURN QUERY
    SELECT t.user_id, t.similarity, t.mean_min_distance
    FROM (SELECT t.*, lag(t.shard) OVER (PARTITION BY t.user_id ORDER BY t.shard) AS other_shard
          FROM gpurec_shards._gather(shards,
                   ARRAY[format('SELECT * FROM gpurec.user_similarity(%L, %s, %L, %L)',
                                gpurec_shards._points_with_user(points_query, main_user, xs, ys),
                                main_user, metric, epsilon)],
                   'user_id bigint, similarity float8, mean_min_distance float8')
               AS t(shard integer, user_id bigint, similarity float8, mean_min_distance float8)) t
    WHERE t.other_shard IS NULL
       OR gpurec_shards._check_not_split('user', t.user_id, shards, t.other_shard, t.shard)
    ORDER BY t.user_id;
END $$;

COMMENT ON FUNCTION user_similarity(text[], text, bigint, text, float8) IS
'gpurec.user_similarity over points sharded by user: the main user''s points travel to every shard.';

CREATE FUNCTION similar_users(shards text[], points_query text, k integer DEFAULT 10,
                              metric text DEFAULT 'euclidean', epsilon float8 DEFAULT NULL)
RETURNS TABLE(user_id bigint, rank integer, other_user_id bigint, similarity float8)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    n integer := cardinality(shards);
    queries text[] := '{}';
    i integer;
    point_shards integer[];
    ids bigint[];
    xs float8[];
    ys float8[];
BEGIN
    IF shards IS NULL OR points_query IS NULL OR k IS NULL OR metric IS NULL THEN
        RETURN;
    END IF;
    PERFORM gpurec.similar_users('SELECT 1::bigint AS user_id, 0::float8 AS x, 0::float8 AS y', k, metric, epsilon);
    -- every user's k most similar others may be on any shard: each shard
    -- gets the other shards' points and keeps the lists of its own users
    SELECT array_agg(p.shard), array_agg(p.user_id), array_agg(p.x), array_agg(p.y)
      INTO point_shards, ids, xs, ys
      FROM gpurec_shards._points_of(shards, points_query, NULL) p;
    PERFORM gpurec_shards._check_not_split('user', p.user_id, shards, min(p.shard), max(p.shard))
       FROM unnest(point_shards, ids) AS p(shard, user_id)
      GROUP BY p.user_id HAVING min(p.shard) <> max(p.shard);
    FOR i IN 1 .. n LOOP
        queries := queries || (
            SELECT format(
                'SELECT s.* FROM gpurec.similar_users(%L, %s, %L, %L) AS s WHERE s.user_id = ANY (%L::bigint[])',
                format('SELECT q.user_id, q.x, q.y FROM (%s) AS q UNION ALL SELECT r.user_id, r.x, r.y '
                       'FROM unnest(%L::bigint[], %L::float8[], %L::float8[]) AS r(user_id, x, y)',
                       points_query,
                       coalesce(array_agg(p.user_id) FILTER (WHERE p.shard <> i), '{}'),
                       gpurec_shards._float_array(array_agg(p.x) FILTER (WHERE p.shard <> i)),
                       gpurec_shards._float_array(array_agg(p.y) FILTER (WHERE p.shard <> i))),
                k, metric, epsilon,
                coalesce(array_agg(DISTINCT p.user_id) FILTER (WHERE p.shard = i), '{}'))
            FROM unnest(point_shards, ids, xs, ys) AS p(shard, user_id, x, y));
    END LOOP;
    RETURN QUERY
    SELECT t.user_id, t.rank, t.other_user_id, t.similarity
    FROM gpurec_shards._gather(shards, queries, 'user_id bigint, rank integer, other_user_id bigint, similarity float8')
         AS t(shard integer, user_id bigint, rank integer, other_user_id bigint, similarity float8)
    ORDER BY t.user_id, t.rank;
END $$;

COMMENT ON FUNCTION similar_users(text[], text, integer, text, float8) IS
'gpurec.similar_users over points sharded by user: every shard gets the others'' points and ranks for its own users.';

CREATE FUNCTION predict_strength(shards text[], points_query text, main_user bigint, candidates_query text,
                                 exponent float8 DEFAULT 2, max_distance float8 DEFAULT NULL,
                                 min_similarity float8 DEFAULT 0,
                                 metric text DEFAULT 'euclidean', epsilon float8 DEFAULT NULL)
RETURNS TABLE(candidate_id bigint, strength float8)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    xs float8[];
    ys float8[];
    cands record;
BEGIN
    IF shards IS NULL OR points_query IS NULL OR main_user IS NULL OR candidates_query IS NULL
       OR exponent IS NULL OR min_similarity IS NULL OR metric IS NULL THEN
        RETURN;
    END IF;
    PERFORM gpurec.predict_strength(format('SELECT %s::bigint AS user_id, 0::float8 AS x, 0::float8 AS y', main_user),
                                    main_user,
                                    'SELECT 1::bigint AS candidate_id, 0::float8 AS x, 0::float8 AS y WHERE false',
                                    exponent, max_distance, min_similarity, metric, epsilon);
    SELECT array_agg(p.x), array_agg(p.y) INTO xs, ys
      FROM gpurec_shards._points_of(shards, points_query, ARRAY[main_user]) p;
    IF xs IS NULL THEN
        PERFORM gpurec.predict_strength('SELECT 1::bigint AS user_id, 0::float8 AS x, 0::float8 AS y WHERE false',
                                        main_user,
                                        'SELECT 1::bigint AS candidate_id, 0::float8 AS x, 0::float8 AS y',
                                        exponent, max_distance, min_similarity, metric, epsilon);
    END IF;
    cands := gpurec_shards._candidates_literal(candidates_query);
    IF cardinality(cands.ids) IS NULL THEN
        RETURN;
    END IF;
    -- a strength is a sum over users: each shard sums its own users, the
    -- coordinator adds the shards' sums in shard order
    RETURN QUERY
    SELECT cands.ids[t.n], sum(t.strength ORDER BY t.shard)
    FROM gpurec_shards._gather(shards,
             ARRAY[format('SELECT s.n, s.strength FROM gpurec.predict_strength(%L, %s, %L, %L, %L, %L, %L, %L) '
                          'WITH ORDINALITY AS s(candidate_id, strength, n)',
                          gpurec_shards._points_with_user(points_query, main_user, xs, ys), main_user,
                          cands.query, exponent, max_distance, min_similarity, metric, epsilon)],
             'n bigint, strength float8')
         AS t(shard integer, n bigint, strength float8)
    GROUP BY t.n
    ORDER BY t.n;
END $$;

COMMENT ON FUNCTION predict_strength(text[], text, bigint, text, float8, float8, float8, text, float8) IS
'gpurec.predict_strength over points sharded by user; candidates_query runs on the coordinator.';

CREATE FUNCTION fit_exponent(shards text[], points_query text, holdout_query text, candidates_query text,
                             exponents float8[] DEFAULT '{1,1.5,2,2.5,3}',
                             max_distance float8 DEFAULT NULL, min_similarity float8 DEFAULT 0,
                             metric text DEFAULT 'euclidean', epsilon float8 DEFAULT NULL)
RETURNS TABLE(exponent float8, mean_auc float8, users bigint)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    cands record;
    visit_users bigint[];
    visit_rows bigint[];
    point_users bigint[];
    point_xs float8[];
    point_ys float8[];
    missing bigint;
    evaluated bigint[];
    user_points text[];
BEGIN
    IF shards IS NULL OR points_query IS NULL OR holdout_query IS NULL OR candidates_query IS NULL
       OR exponents IS NULL OR min_similarity IS NULL OR metric IS NULL THEN
        RETURN;
    END IF;
    PERFORM gpurec.fit_exponent('SELECT 1::bigint AS user_id, 0::float8 AS x, 0::float8 AS y',
                                'SELECT 1::bigint AS user_id, 1::bigint AS candidate_id WHERE false',
                                'SELECT 1::bigint AS candidate_id, 0::float8 AS x, 0::float8 AS y',
                                exponents, max_distance, min_similarity, metric, epsilon);
    cands := gpurec_shards._candidates_literal(candidates_query);
    -- each holdout user's visited candidate rows (every row of a named id;
    -- an id naming no row leaves the user a holdout user with no visit)
    EXECUTE format('SELECT array_agg(v.user_id), array_agg(v.n) FROM '
                   '(SELECT DISTINCT h.user_id::bigint AS user_id, c.n FROM (%s) AS h '
                   ' LEFT JOIN unnest(%L::bigint[]) WITH ORDINALITY AS c(id, n) ON c.id = h.candidate_id '
                   ' WHERE h.user_id IS NOT NULL AND h.candidate_id IS NOT NULL) AS v',
                   holdout_query, coalesce(cands.ids, '{}'))
       INTO visit_users, visit_rows;
    IF visit_users IS NOT NULL THEN
        SELECT array_agg(p.user_id), array_agg(p.x), array_agg(p.y) INTO point_users, point_xs, point_ys
          FROM gpurec_shards._points_of(shards, points_query, visit_users) p;
        SELECT min(u) INTO missing FROM unnest(visit_users) u
         WHERE NOT u = ANY (coalesce(point_users, '{}'));
        IF missing IS NOT NULL THEN
            -- the engine's own error for a holdout user without points
            PERFORM gpurec.fit_exponent('SELECT 1::bigint AS user_id, 0::float8 AS x, 0::float8 AS y WHERE false',
                                        format('SELECT %s::bigint AS user_id, 1::bigint AS candidate_id', missing),
                                        'SELECT 1::bigint AS candidate_id, 0::float8 AS x, 0::float8 AS y',
                                        exponents, max_distance, min_similarity, metric, epsilon);
        END IF;
    END IF;
    -- the users with a visited and an unvisited candidate row, in id order
    SELECT array_agg(v.user_id ORDER BY v.user_id) INTO evaluated
      FROM (SELECT v.user_id, count(DISTINCT v.n) AS visited FROM unnest(visit_users, visit_rows) AS v(user_id, n)
            GROUP BY v.user_id) v
     WHERE v.visited > 0 AND v.visited < coalesce(cardinality(cands.ids), 0);
    IF evaluated IS NULL THEN
        RETURN QUERY SELECT e.x, NULL::float8, 0::bigint
                     FROM unnest(exponents) WITH ORDINALITY AS e(x, n) ORDER BY e.x, e.n;
        RETURN;
    END IF;
    -- each evaluated user's points query for the shards, as predict_strength's
    SELECT array_agg(p.user_id ORDER BY p.user_id),
           array_agg(gpurec_shards._points_with_user(points_query, p.user_id, p.xs, p.ys) ORDER BY p.user_id)
      INTO evaluated, user_points
      FROM (SELECT p.user_id, array_agg(p.x) AS xs, array_agg(p.y) AS ys
            FROM unnest(point_users, point_xs, point_ys) AS p(user_id, x, y)
            WHERE p.user_id = ANY (evaluated) GROUP BY p.user_id) p;
    -- each shard: for every evaluated user and exponent, the strengths its
    -- own users give every candidate; the coordinator adds them up and
    -- takes each user's AUC with gpurec's own (gpurec.roc_auc: the engine's
    -- AUC, ties counting half)
    RETURN QUERY
    WITH strengths AS (
        SELECT t.u, t.e, t.c, sum(t.strength ORDER BY t.shard) AS strength
        FROM gpurec_shards._gather(shards,
                 ARRAY[format(
                     'SELECT a.u, e.n, s.n, s.strength '
                     'FROM unnest(%L::bigint[], %L::text[]) AS a(u, points_query) '
                     'CROSS JOIN unnest(%L::float8[]) WITH ORDINALITY AS e(x, n) '
                     'CROSS JOIN LATERAL gpurec.predict_strength(a.points_query, a.u, %L, e.x, %L, %L, %L, %L) '
                     'WITH ORDINALITY AS s(candidate_id, strength, n)',
                     evaluated, user_points, gpurec_shards._float_array(exponents),
                     cands.query, max_distance, min_similarity, metric, epsilon)],
                 'u bigint, e bigint, c bigint, strength float8')
             AS t(shard integer, u bigint, e bigint, c bigint, strength float8)
        GROUP BY t.u, t.e, t.c),
    -- both arrays of a group take its rows in one order, each row fed to
    -- every aggregate in turn: no ORDER BY, which would sort each apart
    aucs AS (
        SELECT s.u, s.e, gpurec.roc_auc(array_agg(s.strength), array_agg(v.n IS NOT NULL)) AS auc
        FROM strengths s
        LEFT JOIN (SELECT DISTINCT v.user_id, v.n FROM unnest(visit_users, visit_rows) AS v(user_id, n)) v
               ON v.user_id = s.u AND v.n = s.c
        GROUP BY s.u, s.e)
    SELECT exponents[a.e], sum(a.auc ORDER BY a.u) / count(*)::float8, count(*)
    FROM aucs a
    GROUP BY a.e
    ORDER BY exponents[a.e], a.e;
END $$;

COMMENT ON FUNCTION fit_exponent(text[], text, text, text, float8[], float8, float8, text, float8) IS
'gpurec.fit_exponent over points sharded by user; holdout_query and candidates_query run on the coordinator.';
