// h2d_bandwidth.cu: host-to-device copy rates of this host, for 100 MB of
// pageable memory (what an input column is): copied as it is, from pinned
// memory, and staged through pinned slots filled by 1 to 8 threads (what
// upload_staged does); and the host's own memcpy rate on as many threads.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

namespace {

const size_t kBytes = size_t(100) << 20;

double now_ms()
{
	return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void copy_on(int threads, char *to, const char *from, size_t bytes)
{
	std::vector<std::thread> pool;
	size_t per = (bytes + threads - 1) / threads;
	for (int t = 0; t < threads; ++t)
		pool.emplace_back([=] {
			size_t begin = t * per, end = std::min(bytes, begin + per);
			if (begin < end)
				std::memcpy(to + begin, from + begin, end - begin);
		});
	for (std::thread &t : pool)
		t.join();
}

template <typename Run> double best_of(Run run)
{
	double best = 1e30;
	for (int i = 0; i < 5; ++i)
	{
		double start = now_ms();
		run();
		best = std::min(best, now_ms() - start);
	}
	return best;
}

void report(const char *what, double ms) { std::printf("%-58s %7.2f ms  %6.1f GB/s\n", what, ms, kBytes / ms / 1e6); }

} // namespace

int main()
{
	std::vector<char> pageable(kBytes, 1), other(kBytes, 2);
	char *device = nullptr, *pinned = nullptr;
	if (cudaMalloc(&device, kBytes) != cudaSuccess || cudaMallocHost(&pinned, kBytes) != cudaSuccess)
		return 1;
	std::memset(pinned, 3, kBytes);
	cudaStream_t stream;
	cudaStreamCreate(&stream);

	report("cudaMemcpy from pageable memory", best_of([&] {
			   cudaMemcpyAsync(device, pageable.data(), kBytes, cudaMemcpyHostToDevice, stream);
			   cudaStreamSynchronize(stream);
		   }));
	report("cudaMemcpy from pinned memory", best_of([&] {
			   cudaMemcpyAsync(device, pinned, kBytes, cudaMemcpyHostToDevice, stream);
			   cudaStreamSynchronize(stream);
		   }));
	for (int threads : {1, 2, 4, 8})
	{
		char what[80];
		std::snprintf(what, sizeof what, "host memcpy, %d threads", threads);
		report(what, best_of([&] { copy_on(threads, other.data(), pageable.data(), kBytes); }));
	}
	report("cudaHostRegister, copy, cudaHostUnregister, whole", best_of([&] {
			   cudaHostRegister(pageable.data(), kBytes, cudaHostRegisterDefault);
			   cudaMemcpyAsync(device, pageable.data(), kBytes, cudaMemcpyHostToDevice, stream);
			   cudaStreamSynchronize(stream);
			   cudaHostUnregister(pageable.data());
		   }));
	report("cudaHostRegister, copy, cudaHostUnregister, 4 MB pieces", best_of([&] {
			   const size_t piece = size_t(4) << 20;
			   for (size_t at = 0; at < kBytes; at += piece)
				   cudaHostRegister(pageable.data() + at, std::min(piece, kBytes - at), cudaHostRegisterDefault);
			   cudaMemcpyAsync(device, pageable.data(), kBytes, cudaMemcpyHostToDevice, stream);
			   cudaStreamSynchronize(stream);
			   for (size_t at = 0; at < kBytes; at += piece)
				   cudaHostUnregister(pageable.data() + at);
		   }));
	report("cudaMallocHost and cudaFreeHost", best_of([&] {
			   char *p = nullptr;
			   cudaMallocHost(&p, kBytes);
			   cudaFreeHost(p);
		   }));
	report("cudaMallocHost, touched, and cudaFreeHost", best_of([&] {
			   char *p = nullptr;
			   cudaMallocHost(&p, kBytes);
			   std::memset(p, 0, kBytes);
			   cudaFreeHost(p);
		   }));
	const size_t slots = 4;
	for (size_t slot_mb : {size_t(4), size_t(8), size_t(16)})
	{
		size_t slot_bytes = slot_mb << 20;
		cudaEvent_t copied[slots];
		for (cudaEvent_t &e : copied)
			cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
		for (int threads : {1, 2, 4, 8})
		{
			char what[80];
			std::snprintf(what, sizeof what, "staged through %zu x %zu MB pinned slots, %d threads", slots, slot_mb,
						  threads);
			report(what, best_of([&] {
					   size_t next = 0;
					   for (size_t at = 0; at < kBytes; at += slot_bytes)
					   {
						   size_t n = std::min(slot_bytes, kBytes - at), slot = next++ % slots;
						   char *staging = pinned + slot * slot_bytes;
						   cudaEventSynchronize(copied[slot]);
						   copy_on(threads, staging, pageable.data() + at, n);
						   cudaMemcpyAsync(device + at, staging, n, cudaMemcpyHostToDevice, stream);
						   cudaEventRecord(copied[slot], stream);
					   }
					   cudaStreamSynchronize(stream);
				   }));
		}
	}
	return 0;
}
