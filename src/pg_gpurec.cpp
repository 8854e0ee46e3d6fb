/*
 * pg_gpurec.cpp: the module's entry (PG_MODULE_MAGIC, _PG_init),
 * gpurec.devices(), and gpurec._pause() for gpurec_shards' waits.
 *
 * _PG_init only defines the settings (pg_settings.cpp): CUDA starts lazily
 * in the first backend call that needs a GPU, never in the postmaster (a
 * CUDA context does not survive fork).
 */
#include "pg_boundary.hpp"

extern "C" {
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/wait_event.h"
}

#include <string>

#include "errors.hpp"
#include "pg_output.hpp"
#include "pg_settings.hpp"

extern "C" {
PG_MODULE_MAGIC;
void _PG_init(void);
}

void _PG_init(void)
{
	gpurec::define_settings();
}

namespace gpurec {
namespace {

Datum devices_body(FunctionCallInfo fcinfo)
{
	std::vector<gpu::DeviceInfo> devices = gpu::devices();
	ResultWriter out(fcinfo);
	for (const gpu::DeviceInfo &d : devices)
	{
		const char *name = d.name.c_str();
		const char *capability = d.compute_capability.c_str();
		Datum values[6];
		bool nulls[6] = {false, false, false, false, false, false};
		pg_call([&] {
			values[0] = Int32GetDatum(d.device_id);
			values[1] = CStringGetTextDatum(name);
			values[2] = CStringGetTextDatum(capability);
			values[3] = Int64GetDatum(d.total_memory_bytes);
			values[4] = Int64GetDatum(d.free_memory_bytes);
			values[5] = Int32GetDatum(d.multiprocessors);
		});
		out.put(values, nulls);
	}
	return (Datum) 0;
}

/*
 * gpurec_shards waits for its shards' answers in rounds of asking dblink
 * whether they came, with a pause between rounds that a cancel or
 * statement_timeout ends at once.  pg_sleep's pause is at least a
 * millisecond (its latch wait counts whole milliseconds), as long as a
 * small shard's whole answer takes; a shorter one sleeps in pg_usleep,
 * whose sleep those signals cut short.  Both check for interrupts.
 */
Datum pause_body(FunctionCallInfo fcinfo)
{
	int32 microseconds = PG_GETARG_INT32(0);
	if (microseconds < 0 || microseconds > 1000000)
		throw Error(sqlstate::invalid_parameter_value, "microseconds must be between 0 and 1000000",
					"microseconds = " + std::to_string(microseconds) + ".");
	pg_call([microseconds] {
		CHECK_FOR_INTERRUPTS();
		if (microseconds < 1000)
			pg_usleep(microseconds);
		else
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, microseconds / 1000,
							 WAIT_EVENT_PG_SLEEP);
			ResetLatch(MyLatch);
		}
		CHECK_FOR_INTERRUPTS();
	});
	PG_RETURN_VOID();
}

} // namespace
} // namespace gpurec

GPUREC_SQL_FUNCTION(gpurec_devices, gpurec::devices_body)
GPUREC_SQL_FUNCTION(gpurec_pause, gpurec::pause_body)
