/*
 * test_cart_shards.cpp: ShardRows' number columns (partials.hpp) and the
 * carts family's parts and merge (cart_shards.hpp): numbers keep their
 * type, scales and bits across parts of different scales, NULLs and empty
 * parts; the merge orders rows as one server does, equal keys in
 * partition order; bytes that name numbers a part lacks are refused;
 * shipping travels whole, its type even with no row.
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "../../src/cart_shards.hpp"
#include "../../src/partials.hpp"

namespace gpurec {
namespace {

/* A numeric column of (unscaled, scale) values, special values by their marker as scale. */
NumberColumn numerics(const std::vector<std::pair<int64_t, int>> &values)
{
	NumberColumn column(NumberType::Numeric);
	for (auto [unscaled, scale] : values)
		if (scale < 0)
			column.push_numeric_special(static_cast<int16_t>(scale));
		else
			column.push_numeric(unscaled, scale);
	return column;
}

/* The value of a numeric row as (unscaled at its display scale, display scale), or (0, marker). */
std::pair<int64_t, int> numeric_value(const NumberColumn &column, size_t row)
{
	int display = column.display_scale(row);
	if (display < 0)
		return {0, display};
	return {column.unscaled_at_display_scale(row), display};
}

ShardRows kind_with_price() { return ShardRows("priced", 2, {1}); }

std::vector<uint8_t> concatenated(const std::vector<const ShardRows *> &parts)
{
	std::vector<uint8_t> bytes;
	for (const ShardRows *part : parts)
	{
		std::vector<uint8_t> more = part->bytes();
		bytes.insert(bytes.end(), more.begin(), more.end());
	}
	return bytes;
}

TEST(ShardRowsNumbers, NumericsKeepTheirScalesAcrossPartsAndNulls)
{
	/* part 0 at scale 1, part 1 at scale 4 (its keys rescale when they meet), specials and NULLs between */
	NumberColumn first = numerics({{15, 1}, {-7, 0}, {0, NumberColumn::kScaleNaN}, {30, 1}});
	NumberColumn second = numerics({{12345, 4}, {0, NumberColumn::kScalePosInf}, {5, 2},
									{std::numeric_limits<int64_t>::max() / 100000, 4}});
	ShardRows a = kind_with_price(), b = kind_with_price(), empty = kind_with_price();
	for (size_t r = 0; r < first.size(); ++r)
	{
		a.put(int64_t(r));
		a.put_number(first, r);
		a.put(int64_t(100 + r));
		a.put_no_number();
	}
	for (size_t r = 0; r < second.size(); ++r)
	{
		b.put(int64_t(10 + r));
		b.put_number(second, r);
	}
	std::vector<uint8_t> bytes = concatenated({&empty, &a, &empty, &b});
	ShardRows read = kind_with_price();
	read.append(bytes.data(), bytes.size(), 0);
	ASSERT_EQ(read.rows(), 2 * first.size() + second.size());
	EXPECT_EQ(read.numbers(1).type(), NumberType::Numeric);
	size_t row = 0;
	for (size_t r = 0; r < first.size(); ++r, row += 2)
	{
		ASSERT_GE(read.int64(row, 1), 0);
		EXPECT_EQ(numeric_value(read.numbers(1), static_cast<size_t>(read.int64(row, 1))), numeric_value(first, r));
		EXPECT_EQ(read.int64(row + 1, 1), -1);
	}
	for (size_t r = 0; r < second.size(); ++r, ++row)
		EXPECT_EQ(numeric_value(read.numbers(1), static_cast<size_t>(read.int64(row, 1))), numeric_value(second, r));
}

TEST(ShardRowsNumbers, FloatsKeepEveryBit)
{
	NumberColumn prices(NumberType::Float8);
	for (double v : {0.30000000000000004, 0.3, 0.0001 / 3, 1e308, -0.0, std::numeric_limits<double>::infinity(),
					 -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::denorm_min()})
		prices.push_double(v);
	ShardRows part = kind_with_price();
	for (size_t r = 0; r < prices.size(); ++r)
	{
		part.put(int64_t(r));
		part.put_number(prices, r);
	}
	std::vector<uint8_t> bytes = part.bytes();
	ShardRows read = kind_with_price();
	read.append(bytes.data(), bytes.size(), 0);
	ASSERT_EQ(read.numbers(1).type(), NumberType::Float8);
	for (size_t r = 0; r < prices.size(); ++r)
		EXPECT_EQ(read.numbers(1).key(static_cast<size_t>(read.int64(r, 1))), prices.key(r));
}

