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

/*
 * Long format: one row per (individual, example).  Rows with a NULL label or
 * score never reach the columns.  One result per individual, in ascending
 * individual_id.
 */
std::vector<RocResult> roc_fitness_long(const IdColumn &individual, const LabelColumn &label,
										const NumberColumn &score, ExecContext &ctx);

/*
 * Array format: one row per individual; every scores array as long as
 * `labels` (-1 where a label is NULL, else 0 or 1).  Positions where the
 * score or the label is NULL are skipped.  Errors (22023): an array of
 * another length, naming its individual; an individual_id given twice.
 * One result per row, in ascending individual_id.
 */
std::vector<RocResult> roc_fitness_arrays(const Int64Column &individual_ids,
										  const FloatArrayColumn &scores,
										  const std::vector<int8_t> &labels, ExecContext &ctx);

} // namespace gpurec
