#!/usr/bin/env python3
"""CREATE EXTENSION gpurec refuses a schema gpurec that another role made
beforehand (42501, naming its owner): that role could otherwise replace the
functions every role, and every scheduled job, calls.  Once the schema is
the installing role's, the extension installs and answers.  gpurec_shards
the same, where PL/Proxy is installed.  The refusal runs no function that
the schema's owner put in it.
"""
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import robust_lib  # noqa: E402
from robust_lib import admin, check  # noqa: E402


def body():
    role = f"gpurec_rob_schema_owner_{os.getpid()}"
    admin(f"DROP ROLE IF EXISTS {role}; CREATE ROLE {role};")
    db = robust_lib.Database("schema_owner")
    try:
        # the schema's owner put there a function that the refusal's own format() call, were it
        # unqualified, would take in place of pg_catalog's (its exact argument types win) and run as the
        # installing superuser
        db.sql(f"DROP EXTENSION gpurec; DROP SCHEMA gpurec; CREATE SCHEMA gpurec AUTHORIZATION {role};"
               "CREATE FUNCTION gpurec.format(f text, s name, o text) RETURNS text LANGUAGE sql "
               "AS $$ SELECT 'hijacked' $$;"
               f"ALTER FUNCTION gpurec.format(text, name, text) OWNER TO {role};")
        s = db.session()
        r = s.run("CREATE EXTENSION gpurec;")
        check("schema-of-another-role-refused-42501",
              r.sqlstates() == ["42501"] and any(role in text for _, text, _ in r.errors())
              and "hijacked" not in r.describe(), r.describe())
        db.sql("DROP FUNCTION gpurec.format(text, name, text);")
        r = s.run("SELECT count(*) FROM pg_extension WHERE extname = 'gpurec';")
        check("schema-of-another-role-nothing-installed", r.rows == [["0"]], r.describe())
        r = s.run(f"ALTER SCHEMA gpurec OWNER TO CURRENT_USER; CREATE EXTENSION gpurec;"
                  "SELECT count(*) FROM gpurec.cheapest_offers('SELECT 1 AS product_id, 1 AS store_id, 1 AS price');")
        check("schema-made-the-installing-roles-installs", not r.errors() and r.rows == [["1"]], r.describe())
        if s.run("SELECT 1 FROM pg_available_extensions WHERE name = 'plproxy';").rows:
            r = s.run(f"CREATE EXTENSION plproxy; CREATE SCHEMA gpurec_shards AUTHORIZATION {role};"
                      "CREATE EXTENSION gpurec_shards;")
            check("gpurec-shards-schema-of-another-role-refused-42501", r.sqlstates() == ["42501"], r.describe())
        s.close()
        db.check_server_survived("schema-owner-no-backend-crashed")
    finally:
        db.drop()
        admin(f"DROP ROLE IF EXISTS {role};")


if __name__ == "__main__":
    robust_lib.main(body)
