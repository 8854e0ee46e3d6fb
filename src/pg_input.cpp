/*
 * pg_input.cpp: inner queries streamed into columns (see pg_input.hpp).
 *
 * The receiver's methods are called by the executor, so they are PostgreSQL
 * code: they may ereport, and they hold no C++ object across a PostgreSQL
 * call.  Each row is first converted into plain values (RowValues); a
 * guarded C++ call then appends a whole batch of them to the columns.
 */
#include "pg_boundary.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "tcop/dest.h"
#include "tcop/utility.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/numeric.h"
#include "utils/plancache.h"
}

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "pg_input.hpp"
#include "pg_numeric.hpp"

namespace gpurec {

InputTable::InputTable(const char *what, std::vector<ColumnSpec> specs)
	: what_(what), specs_(std::move(specs))
{
	for (const ColumnSpec &spec : specs_)
	{
		switch (spec.kind)
		{
			case ColumnKind::Id:
				columns_.emplace_back(std::in_place_type<IdColumn>);
				break;
			case ColumnKind::Int64:
				columns_.emplace_back(std::in_place_type<Int64Column>);
				break;
			case ColumnKind::Number:
				columns_.emplace_back(std::in_place_type<NumberColumn>);
				break;
			case ColumnKind::Float:
				columns_.emplace_back(std::in_place_type<FloatColumn>);
				break;
			case ColumnKind::Label:
				columns_.emplace_back(std::in_place_type<LabelColumn>);
				break;
			case ColumnKind::FloatArray:
				columns_.emplace_back(std::in_place_type<FloatArrayColumn>);
				break;
		}
	}
}

namespace {

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

/* One converted row: plain values only, so a longjmp may pass over it. */
struct RowValues
{
	int64 i[kMaxColumns];
	double d[kMaxColumns];
	int16 numeric_scale[kMaxColumns]; /* Number/Numeric: dscale or special marker */
	ArrayType *array[kMaxColumns];	  /* FloatArray: detoasted array, or NULL */
	bool array_copied[kMaxColumns];	  /* ... palloc'd by detoasting: pfree after use */
};

/*
 * Rows converted before one guarded append: the per-row cost of crossing
 * into C++ is what makes reading slower than a plain scan.  Queries with an
 * array column append row by row, so that each detoasted array is freed
 * at once.
 */
constexpr int kBatchRows = 256;

struct InputReceiver
{
	DestReceiver pub; /* must be first */
	InputTable *table;
	ExecContext *ctx;
	int ncolumns;
	int max_attno; /* 1-based, for slot_getsomeattrs */
	int attno[kMaxColumns];
	Conversion conversion[kMaxColumns];
	int batch_capacity;
	int batched;
	uint64 skipped;
	RowValues batch[kBatchRows];
	uint64 rows_since_check;
};

const char *kind_types(ColumnKind kind)
{
	switch (kind)
	{
		case ColumnKind::Id:
		case ColumnKind::Int64:
			return "smallint, integer or bigint";
		case ColumnKind::Number:
		case ColumnKind::Float:
			return "smallint, integer, bigint, numeric, real or double precision";
		case ColumnKind::Label:
			return "boolean, smallint, integer or bigint";
		case ColumnKind::FloatArray:
			return "real[] or double precision[]";
	}
	return "";
}

/* The conversion for a column of type `type`, or Absent when the kind does not accept it. */
Conversion conversion_for(ColumnKind kind, Oid type)
{
	bool integers = kind != ColumnKind::FloatArray;
	bool decimals = kind == ColumnKind::Number || kind == ColumnKind::Float;
	switch (type)
	{
		case INT2OID:
			return integers ? Conversion::Int16 : Conversion::Absent;
		case INT4OID:
			return integers ? Conversion::Int32 : Conversion::Absent;
		case INT8OID:
			return integers ? Conversion::Int64 : Conversion::Absent;
		case FLOAT4OID:
			return decimals ? Conversion::Float4 : Conversion::Absent;
		case FLOAT8OID:
			return decimals ? Conversion::Float8 : Conversion::Absent;
		case NUMERICOID:
			return decimals ? Conversion::Numeric : Conversion::Absent;
		case BOOLOID:
			return kind == ColumnKind::Label ? Conversion::Bool : Conversion::Absent;
		case FLOAT4ARRAYOID:
			return kind == ColumnKind::FloatArray ? Conversion::Float4Array : Conversion::Absent;
		case FLOAT8ARRAYOID:
			return kind == ColumnKind::FloatArray ? Conversion::Float8Array : Conversion::Absent;
		default:
			return Conversion::Absent;
	}
}

NumberType number_type_for(Conversion c)
{
	switch (c)
	{
		case Conversion::Float4:
			return NumberType::Float4;
		case Conversion::Float8:
			return NumberType::Float8;
		case Conversion::Numeric:
			return NumberType::Numeric;
		default:
			return NumberType::Integer;
	}
}

/* Numbers and arrays keep what the query's column type tells: set it before the first row. */
void set_column_types(void *arg)
{
	auto *r = static_cast<InputReceiver *>(arg);
	for (int c = 0; c < r->ncolumns; ++c)
		if (r->table->specs()[c].kind == ColumnKind::Number)
			r->table->number(c).set_type(number_type_for(r->conversion[c]));
		else if (r->table->specs()[c].kind == ColumnKind::FloatArray)
			r->table->float_array(c).set_doubles(r->conversion[c] == Conversion::Float8Array);
}

void receiver_startup(DestReceiver *self, int operation, TupleDesc desc)
{
	auto *r = reinterpret_cast<InputReceiver *>(self);
	const std::vector<ColumnSpec> &specs = r->table->specs();
	StringInfoData expected;

	initStringInfo(&expected);
	for (int c = 0; c < r->ncolumns; ++c)
		appendStringInfo(&expected, "%s%s%s", c ? ", " : "", specs[c].name,
						 specs[c].optional ? " (optional)" : "");

	r->max_attno = 0;
	r->batch_capacity = kBatchRows;
	for (int c = 0; c < r->ncolumns; ++c)
	{
		const ColumnSpec &spec = specs[c];
		r->attno[c] = -1;
		for (int a = 0; a < desc->natts; ++a)
		{
			Form_pg_attribute att = TupleDescAttr(desc, a);
			if (att->attisdropped || strcmp(NameStr(att->attname), spec.name) != 0)
				continue;
			if (r->attno[c] >= 0)
				ereport(ERROR, (errcode(ERRCODE_AMBIGUOUS_COLUMN),
								errmsg("the %s returns more than one column named \"%s\"",
									   r->table->what(), spec.name)));
			r->attno[c] = a;
		}
		if (r->attno[c] < 0)
		{
			if (!spec.optional)
				ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN),
								errmsg("the %s has no column \"%s\"", r->table->what(), spec.name),
								errdetail("Expected columns: %s.", expected.data),
								errhint("Columns are matched by name; rename with AS.")));
			r->conversion[c] = Conversion::Absent;
			continue;
		}
		Oid type = TupleDescAttr(desc, r->attno[c])->atttypid;
		r->conversion[c] = conversion_for(spec.kind, type);
		if (r->conversion[c] == Conversion::Absent)
			ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
							errmsg("column \"%s\" of the %s has type %s", spec.name,
								   r->table->what(), format_type_be(type)),
							errdetail("Column \"%s\" must be %s.", spec.name, kind_types(spec.kind))));
		r->max_attno = Max(r->max_attno, r->attno[c] + 1);
		if (spec.kind == ColumnKind::FloatArray)
			r->batch_capacity = 1;
	}
	cpp_callback_guard(set_column_types, r);
}

