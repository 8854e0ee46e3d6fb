/*
 * device.hpp: the one place that decides whether a computation runs on the
 * GPU or the CPU, and the per-call context the SQL layer hands the engine.
 *
 * No PostgreSQL header here: the SQL layer fills ExecContext from the GUCs
 * and supplies the two hooks (interrupt check and NOTICE) as plain callables
 * that go through pg_call.
 */
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "../kernels/gpu_runtime.hpp"
#include "errors.hpp"

namespace gpurec {

enum class DeviceMode
{
	Auto, /* the GPU when usable and the input is large enough to gain */
	Gpu,  /* the GPU or an ERROR */
	Cpu
};

/* Milliseconds per phase of one call, reported by gpurec.timing. */
struct PhaseTimes
{
	double read_ms = 0;		/* running the inner queries into columns */
	double transfer_ms = 0; /* host <-> device copies */
	double compute_ms = 0;	/* the algorithm itself, on whichever device */
	double output_ms = 0;	/* building the result rows */
};

struct ExecContext
{
	DeviceMode mode = DeviceMode::Auto;
	/* Test-only (gpurec.test_fail_gpu_alloc): every GPU allocation fails. */
	bool fail_gpu_alloc = false;
	/*
	 * Test-only: plan GPU work as if only this many bytes were free (0: what
	 * the GPU really has), so that the path for inputs larger than GPU memory
	 * runs on small inputs.
	 */
	size_t gpu_memory_budget = 0;
	/*
	 * CHECK_FOR_INTERRUPTS; throws (a PostgreSQL error converted to C++) when
	 * the query was cancelled.  Call it from the backend's thread only, between
	 * batches of at most a few milliseconds of work.
	 */
	std::function<void()> check_interrupts = [] {};
	/* Raises a NOTICE. */
	std::function<void(const std::string &)> notice = [](const std::string &) {};

	/* Filled in while the call runs. */
	bool used_gpu = false;
	PhaseTimes times;
};

/* Wall-clock stopwatch in milliseconds. */
class Stopwatch
{
  public:
	Stopwatch() : start_(std::chrono::steady_clock::now()) {}
	double elapsed_ms() const
	{
		return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
			.count();
	}

  private:
	std::chrono::steady_clock::time_point start_;
};

/* Whether a usable GPU is present; the first call initialises CUDA. */
inline bool gpu_usable(std::string *why_not = nullptr) { return gpu::usable(why_not); }

/*
 * Runs gpu_path or cpu_path by the context's mode.  `work` estimates the size
 * of the problem in the units of `min_gpu_work`, the size from which the GPU
 * wins end to end.  Under auto, a GPU that runs out of memory gives way to
 * the CPU with a NOTICE.  Both paths must return identical results.
 */
template <typename GpuPath, typename CpuPath>
auto dispatch(ExecContext &ctx, const char *function, double work, double min_gpu_work,
			  GpuPath gpu_path, CpuPath cpu_path) -> decltype(cpu_path())
{
	if (ctx.mode == DeviceMode::Cpu)
		return cpu_path();
	std::string why_not;
	if (ctx.mode == DeviceMode::Gpu)
	{
		if (!gpu_usable(&why_not))
			throw Error(sqlstate::object_not_in_prerequisite_state,
						"gpurec.device is 'gpu' but no usable GPU was found", why_not,
						"Set gpurec.device to 'auto' or 'cpu'.");
		ctx.used_gpu = true;
		return gpu_path();
	}
	if (work < min_gpu_work || !gpu_usable())
		return cpu_path();
	try
	{
		ctx.used_gpu = true;
		return gpu_path();
	}
	catch (const GpuOutOfMemory &e)
	{
		ctx.used_gpu = false;
		ctx.notice(std::string(function) + ": " + e.what() + "; computing on the CPU instead");
	}
	ctx.times.transfer_ms = 0;
	ctx.times.compute_ms = 0;
	return cpu_path();
}

} // namespace gpurec
