#!/usr/bin/env python3
"""gpurec's settings wherever the library is loaded.

- Not preloaded: a gpurec.* value set before the library loads (SET,
  PGOPTIONS) is a placeholder nothing checked.  The call that loads gpurec
  must take or refuse it exactly as PostgreSQL takes or refuses the same
  value once the setting is defined (the oracle: SET in a session where
  gpurec is loaded), refusing with 22023 (42704 for an unknown gpurec.*
  name) on that call and every later one until it is corrected, never
  silently computing under the default.
- session_preload_libraries: the settings are real from a session's first
  statement (SHOW, pg_settings), a bad SET is an error at once, and a bad
  value in PGOPTIONS refuses the connection.
- shared_preload_libraries: the same from the first statement, and a bad
  value in the server's configuration stops it from starting.
"""
import os
import random
import string
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "property"))
import robust_lib  # noqa: E402
from pgtest import PSQL, check, seeded_random  # noqa: E402

CLUSTER = os.path.normpath(os.path.join(HERE, "..", "cluster.sh"))
DB = None  # the robust_lib database of this run
rng = seeded_random()

# name -> values, valid and not, for the settings every load defines
VALUES = {
    "gpurec.device": ["gpuu", "GPU", "cpu", "Auto", "", "cpu ", "gpu,cpu"],
    "gpurec.timing": ["maybe", "on", "OFF", "1", "yes", "of", "2"],
    "gpurec.parallel_workers": ["2000", "1024", "-1", "-2", "4", "x", "1.5", "0x10", ""],
    "gpurec.cpu_threads": ["-1", "0", "1025", "8", "eight"],
    "gpurec.test_fault": ["x:1:wait", "read:0:wait", "output:3:error", "read:1:explode", "", "compute:7"],
    "gpurec.test_fail_gpu_alloc": ["on", "sometimes"],
}


def junk():
    return "".join(rng.choice(string.ascii_letters + string.digits + ":-,. ") for _ in range(rng.randint(1, 8)))


