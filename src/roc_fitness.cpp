/*
 * roc_fitness.cpp: ROC fitness on the CPU, the checks both devices share,
 * and the GPU/CPU dispatch.
 *
 * Individuals are numbered 0..n-1 in ascending individual_id ("segments");
 * both paths return one RocCounts per segment, and the AUC is derived from
 * those integers here, once (auc_of), so that the two devices agree bit for
 * bit.  roc_counts_on_cpu counts other callers' segments (fit_exponent's
 * strengths) the same way on the CPU.
 *
 * On the CPU: every example becomes one packed key, (score, label) in 32,
 * 64 or 128 bits as the call's scores need (kernels/api/roc_keys.hpp): the long
 * format's all at once, grouped by segment, an array row's only when its
 * turn comes (its examples lie together).  Each segment is then
 * radix-sorted on the bytes where its keys differ and walked once, tie
 * group by tie group.  The segments are shared among all cores
 * (cpu_parallel.hpp).
 */
#include "no_postgres.hpp"

#include "roc_fitness.hpp"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>

#include "../kernels/api/roc_kernels.hpp"
#include "../kernels/api/roc_keys.hpp"
#include "column_chunks.hpp"
#include "cpu_parallel.hpp"
#include "gpu_service.hpp"
#include "key_dictionary.hpp"

