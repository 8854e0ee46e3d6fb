/*
 * marketplace.cu: the k cheapest offers per product on the GPU.
 *
 * The offers are not sorted or grouped, and a full segmented sort of 30
 * million offers costs far more than needed for small k.  Instead each round
 * finds, for every product at once, its next-cheapest offer in the order
 * (price key, store_id) with three streaming passes of atomics:
 *   1. the least price key among offers after the product's last pick,
 *   2. the least store_id among those at that price,
 *   3. how many offers are exactly (price, store), and the first such row.
 * A round fills `multiplicity` ranks, so k = 1 costs three passes over the
 * offers, and k rounds at most for any k.
 */
#include <climits>

#include "cuda_util.cuh"
#include "marketplace_kernels.hpp"

namespace gpurec::gpu {

namespace {

constexpr uint32_t kNoRow = 0xFFFFFFFFu;

/* Per-product state of the rounds. */
struct ProductState
{
	long long *last_key;
	long long *last_store;
	long long *best_key;
	long long *best_store;
	unsigned long long *multiplicity;
	uint32_t *first_row;
	int *need;		  /* ranks still to fill */
	int *started;	  /* a pick was made: last_* are valid */
	uint32_t *picked; /* n_products x k rows picked, kNoRow when unfilled */
};

__device__ __forceinline__ bool after_last(const ProductState &s, int p, long long key,
										   long long store)
{
	return !s.started[p] || key > s.last_key[p] || (key == s.last_key[p] && store > s.last_store[p]);
}

__global__ void reset_round(ProductState s, size_t n_products)
{
	for (size_t p = blockIdx.x * size_t(blockDim.x) + threadIdx.x; p < n_products;
		 p += size_t(gridDim.x) * blockDim.x)
	{
		s.best_key[p] = LLONG_MAX;
		s.best_store[p] = LLONG_MAX;
		s.multiplicity[p] = 0;
		s.first_row[p] = kNoRow;
	}
}

__global__ void least_key(ProductState s, const int32_t *__restrict__ codes,
						  const long long *__restrict__ keys, const long long *__restrict__ stores,
						  size_t n)
{
	for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
		 i += size_t(gridDim.x) * blockDim.x)
	{
		int p = codes[i];
		if (s.need[p] <= 0)
			continue;
		long long key = keys[i];
		if (key >= s.best_key[p]) /* cannot lower it: skip the atomic */
			continue;
		if (after_last(s, p, key, stores[i]))
			atomicMin(&s.best_key[p], key);
	}
}

__global__ void least_store(ProductState s, const int32_t *__restrict__ codes,
							const long long *__restrict__ keys,
							const long long *__restrict__ stores, size_t n)
{
	for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
		 i += size_t(gridDim.x) * blockDim.x)
	{
		int p = codes[i];
		if (s.need[p] <= 0 || keys[i] != s.best_key[p])
			continue;
		long long store = stores[i];
		if (after_last(s, p, keys[i], store))
			atomicMin(&s.best_store[p], store);
	}
}

__global__ void count_best(ProductState s, const int32_t *__restrict__ codes,
						   const long long *__restrict__ keys, const long long *__restrict__ stores,
						   size_t n, uint32_t row_base)
{
	for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
		 i += size_t(gridDim.x) * blockDim.x)
	{
		int p = codes[i];
		if (s.need[p] <= 0 || keys[i] != s.best_key[p] || stores[i] != s.best_store[p])
			continue;
		if (after_last(s, p, keys[i], stores[i]))
		{
			atomicAdd(&s.multiplicity[p], 1ULL);
			atomicMin(&s.first_row[p], row_base + uint32_t(i));
		}
	}
}

/* Records the round's pick of every product; counts products still wanting ranks. */
__global__ void take_round(ProductState s, size_t n_products, int k, unsigned *still_active)
{
	for (size_t p = blockIdx.x * size_t(blockDim.x) + threadIdx.x; p < n_products;
		 p += size_t(gridDim.x) * blockDim.x)
	{
		int need = s.need[p];
		if (need <= 0)
			continue;
		unsigned long long m = s.multiplicity[p];
		if (m == 0)
		{
			s.need[p] = 0; /* no offer left */
			continue;
		}
		int take = m < (unsigned long long) need ? int(m) : need;
		uint32_t *out = s.picked + p * size_t(k) + (k - need);
		for (int j = 0; j < take; ++j)
			out[j] = s.first_row[p];
		need -= take;
		s.need[p] = need;
		s.last_key[p] = s.best_key[p];
		s.last_store[p] = s.best_store[p];
		s.started[p] = 1;
		if (need > 0)
			atomicAdd(still_active, 1u);
	}
}

__global__ void start_part(ProductState s, size_t n_products, int k)
{
	for (size_t p = blockIdx.x * size_t(blockDim.x) + threadIdx.x; p < n_products;
		 p += size_t(gridDim.x) * blockDim.x)
	{
		s.need[p] = k;
		s.started[p] = 0;
		for (int j = 0; j < k; ++j)
			s.picked[p * size_t(k) + j] = kNoRow;
	}
}

