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
 *
 * Usually (price key, store_id) fits in 62 bits once both are taken relative
 * to their minimum (prices in cents and store ids do); a first pass finds
 * the ranges, and then each round needs only two passes: the least packed
 * value, and its count.  That brings k = 1 on 30.72M offers under 1 ms.
 *
 * Offers live on the device in the input layer's chunks (kChunkRows rows
 * each), copied through pinned staging slots while the input is still
 * being read; the kernels address them through a table of chunk pointers.
 */
#include <climits>

#include "cuda_util.cuh"
#include "api/marketplace_kernels.hpp"

namespace gpurec::gpu {

namespace {

constexpr uint32_t kNoRow = kNoOffer;
constexpr size_t kChunkMask = kChunkRows - 1;
constexpr size_t kBytesPerOffer = sizeof(int32_t) + 2 * sizeof(long long);

/* Device offers: row i is at chunk i >> kChunkShift, offset i & kChunkMask. */
struct OfferChunks
{
	const int32_t *const *codes;
	const long long *const *keys;
	const long long *const *stores;
};

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

/* (price key, store_id) as one order-preserving value, when the ranges allow. */
struct Packing
{
	long long key_min;
	long long store_min;
	int store_bits;
};

__device__ __forceinline__ long long pack(long long key, long long store, Packing pk)
{
	return (static_cast<long long>(static_cast<unsigned long long>(key - pk.key_min) << pk.store_bits)) |
		   (store - pk.store_min);
}

/* ranges[0..3] = min key, max key, min store, max store */
__global__ void offer_ranges(OfferChunks offers, size_t n, long long *ranges)
{
	long long v[4] = {LLONG_MAX, LLONG_MIN, LLONG_MAX, LLONG_MIN};
	for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
		 i += size_t(gridDim.x) * blockDim.x)
	{
		size_t c = i >> kChunkShift, o = i & kChunkMask;
		long long key = offers.keys[c][o], store = offers.stores[c][o];
		v[0] = min(v[0], key);
		v[1] = max(v[1], key);
		v[2] = min(v[2], store);
		v[3] = max(v[3], store);
	}
	for (int offset = 16; offset > 0; offset /= 2)
	{
		v[0] = min(v[0], __shfl_down_sync(0xffffffffu, v[0], offset));
		v[1] = max(v[1], __shfl_down_sync(0xffffffffu, v[1], offset));
		v[2] = min(v[2], __shfl_down_sync(0xffffffffu, v[2], offset));
		v[3] = max(v[3], __shfl_down_sync(0xffffffffu, v[3], offset));
	}
	__shared__ long long warp_values[32][4];
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	if (lane == 0)
		for (int j = 0; j < 4; ++j)
			warp_values[warp][j] = v[j];
	__syncthreads();
	if (threadIdx.x == 0)
	{
		for (int w = 1; w < int(blockDim.x / 32); ++w)
		{
			v[0] = min(v[0], warp_values[w][0]);
			v[1] = max(v[1], warp_values[w][1]);
			v[2] = min(v[2], warp_values[w][2]);
			v[3] = max(v[3], warp_values[w][3]);
		}
		atomicMin(&ranges[0], v[0]);
		atomicMax(&ranges[1], v[1]);
		atomicMin(&ranges[2], v[2]);
		atomicMax(&ranges[3], v[3]);
	}
}

/*
 * Packed rounds: best_key holds the least packed value after the last pick
 * (last_key).  In the first round nothing is picked yet; in later ones every
 * product with offers in the part has a pick, and products already complete
 * merely waste an atomic.
 */
template <bool kFirstRound>
__global__ void least_packed(ProductState s, OfferChunks offers, size_t n, Packing pk)
{
	for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
		 i += size_t(gridDim.x) * blockDim.x)
	{
		size_t c = i >> kChunkShift, o = i & kChunkMask;
		int p = offers.codes[c][o];
		long long v = pack(offers.keys[c][o], offers.stores[c][o], pk);
		if (v >= s.best_key[p] || (!kFirstRound && v <= s.last_key[p]))
			continue;
		atomicMin(&s.best_key[p], v);
	}
}

__global__ void count_packed(ProductState s, OfferChunks offers, size_t n, Packing pk, uint32_t row_base)
{
	for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
		 i += size_t(gridDim.x) * blockDim.x)
	{
		size_t c = i >> kChunkShift, o = i & kChunkMask;
		int p = offers.codes[c][o];
		if (pack(offers.keys[c][o], offers.stores[c][o], pk) != s.best_key[p])
			continue;
		atomicAdd(&s.multiplicity[p], 1ULL);
		atomicMin(&s.first_row[p], row_base + uint32_t(i));
	}
}

