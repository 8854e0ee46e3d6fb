/*
 * column_types.cpp: what every way of reading does with one row (see
 * read_internal.hpp, part 1): the SQL types each ColumnKind accepts,
 * binding a query's columns to the table's specs by name, the conversion
 * of a row's Datums into engine column values, and batches of converted
 * rows appended to the table.  Nothing here depends on where the rows come
 * from: the serial receiver, an aggregate's transition function, a direct
 * scan's slot.
 */
#include "pg_boundary.hpp"

extern "C" {
#include "catalog/dependency.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/uuid.h"
}

#include <cmath>
#include <limits>

#include "array_column.hpp"
#include "pg_numeric.hpp"
#include "pg_settings.hpp"
#include "read_internal.hpp"

namespace gpurec {

namespace {

/* The types a column accepts, as a column-type error spells them. */
const char *kind_types(const ColumnSpec &spec)
{
	if (spec.holds_ids())
		return "smallint, integer, bigint, uuid, text or varchar";
	switch (spec.kind)
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

} // namespace

Conversion conversion_for(const ColumnSpec &spec, Oid type)
{
	ColumnKind kind = spec.kind;
	if (spec.holds_ids() && type == UUIDOID)
		return Conversion::Uuid;
	if (spec.holds_ids() && (type == TEXTOID || type == VARCHAROID))
		return Conversion::Text;
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

namespace {

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

/* An absent column, or a NULL that does not skip the row: the spec's fallback. */
void take_fallback(const ColumnSpec &spec, RowValues &v, int c)
{
	v.i[c] = spec.fallback;
	v.d[c] = static_cast<double>(spec.fallback);
	if (spec.kind == ColumnKind::Number)
	{
		/* as a numeric: the integer at scale 0, or +Infinity (kFallbackInfinity) */
		bool infinity = spec.fallback == kFallbackInfinity;
		if (infinity)
			v.d[c] = std::numeric_limits<double>::infinity();
		v.numeric_scale[c] = infinity ? NumberColumn::kScalePosInf : 0;
		v.numeric_key_scale[c] = 0;
	}
}

/* A little- or big-endian value of the WKB at p. */
template <typename T> T wkb_value(const uint8_t *p, bool little)
{
	uint8_t bytes[sizeof(T)];
	for (size_t i = 0; i < sizeof(T); ++i)
		bytes[i] = little ? p[i] : p[sizeof(T) - 1 - i];
	T value;
	memcpy(&value, bytes, sizeof value);
	return value;
}

const char *wkb_type_name(uint32 type)
{
	static const char *names[] = {"geometry", "point", "linestring", "polygon", "multipoint",
								  "multilinestring", "multipolygon", "geometrycollection"};
	return type < sizeof names / sizeof names[0] ? names[type] : "geometry";
}

/*
 * A PostGIS point's x and y into v (column c and the binding's y column),
 * through its type's binary output, (E)WKB, so that gpurec links nothing of
 * PostGIS: ERROR 22023 for another geometry, an empty point, or a SRID
 * other than the earlier rows'.
 */
void read_point(const ColumnBinding &b, int c, Datum datum, RowValues &v)
{
	bytea *wkb = OidSendFunctionCall(b.point_send, datum);
	const auto *p = reinterpret_cast<const uint8_t *>(VARDATA(wkb));
	size_t n = VARSIZE(wkb) - VARHDRSZ;
	if (n < 5)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("a PostGIS value of the %s is too short", b.what)));
	bool little = p[0] == 1;
	auto type = wkb_value<uint32>(p + 1, little);
	bool has_srid = (type & 0x20000000u) != 0, has_z = (type & 0x80000000u) != 0, has_m = (type & 0x40000000u) != 0;
	uint32 base = type & 0x0FFFFFFFu;
	if (base >= 1000) /* ISO WKB: 1001 POINT Z, 2001 POINT M, 3001 POINT ZM */
	{
		has_z = has_z || base / 1000 == 1 || base / 1000 == 3;
		has_m = has_m || base / 1000 >= 2;
		base %= 1000;
	}
	if (base != 1)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("the %s's PostGIS column holds a %s; gpurec takes points", b.what, wkb_type_name(base)),
						errhint("Take one point of each, for example ST_PointOnSurface(geom) or ST_Centroid(geom).")));
	size_t at = 5;
	int32 srid = 0;
	if (has_srid)
	{
		srid = wkb_value<int32>(p + at, little);
		at += 4;
	}
	size_t coordinates = 2 + (has_z ? 1 : 0) + (has_m ? 1 : 0);
	if (n < at + coordinates * 8)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("a PostGIS point of the %s is too short", b.what)));
	double x = wkb_value<double>(p + at, little), y = wkb_value<double>(p + at + 8, little);
	pfree(wkb);
	if (std::isnan(x) && std::isnan(y))
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("the %s's PostGIS column holds an empty point", b.what),
						errhint("Filter them out: WHERE NOT ST_IsEmpty(geom).")));
	if (b.point_geography && srid == 0)
		srid = 4326; /* geography's default */
	ColumnBinding::PointState &state = *b.point_state;
	if (!state.known)
	{
		state.srid = srid;
		state.known = true;
	}
	else if (srid != state.srid)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("the %s's points have mixed SRIDs: %d and %d", b.what, state.srid, srid),
						errhint("Transform them to one: ST_Transform(geom, %d).", state.srid)));
	v.d[c] = x;
	v.d[b.point_y] = y;
}

