/*
 * pg_settings.hpp: gpurec's GUCs (gpurec.device, gpurec.gpus,
 * gpurec.service_memory, gpurec.timing, gpurec.track_progress,
 * gpurec.parallel_workers, gpurec.geo_pruning, gpurec.test_fail_gpu_alloc,
 * gpurec.test_fault) and the engine's per-call
 * context made from them.  Everything that reads a setting goes through
 * here.
 */
#pragma once

#include "device.hpp"
#include "gpu_service.hpp"

namespace gpurec {

/*
 * Defines the settings and reserves the "gpurec." prefix.  Called by
 * _PG_init; touches no GPU.
 */
void define_settings();

/* What the GPU service runs with: gpurec.gpus and the test-only stand-in devices (each call brings its own gpurec.cpu_threads). */
service::Options service_options_from_settings();

/* The engine's context for one call, from the settings as they are now. */
ExecContext exec_context_from_settings();

bool settings_timing(); /* gpurec.timing */

int settings_parallel_workers(); /* gpurec.parallel_workers: -1 follows PostgreSQL */

enum class GeoPruning : uint8_t; /* geo.hpp */
GeoPruning settings_geo_pruning(); /* gpurec.geo_pruning */

/*
 * An interrupt point of `phase` in PostgreSQL code (the receiver's batches,
 * the result rows): CHECK_FOR_INTERRUPTS, then the test fault when it is
 * due.  May ereport.
 */
void postgres_interrupt_point(ExecContext &ctx, Phase phase);

/*
 * Carries out a gpurec.test_fault: `error` raises ERROR 57000 naming the
 * phase; `wait` sleeps in short steps, checking for interrupts, until a
 * cancel or statement_timeout ends it, and after 30 s raises ERROR 55000.
 * PostgreSQL code.
 */
void run_test_fault(const TestFault &fault);

} // namespace gpurec
