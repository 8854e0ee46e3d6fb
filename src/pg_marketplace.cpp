/*
 * pg_marketplace.cpp: SQL entry points of the marketplace family
 * (cheapest_offers, improve_carts): each reads its arguments and inner
 * queries, runs the engine (marketplace.hpp) and writes its rows.
 */
#include "pg_boundary.hpp"

extern "C" {
#include "utils/numeric.h"
}

#include "marketplace.hpp"
#include "pg_arguments.hpp"
#include "pg_input.hpp"
#include "pg_numeric.hpp"
#include "pg_offers.hpp"
#include "pg_output.hpp"
#include "pg_settings.hpp"

namespace gpurec {

namespace {

Datum cheapest_offers_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	const char *offers_query = text_argument(fcinfo, 0);
	int32 k = PG_GETARG_INT32(1);
	check_k(k); /* before the query runs */

	OffersInput input(offers_query, ctx, k);
	const Offers &offers = input.offers;
	RankedOffers ranked = cheapest_offers(offers, k, ctx, input.streamer.get());

	ResultWriter out(fcinfo, ctx, "cheapest_offers");
	for (int32_t code : offers.product.codes_in_id_order())
	{
		Datum values[5];
		bool nulls[5] = {false, false, false, false, false};
		values[0] = Int64GetDatum(offers.product.value_of(code));
		values[4] = Int64GetDatum(offers.product.counts()[code]);
		for (int64_t r = ranked.offsets[code]; r < ranked.offsets[code + 1]; ++r)
		{
			uint32_t row = ranked.rows[r];
			values[1] = Int32GetDatum(static_cast<int32>(r - ranked.offsets[code] + 1));
			values[2] = Int64GetDatum(offers.store[row]);
			values[3] = number_as_numeric(offers.price, row);
			out.put(values, nulls);
		}
	}
	out.finish();
	return (Datum) 0;
}

Datum improve_carts_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	const char *carts_query = text_argument(fcinfo, 0);
	const char *offers_query = text_argument(fcinfo, 1);

	/* a cart line with a NULL id is skipped; a NULL quantity counts as 1 */
	InputTable carts("carts query", {{"cart_id", ColumnKind::Int64},
									 {"product_id", ColumnKind::Int64},
									 {"store_id", ColumnKind::Int64},
									 {"quantity", ColumnKind::Int64, true, false, 1}});
	read_inner_query(carts_query, carts, ctx);
	OffersInput input(offers_query, ctx, 1);
	const Offers &offers = input.offers;
	CartLines lines = {carts.int64(0), carts.int64(1), carts.int64(2), carts.int64(3)};
	std::vector<CartImprovement> improvements = improve_carts(lines, offers, ctx, input.streamer.get());

	ResultWriter out(fcinfo, ctx, "improve_carts");
	for (const CartImprovement &line : improvements)
	{
		Datum values[8];
		bool nulls[8] = {false, false, false, false, true, true, true, true};
		int64 quantity = lines.quantity[line.line];
		values[0] = Int64GetDatum(lines.cart[line.line]);
		values[1] = Int64GetDatum(lines.product[line.line]);
		values[2] = Int64GetDatum(quantity);
		values[3] = Int64GetDatum(lines.store[line.line]);
		if (line.current_row >= 0)
		{
			values[4] = number_as_numeric(offers.price, line.current_row);
			nulls[4] = false;
		}
		if (line.best_row >= 0)
		{
			values[5] = Int64GetDatum(offers.store[line.best_row]);
			values[6] = number_as_numeric(offers.price, line.best_row);
			nulls[5] = nulls[6] = false;
		}
		if (!nulls[4] && !nulls[6])
		{
			/* (current - best) * quantity in numeric, exactly as SQL computes it */
			Datum current = values[4], best = values[6];
			values[7] = pg_call([=] {
				Numeric difference = numeric_sub_opt_error(DatumGetNumeric(current),
														   DatumGetNumeric(best), nullptr);
				return NumericGetDatum(
					numeric_mul_opt_error(difference, int64_to_numeric(quantity), nullptr));
			});
			nulls[7] = false;
		}
		out.put(values, nulls);
	}
	out.finish();
	return (Datum) 0;
}

} // namespace
} // namespace gpurec

GPUREC_SQL_FUNCTION(gpurec_cheapest_offers, gpurec::cheapest_offers_body)
GPUREC_SQL_FUNCTION(gpurec_improve_carts, gpurec::improve_carts_body)
