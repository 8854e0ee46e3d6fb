/*
 * cart_candidates.hpp: the candidates of optimize_carts (carts.hpp), which
 * its files share and nothing else includes: the call's shipping table,
 * and each product's candidate stores after the dominance rule; what the
 * searches (optimize_carts.cpp) are built from.
 *
 * The candidates of a product are its stores, each at the cheapest offer
 * it has for the product (equal prices: the fewest decimals, as
 * cheapest_offers ranks them).  A candidate is dropped when no optimum can
 * use it, by this dominance rule: with fee(s) the fee of store s (0 without
 * shipping), a candidate at s of cost c such that
 *     c > fee(s) + min over the product's other stores t of (c_t + fee(t))
 * is never optimal: moving the product from s to the t of that minimum
 * saves c - c_t in items, and shipping can rise by at most fee(t) (t was
 * unused, or its threshold is lost) plus fee(s) (s loses its threshold),
 * so the move is strictly cheaper, whatever the other products do and
 * whatever the signs of the prices.  Since c and c_t scale with the
 * quantity and the fees do not, a candidate dropped at quantity 1 is
 * dropped at every quantity: the rule runs once per product at quantity 1,
 * then again per cart at the cart's quantity.
 */
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "carts.hpp"
#include "device.hpp"
#include "marketplace.hpp"
#include "number_column.hpp"

namespace gpurec {

/*
 * The column must be exact: integers or numeric; else ERROR 42804, ordered
 * (kExactCheck, place): its place among the columns checked (price 0, fee
 * 1, free_from 2).
 */
void require_exact(const NumberColumn &column, int64_t place);

/* A finite row's value x 10^scale (scale >= the column's); false for NaN and infinities. */
bool units_of(const NumberColumn &column, size_t row, int scale, __int128 *units);

/*
 * A product's flags in `needed`: some cart holds it; and some line of it
 * names a current store, whose best offer the answer looks up in the
 * product's rows sorted by store (ProductOffers::best_row_at).
 */
constexpr uint8_t kNeeded = 1, kNeededByStore = 2;

/* A store's shipping, in units. */
struct StoreShipping
{
	int64_t fee;
	int64_t free_from; /* kNeverFree, kAlwaysFree or a threshold within +-2^62 */
	int16_t fee_display_scale;
};

struct ShippingTable
{
	KeyIndex index{0}; /* store id -> its shipping row */
	std::vector<StoreShipping> rows;

	/* The store's shipping, or null: it ships free. */
	const StoreShipping *find(int64_t store) const
	{
		int32_t r = index.find(store);
		return r < 0 ? nullptr : &rows[r];
	}
};

/*
 * The call's shipping in units at `scale`, each row checked: a store
 * listed once, a fee finite, >= 0 and summable, a free_from not NaN.
 */
ShippingTable read_shipping(const Shipping &shipping, int scale, const CallKeys *keys);

/* One store's best offer of a product: a candidate before costs. */
struct ProductOffer
{
	int64_t store;
	int64_t unit; /* price in units, clamped to +-(kMaxUnits + 1) */
	int64_t fee;  /* the store's fee, 0 without shipping */
	uint32_t row;
};

/*
 * Per product code of the offers that some cart holds: its candidates
 * after the dominance rule at quantity 1, cheapest first; and where a line
 * names a current store (kNeededByStore), its offer rows sorted by (store,
 * price, decimals, row), so that a store's best offer is the first of its
 * run.
 */
struct ProductOffers
{
	std::vector<int32_t> slot_of; /* per code: its place among the sorted products, or -1 */
	std::vector<int64_t> row_offsets; /* per slot */
	std::vector<uint32_t> rows;
	std::vector<int64_t> kept_offsets; /* per code */
	std::vector<ProductOffer> kept;

	/* The best offer of code at store, or -1. */
	int64_t best_row_at(const Offers &offers, int32_t code, int64_t store) const
	{
		int32_t slot = slot_of[code];
		auto begin = rows.begin() + row_offsets[slot], end = rows.begin() + row_offsets[slot + 1];
		auto it = std::lower_bound(begin, end, store,
								   [&](uint32_t row, int64_t s) { return offers.store[row] < s; });
		return it != end && offers.store[*it] == store ? static_cast<int64_t>(*it) : -1;
	}
};

/*
 * Drops the candidates of [candidates, candidates + n) that the dominance
 * rule (above) excludes, given their costs; keeps the order of the rest,
 * and returns how many are left.
 */
template <typename Candidate, typename CostOf> size_t drop_dominated(Candidate *candidates, size_t n, CostOf cost_of)
{
	if (n < 2)
		return n;
	/* the two least cost + fee, to take the minimum over the other stores of each */
	size_t best = 0;
	for (size_t i = 1; i < n; ++i)
		if (cost_of(candidates[i]) + candidates[i].fee < cost_of(candidates[best]) + candidates[best].fee)
			best = i;
	__int128 second = -1;
	bool has_second = false;
	for (size_t i = 0; i < n; ++i)
		if (i != best && (!has_second || cost_of(candidates[i]) + candidates[i].fee < second))
		{
			second = cost_of(candidates[i]) + candidates[i].fee;
			has_second = true;
		}
	__int128 best_value = cost_of(candidates[best]) + candidates[best].fee;
	size_t kept = 0;
	for (size_t i = 0; i < n; ++i)
	{
		__int128 others = i == best ? second : best_value;
		if ((__int128) cost_of(candidates[i]) <= candidates[i].fee + others)
			candidates[kept++] = candidates[i];
	}
	return kept;
}

/*
 * The candidates of every product flagged in `needed` (per product code of
 * the offers: kNeeded, kNeededByStore), at quantity 1, in units at `scale`.
 */
ProductOffers product_offers(const Offers &offers, std::vector<uint8_t> needed, int scale,
							 const ShippingTable &shipping, ExecContext &ctx);

} // namespace gpurec