/* Converts column c of the row into v; false when a NULL skips the row. */
bool convert_value(const ColumnBinding &b, const Datum *values, const bool *isnull, int c,
				   RowValues &v)
{
	const ColumnSpec &spec = b.specs[c];
	v.array[c] = nullptr;
	v.array_copied[c] = false;
	if (b.conversion[c] == Conversion::Absent)
	{
		take_fallback(spec, v, c);
		return true;
	}
	Datum datum = values[b.attno[c]];
	if (isnull[b.attno[c]])
	{
		if (spec.null_is_error)
			ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
							errmsg("column \"%s\" of the %s is NULL", spec.name, b.what),
							errdetail("Column \"%s\" must not be NULL.", spec.name)));
		if (spec.null_skips_row)
			return false;
		take_fallback(spec, v, c);
		return true;
	}
	switch (b.conversion[c])
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
				/* as numeric::float8: too large, or so small that it would read as 0 */
				if (parts.special == 0 && (std::isinf(v.d[c]) || (v.d[c] == 0.0 && parts.ndigits > 0)))
					ereport(ERROR, (errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
									errmsg("value of column \"%s\" of the %s is out of range for "
										   "double precision",
										   spec.name, b.what)));
			}
			else if (parts.special)
			{
				v.numeric_scale[c] = parts.special;
				v.numeric_key_scale[c] = 0; /* read with the marker (push_numerics), never used */
				v.i[c] = 0;
			}
			else
			{
				v.numeric_scale[c] = static_cast<int16>(parts.dscale);
				int key_scale = 0;
				bool held = numeric_to_scaled(parts, &v.i[c], &key_scale);
				v.numeric_key_scale[c] = static_cast<int16>(key_scale);
				if (!held)
				{
					int scale = parts.dscale;
					char detail[512];
					numeric_range_text::format_detail(detail, sizeof detail, scale);
					ereport(ERROR,
							(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
							 errmsg(numeric_range_text::message,
									DatumGetCString(DirectFunctionCall1(numeric_out, PointerGetDatum(plain))),
									psprintf("column \"%s\" of the %s", spec.name, b.what),
									scale),
							 errdetail("%s", detail),
							 errhint("%s", numeric_range_text::hint)));
				}
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
									   spec.name, b.what)));
			v.array[c] = array;
			v.array_copied[c] = reinterpret_cast<Pointer>(array) != DatumGetPointer(datum);
			v.i[c] = ArrayGetNItems(ARR_NDIM(array), ARR_DIMS(array));
			break;
		}
		case Conversion::Uuid:
		case Conversion::Text:
		{
			const uint8_t *bytes;
			size_t size;
			struct varlena *plain = nullptr;
			if (b.conversion[c] == Conversion::Uuid)
			{
				bytes = DatumGetUUIDP(datum)->data;
				size = UUID_LEN;
			}
			else
			{
				/* most ids lie in the tuple as they are: no call for them (pg_detoast_datum_packed's own test) */
				plain = reinterpret_cast<struct varlena *>(DatumGetPointer(datum));
				if (VARATT_IS_COMPRESSED(plain) || VARATT_IS_EXTERNAL(plain))
					plain = pg_detoast_datum_packed(plain);
				bytes = reinterpret_cast<const uint8_t *>(VARDATA_ANY(plain));
				size = VARSIZE_ANY_EXHDR(plain);
			}
			/*
			 * held: the value's index, for good; a filtered column: its code,
			 * which the filter compares; else the index of the value staged,
			 * made its code with the batch's (code_staged_ids)
			 */
			int64 code = b.held[c]			   ? b.held[c]->hold(bytes, size)
						 : c == b.key_column ? b.keys[c]->intern(bytes, size)
											 : b.keys[c]->stage(bytes, size);
			if (plain && plain != reinterpret_cast<struct varlena *>(DatumGetPointer(datum)))
				pfree(plain);
			v.i[c] = b.held[c] || c != b.key_column ? code : code * b.key_stride + b.key_lane;
			if (code < 0)
				ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
								errmsg("could not code column \"%s\" of the %s: out of memory, or more than 2147483647 "
									   "distinct ids", spec.name, b.what)));
			break;
		}
		case Conversion::PointX:
			read_point(b, c, datum, v);
			break;
		case Conversion::PointY: /* PointX, of the same column, came first and set it */
			break;
		case Conversion::Absent:
			break;
	}
	if (spec.kind == ColumnKind::Label && b.conversion[c] != Conversion::Bool && v.i[c] != 0 &&
		v.i[c] != 1)
		v.i[c] = LabelColumn::bad_label_mark(v.i[c]);
	return true;
}

