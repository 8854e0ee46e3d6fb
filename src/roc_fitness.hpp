/*
 * roc_fitness.hpp: ROC fitness of a genetic algorithm's population.
 *
 * Every individual scores the same labelled examples; its fitness is the
 * mean over the score-sorted examples of (TPR so far - FPR so far), which is
 * AUC - 0.5.  AUC is computed exactly from 64-bit counts (ties count half),
 * so the CPU and the GPU give bit-identical results.
 */
#pragma once

#include <cstdint>
#include <vector>

#include "columns.hpp"
#include "device.hpp"

namespace gpurec {

/* Examples grouped by individual, in ascending individual_id. */
struct RocSegments
{
	std::vector<int64_t> individual_ids;
	std::vector<int64_t> offsets; /* individual i: examples offsets[i] .. offsets[i+1] */
	BulkVector<int64_t> keys;	 /* score order keys (columns.hpp): NaN highest */
	BulkVector<uint8_t> labels; /* 1 positive, 0 negative */
};

/* Long format: one row per (individual, example). */
RocSegments roc_segments_from_rows(const IdColumn &individual, const LabelColumn &label,
								   const NumberColumn &score);

/*
 * Array format: one row per individual, each array as long as `labels`
 * (-1 where a label is NULL).  Positions with a NULL score or label are
 * skipped; a NULL array is an individual without examples.
 */
RocSegments roc_segments_from_arrays(const Int64Column &individual_ids,
									 const FloatArrayColumn &scores,
									 const std::vector<int8_t> &labels);

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

struct RocResult
{
	int64_t individual_id;
	RocCounts counts;
	bool has_auc; /* false without a positive or without a negative */
	double auc;
	double fitness; /* auc - 0.5 */
};

std::vector<RocResult> roc_fitness(const RocSegments &segments, ExecContext &ctx);

/* The counts of one individual whose examples are sorted by key, highest first. */
RocCounts roc_counts_of_sorted(const int64_t *keys, const uint8_t *labels, int64_t n);

} // namespace gpurec
