/*
 * marketplace_kernels.hpp: the GPU half of the marketplace engine.
 */
#pragma once

#include <cstdint>
#include <vector>

#include "../src/columns.hpp"
#include "../src/device.hpp"

namespace gpurec::gpu {

#ifdef GPUREC_WITH_CUDA
/*
 * Reduces the offers to at most k candidate rows per product: the k
 * cheapest by (price key, store_id), exact duplicates of an offer given as
 * the same row.  Works through the offers in parts that fit in GPU memory,
 * so the result may hold up to k candidates per product per part; the caller
 * ranks the candidates.
 */
std::vector<uint32_t> cheapest_offer_candidates(const ChunkedColumn<int32_t> &product_codes,
												size_t n_products,
												const ChunkedColumn<int64_t> &stores,
												const ChunkedColumn<int64_t> &price_keys, int k,
												ExecContext &ctx);
#else
inline std::vector<uint32_t> cheapest_offer_candidates(const ChunkedColumn<int32_t> &, size_t,
													   const ChunkedColumn<int64_t> &,
													   const ChunkedColumn<int64_t> &, int,
													   ExecContext &)
{
	throw Error(sqlstate::object_not_in_prerequisite_state, "gpurec was built without CUDA");
}
#endif

} // namespace gpurec::gpu
