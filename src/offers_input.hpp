/*
 * offers_input.hpp: the offers query of the marketplace functions
 * (cheapest_offers, improve_carts, optimize_carts), declared one way for
 * all, and its partial result, cheapest_offers' (registered in
 * offers_input.cpp).  The entry points read it (src/read/read.hpp).
 */
#pragma once

#include <memory>

#include "input_table.hpp"
#include "marketplace.hpp"

namespace gpurec {

/*
 * The partial result of a share of the offers: each product's k cheapest
 * offers of the share, and its count of offers there (an OffersPart,
 * marketplace.hpp).  The parameter is k.
 */
extern const PartialKind cheapest_offers_partial;

/*
 * offers_query's columns (product_id, store_id, price; a NULL in any skips
 * the row), for the read of offers_query.  With a streamer (stream_for_k >
 * 0: the k of the ranking that follows), each full chunk goes to it while
 * the rest is read.
 */
struct OffersInput
{
	InputTable table{"offers query", {{"product_id", ColumnKind::Id},
									  id_spec("store_id"),
									  {"price", ColumnKind::Number}}};
	Offers offers{table.id(0), table.int64(1), table.number(2)};
	std::unique_ptr<OfferStreamer> streamer;

	/*
	 * keep_products: read only the offers of these products
	 * (InputTable::keep_rows_with_keys); partial: what parallel workers may
	 * send instead of their rows (InputTable::combine_partials).
	 */
	explicit OffersInput(ExecContext &ctx, int stream_for_k = 0,
						 std::shared_ptr<const KeyFilter> keep_products = nullptr, PartialRequest partial = {})
	{
		if (keep_products)
			table.keep_rows_with_keys(0, std::move(keep_products));
		table.combine_partials(partial);
		if (stream_for_k > 0)
		{
			table.set_gpu_from_rows(gpu_offers_from(stream_for_k, ctx));
			streamer = std::make_unique<OfferStreamer>(ctx, stream_for_k);
			table.on_chunk_complete([this] { streamer->on_chunk(offers); });
		}
	}
	/* the chunk listener holds `this` */
	OffersInput(const OffersInput &) = delete;
	OffersInput &operator=(const OffersInput &) = delete;
};

} // namespace gpurec
