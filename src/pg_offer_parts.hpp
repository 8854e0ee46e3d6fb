/*
 * pg_offer_parts.hpp: the offers a partition of gpurec_shards' carts
 * functions receives, as the partitions' parts (gpurec_internal._offers_part,
 * an OffersPart each) in a bytea[] argument, read into one MergedOffers:
 * prices in their type with every digit and bit, as one server reads them;
 * and the carts functions' refusal of ids a part cannot carry.
 */
#pragma once

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "marketplace.hpp"
#include "pg_arguments.hpp"
#include "pg_output.hpp"

namespace gpurec {

/*
 * A part of the carts functions carries integer ids: a dictionary's codes
 * of uuid or text ids would mean nothing on another server (0A000).
 */
inline void require_integer_cart_ids(const ExecContext &ctx)
{
	if (ctx.keys && ctx.keys->codes_values())
		throw Error(sqlstate::feature_not_supported, "gpurec_shards' carts functions take integer ids",
					"A shard's carts or offers query gives uuid or text ids.");
}

/*
 * The distinct (first[i], second[i]) of two columns of a carts query's
 * lines, ascending, as the rows of a function returning two bigints: what
 * gpurec_shards' coordinator asks of every partition's carts
 * (_cart_pairs, _cart_products).
 */
inline Datum distinct_pairs_result(FunctionCallInfo fcinfo, const Int64Column &first, const Int64Column &second)
{
	std::vector<std::pair<int64_t, int64_t>> pairs(first.size());
	for (size_t i = 0; i < pairs.size(); ++i)
		pairs[i] = {first[i], second[i]};
	std::sort(pairs.begin(), pairs.end());
	pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
	ResultWriter out(fcinfo);
	put_bigint_pairs(out, pairs.size(), [&](size_t i) { return pairs[i]; });
	out.finish();
	return (Datum) 0;
}

/*
 * The offers of the parts in bytea[] argument n.  Parts whose prices differ
 * in type: 42804; prices no one column can hold: 22003; bytes that are
 * not a part: 22P03 (MergedOffers::append_part).
 */
inline std::unique_ptr<MergedOffers> merged_offers_argument(FunctionCallInfo fcinfo, int n, ExecContext &ctx)
{
	const char *description = "column \"price\" of the offers query";
	auto merged = std::make_unique<MergedOffers>(description, ctx.keys);
	for (const ByteSpan &part : bytea_list_argument(fcinfo, n, "offers_parts"))
		merged->append_part(part.data, part.size, 1);
	merged->settle_keys();
	merged->reach().check(description);
	return merged;
}

} // namespace gpurec
