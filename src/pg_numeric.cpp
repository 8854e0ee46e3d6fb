/*
 * pg_numeric.cpp: the numeric codec's out-of-line half (see pg_numeric.hpp):
 * numeric to double, and the numeric Datums of result columns.
 */
#include "pg_numeric.hpp"

extern "C" {
#include "utils/builtins.h"
#include "utils/numeric.h"
}

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace gpurec {

/* As numeric::float8: prints the decimal and parses it, in a stack buffer unless it is long. */
double numeric_to_double(const NumericParts &n)
{
	if (n.special == NumberColumn::kScaleNaN)
		return std::numeric_limits<double>::quiet_NaN();
	if (n.special == NumberColumn::kScalePosInf)
		return std::numeric_limits<double>::infinity();
	if (n.special == NumberColumn::kScaleNegInf)
		return -std::numeric_limits<double>::infinity();
	if (n.ndigits == 0)
		return 0.0;
	/* "-dddd...ddddE<exp>": 4 decimal digits per base-10000 digit */
	char stack_buffer[256];
	size_t needed = 4 * size_t(n.ndigits) + 32;
	char *text = needed <= sizeof stack_buffer ? stack_buffer : static_cast<char *>(palloc(needed));
	char *out = text;
	if (n.negative)
		*out++ = '-';
	for (int i = 0; i < n.ndigits; ++i)
	{
		unsigned d = numeric_disk::read_u16(n.digits + 2 * i);
		out[0] = char('0' + d / 1000);
		out[1] = char('0' + d / 100 % 10);
		out[2] = char('0' + d / 10 % 10);
		out[3] = char('0' + d % 10);
		out += 4;
	}
	snprintf(out, 24, "e%d", 4 * (n.weight + 1 - n.ndigits));
	errno = 0;
	double value = strtod(text, nullptr);
	if (text != stack_buffer)
		pfree(text);
	return value; /* overflow gives +-HUGE_VAL */
}

Datum units_as_numeric(int64 units, int scale, int display_scale)
{
	if (display_scale <= scale)
	{
		/* the digits past display_scale are zeros */
		int64 unscaled = units;
		for (int i = display_scale; i < scale; ++i)
			unscaled /= 10;
		return pg_call([=] { return NumericGetDatum(int64_div_fast_to_numeric(unscaled, display_scale)); });
	}
	/*
	 * More decimals than the units hold (over 18, all zeros): the value at
	 * `scale`, times a 1 spelled with the missing zeros.
	 */
	return pg_call([=] {
		Numeric value = int64_div_fast_to_numeric(units, scale);
		for (int missing = display_scale - scale; missing > 0; missing -= 18)
		{
			int step = missing > 18 ? 18 : missing;
			int64 one = 1;
			for (int i = 0; i < step; ++i)
				one *= 10;
			value = numeric_mul_opt_error(value, int64_div_fast_to_numeric(one, step), nullptr);
		}
		return NumericGetDatum(value);
	});
}

Datum number_as_numeric(const NumberColumn &column, size_t row)
{
	switch (column.type())
	{
		case NumberType::Integer:
		{
			int64 v = column.key(row);
			return pg_call([v] { return NumericGetDatum(int64_to_numeric(v)); });
		}
		case NumberType::Float4:
		{
			float4 v = static_cast<float4>(double_from_order_key(column.key(row)));
			return pg_call([v] { return DirectFunctionCall1(float4_numeric, Float4GetDatum(v)); });
		}
		case NumberType::Float8:
		{
			float8 v = double_from_order_key(column.key(row));
			return pg_call([v] { return DirectFunctionCall1(float8_numeric, Float8GetDatum(v)); });
		}
		case NumberType::Numeric:
		{
			int16 scale = column.display_scale(row);
			if (scale < 0)
			{
				const char *text = scale == NumberColumn::kScaleNaN		 ? "NaN"
								   : scale == NumberColumn::kScalePosInf ? "Infinity"
																		 : "-Infinity";
				return pg_call([text] {
					return DirectFunctionCall3(numeric_in, CStringGetDatum(text),
											   ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
				});
			}
			return units_as_numeric(column.key(row), column.scale(), scale);
		}
	}
	return (Datum) 0;
}

} // namespace gpurec
