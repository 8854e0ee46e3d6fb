/*
 * pg_gpurec.cpp: module entry, settings, and gpurec.devices().
 *
 * _PG_init only defines settings: CUDA starts lazily in the first backend
 * call that needs a GPU, never in the postmaster (a CUDA context does not
 * survive fork).
 */
#include "pg_boundary.hpp"

extern "C" {
#include "utils/builtins.h"
#include "utils/guc.h"
}

#include "pg_output.hpp"
#include "pg_settings.hpp"

extern "C" {
PG_MODULE_MAGIC;
void _PG_init(void);
}

namespace {

int device_setting = static_cast<int>(gpurec::DeviceMode::Auto);
bool timing_setting = false;
bool test_fail_gpu_alloc_setting = false;

const struct config_enum_entry device_options[] = {
	{"auto", static_cast<int>(gpurec::DeviceMode::Auto), false},
	{"gpu", static_cast<int>(gpurec::DeviceMode::Gpu), false},
	{"cpu", static_cast<int>(gpurec::DeviceMode::Cpu), false},
	{nullptr, 0, false}};

} // namespace

void _PG_init(void)
{
	DefineCustomEnumVariable(
		"gpurec.device", "Where gpurec computes: auto, gpu or cpu.",
		"auto uses a usable GPU when the input is large enough to gain from it; gpu raises an "
		"error when no GPU is usable; cpu never uses one.",
		&device_setting, static_cast<int>(gpurec::DeviceMode::Auto), device_options, PGC_USERSET,
		0, nullptr, nullptr, nullptr);
	DefineCustomBoolVariable("gpurec.timing",
							 "Raises a NOTICE per call with the device used and the time of "
							 "each phase.",
							 nullptr, &timing_setting, false, PGC_USERSET, 0, nullptr, nullptr,
							 nullptr);
	DefineCustomBoolVariable("gpurec.test_fail_gpu_alloc",
							 "For tests only: makes every GPU allocation fail.", nullptr,
							 &test_fail_gpu_alloc_setting, false, PGC_SUSET,
							 GUC_NOT_IN_SAMPLE | GUC_NO_SHOW_ALL, nullptr, nullptr, nullptr);
	MarkGUCPrefixReserved("gpurec");
}

namespace gpurec {

DeviceMode settings_device_mode() { return static_cast<DeviceMode>(device_setting); }
bool settings_timing() { return timing_setting; }
bool settings_test_fail_gpu_alloc() { return test_fail_gpu_alloc_setting; }

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
