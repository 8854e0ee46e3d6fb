/*
 * pg_carts.cpp: the SQL entry point of optimize_carts, the cheapest whole
 * cart with shipping: reads its three inner queries, runs the engine
 * (carts.hpp) and writes a row per cart line.
 */
#include "pg_boundary.hpp"

#include <algorithm>

extern "C" {
#include "utils/memutils.h"
#include "utils/numeric.h"
}

#include "cart_shards.hpp"
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
 * optimize_carts' rows: for optimize_carts, and for
 * gpurec_shards.optimize_carts the partitions' rows merged.
 */
class OptimizedLinesWriter
{
  public:
	OptimizedLinesWriter(FunctionCallInfo fcinfo, ExecContext &ctx, const char *function)
		: out_(fcinfo, ctx, function), cart_id_(out_, 0, ctx, "cart_id"), product_id_(out_, 1, ctx, "product_id"),
		  store_id_(out_, 3, ctx, "store_id")
	{
		cart_memory_ = pg_call([] {
			return AllocSetContextCreate(CurrentMemoryContext, "gpurec cart totals", ALLOCSET_SMALL_SIZES);
		});
		out_.build_rows_in_own_memory(); /* each line's numeric price */
	}

	/* A row, its price a row of `prices`. */
	void put(const OptimizedLine &line, const NumberColumn &prices)
	{
		Datum values[11];
		bool nulls[11] = {false, false, false, true, true, false, false, false, false, true, true};
		values[0] = cart_id_(line.cart_id);
		values[1] = product_id_(line.product_id);
		values[2] = Int64GetDatum(line.quantity);
		if (line.price >= 0)
		{
			values[3] = store_id_(line.store_id);
			values[4] = number_as_numeric(prices, static_cast<size_t>(line.price));
			nulls[3] = nulls[4] = false;
		}
		const CartTotals &totals = totals_of(line);
		values[5] = totals.total;
		values[6] = totals.shipping;
		values[7] = Int32GetDatum(line.stores_used);
		values[8] = BoolGetDatum(line.complete);
		if (line.has_current)
		{
			values[9] = totals.current_total;
			values[10] = totals.savings;
			nulls[9] = nulls[10] = false;
		}
		out_.put(values, nulls);
	}
	void finish() { out_.finish(); }

  private:
	/*
	 * The numerics every line of a cart repeats, built once a cart (in
	 * cart_memory_, emptied for the next cart's; it goes with the call's
	 * memory, as the row memory does), where building them for each line
	 * was most of the rows' numerics.
	 */
	struct CartTotals
	{
		/* what they were built from */
		bool built = false;
		int scale = 0;
		bool has_current = false;
		Amount total_amount, shipping_amount, current_amount;
		Datum total = 0, shipping = 0, current_total = 0, savings = 0;
	};
	static bool same_amount(const Amount &a, const Amount &b)
	{
		return a.units == b.units && a.display_scale == b.display_scale;
	}
	const CartTotals &totals_of(const OptimizedLine &line)
	{
		CartTotals &t = totals_;
		if (t.built && t.scale == line.scale && t.has_current == line.has_current &&
			same_amount(t.total_amount, line.total) && same_amount(t.shipping_amount, line.shipping) &&
			(!line.has_current || same_amount(t.current_amount, line.current_total)))
			return t;
		MemoryContext cart_memory = cart_memory_;
		MemoryContext rows = pg_call([cart_memory] {
			MemoryContextReset(cart_memory);
			return MemoryContextSwitchTo(cart_memory);
		});
		t.built = false;
		t.total = units_as_numeric(line.total.units, line.scale, line.total.display_scale);
		t.shipping = units_as_numeric(line.shipping.units, line.scale, line.shipping.display_scale);
		if (line.has_current)
		{
			t.current_total = units_as_numeric(line.current_total.units, line.scale, line.current_total.display_scale);
			/* both within +-2^62: their difference fits */
			t.savings = units_as_numeric(line.current_total.units - line.total.units, line.scale,
										 std::max(line.current_total.display_scale, line.total.display_scale));
		}
		MemoryContextSwitchTo(rows);
		t.built = true;
		t.scale = line.scale;
		t.has_current = line.has_current;
		t.total_amount = line.total;
		t.shipping_amount = line.shipping;
		t.current_amount = line.current_total;
		return t;
	}

	ResultWriter out_;
	ResultIds cart_id_, product_id_, store_id_;
	MemoryContext cart_memory_ = nullptr;
	CartTotals totals_;
};

/* A NULL store skips the row; a NULL fee is an error; a NULL (or absent) free_from is never free. */
InputTable shipping_input()
{
	return InputTable("shipping query", {id_spec("store_id"),
										 {"fee", ColumnKind::Number, false, true, 0, true},
										 {"free_from", ColumnKind::Number, true, false, kFallbackInfinity}});
}

/*
 * optimize_carts' lines: a line with a NULL cart or product is skipped; a
 * NULL quantity counts as 1; a NULL (or absent) store_id is no current
 * store.
 */
InputTable optimize_carts_lines(const char *carts_query, ExecContext &ctx)
{
	InputTable carts("carts query", {id_spec("cart_id"),
									 id_spec("product_id"),
									 id_spec("store_id", false, kNoCurrentStore),
									 {"quantity", ColumnKind::Int64, true, false, 1}});
	read_inner_query(carts_query, carts, ctx);
	return carts;
}

/*
 * optimize_carts(carts_query, offers_query, shipping_query), and
 * gpurec_internal._optimize_carts_part(carts_query, offers_parts,
 * shipping_part): on a partition of gpurec_shards, against the offers of
 * the partitions' parts (_offers_part) and the shipping the coordinator
 * read (_shipping_part), its rows as one part (cart_shards.hpp) for
 * _merge_optimize_carts.
 */
