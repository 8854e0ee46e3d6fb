/*
 * roc_fitness_kernels.hpp: the GPU half of roc_fitness: a segmented sort of
 * every individual's examples, then prefix sums and reductions of the class
 * counts over the tie groups, for the whole population at once.
 */
#pragma once

#include <vector>

#include "../src/device.hpp"
#include "../src/roc_fitness.hpp"

namespace gpurec::gpu {

#ifdef GPUREC_WITH_CUDA
std::vector<RocCounts> roc_counts(const RocSegments &segments, ExecContext &ctx);
#else
inline std::vector<RocCounts> roc_counts(const RocSegments &, ExecContext &)
{
	throw Error(sqlstate::object_not_in_prerequisite_state, "gpurec was built without CUDA");
}
#endif

} // namespace gpurec::gpu
