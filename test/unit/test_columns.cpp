/*
 * test_columns.cpp: the engine's input columns (column_chunks.hpp,
 * id_column.hpp, number_column.hpp), each against a reference written
 * here: order keys of doubles against IEEE comparison, numeric keys
 * against exact 128-bit arithmetic, the id dictionary against std::map.
 * Fresh random data every run; the seed is printed, and GPUREC_TEST_SEED
 * replays it.
 */
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "../../src/column_chunks.hpp"
#include "../../src/id_column.hpp"
#include "../../src/number_column.hpp"
#include "proc_smaps.hpp"
#include "test_random.hpp"

namespace gpurec {
namespace {

double from_bits(uint64_t bits)
{
	double d;
	std::memcpy(&d, &bits, sizeof d);
	return d;
}

uint64_t bits_of(double d)
{
	uint64_t bits;
	std::memcpy(&bits, &d, sizeof bits);
	return bits;
}

const double kInf = std::numeric_limits<double>::infinity();

/* Doubles of every kind: random bit patterns (all exponents, subnormals,
 * infinities, NaNs), the edges, and small values with many ties. */
std::vector<double> interesting_doubles(std::mt19937_64 &rng, size_t n)
{
	std::vector<double> v = {0.0,
							 -0.0,
							 kInf,
							 -kInf,
							 std::numeric_limits<double>::quiet_NaN(),
							 -std::numeric_limits<double>::quiet_NaN(),
							 std::numeric_limits<double>::signaling_NaN(),
							 from_bits(0x7FF0000000000001ULL), /* NaN, smallest payload */
							 from_bits(0xFFFFFFFFFFFFFFFFULL), /* NaN, all bits */
							 std::numeric_limits<double>::denorm_min(),
							 -std::numeric_limits<double>::denorm_min(),
							 std::numeric_limits<double>::min(),
							 -std::numeric_limits<double>::min(),
							 from_bits(0x000FFFFFFFFFFFFFULL), /* largest subnormal */
							 -from_bits(0x000FFFFFFFFFFFFFULL),
							 std::numeric_limits<double>::max(),
							 -std::numeric_limits<double>::max(),
							 std::numeric_limits<double>::epsilon(),
							 1.0,
							 -1.0,
							 0.1,
							 0.30000000000000004,
							 0.3};
	std::uniform_int_distribution<int> small(-40, 40);
	while (v.size() < n)
	{
		switch (rng() % 4)
		{
			case 0:
				v.push_back(from_bits(rng())); /* any pattern */
				break;
			case 1:
				v.push_back(from_bits(rng() & 0x800FFFFFFFFFFFFFULL)); /* subnormal (or zero) */
				break;
			case 2:
				v.push_back(small(rng) / 8.0); /* ties */
				break;
			default:
				v.push_back(std::ldexp(double(int64_t(rng()) >> 11), small(rng) * 20));
				break;
		}
	}
	return v;
}

/* PostgreSQL's float order: NaN above everything, all NaNs equal, -0 == 0. */
int pg_compare(double a, double b)
{
	if (std::isnan(a) || std::isnan(b))
		return std::isnan(a) - std::isnan(b);
	return a < b ? -1 : a > b ? 1 : 0;
}

TEST(OrderKeyProperties, AgreesWithPostgresOrderOnRandomPairs)
{
	auto rng = seeded_rng();
	std::vector<double> v = interesting_doubles(rng, 4000);
	for (size_t i = 0; i < v.size(); ++i)
		for (size_t j = i; j < v.size(); j += 1 + rng() % 7)
		{
			int want = pg_compare(v[i], v[j]);
			int64_t a = order_key_from_double(v[i]), b = order_key_from_double(v[j]);
			int got = a < b ? -1 : a > b ? 1 : 0;
			ASSERT_EQ(got, want) << v[i] << " (bits " << std::hex << bits_of(v[i]) << ") vs "
								 << v[j] << " (bits " << bits_of(v[j]) << ")";
		}
}

TEST(OrderKeyProperties, SortingByKeySortsByValue)
{
	auto rng = seeded_rng();
	std::vector<double> v = interesting_doubles(rng, 100000);
	std::sort(v.begin(), v.end(), [](double a, double b) {
		return order_key_from_double(a) < order_key_from_double(b);
	});
	for (size_t i = 1; i < v.size(); ++i)
		ASSERT_LE(pg_compare(v[i - 1], v[i]), 0) << v[i - 1] << " sorted before " << v[i];
}

TEST(OrderKeyProperties, NaNIsOneKeyAboveInfinity)
{
	int64_t nan_key = order_key_from_double(std::numeric_limits<double>::quiet_NaN());
	auto rng = seeded_rng();
	for (int i = 0; i < 10000; ++i)
	{
		/* any exponent-all-ones pattern with a non-zero mantissa, either sign */
		uint64_t mantissa = rng() & 0x000FFFFFFFFFFFFFULL;
		if (mantissa == 0)
			mantissa = 1;
		double nan = from_bits((rng() & 0x8000000000000000ULL) | 0x7FF0000000000000ULL | mantissa);
		ASSERT_TRUE(std::isnan(nan));
		ASSERT_EQ(order_key_from_double(nan), nan_key) << std::hex << bits_of(nan);
	}
	EXPECT_GT(nan_key, order_key_from_double(kInf));
	EXPECT_GT(nan_key, order_key_from_double(std::numeric_limits<double>::max()));
	EXPECT_TRUE(std::isnan(double_from_order_key(nan_key)));
}

TEST(OrderKeyProperties, NegativeZeroIsZero)
{
	EXPECT_EQ(order_key_from_double(-0.0), order_key_from_double(0.0));
	EXPECT_EQ(order_key_from_double(-0.0), 0);
	EXPECT_FALSE(std::signbit(double_from_order_key(order_key_from_double(-0.0))));
	EXPECT_LT(order_key_from_double(-std::numeric_limits<double>::denorm_min()), 0);
	EXPECT_GT(order_key_from_double(std::numeric_limits<double>::denorm_min()), 0);
}

TEST(OrderKeyProperties, NeighbouringDoublesHaveNeighbouringKeys)
{
	/* strictly monotone and dense within each sign: the next double is the next key */
	auto rng = seeded_rng();
	std::vector<double> v = interesting_doubles(rng, 20000);
	for (double d : v)
	{
		if (std::isnan(d) || std::isinf(d) || d == 0)
			continue;
		double up = std::nextafter(d, kInf);
		if (up == 0 || std::isinf(up))
			continue;
		ASSERT_EQ(order_key_from_double(up), order_key_from_double(d) + 1) << d;
	}
	EXPECT_EQ(order_key_from_double(kInf), order_key_from_double(std::numeric_limits<double>::max()) + 1);
	EXPECT_EQ(order_key_from_double(-std::numeric_limits<double>::max()),
			  order_key_from_double(-kInf) + 1);
}

TEST(OrderKeyProperties, RoundTripIsBitExact)
{
	auto rng = seeded_rng();
	for (double d : interesting_doubles(rng, 100000))
	{
		double back = double_from_order_key(order_key_from_double(d));
		if (std::isnan(d))
			ASSERT_TRUE(std::isnan(back));
		else if (d == 0)
			ASSERT_EQ(bits_of(back), 0u) << "zero comes back as +0";
		else
			ASSERT_EQ(bits_of(back), bits_of(d)) << d;
	}
}

TEST(OrderKeyProperties, FloatsWidenInOrder)
{
	/* real values are keyed through their exact double: float order is kept, and the
	 * key converts back to the same float */
	auto rng = seeded_rng();
	std::vector<float> f = {0.0f, -0.0f, 1e-40f, -1e-40f, std::numeric_limits<float>::max(),
							std::numeric_limits<float>::infinity(), 0.1f, 16777217.0f};
	while (f.size() < 50000)
	{
		uint32_t bits = static_cast<uint32_t>(rng());
		float x;
		std::memcpy(&x, &bits, sizeof x);
		f.push_back(x);
	}
	for (size_t i = 1; i < f.size(); ++i)
	{
		float a = f[i - 1], b = f[i];
		int64_t ka = order_key_from_double(a), kb = order_key_from_double(b);
		ASSERT_EQ(ka < kb ? -1 : ka > kb ? 1 : 0, pg_compare(a, b)) << a << " " << b;
		float back = static_cast<float>(double_from_order_key(kb));
		if (std::isnan(b))
			ASSERT_TRUE(std::isnan(back));
		else
			ASSERT_EQ(back, b);
	}
}

TEST(OrderKeyProperties, DoublesOrderAsPostgresDoes)
{
	std::vector<double> values = {-kInf, -1e300, -2.5, -1, -5e-324, -0.0, 0.0, 5e-324, 1, 2.5, 1e300, kInf};
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
	EXPECT_GT(order_key_from_double(nan), order_key_from_double(kInf));
	EXPECT_EQ(order_key_from_double(-0.0), order_key_from_double(0.0));
}

/* ------------------------------------------------------------- numeric keys */

/* A finite numeric the test knows exactly: unscaled * 10^-dscale. */
struct Decimal
{
	int64_t unscaled;
	int dscale;
};

__int128 pow10_128(int p)
{
	__int128 r = 1;
	while (p-- > 0)
		r *= 10;
	return r;
}

/* Exact comparison of two decimals. */
int compare_decimals(const Decimal &a, const Decimal &b)
{
	int common = std::max(a.dscale, b.dscale);
	__int128 x = __int128(a.unscaled) * pow10_128(common - a.dscale);
	__int128 y = __int128(b.unscaled) * pow10_128(common - b.dscale);
	return x < y ? -1 : x > y ? 1 : 0;
}

void expect_sqlstate(const std::function<void()> &f, const char *state, const char *what)
{
	try
	{
		f();
		ADD_FAILURE() << what << ": no error";
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), state) << what << ": " << e.what();
	}
}

