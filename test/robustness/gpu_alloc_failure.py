#!/usr/bin/env python3
"""GPU allocation failure, forced by gpurec.test_fail_gpu_alloc.

With every GPU allocation failing:
  * gpurec.device = auto: the call succeeds with the device = cpu result;
    with a GPU and an input large enough for auto to pick it (>= 4e6
    offers, kMinGpuOffers in src/marketplace.cpp) it says in a NOTICE that
    it computed on the CPU instead;
  * gpurec.device = gpu: with a GPU, a clean ERROR 53200; without one,
    55000 (no usable GPU, whatever the setting); the session stays usable
    and, with the setting off again, computes on the GPU again.
The setting is superuser-only: a plain role cannot set it, not even before
the library is loaded.  Every session sets gpurec.device itself, so the
script means the same under PGOPTIONS='-c gpurec.device=gpu'.
"""
import os
import re
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from robust_lib import (check, skip, cheapest_digest, expect_error, improve_digest,  # noqa: E402
                        main, run_in_database)

LARGE_OFFERS = 4_200_000
ROLE = f"gpurec_rob_plain_{os.getpid()}"


def cheapest(table, k):
    return cheapest_digest(f"SELECT product_id, store_id, price FROM {table}", k)


def improve(table):
    return improve_digest("SELECT cart_id, product_id, store_id FROM carts",
                          f"SELECT product_id, store_id, price FROM {table}")


def body():
    run_in_database("gpualloc", run_checks, "gpu-alloc-no-backend-crashed", roles=[ROLE])