TEST(ShardRowsNumbers, AnEmptyPartSaysItsType)
{
	ShardRows part = kind_with_price();
	part.set_number_type(1, NumberType::Float4);
	std::vector<uint8_t> bytes = part.bytes();
	ShardRows read = kind_with_price();
	read.append(bytes.data(), bytes.size(), 0);
	EXPECT_EQ(read.rows(), 0u);
	EXPECT_EQ(read.numbers(1).type(), NumberType::Float4);
}

TEST(ShardRowsNumbers, RefusesPlacesOutsideThePartAndTypesThatDiffer)
{
	NumberColumn one = numerics({{1, 0}});
	ShardRows part = kind_with_price();
	part.put(int64_t(1));
	part.put(int64_t(1)); /* names the second number of a part of one */
	part.set_number_type(1, NumberType::Numeric);
	part.numbers(1).push_row_of(one, 0);
	std::vector<uint8_t> bytes = part.bytes();
	ShardRows read = kind_with_price();
	try
	{
		read.append(bytes.data(), bytes.size(), 3);
		FAIL() << "no error";
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), sqlstate::invalid_binary_representation);
		EXPECT_NE(std::string(e.what()).find("part 3"), std::string::npos) << e.what();
	}
	NumberColumn floats(NumberType::Float8);
	floats.push_double(1.5);
	ShardRows numeric_part = kind_with_price(), float_part = kind_with_price();
	numeric_part.put(int64_t(1));
	numeric_part.put_number(one, 0);
	float_part.put(int64_t(2));
	float_part.put_number(floats, 0);
	bytes = concatenated({&numeric_part, &float_part});
	ShardRows mixed = kind_with_price();
	EXPECT_THROW(mixed.append(bytes.data(), bytes.size(), 0), Error);
	/* truncated inside the numbers */
	bytes = numeric_part.bytes();
	ShardRows truncated = kind_with_price();
	try
	{
		truncated.append(bytes.data(), bytes.size() - 3, 0);
		FAIL() << "no error";
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), sqlstate::invalid_binary_representation);
	}
}

TEST(ShardRowsNumbers, RefusesDisplayScalesNoNumericHas)
{
	for (int display : {16384, 20000, -4})
	{
		NumberColumn odd(NumberType::Numeric);
		odd.push_numeric(5, 0, 0);
		odd.push_numeric(7, 0, display); /* the part's scales mixed, one beyond numeric's */
		ShardRows part = kind_with_price();
		for (size_t row = 0; row < 2; ++row)
		{
			part.put(int64_t(row));
			part.put_number(odd, row);
		}
		std::vector<uint8_t> bytes = part.bytes();
		ShardRows read = kind_with_price();
		try
		{
			read.append(bytes.data(), bytes.size(), 0);
			ADD_FAILURE() << "no error for display scale " << display;
		}
		catch (const Error &e)
		{
			EXPECT_STREQ(e.sqlstate(), sqlstate::invalid_binary_representation) << e.what();
		}
	}
}

