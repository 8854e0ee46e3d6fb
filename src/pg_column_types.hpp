/*
 * pg_column_types.hpp: which SQL types each ColumnKind accepts, and how the
 * Datums of one row become engine column values.
 *
 * Nothing here depends on where the rows come from: the inner-query
 * receiver (pg_receiver.cpp) is one consumer, and any other code that holds
 * a row's Datums (a parallel worker, an aggregate's transition function)
 * can bind its columns, convert rows and append them the same way.
 *
 * Converting is PostgreSQL code (it may ereport; RowValues holds plain
 * values only, so a longjmp may pass over it).  Setting column types and
 * appending rows are C++ code: from PostgreSQL code, call them through
 * cpp_callback_guard.
 */
#pragma once

#include "pg_boundary.hpp"

extern "C" {
#include "access/tupdesc.h"
#include "utils/array.h"
}

#include "number_column.hpp"
#include "pg_input.hpp"

namespace gpurec {

/* The most columns one InputTable may have. */
constexpr int kMaxColumns = 8;

/* How one input column's Datums become engine values. */
enum class Conversion : uint8_t
{
	Absent, /* optional column not in the query */
	Int16,
	Int32,
	Int64,
	Float4,
	Float8,
	Numeric,
	Bool,
	Float4Array,
	Float8Array
};

/* Which attribute of the rows feeds each spec of a table, and how. */
struct ColumnBinding
{
	const ColumnSpec *specs;
	const char *what; /* the query's name in messages */
	int ncolumns;
	int max_attno;			 /* 1-based, for slot_getsomeattrs */
	int attno[kMaxColumns];	 /* 0-based; -1 when absent */
	Conversion conversion[kMaxColumns];
	/* the table's filter (InputTable::keep_rows_with_keys), and its column; -1: none */
	const KeyFilter *key_filter;
	int key_column;
};

/* The conversion of a column of `kind` from SQL type `type` (a base type); Absent when it does not accept it. */
Conversion conversion_for(ColumnKind kind, Oid type);

/*
 * Matches the specs of `table` by name to the attributes of `desc` and picks
 * each one's conversion.  Raises an ERROR for a column named twice, a
 * missing column that is not optional, and a type its kind does not accept.
 */
void bind_columns(ColumnBinding *binding, const InputTable &table, TupleDesc desc);

/* The binding drops the rows that `table`'s key filter does not keep (none when it has none). */
void bind_key_filter(ColumnBinding *binding, const InputTable &table);

/*
 * Numbers and arrays keep what the query's column type tells: sets it on
 * `table`'s columns, before the first row is appended.
 */
void set_column_types(InputTable &table, const ColumnBinding &binding);

/* One converted row: plain values only, so a longjmp may pass over it. */
struct RowValues
{
	int64 i[kMaxColumns];
	double d[kMaxColumns];
	int16 numeric_scale[kMaxColumns]; /* Number/Numeric: dscale or special marker */
	int16 numeric_key_scale[kMaxColumns]; /* ... the scale of i[c]: dscale, trailing zeros past 18 dropped */
	ArrayType *array[kMaxColumns];	  /* FloatArray: detoasted array, or NULL */
	bool array_copied[kMaxColumns];	  /* ... palloc'd by detoasting: pfree after use */
};

/*
 * Converts one row, given as attribute values and nulls (a slot's
 * tts_values/tts_isnull, holding at least max_attno attributes), into *row.
 * Returns false when a NULL skips the row, or binding's key filter drops it.
 */
bool convert_row(const ColumnBinding &binding, const Datum *values, const bool *isnull,
				 RowValues *row);

/*
 * Appends `n` converted rows to `table` and counts them, with `skipped` rows
 * that a NULL skipped.
 */
void append_rows(InputTable &table, const RowValues *rows, int n, size_t skipped);

/* Frees the arrays that converting `n` rows detoasted into copies. */
void release_rows(const ColumnBinding &binding, RowValues *rows, int n);

/*
 * Rows converted and waiting for one guarded append: the per-row cost of
 * crossing into C++ is what makes reading slower than a plain scan.  Every
 * reader of rows (the serial receiver, each process of a parallel read) adds
 * them through one.  Plain values only, so PostgreSQL code may hold it.
 */
struct RowBatch
{
	static constexpr int kRows = 256;
	int capacity; /* kRows, or 1 with an array column: each detoasted array is freed at once */
	int batched;
	uint64 skipped;
	uint64 rows_since_check;
	RowValues rows[kRows];
};

/* Empties batch for rows bound by binding. */
void start_batch(RowBatch *batch, const ColumnBinding &binding);

/*
 * Converts one row (values and nulls by binding's attno) into the batch,
 * appending the batch to table when it is full, and gives ctx's read phase
 * an interrupt point every 16384 rows (the executor checks too, but not in
 * every plan shape).  PostgreSQL code.
 */
void add_row(RowBatch *batch, InputTable &table, const ColumnBinding &binding, const Datum *values,
			 const bool *isnull, ExecContext &ctx);

/* Appends what is batched to table (through cpp_callback_guard), then frees the batch's detoasted arrays. */
void flush_batch(RowBatch *batch, InputTable &table, const ColumnBinding &binding);

} // namespace gpurec