__global__ void least_key(ProductState s, OfferChunks offers, size_t n)
{
	for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
		 i += size_t(gridDim.x) * blockDim.x)
	{
		size_t c = i >> kChunkShift, o = i & kChunkMask;
		int p = offers.codes[c][o];
		if (s.need[p] <= 0)
			continue;
		long long key = offers.keys[c][o];
		if (key >= s.best_key[p]) /* cannot lower it: skip the atomic */
			continue;
		if (after_last(s, p, key, offers.stores[c][o]))
			atomicMin(&s.best_key[p], key);
	}
}

__global__ void least_store(ProductState s, OfferChunks offers, size_t n)
{
	for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
		 i += size_t(gridDim.x) * blockDim.x)
	{
		size_t c = i >> kChunkShift, o = i & kChunkMask;
		int p = offers.codes[c][o];
		long long key = offers.keys[c][o];
		if (s.need[p] <= 0 || key != s.best_key[p])
			continue;
		long long store = offers.stores[c][o];
		if (after_last(s, p, key, store))
			atomicMin(&s.best_store[p], store);
	}
}

__global__ void count_best(ProductState s, OfferChunks offers, size_t n, uint32_t row_base)
{
	for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
		 i += size_t(gridDim.x) * blockDim.x)
	{
		size_t c = i >> kChunkShift, o = i & kChunkMask;
		int p = offers.codes[c][o];
		long long key = offers.keys[c][o];
		if (s.need[p] <= 0 || key != s.best_key[p])
			continue;
		long long store = offers.stores[c][o];
		if (store == s.best_store[p] && after_last(s, p, key, store))
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

struct DeviceChunk
{
	DeviceBuffer<int32_t> codes;
	DeviceBuffer<long long> keys;
	DeviceBuffer<long long> stores;
	size_t rows;
	int key_scale; /* the numeric scale its keys were copied at */
};

} // namespace

/*
 * Offer chunks on the device, consecutive from first_chunk.  Copies go
 * through the backend's pinned staging slots (upload_staged): the host
 * fills one slot while the copy engine drains another.
 */
class OfferUpload
{
  public:
	explicit OfferUpload(CallContext &ctx) : ctx_(ctx) {}
	~OfferUpload() { cudaStreamSynchronize(stream_); }

	cudaStream_t stream() const { return stream_; }
	size_t first_chunk() const { return first_chunk_; }
	size_t end_chunk() const { return first_chunk_ + chunks_.size(); }
	size_t rows() const
	{
		return chunks_.empty() ? 0 : (chunks_.size() - 1) * kChunkRows + chunks_.back().rows;
	}
	bool failed() const { return failed_; }
	void mark_failed()
	{
		failed_ = true;
		cudaStreamSynchronize(stream_);
		chunks_.clear();
	}

	void start_at(size_t chunk) { first_chunk_ = chunk; }

	/* Copies chunk `c` (the next one) of the three columns. */
	void push_chunk(size_t c, const OfferColumns &offers)
	{
		size_t rows = offers.product_codes.chunk_rows(c);
		DeviceChunk chunk{DeviceBuffer<int32_t>(kChunkRows, ctx_), DeviceBuffer<long long>(kChunkRows, ctx_),
						  DeviceBuffer<long long>(kChunkRows, ctx_), rows, offers.price_scale};
		upload_staged(chunk.codes.get(), offers.product_codes.chunk_data(c), rows * sizeof(int32_t), stream_, ctx_);
		upload_staged(chunk.keys.get(), offers.price_keys.chunk_data(c), rows * sizeof(long long), stream_, ctx_);
		upload_staged(chunk.stores.get(), offers.stores.chunk_data(c), rows * sizeof(long long), stream_, ctx_);
		chunks_.push_back(std::move(chunk));
	}

	/* Copies again the keys of chunks copied before a numeric column changed scale. */
	void refresh_keys(const OfferColumns &offers)
	{
		for (size_t j = 0; j < chunks_.size(); ++j)
		{
			DeviceChunk &chunk = chunks_[j];
			if (chunk.key_scale == offers.price_scale)
				continue;
			size_t c = first_chunk_ + j;
			upload_staged(chunk.keys.get(), offers.price_keys.chunk_data(c), chunk.rows * sizeof(long long), stream_,
						  ctx_);
			chunk.key_scale = offers.price_scale;
		}
	}