TEST(NumberColumnNumeric, MixedScalesOrderExactly)
{
	auto rng = seeded_rng();
	for (int trial = 0; trial < 30; ++trial)
	{
		NumberColumn c(NumberType::Numeric);
		std::vector<Decimal> pushed;
		int max_scale = static_cast<int>(rng() % 10);
		/* values |v| < 10^6 at scale <= 9: keys at most 10^15, always in range */
		size_t n = 1 + rng() % 3000;
		for (size_t i = 0; i < n; ++i)
		{
			Decimal d;
			d.dscale = max_scale ? static_cast<int>(rng() % (max_scale + 1)) : 0;
			if (rng() % 3 == 0)
			{
				/* a few values spelled at several scales: 1.5, 1.50, 1.500 */
				int64_t tenths = static_cast<int64_t>(rng() % 41) - 20;
				d.dscale = std::max(d.dscale, 1);
				d.unscaled = tenths * static_cast<int64_t>(pow10_128(d.dscale - 1));
			}
			else
				d.unscaled = static_cast<int64_t>(rng() % 2000001) - 1000000;
			pushed.push_back(d);
			c.push_numeric(d.unscaled, d.dscale);
		}
		int scale = 0;
		for (const Decimal &d : pushed)
			scale = std::max(scale, d.dscale);
		ASSERT_EQ(c.size(), n);
		ASSERT_EQ(c.scale(), scale);
		for (size_t i = 0; i < n; ++i)
		{
			ASSERT_EQ(c.display_scale(i), pushed[i].dscale) << "row " << i;
			ASSERT_EQ(c.unscaled_at_display_scale(i), pushed[i].unscaled) << "row " << i;
			ASSERT_EQ(__int128(c.key(i)),
					  __int128(pushed[i].unscaled) * pow10_128(scale - pushed[i].dscale));
			ASSERT_DOUBLE_EQ(c.to_double(i),
							 double(pushed[i].unscaled) / double(pow10_128(pushed[i].dscale)));
		}
		for (int pair = 0; pair < 2000; ++pair)
		{
			size_t i = rng() % n, j = rng() % n;
			int want = compare_decimals(pushed[i], pushed[j]);
			int got = c.key(i) < c.key(j) ? -1 : c.key(i) > c.key(j) ? 1 : 0;
			ASSERT_EQ(got, want) << pushed[i].unscaled << "e-" << pushed[i].dscale << " vs "
								 << pushed[j].unscaled << "e-" << pushed[j].dscale;
		}
	}
}

