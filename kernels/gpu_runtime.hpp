/*
 * gpu_runtime.hpp: the plain C++ face of the CUDA runtime for the engine.
 *
 * Compiled from gpu_runtime.cu when nvcc is available, otherwise from
 * gpu_absent.cpp, which reports that this build has no GPU support.
 */
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace gpurec::gpu {

struct DeviceInfo
{
	int device_id;
	std::string name;
	std::string compute_capability; /* "9.0" */
	long long total_memory_bytes;
	long long free_memory_bytes;
	int multiprocessors;
};

/* True in a build made with nvcc. */
bool compiled_with_cuda();

/*
 * Whether this backend can compute on a GPU.  The first call initialises the
 * CUDA runtime (lazily, never in the postmaster); later calls are free.
 */
bool usable(std::string *why_not = nullptr);

/* Every visible GPU; empty without one. */
std::vector<DeviceInfo> devices();

} // namespace gpurec::gpu
