/*
 * test_engine_cpu.cpp: the engine's columns and the marketplace CPU path,
 * against brute-force references written here, on fresh random data.
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "../../src/columns.hpp"
#include "../../src/marketplace.hpp"
#include "test_random.hpp"

namespace gpurec {
namespace {

TEST(OrderKeys, DoublesOrderAsPostgresDoes)
{
	const double inf = std::numeric_limits<double>::infinity();
	std::vector<double> values = {-inf, -1e300, -2.5, -1, -5e-324, -0.0, 0.0, 5e-324, 1, 2.5, 1e300, inf};
	auto rng = seeded_rng();
	std::uniform_real_distribution<double> any(-1e6, 1e6);
	for (int i = 0; i < 1000; ++i)
		values.push_back(any(rng));
	for (double a : values)
	{
		EXPECT_EQ(double_from_order_key(order_key_from_double(a)), a == 0 ? 0.0 : a);
		for (double b : {values[3], values[6], values[9], values[20]})
			EXPECT_EQ(order_key_from_double(a) < order_key_from_double(b), a < b) << a << " " << b;
	}
	double nan = std::nan(""), other_nan = -std::nan("1");
	EXPECT_EQ(order_key_from_double(nan), order_key_from_double(other_nan));
	EXPECT_GT(order_key_from_double(nan), order_key_from_double(inf));
	EXPECT_EQ(order_key_from_double(-0.0), order_key_from_double(0.0));
}

TEST(NumberColumn, NumericKeysAcrossScalesAndSpecials)
{
	NumberColumn c(NumberType::Numeric);
	c.push_numeric(150, 2);	  /* 1.50 */
	c.push_numeric(15, 1);	  /* 1.5 */
	c.push_numeric(-3, 0);	  /* -3 */
	c.push_numeric_special(NumberColumn::kScaleNaN);
	c.push_numeric(1, 18);	  /* 1e-18: rescales every key before it */
	c.push_numeric_special(NumberColumn::kScaleNegInf);
	EXPECT_EQ(c.scale(), 18);
	EXPECT_EQ(c.key(0), c.key(1));
	EXPECT_LT(c.key(2), c.key(4));
	EXPECT_LT(c.key(4), c.key(0));
	EXPECT_GT(c.key(3), c.key(0));
	EXPECT_LT(c.key(5), c.key(2));
	EXPECT_EQ(c.display_scale(0), 2);
	EXPECT_EQ(c.unscaled_at_display_scale(0), 150);
	EXPECT_EQ(c.display_scale(1), 1);
	EXPECT_EQ(c.unscaled_at_display_scale(1), 15);
	EXPECT_EQ(c.display_scale(3), NumberColumn::kScaleNaN);
	EXPECT_DOUBLE_EQ(c.to_double(2), -3.0);

	NumberColumn too_big(NumberType::Numeric);
	too_big.push_numeric(1, 0);
	try
	{
		too_big.push_numeric(1, 18); /* 1 at scale 18 fits; 10^19 x 1 does not */
		too_big.push_numeric(100, 0);
		FAIL() << "expected numeric_value_out_of_range";
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), sqlstate::numeric_value_out_of_range);
	}
}

TEST(NumberColumn, UniformScaleStoresNoPerRowScale)
{
	NumberColumn c(NumberType::Numeric);
	for (int i = 0; i < 5; ++i)
		c.push_numeric(100 + i, 2);
	for (int i = 0; i < 5; ++i)
		EXPECT_EQ(c.display_scale(i), 2);
	c.push_numeric(7, 0);
	EXPECT_EQ(c.display_scale(4), 2);
	EXPECT_EQ(c.display_scale(5), 0);
	EXPECT_EQ(c.unscaled_at_display_scale(5), 7);
	EXPECT_EQ(c.key(5), 700);
}

TEST(IdColumn, DictionaryEncodesInFirstAppearanceOrder)
{
	auto rng = seeded_rng();
	IdColumn ids;
	std::map<int64_t, int64_t> counts;
	std::vector<int64_t> first_seen;
	for (int i = 0; i < 200000; ++i)
	{
		int64_t id = static_cast<int64_t>(rng() % 5000) * 1000003 - 7; /* strided, negative too */
		if (!counts.count(id))
			first_seen.push_back(id);
		++counts[id];
		ids.push_back(id);
		ASSERT_EQ(ids.value_of(ids.code(i)), id);
	}
	ASSERT_EQ(ids.distinct(), counts.size());
	for (size_t code = 0; code < first_seen.size(); ++code)
	{
		EXPECT_EQ(ids.value_of(static_cast<int32_t>(code)), first_seen[code]);
		EXPECT_EQ(ids.counts()[code], counts[first_seen[code]]);
		EXPECT_EQ(ids.find(first_seen[code]), static_cast<int32_t>(code));
	}
	EXPECT_EQ(ids.find(123456789), -1);
	std::vector<int32_t> ordered = ids.codes_in_id_order();
	for (size_t i = 1; i < ordered.size(); ++i)
		EXPECT_LT(ids.value_of(ordered[i - 1]), ids.value_of(ordered[i]));
}

