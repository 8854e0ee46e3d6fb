/*
 * cost_model.cpp: auto's estimates of a call's time on each device
 * (cost_model.hpp).
 */
#include "no_postgres.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "cost_model.hpp"

namespace gpurec {

namespace {

/*
 * A CPU thread's copy of host memory, bytes a millisecond: a call's input
 * copied into the GPU service's shared memory, on the call's threads.
 */
constexpr double kHostCopyBytesPerMsPerThread = 4e6;

/*
 * What `threads` threads are worth in one thread's work: all of them for
 * arithmetic; for memory-bound work the first fully, and each further one
 * less as they approach kMemoryBoundThreads' worth (16 threads: 5.6, 64: 7.2).
 */
double effective_threads(size_t threads, bool memory_bound)
{
	double t = static_cast<double>(std::max<size_t>(1, threads));
	return memory_bound ? t / (1 + (t - 1) / kMemoryBoundThreads) : t;
}

std::string milliseconds(double ms)
{
	char text[32];
	if (ms < 10)
		std::snprintf(text, sizeof text, "%.1f ms", ms);
	else
		std::snprintf(text, sizeof text, "%.0f ms", ms);
	return text;
}

} // namespace

namespace {

/* The GPU's share of a call's time on `parts` GPUs: their fixed costs, the copies and the computing. */
double gpu_share_ms(const WorkShape &shape, const HostProfile &host, int parts)
{
	double copy_ms = shape.bytes / std::max(host.upload_bytes_per_ms, 1.0);
	return (host.call_ms + copy_ms) * parts + shape.units * shape.rates.gpu_ns / parts / 1e6;
}

} // namespace

int best_parts(const WorkShape &shape, const HostProfile &host, int most)
{
	int best = 1;
	for (int parts = 2; parts <= most; ++parts)
		if (gpu_share_ms(shape, host, parts) < gpu_share_ms(shape, host, best))
			best = parts;
	return best;
}

CostEstimate estimate_cost(const WorkShape &shape, const HostProfile &host, size_t cpu_threads)
{
	CostEstimate e;
	e.cpu_threads = std::max<size_t>(1, cpu_threads);
	e.gpus = shape.splits ? best_parts(shape, host, host.gpus) : 1;
	e.cpu_ms = shape.units * shape.rates.cpu_thread_ns / effective_threads(e.cpu_threads, shape.rates.cpu_memory_bound) /
			   1e6;
	double staging_ms =
		host.through_service ? shape.bytes / (kHostCopyBytesPerMsPerThread * effective_threads(e.cpu_threads, true)) : 0;
	e.gpu_ms = host.start_ms + staging_ms + gpu_share_ms(shape, host, e.gpus);
	return e;
}

double gpu_cheaper_from(const WorkShape &per_unit, const HostProfile &host, size_t cpu_threads)
{
	WorkShape none = per_unit, one = per_unit;
	none.units = none.bytes = 0;
	one.units = 1;
	CostEstimate fixed = estimate_cost(none, host, cpu_threads), unit = estimate_cost(one, host, cpu_threads);
	double gpu_per_unit = unit.gpu_ms - fixed.gpu_ms, cpu_per_unit = unit.cpu_ms - fixed.cpu_ms;
	if (cpu_per_unit <= gpu_per_unit)
		return std::numeric_limits<double>::infinity();
	return fixed.gpu_ms / (cpu_per_unit - gpu_per_unit);
}

std::string explain_choice(const WorkShape &shape, const CostEstimate &estimate, bool chose_gpu)
{
	std::string gpu = "about " + milliseconds(estimate.gpu_ms) + " on " +
					  (estimate.gpus > 1 ? std::to_string(estimate.gpus) + " GPUs" : std::string("the GPU"));
	std::string cpu = "about " + milliseconds(estimate.cpu_ms) + " on " + std::to_string(estimate.cpu_threads) +
					  " CPU thread" + (estimate.cpu_threads == 1 ? "" : "s");
	char units[48];
	std::snprintf(units, sizeof units, "%.3g %s", shape.units, shape.rates.unit);
	return std::string("auto chose the ") + (chose_gpu ? "gpu: " + gpu + " against " + cpu : "cpu: " + cpu + " against " + gpu) +
		   " for " + units;
}

} // namespace gpurec
