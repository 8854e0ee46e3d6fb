/*
 * cart_candidates.cpp: the candidates of optimize_carts (cart_candidates.hpp):
 * the shipping table, and each product's candidates found over all the
 * offers on every core, then kept by the dominance rule.
 */
#include "no_postgres.hpp"

#include "cart_candidates.hpp"

#include <algorithm>
#include <numeric>
#include <optional>
#include <string>

#include "cpu_parallel.hpp"
#include "key_dictionary.hpp"

namespace gpurec {

namespace {

using carts::kMaxUnits;

/* Offer rows between interrupt points of a serial loop. */
constexpr size_t kCheckEvery = size_t(1) << 18;
/* free_from beyond this many units (either sign) is never (always) reached by a subtotal. */
constexpr __int128 kThresholdLimit = (__int128) 1 << 62;

int64_t pow10(int e)
{
	int64_t p = 1;
	while (e-- > 0)
		p *= 10;
	return p;
}

} // namespace

void require_exact(const NumberColumn &column, int64_t place)
{
	if (column.type() == NumberType::Float4 || column.type() == NumberType::Float8)
		throw Error(sqlstate::datatype_mismatch,
					column.description() + " is " +
						(column.type() == NumberType::Float4 ? "real" : "double precision") +
						"; optimize_carts sums prices and fees exactly",
					"Prices, fees and free_from must be of an integer type or numeric.",
					"Cast the column to numeric.")
			.ordered({kExactCheck, place});
}

bool units_of(const NumberColumn &column, size_t row, int scale, __int128 *units)
{
	if (column.type() == NumberType::Numeric && column.display_scale(row) < 0)
		return false;
	*units = (__int128) column.key(row) * pow10(scale - column.scale());
	return true;
}

ShippingTable read_shipping(const Shipping &shipping, int scale, const CallKeys *keys)
{
	ShippingTable table;
	size_t n = shipping.store.size();
	table.index = KeyIndex(n);
	table.rows.resize(n);
	/* the stores in their order, so that a fault names the least store at fault, whatever the rows' order */
	std::vector<uint32_t> order(n);
	std::iota(order.begin(), order.end(), 0u);
	std::sort(order.begin(), order.end(),
			  [&](uint32_t a, uint32_t b) { return shipping.store[a] < shipping.store[b]; });
	for (size_t i = 0; i < n; ++i)
	{
		size_t r = order[i];
		int64_t store = shipping.store[r];
		std::string who = "store " + shown_id(keys, "store_id", store);
		auto at_store = [store](Error error) { return std::move(error).ordered({kShippingCheck, store}); };
		if (i + 1 < n && shipping.store[order[i + 1]] == store)
			throw at_store(Error(sqlstate::cardinality_violation, "the shipping query lists " + who + " more than once",
						"A store has one fee and one free_from."));
		table.index.insert(store, static_cast<int32_t>(r));
		__int128 fee;
		if (!units_of(shipping.fee, r, scale, &fee))
			throw at_store(Error(sqlstate::invalid_parameter_value, "the fee of " + who + " is not a finite number"));
		if (fee < 0)
			throw at_store(Error(sqlstate::invalid_parameter_value, "the fee of " + who + " is negative",
						"A fee must be at least 0."));
		if (fee > kMaxUnits)
			throw at_store(Error(sqlstate::numeric_value_out_of_range, "the fee of " + who + " is too large to sum exactly",
						"optimize_carts sums fees and prices x quantities as 64-bit integers at scale " +
							std::to_string(scale) + "; a fee may be at most 2^56 = 72057594037927936 units there."));
		StoreShipping row{static_cast<int64_t>(fee), carts::kNeverFree, shipping.fee.display_scale(r)};
		const NumberColumn &free_from = shipping.free_from;
		if (free_from.type() == NumberType::Numeric && free_from.display_scale(r) < 0)
		{
			int16_t marker = free_from.display_scale(r);
			if (marker == NumberColumn::kScaleNaN)
				throw at_store(Error(sqlstate::invalid_parameter_value, "the free_from of " + who + " is NaN"));
			row.free_from = marker == NumberColumn::kScalePosInf ? carts::kNeverFree : carts::kAlwaysFree;
		}
		else
		{
			__int128 threshold = 0;
			units_of(free_from, r, scale, &threshold);
			row.free_from = threshold > kThresholdLimit	   ? carts::kNeverFree
							: threshold < -kThresholdLimit ? carts::kAlwaysFree
														   : static_cast<int64_t>(threshold);
		}
		table.rows[r] = row;
	}
	return table;
}

namespace {

/* A price column's rows in units of the call's scale: one multiplication a row. */
class PriceUnits
{
  public:
	PriceUnits(const NumberColumn &price, int scale) : price_(price), factor_(pow10(scale - price.scale())) {}
	/* NaN and the infinities: numeric's markers (floating-point prices are refused before) */
	bool finite(size_t row) const { return price_.display_scale(row) >= 0; }
	/* A finite row's units, clamped to +-(kMaxUnits + 1): any cost past kMaxUnits is an error later. */
	int64_t clamped(size_t row) const
	{
		__int128 unit = (__int128) price_.key(row) * factor_;
		return static_cast<int64_t>(std::max<__int128>(-kMaxUnits - 1, std::min<__int128>(kMaxUnits + 1, unit)));
	}

