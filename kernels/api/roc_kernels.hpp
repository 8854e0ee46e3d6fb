/*
 * roc_kernels.hpp: the GPU half of roc_fitness.  It takes the input
 * columns as they were read (no per-example work on the host), packs every
 * example into one integer key (individual, score, label), sorts the keys
 * once for the whole population and folds each individual's tie groups into
 * its counts.
 *
 * Both functions return one RocCounts per individual in ascending
 * individual_id ("segment" order), as the CPU path does.
 */
#pragma once

#include <cstdint>
#include <vector>

#include "kernel_api.hpp"

namespace gpurec::gpu {

/* Exact per-individual counts, from which every result column follows. */
struct RocCounts
{
	int64_t n_positive = 0;
	int64_t n_negative = 0;
	/* sum over positives of 2 x (negatives scored lower) + (negatives tied) */
	uint64_t twice_wins = 0;
	int64_t lowest_positive_rank = 0; /* rank() OVER (ORDER BY score DESC); 0: no positive */
	int64_t highest_positive_rank = 0;
};

/* Long format: one example per row. */
struct RocExampleRows
{
	ChunkedView<int32_t> individual_codes; /* dense codes, 0 .. individuals - 1 */
	const int64_t *rows_per_code = nullptr;
	ChunkedView<uint8_t> labels;		   /* 0 or 1 */
	ChunkedView<int64_t> score_keys;	   /* signed order keys (roc_keys.hpp) */
	bool keys_are_doubles = false;		   /* of real or double scores: may narrow to floats */
};

/* segment_of_code[c]: the position of code c's id among the ids in ascending order */
std::vector<RocCounts> roc_counts_long(const RocExampleRows &rows, const std::vector<int32_t> &segment_of_code,
									   CallContext &ctx);

/*
 * Array format: one individual per row, every row exactly as long as the
 * labels, its scores stored together (from row_begins[r]) as floats or as
 * doubles; `valid` (1 where a score is there, at the same indices) is empty
 * when none is NULL.
 */
struct RocScoreArrays
{
	size_t rows = 0;
	/* Row r's elements (as many as there are labels) start at element row_begins[r]; rows need not be adjacent. */
	const int64_t *row_begins = nullptr;
	bool doubles = false;
	ChunkedView<float> floats;
	ChunkedView<double> double_values;
	ChunkedView<uint8_t> valid;
};

/* labels: -1 where a label is NULL, else 0 or 1; segment_of_row as above, per row */
std::vector<RocCounts> roc_counts_arrays(const RocScoreArrays &scores, const std::vector<int8_t> &labels,
										 const std::vector<int32_t> &segment_of_row, CallContext &ctx);

} // namespace gpurec::gpu
