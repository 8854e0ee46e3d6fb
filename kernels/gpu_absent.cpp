/*
 * gpu_absent.cpp: the GPU runtime of a build made without nvcc.  Every
 * function says there is no GPU; the CPU path computes everything.
 */
#include "gpu_runtime.hpp"

namespace gpurec::gpu {

bool compiled_with_cuda() { return false; }

bool usable(std::string *why_not)
{
	if (why_not)
		*why_not = "gpurec was built without CUDA (nvcc was not found at build time)";
	return false;
}

std::vector<DeviceInfo> devices() { return {}; }

} // namespace gpurec::gpu
