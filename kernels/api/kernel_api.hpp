/*
 * kernel_api.hpp: what every GPU entry point takes and throws, in plain C++.
 *
 * The kernels see no engine type: their inputs come as views of host memory
 * (chunk pointers and row counts), and what they need of the call (the
 * phase-tagged interrupt points, the memory budget, the test-only allocation failure, the
 * phase clocks) comes in a CallContext.  The engine adapts its columns to
 * these views and turns a gpu::Failure into its own error, each in one
 * place (src/device.hpp).
 *
 * Implemented by the .cu files when the build has nvcc, and by no_cuda.cpp,
 * which says that there is no GPU, when it has not.
 */
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpurec::gpu {

/*
 * Host columns come in chunks of kChunkRows rows; a view lists the chunks'
 * addresses (every chunk full but the last) and the rows they hold.  The
 * engine's columns use the same chunk size (checked where they are adapted),
 * so a chunk goes to the device as soon as it is full, with no copy.
 */
constexpr int kChunkShift = 20;
constexpr size_t kChunkRows = size_t(1) << kChunkShift;

template <typename T> struct ChunkedView
{
	std::vector<const T *> chunks;
	size_t rows = 0;

	size_t chunk_count() const { return chunks.size(); }
	const T *chunk_data(size_t c) const { return chunks[c]; }
	size_t chunk_rows(size_t c) const { return c + 1 < chunks.size() ? kChunkRows : rows - c * kChunkRows; }
};

/* Milliseconds per phase of one call (gpurec.timing); kernels add to transfer and compute. */
struct PhaseTimes
{
	double read_ms = 0;		/* running the inner queries into columns */
	double transfer_ms = 0; /* host <-> device copies */
	double compute_ms = 0;	/* the algorithm itself, on whichever device */
	double output_ms = 0;	/* building the result rows */
};

/* The phases of a call, as gpurec.timing reports them and interrupt points name them. */
enum class Phase : uint8_t
{
	Read,
	Transfer,
	Compute,
	Output
};

/*
 * Test-only (gpurec.test_fault): what to do at one interrupt point of one
 * phase.  `at` counts the phase's interrupt points from 1; 0 injects nothing.
 */
struct TestFault
{
	enum class Action : uint8_t
	{
		Wait, /* wait, checking for interrupts, until cancelled (bounded) */
		Error /* raise an ERROR naming the phase */
	};
	Phase phase = Phase::Read;
	uint64_t at = 0;
	Action action = Action::Wait;
	uint64_t seen = 0; /* the phase's interrupt points passed so far */

	/* Counts an interrupt point of `p`; true at the one to fault.  One compare when unset. */
	bool due(Phase p) { return at != 0 && p == phase && ++seen == at; }
};

/* One range of a host copy (CallContext::host_copy). */
struct HostCopy
{
	void *to;
	const void *from;
	size_t bytes;
};

struct CallContext
{
	/*
	 * Throws when the call was cancelled.  Called through interrupt_point(),
	 * which names the phase.
	 */
	std::function<void()> check_interrupts = [] {};
	/* Test-only: carries out `fault` where it is due (interrupt_point calls it). */
	TestFault fault;
	std::function<void(const TestFault &)> inject_fault = [](const TestFault &) {};

	/*
	 * A point between batches of `phase`: throws when the call was
	 * cancelled, or where a test fault is due.  Kernels call it from the
	 * calling thread between launches of at most a few tens of
	 * milliseconds (Transfer after copies, Compute after computing); what
	 * it throws passes through them untouched.
	 */
	void interrupt_point(Phase phase)
	{
		check_interrupts();
		if (fault.due(phase))
			inject_fault(fault);
	}
	/*
	 * Copies n ranges between host buffers, as fast as the caller can: a
	 * copy into pinned memory on its way to the GPU runs at one core's
	 * speed (about 6 GB/s on the H100 host) unless the engine spreads it
	 * over several (its ExecContext does).
	 */
	std::function<void(CallContext &ctx, const HostCopy *copies, size_t n)> host_copy =
		[](CallContext &, const HostCopy *copies, size_t n) {
			for (size_t i = 0; i < n; ++i)
				if (copies[i].bytes > 0)
					std::memcpy(copies[i].to, copies[i].from, copies[i].bytes);
		};
	/* Plan work as if only this many bytes were free on the GPU (0: what it really has). */
	size_t gpu_memory_budget = 0;
	/* Test-only: every GPU allocation fails as if the GPU were full. */
	bool fail_gpu_alloc = false;
	PhaseTimes times;
};

/* What a GPU entry point throws (besides what interrupt_point throws). */
class Failure : public std::runtime_error
{
  public:
	enum class Kind
	{
		OutOfMemory,  /* the GPU (or pinned host memory) could not hold the work */
		TooLarge,	  /* past a limit of the kernels, whatever the memory */
		NoGpu,		  /* this build, or this machine, has no usable GPU */
		Internal	  /* a CUDA error */
	};

	Failure(Kind kind, const std::string &message) : std::runtime_error(message), kind_(kind) {}
	Kind kind() const { return kind_; }

  private:
	Kind kind_;
};

/* Wall-clock stopwatch in milliseconds. */
class Stopwatch
{
  public:
	Stopwatch() : start_(std::chrono::steady_clock::now()) {}
	double elapsed_ms() const
	{
		return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
	}

  private:
	std::chrono::steady_clock::time_point start_;
};

/* ---- the runtime ------------------------------------------------------- */

struct DeviceInfo
{
	int device_id;
	std::string name;
	std::string compute_capability; /* "9.0" */
	long long total_memory_bytes;
	long long free_memory_bytes;
	int multiprocessors;
};

/*
 * Whether this backend can compute on a GPU, and if not, why (in words a
 * user can act on).  The first call initialises the CUDA runtime (lazily,
 * never in the postmaster), or waits for start_in_background's start to
 * end; later calls are free.
 */
bool usable(std::string *why_not = nullptr);

/*
 * Whether this backend already knows it cannot compute on a GPU: a build
 * without CUDA, or a start that ended without one.  Never starts CUDA, so
 * gpurec.device = auto can pick a CPU-only way of reading before it reads.
 */
bool found_unusable() noexcept;

/*
 * Begins CUDA's start (a fresh backend's first GPU call: the driver, the
 * context and the pinned staging memory, a few hundred milliseconds) on a
 * thread of its own, so that it overlaps what the call does before it
 * computes, its read.  For a call that will compute on the GPU.  usable(),
 * which every GPU path asks first, waits for it.  Returns whether a start
 * began: a second call, or one after CUDA started, does nothing.
 */
bool start_in_background() noexcept;

/* Whether CUDA's start has begun in this backend (in the background or not), ended or not. */
bool start_begun() noexcept;

/* Waits for a start begun in the background to end (at the backend's exit, before CUDA's own teardown). */
void finish_background_start() noexcept;

/* How long CUDA's start took in this backend, in ms: 0 until one has ended. */
double start_ms() noexcept;

/* Every visible GPU; empty without one. */
std::vector<DeviceInfo> devices();

/*
 * Makes `device_id` the calling thread's GPU for the kernels it runs next
 * (the GPU service's worker of that device; a backend uses device 0).
 */
void use_device(int device_id);

/*
 * Keeps up to `bytes` of device memory that calls gave back for the calls
 * to come, on the calling thread's device (use_device): allocations come
 * from the device's memory pool instead of cudaMalloc, which costs a
 * synchronisation and a mapping each time.  For the GPU service, which
 * owns its GPUs; a backend gives its memory back after each call.
 */
void keep_device_memory(size_t bytes);

/*
 * Pins [address, address + bytes) of host memory for every device, once
 * (the GPU service's shared memory, at its start): copies out of it then
 * go to a GPU directly, at the bus's rate, instead of through the staging
 * copy that memory not pinned takes.  Throws a Failure when CUDA cannot.
 */
void register_host_memory(void *address, size_t bytes);

/*
 * What a GPU call costs on this host apart from its kernels' work, measured
 * on the calling thread's device: the rate at which host memory that was
 * not pinned for it reaches the device (the way a call's columns travel),
 * and a kernel's launch with its synchronisation.  gpurec.device = auto's
 * cost model (src/cost_model.hpp) takes them once: the GPU service at its
 * start, a backend with its own CUDA at its first GPU call.  Takes a few
 * milliseconds and a few MB of memory on both sides, given back.
 */
struct DeviceCosts
{
	double upload_bytes_per_ms;
	double call_ms;
};
/* `from`: where the calls' columns will be, 32 MB of it (the GPU service's pinned memory); null: pageable memory. */
DeviceCosts measure_device_costs(const void *from = nullptr);
/* The bytes measure_device_costs copies. */
constexpr size_t kMeasuredBytes = size_t(32) << 20;

} // namespace gpurec::gpu
