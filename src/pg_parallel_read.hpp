/*
 * pg_parallel_read.hpp: reading an inner query with PostgreSQL's parallel
 * workers, each of which builds engine columns of its own.
 *
 * How: the inner query is wrapped as
 *
 *     SELECT gpurec._read_columns('<specs>', q."col", ...) FROM (<inner>) AS q
 *
 * where _read_columns is an aggregate with an `internal` state and
 * serial, deserial and combine functions, PARALLEL SAFE.  When the planner
 * splits it (Finalize Aggregate over Gather over Partial Aggregate), every
 * worker converts and appends its share of the rows to columns of its own,
 * in a dynamic shared memory area the calling backend made for the read,
 * and sends their dictionaries and where their chunks are as its one
 * partial state; the calling backend appends each arriving state to the
 * call's table (InputTable::append_serialized: a dictionary merge, the
 * worker's full chunks taken as they are, its last rows copied, codes
 * translated in place).  Its own share it appends straight to that table.
 *
 * So any inner query the planner can run in parallel is read on several
 * cores: joins, views, partitioned tables included.
 *
 * Where the inner query reads one table (its serial plan a sequential
 * scan: the table's columns or expressions of them, filtered or not), the
 * executor is left out: gpurec starts that many workers of
 * its own (a ParallelContext, as PostgreSQL's parallel index builds do),
 * and they and the calling backend take the table's pages from one
 * parallel scan and convert each row as it comes (pg_parallel_scan.cpp).
 * No plan node or aggregate call runs per row, only the query's own
 * expressions, which about halved a row's cost on the 2-core machine; the
 * workers' columns join the table the same way.  The caller's privileges
 * are checked as the executor checks them; row-level security's policies
 * are part of the scan's filter.  Where the table asks for partial results
 * (InputTable::combine_partials) and the table's statistics show them much
 * smaller than the rows, each process of the direct scan sends the partial
 * result of its own rows instead of its columns, so the rows never leave
 * the process that read them.
 *
 * Where the planner cannot run the query in parallel
 * (LIMIT, a parallel-unsafe function, no workers allowed), or where the
 * table must keep the query's row order, read_inner_query runs the serial
 * path instead (pg_inner_query.cpp).
 */
#pragma once

#include "pg_boundary.hpp"

extern "C" {
#include "executor/spi.h"
#include "utils/plancache.h"
}

#include "pg_column_types.hpp"
#include "pg_input.hpp"

namespace gpurec {

/*
 * Hands inspect(PlannedStmt *) the plan SPI makes of a prepared query of
 * one statement (its generic plan), then releases it; nothing when there
 * is none.  What inspect keeps of the plan it copies.  An ERROR in inspect
 * skips the release, which costs nothing: the plan of an unsaved query
 * belongs to no resource owner and goes with SPI's memory.  PostgreSQL
 * code.
 */
template <typename Inspect> void inspect_plan(SPIPlanPtr plan, Inspect inspect)
{
	CachedPlan *cached = SPI_plan_get_cached_plan(plan);
	if (cached == nullptr)
		return;
	if (list_length(cached->stmt_list) == 1)
		inspect(linitial_node(PlannedStmt, cached->stmt_list));
	ReleaseCachedPlan(cached, nullptr); /* an unsaved plan's, held by no resource owner */
}

/* What the parallel path did, for the gpurec.timing NOTICE. */
struct ParallelReadOutcome
{
	bool ran = false;	   /* false: the caller reads serially */
	int planned_workers = 0;
	bool direct = false;   /* the table scanned directly, not the query's plan run */
	int worker_parts = 0;  /* partial states that arrived from workers */
	double join_ms = 0;	   /* the calling backend's time adding their columns to the table */
	bool partials = false; /* every process sent its partial result (InputTable::partials), not columns */
	bool partials_declined = false; /* asked for, but by the statistics not much smaller than the rows */
	const char *why_serial = nullptr; /* when !ran, or when no worker launched */
};

/*
 * Tries the parallel path for `query` (already prepared as `inner` and
 * checked as read-only), whose columns `binding` bound.  Runs it and fills `table` when
 * the plan is split over workers; otherwise returns with ran = false and
 * table untouched.  PostgreSQL code: may ereport, holds no C++ object.
 * Called between SPI_connect and SPI_finish; call_context is the one
 * before SPI_connect, which lives as long as the table may hold the
 * workers' shared memory.
 */
ParallelReadOutcome try_parallel_read(SPIPlanPtr inner, const char *query, const ColumnBinding &binding,
									  InputTable *table, ExecContext *ctx, MemoryContext call_context);

} // namespace gpurec
