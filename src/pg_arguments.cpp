/*
 * pg_arguments.cpp: SQL arguments read into C++ values (see
 * pg_arguments.hpp).  Each PostgreSQL call runs under pg_call, so an ERROR
 * while reading an argument (a detoast failing, say) unwinds as a C++
 * exception.
 */
#include "pg_arguments.hpp"

extern "C" {
#include "utils/array.h"
#include "utils/builtins.h"
}

namespace gpurec {

const char *text_argument(FunctionCallInfo fcinfo, int n)
{
	return pg_call([&] { return text_to_cstring(PG_GETARG_TEXT_PP(n)); });
}

ArrayElements array_argument(FunctionCallInfo fcinfo, int n, Oid type, int len, bool byval,
							 char align)
{
	ArrayElements elements;
	pg_call([&] {
		deconstruct_array(PG_GETARG_ARRAYTYPE_P(n), type, len, byval, align, &elements.values,
						  &elements.nulls, &elements.count);
	});
	return elements;
}

} // namespace gpurec