TEST(NumberColumnNumeric, FirstRowAtTheLargestScale)
{
	NumberColumn c(NumberType::Numeric);
	c.push_numeric(1500, 3); /* 1.500 */
	c.push_numeric(2, 0);	 /* 2 */
	c.push_numeric(-15, 1);	 /* -1.5 */
	EXPECT_EQ(c.scale(), 3);
	EXPECT_EQ(c.key(0), 1500);
	EXPECT_EQ(c.key(1), 2000);
	EXPECT_EQ(c.key(2), -1500);
	EXPECT_EQ(c.display_scale(1), 0);
	EXPECT_EQ(c.unscaled_at_display_scale(1), 2);
	EXPECT_EQ(c.display_scale(2), 1);
	EXPECT_EQ(c.unscaled_at_display_scale(2), -15);
}

TEST(NumberColumnNumeric, RescaleAcrossChunks)
{
	/* more rows than a chunk at one scale, then a row of a larger scale */
	NumberColumn c(NumberType::Numeric);
	size_t n = ChunkedColumn<int64_t>::kChunkRows + 1000;
	for (size_t i = 0; i < n; ++i)
		c.push_numeric(static_cast<int64_t>(i % 1000) - 500, 1);
	c.push_numeric(12345, 4); /* 1.2345 */
	ASSERT_EQ(c.scale(), 4);
	for (size_t i = 0; i < n; i += 997)
	{
		ASSERT_EQ(c.key(i), (static_cast<int64_t>(i % 1000) - 500) * 1000) << i;
		ASSERT_EQ(c.display_scale(i), 1);
		ASSERT_EQ(c.unscaled_at_display_scale(i), static_cast<int64_t>(i % 1000) - 500);
	}
	EXPECT_EQ(c.key(n - 1), (static_cast<int64_t>((n - 1) % 1000) - 500) * 1000);
	EXPECT_EQ(c.key(n), 12345);
	EXPECT_EQ(c.display_scale(n), 4);
}

TEST(NumberColumnNumeric, SpecialValuesAtTheEnds)
{
	NumberColumn c(NumberType::Numeric);
	c.push_numeric_special(NumberColumn::kScaleNaN);
	c.push_numeric_special(NumberColumn::kScalePosInf);
	c.push_numeric(-7, 0);
	c.push_numeric_special(NumberColumn::kScaleNegInf);
	c.push_numeric(5, 2); /* rescales the finite rows only */
	c.push_numeric(INT64_MAX / 1000, 2);
	c.push_numeric(-(INT64_MAX / 1000), 2);
	ASSERT_EQ(c.scale(), 2);
	EXPECT_EQ(c.key(0), NumberColumn::kNumericNaN);
	EXPECT_EQ(c.key(1), NumberColumn::kNumericPosInf);
	EXPECT_EQ(c.key(2), -700);
	EXPECT_EQ(c.key(3), NumberColumn::kNumericNegInf);
	EXPECT_EQ(c.display_scale(0), NumberColumn::kScaleNaN);
	EXPECT_EQ(c.display_scale(1), NumberColumn::kScalePosInf);
	EXPECT_EQ(c.display_scale(3), NumberColumn::kScaleNegInf);
	EXPECT_EQ(c.display_scale(2), 0);
	for (size_t finite : {2, 4, 5, 6})
	{
		EXPECT_LT(c.key(finite), c.key(1));
		EXPECT_GT(c.key(finite), c.key(3));
	}
	EXPECT_GT(c.key(0), c.key(1));
	EXPECT_TRUE(std::isnan(c.to_double(0)));
	EXPECT_EQ(c.to_double(1), kInf);
	EXPECT_EQ(c.to_double(3), -kInf);
	EXPECT_EQ(c.to_double(2), -7.0);
	EXPECT_EQ(c.to_double(4), 0.05);
}

TEST(NumberColumnNumeric, NegativeValuesAndZeros)
{
	NumberColumn c(NumberType::Numeric);
	c.push_numeric(0, 2);	 /* 0.00 */
	c.push_numeric(0, 0);	 /* 0 */
	c.push_numeric(-1, 18); /* -0.000000000000000001 */
	c.push_numeric(-3, 0);
	EXPECT_EQ(c.key(0), c.key(1));
	EXPECT_LT(c.key(2), c.key(0));
	EXPECT_LT(c.key(3), c.key(2));
	EXPECT_EQ(c.unscaled_at_display_scale(0), 0);
	EXPECT_EQ(c.display_scale(0), 2);
	EXPECT_EQ(c.unscaled_at_display_scale(2), -1);
	EXPECT_EQ(c.display_scale(2), 18);
	EXPECT_EQ(c.unscaled_at_display_scale(3), -3);
}

