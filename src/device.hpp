/*
 * device.hpp: the one place that decides whether a computation runs on the
 * GPU or the CPU, and the per-call context the SQL layer hands the engine.
 *
 * No PostgreSQL header here: the SQL layer fills ExecContext from the GUCs
 * and supplies the two hooks (interrupt check and NOTICE) as plain callables
 * that go through pg_call.  The GPU is reached only through the kernels'
 * API (kernels/api/); this file adapts engine columns to its views and its
 * failures to engine errors.
 */
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../kernels/api/kernel_api.hpp"
#include "column_chunks.hpp"
#include "cost_model.hpp"
#include "errors.hpp"
#include "progress.hpp"

namespace gpurec {

namespace service {
class Client;
}

enum class DeviceMode
{
	Auto, /* the GPU when usable and the input is large enough to gain */
	Gpu,  /* the GPU or an ERROR */
	Cpu
};

using gpu::Phase;
using gpu::PhaseTimes;
using gpu::Stopwatch;
using gpu::TestFault;

/*
 * A call's context: what the kernels use (gpu::CallContext: interrupt
 * points, memory budget, the test-only allocation failure and fault, phase
 * times) and
 * what only the engine does.
 */
struct ExecContext;
class CallKeys;

/* Copies the n ranges on the cores the call may use (cpu_parallel.cpp): the GPU paths' staging copies. */
void parallel_copy(const gpu::HostCopy *copies, size_t n, ExecContext &ctx);

struct ExecContext : gpu::CallContext
{
	ExecContext()
	{
		host_copy = [](gpu::CallContext &ctx, const gpu::HostCopy *copies, size_t n) {
			parallel_copy(copies, n, static_cast<ExecContext &>(ctx));
		};
	}