TEST(CartShards, TheMergeRefusesAmountsOfScalesNoNumericHas)
{
	NumberColumn price = numerics({{999, 2}});
	/* one line: cart, product, quantity, store, price, total and its display scale, shipping and its, stores
	   used, complete, has_current, current total and its display scale, the amounts' scale */
	auto merged = [&](int64_t total_display_scale, int64_t scale) {
		ShardRows part = optimized_lines_rows();
		part.set_number_type(4, NumberType::Numeric);
		for (int64_t v : {1, 1, 1, 1})
			part.put(v);
		part.put_number(price, 0);
		for (int64_t v : {int64_t(999), total_display_scale, int64_t(0), int64_t(0), int64_t(1), int64_t(1),
						  int64_t(0), int64_t(0), int64_t(0), scale})
			part.put(v);
		std::vector<uint8_t> bytes = part.bytes();
		ShardRows rows = optimized_lines_rows();
		rows.append(bytes.data(), bytes.size(), 0);
		return merge_optimized_lines(rows);
	};
	EXPECT_EQ(merged(2, 2).lines.size(), 1u);
	for (auto [display, scale] : {std::pair<int64_t, int64_t>{200000000, 2}, {-1, 2}, {16384, 2}, {2, 19}, {2, -1}})
	{
		try
		{
			merged(display, scale);
			ADD_FAILURE() << "no error for display scale " << display << ", scale " << scale;
		}
		catch (const Error &e)
		{
			EXPECT_STREQ(e.sqlstate(), sqlstate::invalid_binary_representation) << e.what();
		}
	}
}

TEST(ShardRows, SortRowsIsStableOverItsColumns)
{
	std::mt19937_64 rnd(7);
	ShardRows rows("sorted", 3);
	std::vector<std::tuple<int64_t, int64_t, int64_t>> want;
	for (int64_t r = 0; r < 500; ++r)
	{
		int64_t a = static_cast<int64_t>(rnd() % 5) - 2, b = static_cast<int64_t>(rnd() % 3);
		if (r % 50 == 0)
			a = r % 100 == 0 ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
		rows.put(a);
		rows.put(b);
		rows.put(r);
		want.emplace_back(a, b, r); /* r: the input order, which equal keys keep */
	}
	std::sort(want.begin(), want.end());
	rows.sort_rows({0, 1});
	for (size_t r = 0; r < want.size(); ++r)
		EXPECT_EQ(std::make_tuple(rows.int64(r, 0), rows.int64(r, 1), rows.int64(r, 2)), want[r]) << r;
}

TEST(CartShards, ShippingTravelsWholeWithItsTypes)
{
	Int64Column stores;
	NumberColumn fee = numerics({{150, 2}, {0, 0}, {7, 1}});
	NumberColumn free_from(NumberType::Integer);
	for (int64_t store : {int64_t(5), int64_t(-3), std::numeric_limits<int64_t>::max()})
		stores.push_back(store);
	for (int64_t v : {int64_t(40), int64_t(0), std::numeric_limits<int64_t>::max()})
		free_from.push_integer(v);
	std::vector<uint8_t> bytes = shipping_part({stores, fee, free_from}).bytes();
	ShardRows read = shipping_rows();
	read.append(bytes.data(), bytes.size(), 0);
	Int64Column read_stores;
	Shipping shipping = shipping_of_part(read, read_stores, "shipping query");
	ASSERT_EQ(shipping.store.size(), 3u);
	EXPECT_EQ(shipping.fee.type(), NumberType::Numeric);
	EXPECT_EQ(shipping.fee.scale(), fee.scale());
	EXPECT_EQ(shipping.free_from.type(), NumberType::Integer);
	EXPECT_EQ(shipping.fee.description(), "column \"fee\" of the shipping query");
	for (size_t r = 0; r < 3; ++r)
	{
		EXPECT_EQ(shipping.store[r], stores[r]);
		EXPECT_EQ(numeric_value(shipping.fee, r), numeric_value(fee, r));
		EXPECT_EQ(shipping.free_from.key(r), free_from.key(r));
	}
	/* no row: the types still travel (optimize_carts refuses a float fee of an empty table too) */
	Int64Column none;
	NumberColumn float_fee(NumberType::Float8), numeric_free(NumberType::Numeric);
	bytes = shipping_part({none, float_fee, numeric_free}).bytes();
	ShardRows empty = shipping_rows();
	empty.append(bytes.data(), bytes.size(), 0);
	Int64Column empty_stores;
	Shipping nothing = shipping_of_part(empty, empty_stores, "shipping query");
	EXPECT_EQ(nothing.fee.type(), NumberType::Float8);
	EXPECT_EQ(nothing.free_from.type(), NumberType::Numeric);
	EXPECT_EQ(nothing.store.size(), 0u);
}

