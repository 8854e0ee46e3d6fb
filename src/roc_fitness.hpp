/*
 * roc_fitness.hpp: ROC fitness of a genetic algorithm's population, and
 * the engine's one AUC.
 *
 * Every individual scores the same labelled examples; its fitness is the
 * mean over the score-sorted examples of (TPR so far - FPR so far), which is
 * AUC - 0.5.  AUC is computed exactly from 64-bit counts (ties count half),
 * so the CPU and the GPU give bit-identical results.  Every function that
 * returns an AUC takes it from here: roc_fitness and roc_auc, and
 * fit_exponent (geo_device.cpp) through roc_counts_on_cpu.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "../kernels/api/roc_kernels.hpp"
#include "array_column.hpp"
#include "device.hpp"
#include "id_column.hpp"
#include "number_column.hpp"

namespace gpurec {

/*
 * The scores from which roc_fitness computes on the GPU under
 * gpurec.device = auto (auto's cost model, for a read that has not
 * counted them yet).
 */
double gpu_scores_from(const ExecContext &ctx);

/* Exact per-individual counts, from which every result column follows (the GPU returns them too). */
using gpu::RocCounts;

struct RocResult
{
	int64_t individual_id;
	RocCounts counts;
	bool has_auc; /* false without a positive or without a negative */
	double auc;
	double fitness; /* auc - 0.5 */
};

/*
 * The AUC of a segment's counts, whichever device counted them:
 * twice_wins / (2 x positives x negatives), from exact integers.  Defined
 * only where has_auc.
 */
inline bool has_auc(const RocCounts &c) { return c.n_positive > 0 && c.n_negative > 0; }
double auc_of(const RocCounts &c);

/* One segment's examples as a caller holds them: `size` scores and as many labels (0 or 1). */
struct ScoredSegment
{
	const double *scores;
	const uint8_t *labels;
	size_t size;
};

/*
 * The counts of each segment, on the CPU's cores, the way roc_fitness
 * counts an individual (NaN above every number, -0 equal to 0), for
 * callers whose scores are doubles in host memory already.  At most
 * 2^32 - 1 examples a segment (else ERROR 54000).
 */
std::vector<RocCounts> roc_counts_on_cpu(const std::vector<ScoredSegment> &segments, ExecContext &ctx);

/*
 * Ranks and counts are 32-bit: more than 2^31 - 1 examples of one
 * individual is ERROR 54000 naming it (README, Limits).
 */
void check_examples_per_individual(int64_t id, int64_t examples, const CallKeys *keys);

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

/*
 * gpurec_shards' form of a partition's roc_fitness answer: its rows'
 * individual ids and exact counts (every column follows from them, as
 * results_of derives it on the partition), in gpurec's binary form.  The
 * coordinator appends the partitions' parts in partition order and takes
 * every row in id order, as one server holding every individual answers
 * (an individual's examples live on one partition, where its counts are
 * whole).  Bytes that are not a part (another version of gpurec,
 * truncated or foreign): ERROR 22P03.
 */
std::vector<uint8_t> roc_part(const std::vector<RocResult> &results);

class RocPartsMerge
{
  public:
	void append_part(const uint8_t *data, size_t size);
	/*
	 * Every part's rows in id order.  An individual that two parts hold
	 * (its rows split, no partition saw them all): split(id, least part,
	 * greatest part) for the least such id, which is to throw.
	 */
	std::vector<RocResult> rows(const std::function<void(int64_t, size_t, size_t)> &split);

  private:
	std::vector<int64_t> ids_;
	std::vector<RocCounts> counts_;
	std::vector<size_t> part_of_row_;
	size_t parts_ = 0;
};

/*
 * Labels (-1 NULL, 0, 1) as gpurec_shards sends them to every partition:
 * two bits a label (a value bitmap, then a NULL bitmap) after a format
 * byte and the count.  PL/Proxy sends a boolean[] as its text, two bytes
 * a label that each partition parses element by element (100,000 labels:
 * 200 kB); packed they are 25 kB, 50 kB of hex.  unpack_labels refuses
 * bytes that pack_labels did not write (22P03).
 */
std::vector<uint8_t> pack_labels(const std::vector<int8_t> &labels);
std::vector<int8_t> unpack_labels(const uint8_t *data, size_t size);

} // namespace gpurec