KeyType key_type_of(Conversion conversion)
{
	switch (conversion)
	{
		case Conversion::Uuid:
			return KeyType::Uuid;
		case Conversion::Text:
			return KeyType::Text;
		default:
			return KeyType::Integer;
	}
}

struct KeyArgs
{
	CallKeys *keys;
	const char *name;
	KeyType type;
	KeyDictionary *dictionary;
};

void add_key(void *arg)
{
	auto *a = static_cast<KeyArgs *>(arg);
	a->dictionary = a->keys->key(a->name, a->type).dictionary.get();
}

/*
 * The dictionary of the call's ids named `name`, whose column here (of SQL
 * type `type`) is of key type `key_type`; null for integers.  The call's
 * columns of one name must agree: ERROR 42804 where an earlier query's did
 * not.
 */
KeyDictionary *key_dictionary_for(CallKeys &keys, const char *name, KeyType key_type, const char *what, Oid type)
{
	const CallKeys::Key *known = keys.find(name);
	if (known && known->type != key_type)
		ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
						errmsg("column \"%s\" of the %s has type %s, but the call's other \"%s\" ids are %s",
							   name, what, format_type_be(type), name, key_type_name(known->type)),
						errdetail("Every inner query of one call gives its \"%s\" in one kind of type: integers, "
								  "uuid, or text (varchar).",
								  name),
						errhint("Give \"%s\" one type in every query of the call (for example %s::text AS %s in "
								"each).",
								name, name, name)));
	KeyArgs args{&keys, name, key_type, nullptr};
	cpp_callback_guard(add_key, &args);
	return args.dictionary;
}

/*
 * When optional columns are missing and the query returns columns that no
 * spec uses, one of those may be an optional column misspelled (`2 AS qty`
 * for quantity): a NOTICE names them all, since every row then silently
 * takes the defaults.  Extra columns are otherwise fine, and say nothing.
 */