/*
 * A partition whose carts optimize_carts refuses for a price that is not
 * finite sends a refusal in place of its rows, and the merge's first step
 * raises the least offer any partition names, whatever their order: the
 * one that one server holding every cart names.  Each partition sees only
 * its carts' products, so each names another offer.  A quantity below 1
 * is checked before any price, on one server and so in the merge too.
 */
TEST(CartShards, TheMergeRaisesTheLeastRefusalAsOneServerDoes)
{
	IdColumn product;
	Int64Column store;
	NumberColumn price(NumberType::Numeric);
	auto offer = [&](int64_t p, int64_t s, int64_t cents) {
		product.push_back(p);
		store.push_back(s);
		if (cents < 0)
			price.push_numeric_special(NumberColumn::kScaleNaN);
		else
			price.push_numeric(cents, 2);
	};
	offer(5, 2, -1); /* product 5's best at store 2: NaN */
	offer(5, 1, 300);
	offer(3, 9, -1); /* product 3's at stores 9 and 7 */
	offer(3, 7, -1);
	offer(3, 7, -1);
	offer(1, 4, 250);
	Offers offers{product, store, price};
	Int64Column no_stores;
	NumberColumn fees(NumberType::Numeric), free_from(NumberType::Numeric);
	Shipping shipping{no_stores, fees, free_from};
	/* a partition's part of its carts' (cart, product, quantity) lines, or its refusal */
	auto part_of = [&](std::vector<std::tuple<int64_t, int64_t, int64_t>> cart_lines) {
		Int64Column cart, cart_product, current, quantity;
		for (auto [c, p, q] : cart_lines)
		{
			cart.push_back(c);
			cart_product.push_back(p);
			current.push_back(kNoCurrentStore);
			quantity.push_back(q);
		}
		CartLines lines{cart, cart_product, current, quantity};
		ExecContext ctx;
		ctx.mode = DeviceMode::Cpu;
		try
		{
			return optimized_lines_part(lines, optimize_carts(lines, offers, shipping, ctx), offers).bytes();
		}
		catch (const Error &e)
		{
			EXPECT_FALSE(e.order().empty()) << e.what();
			return refusal_bytes(e);
		}
	};
	struct Bytes
	{
		const uint8_t *data;
		size_t size;
	};
	auto merge = [&](std::vector<const std::vector<uint8_t> *> order) {
		std::vector<Bytes> parts;
		for (const std::vector<uint8_t> *part : order)
			parts.push_back({part->data(), part->size()});
		raise_least_refusal(parts);
		ShardRows rows = optimized_lines_rows();
		for (const Bytes &part : parts)
			rows.append(part.data, part.size, 0);
		return merge_optimized_lines(rows);
	};
	std::vector<uint8_t> refused_5 = part_of({{1, 5, 1}, {1, 1, 1}}), refused_3 = part_of({{2, 3, 1}}),
						 answered = part_of({{3, 1, 1}}), no_quantity = part_of({{4, 5, 0}, {4, 1, 2}});
	struct Case
	{
		std::vector<const std::vector<uint8_t> *> parts;
		const char *message;
	};
	for (const Case &c : {Case{{&refused_5, &answered, &refused_3}, "the price of product 3 at store 7 is not a finite number"},
						  Case{{&refused_3, &refused_5}, "the price of product 3 at store 7 is not a finite number"},
						  Case{{&answered, &refused_5}, "the price of product 5 at store 2 is not a finite number"},
						  Case{{&refused_3, &no_quantity, &answered}, "quantity must be at least 1"}})
	{
		try
		{
			merge(c.parts);
			ADD_FAILURE() << "no error";
		}
		catch (const Error &e)
		{
			EXPECT_EQ(std::string(e.what()), c.message);
			EXPECT_STREQ(e.sqlstate(), sqlstate::invalid_parameter_value);
			EXPECT_EQ(e.detail(), std::string(c.message[0] == 'q' ? "Cart 4 has 0 of product 5."
																	 : "optimize_carts needs a finite price for every "
																	   "offer of a product in a cart."));
		}
	}
	/* only answers: the rows */
	MergedOptimizedLines merged = merge({&answered});
	ASSERT_EQ(merged.lines.size(), 1u);
	EXPECT_EQ(merged.lines[0].store_id, 4);
	/* a refusal that does not read is 22P03 */
	std::vector<uint8_t> cut(refused_3.begin(), refused_3.end() - 3);
	try
	{
		merge({&answered, &cut});
		ADD_FAILURE() << "no error";
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), sqlstate::invalid_binary_representation) << e.what();
	}
}

