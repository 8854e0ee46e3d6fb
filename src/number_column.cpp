/*
 * number_column.cpp: NumberColumn's keys and scales, NumericReach,
 * decimal_text and KeyFilter (number_column.hpp).
 */
#include "no_postgres.hpp"

#include "number_column.hpp"

#include <algorithm>
#include <cstdio>

namespace gpurec {

namespace {

const int64_t kPow10[] = {1LL,
						  10LL,
						  100LL,
						  1000LL,
						  10000LL,
						  100000LL,
						  1000000LL,
						  10000000LL,
						  100000000LL,
						  1000000000LL,
						  10000000000LL,
						  100000000000LL,
						  1000000000000LL,
						  10000000000000LL,
						  100000000000000LL,
						  1000000000000000LL,
						  10000000000000000LL,
						  100000000000000000LL,
						  1000000000000000000LL};

/* a * 10^p into r; false when the result leaves the finite key range */
bool scale_up(int64_t a, int p, int64_t *r)
{
	return p >= 0 && p <= NumberColumn::kMaxNumericScale && !__builtin_mul_overflow(a, kPow10[p], r) &&
		   *r > NumberColumn::kNumericNegInf && *r < NumberColumn::kNumericPosInf;
}

} // namespace

void NumberColumn::rescale_to(int new_scale)
{
	int step = new_scale - scale_;
	/* check every key first, so that an error leaves the column as it was */
	for (size_t row = 0; row < keys_.size(); ++row)
	{
		int64_t key;
		if (display_scale(row) >= 0 && !scale_up(keys_[row], step, &key))
			out_of_range(keys_[row], scale_, new_scale);
	}
	for (size_t row = 0; row < keys_.size(); ++row)
		if (display_scale(row) >= 0)
			scale_up(keys_[row], step, &keys_[row]);
	scale_ = new_scale;
}

std::string decimal_text(int64_t unscaled, int scale)
{
	bool negative = unscaled < 0;
	std::string digits = std::to_string(negative ? -static_cast<uint64_t>(unscaled) : static_cast<uint64_t>(unscaled));
	if (scale > 0)
	{
		if (digits.size() <= static_cast<size_t>(scale))
			digits.insert(0, scale + 1 - digits.size(), '0');
		digits.insert(digits.size() - scale, ".");
	}
	return negative ? "-" + digits : digits;
}

__int128 NumberColumn::comparable(int64_t key, NumberType type, int scale)
{
	if (type != NumberType::Numeric)
		return key;
	if (key == kNumericNaN)
		return kLargestComparable;
	if (key == kNumericPosInf)
		return kLargestComparable - 1;
	if (key == kNumericNegInf)
		return -kLargestComparable - 1;
	return static_cast<__int128>(key) * kPow10[kMaxNumericScale - scale];
}

void NumberColumn::raise_out_of_range(int64_t unscaled, int dscale, int at_scale, const std::string &description)
{
	std::string value = decimal_text(unscaled, dscale);
	std::vector<char> message(value.size() + description.size() + 128), detail(512);
	std::snprintf(message.data(), message.size(), numeric_range_text::message, value.c_str(),
				  description.c_str(), at_scale);
	numeric_range_text::format_detail(detail.data(), detail.size(), at_scale);
	throw Error(sqlstate::numeric_value_out_of_range, message.data(), detail.data(), numeric_range_text::hint);
}

void NumericReach::add_column(const NumberColumn &column)
{
	if (column.type() != NumberType::Numeric)
		return;
	bool found = false;
	int64_t largest = 0;
	uint64_t magnitude = 0;
	const ChunkedColumn<int64_t> &all = column.keys();
	for (size_t c = 0; c < all.chunk_count(); ++c)
	{
		const int64_t *keys = all.chunk_data(c);
		for (size_t i = 0, count = all.chunk_rows(c); i < count; ++i)
		{
			int64_t key = keys[i];
			if (key == NumberColumn::kNumericNaN || key == NumberColumn::kNumericPosInf ||
				key == NumberColumn::kNumericNegInf)
				continue;
			uint64_t m = key < 0 ? 0 - static_cast<uint64_t>(key) : static_cast<uint64_t>(key);
			if (!found || m > magnitude || (m == magnitude && key < largest))
			{
				found = true;
				magnitude = m;
				largest = key;
			}
		}
	}
	if (found)
		add_value(largest, column.scale());
}

void NumericReach::add_value(int64_t unscaled, int scale)
{
	if (!any_)
	{
		any_ = true;
		scale_ = scale;
		unscaled_ = unscaled;
		value_scale_ = scale;
		return;
	}
	scale_ = std::max(scale_, scale);
	/* finite values at scale 18: their magnitudes compare, and negating one cannot overflow */
	__int128 value = NumberColumn::comparable(unscaled, NumberType::Numeric, scale),
			 held_value = NumberColumn::comparable(unscaled_, NumberType::Numeric, value_scale_);
	__int128 m = value < 0 ? -value : value, held = held_value < 0 ? -held_value : held_value;
	if (m > held || (m == held && (value < held_value || (value == held_value && scale < value_scale_))))
	{
		unscaled_ = unscaled;
		value_scale_ = scale;
	}
}

void NumericReach::add(const NumericReach &other)
{
	if (!other.any_)
		return;
	add_value(other.unscaled_, other.value_scale_);
	scale_ = std::max(scale_, other.scale_);
}

void NumericReach::check(const std::string &description) const
{
	int64_t at_scale;
	if (any_ && !scale_up(unscaled_, scale_ - value_scale_, &at_scale))
		NumberColumn::raise_out_of_range(unscaled_, value_scale_, scale_, description);
}

void NumericReach::serialize(ByteWriter &out) const
{
	out.put<uint8_t>(any_ ? 1 : 0);
	out.put<int32_t>(scale_);
	out.put<int64_t>(unscaled_);
	out.put<int32_t>(value_scale_);
}

NumericReach NumericReach::read(ByteReader &in)
{
	NumericReach reach;
	uint8_t any = in.get<uint8_t>();
	reach.scale_ = in.get<int32_t>();
	reach.unscaled_ = in.get<int64_t>();
	reach.value_scale_ = in.get<int32_t>();
	reach.any_ = any == 1;
	if (any > 1 || reach.scale_ < 0 || reach.scale_ > NumberColumn::kMaxNumericScale || reach.value_scale_ < 0 ||
		reach.value_scale_ > reach.scale_ || reach.unscaled_ == NumberColumn::kNumericNegInf ||
		reach.unscaled_ >= NumberColumn::kNumericPosInf)
		throw Error(sqlstate::internal_error, "its numeric reach is out of range");
	return reach;
}

void NumberColumn::push_numeric_rescaling(int64_t unscaled, int dscale, int display)
{
	/* display: as the input spelled it, trailing zeros too */
	if (dscale > kMaxNumericScale)
	{
		/* trailing zeros beyond 18 digits carry no value: drop them from the key */
		while (dscale > kMaxNumericScale && unscaled % 10 == 0)
		{
			unscaled /= 10;
			--dscale;
		}
		if (dscale > kMaxNumericScale)
			out_of_range(unscaled, dscale, dscale);
	}
	if (keys_.empty())
		scale_ = dscale; /* keys at the first row's scale: the common case needs no multiply */
	else if (dscale > scale_)
		rescale_to(dscale);
	int64_t key;
	if (!scale_up(unscaled, scale_ - dscale, &key))
		out_of_range(unscaled, dscale, scale_);
	keys_.push_back(key);
	push_display_scale(static_cast<int16_t>(display));
}

void NumberColumn::push_numeric_special(int16_t marker)
{
	keys_.push_back(marker == kScaleNaN		 ? kNumericNaN
					: marker == kScalePosInf ? kNumericPosInf
											 : kNumericNegInf);
	push_display_scale(marker);
}

void NumberColumn::push_row_of(const NumberColumn &from, size_t row)
{
	if (from.type_ != type_)
		throw Error(sqlstate::internal_error, "NumberColumn: a row of a column of another type");
	int16_t display = from.display_scale(row);
	if (type_ != NumberType::Numeric)
		keys_.push_back(from.key(row)); /* integers and doubles' order keys are the values themselves */
	else if (display < 0)
		push_numeric_special(display);
	else
		push_numeric(from.key(row), from.scale(), display);
}

void NumberColumn::push_display_scale(int16_t scale)
{
	size_t row = keys_.size() - 1; /* the key is pushed already */
	if (row == 0)
		uniform_scale_ = scale;
	else if (uniform_scale_ != kMixedScales && scale != uniform_scale_)
	{
		/* the first row of another scale: from now on, one scale per row */
		for (size_t r = 0; r < row; ++r)
			display_scales_.push_back(uniform_scale_);
		uniform_scale_ = kMixedScales;
	}
	if (uniform_scale_ == kMixedScales)
		display_scales_.push_back(scale);
}

int64_t NumberColumn::unscaled_at_display_scale(size_t row) const
{
	return keys_[row] / kPow10[scale_ - display_scale(row)];
}

double NumberColumn::to_double(size_t row) const
{
	int64_t k = keys_[row];
	switch (type_)
	{
		case NumberType::Integer:
			return static_cast<double>(k);
		case NumberType::Float4:
		case NumberType::Float8:
			return double_from_order_key(k);
		case NumberType::Numeric:
			switch (display_scale(row))
			{
				case kScaleNaN:
					return std::numeric_limits<double>::quiet_NaN();
				case kScalePosInf:
					return std::numeric_limits<double>::infinity();
				case kScaleNegInf:
					return -std::numeric_limits<double>::infinity();
				default:
					return static_cast<double>(k) / static_cast<double>(kPow10[scale_]);
			}
	}
	return 0;
}

void NumberColumn::serialize(ByteWriter &out) const
{
	out.put<uint8_t>(static_cast<uint8_t>(type_));
	out.put<int32_t>(scale_);
	out.put<int16_t>(uniform_scale_);
	keys_.serialize(out);
	if (type_ == NumberType::Numeric && uniform_scale_ == kMixedScales)
		display_scales_.serialize(out);
}

void NumberColumn::append_serialized(ByteReader &in, const PieceRunner &run, bool take_chunks)
{
	if (in.get<uint8_t>() != static_cast<uint8_t>(type_))
		throw Error(sqlstate::internal_error, "NumberColumn: appending a column of another type");
	int part_scale = in.get<int32_t>();
	int16_t part_uniform = in.get<int16_t>();
	if (part_scale < 0 || part_scale > kMaxNumericScale)
		throw Error(sqlstate::internal_error, "NumberColumn: a serialized scale out of range");
	if (part_uniform != kMixedScales && !valid_display_scale(part_uniform))
		throw Error(sqlstate::internal_error, "NumberColumn: a serialized display scale out of range");
	ChunkedColumn<int64_t> keys = ChunkedColumn<int64_t>::read_serialized(in, run);
	if (type_ != NumberType::Numeric)
	{
		keys_.append_column(std::move(keys), take_chunks, run);
		return;
	}
	size_t n = keys.size();
	ChunkedColumn<int16_t> displays;
	if (part_uniform == kMixedScales)
	{
		displays = ChunkedColumn<int16_t>::read_serialized(in, run);
		if (displays.size() != n)
			throw Error(sqlstate::internal_error, "NumberColumn: serialized keys and scales disagree");
		for (size_t row = 0; row < n; ++row)
			if (!valid_display_scale(displays[row]))
				throw Error(sqlstate::internal_error, "NumberColumn: a serialized display scale out of range");
	}
	if (n == 0)
		return;
	auto part_display = [&](size_t row) { return part_uniform == kMixedScales ? displays[row] : part_uniform; };

	bool was_empty = keys_.empty();
	int target = was_empty ? part_scale : std::max(scale_, part_scale);
	int step = target - part_scale;
	/* check the part's keys before changing anything, so that an error leaves the column as it was */
	for (size_t row = 0; step > 0 && row < n; ++row)
	{
		int64_t key;
		if (part_display(row) >= 0 && !scale_up(keys[row], step, &key))
			out_of_range(keys[row], part_scale, target);
	}
	if (!was_empty && target > scale_)
		rescale_to(target);
	scale_ = target;
	if (step > 0)
		keys.visit_in_pieces(
			[&](int64_t *out, size_t first, size_t count) {
				for (size_t i = 0; i < count; ++i)
					if (part_display(first + i) >= 0)
						scale_up(out[i], step, &out[i]);
			},
			run);
	size_t before = keys_.size();
	keys_.append_column(std::move(keys), take_chunks, run);

	if (was_empty)
		uniform_scale_ = part_uniform;
	else if (uniform_scale_ != kMixedScales && uniform_scale_ == part_uniform)
		return;
	else if (uniform_scale_ != kMixedScales)
	{
		/* the scales differ from now on: one per row, the rows before included */
		int16_t earlier = uniform_scale_;
		display_scales_.append(before, [&](int16_t *out, size_t, size_t count) { std::fill(out, out + count, earlier); });
		uniform_scale_ = kMixedScales;
	}
	if (uniform_scale_ != kMixedScales)
		return;
	if (part_uniform != kMixedScales)
		displays.append(n, [&](int16_t *out, size_t, size_t count) { std::fill(out, out + count, part_uniform); });
	/* the same placement as the keys': display_scales_ is as long as keys_ was, and so is displays as keys */
	display_scales_.append_column(std::move(displays), take_chunks, run);
}

/*
 * A bitmap while it takes at most 64 bits a key (or 2^20 bits in all),
 * whatever the keys' spread; else a KeyIndex.
 */
KeyFilter::KeyFilter(std::vector<int64_t> keys) : keys_(std::move(keys))
{
	std::sort(keys_.begin(), keys_.end());
	keys_.erase(std::unique(keys_.begin(), keys_.end()), keys_.end());
	if (keys_.empty())
	{
		bits_.assign(1, 0); /* an empty range: nothing is kept */
		return;
	}
	min_ = keys_.front();
	uint64_t span = static_cast<uint64_t>(keys_.back()) - static_cast<uint64_t>(min_);
	if (span < std::max<uint64_t>(uint64_t(1) << 20, 64 * static_cast<uint64_t>(keys_.size())))
	{
		range_ = span + 1;
		bits_.assign((range_ + 63) / 64, 0);
		for (int64_t key : keys_)
		{
			uint64_t at = static_cast<uint64_t>(key) - static_cast<uint64_t>(min_);
			bits_[at >> 6] |= uint64_t(1) << (at & 63);
		}
		return;
	}
	index_ = KeyIndex(keys_.size());
	for (int64_t key : keys_)
		index_.insert(key, 0);
}

} // namespace gpurec
