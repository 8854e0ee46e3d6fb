/*
 * test_carts.cpp: optimize_carts of the engine (carts.hpp) against brute
 * force written here (every assignment of a cart's products to the stores
 * offering them), on fresh random markets: prices of two decimals with
 * ties, duplicated lines, products nobody offers, stores without shipping,
 * free_from NULL or exactly at a subtotal.  The search itself is also run
 * a step at a time (as the CPU runs it, between checks for a cancel) and
 * must give the same answer; the GPU's bounded searches finish exactly
 * the carts the CPU finishes within the bound, with its choices.  Where a GPU is usable, its answer must equal
 * the CPU's bit for bit; where none is, asking for the GPU must fail.
 * GPUREC_TEST_SEED replays a run.
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "../../src/carts.hpp"
#include "../../src/id_column.hpp"
#include "../../src/number_column.hpp"
#include "cart_answers.hpp"
#include "test_random.hpp"

namespace gpurec {
namespace {

struct Market
{
	IdColumn offer_product;
	Int64Column offer_store;
	NumberColumn offer_price{NumberType::Numeric};
	Int64Column ship_store;
	NumberColumn ship_fee{NumberType::Numeric};
	NumberColumn ship_free_from{NumberType::Numeric}; /* +Infinity: NULL */
	Int64Column cart, product, store, quantity;

	Offers offers() const { return {offer_product, offer_store, offer_price}; }
	Shipping shipping() const { return {ship_store, ship_fee, ship_free_from}; }
	CartLines lines() const { return {cart, product, store, quantity}; }
};

/*
 * Prices, fees and thresholds in cents, numerics of scale 2.  A line names
 * a current store with odds current_in_8 / 8: the engine sorts the offers
 * of such a line's product by store, and takes the others' candidates
 * without sorting all their offers (cart_candidates.cpp, product_offers).
 */
Market random_market(std::mt19937_64 &rng, int n_carts, int max_lines, int n_products, int n_stores,
					 int current_in_8 = 6)
{
	Market m;
	auto draw = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
	std::vector<int64_t> stores;
	for (int s = 0; s < n_stores; ++s)
		stores.push_back(draw(0, 3) == 0 ? -draw(1, 50) : draw(1, 1000));
	std::sort(stores.begin(), stores.end());
	stores.erase(std::unique(stores.begin(), stores.end()), stores.end());
	for (int p = 1; p <= n_products; ++p)
		for (int64_t s : stores)
			if (draw(0, 9) < 6)
				for (int copies = draw(1, 2); copies > 0; --copies)
				{
					m.offer_product.push_back(p);
					m.offer_store.push_back(s);
					m.offer_price.push_numeric(draw(1, 12) * 50, 2); /* few values: ties */
				}
	for (int64_t s : stores)
	{
		if (draw(0, 3) == 0)
			continue; /* ships free */
		m.ship_store.push_back(s);
		m.ship_fee.push_numeric(draw(0, 6) * 50, 2);
		if (draw(0, 2) == 0)
			m.ship_free_from.push_numeric_special(NumberColumn::kScalePosInf);
		else
			m.ship_free_from.push_numeric(draw(1, 16) * 50, 2);
	}
	for (int c = 1; c <= n_carts; ++c)
		for (int l = draw(1, max_lines); l > 0; --l)
		{
			m.cart.push_back(c);
			m.product.push_back(draw(1, n_products + 1)); /* n_products + 1: nobody offers it */
			m.store.push_back(draw(0, 7) >= current_in_8 ? kNoCurrentStore
														 : stores[draw(0, static_cast<int>(stores.size()) - 1)]);
			m.quantity.push_back(draw(1, 3));
		}
	return m;
}

struct Expected
{
	int64_t total;
	int32_t stores_used;
	std::map<int64_t, int64_t> store_of; /* product -> store */
};

