/*
 * pg_arguments.hpp: reading SQL arguments of the entry points into C++
 * values, through pg_call.
 */
#pragma once

#include "pg_boundary.hpp"

namespace gpurec {

/* The text argument n as a C string (NULL arguments never reach here: STRICT). */
const char *text_argument(FunctionCallInfo fcinfo, int n);

/* An array argument's elements, palloc'd by deconstruct_array. */
struct ArrayElements
{
	Datum *values = nullptr;
	bool *nulls = nullptr;
	int count = 0;
};

/*
 * The elements of array argument n, whose element type `type` has the
 * given length, by-value flag and alignment (as pg_type has them).
 */
ArrayElements array_argument(FunctionCallInfo fcinfo, int n, Oid type, int len, bool byval,
							 char align);

} // namespace gpurec
