// d2d_bandwidth.cu: the device-to-device copy rate of this GPU, counting
// bytes read plus bytes written: the memory ceiling the benchmarks compare with.
#include <cstdio>
#include <cuda_runtime.h>

int main()
{
	const size_t bytes = size_t(2) << 30;
	void *a, *b;
	if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess)
		return 1;
	cudaMemset(a, 1, bytes);
	cudaEvent_t start, stop;
	cudaEventCreate(&start);
	cudaEventCreate(&stop);
	for (int i = 0; i < 3; ++i)
		cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
	const int reps = 20;
	cudaEventRecord(start);
	for (int i = 0; i < reps; ++i)
		cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
	cudaEventRecord(stop);
	cudaEventSynchronize(stop);
	float ms = 0;
	cudaEventElapsedTime(&ms, start, stop);
	printf("device-to-device copy: %.1f GB/s (bytes read + written)\n",
		   2.0 * bytes * reps / (ms / 1e3) / 1e9);
	return 0;
}