/* Every assignment of cart c's products, in cents. */
Expected brute_force(const Market &m, int64_t c)
{
	std::map<std::pair<int64_t, int64_t>, int64_t> best; /* (product, store) -> cents */
	for (size_t r = 0; r < m.offer_product.size(); ++r)
	{
		auto key = std::make_pair(m.offer_product.value_of(m.offer_product.code(r)), m.offer_store[r]);
		int64_t cents = m.offer_price.key(r);
		if (!best.count(key) || cents < best[key])
			best[key] = cents;
	}
	std::map<int64_t, std::pair<int64_t, int64_t>> ship; /* store -> (fee, free_from) */
	for (size_t r = 0; r < m.ship_store.size(); ++r)
		ship[m.ship_store[r]] = {m.ship_fee.key(r), m.ship_free_from.key(r)};
	std::map<int64_t, int64_t> demand;
	for (size_t i = 0; i < m.cart.size(); ++i)
		if (m.cart[i] == c)
			demand[m.product[i]] += m.quantity[i];
	std::vector<int64_t> products;
	std::vector<std::vector<int64_t>> options;
	for (auto &[p, q] : demand)
	{
		std::vector<int64_t> stores;
		for (auto &[key, cents] : best)
			if (key.first == p)
				stores.push_back(key.second);
		if (!stores.empty())
		{
			products.push_back(p);
			options.push_back(stores);
		}
	}
	Expected out{INT64_MAX, 0, {}};
	std::vector<int64_t> out_vector;
	std::vector<size_t> pick(products.size(), 0);
	for (;;)
	{
		int64_t total = 0;
		std::map<int64_t, int64_t> subtotal;
		std::vector<int64_t> vector;
		for (size_t i = 0; i < products.size(); ++i)
		{
			int64_t s = options[i][pick[i]];
			int64_t cost = best[{products[i], s}] * demand[products[i]];
			total += cost;
			subtotal[s] += cost;
			vector.push_back(s);
		}
		for (auto &[s, sub] : subtotal)
			if (ship.count(s) && sub < ship[s].second)
				total += ship[s].first;
		int32_t used = static_cast<int32_t>(subtotal.size());
		if (total < out.total || (total == out.total && (used < out.stores_used || (used == out.stores_used && vector < out_vector))))
		{
			out.total = total;
			out.stores_used = used;
			out_vector = vector;
		}
		size_t i = 0;
		for (; i < products.size() && ++pick[i] == options[i].size(); ++i)
			pick[i] = 0;
		if (i == products.size())
			break;
	}
	if (products.empty())
		out.total = 0;
	for (size_t i = 0; i < products.size(); ++i)
		out.store_of[products[i]] = out_vector[i];
	return out;
}

ExecContext context(DeviceMode mode)
{
	ExecContext ctx;
	ctx.mode = mode;
	return ctx;
}

/* The row an answer must show at a store: its least price, then the first row. */
int64_t best_row(const Market &m, int64_t product, int64_t store)
{
	int64_t best = -1;
	for (size_t r = 0; r < m.offer_product.size(); ++r)
		if (m.offer_product.value_of(m.offer_product.code(r)) == product && m.offer_store[r] == store &&
			(best < 0 || m.offer_price.key(r) < m.offer_price.key(static_cast<size_t>(best))))
			best = static_cast<int64_t>(r);
	return best;
}

TEST(Carts, BruteForceOnRandomMarkets)
{
	std::mt19937_64 rng = seeded_rng();
	for (int round = 0; round < 60; ++round)
	{
		/* every line with a current store, some, or none */
		Market m = random_market(rng, 12, 6, 7, 4, round % 3 == 0 ? 8 : round % 3 == 1 ? 1 : 0);
		ExecContext ctx = context(DeviceMode::Cpu);
		CartsAnswer answer = optimize_carts(m.lines(), m.offers(), m.shipping(), ctx);
		ASSERT_EQ(answer.scale, 2);
		for (const CartAnswer &cart : answer.carts)
		{
			Expected want = brute_force(m, cart.cart_id);
			EXPECT_EQ(cart.total.units, want.total) << "cart " << cart.cart_id;
			EXPECT_EQ(cart.stores_used, want.stores_used) << "cart " << cart.cart_id;
			for (size_t l = cart.first_line; l < cart.end_line; ++l)
			{
				const CartAnswerLine &line = answer.lines[l];
				int64_t product = m.product[line.line];
				if (!want.store_of.count(product))
					EXPECT_EQ(line.offer_row, -1);
				else
				{
					ASSERT_GE(line.offer_row, 0);
					EXPECT_EQ(m.offer_store[line.offer_row], want.store_of[product])
						<< "cart " << cart.cart_id << " product " << product;
					EXPECT_EQ(line.offer_row, best_row(m, product, m.offer_store[line.offer_row]))
						<< "cart " << cart.cart_id << " product " << product;
				}
			}
		}
	}
}