Datum optimize_carts_rows(FunctionCallInfo fcinfo, bool of_parts)
{
	ExecContext ctx = exec_context_from_settings();
	InputTable carts = optimize_carts_lines(text_argument(fcinfo, 0), ctx);
	/*
	 * Only the offers of products in some cart count: the others are
	 * dropped as they are read, before their store and price are converted
	 * (with few carts over many products, most of the read).
	 */
	auto carts_products = std::make_shared<const KeyFilter>(carts.int64(1).to_vector());
	OffersInput input(ctx, 0, std::move(carts_products));
	std::unique_ptr<MergedOffers> merged;
	InputTable shipping_table = shipping_input();
	ShardRows shipping_rows_of_part = shipping_rows();
	Int64Column shipping_stores;
	std::unique_ptr<Shipping> shipping;
	if (of_parts)
	{
		merged = merged_offers_argument(fcinfo, 1, ctx);
		ByteSpan bytes = bytea_argument(fcinfo, 2);
		shipping_rows_of_part.append(bytes.data, bytes.size, 0);
		shipping = std::make_unique<Shipping>(
			shipping_of_part(shipping_rows_of_part, shipping_stores, shipping_table.what()));
	}
	else
	{
		read_inner_query(text_argument(fcinfo, 1), input.table, ctx);
		read_inner_query(text_argument(fcinfo, 2), shipping_table, ctx);
		shipping = std::make_unique<Shipping>(
			Shipping{shipping_table.int64(0), shipping_table.number(1), shipping_table.number(2)});
	}

	CartLines lines = {carts.int64(0), carts.int64(1), carts.int64(2), carts.int64(3)};
	const Offers &offers = merged ? merged->offers() : input.offers;
	CartsAnswer answer = optimize_carts(lines, offers, *shipping, ctx);
	if (!of_parts)
	{
		OptimizedLinesWriter out(fcinfo, ctx, "optimize_carts");
		for (const CartAnswer &cart : answer.carts)
			for (size_t l = cart.first_line; l < cart.end_line; ++l)
				out.put(optimized_line(lines, answer, cart, l, offers), offers.price);
		out.finish();
		return (Datum) 0;
	}
	require_integer_cart_ids(ctx);
	Stopwatch clock;
	Datum part = shard_rows_result(optimized_lines_part(lines, answer, offers), "optimize_carts");
	ctx.times.output_ms += clock.elapsed_ms();
	report_timing("_optimize_carts_part", ctx);
	return part;
}

Datum optimize_carts_body(FunctionCallInfo fcinfo)
{
	if (answered_null_as_strict(fcinfo, {3})) /* the typed form's id_type */
		return (Datum) 0;
	return optimize_carts_rows(fcinfo, false);
}

Datum optimize_carts_part_body(FunctionCallInfo fcinfo)
{
	return part_or_refusal([fcinfo] { return optimize_carts_rows(fcinfo, true); });
}

/*
 * gpurec_internal._cart_products(carts_query): the distinct (cart_id,
 * product_id) of the lines optimize_carts reads from carts_query, for
 * gpurec_shards' coordinator to refuse a cart two partitions hold and to
 * ask every partition for its products' offers.
 */
Datum cart_products_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	InputTable carts = optimize_carts_lines(text_argument(fcinfo, 0), ctx);
	require_integer_cart_ids(ctx);
	return distinct_pairs_result(fcinfo, carts.int64(0), carts.int64(1));
}

/*
 * gpurec_internal._shipping_part(shipping_query): the shipping query read
 * as optimize_carts reads it, as one part for every partition of
 * gpurec_shards.optimize_carts (_optimize_carts_part): fee and free_from
 * in their own types with every digit.
 */
Datum shipping_part_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	InputTable shipping_table = shipping_input();
	read_inner_query(text_argument(fcinfo, 0), shipping_table, ctx);
	require_integer_cart_ids(ctx);
	Stopwatch clock;
	Datum part = shard_rows_result(
		shipping_part({shipping_table.int64(0), shipping_table.number(1), shipping_table.number(2)}), "shipping");
	ctx.times.output_ms += clock.elapsed_ms();
	report_timing("_shipping_part", ctx);
	return part;
}

/*
 * gpurec_internal._merge_optimize_carts(parts): gpurec_shards.optimize_carts
 * on the coordinator, the partitions' parts (in partition order) merged
 * into the rows one server holding every cart gives.
 */
Datum merge_optimize_carts_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	ShardRows parts = optimized_lines_rows();
	Stopwatch clock;
	append_parts_argument(parts, fcinfo, 0, "parts");
	ctx.times.read_ms += clock.elapsed_ms();
	MergedOptimizedLines merged = merge_optimized_lines(parts);
	OptimizedLinesWriter out(fcinfo, ctx, "_merge_optimize_carts");
	for (const OptimizedLine &line : merged.lines)
		out.put(line, merged.prices);
	out.finish();
	return (Datum) 0;
}

} // namespace
} // namespace gpurec

GPUREC_SQL_FUNCTION(gpurec_optimize_carts, gpurec::optimize_carts_body)
GPUREC_PARTITION_FUNCTION(gpurec_optimize_carts_part, gpurec::optimize_carts_part_body)
GPUREC_PARTITION_FUNCTION(gpurec_cart_products, gpurec::cart_products_body)
GPUREC_SQL_FUNCTION(gpurec_shipping_part, gpurec::shipping_part_body)
GPUREC_SQL_FUNCTION(gpurec_merge_optimize_carts, gpurec::merge_optimize_carts_body)
