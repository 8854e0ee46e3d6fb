/*
 * number_column.hpp: exact numbers.  NumberColumn holds a column of any
 * number type as 64-bit order keys that order and tie as PostgreSQL's
 * values do and convert back to them exactly; NumericReach carries what
 * decides its ERROR 22003 across rows read apart; Int64Column and
 * LabelColumn hold integers and 0/1 labels as they are; KeyIndex and
 * KeyFilter look int64 keys up.
 */
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "byte_stream.hpp"
#include "column_chunks.hpp"
#include "errors.hpp"

namespace gpurec {

/*
 * How the input spelled a number column.  Ordering and ties must be exact for
 * every input type, so numbers are held as 64-bit order keys: comparing two
 * keys as signed integers compares the input values as PostgreSQL would
 * (NaN above everything, -0 equal to 0), and each key converts back to the
 * exact input value for output.
 */
enum class NumberType : uint8_t
{
	Integer, /* smallint, integer, bigint: key = value */
	Float4,	 /* real: key = order bits of the (exactly widened) double */
	Float8,	 /* double precision: key = order bits of the double */
	Numeric	 /* numeric: key = value * 10^scale(), special values at the ends */
};

/* Order keys of doubles: monotone, NaN canonical and highest, -0 == 0. */
inline int64_t order_key_from_double(double d)
{
	int64_t bits;
	if (std::isnan(d))
		d = std::numeric_limits<double>::quiet_NaN();
	if (d == 0)
		d = 0; /* folds -0 into +0 */
	std::memcpy(&bits, &d, sizeof bits);
	return bits >= 0 ? bits : bits ^ INT64_MAX;
}

inline double double_from_order_key(int64_t key)
{
	int64_t bits = key >= 0 ? key : key ^ INT64_MAX;
	double d;
	std::memcpy(&d, &bits, sizeof d);
	return d;
}

class NumberColumn
{
  public:
	/* Keys of numeric's special values; finite numerics lie strictly between. */
	static constexpr int64_t kNumericNaN = INT64_MAX;
	static constexpr int64_t kNumericPosInf = INT64_MAX - 1;
	static constexpr int64_t kNumericNegInf = INT64_MIN;
	/* display_scale() markers of those special values */
	static constexpr int16_t kScaleNaN = -1, kScalePosInf = -2, kScaleNegInf = -3;
	static constexpr int kMaxNumericScale = 18;
	/* the most decimals a numeric shows (PostgreSQL's NUMERIC_DSCALE_MAX) */
	static constexpr int kMaxDisplayScale = 16383;
	/* a display scale a numeric can have, or a special value's marker */
	static bool valid_display_scale(int scale) { return scale >= kScaleNegInf && scale <= kMaxDisplayScale; }

	explicit NumberColumn(NumberType type = NumberType::Integer) : type_(type) {}

	/* How errors name the column: `column "price" of the offers query`, say. */
	void set_description(std::string description) { description_ = std::move(description); }
	const std::string &description() const { return description_; }

	void set_type(NumberType type) { type_ = type; }
	NumberType type() const { return type_; }
	size_t size() const { return keys_.size(); }
	const ChunkedColumn<int64_t> &keys() const { return keys_; }
	int64_t key(size_t row) const { return keys_[row]; }

