/*
 * pg_marketplace.cpp: SQL entry points of the marketplace family
 * (cheapest_offers, improve_carts, and the two halves of cheapest_offers
 * over shards): each reads its arguments and inner queries, runs the engine
 * (marketplace.hpp) and writes its rows.
 */
#include "pg_boundary.hpp"

extern "C" {
#include "utils/memutils.h"
#include "utils/numeric.h"
}

#include "byte_stream.hpp"
#include "cart_shards.hpp"
#include "marketplace.hpp"
#include "number_column.hpp"
#include "offers_input.hpp"
#include "pg_arguments.hpp"
#include "pg_offer_parts.hpp"
#include "pg_numeric.hpp"
#include "pg_output.hpp"
#include "pg_settings.hpp"
#include "read/read.hpp"

namespace gpurec {

namespace {

/*
 * The ranked offers of products in a given order, one row after another,
 * each row's store and price fetched into the cache some rows before it is
 * written: the offers lie anywhere in the read's columns, and a row's own
 * work (its tuple) is long enough to hide a miss that started earlier, not
 * one it waits for.
 */
class RankedRowsAhead
{
  public:
	static constexpr int kRowsAhead = 16;

	RankedRowsAhead(const Offers &offers, const RankedOffers &ranked, const std::vector<int32_t> &order)
		: offers_(offers), ranked_(ranked), order_(order)
	{
		if (!order_.empty())
			row_ = ranked_.offsets[order_[0]];
		for (int i = 0; i < kRowsAhead; ++i)
			fetch_next();
	}
	/* Once per row written: the row kRowsAhead after it. */
	void fetch_next()
	{
		while (product_ < order_.size() && row_ >= ranked_.offsets[order_[product_] + 1])
			if (++product_ < order_.size())
				row_ = ranked_.offsets[order_[product_]];
		if (product_ == order_.size())
			return;
		uint32_t at = ranked_.rows[row_++];
		__builtin_prefetch(&offers_.store[at]);
		__builtin_prefetch(&offers_.price.keys()[at]);
	}

