/*
 * marketplace_kernels.hpp: the GPU half of the marketplace engine.
 */
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "../src/columns.hpp"
#include "../src/device.hpp"

namespace gpurec::gpu {

/* A pick slot left empty: the product has fewer offers than ranks. */
constexpr uint32_t kNoOffer = 0xFFFFFFFFu;

/* Offer chunks already on the device, copied while the input was read. */
class OfferUpload;
struct OfferUploadDeleter
{
	void operator()(OfferUpload *upload) const noexcept;
};
using OfferUploadPtr = std::unique_ptr<OfferUpload, OfferUploadDeleter>;

#ifdef GPUREC_WITH_CUDA
/* Starts streaming offers to the GPU (pinned staging buffers, one stream). */
OfferUploadPtr start_offer_upload(ExecContext &ctx);

/*
 * Copies every complete chunk of the offers that is not on the device yet;
 * asynchronous, so reading goes on while the copy runs.
 */
void upload_offer_chunks(OfferUpload &upload, const ChunkedColumn<int32_t> &product_codes,
						 const ChunkedColumn<int64_t> &stores, const NumberColumn &price,
						 ExecContext &ctx);

/*
 * The k cheapest offers of every product by (price key, store_id), exact
 * duplicates of an offer given as the same row: n_products x k rows per
 * part, product by product, cheapest first, kNoOffer where a product has
 * fewer.  Uses the chunks `streamed` holds (when given) and copies the rest;
 * offers that do not fit in GPU memory go through in parts, each with its
 * own picks, which the caller then ranks together.
 */
std::vector<uint32_t> cheapest_offer_picks(const ChunkedColumn<int32_t> &product_codes,
												size_t n_products,
												const ChunkedColumn<int64_t> &stores,
												const NumberColumn &price, int k,
												OfferUpload *streamed, ExecContext &ctx);
#else
inline OfferUploadPtr start_offer_upload(ExecContext &) { return nullptr; }
inline void upload_offer_chunks(OfferUpload &, const ChunkedColumn<int32_t> &,
								const ChunkedColumn<int64_t> &, const NumberColumn &, ExecContext &)
{
}
inline std::vector<uint32_t> cheapest_offer_picks(const ChunkedColumn<int32_t> &, size_t,
													   const ChunkedColumn<int64_t> &,
													   const NumberColumn &, int, OfferUpload *,
													   ExecContext &)
{
	throw Error(sqlstate::object_not_in_prerequisite_state, "gpurec was built without CUDA");
}
inline void OfferUploadDeleter::operator()(OfferUpload *) const noexcept {}
#endif

} // namespace gpurec::gpu