void notice_unused_columns(const ColumnBinding &b, TupleDesc desc)
{
	StringInfoData missing;
	initStringInfo(&missing);
	int n_missing = 0;
	const ColumnSpec *only = nullptr;
	for (int c = 0; c < b.ncolumns; ++c)
		if (b.attno[c] < 0)
		{
			appendStringInfo(&missing, "%s\"%s\"", n_missing++ ? ", " : "", b.specs[c].name);
			only = &b.specs[c];
		}
	if (n_missing == 0)
		return;
	/* a plain value says itself; a sentinel (no current store, never free) is the README's to explain */
	char value[48] = "";
	if (n_missing == 1 && only->fallback != INT64_MIN && only->fallback != kFallbackInfinity)
		snprintf(value, sizeof value, " (%lld)", static_cast<long long>(only->fallback));
	StringInfoData unused;
	initStringInfo(&unused);
	for (int a = 0; a < desc->natts; ++a)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);
		bool used = att->attisdropped;
		for (int c = 0; c < b.ncolumns && !used; ++c)
			used = b.attno[c] == a;
		if (!used)
			appendStringInfo(&unused, "%s\"%s\"", unused.len ? ", " : "", NameStr(att->attname));
	}
	if (unused.len > 0)
		ereport(NOTICE, (n_missing == 1 ? errmsg("the %s has no column %s, so every row takes its default%s", b.what,
												 missing.data, value)
										: errmsg("the %s has no columns %s, so every row takes their defaults",
												 b.what, missing.data),
						 errdetail("The %s also returns columns gpurec does not use: %s.", b.what, unused.data),
						 errhint("Columns are matched by name; rename with AS.")));
	pfree(unused.data);
	pfree(missing.data);
}

} // namespace

namespace {

/*
 * Whether type is PostGIS's geometry or geography (gpurec links nothing of
 * PostGIS: a base type of that name that the extension postgis made);
 * which, in *geography.
 */
bool postgis_point_type(Oid type, bool *geography)
{
	HeapTuple tuple = SearchSysCache1(TYPEOID, ObjectIdGetDatum(type));
	if (!HeapTupleIsValid(tuple))
		return false;
	auto *form = reinterpret_cast<Form_pg_type>(GETSTRUCT(tuple));
	const char *name = NameStr(form->typname);
	bool named = form->typtype == TYPTYPE_BASE && (strcmp(name, "geometry") == 0 || strcmp(name, "geography") == 0);
	*geography = strcmp(name, "geography") == 0;
	ReleaseSysCache(tuple);
	if (!named)
		return false;
	Oid extension = getExtensionOfObject(TypeRelationId, type);
	const char *made_by = OidIsValid(extension) ? get_extension_name(extension) : nullptr;
	return made_by != nullptr && strcmp(made_by, "postgis") == 0;
}

/*
 * Where the query has neither x nor y of a point spec: its one PostGIS
 * column (geometry or geography, whatever its name) gives both.  False
 * when it has none; ERROR 42702 for two.
 */
bool bind_postgis_points(ColumnBinding &b, TupleDesc desc)
{
	int x = -1, y = -1;
	for (int c = 0; c < b.ncolumns; ++c)
		if (b.specs[c].point_axis == 0)
			x = c;
		else if (b.specs[c].point_axis == 1)
			y = c;
	if (x < 0 || y < 0 || b.attno[x] >= 0 || b.attno[y] >= 0)
		return false;
	int found = -1;
	bool geography = false;
	for (int a = 0; a < desc->natts; ++a)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);
		bool is_geography;
		if (att->attisdropped || !postgis_point_type(getBaseType(att->atttypid), &is_geography))
			continue;
		if (found >= 0)
			ereport(ERROR, (errcode(ERRCODE_AMBIGUOUS_COLUMN),
							errmsg("the %s returns more than one PostGIS column (\"%s\" and \"%s\")", b.what,
								   NameStr(TupleDescAttr(desc, found)->attname), NameStr(att->attname)),
							errhint("Return one point column, or x and y.")));
		found = a;
		geography = is_geography;
	}
	if (found < 0)
		return false;
	Oid send;
	bool varlena;
	getTypeBinaryOutputInfo(TupleDescAttr(desc, found)->atttypid, &send, &varlena);
	b.attno[x] = b.attno[y] = found;
	b.conversion[x] = Conversion::PointX;
	b.conversion[y] = Conversion::PointY;
	b.point_send = send;
	b.point_geography = geography;
	b.point_y = y;
	b.point_state = static_cast<ColumnBinding::PointState *>(palloc0(sizeof(ColumnBinding::PointState)));
	b.max_attno = Max(b.max_attno, found + 1);
	return true;
}

