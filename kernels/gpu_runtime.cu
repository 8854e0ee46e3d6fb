/*
 * gpu_runtime.cu: lazy CUDA initialisation, device listing, allocation.
 */
#include <cuda_runtime.h>

#include <cstdio>

#include "cuda_util.cuh"
#include "gpu_runtime.hpp"

namespace gpurec::gpu {

namespace {

enum class InitState
{
	Unknown,
	Usable,
	Unusable
};

/* Per backend: CUDA starts in the first backend call that needs it. */
InitState init_state = InitState::Unknown;
std::string unusable_reason;

} // namespace

bool compiled_with_cuda() { return true; }

bool usable(std::string *why_not)
{
	if (init_state == InitState::Unknown)
	{
		int count = 0;
		cudaError_t err = cudaGetDeviceCount(&count);
		if (err != cudaSuccess)
		{
			cudaGetLastError();
			unusable_reason = std::string("CUDA reports: ") + cudaGetErrorString(err);
			init_state = InitState::Unusable;
		}
		else if (count == 0)
		{
			unusable_reason = "no CUDA device is visible";
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
	}
	if (why_not)
		*why_not = unusable_reason;
	return init_state == InitState::Usable;
}

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

void throw_cuda_error(cudaError_t err, const char *what)
{
	cudaGetLastError(); /* clear a non-sticky error so the backend stays usable */
	if (err == cudaErrorMemoryAllocation)
		throw GpuOutOfMemory(std::string("GPU out of memory in ") + what);
	throw Error(sqlstate::internal_error, std::string("CUDA error in ") + what + ": " +
											   cudaGetErrorString(err));
}

void *device_alloc(size_t bytes, const ExecContext &ctx)
{
	if (ctx.fail_gpu_alloc)
		throw GpuOutOfMemory("GPU allocation refused (gpurec.test_fail_gpu_alloc is on)");
	void *ptr = nullptr;
	cudaError_t err = cudaMalloc(&ptr, bytes ? bytes : 1);
	if (err != cudaSuccess)
	{
		cudaGetLastError();
		if (err == cudaErrorMemoryAllocation)
			throw GpuOutOfMemory("could not allocate " + std::to_string(bytes) + " bytes on the GPU");
		throw_cuda_error(err, "cudaMalloc");
	}
	return ptr;
}

} // namespace gpurec::gpu
