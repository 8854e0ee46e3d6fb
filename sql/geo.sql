-- gpurec geospatial recommender: user_similarity, similar_users, predict_strength, fit_exponent
CREATE TABLE visits (user_id integer, x numeric, y double precision, note text DEFAULT 'x');
INSERT INTO visits (user_id, x, y) VALUES
  (1, 0, 0), (1, 10, 10),            -- A = 1, B = 2: not symmetric
  (2, 4, 4),
  (3, 0, 0), (3, 10, 10), (3, 0, 0), -- the same places as user 1 (one twice)
  (4, 1, 0),                         -- 4 and 5 mirror each other around user 1
  (5, 0, 1),
  (6, NULL, 3), (NULL, 1, 1),        -- rows with a NULL are skipped
  (7, 10, NULL);                     -- so user 7 has no points
-- similarity of B to A = 1 / ((sqrt(32) + sqrt(72)) / 2); of A to B = 1 / sqrt(32)
SELECT * FROM gpurec.user_similarity('SELECT user_id, x, y FROM visits WHERE user_id IN (1, 2)', 1);
SELECT * FROM gpurec.user_similarity('SELECT user_id, x, y FROM visits WHERE user_id IN (1, 2)', 2);
SELECT 1 / ((sqrt(32) + sqrt(72)) / 2) AS b_to_a, 1 / sqrt(32) AS a_to_b;
-- identical points: large but finite (1 / epsilon); the raw mean is 0
SELECT * FROM gpurec.user_similarity('SELECT user_id, x, y FROM visits', 1);
SELECT * FROM gpurec.user_similarity('SELECT user_id, x, y FROM visits', 1, epsilon => 0.5);
-- columns by name, any integer and numeric types, extra columns ignored
SELECT * FROM gpurec.user_similarity('SELECT note, y::real AS y, x::float8 AS x, user_id::smallint AS user_id FROM visits', 4);
-- small distances between large coordinates keep their digits
SELECT * FROM gpurec.user_similarity($$SELECT * FROM (VALUES (1, 1e12, 1e12), (2, 1e12 + 3, 1e12 + 4), (3, 1e12 + 0.5, 1e12)) v(user_id, x, y)$$, 1);

-- similar_users: k defaults to 10; equal similarities rank the lower other_user_id first
SELECT * FROM gpurec.similar_users('SELECT user_id, x, y FROM visits');
SELECT * FROM gpurec.similar_users('SELECT user_id, x, y FROM visits', 1);
SELECT * FROM gpurec.similar_users('SELECT user_id, x, y FROM visits WHERE user_id = 1', 3);

-- haversine: x = longitude, y = latitude; Paris, London, New York
CREATE TABLE cities (user_id bigint, lon float8, lat float8);
INSERT INTO cities VALUES (1, 2.3522, 48.8566), (2, -0.1276, 51.5072), (3, -74.0060, 40.7128),
  (4, -179.9999, 10), (5, 179.9999, 10);
SELECT user_id, round(mean_min_distance::numeric, 3) AS metres
FROM gpurec.user_similarity('SELECT user_id, lon AS x, lat AS y FROM cities', 1, 'haversine');
-- across the date line, 21.9 m apart
SELECT user_id, round(mean_min_distance::numeric, 6) AS metres
FROM gpurec.user_similarity('SELECT user_id, lon AS x, lat AS y FROM cities', 4, metric => 'HAVERSINE');
SELECT * FROM gpurec.similar_users('SELECT user_id, lon AS x, lat AS y FROM cities', 2, 'haversine');

-- predict_strength: every candidate row gets a row, in input order (ids may repeat)
CREATE TABLE places (candidate_id bigint, x float8, y float8);
INSERT INTO places VALUES (10, 0, 0), (11, 5, 5), (12, 100, 100), (10, 0, 0), (13, NULL, 1);
SELECT * FROM gpurec.predict_strength('SELECT user_id, x, y FROM visits', 1, 'SELECT * FROM places');
SELECT * FROM gpurec.predict_strength('SELECT user_id, x, y FROM visits', 1, 'SELECT * FROM places', exponent => 1);
SELECT * FROM gpurec.predict_strength('SELECT user_id, x, y FROM visits', 1, 'SELECT * FROM places', 2, max_distance => 1.5);
SELECT * FROM gpurec.predict_strength('SELECT user_id, x, y FROM visits', 1, 'SELECT * FROM places', 2, NULL, min_similarity => 0.5);
SELECT * FROM gpurec.predict_strength('SELECT user_id, x, y FROM visits', 1, 'SELECT * FROM places', 2, 0);
-- the same by hand: the similarities to user 1, and the terms
WITH p AS (SELECT user_id, x::float8 AS x, y FROM visits WHERE x IS NOT NULL AND y IS NOT NULL AND user_id IS NOT NULL),
sim AS (SELECT b.user_id, 1 / avg(d) AS s
        FROM (SELECT a.x AS ax, a.y AS ay, b.user_id, greatest(min(sqrt((a.x - b.x)^2 + (a.y - b.y)^2)), 1e-9) AS d
              FROM p a, p b WHERE a.user_id = 1 AND b.user_id <> 1 GROUP BY 1, 2, 3) b
        GROUP BY 1)
