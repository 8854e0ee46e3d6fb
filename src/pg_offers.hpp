/*
 * pg_offers.hpp: the offers query of the marketplace functions
 * (cheapest_offers, improve_carts, optimize_carts), read one way for all.
 */
#pragma once

#include <memory>

#include "marketplace.hpp"
#include "number_column.hpp"
#include "pg_input.hpp"

namespace gpurec {

/*
 * offers_query (product_id, store_id, price; a NULL in any skips the row)
 * read into columns.  With a streamer (stream_for_k > 0: the k of the
 * ranking that follows), each full chunk goes to it while the rest is read.
 */
struct OffersInput
{
	InputTable table{"offers query", {{"product_id", ColumnKind::Id},
									  {"store_id", ColumnKind::Int64},
									  {"price", ColumnKind::Number}}};
	Offers offers{table.id(0), table.int64(1), table.number(2)};
	std::unique_ptr<OfferStreamer> streamer;

	/*
	 * keep_products: read only the offers of these products
	 * (InputTable::keep_rows_with_keys); partial: what parallel workers may
	 * send instead of their rows (InputTable::combine_partials).
	 */
	OffersInput(const char *offers_query, ExecContext &ctx, int stream_for_k = 0,
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
		read_inner_query(offers_query, table, ctx);
	}
};

} // namespace gpurec