namespace gpurec {

using roc_keys::KeyLayout;
using roc_keys::ScoreRange;

namespace {

/*
 * The most examples one individual may have: both paths sum rank x count
 * over an individual's positives in 64 bits, and the GPU holds positions
 * within an individual in 32.
 */
constexpr int64_t kMaxExamplesPerIndividual = INT32_MAX;

/* Below this many examples a comparison sort beats the radix sort's fixed costs. */
constexpr int64_t kSmallSort = 256;

/*
 * Examples per CPU work item: small segments go together, so that handing
 * out an item costs little beside sorting its examples (a millisecond or
 * so); a larger segment is an item of its own.
 */
constexpr double kExamplesPerItem = 1 << 16;

/* ---- the examples, packed --------------------------------------------- */

template <typename Key> Key pack(const KeyLayout &layout, uint64_t key, uint8_t label)
{
	return (static_cast<Key>(layout.score_of(key)) << 1) | label;
}

/* Calls body(Key()) with the narrowest unsigned type that holds a packed key. */
template <typename Body> auto with_key_type(const KeyLayout &layout, Body body)
{
	if (layout.packed_bits() <= 32)
		return body(uint32_t());
	if (layout.packed_bits() <= 64)
		return body(uint64_t());
	return body(static_cast<unsigned __int128>(0));
}

bool keys_are_doubles(const NumberColumn &score)
{
	return score.type() == NumberType::Float4 || score.type() == NumberType::Float8;
}

/*
 * The long format's examples as the devices take them: each row's
 * individual code, label and score key, and per code its rows.  From the
 * read columns in a backend, from the wire in the GPU service.
 */
struct RocExamples
{
	const ChunkedColumn<int32_t> &codes;
	const std::vector<int64_t> &rows_per_code;
	const ChunkedColumn<uint8_t> &labels;
	const ChunkedColumn<int64_t> &keys; /* signed order keys (roc_keys.hpp) */
	bool keys_are_doubles;
};

ScoreRange range_of_rows(const RocExamples &examples)
{
	ScoreRange range;
	bool doubles = examples.keys_are_doubles;
	const ChunkedColumn<int64_t> &keys = examples.keys;
	for (size_t c = 0; c < keys.chunk_count(); ++c)
	{
		const int64_t *chunk = keys.chunk_data(c);
		for (size_t i = 0, n = keys.chunk_rows(c); i < n; ++i)
			range.add(roc_keys::unsigned_key_of_order_key(chunk[i]), doubles);
	}
	return range;
}

/*
 * The long format's examples: an individual's rows lie anywhere, so every
 * example is packed up front, grouped by segment; each segment is then
 * sorted where it lies.
 */
template <typename KeyType> struct GroupedRows
{
	using Key = KeyType;
	std::vector<int64_t> offsets; /* segment s: keys[offsets[s] .. offsets[s+1]) */
	BulkVector<Key> keys;		  /* (score << 1) | label */

	size_t segments() const { return offsets.size() - 1; }
	int64_t examples_before(size_t s) const { return offsets[s]; }
	Key *keys_of(size_t s, BulkVector<Key> &, int64_t &n)
	{
		n = offsets[s + 1] - offsets[s];
		return keys.data() + offsets[s];
	}
};

template <typename Key>
GroupedRows<Key> group_rows(const RocExamples &examples, const std::vector<int32_t> &code_of_segment,
							const KeyLayout &layout)
{
	GroupedRows<Key> out;
	std::vector<int64_t> next(examples.rows_per_code.size());
	out.offsets.push_back(0);
	for (int32_t code : code_of_segment)
	{
		next[code] = out.offsets.back();
		out.offsets.push_back(out.offsets.back() + examples.rows_per_code[code]);
	}
	out.keys.resize(examples.codes.size());
	for (size_t row = 0, n = examples.codes.size(); row < n; ++row)
		out.keys[next[examples.codes[row]]++] =
			pack<Key>(layout, roc_keys::unsigned_key_of_order_key(examples.keys[row]), examples.labels[row]);
	return out;
}

/*
 * Calls visit(i, element) for elements [begin, begin + length) of the
 * array column whose label (labels[i]) and score are both there.  real[]
 * elements come as floats, double precision[] ones as doubles.
 */
template <typename Visit>
void for_each_array_example(const FloatArrayColumn &scores, const std::vector<int8_t> &labels, int64_t begin,
							int64_t length, Visit visit)
{
	auto walk = [&](const auto &values) {
		bool nulls = scores.has_nulls();
		for (int64_t i = 0; i < length; ++i)
			if (labels[i] >= 0 && (!nulls || scores.valid()[begin + i]))
				visit(i, values[begin + i]);
	};
	if (scores.doubles())
		walk(scores.double_values());
	else
		walk(scores.floats());
}

ScoreRange range_of_arrays(const FloatArrayColumn &scores, const std::vector<int8_t> &labels)
{
	ScoreRange range;
	int64_t length = static_cast<int64_t>(labels.size());
	if (scores.doubles())
	{
		for (size_t row = 0; row < scores.size(); ++row)
			for_each_array_example(scores, labels, scores.row_begin(row), length, [&](int64_t, double v) {
				range.add(roc_keys::unsigned_key_of_double(v), true);
			});
		return range;
	}
	/* floats: the lowest and highest by their own keys, the same order */
	uint32_t lowest = UINT32_MAX, highest = 0;
	float lowest_value = 0, highest_value = 0;
	for (size_t row = 0; row < scores.size(); ++row)
		for_each_array_example(scores, labels, scores.row_begin(row), length, [&](int64_t, float v) {
			uint32_t key = roc_keys::unsigned_key_of_float(v);
			if (key < lowest)
				lowest = key, lowest_value = v;
			if (key > highest)
				highest = key, highest_value = v;
		});
	if (lowest <= highest)
	{
		range.add(roc_keys::unsigned_key_of_double(lowest_value), true);
		range.add(roc_keys::unsigned_key_of_double(highest_value), true);
	}
	return range;
}

/*
 * The array format's examples: a row's lie together, so each is packed
 * only when its turn comes, into its thread's scratch; the call never holds
 * the keys of all rows at once.
 */
template <typename KeyType> struct PackedArrayRows
{
	using Key = KeyType;
	const FloatArrayColumn &scores;
	const std::vector<int8_t> &labels;
	const std::vector<size_t> &row_of_segment;
	KeyLayout layout;

	size_t segments() const { return row_of_segment.size(); }
	int64_t examples_before(size_t s) const { return static_cast<int64_t>(s * labels.size()); }
	Key *keys_of(size_t s, BulkVector<Key> &scratch, int64_t &n)
	{
		int64_t length = static_cast<int64_t>(labels.size());
		scratch.resize(std::max(scratch.size(), labels.size()));
		Key *out = scratch.data();
		n = 0;
		int64_t begin = scores.row_begin(row_of_segment[s]);
		if (!scores.doubles() && layout.to_float)
			/* a float's key directly: what score_of gives through the double */
			for_each_array_example(scores, labels, begin, length, [&](int64_t i, float v) {
				out[n++] = (static_cast<Key>(roc_keys::unsigned_key_of_float(v) - layout.score_min) << 1) |
						   static_cast<Key>(labels[i]);
			});
		else
			for_each_array_example(scores, labels, begin, length, [&](int64_t i, double v) {
				out[n++] = pack<Key>(layout, roc_keys::unsigned_key_of_double(v), static_cast<uint8_t>(labels[i]));
			});
		return out;
	}
};

/*
 * Segments a caller holds as doubles with their labels beside them
 * (roc_counts_on_cpu): each packed when its turn comes, as an array row is.
 */
template <typename KeyType> struct PackedSegments
{
	using Key = KeyType;
	const std::vector<ScoredSegment> &list;
	const std::vector<int64_t> &before; /* examples of the segments before s, s = 0 .. segments() */
	KeyLayout layout;

	size_t segments() const { return list.size(); }
	int64_t examples_before(size_t s) const { return before[s]; }
	Key *keys_of(size_t s, BulkVector<Key> &scratch, int64_t &n)
	{
		const ScoredSegment &segment = list[s];
		scratch.resize(std::max(scratch.size(), segment.size));
		Key *out = scratch.data();
		for (size_t i = 0; i < segment.size; ++i)
			out[i] = pack<Key>(layout, roc_keys::unsigned_key_of_double(segment.scores[i]),
							   segment.labels[i] != 0 ? 1 : 0);
		n = static_cast<int64_t>(segment.size);
		return out;
	}
};

ScoreRange range_of_segments(const std::vector<ScoredSegment> &segments)
{
	ScoreRange range;
	for (const ScoredSegment &segment : segments)
		for (size_t i = 0; i < segment.size; ++i)
			range.add(roc_keys::unsigned_key_of_double(segment.scores[i]), true);
	return range;
}

/* ---- one segment: sort, then walk the tie groups ------------------------ */

/*
 * The histograms of a radix sort: scratch of the thread that sorts, owned by
 * its SegmentCounter (a thread_local would cost a __tls_get_addr call at
 * every count in a shared library's code: a tenth of the sort's time).
 */
struct RadixCounts
{
	static constexpr int kMaxDigitBits = 11;
	static constexpr int kMaxPasses = 16; /* of 128-bit keys, in 8-bit digits */
	uint32_t digits[kMaxPasses][1 << kMaxDigitBits];
};

/*
 * Sorts keys[0 .. n) ascending by score: an LSD radix sort whose digits
 * span only the bits where the keys differ (the label bit aside: the label
 * order within a tie does not matter), every digit's histogram taken in one
 * read.  Digits are 11 bits for large segments (10^5 real scores: 3 passes
 * instead of 4 bytes) and 8 bits for small ones, whose histograms would cost
 * more to clear than to fill.  Returns where the sorted keys ended: keys or
 * tmp.  n < 2^32 (kMaxExamplesPerIndividual; roc_counts_on_cpu checks its own).
 */
template <typename Key> Key *sort_by_score(Key *keys, Key *tmp, int64_t n, RadixCounts &counts)
{
	if (n < kSmallSort)
	{
		std::sort(keys, keys + n);
		return keys;
	}
	constexpr int kKeyBits = 8 * sizeof(Key);
	constexpr int kMaxPasses = (kKeyBits + 7) / 8;
	static_assert(kMaxPasses <= RadixCounts::kMaxPasses);
	Key any = 0, all = ~Key(0);
	for (int64_t i = 0; i < n; ++i)
	{
		any |= keys[i];
		all &= keys[i];
	}
	Key differing = (any ^ all) & ~Key(1);
	if (differing == 0)
		return keys;
	int lowest = 0, highest = kKeyBits - 1;
	while (!((differing >> lowest) & 1))
		++lowest;
	while (!((differing >> highest) & 1))
		--highest;
	int digit_bits = n >= (int64_t(1) << 14) ? RadixCounts::kMaxDigitBits : 8;
	Key mask = (Key(1) << digit_bits) - 1;
	int shifts[kMaxPasses], passes = 0;
	for (int shift = lowest; shift <= highest; shift += digit_bits)
		if ((differing >> shift) & mask)
			shifts[passes++] = shift;
	auto &count = counts.digits;
	size_t digits = size_t(1) << digit_bits;
	for (int p = 0; p < passes; ++p)
		std::memset(count[p], 0, digits * sizeof(uint32_t));
	for (int64_t i = 0; i < n; ++i)
		for (int p = 0; p < passes; ++p)
			++count[p][static_cast<size_t>((keys[i] >> shifts[p]) & mask)];
	for (int p = 0; p < passes; ++p)
	{
		uint32_t at = 0;
		for (size_t d = 0; d < digits; ++d)
		{
			uint32_t here = count[p][d];
			count[p][d] = at;
			at += here;
		}
		for (int64_t i = 0; i < n; ++i)
			tmp[count[p][static_cast<size_t>((keys[i] >> shifts[p]) & mask)]++] = keys[i];
		std::swap(keys, tmp);
	}
	return keys;
}

/*
 * The counts of one segment sorted ascending by score.  With ascending
 * mid-ranks r (ties averaged), 2 x (Mann-Whitney U) = sum over positives of
 * 2r - P(P + 1), and 2r of a tie group is its first plus its last rank.
 */
template <typename Key> RocCounts counts_of_sorted(const Key *keys, int64_t n)
{
	RocCounts c;
	uint64_t twice_rank_sum = 0;
	for (int64_t first = 0; first < n;)
	{
		Key score = keys[first] >> 1;
		int64_t end = first, positives = 0;
		for (; end < n && (keys[end] >> 1) == score; ++end)
			positives += static_cast<int64_t>(keys[end] & 1);
		if (positives > 0)
		{
			twice_rank_sum += static_cast<uint64_t>(positives) * static_cast<uint64_t>(first + 1 + end);
			c.n_positive += positives;
			/* rank() OVER (ORDER BY score DESC) = examples above + 1; ascending, so the last is lowest */
			if (c.highest_positive_rank == 0)
				c.highest_positive_rank = n - end + 1;
			c.lowest_positive_rank = n - end + 1;
		}
		first = end;
	}
	c.n_negative = n - c.n_positive;
	c.twice_wins = twice_rank_sum - static_cast<uint64_t>(c.n_positive) * static_cast<uint64_t>(c.n_positive + 1);
	return c;
}

/*
 * One CPU worker's counting: segment by segment, with scratch that lives as
 * long as the worker's share of the call (fresh scratch per segment costs
 * page faults).  Aligned so that two workers' counters share no cache line.
 */
template <typename Source> class alignas(64) SegmentCounter
{
  public:
	using Key = typename Source::Key;
	SegmentCounter(Source &source, std::vector<RocCounts> &out) : source_(source), out_(out) {}

	void count(size_t s)
	{
		int64_t n = 0;
		Key *keys = source_.keys_of(s, scratch_, n);
		tmp_.resize(std::max<size_t>(tmp_.size(), n));
		out_[s] = counts_of_sorted(sort_by_score(keys, tmp_.data(), n, *radix_counts_), n);
	}

  private:
	Source &source_;
	std::vector<RocCounts> &out_;
	BulkVector<Key> scratch_, tmp_;
	std::unique_ptr<RadixCounts> radix_counts_ = std::make_unique<RadixCounts>();
};

/*
 * Every segment's counts, on all cores: items of consecutive segments of
 * about kExamplesPerItem examples, each worker with its own counter, each
 * item's examples counted into `progress` once counted.
 */
template <typename Source>
std::vector<RocCounts> counts_on_cpu(Source &source, ProgressReport progress, ExecContext &ctx)
{
	size_t n_segments = source.segments();
	std::vector<RocCounts> out(n_segments);
	std::vector<size_t> items = split_by_cost(n_segments, kExamplesPerItem, [&](size_t s) {
		return static_cast<double>(source.examples_before(s + 1) - source.examples_before(s));
	});
	size_t n_items = items.size() - 1;
	size_t workers = parallel_workers(n_items, ctx);
	std::vector<SegmentCounter<Source>> counters;
	counters.reserve(workers);
	for (size_t w = 0; w < workers; ++w)
		counters.emplace_back(source, out);
	parallel_for(n_items, ctx, [&](size_t item, size_t worker, const std::atomic<bool> &cancelled) {
		for (size_t s = items[item]; s < items[item + 1] && !cancelled.load(std::memory_order_relaxed); ++s)
			counters[worker].count(s);
		progress.add(static_cast<uint64_t>(source.examples_before(items[item + 1]) - source.examples_before(items[item])));
	});
	return out;
}

/*
 * The CPU path: the range of the scores, then the examples as packed keys
 * (both count as compute), then the counts, each item's examples counted
 * into `progress`.
 */
template <typename Range, typename MakeSource>
std::vector<RocCounts> cpu_path(ExecContext &ctx, ProgressReport progress, bool keys_are_doubles, Range range,
								MakeSource make_source)
{
	Stopwatch clock;
	KeyLayout layout = roc_keys::plan_layout(range(), keys_are_doubles);
	std::vector<RocCounts> counts = with_key_type(layout, [&](auto zero) {
		auto source = make_source(zero, layout);
		ctx.interrupt_point(Phase::Compute);
		return counts_on_cpu(source, progress, ctx);
	});
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
		r.has_auc = has_auc(c);
		r.auc = r.fitness = 0;
		if (r.has_auc)
		{
			/* from exact integers, so both devices give the same bits */
			double pairs = static_cast<double>(c.n_positive) * static_cast<double>(c.n_negative);
			__int128 excess = static_cast<__int128>(c.twice_wins) -
							  static_cast<__int128>(c.n_positive) * c.n_negative;
			r.auc = auc_of(c);
			r.fitness = static_cast<double>(excess) / (2.0 * pairs);
		}
	}
	return out;
}

} // namespace

