"""Helpers of gpurec's robustness scripts (not a test itself: not executable).

Builds on test/property/pgtest.py (PASS/FAIL lines, one-shot psql) and adds
a long-lived psql session, so that a check can prove that the *same*
backend is usable after a cancel or an error, and can read that backend's
memory between statements.
"""
import os
import re
import select
import subprocess
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "property"))
import pgtest  # noqa: E402

PSQL = pgtest.PSQL
check = pgtest.check
skip = pgtest.skip

_MESSAGE = re.compile(r"^(ERROR|FATAL|PANIC|WARNING|NOTICE|INFO|DETAIL|HINT|CONTEXT|LOCATION|"
                      r"QUERY|STATEMENT):  (?:([0-9A-Z]{5}): )?(.*)$")


def admin(query, check_rc=True):
    """Runs query in the maintenance database (PGDATABASE of the environment)."""
    return pgtest.sql(query, check=check_rc)


class Database:
    """A database of its own, with gpurec installed; dropped by drop()."""

    def __init__(self, tag):
        self.name = f"gpurec_rob_{tag}_{os.getpid()}"
        admin(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")
        admin(f"CREATE DATABASE {self.name}")
        self.sql("CREATE EXTENSION gpurec")
        # a backend that crashes makes the postmaster end every other session:
        # this one, idle all along, tells whether that happened
        self.sentinel = self.session("gpurec_rob_sentinel")

    def env(self, app=None):
        env = dict(os.environ)
        env["PGDATABASE"] = self.name
        if app:
            env["PGAPPNAME"] = app
        return env

    def sql(self, query, settings=None, check_rc=True):
        """One-shot psql in this database: rows as lists of strings."""
        old = os.environ.get("PGDATABASE")
        os.environ["PGDATABASE"] = self.name
        try:
            return pgtest.sql(query, settings=settings, check=check_rc)
        finally:
            if old is None:
                del os.environ["PGDATABASE"]
            else:
                os.environ["PGDATABASE"] = old

    def session(self, app=None):
        return Session(self.env(app))

    def check_server_survived(self, name):
        """PASS when no backend crashed since __init__ (the idle sentinel session lives)."""
        why = ""
        try:
            r = self.sentinel.run("SELECT pg_backend_pid();", timeout=30)
            if not r.rows or int(r.rows[0][0]) != self.sentinel.pid:
                why = f"the sentinel session lost its backend: {r.describe()}"
        except Exception as e:
            why = f"the sentinel session died (a backend crashed?): {e}"
        return check(name, not why, why)

    def drop(self):
        self.sentinel.close()
        admin(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)", check_rc=False)


class Result:
    """What one Session.run printed: rows (stdout) and the server's messages (stderr)."""

    def __init__(self, out, err, started):
        """out, err: lists of (line, arrival time)."""
        self.rows = [line.split("\t") for line, t in out]
        self.messages = []  # [level, sqlstate or None, text, seconds since the run started]
        for line, t in err:
            m = _MESSAGE.match(line)
            if m:
                self.messages.append([m.group(1), m.group(2), m.group(3), t - started])
            elif line.startswith("psql:") or not self.messages:
                self.messages.append(["PSQL", None, line, t - started])
            else:  # a message of several lines (a CONTEXT stack, say)
                self.messages[-1][2] += "\n" + line
        self.lines = [line for line, t in sorted(out + err, key=lambda x: x[1])]

    def errors(self):
        return [(s, text, t) for level, s, text, t in self.messages if level == "ERROR"]

    def notices(self):
        return [text for level, s, text, t in self.messages if level == "NOTICE"]

    def sqlstates(self):
        return [s for s, text, t in self.errors()]

    def details(self):
        return [text for level, s, text, t in self.messages if level == "DETAIL"]

    def hints(self):
        return [text for level, s, text, t in self.messages if level == "HINT"]

    def contexts(self):
        return [text for level, s, text, t in self.messages if level == "CONTEXT"]

    def describe(self):
        return " | ".join(self.lines)[:800]


class _LineReader:
    """Complete lines of one pipe, each with the time it arrived."""

    def __init__(self, pipe):
        self.fd = pipe.fileno()
        self.partial = b""
        self.lines = []
        self.eof = False

    def read(self):
        chunk = os.read(self.fd, 65536)
        if not chunk:
            self.eof = True
            return
        now = time.monotonic()
        *complete, self.partial = (self.partial + chunk).split(b"\n")
        self.lines.extend((c.decode(errors="replace"), now) for c in complete)


class Session:
    """One psql process (so one backend) kept open across statements.

    run() sends SQL followed by a marker echo and collects the output up to
    the marker, with the arrival time of every line.  ON_ERROR_STOP is off,
    so an ERROR ends its statement only; VERBOSITY is verbose, so errors
    carry their SQLSTATE.
    """

    def __init__(self, env):
        self.proc = subprocess.Popen(
            [PSQL, "-X", "-q", "-A", "-t", "-F", "\t", "-P", "null=\\N",
             "-v", "ON_ERROR_STOP=0", "-v", "VERBOSITY=verbose"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.out = _LineReader(self.proc.stdout)
        self.err = _LineReader(self.proc.stderr)
        self.counter = 0
        self.pending = None
        self.pid = int(self.run("SELECT pg_backend_pid();").rows[0][0])

    def send(self, query):
        """Starts query; collect its output with wait().  Returns when it was sent."""
        assert self.pending is None
        self.counter += 1
        marker = f"__gpurec_rob_done_{self.counter}__"
        text = query.rstrip()
        if not text.endswith(";"):
            text += ";"
        self.proc.stdin.write((text + f"\n\\echo {marker}\n").encode())
        self.proc.stdin.flush()
        self.pending = (marker, time.monotonic())
        return self.pending[1]

    def wait(self, timeout=300):
        marker, started = self.pending
        self.pending = None
        out = []
        deadline = time.monotonic() + timeout
        while True:
            while self.out.lines:
                line = self.out.lines.pop(0)
                if line[0] == marker:
                    # what psql wrote to stderr before the marker is in the pipe already
                    while select.select([self.err.fd], [], [], 0)[0] and not self.err.eof:
                        self.err.read()
                    err, self.err.lines = self.err.lines, []
                    return Result(out, err, started)
                out.append(line)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer from psql in {timeout} s; got "
                                   f"{out[-3:]} {self.err.lines[-3:]}")
            if self.out.eof:
                raise RuntimeError(f"psql exited ({self.proc.wait()}); got "
                                   f"{out[-3:]} {self.err.lines[-3:]}")
            readers = [r.fd for r in (self.out, self.err) if not r.eof]
            readable, _, _ = select.select(readers, [], [], left)
            for reader in (self.out, self.err):
                if reader.fd in readable:
                    reader.read()

    def run(self, query, timeout=300):
        self.send(query)
        return self.wait(timeout)

    def value(self, query):
        """The first column of the first row, or None when the query printed no row."""
        r = self.run(query)
        return r.rows[0][0] if r.rows else None

    def alive(self):
        return self.proc.poll() is None

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b"\\q\n")
                self.proc.stdin.flush()
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run_in_database(tag, run_checks, crash_check, roles=()):
    """Runs run_checks(db) in a fresh Database(tag), then checks (as crash_check)
    that no backend crashed.  The database, and the roles run_checks made, are
    dropped whatever happens."""
    db = Database(tag)
    try:
        run_checks(db)
        db.check_server_survived(crash_check)
    finally:
        db.drop()
        for role in roles:  # from the maintenance database: db is gone
            admin(f"DROP ROLE IF EXISTS {role}", check_rc=False)


def quote(text):
    """text inside a SQL string literal: its quotes doubled."""
    return text.replace("'", "''")


# the output columns of the two marketplace functions
CHEAPEST_COLUMNS = "product_id, offer_rank, store_id, price, n_offers"
IMPROVE_COLUMNS = ("cart_id, product_id, quantity, current_store_id, current_price, "
                   "best_store_id, best_price, saving")


def digest_query(label, call, columns):
    """A query printing label and the md5 of call's rows in the order it returned
    them: one short row that tells whether two runs gave the same result."""
    return (f"SELECT '{label}', md5(string_agg(t::text, ',' ORDER BY n)) FROM "
            f"{call} WITH ORDINALITY AS t({columns}, n);")


def cheapest_digest(offers_query, k=2, label="cheapest"):
    return digest_query(label, f"gpurec.cheapest_offers('{quote(offers_query)}', {k})",
                        CHEAPEST_COLUMNS)


def improve_digest(carts_query, offers_query, label="improve"):
    return digest_query(label, f"gpurec.improve_carts('{quote(carts_query)}', "
                               f"'{quote(offers_query)}')", IMPROVE_COLUMNS)


def gpu_count(db):
    return int(db.sql("SELECT count(*) FROM gpurec.devices()")[0][0])


def expect_error(name, result, sqlstate, extra=""):
    """PASS when result holds exactly one ERROR, of sqlstate."""
    states = result.sqlstates()
    return check(name, states == [sqlstate],
                 f"expected one ERROR {sqlstate}, got {states or 'none'}{extra}: "
                 f"{result.describe()}")


def proc_memory(pid):
    """RssAnon of process pid in kB, or None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return int(fields["RssAnon"].split()[0])
    except (OSError, KeyError):
        return None


def check_cancelled(name, r, sent, t0, answer, pid, victim_pid, small_ref, slack_s):
    """The outcome of a call cancelled by pg_cancel_backend at t0 (monotonic
    seconds; the call was sent at `sent`): exactly one 57014, within slack_s
    of the cancel, and then the same backend answering the small query sent
    after the call.  Returns the seconds from the cancel to the error, or None."""
    late = None
    if expect_error(name, r, "57014", f" (pg_cancel_backend said {answer})"):
        late = sent + r.errors()[0][2] - t0
        check(name + "-in-time", late <= slack_s, f"the error came {late:.2f} s after pg_cancel_backend")
    ok = ["after", small_ref[1]] in r.rows and ["pid", str(pid)] in r.rows and int(pid) == victim_pid
    check(name + "-session-usable", ok, f"the next call in the cancelled session: {r.describe()}")
    return late


def main(body):
    """Runs body() and exits 0 when it ran to the end (a crash is one FAIL line)."""
    script = os.path.basename(sys.argv[0])
    try:
        body()
    except Exception as e:  # report, then still end the run cleanly
        import traceback
        traceback.print_exc()
        check(f"{script}-ran-to-the-end", False, f"{type(e).__name__}: {e}")
        sys.exit(1)
