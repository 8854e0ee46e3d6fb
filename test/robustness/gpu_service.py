#!/usr/bin/env python3
"""The GPU service: one process, started with the server when gpurec is in
shared_preload_libraries, that computes every GPU call's device work.

Starts a cluster of its own with gpurec preloaded.  Without a GPU (CI) the
service presents stand-in devices that compute on the CPU
(gpurec.test_stand_in_devices), so that what this checks is the service
itself: answers identical to a CPU call's, devices() and its load columns,
gpurec.gpus, the queue (calls wait for a device, cancel and
statement_timeout end a waiting call within a second), a kill -9 of the
service mid-call (an error with SQLSTATE 58000, no other session touched,
the cluster not restarted, the next call served by a new service), and
many sessions at once.  GPUREC_SERVICE_REAL_GPUS=1 runs the same checks on
the machine's GPUs instead (the GPU run's `service` step).
"""
import os
import re
import signal
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import robust_lib  # noqa: E402
from robust_lib import check  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
CLUSTER = os.path.join(ROOT, "test", "cluster.sh")
REAL_GPUS = os.environ.get("GPUREC_SERVICE_REAL_GPUS") == "1"
STAND_INS = 2
SLACK_S = 1.0
SERVICE_LINE = re.compile(r"GPU service: (?:device (\d+)|(\d+) devices), input written in ([\d.]+) ms "
                          r"\(([\d.]+) MB; ([\d.]+) MB read in place\), answered in ([\d.]+) ms "
                          r"\(queued ([\d.]+) ms\)")
SPLIT = ("similar_users", "user_similarity", "predict_strength", "fit_exponent", "roc_fitness",
         "optimize_carts")  # split over every device of the service

LABELS = "(SELECT array_agg(g % 3 = 0) FROM generate_series(1, 64) g)"
ROC = f"SELECT * FROM gpurec.roc_fitness('SELECT individual_id, scores FROM population', {LABELS})"
# one individual: a call on one device (one that splits takes every device, a part each)
ROC_ONE = f"SELECT * FROM gpurec.roc_fitness('SELECT individual_id, scores FROM population WHERE individual_id = 1', {LABELS})"
CALLS = {
    "roc_fitness": ROC + " ORDER BY individual_id",
    "roc_fitness_long": "SELECT * FROM gpurec.roc_fitness('SELECT individual_id, label, score FROM examples') "
                        "ORDER BY individual_id",
    "roc_fitness_long_numeric": "SELECT * FROM gpurec.roc_fitness('SELECT individual_id, label, "
                                "round(score::numeric, 1) AS score FROM examples') ORDER BY individual_id",
    "similar_users": "SELECT * FROM gpurec.similar_users('SELECT user_id, x, y FROM points', 4) "
                     "ORDER BY user_id, rank",
    "user_similarity": "SELECT * FROM gpurec.user_similarity('SELECT user_id, x, y FROM points', 7) "
                       "ORDER BY user_id",
    "predict_strength": "SELECT * FROM gpurec.predict_strength('SELECT user_id, x, y FROM points', 7, "
                        "'SELECT candidate_id, x, y FROM candidates', 2.5) ORDER BY candidate_id",
    "fit_exponent": "SELECT * FROM gpurec.fit_exponent('SELECT user_id, x, y FROM points', "
                    "'SELECT user_id, candidate_id FROM holdout', 'SELECT candidate_id, x, y FROM candidates') "
                    "ORDER BY exponent",
    "cheapest_offers": "SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers') "
                       "ORDER BY product_id, offer_rank",
    "cheapest_offers_k3": "SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers', 3) "
                          "ORDER BY product_id, offer_rank",
    "cheapest_offers_integer": "SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, "
                               "(price * 2)::bigint AS price FROM offers', 4) ORDER BY product_id, offer_rank",
    "improve_carts": "SELECT * FROM gpurec.improve_carts('SELECT cart_id, product_id, store_id, quantity FROM carts', "
                     "'SELECT product_id, store_id, price FROM offers')",
    "optimize_carts": "SELECT * FROM gpurec.optimize_carts('SELECT cart_id, product_id, quantity, store_id FROM carts', "
                      "'SELECT product_id, store_id, price FROM offers', 'SELECT store_id, fee, free_from FROM shipping')",
}


