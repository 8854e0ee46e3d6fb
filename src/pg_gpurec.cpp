/*
 * pg_gpurec.cpp: the module's entry (PG_MODULE_MAGIC, _PG_init) and
 * gpurec.devices().
 *
 * _PG_init only defines the settings (pg_settings.cpp): CUDA starts lazily
 * in the first backend call that needs a GPU, never in the postmaster (a
 * CUDA context does not survive fork).
 */
#include "pg_boundary.hpp"

extern "C" {
#include "utils/builtins.h"
}

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

} // namespace
} // namespace gpurec

GPUREC_SQL_FUNCTION(gpurec_devices, gpurec::devices_body)
