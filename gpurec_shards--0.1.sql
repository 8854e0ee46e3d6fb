-- gpurec_shards 0.1: gpurec's functions over data sharded across servers.
-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION gpurec_shards" to load this file. \quit

-- The script makes its schemas, the extension's own, as gpurec's does (and
-- gpurec_shards.control names pg_catalog for the same reason).
CREATE SCHEMA gpurec_shards;

-- A cluster is a foreign server of PL/Proxy's wrapper `plproxy` whose
-- options p0, p1, ... are the connect strings of its partitions (the
-- shards): databases with gpurec installed, each holding a part of the data
-- under the same names.  Each user-facing function takes the cluster's name
-- first, then the arguments of the gpurec function of the same name, and
-- returns its columns: the answer one server holding every row gives.
--
-- The engine is PL/Proxy: each internal function of LANGUAGE plproxy below
-- (in gpurec_shards_internal) runs one SELECT on every partition at once,
-- waits on their sockets, passes arguments and results in binary, and
-- cancels the partitions' queries when the caller is cancelled.  Every such
-- function splits the array of partition numbers (SPLIT parts; RUN ON
-- parts), so that each partition receives its own number and returns it
-- with its rows: data split across partitions is then refused naming both.
-- Every function here that runs no user's query text on this server has
-- search_path = pg_catalog, pg_temp; the others, whose inner queries must
-- find the caller's tables, name pg_catalog's functions in full: a role
-- that may create objects on the caller's search_path must not be able to
-- put its own function in the place of one of them.
-- The user-facing functions compose the calls and merge the answers, and
-- each raises any error once, translated (raise_translated), without the
-- internal functions' context.  They run with gpurec.timing off: their
-- own calls of gpurec (argument checks, merges) are internal, and a
-- partition's timing NOTICE, where its session has gpurec.timing on,
-- reaches the caller through PL/Proxy.

GRANT USAGE ON SCHEMA gpurec_shards TO PUBLIC;

COMMENT ON SCHEMA gpurec_shards IS
'gpurec_shards: gpurec''s functions over data sharded across servers, through PL/Proxy; \df+ gpurec_shards.* lists them.';

-- What the user-facing functions call, kept out of their schema so that
-- \df gpurec_shards.* lists only what users call.  USAGE is PUBLIC, as
-- the functions run as their caller (SECURITY INVOKER: PL/Proxy then
-- connects with the caller's user mapping) and name these; each is safe
-- to call, checking the cluster and running what the caller could run
-- itself.
CREATE SCHEMA gpurec_shards_internal;
COMMENT ON SCHEMA gpurec_shards_internal IS
'gpurec_shards'' internals, called by its own functions; not for direct use, and they may change with any version.';
GRANT USAGE ON SCHEMA gpurec_shards_internal TO PUBLIC;

-- ------------------------------------------------------------ the cluster --

-- The cluster's name for PL/Proxy's CLUSTER statement, after the checks
-- PL/Proxy would answer with an internal error or a cause that names no
-- cluster: the server exists and is PL/Proxy's, the caller may use it, and
-- a user mapping (the caller's or PUBLIC's) gives its credentials.
CREATE FUNCTION gpurec_shards_internal.checked_cluster(cluster text)
RETURNS text LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    wrapper text;
BEGIN
    SELECT w.fdwname INTO wrapper
      FROM pg_catalog.pg_foreign_server s JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = s.srvfdw
     WHERE s.srvname = cluster;
    IF wrapper IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '42704', MESSAGE = format('cluster "%s" does not exist', cluster),
            HINT = 'A cluster is a foreign server of PL/Proxy: CREATE SERVER name FOREIGN DATA WRAPPER plproxy '
                   'OPTIONS (p0 ''host=... dbname=...'', p1 ''...'').';
    ELSIF wrapper <> 'plproxy' THEN
        RAISE EXCEPTION USING ERRCODE = '42704',
            MESSAGE = format('cluster "%s" is a server of the foreign-data wrapper "%s", not of plproxy', cluster, wrapper);
    END IF;
    IF NOT has_server_privilege(cluster, 'USAGE') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('permission denied for cluster "%s"', cluster),
            HINT = format('A superuser or the server''s owner grants it: GRANT USAGE ON FOREIGN SERVER %I TO %I;',
                          cluster, current_user);
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_user_mappings m
                    WHERE m.srvname = cluster AND m.usename IN (current_user::text, 'public')) THEN
        RAISE EXCEPTION USING ERRCODE = '42704',
            MESSAGE = format('no user mapping for role "%s" on cluster "%s"', current_user, cluster),
            HINT = format('CREATE USER MAPPING FOR %I SERVER %I OPTIONS (user ''...'', password ''...'');',
                          current_user, cluster);
    END IF;
    RETURN cluster;
END $$;

-- The cluster's partition numbers, 0 to n - 1: the array the internal
-- functions split, one number to each partition.
CREATE FUNCTION gpurec_shards_internal.partitions(cluster text)
RETURNS integer[] LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(array_agg(n - 1 ORDER BY n), '{}')
    FROM generate_series(1, (SELECT count(*)::integer
                             FROM pg_catalog.pg_foreign_server s, unnest(s.srvoptions) AS o
                             WHERE s.srvname = cluster AND o ~ '^p[0-9]+=')) AS n;
$$;

-- The value of `key` in a partition's connect string (libpq's key=value
-- form: a value in single quotes may hold spaces, \' and \\), or NULL.
CREATE FUNCTION gpurec_shards_internal.conninfo_value(conninfo text, key text)
RETURNS text LANGUAGE sql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN m[1] IS NOT NULL THEN regexp_replace(m[1], '\\(.)', '\1', 'g') ELSE m[2] END
    FROM (SELECT regexp_match(conninfo, '(?:^|[\s=])' || key || $r$\s*=\s*(?:'((?:[^'\\]|\\.)*)'|([^\s']+))$r$) AS m) q;
$$;

-- How an error names partition `part`: by its number, and its database
-- where the connect string says it.
CREATE FUNCTION gpurec_shards_internal.partition_name(cluster text, part integer)
RETURNS text LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp AS $$
    SELECT format('cluster "%s", partition %s', cluster, part)
           || coalesce(format(' (dbname %s)', gpurec_shards_internal.conninfo_value(o, 'dbname')), '')
    FROM (SELECT (SELECT o FROM pg_catalog.pg_foreign_server s, unnest(s.srvoptions) AS o
                  WHERE s.srvname = cluster AND o LIKE format('p%s=%%', part)) AS o) p;
$$;

