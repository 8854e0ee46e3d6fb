// cuda_start_cost.cu: what a new process pays, step by step, before and
// during its first GPU work: what a new session's first GPU call of gpurec
// pays on top of a later one.  Build and run each time in a new process:
//   nvcc -O2 -std=c++17 -arch=sm_90 -o /tmp/cuda_start_cost test/bench/cuda_start_cost.cu
//   for i in 1 2 3; do /tmp/cuda_start_cost; done
//   CUDA_MODULE_LOADING=EAGER /tmp/cuda_start_cost
// Each step is timed on its own, in ms; the sort and the copy run twice, so
// that their first run's extra (module loading, first touch) shows.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cub/device/device_radix_sort.cuh>
#include <cuda_runtime.h>

namespace {

double now_ms()
{
	return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double last = now_ms();

void step(const char *what, cudaError_t err = cudaSuccess)
{
	double t = now_ms();
	std::printf("%-44s %9.2f ms%s%s\n", what, t - last, err == cudaSuccess ? "" : "  error: ",
				err == cudaSuccess ? "" : cudaGetErrorString(err));
	last = now_ms();
}

__global__ void touch(float *data, size_t n)
{
	size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
	if (i < n)
		data[i] += 1.0f;
}

} // namespace

int main()
{
	const char *loading = std::getenv("CUDA_MODULE_LOADING");
	std::printf("# CUDA_MODULE_LOADING=%s\n", loading ? loading : "(unset: lazy)");
	int count = 0;
	step("cudaGetDeviceCount (driver)", cudaGetDeviceCount(&count));
	step("cudaSetDevice(0)", cudaSetDevice(0));
	step("cudaFree(0) (the primary context)", cudaFree(nullptr));
	char *pinned = nullptr;
	step("cudaMallocHost 32 MB (gpurec's staging)", cudaMallocHost(&pinned, size_t(32) << 20));
	cudaStream_t stream;
	step("cudaStreamCreate", cudaStreamCreate(&stream));

	const size_t bytes = size_t(400) << 20; /* roc_fitness' 1,000 x 100k scores */
	const size_t n = bytes / sizeof(float);
	float *device = nullptr;
	step("cudaMalloc 400 MB", cudaMalloc(&device, bytes));
	std::vector<float> host(n, 0.5f);
	step("host vector of 400 MB, first touch");
	for (int round = 1; round <= 2; ++round)
	{
		cudaError_t err = cudaMemcpyAsync(device, host.data(), bytes, cudaMemcpyHostToDevice, stream);
		if (err == cudaSuccess)
			err = cudaStreamSynchronize(stream);
		step(round == 1 ? "copy 400 MB pageable -> device, first" : "copy 400 MB pageable -> device, again", err);
	}
	touch<<<(n + 255) / 256, 256, 0, stream>>>(device, n);
	step("first launch of a small kernel", cudaStreamSynchronize(stream));
	touch<<<(n + 255) / 256, 256, 0, stream>>>(device, n);
	step("its second launch", cudaStreamSynchronize(stream));

	const int keys = 25000000; /* a roc_fitness shard's 250 x 100k */
	unsigned *in = nullptr, *out = nullptr;
	cudaMalloc(&in, keys * sizeof(unsigned));
	cudaMalloc(&out, keys * sizeof(unsigned));
	cudaMemsetAsync(in, 0x5a, keys * sizeof(unsigned), stream);
	for (int round = 1; round <= 2; ++round)
	{
		size_t temp_bytes = 0;
		cub::DeviceRadixSort::SortKeys(nullptr, temp_bytes, in, out, keys, 0, 32, stream);
		void *temp = nullptr;
		cudaMalloc(&temp, temp_bytes);
		cudaError_t err = cub::DeviceRadixSort::SortKeys(temp, temp_bytes, in, out, keys, 0, 32, stream);
		if (err == cudaSuccess)
			err = cudaStreamSynchronize(stream);
		step(round == 1 ? "CUB radix sort of 25M keys, first" : "CUB radix sort of 25M keys, again", err);
		cudaFree(temp);
	}
	step("cudaFree 400 MB", cudaFree(device));
	cudaFree(in);
	cudaFree(out);
	cudaFreeHost(pinned);
	cudaStreamDestroy(stream);
	return 0;
}