  private:
	const NumberColumn &price_;
	int64_t factor_;
};

/*
 * Of a product's offers, the least units + fee, and the least over the
 * stores other than that one's: what the dominance rule compares each
 * store's best offer with.  Over a store's offers the least units + fee is
 * its best offer's, so both can be taken over all offers, in any order and
 * in parts (add one summary to another).
 */
struct LeastTwo
{
	static constexpr int64_t kNone = INT64_MAX; /* above any units + fee: at most 2^57 + 1 */
	int64_t least = kNone, least_store = 0;
	int64_t other = kNone, other_store = 0;

	void add(int64_t value, int64_t store)
	{
		if (value < least)
		{
			if (store != least_store)
			{
				other = least;
				other_store = least_store;
			}
			least = value;
			least_store = store;
		}
		else if (store != least_store && value < other)
		{
			other = value;
			other_store = store;
		}
	}
	void add(const LeastTwo &part)
	{
		if (part.least != kNone)
			add(part.least, part.least_store);
		if (part.other != kNone)
			add(part.other, part.other_store);
	}
	/*
	 * Whether the rule can keep an offer of units at store: no other store
	 * to move to, or units at most fee + the least over the other stores.
	 * A store's best offer passes when the rule keeps it; a dearer offer
	 * passes only where its store's best does.
	 */
	bool keeps(int64_t units, int64_t fee, int64_t store) const
	{
		int64_t others = store == least_store ? other : least;
		return others == kNone || units <= fee + others;
	}
};

/* An offer that may be its store's best candidate, and its product's slot. */
struct Passed
{
	int32_t slot;
	ProductOffer offer;
};

/*
 * Items grouped by slot, a counting sort on every core: for_each(slice,
 * visit) calls visit(slot, item) for the items of slice in one order, the
 * same on each of its two calls; a slot's items come out in slice order,
 * and within a slice in that order.  offsets gets n_slots + 1 entries.
 */
template <typename Item, typename ForEach>
void group_by_slot(size_t slices, size_t n_slots, ForEach for_each, std::vector<int64_t> &offsets,
				   std::vector<Item> &items, ExecContext &ctx)
{
	std::vector<int64_t> place(slices * n_slots, 0); /* [slice][slot]: count, then where the next goes */
	parallel_for(slices, ctx, [&](size_t slice, size_t, const std::atomic<bool> &cancelled) {
		int64_t *mine = place.data() + slice * n_slots;
		for_each(slice, cancelled, [&](int32_t slot, const Item &) { ++mine[slot]; });
	});
	offsets.assign(n_slots + 1, 0);
	int64_t total = 0;
	for (size_t slot = 0; slot < n_slots; ++slot)
	{
		offsets[slot] = total;
		for (size_t slice = 0; slice < slices; ++slice)
		{
			int64_t count = place[slice * n_slots + slot];
			place[slice * n_slots + slot] = total;
			total += count;
		}
	}
	offsets[n_slots] = total;
	items.resize(static_cast<size_t>(total));
	parallel_for(slices, ctx, [&](size_t slice, size_t, const std::atomic<bool> &cancelled) {
		int64_t *mine = place.data() + slice * n_slots;
		for_each(slice, cancelled, [&](int32_t slot, const Item &item) { items[static_cast<size_t>(mine[slot]++)] = item; });
	});
}

/*
 * The refusal of an offer whose price is not finite where it is its
 * store's best for a product in some cart (22023), the ids as the call
 * shows them; ordered (kPriceCheck, product, store), for the least to be
 * named wherever several are found.
 */
Error non_finite_price(int64_t product_id, int64_t store_id, const CallKeys *keys)
{
	return Error(sqlstate::invalid_parameter_value,
				 "the price of product " + shown_id(keys, "product_id", product_id) + " at store " +
					 shown_id(keys, "store_id", store_id) + " is not a finite number",
				 "optimize_carts needs a finite price for every offer of a product in a cart.")
		.ordered({kPriceCheck, product_id, store_id});
}

} // namespace

/*
 * Every needed product's candidates.  The offers are read in row order on
 * every core, not product by product: each product's rows lie all over the
 * columns, and reading them product by product waits on memory at every
 * row.  One pass finds each product's LeastTwo and the offers the rule may
 * keep (in this marketplace's data, a few in a hundred).  Only those are
 * grouped by product and sorted, to take each store's best.  A product
 * with a price that is not finite, or with a current store in some line,
 * has all its rows grouped and sorted by store (the error is raised only
 * when such a price is its store's best; the current store's offer is
 * looked up in them).
 */
ProductOffers product_offers(const Offers &offers, std::vector<uint8_t> needed, int scale,
							 const ShippingTable &shipping, ExecContext &ctx)
{
	ProductOffers out;
	size_t n_codes = needed.size();
	size_t n = offers.product.size();
	std::vector<int32_t> slot_of(n_codes, -1);
	std::vector<int32_t> code_of_slot;
	for (size_t code = 0; code < n_codes; ++code)
		if (needed[code])
		{
			slot_of[code] = static_cast<int32_t>(code_of_slot.size());
			code_of_slot.push_back(static_cast<int32_t>(code));
		}
	size_t n_slots = code_of_slot.size();
	/* each slice keeps a LeastTwo and a count per product: at most about kSliceBytes in all */
	constexpr size_t kSliceBytes = size_t(256) << 20;
	size_t slices = std::max<size_t>(1, std::min({parallel_workers(n, ctx), (n + kCheckEvery - 1) / kCheckEvery,
												  kSliceBytes / (std::max<size_t>(n_slots, 1) * sizeof(LeastTwo))}));
	/* visit(slot, row) for the rows of slice whose product has a slot */
	auto rows_of_slice = [&](size_t slice, const std::atomic<bool> &cancelled, auto visit) {
		size_t end = n * (slice + 1) / slices;
		for (size_t row = n * slice / slices; row < end; ++row)
		{
			if ((row & (kCheckEvery - 1)) == 0 && cancelled.load(std::memory_order_relaxed))
				return;
			int32_t slot = slot_of[offers.product.code(row)];
			if (slot >= 0)
				visit(slot, row);
		}
	};
	PriceUnits units(offers.price, scale);
	auto offer_at = [&](size_t row) {
		int64_t store = offers.store[row];
		const StoreShipping *ship = shipping.find(store);
		return ProductOffer{store, units.clamped(row), ship ? ship->fee : 0, static_cast<uint32_t>(row)};
	};

	/*
	 * One pass: each slice's LeastTwo per product, and the offers that
	 * pass the rule's test against it as it stands when they are read.
	 * That LeastTwo holds fewer offers than the whole, so its least over
	 * other stores is never lower: every offer that passes against the
	 * whole passed then, and the few more are dropped after.  A price not
	 * finite marks its product.
	 */
	std::vector<LeastTwo> least(slices * n_slots);
	std::vector<uint8_t> not_finite(slices * n_slots, 0);
	std::vector<std::vector<Passed>> passed(slices);
	parallel_for(slices, ctx, [&](size_t slice, size_t, const std::atomic<bool> &cancelled) {
		LeastTwo *mine = least.data() + slice * n_slots;
		uint8_t *marked = not_finite.data() + slice * n_slots;
		rows_of_slice(slice, cancelled, [&](int32_t slot, size_t row) {
			if (!units.finite(row))
			{
				marked[slot] = 1;
				return;
			}
			ProductOffer offer = offer_at(row);
			mine[slot].add(offer.unit + offer.fee, offer.store);
			if (mine[slot].keeps(offer.unit, offer.fee, offer.store))
				passed[slice].push_back({slot, offer});
		});
	});
	ctx.interrupt_point(Phase::Compute);
	for (size_t slice = 1; slice < slices; ++slice)
		for (size_t slot = 0; slot < n_slots; ++slot)
		{
			least[slot].add(least[slice * n_slots + slot]);
			not_finite[slot] |= not_finite[slice * n_slots + slot];
		}
	/* the products taken row by row: sorted by store */
	std::vector<uint8_t> sorted(n_slots);
	for (size_t slot = 0; slot < n_slots; ++slot)
		sorted[slot] = not_finite[slot] || (needed[code_of_slot[slot]] & kNeededByStore) != 0;

	/* the offers that pass against the whole, by product, in row order */
	std::vector<int64_t> passed_offsets;
	std::vector<ProductOffer> passed_offers;
	group_by_slot(
		slices, n_slots,
		[&](size_t slice, const std::atomic<bool> &, auto visit) {
			for (const Passed &p : passed[slice])
				if (!sorted[p.slot] && least[p.slot].keeps(p.offer.unit, p.offer.fee, p.offer.store))
					visit(p.slot, p.offer);
		},
		passed_offsets, passed_offers, ctx);
	passed = {};
	/* the rows of the products taken whole: a second pass, where there are any */
	if (std::find(sorted.begin(), sorted.end(), 1) == sorted.end())
		out.row_offsets.assign(n_slots + 1, 0);
	else
		group_by_slot(
			slices, n_slots,
			[&](size_t slice, const std::atomic<bool> &cancelled, auto visit) {
				rows_of_slice(slice, cancelled, [&](int32_t slot, size_t row) {
					if (sorted[slot])
						visit(slot, static_cast<uint32_t>(row));
				});
			},
			out.row_offsets, out.rows, ctx);
	ctx.interrupt_point(Phase::Compute);

	/* per range of products on every core: each store's best offer, the dominance rule */
	std::vector<size_t> bounds = split_by_cost(n_slots, 1 << 16, [&](size_t slot) {
		return 1.0 + static_cast<double>(out.row_offsets[slot + 1] - out.row_offsets[slot]) +
			   static_cast<double>(passed_offsets[slot + 1] - passed_offsets[slot]);
	});
	size_t n_ranges = bounds.size() - 1;
	std::vector<std::vector<ProductOffer>> range_kept(n_ranges);
	std::vector<int64_t> kept_count(n_codes, 0);
	const NumberColumn &price = offers.price;
	auto by_store_then_price = [&](uint32_t a, uint32_t b) {
		if (offers.store[a] != offers.store[b])
			return offers.store[a] < offers.store[b];
		if (price.key(a) != price.key(b))
			return price.key(a) < price.key(b);
		if (price.display_scale(a) != price.display_scale(b))
			return price.display_scale(a) < price.display_scale(b);
		return a < b;
	};
	/* each range's least refused (product, store), for non_finite_price */
	std::vector<std::optional<std::pair<int64_t, int64_t>>> refused(n_ranges);
	parallel_for(n_ranges, ctx, [&](size_t range, size_t, const std::atomic<bool> &cancelled) {
		std::vector<ProductOffer> candidates;
		for (size_t slot = bounds[range]; slot < bounds[range + 1] && !cancelled; ++slot)
		{
			int32_t code = code_of_slot[slot];
			candidates.clear();
			if (sorted[slot])
			{
				/* every store's best offer, the first of its run, then the rule */
				uint32_t *begin = out.rows.data() + out.row_offsets[slot];
				uint32_t *end = out.rows.data() + out.row_offsets[slot + 1];
				std::sort(begin, end, by_store_then_price);
				for (uint32_t *at = begin; at != end; ++at)
				{
					uint32_t row = *at;
					if (at != begin && offers.store[at[-1]] == offers.store[row])
						continue;
					if (!units.finite(row))
					{
						/* its least store, as the stores come in order; the least product after the join */
						std::pair<int64_t, int64_t> offer{offers.product.value_of(code), offers.store[row]};
						if (!refused[range] || offer < *refused[range])
							refused[range] = offer;
						candidates.clear();
						break;
					}
					candidates.push_back(offer_at(row));
				}
				candidates.resize(drop_dominated(candidates.data(), candidates.size(),
												 [](const ProductOffer &o) { return o.unit; }));
			}
			else
			{
				/* the offers that passed: each store's best of them is its best of all */
				candidates.assign(passed_offers.begin() + passed_offsets[slot],
								  passed_offers.begin() + passed_offsets[slot + 1]);
				std::sort(candidates.begin(), candidates.end(), [&](const ProductOffer &a, const ProductOffer &b) {
					return by_store_then_price(a.row, b.row);
				});
				candidates.erase(std::unique(candidates.begin(), candidates.end(),
											 [](const ProductOffer &a, const ProductOffer &b) { return a.store == b.store; }),
								 candidates.end());
			}
			std::sort(candidates.begin(), candidates.end(), [](const ProductOffer &a, const ProductOffer &b) {
				return a.unit != b.unit ? a.unit < b.unit : a.store < b.store;
			});
			kept_count[code] = static_cast<int64_t>(candidates.size());
			range_kept[range].insert(range_kept[range].end(), candidates.begin(), candidates.end());
		}
	});
	std::optional<std::pair<int64_t, int64_t>> least_refused;
	for (const auto &offer : refused)
		if (offer && (!least_refused || *offer < *least_refused))
			least_refused = offer;
	if (least_refused)
		throw non_finite_price(least_refused->first, least_refused->second, ctx.keys.get());
	out.kept_offsets.assign(n_codes + 1, 0);
	std::partial_sum(kept_count.begin(), kept_count.end(), out.kept_offsets.begin() + 1);
	out.kept.reserve(out.kept_offsets[n_codes]);
	for (auto &piece : range_kept)
		out.kept.insert(out.kept.end(), piece.begin(), piece.end());
	out.slot_of = std::move(slot_of);
	return out;
}

} // namespace gpurec
