#!/usr/bin/env bash
# test/bench/gpu_check_gpuprune.sh: similar_users pruned on the GPU (issue
# 31), checked and timed on a GPU host in under 5 minutes (one GPU, 16
# cores).  It builds nothing; build first, with nvcc and GoogleTest:
#   make -j16 && make -j16 unittest-build compute-benches
# (test/unit/gpurec_unit_tests, test/bench/geo_pruned_compute_bench).
#
# Steps, each under a timeout, each line saying what it shows:
#   1. the geo GPU unit tests (GeoGpu.*: the bounded and the pruned GPU
#      paths and the brute force against the CPU brute force, bit for bit,
#      both metrics) and the CPU oracle of the pruned path's lists
#      (*PrunedLists*): all must pass, none may be skipped ("no usable GPU"
#      means the binary has no kernels).
#   2. the engine alone (no PostgreSQL), 100k clustered users x 20 points,
#      k = 10, euclidean, on the GPU: auto (the bounded search), then the
#      brute force (off), rows compared bit for bit ("rows identical").  Each
#      run's line gives its wall time and compute; auto's adds "bounded on
#      the GPU: X of Y point pairs compared (P%)".  Target: at most 1 s.
#   3. 30k clustered haversine, the same.
#   4. 100k uniform euclidean, the same: the boxes rule out little, so
#      auto's time against the brute force's is the bound's cost (target:
#      at most 1.1x).
#   5. 1M clustered euclidean, auto, on one GPU (the issue's target: 30 s
#      end to end on 4 GPUs).
# The limits (60 + 40 + 30 + 40 + 90 s) keep the whole under 5 minutes.
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
step 60 "1. geo GPU unit tests and the lists' oracle (all pass, none skipped)" \
	"$unit" --gtest_filter='*GeoGpu*:*PrunedLists*' --gtest_brief=1
step 40 "2. 100k clustered euclidean, GPU: auto (bounded) then brute force (off), rows compared" \
	"$bench" 100000 clustered euclidean gpu compare-auto
step 30 "3. 30k clustered haversine, GPU: auto (bounded) then brute force (off), rows compared" \
	"$bench" 30000 clustered haversine gpu compare-auto
step 40 "4. 100k uniform euclidean, GPU: auto (bounded) then brute force (off), rows compared" \
	"$bench" 100000 uniform euclidean gpu compare-auto
step 90 "5. 1M clustered euclidean, GPU, auto (bounded), one GPU" \
	"$bench" 1000000 clustered euclidean gpu auto
echo
echo "gpu_check_gpuprune: $failed step(s) failed"
[ "$failed" -eq 0 ]