double auc_of(const RocCounts &c)
{
	double pairs = static_cast<double>(c.n_positive) * static_cast<double>(c.n_negative);
	return static_cast<double>(c.twice_wins) / (2.0 * pairs);
}

std::vector<RocCounts> roc_counts_on_cpu(const std::vector<ScoredSegment> &segments, ExecContext &ctx)
{
	/* the radix sort counts in 32 bits, and twice a segment's rank sum, below n(n + 1), fits 64 */
	std::vector<int64_t> before{0};
	for (const ScoredSegment &segment : segments)
	{
		if (segment.size > UINT32_MAX)
			throw Error(sqlstate::program_limit_exceeded,
						"a segment of " + std::to_string(segment.size) + " examples, more than an AUC can count",
						"At most " + std::to_string(UINT32_MAX) + " examples per segment are supported.");
		before.push_back(before.back() + static_cast<int64_t>(segment.size));
	}
	/* the caller's own unit counts its progress (fit_exponent: users) */
	return cpu_path(
		ctx, ProgressReport(), true, [&] { return range_of_segments(segments); },
		[&](auto zero, const KeyLayout &layout) {
			return PackedSegments<decltype(zero)>{segments, before, layout};
		});
}

void check_examples_per_individual(int64_t id, int64_t examples, const CallKeys *keys)
{
	if (examples > kMaxExamplesPerIndividual)
		throw Error(sqlstate::program_limit_exceeded,
					"individual " + shown_id(keys, "individual_id", id) + " has " + std::to_string(examples) +
						" examples, more than roc_fitness can count",
					"At most " + std::to_string(kMaxExamplesPerIndividual) +
						" examples per individual are supported.")
			.ordered({id});
}