TEST(Carts, LinesInCartProductQuantityOrder)
{
	std::mt19937_64 rng = seeded_rng();
	Market m = random_market(rng, 30, 8, 5, 3);
	ExecContext ctx = context(DeviceMode::Cpu);
	CartsAnswer answer = optimize_carts(m.lines(), m.offers(), m.shipping(), ctx);
	ASSERT_EQ(answer.lines.size(), m.cart.size());
	for (size_t l = 1; l < answer.lines.size(); ++l)
	{
		size_t a = answer.lines[l - 1].line, b = answer.lines[l].line;
		EXPECT_LE(std::make_tuple(m.cart[a], m.product[a], m.quantity[a], a),
				  std::make_tuple(m.cart[b], m.product[b], m.quantity[b], b));
	}
}

/*
 * Appends a random cart of 1-10 products over 1-6 stores to `carts`:
 * costs in hundreds with ties, fees some of them never free.
 */
void add_random_cart(std::mt19937_64 &rng, CartArrayVectors &cart)
{
	int n = std::uniform_int_distribution<int>(1, 10)(rng);
	int n_stores = std::uniform_int_distribution<int>(1, 6)(rng);
	int64_t first_store = cart.cart_stores.back();
	cart.cart_products.push_back(cart.cart_products.back() + n);
	cart.cart_stores.push_back(first_store + n_stores);
	for (int s = 0; s < n_stores; ++s)
	{
		cart.store_fee.push_back(std::uniform_int_distribution<int>(0, 5)(rng) * 100);
		cart.store_free_from.push_back(std::uniform_int_distribution<int>(0, 1)(rng)
										   ? carts::kNeverFree
										   : std::uniform_int_distribution<int>(1, 30)(rng) * 100);
		/* at most a true share: a store never free, its fee split n ways */
		cart.store_share.push_back(cart.store_free_from.back() == carts::kNeverFree ? cart.store_fee.back() / n : 0);
	}
	size_t first_rank = cart.product_rank.size();
	cart.product_rank.resize(first_rank + n);
	std::iota(cart.product_rank.begin() + first_rank, cart.product_rank.end(), 0);
	std::shuffle(cart.product_rank.begin() + first_rank, cart.product_rank.end(), rng);
	for (int p = 0; p < n; ++p)
	{
		std::vector<std::pair<int64_t, int32_t>> candidates;
		for (int s = 0; s < n_stores; ++s)
			if (s == p % n_stores || std::uniform_int_distribution<int>(0, 1)(rng))
				candidates.push_back({std::uniform_int_distribution<int>(1, 10)(rng) * 100, s});
		std::sort(candidates.begin(), candidates.end());
		for (auto &[c, s] : candidates)
		{
			cart.candidate_cost.push_back(c);
			cart.candidate_store.push_back(s);
		}
		cart.product_candidates.push_back(static_cast<int64_t>(cart.candidate_cost.size()));
	}
}

/* The search of cart c from its start to its end on the CPU: its state, its choices in best_choice. */
carts::CartSearchState searched(const carts::CartArrays &a, int64_t c)
{
	size_t n_stores = static_cast<size_t>(a.cart_stores[c + 1] - a.cart_stores[c]);
	std::vector<int64_t> subtotal(n_stores), potential(n_stores);
	std::vector<int32_t> uses(n_stores);
	carts::CartStoreScratch scratch{subtotal.data(), potential.data(), uses.data()};
	carts::CartSearchState state;
	carts::cart_search_start(a, c, state, scratch);
	EXPECT_TRUE(carts::cart_search_run(a, c, state, scratch, INT64_MAX));
	return state;
}

