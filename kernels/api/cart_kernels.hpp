/*
 * cart_kernels.hpp: the GPU half of optimize_carts: every cart's exact
 * search (cart_search.hpp) at once, a thread per cart, each at most a
 * number of steps (carts.cu says why).
 */
#pragma once

#include <cstdint>
#include <vector>

#include "cart_search.hpp"
#include "kernel_api.hpp"

namespace gpurec::gpu {

/* The searches a solve_carts finished, and the carts it left. */
struct CartSolution
{
	std::vector<int32_t> choice; /* per product of the carts: its chosen candidate (not set for the carts left) */
	std::vector<int64_t> left;	 /* the carts (numbered within the batch) whose searches took more than max_steps, in no order */
};

/*
 * Searches every cart of `carts` (host arrays; pinned ones, such as the GPU
 * service's shared memory, are copied without staging) at most max_steps
 * steps: for those that finish, per product of the carts in their order,
 * the index of its chosen candidate within its list.  The carts may be a
 * share of larger arrays: their offsets need not start at 0 (cart c's
 * products, candidates and stores are where its offsets say).  One launch;
 * the calling thread passes an interrupt point (Compute) after it.
 */
CartSolution solve_carts(const carts::CartArrays &carts, int64_t max_steps, CallContext &ctx);

} // namespace gpurec::gpu
