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
 * preloading, each backend computes on a GPU of its own).
 */
void register_gpu_service();

/* This backend's connection to the service, or null where there is none (gpurec not preloaded). */
service::Client *gpu_service_client();

/* Sends ctx's GPU work to the service where there is one (for the functions the service runs). */
inline void attach_gpu_service(ExecContext &ctx) { ctx.service = gpu_service_client(); }

} // namespace gpurec