def psql(script, env_extra=None, database=None):
    """(returncode, stdout, stderr) of psql -X -q with ON_ERROR_STOP, verbose errors, in DB by default."""
    # the suite's own PGOPTIONS (gpurec.device = gpu on a GPU machine) would be a setting given before loading
    env = {k: v for k, v in os.environ.items() if k != "PGOPTIONS"}
    env.update(PGDATABASE=database or DB, **(env_extra or {}))
    proc = subprocess.run([PSQL, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose"],
                          input="\\set VERBOSITY verbose\n" + script, capture_output=True, text=True, env=env)
    return proc.returncode, proc.stdout.strip(), proc.stderr


def sqlstate(stderr):
    for line in stderr.splitlines():
        if line.startswith(("ERROR:", "FATAL:")):
            return line.split(":")[1].strip()
    return None


def quote(value):
    return "'" + value.replace("'", "''") + "'"


def not_preloaded():
    for name, values in VALUES.items():
        for value in values + [junk()]:
            setting = f"SET {name} = {quote(value)};\n"
            # the oracle: PostgreSQL's own check, with gpurec loaded first
            rc, want_out, want_err = psql(f"SELECT count(*) >= 0 FROM gpurec.devices();\n{setting}SHOW {name};")
            want_ok = rc == 0
            # set before loading; the loading call, then a second call in the same session
            script = (f"{setting}\\set ON_ERROR_STOP 0\nSELECT count(*) >= 0 FROM gpurec.devices();\n"
                      f"SELECT count(*) >= 0 FROM gpurec.devices();\n\\set ON_ERROR_STOP 1\nSHOW {name};")
            rc, out, err = psql(script)
            errors = [line for line in err.splitlines() if line.startswith("ERROR:")]
            tag = f"{name}={value!r}"
            if want_ok:
                check(f"taken-as-postgres-takes-it {tag}", rc == 0 and not errors and out.splitlines()[-1:] ==
                      want_out.splitlines()[-1:], f"got {out!r} {errors}, PostgreSQL shows {want_out!r}")
            else:
                named = all(name in e and "22023" in e for e in errors)
                check(f"refused-as-postgres-refuses-it {tag}", len(errors) == 2 and named,
                      f"PostgreSQL says {sqlstate(want_err)}; set before loading: {errors or out!r}")

    # corrected or RESET, the next call runs
    rc, out, err = psql("SET gpurec.device = 'gpuu';\n\\set ON_ERROR_STOP 0\nSELECT 1 FROM gpurec.devices();\n"
                        "\\set ON_ERROR_STOP 1\nRESET gpurec.device;\nSELECT count(*) >= 0 FROM gpurec.devices();\n"
                        "SHOW gpurec.device;")
    check("reset-after-the-error-runs", rc == 0 and out.splitlines()[-2:] == ["t", "auto"], f"{out!r} {err}")

    # a misspelled name under gpurec.: 42704 on loading, as PostgreSQL refuses it once loaded
    for name in ("gpurec.devise", "gpurec.timings", "gpurec.cpu_thread"):
        rc, _, err = psql(f"SET {name} = 'cpu';\nSELECT 1 FROM gpurec.devices();")
        _, _, loaded_err = psql(f"SELECT count(*) >= 0 FROM gpurec.devices();\nSET {name} = 'cpu';")
        check(f"unknown-name-refused {name}", rc != 0 and sqlstate(err) == "42704" and name in err
              and sqlstate(loaded_err) is not None, f"{err.strip()} / once loaded: {loaded_err.strip()}")

    # a setting of the GPU service's, which exists only where gpurec is preloaded: the call runs, and a
    # WARNING says why the setting has no effect before PostgreSQL's own removes it
    for name, value in (("gpurec.gpus", "0,1"), ("gpurec.service_memory", "64MB")):
        rc, out, err = psql(f"SET {name} = {quote(value)};\nSELECT count(*) >= 0 FROM gpurec.devices();")
        warnings = [line for line in err.splitlines() if line.startswith("WARNING:")]
        check(f"start-only-setting-not-preloaded-warns {name}", rc == 0 and out == "t" and warnings and
              f'"{name}" has no effect: gpurec is not in shared_preload_libraries' in warnings[0]
              and "55P02" in warnings[0], f"{out!r} {err}")

    # the same through the connection's options (PGOPTIONS), a new session each time
    rc, _, err = psql("SELECT 1 FROM gpurec.devices();", {"PGOPTIONS": "-c gpurec.device=gpuu"})
    check("pgoptions-value-refused-on-loading", rc != 0 and sqlstate(err) == "22023" and "gpurec.device" in err,
          err.strip())
    rc, out, err = psql("SELECT count(*) >= 0 FROM gpurec.devices(); SHOW gpurec.device;",
                        {"PGOPTIONS": "-c gpurec.device=cpu"})
    check("pgoptions-valid-value-taken", rc == 0 and out.splitlines()[-1:] == ["cpu"], f"{out!r} {err}")


def session_preload():
    database = DB + "_preload"
    psql(f"DROP DATABASE IF EXISTS {database}; CREATE DATABASE {database};", database="postgres")
    psql(f"CREATE EXTENSION gpurec; ALTER DATABASE {database} SET session_preload_libraries = 'gpurec';",
         database=database)
    rc, out, err = psql("SHOW gpurec.device;", database=database)
    check("session-preload-show-on-the-first-statement", rc == 0 and out == "auto", f"{out!r} {err}")
    rc, out, err = psql("SELECT vartype FROM pg_settings WHERE name = 'gpurec.parallel_workers';", database=database)
    check("session-preload-pg-settings-on-the-first-statement", rc == 0 and out == "integer", f"{out!r} {err}")
    rc, out, err = psql("SET gpurec.device = 'gpuu';", database=database)
    check("session-preload-bad-set-refused-at-once", rc != 0 and sqlstate(err) == "22023", err.strip())
    rc, out, err = psql("SELECT 1;", {"PGOPTIONS": "-c gpurec.device=gpuu"}, database=database)
    check("session-preload-bad-pgoptions-refuses-the-connection",
          rc != 0 and "gpurec.device" in err and "gpuu" in err, err.strip())
    check("session-preload-bad-pgoptions-hint-names-the-options", "connection's options (PGOPTIONS" in err, err.strip())
    psql(f"DROP DATABASE {database};", database="postgres")


def shared_preload():
    directory = tempfile.mkdtemp(prefix="gpurec-settings-")
    env = {k: v for k, v in os.environ.items() if k not in ("PGHOST", "PGPORT")}
    out = subprocess.run(["bash", CLUSTER, "start", directory, "-c", "shared_preload_libraries=gpurec"],
                         capture_output=True, text=True, env=env)
    if out.returncode != 0:
        check("shared-preload-cluster-starts", False, out.stderr[-1000:])
        return
    try:
        host = {"PGHOST": directory}
        rc, out_, err = psql("SHOW gpurec.timing;", host, database="postgres")
        check("shared-preload-show-on-the-first-statement", rc == 0 and out_ == "off", f"{out_!r} {err}")
        rc, _, err = psql("SET gpurec.timing = 'maybe';", host, database="postgres")
        check("shared-preload-bad-set-refused-at-once", rc != 0 and sqlstate(err) == "22023", err.strip())
    finally:
        subprocess.run(["bash", CLUSTER, "stop", directory], capture_output=True, env=env)
    # the server's own configuration with a bad value: it does not start, and says why
    out = subprocess.run(["bash", CLUSTER, "resume", directory, "-c", "shared_preload_libraries=gpurec",
                          "-c", "gpurec.device=gpuu"], capture_output=True, text=True, env=env)
    log = open(os.path.join(directory, "server.log"), errors="replace").read()
    started = out.returncode == 0
    if started:
        subprocess.run(["bash", CLUSTER, "stop", directory], capture_output=True, env=env)
    check("shared-preload-bad-value-stops-the-start",
          not started and 'invalid value for parameter "gpurec.device": "gpuu"' in log, log[-600:])
    # its hint says what fixes it there: the configuration, not a SET that no session could run
    check("shared-preload-bad-value-hint-names-the-configuration",
          "Correct it in the server's configuration" in log and "SET it" not in log, log[-600:])
    subprocess.run(["rm", "-rf", directory])


def body():
    global DB
    db = robust_lib.Database("settings")
    DB = db.name
    not_preloaded()
    session_preload()
    db.check_server_survived("settings-no-backend-crashed")
    db.drop()
    shared_preload()


if __name__ == "__main__":
    robust_lib.main(body)
