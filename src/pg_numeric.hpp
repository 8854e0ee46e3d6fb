/*
 * pg_numeric.hpp: PostgreSQL's numeric to and from the engine's numbers
 * (implemented here and in pg_numeric.cpp).
 *
 * Decoding reads numeric's on-disk format directly, once per input value,
 * because going through numeric_out for every row would cost more than the
 * whole computation.  The layout read is PostgreSQL's documented one (a
 * short and a long header form).  numeric_parts and numeric_to_scaled run
 * for every numeric value an inner query returns, so they are inline here.
 *
 * Encoding builds the numeric Datum of a result column from a
 * NumberColumn's row, with numeric.c's own functions.
 */
#pragma once

#include "pg_boundary.hpp"

#include <cstring>

#include "number_column.hpp"

namespace gpurec {

/*
 * A numeric as stored on disk: base-10000 digits d[0..n) with value
 * sum d[i] * 10000^(weight - i), a sign and a display scale.
 */
struct NumericParts
{
	int16 special; /* 0, or NumberColumn::kScaleNaN / kScalePosInf / kScaleNegInf */
	bool negative;
	int weight;
	int dscale;
	int ndigits;
	const char *digits; /* unaligned uint16 digits */
};

/* The on-disk header's bits (numeric.c's NUMERIC_* macros). */
namespace numeric_disk {

constexpr uint16 kSignMask = 0xC000;
constexpr uint16 kNeg = 0x4000;
constexpr uint16 kShort = 0x8000;
constexpr uint16 kSpecial = 0xC000;
constexpr uint16 kExtMask = 0xF000;
constexpr uint16 kNaN = 0xC000;
constexpr uint16 kPInf = 0xD000;
constexpr uint16 kShortSign = 0x2000;
constexpr uint16 kShortDscaleMask = 0x1F80;
constexpr int kShortDscaleShift = 7;
constexpr uint16 kShortWeightSign = 0x0040;
constexpr uint16 kShortWeightMask = 0x003F;
constexpr uint16 kDscaleMask = 0x3FFF;

inline uint16 read_u16(const char *p)
{
	uint16 v;
	memcpy(&v, p, sizeof v);
	return v;
}

} // namespace numeric_disk

/*
 * Decoding is PostgreSQL code (numeric_to_double may palloc): call it from
 * PostgreSQL code or inside pg_call.
 */

/* `data` points at a numeric that is neither compressed nor external. */
inline NumericParts numeric_parts(const struct varlena *data)
{
	using namespace numeric_disk;
	const char *p = VARDATA_ANY(data);
	int len = VARSIZE_ANY_EXHDR(data);
	uint16 header = read_u16(p);
	NumericParts parts = {0, false, 0, 0, 0, nullptr};

	if ((header & kSignMask) == kSpecial)
	{
		uint16 kind = header & kExtMask;
		parts.special = kind == kNaN	? NumberColumn::kScaleNaN
						: kind == kPInf ? NumberColumn::kScalePosInf
										: NumberColumn::kScaleNegInf;
		return parts;
	}
	if ((header & kSignMask) == kShort)
	{
		parts.negative = (header & kShortSign) != 0;
		parts.dscale = (header & kShortDscaleMask) >> kShortDscaleShift;
		parts.weight = (header & kShortWeightSign) ? (~int(kShortWeightMask) | (header & kShortWeightMask))
												   : (header & kShortWeightMask);
		parts.digits = p + sizeof(uint16);
		parts.ndigits = (len - int(sizeof(uint16))) / int(sizeof(uint16));
	}
	else
	{
		parts.negative = (header & kSignMask) == kNeg;
		parts.dscale = header & kDscaleMask;
		parts.weight = static_cast<int16>(read_u16(p + sizeof(uint16)));
		parts.digits = p + 2 * sizeof(uint16);
		parts.ndigits = (len - 2 * int(sizeof(uint16))) / int(sizeof(uint16));
	}
	return parts;
}

/*
 * The finite numeric as unscaled * 10^-scale, where scale is its dscale,
 * or, past NumberColumn::kMaxNumericScale decimals, its dscale less its
 * trailing zeros (33/100.0 has dscale 20 but two decimals that count).  False when it cannot be
 * held exactly in 64 bits.
 */
/*
 * v / 10^k for k in 1..8: the trailing zeros a numeric's last base-10000
 * digit holds past its dscale (52317 is stored as 0523 1700).  A division
 * by a constant is a multiplication; by a table's entry it is a hardware
 * divide, which was a third of converting a price.
 */
inline uint64 drop_decimal_digits(uint64 v, int k)
{
	switch (k)
	{
		case 1:
			return v / 10;
		case 2:
			return v / 100;
		case 3:
			return v / 1000;
		case 4:
			return v / 10000;
		case 5:
			return v / 100000;
		case 6:
			return v / 1000000;
		case 7:
			return v / 10000000;
		default:
			return v / 100000000;
	}
}

inline bool numeric_to_scaled(const NumericParts &n, int64 *unscaled, int *scale)
{
	*scale = n.dscale;
	using numeric_disk::read_u16;
	static const int64 pow10[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};
	int exponent = 4 * (n.weight + 1 - n.ndigits) + n.dscale;
	if (n.ndigits <= 4 && exponent >= -8 && exponent <= 2)
	{
		/* prices: at most 16 digits, in 64-bit arithmetic (int128 division is slow) */
		uint64 acc = 0;
		for (int i = 0; i < n.ndigits; ++i)
			acc = acc * 10000 + read_u16(n.digits + 2 * i);
		acc = exponent >= 0 ? acc * pow10[exponent] : drop_decimal_digits(acc, -exponent);
		*unscaled = n.negative ? -static_cast<int64>(acc) : static_cast<int64>(acc);
		return true;
	}
	__int128 acc = 0;
	const __int128 limit = (__int128) 1 << 100;
	for (int i = 0; i < n.ndigits; ++i)
	{
		acc = acc * 10000 + read_u16(n.digits + 2 * i);
		if (acc > limit)
			return false;
	}
	/* acc counts units of 10^(4 * (weight + 1 - ndigits)); rescale to 10^-dscale */
	for (; exponent > 0; --exponent)
	{
		acc *= 10;
		if (acc > limit)
			return false;
	}
	for (; exponent < 0; ++exponent)
		acc /= 10; /* digits beyond dscale are zero */
	if (*scale > NumberColumn::kMaxNumericScale) /* rare (a division's result): all its trailing zeros go */
		while (*scale > 0 && acc % 10 == 0)
		{
			acc /= 10;
			--*scale;
		}
	if (n.negative)
		acc = -acc;
	if (acc <= NumberColumn::kNumericNegInf || acc >= NumberColumn::kNumericPosInf)
		return false;
	*unscaled = static_cast<int64>(acc);
	return true;
}

/*
 * The numeric rounded to the nearest double, exactly as numeric::float8 does;
 * +-HUGE_VAL when out of double's range (which float8in would reject).
 */
double numeric_to_double(const NumericParts &n);

/*
 * Encoding (C++, calls PostgreSQL through pg_call): the exact input value of
 * `row` as numeric, as value::numeric would give it.
 */
Datum number_as_numeric(const NumberColumn &column, size_t row);

/*
 * units * 10^-scale as numeric, shown with display_scale decimals (the
 * digits dropped or added are zeros): an exact sum of an engine's numbers.
 */
Datum units_as_numeric(int64 units, int scale, int display_scale);

} // namespace gpurec
