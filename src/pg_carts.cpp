/*
 * pg_carts.cpp: the SQL entry point of optimize_carts, the cheapest whole
 * cart with shipping: reads its three inner queries, runs the engine
 * (carts.hpp) and writes a row per cart line.
 */
#include "pg_boundary.hpp"

extern "C" {
#include "utils/numeric.h"
}

#include "carts.hpp"
#include "number_column.hpp"
#include "offers_input.hpp"
#include "pg_arguments.hpp"
#include "pg_numeric.hpp"
#include "pg_offer_parts.hpp"
#include "pg_output.hpp"
#include "pg_settings.hpp"
#include "read/read.hpp"

namespace gpurec {

namespace {

/*
 * optimize_carts(carts_query, offers_query, shipping_query), and
 * gpurec_internal._optimize_carts_of_parts(carts_query, offers_parts,
 * shipping_query): the offers of the partitions' parts (_offers_part), on
 * a partition of gpurec_shards.
 */
Datum optimize_carts_rows(FunctionCallInfo fcinfo, bool offers_of_parts)
{
	ExecContext ctx = exec_context_from_settings();
	const char *carts_query = text_argument(fcinfo, 0);
	const char *shipping_query = text_argument(fcinfo, 2);

	/*
	 * A cart line with a NULL cart or product is skipped; a NULL quantity
	 * counts as 1; a NULL (or absent) store_id is no current store.
	 */
	InputTable carts("carts query", {id_spec("cart_id"),
									 id_spec("product_id"),
									 id_spec("store_id", false, kNoCurrentStore),
									 {"quantity", ColumnKind::Int64, true, false, 1}});
	read_inner_query(carts_query, carts, ctx);
	/*
	 * Only the offers of products in some cart count: the others are
	 * dropped as they are read, before their store and price are converted
	 * (with few carts over many products, most of the read).
	 */
	auto carts_products = std::make_shared<const KeyFilter>(carts.int64(1).to_vector());
	OffersInput input(ctx, 0, std::move(carts_products));
	std::unique_ptr<MergedOffers> merged;
	if (offers_of_parts)
		merged = merged_offers_argument(fcinfo, 1, ctx);
	else
		read_inner_query(text_argument(fcinfo, 1), input.table, ctx);
	/* a NULL store skips the row; a NULL fee is an error; a NULL (or absent) free_from is never free */
	InputTable shipping_table("shipping query", {id_spec("store_id"),
												 {"fee", ColumnKind::Number, false, true, 0, true},
												 {"free_from", ColumnKind::Number, true, false, kFallbackInfinity}});
	read_inner_query(shipping_query, shipping_table, ctx);

	CartLines lines = {carts.int64(0), carts.int64(1), carts.int64(2), carts.int64(3)};
	Shipping shipping = {shipping_table.int64(0), shipping_table.number(1), shipping_table.number(2)};
	const Offers &offers = merged ? merged->offers() : input.offers;
	CartsAnswer answer = optimize_carts(lines, offers, shipping, ctx);

	ResultWriter out(fcinfo, ctx, "optimize_carts");
	ResultIds cart_id(out, 0, ctx, "cart_id"), product_id(out, 1, ctx, "product_id"), store_id(out, 3, ctx, "store_id");
	for (const CartAnswer &cart : answer.carts)
	{
		Datum total = units_as_numeric(cart.total.units, answer.scale, cart.total.display_scale);
		Datum shipping_cost = units_as_numeric(cart.shipping.units, answer.scale, cart.shipping.display_scale);
		Datum current_total = 0, saving = 0;
		if (cart.has_current)
		{
			current_total = units_as_numeric(cart.current_total.units, answer.scale, cart.current_total.display_scale);
			/* both within +-2^62: their difference fits */
			saving = units_as_numeric(cart.current_total.units - cart.total.units, answer.scale,
									  std::max(cart.current_total.display_scale, cart.total.display_scale));
		}
		for (size_t l = cart.first_line; l < cart.end_line; ++l)
		{
			const CartAnswerLine &line = answer.lines[l];
			Datum values[11];
			bool nulls[11] = {false, false, false, true, true, false, false, false, false, true, true};
			values[0] = cart_id(cart.cart_id);
			values[1] = product_id(lines.product[line.line]);
			values[2] = Int64GetDatum(lines.quantity[line.line]);
			if (line.offer_row >= 0)
			{
				values[3] = store_id(offers.store[line.offer_row]);
				values[4] = number_as_numeric(offers.price, static_cast<size_t>(line.offer_row));
				nulls[3] = nulls[4] = false;
			}
			values[5] = total;
			values[6] = shipping_cost;
			values[7] = Int32GetDatum(cart.stores_used);
			values[8] = BoolGetDatum(cart.complete);
			if (cart.has_current)
			{
				values[9] = current_total;
				values[10] = saving;
				nulls[9] = nulls[10] = false;
			}
			out.put(values, nulls);
		}
	}
	out.finish();
	return (Datum) 0;
}

Datum optimize_carts_body(FunctionCallInfo fcinfo)
{
	if (answered_null_as_strict(fcinfo, {3})) /* the typed form's id_type */
		return (Datum) 0;
	return optimize_carts_rows(fcinfo, false);
}

Datum optimize_carts_of_parts_body(FunctionCallInfo fcinfo) { return optimize_carts_rows(fcinfo, true); }

} // namespace
} // namespace gpurec

GPUREC_SQL_FUNCTION(gpurec_optimize_carts, gpurec::optimize_carts_body)
GPUREC_SQL_FUNCTION(gpurec_optimize_carts_of_parts, gpurec::optimize_carts_of_parts_body)