-- An error of a call on `cluster`, as the caller sees it.  PL/Proxy
-- reports a partition's own error as "fn(n): [dbname] REMOTE ERROR: text"
-- with its SQLSTATE, detail and hint prefixed; and a partition it could
-- not reach, or that broke off, as XX000 with libpq's message.  Those
-- become the partition's error naming the partition (08001 where it could
-- not be reached, 08006 where the connection broke, 28P01 or 28000 where
-- the partition refused the credentials), a partition's cancel (57R14,
-- raised so that PL/Proxy does not take it for its caller's) becomes
-- 57014, and everything else passes as it is.
CREATE FUNCTION gpurec_shards_internal.translated_error(cluster text, raised_sqlstate text, raised_message text,
                                             raised_detail text, raised_hint text, OUT sqlstate text, OUT message text, OUT detail text, OUT hint text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m text[];
    dbname text;
    part integer;
    partition text;
BEGIN
    sqlstate := CASE raised_sqlstate WHEN '57R14' THEN '57014' ELSE raised_sqlstate END;
    message := raised_message;
    detail := nullif(raised_detail, '');  -- GET STACKED DIAGNOSTICS gives '' for none
    hint := nullif(raised_hint, '');
    m := regexp_match(message, '^(?:PL/Proxy function )?[^ ]+\(\d+\): \[([^]]*)\] (REMOTE [A-Z]+: |)(.*)$', 's');
    IF m IS NULL THEN
        RETURN;
    END IF;
    dbname := m[1];
    -- the partition: the one whose connect string names this database;
    -- where several do (one name on several servers), a connection's
    -- failure names its server in libpq's message: the one whose host (and
    -- port, where the connect string gives one) it names
    SELECT min(p.n), count(*) INTO part
      FROM (SELECT substring(o FROM '^p([0-9]+)=')::integer AS n,
                   count(*) OVER () AS named,
                   gpurec_shards_internal.conninfo_value(o, 'host') AS host,
                   -- libpq's default where the connect string names none
                   coalesce(gpurec_shards_internal.conninfo_value(o, 'port'), '5432') AS port
            FROM pg_catalog.pg_foreign_server s, unnest(s.srvoptions) AS o
            WHERE s.srvname = cluster AND o ~ '^p[0-9]+='
              AND gpurec_shards_internal.conninfo_value(o, 'dbname') = dbname) p
     WHERE p.named = 1
        OR (m[2] = '' AND p.host IS NOT NULL AND strpos(m[3], '"' || p.host) > 0
            AND (strpos(m[3], 'port ' || p.port) > 0 OR strpos(m[3], '.s.PGSQL.' || p.port) > 0))
    HAVING count(*) = 1;
    partition := CASE WHEN part IS NULL THEN format('cluster "%s", a partition of database "%s"', cluster, dbname)
                      ELSE gpurec_shards_internal.partition_name(cluster, part) END;
    IF m[2] <> '' AND sqlstate NOT IN ('57P01', '57P02', '57P03') THEN
        message := format('%s: %s', partition, m[3]);
        detail := substring(detail FROM '^Remote detail: (.*)$');
        hint := substring(hint FROM '^Remote hint: (.*)$');
        RETURN;
    END IF;
    IF m[2] <> '' THEN
        -- the partition's server shut down or is not yet up: its backend's
        -- last words are an error, but to the caller the partition is lost
        message := m[3];
        sqlstate := CASE WHEN raised_sqlstate = '57P03' THEN '08001' ELSE '08006' END;
        detail := NULL;
    ELSE
        -- libpq's own message, after PL/Proxy's name of the libpq call
        message := regexp_replace(m[3], '^[A-Za-z]+: ', '');
        IF message ~ 'password authentication failed' THEN
            sqlstate := '28P01';
        ELSIF message ~ 'database "[^"]*" does not exist' THEN
            sqlstate := '08001';
        ELSIF message ~ 'no password supplied|no pg_hba.conf entry|authentication failed|does not exist' THEN
            sqlstate := CASE WHEN message ~ 'no password supplied' THEN '08001' ELSE '28000' END;
        ELSIF message ~ 'closed the connection|terminating connection|connection to server was lost|server conn crashed' THEN
            sqlstate := '08006';
        ELSE
            sqlstate := '08001';
        END IF;
    END IF;
    detail := coalesce(detail, regexp_replace(message, '\s+$', ''));
    message := format('%s is unreachable: %s', partition,
                      CASE sqlstate WHEN '28P01' THEN 'password authentication failed'
                                    WHEN '28000' THEN 'authentication refused'
                                    WHEN '08006' THEN 'the connection broke off'
                                    WHEN '08001' THEN CASE WHEN message ~ 'no password supplied'
                                                           THEN 'no password supplied'
                                                           WHEN message ~ 'database "[^"]*" does not exist'
                                                           THEN 'its database does not exist'
                                                           ELSE 'could not connect' END END);
    hint := CASE sqlstate
            WHEN '08006' THEN 'The partition''s server stopped or restarted, or its session was ended (pg_terminate_backend), during the call; the next call connects again.'
            WHEN '08001' THEN 'Check that the partition''s server runs, and its connect string (the server''s option p'
                              || coalesce(part::text, 'N') || ').'
            ELSE 'The credentials are the user mapping''s (user, password), unless the partition''s connect string '
                 'names a user: PL/Proxy then uses the connect string alone.' END;
END $$;

-- A call on every partition that does nothing: PL/Proxy's next call on a
-- cluster drops the connections whose queries it left running.
CREATE FUNCTION gpurec_shards_internal.reconnected(cluster text, parts integer[])
RETURNS SETOF integer LANGUAGE plproxy AS $$
    CLUSTER gpurec_shards_internal.checked_cluster(cluster);
    SPLIT parts;
    RUN ON parts;
    SELECT (parts)[1];
$$;

-- After a partition's error PL/Proxy leaves the other partitions' queries
-- running (it cancels them only when the caller is cancelled); dropping
-- their connections at once makes each partition's gpurec stop within
-- about a second, as it finds its client gone.  Best effort: a partition
-- that cannot be reached runs nothing of the call.
CREATE FUNCTION gpurec_shards_internal.drop_running_parts(cluster text)
RETURNS void LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- PL/Proxy's NOTICE of each connection it drops is no news to the caller
    PERFORM set_config('client_min_messages', 'warning', true);
    PERFORM gpurec_shards_internal.reconnected(cluster, gpurec_shards_internal.partitions(cluster));
EXCEPTION WHEN OTHERS THEN
    NULL;
END $$;

