/*
 * cart_shards.cpp: gpurec_shards' parts of the carts family and their merge
 * (see cart_shards.hpp).
 */
#include "no_postgres.hpp"

#include "cart_shards.hpp"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "errors.hpp"

namespace gpurec {

namespace {

/* The columns of each kind's rows, in the order they are put. */
enum ImprovedColumn : size_t
{
	kImprovedCart,
	kImprovedProduct,
	kImprovedQuantity,
	kImprovedCurrentStore,
	kImprovedCurrentPrice,
	kImprovedBestStore,
	kImprovedBestPrice,
	kImprovedColumns
};

enum OptimizedColumn : size_t
{
	kOptimizedCart,
	kOptimizedProduct,
	kOptimizedQuantity,
	kOptimizedStore,
	kOptimizedPrice,
	kOptimizedTotal,
	kOptimizedTotalScale,
	kOptimizedShipping,
	kOptimizedShippingScale,
	kOptimizedStoresUsed,
	kOptimizedComplete,
	kOptimizedHasCurrent,
	kOptimizedCurrentTotal,
	kOptimizedCurrentTotalScale,
	kOptimizedScale,
	kOptimizedColumns
};

enum ShippingColumn : size_t
{
	kShippingStore,
	kShippingFee,
	kShippingFreeFrom,
	kShippingColumns
};

/* A price of a row: row `row` of `prices`, or NULL. */
void put_price(ShardRows &part, const NumberColumn &prices, int64_t row)
{
	if (row < 0)
		part.put_no_number();
	else
		part.put_number(prices, static_cast<size_t>(row));
}

} // namespace

std::vector<size_t> cart_offer_rows(const Offers &offers, const std::vector<int64_t> &products,
									const std::vector<std::pair<int64_t, int64_t>> *pairs, ExecContext &ctx)
{
	const IdColumn &product = offers.product;
	/* whether row a ranks before row b (b < 0: none yet) */
	auto before = [&](size_t a, int64_t b) {
		if (b < 0)
			return true;
		auto r = static_cast<size_t>(b);
		if (offers.price.key(a) != offers.price.key(r))
			return offers.price.key(a) < offers.price.key(r);
		if (offers.store[a] != offers.store[r])
			return offers.store[a] < offers.store[r];
		return offers.price.display_scale(a) < offers.price.display_scale(r);
	};
	std::vector<int64_t> cheapest(product.distinct(), -1);
	std::vector<uint8_t> wanted(product.distinct(), 0);
	for (int64_t id : products)
		if (int32_t code = product.find(id); code >= 0)
			wanted[code] = 1;
	std::unordered_map<std::pair<int32_t, int64_t>, int64_t, ProductStoreHash> at_store;
	if (pairs)
		for (const auto &[id, store] : *pairs)
			if (int32_t code = product.find(id); code >= 0)
				at_store.emplace(std::make_pair(code, store), -1);
	constexpr size_t kCheckEvery = size_t(1) << 18;
	for (size_t row = 0; row < product.size(); ++row)
	{
		if (row % kCheckEvery == 0)
			ctx.interrupt_point(Phase::Compute);
		int32_t code = product.code(row);
		if (!wanted[code])
			continue;
		if (before(row, cheapest[code]))
			cheapest[code] = static_cast<int64_t>(row);
		auto key = std::make_pair(code, offers.store[row]);
		auto it = pairs ? at_store.find(key) : at_store.emplace(key, -1).first;
		if (it != at_store.end() && before(row, it->second))
			it->second = static_cast<int64_t>(row);
	}
	std::vector<size_t> rows;
	for (int64_t row : cheapest)
		if (row >= 0)
			rows.push_back(static_cast<size_t>(row));
	for (const auto &entry : at_store)
		if (entry.second >= 0)
			rows.push_back(static_cast<size_t>(entry.second));
	std::sort(rows.begin(), rows.end());
	rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
	return rows;
}

ImprovedLine improved_line(const CartLines &lines, const CartImprovement &improvement, const Offers &offers)
{
	size_t l = improvement.line;
	int64_t best_store = improvement.best_row >= 0 ? offers.store[static_cast<size_t>(improvement.best_row)] : 0;
	return {lines.cart[l],			  lines.product[l], lines.quantity[l],		lines.store[l],
			improvement.current_row, best_store,	   improvement.best_row};
}

OptimizedLine optimized_line(const CartLines &lines, const CartsAnswer &answer, const CartAnswer &cart, size_t line,
							 const Offers &offers)
{
	const CartAnswerLine &chosen = answer.lines[line];
	int64_t store = chosen.offer_row >= 0 ? offers.store[static_cast<size_t>(chosen.offer_row)] : 0;
	return {cart.cart_id,	 lines.product[chosen.line], lines.quantity[chosen.line],
			store,			 chosen.offer_row,			 cart.total,
			cart.shipping,	 cart.stores_used,			 cart.complete,
			cart.has_current, cart.current_total,		 answer.scale};
}

ShardRows improved_lines_rows()
{
	return ShardRows("improve_carts", kImprovedColumns, {kImprovedCurrentPrice, kImprovedBestPrice});
}

ShardRows optimized_lines_rows() { return ShardRows("optimize_carts", kOptimizedColumns, {kOptimizedPrice}); }

ShardRows improved_lines_part(const CartLines &lines, const std::vector<CartImprovement> &improvements,
							  const Offers &offers)
{
	ShardRows part = improved_lines_rows();
	part.set_number_type(kImprovedCurrentPrice, offers.price.type());
	part.set_number_type(kImprovedBestPrice, offers.price.type());
	for (const CartImprovement &improvement : improvements)
	{
		ImprovedLine line = improved_line(lines, improvement, offers);
		part.put(line.cart_id);
		part.put(line.product_id);
		part.put(line.quantity);
		part.put(line.current_store_id);
		put_price(part, offers.price, line.current_price);
		part.put(line.best_store_id);
		put_price(part, offers.price, line.best_price);
	}
	return part;
}

ShardRows optimized_lines_part(const CartLines &lines, const CartsAnswer &answer, const Offers &offers)
{
	ShardRows part = optimized_lines_rows();
	part.set_number_type(kOptimizedPrice, offers.price.type());
	for (const CartAnswer &cart : answer.carts)
		for (size_t l = cart.first_line; l < cart.end_line; ++l)
		{
			OptimizedLine line = optimized_line(lines, answer, cart, l, offers);
			part.put(line.cart_id);
			part.put(line.product_id);
			part.put(line.quantity);
			part.put(line.store_id);
			put_price(part, offers.price, line.price);
			part.put(line.total.units);
			part.put(static_cast<int64_t>(line.total.display_scale));
			part.put(line.shipping.units);
			part.put(static_cast<int64_t>(line.shipping.display_scale));
			part.put(static_cast<int64_t>(line.stores_used));
			part.put(static_cast<int64_t>(line.complete));
			part.put(static_cast<int64_t>(line.has_current));
			part.put(line.current_total.units);
			part.put(static_cast<int64_t>(line.current_total.display_scale));
			part.put(static_cast<int64_t>(line.scale));
		}
	return part;
}

MergedImprovedLines merge_improved_lines(ShardRows &parts)
{
	parts.sort_rows({kImprovedCart, kImprovedProduct, kImprovedCurrentStore, kImprovedQuantity});
	std::vector<ImprovedLine> lines(parts.rows());
	for (size_t r = 0; r < parts.rows(); ++r)
		lines[r] = {parts.int64(r, kImprovedCart),		  parts.int64(r, kImprovedProduct),
					parts.int64(r, kImprovedQuantity),	  parts.int64(r, kImprovedCurrentStore),
					parts.int64(r, kImprovedCurrentPrice), parts.int64(r, kImprovedBestStore),
					parts.int64(r, kImprovedBestPrice)};
	return {std::move(lines), parts.numbers(kImprovedCurrentPrice), parts.numbers(kImprovedBestPrice)};
}

MergedOptimizedLines merge_optimized_lines(ShardRows &parts)
{
	parts.sort_rows({kOptimizedCart, kOptimizedProduct, kOptimizedQuantity});
	std::vector<OptimizedLine> lines(parts.rows());
	for (size_t r = 0; r < parts.rows(); ++r)
	{
		auto amount = [&](size_t units, size_t scale) {
			int64_t display_scale = parts.int64(r, scale);
			if (display_scale < 0 || display_scale > NumberColumn::kMaxDisplayScale)
				throw Error(sqlstate::invalid_binary_representation, "malformed optimize_carts part",
							"An amount's display scale is out of range. The coordinator and the partitions must run "
							"the same version of gpurec.");
			return Amount{parts.int64(r, units), static_cast<int>(display_scale)};
		};
		int64_t scale = parts.int64(r, kOptimizedScale);
		if (scale < 0 || scale > NumberColumn::kMaxNumericScale)
			throw Error(sqlstate::invalid_binary_representation, "malformed optimize_carts part",
						"Its amounts' scale is out of range. The coordinator and the partitions must run the same "
						"version of gpurec.");
		lines[r] = {parts.int64(r, kOptimizedCart),
					parts.int64(r, kOptimizedProduct),
					parts.int64(r, kOptimizedQuantity),
					parts.int64(r, kOptimizedStore),
					parts.int64(r, kOptimizedPrice),
					amount(kOptimizedTotal, kOptimizedTotalScale),
					amount(kOptimizedShipping, kOptimizedShippingScale),
					static_cast<int32_t>(parts.int64(r, kOptimizedStoresUsed)),
					parts.int64(r, kOptimizedComplete) != 0,
					parts.int64(r, kOptimizedHasCurrent) != 0,
					amount(kOptimizedCurrentTotal, kOptimizedCurrentTotalScale),
					static_cast<int>(scale)};
	}
	return {std::move(lines), parts.numbers(kOptimizedPrice)};
}

ShardRows shipping_rows() { return ShardRows("shipping", kShippingColumns, {kShippingFee, kShippingFreeFrom}); }

ShardRows shipping_part(const Shipping &shipping)
{
	ShardRows part = shipping_rows();
	part.set_number_type(kShippingFee, shipping.fee.type());
	part.set_number_type(kShippingFreeFrom, shipping.free_from.type());
	for (size_t r = 0; r < shipping.store.size(); ++r)
	{
		part.put(shipping.store[r]);
		part.put_number(shipping.fee, r);
		part.put_number(shipping.free_from, r);
	}
	return part;
}

Shipping shipping_of_part(ShardRows &part, Int64Column &stores, const std::string &what)
{
	NumberColumn &fee = part.numbers(kShippingFee), &free_from = part.numbers(kShippingFreeFrom);
	if (fee.size() != part.rows() || free_from.size() != part.rows())
		throw Error(sqlstate::invalid_binary_representation, "malformed shipping part",
					"Its rows and amounts disagree. The coordinator and the partitions must run the same version "
					"of gpurec.");
	for (size_t r = 0; r < part.rows(); ++r)
		stores.push_back(part.int64(r, kShippingStore));
	fee.set_description("column \"fee\" of the " + what);
	free_from.set_description("column \"free_from\" of the " + what);
	return {stores, fee, free_from};
}

} // namespace gpurec