struct PointSourceArgs
{
	InputTable *table;
	const ColumnBinding *binding;
	const char *column;
};

void set_point_source(void *arg)
{
	auto *a = static_cast<PointSourceArgs *>(arg);
	PointSource &points = a->table->points();
	points.postgis = true;
	points.geography = a->binding->point_geography;
	const ColumnBinding::PointState &state = *a->binding->point_state;
	points.srid = state.known ? state.srid : (a->binding->point_geography ? 4326 : 0);
	points.srid_known = state.known;
	points.column = a->column;
}

} // namespace

bool binds_postgis_points(const ColumnBinding &binding)
{
	for (int c = 0; c < binding.ncolumns; ++c)
		if (binding.conversion[c] == Conversion::PointX)
			return true;
	return false;
}

void note_point_source(InputTable &table, const ColumnBinding &binding, TupleDesc desc)
{
	int x = -1;
	for (int c = 0; c < binding.ncolumns; ++c)
		if (binding.conversion[c] == Conversion::PointX)
			x = c;
	PointSourceArgs args{&table, &binding, NameStr(TupleDescAttr(desc, binding.attno[x])->attname)};
	cpp_callback_guard(set_point_source, &args);
}

void bind_columns(ColumnBinding *binding, const InputTable &table, TupleDesc desc, CallKeys &keys)
{
	const std::vector<ColumnSpec> &specs = table.specs();
	ColumnBinding &b = *binding;
	StringInfoData expected;

	b.specs = specs.data();
	b.what = table.what();
	b.ncolumns = static_cast<int>(specs.size());
	bind_key_filter(&b, table);
	Assert(b.ncolumns <= kMaxColumns);

	initStringInfo(&expected);
	for (int c = 0; c < b.ncolumns; ++c)
		appendStringInfo(&expected, "%s%s%s", c ? ", " : "", specs[c].name,
						 specs[c].optional ? " (optional)" : "");

	b.max_attno = 0;
	b.point_send = InvalidOid;
	for (int c = 0; c < b.ncolumns; ++c)
	{
		b.keys[c] = nullptr;
		b.held[c] = nullptr;
		b.attno[c] = -1;
	}
	/* neither x nor y, but a PostGIS column: it gives both (bound once the others are) */
	bool has_x_or_y = false, has_point_specs = false;
	for (int c = 0; c < b.ncolumns; ++c)
		if (specs[c].point_axis >= 0)
		{
			has_point_specs = true;
			for (int a = 0; a < desc->natts; ++a)
				has_x_or_y |= !TupleDescAttr(desc, a)->attisdropped &&
							  strcmp(NameStr(TupleDescAttr(desc, a)->attname), specs[c].name) == 0;
		}
	bool points_from_postgis = false;
	if (has_point_specs && !has_x_or_y)
		for (int a = 0; a < desc->natts && !points_from_postgis; ++a)
		{
			bool geography;
			points_from_postgis = !TupleDescAttr(desc, a)->attisdropped &&
								  postgis_point_type(getBaseType(TupleDescAttr(desc, a)->atttypid), &geography);
		}
	b.key_stride = 1;
	b.key_lane = 0;
	for (int c = 0; c < b.ncolumns; ++c)
	{
		const ColumnSpec &spec = specs[c];
		b.attno[c] = -1;
		for (int a = 0; a < desc->natts; ++a)
		{
			Form_pg_attribute att = TupleDescAttr(desc, a);
			if (att->attisdropped || strcmp(NameStr(att->attname), spec.name) != 0)
				continue;
			if (b.attno[c] >= 0)
				ereport(ERROR, (errcode(ERRCODE_AMBIGUOUS_COLUMN),
								errmsg("the %s returns more than one column named \"%s\"", b.what,
									   spec.name)));
			b.attno[c] = a;
		}
		if (b.attno[c] < 0 && spec.point_axis >= 0 && points_from_postgis)
			continue; /* bound below */
		if (b.attno[c] < 0)
		{
			if (!spec.optional)
				ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN),
								errmsg("the %s has no column \"%s\"", b.what, spec.name),
								errdetail("Expected columns: %s.", expected.data),
								errhint("Columns are matched by name; rename with AS.")));
			b.conversion[c] = Conversion::Absent;
			continue;
		}
		/* a domain is accepted wherever its base type is (its checks ran in the query) */
		Oid type = TupleDescAttr(desc, b.attno[c])->atttypid;
		b.conversion[c] = conversion_for(spec, getBaseType(type));
		if (b.conversion[c] == Conversion::Absent)
			ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
							errmsg("column \"%s\" of the %s has type %s", spec.name, b.what,
								   format_type_be(type)),
							errdetail("Column \"%s\" must be %s.", spec.name, kind_types(spec))));
		if (spec.holds_ids())
			b.keys[c] = key_dictionary_for(keys, spec.name, key_type_of(b.conversion[c]), b.what, type);
		b.max_attno = Max(b.max_attno, b.attno[c] + 1);
	}
	if (points_from_postgis)
		bind_postgis_points(b, desc);
	notice_unused_columns(b, desc);
}