-- The error of a call on `cluster` (raised_*: GET STACKED DIAGNOSTICS' in
-- the user-facing function's handler), raised translated and without the
-- internal functions' context.
CREATE FUNCTION gpurec_shards_internal.raise_translated(cluster text, raised_sqlstate text, raised_message text,
                                                        raised_detail text, raised_hint text)
RETURNS void LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    e record;
BEGIN
    e := gpurec_shards_internal.translated_error(cluster, raised_sqlstate, raised_message, raised_detail, raised_hint);
    IF e.message IS DISTINCT FROM raised_message AND raised_sqlstate <> '57014' THEN
        -- a partition's error (translated_error names the partition)
        PERFORM gpurec_shards_internal.drop_running_parts(cluster);
    END IF;
    PERFORM gpurec_internal.raise_error(e.sqlstate, e.message, e.detail, e.hint);
END $$;

-- The split-key check of every function whose answer depends on a key
-- living on one partition: true where each key of `keys` came from one
-- partition (shards[i] gave keys[i]), else ERROR 22023 for the least key
-- that two or more gave (gpurec_internal.refuse_split, naming its least
-- and greatest partition).
CREATE FUNCTION gpurec_shards_internal.unsplit(cluster text, what text, shards integer[], keys bigint[])
RETURNS boolean LANGUAGE sql
SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(bool_and(gpurec_internal.refuse_split(what, s.key, cluster, s.part, s.other_part)), true)
    FROM (SELECT k.key, min(k.shard) AS part, max(k.shard) AS other_part
          FROM unnest(shards, keys) AS k(shard, key)
          GROUP BY k.key HAVING min(k.shard) <> max(k.shard) ORDER BY k.key LIMIT 1) AS s;
$$;

-- Refuses a user whose points two partitions hold (22023): a sum over
-- users (a strength) would count each part of the user as a user.
CREATE FUNCTION gpurec_shards_internal.refuse_split_users(cluster text, parts integer[], points_query text,
                                                         metric text)
RETURNS void LANGUAGE sql
SET search_path = pg_catalog, pg_temp AS $$
    SELECT gpurec_shards_internal.unsplit(cluster, 'user', array_agg(t.shard), array_agg(u.user_id))
    FROM gpurec_shards_internal.users(cluster, parts, points_query, metric) AS t, unnest(t.users) AS u(user_id);
$$;

-- ------------------------------------------------ what runs on the shards --
-- Each returns its partition's number (shard) with its rows.

CREATE FUNCTION gpurec_shards_internal.cheapest_offers_part(cluster text, parts integer[], q_offers text,
                                                            q_k integer)
RETURNS TABLE(shard integer, part bytea) LANGUAGE plproxy AS $$
    CLUSTER gpurec_shards_internal.checked_cluster(cluster);
    SPLIT parts;
    RUN ON parts;
    SELECT (parts)[1] AS shard, gpurec_internal._cheapest_offers_part(q_offers, q_k) AS part;
$$;

CREATE FUNCTION gpurec_shards_internal.cart_pairs(cluster text, parts integer[], q_carts text)
RETURNS TABLE(shard integer, product_id bigint, store_id bigint) LANGUAGE plproxy AS $$
    CLUSTER gpurec_shards_internal.checked_cluster(cluster);
    SPLIT parts;
    RUN ON parts;
    SELECT (parts)[1] AS shard, c.product_id, c.store_id FROM gpurec_internal._cart_pairs(q_carts) AS c;
$$;

-- each product's cheapest offer, and each (product, store) pair's, as a
-- part (gpurec_internal._offers_part: prices in their type with every
-- digit and bit)
CREATE FUNCTION gpurec_shards_internal.cart_offers(cluster text, parts integer[], q_offers text,
                                                   q_products bigint[], q_pair_products bigint[],
                                                   q_pair_stores bigint[])
RETURNS TABLE(shard integer, part bytea)
LANGUAGE plproxy AS $$
    CLUSTER gpurec_shards_internal.checked_cluster(cluster);
    SPLIT parts;
    RUN ON parts;
    SELECT (parts)[1] AS shard,
           gpurec_internal._offers_part(q_offers, q_products, q_pair_products, q_pair_stores) AS part;
$$;

-- each partition's distinct users
CREATE FUNCTION gpurec_shards_internal.users(cluster text, parts integer[], q_points text, q_metric text)
RETURNS TABLE(shard integer, users bigint[]) LANGUAGE plproxy AS $$
    CLUSTER gpurec_shards_internal.checked_cluster(cluster);
    SPLIT parts;
    RUN ON parts;
    SELECT (parts)[1] AS shard, gpurec_internal._points_users(q_points, q_metric) AS users;
$$;

CREATE FUNCTION gpurec_shards_internal.cart_products(cluster text, parts integer[], q_carts text)
RETURNS TABLE(shard integer, cart_id bigint, product_id bigint) LANGUAGE plproxy AS $$
    CLUSTER gpurec_shards_internal.checked_cluster(cluster);
    SPLIT parts;
    RUN ON parts;
    SELECT (parts)[1] AS shard, c.cart_id, c.product_id FROM gpurec_internal._cart_products(q_carts) AS c;
$$;

-- each partition's rows of improve_carts and optimize_carts as one part:
-- q_offers is the partitions' parts of the offers the carts depend on
-- (cart_offer_parts), q_shipping the shipping the coordinator read
-- (_shipping_part), both passed on unread to every partition
CREATE FUNCTION gpurec_shards_internal.optimize_carts_part(cluster text, parts integer[], q_carts text,
                                                           q_offers bytea[], q_shipping bytea)
RETURNS TABLE(shard integer, part bytea) LANGUAGE plproxy AS $$
    CLUSTER gpurec_shards_internal.checked_cluster(cluster);
    SPLIT parts;
    RUN ON parts;
    SELECT (parts)[1] AS shard, gpurec_internal._optimize_carts_part(q_carts, q_offers, q_shipping) AS part;
$$;

CREATE FUNCTION gpurec_shards_internal.improve_carts_part(cluster text, parts integer[], q_carts text,
                                                          q_offers bytea[])
RETURNS TABLE(shard integer, part bytea) LANGUAGE plproxy AS $$
    CLUSTER gpurec_shards_internal.checked_cluster(cluster);
    SPLIT parts;
    RUN ON parts;
    SELECT (parts)[1] AS shard, gpurec_internal._improve_carts_part(q_carts, q_offers) AS part;
$$;

-- each partition's roc_fitness as one bytea (labels NULL: of a scores
-- query; else of a population query, the labels packed: _labels_pack)
CREATE FUNCTION gpurec_shards_internal.roc_fitness_part(cluster text, parts integer[], q_query text,
                                                        q_labels bytea)
RETURNS TABLE(shard integer, part bytea) LANGUAGE plproxy AS $$
    CLUSTER gpurec_shards_internal.checked_cluster(cluster);
    SPLIT parts;
    RUN ON parts;
    SELECT (parts)[1] AS shard,
           gpurec_internal._roc_fitness_part(q_query, gpurec_internal._labels_unpack(q_labels)) AS part;
$$;