/* A search stopped after any number of steps and resumed gives the same answer (the CPU stops to check for a cancel). */
TEST(Carts, SearchResumesAfterAnyNumberOfSteps)
{
	std::mt19937_64 rng = seeded_rng();
	for (int round = 0; round < 30; ++round)
	{
		CartArrayVectors cart;
		add_random_cart(rng, cart);
		int n = static_cast<int>(cart.product_rank.size());
		int n_stores = static_cast<int>(cart.store_fee.size());
		carts::CartArrays a = cart.arrays();
		std::vector<int64_t> subtotal(n_stores), potential(n_stores);
		std::vector<int32_t> uses(n_stores);
		carts::CartStoreScratch scratch{subtotal.data(), potential.data(), uses.data()};
		carts::CartSearchState whole, stepwise;
		carts::cart_search_start(a, 0, whole, scratch);
		ASSERT_TRUE(carts::cart_search_run(a, 0, whole, scratch, INT64_MAX));
		carts::cart_search_start(a, 0, stepwise, scratch);
		int64_t budget = std::uniform_int_distribution<int>(1, 3)(rng);
		while (!carts::cart_search_run(a, 0, stepwise, scratch, budget))
		{
		}
		EXPECT_EQ(whole.best_total, stepwise.best_total);
		EXPECT_EQ(whole.steps, stepwise.steps);
		for (int d = 0; d < n; ++d)
			EXPECT_EQ(whole.best_choice[d], stepwise.best_choice[d]);
		/* the search leaves its stores as it found them */
		for (int s = 0; s < n_stores; ++s)
			EXPECT_EQ(uses[s], 0);
	}
}

/*
 * A price that is not finite is an error only where it would be its
 * store's best offer of a product in a cart: NaN and Infinity rank after
 * every finite price, -Infinity before.  The same with and without a
 * current store, whose products' offers the engine takes another way.
 */
TEST(Carts, APriceNotFiniteIsAnErrorWhereItIsItsStoresBest)
{
	struct Case
	{
		int16_t marker;
		bool with_finite; /* a finite offer of the product at the same store */
		bool in_cart;
		bool error;
	};
	for (const Case &c : {Case{NumberColumn::kScaleNaN, true, true, false}, Case{NumberColumn::kScalePosInf, true, true, false},
						  Case{NumberColumn::kScaleNegInf, true, true, true}, Case{NumberColumn::kScaleNaN, false, true, true},
						  Case{NumberColumn::kScalePosInf, false, true, true}, Case{NumberColumn::kScaleNaN, false, false, false}})
		for (bool current : {false, true})
		{
			SCOPED_TRACE("marker " + std::to_string(c.marker) + (c.with_finite ? ", with a finite offer" : "") +
						 (c.in_cart ? "" : ", not in a cart") + (current ? ", current store" : ""));
			Market m;
			auto offer = [&](int64_t product, int64_t store, int64_t cents) {
				m.offer_product.push_back(product);
				m.offer_store.push_back(store);
				if (cents < 0)
					m.offer_price.push_numeric_special(c.marker);
				else
					m.offer_price.push_numeric(cents, 2);
			};
			int64_t odd_product = c.in_cart ? 1 : 2;
			offer(1, 11, 600);
			offer(2, 11, 700);
			if (c.with_finite)
				offer(odd_product, 10, 500);
			offer(odd_product, 10, -1);
			m.cart.push_back(1);
			m.product.push_back(1);
			m.store.push_back(current ? 11 : kNoCurrentStore);
			m.quantity.push_back(1);
			ExecContext ctx = context(DeviceMode::Cpu);
			if (c.error)
			{
				try
				{
					optimize_carts(m.lines(), m.offers(), m.shipping(), ctx);
					ADD_FAILURE() << "no error";
				}
				catch (const Error &e)
				{
					EXPECT_STREQ(e.sqlstate(), sqlstate::invalid_parameter_value);
					EXPECT_NE(std::string(e.what()).find("product 1 at store 10 is not a finite number"), std::string::npos)
						<< e.what();
				}
				continue;
			}
			CartsAnswer answer = optimize_carts(m.lines(), m.offers(), m.shipping(), ctx);
			ASSERT_EQ(answer.lines.size(), 1u);
			/* the finite 5.00 at store 10 where it is, else 6.00 at store 11 */
			EXPECT_EQ(answer.carts[0].total.units, c.with_finite && c.in_cart ? 500 : 600);
			EXPECT_EQ(m.offer_store[answer.lines[0].offer_row], c.with_finite && c.in_cart ? 10 : 11);
		}
}

