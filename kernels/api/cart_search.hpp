/*
 * cart_search.hpp: the exact search of optimize_carts, one cart at a time,
 * the very same code on the CPU's threads and in the GPU kernel (plain
 * functions that nvcc compiles for both sides), so that both devices take
 * the same steps and return the same assignment.
 *
 * A cart is a set of products (lines of one product already merged into one
 * demand), each with its candidates: a store that offers it and the cost
 * there (price x quantity, an integer at the call's common decimal scale).
 * The cost of an assignment of every product to one of its candidates is
 * the sum of its candidates' costs plus, for every store used, its fee,
 * unless the store's free_from is reached by the subtotal of the products
 * assigned to it.  The search returns the assignment of least cost; among
 * those, the fewest stores; among those, the lexicographically smallest
 * vector of store ids taken in product_id order (stores are numbered by
 * ascending id within a cart, so comparing their numbers compares ids).
 * That order is total, so the answer is unique, whatever order the search
 * visits assignments in.
 *
 * The search is a depth-first branch and bound over the products, in an
 * order the host chooses (fewest candidates first), candidates cheapest
 * first.  Its lower bound of a node: the costs so far, plus the fee of
 * every store used whose free_from can no longer be reached (its subtotal
 * plus the positive costs it could still receive, its "potential", is
 * below free_from), plus for each product not yet assigned the least of
 * cost + share over its candidates, where share is 0 at a store already
 * used and otherwise the store's share (CartArrays::store_share): a store
 * not yet used that can never be free costs its fee once it is used, and
 * at most as many products as offer it can split it.  A node is cut when that bound exceeds the best cost found, or
 * equals it with more stores already used; never on equality alone, since
 * an assignment of equal cost may win the tie.  The first assignment
 * assignment to beat at first is a greedy one: each product in turn at the
 * candidate of least cost plus the fee of a store it would open.
 *
 * Worst case: every assignment, the product of the candidate counts, each
 * step O(candidates of one product).  Candidates that no optimum can use
 * are removed before (the host's dominance rule, cart_candidates.hpp),
 * which in practice leaves few.
 *
 * The state is fixed in size (no recursion, no heap): CartSearchState per
 * cart plus three arrays per store of the cart, which the caller provides.
 * A search can stop after a number of steps and resume later (the CPU
 * checks for a cancel between runs of steps; the GPU searches each cart at
 * most a number of steps and leaves the longer searches to the CPU).
 */
#pragma once

#include <cstdint>

#include "host_device.hpp"

