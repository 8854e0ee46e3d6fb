/*
 * cart_shards.hpp: the carts family of gpurec_shards in the engine: the
 * rows of improve_carts and optimize_carts as a partition sends them (a
 * ShardRows part each, partials.hpp: ids and exact amounts as integers,
 * prices in their own type) and the coordinator's merge of them into the
 * rows one server holding every cart gives.
 *
 * A cart lives on one partition, and every partition answers its carts
 * against the same offers (those of every partition, passed on to each),
 * so a partition's rows are the one server's rows of its carts: the merge
 * concatenates the parts and orders the rows as one server does, each
 * partition's rows of equal keys in the order it gave them.
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "carts.hpp"
#include "marketplace.hpp"
#include "partials.hpp"

namespace gpurec {

/*
 * The rows of a partition's offers that the carts functions' lines depend
 * on, ascending, each once (what gpurec_internal._offers_part sends every
 * partition): of each of `products`, its cheapest offer; and of each pair
 * in `pairs` (a product and a store: improve_carts' current stores), or of
 * every store of those products where `pairs` is null (optimize_carts),
 * that store's cheapest offer of the product.  Cheapest as every ranking
 * of the engine ranks (price, then store, then fewer decimals), so that
 * the partitions' parts hold each answer's offer, whatever the ties.
 */
std::vector<size_t> cart_offer_rows(const Offers &offers, const std::vector<int64_t> &products,
									const std::vector<std::pair<int64_t, int64_t>> *pairs, ExecContext &ctx);

/*
 * A row of improve_carts: a cart line, and its current and best offers as
 * rows of a price column (-1: none; best_store_id is then meaningless).
 */
struct ImprovedLine
{
	int64_t cart_id, product_id, quantity, current_store_id;
	int64_t current_price;
	int64_t best_store_id;
	int64_t best_price;
};

/* improve_carts' row of `improvement` (of `lines`, against `offers`). */
ImprovedLine improved_line(const CartLines &lines, const CartImprovement &improvement, const Offers &offers);

/*
 * A row of optimize_carts: a cart line, the offer chosen for it as a row of
 * a price column (-1: nobody offers the product; store_id is then
 * meaningless), and its cart's answer, every amount at `scale`.
 */
struct OptimizedLine
{
	int64_t cart_id, product_id, quantity, store_id;
	int64_t price;
	Amount total, shipping;
	int32_t stores_used;
	bool complete, has_current;
	Amount current_total;
	int scale;
};

/* optimize_carts' row of answer.lines[line], a line of `cart` (of `lines`, against `offers`). */
OptimizedLine optimized_line(const CartLines &lines, const CartsAnswer &answer, const CartAnswer &cart, size_t line,
							 const Offers &offers);

/* The empty parts of each kind, for a merge to append the partitions' parts to. */
ShardRows improved_lines_rows();
ShardRows optimized_lines_rows();

/* A partition's rows as a part, in their order, the prices in their type (offers.price's). */
ShardRows improved_lines_part(const CartLines &lines, const std::vector<CartImprovement> &improvements,
							  const Offers &offers);
ShardRows optimized_lines_part(const CartLines &lines, const CartsAnswer &answer, const Offers &offers);

/* Merged rows, and the price columns whose rows they name (columns of the merged parts). */
struct MergedImprovedLines
{
	std::vector<ImprovedLine> lines;
	const NumberColumn &current_prices, &best_prices;
};
struct MergedOptimizedLines
{
	std::vector<OptimizedLine> lines;
	const NumberColumn &prices;
};

/*
 * The carts family's merge: the rows of `parts` (every partition's part
 * appended, in partition order) in one server's order, improve_carts' by
 * cart_id, product_id, current_store_id and quantity, optimize_carts' by
 * cart_id, product_id and quantity.
 */
MergedImprovedLines merge_improved_lines(ShardRows &parts);
MergedOptimizedLines merge_optimized_lines(ShardRows &parts);

/*
 * The shipping of optimize_carts as a part, read once on the coordinator
 * and sent to every partition: store_id, fee and free_from, the two
 * amounts in their own types (free_from as the read gave it where the
 * query has none: its stand-in for never free).
 */
ShardRows shipping_rows();
ShardRows shipping_part(const Shipping &shipping);
/*
 * The Shipping of a shipping part (`stores` filled with its stores): its
 * amounts named as the columns of a read of `what` ("shipping query").
 */
Shipping shipping_of_part(ShardRows &part, Int64Column &stores, const std::string &what);

} // namespace gpurec
