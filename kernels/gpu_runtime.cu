/*
 * gpu_runtime.cu: lazy CUDA initialisation (in the call that needs it, or
 * on a thread of its own while the call reads), device listing, allocation.
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "cuda_util.cuh"
#include "api/kernel_api.hpp"

namespace gpurec::gpu {

namespace {

enum class InitState
{
	Unknown,
	Usable,
	Unusable
};

/*
 * Per backend: CUDA starts in the first backend call that needs it, or on
 * `starter` (start_in_background).  While the starter runs, it alone
 * touches the state here and the staging slots: every other entry point
 * goes through usable(), which joins it first.
 */
InitState init_state = InitState::Unknown;
std::string unusable_reason;
std::thread *starter = nullptr;
double start_took_ms = 0;

/*
 * Why cudaGetDeviceCount failed, in the user's terms.  Without a GPU the
 * runtime often finds no driver at all and calls that an insufficient
 * driver version, which would send users looking for a driver upgrade.
 */
std::string why_no_device(cudaError_t err)
{
	switch (err)
	{
		case cudaErrorNoDevice:
			return "no GPU was found: no CUDA device is visible to this server";
		case cudaErrorInsufficientDriver:
		{
			int driver = 0;
			if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0)
				return "no GPU was found: no NVIDIA driver is installed or loaded on this server";
			return "the NVIDIA driver (CUDA " + std::to_string(driver / 1000) + "." +
				   std::to_string(driver % 1000 / 10) + ") is older than the CUDA runtime gpurec was built with (" +
				   std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10) + ")";
		}
		default:
			return std::string("CUDA could not start: ") + cudaGetErrorString(err);
	}
}

/*
 * Starts CUDA: the driver, device 0 and its primary context.  Sets
 * init_state, and unusable_reason when it fails.
 */
void start_cuda()
{
	Stopwatch clock;
	int count = 0;
	cudaError_t err = cudaGetDeviceCount(&count);
	if (err != cudaSuccess)
	{
		cudaGetLastError();
		unusable_reason = why_no_device(err);
		init_state = InitState::Unusable;
	}
	else if (count == 0)
	{
		unusable_reason = "no GPU was found: no CUDA device is visible to this server";
		init_state = InitState::Unusable;
	}
	else if ((err = cudaSetDevice(0)) != cudaSuccess || (err = cudaFree(nullptr)) != cudaSuccess)
	{
		cudaGetLastError();
		unusable_reason = std::string("CUDA could not start: ") + cudaGetErrorString(err);
		init_state = InitState::Unusable;
	}
	else
		init_state = InitState::Usable;
	start_took_ms = clock.elapsed_ms();
}

bool staging_ready();

} // namespace

bool usable(std::string *why_not)
{
	finish_background_start();
	if (init_state == InitState::Unknown)
		start_cuda();
	if (why_not)
		*why_not = unusable_reason;
	return init_state == InitState::Usable;
}

bool found_unusable() noexcept
{
	/* while the starter runs, init_state is its own: not known yet */
	return starter == nullptr && init_state == InitState::Unusable;
}

bool start_begun() noexcept { return starter != nullptr || init_state != InitState::Unknown; }

bool start_in_background() noexcept
{
	if (init_state != InitState::Unknown || starter != nullptr)
		return false;
	/*
	 * The thread, and the threads CUDA starts from it, block every signal:
	 * PostgreSQL's handlers (cancel, timeouts, latches) belong to the
	 * backend's own thread.
	 */
	sigset_t all, previous;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &previous);
	try
	{
		starter = new std::thread([]() noexcept {
			try
			{
				Stopwatch clock;
				start_cuda();
				if (init_state == InitState::Usable)
					staging_ready();
				start_took_ms = clock.elapsed_ms();
			}
			catch (...)
			{
				init_state = InitState::Unknown; /* out of memory for a message: usable() tries again */
			}
		});
	}
	catch (...)
	{
		starter = nullptr; /* no thread to be had: CUDA starts when a call needs it, as without this */
	}
	pthread_sigmask(SIG_SETMASK, &previous, nullptr);
	return starter != nullptr;
}

void finish_background_start() noexcept
{
	if (starter == nullptr)
		return;
	starter->join();
	delete starter;
	starter = nullptr;
}

double start_ms() noexcept { return start_took_ms; }

std::vector<DeviceInfo> devices()
{
	std::vector<DeviceInfo> out;
	if (!usable())
		return out;
	int count = 0;
	check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
	int current = 0;
	check(cudaGetDevice(&current), "cudaGetDevice");
	for (int d = 0; d < count; ++d)
	{
		cudaDeviceProp prop;
		check(cudaGetDeviceProperties(&prop, d), "cudaGetDeviceProperties");
		size_t free_bytes = 0, total_bytes = 0;
		check(cudaSetDevice(d), "cudaSetDevice");
		check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
		out.push_back({d, prop.name, std::to_string(prop.major) + "." + std::to_string(prop.minor),
					   static_cast<long long>(total_bytes), static_cast<long long>(free_bytes),
					   prop.multiProcessorCount});
	}
	check(cudaSetDevice(current), "cudaSetDevice");
	return out;
}