  private:
	const Offers &offers_;
	const RankedOffers &ranked_;
	const std::vector<int32_t> &order_;
	size_t product_ = 0;
	int64_t row_ = 0;
};

/*
 * The rows of cheapest_offers: every product's ranked offers, products in id
 * order, each with its count of offers (n_offers, per product code).
 */
void write_cheapest_offers(FunctionCallInfo fcinfo, ExecContext &ctx, const char *function, const Offers &offers,
						   const RankedOffers &ranked, const std::vector<int64_t> &n_offers)
{
	ResultWriter out(fcinfo, ctx, function);
	ResultIds product_id(out, 0, ctx, "product_id"), store_id(out, 2, ctx, "store_id");
	std::vector<int32_t> in_id_order = offers.product.codes_in_id_order();
	RankedRowsAhead ahead(offers, ranked, in_id_order);
	out.build_rows_in_own_memory(); /* each row's numeric price */
	for (int32_t code : in_id_order)
	{
		Datum values[5];
		bool nulls[5] = {false, false, false, false, false};
		values[0] = product_id(offers.product.value_of(code));
		values[4] = Int64GetDatum(n_offers[code]);
		for (int64_t r = ranked.offsets[code]; r < ranked.offsets[code + 1]; ++r)
		{
			uint32_t row = ranked.rows[r];
			values[1] = Int32GetDatum(static_cast<int32>(r - ranked.offsets[code] + 1));
			values[2] = store_id(offers.store[row]);
			values[3] = number_as_numeric(offers.price, row);
			out.put(values, nulls);
			ahead.fetch_next();
		}
	}
	out.finish();
}

/*
 * cheapest_offers of all offers from parts that each ranked a share of
 * them (OffersPart, each with .data and .size: a parallel read's
 * processes, or shards), handed to use(offers, ranked, n_offers, beyond),
 * beyond the numeric reach of every part's offers (OffersPart).
 * Prices one read of all the offers could not hold raise ERROR 22003 as
 * that read would, naming the column `price_description`.
 */
template <typename Parts, typename Use>
void rank_merged(const Parts &parts, int k, const std::string &price_description, ExecContext &ctx, Use use)
{
	MergedOffers merged(price_description, ctx.keys);
	Stopwatch clock; /* the parts' rows into one table: still reading them */
	for (const auto &part : parts)
		merged.append_part(part.data, part.size, k);
	merged.settle_keys();
	merged.reach().check(price_description);
	ctx.times.read_ms += clock.elapsed_ms();
	RankedOffers ranked = merge_cheapest_offers(merged, k, ctx);
	use(merged.offers(), ranked, merged.n_offers(), merged.reach());
}

/*
 * cheapest_offers of offers_query, handed to use(offers, ranked, n_offers,
 * beyond): beyond is the reach of the offers merged parts stood for, and
 * empty where offers holds every row.
 * Where the CPU ranks, parallel workers rank their own shares and only
 * their k cheapest travel (InputTable::combine_partials): the answer is
 * then those merged and ranked again.  Uuid or text ids too: each process
 * ranks by their values' order, and its survivors' values travel with
 * them (OffersPart::carry_keys).
 */
template <typename Use> void rank_offers_query(const char *offers_query, int k, ExecContext &ctx, Use use)
{
	PartialRequest partial;
	if (ranks_offers_on_cpu(k, ctx))
		partial = PartialRequest{&cheapest_offers_partial, k};
	OffersInput input(ctx, k, nullptr, partial);
	read_inner_query(offers_query, input.table, ctx);
	if (!input.table.partials().empty())
	{
		rank_merged(input.table.partials(), k, input.offers.price.description(), ctx, use);
		return;
	}
	RankedOffers ranked = cheapest_offers(input.offers, k, ctx, input.streamer.get());
	use(input.offers, ranked, input.offers.product.counts(), NumericReach());
}

Datum cheapest_offers_body(FunctionCallInfo fcinfo)
{
	if (answered_null_as_strict(fcinfo, {2})) /* the typed form's id_type */
		return (Datum) 0;
	ExecContext ctx = exec_context_from_settings();
	const char *offers_query = text_argument(fcinfo, 0);
	int32 k = PG_GETARG_INT32(1);
	check_k(k); /* before the query runs */

	rank_offers_query(offers_query, k, ctx,
					  [&](const Offers &offers, const RankedOffers &ranked, const std::vector<int64_t> &n_offers,
						  const NumericReach &) {
						  write_cheapest_offers(fcinfo, ctx, "cheapest_offers", offers, ranked, n_offers);
					  });
	return (Datum) 0;
}

/*
 * An OffersPart as the bytea a shard returns (`rows` offers, for its
 * message where it is too large).  Packed: the part travels as hex text,
 * and a packed row is a quarter of a flat one.
 */
bytea *part_bytea(const OffersPart &part, size_t rows, const char *function, const char *hint)
{
	ByteWriter counter;
	counter.pack_integers();
	part.serialize(counter);
	size_t size = counter.size();
	if (size > MaxAllocSize - VARHDRSZ)
		throw Error(sqlstate::program_limit_exceeded,
					std::string("a shard's answer to ") + function + " is larger than 1 GB",
					"Its " + std::to_string(rows) + " offers take " + std::to_string(size) + " bytes.", hint);
	bytea *out = new_bytea(size);
	ByteWriter writer(reinterpret_cast<uint8_t *>(VARDATA(out)), size);
	writer.pack_integers();
	part.serialize(writer);
	return out;
}

/*
 * A shard's answer for gpurec_shards.cheapest_offers: its cheapest_offers
 * as one bytea (OffersPart), which the coordinator's _merge_cheapest_offers
 * reads without parsing text row by row.
 */
Datum cheapest_offers_part_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	const char *offers_query = text_argument(fcinfo, 0);
	int32 k = PG_GETARG_INT32(1);
	check_k(k);

