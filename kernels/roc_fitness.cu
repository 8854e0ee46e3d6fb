/*
 * roc_fitness.cu: exact ROC counts of a whole population on the GPU.
 *
 * The input columns go to the device as they were read; the host does no
 * per-example work.  For each part of the population that fits in GPU
 * memory:
 *
 *  1. one pass finds the range of the score keys (and whether every score
 *     is a float exactly, as real[] scores are), so that
 *  2. every example packs into one integer key, most significant first:
 *     (individual, score - lowest score, label), in as few bits as the part
 *     needs; examples with a NULL score or label are dropped here;
 *  3. one device-wide radix sort of those keys over just those bits puts
 *     every individual's examples in ascending score order, each tie group's
 *     negatives before its positives;
 *  4. one block per individual walks its examples once: the start of each
 *     tie group and its first positive come from a running maximum (a block
 *     scan), so the last example of a group knows the group's ranks and its
 *     number of positives.  With mid-ranks r (ascending, ties averaged),
 *     2 x wins = sum over positives of 2r - P(P + 1), and 2r of a group is
 *     its first plus its last rank: integers only.
 *
 * The host turns the integers into AUC, as it does for the CPU path.
 */
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cuda/std/tuple>

#include <algorithm>
#include <climits>
#include <cstring>

#include "api/roc_kernels.hpp"
#include "api/roc_keys.hpp"
#include "cuda_util.cuh"

namespace gpurec::gpu {

namespace {

using roc_keys::KeyLayout;
using roc_keys::ScoreRange;

constexpr int kBlock = 256;
constexpr int kItems = 8;
constexpr int kTile = kBlock * kItems;

/*
 * Bytes of GPU memory per example of a part, at most: the packed keys twice
 * (the sort's double buffer, 16-byte keys in the worst case) and a tenth
 * more for the sort's own scratch.
 */
constexpr size_t kKeyBytesPerExample = 2 * 16 * 11 / 10;

/* ---- packed keys ------------------------------------------------------- */

/* (segment, score, label) in one 64-bit integer: segment_bits + packed_bits() <= 64. */
struct NarrowKeys
{
	using Key = unsigned long long;
	KeyLayout layout;
	int segment_bits;

	int end_bit() const { return layout.packed_bits() + segment_bits; }

	__device__ Key pack(uint32_t segment, uint64_t key, uint32_t label) const
	{
		Key k = (layout.score_of(key) << 1) | label;
		if (segment_bits > 0) /* then the shift is below 64 */
			k |= static_cast<Key>(segment) << layout.packed_bits();
		return k;
	}
	__device__ uint32_t segment(Key k) const
	{
		return segment_bits > 0 ? static_cast<uint32_t>(k >> layout.packed_bits()) : 0;
	}
	__device__ static bool same_score(Key a, Key b) { return (a >> 1) == (b >> 1); }
	__device__ static uint32_t label(Key k) { return static_cast<uint32_t>(k & 1); }

	template <typename Count>
	static cudaError_t sort(void *temp, size_t &temp_bytes, cub::DoubleBuffer<Key> &keys, Count n, int end_bit,
							cudaStream_t stream)
	{
		return cub::DeviceRadixSort::SortKeys(temp, temp_bytes, keys, n, 0, end_bit, stream);
	}
};

/* When they do not fit 64 bits (scores that are doubles): 128 bits, as hi:lo. */
struct WideKey
{
	unsigned long long hi, lo;
};

struct WideKeyParts
{
	__host__ __device__ ::cuda::std::tuple<unsigned long long &, unsigned long long &>
	operator()(WideKey &k) const
	{
		return {k.hi, k.lo};
	}
};

struct WideKeys
{
	using Key = WideKey;
	KeyLayout layout;
	int segment_bits;

	int end_bit() const { return 64 + 1 + segment_bits; }