-- the partitions' parts of roc_fitness, in partition order
CREATE FUNCTION gpurec_shards_internal.roc_fitness_parts(cluster text, query text, labels anycompatiblearray)
RETURNS bytea[] LANGUAGE sql
SET search_path = pg_catalog, pg_temp AS $$
    SELECT ARRAY(SELECT t.part
                 FROM gpurec_shards_internal.roc_fitness_part(cluster, gpurec_shards_internal.partitions(cluster),
                                                              query, gpurec_internal._labels_pack(labels)) AS t
                 ORDER BY t.shard);
$$;

-- The geospatial family's parts (gpurec_internal._geo_points_part and
-- the _*_part functions): q_remote is the points of other partitions'
-- users the call needs, gathered by the coordinator (points_part), sent
-- once to every partition; each uses those of the users it holds none of.
CREATE FUNCTION gpurec_shards_internal.geo_points_part(cluster text, parts integer[], q_points text,
                                                       q_users bigint[], q_metric text, q_epsilon float8)
RETURNS TABLE(shard integer, part bytea) LANGUAGE plproxy AS $$
    CLUSTER gpurec_shards_internal.checked_cluster(cluster);
    SPLIT parts;
    RUN ON parts;
    SELECT (parts)[1] AS shard, gpurec_internal._geo_points_part(q_points, q_users, q_metric, q_epsilon) AS part;
$$;

-- The points of `users` (every user where NULL) from every partition, as
-- one part (NULL where none); a user two partitions hold is ERROR 22023.
CREATE FUNCTION gpurec_shards_internal.points_part(cluster text, parts integer[], points_query text, users bigint[],
                                                   metric text, epsilon float8)
RETURNS bytea LANGUAGE sql
SET search_path = pg_catalog, pg_temp AS $$
    SELECT gpurec_internal._merge_geo_points(
               cluster, ARRAY(SELECT t.part
                              FROM gpurec_shards_internal.geo_points_part(cluster, parts, points_query, users,
                                                                          metric, epsilon) AS t
                              ORDER BY t.shard));
$$;

CREATE FUNCTION gpurec_shards_internal.user_similarity_part(cluster text, parts integer[], q_points text,
                                                            q_main_user bigint, q_metric text, q_epsilon float8,
                                                            q_remote bytea)
RETURNS TABLE(shard integer, part bytea) LANGUAGE plproxy AS $$
    CLUSTER gpurec_shards_internal.checked_cluster(cluster);
    SPLIT parts;
    RUN ON parts;
    SELECT (parts)[1] AS shard,
           gpurec_internal._user_similarity_part(q_points, q_main_user, q_metric, q_epsilon, q_remote) AS part;
$$;

-- each partition ranks its part (its number) of q_parts of the users
CREATE FUNCTION gpurec_shards_internal.similar_users_part(cluster text, parts integer[], q_points text,
                                                          q_parts integer, q_k integer, q_metric text,
                                                          q_epsilon float8, q_remote bytea)
RETURNS TABLE(shard integer, part bytea) LANGUAGE plproxy AS $$
    CLUSTER gpurec_shards_internal.checked_cluster(cluster);
    SPLIT parts;
    RUN ON parts;
    SELECT (parts)[1] AS shard,
           gpurec_internal._similar_users_part(q_points, q_k, q_metric, q_epsilon, (parts)[1], q_parts,
                                               q_remote) AS part;
$$;

-- the strengths a partition's users give the candidates (a part of
-- _candidates_part), in their order
CREATE FUNCTION gpurec_shards_internal.predict_strength_part(cluster text, parts integer[], q_points text,
                                                             q_main_user bigint, q_candidates bytea,
                                                             q_exponent float8, q_max_distance float8,
                                                             q_min_similarity float8, q_metric text,
                                                             q_epsilon float8, q_remote bytea)
RETURNS TABLE(shard integer, part bytea) LANGUAGE plproxy AS $$
    CLUSTER gpurec_shards_internal.checked_cluster(cluster);
    SPLIT parts;
    RUN ON parts;
    SELECT (parts)[1] AS shard,
           gpurec_internal._predict_strength_part(q_points, q_main_user, q_candidates, q_exponent, q_max_distance,
                                                  q_min_similarity, q_metric, q_epsilon, q_remote) AS part;
$$;

