/*
 * pg_output.hpp: the result rows of every set-returning SQL entry point, and
 * the call's output phase.
 */
#pragma once

#include "pg_boundary.hpp"

#include "device.hpp"

namespace gpurec {

/*
 * Materialises a set-returning function's rows into its tuplestore
 * (InitMaterializedSRF), checking for interrupts as it goes.  Given the
 * call's context, it is the call's output phase, whose interrupt points
 * (one as it starts, then one every 4096 rows) may carry gpurec.test_fault;
 * finish() adds that phase's
 * time and raises the gpurec.timing NOTICE for `function` when that setting
 * is on.
 */
class ResultWriter
{
  public:
	explicit ResultWriter(FunctionCallInfo fcinfo);
	ResultWriter(FunctionCallInfo fcinfo, ExecContext &ctx, const char *function);
	void put(const Datum *values, const bool *nulls);
	void finish();

  private:
	FunctionCallInfo fcinfo_;
	uint64 rows_ = 0;
	ExecContext *ctx_ = nullptr;
	const char *function_ = nullptr;
	Stopwatch clock_;
};

/* A bytea result of `size` bytes, to be filled (palloc'd in the current memory context). */
bytea *new_bytea(size_t size);

/*
 * The gpurec.timing NOTICE of one call of `function`, when that setting is
 * on: ResultWriter::finish() raises it, and a function that returns no rows
 * when it is done.
 */
void report_timing(const char *function, const ExecContext &ctx);

} // namespace gpurec
