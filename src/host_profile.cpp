/*
 * host_profile.cpp: what auto's cost model knows of the host for a call
 * (host_profile and call_threads, declared in device.hpp).
 */
#include "no_postgres.hpp"

#include <algorithm>

#include "cpu_parallel.hpp"
#include "device.hpp"
#include "gpu_service.hpp"

namespace gpurec {

namespace {

/*
 * CUDA's start in a backend, counted against the GPU until it happened:
 * 170-1,035 ms measured in new processes (more GPUs visible, more time;
 * test/bench/cuda_start_cost.cu), of which a call's read hides part.
 */
constexpr double kAssumedCudaStartMs = 250;

} // namespace

HostProfile host_profile(const ExecContext &ctx, bool gpu_started)
{
	if (ctx.service)
		return ctx.service->host_profile();
	/* a backend's own CUDA: measured once, at the first call that started it */
	static HostProfile measured;
	if (measured.measured)
		return measured;
	if (!gpu_started)
	{
		/* a start begun beside the read has had the read to hide behind */
		HostProfile host;
		host.start_ms = gpu::start_begun() ? 0 : kAssumedCudaStartMs;
		return host;
	}
	try
	{
		gpu::DeviceCosts costs = gpu::measure_device_costs();
		measured.upload_bytes_per_ms = costs.upload_bytes_per_ms;
		measured.call_ms = costs.call_ms;
		measured.measured = true;
		return measured;
	}
	catch (const gpu::Failure &)
	{
		return HostProfile(); /* the defaults; the call's own GPU work says what is wrong, if anything */
	}
}

HostProfile host_profile_for_reading(const ExecContext &ctx)
{
	HostProfile host = host_profile(ctx, false);
	host.start_ms = 0;
	return host;
}

size_t call_threads(const ExecContext &ctx) { return parallel_workers(SIZE_MAX, ctx); }

} // namespace gpurec