	/* The chunk pointer tables, on the device. */
	OfferChunks device_tables()
	{
		/* pinned: a copy from pageable memory costs milliseconds on some hosts */
		PinnedBuffer<const void *> host(3 * chunks_.size());
		size_t n = chunks_.size();
		for (size_t j = 0; j < n; ++j)
		{
			host.get()[j] = chunks_[j].codes.get();
			host.get()[n + j] = chunks_[j].keys.get();
			host.get()[2 * n + j] = chunks_[j].stores.get();
		}
		tables_ = DeviceBuffer<const void *>(host.size(), ctx_);
		check(cudaMemcpyAsync(tables_.get(), host.get(), host.size() * sizeof(void *), cudaMemcpyHostToDevice,
							  stream_),
			  "cudaMemcpyAsync");
		stream_.synchronize(); /* `host` goes out of scope */
		const void *const *t = tables_.get();
		return {reinterpret_cast<const int32_t *const *>(t), reinterpret_cast<const long long *const *>(t + n),
				reinterpret_cast<const long long *const *>(t + 2 * n)};
	}

  private:
	CallContext &ctx_;
	Stream stream_;
	size_t first_chunk_ = 0;
	std::vector<DeviceChunk> chunks_;
	DeviceBuffer<const void *> tables_;
	bool failed_ = false;
};

void OfferUploadDeleter::operator()(OfferUpload *upload) const noexcept { delete upload; }

OfferUploadPtr start_offer_upload(CallContext &ctx) { return OfferUploadPtr(new OfferUpload(ctx)); }

void upload_offer_chunks(OfferUpload &upload, const OfferColumns &offers, CallContext &ctx)
{
	if (upload.failed())
		return;
	Stopwatch clock;
	size_t complete = offers.product_codes.rows / kChunkRows;
	try
	{
		for (size_t c = upload.end_chunk(); c < complete; ++c)
			upload.push_chunk(c, offers);
	}
	catch (const Failure &e)
	{
		if (e.kind() != Failure::Kind::OutOfMemory)
			throw;
		/* too large to stream: the offers will go through in parts after reading */
		upload.mark_failed();
	}
	ctx.times.transfer_ms += clock.elapsed_ms();
}

namespace {

/*
 * Host ends of the small copies between rounds, pinned: from pageable memory
 * each such copy can cost milliseconds on a GPU host.
 */
struct HostScratch
{
	PinnedBuffer<long long> ranges{4};
	PinnedBuffer<unsigned> active{1};
	PinnedBuffer<uint32_t> picked;

	explicit HostScratch(size_t picked_slots) : picked(picked_slots) {}
};

/* Runs the rounds over the offers `upload` holds; appends the picked rows. */
void rank_part(OfferUpload &upload, ProductState s, size_t n_products, int k, unsigned *still_active,
			   long long *ranges,
			   HostScratch &host, std::vector<uint32_t> &candidates, CallContext &ctx)
{
	cudaStream_t stream = upload.stream();
	OfferChunks offers = upload.device_tables();
	size_t rows = upload.rows();
	uint32_t row_base = static_cast<uint32_t>(upload.first_chunk() * kChunkRows);
	EventTimer compute(stream);
	unsigned grid_products = grid_for(n_products), grid_rows = grid_for(rows);

	/* can (price key, store_id) go as one 62-bit value? */
	long long *ranges_host = host.ranges.get();
	ranges_host[0] = ranges_host[2] = LLONG_MAX;
	ranges_host[1] = ranges_host[3] = LLONG_MIN;
	check(cudaMemcpyAsync(ranges, ranges_host, 4 * sizeof(long long), cudaMemcpyHostToDevice, stream),
		  "cudaMemcpyAsync");
	offer_ranges<<<grid_rows, 256, 0, stream>>>(offers, rows, ranges);
	check_launch("offer_ranges");
	check(cudaMemcpyAsync(ranges_host, ranges, 4 * sizeof(long long), cudaMemcpyDeviceToHost, stream),
		  "cudaMemcpyAsync");
	check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
	auto bits = [](long long lo, long long hi) {
		unsigned __int128 range = static_cast<unsigned __int128>(static_cast<__int128>(hi) - lo);
		int b = 0;
		while (range >> b)
			++b;
		return b;
	};
	int key_bits = bits(ranges_host[0], ranges_host[1]);
	int store_bits = bits(ranges_host[2], ranges_host[3]);
	bool packed = key_bits + store_bits <= 62;
	Packing pk{ranges_host[0], ranges_host[2], store_bits};

	start_part<<<grid_products, 256, 0, stream>>>(s, n_products, k);
	check_launch("start_part");
	for (int round = 0; round < k; ++round)
	{
		reset_round<<<grid_products, 256, 0, stream>>>(s, n_products);
		check_launch("reset_round");
		if (packed)
		{
			if (round == 0)
				least_packed<true><<<grid_rows, 256, 0, stream>>>(s, offers, rows, pk);
			else
				least_packed<false><<<grid_rows, 256, 0, stream>>>(s, offers, rows, pk);
			check_launch("least_packed");
			count_packed<<<grid_rows, 256, 0, stream>>>(s, offers, rows, pk, row_base);
			check_launch("count_packed");
		}
		else
		{
			least_key<<<grid_rows, 256, 0, stream>>>(s, offers, rows);
			check_launch("least_key");
			least_store<<<grid_rows, 256, 0, stream>>>(s, offers, rows);
			check_launch("least_store");
			count_best<<<grid_rows, 256, 0, stream>>>(s, offers, rows, row_base);
			check_launch("count_best");
		}
		check(cudaMemsetAsync(still_active, 0, sizeof(unsigned), stream), "cudaMemsetAsync");
		take_round<<<grid_products, 256, 0, stream>>>(s, n_products, k, still_active);
		check_launch("take_round");
		if (round + 1 == k)
			break;
		check(cudaMemcpyAsync(host.active.get(), still_active, sizeof(unsigned), cudaMemcpyDeviceToHost,
							  stream),
			  "cudaMemcpyAsync");
		check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
		ctx.interrupt_point(Phase::Compute);
		if (*host.active.get() == 0)
			break;
	}
	ctx.times.compute_ms += compute.stop_ms();
	EventTimer transfer(stream);
	check(cudaMemcpyAsync(host.picked.get(), s.picked, host.picked.size() * sizeof(uint32_t),
						  cudaMemcpyDeviceToHost, stream),
		  "cudaMemcpyAsync");
	ctx.times.transfer_ms += transfer.stop_ms();
	candidates.insert(candidates.end(), host.picked.get(), host.picked.get() + host.picked.size());
}

} // namespace