	bytea *out = nullptr;
	rank_offers_query(offers_query, k, ctx,
					  [&](const Offers &offers, const RankedOffers &ranked, const std::vector<int64_t> &n_offers,
						  const NumericReach &beyond) {
						  /* a part's ids travel as integers: codes would mean nothing on the coordinator */
						  if (ctx.keys && ctx.keys->codes_values())
							  throw Error(sqlstate::feature_not_supported,
										  "gpurec_shards.cheapest_offers takes integer product and store ids",
										  "A shard's offers query gives uuid or text ids.");
						  Stopwatch clock;
						  out = part_bytea(OffersPart(offers, ranked, n_offers, k, beyond), ranked.rows.size(),
										   "cheapest_offers", "Ask for fewer offers per product (k), or fewer products per call.");
						  ctx.times.output_ms += clock.elapsed_ms();
					  });
	report_timing("_cheapest_offers_part", ctx);
	PG_RETURN_BYTEA_P(out);
}

/*
 * gpurec_shards.cheapest_offers on the coordinator: the shards' parts
 * merged into the rows one server holding all offers gives.
 */
Datum merge_cheapest_offers_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	int32 k = PG_GETARG_INT32(1);
	check_k(k); /* with no parts too: the shards' callers check k before any shard works */

	Stopwatch clock;
	std::vector<ByteSpan> parts = bytea_list_argument(fcinfo, 0, "parts");
	size_t bytes = 0;
	for (const ByteSpan &part : parts)
		bytes += part.size;
	ctx.times.read_ms += clock.elapsed_ms();
	ctx.read_notes = std::to_string(parts.size()) + " shards' parts, " + std::to_string(bytes) + " bytes";
	rank_merged(parts, k, "column \"price\" of the offers query", ctx,
				[&](const Offers &offers, const RankedOffers &ranked, const std::vector<int64_t> &n_offers,
					const NumericReach &) {
					write_cheapest_offers(fcinfo, ctx, "_merge_cheapest_offers", offers, ranked, n_offers);
				});
	return (Datum) 0;
}

/*
 * gpurec_internal._offers_part(offers_query, products, pair_products,
 * pair_stores): a partition's offers that the carts functions' lines
 * depend on (cart_offer_rows: of each of products the cheapest, and the
 * cheapest at each pair's store, or at every store where pair_products is
 * NULL), as one bytea, an OffersPart of k = 1 holding each with a count of
 * 1, for a coordinator that passes the partitions' parts on unread: what
 * gpurec_shards' carts functions send each partition (MergedOffers reads
 * them there, prices in their type with every digit and bit).  The query
 * is read as the one server's call reads it: improve_carts' (pairs given)
 * every offer, optimize_carts' those of the products alone, so that its
 * errors, and the prices one column must hold (NumericReach, checked again
 * on the partitions over every part), are the one server's.  Integer ids
 * only: a dictionary's codes would mean nothing on another server.
 */
Datum offers_part_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	if (null_as_strict(fcinfo, {2, 3}))
		PG_RETURN_NULL();
	const char *offers_query = text_argument(fcinfo, 0);
	std::vector<int64_t> products = int8_list_argument(fcinfo, 1, "products");
	std::unique_ptr<std::vector<std::pair<int64_t, int64_t>>> pairs;
	if (!PG_ARGISNULL(2))
	{
		std::vector<int64_t> pair_products = int8_list_argument(fcinfo, 2, "pair_products");
		std::vector<int64_t> pair_stores = PG_ARGISNULL(3) ? std::vector<int64_t>()
															: int8_list_argument(fcinfo, 3, "pair_stores");
		if (pair_stores.size() != pair_products.size())
			throw Error(sqlstate::invalid_parameter_value, "pair_products and pair_stores differ in length");
		pairs = std::make_unique<std::vector<std::pair<int64_t, int64_t>>>();
		for (size_t i = 0; i < pair_products.size(); ++i)
			pairs->emplace_back(pair_products[i], pair_stores[i]);
	}
	OffersInput input(ctx, 0, pairs ? nullptr : std::make_shared<const KeyFilter>(products));
	read_inner_query(offers_query, input.table, ctx);
	require_integer_cart_ids(ctx);
	Stopwatch clock;
	const Offers &offers = input.offers;
	NumericReach reach;
	reach.add_column(offers.price);
	OffersPart part(1, offers.price.type(), reach);
	std::vector<size_t> rows = cart_offer_rows(offers, products, pairs.get(), ctx);
	for (size_t row : rows)
		part.add_offer(offers.product.value_of(offers.product.code(row)), 1, offers.store[row], offers.price, row);
	bytea *out = part_bytea(part, rows.size(), "the carts functions", "Call for fewer carts at a time.");
	ctx.times.output_ms += clock.elapsed_ms();
	report_timing("_offers_part", ctx);
	PG_RETURN_BYTEA_P(out);
}

