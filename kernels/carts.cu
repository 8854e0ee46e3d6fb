/*
 * carts.cu: optimize_carts' searches on the GPU (cart_kernels.hpp): a
 * thread per cart runs cart_search.hpp, the code the CPU's threads run, so
 * the two devices take the same steps to the same answer.
 *
 * Each thread searches its cart at most max_steps steps, in one launch,
 * its state in the thread's own memory (nothing of it goes back to GPU
 * memory).  Why a bound: the searches are short but uneven (the 100,000
 * carts of the benchmark: 90% within 32 steps, 99.5% within 256, the
 * longest 5,237), and a GPU thread takes each step of a search, a chain
 * of dependent reads, far slower than a CPU core does: one thread per
 * cart, the launch lasted as long as the longest search (136 ms on an
 * H100, where 16 CPU threads searched every cart in 110).  The carts left
 * over are the caller's to search on the CPU, from their start.  One
 * launch of bounded steps also answers a cancel within it.
 */
#include <type_traits>

#include "cuda_util.cuh"
#include "api/cart_kernels.hpp"

namespace gpurec::gpu {

namespace {

using carts::CartArrays;
using carts::CartSearchState;
using carts::CartStoreScratch;

constexpr unsigned kBlock = 128;

struct StoreArrays
{
	int64_t *subtotal;
	int64_t *potential;
	int32_t *uses;

	__device__ CartStoreScratch of(const CartArrays &a, int64_t c) const
	{
		int64_t first = a.cart_stores[c];
		return {subtotal + first, potential + first, uses + first};
	}
};

/* Offsets of a share of larger arrays, made to count from the share's start. */
__global__ void shift_offsets(int64_t *offsets, int64_t n, int64_t by)
{
	for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
		offsets[i] -= by;
}

/* Each cart searched at most max_steps steps: its choices written, or the cart listed in `left`. */
__global__ void search_carts(CartArrays a, StoreArrays stores, int64_t max_steps, int32_t *choice,
							 unsigned long long *n_left, int64_t *left)
{
	for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < a.n_carts;
		 c += int64_t(gridDim.x) * blockDim.x)
	{
		CartSearchState state;
		CartStoreScratch scratch = stores.of(a, c);
		carts::cart_search_start(a, c, state, scratch);
		if (carts::cart_search_run(a, c, state, scratch, max_steps))
		{
			for (int32_t d = 0; d < state.n_products; ++d)
				choice[a.cart_products[c] + d] = state.best_choice[d];
		}
		else
			left[atomicAdd(n_left, 1ull)] = c;
	}
}

/* n values of host to device memory at `device`, offsets among them made to count from `base` (0: as they are). */
template <typename T>
T *upload(const T *host, int64_t n, T *device, int64_t base, cudaStream_t stream, CallContext &ctx)
{
	if (n > 0)
		upload_staged(device, host, static_cast<size_t>(n) * sizeof(T), stream, ctx);
	if constexpr (std::is_same_v<T, int64_t>)
		if (base != 0 && n > 0)
		{
			shift_offsets<<<grid_for(static_cast<size_t>(n)), 256, 0, stream>>>(device, n, base);
			check_launch("shift_offsets");
		}
	return device;
}

} // namespace