	__device__ Key pack(uint32_t segment, uint64_t key, uint32_t label) const
	{
		uint64_t score = layout.score_of(key);
		return {(static_cast<unsigned long long>(segment) << 1) | (score >> 63), (score << 1) | label};
	}
	__device__ uint32_t segment(Key k) const { return static_cast<uint32_t>(k.hi >> 1); }
	__device__ static bool same_score(Key a, Key b) { return a.hi == b.hi && (a.lo >> 1) == (b.lo >> 1); }
	__device__ static uint32_t label(Key k) { return static_cast<uint32_t>(k.lo & 1); }

	template <typename Count>
	static cudaError_t sort(void *temp, size_t &temp_bytes, cub::DoubleBuffer<Key> &keys, Count n, int end_bit,
							cudaStream_t stream)
	{
		return cub::DeviceRadixSort::SortKeys(temp, temp_bytes, keys, n, WideKeyParts{}, 0, end_bit, stream);
	}
};

/* ---- the examples of a part, as the kernels read them ------------------- */

/*
 * Array format: rows of `length` elements, floats (real[]) or doubles;
 * local segment = row within the part.  valid is null when no element of
 * the call is NULL.
 */
template <typename Value> struct ArrayExamples
{
	const Value *values;
	const uint8_t *valid;
	const int8_t *labels; /* -1: NULL */
	long long length;
	bool index_fits_32_bits; /* then the division is a 32-bit one, several times cheaper */

	__device__ bool at(size_t i, uint32_t &segment, uint64_t &key, uint32_t &label) const
	{
		long long row = index_fits_32_bits
							? static_cast<long long>(static_cast<uint32_t>(i) / static_cast<uint32_t>(length))
							: static_cast<long long>(i) / length;
		int8_t l = labels[i - row * length];
		if (l < 0 || (valid && !valid[i]))
			return false;
		segment = static_cast<uint32_t>(row);
		key = roc_keys::unsigned_key_of_double(static_cast<double>(values[i])); /* a float widens exactly */
		label = static_cast<uint32_t>(l);
		return true;
	}
};

/* Long format: every row; those of segments [first, end) belong to the part. */
struct RowExamples
{
	const int32_t *codes;
	const int64_t *keys; /* order keys, number_column.hpp */
	const uint8_t *labels;
	const int32_t *segment_of_code;
	int32_t first_segment, end_segment;