/*
 * What a partition sends of its offers (cart_offer_rows): of each product
 * asked for, its cheapest offer, and of each pair asked for (or each store
 * of those products), the store's cheapest; cheapest by value, then store,
 * then fewer decimals (2.5 before 2.50), against a brute force that
 * compares the values themselves; nothing else.
 */
TEST(CartShards, APartitionSendsTheOffersTheLinesDependOn)
{
	std::mt19937_64 rng(20261130);
	for (int round = 0; round < 200; ++round)
	{
		IdColumn product;
		Int64Column store;
		NumberColumn price(NumberType::Numeric);
		std::vector<std::tuple<int64_t, int64_t, int64_t, int>> rows; /* product, store, unscaled, scale */
		size_t n = 1 + rng() % 60;
		for (size_t i = 0; i < n; ++i)
		{
			int64_t p = static_cast<int64_t>(rng() % 8) - 2, s = static_cast<int64_t>(rng() % 5);
			int64_t cents = static_cast<int64_t>(rng() % 6) * 50; /* many equal prices */
			int scale = rng() % 2 ? 2 : 3;							/* 2.50 and 2.500 */
			int64_t unscaled = scale == 2 ? cents : cents * 10;
			product.push_back(p);
			store.push_back(s);
			price.push_numeric(unscaled, scale);
			rows.emplace_back(p, s, unscaled, scale);
		}
		Offers offers{product, store, price};
		std::vector<int64_t> products;
		for (int64_t p = -3; p < 7; ++p)
			if (rng() % 2)
				products.push_back(p);
		std::vector<std::pair<int64_t, int64_t>> pairs;
		for (int64_t p : products)
			for (int64_t s = 0; s < 6; ++s)
				if (rng() % 3 == 0)
					pairs.emplace_back(p, s);
		bool every_store = rng() % 2;
		ExecContext ctx;
		std::vector<size_t> got = cart_offer_rows(offers, products, every_store ? nullptr : &pairs, ctx);

		/* the brute force: values compared as unscaled x 10^(3 - scale) */
		auto before = [&](size_t a, size_t b) {
			auto [pa, sa, ua, ca] = rows[a];
			auto [pb, sb, ub, cb] = rows[b];
			int64_t va = ua * (ca == 2 ? 10 : 1), vb = ub * (cb == 2 ? 10 : 1);
			return std::make_tuple(va, sa, ca) < std::make_tuple(vb, sb, cb);
		};
		auto cheapest = [&](auto of) {
			long best = -1;
			for (size_t r = 0; r < rows.size(); ++r)
				if (of(rows[r]) && (best < 0 || before(r, static_cast<size_t>(best))))
					best = static_cast<long>(r);
			return best;
		};
		std::vector<size_t> want;
		for (int64_t p : products)
		{
			long best = cheapest([&](const auto &row) { return std::get<0>(row) == p; });
			if (best >= 0)
				want.push_back(static_cast<size_t>(best));
			for (int64_t s = 0; s < 6; ++s)
			{
				bool asked = every_store || std::find(pairs.begin(), pairs.end(), std::make_pair(p, s)) != pairs.end();
				long at = cheapest([&](const auto &row) { return std::get<0>(row) == p && std::get<1>(row) == s; });
				if (asked && at >= 0)
					want.push_back(static_cast<size_t>(at));
			}
		}
		std::sort(want.begin(), want.end());
		want.erase(std::unique(want.begin(), want.end()), want.end());
		ASSERT_EQ(got, want) << "round " << round;
	}
}

} // namespace
} // namespace gpurec