CartSolution solve_carts(const CartArrays &host, int64_t max_steps, CallContext &ctx)
{
	CartSolution solution;
	int64_t n = host.n_carts;
	/* the share's products, candidates and stores within the host arrays */
	int64_t product_base = host.cart_products[0], products = host.cart_products[n] - product_base;
	int64_t candidate_base = host.product_candidates[product_base],
			candidates = host.product_candidates[product_base + products] - candidate_base;
	int64_t store_base = host.cart_stores[0], stores = host.cart_stores[n] - store_base;
	solution.choice.assign(static_cast<size_t>(products), 0);
	if (n == 0)
		return solution;
	Stream stream;
	/* every buffer reserved as it is taken below, each taken whole */
	DeviceArena arena;
	for (int64_t count : {n + 1, n + 1, products + 1})
		arena.reserve<int64_t>(static_cast<size_t>(count));
	arena.reserve<int32_t>(static_cast<size_t>(products));
	arena.reserve<int32_t>(static_cast<size_t>(candidates));
	arena.reserve<int64_t>(static_cast<size_t>(candidates));
	for (int i = 0; i < 5; ++i) /* fee, free_from, share; subtotal, potential */
		arena.reserve<int64_t>(static_cast<size_t>(stores));
	arena.reserve<int32_t>(static_cast<size_t>(stores));
	arena.reserve<int32_t>(static_cast<size_t>(products));
	arena.reserve<int64_t>(static_cast<size_t>(n));
	arena.reserve<unsigned long long>(1);
	arena.allocate(ctx);
	CartArrays a = host;
	{
		EventTimer transfer(stream);
		a.cart_products = upload(host.cart_products, n + 1, arena.take<int64_t>(n + 1), product_base, stream, ctx);
		a.cart_stores = upload(host.cart_stores, n + 1, arena.take<int64_t>(n + 1), store_base, stream, ctx);
		a.product_candidates = upload(host.product_candidates + product_base, products + 1,
									  arena.take<int64_t>(products + 1), candidate_base, stream, ctx);
		a.product_rank = upload(host.product_rank + product_base, products, arena.take<int32_t>(products), 0, stream, ctx);
		a.candidate_store =
			upload(host.candidate_store + candidate_base, candidates, arena.take<int32_t>(candidates), 0, stream, ctx);
		a.candidate_cost =
			upload(host.candidate_cost + candidate_base, candidates, arena.take<int64_t>(candidates), 0, stream, ctx);
		a.store_fee = upload(host.store_fee + store_base, stores, arena.take<int64_t>(stores), 0, stream, ctx);
		a.store_free_from = upload(host.store_free_from + store_base, stores, arena.take<int64_t>(stores), 0, stream, ctx);
		a.store_share = upload(host.store_share + store_base, stores, arena.take<int64_t>(stores), 0, stream, ctx);
		ctx.times.transfer_ms += transfer.stop_ms();
	}
	ctx.interrupt_point(Phase::Transfer);

	StoreArrays scratch{arena.take<int64_t>(stores), arena.take<int64_t>(stores), arena.take<int32_t>(stores)};
	int32_t *device_choice = arena.take<int32_t>(products);
	int64_t *left = arena.take<int64_t>(n);
	auto *n_left = arena.take<unsigned long long>(1);
	unsigned long long left_count = 0;
	{
		EventTimer compute(stream);
		check(cudaMemsetAsync(n_left, 0, sizeof *n_left, stream), "cudaMemsetAsync");
		/* the carts left write no choice, and every choice is copied back: none uninitialised (initcheck) */
		check(cudaMemsetAsync(device_choice, 0, static_cast<size_t>(products) * sizeof(int32_t), stream),
			  "cudaMemsetAsync");
		search_carts<<<grid_for(static_cast<size_t>(n), kBlock), kBlock, 0, stream>>>(a, scratch, max_steps, device_choice,
																					  n_left, left);
		check_launch("search_carts");
		check(cudaMemcpyAsync(&left_count, n_left, sizeof left_count, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
		stream.synchronize();
		ctx.times.compute_ms += compute.stop_ms();
	}
	ctx.interrupt_point(Phase::Compute);
	{
		EventTimer transfer(stream);
		if (products > 0)
			check(cudaMemcpyAsync(solution.choice.data(), device_choice, static_cast<size_t>(products) * sizeof(int32_t),
								  cudaMemcpyDeviceToHost, stream),
				  "cudaMemcpyAsync");
		solution.left.resize(static_cast<size_t>(left_count));
		if (left_count > 0)
			check(cudaMemcpyAsync(solution.left.data(), left, left_count * sizeof(int64_t), cudaMemcpyDeviceToHost, stream),
				  "cudaMemcpyAsync");
		stream.synchronize();
		ctx.times.transfer_ms += transfer.stop_ms();
	}
	return solution;
}

} // namespace gpurec::gpu
