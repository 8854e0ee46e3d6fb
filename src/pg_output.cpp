/*
 * pg_output.cpp: ResultWriter (see pg_output.hpp): rows put into the
 * set-returning function's tuplestore, and the gpurec.timing NOTICE that
 * ends a call's output phase.
 */
#include "pg_output.hpp"

extern "C" {
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/tuplestore.h"
}

#include "pg_settings.hpp"

namespace gpurec {

void report_timing(const char *function, const ExecContext &ctx)
{
	if (!settings_timing())
		return;
	const PhaseTimes &t = ctx.times;
	const char *device = ctx.used_gpu ? "gpu" : "cpu";
	char start[128] = "";
	if (ctx.gpu_start_wait_ms > 0)
		snprintf(start, sizeof start, "  Waited %.3f ms for CUDA's start (%.3f ms in all) before the transfer.",
				 ctx.gpu_start_wait_ms, ctx.gpu_start_ms);
	char service[128] = "";
	if (ctx.service_devices > 1)
		snprintf(service, sizeof service, "  GPU service: %d devices, queued %.3f ms.", ctx.service_devices,
				 ctx.service_queued_ms);
	else if (ctx.service_device >= 0)
		snprintf(service, sizeof service, "  GPU service: device %d, queued %.3f ms.", ctx.service_device,
				 ctx.service_queued_ms);
	std::string why = ctx.device_choice.empty() ? "" : "  Device: " + ctx.device_choice + ".";
	pg_call([&] {
		ereport(NOTICE, (errmsg("gpurec.%s: device %s, read %.3f ms, transfer %.3f ms, compute "
								"%.3f ms, output %.3f ms",
								function, device, t.read_ms, t.transfer_ms, t.compute_ms,
								t.output_ms),
						 errdetail("Read: %s.  CPU worker threads: %zu.%s%s%s", ctx.read_notes.c_str(),
								   ctx.cpu_threads_used, why.c_str(), start, service)));
	});
}

bytea *new_bytea(size_t size)
{
	return pg_call([size] {
		auto *b = static_cast<bytea *>(palloc(VARHDRSZ + size));
		SET_VARSIZE(b, VARHDRSZ + size);
		return b;
	});
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
	ctx.progress.begin(ProgressPhase::Writing, "rows");
	/* the output phase's first interrupt point comes before any row, however few there are */
	ExecContext *call = ctx_;
	pg_call([call] { postgres_interrupt_point(*call, Phase::Output); });
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
	ExecContext *call = ctx_;
	bool check = (++rows_ & 4095) == 0;
	if (check && call)
		call->progress.reach(rows_);
	pg_call([fcinfo, call, check, values, nulls] {
		ReturnSetInfo *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, const_cast<Datum *>(values),
							 const_cast<bool *>(nulls));
		if (check)
		{
			if (call)
				postgres_interrupt_point(*call, Phase::Output);
			else
				CHECK_FOR_INTERRUPTS();
		}
	});
}

} // namespace gpurec