SELECT c.row, c.candidate_id, sum(sim.s * greatest(sqrt((p.x - c.x)^2 + (p.y - c.y)^2), 1e-9) ^ (-2)) AS strength
FROM (SELECT row_number() OVER () AS row, * FROM places) c, p JOIN sim USING (user_id)
WHERE c.x IS NOT NULL GROUP BY 1, 2 ORDER BY 1;

-- fit_exponent: user 1 later visited places 11 and 14, user 2 place 12; user 4 every place
INSERT INTO places VALUES (14, 20, 20), (15, 4, 4.5), (16, 9, 9);
CREATE TABLE later (user_id bigint, candidate_id bigint);
INSERT INTO later VALUES (1, 11), (1, 14), (2, 12), (4, 10), (4, 11), (4, 12), (4, 13), (4, 14),
  (4, 15), (4, 16), (NULL, 10), (2, 99);
SELECT * FROM gpurec.fit_exponent('SELECT user_id, x, y FROM visits', 'SELECT * FROM later', 'SELECT * FROM places');
SELECT * FROM gpurec.fit_exponent('SELECT user_id, x, y FROM visits', 'SELECT * FROM later', 'SELECT * FROM places', '{3, 0.5, 2}', max_distance => 50);
-- the exponent decides: user 20 went to place 1, one point of a more similar user 1 away,
-- rather than place 2, five points of a less similar user 2 away
SELECT * FROM gpurec.fit_exponent(
  $$SELECT * FROM (VALUES (20, 0, 0), (21, 10, 0), (22, 0, 12), (22, 0, 12), (22, 0, 12), (22, 0, 12), (22, 0, 12)) v(user_id, x, y)$$,
  'SELECT 20 AS user_id, 1 AS candidate_id',
  'SELECT * FROM (VALUES (1, 11, 0), (2, 0, 14)) v(candidate_id, x, y)');
-- no holdout user with a visited and an unvisited candidate: no mean
SELECT * FROM gpurec.fit_exponent('SELECT user_id, x, y FROM visits', 'SELECT * FROM later WHERE user_id = 4', 'SELECT * FROM places', '{2}');

-- empty inputs
SELECT * FROM gpurec.similar_users('SELECT user_id, x, y FROM visits WHERE false');
SELECT * FROM gpurec.predict_strength('SELECT user_id, x, y FROM visits', 1, 'SELECT * FROM places WHERE false');
-- NULL arguments: no rows (a NULL max_distance means no limit)
SELECT count(*) FROM gpurec.user_similarity(NULL, 1);
SELECT count(*) FROM gpurec.similar_users('SELECT user_id, x, y FROM visits', NULL);
SELECT count(*) FROM gpurec.predict_strength('SELECT user_id, x, y FROM visits', NULL, 'SELECT * FROM places');
SELECT count(*) FROM gpurec.fit_exponent('SELECT user_id, x, y FROM visits', 'SELECT * FROM later', 'SELECT * FROM places', NULL);

-- errors
SELECT * FROM gpurec.user_similarity('SELECT user_id, x, y FROM visits', 1, 'manhattan');
SELECT * FROM gpurec.user_similarity('SELECT user_id, x, y FROM visits', 1, epsilon => 0);
SELECT * FROM gpurec.user_similarity('SELECT user_id, x, y FROM visits', 1, epsilon => -1e-9);
SELECT * FROM gpurec.user_similarity('SELECT user_id, x, y FROM visits', 7);
SELECT * FROM gpurec.user_similarity('SELECT user_id, x, y FROM visits', 99);
SELECT * FROM gpurec.similar_users('SELECT user_id, x, y FROM visits', 0);
SELECT * FROM gpurec.predict_strength('SELECT user_id, x, y FROM visits', 1, 'SELECT * FROM places', 0);
SELECT * FROM gpurec.predict_strength('SELECT user_id, x, y FROM visits', 1, 'SELECT * FROM places', 2, -1);
SELECT * FROM gpurec.predict_strength('SELECT user_id, x, y FROM visits', 1, 'SELECT * FROM places', 2, 'NaN');
SELECT * FROM gpurec.predict_strength('SELECT user_id, x, y FROM visits', 99, 'SELECT * FROM places');
SELECT * FROM gpurec.fit_exponent('SELECT user_id, x, y FROM visits', 'SELECT * FROM later', 'SELECT * FROM places', '{}');
SELECT * FROM gpurec.fit_exponent('SELECT user_id, x, y FROM visits', 'SELECT * FROM later', 'SELECT * FROM places', '{2, NULL}');
SELECT * FROM gpurec.fit_exponent('SELECT user_id, x, y FROM visits', 'SELECT 42 AS user_id, 10 AS candidate_id', 'SELECT * FROM places');
-- bad data names the user or candidate
SELECT * FROM gpurec.similar_users($$SELECT user_id, x, y FROM visits UNION ALL SELECT 8, 'NaN', 0$$);
SELECT * FROM gpurec.similar_users($$SELECT user_id, x, y FROM visits UNION ALL SELECT 9, 0, '-Infinity'$$);
SELECT * FROM gpurec.predict_strength('SELECT user_id, x, y FROM visits', 1, $$SELECT 5 AS candidate_id, 'NaN'::float8 AS x, 0 AS y$$);
SELECT * FROM gpurec.user_similarity('SELECT user_id, x, y FROM visits', 1, 'haversine');
SELECT * FROM gpurec.user_similarity('SELECT user_id, lon AS x, lat AS y FROM cities UNION ALL SELECT 6, 181, 0', 1, 'haversine');
SELECT * FROM gpurec.predict_strength('SELECT user_id, lon AS x, lat AS y FROM cities', 1, 'SELECT 7 AS candidate_id, 0 AS x, -90.5 AS y', metric => 'haversine');
-- missing column, wrong type
SELECT * FROM gpurec.user_similarity('SELECT user_id, x FROM visits', 1);
SELECT * FROM gpurec.user_similarity('SELECT user_id::numeric AS user_id, x, y FROM visits', 1);
SELECT * FROM gpurec.predict_strength('SELECT user_id, x, y FROM visits', 1, 'SELECT x, y FROM places');