double gpu_scores_from(const ExecContext &ctx)
{
	return gpu_cheaper_from(WorkShape{rates::kScores, 1, sizeof(int32_t) + sizeof(uint8_t) + sizeof(double)},
							host_profile_for_reading(ctx), call_threads(ctx));
}

namespace {

/* GPU memory a call of roc_fitness needs per example, for the service's queue: keys, their sorted copy, segments. */
constexpr int64_t kServiceBytesPerExample = 32;

/*
 * The device part of the long format: each individual's counts, by
 * segment (code_of_segment: the codes in id order), on the device the
 * context picks.  With a GPU service, its GPU path is the service's, split
 * by individual over its devices; in the service, this same function runs
 * on the service's device (for a part, on its individuals' rows alone).
 */
std::vector<RocCounts> counts_of_examples(const RocExamples &examples, const std::vector<int32_t> &code_of_segment,
										  ExecContext &ctx)
{
	/* the CPU counts the examples it counted */
	ctx.progress.begin(ProgressPhase::Computing, "examples", examples.codes.size());
	double n = static_cast<double>(examples.codes.size());
	/* a code, a label and an order key a score */
	WorkShape shape{rates::kScores, n, n * (sizeof(int32_t) + sizeof(uint8_t) + sizeof(int64_t)),
					ctx.service != nullptr};
	return dispatch(
		ctx, "roc_fitness", shape,
		[&] {
			if (ctx.service)
				return service::call_for_vector<RocCounts>(
					service::Function::RocCountsLong,
					static_cast<int64_t>(examples.codes.size()) * kServiceBytesPerExample,
					[&](ByteWriter &out) {
						examples.codes.serialize(out);
						put_vector(out, examples.rows_per_code);
						examples.labels.serialize(out);
						examples.keys.serialize(out);
						out.put<uint8_t>(examples.keys_are_doubles ? 1 : 0);
						put_vector(out, code_of_segment);
					},
					ctx, service::split_parts(code_of_segment.size(), ctx));
			std::vector<int32_t> segment_of_code(code_of_segment.size());
			for (size_t s = 0; s < code_of_segment.size(); ++s)
				segment_of_code[code_of_segment[s]] = static_cast<int32_t>(s);
			gpu::RocExampleRows rows{chunk_view(examples.codes), examples.rows_per_code.data(),
									 chunk_view(examples.labels), chunk_view(examples.keys),
									 examples.keys_are_doubles};
			return gpu::roc_counts_long(rows, segment_of_code, ctx);
		},
		[&] {
			return cpu_path(
				ctx, ctx.progress, examples.keys_are_doubles, [&] { return range_of_rows(examples); },
				[&](auto zero, const KeyLayout &layout) {
					return group_rows<decltype(zero)>(examples, code_of_segment, layout);
				});
		});
}

/* The service's side of counts_of_examples: the input its GPU path wrote, read and checked once for its parts. */
struct RocLongCall
{
	ChunkedColumn<int32_t> codes;
	std::vector<int64_t> rows_per_code;
	ChunkedColumn<uint8_t> labels;
	ChunkedColumn<int64_t> keys;
	bool doubles = false;
	std::vector<int32_t> code_of_segment;

