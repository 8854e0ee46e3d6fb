/*
 * marketplace_kernels.hpp: the GPU half of cheapest_offers.
 */
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernel_api.hpp"

namespace gpurec::gpu {

/*
 * The offers as read so far: a dense product code per row, the store, and
 * the price as a 64-bit order key at a common decimal scale.  A numeric
 * price column may change scale while it is read (its keys are then
 * rescaled in place), which is why the scale travels with the keys.
 */
struct OfferColumns
{
	ChunkedView<int32_t> product_codes;
	ChunkedView<int64_t> stores;
	ChunkedView<int64_t> price_keys;
	int price_scale = 0;
};

/* A pick slot left empty: the product has fewer offers than ranks. */
constexpr uint32_t kNoOffer = 0xFFFFFFFFu;

/* Offer chunks already on the device, copied while the input was read. */
class OfferUpload;
struct OfferUploadDeleter
{
	void operator()(OfferUpload *upload) const noexcept;
};
using OfferUploadPtr = std::unique_ptr<OfferUpload, OfferUploadDeleter>;

/* Starts streaming offers to the GPU (pinned staging buffers, one stream). */
OfferUploadPtr start_offer_upload(CallContext &ctx);

/*
 * Copies every complete chunk of the offers that is not on the device yet;
 * asynchronous, so reading goes on while the copy runs.  Offers too large
 * to stream stop the upload quietly: the ranking then goes in parts.
 */
void upload_offer_chunks(OfferUpload &upload, const OfferColumns &offers, CallContext &ctx);

/*
 * The k cheapest offers of every product by (price key, store_id), exact
 * duplicates of an offer given as the same row: n_products x k rows per
 * part, product by product, cheapest first, kNoOffer where a product has
 * fewer.  Uses the chunks `streamed` holds (when given) and copies the rest;
 * offers that do not fit in GPU memory go through in parts, each with its
 * own picks, which the caller then ranks together.
 */
std::vector<uint32_t> cheapest_offer_picks(const OfferColumns &offers, size_t n_products, int k,
										   OfferUpload *streamed, CallContext &ctx);

} // namespace gpurec::gpu