-- for every evaluated user (u) and exponent (e), the strengths each
-- candidate (in the candidates query's order) gets from the partition's
-- users, as a part (_predict_strength_part, u the main user, its points
-- from q_remote where the partition holds none)
CREATE FUNCTION gpurec_shards_internal.fit_strengths(cluster text, parts integer[], q_points text, q_users bigint[],
                                                     q_exponents float8[], q_candidates bytea,
                                                     q_max_distance float8, q_min_similarity float8,
                                                     q_metric text, q_epsilon float8, q_remote bytea)
RETURNS TABLE(shard integer, u bigint, e bigint, part bytea) LANGUAGE plproxy AS $$
    CLUSTER gpurec_shards_internal.checked_cluster(cluster);
    SPLIT parts;
    RUN ON parts;
    SELECT (parts)[1] AS shard, a.u, x.n AS e,
           gpurec_internal._predict_strength_part(q_points, a.u, q_candidates, x.exponent, q_max_distance,
                                                  q_min_similarity, q_metric, q_epsilon, q_remote) AS part
    FROM pg_catalog.unnest(q_users) AS a(u)
    CROSS JOIN pg_catalog.unnest(q_exponents) WITH ORDINALITY AS x(exponent, n);
$$;

-- ------------------------------------------------------------ marketplace --

CREATE FUNCTION gpurec_shards.cheapest_offers(cluster text, offers_query text, k integer DEFAULT 1)
RETURNS TABLE(product_id bigint, offer_rank integer, store_id bigint, price numeric,
              n_offers bigint)
LANGUAGE plpgsql VOLATILE STRICT
SET gpurec.timing = off AS $$
DECLARE
    st text; msg text; det text; hnt text;
BEGIN
    -- the engine's own check of k, on no parts, before any partition works
    PERFORM gpurec_internal._merge_cheapest_offers('{}', k);
    -- each partition's k cheapest of each product hold the k cheapest of
    -- all.  A partition sends its ranking as one bytea (the prices in their
    -- type with every digit, its count of each product's offers), and the
    -- engine ranks the partitions' rows again in its own order (price,
    -- store_id, fewest decimals) and adds the counts: the single server's
    -- rows, in its order.
    RETURN QUERY
    SELECT m.product_id, m.offer_rank, m.store_id, m.price, m.n_offers
    FROM gpurec_internal._merge_cheapest_offers(
             ARRAY(SELECT t.part
                   FROM gpurec_shards_internal.cheapest_offers_part(
                            cluster, gpurec_shards_internal.partitions(cluster), offers_query, k) AS t
                   ORDER BY t.shard),
             k) AS m;
EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
    PERFORM gpurec_shards_internal.raise_translated(cluster, st, msg, det, hnt);
END $$;

COMMENT ON FUNCTION gpurec_shards.cheapest_offers(text, text, integer) IS
'gpurec.cheapest_offers over offers sharded by any column: each partition''s k cheapest per product, merged by gpurec_internal._merge_cheapest_offers.';

CREATE FUNCTION gpurec_shards.improve_carts(cluster text, carts_query text, offers_query text)
RETURNS TABLE(cart_id bigint, product_id bigint, quantity bigint, current_store_id bigint,
              current_price numeric, best_store_id bigint, best_price numeric, saving numeric)
LANGUAGE plpgsql VOLATILE STRICT
SET gpurec.timing = off AS $$
DECLARE
    parts integer[] := gpurec_shards_internal.partitions(cluster);
    pair_products bigint[];
    pair_stores bigint[];
    products bigint[];
    st text; msg text; det text; hnt text;
BEGIN
    -- 1. the (product, current store) pairs of every partition's carts, as
    --    improve_carts reads them (_cart_pairs; the lines' quantities are
    --    checked in step 3, where a partition's fault is a refusal)
    SELECT pg_catalog.array_agg(p.product_id ORDER BY p.product_id, p.store_id),
           pg_catalog.array_agg(p.store_id ORDER BY p.product_id, p.store_id),
           pg_catalog.array_agg(DISTINCT p.product_id)
      INTO pair_products, pair_stores, products
      FROM (SELECT DISTINCT t.product_id, t.store_id
            FROM gpurec_shards_internal.cart_pairs(cluster, parts, carts_query) AS t) p;
    -- 2. what a line's answer depends on, from every partition's offers:
    --    the cheapest offer of each product, and the cheapest offer of each
    --    pair at its current store, as every partition's part in gpurec's
    --    binary form; 3. every partition improves its own carts against
    --    the offers of all those parts and sends its rows as one part, each
    --    price in its own type; the engine orders the partitions' rows as
    --    one server does
    RETURN QUERY
    SELECT m.cart_id, m.product_id, m.quantity, m.current_store_id, m.current_price,
           m.best_store_id, m.best_price, m.saving
    FROM gpurec_internal._merge_improve_carts(
             ARRAY(SELECT t.part
                   FROM gpurec_shards_internal.improve_carts_part(
                            cluster, parts, carts_query,
                            gpurec_shards_internal.cart_offer_parts(cluster, parts, offers_query,
                                                                    coalesce(products, '{}'),
                                                                    coalesce(pair_products, '{}'),
                                                                    coalesce(pair_stores, '{}'))) AS t
                   ORDER BY t.shard)) AS m;
EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
    PERFORM gpurec_shards_internal.raise_translated(cluster, st, msg, det, hnt);
END $$;

COMMENT ON FUNCTION gpurec_shards.improve_carts(text, text, text) IS
'gpurec.improve_carts over carts sharded by cart and offers sharded by any column.';

-- The offers the carts' lines depend on, from every partition (every
-- store's cheapest of each of `products`, and of each pair's product the
-- cheapest and its pair's cheapest), as the partitions' parts in partition
-- order: gpurec's binary form, prices in their own type with every digit
-- and bit, read by the partitions' gpurec (partitions whose prices differ
-- in type: 42804).
CREATE FUNCTION gpurec_shards_internal.cart_offer_parts(cluster text, parts integer[], offers_query text,
                                                        products bigint[], pair_products bigint[],
                                                        pair_stores bigint[])
RETURNS bytea[] LANGUAGE sql
SET search_path = pg_catalog, pg_temp AS $$
    SELECT ARRAY(SELECT t.part
                 FROM gpurec_shards_internal.cart_offers(cluster, parts, offers_query, products, pair_products,
                                                         pair_stores) AS t
                 ORDER BY t.shard);
$$;

CREATE FUNCTION gpurec_shards.optimize_carts(cluster text, carts_query text, offers_query text, shipping_query text)
RETURNS TABLE(cart_id bigint, product_id bigint, quantity bigint, store_id bigint, price numeric,
              total numeric, shipping numeric, stores_used integer, complete boolean,
              current_total numeric, saving numeric)
LANGUAGE plpgsql VOLATILE STRICT
SET gpurec.timing = off AS $$
DECLARE
    parts integer[] := gpurec_shards_internal.partitions(cluster);
    line_shards integer[];
    line_carts bigint[];
    products bigint[];
    shipping bytea;
    st text; msg text; det text; hnt text;
BEGIN
    -- 1. every partition's carts' products; a cart two partitions hold is
    --    refused, as its lines must be assigned together
    SELECT pg_catalog.array_agg(c.shard), pg_catalog.array_agg(c.cart_id), pg_catalog.array_agg(DISTINCT c.product_id)
      INTO line_shards, line_carts, products
      FROM gpurec_shards_internal.cart_products(cluster, parts, carts_query) AS c;
    PERFORM gpurec_shards_internal.unsplit(cluster, 'cart', line_shards, line_carts);
    -- 2. shipping, read once on the coordinator as optimize_carts reads it
    --    (a small table every partition needs whole), as one part in
    --    gpurec's binary form: fee and free_from in their own types
    shipping := gpurec_internal._shipping_part(shipping_query);
    -- 3. every partition optimizes its own carts against every store's
    --    offer of their products, from every partition, and sends its rows
    --    as one part; the engine orders the partitions' rows as one server
    --    does
    RETURN QUERY
    SELECT m.cart_id, m.product_id, m.quantity, m.store_id, m.price, m.total, m.shipping, m.stores_used,
           m.complete, m.current_total, m.saving
    FROM gpurec_internal._merge_optimize_carts(
             ARRAY(SELECT t.part
                   FROM gpurec_shards_internal.optimize_carts_part(
                            cluster, parts, carts_query,
                            gpurec_shards_internal.cart_offer_parts(cluster, parts, offers_query,
                                                                    coalesce(products, '{}'), NULL, NULL),
                            shipping) AS t
                   ORDER BY t.shard)) AS m;
EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
    PERFORM gpurec_shards_internal.raise_translated(cluster, st, msg, det, hnt);
END $$;

COMMENT ON FUNCTION gpurec_shards.optimize_carts(text, text, text, text) IS
'gpurec.optimize_carts over carts sharded by cart and offers sharded by any column; shipping_query runs on the coordinator, and reaches the partitions in binary.';

-- ------------------------------------------------------------ ROC fitness --

CREATE FUNCTION gpurec_shards.roc_fitness(cluster text, scores_query text)
RETURNS TABLE(individual_id bigint, auc float8, fitness float8, n_positive bigint,
              n_negative bigint, lowest_positive_rank bigint, highest_positive_rank bigint)
LANGUAGE plpgsql VOLATILE STRICT
SET gpurec.timing = off AS $$
DECLARE
    st text; msg text; det text; hnt text;
BEGIN
    -- an individual's examples live on one partition, where its counts
    -- are whole: the engine merges the partitions' rows (ids and counts,
    -- in binary) into id order, refusing an individual two of them hold
    RETURN QUERY
    SELECT m.individual_id, m.auc, m.fitness, m.n_positive, m.n_negative,
           m.lowest_positive_rank, m.highest_positive_rank
    FROM gpurec_internal._merge_roc_fitness(
             cluster, gpurec_shards_internal.roc_fitness_parts(cluster, scores_query, NULL)) AS m;
EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
    PERFORM gpurec_shards_internal.raise_translated(cluster, st, msg, det, hnt);
END $$;

COMMENT ON FUNCTION gpurec_shards.roc_fitness(text, text) IS
'gpurec.roc_fitness (long format) over examples sharded by individual.';

CREATE FUNCTION gpurec_shards.roc_fitness(cluster text, population_query text, labels anycompatiblearray)
RETURNS TABLE(individual_id bigint, auc float8, fitness float8, n_positive bigint,
              n_negative bigint, lowest_positive_rank bigint, highest_positive_rank bigint)
LANGUAGE plpgsql VOLATILE STRICT
SET gpurec.timing = off AS $$
DECLARE
    st text; msg text; det text; hnt text;
BEGIN
    -- an individual's examples live on one partition, where its counts
    -- are whole: the engine merges the partitions' rows (ids and counts,
    -- in binary) into id order, refusing an individual two of them hold
    RETURN QUERY
    SELECT m.individual_id, m.auc, m.fitness, m.n_positive, m.n_negative,
           m.lowest_positive_rank, m.highest_positive_rank
    FROM gpurec_internal._merge_roc_fitness(
             cluster, gpurec_shards_internal.roc_fitness_parts(cluster, population_query, labels)) AS m;
EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
    PERFORM gpurec_shards_internal.raise_translated(cluster, st, msg, det, hnt);
END $$;

COMMENT ON FUNCTION gpurec_shards.roc_fitness(text, text, anycompatiblearray) IS
'gpurec.roc_fitness (array format) over a population sharded by individual.';

CREATE FUNCTION gpurec_shards.roc_auc(cluster text, population_query text, labels anycompatiblearray)
RETURNS TABLE(individual_id bigint, auc float8)
LANGUAGE plpgsql VOLATILE STRICT
SET gpurec.timing = off AS $$
DECLARE
    st text; msg text; det text; hnt text;
BEGIN
    -- an individual's examples live on one partition, where its counts
    -- are whole: the engine merges the partitions' rows (ids and counts,
    -- in binary) into id order, refusing an individual two of them hold
    RETURN QUERY
    SELECT m.individual_id, m.auc
    FROM gpurec_internal._merge_roc_auc(
             cluster, gpurec_shards_internal.roc_fitness_parts(cluster, population_query, labels)) AS m;
EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
    PERFORM gpurec_shards_internal.raise_translated(cluster, st, msg, det, hnt);
END $$;

COMMENT ON FUNCTION gpurec_shards.roc_auc(text, text, anycompatiblearray) IS
'gpurec.roc_auc of every individual of population_query (individual_id, scores) on every partition.';

-- ------------------------------------------------------------- geospatial --

-- The candidates query's rows, read on the coordinator by gpurec's reader
-- in their order, as one part every partition reads in that order
-- (_candidates_part: ids and coordinates in binary, every bit of a
-- float8), and their ids.
CREATE FUNCTION gpurec_shards_internal.candidates(candidates_query text, metric text, OUT part bytea, OUT ids bigint[])
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    part := gpurec_internal._candidates_part(candidates_query, metric);
    ids := ARRAY(SELECT c.candidate_id FROM gpurec_internal._candidate_ids(part) AS c ORDER BY c.n);
END $$;

CREATE FUNCTION gpurec_shards.user_similarity(cluster text, points_query text, main_user bigint,
                                metric text DEFAULT 'euclidean', epsilon float8 DEFAULT NULL)
RETURNS TABLE(user_id bigint, similarity float8, mean_min_distance float8)
LANGUAGE plpgsql VOLATILE
SET gpurec.timing = off AS $$
DECLARE
    parts integer[];
    main_points bytea;
    st text; msg text; det text; hnt text;
BEGIN
    IF cluster IS NULL OR points_query IS NULL OR main_user IS NULL OR metric IS NULL THEN
        RETURN;  -- as gpurec.user_similarity: a NULL argument, no rows
    END IF;
    parts := gpurec_shards_internal.partitions(cluster);
    -- the engine's argument checks on the main user alone
    PERFORM gpurec.user_similarity(pg_catalog.format('SELECT %L::bigint AS user_id, 0::float8 AS x, 0::float8 AS y', main_user),
                                   main_user, metric, epsilon);
    main_points := gpurec_shards_internal.points_part(cluster, parts, points_query, ARRAY[main_user], metric, epsilon);
    IF main_points IS NULL THEN
        -- the engine's own error for a main user without points
        PERFORM gpurec.user_similarity('SELECT 1::bigint AS user_id, 0::float8 AS x, 0::float8 AS y WHERE false',
                                       main_user, metric, epsilon);
    END IF;
    -- the similarity of a user to the main user needs the two users' points
    -- only: each partition measures its own users, the main user's points
    -- sent to all; the engine merges their parts in user order, refusing a
    -- user that two partitions hold
    RETURN QUERY
    SELECT m.user_id, m.similarity, m.mean_min_distance
    FROM gpurec_internal._merge_user_similarity(
             cluster, ARRAY(SELECT t.part
                            FROM gpurec_shards_internal.user_similarity_part(cluster, parts, points_query, main_user,
                                                                             metric, epsilon, main_points) AS t
                            ORDER BY t.shard)) AS m;
EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
    PERFORM gpurec_shards_internal.raise_translated(cluster, st, msg, det, hnt);
END $$;

COMMENT ON FUNCTION gpurec_shards.user_similarity(text, text, bigint, text, float8) IS
'gpurec.user_similarity over points sharded by user: the main user''s points travel to every partition.';

CREATE FUNCTION gpurec_shards.similar_users(cluster text, points_query text, k integer DEFAULT 10,
                              metric text DEFAULT 'euclidean', epsilon float8 DEFAULT NULL)
RETURNS TABLE(user_id bigint, rank integer, other_user_id bigint, similarity float8)
LANGUAGE plpgsql VOLATILE
SET gpurec.timing = off AS $$
DECLARE
    parts integer[];
    points bytea;
    st text; msg text; det text; hnt text;
