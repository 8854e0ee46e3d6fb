-- test/data/checkins.sql: a small, realistic check-in history for the
-- geospatial recommender (haversine), generated in SQL.
--
-- Three cities, each of neighbourhoods; venues cluster around neighbourhood
-- centres (a few hundred metres apart), some far more popular than others.
-- Every user lives in one neighbourhood and checks in mostly at popular
-- venues near home, sometimes elsewhere in the city, now and then in
-- another city.  A check-in carries its venue's exact coordinates, as real
-- check-ins do, so users share points exactly.
--
-- psql variables (with defaults): users (600), venues (3000), seed (0.42).
-- Creates venues(venue_id, lon, lat) and checkins(user_id, venue_id, lon,
-- lat, at); the last 20% of each user's check-ins (by `at`) are the later
-- visits to predict.
\if :{?users} \else \set users 600 \endif
\if :{?venues} \else \set venues 3000 \endif
\if :{?seed} \else \set seed 0.42 \endif

SELECT setseed(:seed);

CREATE TEMP TABLE cities(city int, lon float8, lat float8) ON COMMIT PRESERVE ROWS;
INSERT INTO cities VALUES (0, -0.1276, 51.5072), (1, 13.4050, 52.5200), (2, 2.3522, 48.8566);

-- 30 neighbourhoods a city, within about 8 km of its centre
CREATE TEMP TABLE hoods AS
  SELECT c.city * 30 + h AS hood, c.city,
         c.lon + (random() - 0.5) * 0.22 AS lon, c.lat + (random() - 0.5) * 0.14 AS lat
  FROM cities c, generate_series(0, 29) h;

-- venues around neighbourhood centres (sd ~ 400 m), popularity ~ Zipf
DROP TABLE IF EXISTS venues;
CREATE TABLE venues AS
  SELECT v AS venue_id, h.hood, h.city,
         h.lon + sqrt(-2 * ln(1 - random())) * cos(2 * pi() * random()) * 0.006 AS lon,
         h.lat + sqrt(-2 * ln(1 - random())) * cos(2 * pi() * random()) * 0.0036 AS lat,
         1.0 / (1 + floor(random() * 50)) AS popularity
  FROM generate_series(1, :venues) v
  JOIN hoods h ON h.hood = (v * 7919) % 90;

CREATE TEMP TABLE users AS
  SELECT u AS user_id, home, n,
         ARRAY(SELECT h2.hood FROM hoods h2, hoods h1
               WHERE h1.hood = home AND h2.city = h1.city
               ORDER BY (h2.lon - h1.lon) ^ 2 + (h2.lat - h1.lat) ^ 2 LIMIT 3) AS near
  FROM (SELECT u, floor(random() * 90)::int AS home, 20 + floor(random() * 41)::int AS n
        FROM generate_series(1, :users) u) s;

-- each check-in: 75% a venue of the home neighbourhood or its two nearest,
-- 20% anywhere in the home city, 5% anywhere; venues drawn by popularity
-- (the least of Exp(popularity) draws)
DROP TABLE IF EXISTS checkins;
CREATE TABLE checkins AS
WITH draws AS (
  SELECT u.user_id, u.home, u.near, i, random() AS kind
  FROM users u, generate_series(1, 60) i
  WHERE i <= u.n
)
SELECT d.user_id, v.venue_id, v.lon, v.lat,
       timestamp '2026-01-01' + (d.i * interval '5 days') + random() * interval '4 days' AS at
FROM draws d
CROSS JOIN LATERAL (
  SELECT v.venue_id, v.lon, v.lat
  FROM venues v
  WHERE CASE WHEN d.kind < 0.75 THEN v.hood = ANY (d.near)
             WHEN d.kind < 0.95 THEN v.city = d.home / 30
             ELSE d.kind >= 0.95 END
  ORDER BY -ln(1 - random() * 0.999999) / v.popularity
  LIMIT 1
) v;

DROP TABLE users;
DROP TABLE hoods;
DROP TABLE cities;
ANALYZE venues;
ANALYZE checkins;