	void push_integer(int64_t v) { keys_.push_back(v); }
	void push_double(double v) { keys_.push_back(order_key_from_double(v)); }
	/*
	 * A finite numeric equal to unscaled * 10^-dscale.  The column holds
	 * every value exactly as a 64-bit integer at its largest scale (at most
	 * 18 decimals): value x 10^scale() within the finite key range.  A value
	 * that breaks that, or makes an earlier one break it, is ERROR 22003
	 * naming the value and the scale (numeric_range_error).
	 */
	void push_numeric(int64_t unscaled, int dscale) { push_numeric(unscaled, dscale, dscale); }
	/*
	 * The same value given at `scale`, shown with display_scale decimals:
	 * more than scale (trailing zeros past 18 decimals), or fewer when the
	 * value is another column's row at that column's scale (its digits past
	 * display_scale are zeros).
	 */
	void push_numeric(int64_t unscaled, int scale, int display_scale)
	{
		if (takes_as_is(unscaled, scale, display_scale))
			keys_.push_back(unscaled); /* the common case: the scale of every row before */
		else
			push_numeric_rescaling(unscaled, scale, display_scale);
	}
	void push_numeric_special(int16_t marker);
	/*
	 * n numerics, value_at(i) filling the i-th: push_numeric(unscaled,
	 * scale, display_scale), or push_numeric_special(display_scale) where
	 * display_scale is a special value's marker (< 0).  Written a chunk at
	 * a time where they all have the scales of the rows before (the common
	 * case), else one by one.
	 */
	template <typename ValueAt> void push_numerics(size_t n, ValueAt value_at)
	{
		bool as_they_are = true;
		for (size_t i = 0; i < n && as_they_are; ++i)
		{
			int64_t unscaled;
			int scale, display_scale;
			value_at(i, &unscaled, &scale, &display_scale);
			as_they_are = takes_as_is(unscaled, scale, display_scale);
		}
		if (as_they_are)
			keys_.append(n, [&](int64_t *out, size_t first, size_t count) {
				int scale, display_scale;
				for (size_t i = 0; i < count; ++i)
					value_at(first + i, &out[i], &scale, &display_scale);
			});
		else
			for (size_t i = 0; i < n; ++i)
			{
				int64_t unscaled;
				int scale, display_scale;
				value_at(i, &unscaled, &scale, &display_scale);
				if (display_scale < 0)
					push_numeric_special(static_cast<int16_t>(display_scale));
				else
					push_numeric(unscaled, scale, display_scale);
			}
	}
	/* Row `row` of a column of the same type, as pushing its input value would have added it. */
	void push_row_of(const NumberColumn &from, size_t row);
	/*
	 * A key of a column at `scale` as a value that compares across columns
	 * of other scales: a finite numeric at scale 18, exact in 128 bits,
	 * numeric's special values past every finite one in PostgreSQL's
	 * order; the key itself for the other types, whose keys have no scale.
	 */
	static __int128 comparable(int64_t key, NumberType type, int scale);
	/* The largest comparable value: NaN's, above every other key's. */
	static constexpr __int128 kLargestComparable = static_cast<__int128>(~static_cast<unsigned __int128>(0) >> 1);
	/* ERROR 22003: the value unscaled x 10^-dscale of the column `description` cannot be held at_scale. */
	[[noreturn]] static void raise_out_of_range(int64_t unscaled, int dscale, int at_scale,
												 const std::string &description);

	/*
	 * Drops every row.  Like a new column's, the keys of the rows to come
	 * are at the first finite row's scale, or larger (a special value
	 * first keeps the scale reached before): each piece has its own scale().
	 */
	void forget_rows() noexcept
	{
		keys_.forget_rows();
		display_scales_.forget_rows();
		uniform_scale_ = kMixedScales;
	}

	/* Numeric rows spelled with different display scales (1.5 and 1.50): their order may tell. */
	bool has_mixed_scales() const { return type_ == NumberType::Numeric && uniform_scale_ == kMixedScales && !keys_.empty(); }

	/* The column's common scale, and each row's own dscale (or marker); 0 unless numeric. */
	int scale() const { return scale_; }
	int16_t display_scale(size_t row) const
	{
		if (type_ != NumberType::Numeric)
			return 0;
		return uniform_scale_ != kMixedScales ? uniform_scale_ : display_scales_[row];
	}
	/*
	 * Numeric only: a finite row's value as unscaled * 10^-display_scale(row),
	 * for rows whose display scale is at most scale() (beyond it, the digits
	 * are zeros: see number_as_numeric).
	 */
	int64_t unscaled_at_display_scale(size_t row) const;

	/* The value as a double (exact for Float4/Float8; rounded otherwise). */
	double to_double(size_t row) const;