namespace gpurec::carts {

/* The most products one cart's search takes (the limit of optimize_carts). */
constexpr int kMaxCartProducts = 32;
/*
 * The largest |cost| of a candidate and the largest fee, in units of the
 * common scale: then the at most 32 costs and 32 fees of an assignment, a
 * store's subtotal plus its potential, and every bound below stay within
 * +-2^62, far from int64's limits.
 */
constexpr int64_t kMaxUnits = int64_t(1) << 56;
/* free_from of a store whose shipping is never free, and always free. */
constexpr int64_t kNeverFree = INT64_MAX;
constexpr int64_t kAlwaysFree = INT64_MIN;

/*
 * Every cart of a batch, in compressed rows (host arrays, or their copies on
 * the GPU: the same layout).  Cart c's products are [cart_products[c],
 * cart_products[c + 1]) in search order; product i's candidates are
 * [product_candidates[i], product_candidates[i + 1]), cheapest first (equal
 * costs: lower store number first); cart c's stores are [cart_stores[c],
 * cart_stores[c + 1]) in ascending id, and a candidate names its store by
 * its number within the cart.
 */
struct CartArrays
{
	int64_t n_carts = 0;
	const int64_t *cart_products = nullptr;
	const int64_t *product_candidates = nullptr;
	const int32_t *product_rank = nullptr; /* the product's place in its cart, by product_id */
	const int32_t *candidate_store = nullptr;
	const int64_t *candidate_cost = nullptr;
	const int64_t *cart_stores = nullptr;
	const int64_t *store_fee = nullptr;		  /* 0 for a store without shipping */
	const int64_t *store_free_from = nullptr; /* kNeverFree, kAlwaysFree, or the threshold */
	/*
	 * A share of the fee that each product the store serves surely pays
	 * while the store is not yet used: floor(fee / the cart's products it
	 * offers) when the store can never become free in this cart (free_from
	 * never, or above every positive cost it could receive), else 0.
	 */
	const int64_t *store_share = nullptr;
};

/* The per-store arrays of one cart (cart_stores[c + 1] - cart_stores[c] of each). */
struct CartStoreScratch
{
	int64_t *subtotal;
	int64_t *potential; /* positive costs that unassigned products could still bring */
	int32_t *uses;		/* products assigned to the store */
};

struct CartSearchState
{
	int32_t n_products;
	int32_t depth;
	int32_t finished;
	int32_t stores_used;
	int64_t items;		   /* costs of the products assigned */
	int64_t shipping;	   /* shipping of the stores used, as things stand */
	int64_t certain_fees;  /* fees of stores used that can no longer become free */
	int64_t best_total;	   /* INT64_MAX until the first complete assignment */
	int32_t best_stores;
	int32_t choice[kMaxCartProducts];	   /* per depth: the candidate tried (its index in the product's list), -1 none */
	int32_t best_choice[kMaxCartProducts]; /* per depth */
	int8_t depth_of_rank[kMaxCartProducts];
	int64_t fees_at_entry[kMaxCartProducts];  /* certain_fees when the depth was entered */
	int64_t rest_min[kMaxCartProducts + 1];	  /* sum of the cheapest costs of depths d .. n - 1 */
	int64_t steps;
};

namespace detail {

GPUREC_HOST_DEVICE int64_t store_shipping(const CartArrays &a, int64_t first_store, const CartStoreScratch &s, int32_t k)
{
	return s.uses[k] > 0 && s.subtotal[k] < a.store_free_from[first_store + k] ? a.store_fee[first_store + k] : 0;
}

GPUREC_HOST_DEVICE int64_t store_certain_fee(const CartArrays &a, int64_t first_store, const CartStoreScratch &s,
											 int32_t k)
{
	return s.uses[k] > 0 && s.subtotal[k] + s.potential[k] < a.store_free_from[first_store + k]
			   ? a.store_fee[first_store + k]
			   : 0;
}

/* Adds cost (sign +1) or takes it back (-1) at store k, keeping the totals. */
GPUREC_HOST_DEVICE void move_at_store(const CartArrays &a, int64_t first_store, const CartStoreScratch &s,
									  CartSearchState &st, int32_t k, int64_t cost, int sign)
{
	int64_t ship_before = store_shipping(a, first_store, s, k);
	int64_t certain_before = store_certain_fee(a, first_store, s, k);
	if (sign > 0)
	{
		if (s.uses[k]++ == 0)
			++st.stores_used;
		s.subtotal[k] += cost;
		st.items += cost;
	}
	else
	{
		if (--s.uses[k] == 0)
			--st.stores_used;
		s.subtotal[k] -= cost;
		st.items -= cost;
	}
	st.shipping += store_shipping(a, first_store, s, k) - ship_before;
	st.certain_fees += store_certain_fee(a, first_store, s, k) - certain_before;
}

/* Takes the product's positive costs out of (sign -1) or back into (+1) its stores' potentials. */
GPUREC_HOST_DEVICE void move_potential(const CartArrays &a, int64_t first_store, const CartStoreScratch &s,
									   CartSearchState &st, int64_t product, int sign)
{
	for (int64_t j = a.product_candidates[product]; j < a.product_candidates[product + 1]; ++j)
	{
		int64_t cost = a.candidate_cost[j];
		if (cost <= 0)
			continue;
		int32_t k = a.candidate_store[j];
		int64_t certain_before = store_certain_fee(a, first_store, s, k);
		s.potential[k] += sign > 0 ? cost : -cost;
		st.certain_fees += store_certain_fee(a, first_store, s, k) - certain_before;
	}
}

/* Whether the assignment now in st.choice beats the best one: fewer stores, then smaller store numbers by rank. */
GPUREC_HOST_DEVICE bool wins_tie(const CartArrays &a, int64_t first_product, const CartSearchState &st)
{
	if (st.stores_used != st.best_stores)
		return st.stores_used < st.best_stores;
	for (int32_t r = 0; r < st.n_products; ++r)
	{
		int32_t d = st.depth_of_rank[r];
		int64_t base = a.product_candidates[first_product + d];
		int32_t now = a.candidate_store[base + st.choice[d]];
		int32_t best = a.candidate_store[base + st.best_choice[d]];
		if (now != best)
			return now < best;
	}
	return false;
}

/* The least that products of depths d .. n - 1 can still cost, shares of fees included. */
GPUREC_HOST_DEVICE int64_t rest_bound(const CartArrays &a, int64_t first_product, int64_t first_store,
									  const CartStoreScratch &s, int32_t d, int32_t n)
{
	int64_t sum = 0;
	for (int32_t q = d; q < n; ++q)
	{
		int64_t begin = a.product_candidates[first_product + q], end = a.product_candidates[first_product + q + 1];
		int64_t least = INT64_MAX;
		/* cheapest first, shares >= 0: no later candidate beats `least` once its cost alone does not */
		for (int64_t j = begin; j < end && a.candidate_cost[j] < least; ++j)
		{
			int32_t k = a.candidate_store[j];
			int64_t value = a.candidate_cost[j] + (s.uses[k] > 0 ? 0 : a.store_share[first_store + k]);
			if (value < least)
				least = value;
		}
		sum += least;
	}
	return sum;
}

} // namespace detail

/* Starts the search of cart c: st and the cart's store arrays set up. */
GPUREC_HOST_DEVICE void cart_search_start(const CartArrays &a, int64_t c, CartSearchState &st,
										  const CartStoreScratch &s)
{
	int64_t first_product = a.cart_products[c];
	int32_t n = static_cast<int32_t>(a.cart_products[c + 1] - first_product);
	int32_t n_stores = static_cast<int32_t>(a.cart_stores[c + 1] - a.cart_stores[c]);
	st.n_products = n;
	st.depth = 0;
	st.finished = n == 0;
	st.stores_used = 0;
	st.items = st.shipping = st.certain_fees = 0;
	st.best_total = INT64_MAX;
	st.best_stores = INT32_MAX;
	st.steps = 0;
	for (int32_t k = 0; k < n_stores; ++k)
	{
		s.subtotal[k] = 0;
		s.potential[k] = 0;
		s.uses[k] = 0;
	}
	st.rest_min[n] = 0;
	for (int32_t d = n - 1; d >= 0; --d)
	{
		int64_t product = first_product + d;
		st.choice[d] = -1;
		st.best_choice[d] = 0;
		st.depth_of_rank[a.product_rank[product]] = static_cast<int8_t>(d);
		/* candidates are cheapest first */
		st.rest_min[d] = st.rest_min[d + 1] + a.candidate_cost[a.product_candidates[product]];
		for (int64_t j = a.product_candidates[product]; j < a.product_candidates[product + 1]; ++j)
			if (a.candidate_cost[j] > 0)
				s.potential[a.candidate_store[j]] += a.candidate_cost[j];
	}

	/* the first assignment to beat: greedy, opening a store counted at its fee */
	int64_t first_store = a.cart_stores[c];
	for (int32_t d = 0; d < n; ++d)
	{
		int64_t product = first_product + d, begin = a.product_candidates[product];
		int32_t n_candidates = static_cast<int32_t>(a.product_candidates[product + 1] - begin);
		int32_t pick = 0;
		int64_t pick_value = INT64_MAX;
		for (int32_t j = 0; j < n_candidates; ++j)
		{
			int32_t k = a.candidate_store[begin + j];
			int64_t value = a.candidate_cost[begin + j] + (s.uses[k] > 0 ? 0 : a.store_fee[first_store + k]);
			if (value < pick_value)
			{
				pick_value = value;
				pick = j;
			}
		}
		detail::move_potential(a, first_store, s, st, product, -1);
		detail::move_at_store(a, first_store, s, st, a.candidate_store[begin + pick], a.candidate_cost[begin + pick], +1);
		st.choice[d] = pick;
	}
	if (n > 0)
	{
		st.best_total = st.items + st.shipping;
		st.best_stores = st.stores_used;
	}
	for (int32_t d = n - 1; d >= 0; --d)
	{
		int64_t product = first_product + d, begin = a.product_candidates[product];
		detail::move_at_store(a, first_store, s, st, a.candidate_store[begin + st.choice[d]],
							  a.candidate_cost[begin + st.choice[d]], -1);
		detail::move_potential(a, first_store, s, st, product, +1);
		st.best_choice[d] = st.choice[d];
		st.choice[d] = -1;
	}
}

/*
 * Runs the search of cart c for at most max_steps steps; true once it has
 * finished (st.best_choice then holds the answer, by depth).
 */
GPUREC_HOST_DEVICE bool cart_search_run(const CartArrays &a, int64_t c, CartSearchState &st,
										const CartStoreScratch &s, int64_t max_steps)
{
	int64_t first_product = a.cart_products[c];
	int64_t first_store = a.cart_stores[c];
	int32_t n = st.n_products;
	for (int64_t step = 0; step < max_steps && !st.finished; ++step)
	{
		++st.steps;
		if (st.depth == n)
		{
			/* a complete assignment: its cost is exact here */
			int64_t total = st.items + st.shipping;
			if (total < st.best_total || (total == st.best_total && detail::wins_tie(a, first_product, st)))
			{
				st.best_total = total;
				st.best_stores = st.stores_used;
				for (int32_t d = 0; d < n; ++d)
					st.best_choice[d] = st.choice[d];
			}
			--st.depth;
			continue;
		}
		int32_t d = st.depth;
		int64_t product = first_product + d;
		int64_t begin = a.product_candidates[product];
		int32_t n_candidates = static_cast<int32_t>(a.product_candidates[product + 1] - begin);
		int32_t j = st.choice[d];
		if (j < 0)
		{
			/* entering: fees certain now stay certain below, wherever this product goes */
			st.fees_at_entry[d] = st.certain_fees;
			detail::move_potential(a, first_store, s, st, product, -1);
		}
		else
			detail::move_at_store(a, first_store, s, st, a.candidate_store[begin + j], a.candidate_cost[begin + j], -1);
		bool descended = false;
		for (++j; j < n_candidates; ++j)
		{
			int64_t cost = a.candidate_cost[begin + j];
			/* candidates are cheapest first: once this bound fails, it fails for the rest */
			if (st.items + cost + st.rest_min[d + 1] + st.fees_at_entry[d] > st.best_total)
				break;
			int32_t k = a.candidate_store[begin + j];
			detail::move_at_store(a, first_store, s, st, k, cost, +1);
			int64_t bound = st.items + st.certain_fees + detail::rest_bound(a, first_product, first_store, s, d + 1, n);
			if (bound > st.best_total || (bound == st.best_total && st.stores_used > st.best_stores))
			{
				detail::move_at_store(a, first_store, s, st, k, cost, -1);
				continue;
			}
			st.choice[d] = j;
			++st.depth;
			descended = true;
			break;
		}
		if (!descended)
		{
			detail::move_potential(a, first_store, s, st, product, +1);
			st.choice[d] = -1;
			if (d == 0)
				st.finished = 1;
			else
				--st.depth;
		}
	}
	return st.finished != 0;
}

} // namespace gpurec::carts