void hold_late_keys(ColumnBinding *binding, InputTable &piece, int late_key_column)
{
	/* a filtered column's values must be codes: the filter compares them with its keys */
	if (late_key_column < 0 || late_key_column >= binding->ncolumns || !binding->keys[late_key_column] ||
		late_key_column == binding->key_column)
		return;
	KeyBytes *held = nullptr;
	try
	{
		held = &piece.hold_key_bytes(static_cast<size_t>(late_key_column));
	}
	catch (const std::bad_alloc &)
	{
	}
	if (held == nullptr)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
	binding->held[late_key_column] = held;
}

void bind_key_filter(ColumnBinding *binding, const InputTable &table)
{
	binding->key_filter = table.key_filter();
	binding->key_column = table.key_column();
}

bool in_own_codes(const ColumnBinding &binding, int c)
{
	return binding.specs[c].kind == ColumnKind::Id;
}

bool binds_coded_ids(const ColumnBinding &binding)
{
	for (int c = 0; c < binding.ncolumns; ++c)
		if (binding.keys[c])
			return true;
	return false;
}

void set_column_types(InputTable &table, const ColumnBinding &binding, const std::shared_ptr<CallKeys> &keys)
{
	for (int c = 0; c < binding.ncolumns; ++c)
		if (keys && binding.keys[c])
			table.code_ids_with(keys, static_cast<size_t>(c));
		else if (binding.keys[c]) /* a process's own table or piece: its codes are its dictionary's */
			table.order_ids_by(static_cast<size_t>(c), KeyOrder{binding.keys[c], in_own_codes(binding, c) ? 1 : binding.key_stride});
		else if (table.specs()[c].kind == ColumnKind::Number)
			table.number(c).set_type(number_type_for(binding.conversion[c]));
		else if (table.specs()[c].kind == ColumnKind::FloatArray)
			table.float_array(c).set_doubles(binding.conversion[c] == Conversion::Float8Array);
}

bool convert_row(const ColumnBinding &binding, const Datum *values, const bool *isnull,
				 RowValues *row)
{
	bool keep = true;
	for (int c = 0; c < binding.ncolumns && keep; ++c)
	{
		keep = convert_value(binding, values, isnull, c, *row);
		if (keep && c == binding.key_column)
			keep = binding.key_filter->contains(row->i[c]);
	}
	return keep;
}

