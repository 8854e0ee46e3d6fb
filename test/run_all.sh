#!/usr/bin/env bash
# test/run_all.sh: builds gpurec, starts a throwaway cluster and runs every
# test: GoogleTest unit tests, pg_regress, property tests against oracles,
# README.md's tutorial, robustness scripts.  Ends with the line "N passed,
# N failed" and exits non-zero when anything failed.
#
# Environment:
#   GPUREC_DEVICE=gpu   run the SQL suites with gpurec.device = gpu (GPU machine)
#   GPUREC_NO_APT=1     do not apt-get the dependencies (they are there already)
#   PG_CONFIG           which PostgreSQL to build against (default: pg_config)
#   GPUREC_SECTIONS     run only these of: unit regress property docs shards
#                       robustness (default: all; the GPU run splits the suite)
#   GPUREC_SCRIPTS      of the property, docs, shards and robustness scripts,
#                       run only those whose path matches this extended regex
#                       (test_roc, say)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=${GPUREC_TEST_DIR:-/tmp/gpurec-test}
passed=0
failed=0
skipped=0
failures=()

log() { printf '\n=== %s\n' "$*"; }
# wanted SECTION: whether GPUREC_SECTIONS asks for it (all when unset)
wanted() { [ -z "${GPUREC_SECTIONS:-}" ] || [[ " $GPUREC_SECTIONS " == *" $1 "* ]]; }
# chosen SCRIPT: whether GPUREC_SCRIPTS picks it (all when unset)
chosen() { [ -z "${GPUREC_SCRIPTS:-}" ] || [[ "$1" =~ $GPUREC_SCRIPTS ]]; }
record() { # record NAME OK
	if [ "$2" = 1 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); failures+=("$1"); fi
}

if [ -z "${GPUREC_NO_APT:-}" ]; then
	log "installing dependencies"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq make g++ postgresql-15 postgresql-server-dev-15 postgresql-15-cron \
		postgresql-15-plproxy libgtest-dev python3 python3-numpy python3-sklearn >/dev/null || {
		echo "apt-get failed"
		exit 1
	}
	# PostGIS, for test/property/test_postgis.py (gpurec itself does not need it)
	apt-get install -y -qq postgresql-15-postgis-3 >/dev/null || {
		echo "apt-get failed"
		exit 1
	}
fi
export PG_CONFIG=${PG_CONFIG:-pg_config}
export PATH="$($PG_CONFIG --bindir):$PATH"

log "building"
if ! make -s -j2 PG_CONFIG="$PG_CONFIG" || ! make -s install PG_CONFIG="$PG_CONFIG" >/dev/null; then
	echo "build failed"
	echo "0 passed, 1 failed, 0 skipped"
	exit 1
fi

if [ -z "${GPUREC_SKIP_CPU_ONLY_BUILD:-}" ]; then
	log "a CPU-only build (as on a machine without nvcc) compiles and links"
	cpu_only=$(mktemp -d)
	git ls-files -z | xargs -0 cp --parents -t "$cpu_only" 2>/dev/null || cp -r . "$cpu_only"
	if make -s -C "$cpu_only" NVCC= PG_CONFIG="$PG_CONFIG" >/dev/null 2>&1 && [ -f "$cpu_only/gpurec.so" ]; then
		record cpu-only-build 1
		echo "ok"
	else
		record cpu-only-build 0
		echo "FAILED"
	fi
	rm -rf "$cpu_only"
fi

log "layers: the include graph, and postgres.h breaking engine and kernel builds"
while read -r line; do
	echo "$line"
	case "$line" in PASS*) record "$line" 1 ;; FAIL*) record "$line" 0 ;; esac
done < <(python3 test/layers/check_layers.py 2>&1)

log "unit tests (GoogleTest)"
# GPUREC_UNIT_TESTS: a unit-test binary built elsewhere (the GPU machine has no GoogleTest)
unit_tests=${GPUREC_UNIT_TESTS:-test/unit/gpurec_unit_tests}
if ! wanted unit; then
	echo "skipped (GPUREC_SECTIONS)"
elif [ -n "${GPUREC_UNIT_TESTS:-}" ] || make -s unittest-build PG_CONFIG="$PG_CONFIG" >/dev/null; then
	"$unit_tests" --gtest_color=no >"$work.unit.log" 2>&1
	grep -E '^\[ +(OK|FAILED) +\]' "$work.unit.log" | grep -v ' tests\?, ' || true
	unit_ok=$(grep -cE '^\[ +OK +\]' "$work.unit.log")
	unit_failed=$(grep -E '^\[ +FAILED +\] [A-Za-z]' "$work.unit.log" | grep -vc 'listed below' || true)
	unit_skipped=$(grep -E '^\[ +SKIPPED +\] [A-Za-z]' "$work.unit.log" | grep -vc 'listed below' || true)
	skipped=$((skipped + unit_skipped))
	passed=$((passed + unit_ok))
	failed=$((failed + unit_failed))
	grep -qE '^\[ +PASSED +\]|^\[ +FAILED +\]' "$work.unit.log" || record unit-tests-crashed 0
