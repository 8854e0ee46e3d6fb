// gpu_alloc_cost.cu: what one call's device allocations cost, alone and
// while other processes use the same GPU: run N copies at once
// (`for i in 1 2 3 4; do ./gpu_alloc_cost & done; wait`).  Each round
// allocates and frees the buffers of one roc_fitness part of 250 x 100,000
// examples (about 500 MB in 10 buffers), then the same bytes as one buffer.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <unistd.h>
#include <vector>

#include <cuda_runtime.h>

namespace {

double now_ms()
{
	return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

} // namespace

int main()
{
	cudaFree(nullptr);
	const size_t n = 25000000;
	const std::vector<size_t> sizes = {100000, n * 4, 0, 24, n * 8, n * 8, 8, 1 << 20, 2008, 250 * 40};
	size_t total = 0;
	for (size_t s : sizes)
		total += s;
	std::vector<double> many, one;
	for (int round = 0; round < 20; ++round)
	{
		double start = now_ms();
		std::vector<void *> buffers;
		for (size_t s : sizes)
		{
			void *p = nullptr;
			cudaMalloc(&p, s ? s : 1);
			cudaMemsetAsync(p, 0, std::min<size_t>(s, 4096));
			buffers.push_back(p);
		}
		for (void *p : buffers)
			cudaFree(p);
		many.push_back(now_ms() - start);
		start = now_ms();
		void *p = nullptr;
		cudaMalloc(&p, total);
		cudaMemsetAsync(p, 0, 4096);
		cudaFree(p);
		one.push_back(now_ms() - start);
	}
	std::sort(many.begin(), many.end());
	std::sort(one.begin(), one.end());
	std::printf("pid %d: %zu buffers (%.0f MB) allocated and freed: median %.2f ms, best %.2f; as one buffer: median "
				"%.2f ms, best %.2f (20 rounds)\n",
				static_cast<int>(getpid()), sizes.size(), total / 1e6, many[10], many[0], one[10], one[0]);
	return 0;
}
