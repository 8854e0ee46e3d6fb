#!/usr/bin/env bash
# test/bench/gpu_check_gpuprune.sh: similar_users pruned on the GPU (issue
# 31), checked and timed on a GPU host in under 3 minutes (one GPU, 16
# cores).  It builds nothing; build first, with nvcc and GoogleTest:
#   make -j16 && make -j16 unittest-build compute-benches
# (test/unit/gpurec_unit_tests, test/bench/geo_pruned_compute_bench).
#
# Steps, each under a timeout, each line saying what it shows:
#   1. the geo GPU unit tests (GeoGpu.*: the pruned GPU path and the brute
#      force against the CPU brute force, bit for bit, both metrics) and the
#      CPU oracle of the lists the GPU is given (*PrunedLists*): all must pass,
#      none may be skipped ("no usable GPU" means the binary has no kernels).
#   2. the engine alone (no PostgreSQL), 100k clustered users x 20 points,
#      k = 10, euclidean, on the GPU: pruned (on: bounded by the users'
#      boxes), then the brute force (off), rows compared bit for bit ("rows
#      identical").  Each run's line gives its wall time and compute; the
#      pruned one adds "pruned on the GPU by the users' boxes: X of Y point
#      pairs compared (P%)".  Target: pruned at most 1 s.
#   3. the CPU's lists alone (lists), what the GPU compares where k is
#      larger than a bounded search keeps: grouping, index and lists on the
#      host's cores, and the pairs the GPU is given.
#   4. 30k clustered haversine, pruned against the brute force on the GPU,
#      rows compared.
#   5. 100k uniform euclidean with auto: the users' boxes cover the map, and
#      every pair is compared at once ("every point pair compared on the
#      GPU"), at about the brute force's time of step 2.
# The limits (50 + 50 + 30 + 30 + 20 s) keep the whole under 3 minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."
unit=test/unit/gpurec_unit_tests
bench=test/bench/geo_pruned_compute_bench
for binary in "$unit" "$bench"; do
	if [ ! -x "$binary" ]; then
		echo "gpu_check_gpuprune: $binary is not built: run make -j16 && make -j16 unittest-build compute-benches" >&2
		exit 2
	fi
done
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(nproc) cores"
failed=0
step() {
	local limit=$1 title=$2
	shift 2
	echo
	echo "=== $title"
	local start=$SECONDS
	timeout "$limit" "$@"
	local rc=$?
	echo "--- exit $rc after $((SECONDS - start)) s (124: past its ${limit} s limit)"
	[ "$rc" -eq 0 ] || failed=$((failed + 1))
}
step 50 "1. geo GPU unit tests and the lists' oracle (all pass, none skipped)" \
	"$unit" --gtest_filter='*GeoGpu*:*PrunedLists*' --gtest_brief=1
step 50 "2. 100k clustered euclidean, GPU: pruned (on) then brute force (off), rows compared" \
	"$bench" 100000 clustered euclidean gpu compare
step 30 "3. 100k clustered euclidean: the CPU's half of the pruned run (grouping, index, lists)" \
	"$bench" 100000 clustered euclidean cpu lists
step 30 "4. 30k clustered haversine, GPU: pruned (on) then brute force (off), rows compared" \
	"$bench" 30000 clustered haversine gpu compare
step 20 "5. 100k uniform euclidean, GPU, auto: every pair at once (the boxes cover the map)" \
	"$bench" 100000 uniform euclidean gpu auto
echo
echo "gpu_check_gpuprune: $failed step(s) failed"
[ "$failed" -eq 0 ]
