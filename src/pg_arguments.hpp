/*
 * pg_arguments.hpp: reading the SQL arguments of the entry points into C++
 * values, through pg_call.
 *
 * Array arguments follow one rule for every function: an array argument is
 * a list, so it must have at most one dimension (an empty array has none);
 * its lower bound does not matter, its elements count in order.  A
 * multidimensional array is ERROR 2202E rather than silently flattened.
 */
#pragma once

#include "pg_boundary.hpp"

extern "C" {
#include "utils/array.h"
}

#include <cstdint>
#include <vector>

#include "device.hpp"

namespace gpurec {

class ShardRows;

/* The text argument n as a C string (callers answer NULL arguments first). */
const char *text_argument(FunctionCallInfo fcinfo, int n);

/* Argument n as a detoasted array, refused when it has more than one dimension. */
ArrayType *list_array_argument(FunctionCallInfo fcinfo, int n, const char *name);

/* A float8[] argument; a NULL element is ERROR 22004. */
std::vector<double> float8_list_argument(FunctionCallInfo fcinfo, int n, const char *name);

/* A bigint[] argument; a NULL element is ERROR 22004. */
std::vector<int64_t> int8_list_argument(FunctionCallInfo fcinfo, int n, const char *name);

/* The bytes of one element of a bytea[] argument, in place. */
struct ByteSpan
{
	const uint8_t *data;
	size_t size;
};

/* A bytea argument (not NULL), detoasted, in place. */
ByteSpan bytea_argument(FunctionCallInfo fcinfo, int n);

/* A bytea[] argument; a NULL element is ERROR 22004. */
std::vector<ByteSpan> bytea_list_argument(FunctionCallInfo fcinfo, int n, const char *name);

/*
 * The partitions' parts of gpurec_shards in bytea[] argument n (named
 * `name`), in partition order, for a merge; where any is a refusal
 * (refusal_bytes, partials.hpp), the least of them is raised instead.
 */
std::vector<ByteSpan> partition_parts_argument(FunctionCallInfo fcinfo, int n, const char *name);

/* The parts of partition_parts_argument, appended to `rows` in partition order. */
void append_parts_argument(ShardRows &rows, FunctionCallInfo fcinfo, int n, const char *name);

/*
 * A labels argument as -1 (NULL), 0, 1: boolean[], an array of integers 0
 * and 1 (smallint, integer or bigint; anything else ERROR 22023), or text[]
 * read as boolean input (an untyped literal such as '{t,f}').
 */
std::vector<int8_t> label_list_argument(FunctionCallInfo fcinfo, int n, const char *name);

/*
 * Argument n, an id of the call's ids named `name` (main_user, an
 * anyelement): an integer as itself, a uuid or text as its code in the
 * call's dictionary (key_dictionary.hpp), so after the read.  ERROR 42804
 * where its type is not of the ids' kind; for a uuid or text no row
 * holds, ERROR 22023 "`role` ... has no points" as the engine says it of
 * an integer.
 */
int64_t id_argument(FunctionCallInfo fcinfo, int n, const ExecContext &ctx, const char *name, const char *role);

} // namespace gpurec
