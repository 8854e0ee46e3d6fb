#!/usr/bin/env python3
"""gpurec's life in ordinary administration.  CREATE EXTENSION makes its
schemas itself, as members of the extension: a schema of their name made
beforehand (by a role that could then replace the functions every role and
every scheduled job calls) is refused with 42P06, running nothing its owner
put there; DROP EXTENSION leaves no schema and no initial privileges
behind, so that another superuser creates it again; pg_dump writes
CREATE EXTENSION alone, and a restore by a superuser other than the one
that created it gives the same answers, the same privileges and the
materialized views' data.  gpurec_shards the same, where PL/Proxy is
installed.
"""
import os
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import robust_lib  # noqa: E402
from robust_lib import admin, check  # noqa: E402

SCHEMAS = "('gpurec', 'gpurec_internal', 'gpurec_shards', 'gpurec_shards_internal')"
OFFERS = "SELECT product_id, store_id, price FROM public.offers"


def schemas_left(s):
    r = s.run(f"SELECT count(*) FROM pg_namespace WHERE nspname IN {SCHEMAS};"
              "SELECT count(*) FROM pg_init_privs i JOIN pg_namespace n ON i.classoid = 'pg_namespace'::regclass "
              f"AND i.objoid = n.oid WHERE n.nspname IN {SCHEMAS};")
    return r.rows


def usage_grants(acl_rows):
    """Each schema's grantees of USAGE alone (PUBLIC as ''), the owner's own entry and grantors left out:
    the restoring superuser owns what it created."""
    return [(name, sorted(e.split("=")[0] for e in (acl or "").strip("{}").split(",") if e.split("/")[0].endswith("=U")))
            for name, acl in acl_rows]


def bin_dir():
    for version in ("17", "16", "15"):
        path = f"/usr/lib/postgresql/{version}/bin"
        if os.path.exists(os.path.join(path, "pg_dump")):
            return path
    return ""


def schemas_made_beforehand(db, s, role):
    # the schema's owner put there a function that an unqualified format() of the script would take in
    # place of pg_catalog's (its exact argument types win) and run as the installing superuser
    db.sql(f"DROP EXTENSION gpurec; CREATE SCHEMA gpurec AUTHORIZATION {role};"
           "CREATE FUNCTION gpurec.format(f text, s name, o text) RETURNS text LANGUAGE sql "
           "AS $$ SELECT 'hijacked' $$;"
           f"ALTER FUNCTION gpurec.format(text, name, text) OWNER TO {role};")
    r = s.run("CREATE EXTENSION gpurec;")
    check("schema-made-beforehand-refused-42P06",
          r.sqlstates() == ["42P06"] and "hijacked" not in r.describe(), r.describe())
    r = s.run("SELECT count(*) FROM pg_extension WHERE extname = 'gpurec';")
    check("schema-made-beforehand-nothing-installed", r.rows == [["0"]], r.describe())
    # one of the installing role's own is no different: the extension's schemas are its own
    r = s.run("DROP SCHEMA gpurec CASCADE; CREATE SCHEMA gpurec_internal; CREATE EXTENSION gpurec;")
    check("own-schema-made-beforehand-refused-42P06", r.sqlstates() == ["42P06"], r.describe())
    r = s.run("DROP SCHEMA gpurec_internal; CREATE EXTENSION gpurec;"
              f"SELECT count(*) FROM gpurec.cheapest_offers('{OFFERS}');")
    check("installs-once-the-schemas-are-gone", not r.errors() and r.rows == [["4"]], r.describe())


def members_and_drop(s, other_superuser):
    r = s.run("SELECT n.nspname FROM pg_depend d JOIN pg_namespace n ON d.classid = 'pg_namespace'::regclass "
              "AND d.objid = n.oid JOIN pg_extension e ON d.refobjid = e.oid "
              "WHERE d.deptype = 'e' AND e.extname = 'gpurec' ORDER BY 1;")
    check("schemas-are-members-of-the-extension", r.rows == [["gpurec"], ["gpurec_internal"]], r.describe())
    r = s.run("DROP EXTENSION gpurec CASCADE;")
    check("drop-extension-leaves-no-schema", not r.errors() and schemas_left(s) == [["0"], ["0"]],
          f"{r.describe()} left {schemas_left(s)}")
    r = s.run(f"SET ROLE {other_superuser}; CREATE EXTENSION gpurec; "
              f"SELECT count(*) FROM gpurec.cheapest_offers('{OFFERS}'); RESET ROLE;")
    check("another-superuser-creates-it-again", not r.errors() and r.rows == [["4"]], r.describe())


