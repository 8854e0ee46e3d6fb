/*
 * roc_fitness_kernels.hpp: the GPU half of roc_fitness.  It takes the input
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

#include "../src/columns.hpp"
#include "../src/device.hpp"
#include "../src/roc_fitness.hpp"

namespace gpurec::gpu {

#ifdef GPUREC_WITH_CUDA
/* segment_of_code[c]: the position of code c's id among the ids in ascending order */
std::vector<RocCounts> roc_counts_long(const IdColumn &individual, const LabelColumn &label,
									   const NumberColumn &score,
									   const std::vector<int32_t> &segment_of_code, ExecContext &ctx);

/* every row exactly labels.size() elements long; segment_of_row as above, per row */
std::vector<RocCounts> roc_counts_arrays(const FloatArrayColumn &scores, const std::vector<int8_t> &labels,
										 const std::vector<int32_t> &segment_of_row, ExecContext &ctx);
#else
inline std::vector<RocCounts> roc_counts_long(const IdColumn &, const LabelColumn &, const NumberColumn &,
											  const std::vector<int32_t> &, ExecContext &)
{
	throw Error(sqlstate::object_not_in_prerequisite_state, "gpurec was built without CUDA");
}

inline std::vector<RocCounts> roc_counts_arrays(const FloatArrayColumn &, const std::vector<int8_t> &,
												const std::vector<int32_t> &, ExecContext &)
{
	throw Error(sqlstate::object_not_in_prerequisite_state, "gpurec was built without CUDA");
}
#endif

} // namespace gpurec::gpu
