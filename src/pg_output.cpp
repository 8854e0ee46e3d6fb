/*
 * pg_output.cpp: see pg_output.hpp.
 */
#include "pg_output.hpp"

extern "C" {
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/float.h"
#include "utils/numeric.h"
#include "utils/tuplestore.h"
}

#include "pg_settings.hpp"

namespace gpurec {

namespace {

/* The gpurec.timing NOTICE of one call. */
void report_timing(const char *function, const ExecContext &ctx)
{
	if (!settings_timing())
		return;
	const PhaseTimes &t = ctx.times;
	const char *device = ctx.used_gpu ? "gpu" : "cpu";
	pg_call([&] {
		ereport(NOTICE, (errmsg("gpurec.%s: device %s, read %.3f ms, transfer %.3f ms, compute "
								"%.3f ms, output %.3f ms",
								function, device, t.read_ms, t.transfer_ms, t.compute_ms,
								t.output_ms)));
	});
}

} // namespace

const char *text_argument(FunctionCallInfo fcinfo, int n)
{
	return pg_call([&] { return text_to_cstring(PG_GETARG_TEXT_PP(n)); });
}

ResultWriter::ResultWriter(FunctionCallInfo fcinfo) : fcinfo_(fcinfo)
{
	pg_call([fcinfo] { InitMaterializedSRF(fcinfo, 0); });
}

ResultWriter::ResultWriter(FunctionCallInfo fcinfo, ExecContext &ctx, const char *function)
	: ResultWriter(fcinfo)
{
	ctx_ = &ctx;
	function_ = function;
	clock_ = Stopwatch();
}

void ResultWriter::finish()
{
	if (!ctx_)
		return;
	ctx_->times.output_ms += clock_.elapsed_ms();
	report_timing(function_, *ctx_);
}

void ResultWriter::put(const Datum *values, const bool *nulls)
{
	FunctionCallInfo fcinfo = fcinfo_;
	bool check = (++rows_ & 4095) == 0;
	pg_call([=] {
		ReturnSetInfo *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, const_cast<Datum *>(values),
							 const_cast<bool *>(nulls));
		if (check)
			CHECK_FOR_INTERRUPTS();
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
			if (scale > column.scale())
			{
				/*
				 * More decimals than the key holds (over 18, all zeros): the value
				 * at the key's scale, times a 1 spelled with the missing zeros.
				 */
				int64 key = column.key(row);
				int key_scale = column.scale();
				return pg_call([=] {
					Numeric value = int64_div_fast_to_numeric(key, key_scale);
					for (int missing = scale - key_scale; missing > 0; missing -= 18)
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
			int64 unscaled = column.unscaled_at_display_scale(row);
			return pg_call(
				[=] { return NumericGetDatum(int64_div_fast_to_numeric(unscaled, scale)); });
		}
	}
	return (Datum) 0;
}

} // namespace gpurec