struct Market
{
	IdColumn product;
	Int64Column store;
	NumberColumn price{NumberType::Integer};
	Offers offers() const { return {product, store, price}; }
};

TEST(CheapestOffers, CpuMatchesBruteForce)
{
	auto rng = seeded_rng();
	for (int trial = 0; trial < 20; ++trial)
	{
		Market m;
		size_t n = 1 + rng() % 3000;
		for (size_t i = 0; i < n; ++i)
		{
			m.product.push_back(static_cast<int64_t>(rng() % 50));
			m.store.push_back(static_cast<int64_t>(rng() % 8));
			m.price.push_integer(static_cast<int64_t>(rng() % 20) - 5); /* ties and duplicates */
		}
		int k = 1 + static_cast<int>(rng() % 6);
		ExecContext ctx;
		ctx.mode = DeviceMode::Cpu;
		RankedOffers got = cheapest_offers(m.offers(), k, ctx);

		std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> by_product;
		for (size_t i = 0; i < n; ++i)
			by_product[m.product.value_of(m.product.code(i))].push_back({m.price.key(i), m.store[i]});
		for (auto &[id, list] : by_product)
		{
			std::sort(list.begin(), list.end());
			int32_t code = m.product.find(id);
			size_t ranks = std::min<size_t>(k, list.size());
			ASSERT_EQ(static_cast<size_t>(got.offsets[code + 1] - got.offsets[code]), ranks);
			for (size_t r = 0; r < ranks; ++r)
			{
				uint32_t row = got.rows[got.offsets[code] + r];
				EXPECT_EQ(m.price.key(row), list[r].first);
				EXPECT_EQ(m.store[row], list[r].second);
			}
		}
	}
}

TEST(CheapestOffers, ErrorsAndEmptyInput)
{
	Market m;
	ExecContext ctx;
	ctx.mode = DeviceMode::Cpu;
	try
	{
		cheapest_offers(m.offers(), 0, ctx);
		FAIL() << "k = 0 accepted";
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), sqlstate::invalid_parameter_value);
	}
	RankedOffers none = cheapest_offers(m.offers(), 3, ctx);
	EXPECT_TRUE(none.rows.empty());
}

TEST(ImproveCarts, CpuMatchesBruteForce)
{
	auto rng = seeded_rng();
	Market m;
	for (int i = 0; i < 2000; ++i)
	{
		m.product.push_back(static_cast<int64_t>(rng() % 40));
		m.store.push_back(static_cast<int64_t>(rng() % 6));
		m.price.push_integer(static_cast<int64_t>(rng() % 15));
	}
	Int64Column cart, product, store, quantity;
	for (int i = 0; i < 500; ++i)
	{
		cart.push_back(static_cast<int64_t>(rng() % 30));
		product.push_back(static_cast<int64_t>(rng() % 45)); /* some nobody offers */
		store.push_back(static_cast<int64_t>(rng() % 7));	 /* some stores offer nothing */
		quantity.push_back(1 + static_cast<int64_t>(rng() % 3));
	}
	ExecContext ctx;
	ctx.mode = DeviceMode::Cpu;
	std::vector<CartImprovement> got =
		improve_carts({cart, product, store, quantity}, m.offers(), ctx);

	size_t expected = 0;
	for (size_t line = 0; line < cart.size(); ++line)
	{
		int64_t best_key = INT64_MAX, best_store = INT64_MAX, current = INT64_MAX;
		bool offered = false, current_offers = false;
		for (size_t i = 0; i < m.product.size(); ++i)
		{
			if (m.product.value_of(m.product.code(i)) != product[line])
				continue;
			offered = true;
			std::pair<int64_t, int64_t> o{m.price.key(i), m.store[i]};
			if (o < std::make_pair(best_key, best_store))
				std::tie(best_key, best_store) = o;
			if (m.store[i] == store[line])
			{
				current_offers = true;
				current = std::min(current, m.price.key(i));
			}
		}
		bool returned = !offered || !current_offers || best_key < current;
		auto it = std::find_if(got.begin(), got.end(), [&](const CartImprovement &c) { return c.line == line; });
		ASSERT_EQ(it != got.end(), returned) << "line " << line;
		if (!returned)
			continue;
		++expected;
		EXPECT_EQ(it->best_row < 0, !offered);
		EXPECT_EQ(it->current_row < 0, !current_offers);
		if (offered)
		{
			EXPECT_EQ(m.price.key(it->best_row), best_key);
			EXPECT_EQ(m.store[it->best_row], best_store);
		}
		if (current_offers)
			EXPECT_EQ(m.price.key(it->current_row), current);
	}
	EXPECT_EQ(got.size(), expected);
	for (size_t i = 1; i < got.size(); ++i)
		EXPECT_LE(cart[got[i - 1].line], cart[got[i].line]);

	quantity[7] = 0;
	EXPECT_THROW(improve_carts({cart, product, store, quantity}, m.offers(), ctx), Error);
}

} // namespace
} // namespace gpurec
