/*
 * pg_settings.cpp: gpurec's GUCs (see pg_settings.hpp): their variables,
 * their definitions, and the ExecContext each SQL call starts from.
 *
 * Defining them starts no CUDA: _PG_init runs in the postmaster when the
 * library is preloaded, and a CUDA context does not survive fork.
 */
#include "pg_boundary.hpp"

extern "C" {
#include "miscadmin.h"
#include "utils/guc.h"
}

#include "pg_settings.hpp"

namespace gpurec {

namespace {

int device_setting = static_cast<int>(DeviceMode::Auto);
bool timing_setting = false;
bool test_fail_gpu_alloc_setting = false;

const struct config_enum_entry device_options[] = {
	{"auto", static_cast<int>(DeviceMode::Auto), false},
	{"gpu", static_cast<int>(DeviceMode::Gpu), false},
	{"cpu", static_cast<int>(DeviceMode::Cpu), false},
	{nullptr, 0, false}};

} // namespace

void define_settings()
{
	DefineCustomEnumVariable(
		"gpurec.device", "Where gpurec computes: auto, gpu or cpu.",
		"auto uses a usable GPU when the input is large enough to gain from it; gpu raises an "
		"error when no GPU is usable; cpu never uses one.",
		&device_setting, static_cast<int>(DeviceMode::Auto), device_options, PGC_USERSET, 0,
		nullptr, nullptr, nullptr);
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

bool settings_timing() { return timing_setting; }

ExecContext exec_context_from_settings()
{
	ExecContext ctx;
	ctx.mode = static_cast<DeviceMode>(device_setting);
	ctx.fail_gpu_alloc = test_fail_gpu_alloc_setting;
	ctx.check_interrupts = [] { pg_call([] { CHECK_FOR_INTERRUPTS(); }); };
	ctx.notice = [](const std::string &message) {
		const char *text = message.c_str();
		pg_call([text] { ereport(NOTICE, (errmsg("%s", text))); });
	};
	return ctx;
}

} // namespace gpurec