/*
 * improve_carts' rows: for improve_carts, and for
 * gpurec_shards.improve_carts the partitions' rows merged.
 */
class ImprovedLinesWriter
{
  public:
	ImprovedLinesWriter(FunctionCallInfo fcinfo, ExecContext &ctx, const char *function)
		: out_(fcinfo, ctx, function), cart_id_(out_, 0, ctx, "cart_id"), product_id_(out_, 1, ctx, "product_id"),
		  current_store_id_(out_, 3, ctx, "store_id"), store_id_(out_, 5, ctx, "store_id")
	{
		out_.build_rows_in_own_memory(); /* three numerics a row */
	}

	/* A row, its current and best prices rows of current_prices and best_prices. */
	void put(const ImprovedLine &line, const NumberColumn &current_prices, const NumberColumn &best_prices)
	{
		Datum values[8];
		bool nulls[8] = {false, false, false, false, true, true, true, true};
		values[0] = cart_id_(line.cart_id);
		values[1] = product_id_(line.product_id);
		values[2] = Int64GetDatum(line.quantity);
		values[3] = current_store_id_(line.current_store_id);
		if (line.current_price >= 0)
		{
			values[4] = number_as_numeric(current_prices, static_cast<size_t>(line.current_price));
			nulls[4] = false;
		}
		if (line.best_price >= 0)
		{
			values[5] = store_id_(line.best_store_id);
			values[6] = number_as_numeric(best_prices, static_cast<size_t>(line.best_price));
			nulls[5] = nulls[6] = false;
		}
		if (!nulls[4] && !nulls[6])
		{
			/* (current - best) * quantity in numeric, exactly as SQL computes it */
			Datum current = values[4], best = values[6];
			int64 quantity = line.quantity;
			values[7] = pg_call([=] {
				Numeric difference = numeric_sub_opt_error(DatumGetNumeric(current),
														   DatumGetNumeric(best), nullptr);
				return NumericGetDatum(
					numeric_mul_opt_error(difference, int64_to_numeric(quantity), nullptr));
			});
			nulls[7] = false;
		}
		out_.put(values, nulls);
	}
	void finish() { out_.finish(); }

  private:
	ResultWriter out_;
	ResultIds cart_id_, product_id_, current_store_id_, store_id_;
};

/* improve_carts' lines: a line with a NULL id is skipped; a NULL quantity counts as 1 */
InputTable improve_carts_lines(const char *carts_query, ExecContext &ctx)
{
	InputTable carts("carts query", {id_spec("cart_id"),
									 id_spec("product_id"),
									 id_spec("store_id"),
									 {"quantity", ColumnKind::Int64, true, false, 1}});
	read_inner_query(carts_query, carts, ctx);
	return carts;
}

/*
 * improve_carts(carts_query, offers_query), and
 * gpurec_internal._improve_carts_part(carts_query, offers_parts): on a
 * partition of gpurec_shards, against the offers of the partitions' parts
 * (_offers_part), its rows as one part (cart_shards.hpp) for
 * _merge_improve_carts.
 */
