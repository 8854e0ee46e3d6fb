/*
 * roc_fitness.cpp: ROC fitness on the CPU, the checks both devices share,
 * and the GPU/CPU dispatch.
 *
 * Individuals are numbered 0..n-1 in ascending individual_id ("segments");
 * both paths return one RocCounts per segment, and the AUC is derived from
 * those integers here, once, so that the two devices agree bit for bit.
 */
#include "roc_fitness.hpp"

#include <algorithm>
#include <atomic>
#include <climits>
#include <numeric>
#include <string>
#include <thread>

#include "../kernels/roc_fitness_kernels.hpp"

namespace gpurec {

namespace {

/* Examples in a call before the GPU's transfer pays for itself. */
constexpr double kMinGpuExamples = 2e6;

/*
 * The most examples one individual may have: the GPU folds tie groups with
 * sums of rank x count, which must stay within 64 bits.
 */
constexpr int64_t kMaxExamplesPerIndividual = INT32_MAX;

void check_examples_per_individual(int64_t id, int64_t examples)
{
	if (examples > kMaxExamplesPerIndividual)
		throw Error(sqlstate::program_limit_exceeded,
					"individual " + std::to_string(id) + " has " + std::to_string(examples) +
						" examples, more than roc_fitness can count",
					"At most " + std::to_string(kMaxExamplesPerIndividual) +
						" examples per individual are supported.");
}

/* The CPU path's input: every segment's examples, contiguous. */
struct Segments
{
	std::vector<int64_t> offsets; /* segment s: examples offsets[s] .. offsets[s+1] */
	BulkVector<int64_t> keys;	  /* score order keys (columns.hpp): NaN highest */
	BulkVector<uint8_t> labels;	  /* 1 positive, 0 negative */
};

Segments group_rows(const IdColumn &individual, const LabelColumn &label, const NumberColumn &score,
					const std::vector<int32_t> &code_of_segment)
{
	Segments out;
	std::vector<int64_t> next(individual.distinct());
	out.offsets.push_back(0);
	for (int32_t code : code_of_segment)
	{
		next[code] = out.offsets.back();
		out.offsets.push_back(out.offsets.back() + individual.counts()[code]);
	}
	size_t n = individual.size();
	out.keys.resize(n);
	out.labels.resize(n);
	for (size_t row = 0; row < n; ++row)
	{
		int64_t at = next[individual.code(row)]++;
		out.keys[at] = score.key(row);
		out.labels[at] = label[row];
	}
	return out;
}

Segments group_arrays(const FloatArrayColumn &scores, const std::vector<int8_t> &labels,
					  const std::vector<size_t> &row_of_segment)
{
	Segments out;
	out.offsets.push_back(0);
	out.keys.reserve(scores.values().size());
	out.labels.reserve(scores.values().size());
	for (size_t row : row_of_segment)
	{
		int64_t begin = scores.row_begin(row), end = scores.row_end(row);
		for (int64_t e = begin; e < end; ++e)
		{
			int8_t l = labels[e - begin];
			if (l < 0 || !scores.valid()[e])
				continue;
			out.keys.push_back(order_key_from_double(scores.values()[e]));
			out.labels.push_back(static_cast<uint8_t>(l));
		}
		out.offsets.push_back(static_cast<int64_t>(out.keys.size()));
	}
	return out;
}

/*
 * Sorts an individual's examples by score, highest first: an LSD radix sort
 * on the order keys, skipping the byte positions where every key agrees
 * (scores of a few distinct magnitudes share their high bytes).  Several
 * times faster than a comparison sort on 100,000 examples.
 */
void sort_descending(BulkVector<uint64_t> &keys, BulkVector<uint8_t> &labels,
					 BulkVector<uint64_t> &keys_tmp, BulkVector<uint8_t> &labels_tmp)
{
	size_t n = keys.size();
	keys_tmp.resize(n);
	labels_tmp.resize(n);
	for (int shift = 0; shift < 64; shift += 8)
	{
		size_t count[256] = {0};
		for (uint64_t k : keys)
			++count[(k >> shift) & 0xFF];
		if (count[(keys.empty() ? 0 : keys[0] >> shift) & 0xFF] == n)
			continue; /* every key has this byte */
		size_t at = 0;
		for (size_t &c : count)
		{
			size_t here = c;
			c = at;
			at += here;
		}
		for (size_t i = 0; i < n; ++i)
		{
			size_t to = count[(keys[i] >> shift) & 0xFF]++;
			keys_tmp[to] = keys[i];
			labels_tmp[to] = labels[i];
		}
		keys.swap(keys_tmp);
		labels.swap(labels_tmp);
	}
}

/* The counts of segments [first, last): what one CPU thread does. */
void count_range(const Segments &segments, size_t first, size_t last, std::vector<RocCounts> &out,
				 const std::atomic<bool> &cancelled)
{
	BulkVector<uint64_t> keys, keys_tmp;
	BulkVector<uint8_t> labels, labels_tmp;
	BulkVector<int64_t> sorted_keys;
	for (size_t s = first; s < last && !cancelled.load(std::memory_order_relaxed); ++s)
	{
		int64_t begin = segments.offsets[s], n = segments.offsets[s + 1] - begin;
		keys.resize(n);
		labels.assign(segments.labels.begin() + begin, segments.labels.begin() + begin + n);
		/* ascending order of ~(key with its sign flipped) is descending order of key */
		for (int64_t i = 0; i < n; ++i)
			keys[i] = ~(static_cast<uint64_t>(segments.keys[begin + i]) ^ (uint64_t(1) << 63));
		sort_descending(keys, labels, keys_tmp, labels_tmp);
		sorted_keys.resize(n);
		for (int64_t i = 0; i < n; ++i)
			sorted_keys[i] = static_cast<int64_t>(~keys[i] ^ (uint64_t(1) << 63));
		out[s] = roc_counts_of_sorted(sorted_keys.data(), labels.data(), n);
	}
}

/*
 * Two threads share the segments (the machine has two cores); the backend's
 * own thread keeps checking for interrupts, and no thread but it calls
 * PostgreSQL.
 */
std::vector<RocCounts> counts_on_cpu(const Segments &segments, ExecContext &ctx)
{
	size_t n_segments = segments.offsets.size() - 1;
	std::vector<RocCounts> out(n_segments);
	/* split the segments where half the examples lie */
	int64_t half = segments.offsets.back() / 2;
	size_t split = static_cast<size_t>(
		std::upper_bound(segments.offsets.begin(), segments.offsets.end() - 1, half) -
		segments.offsets.begin());
	split = std::min(split, n_segments);
	std::atomic<bool> cancelled{false}, helper_done{false};
	std::thread helper([&] {
		count_range(segments, split, n_segments, out, cancelled);
		helper_done = true;
	});
	try
	{
		for (size_t s = 0; s < split; ++s)
		{
			count_range(segments, s, s + 1, out, cancelled);
			ctx.check_interrupts();
		}
		while (!helper_done)
		{
			ctx.check_interrupts();
			std::this_thread::sleep_for(std::chrono::milliseconds(2));
		}
	}
	catch (...)
	{
		cancelled = true;
		helper.join();
		throw;
	}
	helper.join();
	return out;
}

/* The CPU path: grouping the examples by individual counts as compute. */
template <typename Group> std::vector<RocCounts> cpu_path(ExecContext &ctx, Group group)
{
	Stopwatch clock;
	Segments segments = group();
	ctx.check_interrupts();
	std::vector<RocCounts> counts = counts_on_cpu(segments, ctx);
	ctx.times.compute_ms += clock.elapsed_ms();
	return counts;
}

std::vector<RocResult> results_of(const std::vector<int64_t> &ids_of_segments,
								  const std::vector<RocCounts> &counts)
{
	std::vector<RocResult> out(counts.size());
	for (size_t s = 0; s < counts.size(); ++s)
	{
		const RocCounts &c = counts[s];
		RocResult &r = out[s];
		r.individual_id = ids_of_segments[s];
		r.counts = c;
		r.has_auc = c.n_positive > 0 && c.n_negative > 0;
		r.auc = r.fitness = 0;
		if (r.has_auc)
		{
			/* from exact integers, so both devices give the same bits */
			double pairs = static_cast<double>(c.n_positive) * static_cast<double>(c.n_negative);
			__int128 excess = static_cast<__int128>(c.twice_wins) -
							  static_cast<__int128>(c.n_positive) * c.n_negative;
			r.auc = static_cast<double>(c.twice_wins) / (2.0 * pairs);
			r.fitness = static_cast<double>(excess) / (2.0 * pairs);
		}
	}
	return out;
}

} // namespace

RocCounts roc_counts_of_sorted(const int64_t *keys, const uint8_t *labels, int64_t n)
{
	RocCounts c;
	for (int64_t i = 0; i < n; ++i)
		(labels[i] ? c.n_positive : c.n_negative)++;
	/* tie groups, highest score first: rank = 1 + examples above */
	int64_t negatives_above = 0;
	for (int64_t start = 0; start < n;)
	{
		int64_t end = start, pos = 0, neg = 0;
		for (; end < n && keys[end] == keys[start]; ++end)
			(labels[end] ? pos : neg)++;
		if (pos > 0)
		{
			int64_t lower = c.n_negative - negatives_above - neg;
			c.twice_wins += static_cast<uint64_t>(pos) * static_cast<uint64_t>(2 * lower + neg);
			if (c.lowest_positive_rank == 0)
				c.lowest_positive_rank = start + 1;
			c.highest_positive_rank = start + 1;
		}
		negatives_above += neg;
		start = end;
	}
	return c;
}

std::vector<RocResult> roc_fitness_long(const IdColumn &individual, const LabelColumn &label,
										const NumberColumn &score, ExecContext &ctx)
{
	std::vector<int32_t> code_of_segment = individual.codes_in_id_order();
	std::vector<int32_t> segment_of_code(code_of_segment.size());
	std::vector<int64_t> ids_of_segments(code_of_segment.size());
	for (size_t s = 0; s < code_of_segment.size(); ++s)
	{
		int32_t code = code_of_segment[s];
		segment_of_code[code] = static_cast<int32_t>(s);
		ids_of_segments[s] = individual.value_of(code);
		check_examples_per_individual(ids_of_segments[s], individual.counts()[code]);
	}
	std::vector<RocCounts> counts = dispatch(
		ctx, "roc_fitness", static_cast<double>(individual.size()), kMinGpuExamples,
		[&] { return gpu::roc_counts_long(individual, label, score, segment_of_code, ctx); },
		[&] {
			return cpu_path(ctx, [&] { return group_rows(individual, label, score, code_of_segment); });
		});
	return results_of(ids_of_segments, counts);
}

std::vector<RocResult> roc_fitness_arrays(const Int64Column &individual_ids,
										  const FloatArrayColumn &scores,
										  const std::vector<int8_t> &labels, ExecContext &ctx)
{
	size_t n_rows = individual_ids.size();
	std::vector<size_t> row_of_segment(n_rows);
	std::iota(row_of_segment.begin(), row_of_segment.end(), size_t(0));
	std::sort(row_of_segment.begin(), row_of_segment.end(),
			  [&](size_t a, size_t b) { return individual_ids[a] < individual_ids[b]; });
	std::vector<int32_t> segment_of_row(n_rows);
	std::vector<int64_t> ids_of_segments(n_rows);
	for (size_t s = 0; s < n_rows; ++s)
	{
		size_t row = row_of_segment[s];
		int64_t id = individual_ids[row];
		if (s > 0 && ids_of_segments[s - 1] == id)
			throw Error(sqlstate::invalid_parameter_value,
						"individual " + std::to_string(id) + " appears more than once",
						"The population query must return one row per individual.");
		int64_t length = scores.row_end(row) - scores.row_begin(row);
		if (length != static_cast<int64_t>(labels.size()))
			throw Error(sqlstate::invalid_parameter_value,
						"the scores of individual " + std::to_string(id) + " have " +
							std::to_string(length) + " elements, the labels " +
							std::to_string(labels.size()),
						"Every scores array must be as long as labels.");
		check_examples_per_individual(id, length);
		ids_of_segments[s] = id;
		segment_of_row[row] = static_cast<int32_t>(s);
	}
	std::vector<RocCounts> counts = dispatch(
		ctx, "roc_fitness", static_cast<double>(scores.values().size()), kMinGpuExamples,
		[&] { return gpu::roc_counts_arrays(scores, labels, segment_of_row, ctx); },
		[&] { return cpu_path(ctx, [&] { return group_arrays(scores, labels, row_of_segment); }); });
	return results_of(ids_of_segments, counts);
}

} // namespace gpurec