	void use_chunk_source(ChunkSource &source)
	{
		keys_.use_chunk_source(source);
		display_scales_.use_chunk_source(source);
	}

	/* The flat form: scales, the keys, and the display scales when they are mixed. */
	void serialize(ByteWriter &out) const;
	/*
	 * Appends a column of the same type that serialize() wrote.  The result
	 * holds the rows that pushing them one by one would have made, placed
	 * as ChunkedColumn::append_column places them: keys at the larger of
	 * the two scales (ERROR 22003 as push_numeric when a value cannot be
	 * held there), display scales kept per row.
	 */
	void append_serialized(ByteReader &in, const PieceRunner &run = run_serially, bool take_chunks = false);

  private:
	static constexpr int16_t kMixedScales = INT16_MIN;

	void push_numeric_rescaling(int64_t unscaled, int dscale, int display);
	/*
	 * Whether a finite numeric's key is `unscaled` as it is: it has the
	 * column's scale and the display scale of every row before (never a
	 * special value's marker, which the first row may have left there).
	 */
	bool takes_as_is(int64_t unscaled, int scale, int display_scale) const
	{
		return scale == scale_ && display_scale == uniform_scale_ && display_scale >= 0 &&
			   unscaled > kNumericNegInf && unscaled < kNumericPosInf;
	}
	void push_display_scale(int16_t scale);
	void rescale_to(int new_scale);

	[[noreturn]] void out_of_range(int64_t unscaled, int dscale, int at_scale) const
	{
		raise_out_of_range(unscaled, dscale, at_scale, description_);
	}

	NumberType type_;
	std::string description_ = "a numeric column";
	ChunkedColumn<int64_t> keys_;
	/*
	 * Numeric only: the dscale (or special marker) of every row while they
	 * all agree, as a numeric(p,s) column's do; kMixedScales once they differ,
	 * and then display_scales_ holds one per row.
	 */
	int16_t uniform_scale_ = kMixedScales;
	ChunkedColumn<int16_t> display_scales_;
	int scale_ = 0;
};

/*
 * What decides whether one NumberColumn could hold the rows of a numeric
 * input (every finite value exact at the largest scale among them, in 64
 * bits): that scale, and the value of largest magnitude.  Rows read apart
 * and never held in one column (the processes of a parallel read that
 * send partial results, shards) each carry theirs, so that joined they
 * raise ERROR 22003 where one column of all the rows would, though the
 * join holds only some of them.
 */
class NumericReach
{
  public:
	/* Every finite row of a numeric column; nothing for the other types. */
	void add_column(const NumberColumn &column);
	void add(const NumericReach &other);
	/* ERROR 22003, in NumberColumn's words naming `description`, where one column could not hold every row added. */
	void check(const std::string &description) const;

	/* The flat form; reading one that is not raises an internal error. */
	void serialize(ByteWriter &out) const;
	static NumericReach read(ByteReader &in);

  private:
	void add_value(int64_t unscaled, int scale);

