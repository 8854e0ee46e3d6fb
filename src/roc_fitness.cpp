/*
 * roc_fitness.cpp: ROC fitness on the CPU, and the GPU/CPU dispatch.
 */
#include "roc_fitness.hpp"

#include <algorithm>
#include <functional>
#include <numeric>
#include <string>

#include "../kernels/roc_fitness_kernels.hpp"

namespace gpurec {

namespace {

/* Examples in a call before the GPU's transfer pays for itself. */
constexpr double kMinGpuExamples = 2e6;

/* Examples the CPU sorts between interrupt checks. */
constexpr int64_t kCheckEvery = int64_t(1) << 18;

} // namespace

RocSegments roc_segments_from_rows(const IdColumn &individual, const LabelColumn &label,
								   const NumberColumn &score)
{
	RocSegments out;
	std::vector<int32_t> order = individual.codes_in_id_order();
	std::vector<int64_t> start(individual.distinct());
	out.offsets.push_back(0);
	for (int32_t code : order)
	{
		out.individual_ids.push_back(individual.value_of(code));
		start[code] = out.offsets.back();
		out.offsets.push_back(out.offsets.back() + individual.counts()[code]);
	}
	size_t n = individual.size();
	out.keys.resize(n);
	out.labels.resize(n);
	for (size_t row = 0; row < n; ++row)
	{
		int64_t at = start[individual.code(row)]++;
		out.keys[at] = score.key(row);
		out.labels[at] = label[row];
	}
	return out;
}

RocSegments roc_segments_from_arrays(const Int64Column &individual_ids,
									 const FloatArrayColumn &scores,
									 const std::vector<int8_t> &labels)
{
	size_t n_rows = individual_ids.size();
	std::vector<size_t> order(n_rows);
	std::iota(order.begin(), order.end(), size_t(0));
	std::sort(order.begin(), order.end(),
			  [&](size_t a, size_t b) { return individual_ids[a] < individual_ids[b]; });
	RocSegments out;
	out.offsets.push_back(0);
	for (size_t i = 0; i < n_rows; ++i)
	{
		size_t row = order[i];
		int64_t id = individual_ids[row];
		if (i > 0 && individual_ids[order[i - 1]] == id)
			throw Error(sqlstate::invalid_parameter_value,
						"individual " + std::to_string(id) + " appears more than once",
						"The population query must return one row per individual.");
		int64_t begin = scores.row_begin(row), end = scores.row_end(row);
		if (end - begin != static_cast<int64_t>(labels.size()))
			throw Error(sqlstate::invalid_parameter_value,
						"the scores of individual " + std::to_string(id) + " have " +
							std::to_string(end - begin) + " elements, the labels " +
							std::to_string(labels.size()),
						"Every scores array must be as long as labels.");
		for (int64_t e = begin; e < end; ++e)
		{
			int8_t l = labels[e - begin];
			if (l < 0 || !scores.valid()[e])
				continue;
			out.keys.push_back(order_key_from_double(scores.values()[e]));
			out.labels.push_back(static_cast<uint8_t>(l));
		}
		out.individual_ids.push_back(id);
		out.offsets.push_back(static_cast<int64_t>(out.keys.size()));
	}
	return out;
}

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

namespace {

std::vector<RocCounts> counts_on_cpu(const RocSegments &segments, ExecContext &ctx)
{
	Stopwatch clock;
	size_t n_individuals = segments.individual_ids.size();
	std::vector<RocCounts> out(n_individuals);
	std::vector<std::pair<int64_t, uint8_t>> examples;
	std::vector<int64_t> keys;
	std::vector<uint8_t> labels;
	int64_t since_check = 0;
	for (size_t s = 0; s < n_individuals; ++s)
	{
		int64_t begin = segments.offsets[s], n = segments.offsets[s + 1] - begin;
		examples.resize(n);
		for (int64_t i = 0; i < n; ++i)
			examples[i] = {segments.keys[begin + i], segments.labels[begin + i]};
		std::sort(examples.begin(), examples.end(), std::greater<>());
		keys.resize(n);
		labels.resize(n);
		for (int64_t i = 0; i < n; ++i)
			std::tie(keys[i], labels[i]) = examples[i];
		out[s] = roc_counts_of_sorted(keys.data(), labels.data(), n);
		if ((since_check += n) >= kCheckEvery)
		{
			since_check = 0;
			ctx.check_interrupts();
		}
	}
	ctx.times.compute_ms += clock.elapsed_ms();
	return out;
}

} // namespace

std::vector<RocResult> roc_fitness(const RocSegments &segments, ExecContext &ctx)
{
	std::vector<RocCounts> counts = dispatch(
		ctx, "roc_fitness", static_cast<double>(segments.keys.size()), kMinGpuExamples,
		[&] { return gpu::roc_counts(segments, ctx); },
		[&] { return counts_on_cpu(segments, ctx); });
	std::vector<RocResult> out(counts.size());
	for (size_t s = 0; s < counts.size(); ++s)
	{
		const RocCounts &c = counts[s];
		RocResult &r = out[s];
		r.individual_id = segments.individual_ids[s];
		r.counts = c;
		r.has_auc = c.n_positive > 0 && c.n_negative > 0;
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

} // namespace gpurec
