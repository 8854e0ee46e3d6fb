/*
 * pg_settings.hpp: gpurec's GUCs, defined in pg_gpurec.cpp.
 */
#pragma once

#include "device.hpp"

namespace gpurec {

DeviceMode settings_device_mode();	/* gpurec.device */
bool settings_timing();				/* gpurec.timing */
bool settings_test_fail_gpu_alloc(); /* gpurec.test_fail_gpu_alloc */

} // namespace gpurec