/* Copies rows [begin, end) of a chunked column to device memory. */
template <typename T>
void upload(const ChunkedColumn<T> &column, size_t begin, size_t end, T *device, cudaStream_t stream)
{
	constexpr size_t rows_per_chunk = ChunkedColumn<T>::kChunkRows;
	while (begin < end)
	{
		size_t c = begin / rows_per_chunk, off = begin % rows_per_chunk;
		size_t n = std::min(end - begin, rows_per_chunk - off);
		check(cudaMemcpyAsync(device, column.chunk_data(c) + off, n * sizeof(T),
							  cudaMemcpyHostToDevice, stream),
			  "cudaMemcpyAsync");
		device += n;
		begin += n;
	}
}

} // namespace

std::vector<uint32_t> cheapest_offer_candidates(const ChunkedColumn<int32_t> &product_codes,
												size_t n_products,
												const ChunkedColumn<int64_t> &stores,
												const ChunkedColumn<int64_t> &price_keys, int k,
												ExecContext &ctx)
{
	std::vector<uint32_t> candidates;
	size_t n = product_codes.size();
	if (n == 0)
		return candidates;
	/* a product cannot have more than its offers ranked */
	size_t k_slots = static_cast<size_t>(k);
	if (k_slots > n)
		k_slots = n;
	int kk = static_cast<int>(k_slots);

	Stream stream;
	DeviceBuffer<long long> last_key(n_products, ctx), last_store(n_products, ctx),
		best_key(n_products, ctx), best_store(n_products, ctx);
	DeviceBuffer<unsigned long long> multiplicity(n_products, ctx);
	DeviceBuffer<uint32_t> first_row(n_products, ctx);
	DeviceBuffer<int> need(n_products, ctx), started(n_products, ctx);
	DeviceBuffer<uint32_t> picked(n_products * k_slots, ctx);
	DeviceBuffer<unsigned> still_active(1, ctx);
	ProductState s{last_key.get(),	 last_store.get(), best_key.get(),
				   best_store.get(), multiplicity.get(), first_row.get(),
				   need.get(),		 started.get(),	   picked.get()};

	/* the offers go in parts that fit in what the GPU has free */
	size_t free_bytes = 0, total_bytes = 0;
	check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
	const size_t bytes_per_offer = sizeof(int32_t) + 2 * sizeof(long long);
	size_t part_rows = (free_bytes / 10 * 8) / bytes_per_offer;
	part_rows = std::max<size_t>(part_rows - part_rows % ChunkedColumn<int32_t>::kChunkRows,
								 ChunkedColumn<int32_t>::kChunkRows);
	if (part_rows > n)
		part_rows = n;
	DeviceBuffer<int32_t> codes_d(part_rows, ctx);
	DeviceBuffer<long long> keys_d(part_rows, ctx), stores_d(part_rows, ctx);
	std::vector<uint32_t> picked_host(n_products * k_slots);

	for (size_t begin = 0; begin < n; begin += part_rows)
	{
		size_t end = std::min(n, begin + part_rows), rows = end - begin;
		{
			EventTimer transfer(stream);
			upload(product_codes, begin, end, codes_d.get(), stream);
			upload(price_keys, begin, end, reinterpret_cast<int64_t *>(keys_d.get()), stream);
			upload(stores, begin, end, reinterpret_cast<int64_t *>(stores_d.get()), stream);
			ctx.times.transfer_ms += transfer.stop_ms();
		}
		EventTimer compute(stream);
		unsigned grid_products = grid_for(n_products), grid_rows = grid_for(rows);
		start_part<<<grid_products, 256, 0, stream>>>(s, n_products, kk);
		check_launch("start_part");
		for (int round = 0; round < kk; ++round)
		{
			reset_round<<<grid_products, 256, 0, stream>>>(s, n_products);
			check_launch("reset_round");
			least_key<<<grid_rows, 256, 0, stream>>>(s, codes_d.get(), keys_d.get(), stores_d.get(),
													 rows);
			check_launch("least_key");
			least_store<<<grid_rows, 256, 0, stream>>>(s, codes_d.get(), keys_d.get(),
													   stores_d.get(), rows);
			check_launch("least_store");
			count_best<<<grid_rows, 256, 0, stream>>>(s, codes_d.get(), keys_d.get(), stores_d.get(),
													  rows, static_cast<uint32_t>(begin));
			check_launch("count_best");
			check(cudaMemsetAsync(still_active.get(), 0, sizeof(unsigned), stream), "cudaMemsetAsync");
			take_round<<<grid_products, 256, 0, stream>>>(s, n_products, kk, still_active.get());
			check_launch("take_round");
			if (round + 1 == kk)
				break;
			unsigned active = 0;
			check(cudaMemcpyAsync(&active, still_active.get(), sizeof active, cudaMemcpyDeviceToHost,
								  stream),
				  "cudaMemcpyAsync");
			stream.synchronize();
			ctx.check_interrupts();
			if (active == 0)
				break;
		}
		ctx.times.compute_ms += compute.stop_ms();
		{
			EventTimer transfer(stream);
			check(cudaMemcpyAsync(picked_host.data(), picked.get(), picked_host.size() * sizeof(uint32_t),
								  cudaMemcpyDeviceToHost, stream),
				  "cudaMemcpyAsync");
			ctx.times.transfer_ms += transfer.stop_ms();
		}
		for (uint32_t row : picked_host)
			if (row != kNoRow)
				candidates.push_back(row);
		ctx.check_interrupts();
	}
	return candidates;
}

} // namespace gpurec::gpu
