/*
 * carts.cu: optimize_carts' searches on the GPU (cart_kernels.hpp): a
 * thread per cart runs cart_search.hpp, the code the CPU's threads run, so
 * the two devices take the same steps to the same answer.
 *
 * A cart's state (CartSearchState and its stores' arrays) lives in GPU
 * memory between launches: each launch lets every unfinished cart run at
 * most kStepsPerLaunch steps, and the calling thread passes an interrupt
 * point between launches, so a cancel is answered within one launch (a few
 * milliseconds) however long a hard cart searches.
 */
#include "cuda_util.cuh"
#include "api/cart_kernels.hpp"

namespace gpurec::gpu {

namespace {

using carts::CartArrays;
using carts::CartSearchState;
using carts::CartStoreScratch;

constexpr int64_t kStepsPerLaunch = 4096;
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

__global__ void start_carts(CartArrays a, CartSearchState *states, StoreArrays stores)
{
	for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < a.n_carts;
		 c += int64_t(gridDim.x) * blockDim.x)
		carts::cart_search_start(a, c, states[c], stores.of(a, c));
}

/* One launch: each unfinished cart runs on; a cart that finishes writes its choices. */
__global__ void run_carts(CartArrays a, CartSearchState *states, StoreArrays stores, int32_t *choice,
						  unsigned long long *unfinished)
{
	int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
	if (c >= a.n_carts || states[c].finished)
		return;
	CartSearchState state = states[c]; /* the thread's own copy while it runs */
	if (carts::cart_search_run(a, c, state, stores.of(a, c), kStepsPerLaunch))
	{
		for (int32_t d = 0; d < state.n_products; ++d)
			choice[a.cart_products[c] + d] = state.best_choice[d];
	}
	else
		atomicAdd(unfinished, 1ull);
	states[c] = state;
}

template <typename T> T *upload(const T *host, int64_t n, DeviceBuffer<T> &buffer, cudaStream_t stream,
								CallContext &ctx)
{
	buffer = DeviceBuffer<T>(static_cast<size_t>(n), ctx);
	if (n > 0)
		upload_staged(buffer.get(), host, n * sizeof(T), stream, ctx);
	return buffer.get();
}

} // namespace

std::vector<int32_t> solve_carts(const CartArrays &host, const CartArraySizes &sizes, CallContext &ctx)
{
	std::vector<int32_t> choice(static_cast<size_t>(sizes.products), 0);
	if (host.n_carts == 0)
		return choice;
	Stream stream;
	CartArrays a = host;
	DeviceBuffer<int64_t> cart_products, product_candidates, candidate_cost, cart_stores, store_fee, store_free_from,
		store_share;
	DeviceBuffer<int32_t> product_rank, candidate_store;
	DeviceBuffer<CartSearchState> states(static_cast<size_t>(host.n_carts), ctx);
	DeviceBuffer<int64_t> subtotal(static_cast<size_t>(sizes.stores), ctx), potential(static_cast<size_t>(sizes.stores), ctx);
	DeviceBuffer<int32_t> uses(static_cast<size_t>(sizes.stores), ctx), device_choice(static_cast<size_t>(sizes.products), ctx);
	DeviceBuffer<unsigned long long> unfinished(1, ctx);
	{
		EventTimer transfer(stream);
		a.cart_products = upload(host.cart_products, host.n_carts + 1, cart_products, stream, ctx);
		a.product_candidates = upload(host.product_candidates, sizes.products + 1, product_candidates, stream, ctx);
		a.product_rank = upload(host.product_rank, sizes.products, product_rank, stream, ctx);
		a.candidate_store = upload(host.candidate_store, sizes.candidates, candidate_store, stream, ctx);
		a.candidate_cost = upload(host.candidate_cost, sizes.candidates, candidate_cost, stream, ctx);
		a.cart_stores = upload(host.cart_stores, host.n_carts + 1, cart_stores, stream, ctx);
		a.store_fee = upload(host.store_fee, sizes.stores, store_fee, stream, ctx);
		a.store_free_from = upload(host.store_free_from, sizes.stores, store_free_from, stream, ctx);
		a.store_share = upload(host.store_share, sizes.stores, store_share, stream, ctx);
		ctx.times.transfer_ms += transfer.stop_ms();
	}
	ctx.interrupt_point(Phase::Transfer);

	/*
	 * A state is copied whole into each thread and back, though a cart of n
	 * products writes only n entries of its arrays: zeroed, no byte of the
	 * copy is uninitialised (compute-sanitizer's initcheck).
	 */
	check(cudaMemsetAsync(states.get(), 0, states.size() * sizeof(CartSearchState), stream), "cudaMemsetAsync");
	StoreArrays stores{subtotal.get(), potential.get(), uses.get()};
	unsigned blocks = static_cast<unsigned>((host.n_carts + kBlock - 1) / kBlock);
	{
		EventTimer compute(stream);
		start_carts<<<grid_for(static_cast<size_t>(host.n_carts), kBlock), kBlock, 0, stream>>>(a, states.get(), stores);
		check_launch("start_carts");
		for (;;)
		{
			unsigned long long left = 0;
			check(cudaMemsetAsync(unfinished.get(), 0, sizeof left, stream), "cudaMemsetAsync");
			run_carts<<<blocks, kBlock, 0, stream>>>(a, states.get(), stores, device_choice.get(), unfinished.get());
			check_launch("run_carts");
			check(cudaMemcpyAsync(&left, unfinished.get(), sizeof left, cudaMemcpyDeviceToHost, stream),
				  "cudaMemcpyAsync");
			stream.synchronize();
			ctx.interrupt_point(Phase::Compute);
			if (left == 0)
				break;
		}
		ctx.times.compute_ms += compute.stop_ms();
	}
	{
		EventTimer transfer(stream);
		if (!choice.empty())
			check(cudaMemcpyAsync(choice.data(), device_choice.get(), choice.size() * sizeof(int32_t),
								  cudaMemcpyDeviceToHost, stream),
				  "cudaMemcpyAsync");
		ctx.times.transfer_ms += transfer.stop_ms();
	}
	return choice;
}

} // namespace gpurec::gpu