void use_device(int device_id)
{
	if (!usable())
		throw Failure(Failure::Kind::NoGpu, unusable_reason);
	check(cudaSetDevice(device_id), "cudaSetDevice");
}

namespace {

/* The most devices a process tells apart (the staging slots and pools below are per device). */
constexpr int kMaxDevices = 64;

int current_device()
{
	int device = 0;
	if (cudaGetDevice(&device) != cudaSuccess)
	{
		cudaGetLastError();
		device = 0;
	}
	return device >= 0 && device < kMaxDevices ? device : 0;
}

/* Devices whose allocations come from their pool (keep_device_memory). */
bool pooled[kMaxDevices] = {};

} // namespace

void keep_device_memory(size_t bytes)
{
	int device = current_device();
	int supported = 0;
	if (cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device) != cudaSuccess || !supported)
	{
		cudaGetLastError();
		return; /* cudaMalloc, as in a backend */
	}
	cudaMemPool_t pool;
	check(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool");
	uint64_t threshold = bytes;
	check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), "cudaMemPoolSetAttribute");
	pooled[device] = true;
}

void throw_cuda_error(cudaError_t err, const char *what)
{
	cudaGetLastError(); /* clear a non-sticky error so the backend stays usable */
	if (err == cudaErrorMemoryAllocation)
		throw Failure(Failure::Kind::OutOfMemory, std::string("GPU out of memory in ") + what);
	throw Failure(Failure::Kind::Internal, std::string("CUDA error in ") + what + ": " + cudaGetErrorString(err));
}

namespace {

/* The staging slots of upload_staged, per backend; each slot's event marks the end of the copy out of it. */
struct StagingSlots
{
	static constexpr size_t kSlots = 4;
	static constexpr size_t kSlotBytes = size_t(8) << 20;
	char *memory = nullptr;
	cudaEvent_t copied[kSlots] = {};
	size_t next = 0;
};

enum class StagingState
{
	Unknown,
	Ready,
	Unavailable /* pinned memory was refused: copies go as they are */
};
/*
 * Per device: a thread computes on one device at a time (a backend on
 * device 0; the GPU service one thread a device), so each device's slots
 * have one user.
 */
StagingState staging_states[kMaxDevices] = {};
StagingSlots stagings[kMaxDevices];

bool staging_ready()
{
	int device = current_device();
	StagingState &staging_state = staging_states[device];
	StagingSlots &staging = stagings[device];
	if (staging_state == StagingState::Unknown)
	{
		staging_state = StagingState::Unavailable;
		if (cudaMallocHost(reinterpret_cast<void **>(&staging.memory), StagingSlots::kSlots * StagingSlots::kSlotBytes) !=
			cudaSuccess)
		{
			cudaGetLastError();
			staging.memory = nullptr;
			return false;
		}
		for (size_t e = 0; e < StagingSlots::kSlots; ++e)
			if (cudaEventCreateWithFlags(&staging.copied[e], cudaEventDisableTiming) != cudaSuccess)
			{
				cudaGetLastError();
				while (e-- > 0)
					cudaEventDestroy(staging.copied[e]);
				cudaFreeHost(staging.memory);
				staging.memory = nullptr;
				return false;
			}
		staging_state = StagingState::Ready;
	}
	return staging_state == StagingState::Ready;
}

} // namespace

namespace {

/* Host memory pinned by register_host_memory: registered before any call, read-only after. */
struct PinnedRange
{
	const char *begin, *end;
};
std::vector<PinnedRange> pinned_ranges;

bool is_pinned(const HostPiece &piece)
{
	auto *at = static_cast<const char *>(piece.data);
	for (const PinnedRange &range : pinned_ranges)
		if (at >= range.begin && at + piece.bytes <= range.end)
			return true;
	return false;
}

} // namespace

void register_host_memory(void *address, size_t bytes)
{
	if (!usable())
		throw Failure(Failure::Kind::NoGpu, unusable_reason);
	check(cudaHostRegister(address, bytes, cudaHostRegisterPortable), "cudaHostRegister");
	pinned_ranges.push_back({static_cast<const char *>(address), static_cast<const char *>(address) + bytes});
}