std::vector<uint32_t> cheapest_offer_picks(const OfferColumns &offers, size_t n_products, int k,
										   OfferUpload *streamed, CallContext &ctx)
{
	std::vector<uint32_t> candidates;
	size_t n = offers.product_codes.rows;
	if (n == 0)
		return candidates;

	DeviceBuffer<long long> last_key(n_products, ctx), last_store(n_products, ctx), best_key(n_products, ctx),
		best_store(n_products, ctx);
	DeviceBuffer<unsigned long long> multiplicity(n_products, ctx);
	DeviceBuffer<uint32_t> first_row(n_products, ctx);
	DeviceBuffer<int> need(n_products, ctx), started(n_products, ctx);
	DeviceBuffer<uint32_t> picked(n_products * size_t(k), ctx);
	DeviceBuffer<unsigned> still_active(1, ctx);
	DeviceBuffer<long long> ranges(4, ctx);
	ProductState s{last_key.get(), last_store.get(), best_key.get(), best_store.get(), multiplicity.get(),
				   first_row.get(), need.get(), started.get(), picked.get()};
	HostScratch host(n_products * size_t(k));
	size_t n_chunks = offers.product_codes.chunk_count();

	if (streamed && !streamed->failed() && !ctx.gpu_memory_budget)
	{
		/* most chunks are there already: finish the copy, then rank all at once */
		Stopwatch clock;
		try
		{
			streamed->refresh_keys(offers);
			for (size_t c = streamed->end_chunk(); c < n_chunks; ++c)
				streamed->push_chunk(c, offers);
			check(cudaStreamSynchronize(streamed->stream()), "cudaStreamSynchronize");
		}
		catch (const Failure &e)
		{
			if (e.kind() != Failure::Kind::OutOfMemory)
				throw;
			streamed->mark_failed();
		}
		ctx.times.transfer_ms += clock.elapsed_ms();
		if (!streamed->failed())
		{
			ctx.interrupt_point(Phase::Transfer);
			rank_part(*streamed, s, n_products, k, still_active.get(), ranges.get(), host,
					  candidates, ctx);
			ctx.interrupt_point(Phase::Compute);
			return candidates;
		}
	}

	/* in parts that fit in what the GPU has free */
	size_t free_bytes = 0, total_bytes = 0;
	check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
	if (ctx.gpu_memory_budget)
		free_bytes = std::min(free_bytes, ctx.gpu_memory_budget);
	size_t part_chunks = std::max<size_t>(1, free_bytes / 10 * 8 / (kChunkRows * kBytesPerOffer));
	for (size_t first = 0; first < n_chunks; first += part_chunks)
	{
		OfferUpload part(ctx);
		part.start_at(first);
		Stopwatch clock;
		for (size_t c = first; c < std::min(n_chunks, first + part_chunks); ++c)
			part.push_chunk(c, offers);
		check(cudaStreamSynchronize(part.stream()), "cudaStreamSynchronize");
		ctx.times.transfer_ms += clock.elapsed_ms();
		ctx.interrupt_point(Phase::Transfer);
		rank_part(part, s, n_products, k, still_active.get(), ranges.get(), host, candidates,
				  ctx);
		ctx.interrupt_point(Phase::Compute);
	}
	return candidates;
}

} // namespace gpurec::gpu