/* Appends the batch to the columns: the only C++ work of reading, behind the guard. */
void append_batch(void *arg)
{
	auto *r = static_cast<InputReceiver *>(arg);
	InputTable &table = *r->table;
	const RowValues *rows = r->batch;
	int n = r->batched;
	for (int c = 0; c < r->ncolumns; ++c)
	{
		switch (table.specs()[c].kind)
		{
			case ColumnKind::Id:
			{
				IdColumn &ids = table.id(c);
				for (int k = 0; k < n; ++k)
					ids.push_back(rows[k].i[c]);
				break;
			}
			case ColumnKind::Int64:
			{
				Int64Column &ints = table.int64(c);
				for (int k = 0; k < n; ++k)
					ints.push_back(rows[k].i[c]);
				break;
			}
			case ColumnKind::Label:
			{
				LabelColumn &labels = table.label(c);
				for (int k = 0; k < n; ++k)
					labels.push_back(static_cast<uint8_t>(rows[k].i[c]));
				break;
			}
			case ColumnKind::Float:
			{
				FloatColumn &floats = table.floats(c);
				for (int k = 0; k < n; ++k)
					floats.push_back(rows[k].d[c]);
				break;
			}
			case ColumnKind::Number:
			{
				NumberColumn &number = table.number(c);
				switch (number.type())
				{
					case NumberType::Integer:
						for (int k = 0; k < n; ++k)
							number.push_integer(rows[k].i[c]);
						break;
					case NumberType::Float4:
					case NumberType::Float8:
						for (int k = 0; k < n; ++k)
							number.push_double(rows[k].d[c]);
						break;
					case NumberType::Numeric:
						for (int k = 0; k < n; ++k)
						{
							if (rows[k].numeric_scale[c] < 0)
								number.push_numeric_special(rows[k].numeric_scale[c]);
							else
								number.push_numeric(rows[k].i[c], rows[k].numeric_scale[c]);
						}
						break;
				}
				break;
			}
			case ColumnKind::FloatArray:
			{
				FloatArrayColumn &arrays = table.float_array(c);
				for (int k = 0; k < n; ++k)
				{
					/* NULL array: an empty row, which the engine reports by its length */
					ArrayType *array = rows[k].array[c];
					if (array)
						arrays.append_row(ARR_DATA_PTR(array), static_cast<size_t>(rows[k].i[c]),
										  ARR_NULLBITMAP(array));
					else
						arrays.append_row(nullptr, 0, nullptr);
				}
				break;
			}
		}
	}
	table.count_rows(static_cast<size_t>(n), r->skipped);
}

