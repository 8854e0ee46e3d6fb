/*
 * cart_kernels.hpp: the GPU half of optimize_carts: every cart's exact
 * search (cart_search.hpp) at once, a thread per cart.
 */
#pragma once

#include <cstdint>
#include <vector>

#include "cart_search.hpp"
#include "kernel_api.hpp"

namespace gpurec::gpu {

/* The lengths of the arrays of a CartArrays (host memory). */
struct CartArraySizes
{
	int64_t products = 0;	/* product_candidates has one more */
	int64_t candidates = 0;
	int64_t stores = 0;
};

/*
 * Solves every cart of `carts` (host arrays): per product of the batch, in
 * the batch's order, the index of its chosen candidate within its list.
 * The searches run in launches of a bounded number of steps each, the
 * calling thread passing an interrupt point (Compute) between launches.
 */
std::vector<int32_t> solve_carts(const carts::CartArrays &carts, const CartArraySizes &sizes, CallContext &ctx);

} // namespace gpurec::gpu
