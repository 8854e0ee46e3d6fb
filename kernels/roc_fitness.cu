/*
 * roc_fitness.cu: exact ROC counts of a whole population on the GPU.
 *
 *  1. one segmented sort puts every individual's examples in descending
 *     score order (cub::DeviceSegmentedSort);
 *  2. a reduction by (individual, score) counts positives and negatives per
 *     tie group, and remembers where each group starts (its rank);
 *  3. an exclusive scan by individual gives the negatives above each group;
 *  4. one thread per group adds pos x (2 x negatives below + negatives tied)
 *     to its individual's integer sum, and its rank to the min/max.
 * The host turns the integers into AUC, as the CPU path does.
 */
#include <cub/device/device_segmented_sort.cuh>
#include <thrust/binary_search.h>
#include <thrust/device_ptr.h>
#include <thrust/execution_policy.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/zip_iterator.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/tuple.h>

#include <climits>
#include <new>

#include "cuda_util.cuh"
#include "roc_fitness_kernels.hpp"

namespace gpurec::gpu {

namespace {

/* Counts of a tie group: positives, negatives, first position. */
using GroupCounts = thrust::tuple<long long, long long, long long>;

struct AddCounts
{
	__host__ __device__ GroupCounts operator()(const GroupCounts &a, const GroupCounts &b) const
	{
		return GroupCounts(thrust::get<0>(a) + thrust::get<0>(b), thrust::get<1>(a) + thrust::get<1>(b),
						   thrust::get<2>(a) < thrust::get<2>(b) ? thrust::get<2>(a) : thrust::get<2>(b));
	}
};

struct ExampleCounts
{
	const uint8_t *labels;
	__host__ __device__ GroupCounts operator()(long long i) const
	{
		return GroupCounts(labels[i] ? 1 : 0, labels[i] ? 0 : 1, i);
	}
};

__global__ void fold_groups(size_t n_groups, const int *group_segment, const long long *group_start,
							const long long *group_pos, const long long *group_neg,
							const long long *negatives_above, const long long *segment_offsets,
							const long long *segment_negatives, unsigned long long *twice_wins,
							long long *lowest_rank, long long *highest_rank)
{
	for (size_t g = blockIdx.x * size_t(blockDim.x) + threadIdx.x; g < n_groups;
		 g += size_t(gridDim.x) * blockDim.x)
	{
		long long pos = group_pos[g];
		if (pos == 0)
			continue;
		int s = group_segment[g];
		long long neg = group_neg[g];
		long long lower = segment_negatives[s] - negatives_above[g] - neg;
		atomicAdd(&twice_wins[s], static_cast<unsigned long long>(pos) *
									  static_cast<unsigned long long>(2 * lower + neg));
		long long rank = group_start[g] - segment_offsets[s] + 1;
		atomicMin(&lowest_rank[s], rank);
		atomicMax(&highest_rank[s], rank);
	}
}

template <typename T> T *raw(DeviceBuffer<T> &b) { return b.get(); }
template <typename T> thrust::device_ptr<T> dev(DeviceBuffer<T> &b) { return thrust::device_pointer_cast(b.get()); }

} // namespace

std::vector<RocCounts> roc_counts(const RocSegments &segments, ExecContext &ctx)
{
	size_t n = segments.keys.size(), n_segments = segments.individual_ids.size();
	std::vector<RocCounts> out(n_segments);
	std::vector<long long> negatives(n_segments);
	for (size_t s = 0; s < n_segments; ++s)
	{
		for (int64_t i = segments.offsets[s]; i < segments.offsets[s + 1]; ++i)
			(segments.labels[i] ? out[s].n_positive : out[s].n_negative)++;
		negatives[s] = out[s].n_negative;
	}
	if (n == 0)
		return out;

	Stream stream;
	auto policy = thrust::cuda::par.on(stream);
	try
	{
		DeviceBuffer<long long> keys(n, ctx), sorted_keys(n, ctx), offsets(n_segments + 1, ctx),
			segment_negatives(n_segments, ctx);
		DeviceBuffer<uint8_t> labels(n, ctx), sorted_labels(n, ctx);
		{
			EventTimer transfer(stream);
			check(cudaMemcpyAsync(raw(keys), segments.keys.data(), n * sizeof(long long), cudaMemcpyHostToDevice,
								  stream),
				  "cudaMemcpyAsync");
			check(cudaMemcpyAsync(raw(labels), segments.labels.data(), n, cudaMemcpyHostToDevice, stream),
				  "cudaMemcpyAsync");
			check(cudaMemcpyAsync(raw(offsets), segments.offsets.data(), (n_segments + 1) * sizeof(long long),
								  cudaMemcpyHostToDevice, stream),
				  "cudaMemcpyAsync");
			check(cudaMemcpyAsync(raw(segment_negatives), negatives.data(), n_segments * sizeof(long long),
								  cudaMemcpyHostToDevice, stream),
				  "cudaMemcpyAsync");
			ctx.times.transfer_ms += transfer.stop_ms();
		}
		ctx.check_interrupts();

		EventTimer compute(stream);
		/* 1. every individual's examples, highest score first */
		size_t temp_bytes = 0;
		check(cub::DeviceSegmentedSort::SortPairsDescending(nullptr, temp_bytes, raw(keys), raw(sorted_keys),
															  raw(labels), raw(sorted_labels), (long long) n,
															  (long long) n_segments, raw(offsets),
															  raw(offsets) + 1, stream),
			  "DeviceSegmentedSort");
		DeviceBuffer<char> temp(temp_bytes, ctx);
		check(cub::DeviceSegmentedSort::SortPairsDescending(raw(temp), temp_bytes, raw(keys), raw(sorted_keys),
															  raw(labels), raw(sorted_labels), (long long) n,
															  (long long) n_segments, raw(offsets),
															  raw(offsets) + 1, stream),
			  "DeviceSegmentedSort");

		/* the individual of every example */
		DeviceBuffer<int> segment_of(n, ctx);
		thrust::upper_bound(policy, dev(offsets) + 1, dev(offsets) + n_segments + 1,
							thrust::counting_iterator<long long>(0), thrust::counting_iterator<long long>(n),
							dev(segment_of));

		/* 2. tie groups: (individual, score) -> (positives, negatives, first position) */
		DeviceBuffer<int> group_segment(n, ctx);
		DeviceBuffer<long long> group_key(n, ctx), group_pos(n, ctx), group_neg(n, ctx), group_start(n, ctx);
		auto group_keys_in = thrust::make_zip_iterator(thrust::make_tuple(dev(segment_of), dev(sorted_keys)));
		auto group_keys_out = thrust::make_zip_iterator(thrust::make_tuple(dev(group_segment), dev(group_key)));
		auto counts_in = thrust::make_transform_iterator(thrust::counting_iterator<long long>(0),
														  ExampleCounts{raw(sorted_labels)});
		auto counts_out =
			thrust::make_zip_iterator(thrust::make_tuple(dev(group_pos), dev(group_neg), dev(group_start)));
		auto ends = thrust::reduce_by_key(policy, group_keys_in, group_keys_in + n, counts_in, group_keys_out,
										  counts_out, thrust::equal_to<thrust::tuple<int, long long>>(),
										  AddCounts());
		size_t n_groups = ends.first - group_keys_out;

		/* 3. negatives above each group, within its individual */
		DeviceBuffer<long long> negatives_above(n_groups, ctx);
		thrust::exclusive_scan_by_key(policy, dev(group_segment), dev(group_segment) + n_groups, dev(group_neg),
									  dev(negatives_above));

		/* 4. fold the groups into each individual's counts */
		DeviceBuffer<unsigned long long> twice_wins(n_segments, ctx);
		DeviceBuffer<long long> lowest(n_segments, ctx), highest(n_segments, ctx);
		check(cudaMemsetAsync(raw(twice_wins), 0, n_segments * sizeof(unsigned long long), stream),
			  "cudaMemsetAsync");
		thrust::fill(policy, dev(lowest), dev(lowest) + n_segments, LLONG_MAX);
		thrust::fill(policy, dev(highest), dev(highest) + n_segments, 0LL);
		fold_groups<<<grid_for(n_groups), 256, 0, stream>>>(n_groups, raw(group_segment), raw(group_start),
															 raw(group_pos), raw(group_neg), raw(negatives_above),
															 raw(offsets), raw(segment_negatives), raw(twice_wins),
															 raw(lowest), raw(highest));
		check_launch("fold_groups");
		ctx.times.compute_ms += compute.stop_ms();

		EventTimer transfer(stream);
		std::vector<unsigned long long> wins(n_segments);
		std::vector<long long> low(n_segments), high(n_segments);
		check(cudaMemcpyAsync(wins.data(), raw(twice_wins), n_segments * sizeof(unsigned long long),
							  cudaMemcpyDeviceToHost, stream),
			  "cudaMemcpyAsync");
		check(cudaMemcpyAsync(low.data(), raw(lowest), n_segments * sizeof(long long), cudaMemcpyDeviceToHost,
							  stream),
			  "cudaMemcpyAsync");
		check(cudaMemcpyAsync(high.data(), raw(highest), n_segments * sizeof(long long), cudaMemcpyDeviceToHost,
							  stream),
			  "cudaMemcpyAsync");
		ctx.times.transfer_ms += transfer.stop_ms();
		for (size_t s = 0; s < n_segments; ++s)
		{
			out[s].twice_wins = wins[s];
			if (out[s].n_positive > 0)
			{
				out[s].lowest_positive_rank = low[s];
				out[s].highest_positive_rank = high[s];
			}
		}
	}
	catch (const std::bad_alloc &)
	{
		/* thrust's own allocations */
		throw GpuOutOfMemory("GPU out of memory in roc_fitness");
	}
	catch (const thrust::system_error &e)
	{
		throw Error(sqlstate::internal_error, std::string("CUDA error in roc_fitness: ") + e.what());
	}
	return out;
}

} // namespace gpurec::gpu