	__device__ bool at(size_t i, uint32_t &segment, uint64_t &key, uint32_t &label) const
	{
		int32_t s = segment_of_code[codes[i]];
		if (s < first_segment || s >= end_segment)
			return false;
		segment = static_cast<uint32_t>(s - first_segment);
		key = roc_keys::unsigned_key_of_order_key(keys[i]);
		label = labels[i];
		return true;
	}
};

/* ---- kernels ----------------------------------------------------------- */

struct CombineRanges
{
	__device__ ScoreRange operator()(ScoreRange a, const ScoreRange &b) const
	{
		a.add(b);
		return a;
	}
};

/* range[0..2] (set to ~0, 0, 1 beforehand): the lowest and highest key, and whether all are floats */
template <typename Examples>
__global__ void __launch_bounds__(kBlock) find_key_range(Examples examples, size_t n, unsigned long long *range)
{
	using Reduce = cub::BlockReduce<ScoreRange, kBlock>;
	__shared__ typename Reduce::TempStorage temp;
	ScoreRange mine;
	for (size_t i = blockIdx.x * size_t(kBlock) + threadIdx.x; i < n; i += size_t(gridDim.x) * kBlock)
	{
		uint32_t segment, label;
		uint64_t key;
		if (examples.at(i, segment, key, label))
			mine.add(key, true);
	}
	ScoreRange block = Reduce(temp).Reduce(mine, CombineRanges());
	if (threadIdx.x == 0)
	{
		atomicMin(&range[0], static_cast<unsigned long long>(block.lowest));
		atomicMax(&range[1], static_cast<unsigned long long>(block.highest));
		atomicAnd(&range[2], block.all_floats ? 1ull : 0ull);
	}
}

/*
 * Packs the part's examples into keys, dropping those that are not in it;
 * *count (zero beforehand) ends as the number kept.  Their order does not
 * matter: the sort comes next.
 */
template <typename Examples, typename Keys>
__global__ void __launch_bounds__(kBlock, 4)
	pack_keys(Examples examples, size_t n, Keys keys, typename Keys::Key *out, unsigned long long *count)
{
	using Scan = cub::BlockScan<int, kBlock>;
	__shared__ typename Scan::TempStorage scan;
	__shared__ unsigned long long tile_base;
	for (size_t tile = blockIdx.x * size_t(kTile); tile < n; tile += size_t(gridDim.x) * kTile)
	{
		typename Keys::Key packed[kItems];
		bool keep[kItems];
		int kept = 0;
#pragma unroll
		for (int j = 0; j < kItems; ++j)
		{
			size_t i = tile + size_t(j) * kBlock + threadIdx.x; /* striped: coalesced reads */
			uint32_t segment, label;
			uint64_t key;
			keep[j] = i < n && examples.at(i, segment, key, label);
			if (keep[j])
			{
				packed[j] = keys.pack(segment, key, label);
				++kept;
			}
		}
		int offset, tile_kept;
		Scan(scan).ExclusiveSum(kept, offset, tile_kept);
		if (threadIdx.x == 0)
			tile_base = atomicAdd(count, static_cast<unsigned long long>(tile_kept));
		__syncthreads();
		unsigned long long at = tile_base + offset;
#pragma unroll
		for (int j = 0; j < kItems; ++j)
			if (keep[j])
				out[at++] = packed[j];
		__syncthreads(); /* scan storage and tile_base are reused */
	}
}

/* begin[s] = the first sorted key of segment s, for s = 0 .. n_segments */
template <typename Keys>
__global__ void find_segment_starts(const typename Keys::Key *sorted, size_t n, Keys keys, uint32_t n_segments,
									long long *begin)
{
	for (size_t s = blockIdx.x * size_t(blockDim.x) + threadIdx.x; s <= n_segments;
		 s += size_t(gridDim.x) * blockDim.x)
	{
		size_t lo = 0, hi = n;
		while (lo < hi)
		{
			size_t mid = lo + (hi - lo) / 2;
			if (keys.segment(sorted[mid]) < s)
				lo = mid + 1;
			else
				hi = mid;
		}
		begin[s] = static_cast<long long>(lo);
	}
}

/*
 * The latest tie-group start and the latest first positive of a group seen
 * so far, as positions within the segment (which has fewer than 2^31
 * examples: roc_fitness.cpp checks), so that a thread's marks take half the
 * registers that 64-bit ones would.
 */
struct LatestMarks
{
	__device__ int2 operator()(const int2 &a, const int2 &b) const
	{
		return make_int2(a.x > b.x ? a.x : b.x, a.y > b.y ? a.y : b.y);
	}
};

/* Carries the marks of the tiles before into the block scan of the next. */
struct MarksBefore
{
	int2 running;
	__device__ int2 operator()(int2 tile)
	{
		int2 before = running;
		running = LatestMarks()(before, tile);
		return before;
	}
};

struct GroupSums
{
	unsigned long long twice_rank_sum; /* over positives: first + last rank of their group */
	long long positives;
	int lowest_tail, highest_tail; /* positions of the last example of positive groups */
};

struct AddGroupSums
{
	__device__ GroupSums operator()(const GroupSums &a, const GroupSums &b) const
	{
		return {a.twice_rank_sum + b.twice_rank_sum, a.positives + b.positives,
				a.lowest_tail < b.lowest_tail ? a.lowest_tail : b.lowest_tail,
				a.highest_tail > b.highest_tail ? a.highest_tail : b.highest_tail};
	}
};

/*
 * One block per segment: the segment's sorted keys in tiles, each thread
 * kItems consecutive ones.  Ascending order with the label as the lowest
 * bit puts a tie group's negatives first, so a group has positives exactly
 * when its last example is positive, and it has (last - first positive + 1)
 * of them.  Positions are within the segment: 0 .. n-1, ranks 1 .. n.
 */
template <typename Keys>
__global__ void __launch_bounds__(kBlock, 3)
	fold_segments(const typename Keys::Key *sorted, const long long *segment_begin, RocCounts *out)
{
	using Key = typename Keys::Key;
	using Scan = cub::BlockScan<int2, kBlock>;
	using Reduce = cub::BlockReduce<GroupSums, kBlock>;
	__shared__ union
	{
		typename Scan::TempStorage scan;
		typename Reduce::TempStorage reduce;
	} temp;

	const Key *keys = sorted + segment_begin[blockIdx.x];
	const int n = static_cast<int>(segment_begin[blockIdx.x + 1] - segment_begin[blockIdx.x]);
	GroupSums sums{0, 0, INT_MAX, -1};
	MarksBefore marks_before{make_int2(-1, -1)};
	for (int tile = 0; tile < n; tile += kTile)
	{
		const int first = tile + static_cast<int>(threadIdx.x) * kItems;
		Key k[kItems];
		int2 marks[kItems];
#pragma unroll
		for (int j = 0; j < kItems; ++j)
			if (first + j < n)
				k[j] = keys[first + j];
#pragma unroll
		for (int j = 0; j < kItems; ++j)
		{
			int i = first + j;
			marks[j] = make_int2(-1, -1);
			if (i >= n)
				continue;
			Key before = i == 0 ? k[j] : j > 0 ? k[j - 1] : keys[i - 1];
			bool starts_group = i == 0 || !Keys::same_score(before, k[j]);
			bool first_positive = Keys::label(k[j]) && (starts_group || !Keys::label(before));
			marks[j] = make_int2(starts_group ? i : -1, first_positive ? i : -1);
		}
		Scan(temp.scan).InclusiveScan(marks, marks, LatestMarks(), marks_before);
#pragma unroll
		for (int j = 0; j < kItems; ++j)
		{
			int i = first + j;
			if (i >= n || !Keys::label(k[j]))
				continue;
			bool ends_group = i + 1 == n || !Keys::same_score(k[j], j + 1 < kItems ? k[j + 1] : keys[i + 1]);
			if (!ends_group)
				continue;
			int group_first = marks[j].x, first_positive = marks[j].y;
			unsigned long long positives = static_cast<unsigned long long>(i - first_positive + 1);
			/* first rank + last rank, ascending */
			sums.twice_rank_sum += positives * static_cast<unsigned long long>(group_first + i + 2);
			sums.positives += static_cast<long long>(positives);
			sums.lowest_tail = i < sums.lowest_tail ? i : sums.lowest_tail;
			sums.highest_tail = i > sums.highest_tail ? i : sums.highest_tail;
		}
		__syncthreads(); /* the scan storage is reused */
	}
	GroupSums total = Reduce(temp.reduce).Reduce(sums, AddGroupSums());
	if (threadIdx.x == 0)
	{
		RocCounts c;
		long long p = total.positives;
		c.n_positive = p;
		c.n_negative = n - p;
		/* sum of 2 x mid-rank over positives - P(P + 1) = 2 x (Mann-Whitney U) */
		c.twice_wins = total.twice_rank_sum -
					   static_cast<unsigned long long>(p) * static_cast<unsigned long long>(p + 1);
		/* rank() OVER (ORDER BY score DESC) of a group = examples above its last one + 1 */
		c.lowest_positive_rank = p > 0 ? n - total.highest_tail : 0;
		c.highest_positive_rank = p > 0 ? n - total.lowest_tail : 0;
		out[blockIdx.x] = c;
	}
}

/* ---- host side --------------------------------------------------------- */

template <typename T> void upload(const std::vector<T> &host, T *device, cudaStream_t stream)
{
	check(cudaMemcpyAsync(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, stream),
		  "cudaMemcpyAsync");
}

/* What a part may use: the GPU's free memory (or the test budget), less a fifth for safety. */
size_t usable_gpu_bytes(const CallContext &ctx)
{
	size_t free_bytes = 0, total_bytes = 0;
	check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
	if (ctx.gpu_memory_budget)
		free_bytes = std::min(free_bytes, ctx.gpu_memory_budget);
	return free_bytes / 10 * 8;
}

unsigned blocks_for_tiles(size_t n) { return grid_for((n + kItems - 1) / kItems, kBlock); }

/* The temporary bytes of sorting n keys, with 32-bit offsets where they do. */
template <typename Keys>
size_t sort_temp_bytes(size_t n, int end_bit, cudaStream_t stream)
{
	size_t temp_bytes = 0;
	cub::DoubleBuffer<typename Keys::Key> none(nullptr, nullptr);
	check(n <= UINT32_MAX ? Keys::sort(nullptr, temp_bytes, none, static_cast<uint32_t>(n), end_bit, stream)
						  : Keys::sort(nullptr, temp_bytes, none, n, end_bit, stream),
		  "DeviceRadixSort");
	return temp_bytes;
}

/* Sorts n keys in place (the double buffer's current half) in the temp_bytes at temp. */
template <typename Keys>
void sort_keys(cub::DoubleBuffer<typename Keys::Key> &keys, size_t n, int end_bit, void *temp, size_t temp_bytes,
			   cudaStream_t stream)
{
	if (sort_temp_bytes<Keys>(n, end_bit, stream) > temp_bytes)
		throw Failure(Failure::Kind::Internal, "roc_fitness: the sort needs more room than planned");
	check(n <= UINT32_MAX ? Keys::sort(temp, temp_bytes, keys, static_cast<uint32_t>(n), end_bit, stream)
						  : Keys::sort(temp, temp_bytes, keys, n, end_bit, stream),
		  "DeviceRadixSort");
}

/*
 * Steps 2 to 4 for one part: packs the part's examples among the n that
 * `examples` reads (at most `capacity` of them are the part's), sorts them
 * and folds them into out[0 .. n_segments).  Its buffers are one
 * allocation (DeviceArena), the sort's room planned for `capacity` keys.
 */
template <typename Keys, typename Examples>
void sort_and_fold(const Examples &examples, size_t n, size_t capacity, const Keys &keys, uint32_t n_segments,
				   RocCounts *out, Stream &stream, CallContext &ctx)
{
	using Key = typename Keys::Key;
	size_t temp_bytes = std::max(sort_temp_bytes<Keys>(capacity, keys.end_bit(), stream),
								 sort_temp_bytes<Keys>(std::min<size_t>(capacity, UINT32_MAX), keys.end_bit(), stream));
	DeviceArena arena;
	arena.reserve<Key>(capacity);
	arena.reserve<Key>(capacity);
	arena.reserve<unsigned long long>(1);
	arena.reserve<char>(temp_bytes);
	arena.reserve<long long>(size_t(n_segments) + 1);
	arena.reserve<RocCounts>(n_segments);
	arena.allocate(ctx);
	Key *packed = arena.take<Key>(capacity), *packed_alt = arena.take<Key>(capacity);
	auto *count = arena.take<unsigned long long>(1);
	void *temp = arena.take<char>(temp_bytes);
	long long *segment_begin = arena.take<long long>(size_t(n_segments) + 1);
	RocCounts *counts = arena.take<RocCounts>(n_segments);

	check(cudaMemsetAsync(count, 0, sizeof(unsigned long long), stream), "cudaMemsetAsync");
	pack_keys<<<blocks_for_tiles(n), kBlock, 0, stream>>>(examples, n, keys, packed, count);
	check_launch("pack_keys");
	unsigned long long kept = 0;
	check(cudaMemcpyAsync(&kept, count, sizeof kept, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
	stream.synchronize();
	if (kept > capacity)
		throw Failure(Failure::Kind::Internal, "roc_fitness: a part holds more examples than planned");
	ctx.interrupt_point(Phase::Compute);

	cub::DoubleBuffer<Key> sorted(packed, packed_alt);
	if (kept > 0)
		sort_keys<Keys>(sorted, kept, keys.end_bit(), temp, temp_bytes, stream);

	find_segment_starts<<<grid_for(size_t(n_segments) + 1), 256, 0, stream>>>(sorted.Current(), kept, keys,
																			   n_segments, segment_begin);
	check_launch("find_segment_starts");
	fold_segments<Keys><<<n_segments, kBlock, 0, stream>>>(sorted.Current(), segment_begin, counts);
	check_launch("fold_segments");
	check(cudaMemcpyAsync(out, counts, n_segments * sizeof(RocCounts), cudaMemcpyDeviceToHost, stream),
		  "cudaMemcpyAsync");
	stream.synchronize();
}

/*
 * The counts of one part's segments (out[0 .. n_segments)), from the n
 * examples that `examples` reads on the device, at most `capacity` of which
 * belong to the part.  device_range: room for find_key_range's 3 values,
 * in the caller's arena.
 */
template <typename Examples>
void count_part(const Examples &examples, size_t n, size_t capacity, bool keys_are_doubles, uint32_t n_segments,
				RocCounts *out, unsigned long long *device_range, Stream &stream, CallContext &ctx)
{
	EventTimer compute(stream);
	unsigned long long range[3] = {~0ull, 0, 1};
	check(cudaMemcpyAsync(device_range, range, sizeof range, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
	find_key_range<<<grid_for(n), kBlock, 0, stream>>>(examples, n, device_range);
	check_launch("find_key_range");
	check(cudaMemcpyAsync(range, device_range, sizeof range, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
	stream.synchronize();

	ScoreRange scores;
	scores.lowest = range[0];
	scores.highest = range[1];
	scores.all_floats = range[2] != 0;
	KeyLayout layout = roc_keys::plan_layout(scores, keys_are_doubles);
	int segment_bits = roc_keys::bit_width(n_segments - 1);
	if (segment_bits + layout.packed_bits() <= 64)
		sort_and_fold(examples, n, capacity, NarrowKeys{layout, segment_bits}, n_segments, out, stream, ctx);
	else
		sort_and_fold(examples, n, capacity, WideKeys{layout, segment_bits}, n_segments, out, stream, ctx);
	ctx.times.compute_ms += compute.stop_ms();
	ctx.interrupt_point(Phase::Compute);
}

} // namespace

std::vector<RocCounts> roc_counts_long(const RocExampleRows &rows, const std::vector<int32_t> &segment_of_code,
									   CallContext &ctx)
{
	size_t n = rows.individual_codes.rows, n_segments = segment_of_code.size();
	std::vector<RocCounts> out(n_segments);
	if (n == 0)
		return out;
	bool keys_are_doubles = rows.keys_are_doubles;

	/* every row stays on the device; parts are ranges of segments that fit beside them */
	size_t resident = n * (sizeof(int32_t) + sizeof(long long) + sizeof(uint8_t)) + n_segments * sizeof(int32_t);
	size_t usable = usable_gpu_bytes(ctx);
	if (resident >= usable)
		throw Failure(Failure::Kind::OutOfMemory, "the " + std::to_string(n) + " rows do not fit in GPU memory");
	size_t part_examples = (usable - resident) / kKeyBytesPerExample;

	Stream stream;
	/* the rows, and the key range's room, in one allocation (DeviceArena) */
	DeviceArena arena;
	arena.reserve<int32_t>(n);
	arena.reserve<int32_t>(n_segments);
	arena.reserve<int64_t>(n);
	arena.reserve<uint8_t>(n);
	arena.reserve<unsigned long long>(3);
	arena.allocate(ctx);
	int32_t *codes = arena.take<int32_t>(n), *device_segment_of_code = arena.take<int32_t>(n_segments);
	int64_t *keys = arena.take<int64_t>(n);
	uint8_t *labels = arena.take<uint8_t>(n);
	unsigned long long *device_range = arena.take<unsigned long long>(3);
	{
		EventTimer transfer(stream);
		upload_staged(codes, rows.individual_codes, 0, n, stream, ctx);
		upload_staged(keys, rows.score_keys, 0, n, stream, ctx);
		upload_staged(labels, rows.labels, 0, n, stream, ctx);
		upload(segment_of_code, device_segment_of_code, stream);
		ctx.times.transfer_ms += transfer.stop_ms();
	}
	ctx.interrupt_point(Phase::Transfer);

	const int64_t *rows_of_code = rows.rows_per_code;
	std::vector<int32_t> code_of_segment(n_segments);
	for (size_t code = 0; code < n_segments; ++code)
		code_of_segment[segment_of_code[code]] = static_cast<int32_t>(code);
	for (size_t first = 0; first < n_segments;)
	{
		/* at least one segment per part; a part that does not fit fails to allocate */
		size_t end = first, examples = 0;
		do
			examples += rows_of_code[code_of_segment[end++]];
		while (end < n_segments && examples + rows_of_code[code_of_segment[end]] <= part_examples);
		RowExamples part{codes, keys, labels, device_segment_of_code, static_cast<int32_t>(first),
						 static_cast<int32_t>(end)};
		count_part(part, n, examples, keys_are_doubles, static_cast<uint32_t>(end - first), out.data() + first,
				   device_range, stream, ctx);
		first = end;
	}
	return out;
}

namespace {

/* roc_counts_arrays for elements of type Value, as the column holds them. */
template <typename Value>
std::vector<RocCounts> counts_of_arrays(const ChunkedView<Value> &values, const RocScoreArrays &scores,
										const std::vector<int8_t> &labels, const std::vector<int32_t> &segment_of_row,
										CallContext &ctx)
{
	size_t n_rows = scores.rows, length = labels.size();
	std::vector<RocCounts> out(n_rows);
	if (n_rows == 0 || length == 0)
		return out;

	/* parts are ranges of rows, each with its scores on the device */
	bool nulls = scores.valid.rows != 0;
	size_t bytes_per_row = length * (sizeof(Value) + (nulls ? sizeof(uint8_t) : 0) + kKeyBytesPerExample);
	size_t usable = usable_gpu_bytes(ctx);
	size_t part_rows = std::max<size_t>(1, std::min(n_rows, usable / bytes_per_row));

	Stream stream;
	/* labels, a part's scores and their validity (where any is NULL), the key range's room: one allocation */
	DeviceArena arena;
	arena.reserve<int8_t>(length);
	arena.reserve<Value>(part_rows * length);
	if (nulls)
		arena.reserve<uint8_t>(part_rows * length);
	arena.reserve<unsigned long long>(3);
	arena.allocate(ctx);
	int8_t *device_labels = arena.take<int8_t>(length);
	Value *device_values = arena.take<Value>(part_rows * length);
	uint8_t *valid = nulls ? arena.take<uint8_t>(part_rows * length) : nullptr;
	unsigned long long *device_range = arena.take<unsigned long long>(3);
	std::vector<RocCounts> part_counts(part_rows);
	std::vector<HostPiece> pieces;
	for (size_t first = 0; first < n_rows; first += part_rows)
	{
		size_t rows = std::min(part_rows, n_rows - first);
		/* rows [first, first + rows) of a column, each where the column holds it, one after the other on the device */
		auto upload_rows = [&](auto *device, const auto &column) {
			pieces.clear();
			for (size_t r = first; r < first + rows; ++r)
				add_pieces(pieces, column, static_cast<size_t>(scores.row_begins[r]),
						   static_cast<size_t>(scores.row_begins[r]) + length);
			upload_staged(device, pieces.data(), pieces.size(), stream, ctx);
		};
		{
			EventTimer transfer(stream);
			if (first == 0)
				upload(labels, device_labels, stream);
			upload_rows(device_values, values);
			if (nulls)
				upload_rows(valid, scores.valid);
			ctx.times.transfer_ms += transfer.stop_ms();
		}
		ctx.interrupt_point(Phase::Transfer);
		ArrayExamples<Value> part{device_values, valid, device_labels, static_cast<long long>(length),
								  rows * length <= UINT32_MAX};
		count_part(part, rows * length, rows * length, true, static_cast<uint32_t>(rows), part_counts.data(),
				   device_range, stream, ctx);
		for (size_t r = 0; r < rows; ++r)
			out[segment_of_row[first + r]] = part_counts[r];
	}
	return out;
}

} // namespace

std::vector<RocCounts> roc_counts_arrays(const RocScoreArrays &scores, const std::vector<int8_t> &labels,
										 const std::vector<int32_t> &segment_of_row, CallContext &ctx)
{
	if (scores.doubles)
		return counts_of_arrays(scores.double_values, scores, labels, segment_of_row, ctx);
	return counts_of_arrays(scores.floats, scores, labels, segment_of_row, ctx);
}

} // namespace gpurec::gpu