	bool any_ = false; /* a finite value was added */
	int scale_ = 0;	   /* the largest scale among them */
	/* the value of largest magnitude (the lowest of equal magnitudes, at its lowest scale) */
	int64_t unscaled_ = 0;
	int value_scale_ = 0;
};

/* unscaled * 10^-scale as SQL spells it: 1000000000000, 0.0000001, -4.50 */
std::string decimal_text(int64_t unscaled, int scale);

/*
 * The words of ERROR 22003 for a numeric the engine cannot hold exactly, as
 * printf formats: the input layer raises it for a single value too large
 * for 64 bits, NumberColumn for one that breaks the column's common scale.
 */
namespace numeric_range_text {
constexpr const char *message = "numeric value %s of %s cannot be held exactly at scale %d";
constexpr const char *detail = "gpurec holds a numeric column exactly as 64-bit integers at its largest scale "
							   "(the most decimal places among its values; here %d, at most 18): every value "
							   "x 10^%d must lie from -9223372036854775807 to 9223372036854775805.";
/* the detail where the scale itself is past 18: the value has more decimals than a column may */
constexpr const char *detail_decimals = "gpurec holds a numeric column exactly as 64-bit integers at its largest "
										"scale (the most decimal places among its values), which is at most 18 "
										"decimal places; this value has %d.";
constexpr const char *hint = "Cast the column to double precision, or round it to fewer decimals.";
/* The detail of a value that cannot be held at `scale` (detail, or detail_decimals past 18), into buf. */
inline void format_detail(char *buf, size_t size, int scale)
{
	if (scale > NumberColumn::kMaxNumericScale)
		std::snprintf(buf, size, detail_decimals, scale);
	else
		std::snprintf(buf, size, detail, scale, scale);
}
} // namespace numeric_range_text

class Int64Column : public ChunkedColumn<int64_t>
{
};

/*
 * Booleans, or integers restricted to 0 and 1.  The reader keeps another
 * integer as a mark (bad_label_mark) for the engine to refuse, naming the
 * least individual that holds one (check_labels, roc_fitness.hpp): which
 * bad row a parallel read meets first is chance.
 */
class LabelColumn : public ChunkedColumn<uint8_t>
{
  public:
	/* A value below 0 or above 254. */
	static constexpr uint8_t kOtherBadLabel = 255;
	/* A label other than 0 and 1 as the column holds it: the value itself, 2 to 254, else kOtherBadLabel. */
	static uint8_t bad_label_mark(int64_t value)
	{
		return value >= 2 && value <= 254 ? static_cast<uint8_t>(value) : kOtherBadLabel;
	}
};

/*
 * int64 key -> a value >= 0, for at most the n keys it is made for: open
 * addressing, at most half full, so that a lookup is a probe or two.
 */
class KeyIndex
{
  public:
	explicit KeyIndex(size_t n)
	{
		size_t capacity = 16;
		while (capacity < 2 * n)
			capacity <<= 1;
		slots_.assign(capacity, Slot{0, -1});
		mask_ = capacity - 1;
	}
	/* False when key is there already. */
	bool insert(int64_t key, int32_t value)
	{
		for (size_t i = hash(key);; i = (i + 1) & mask_)
		{
			if (slots_[i].value < 0)
			{
				slots_[i] = Slot{key, value};
				return true;
			}
			if (slots_[i].key == key)
				return false;
		}
	}
	/* key's value, or -1. */
	int32_t find(int64_t key) const
	{
		for (size_t i = hash(key);; i = (i + 1) & mask_)
			if (slots_[i].value < 0 || slots_[i].key == key)
				return slots_[i].value;
	}

  private:
	struct Slot
	{
		int64_t key;
		int32_t value;
	};
	size_t hash(int64_t key) const
	{
		return static_cast<size_t>((static_cast<uint64_t>(key) * 0x9E3779B97F4A7C15ull) >> 20) & mask_;
	}
	std::vector<Slot> slots_;
	size_t mask_;
};

/*
 * A set of int64 keys, asked once for each row an input reads (whether to
 * keep the row): a bitmap over the keys' range where they are dense in it,
 * else a KeyIndex, so that an answer is a load or two.
 */
class KeyFilter
{
  public:
	explicit KeyFilter(std::vector<int64_t> keys);
	bool contains(int64_t key) const
	{
		if (!bits_.empty())
		{
			uint64_t at = static_cast<uint64_t>(key) - static_cast<uint64_t>(min_);
			return at < range_ && ((bits_[at >> 6] >> (at & 63)) & 1) != 0;
		}
		return index_.find(key) >= 0;
	}
	/* The keys, ascending, each once. */
	const std::vector<int64_t> &keys() const { return keys_; }

  private:
	std::vector<int64_t> keys_;
	int64_t min_ = 0;
	uint64_t range_ = 0;
	std::vector<uint64_t> bits_;
	KeyIndex index_{0};
};

} // namespace gpurec