void upload_staged(void *device, const HostPiece *pieces, size_t n, cudaStream_t stream, CallContext &ctx)
{
	size_t total = 0;
	bool all_pinned = !pinned_ranges.empty();
	for (size_t i = 0; i < n; ++i)
	{
		total += pieces[i].bytes;
		all_pinned = all_pinned && is_pinned(pieces[i]);
	}
	auto *to = static_cast<char *>(device);
	StagingSlots &staging = stagings[current_device()];
	/* a small copy costs less than staging it; pinned memory needs no staging */
	if (total < (size_t(256) << 10) || all_pinned || !staging_ready())
	{
		for (size_t i = 0; i < n; ++i)
		{
			check(cudaMemcpyAsync(to, pieces[i].data, pieces[i].bytes, cudaMemcpyHostToDevice, stream),
				  "cudaMemcpyAsync");
			to += pieces[i].bytes;
		}
		return;
	}
	std::vector<HostCopy> copies;
	size_t piece = 0, offset = 0; /* the next byte to stage: pieces[piece], at offset */
	while (total > 0)
	{
		size_t slot = staging.next++ % StagingSlots::kSlots;
		char *at = staging.memory + slot * StagingSlots::kSlotBytes;
		/* the slot's last copy (of this call, or of one an error ended) has left it */
		check(cudaEventSynchronize(staging.copied[slot]), "cudaEventSynchronize");
		copies.clear();
		size_t filled = 0;
		while (filled < StagingSlots::kSlotBytes && piece < n)
		{
			size_t m = std::min(pieces[piece].bytes - offset, StagingSlots::kSlotBytes - filled);
			copies.push_back(HostCopy{at + filled, static_cast<const char *>(pieces[piece].data) + offset, m});
			filled += m;
			offset += m;
			if (offset == pieces[piece].bytes)
			{
				++piece;
				offset = 0;
			}
		}
		ctx.host_copy(ctx, copies.data(), copies.size());
		check(cudaMemcpyAsync(to, at, filled, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
		check(cudaEventRecord(staging.copied[slot], stream), "cudaEventRecord");
		to += filled;
		total -= filled;
	}
}

void *device_alloc(size_t bytes, const CallContext &ctx)
{
	if (ctx.fail_gpu_alloc)
		throw Failure(Failure::Kind::OutOfMemory, "GPU allocation refused (gpurec.test_fail_gpu_alloc is on)");
	void *ptr = nullptr;
	cudaError_t err;
	if (pooled[current_device()])
	{
		/*
		 * Ordered on the default stream, which no kernel uses: once it has
		 * run, the memory is the caller's on any stream.
		 */
		err = cudaMallocAsync(&ptr, bytes ? bytes : 1, 0);
		if (err == cudaSuccess)
			err = cudaStreamSynchronize(0);
	}
	else
		err = cudaMalloc(&ptr, bytes ? bytes : 1);
	if (err != cudaSuccess)
	{
		cudaGetLastError();
		if (err == cudaErrorMemoryAllocation)
			throw Failure(Failure::Kind::OutOfMemory, "could not allocate " + std::to_string(bytes) + " bytes on the GPU");
		throw_cuda_error(err, "cudaMalloc");
	}
	return ptr;
}

void device_free(void *ptr) noexcept
{
	if (!pooled[current_device()])
	{
		cudaFree(ptr);
		return;
	}
	/*
	 * cudaFree waits for the whole device before it frees; the pool's free
	 * is ordered on the default stream, which does not wait for the
	 * kernels' own streams: wait for the device here, as cudaFree would,
	 * so that no kernel still reads what the next allocation hands out.
	 */
	cudaDeviceSynchronize();
	cudaFreeAsync(ptr, 0);
}

namespace {

__global__ void empty_kernel() {}

} // namespace

DeviceCosts measure_device_costs(const void *from)
{
	DeviceCosts costs{};
	std::vector<char> pageable(from ? 0 : kMeasuredBytes, 1); /* as a backend's own columns are */
	const void *host = from ? from : pageable.data();
	void *device = nullptr;
	check(cudaMalloc(&device, kMeasuredBytes), "cudaMalloc");
	cudaStream_t stream = nullptr;
	cudaError_t err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
	if (err != cudaSuccess)
	{
		cudaFree(device);
		throw_cuda_error(err, "cudaStreamCreate");
	}
	try
	{
		/* the best of three: the rate the copies reach, not a first touch's page faults */
		CallContext ctx;
		double best_ms = 0;
		for (int round = 0; round < 3; ++round)
		{
			auto started = std::chrono::steady_clock::now();
			upload_staged(device, host, kMeasuredBytes, stream, ctx);
			check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
			double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
			best_ms = round == 0 ? ms : std::min(best_ms, ms);
		}
		costs.upload_bytes_per_ms = kMeasuredBytes / std::max(best_ms, 1e-3);
		double best_call = 0;
		for (int round = 0; round < 10; ++round)
		{
			auto started = std::chrono::steady_clock::now();
			empty_kernel<<<1, 1, 0, stream>>>();
			check(cudaGetLastError(), "a kernel's launch");
			check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
			double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
			best_call = round == 0 ? ms : std::min(best_call, ms);
		}
		costs.call_ms = best_call;
	}
	catch (...)
	{
		cudaStreamDestroy(stream);
		cudaFree(device);
		throw;
	}
	cudaStreamDestroy(stream);
	cudaFree(device);
	return costs;
}

} // namespace gpurec::gpu
