#!/usr/bin/env python3
"""PostGIS points (geometry(Point, SRID), geography(Point)) in the points and
candidates queries of the geospatial functions, where PostGIS is installed
(SKIP where it is not: gpurec does not need it).

Every run draws fresh points (replay with GPUREC_SEED), with duplicates and
NULLs.  The oracle: the same call on x and y columns holding the very
coordinates (ST_X, ST_Y of the PostGIS values), whose answers the other
property tests check; the rows must be equal bit for bit, under
gpurec.device = cpu and gpu where one is usable (else auto):
  * geography(Point) and geometry(Point, 4326) with metric 'haversine';
  * geometry(Point, 3857) with 'euclidean' (planar units);
  * a NULL point skips its row, as a NULL x does.
Errors, each with its SQLSTATE: a geography or SRID 4326 under euclidean
and a planar SRID under haversine (22023, the hint names the metric), a
linestring (22023), an empty point (22023), mixed SRIDs in one column
(22023) and between the points and the candidates (22023), two PostGIS
columns (42702).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from pgtest import check, drop_database, fresh_database, seeded_random, skip, sql, sql_error  # noqa: E402

rng = seeded_random()
DB = "gpurec_property_postgis"


def lit(text):
    assert "$q$" not in text
    return f"$q${text}$q$"


def make_tables():
    """points: user_id, lon, lat, and the same as geography and geometry of SRIDs 4326 and 3857."""
    rows = []
    for user in range(rng.randint(3, 30)):
        for _ in range(rng.randint(1, 8)):
            lon = round(rng.uniform(-20, 20), rng.choice([0, 3, 9]))
            lat = round(rng.uniform(-60, 60), rng.choice([0, 3, 9]))
            rows.append(f"({user}, {lon}, {lat})")
    rows.append("(NULL, 1, 1)")
    cands = [f"({c}, {round(rng.uniform(-20, 20), 4)}, {round(rng.uniform(-60, 60), 4)})"
             for c in range(rng.randint(1, 12))]
    sql(f"""DROP TABLE IF EXISTS pts, cands;
CREATE TABLE pts (user_id int, lon float8, lat float8);
INSERT INTO pts VALUES {",".join(rows)};
INSERT INTO pts SELECT user_id, lon, lat FROM pts WHERE user_id IS NOT NULL ORDER BY random() LIMIT 5;
ALTER TABLE pts ADD COLUMN geog geography(Point), ADD COLUMN geom4326 geometry(Point, 4326),
                ADD COLUMN geom3857 geometry(Point, 3857);
UPDATE pts SET geog = ST_SetSRID(ST_MakePoint(lon, lat), 4326)::geography,
               geom4326 = ST_SetSRID(ST_MakePoint(lon, lat), 4326),
               geom3857 = ST_SetSRID(ST_MakePoint(lon * 1000, lat * 1000), 3857);
INSERT INTO pts (user_id) VALUES (1);  -- a NULL point: skipped, as a NULL x is
CREATE TABLE cands (candidate_id int, lon float8, lat float8);
INSERT INTO cands VALUES {",".join(cands)};
ALTER TABLE cands ADD COLUMN geog geography(Point), ADD COLUMN geom4326 geometry(Point, 4326),
                  ADD COLUMN geom3857 geometry(Point, 3857);