/*
 * Where several stores' best offers of products in carts are not finite,
 * the error names the least product, then its least store: whatever order
 * the products come in and however the work is divided, so that one
 * server and gpurec_shards' partitions name the same offer.  The products
 * come from the highest id down, so that their order of appearance runs
 * against their ids.
 */
TEST(Carts, APriceNotFiniteNamesTheLeastProductThenStore)
{
	std::mt19937_64 rng = seeded_rng();
	auto draw = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
	for (int round = 0; round < 12; ++round)
	{
		Market m;
		int n_products = draw(1, 4000);
		int refused_in_1000 = draw(0, 3) == 0 ? 0 : draw(1, 40);
		std::vector<std::pair<int64_t, int64_t>> refused; /* (product, store): its every offer not finite */
		std::vector<int64_t> in_cart;
		for (int64_t p = n_products; p >= 1; --p)
		{
			bool carted = draw(0, 1) == 0;
			if (carted)
				in_cart.push_back(p);
			for (int64_t s = -3; s <= 5; ++s)
			{
				bool only_not_finite = draw(0, 999) < refused_in_1000;
				int finite = only_not_finite ? 0 : draw(0, 2) == 0 ? 0 : draw(1, 2);
				int not_finite = only_not_finite ? draw(1, 2) : finite > 0 && draw(0, 4) == 0;
				for (int copy = 0; copy < finite + not_finite; ++copy)
				{
					m.offer_product.push_back(p);
					m.offer_store.push_back(s);
					if (copy < finite)
						m.offer_price.push_numeric(draw(1, 12) * 50, 2);
					else /* NaN or +Infinity, each after every finite price */
						m.offer_price.push_numeric_special(draw(0, 1) ? NumberColumn::kScaleNaN
																	   : NumberColumn::kScalePosInf);
				}
				if (finite == 0 && not_finite > 0 && carted)
					refused.push_back({p, s});
			}
		}
		std::shuffle(in_cart.begin(), in_cart.end(), rng);
		for (size_t i = 0; i < in_cart.size(); ++i)
		{
			m.cart.push_back(static_cast<int64_t>(i / 3) + 1);
			m.product.push_back(in_cart[i]);
			m.store.push_back(draw(0, 3) == 0 ? draw(-3, 5) : kNoCurrentStore);
			m.quantity.push_back(1);
		}
		SCOPED_TRACE("round " + std::to_string(round) + ": " + std::to_string(n_products) + " products, " +
					 std::to_string(refused.size()) + " refused offers");
		ExecContext ctx = context(DeviceMode::Cpu);
		if (refused.empty())
		{
			EXPECT_NO_THROW(optimize_carts(m.lines(), m.offers(), m.shipping(), ctx));
			continue;
		}
		std::pair<int64_t, int64_t> least = *std::min_element(refused.begin(), refused.end());
		try
		{
			optimize_carts(m.lines(), m.offers(), m.shipping(), ctx);
			ADD_FAILURE() << "no error";
		}
		catch (const Error &e)
		{
			EXPECT_STREQ(e.sqlstate(), sqlstate::invalid_parameter_value);
			EXPECT_EQ(e.order(), (std::vector<int64_t>{kPriceCheck, least.first, least.second}));
			EXPECT_EQ(std::string(e.what()), "the price of product " + std::to_string(least.first) + " at store " +
												 std::to_string(least.second) + " is not a finite number");
		}
	}
}