	RocExamples examples() const { return {codes, rows_per_code, labels, keys, doubles}; }
};

std::unique_ptr<RocLongCall> read_roc_long(ByteReader &input)
{
	auto call = std::make_unique<RocLongCall>();
	call->codes = ChunkedColumn<int32_t>::read_serialized(input);
	call->rows_per_code = get_vector<int64_t>(input);
	call->labels = ChunkedColumn<uint8_t>::read_serialized(input);
	call->keys = ChunkedColumn<int64_t>::read_serialized(input);
	call->doubles = input.get<uint8_t>() != 0;
	call->code_of_segment = get_vector<int32_t>(input);
	const ChunkedColumn<int32_t> &codes = call->codes;
	const std::vector<int64_t> &rows_per_code = call->rows_per_code;
	/* every row's code a segment's, every code once, the rows as counted: what the devices index by */
	std::vector<bool> seen(rows_per_code.size());
	int64_t rows = 0;
	bool agree = input.at_end() && call->code_of_segment.size() == rows_per_code.size() &&
				 call->labels.size() == codes.size() && call->keys.size() == codes.size();
	for (int32_t code : call->code_of_segment)
	{
		agree = agree && code >= 0 && static_cast<size_t>(code) < seen.size() && !seen[code];
		if (agree)
		{
			seen[code] = true;
			rows += rows_per_code[code];
		}
	}
	agree = agree && rows == static_cast<int64_t>(codes.size());
	for (size_t r = 0; agree && r < codes.size(); ++r)
		agree = codes[r] >= 0 && static_cast<size_t>(codes[r]) < seen.size();
	if (!agree)
		throw Error(sqlstate::internal_error, "roc_fitness: the GPU service got examples that disagree with themselves");
	return call;
}

/*
 * A part's individuals (segments [first, end)) alone: their rows in the
 * rows' order, each coded by its segment less `first`, so that its
 * segments are its codes in order.
 */
struct RocLongPart
{
	ChunkedColumn<int32_t> codes;
	std::vector<int64_t> rows_per_code;
	ChunkedColumn<uint8_t> labels;
	ChunkedColumn<int64_t> keys;
	std::vector<int32_t> code_of_segment;