BEGIN
    IF cluster IS NULL OR points_query IS NULL OR k IS NULL OR metric IS NULL THEN
        RETURN;
    END IF;
    parts := gpurec_shards_internal.partitions(cluster);
    PERFORM gpurec.similar_users('SELECT 1::bigint AS user_id, 0::float8 AS x, 0::float8 AS y', k, metric, epsilon);
    -- every user's k most similar others may be on any partition: the
    -- coordinator gathers every partition's points (in binary, a user on
    -- one partition), and sends them once to every partition, which ranks
    -- a part of the users (the engine's division, the same on every
    -- partition, which then holds the same points) against all of them.
    -- The engine merges the lists, checking that they cover every user
    -- once, as the partitions divide the users alike only on the same kind
    -- of device.
    points := gpurec_shards_internal.points_part(cluster, parts, points_query, NULL, metric, epsilon);
    RETURN QUERY
    SELECT m.user_id, m.rank, m.other_user_id, m.similarity
    FROM gpurec_internal._merge_similar_users(
             cluster, points,
             ARRAY(SELECT t.part
                   FROM gpurec_shards_internal.similar_users_part(cluster, parts, points_query, pg_catalog.cardinality(parts),
                                                                  k, metric, epsilon, points) AS t
                   ORDER BY t.shard)) AS m;
EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
    PERFORM gpurec_shards_internal.raise_translated(cluster, st, msg, det, hnt);
END $$;

COMMENT ON FUNCTION gpurec_shards.similar_users(text, text, integer, text, float8) IS
'gpurec.similar_users over points sharded by user: every partition gets all points once, in binary, and ranks a part of the users.';

CREATE FUNCTION gpurec_shards.predict_strength(cluster text, points_query text, main_user bigint, candidates_query text,
                                 exponent float8 DEFAULT 2, max_distance float8 DEFAULT NULL,
                                 min_similarity float8 DEFAULT 0,
                                 metric text DEFAULT 'euclidean', epsilon float8 DEFAULT NULL)
RETURNS TABLE(candidate_id bigint, strength float8)
LANGUAGE plpgsql VOLATILE
SET gpurec.timing = off AS $$
DECLARE
    parts integer[];
    main_points bytea;
    cands record;
    st text; msg text; det text; hnt text;