/*
 * Several lines with a quantity below 1, in random order: the error names
 * the least cart, then product (then quantity), and says so in its order,
 * for gpurec_shards' coordinator to compare partitions' refusals by.
 */
TEST(Carts, AQuantityBelowOneNamesTheLeastCartThenProduct)
{
	std::mt19937_64 rng = seeded_rng();
	auto draw = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
	for (int round = 0; round < 20; ++round)
	{
		Int64Column cart, product, store, quantity;
		std::vector<std::tuple<int64_t, int64_t, int64_t>> bad;
		int n = draw(1, 3000);
		for (int i = 0; i < n; ++i)
		{
			int64_t c = draw(-50, 50), p = draw(-5, 5), q = draw(0, 9) == 0 ? draw(-3, 0) : draw(1, 4);
			cart.push_back(c);
			product.push_back(p);
			store.push_back(kNoCurrentStore);
			quantity.push_back(q);
			if (q < 1)
				bad.push_back({c, p, q});
		}
		CartLines lines{cart, product, store, quantity};
		if (bad.empty())
		{
			EXPECT_NO_THROW(check_quantities(lines, nullptr));
			continue;
		}
		auto [c, p, q] = *std::min_element(bad.begin(), bad.end());
		try
		{
			check_quantities(lines, nullptr);
			ADD_FAILURE() << "no error";
		}
		catch (const Error &e)
		{
			EXPECT_EQ(e.detail(), "Cart " + std::to_string(c) + " has " + std::to_string(q) + " of product " +
									  std::to_string(p) + ".");
			EXPECT_EQ(e.order(), (std::vector<int64_t>{kQuantityCheck, c, p, q}));
		}
	}
}

/*
 * The shipping query's faults (a store listed twice, a fee that is not
 * finite or negative) name the least store at fault, whatever order the
 * rows came in, ordered (kShippingCheck, store) for gpurec_shards'
 * refusals; a float fee is ordered (kExactCheck, 1), after the prices.
 */
TEST(Carts, AShippingFaultNamesTheLeastStore)
{
	std::mt19937_64 rng = seeded_rng();
	auto draw = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
	Int64Column no_cart;
	CartLines no_lines{no_cart, no_cart, no_cart, no_cart};
	IdColumn no_product;
	Int64Column no_store;
	NumberColumn no_price{NumberType::Numeric};
	Offers no_offers{no_product, no_store, no_price};
	for (int round = 0; round < 30; ++round)
	{
		int fault = draw(0, 2); /* 0: stores twice, 1: NaN fees, 2: negative fees */
		std::vector<int64_t> stores(2001);
		std::iota(stores.begin(), stores.end(), -1000);
		std::shuffle(stores.begin(), stores.end(), rng);
		stores.resize(draw(1, 200)); /* distinct */
		if (fault == 0)
			for (int twice = draw(0, 3); twice > 0; --twice)
				stores.push_back(stores[draw(0, static_cast<int>(stores.size()) - 1)]);
		std::shuffle(stores.begin(), stores.end(), rng);
		int n = static_cast<int>(stores.size());
		Int64Column store;
		NumberColumn fee{NumberType::Numeric}, free_from{NumberType::Numeric};
		std::vector<int64_t> bad;
		std::map<int64_t, int> seen;
		for (int64_t s : stores)
			++seen[s];
		for (int i = 0; i < n; ++i)
		{
			store.push_back(stores[i]);
			bool faulty = fault > 0 && draw(0, 3) == 0;
			if (faulty && fault == 1)
				fee.push_numeric_special(NumberColumn::kScaleNaN);
			else
				fee.push_numeric(faulty ? -draw(1, 9) : draw(0, 9), 0);
			free_from.push_numeric_special(NumberColumn::kScalePosInf);
			if (faulty || (fault == 0 && seen[stores[i]] > 1))
				bad.push_back(stores[i]);
		}
		Shipping shipping{store, fee, free_from};
		ExecContext ctx;
		if (bad.empty())
		{
			EXPECT_NO_THROW(optimize_carts(no_lines, no_offers, shipping, ctx));
			continue;
		}
		int64_t least = *std::min_element(bad.begin(), bad.end());
		const char *what = fault == 0 ? " more than once" : fault == 1 ? " is not a finite number" : " is negative";
		try
		{
			optimize_carts(no_lines, no_offers, shipping, ctx);
			ADD_FAILURE() << "no error";
		}
		catch (const Error &e)
		{
			EXPECT_NE(std::string(e.what()).find("store " + std::to_string(least) + what), std::string::npos)
				<< e.what();
			EXPECT_EQ(e.order(), (std::vector<int64_t>{kShippingCheck, least}));
		}
	}
	Int64Column one_store;
	one_store.push_back(1);
	NumberColumn float_fee{NumberType::Float8}, no_free_from{NumberType::Numeric};
	float_fee.push_double(1.5);
	no_free_from.push_numeric_special(NumberColumn::kScalePosInf);
	ExecContext ctx;
	try
	{
		optimize_carts(no_lines, no_offers, {one_store, float_fee, no_free_from}, ctx);
		ADD_FAILURE() << "no error";
	}
	catch (const Error &e)
	{
		EXPECT_EQ(std::string(e.sqlstate()), "42804");
		EXPECT_EQ(e.order(), (std::vector<int64_t>{kExactCheck, 1}));
	}
}

