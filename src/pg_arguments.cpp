/*
 * pg_arguments.cpp: SQL arguments read into C++ values (see
 * pg_arguments.hpp).  Each PostgreSQL call runs under pg_call, so an ERROR
 * while reading an argument (a detoast failing, say) unwinds as a C++
 * exception.
 */
#include "pg_arguments.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/uuid.h"
}

#include <string>

#include "errors.hpp"
#include "key_dictionary.hpp"
#include "partials.hpp"

namespace gpurec {

const char *text_argument(FunctionCallInfo fcinfo, int n)
{
	return pg_call([&] { return text_to_cstring(PG_GETARG_TEXT_PP(n)); });
}

ArrayType *list_array_argument(FunctionCallInfo fcinfo, int n, const char *name)
{
	ArrayType *array = pg_call([&] { return PG_GETARG_ARRAYTYPE_P(n); });
	if (ARR_NDIM(array) > 1)
		throw Error(sqlstate::array_subscript_error, std::string(name) + " must be a one-dimensional array",
					"It has " + std::to_string(ARR_NDIM(array)) + " dimensions.",
					"Pass a flat list of values, e.g. ARRAY[...] or array_agg(...).");
	return array;
}

namespace {

/* The elements of a one-dimensional array, as deconstruct_array gives them. */
struct Elements
{
	Datum *values = nullptr;
	bool *nulls = nullptr;
	int count = 0;
};

Elements elements_of(ArrayType *array, Oid type, int width, bool by_value, char align)
{
	Elements e;
	pg_call([&] { deconstruct_array(array, type, width, by_value, align, &e.values, &e.nulls, &e.count); });
	return e;
}

/* A list argument whose elements may not be NULL (ERROR 22004), each converted by convert(Datum). */
template <typename T, typename Convert>
std::vector<T> non_null_list(FunctionCallInfo fcinfo, int n, const char *name, Oid type, int width, bool by_value,
							 char align, Convert convert)
{
	Elements e = elements_of(list_array_argument(fcinfo, n, name), type, width, by_value, align);
	std::vector<T> values(e.count);
	for (int i = 0; i < e.count; ++i)
	{
		if (e.nulls[i])
			throw Error(sqlstate::null_value_not_allowed, std::string(name) + " must not contain NULL elements");
		values[i] = convert(e.values[i]);
	}
	return values;
}

} // namespace

std::vector<double> float8_list_argument(FunctionCallInfo fcinfo, int n, const char *name)
{
	return non_null_list<double>(fcinfo, n, name, FLOAT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
								 [](Datum value) { return DatumGetFloat8(value); });
}

std::vector<int64_t> int8_list_argument(FunctionCallInfo fcinfo, int n, const char *name)
{
	return non_null_list<int64_t>(fcinfo, n, name, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
								  [](Datum value) { return DatumGetInt64(value); });
}

ByteSpan bytea_argument(FunctionCallInfo fcinfo, int n)
{
	const bytea *value = pg_call([=] { return PG_GETARG_BYTEA_PP(n); });
	return ByteSpan{reinterpret_cast<const uint8_t *>(VARDATA_ANY(value)), VARSIZE_ANY_EXHDR(value)};
}

std::vector<ByteSpan> bytea_list_argument(FunctionCallInfo fcinfo, int n, const char *name)
{
	return non_null_list<ByteSpan>(fcinfo, n, name, BYTEAOID, -1, false, TYPALIGN_INT, [](Datum value) {
		/* an array's elements are never compressed or stored apart, but may have a short header */
		const struct varlena *element = reinterpret_cast<const struct varlena *>(DatumGetPointer(value));
		return ByteSpan{reinterpret_cast<const uint8_t *>(VARDATA_ANY(element)), VARSIZE_ANY_EXHDR(element)};
	});
}

std::vector<int8_t> label_list_argument(FunctionCallInfo fcinfo, int n, const char *name)
{
	ArrayType *array = list_array_argument(fcinfo, n, name);
	Oid type = ARR_ELEMTYPE(array);
	if (type == BOOLOID && !ARR_HASNULL(array))
	{
		/* a boolean is one byte, 0 or 1, and without a NULL they lie side by side: no Datum per label */
		int count = ARR_NDIM(array) == 0 ? 0 : ARR_DIMS(array)[0];
		const auto *data = reinterpret_cast<const uint8_t *>(ARR_DATA_PTR(array));
		std::vector<int8_t> labels(static_cast<size_t>(count));
		for (int i = 0; i < count; ++i)
			labels[i] = data[i] != 0 ? 1 : 0;
		return labels;
	}
	Elements e;
	if (type == BOOLOID)
		e = elements_of(array, BOOLOID, 1, true, TYPALIGN_CHAR);
	else if (type == INT2OID)
		e = elements_of(array, INT2OID, 2, true, TYPALIGN_SHORT);
	else if (type == INT4OID)
		e = elements_of(array, INT4OID, 4, true, TYPALIGN_INT);
	else if (type == INT8OID)
		e = elements_of(array, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE);
	else if (type == TEXTOID)
		e = elements_of(array, TEXTOID, -1, false, TYPALIGN_INT);
	else
		throw Error(sqlstate::datatype_mismatch,
					std::string(name) + " must be boolean[] or an array of integers 0 and 1",
					std::string("It is ") + pg_call([type] { return format_type_be(type); }) + "[].",
					"Cast it, as in labels::boolean[] or labels::int[].");
	const char *hint = "A label is boolean, or an integer 0 (negative) or 1 (positive).";
	std::vector<int8_t> labels(e.count);
	for (int i = 0; i < e.count; ++i)
	{
		std::string where = "element " + std::to_string(i + 1) + " of " + name;
		if (e.nulls[i])
			labels[i] = -1;
		else if (type == BOOLOID)
			labels[i] = DatumGetBool(e.values[i]) ? 1 : 0;
		else if (type == TEXTOID)
		{
			/* an untyped literal such as '{t,f}' comes as text[] (anycompatiblearray): read as boolean's input */
			const auto *element = reinterpret_cast<const struct varlena *>(DatumGetPointer(e.values[i]));
			std::string value(VARDATA_ANY(element), VARSIZE_ANY_EXHDR(element));
			bool label = false;
			if (!parse_bool_with_len(value.data(), value.size(), &label))
				throw Error(sqlstate::invalid_parameter_value,
							where + " is \"" + value + "\"; a label must be 0 or 1 (or boolean)", "", hint);
			labels[i] = label ? 1 : 0;
		}
		else
		{
			/* the rule of a label column of an inner query (read/column_types.cpp): 0 or 1, nothing else */
			long long value = type == INT2OID   ? DatumGetInt16(e.values[i])
							  : type == INT4OID ? DatumGetInt32(e.values[i])
												: static_cast<long long>(DatumGetInt64(e.values[i]));
			if (value != 0 && value != 1)
				throw Error(sqlstate::invalid_parameter_value,
							where + " is " + std::to_string(value) + "; a label must be 0 or 1 (or boolean)", "",
							hint);
			labels[i] = static_cast<int8_t>(value);
		}
	}
	return labels;
}

int64_t id_argument(FunctionCallInfo fcinfo, int n, const ExecContext &ctx, const char *name, const char *role)
{
	Oid declared = pg_call([&] { return get_fn_expr_argtype(fcinfo->flinfo, n); });
	Oid type = pg_call([declared] { return getBaseType(declared); });
	Datum value = PG_GETARG_DATUM(n);
	KeyType given = type == UUIDOID ? KeyType::Uuid
					: type == TEXTOID || type == VARCHAROID ? KeyType::Text
					: KeyType::Integer;
	const CallKeys::Key *key = ctx.keys ? ctx.keys->find(name) : nullptr;
	KeyType ids = key ? key->type : KeyType::Integer;
	bool integer = type == INT2OID || type == INT4OID || type == INT8OID;
	if (given != ids || (given == KeyType::Integer && !integer))
	{
		std::string type_name = pg_call([declared] { return std::string(format_type_be(declared)); });
		throw Error(sqlstate::datatype_mismatch,
					std::string(role) + " has type " + type_name + ", but the call's \"" + name + "\" ids are " +
						key_type_name(ids),
					"An id argument is of the ids' kind: an integer type, uuid, or text (varchar).");
	}
	switch (type)
	{
		case INT2OID:
			return DatumGetInt16(value);
		case INT4OID:
			return DatumGetInt32(value);
		case INT8OID:
			return DatumGetInt64(value);
		default:
			break;
	}
	const uint8_t *bytes;
	size_t size;
	if (given == KeyType::Uuid)
	{
		bytes = DatumGetUUIDP(value)->data;
		size = UUID_LEN;
	}
	else
	{
		auto *plain = pg_call([value] { return pg_detoast_datum_packed(reinterpret_cast<struct varlena *>(DatumGetPointer(value))); });
		bytes = reinterpret_cast<const uint8_t *>(VARDATA_ANY(plain));
		size = VARSIZE_ANY_EXHDR(plain);
	}
	int64_t code = key->dictionary->find(bytes, size);
	if (code < 0)
	{
		std::string shown = pg_call([declared, value] {
			Oid output;
			bool varlena;
			getTypeOutputInfo(declared, &output, &varlena);
			return std::string(OidOutputFunctionCall(output, value));
		});
		throw Error(sqlstate::invalid_parameter_value, std::string(role) + " " + shown + " has no points",
					"Similarity to a user is measured from that user's points.");
	}
	return code;
}

std::vector<ByteSpan> partition_parts_argument(FunctionCallInfo fcinfo, int n, const char *name)
{
	std::vector<ByteSpan> parts = bytea_list_argument(fcinfo, n, name);
	raise_least_refusal(parts);
	return parts;
}

void append_parts_argument(ShardRows &rows, FunctionCallInfo fcinfo, int n, const char *name)
{
	size_t part = 0;
	for (const ByteSpan &bytes : partition_parts_argument(fcinfo, n, name))
		rows.append(bytes.data, bytes.size, part++);
}

} // namespace gpurec