/* Appends what is batched, then frees the batch's detoasted arrays. */
void flush_batch(InputReceiver *r)
{
	cpp_callback_guard(append_batch, r);
	for (int k = 0; k < r->batched; ++k)
		for (int c = 0; c < r->ncolumns; ++c)
			if (r->batch[k].array_copied[c])
				pfree(r->batch[k].array[c]);
	r->batched = 0;
	r->skipped = 0;
}


/* Reads column c of the slot into r->row; false when a NULL skips the row. */
bool convert_value(InputReceiver *r, TupleTableSlot *slot, int c)
{
	const ColumnSpec &spec = r->table->specs()[c];
	RowValues &v = r->batch[r->batched];
	v.array[c] = nullptr;
	v.array_copied[c] = false;
	if (r->conversion[c] == Conversion::Absent)
	{
		v.i[c] = spec.fallback;
		v.d[c] = static_cast<double>(spec.fallback);
		return true;
	}
	Datum datum = slot->tts_values[r->attno[c]];
	if (slot->tts_isnull[r->attno[c]])
	{
		if (spec.null_skips_row)
			return false;
		v.i[c] = spec.fallback;
		v.d[c] = static_cast<double>(spec.fallback);
		return true;
	}
	switch (r->conversion[c])
	{
		case Conversion::Int16:
			v.i[c] = DatumGetInt16(datum);
			v.d[c] = static_cast<double>(v.i[c]);
			break;
		case Conversion::Int32:
			v.i[c] = DatumGetInt32(datum);
			v.d[c] = static_cast<double>(v.i[c]);
			break;
		case Conversion::Int64:
			v.i[c] = DatumGetInt64(datum);
			v.d[c] = static_cast<double>(v.i[c]);
			break;
		case Conversion::Float4:
			v.d[c] = DatumGetFloat4(datum);
			break;
		case Conversion::Float8:
			v.d[c] = DatumGetFloat8(datum);
			break;
		case Conversion::Bool:
			v.i[c] = DatumGetBool(datum) ? 1 : 0;
			break;
		case Conversion::Numeric:
		{
			struct varlena *raw = reinterpret_cast<struct varlena *>(DatumGetPointer(datum));
			struct varlena *plain = pg_detoast_datum_packed(raw);
			NumericParts parts = numeric_parts(plain);
			if (spec.kind == ColumnKind::Float)
			{
				v.d[c] = numeric_to_double(parts);
				if (std::isinf(v.d[c]) && parts.special == 0)
					ereport(ERROR, (errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
									errmsg("value of column \"%s\" of the %s is out of range for "
										   "double precision",
										   spec.name, r->table->what())));
			}
			else if (parts.special)
				v.numeric_scale[c] = parts.special;
			else
			{
				v.numeric_scale[c] = static_cast<int16>(parts.dscale);
				if (!numeric_to_scaled(parts, &v.i[c]))
					ereport(ERROR, (errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
									errmsg("numeric value %s in column \"%s\" of the %s is too "
										   "large or too precise for gpurec",
										   DatumGetCString(DirectFunctionCall1(
											   numeric_out, PointerGetDatum(plain))),
										   spec.name, r->table->what()),
									errdetail("gpurec holds numeric inputs exactly as 64-bit "
											  "fixed-point numbers: at most 18 significant digits "
											  "and 18 digits after the decimal point."),
									errhint("Cast the column to double precision.")));
			}
			if (plain != raw)
				pfree(plain);
			break;
		}
		case Conversion::Float4Array:
		case Conversion::Float8Array:
		{
			ArrayType *array = DatumGetArrayTypeP(datum); /* detoasted (a copy when toasted) */
			if (ARR_NDIM(array) > 1)
				ereport(ERROR, (errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
								errmsg("column \"%s\" of the %s must hold one-dimensional arrays",
									   spec.name, r->table->what())));
			v.array[c] = array;
			v.array_copied[c] = reinterpret_cast<Pointer>(array) != DatumGetPointer(datum);
			v.i[c] = ArrayGetNItems(ARR_NDIM(array), ARR_DIMS(array));
			break;
		}
		case Conversion::Absent:
			break;
	}
	if (spec.kind == ColumnKind::Label && r->conversion[c] != Conversion::Bool &&
		v.i[c] != 0 && v.i[c] != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("column \"%s\" of the %s holds %lld; a label must be 0 or 1 (or boolean)",
						spec.name, r->table->what(), static_cast<long long>(v.i[c]))));
	return true;
}