TEST(Carts, CancelStopsTheSearch)
{
	std::mt19937_64 rng = seeded_rng();
	Market m = random_market(rng, 2000, 6, 7, 4);
	ExecContext ctx = context(DeviceMode::Cpu);
	int checks = 0;
	ctx.check_interrupts = [&] {
		if (++checks == 3)
			throw std::runtime_error("cancelled");
	};
	EXPECT_THROW(optimize_carts(m.lines(), m.offers(), m.shipping(), ctx), std::runtime_error);
}

TEST(Carts, TooManyProductsIsAnError)
{
	Market m;
	for (int p = 1; p <= carts::kMaxCartProducts + 1; ++p)
	{
		m.offer_product.push_back(p);
		m.offer_store.push_back(1);
		m.offer_price.push_numeric(100, 2);
		m.cart.push_back(7);
		m.product.push_back(p);
		m.store.push_back(kNoCurrentStore);
		m.quantity.push_back(1);
	}
	ExecContext ctx = context(DeviceMode::Cpu);
	try
	{
		optimize_carts(m.lines(), m.offers(), m.shipping(), ctx);
		FAIL() << "no error";
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), sqlstate::program_limit_exceeded);
		EXPECT_NE(std::string(e.what()).find("cart 7"), std::string::npos);
	}
}

TEST(CartsGpu, GpuModeWithoutAGpuIsAnError)
{
	if (gpu_usable())
		GTEST_SKIP() << "a GPU is usable";
	std::mt19937_64 rng = seeded_rng();
	Market m = random_market(rng, 5, 3, 4, 3);
	ExecContext ctx = context(DeviceMode::Gpu);
	try
	{
		optimize_carts(m.lines(), m.offers(), m.shipping(), ctx);
		FAIL() << "no error";
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), sqlstate::object_not_in_prerequisite_state);
	}
}

/* gpurec.cpu_threads changes how the work is cut, never an answer */
TEST(Carts, SameAnswersOnOneThreadAsOnEveryCore)
{
	std::mt19937_64 rng = seeded_rng();
	Market m = random_market(rng, 3000, 6, 7, 4);
	ExecContext every_core = context(DeviceMode::Cpu);
	CartsAnswer want = optimize_carts(m.lines(), m.offers(), m.shipping(), every_core);
	for (size_t threads : {1, 3})
	{
		SCOPED_TRACE("cpu_threads " + std::to_string(threads));
		ExecContext ctx = context(DeviceMode::Cpu);
		ctx.cpu_threads = threads;
		expect_same_answers(optimize_carts(m.lines(), m.offers(), m.shipping(), ctx), want);
		EXPECT_LE(ctx.cpu_threads_used, threads);
	}
}