	DeviceMode mode = DeviceMode::Auto;
	/*
	 * The most worker threads one CPU computation of the call may use
	 * (gpurec.cpu_threads); 0: one per core.  Servers that share a machine
	 * (shards of gpurec_shards, say) each take their part of its cores.
	 */
	size_t cpu_threads = 0;
	/*
	 * Where the call counts its progress (progress.hpp); worker threads may
	 * add to it, unlike anything else of the context.
	 */
	ProgressReport progress;
	/* Raises a NOTICE. */
	std::function<void(const std::string &)> notice = [](const std::string &) {};
	/*
	 * Says that the calling thread waits on another process (true: the GPU
	 * service computes its call) or no longer (false): the session's wait
	 * event in pg_stat_activity.
	 */
	std::function<void(bool)> waiting = [](bool) {};
	/* Filled in while the call runs. */
	bool used_gpu = false;
	/* The most worker threads that one parallel_for of the call ran. */
	size_t cpu_threads_used = 0;
	/* How each inner query was read, for the timing NOTICE: "offers query: 2 workers". */
	std::string read_notes;
	/*
	 * How long the call waited for CUDA's start before its transfer (a new
	 * session's first GPU call, when the start outlasts the read), and how
	 * long that start took; 0 when it did not wait.
	 */
	double gpu_start_wait_ms = 0;
	double gpu_start_ms = 0;
	/*
	 * Whether CUDA's start began beside a read of this call (read.cpp); the
	 * timing NOTICE says so unless the start found no GPU.
	 */
	bool gpu_start_began_in_read = false;
	/*
	 * The GPU service this backend sends GPU work to (gpu_service.hpp), or
	 * null: the call computes on a GPU of its own process.  Set by the SQL
	 * layer when the service runs; never inside the service.
	 */
	service::Client *service = nullptr;
	/*
	 * The call's uuid and text ids (key_dictionary.hpp): every inner query
	 * of the call codes its id columns through it.  Made by the first read.
	 */
	std::shared_ptr<CallKeys> keys;
	/* Which device dispatch chose and why, for gpurec.timing ("auto: ..."). */
	std::string device_choice;
	/* The work dispatch sent to the GPU: how many GPUs it is worth splitting over (split_parts). */
	WorkShape gpu_work;
	/* The service's device that computed the call (-1: none), and how long the call queued there. */
	int service_device = -1;
	int service_devices = 0; /* how many of the service's devices computed it */
	double service_queued_ms = 0;
	/*
	 * The calling backend's side of its service calls: writing their input
	 * where the service reads it, and the wait from sending them to their
	 * answer (queue, copies, computing and the service's own handling).
	 */
	double service_staged_ms = 0;
	double service_answered_ms = 0;
	/* The bytes of their input written there, and those read where a parallel read left them (a lease's). */
	double service_written_bytes = 0;
	double service_in_place_bytes = 0;
	/*
	 * What the call keeps until it ends (release_while_call_goes_on: an
	 * input whose rows' memory goes back on a CPU thread while the result
	 * is written).  Last, so that it goes first, while the rest of the
	 * context is still there.
	 */
	std::vector<std::shared_ptr<void>> kept_until_done;
};

/* Whether a usable GPU is present; the first call initialises CUDA. */
inline bool gpu_usable(std::string *why_not = nullptr) { return gpu::usable(why_not); }

/* Whether the GPU service a call sends its GPU work to has a device (gpu_service_client.cpp). */
bool service_has_devices(ExecContext &ctx, std::string *why_not);

/*
 * gpu_usable() for a call: the service's devices when it has a service;
 * otherwise its own CUDA, how long it waited for CUDA's start (that its
 * read began) going into ctx.
 */
inline bool gpu_usable(ExecContext &ctx, std::string *why_not = nullptr)
{
	if (ctx.service)
		return service_has_devices(ctx, why_not);
	Stopwatch clock;
	bool usable = gpu::usable(why_not);
	double waited = clock.elapsed_ms();
	if (waited >= 1)
	{
		ctx.gpu_start_wait_ms += waited;
		ctx.gpu_start_ms = gpu::start_ms();
	}
	return usable;
}

/* A column as the kernels see it: its chunks, in place. */
template <typename T> gpu::ChunkedView<T> chunk_view(const ChunkedColumn<T> &column)
{
	static_assert(ChunkedColumn<T>::kChunkRows == gpu::kChunkRows, "engine and kernels chunk alike");
	gpu::ChunkedView<T> view;
	view.rows = column.size();
	view.chunks.reserve(column.chunk_count());
	for (size_t c = 0; c < column.chunk_count(); ++c)
		view.chunks.push_back(column.chunk_data(c));
	return view;
}

/*
 * Runs a GPU computation, turning what the kernels throw into the engine's
 * errors: running out of GPU memory becomes GpuOutOfMemory (which the
 * dispatch may answer by computing on the CPU), the rest keeps its reason.
 */
template <typename Work> auto on_gpu(Work work) -> decltype(work())
{
	try
	{
		return work();
	}
	catch (const gpu::Failure &e)
	{
		switch (e.kind())
		{
			case gpu::Failure::Kind::OutOfMemory:
				throw GpuOutOfMemory(e.what());
			case gpu::Failure::Kind::TooLarge:
				throw Error(sqlstate::program_limit_exceeded, e.what());
			case gpu::Failure::Kind::NoGpu:
				throw Error(sqlstate::object_not_in_prerequisite_state, e.what());
			case gpu::Failure::Kind::Internal:
				break;
		}
		throw Error(sqlstate::internal_error, e.what());
	}
}

/*
 * What auto's cost model knows of the host for this call (host_profile.cpp): the
 * GPU service's measured profile when the call has a service; else this
 * backend's own CUDA's, measured at its first GPU call, with CUDA's start
 * counted while none has begun.  `gpu_started`: whether gpu_usable(ctx)
 * has said yes, so that measuring costs no start.
 */
HostProfile host_profile(const ExecContext &ctx, bool gpu_started);

/*
 * host_profile before an input is read, for what the read must know (start
 * CUDA beside it, rank while reading): CUDA's start, begun beside the read
 * where the GPU may be chosen, hides behind it, so it is not counted.
 */
HostProfile host_profile_for_reading(const ExecContext &ctx);

/* The CPU threads a computation of the call may use (gpurec.cpu_threads; cpu_parallel.cpp). */
size_t call_threads(const ExecContext &ctx);

/*
 * Runs gpu_path or cpu_path by the context's mode.  Under auto, by cost:
 * `shape` is the call's work (cost_model.hpp; no units: the GPU gains
 * nothing under auto, whatever the size), estimated first with what is
 * known without starting a GPU (a backend's own CUDA), then, if the GPU
 * still looks cheaper, with the host's measured profile.  A GPU that runs out of memory gives way to
 * the CPU with a NOTICE.  Both paths must return identical results.
 */
template <typename GpuPath, typename CpuPath>
auto dispatch(ExecContext &ctx, const char *function, const WorkShape &shape, GpuPath gpu_path, CpuPath cpu_path)
	-> decltype(cpu_path())
{
	if (ctx.mode == DeviceMode::Cpu)
	{
		ctx.device_choice = "cpu, as gpurec.device says";
		return cpu_path();
	}
	std::string why_not;
	ctx.gpu_work = shape;
	if (ctx.mode == DeviceMode::Gpu)
	{
		if (!gpu_usable(ctx, &why_not))
			throw Error(sqlstate::object_not_in_prerequisite_state,
						"gpurec.device is 'gpu' but no usable GPU was found", why_not,
						"Set gpurec.device to 'auto' or 'cpu'.");
		ctx.device_choice = "gpu, as gpurec.device says";
		ctx.used_gpu = true;
		return on_gpu(gpu_path);
	}
	if (shape.units <= 0)
	{
		ctx.device_choice = "auto chose the cpu: the GPU gains nothing on work of this shape";
		return cpu_path();
	}
	/* a CPU-only build, or a backend whose CUDA found no GPU: no estimate of a GPU it cannot have */
	if (!ctx.service && gpu::found_unusable())
	{
		(void) gpu_usable(ctx, &why_not);
		ctx.device_choice = "auto chose the cpu: " + why_not;
		return cpu_path();
	}
	size_t threads = call_threads(ctx);
	/* a backend's own CUDA is not started for a call the CPU would win anyway; the service's status costs little */
	CostEstimate guess = estimate_cost(shape, host_profile(ctx, false), threads);
	if (!ctx.service && !guess.gpu_cheaper())
	{
		ctx.device_choice = explain_choice(shape, guess, false);
		return cpu_path();
	}
	if (!gpu_usable(ctx, &why_not))
	{
		ctx.device_choice = "auto chose the cpu: " + why_not;
		return cpu_path();
	}
	CostEstimate known = estimate_cost(shape, host_profile(ctx, true), threads);
	ctx.device_choice = explain_choice(shape, known, known.gpu_cheaper());
	if (!known.gpu_cheaper())
		return cpu_path();
	try
	{
		ctx.used_gpu = true;
		return on_gpu(gpu_path);
	}
	catch (const GpuOutOfMemory &e)
	{
		ctx.used_gpu = false;
		ctx.device_choice = "auto chose the cpu after the GPU ran out of memory";
		ctx.notice(std::string(function) + ": " + e.what() + "; computing on the CPU instead");
	}
	ctx.times.transfer_ms = 0;
	ctx.times.compute_ms = 0;
	return cpu_path();
}

} // namespace gpurec
