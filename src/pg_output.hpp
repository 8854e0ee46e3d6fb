/*
 * pg_output.hpp: result rows and the per-call context, shared by every SQL
 * entry point.
 */
#pragma once

#include "pg_boundary.hpp"

#include "columns.hpp"
#include "device.hpp"

namespace gpurec {

/* The engine's context for one call, from the GUCs gpurec.device and friends. */
ExecContext exec_context_from_settings();

/* Raises the gpurec.timing NOTICE for `function` when that setting is on. */
void report_timing(const char *function, const ExecContext &ctx);

/* The text argument n as a C string (NULL arguments never reach here: STRICT). */
const char *text_argument(FunctionCallInfo fcinfo, int n);

/*
 * Materialises a set-returning function's rows into its tuplestore
 * (InitMaterializedSRF), checking for interrupts as it goes.
 */
class ResultWriter
{
  public:
	explicit ResultWriter(FunctionCallInfo fcinfo);
	void put(const Datum *values, const bool *nulls);

  private:
	FunctionCallInfo fcinfo_;
	uint64 rows_ = 0;
};

/* The exact input value of `row` as numeric, as value::numeric would give it. */
Datum number_as_numeric(const NumberColumn &column, size_t row);

} // namespace gpurec
