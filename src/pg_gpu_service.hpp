/*
 * pg_gpu_service.hpp: the GPU service inside PostgreSQL: its background
 * worker, which starts the service process and starts it again when it
 * ends, and a backend's connection to it.
 */
#pragma once

#include "device.hpp"
#include "gpu_service.hpp"

namespace gpurec {

/*
 * Registers the service's background worker.  From _PG_init while
 * shared_preload_libraries is processed; does nothing otherwise (without
 * preloading, each backend computes on a GPU of its own).  The worker
 * starts the service with what options_from_settings returns in it
 * (service_options_from_settings: given, not called by name, since the
 * settings module gives every call this module's client).
 */
void register_gpu_service(service::Options (*options_from_settings)());

/* This backend's connection to the service, or null where there is none (gpurec not preloaded). */
service::Client *gpu_service_client();

} // namespace gpurec
