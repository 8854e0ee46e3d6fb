/*
 * roc_keys.hpp: how roc_fitness packs an example's score and label into one
 * unsigned integer, on the CPU and on the GPU alike (plain functions that
 * nvcc compiles for both sides).
 *
 * Scores are order keys (signed 64-bit, as the engine's number columns
 * hold them) made unsigned: monotone in the value,
 * NaN above everything, -0 equal to 0.  Within one call the keys are
 * shifted down by the lowest, and narrowed to float keys where every score
 * is a float exactly (real scores always are), so that (score, label)
 * usually takes 32 bits or a little more instead of 65: fewer radix-sort
 * passes and less memory to move.  The label is the lowest bit, so that
 * among equal scores the negatives sort first.
 */
#pragma once

#include <cstdint>
#include <cstring>

#include "host_device.hpp"

namespace gpurec::roc_keys {

GPUREC_HOST_DEVICE uint64_t unsigned_key_of_double(double d)
{
	uint64_t bits;
	if (d != d)
		bits = 0x7FF8000000000000ull; /* one NaN for all */
	else
	{
		if (d == 0)
			d = 0; /* folds -0 into +0 */
		memcpy(&bits, &d, sizeof bits);
	}
	return (bits >> 63) ? ~bits : bits | (uint64_t(1) << 63);
}

/* The unsigned key of a signed order key: the same order. */
GPUREC_HOST_DEVICE uint64_t unsigned_key_of_order_key(int64_t key)
{
	return static_cast<uint64_t>(key) ^ (uint64_t(1) << 63);
}

GPUREC_HOST_DEVICE double double_of_unsigned_key(uint64_t key)
{
	uint64_t bits = (key >> 63) ? key ^ (uint64_t(1) << 63) : ~key;
	double d;
	memcpy(&d, &bits, sizeof d);
	return d;
}

GPUREC_HOST_DEVICE uint32_t unsigned_key_of_float(float f)
{
	if (f != f)
		return 0xFFFFFFFFu;
	if (f == 0)
		f = 0;
	uint32_t bits;
	memcpy(&bits, &f, sizeof bits);
	return (bits >> 31) ? ~bits : bits | 0x80000000u;
}

/* The key of a double that is a float exactly, narrowed to the float's key: the same order. */
GPUREC_HOST_DEVICE uint64_t float_key_of_double_key(uint64_t key)
{
	return unsigned_key_of_float(static_cast<float>(double_of_unsigned_key(key)));
}

GPUREC_HOST_DEVICE bool is_float_exactly(double d)
{
	return d != d || static_cast<double>(static_cast<float>(d)) == d;
}

/* The lowest and highest key of a call's scores, and whether all are floats exactly. */
struct ScoreRange
{
	uint64_t lowest = ~uint64_t(0);
	uint64_t highest = 0;
	bool all_floats = true;

	GPUREC_HOST_DEVICE void add(uint64_t key, bool keys_are_doubles)
	{
		lowest = key < lowest ? key : lowest;
		highest = key > highest ? key : highest;
		if (keys_are_doubles)
			all_floats = all_floats && is_float_exactly(double_of_unsigned_key(key));
	}
	GPUREC_HOST_DEVICE void add(const ScoreRange &other)
	{
		lowest = other.lowest < lowest ? other.lowest : lowest;
		highest = other.highest > highest ? other.highest : highest;
		all_floats = all_floats && other.all_floats;
	}
};

/* How the scores of one call pack: packed = (score_of(key) << 1) | label. */
struct KeyLayout
{
	bool to_float;		/* every score is a float exactly: 32-bit float keys */
	uint64_t score_min; /* subtracted, so that scores take score_bits bits */
	int score_bits;

	GPUREC_HOST_DEVICE uint64_t score_of(uint64_t key) const
	{
		return (to_float ? float_key_of_double_key(key) : key) - score_min;
	}
	/* bits of (score, label) */
	GPUREC_HOST_DEVICE int packed_bits() const { return score_bits + 1; }
};

inline int bit_width(uint64_t x)
{
	int bits = 0;
	for (; x; x >>= 1)
		++bits;
	return bits;
}

/* keys_are_doubles: keys of real or double precision scores, which may narrow to floats */
inline KeyLayout plan_layout(const ScoreRange &range, bool keys_are_doubles)
{
	KeyLayout layout;
	uint64_t lo = range.lowest, hi = range.highest;
	if (lo > hi) /* no example */
		lo = hi = 0;
	layout.to_float = keys_are_doubles && range.all_floats;
	if (layout.to_float)
	{
		lo = float_key_of_double_key(lo);
		hi = float_key_of_double_key(hi);
	}
	layout.score_min = lo;
	layout.score_bits = bit_width(hi - lo);
	return layout;
}

} // namespace gpurec::roc_keys