	RocLongPart(const RocLongCall &call, size_t first, size_t end)
		: rows_per_code(end - first), code_of_segment(end - first)
	{
		std::vector<int32_t> part_code(call.rows_per_code.size(), -1);
		for (size_t s = first; s < end; ++s)
		{
			auto code = static_cast<int32_t>(s - first);
			part_code[call.code_of_segment[s]] = code;
			rows_per_code[code] = call.rows_per_code[call.code_of_segment[s]];
			code_of_segment[code] = code;
		}
		for (size_t r = 0; r < call.codes.size(); ++r)
			if (int32_t code = part_code[call.codes[r]]; code >= 0)
			{
				codes.push_back(code);
				labels.push_back(call.labels[r]);
				keys.push_back(call.keys[r]);
			}
	}
};

std::vector<uint8_t> roc_long_in_service(ByteReader &input, const service::Part &part, ExecContext &ctx)
{
	service::CallState own;
	const RocLongCall &call = (part.call ? *part.call : own).once<RocLongCall>([&] { return read_roc_long(input); });
	if (part.count == 1)
		return service::vector_result(counts_of_examples(call.examples(), call.code_of_segment, ctx));
	size_t segments = call.code_of_segment.size();
	RocLongPart mine(call, part.begin(segments), part.end(segments));
	RocExamples examples{mine.codes, mine.rows_per_code, mine.labels, mine.keys, call.doubles};
	return service::vector_result(counts_of_examples(examples, mine.code_of_segment, ctx));
}

const bool roc_long_registered =
	(service::register_handler(service::Function::RocCountsLong, roc_long_in_service, true), true);

} // namespace

namespace {

/*
 * A label other than 0 and 1 (the reader's mark, LabelColumn) is ERROR
 * 22023 naming the least individual that holds one, and its least such
 * label: one server's error whatever its rows' order (a parallel read's),
 * and so the one gpurec_shards raises of every partition's.
 */
void check_labels(const IdColumn &individual, const LabelColumn &label, const std::vector<int32_t> &code_of_segment,
				  const std::vector<int32_t> &segment_of_code, const CallKeys *keys)
{
	bool any = false;
	for (size_t c = 0; c < label.chunk_count() && !any; ++c)
	{
		const uint8_t *l = label.chunk_data(c);
		uint8_t bad = 0;
		for (size_t i = 0, n = label.chunk_rows(c); i < n; ++i)
			bad |= l[i] & 0xFE;
		any = bad != 0;
	}
	if (!any)
		return;
	/* the least (individual, label) of the bad rows, individuals in id order (their segments') */
	std::pair<int32_t, uint8_t> least{INT32_MAX, 0};
	for (size_t row = 0; row < label.size(); ++row)
		if (label[row] > 1)
			least = std::min(least, std::make_pair(segment_of_code[individual.code(row)], label[row]));
	int64_t id = individual.value_of(code_of_segment[least.first]);
	std::string held = least.second == LabelColumn::kOtherBadLabel ? std::string("a value below 0 or above 254")
																   : std::to_string(least.second);
	throw Error(sqlstate::invalid_parameter_value,
				"column \"label\" of the scores query holds " + held + " for individual " +
					shown_id(keys, "individual_id", id) + "; a label must be 0 or 1 (or boolean)")
		.ordered({id});
}

} // namespace

std::vector<RocResult> roc_fitness_long(const IdColumn &individual, const LabelColumn &label,
										const NumberColumn &score, ExecContext &ctx)
{
	std::vector<int32_t> code_of_segment = individual.codes_in_id_order();
	std::vector<int32_t> segment_of_code(code_of_segment.size());
	std::vector<int64_t> ids_of_segments(code_of_segment.size());
	for (size_t s = 0; s < code_of_segment.size(); ++s)
	{
		segment_of_code[code_of_segment[s]] = static_cast<int32_t>(s);
		ids_of_segments[s] = individual.value_of(code_of_segment[s]);
	}
	/* the labels first (the least individual holding a bad one), then each individual's count of examples */
	check_labels(individual, label, code_of_segment, segment_of_code, ctx.keys.get());
	for (size_t s = 0; s < code_of_segment.size(); ++s)
		check_examples_per_individual(ids_of_segments[s], individual.counts()[code_of_segment[s]], ctx.keys.get());
	RocExamples examples{individual.codes(), individual.counts(), label, score.keys(), keys_are_doubles(score)};
	std::vector<RocCounts> counts = counts_of_examples(examples, code_of_segment, ctx);
	return results_of(ids_of_segments, counts);
}

