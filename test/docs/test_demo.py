#!/usr/bin/env python3
"""demo.sh runs to its end, at a small marketplace (DEMO_PRODUCTS=300), and
says what a reader should read: its summary names every function it
showed (optimize_carts included), no DETAIL line of gpurec's internals
reaches the reader, no word of CUDA's start where devices() is empty, and
optimize_carts saves a believable share of carts filled as shoppers fill
them (more than nothing, less than half).

Run by test/run_all.sh after its build (demo.sh's own build is then a no-op
and GPUREC_NO_APT keeps it from apt-get); the demo starts and stops a
cluster of its own.  Prints PASS/FAIL lines as the property tests do.
"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "property"))
from pgtest import check  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
FUNCTIONS = ["devices", "cheapest_offers", "improve_carts", "optimize_carts", "user_similarity", "similar_users",
             "predict_strength", "fit_exponent", "roc_fitness", "roc_auc"]


def main():
    directory = tempfile.mkdtemp(prefix="gpurec-demo-test-")
    os.chmod(directory, 0o755)  # the cluster runs as pgtest when the test runs as root
    env = dict(os.environ, GPUREC_NO_APT="1", DEMO_PRODUCTS="300", DEMO_DIR=os.path.join(directory, "cluster"))
    for name in ("PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGOPTIONS"):
        env.pop(name, None)
    proc = subprocess.run(["bash", os.path.join(ROOT, "demo.sh")], capture_output=True, text=True, env=env)
    out = proc.stdout + proc.stderr
    check("demo-runs-to-its-end", proc.returncode == 0 and "== Summary" in out, out[-3000:])
    summary = out[out.find("== Summary"):]
    missing = [f for f in FUNCTIONS if f not in summary]
    check("demo-summary-names-every-function", "== Summary" in out and not missing, f"not in the summary: {missing}")
    details = [line for line in out.splitlines() if line.startswith("DETAIL:")]
    check("demo-shows-no-detail-lines", not details, f"{len(details)} DETAIL lines, as {details[:2]}")
    if "gpurec.devices() returns no rows" in out:
        check("demo-says-nothing-of-cuda-without-a-gpu", "CUDA's start" not in out,
              [line for line in out.splitlines() if "CUDA's start" in line][:2])
    saving = re.search(r"optimize_carts saves ([\d.]+) %", out)
    check("demo-optimize-carts-saving-is-believable", saving is not None and 1 < float(saving.group(1)) < 50,
          saving.group(0) if saving else "no saving line")
    subprocess.run(["rm", "-rf", directory])


if __name__ == "__main__":
    main()
