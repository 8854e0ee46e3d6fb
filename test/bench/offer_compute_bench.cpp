/*
 * offer_compute_bench.cpp: the GPU compute phase of cheapest_offers alone,
 * on the classic marketplace size (30,000 products x 1,024 offers in random
 * order, numeric(10,2)-like prices), for several k; compared with the CPU
 * path on the same data.  Built by `make compute-benches`.
 */
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>

#include "../../src/id_column.hpp"
#include "../../src/marketplace.hpp"
#include "../../src/number_column.hpp"
#include "bench_offers.hpp"

using namespace gpurec;

int main(int argc, char **argv)
{
	size_t products = argc > 1 ? std::stoul(argv[1]) : 30000, per_product = 1024;
	std::mt19937_64 rng(42);
	BenchOffers bench;
	make_bench_offers(bench, products, per_product, rng, [](size_t i, size_t) { return static_cast<int64_t>(i + 1); });
	IdColumn &product = bench.product;
	Int64Column &store = bench.store;
	NumberColumn &price = bench.price;
	Offers offers{product, store, price};
	std::printf("offers: %zu\n", product.size());
	for (int k : {1, 2, 5})
	{
		/*
		 * Cold: a call as SQL makes it, copying first; the SMs idle at a low
		 * clock during the copy, so the compute that follows starts slow.
		 * Warm: the same offers ranked again and again while they stay on
		 * the GPU (the streamer holds them), the SMs at full clock.
		 */
		ExecContext cold;
		cold.mode = DeviceMode::Gpu;
		cheapest_offers(offers, k, cold);
		ExecContext resident;
		resident.mode = DeviceMode::Gpu;
		OfferStreamer streamer(resident, k);
		streamer.on_chunk(offers);
		std::vector<double> warm;
		for (int rep = 0; rep < 12; ++rep)
		{
			ExecContext ctx;
			ctx.mode = DeviceMode::Gpu;
			cheapest_offers(offers, k, ctx, &streamer);
			if (rep >= 2)
				warm.push_back(ctx.times.compute_ms);
		}
		std::sort(warm.begin(), warm.end());
		double median = warm[warm.size() / 2];
		ExecContext cpu;
		cpu.mode = DeviceMode::Cpu;
		cheapest_offers(offers, k, cpu);
		std::printf("k=%d: gpu compute cold %.3f ms, warm median %.3f ms; cpu compute %.1f ms (1 thread)\n",
					k, cold.times.compute_ms, median, cpu.times.compute_ms);
	}
	std::printf("bytes per offer and pass: 20 (product code 4, price key 8, store 8)\n");
	return 0;
}
