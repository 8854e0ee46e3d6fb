/*
 * pg_progress.hpp: gpurec.progress, the progress of every running gpurec
 * call as other sessions see it, as pg_stat_progress_* shows core
 * commands.
 *
 * A slot of shared memory per backend, written by its backend's thread
 * alone: a call's counts (progress.hpp) reach it at the call's interrupt
 * points.  The slots come with the server's shared memory where gpurec is
 * in shared_preload_libraries, else from the part of it PostgreSQL keeps
 * spare, when a backend first needs them (doc/INTERNALS.md).
 */
#pragma once

#include "progress.hpp"

namespace gpurec {

/* _PG_init, while preloading: the slots are reserved with the server's shared memory. */
void request_progress_memory();

/*
 * What a context made for the running call counts into
 * (exec_context_from_settings): the backend's Progress, its slot now
 * showing the call, when the call is the outermost gpurec function running
 * (pg_boundary's sql_entry_depth), `track` (gpurec.track_progress) is on
 * and the slots exist; else nothing.  The slot empties when the outermost
 * entry point ends.  PostgreSQL code.
 */
ProgressReport progress_for_call(bool track);

/* Copies the running call's counts to its slot where they changed: at interrupt points, on the backend's thread. */
void publish_progress() noexcept;

} // namespace gpurec