class Cluster:
    """A throwaway cluster with gpurec preloaded; its settings as -c options."""

    def __init__(self, settings):
        self.dir = tempfile.mkdtemp(prefix="gpurec-service-")
        options = ["-c", "shared_preload_libraries=gpurec", "-c", "max_connections=60"]
        for name, value in settings.items():
            options += ["-c", f"{name}={value}"]
        out = subprocess.run(["bash", CLUSTER, "start", self.dir] + options, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"cluster.sh start failed: {out.stderr[-2000:]}")
        for line in out.stdout.splitlines():
            if line.startswith("export "):
                for assignment in line.split()[1:]:
                    name, _, value = assignment.partition("=")
                    os.environ[name] = value

    def log(self):
        with open(os.path.join(self.dir, "server.log"), errors="replace") as f:
            return f.read()

    def stop(self):
        """Stops the cluster and removes its directory (a cluster's is over 100 MB)."""
        subprocess.run(["bash", CLUSTER, "stop", self.dir], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def settings_for(extra=None):
    settings = {} if REAL_GPUS else {"gpurec.test_stand_in_devices": STAND_INS}
    settings.update(extra or {})
    return settings


def make_data(db):
    db.sql("""
        SELECT setseed(0.42);
        CREATE TABLE population AS
          SELECT i AS individual_id,
                 (SELECT array_agg(CASE WHEN random() < 0.05 THEN NULL
                                        ELSE round((random() * 20)::numeric)::float8 / 4 END)
                  FROM generate_series(1, 64) WHERE i > 0) AS scores
          FROM generate_series(1, 400) i;
        CREATE TABLE examples AS
          SELECT i % 300 AS individual_id, random() < 0.3 AS label,
                 CASE WHEN random() < 0.02 THEN NULL ELSE round((random() * 10)::numeric)::float8 / 2 END AS score
          FROM generate_series(1, 20000) i;
        CREATE TABLE points AS
          SELECT (i % 150) AS user_id, round((random() * 40)::numeric, 1)::float8 AS x,
                 round((random() * 40)::numeric, 1)::float8 AS y
          FROM generate_series(1, 2500) i;
        CREATE TABLE candidates AS
          SELECT i AS candidate_id, round((random() * 40)::numeric, 1)::float8 AS x,
                 round((random() * 40)::numeric, 1)::float8 AS y
          FROM generate_series(1, 200) i;
        CREATE TABLE holdout AS
          SELECT (i % 15) AS user_id, (i * 7 % 200) + 1 AS candidate_id FROM generate_series(1, 120) i;
        -- prices of few values, spelled with one decimal or two (4.5, 4.50): ties between stores and within one
        CREATE TABLE offers AS
          SELECT i % 300 AS product_id, CASE WHEN random() < 0.01 THEN NULL ELSE (random() * 12)::int END AS store_id,
                 CASE WHEN random() < 0.01 THEN NULL WHEN random() < 0.5 THEN v ELSE round(v, 2) END AS price
          FROM (SELECT i, round((random() * 20)::numeric) * 0.5 AS v FROM generate_series(1, 20000) i) o;
        CREATE TABLE carts AS
          SELECT i / 6 AS cart_id, (random() * 320)::int AS product_id,
                 CASE WHEN random() < 0.2 THEN NULL ELSE (random() * 12)::int END AS store_id,
                 CASE WHEN random() < 0.1 THEN NULL ELSE 1 + (random() * 2)::int END AS quantity
          FROM generate_series(1, 1500) i;
        CREATE TABLE shipping AS
          SELECT s AS store_id, round((random() * 8)::numeric, 2) AS fee,
                 CASE WHEN s % 3 = 0 THEN NULL ELSE round((random() * 40)::numeric, 1) END AS free_from
          FROM generate_series(0, 11) s;""")


def devices(session):
    r = session.run("SELECT device_id, calls_running, calls_queued, memory_used, service_pid "
                    "FROM gpurec.devices() ORDER BY device_id;")
    return [[None if v == "\\N" else int(v) for v in row] for row in r.rows]


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


# similar_users on 4,000 users x 20 points (deterministic, so that both devices read the same rows): work
# enough to split over every GPU, where the other calls' small data stay on one on real GPUs
LARGE_SPLIT = ("SELECT * FROM gpurec.similar_users('SELECT (i / 20) AS user_id, (i::int8 * 7919 % 1000)::float8 AS x, "
               "(i::int8 * 104729 % 997)::float8 AS y FROM generate_series(0, 79999) i', 3) ORDER BY user_id, rank")


def identical_answers(db):
    """Every function the service runs gives the CPU's answer, and says the service computed it: the
    work that splits by user on every device, each in a part (on stand-ins every such call; on real GPUs
    as many as the work is worth, best_parts: the small calls here may take one, the large one all),
    the rest on one."""
    s = db.session()
    n_devices = len(devices(s))
    s.run("SET gpurec.timing = on;")
    calls = dict(CALLS)
    if REAL_GPUS:
        calls["similar_users_large"] = LARGE_SPLIT
    for name, call in calls.items():
        s.run("SET gpurec.device = 'cpu';")
        cpu = s.run(call + ";")
        s.run("SET gpurec.device = 'gpu';")
        gpu = s.run(call + ";")
        through = [m for m in map(SERVICE_LINE.search, gpu.details()) if m]
        check(f"service-identical-{name}",
              not cpu.errors() and not gpu.errors() and cpu.rows and gpu.rows == cpu.rows and through,
              f"cpu {cpu.describe()[:300]} gpu {gpu.describe()[:300]}")
        devices_used = int(through[0].group(2) or 1) if through else 0
        if name.startswith(SPLIT) and REAL_GPUS and name != "similar_users_large":
            check(f"service-{name}-on-1-to-{n_devices}-devices", 1 <= devices_used <= n_devices,
                  gpu.describe()[:600])
            continue
        wanted = n_devices if name.startswith(SPLIT) else 1
        check(f"service-{name}-on-{wanted}-devices", devices_used == wanted, gpu.describe()[:600])
    s.close()


def empty_inputs(db, service_pid):
    """Every function the service runs, its inner queries returning no rows: the CPU's answer (no rows, or
    the same error), and the service still the one that started (an empty cheapest_offers crashed it)."""
    s = db.session()
    for name, call in CALLS.items():
        empty = re.sub(r"FROM (population|examples|points|candidates|holdout|offers|carts|shipping)'",
                       r"FROM \1 WHERE false'", call)
        s.run("SET gpurec.device = 'cpu';")
        cpu = s.run(empty + ";")
        s.run("SET gpurec.device = 'gpu';")
        gpu = s.run(empty + ";")
        check(f"service-empty-input-{name}", empty != call and gpu.rows == cpu.rows and
              gpu.sqlstates() == cpu.sqlstates(), f"cpu {cpu.describe()[:300]} gpu {gpu.describe()[:300]}")
    pids = {r[4] for r in devices(s)}
    check("service-empty-inputs-no-restart", pids == {service_pid}, f"service pids {pids}, started as {service_pid}")
    s.close()


def devices_view(db, expected_ids):
    s = db.session()
    rows = devices(s)
    pids = {r[4] for r in rows}
    check("service-devices-rows", [r[0] for r in rows] == expected_ids and len(pids) == 1 and
          next(iter(pids)) is not None and next(iter(pids)) > 0 and all(r[1] == 0 and r[2] == 0 for r in rows),
          f"devices {rows}, expected ids {expected_ids}")
    s.close()
    return next(iter(pids))


def fault_and_errors(db):
    """An error raised in the service keeps its SQLSTATE and message."""
    r = db.session()
    r.run("SET gpurec.device = 'gpu'; SET gpurec.test_fault = 'compute:1:error';")
    res = r.run(ROC + ";")
    check("service-error-keeps-sqlstate", res.sqlstates() == ["57000"] and
          any("error injected in the compute phase" in t for s_, t, _ in res.errors()), res.describe())
    r.run("RESET gpurec.test_fault;")
    again = r.run("SELECT count(*) FROM (" + ROC + ") q;")
    check("service-usable-after-error", again.rows == [["400"]], again.describe())
    r.close()


def hold_call(db, app):
    """A session whose GPU call waits in the service (test fault) until cancelled."""
    s = db.session(app)
    s.run("SET gpurec.device = 'gpu'; SET gpurec.test_fault = 'compute:1:wait';")
    s.send(ROC_ONE + ";")
    return s


def queue_and_cancel(db):
    """Calls beyond the devices wait; cancel and statement_timeout end a waiting call within a second."""
    watcher = db.session()
    n = len(devices(watcher))
    holders = [hold_call(db, f"holder{i}") for i in range(n)]
    running = wait_for(lambda: sum(r[1] for r in devices(watcher)) == n)
    check("service-calls-running-shown", running, f"devices {devices(watcher)}")
    # a session whose call the service computes waits, as pg_stat_activity shows, all along (not only at
    # first: gpurec's look, once a second, whether the client is still there must not end the wait event)
    seen = []
    for _ in range(10):
        events = watcher.run("SELECT state, wait_event_type, wait_event FROM pg_stat_activity "
                             "WHERE application_name = 'holder0';")
        seen.append(events.rows)
        time.sleep(0.25)
    check("service-call-shows-waiting-in-pg-stat-activity",
          all(rows == [["active", "Extension", "Extension"]] for rows in seen), f"{seen}")

    queued = db.session("queued")
    queued.run("SET gpurec.device = 'gpu';")
    sent = queued.send(ROC_ONE + ";")
    shown = wait_for(lambda: sum(r[2] for r in devices(watcher)) == 1)
    check("service-calls-queued-shown", shown, f"devices {devices(watcher)}")
    watcher.run(f"SELECT pg_cancel_backend({queued.pid});")
    cancelled_at = time.monotonic()
    res = queued.wait(60)
    took = res.messages[-1][3] - (cancelled_at - sent) if res.messages else 99
    check("service-cancel-while-queued", res.sqlstates() == ["57014"] and took <= SLACK_S,
          f"{res.describe()} after {took:.2f} s")
    gone = wait_for(lambda: sum(r[2] for r in devices(watcher)) == 0)
    check("service-cancelled-call-leaves-queue", gone, f"devices {devices(watcher)}")

    queued.run("SET statement_timeout = '700ms';")
    res = queued.run(ROC_ONE + ";", timeout=60)
    t = res.errors()[0][2] if res.errors() else 99
    check("service-statement-timeout-while-queued", res.sqlstates() == ["57014"] and 0.6 <= t <= 0.7 + SLACK_S,
          f"{res.describe()} at {t:.2f} s")
    queued.run("RESET statement_timeout;")

    for h in holders:
        watcher.run(f"SELECT pg_cancel_backend({h.pid});")
        res = h.wait(60)
        check("service-cancel-while-running", res.sqlstates() == ["57014"], res.describe())
    idle = wait_for(lambda: all(r[1] == 0 and r[2] == 0 for r in devices(watcher)))
    check("service-cancelled-calls-stop-in-service", idle, f"devices {devices(watcher)}")
    after = queued.run("SELECT count(*) FROM (" + ROC + ") q;")
    check("service-serves-after-cancels", after.rows == [["400"]], after.describe())
    for s in holders + [queued, watcher]:
        s.close()


def kill_service(db, cluster):
    """kill -9 of the service mid-call: 58000 for that call, nothing else touched, a new service serves."""
    watcher = db.session("watcher")
    bystander = db.session("bystander")
    started = watcher.value("SELECT pg_postmaster_start_time();")
    old_pid = devices(watcher)[0][4]
    victim = hold_call(db, "victim")
    wait_for(lambda: sum(r[1] for r in devices(watcher)) == 1)
    os.kill(old_pid, signal.SIGKILL)
    killed_at = time.monotonic()
    res = victim.wait(60)
    check("service-kill-fails-call-with-58000",
          res.sqlstates() == ["58000"] and any("GPU service ended" in t for s_, t, _ in res.errors()),
          res.describe())
    check("service-kill-error-is-prompt", time.monotonic() - killed_at <= SLACK_S + 1, "")
    check("service-kill-leaves-other-sessions",
          bystander.value("SELECT pg_backend_pid();") == str(bystander.pid) and
          watcher.value("SELECT pg_postmaster_start_time();") == started and victim.alive(),
          "a backend or the postmaster restarted")
    restarted = wait_for(lambda: (lambda rows: rows and rows[0][4] not in (None, old_pid))(devices(watcher)))
    check("service-restarts-by-itself", restarted, f"devices {devices(watcher)}")
    victim.run("RESET gpurec.test_fault;")
    again = victim.run("SELECT count(*) FROM (" + ROC + ") q;")
    check("service-next-call-succeeds", again.rows == [["400"]], again.describe())
    log = cluster.log()
    check("service-kill-logged-no-cluster-restart",
          "was terminated by signal 9" in log and "terminating any other active server processes" not in log,
          log[-1500:])
    for s in (watcher, bystander, victim):
        s.close()


def stopped_service(db):
    """A service that stops answering (its process stopped, as a hung driver would leave it): under auto a new
    session's call computes on the CPU after at most a second or so, under gpu it is 58000 within the 10 s the
    service is waited for, and neither hangs; the service answers again once it goes on."""
    watcher = db.session("stop_watcher")
    pid = devices(watcher)[0][4]
    os.kill(pid, signal.SIGSTOP)
    try:
        on_auto = db.session("stopped_auto")
        began = time.monotonic()
        res = on_auto.run("SET statement_timeout = '15s'; SET gpurec.device = 'auto'; "
                          "SELECT count(*) FROM (" + ROC + ") q;")
        took = time.monotonic() - began
        check("service-stopped-auto-computes-on-the-cpu", res.rows == [["400"]] and took <= 3.0,
              f"{res.describe()} after {took:.2f} s")
        on_gpu = db.session("stopped_gpu")
        began = time.monotonic()
        res = on_gpu.run("SET statement_timeout = '15s'; SET gpurec.device = 'gpu'; "
                         "SELECT count(*) FROM (" + ROC + ") q;")
        took = time.monotonic() - began
        check("service-stopped-gpu-is-58000", res.sqlstates() == ["58000"] and
              any("not running" in t for s_, t, _ in res.errors()) and took <= 10.0 + SLACK_S + 2,
              f"{res.describe()} after {took:.2f} s")
        for s in (on_auto, on_gpu):
            s.close()
    finally:
        os.kill(pid, signal.SIGCONT)
    answered = wait_for(lambda: devices(watcher) and devices(watcher)[0][4] == pid)
    check("service-stopped-answers-again", answered, f"devices {devices(watcher)}")
    watcher.close()


def many_sessions(db, sessions=32, seconds=float(os.environ.get("GPUREC_SERVICE_LOAD_S", 8))):
    """Many sessions calling through the service at once: no error, every answer the same."""
    reference = db.sql("SELECT md5(string_agg(q::text, ',')) FROM (" + CALLS["roc_fitness"] + ") q;")[0][0]
    digest = "SELECT md5(string_agg(q::text, ',')) FROM (" + CALLS["roc_fitness"] + ") q;"
    results = {"calls": 0, "wrong": [], "errors": []}
    lock = threading.Lock()

    def loop(i):
        s = db.session(f"load{i}")
        s.run("SET gpurec.device = 'gpu';")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            r = s.run(digest)
            with lock:
                if r.errors():
                    results["errors"].append(r.describe())
                elif r.rows != [[reference]]:
                    results["wrong"].append(r.describe())
                results["calls"] += 1
        s.close()

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(f"service-{sessions}-sessions-no-error", not results["errors"] and not results["wrong"] and
          results["calls"] >= sessions,
          f"{results['calls']} calls, errors {results['errors'][:2]}, wrong {results['wrong'][:2]}")


def service_log(cluster):
    """The service's own lines reach the server's log through PostgreSQL's logging (its prefix, its
    destinations), never as bare lines on the server's stderr."""
    log = cluster.log()
    logged = re.search(r"^\S.*\[\d+\] LOG:  gpurec GPU service \[\d+\]: ready with \d+ ", log, re.M)
    bare = re.search(r"^gpurec GPU service \[", log, re.M)
    check("service-log-through-postgres-logging", logged is not None and bare is None,
          f"logged {logged and logged.group(0)!r}, bare {bare and bare.group(0)!r}")


def gpus_setting():
    """gpurec.gpus: a list of device ids, checked; the service uses only those listed."""
    for value in ("0,x", "0,,2", "0,0", "1, 1", "0,", ",0", "-1", "1024"):
        r = robust_lib.admin(f"\\set VERBOSITY verbose\nALTER SYSTEM SET gpurec.gpus = '{value}';", check_rc=False)
        check(f"service-gpus-setting-checked {value!r}",
              not isinstance(r, list) and "gpurec.gpus" in r.stderr and "22023" in r.stderr, f"{r}")
    for value in ("0, 2", " 3 ,1 ", "", "  "):
        r = robust_lib.admin(f"ALTER SYSTEM SET gpurec.gpus = '{value}'; ALTER SYSTEM RESET gpurec.gpus;",
                             check_rc=False)
        check(f"service-gpus-setting-accepted {value!r}", isinstance(r, list), f"{r}")
    r = robust_lib.admin("SET gpurec.gpus = '1';", check_rc=False)
    check("service-gpus-setting-at-start-only", not isinstance(r, list) and "55P02" in (r.stderr or "") or
          "cannot be changed" in (r.stderr or ""), f"{r}")


def free_huge_pages():
    """The system's free huge pages of 2 MB (/proc/meminfo); 0 where its huge pages are of another size."""
    fields = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, _, rest = line.partition(":")
            fields[name] = int(rest.split()[0])
    return fields.get("HugePages_Free", 0) if fields.get("Hugepagesize") == 2048 else 0


def memory_pages_logged(cluster, service_memory_mb, free_before, tag):
    """The service's log line says what pages its shared memory went on: huge pages where the host had
    plenty free (vm.nr_hugepages, beyond PostgreSQL's own), ordinary ones where it had too few."""
    logged = re.compile(r"(\d+) MB of shared memory on (2 MB huge pages|4 kB pages)")
    wait_for(lambda: logged.search(cluster.log()))
    line = logged.search(cluster.log())
    needed = service_memory_mb // 2 + 1
    if not line:
        ok = False
    elif free_before >= needed + 256:
        ok = line.group(2) == "2 MB huge pages"
    elif free_before < needed:
        ok = line.group(2) == "4 kB pages"
    else:
        ok = True  # PostgreSQL's own shared memory may have taken what the service needed
    check(f"service-memory-pages{tag}", ok, f"free huge pages before the start {free_before}: {line and line.group(0)}")


def killed_mid_read(db, cluster, answer):
    """The service killed while a parallel read's processes write their chunks into its lease: the call
    fails with 58000 (the chunks were for the service that ended; no other can read them), or answers
    where its read had already gone the usual way; no backend crashes, and the next call answers."""
    # a read of about a second on two cores: its workers check every price
    slow = ("SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers "
            "WHERE length(md5(price::text || product_id::text)) = 32', 2) ORDER BY product_id, offer_rank")
    watcher = db.session("mid_read_watcher")
    outcomes = []
    for attempt in range(4):
        victim = db.session("mid_read_victim")
        victim.run("SET max_parallel_workers_per_gather = 2; SET parallel_setup_cost = 0; "
                   "SET parallel_tuple_cost = 0; SET gpurec.device = 'gpu';")
        victim.send(slow + ";")
        reading = wait_for(lambda: watcher.value(f"SELECT count(*) FROM gpurec.progress() WHERE pid = {victim.pid} "
                                                 "AND phase = 'reading' AND units_done > 0;") == "1", 30)
        service = devices(watcher)[0][4]
        os.kill(service, signal.SIGKILL)
        res = victim.wait(60)
        outcomes.append("58000" if res.sqlstates() == ["58000"] else
                        "answer" if not res.errors() and res.rows == answer else
                        f"read done {reading}: {res.describe()[:300]}")
        wait_for(lambda: (lambda rows: rows and rows[0][4] not in (None, service))(devices(watcher)), 20)
        again = victim.run(slow + ";")
        outcomes[-1] += "" if again.rows == answer else f"; then {again.describe()[:200]}"
        victim.close()
    watcher.close()
    check("service-killed-mid-read-58000-or-the-answer",
          all(o in ("58000", "answer") for o in outcomes) and "58000" in outcomes, f"{outcomes}")
    check("service-killed-mid-read-no-backend-crashed", "terminated by signal 11" not in cluster.log()
          and "terminating any other active server processes" not in cluster.log(), cluster.log()[-1500:])


def parallel_reads_in_place(service_memory_mb=160):
    """A parallel read whose call goes to the service: its workers and the calling backend write their
    chunks into a lease of the service's shared memory, which the call reads where they are.  Answers
    as the CPU's; the lease goes back after every call, a cancelled one included (a lease kept would
    leave the later calls less and less room: their input read in place shrinks).  With too little
    shared memory for the whole input (service_memory_mb 24), what does not fit comes the usual way."""
    whole = service_memory_mb >= 160
    tag = "" if whole else "-lease-too-small"
    free_before = free_huge_pages()
    cluster = Cluster(settings_for({"gpurec.service_memory": str(service_memory_mb), "max_worker_processes": "16",
                                    "max_parallel_workers": "8"}))
    try:
        memory_pages_logged(cluster, service_memory_mb, free_before, tag)
        db = robust_lib.Database("service_lease" + tag.replace("-", "_"))
        try:
            db.sql("""
                SELECT setseed(0.17);
                CREATE TABLE offers AS
                  SELECT 1 + (random() * 19999)::int AS product_id, 1 + (random() * 99)::int AS store_id,
                         round((random() * 50)::numeric, (random() * 2)::int) AS price
                  FROM generate_series(1, 600000);
                CREATE TABLE examples AS
                  SELECT 1 + i % 100 AS individual_id, random() < 0.3 AS label, round((random() * 9)::numeric) / 2 AS score
                  FROM generate_series(1, 600000) i;
                ANALYZE offers; ANALYZE examples;
            """)
            s = db.session()
            s.run("SET max_parallel_workers_per_gather = 2; SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0;"
                  " SET gpurec.timing = on;")
            calls = {
                "cheapest_offers": "SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price "
                                   "FROM offers', 2) ORDER BY product_id, offer_rank",
                "roc_fitness": "SELECT * FROM gpurec.roc_fitness('SELECT individual_id, label, score FROM examples') "
                               "ORDER BY individual_id",
            }
            in_place = {}
            for name, call in calls.items():
                s.run("SET gpurec.device = 'cpu';")
                cpu = s.run(call + ";")
                s.run("SET gpurec.device = 'gpu';")
                gpu = s.run(call + ";")
                lines = [m for m in map(SERVICE_LINE.search, gpu.details()) if m]
                in_place[name] = float(lines[0].group(5)) if lines else 0.0
                check(f"service-lease-identical-{name}{tag}", not cpu.errors() and cpu.rows and gpu.rows == cpu.rows,
                      f"cpu {cpu.describe()[:300]} gpu {gpu.describe()[:300]}")
                written = float(lines[0].group(4)) if lines else 0.0
                service_line = lines[0].group(0) if lines else "no service line"
                if whole:
                    check(f"service-lease-read-in-place-{name}{tag}",
                          in_place[name] > 1.0 and written < in_place[name] / 10, f"{service_line}; {gpu.describe()[:600]}")
                elif name == "cheapest_offers":
                    # the offers' 12 MB and more cannot all fit in an 18 MB lease: the rest comes the usual way
                    check(f"service-lease-read-in-place-{name}{tag}", in_place[name] > 1.0 and written > 1.0,
                          f"{service_line}; {gpu.describe()[:600]}")
                else:
                    # roc's 8 MB may or may not fit: every process takes a whole chunk (1M rows) a column
                    # from the lease, in the order they start, and whichever way they land, the input
                    # comes whole, in place or written (600,000 rows of 7 bytes and more: 4.2 MB and more)
                    check(f"service-lease-input-whole-{name}{tag}", in_place[name] + written > 4.2,
                          f"{service_line}; {gpu.describe()[:600]}")
            if not whole:
                s.close()
                db.check_server_survived("service-lease-too-small-no-backend-crashed")
                return
            call = calls["cheapest_offers"]
            first = in_place["cheapest_offers"]
            shares = []
            for _ in range(8):
                res = s.run(call + ";")
                lines = [m for m in map(SERVICE_LINE.search, res.details()) if m]
                shares.append(float(lines[0].group(5)) / first if lines and first else 0.0)
            check("service-lease-given-back-after-calls", min(shares) >= 0.9, f"in place against the first: {shares}")
            cancelled = 0
            for timeout_ms in (20, 40, 80, 160, 320):
                res = s.run(f"SET statement_timeout = {timeout_ms}; {call}; RESET statement_timeout;")
                cancelled += res.sqlstates() == ["57014"]
            res = s.run(call + ";")
            lines = [m for m in map(SERVICE_LINE.search, res.details()) if m]
            share = float(lines[0].group(5)) / first if lines and first else 0.0
            check("service-lease-given-back-after-cancels", cancelled > 0 and share >= 0.9,
                  f"{cancelled} cancelled; then in place {share:.2f} of the first; {res.describe()[:600]}")
            killed_mid_read(db, cluster, s.run(call + ";").rows)
            s.close()
            db.check_server_survived("service-lease-no-backend-crashed")
        finally:
            db.drop()
    finally:
        cluster.stop()


def body():
    cluster = Cluster(settings_for())
    try:
        db = robust_lib.Database("service")
        try:
            make_data(db)
            expected = list(range(STAND_INS)) if not REAL_GPUS else None
            if expected is None:
                expected = [int(r[0]) for r in db.sql("SELECT device_id FROM gpurec.devices() ORDER BY 1")]
            service_pid = devices_view(db, expected)
            service_log(cluster)
            identical_answers(db)
            empty_inputs(db, service_pid)
            fault_and_errors(db)
            queue_and_cancel(db)
            kill_service(db, cluster)
            stopped_service(db)
            many_sessions(db)
            gpus_setting()
            db.check_server_survived("service-no-backend-crashed")
        finally:
            db.drop()
    finally:
        cluster.stop()

    parallel_reads_in_place()
    parallel_reads_in_place(24)

    if not REAL_GPUS:
        cluster = Cluster(settings_for({"gpurec.gpus": "1"}))
        try:
            db = robust_lib.Database("service_gpus")
            try:
                make_data(db)
                s = db.session()
                rows = devices(s)
                check("service-gpus-honoured", [r[0] for r in rows] == [1], f"{rows}")
                s.run("SET gpurec.device = 'gpu'; SET gpurec.timing = on;")
                res = s.run(ROC + ";")
                on = [SERVICE_LINE.search(d).group(1) for d in res.details() if SERVICE_LINE.search(d)]
                check("service-gpus-calls-on-listed-device", on == ["1"], res.describe())
                s.close()
            finally:
                db.drop()
        finally:
            cluster.stop()


if __name__ == "__main__":
    robust_lib.main(body)