namespace {

/*
 * The device part of the array format: each row's counts, by segment, on
 * the device the context picks, of the segments [first, end) (a part of a
 * call split over the GPU service's devices; by default every segment).
 * With a GPU service, its GPU path is the service's, split by individual
 * over its devices; in the service, this same function runs on the
 * service's device (roc_arrays_in_service).
 */
std::vector<RocCounts> counts_of_arrays(const FloatArrayColumn &scores, const std::vector<int8_t> &labels,
										const std::vector<int32_t> &segment_of_row, ExecContext &ctx,
										size_t first = 0, size_t end = SIZE_MAX)
{
	end = std::min(end, segment_of_row.size());
	bool whole = first == 0 && end == segment_of_row.size();
	/* the CPU counts the examples it counted */
	double n = static_cast<double>(scores.elements()) * static_cast<double>(end - first) /
			   static_cast<double>(std::max<size_t>(1, segment_of_row.size()));
	ctx.progress.begin(ProgressPhase::Computing, "examples", static_cast<uint64_t>(n));
	WorkShape shape{rates::kScores, n, n * (scores.doubles() ? sizeof(double) : sizeof(float)),
					ctx.service != nullptr && whole};
	return dispatch(
		ctx, "roc_fitness", shape,
		[&] {
			if (ctx.service)
				return service::call_for_vector<RocCounts>(service::Function::RocCountsArrays,
										   static_cast<int64_t>(scores.elements()) * kServiceBytesPerExample,
										   [&](ByteWriter &out) {
											   out.put<uint8_t>(scores.doubles() ? 1 : 0);
											   scores.serialize(out);
											   put_vector(out, labels);
											   put_vector(out, segment_of_row);
										   },
										   ctx, service::split_parts(segment_of_row.size(), ctx));
			/* the rows of the segments asked, need not be adjacent (RocScoreArrays) */
			std::vector<int64_t> row_begins;
			std::vector<int32_t> segments;
			for (size_t row = 0; row < segment_of_row.size(); ++row)
				if (static_cast<size_t>(segment_of_row[row]) - first < end - first)
				{
					row_begins.push_back(scores.row_begin(row));
					segments.push_back(static_cast<int32_t>(segment_of_row[row] - first));
				}
			gpu::RocScoreArrays arrays{row_begins.size(), row_begins.data(), scores.doubles(),
									   chunk_view(scores.floats()), chunk_view(scores.double_values()),
									   chunk_view(scores.valid())};
			return gpu::roc_counts_arrays(arrays, labels, segments, ctx);
		},
		[&] {
			std::vector<size_t> row_of_segment(end - first);
			for (size_t row = 0; row < segment_of_row.size(); ++row)
				if (static_cast<size_t>(segment_of_row[row]) - first < end - first)
					row_of_segment[static_cast<size_t>(segment_of_row[row]) - first] = row;
			return cpu_path(
				ctx, ctx.progress, true, [&] { return range_of_arrays(scores, labels); },
				[&](auto zero, const KeyLayout &layout) {
					return PackedArrayRows<decltype(zero)>{scores, labels, row_of_segment, layout};
				});
		});
}

/*
 * The service's side of counts_of_arrays: the input its GPU path wrote,
 * read and checked once for the parts of a call, each part counting its
 * share of the segments (individuals).
 */
struct RocArraysCall
{
	FloatArrayColumn scores;
	std::vector<int8_t> labels;
	std::vector<int32_t> segment_of_row;
};

std::unique_ptr<RocArraysCall> read_roc_arrays(ByteReader &input)
{
	auto call = std::make_unique<RocArraysCall>();
	call->scores.set_doubles(input.get<uint8_t>() != 0);
	call->scores.append_serialized(input);
	call->labels = get_vector<int8_t>(input);
	call->segment_of_row = get_vector<int32_t>(input);
	/* every segment once: the counts are written by segment */
	std::vector<bool> seen(call->segment_of_row.size());
	bool agree = call->segment_of_row.size() == call->scores.size();
	for (int32_t segment : call->segment_of_row)
	{
		agree = agree && segment >= 0 && static_cast<size_t>(segment) < seen.size() && !seen[segment];
		if (agree)
			seen[segment] = true;
	}
	if (!agree)
		throw Error(sqlstate::internal_error, "roc_fitness: the GPU service got rows and segments that disagree");
	return call;
}

std::vector<uint8_t> roc_arrays_in_service(ByteReader &input, const service::Part &part, ExecContext &ctx)
{
	service::CallState own;
	RocArraysCall &call = (part.call ? *part.call : own).once<RocArraysCall>([&] { return read_roc_arrays(input); });
	size_t segments = call.segment_of_row.size();
	return service::vector_result(
		counts_of_arrays(call.scores, call.labels, call.segment_of_row, ctx, part.begin(segments), part.end(segments)));
}

const bool roc_arrays_registered =
	(service::register_handler(service::Function::RocCountsArrays, roc_arrays_in_service, true), true);

} // namespace

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
						"individual " + shown_id(ctx.keys.get(), "individual_id", id) + " appears more than once",
						"The population query must return one row per individual.")
				.ordered({id});
		int64_t length = scores.row_end(row) - scores.row_begin(row);
		if (length != static_cast<int64_t>(labels.size()))
			throw Error(sqlstate::invalid_parameter_value,
						"the scores of individual " + shown_id(ctx.keys.get(), "individual_id", id) + " have " +
							std::to_string(length) + " elements, the labels " +
							std::to_string(labels.size()),
						"Every scores array must be as long as labels.")
				.ordered({id});
		check_examples_per_individual(id, length, ctx.keys.get());
		ids_of_segments[s] = id;
		segment_of_row[row] = static_cast<int32_t>(s);
	}
	return results_of(ids_of_segments, counts_of_arrays(scores, labels, segment_of_row, ctx));
}

namespace {

/* A roc part's first bytes: "GRCP" and the format's version. */
constexpr uint32_t kRocPartMagic = 0x50435247;
constexpr uint8_t kRocPartVersion = 1;
constexpr size_t kRocRowBytes = 6 * sizeof(int64_t);

[[noreturn]] void not_a_roc_part(const std::string &why)
{
	throw Error(sqlstate::invalid_binary_representation, "malformed roc_fitness part of a partition",
				why + " The coordinator and the partitions must run the same version of gpurec.");
}

} // namespace