UPDATE cands SET geog = ST_SetSRID(ST_MakePoint(lon, lat), 4326)::geography,
                 geom4326 = ST_SetSRID(ST_MakePoint(lon, lat), 4326),
                 geom3857 = ST_SetSRID(ST_MakePoint(lon * 1000, lat * 1000), 3857);""")


FORMS = [
    # (name, point column, metric, x and y as the point holds them)
    ("geography", "geog", "haversine", "ST_X(geog::geometry) AS x, ST_Y(geog::geometry) AS y"),
    ("geometry 4326", "geom4326", "haversine", "ST_X(geom4326) AS x, ST_Y(geom4326) AS y"),
    ("geometry 3857", "geom3857", "euclidean", "ST_X(geom3857) AS x, ST_Y(geom3857) AS y"),
]


def check_forms(devices):
    for name, column, metric, xy in FORMS:
        points_p = lit(f"SELECT user_id, {column} FROM pts")
        points_xy = lit(f"SELECT user_id, {xy} FROM pts")
        cands_p = lit(f"SELECT candidate_id, {column} AS place FROM cands ORDER BY candidate_id")
        cands_xy = lit(f"SELECT candidate_id, {xy} FROM cands ORDER BY candidate_id")
        main = sql("SELECT min(user_id) FROM pts")[0][0]
        k = rng.randint(1, 4)
        for device in devices:
            s = {"gpurec.device": device}
            calls = [
                ("similar_users", f"gpurec.similar_users({{p}}, {k}, '{metric}')"),
                ("user_similarity", f"gpurec.user_similarity({{p}}, {main}, '{metric}')"),
                ("predict_strength", f"gpurec.predict_strength({{p}}, {main}, {{c}}, metric => '{metric}')"),
                ("fit_exponent", f"gpurec.fit_exponent({{p}}, 'SELECT user_id, candidate_id FROM pts, cands "
                                 f"WHERE user_id % 3 = candidate_id % 3', {{c}}, metric => '{metric}')"),
            ]
            for fn, call in calls:
                got = sql("SELECT * FROM " + call.format(p=points_p, c=cands_p), settings=s)
                want = sql("SELECT * FROM " + call.format(p=points_xy, c=cands_xy), settings=s)
                check(f"{fn} on {name} points ({device}): as on their x and y", got == want and len(want) > 0,
                      f"{len(got)} rows against {len(want)}; {got[:2]} against {want[:2]}")


def check_errors():
    def expect(name, query, state, words=()):
        err = sql_error(query)
        check(name, err is not None and err[0] == state and all(w in err[1] for w in words), str(err))

    expect("geography under euclidean is 22023",
           "SELECT * FROM gpurec.similar_users('SELECT user_id, geog FROM pts', 2)", "22023", ["geog"])
    expect("geometry 4326 under euclidean is 22023",
           "SELECT * FROM gpurec.similar_users('SELECT user_id, geom4326 FROM pts', 2)", "22023")
    expect("geometry 3857 under haversine is 22023",
           "SELECT * FROM gpurec.similar_users('SELECT user_id, geom3857 FROM pts', 2, 'haversine')", "22023")
    expect("a linestring is 22023",
           "SELECT * FROM gpurec.similar_users('SELECT 1 AS user_id, ST_MakeLine(ST_MakePoint(0, 0), "
           "ST_MakePoint(1, 1)) AS geom', 2)", "22023", ["linestring"])
    expect("an empty point is 22023",
           "SELECT * FROM gpurec.similar_users('SELECT 1 AS user_id, ''POINT EMPTY''::geometry AS geom', 2)",
           "22023", ["empty"])
    expect("mixed SRIDs in one column are 22023",
           "SELECT * FROM gpurec.similar_users('SELECT 1 AS user_id, ST_SetSRID(ST_MakePoint(0, 0), 3857) AS geom "
           "UNION ALL SELECT 2, ST_SetSRID(ST_MakePoint(1, 1), 3395)', 2)", "22023", ["3857", "3395"])
    expect("points and candidates of two SRIDs are 22023",
           "SELECT * FROM gpurec.predict_strength('SELECT user_id, geom3857 FROM pts', 1, "
           "'SELECT 1 AS candidate_id, ST_SetSRID(ST_MakePoint(1, 1), 3395) AS geom')", "22023", ["3857", "3395"])
    # longitudes and latitudes against planar coordinates: no metric fits both, so the error names both SRIDs
    # (the hint ST_Transform), not the metric, whose hint would only move the error to the other query
    expect("lon/lat points and planar candidates are 22023 naming both SRIDs",
           "SELECT * FROM gpurec.predict_strength('SELECT user_id, geom4326 FROM pts', 1, "
           "'SELECT candidate_id, geom3857 FROM cands', 2, NULL, 0, 'haversine')", "22023", ["4326", "3857"])
    expect("planar points and geography candidates are 22023 naming both SRIDs",
           "SELECT * FROM gpurec.predict_strength('SELECT user_id, geom3857 FROM pts', 1, "
           "'SELECT candidate_id, geog FROM cands')", "22023", ["4326", "3857"])
    # a type of PostGIS's name that PostGIS did not make is no point: the query lacks x and y
    sql("CREATE SCHEMA IF NOT EXISTS lookalike; DROP TYPE IF EXISTS lookalike.geometry; "
        "CREATE TYPE lookalike.geometry AS (x float8, y float8);")
    expect("a composite type named geometry is not PostGIS's: 42703",
           "SELECT * FROM gpurec.similar_users('SELECT 1 AS user_id, ROW(0, 0)::lookalike.geometry AS g', 2)",
           "42703", ["x"])
    expect("two PostGIS columns are 42702",
           "SELECT * FROM gpurec.similar_users('SELECT user_id, geom3857, geom4326 FROM pts', 2)", "42702")


def main():
    devices = fresh_database(DB)
    if sql("SELECT count(*) FROM pg_available_extensions WHERE name = 'postgis'")[0][0] == "0":
        skip("postgis", "PostGIS is not installed (Debian: postgresql-15-postgis-3)")
        drop_database(DB)
        return
    sql("CREATE EXTENSION postgis")
    make_tables()
    check_forms(devices)
    check_errors()
    drop_database(DB)


if __name__ == "__main__":
    main()