TEST(NumberColumnNumeric, OutOfRangeIs22003)
{
	const char *range = sqlstate::numeric_value_out_of_range;
	/* the finite range is strictly between the special keys */
	expect_sqlstate([] { NumberColumn(NumberType::Numeric).push_numeric(INT64_MAX, 0); }, range,
					"INT64_MAX");
	expect_sqlstate([] { NumberColumn(NumberType::Numeric).push_numeric(INT64_MAX - 1, 0); },
					range, "INT64_MAX - 1 (the +Infinity key)");
	expect_sqlstate([] { NumberColumn(NumberType::Numeric).push_numeric(INT64_MIN, 0); }, range,
					"INT64_MIN (the -Infinity key)");
	{
		NumberColumn c(NumberType::Numeric);
		c.push_numeric(INT64_MAX - 2, 0);
		c.push_numeric(INT64_MIN + 1, 0);
		EXPECT_LT(c.key(0), NumberColumn::kNumericPosInf);
		EXPECT_GT(c.key(1), NumberColumn::kNumericNegInf);
	}
	/* rescaling an earlier row out of range */
	expect_sqlstate(
		[] {
			NumberColumn c(NumberType::Numeric);
			c.push_numeric(100000000000000000LL, 0); /* 10^17 */
			c.push_numeric(1, 2);					 /* 10^17 at scale 2 is 10^19 */
		},
		range, "10^17 rescaled by 100");
	/* a later row too large for the column's scale */
	expect_sqlstate(
		[] {
			NumberColumn c(NumberType::Numeric);
			c.push_numeric(1, 18);
			c.push_numeric(10, 0); /* 10 at scale 18 is 10^19 */
		},
		range, "10 at scale 18");
	/* more than 18 significant decimals */
	expect_sqlstate([] { NumberColumn(NumberType::Numeric).push_numeric(5, 19); }, range,
					"5e-19");
	expect_sqlstate([] { NumberColumn(NumberType::Numeric).push_numeric(1, 40); }, range, "1e-40");
	/* at the limit: fine */
	NumberColumn c(NumberType::Numeric);
	c.push_numeric(999999999999999999LL, 18);
	c.push_numeric(-9, 0);
	EXPECT_EQ(c.key(1), -9000000000000000000LL);
	EXPECT_EQ(c.unscaled_at_display_scale(0), 999999999999999999LL);
}

TEST(NumberColumnNumeric, TrailingZerosBeyond18DecimalsKeepTheirScale)
{
	/*
	 * 0.0000000000000001000 (dscale 19) equals 100 x 10^-18.  Its display
	 * scale is part of the value that SQL returns (price::numeric::text), so
	 * the column must either keep dscale 19 or refuse the row (22003); it
	 * must not report dscale 18.
	 */
	NumberColumn c(NumberType::Numeric);
	try
	{
		c.push_numeric(1000, 19);
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), sqlstate::numeric_value_out_of_range);
		return;
	}
	EXPECT_EQ(c.display_scale(0), 19) << "0.0000000000000001000 comes back as "
									  << c.unscaled_at_display_scale(0) << "e-"
									  << c.display_scale(0);
}

TEST(NumberColumnNumeric, UniformThenMixedScales)
{
	NumberColumn c(NumberType::Numeric);
	for (int i = 0; i < 100; ++i)
		c.push_numeric_special(NumberColumn::kScaleNaN);
	c.push_numeric(3, 1);
	for (int i = 0; i < 100; ++i)
		ASSERT_EQ(c.display_scale(i), NumberColumn::kScaleNaN);
	EXPECT_EQ(c.display_scale(100), 1);
	EXPECT_EQ(c.key(100), 3);
	EXPECT_EQ(c.key(0), NumberColumn::kNumericNaN);
}

TEST(NumberColumnNumeric, KeysAcrossScalesAndSpecials)
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

	expect_sqlstate(
		[] {
			NumberColumn too_big(NumberType::Numeric);
			too_big.push_numeric(1, 0);
			too_big.push_numeric(1, 18); /* 1 at scale 18 fits; 10^19 x 1 does not */
			too_big.push_numeric(100, 0);
		},
		sqlstate::numeric_value_out_of_range, "100 at scale 18");
}

TEST(NumberColumnNumeric, UniformScaleStoresNoPerRowScale)
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

TEST(NumberColumnOtherTypes, IntegersAndDoubles)
{
	NumberColumn ints(NumberType::Integer);
	for (int64_t v : {INT64_MIN, int64_t(-1), int64_t(0), INT64_MAX})
		ints.push_integer(v);
	EXPECT_EQ(ints.key(0), INT64_MIN);
	EXPECT_EQ(ints.key(3), INT64_MAX);
	EXPECT_EQ(ints.to_double(1), -1.0);

	NumberColumn doubles(NumberType::Float8);
	doubles.push_double(-0.0);
	doubles.push_double(std::numeric_limits<double>::denorm_min());
	doubles.push_double(-kInf);
	doubles.push_double(std::nan(""));
	EXPECT_EQ(doubles.to_double(0), 0.0);
	EXPECT_EQ(doubles.to_double(1), std::numeric_limits<double>::denorm_min());
	EXPECT_EQ(doubles.to_double(2), -kInf);
	EXPECT_TRUE(std::isnan(doubles.to_double(3)));
	EXPECT_LT(doubles.key(2), doubles.key(0));
	EXPECT_LT(doubles.key(0), doubles.key(1));
	EXPECT_LT(doubles.key(1), doubles.key(3));
}

/* ----------------------------------------------------------- id dictionary */