std::vector<uint8_t> roc_part(const std::vector<RocResult> &results)
{
	std::vector<uint8_t> out(sizeof kRocPartMagic + 1 + sizeof(uint64_t) + results.size() * kRocRowBytes);
	ByteWriter writer(out.data(), out.size());
	writer.put(kRocPartMagic);
	writer.put(kRocPartVersion);
	writer.put(static_cast<uint64_t>(results.size()));
	for (const RocResult &r : results)
	{
		writer.put(r.individual_id);
		writer.put(r.counts.n_positive);
		writer.put(r.counts.n_negative);
		writer.put(r.counts.twice_wins);
		writer.put(r.counts.lowest_positive_rank);
		writer.put(r.counts.highest_positive_rank);
	}
	return out;
}

void RocPartsMerge::append_part(const uint8_t *data, size_t size)
{
	size_t part = parts_++;
	size_t header = sizeof kRocPartMagic + 1 + sizeof(uint64_t);
	if (size < header)
		not_a_roc_part("Part " + std::to_string(part) + " has " + std::to_string(size) + " bytes.");
	ByteReader reader(data, size);
	uint32_t magic = reader.get<uint32_t>();
	uint8_t version = reader.get<uint8_t>();
	uint64_t count = reader.get<uint64_t>();
	if (magic != kRocPartMagic || version != kRocPartVersion || count > (size - header) / kRocRowBytes ||
		size != header + count * kRocRowBytes)
		not_a_roc_part("Part " + std::to_string(part) + " is not what gpurec_internal._roc_fitness_part writes.");
	for (uint64_t row = 0; row < count; ++row)
	{
		ids_.push_back(reader.get<int64_t>());
		RocCounts c;
		c.n_positive = reader.get<int64_t>();
		c.n_negative = reader.get<int64_t>();
		c.twice_wins = reader.get<uint64_t>();
		c.lowest_positive_rank = reader.get<int64_t>();
		c.highest_positive_rank = reader.get<int64_t>();
		counts_.push_back(c);
		part_of_row_.push_back(part);
	}
}

std::vector<RocResult> RocPartsMerge::rows(const std::function<void(int64_t, size_t, size_t)> &split)
{
	std::vector<size_t> order(ids_.size());
	std::iota(order.begin(), order.end(), size_t(0));
	std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ids_[a] < ids_[b]; });
	std::vector<int64_t> ids;
	std::vector<RocCounts> counts;
	for (size_t i = 0; i < order.size();)
	{
		size_t j = i + 1;
		while (j < order.size() && ids_[order[j]] == ids_[order[i]])
			++j;
		/* stable: a repeated id's rows in part order, the least part first and the greatest last */
		if (part_of_row_[order[i]] != part_of_row_[order[j - 1]])
			split(ids_[order[i]], part_of_row_[order[i]], part_of_row_[order[j - 1]]);
		for (size_t k = i; k < j; ++k)
		{
			ids.push_back(ids_[order[k]]);
			counts.push_back(counts_[order[k]]);
		}
		i = j;
	}
	return results_of(ids, counts);
}

namespace {

constexpr uint8_t kLabelsFormat = 1;
constexpr size_t kLabelsHeader = 1 + sizeof(uint64_t);

} // namespace

std::vector<uint8_t> pack_labels(const std::vector<int8_t> &labels)
{
	size_t n = labels.size(), bitmap = (n + 7) / 8;
	std::vector<uint8_t> out(kLabelsHeader + 2 * bitmap, 0);
	out[0] = kLabelsFormat;
	uint64_t count = n;
	std::memcpy(out.data() + 1, &count, sizeof count);
	uint8_t *values = out.data() + kLabelsHeader, *nulls = values + bitmap;
	for (size_t i = 0; i < n; ++i)
		if (labels[i] < 0)
			nulls[i / 8] |= uint8_t(1u << (i % 8));
		else if (labels[i] > 0)
			values[i / 8] |= uint8_t(1u << (i % 8));
	return out;
}

std::vector<int8_t> unpack_labels(const uint8_t *data, size_t size)
{
	uint64_t count = 0;
	if (size >= kLabelsHeader)
		std::memcpy(&count, data + 1, sizeof count);
	/* the count first bounds the bitmaps' size, so that (count + 7) / 8 cannot wrap */
	if (size < kLabelsHeader || data[0] != kLabelsFormat || count > 8 * (size - kLabelsHeader) ||
		size != kLabelsHeader + 2 * ((count + 7) / 8))
		throw Error(sqlstate::invalid_binary_representation, "malformed packed labels",
					"gpurec_internal._labels_unpack reads only what gpurec_internal._labels_pack wrote.");
	size_t bitmap = (count + 7) / 8;
	const uint8_t *values = data + kLabelsHeader, *nulls = values + bitmap;
	std::vector<int8_t> labels(count);
	for (size_t i = 0; i < count; ++i)
	{
		auto bit = uint8_t(1u << (i % 8));
		labels[i] = (nulls[i / 8] & bit) ? -1 : (values[i / 8] & bit) ? 1 : 0;
	}
	return labels;
}

} // namespace gpurec