void append_rows(InputTable &table, const RowValues *rows, int n, size_t skipped)
{
	/* column by column, each written a chunk at a time: a row's values are far apart in the batch */
	size_t count = static_cast<size_t>(n);
	for (size_t c = 0; c < table.specs().size(); ++c)
	{
		switch (table.specs()[c].kind)
		{
			case ColumnKind::Id:
				table.id(c).append(count, [rows, c](size_t k) { return rows[k].i[c]; });
				break;
			case ColumnKind::Int64:
				table.int64(c).append(count, [rows, c](int64_t *out, size_t first, size_t m) {
					for (size_t k = 0; k < m; ++k)
						out[k] = rows[first + k].i[c];
				});
				break;
			case ColumnKind::Label:
				table.label(c).append(count, [rows, c](uint8_t *out, size_t first, size_t m) {
					for (size_t k = 0; k < m; ++k)
						out[k] = static_cast<uint8_t>(rows[first + k].i[c]);
				});
				break;
			case ColumnKind::Float:
				table.floats(c).append(count, [rows, c](double *out, size_t first, size_t m) {
					for (size_t k = 0; k < m; ++k)
						out[k] = rows[first + k].d[c];
				});
				break;
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
						/* numeric_scale is a special value's marker (< 0), or the row's dscale */
						number.push_numerics(count, [rows, c](size_t k, int64_t *unscaled, int *scale, int *display) {
							*unscaled = rows[k].i[c];
							*scale = rows[k].numeric_key_scale[c];
							*display = rows[k].numeric_scale[c];
						});
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
	table.count_rows(count, skipped);
}

void release_rows(const ColumnBinding &binding, RowValues *rows, int n)
{
	for (int k = 0; k < n; ++k)
		for (int c = 0; c < binding.ncolumns; ++c)
			if (rows[k].array_copied[c])
				pfree(rows[k].array[c]);
}

void start_batch(RowBatch *batch, const ColumnBinding &binding)
{
	batch->capacity = RowBatch::kRows;
	for (int c = 0; c < binding.ncolumns; ++c)
		if (binding.specs[c].kind == ColumnKind::FloatArray && binding.conversion[c] != Conversion::Absent)
			batch->capacity = 1;
	batch->batched = 0;
	batch->skipped = 0;
	batch->rows_since_check = 0;
}

namespace {

struct AppendArgs
{
	RowBatch *batch;
	InputTable *table;
	const ColumnBinding *binding;
};

/*
 * Each uuid or text id the batch's rows staged (convert_value) made its
 * code, a column's ids at once; a value below 0 is a NULL's fallback, no
 * index, and stays.
 */
void code_staged_ids(const ColumnBinding &b, RowValues *rows, int n)
{
	std::vector<int64_t> ids;
	ids.reserve(static_cast<size_t>(n));
	for (int c = 0; c < b.ncolumns; ++c)
	{
		if (!b.keys[c] || b.held[c] || c == b.key_column)
			continue;
		ids.resize(static_cast<size_t>(n));
		size_t staged = 0;
		for (int k = 0; k < n; ++k)
			if (rows[k].i[c] >= 0)
				ids[staged++] = rows[k].i[c];
		ids.resize(staged);
		b.keys[c]->intern_staged(ids);
		/* an IdColumn holds the dictionary's own codes, an Int64Column its lane's (read_internal.hpp) */
		bool own = in_own_codes(b, c);
		int64_t stride = own ? 1 : b.key_stride, lane = own ? 0 : b.key_lane;
		size_t next = 0;
		for (int k = 0; k < n; ++k)
			if (rows[k].i[c] >= 0)
				rows[k].i[c] = ids[next++] * stride + lane;
	}
}

void append_batch(void *arg)
{
	auto *a = static_cast<AppendArgs *>(arg);
	code_staged_ids(*a->binding, a->batch->rows, a->batch->batched);
	append_rows(*a->table, a->batch->rows, a->batch->batched, a->batch->skipped);
}

} // namespace

void flush_batch(RowBatch *batch, InputTable &table, const ColumnBinding &binding)
{
	AppendArgs args{batch, &table, &binding};
	cpp_callback_guard(append_batch, &args);
	if (batch->capacity == 1) /* a batch of arrays: only they are ever copied by converting */
		release_rows(binding, batch->rows, batch->batched);
	batch->batched = 0;
	batch->skipped = 0;
}

void add_row(RowBatch *batch, InputTable &table, const ColumnBinding &binding, const Datum *values,
			 const bool *isnull, ExecContext &ctx)
{
	if (!convert_row(binding, values, isnull, &batch->rows[batch->batched]))
		++batch->skipped;
	else if (++batch->batched == batch->capacity)
		flush_batch(batch, table, binding);
	if (++batch->rows_since_check >= 16384)
	{
		ctx.progress.add(batch->rows_since_check);
		batch->rows_since_check = 0;
		postgres_interrupt_point(ctx, Phase::Read);
	}
}

} // namespace gpurec
