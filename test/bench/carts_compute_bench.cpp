/*
 * carts_compute_bench.cpp: optimize_carts' compute alone, without
 * PostgreSQL: the classic marketplace (30,000 products x 1,024 offers,
 * random order, prices 1.00 .. 1000.00) with its stores drawn from 4,096,
 * every store a random fee of 0.00 .. 20.00, free from a random 20.00 ..
 * 200.00 for two stores in three (never for the rest), and 100,000 carts of
 * 10 distinct products, quantities 1 .. 3.  Prints, per device, the whole
 * engine call (candidates, problems, searches, answers) and the searches
 * alone; on the GPU, their copies, the kernel, and the carts it left to
 * the CPU.  Arguments: carts, products (scale it down), devices ("cpu gpu").
 * Built by `make compute-benches`.
 */
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include "../../src/carts.hpp"
#include "../../src/cpu_parallel.hpp"
#include "../../src/id_column.hpp"
#include "../../src/number_column.hpp"
#include "bench_offers.hpp"

using namespace gpurec;

int main(int argc, char **argv)
{
	size_t n_carts = argc > 1 ? std::stoul(argv[1]) : 100000;
	size_t products = argc > 2 ? std::stoul(argv[2]) : 30000, per_product = 1024, n_stores = 4096;
	std::string devices = argc > 3 ? argv[3] : "cpu gpu";
	std::mt19937_64 rng(42);
	/* 1,024 distinct stores of the 4,096 per product */
	BenchOffers bench;
	make_bench_offers(bench, products, per_product, rng, [&](size_t i, size_t p) {
		return static_cast<int64_t>(i * (n_stores / per_product) + p % (n_stores / per_product) + 1);
	});
	IdColumn &product = bench.product;
	Int64Column &store = bench.store;
	NumberColumn &price = bench.price;
	Int64Column ship_store;
	NumberColumn fee(NumberType::Numeric), free_from(NumberType::Numeric);
	for (size_t s = 1; s <= n_stores; ++s)
	{
		ship_store.push_back(static_cast<int64_t>(s));
		fee.push_numeric(std::uniform_int_distribution<int64_t>(0, 2000)(rng), 2);
		if (std::uniform_int_distribution<int>(0, 2)(rng) == 0)
			free_from.push_numeric_special(NumberColumn::kScalePosInf);
		else
			free_from.push_numeric(std::uniform_int_distribution<int64_t>(2000, 20000)(rng), 2);
	}
	Int64Column cart, cart_product, cart_store, quantity;
	for (size_t c = 1; c <= n_carts; ++c)
	{
		std::vector<int64_t> chosen;
		while (chosen.size() < 10)
		{
			int64_t p = std::uniform_int_distribution<int64_t>(1, static_cast<int64_t>(products))(rng);
			if (std::find(chosen.begin(), chosen.end(), p) == chosen.end())
				chosen.push_back(p);
		}
		for (int64_t p : chosen)
		{
			cart.push_back(static_cast<int64_t>(c));
			cart_product.push_back(p);
			cart_store.push_back(kNoCurrentStore);
			quantity.push_back(std::uniform_int_distribution<int64_t>(1, 3)(rng));
		}
	}
	Offers offers{product, store, price};
	Shipping shipping{ship_store, fee, free_from};
	CartLines lines{cart, cart_product, cart_store, quantity};
	std::printf("offers: %zu, stores: %zu, carts: %zu of 10 lines\n", product.size(), n_stores, n_carts);
	CartsAnswer first;
	for (const char *device : {"cpu", "gpu"})
	{
		if (devices.find(device) == std::string::npos)
			continue;
		for (int rep = 0; rep < 2; ++rep)
		{
			ExecContext ctx;
			ctx.mode = std::strcmp(device, "gpu") == 0 ? DeviceMode::Gpu : DeviceMode::Cpu;
			Stopwatch clock;
			CartsAnswer answer = optimize_carts(lines, offers, shipping, ctx);
			double all_ms = clock.elapsed_ms();
			int64_t stores_used = 0;
			uint64_t digest = 0; /* of every total and chosen offer, to compare builds */
			for (const CartAnswer &c : answer.carts)
			{
				stores_used += c.stores_used;
				digest = digest * 1000003 + static_cast<uint64_t>(c.total.units);
			}
			for (const CartAnswerLine &l : answer.lines)
				digest = digest * 1000003 + static_cast<uint64_t>(l.offer_row);
			const GpuCartSearch &g = answer.gpu_search;
			std::printf("%s (%zu threads), run %d: engine call %.1f ms; searches %.1f ms (GPU: copies %.1f ms, kernel %.1f ms, "
						"%zu carts left to the CPU %.1f ms); mean stores per cart %.2f; answer digest %016llx\n",
						device, parallel_workers(1 << 20, ctx), rep + 1, all_ms, answer.search_ms, g.copy_ms, g.kernel_ms,
						g.carts_left, g.left_ms, double(stores_used) / double(answer.carts.size()),
						static_cast<unsigned long long>(digest));
			if (first.carts.empty())
				first = answer;
			else
			{
				bool same = first.carts.size() == answer.carts.size();
				for (size_t c = 0; same && c < first.carts.size(); ++c)
					same = first.carts[c].total.units == answer.carts[c].total.units &&
						   first.carts[c].stores_used == answer.carts[c].stores_used;
				for (size_t l = 0; same && l < first.lines.size(); ++l)
					same = first.lines[l].offer_row == answer.lines[l].offer_row;
				std::printf("  same answers as the first run: %s\n", same ? "yes" : "NO");
			}
		}
	}
	return 0;
}
