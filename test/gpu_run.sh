#!/usr/bin/env bash
# test/gpu_run.sh [suite|bench|all]: the whole GPU run, on a machine with a
# GPU and nvcc but no PostgreSQL (an H100 machine, say).  It unpacks the portable
# PostgreSQL 15 that `shared/pg-portable/pack .gpu` made into the git-ignored
# .gpu/, builds gpurec with nvcc against it, and then
#   suite: unit tests and the whole SQL suite with gpurec.device = gpu
#          (GPUREC_SECTIONS="unit property", say, runs a part of it, and
#          GPUREC_SCRIPTS=test_roc the scripts whose path matches: test/run_all.sh)
#   bench: the benchmarks of test/bench, GPU and CPU
#   service: the GPU service on the machine's GPUs: test/robustness/gpu_service.py
#            with GPUREC_SERVICE_REAL_GPUS=1, then test/bench/bench_service.sh
#            (PHASES narrows it)
#   keys: issue 33's ids of any type, test/bench/bench_keys.sh: cheapest_offers
#         30.72M and similar_users 100k (the CPU: CPU_USERS) with integer,
#         uuid and text ids, GPU (through the GPU service) and CPU (about 2
#         minutes; not part of all)
#   shards: issue 32's scale-out, test/bench/bench_shards.sh over 4
#           clusters (a GPU each where there are 4) on the CPU and the GPU:
#           overhead, weak and strong scaling (ROUNDS=3; about 4 minutes;
#           not part of all)
#   sanitize: the GPU unit tests under compute-sanitizer's memcheck,
#             racecheck, initcheck and synccheck (SANITIZE_FILTER narrows
#             the tests; each tool has SANITIZE_TIMEOUT seconds)
# Logs go to $OUT, or to /tmp/gpurec-gpu-run when OUT is unset.
#
# Prepare on the build machine (it has GoogleTest; the GPU machine has not):
#   shared/pg-portable/pack .gpu 15
#   mkdir -p .gpu/gtest/include .gpu/gtest/lib && cp -r /usr/include/gtest .gpu/gtest/include/ &&
#     cp /usr/lib/x86_64-linux-gnu/libgtest{,_main}.a .gpu/gtest/lib/
# The unit tests are then built here, with the GPU's kernels; without
# .gpu/gtest, a binary built on the build machine (.gpu/gpurec_unit_tests,
# CPU-only: its GPU tests skip) runs instead.
# gpurec_shards needs PL/Proxy, which the portable PostgreSQL lacks: its
# Debian package, fetched on the build machine into .gpu/ with
#   (cd .gpu && apt-get download postgresql-15-plproxy)
# is unpacked here into the portable PostgreSQL (its plproxy.so links the
# libpq the bundle carries).
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
out=${OUT:-/tmp/gpurec-gpu-run}
mkdir -p "$out"
if [ ! -d /tmp/pgroot ]; then
	tar xzf .gpu/pg-portable.tgz -C /tmp || exit 1
fi
source /tmp/pgroot/env.sh
export PG_CONFIG=/tmp/pgroot/usr/lib/postgresql/15/bin/pg_config
plproxy_deb=$(ls .gpu/postgresql-15-plproxy_*.deb 2>/dev/null | head -1)
if [ -n "$plproxy_deb" ] && [ ! -f "$PG_PORTABLE_LIBDIR/plproxy.so" ]; then
	rm -rf /tmp/plproxy-deb && mkdir -p /tmp/plproxy-deb &&
		(cd /tmp/plproxy-deb && ar x "$OLDPWD/$plproxy_deb" && tar xf data.tar.*) &&
		cp /tmp/plproxy-deb/usr/lib/postgresql/15/lib/plproxy.so "$PG_PORTABLE_LIBDIR/" &&
		cp /tmp/plproxy-deb/usr/share/postgresql/15/extension/plproxy* "$PG_PORTABLE_SHAREDIR/extension/" || exit 1