def run_checks(db):
    gpus = int(db.sql("SELECT count(*) FROM gpurec.devices()")[0][0])
    print(f"# {gpus} GPU(s) visible to the backend", flush=True)
    db.sql("""
        CREATE TABLE offers AS
          SELECT 1 + g % 2000 AS product_id, (g * 7919) % 397 AS store_id,
                 round(((g * 104729) % 100000) / 100.0, 2) AS price
          FROM generate_series(1::bigint, 50000) g;
        CREATE TABLE carts AS
          SELECT g / 4 AS cart_id, 1 + (g * 31) % 2100 AS product_id, g % 397 AS store_id
          FROM generate_series(1, 2000) g;""")

    s = db.session()
    s.run("SET gpurec.device = 'cpu';")
    ref_cheapest = s.run(cheapest("offers", 3)).rows
    ref_improve = s.run(improve("offers")).rows
    if not check("gpu-alloc-references", len(ref_cheapest) == 1 and len(ref_cheapest[0][1]) == 32
                 and len(ref_improve) == 1 and len(ref_improve[0][1]) == 32,
                 f"device = cpu gave {ref_cheapest} and {ref_improve}"):
        return

    check("gpu-alloc-setting-default-off", s.value("SHOW gpurec.test_fail_gpu_alloc;") == "off",
          "gpurec.test_fail_gpu_alloc is not off by default")

    # auto, failing allocations: the right result, on the CPU
    s.run("SET gpurec.device = 'auto'; SET gpurec.test_fail_gpu_alloc = on;")
    r = s.run(cheapest("offers", 3))
    check("gpu-alloc-auto-cheapest-offers-correct", not r.errors() and r.rows == ref_cheapest,
          r.describe())
    check("gpu-alloc-auto-small-input-no-fallback-notice", not r.notices(),
          f"a small input under auto should not try the GPU: {r.notices()}")
    r = s.run(improve("offers"))
    check("gpu-alloc-auto-improve-carts-correct", not r.errors() and r.rows == ref_improve,
          r.describe())

    # gpu, failing allocations
    s.run("SET gpurec.device = 'gpu';")
    for name, call in (("cheapest-offers", cheapest("offers", 3)),
                       ("improve-carts", improve("offers"))):
        r = s.run(call)
        if gpus > 0:
            if expect_error(f"gpu-alloc-device-gpu-{name}-53200", r, "53200"):
                check(f"gpu-alloc-device-gpu-{name}-no-result", not r.rows, r.describe())
        else:
            expect_error(f"gpu-alloc-device-gpu-{name}-no-gpu-55000", r, "55000")
    # the session is fine, on the CPU and (with allocations allowed again) on the GPU
    r = s.run("SET gpurec.device = 'cpu';" + cheapest("offers", 3))
    check("gpu-alloc-session-usable-cpu", not r.errors() and r.rows == ref_cheapest, r.describe())
    if gpus > 0:
        r = s.run("SET gpurec.test_fail_gpu_alloc = off; SET gpurec.device = 'gpu';" +
                  cheapest("offers", 3) + improve("offers"))
        check("gpu-alloc-gpu-usable-again", not r.errors() and r.rows == ref_cheapest +
              ref_improve, r.describe())
    else:
        r = s.run("SET gpurec.test_fail_gpu_alloc = off; SET gpurec.device = 'gpu';" +
                  cheapest("offers", 3))
        expect_error("gpu-alloc-no-gpu-device-gpu-55000", r, "55000")
        # the reason is the machine's, in its words: no GPU, no driver, or no CUDA in the
        # build; never a CUDA version mismatch when no driver is there at all
        why = " ".join(r.details())
        check("gpu-device-without-gpu-says-why",
              re.search(r"no GPU was found|built without CUDA|older than the CUDA runtime", why) is not None
              and "insufficient" not in why, r.describe())

    # auto on an input large enough for the GPU, on fewer than 8 CPU threads (from 8 on, auto
    # ranks offers on the CPU: kMinCpuThreadsOverGpu): the NOTICE, and the CPU's result
    if gpus > 0:
        db.sql(f"""
            CREATE UNLOGGED TABLE large AS
              SELECT 1 + (random() * 99999)::int AS product_id,
                     (random() * 999)::bigint AS store_id,
                     round((random() * 1000)::numeric, 2) AS price
              FROM generate_series(1, {LARGE_OFFERS});
            VACUUM ANALYZE large;""")
        r = s.run("SET gpurec.device = 'cpu';" + cheapest("large", 2) + improve("large"))
        ref_large = r.rows
        r = s.run("SET gpurec.device = 'auto'; SET gpurec.cpu_threads = 4; SET gpurec.test_fail_gpu_alloc = on;" +
                  cheapest("large", 2))
        check("gpu-alloc-auto-large-correct", not r.errors() and r.rows == ref_large[:1],
              r.describe())
        fell_back = [n for n in r.notices() if "cpu" in n.lower()]
        check("gpu-alloc-auto-large-notice", len(fell_back) == 1,
              f"expected one NOTICE saying it computed on the CPU, got {r.notices()}")
        r = s.run(improve("large"))
        check("gpu-alloc-auto-large-improve-carts-correct",
              not r.errors() and r.rows == ref_large[1:], r.describe())
        check("gpu-alloc-auto-large-improve-carts-notice",
              any("cpu" in n.lower() for n in r.notices()),
              f"expected a NOTICE saying it computed on the CPU, got {r.notices()}")
        r = s.run("SET gpurec.cpu_threads = 8;" + cheapest("large", 2))
        check("gpu-alloc-auto-large-8-threads-cpu-without-trying-the-gpu",
              not r.errors() and r.rows == ref_large[:1] and not r.notices(), r.describe())
        r = s.run("SET gpurec.cpu_threads = 4; SET gpurec.test_fail_gpu_alloc = off;" + cheapest("large", 2))
        check("gpu-alloc-auto-large-after-correct", not r.errors() and r.rows == ref_large[:1]
              and not r.notices(), r.describe())
    else:
        skip("gpu-alloc-auto-large-falls-back-with-a-notice", "no GPU here: the auto fallback on a large input is not checked")
    s.close()

    # superuser-only, before and after the library is loaded
    db.sql(f"CREATE ROLE {ROLE}; GRANT USAGE ON SCHEMA gpurec TO {ROLE}; "
           f"GRANT SELECT ON offers, carts TO {ROLE};")
    p = db.session()
    r = p.run(f"SET ROLE {ROLE}; SET gpurec.test_fail_gpu_alloc = on;")
    placeholder = p.value("SHOW gpurec.test_fail_gpu_alloc;")
    r = p.run("SET gpurec.device = 'auto';" + cheapest("offers", 3))
    check("gpu-alloc-plain-role-before-load-call-works",
          not r.errors() and r.rows == ref_cheapest, r.describe())
    value = p.value("SHOW gpurec.test_fail_gpu_alloc;")
    check("gpu-alloc-plain-role-before-load-not-applied", value == "off",
          f"a plain role set it to on before the library loaded (SHOW said {placeholder}); "
          f"after loading it is {value}")
    r = p.run("SET gpurec.test_fail_gpu_alloc = on;")
    expect_error("gpu-alloc-plain-role-cannot-set-42501", r, "42501")
    p.close()


if __name__ == "__main__":
    main(body)
