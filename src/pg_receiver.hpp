/*
 * pg_receiver.hpp: the DestReceiver that streams an executor's rows into an
 * InputTable, for the inner-query runner (pg_inner_query.cpp).
 */
#pragma once

#include "pg_boundary.hpp"

extern "C" {
#include "tcop/dest.h"
}

#include "pg_column_types.hpp"
#include "pg_input.hpp"

namespace gpurec {

/*
 * A receiver, palloc'd in the current memory context, that appends every
 * row it receives to `table`, whose columns `binding` bound (bind_columns,
 * set_column_types) to the rows it will receive.  Its interrupt points (one
 * as it starts, then one every 16384 rows) are the read phase's of `ctx`.
 * PostgreSQL code.
 */
DestReceiver *create_input_receiver(InputTable *table, ExecContext *ctx, const ColumnBinding &binding);

} // namespace gpurec