elif [ -z "$plproxy_deb" ] && [ ! -f "$PG_PORTABLE_LIBDIR/plproxy.so" ]; then
	echo "no .gpu/postgresql-15-plproxy_*.deb: gpurec_shards' tests and bench_shards.sh will fail" >&2
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
# GoogleTest from .gpu/gtest, where it came: the unit tests are then built
# here, with the kernels, and their GPU tests run
if [ -d .gpu/gtest ]; then
	cp -r .gpu/gtest/include/gtest /usr/local/include/ && cp .gpu/gtest/lib/*.a /usr/local/lib/ || exit 1
fi

if [ "$what" = sanitize ] || [ "$what" = all ]; then
	# each tool's whole report in $out/sanitize-TOOL.log; a finding ends the
	# run with exit 99 and an ERROR SUMMARY line.  SANITIZE_TOOLS picks
	# tools, SANITIZE_FILTER the tests (racecheck only sees shared memory)
	unit_tests=.gpu/gpurec_unit_tests
	if [ -d .gpu/gtest ]; then
		make -s -j8 unittest-build PG_CONFIG="$PG_CONFIG" >/dev/null || exit 1
		unit_tests=test/unit/gpurec_unit_tests
	fi
	for tool in ${SANITIZE_TOOLS:-memcheck racecheck initcheck synccheck}; do
		timeout "${SANITIZE_TIMEOUT:-240}" compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 \
			"$unit_tests" --gtest_filter="${SANITIZE_FILTER:-*Gpu*}" --gtest_brief=1 >"$out/sanitize-$tool.log" 2>&1
		echo "=== compute-sanitizer --tool $tool: exit $? (124: timed out)"
		grep -E 'ERROR SUMMARY|PASSED|FAILED' "$out/sanitize-$tool.log"
		grep -m 3 -A 6 -E '^========= (Invalid|Uninitialized|Race|Barrier|Error|Program hit)' "$out/sanitize-$tool.log"
	done 2>&1 | tee "$out/sanitize.log"
fi

if [ "$what" = suite ] || [ "$what" = all ]; then
	make -s clean >/dev/null 2>&1
	unit_tests=$PWD/.gpu/gpurec_unit_tests
	[ -d .gpu/gtest ] && unit_tests=
	GPUREC_NO_SKLEARN=1 GPUREC_SKIP_CPU_ONLY_BUILD=1 GPUREC_SKIP_SANITIZERS=1 GPUREC_UNIT_TESTS=$unit_tests GPUREC_NO_APT=1 GPUREC_DEVICE=gpu GPUREC_TEST_DIR=/tmp/gpurec-gpu-test bash test/run_all.sh 2>&1 | tee "$out/suite.log" | tail -80
fi

if [ "$what" = service ] || [ "$what" = all ]; then
	make -s -j16 PG_CONFIG="$PG_CONFIG" >/dev/null && make -s install PG_CONFIG="$PG_CONFIG" >/dev/null || exit 1
	GPUREC_SERVICE_REAL_GPUS=1 python3 test/robustness/gpu_service.py 2>&1 | tee "$out/service-checks.log" |
		grep -vE '^PASS' | tail -20
	echo "service checks: $(grep -c '^PASS' "$out/service-checks.log") passed, $(grep -c '^FAIL' "$out/service-checks.log") failed"
	bash test/bench/bench_service.sh 2>&1 | tee "$out/service-bench.log"
fi

if [ "$what" = keys ]; then
	make -s -j16 PG_CONFIG="$PG_CONFIG" >/dev/null && make -s install PG_CONFIG="$PG_CONFIG" >/dev/null || exit 1
	# the GPU calls through the GPU service, as gpurec is meant to run: without it each fresh backend's
	# call would pay its own start of CUDA, the same for every kind of id, blurring the ratios; 8 GB of
	# shared buffers hold the three 30.72M-row tables (5 GB)
	eval "$(test/cluster.sh start /tmp/gpurec-bench -c shared_preload_libraries=gpurec -c shared_buffers=8GB -c work_mem=1GB -c max_wal_size=20GB -c jit=off -c max_worker_processes=32 -c max_parallel_workers=32)"
	bash test/bench/bench_keys.sh 2>&1 | tee "$out/keys.log"
	test/cluster.sh stop /tmp/gpurec-bench
fi

if [ "$what" = shards ]; then
	make -s -j16 PG_CONFIG="$PG_CONFIG" >/dev/null && make -s install PG_CONFIG="$PG_CONFIG" >/dev/null || exit 1
	DEVICES="${DEVICES:-cpu gpu}" PARTS="${PARTS:-reference overhead cheapest roc similar}" ROUNDS="${ROUNDS:-3}" \
		bash test/bench/bench_shards.sh 2>&1 | tee "$out/shards.log"
fi

if [ "$what" = bench ] || [ "$what" = all ]; then
	make -s -j8 PG_CONFIG="$PG_CONFIG" >/dev/null && make -s install PG_CONFIG="$PG_CONFIG" >/dev/null
	nvcc -O3 -o /tmp/d2d_bandwidth test/bench/d2d_bandwidth.cu && /tmp/d2d_bandwidth | tee "$out/d2d.txt"
	# the compute phases alone, without PostgreSQL
	make -s -j8 compute-benches PG_CONFIG="$PG_CONFIG" >/dev/null &&
		for b in test/bench/*_compute_bench; do echo "=== $b"; "$b"; done 2>&1 | tee "$out/compute.log"
	eval "$(test/cluster.sh start /tmp/gpurec-bench -c shared_buffers=4GB -c work_mem=1GB -c max_wal_size=20GB -c jit=off -c max_worker_processes=32 -c max_parallel_workers=32)"
	for b in ${BENCHES:-test/bench/bench_*.sh}; do
		echo "=== $b"
		DEVICES="${DEVICES:-gpu cpu}" BASELINES=0 bash "$b"
	done 2>&1 | tee "$out/bench.log"
	test/cluster.sh stop /tmp/gpurec-bench
fi