/* The dictionary's hash, copied here to make ids that collide in its table. */
uint64_t mix(int64_t id)
{
	uint64_t x = static_cast<uint64_t>(id);
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

void check_dictionary(const IdColumn &ids, const std::vector<int64_t> &pushed,
					  std::mt19937_64 &rng)
{
	std::unordered_map<int64_t, int64_t> counts;
	std::vector<int64_t> first_seen;
	for (int64_t id : pushed)
		if (counts[id]++ == 0)
			first_seen.push_back(id);
	ASSERT_EQ(ids.size(), pushed.size());
	ASSERT_EQ(ids.distinct(), counts.size());
	ASSERT_EQ(ids.codes().size(), pushed.size());
	for (size_t i = 0; i < pushed.size(); ++i)
	{
		ASSERT_EQ(ids.code(i), ids.codes()[i]);
		ASSERT_EQ(ids.value_of(ids.code(i)), pushed[i]) << "row " << i;
	}
	int64_t total = 0;
	for (size_t code = 0; code < first_seen.size(); ++code)
	{
		ASSERT_EQ(ids.value_of(static_cast<int32_t>(code)), first_seen[code]);
		ASSERT_EQ(ids.counts()[code], counts[first_seen[code]]);
		ASSERT_EQ(ids.find(first_seen[code]), static_cast<int32_t>(code));
		total += ids.counts()[code];
	}
	EXPECT_EQ(total, static_cast<int64_t>(pushed.size()));
	for (int i = 0; i < 20000; ++i)
	{
		int64_t probe = i % 2 ? static_cast<int64_t>(rng()) : static_cast<int64_t>(rng() % 4096) - 2048;
		auto it = counts.find(probe);
		if (it == counts.end())
			ASSERT_EQ(ids.find(probe), -1) << probe;
		else
			ASSERT_EQ(ids.value_of(ids.find(probe)), probe);
	}
	std::vector<int32_t> ordered = ids.codes_in_id_order();
	ASSERT_EQ(ordered.size(), ids.distinct());
	std::set<int32_t> seen(ordered.begin(), ordered.end());
	EXPECT_EQ(seen.size(), ordered.size());
	for (size_t i = 1; i < ordered.size(); ++i)
		ASSERT_LT(ids.value_of(ordered[i - 1]), ids.value_of(ordered[i]));
}

/* A column's flat form written packed (ByteWriter::pack_integers), then read back. */
template <typename T> ChunkedColumn<T> packed_round_trip(const ChunkedColumn<T> &column, size_t *bytes = nullptr)
{
	std::vector<uint8_t> out = serialized_bytes(column, [](ByteWriter &w) { w.pack_integers(); });
	if (bytes)
		*bytes = out.size();
	ByteReader in(out.data(), out.size());
	ChunkedColumn<T> back = ChunkedColumn<T>::read_serialized(in);
	EXPECT_TRUE(in.at_end());
	return back;
}

TEST(PackedColumns, EveryValueComesBack)
{
	/* extremes next to each other (differences that wrap), small steps, more rows than a chunk */
	auto rng = seeded_rng();
	ChunkedColumn<int64_t> wide;
	ChunkedColumn<int16_t> narrow;
	ChunkedColumn<uint8_t> bytes;
	std::vector<int64_t> specials{INT64_MIN, INT64_MAX, 0, -1, 1, INT64_MIN, INT64_MIN + 1, INT64_MAX, -1};
	for (size_t row = 0; row < ChunkedColumn<int64_t>::kChunkRows + 777; ++row)
	{
		int64_t v = row < specials.size() ? specials[row]
					: rng() % 3 == 0	  ? static_cast<int64_t>(rng())
										  : static_cast<int64_t>(row / 3) - static_cast<int64_t>(rng() % 5);
		wide.push_back(v);
		narrow.push_back(static_cast<int16_t>(rng() % 2 ? INT16_MIN + rng() % 7 : INT16_MAX - rng() % 7));
		bytes.push_back(static_cast<uint8_t>(rng()));
	}
	ChunkedColumn<int64_t> wide_back = packed_round_trip(wide);
	ChunkedColumn<int16_t> narrow_back = packed_round_trip(narrow);
	ChunkedColumn<uint8_t> bytes_back = packed_round_trip(bytes);
	ASSERT_EQ(wide_back.size(), wide.size());
	ASSERT_EQ(narrow_back.size(), narrow.size());
	ASSERT_EQ(bytes_back.size(), bytes.size());
	for (size_t row = 0; row < wide.size(); ++row)
	{
		ASSERT_EQ(wide_back[row], wide[row]) << "row " << row;
		ASSERT_EQ(narrow_back[row], narrow[row]) << "row " << row;
		ASSERT_EQ(bytes_back[row], bytes[row]) << "row " << row;
	}
	/* sorted ids that repeat: about a byte a row, against eight flat */
	ChunkedColumn<int64_t> ids;
	for (int64_t id = 0; id < 100000; ++id)
		for (int i = 0; i < 2; ++i)
			ids.push_back(1000000 + id);
	size_t packed_bytes = 0;
	ChunkedColumn<int64_t> ids_back = packed_round_trip(ids, &packed_bytes);
	EXPECT_LT(packed_bytes, ids.size() * 11 / 10);
	for (size_t row = 0; row < ids.size(); ++row)
		ASSERT_EQ(ids_back[row], ids[row]);
	/* doubles are never packed: their flat form, whatever the writer */
	ChunkedColumn<double> doubles;
	doubles.push_back(-0.0);
	doubles.push_back(1.5);
	ChunkedColumn<double> doubles_back = packed_round_trip(doubles, &packed_bytes);
	EXPECT_EQ(packed_bytes, 8 + 1 + 2 * sizeof(double));
	EXPECT_TRUE(std::signbit(doubles_back[0]));
	EXPECT_EQ(doubles_back[1], 1.5);
}

TEST(PackedColumns, MalformedBytesAreInternalErrors)
{
	auto read = [](std::vector<uint8_t> bytes, auto zero) {
		ByteReader in(bytes.data(), bytes.size());
		using T = decltype(zero);
		ChunkedColumn<T>::read_serialized(in);
	};
	auto header = [](uint64_t rows) {
		std::vector<uint8_t> out(8);
		std::memcpy(out.data(), &rows, 8);
		out.push_back(2);
		return out;
	};
	/* more rows than bytes left: refused before anything is allocated */
	EXPECT_THROW(read(header(uint64_t(1) << 40), int64_t()), Error);
	/* a varint that runs off the end, or past 64 bits */
	std::vector<uint8_t> open_varint = header(1);
	open_varint.push_back(0x80);
	EXPECT_THROW(read(open_varint, int64_t()), Error);
	std::vector<uint8_t> long_varint = header(1);
	for (int i = 0; i < 9; ++i)
		long_varint.push_back(0xff);
	long_varint.push_back(0x02);
	EXPECT_THROW(read(long_varint, int64_t()), Error);
	/* 40000 does not fit an int16: zigzag 80000 */
	std::vector<uint8_t> too_wide = header(1);
	for (uint8_t b : {0x80, 0xf1, 0x04})
		too_wide.push_back(b);
	EXPECT_THROW(read(too_wide, int16_t()), Error);
	EXPECT_NO_THROW(read(too_wide, int32_t()));
	/* a packed form for doubles, which no writer makes */
	EXPECT_THROW(read(header(0), double()), Error);
}

TEST(IdColumnDictionary, RandomIdsWithRepeats)
{
	auto rng = seeded_rng();
	for (int trial = 0; trial < 5; ++trial)
	{
		IdColumn ids;
		std::vector<int64_t> pushed;
		std::vector<int64_t> pool = {INT64_MIN, INT64_MAX, 0, -1, 1};
		size_t distinct = 1 + rng() % 20000;
		while (pool.size() < distinct)
			pool.push_back(rng() % 2 ? static_cast<int64_t>(rng()) : static_cast<int64_t>(rng() % 4096) - 2048);
		size_t n = 1 + rng() % 100000;
		for (size_t i = 0; i < n; ++i)
		{
			pushed.push_back(pool[rng() % std::min<size_t>(pool.size(), 1 + rng() % pool.size())]);
			ids.push_back(pushed.back());
		}
		check_dictionary(ids, pushed, rng);
	}
}

TEST(IdColumnDictionary, IdsCollidingInTheTable)
{
	/* ids whose hashes agree in their low 12 bits: one long probe chain, wrapping */
	auto rng = seeded_rng();
	std::vector<int64_t> colliding;
	uint64_t target = rng() & 0xFFF;
	for (int64_t id = static_cast<int64_t>(rng() >> 8); colliding.size() < 3000; ++id)
		if ((mix(id) & 0xFFF) == target)
			colliding.push_back(id);
	IdColumn ids;
	std::vector<int64_t> pushed;
	for (int i = 0; i < 30000; ++i)
	{
		pushed.push_back(colliding[rng() % (1 + std::min<size_t>(i, colliding.size() - 1))]);
		ids.push_back(pushed.back());
	}
	check_dictionary(ids, pushed, rng);
	/* absent ids of the same chain */
	for (int64_t id = colliding.back() + 1, found = 0; found < 100; ++id)
		if ((mix(id) & 0xFFF) == target)
		{
			++found;
			ASSERT_EQ(ids.find(id), -1);
		}
}

TEST(IdColumnDictionary, MoreRowsThanAChunk)
{
	auto rng = seeded_rng();
	IdColumn ids;
	std::vector<int64_t> pushed;
	size_t n = ChunkedColumn<int32_t>::kChunkRows * 2 + 77;
	for (size_t i = 0; i < n; ++i)
	{
		pushed.push_back(static_cast<int64_t>(rng() % 300000) * 7919 - 1000000);
		ids.push_back(pushed.back());
	}
	EXPECT_EQ(ids.codes().chunk_count(), 3u);
	check_dictionary(ids, pushed, rng);
}

TEST(IdColumnDictionary, CodesInFirstAppearanceOrder)
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

TEST(IdColumnDictionary, NumberedInIdOrderKeepsEveryRowsId)
{
	/* ids in the direct array, hashed (negative and large) ones, more rows than a chunk; pieces run last first */
	auto rng = seeded_rng();
	IdColumn ids;
	std::vector<int64_t> row_ids;
	for (size_t row = 0; row < ChunkedColumn<int32_t>::kChunkRows + 5000; ++row)
	{
		int64_t id = rng() % 3 == 0 ? static_cast<int64_t>(rng() % 4000) - 2000
					 : rng() % 2 == 0 ? static_cast<int64_t>(rng() % 3000)
									  : static_cast<int64_t>(rng() % 1000) * 1000000007LL;
		ids.push_back(id);
		row_ids.push_back(id);
	}
	ASSERT_FALSE(ids.numbered_in_id_order());
	std::map<int64_t, int64_t> rows_of;
	for (int64_t id : row_ids)
		++rows_of[id];
	PieceRunner backwards = [](size_t pieces, const std::function<void(size_t)> &piece) {
		for (size_t i = pieces; i-- > 0;)
			piece(i);
	};
	ids.number_in_id_order(backwards);
	EXPECT_TRUE(ids.numbered_in_id_order());
	ASSERT_EQ(ids.distinct(), rows_of.size());
	int32_t code = 0;
	for (const auto &[id, rows] : rows_of)
	{
		ASSERT_EQ(ids.value_of(code), id);
		ASSERT_EQ(ids.counts()[code], rows);
		ASSERT_EQ(ids.find(id), code);
		++code;
	}
	for (size_t row = 0; row < row_ids.size(); ++row)
		ASSERT_EQ(ids.value_of(ids.code(row)), row_ids[row]) << "row " << row;
	/* a new id below the others breaks the order again; ids that come ascending keep it */
	ids.push_back(INT64_MIN);
	EXPECT_FALSE(ids.numbered_in_id_order());
	IdColumn ascending;
	for (int64_t id : std::vector<int64_t>{-5, -5, 3, 7, 3, 1000000000000LL})
		ascending.push_back(id);
	EXPECT_TRUE(ascending.numbered_in_id_order());
}

TEST(IdColumnDictionary, EmptyAndZero)
{
	IdColumn ids;
	EXPECT_EQ(ids.find(0), -1);
	EXPECT_EQ(ids.find(INT64_MIN), -1);
	EXPECT_TRUE(ids.codes_in_id_order().empty());
	ids.push_back(5);
	EXPECT_EQ(ids.find(0), -1) << "0 is the id of an empty slot";
	ids.push_back(0);
	EXPECT_EQ(ids.find(0), 1);
	EXPECT_EQ(ids.counts()[1], 1);
}

} // namespace
} // namespace gpurec