Datum improve_carts_rows(FunctionCallInfo fcinfo, bool offers_of_parts)
{
	ExecContext ctx = exec_context_from_settings();
	InputTable carts = improve_carts_lines(text_argument(fcinfo, 0), ctx);
	OffersInput input(ctx, 1);
	std::unique_ptr<MergedOffers> merged;
	if (offers_of_parts)
		merged = merged_offers_argument(fcinfo, 1, ctx);
	else
		read_inner_query(text_argument(fcinfo, 1), input.table, ctx);
	const Offers &offers = merged ? merged->offers() : input.offers;
	CartLines lines = {carts.int64(0), carts.int64(1), carts.int64(2), carts.int64(3)};
	std::vector<CartImprovement> improvements =
		improve_carts(lines, offers, ctx, merged ? nullptr : input.streamer.get()); /* a streamer of the query's offers */
	if (!offers_of_parts)
	{
		ImprovedLinesWriter out(fcinfo, ctx, "improve_carts");
		for (const CartImprovement &improvement : improvements)
			out.put(improved_line(lines, improvement, offers), offers.price, offers.price);
		out.finish();
		return (Datum) 0;
	}
	require_integer_cart_ids(ctx);
	Stopwatch clock;
	Datum part = shard_rows_result(improved_lines_part(lines, improvements, offers), "improve_carts");
	ctx.times.output_ms += clock.elapsed_ms();
	report_timing("_improve_carts_part", ctx);
	return part;
}

Datum improve_carts_body(FunctionCallInfo fcinfo)
{
	if (answered_null_as_strict(fcinfo, {2})) /* the typed form's id_type */
		return (Datum) 0;
	return improve_carts_rows(fcinfo, false);
}

Datum improve_carts_part_body(FunctionCallInfo fcinfo)
{
	return part_or_refusal([fcinfo] { return improve_carts_rows(fcinfo, true); });
}

/*
 * gpurec_internal._cart_pairs(carts_query): the distinct (product_id,
 * store_id) of the lines improve_carts reads, for gpurec_shards'
 * coordinator to ask every partition for the offers they depend on.  The
 * lines' own checks (quantities) are _improve_carts_part's, whose
 * refusals the merge compares, as one server's improve_carts checks every
 * line.
 */
Datum cart_pairs_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	InputTable carts = improve_carts_lines(text_argument(fcinfo, 0), ctx);
	require_integer_cart_ids(ctx);
	return distinct_pairs_result(fcinfo, carts.int64(1), carts.int64(2));
}

/*
 * gpurec_internal._merge_improve_carts(parts): gpurec_shards.improve_carts
 * on the coordinator, the partitions' parts (in partition order) merged
 * into the rows one server holding every cart gives.
 */
Datum merge_improve_carts_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	ShardRows parts = improved_lines_rows();
	Stopwatch clock;
	append_parts_argument(parts, fcinfo, 0, "parts");
	ctx.times.read_ms += clock.elapsed_ms();
	MergedImprovedLines merged = merge_improved_lines(parts);
	ImprovedLinesWriter out(fcinfo, ctx, "_merge_improve_carts");
	for (const ImprovedLine &line : merged.lines)
		out.put(line, merged.current_prices, merged.best_prices);
	out.finish();
	return (Datum) 0;
}

} // namespace
} // namespace gpurec

GPUREC_SQL_FUNCTION(gpurec_cheapest_offers, gpurec::cheapest_offers_body)
GPUREC_PARTITION_FUNCTION(gpurec_cheapest_offers_part, gpurec::cheapest_offers_part_body)
GPUREC_SQL_FUNCTION(gpurec_merge_cheapest_offers, gpurec::merge_cheapest_offers_body)
GPUREC_SQL_FUNCTION(gpurec_improve_carts, gpurec::improve_carts_body)
GPUREC_PARTITION_FUNCTION(gpurec_improve_carts_part, gpurec::improve_carts_part_body)
GPUREC_PARTITION_FUNCTION(gpurec_cart_pairs, gpurec::cart_pairs_body)
GPUREC_SQL_FUNCTION(gpurec_merge_improve_carts, gpurec::merge_improve_carts_body)
GPUREC_PARTITION_FUNCTION(gpurec_offers_part, gpurec::offers_part_body)