-- epsilon NULL (the default) is the metric's own: 1e-9 under euclidean, 10
-- metres under haversine; an explicit epsilon is used as given
SELECT similarity, mean_min_distance FROM gpurec.user_similarity(
  'SELECT 1 AS user_id, 0 AS x, 0 AS y UNION ALL SELECT 2, 0, 0', 1);
SELECT similarity = 1 / 10.0 AS floored_at_10_metres, mean_min_distance FROM gpurec.user_similarity(
  'SELECT 1 AS user_id, -0.1276 AS x, 51.5072 AS y UNION ALL SELECT 2, -0.1276, 51.5072', 1, 'haversine');
SELECT similarity = 1 / 0.5 AS explicit_epsilon FROM gpurec.user_similarity(
  'SELECT 1 AS user_id, -0.1276 AS x, 51.5072 AS y UNION ALL SELECT 2, -0.1276, 51.5072', 1, 'haversine', 0.5);
SELECT count(*) FROM gpurec.similar_users('SELECT user_id, x, y FROM visits', 2, epsilon => NULL);
-- a candidate on another user's check-in and one 5 metres away weigh alike,
-- not 10^16 times apart
SELECT round((max(strength) / min(strength))::numeric, 6) AS on_point_over_5_metres
FROM gpurec.predict_strength(
  'SELECT 1 AS user_id, 13.4050 AS x, 52.5200 AS y UNION ALL SELECT 2, 13.4050, 52.5200 UNION ALL SELECT 2, 13.4200, 52.5300', 1,
  'SELECT 1 AS candidate_id, 13.4050 AS x, 52.5200 AS y UNION ALL SELECT 2, 13.4050 + 5 / (111195.08 * cos(radians(52.52))), 52.5200',
  metric => 'haversine');
-- the NULL rule of the other arguments is unchanged
SELECT count(*) FROM gpurec.user_similarity('SELECT user_id, x, y FROM visits', NULL);
SELECT count(*) FROM gpurec.user_similarity('SELECT user_id, x, y FROM visits', 1, NULL);

-- array arguments are lists: a multidimensional one is ERROR 2202E
SELECT * FROM gpurec.fit_exponent('SELECT user_id, x, y FROM visits', 'SELECT * FROM later', 'SELECT * FROM places', '{{1,2},{3,4}}');
SELECT exponent FROM gpurec.fit_exponent('SELECT user_id, x, y FROM visits', 'SELECT * FROM later', 'SELECT * FROM places', '[0:1]={1,2}');

-- numeric coordinates of any precision are read as double precision
SELECT user_id, similarity FROM gpurec.user_similarity(
  'SELECT 1 AS user_id, 0.12345678901234567890::numeric(30,20) AS x, 0::numeric(30,20) AS y
   UNION ALL SELECT 2, 3.12345678901234567890::numeric(30,20), 4::numeric(30,20)', 1);

-- a numeric beyond double precision's range either way is 22003, as numeric::float8 says
SELECT * FROM gpurec.user_similarity('SELECT 1 AS user_id, 1e-400::numeric AS x, 0 AS y', 1);

-- euclidean coordinates beyond 1e150 would overflow a squared distance: 22003
SELECT * FROM gpurec.user_similarity('SELECT 1 AS user_id, 1e300::float8 AS x, 0 AS y UNION ALL SELECT 2, -1e300, 0', 1);
SELECT * FROM gpurec.predict_strength('SELECT user_id, x, y FROM visits', 1, 'SELECT 9 AS candidate_id, 0 AS x, -2e150::float8 AS y');
SELECT similarity FROM gpurec.user_similarity('SELECT 1 AS user_id, 1e150::float8 AS x, 0 AS y UNION ALL SELECT 2, -1e150, 0', 1);