namespace gpurec {
namespace {

/*
 * Ids take the direct array once they are dense enough and the hash table
 * otherwise; ids move from the table to the array as the array grows.  Each
 * round mixes a range that starts sparse and fills up, negative and huge
 * ids, and repeats: codes in order of first appearance, counts and find()
 * must agree with a plain map.
 */
TEST(IdColumnDictionary, DirectAndHashedIdsAgreeWithAMap)
{
	auto rng = seeded_rng();
	for (int round = 0; round < 20; ++round)
	{
		IdColumn column;
		std::map<int64_t, int32_t> code_of;
		std::vector<int64_t> ids;
		std::vector<int64_t> counts;
		size_t n = 20000 + rng() % 200000;
		uint64_t range = uint64_t(1) << (10 + rng() % 14); /* up to 2^23: past the direct array's limit */
		for (size_t i = 0; i < n; ++i)
		{
			int64_t id;
			switch (rng() % 8)
			{
				case 0:
					id = -static_cast<int64_t>(rng() % 1000) - 1;
					break;
				case 1:
					id = static_cast<int64_t>(rng() >> 1);
					break;
				default: /* the range fills as rows come: sparse first, denser later */
					id = static_cast<int64_t>(rng() % std::max<uint64_t>(1, range * (i + 1) / n));
			}
			ids.push_back(id);
			column.push_back(id);
			auto found = code_of.find(id);
			if (found == code_of.end())
			{
				code_of.emplace(id, static_cast<int32_t>(counts.size()));
				counts.push_back(0);
			}
			++counts[code_of[id]];
		}
		ASSERT_EQ(column.distinct(), code_of.size());
		for (size_t r = 0; r < n; ++r)
			ASSERT_EQ(column.code(r), code_of[ids[r]]) << "row " << r;
		for (const auto &[id, code] : code_of)
		{
			ASSERT_EQ(column.find(id), code) << "id " << id;
			ASSERT_EQ(column.value_of(code), id);
			ASSERT_EQ(column.counts()[code], counts[code]);
		}
		for (int probe = 0; probe < 1000; ++probe)
		{
			int64_t id = static_cast<int64_t>(rng() % (range * 2)) - 5;
			ASSERT_EQ(column.find(id), code_of.count(id) ? code_of[id] : -1) << "id " << id;
		}
	}
}

/*
 * The batch appends the input layer uses (IdColumn::append,
 * NumberColumn::push_numerics) give what pushing one row at a time gives:
 * batches of every size, across chunk boundaries, numeric batches whose
 * scales all match the column's, batches that change it, and special
 * values (the first row among them, whose marker the column keeps as its
 * display scale while every row has it).
 */
TEST(Columns, BatchAppendsAsOneByOne)
{
	auto rng = seeded_rng();
	for (int round = 0; round < 6; ++round)
	{
		IdColumn ids_batched, ids_one;
		NumberColumn numbers_batched(NumberType::Numeric), numbers_one(NumberType::Numeric);
		size_t n = ChunkedColumn<int64_t>::kChunkRows + 1 + rng() % 300000;
		int64_t id_range = 1 + static_cast<int64_t>(rng() % 100000);
		int base_scale = round % 2 == 0 ? 0 : 2; /* 0: a special first row leaves the column's scale at a key's */
		int nan_batches = round % 3 == 0 ? 2 : 0;
		for (size_t done = 0; done < n;)
		{
			size_t batch = std::min(n - done, static_cast<size_t>(1 + rng() % 300));
			std::vector<int64_t> id(batch), unscaled(batch);
			std::vector<int> scale(batch);
			/*
			 * mostly the scale of the rows before, now and then a batch with one
			 * more decimal or a special value (NaN, +-Infinity: a marker < 0);
			 * now and then the very first row is special
			 */
			int batch_scale = rng() % 50 == 0 ? base_scale + 1 : base_scale;
			bool special_batch = rng() % 30 == 0 || done == 0;
			for (size_t i = 0; i < batch; ++i)
			{
				id[i] = rng() % 7 == 0 ? static_cast<int64_t>(rng()) : static_cast<int64_t>(rng()) % id_range;
				unscaled[i] = static_cast<int64_t>(rng() % 2000001) - 1000000;
				scale[i] = i == batch / 2 ? batch_scale : base_scale;
				if (special_batch && (i == 0 || rng() % 4 == 0))
					scale[i] = -1 - static_cast<int>(rng() % 3);
				if (nan_batches > 0) /* the column starts with NaN only: its display scale is NaN's marker */
					scale[i] = NumberColumn::kScaleNaN;
			}
			nan_batches = std::max(0, nan_batches - 1);
			ids_batched.append(batch, [&](size_t i) { return id[i]; });
			numbers_batched.push_numerics(batch, [&](size_t i, int64_t *u, int *sc, int *display) {
				*u = unscaled[i];
				*sc = scale[i] < 0 ? 0 : scale[i]; /* as the input layer gives a special value */
				*display = scale[i];
			});
			for (size_t i = 0; i < batch; ++i)
			{
				ids_one.push_back(id[i]);
				if (scale[i] < 0)
					numbers_one.push_numeric_special(static_cast<int16_t>(scale[i]));
				else
					numbers_one.push_numeric(unscaled[i], scale[i]);
			}
			done += batch;
		}
		ASSERT_EQ(ids_batched.size(), n);
		ASSERT_EQ(ids_batched.values(), ids_one.values());
		ASSERT_EQ(ids_batched.counts(), ids_one.counts());
		ASSERT_EQ(numbers_batched.size(), n);
		ASSERT_EQ(numbers_batched.scale(), numbers_one.scale());
		ASSERT_EQ(numbers_batched.has_mixed_scales(), numbers_one.has_mixed_scales());
		for (size_t r = 0; r < n; ++r)
		{
			ASSERT_EQ(ids_batched.code(r), ids_one.code(r)) << "row " << r;
			ASSERT_EQ(numbers_batched.key(r), numbers_one.key(r)) << "row " << r;
			ASSERT_EQ(numbers_batched.display_scale(r), numbers_one.display_scale(r)) << "row " << r;
		}
	}
}

/* KeyFilter against a std::set: dense keys (a bitmap), spread ones (a table), the int64 limits, none */
TEST(Columns, KeyFilterAgreesWithASet)
{
	std::mt19937_64 rng = seeded_rng();
	auto spread = [&] { return static_cast<int64_t>(rng()); };
	auto dense = [&] { return static_cast<int64_t>(rng() % 5000) - 2500; };
	for (int round = 0; round < 8; ++round)
	{
		bool is_dense = round % 2 == 0;
		size_t n = round < 2 ? 0 : size_t(1) << (2 * round);
		std::vector<int64_t> keys;
		for (size_t i = 0; i < n; ++i)
			keys.push_back(is_dense ? dense() : spread());
		if (round >= 6)
			keys.insert(keys.end(), {INT64_MIN, INT64_MAX, 0});
		std::set<int64_t> want(keys.begin(), keys.end());
		KeyFilter filter(keys);
		EXPECT_EQ(filter.keys(), std::vector<int64_t>(want.begin(), want.end()));
		std::vector<int64_t> probes(keys.begin(), keys.end());
		for (int i = 0; i < 20000; ++i)
			probes.push_back(is_dense ? dense() : spread());
		probes.insert(probes.end(), {INT64_MIN, INT64_MAX, INT64_MIN + 1, INT64_MAX - 1, 0, -1, 1});
		for (int64_t key : probes)
			ASSERT_EQ(filter.contains(key), want.count(key) > 0) << "key " << key << ", round " << round;
	}
}

/*
 * give_back_pages: the whole pages inside the range read as zeros after it,
 * the pages it only partly covers and everything around keep their bytes.
 */
TEST(ChunkMemory, GiveBackPagesEmptiesOnlyWholePagesInside)
{
	size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
	size_t bytes = 8 * page;
	void *mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(mapped, MAP_FAILED);
	auto *memory = static_cast<uint8_t *>(mapped);
	std::memset(memory, 0xAB, bytes);
	/* from the middle of page 1 to the middle of page 6: pages 2 to 5 are inside */
	give_back_pages(memory + page + page / 2, 5 * page);
	for (size_t at = 0; at < bytes; ++at)
	{
		bool inside = at >= 2 * page && at < 6 * page;
		ASSERT_EQ(memory[at], inside ? 0 : 0xAB) << "byte " << at << " (page " << at / page << ")";
	}
	give_back_pages(memory + 10, page - 20); /* no whole page inside: nothing */
	EXPECT_EQ(memory[page / 2], 0xAB);
	munmap(mapped, bytes);
}

/*
 * A column's first chunk leaves its first 2 MiB on small pages (no huge
 * page advice there), the rest of it and every later chunk advised onto
 * huge pages: a column of a few rows faults in a page, not 2 MiB zeroed.
 */
TEST(ChunkMemory, FirstChunkStartsOnSmallPages)
{
	constexpr size_t kHuge = size_t(2) << 20, kBytes = 4 * kHuge;
	auto *first = static_cast<uint8_t *>(allocate_chunk(kBytes, true));
	auto *later = static_cast<uint8_t *>(allocate_chunk(kBytes));
	first[0] = 1;
	first[kHuge] = 1;
	later[0] = 1;
	std::string small = smaps_field(first, "VmFlags"), rest = smaps_field(first + kHuge, "VmFlags"),
				whole = smaps_field(later, "VmFlags");
	ASSERT_FALSE(small.empty());
	EXPECT_EQ(small.find(" hg"), std::string::npos) << small;
	EXPECT_NE(rest.find(" hg"), std::string::npos) << rest;
	EXPECT_NE(whole.find(" hg"), std::string::npos) << whole;
	free_chunk(first, kBytes);
	free_chunk(later, kBytes);
}

} // namespace
} // namespace gpurec
