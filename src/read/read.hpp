/*
 * read.hpp: the read layer's one public header, which the SQL entry points
 * include: read_inner_query, which runs one inner query of a gpurec
 * function and fills the function's InputTable (input_table.hpp) with its
 * rows.
 *
 * The layer, by phase (as pgvector splits its index code):
 *   read.cpp           read_inner_query: prepares the query through SPI,
 *                      refuses anything but one read-only SELECT, binds its
 *                      columns, and picks the way to read it
 *   receiver.cpp       the serial read: a DestReceiver in the calling backend
 *   parallel.cpp       the parallel read's calling backend: choosing the way,
 *                      the shared memory the workers leave their columns in,
 *                      their columns joining the table
 *   aggregate.cpp      the general parallel way: the aggregate
 *                      gpurec_internal._read_columns over the query's parallel plan
 *   direct_scan.cpp    the parallel way for a query over one table: workers of
 *                      gpurec's own scan it, with no executor node per row
 *   column_types.cpp   what every way shares per row: the SQL types each
 *                      column kind accepts, Datums into engine values
 *   read_internal.hpp  what the files above share, internal to the folder
 * Every file of the folder talks to PostgreSQL; none includes a family's
 * header: a family's partial results reach the read by name (partials.hpp).
 */
#pragma once

#include "pg_boundary.hpp"

#include "device.hpp"
#include "input_table.hpp"

namespace gpurec {

/*
 * Runs `query` and appends its rows to `table`: with parallel workers when
 * its plan can run in parallel and the table need not keep row order, else
 * in the calling backend; the rows are the same either way, only their
 * order may differ.  ctx.read_notes says which path read and why.  Errors
 * (each with a SQLSTATE): a missing column names it and lists the expected
 * ones; a column of an unsupported type names column and type; a query
 * that is not one read-only SELECT is refused; the query's own errors
 * (syntax, permissions) come through as PostgreSQL raised them.  C++ code,
 * for an entry point's body (GPUREC_SQL_FUNCTION).
 */
void read_inner_query(const char *query, InputTable &table, ExecContext &ctx);

} // namespace gpurec
