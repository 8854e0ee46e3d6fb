/*
 * pg_settings.hpp: gpurec's GUCs (gpurec.device, gpurec.timing,
 * gpurec.test_fail_gpu_alloc) and the engine's per-call context made from
 * them.  Everything that reads a setting goes through here.
 */
#pragma once

#include "device.hpp"

namespace gpurec {

/*
 * Defines the settings and reserves the "gpurec." prefix.  Called by
 * _PG_init; touches no GPU.
 */
void define_settings();

/* The engine's context for one call, from the settings as they are now. */
ExecContext exec_context_from_settings();

bool settings_timing(); /* gpurec.timing */

} // namespace gpurec