bool receiver_receive(TupleTableSlot *slot, DestReceiver *self)
{
	auto *r = reinterpret_cast<InputReceiver *>(self);
	bool keep = true;

	slot_getsomeattrs(slot, r->max_attno);
	for (int c = 0; c < r->ncolumns && keep; ++c)
		keep = convert_value(r, slot, c);
	if (!keep)
		++r->skipped;
	else if (++r->batched == r->batch_capacity)
		flush_batch(r);

	/* the executor checks for interrupts too, but not in every plan shape */
	if (++r->rows_since_check >= 16384)
	{
		r->rows_since_check = 0;
		CHECK_FOR_INTERRUPTS();
	}
	return true;
}

void receiver_shutdown(DestReceiver *self)
{
	flush_batch(reinterpret_cast<InputReceiver *>(self));
}
void receiver_destroy(DestReceiver *) {}

/* Refuses anything but one read-only query. */
void check_read_only(SPIPlanPtr plan, const char *what)
{
	List *sources = SPI_plan_get_plan_sources(plan);
	if (list_length(sources) != 1)
		ereport(ERROR, (errcode(ERRCODE_SYNTAX_ERROR),
						errmsg("the %s must be exactly one SQL statement", what)));
	CachedPlanSource *source = static_cast<CachedPlanSource *>(linitial(sources));
	ListCell *lc;
	foreach (lc, source->query_list)
	{
		Query *query = lfirst_node(Query, lc);
		const char *refused = nullptr;
		if (query->utilityStmt != nullptr)
			refused = CreateCommandName(query->utilityStmt); /* "SELECT INTO" too */
		else if (query->commandType != CMD_SELECT)
			refused = GetCommandTagName(source->commandTag);
		else if (query->hasModifyingCTE)
			refused = "a data-modifying WITH";
		else if (query->rowMarks != NIL)
			refused = "SELECT FOR UPDATE/SHARE";
		if (refused)
			ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
							errmsg("the %s must be a read-only SELECT", what),
							errdetail("gpurec runs inner queries read-only; it refuses %s.", refused),
							errhint("Modify or lock the data in a statement of its own.")));
	}
}

struct QueryRun
{
	const char *query;
	InputTable *table;
	ExecContext *ctx;
};

void run_query(void *arg)
{
	auto *run = static_cast<QueryRun *>(arg);
	InputReceiver &receiver = *static_cast<InputReceiver *>(palloc0(sizeof(InputReceiver)));
	SPIExecuteOptions options;
	SPIPlanPtr plan;

	receiver.pub.receiveSlot = receiver_receive;
	receiver.pub.rStartup = receiver_startup;
	receiver.pub.rShutdown = receiver_shutdown;
	receiver.pub.rDestroy = receiver_destroy;
	receiver.pub.mydest = DestNone;
	receiver.table = run->table;
	receiver.ctx = run->ctx;
	receiver.ncolumns = static_cast<int>(run->table->specs().size());
	Assert(receiver.ncolumns <= kMaxColumns);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	plan = SPI_prepare(run->query, 0, nullptr);
	if (plan == nullptr)
		elog(ERROR, "could not prepare the %s: %s", run->table->what(),
			 SPI_result_code_string(SPI_result));
	check_read_only(plan, run->table->what());

	memset(&options, 0, sizeof options);
	options.read_only = true;
	options.dest = &receiver.pub;

	/*
	 * SPI's read_only checks the statement, not the functions it calls; a
	 * read-only transaction state refuses writes anywhere inside (25006).
	 * A subtransaction abort restores the flag too.
	 */
	bool was_read_only = XactReadOnly;
	XactReadOnly = true;
	PG_TRY();
	{
		SPI_execute_plan_extended(plan, &options);
	}
	PG_FINALLY();
	{
		XactReadOnly = was_read_only;
	}
	PG_END_TRY();
	SPI_freeplan(plan);
	SPI_finish();
}

} // namespace

void read_inner_query(const char *query, InputTable &table, ExecContext &ctx)
{
	if (table.specs().size() > static_cast<size_t>(kMaxColumns))
		throw Error(sqlstate::internal_error, "too many columns in one inner query");
	Stopwatch clock;
	QueryRun run = {query, &table, &ctx};
	pg_call([&] { run_query(&run); });
	ctx.times.read_ms += clock.elapsed_ms();
}

} // namespace gpurec
