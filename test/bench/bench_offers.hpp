/*
 * bench_offers.hpp: the classic marketplace of the compute benches,
 * without PostgreSQL: products x per_product offers in random order
 * (seed 42), numeric(10,2)-like prices 1.00 .. 1000.00, and each offer's
 * store as store_of(offer number within its product, product number)
 * says.
 */
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "../../src/id_column.hpp"
#include "../../src/number_column.hpp"

namespace gpurec {

struct BenchOffers
{
	IdColumn product;
	Int64Column store;
	NumberColumn price{NumberType::Numeric};
};

template <typename StoreOf>
void make_bench_offers(BenchOffers &out, size_t products, size_t per_product, std::mt19937_64 &rng, StoreOf store_of)
{
	std::vector<uint32_t> order(products * per_product);
	std::iota(order.begin(), order.end(), 0u);
	std::shuffle(order.begin(), order.end(), rng);
	std::uniform_int_distribution<int64_t> cents(100, 100000);
	for (uint32_t o : order)
	{
		size_t p = o / per_product;
		out.product.push_back(static_cast<int64_t>(p + 1));
		out.store.push_back(store_of(o % per_product, p));
		out.price.push_numeric(cents(rng), 2);
	}
}

} // namespace gpurec