BEGIN
    IF cluster IS NULL OR points_query IS NULL OR main_user IS NULL OR candidates_query IS NULL
       OR exponent IS NULL OR min_similarity IS NULL OR metric IS NULL THEN
        RETURN;
    END IF;
    parts := gpurec_shards_internal.partitions(cluster);
    PERFORM gpurec.predict_strength(pg_catalog.format('SELECT %L::bigint AS user_id, 0::float8 AS x, 0::float8 AS y', main_user),
                                    main_user,
                                    'SELECT 1::bigint AS candidate_id, 0::float8 AS x, 0::float8 AS y WHERE false',
                                    exponent, max_distance, min_similarity, metric, epsilon);
    PERFORM gpurec_shards_internal.refuse_split_users(cluster, parts, points_query, metric);
    main_points := gpurec_shards_internal.points_part(cluster, parts, points_query, ARRAY[main_user], metric, epsilon);
    IF main_points IS NULL THEN
        PERFORM gpurec.predict_strength('SELECT 1::bigint AS user_id, 0::float8 AS x, 0::float8 AS y WHERE false',
                                        main_user,
                                        'SELECT 1::bigint AS candidate_id, 0::float8 AS x, 0::float8 AS y',
                                        exponent, max_distance, min_similarity, metric, epsilon);
    END IF;
    cands := gpurec_shards_internal.candidates(candidates_query, metric);
    IF pg_catalog.cardinality(cands.ids) = 0 THEN
        RETURN;
    END IF;
    -- a strength is a sum over users: each partition sums its own users
    -- (the main user's points sent to all), the engine adds the
    -- partitions' sums in partition order
    RETURN QUERY
    SELECT cands.ids[s.n], s.strength
    FROM gpurec_internal._merge_strengths(
             ARRAY(SELECT t.part
                   FROM gpurec_shards_internal.predict_strength_part(cluster, parts, points_query, main_user,
                                                                     cands.part, exponent, max_distance,
                                                                     min_similarity, metric, epsilon,
                                                                     main_points) AS t
                   ORDER BY t.shard)) AS s
    ORDER BY s.n;
EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
    PERFORM gpurec_shards_internal.raise_translated(cluster, st, msg, det, hnt);
END $$;

COMMENT ON FUNCTION gpurec_shards.predict_strength(text, text, bigint, text, float8, float8, float8, text, float8) IS
'gpurec.predict_strength over points sharded by user; candidates_query runs on the coordinator, and its rows reach the partitions in binary.';

-- For each of q_exponents (e: its place), the mean AUC over the evaluated
-- users (q_users, their points in q_remote) and their count: each
-- partition gives, for every evaluated user and exponent, the strengths
-- its own users give every candidate (a part); the engine adds them up and
-- takes each user's AUC with gpurec's own (gpurec.roc_auc: the engine's
-- AUC, ties counting half), summed in user order as the engine sums them.
CREATE FUNCTION gpurec_shards_internal.mean_aucs(cluster text, parts integer[], q_points text, q_users bigint[],
                                                 q_remote bytea, q_exponents float8[], q_candidates bytea,
                                                 q_visit_users bigint[], q_visit_rows bigint[],
                                                 q_max_distance float8, q_min_similarity float8, q_metric text,
                                                 q_epsilon float8)
RETURNS TABLE(e bigint, mean_auc float8, users bigint) LANGUAGE sql
SET search_path = pg_catalog, pg_temp AS $$
    WITH strengths AS (
        SELECT p.u, p.e, s.n AS c, s.strength
        FROM (SELECT t.u, t.e, array_agg(t.part ORDER BY t.shard) AS parts
              FROM gpurec_shards_internal.fit_strengths(cluster, parts, q_points, q_users, q_exponents,
                                                        q_candidates, q_max_distance, q_min_similarity, q_metric,
                                                        q_epsilon, q_remote) AS t
              GROUP BY t.u, t.e) p
        CROSS JOIN LATERAL gpurec_internal._merge_strengths(p.parts) AS s),
    -- both arrays of a group take its rows in one order, each row fed to
    -- every aggregate in turn: no ORDER BY, which would sort each apart
    aucs AS (
        SELECT s.u, s.e, gpurec.roc_auc(array_agg(s.strength), array_agg(v.n IS NOT NULL)) AS auc
        FROM strengths s
        LEFT JOIN (SELECT DISTINCT v.user_id, v.n FROM unnest(q_visit_users, q_visit_rows) AS v(user_id, n)) v
               ON v.user_id = s.u AND v.n = s.c
        GROUP BY s.u, s.e)
    SELECT a.e, sum(a.auc ORDER BY a.u) / count(*)::float8, count(*)
    FROM aucs a
    GROUP BY a.e;
$$;

CREATE FUNCTION gpurec_shards.fit_exponent(cluster text, points_query text, holdout_query text, candidates_query text,
                             exponents float8[] DEFAULT '{1,1.5,2,2.5,3}',
                             max_distance float8 DEFAULT NULL, min_similarity float8 DEFAULT 0,
                             metric text DEFAULT 'euclidean', epsilon float8 DEFAULT NULL,
                             tolerance float8 DEFAULT 0.001)
RETURNS TABLE(exponent float8, mean_auc float8, users bigint,
              fitted_exponent float8, fitted_mean_auc float8)
LANGUAGE plpgsql VOLATILE
SET gpurec.timing = off AS $$
DECLARE
    parts integer[];
    cands record;
    visit_users bigint[];
    visit_rows bigint[];
    visit_points bytea;
    missing bigint;
    evaluated bigint[];
    grid_means float8[];
    grid_users bigint[];
    probes float8[];
    probed_means float8[] := '{}';
    found_exponent float8;
    found_auc float8;
    st text; msg text; det text; hnt text;
BEGIN
    IF cluster IS NULL OR points_query IS NULL OR holdout_query IS NULL OR candidates_query IS NULL
       OR exponents IS NULL OR min_similarity IS NULL OR metric IS NULL THEN
        RETURN;
    END IF;
    parts := gpurec_shards_internal.partitions(cluster);
    PERFORM gpurec.fit_exponent('SELECT 1::bigint AS user_id, 0::float8 AS x, 0::float8 AS y',
                                'SELECT 1::bigint AS user_id, 1::bigint AS candidate_id WHERE false',
                                'SELECT 1::bigint AS candidate_id, 0::float8 AS x, 0::float8 AS y',
                                exponents, max_distance, min_similarity, metric, epsilon, tolerance);
    PERFORM gpurec_shards_internal.refuse_split_users(cluster, parts, points_query, metric);
    cands := gpurec_shards_internal.candidates(candidates_query, metric);
    -- each holdout user's visited candidate rows (every row of a named id;
    -- an id naming no row leaves the user a holdout user with no visit)
    SELECT pg_catalog.array_agg(v.user_id), pg_catalog.array_agg(v.n) INTO visit_users, visit_rows
      FROM (SELECT DISTINCT h.user_id, c.n FROM gpurec_internal._holdout_rows(holdout_query) AS h
            LEFT JOIN pg_catalog.unnest(coalesce(cands.ids, '{}')) WITH ORDINALITY AS c(id, n) ON c.id = h.candidate_id) AS v;
    IF visit_users IS NOT NULL THEN
        -- the holdout users' points, in binary, for every partition
        visit_points := gpurec_shards_internal.points_part(cluster, parts, points_query, visit_users, metric, epsilon);
        SELECT pg_catalog.min(v.u) INTO missing
          FROM pg_catalog.unnest(visit_users) AS v(u)
         WHERE v.u NOT IN (SELECT p.user_id FROM gpurec_internal._geo_points_users(visit_points) AS p);
        IF missing IS NOT NULL THEN
            -- the engine's own error for a holdout user without points
            PERFORM gpurec.fit_exponent('SELECT 1::bigint AS user_id, 0::float8 AS x, 0::float8 AS y WHERE false',
                                        pg_catalog.format('SELECT %L::bigint AS user_id, 1::bigint AS candidate_id', missing),
                                        'SELECT 1::bigint AS candidate_id, 0::float8 AS x, 0::float8 AS y',
                                        exponents, max_distance, min_similarity, metric, epsilon);
        END IF;
    END IF;
    -- the users with a visited and an unvisited candidate row, in id order
    SELECT pg_catalog.array_agg(v.user_id ORDER BY v.user_id) INTO evaluated
      FROM (SELECT v.user_id, pg_catalog.count(DISTINCT v.n) AS visited FROM ROWS FROM (pg_catalog.unnest(visit_users), pg_catalog.unnest(visit_rows)) AS v(user_id, n)
            GROUP BY v.user_id) v
     WHERE v.visited > 0 AND v.visited < coalesce(pg_catalog.cardinality(cands.ids), 0);
    IF evaluated IS NULL THEN
        RETURN QUERY SELECT e.x, NULL::float8, 0::bigint, NULL::float8, NULL::float8
                     FROM pg_catalog.unnest(exponents) WITH ORDINALITY AS e(x, n) ORDER BY e.x, e.n;
        RETURN;
    END IF;
    -- the grid's mean AUCs, then fit_exponent's own search (the engine's,
    -- replayed from the means so far) round by round over the partitions:
    -- the same means give the same fit as on one server
    SELECT pg_catalog.array_agg(m.mean_auc ORDER BY m.e), pg_catalog.array_agg(m.users ORDER BY m.e) INTO grid_means, grid_users
      FROM gpurec_shards_internal.mean_aucs(cluster, parts, points_query, evaluated, visit_points, exponents,
                                            cands.part, visit_users, visit_rows, max_distance, min_similarity,
                                            metric, epsilon) AS m;
    IF tolerance IS NOT NULL THEN
        LOOP
            SELECT pg_catalog.array_agg(z.probe ORDER BY z.n) FILTER (WHERE z.probe IS NOT NULL),
                   pg_catalog.max(z.fitted_exponent), pg_catalog.max(z.fitted_mean_auc)
              INTO probes, found_exponent, found_auc
              FROM gpurec_internal._exponent_search(exponents, grid_means, tolerance, probed_means)
                   WITH ORDINALITY AS z(probe, fitted_exponent, fitted_mean_auc, n);
            EXIT WHEN probes IS NULL;
            probed_means := pg_catalog.array_cat(
                probed_means,
                ARRAY(SELECT m.mean_auc
                      FROM gpurec_shards_internal.mean_aucs(cluster, parts, points_query, evaluated,
                                                            visit_points, probes, cands.part, visit_users,
                                                            visit_rows, max_distance, min_similarity, metric,
                                                            epsilon) AS m
                      ORDER BY m.e));
        END LOOP;
    END IF;
    RETURN QUERY
    SELECT g.x, g.mean_auc, g.users, found_exponent, found_auc
    FROM ROWS FROM (pg_catalog.unnest(exponents), pg_catalog.unnest(grid_means), pg_catalog.unnest(grid_users))
         WITH ORDINALITY AS g(x, mean_auc, users, n)
    ORDER BY g.x, g.n;
EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
    PERFORM gpurec_shards_internal.raise_translated(cluster, st, msg, det, hnt);
END $$;

COMMENT ON FUNCTION gpurec_shards.fit_exponent(text, text, text, text, float8[], float8, float8, text, float8, float8) IS
'gpurec.fit_exponent over points sharded by user, its continuous search included; holdout_query and candidates_query run on the coordinator.';