def dump_and_restore(db, s, other_superuser):
    """A dump restored by a superuser other than the extension's creator, ownership kept: no error, the
    same rows and privileges."""
    pg_bin = bin_dir()
    if not pg_bin:
        robust_lib.pgtest.skip("dump-restored-by-another-superuser", "no pg_dump")
        return
    role = f"{other_superuser}_analyst"
    s.run(f"DROP ROLE IF EXISTS {role}; CREATE ROLE {role};"
          "CREATE MATERIALIZED VIEW cheapest2 AS SELECT * FROM gpurec.cheapest_offers("
          f"'{OFFERS}', 2);"
          # the README's way for an inner query of another materialized view: the restore refreshes that first
          "CREATE MATERIALIZED VIEW zz_offers AS SELECT * FROM public.offers;"
          "CREATE MATERIALIZED VIEW aa_cheapest2 AS SELECT * FROM gpurec.cheapest_offers("
          "'SELECT product_id, store_id, price FROM public.zz_offers', 2) "
          "WHERE NOT EXISTS (SELECT FROM public.zz_offers WHERE false);"
          f"REVOKE USAGE ON SCHEMA gpurec, gpurec_internal FROM PUBLIC;"
          f"GRANT USAGE ON SCHEMA gpurec, gpurec_internal TO {role};")
    want = s.run("SELECT * FROM cheapest2 ORDER BY 1, 2;").rows
    acl = "SELECT nspname, nspacl::text FROM pg_namespace WHERE nspname LIKE 'gpurec%' ORDER BY 1;"
    want_acl = s.run(acl).rows
    dump = f"/tmp/gpurec_rob_lifecycle_{os.getpid()}.dump"
    target = f"{db.name}_restored"
    env = db.env()
    try:
        subprocess.run([os.path.join(pg_bin, "pg_dump"), "-Fc", "-f", dump, db.name], env=env, check=True,
                       capture_output=True)
        listing = subprocess.run([os.path.join(pg_bin, "pg_restore"), "-l", dump], capture_output=True, text=True)
        check("dump-holds-no-schema-of-the-extension",
              " SCHEMA - gpurec" not in listing.stdout and "EXTENSION - gpurec" in listing.stdout, listing.stdout[-600:])
        admin(f"DROP DATABASE IF EXISTS {target}; CREATE DATABASE {target} OWNER {other_superuser};")
        # the extension was created by other_superuser (members_and_drop): postgres restores it
        restore = subprocess.run([os.path.join(pg_bin, "pg_restore"), "-U", "postgres", "-d", target, dump],
                                 env=env, capture_output=True, text=True)
        check("restore-by-another-superuser-has-no-error", restore.returncode == 0 and "ERROR" not in restore.stderr,
              restore.stderr[-800:])
        old = os.environ.get("PGDATABASE")
        os.environ["PGDATABASE"] = target
        try:
            got = robust_lib.pgtest.sql("SELECT * FROM cheapest2 ORDER BY 1, 2;", check=False)
            got_of_view = robust_lib.pgtest.sql("SELECT * FROM aa_cheapest2 ORDER BY 1, 2;", check=False)
            got_acl = robust_lib.pgtest.sql(acl, check=False)
            fresh = robust_lib.pgtest.sql("REFRESH MATERIALIZED VIEW cheapest2; SELECT count(*) FROM cheapest2;",
                                          check=False)
        finally:
            os.environ["PGDATABASE"] = old if old is not None else ""
            if old is None:
                del os.environ["PGDATABASE"]
        check("restore-gives-the-same-rows", [r for r in got] == [r for r in want] and len(want) > 0,
              f"{got[:3]} != {want[:3]}")
        check("restore-refreshes-a-view-of-a-view-after-it", got_of_view == want, f"{got_of_view}")
        check("restore-gives-the-same-privileges", usage_grants(got_acl) == usage_grants(want_acl)
              and len(want_acl) == 2, f"{got_acl} != {want_acl}")
        check("restored-view-refreshes", fresh == [[str(len(want))]], f"{fresh}")
    finally:
        admin(f"DROP DATABASE IF EXISTS {target} WITH (FORCE);", check_rc=False)
        if os.path.exists(dump):
            os.unlink(dump)
        s.run(f"DROP MATERIALIZED VIEW IF EXISTS cheapest2, aa_cheapest2, zz_offers; GRANT USAGE ON SCHEMA gpurec, gpurec_internal TO PUBLIC;"
              f"REVOKE ALL ON SCHEMA gpurec, gpurec_internal FROM {role};")
        admin(f"DROP ROLE IF EXISTS {role};", check_rc=False)


def shards(s, role):
    if not s.run("SELECT 1 FROM pg_available_extensions WHERE name = 'plproxy';").rows:
        robust_lib.pgtest.skip("gpurec-shards-lifecycle", "PL/Proxy is not installed")
        return
    r = s.run(f"CREATE EXTENSION plproxy; CREATE SCHEMA gpurec_shards AUTHORIZATION {role};"
              "CREATE EXTENSION gpurec_shards;")
    check("gpurec-shards-schema-made-beforehand-refused-42P06", r.sqlstates() == ["42P06"], r.describe())
    r = s.run("DROP SCHEMA gpurec_shards; CREATE EXTENSION gpurec_shards; DROP EXTENSION gpurec_shards;"
              "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'gpurec_shards%';")
    check("gpurec-shards-drop-leaves-no-schema", not r.errors() and r.rows == [["0"]], r.describe())


def body():
    role = f"gpurec_rob_lifecycle_{os.getpid()}"
    other = f"gpurec_rob_lifecycle_super_{os.getpid()}"
    admin(f"DROP ROLE IF EXISTS {role}; CREATE ROLE {role}; DROP ROLE IF EXISTS {other}; "
          f"CREATE ROLE {other} SUPERUSER LOGIN;")
    db = robust_lib.Database("lifecycle")
    try:
        db.sql("CREATE TABLE offers (product_id int, store_id int, price numeric);"
               "INSERT INTO offers VALUES (1, 1, 2.5), (1, 2, 2.50), (2, 1, 7), (3, 4, 0.5), (4, 4, 1);")
        s = db.session()
        schemas_made_beforehand(db, s, role)
        members_and_drop(s, other)
        dump_and_restore(db, s, other)
        shards(s, role)
        s.close()
        db.check_server_survived("lifecycle-no-backend-crashed")
    finally:
        db.drop()
        admin(f"DROP OWNED BY {other} CASCADE;", check_rc=False)
        admin(f"DROP ROLE IF EXISTS {role}; DROP ROLE IF EXISTS {other};", check_rc=False)


if __name__ == "__main__":
    robust_lib.main(body)