else
	record unit-tests-build 0
fi

log "unit tests under AddressSanitizer and UndefinedBehaviorSanitizer (CPU engine)"
# one check: the whole unit suite, CPU-only, with every finding (leaks included) fatal
if [ -n "${GPUREC_SKIP_SANITIZERS:-}" ]; then
	echo "skipped (GPUREC_SKIP_SANITIZERS)"
elif make -s test/unit/gpurec_unit_tests_sanitized PG_CONFIG="$PG_CONFIG" >"$work.sanitized.log" 2>&1 &&
	test/unit/gpurec_unit_tests_sanitized --gtest_color=no >>"$work.sanitized.log" 2>&1; then
	grep -E '^\[ +(PASSED|SKIPPED) +\]' "$work.sanitized.log"
	record "sanitizers: unit tests clean under ASan (with leaks) and UBSan" 1
else
	grep -E 'ERROR: |runtime error|FAILED|error:' "$work.sanitized.log" | head -20
	record "sanitizers: unit tests clean under ASan (with leaks) and UBSan" 0
fi

log "starting a throwaway cluster"
preload=""
[ -f "$($PG_CONFIG --pkglibdir)/pg_cron.so" ] && preload="-c shared_preload_libraries=pg_cron -c cron.database_name=contrib_regression -c cron.use_background_workers=on"
eval "$(test/cluster.sh start "$work" $preload -c max_connections=50 -c jit=off)" || {
	cat "$work/server.log" 2>/dev/null
	echo "0 passed, 1 failed, 0 skipped"
	exit 1
}
trap 'test/cluster.sh stop "$work"' EXIT
if [ "${GPUREC_DEVICE:-}" = gpu ]; then
	export PGOPTIONS="-c gpurec.device=gpu"
fi

log "pg_regress"
skip=""
[ -n "$preload" ] || skip="cron_refresh"
if wanted regress; then
	make -s installcheck PG_CONFIG="$PG_CONFIG" SKIP_REGRESS="$skip" >"$work.regress.log" 2>&1
	cat "$work.regress.log"
	[ -f regression.diffs ] && head -100 regression.diffs
	while read -r name; do record "regress:$name" 1; done < <(grep -E '^(ok|test|     )? *[a-z_]+ +\.\.\. ok' "$work.regress.log" | sed -E 's/.* ([a-z_]+) +\.\.\. ok.*/\1/')
	while read -r name; do record "regress:$name" 0; done < <(grep -E '\.\.\. FAILED' "$work.regress.log" | sed -E 's/.* ([a-z_]+) +\.\.\. FAILED.*/\1/')
	grep -qE '\.\.\. (ok|FAILED)' "$work.regress.log" || record regress-did-not-run 0
else
	echo "skipped (GPUREC_SECTIONS)"
fi

run_check_script() { # a script printing PASS/FAIL lines
	local script=$1 out
	out=$("$@" 2>&1)
	local rc=$?
	echo "$out"
	while read -r line; do record "$line" 1; done < <(grep -E '^PASS ' <<<"$out")
	while read -r line; do record "$line" 0; done < <(grep -E '^FAIL ' <<<"$out")
	skipped=$((skipped + $(grep -cE '^SKIP ' <<<"$out" || true)))
	[ $rc = 0 ] || record "$script exited with $rc" 0
}

# Debian's python3, where python3-sklearn is installed (PATH may hold another)
python=python3
[ -x /usr/bin/python3 ] && python=/usr/bin/python3

log "property tests"
for t in test/property/test_*.py; do
	[ -e "$t" ] || continue
	wanted property && chosen "$t" || continue
	echo "--- $t"
	run_check_script "$python" "$t"
done

log "documentation: README.md's tutorial and examples, run as they stand"
for t in test/docs/test_*.py; do
	[ -e "$t" ] || continue
	wanted docs && chosen "$t" || continue
	echo "--- $t"
	run_check_script "$python" "$t"
done

log "scale-out tests (gpurec_shards on PL/Proxy, over three clusters of their own)"
for t in test/shards/test_*.py; do
	[ -e "$t" ] || continue
	wanted shards && chosen "$t" || continue
	echo "--- $t"
	GPUREC_SHARDS_DIR="$work-shard" run_check_script "$python" "$t"
done

log "robustness tests"
for t in test/robustness/*; do
	[ -x "$t" ] && [ -f "$t" ] || continue
	wanted robustness && chosen "$t" || continue
	echo "--- $t"
	case "$t" in
	*.py) run_check_script "$python" "$t" ;;
	*) run_check_script "$t" ;;
	esac
done

log "summary"
for f in "${failures[@]}"; do echo "failed: $f"; done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