TEST(CartsGpu, SameAnswersAsTheCpu)
{
	if (!gpu_usable())
		GTEST_SKIP() << "no usable GPU";
	std::mt19937_64 rng = seeded_rng();
	for (int round = 0; round < 6; ++round)
	{
		/* small markets full of ties, then larger carts over more stores */
		Market m = round < 3 ? random_market(rng, 3000, 6, 7, 4) : random_market(rng, 20000, 12, 40, 30);
		ExecContext cpu = context(DeviceMode::Cpu), gpu = context(DeviceMode::Gpu);
		CartsAnswer on_cpu = optimize_carts(m.lines(), m.offers(), m.shipping(), cpu);
		CartsAnswer on_gpu = optimize_carts(m.lines(), m.offers(), m.shipping(), gpu);
		EXPECT_TRUE(gpu.used_gpu);
		expect_same_answers(on_cpu, on_gpu);
	}
}

/*
 * The GPU searches each cart at most max_steps steps: it finishes exactly
 * the carts whose searches on the CPU take no more, with the CPU's
 * choices, and lists the others; also for a share of the arrays whose
 * offsets do not start at 0 (a part of a call split over GPUs).
 */
TEST(CartsGpu, BoundedSearchesAreTheCpusAndListTheCartsLeft)
{
	if (!gpu_usable())
		GTEST_SKIP() << "no usable GPU";
	std::mt19937_64 rng = seeded_rng();
	CartArrayVectors all;
	for (int c = 0; c < 3000; ++c)
		add_random_cart(rng, all);
	carts::CartArrays whole = all.arrays();
	std::vector<carts::CartSearchState> want;
	for (int64_t c = 0; c < whole.n_carts; ++c)
		want.push_back(searched(whole, c));
	for (int64_t max_steps : {1, 4, 16, 64, 1 << 20})
		for (auto [first, end] : {std::pair<int64_t, int64_t>{0, whole.n_carts}, {1234, 2345}})
		{
			SCOPED_TRACE("max_steps " + std::to_string(max_steps) + ", carts from " + std::to_string(first));
			carts::CartArrays share = whole;
			share.n_carts = end - first;
			share.cart_products += first;
			share.cart_stores += first;
			ExecContext ctx = context(DeviceMode::Gpu);
			gpu::CartSolution got = gpu::solve_carts(share, max_steps, ctx);
			ASSERT_EQ(got.choice.size(), static_cast<size_t>(share.cart_products[share.n_carts] - share.cart_products[0]));
			std::vector<int64_t> left = got.left, want_left;
			std::sort(left.begin(), left.end());
			for (int64_t c = first; c < end; ++c)
			{
				const carts::CartSearchState &state = want[c];
				if (state.steps > max_steps)
				{
					want_left.push_back(c - first);
					continue;
				}
				for (int32_t d = 0; d < state.n_products; ++d)
					ASSERT_EQ(got.choice[whole.cart_products[c] - whole.cart_products[first] + d], state.best_choice[d])
						<< "cart " << c << ", product " << d;
			}
			EXPECT_EQ(left, want_left);
		}
}

TEST(CartsGpu, AutoSearchesOnTheCpuAndGpuOutOfMemoryIsAnError)
{
	if (!gpu_usable())
		GTEST_SKIP() << "no usable GPU";
	std::mt19937_64 rng = seeded_rng();
	Market m = random_market(rng, 25000, 6, 7, 4);
	/* auto keeps the search on the CPU, the faster device for it (carts.cpp) */
	ExecContext cpu = context(DeviceMode::Cpu), automatic = context(DeviceMode::Auto);
	expect_same_answers(optimize_carts(m.lines(), m.offers(), m.shipping(), cpu),
						optimize_carts(m.lines(), m.offers(), m.shipping(), automatic));
	EXPECT_FALSE(automatic.used_gpu);
	/* under gpu, a GPU allocation that fails is ERROR 53200, not a silent CPU answer */
	ExecContext gpu = context(DeviceMode::Gpu);
	gpu.fail_gpu_alloc = true;
	try
	{
		optimize_carts(m.lines(), m.offers(), m.shipping(), gpu);
		ADD_FAILURE() << "no error";
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), "53200");
	}
}

} // namespace
} // namespace gpurec
