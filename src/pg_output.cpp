/*
 * pg_output.cpp: ResultWriter (see pg_output.hpp): rows put into the
 * set-returning function's tuplestore, and the gpurec.timing NOTICE that
 * ends a call's output phase.
 */
#include "pg_output.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/tuplestore.h"
#include "utils/typcache.h"
#include "utils/uuid.h"
}

#include <algorithm>
#include <cstring>

#include "partials.hpp"
#include "pg_settings.hpp"

namespace gpurec {

void report_timing(const char *function, const ExecContext &ctx)
{
	if (!settings_timing())
		return;
	const PhaseTimes &t = ctx.times;
	const char *device = ctx.used_gpu ? "gpu" : "cpu";
	char start[192] = "";
	size_t used = 0;
	/* a start that found no GPU (by now asked, as a call that weighed the GPU asks) is no news to the reader */
	if (ctx.gpu_start_began_in_read && !gpu::found_unusable())
		used = snprintf(start, sizeof start, "  CUDA's start began beside the read.");
	if (ctx.gpu_start_wait_ms > 0)
		snprintf(start + used, sizeof start - used,
				 "  Waited %.3f ms for CUDA's start (%.3f ms in all) before the transfer.", ctx.gpu_start_wait_ms,
				 ctx.gpu_start_ms);
	char service[256] = "";
	if (ctx.service_device >= 0)
	{
		int n = ctx.service_devices > 1
					? snprintf(service, sizeof service, "  GPU service: %d devices", ctx.service_devices)
					: snprintf(service, sizeof service, "  GPU service: device %d", ctx.service_device);
		snprintf(service + n, sizeof service - n,
				 ", input written in %.3f ms (%.1f MB; %.1f MB read in place), answered in %.3f ms (queued %.3f ms).",
				 ctx.service_staged_ms, ctx.service_written_bytes / 1e6, ctx.service_in_place_bytes / 1e6,
				 ctx.service_answered_ms, ctx.service_queued_ms);
	}
	std::string why = ctx.device_choice.empty() ? "" : "  Device: " + ctx.device_choice + ".";
	/* the internal functions (gpurec_shards' parts and merges) are named "_..." in their own schema */
	const char *schema = function[0] == '_' ? "gpurec_internal" : "gpurec";
	pg_call([&] {
		ereport(NOTICE, (errmsg("%s.%s: device %s, read %.3f ms, transfer %.3f ms, compute "
								"%.3f ms, output %.3f ms",
								schema, function, device, t.read_ms, t.transfer_ms, t.compute_ms,
								t.output_ms),
						 errdetail("Read: %s.  CPU worker threads: %zu.%s%s%s", ctx.read_notes.c_str(),
								   ctx.cpu_threads_used, why.c_str(), start, service)));
	});
}

bytea *new_bytea(size_t size)
{
	return pg_call([size] {
		auto *b = static_cast<bytea *>(palloc(VARHDRSZ + size));
		SET_VARSIZE(b, VARHDRSZ + size);
		return b;
	});
}

ResultWriter::ResultWriter(FunctionCallInfo fcinfo) : fcinfo_(fcinfo)
{
	/*
	 * The row type the executor expects, where it gives one: looked up
	 * from the function's catalog row instead, it leaves that row's
	 * arrays in the query's memory at every call, which a call per row of
	 * a LATERAL join adds up until the statement ends.
	 */
	auto *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
	bits32 flags = rsinfo != nullptr && IsA(rsinfo, ReturnSetInfo) && rsinfo->expectedDesc != nullptr
					   ? MAT_SRF_USE_EXPECTED_DESC
					   : 0;
	pg_call([fcinfo, flags] { InitMaterializedSRF(fcinfo, flags); });
}

ResultWriter::ResultWriter(FunctionCallInfo fcinfo, ExecContext &ctx, const char *function)
	: ResultWriter(fcinfo)
{
	ctx_ = &ctx;
	function_ = function;
	clock_ = Stopwatch();
	ctx.progress.begin(ProgressPhase::Writing, "rows");
	/* the output phase's first interrupt point comes before any row, however few there are */
	ExecContext *call = ctx_;
	pg_call([call] { postgres_interrupt_point(*call, Phase::Output); });
}

ResultWriter::~ResultWriter()
{
	leave_row_memory(); /* on an error's way out too */
}

void ResultWriter::build_rows_in_own_memory()
{
	if (row_memory_)
		return;
	row_memory_ = pg_call([] {
		return AllocSetContextCreate(CurrentMemoryContext, "gpurec result rows", ALLOCSET_DEFAULT_SIZES);
	});
	outer_memory_ = MemoryContextSwitchTo(row_memory_);
}

/*
 * Back to the memory of before build_rows_in_own_memory.  The row memory
 * itself goes with its parent, the call's memory, which PostgreSQL resets
 * once the function returns (as it did every row's values before).
 */
void ResultWriter::leave_row_memory()
{
	if (row_memory_)
		MemoryContextSwitchTo(outer_memory_);
	row_memory_ = nullptr;
}

Datum part_or_refusal(const std::function<Datum()> &part)
{
	try
	{
		return part();
	}
	catch (const Error &e)
	{
		if (e.order().empty())
			throw;
		return bytes_result(refusal_bytes(e), "a refusal is larger than 1 GB");
	}
}

void ResultWriter::finish()
{
	leave_row_memory();
	if (!ctx_)
		return;
	ctx_->times.output_ms += clock_.elapsed_ms();
	report_timing(function_, *ctx_);
}

void ResultWriter::put(const Datum *values, const bool *nulls)
{
	FunctionCallInfo fcinfo = fcinfo_;
	ExecContext *call = ctx_;
	bool check = (++rows_ & 4095) == 0;
	if (check && call)
		call->progress.reach(rows_);
	/* every 32 rows: their values fit the context's first block, used again and again */
	MemoryContext emptied = (rows_ & 31) == 0 ? row_memory_ : nullptr;
	pg_call([fcinfo, call, check, values, nulls, emptied] {
		ReturnSetInfo *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, const_cast<Datum *>(values),
							 const_cast<bool *>(nulls));
		if (emptied)
			MemoryContextReset(emptied);
		if (check)
		{
			if (call)
				postgres_interrupt_point(*call, Phase::Output);
			else
				CHECK_FOR_INTERRUPTS();
		}
	});
}

bool null_as_strict(FunctionCallInfo fcinfo, std::initializer_list<int> may_be_null)
{
	for (int i = 0; i < PG_NARGS(); ++i)
		if (PG_ARGISNULL(i) && std::find(may_be_null.begin(), may_be_null.end(), i) == may_be_null.end())
			return true;
	return false;
}

bool answered_null_as_strict(FunctionCallInfo fcinfo, std::initializer_list<int> may_be_null)
{
	if (!null_as_strict(fcinfo, may_be_null))
		return false;
	ResultWriter out(fcinfo);
	return true;
}

Oid ResultWriter::column_type(int column) const
{
	FunctionCallInfo fcinfo = fcinfo_;
	return pg_call([fcinfo, column] {
		ReturnSetInfo *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
		return TupleDescAttr(rsinfo->setDesc, column)->atttypid;
	});
}

namespace {

/* The key type a result column of (base) type `type` holds; false for none. */
bool key_type_of_result(Oid type, KeyType *key_type)
{
	switch (type)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
			*key_type = KeyType::Integer;
			return true;
		case UUIDOID:
			*key_type = KeyType::Uuid;
			return true;
		case TEXTOID:
		case VARCHAROID:
			*key_type = KeyType::Text;
			return true;
		default:
			return false;
	}
}

/*
 * The hint of ERROR 42804 where a result column's type (`returned`, where
 * `known`) is not of its ids' kind: the typed form's id_type where the ids
 * are uuid or text; where they are integers (or the other kind of key), a
 * cast in the query, as another id_type would not fit the call's other ids.
 */
std::string ids_type_hint(KeyType ids, bool known, KeyType returned, const char *name)
{
	if (!known)
		return "Pass an id_type of smallint, integer, bigint, uuid, text or varchar, or a domain over one.";
	if (returned == KeyType::Integer)
		return std::string("Call the function's typed form, with NULL::") + (ids == KeyType::Uuid ? "uuid" : "text") +
			   " as its id_type, the last of all its arguments.";
	return std::string("Cast \"") + name + "\" to " + (returned == KeyType::Uuid ? "uuid" : "text") +
		   " in the query: every id the call returns is of id_type's type.";
}

} // namespace

ResultIds::ResultIds(const ResultWriter &out, int column, const ExecContext &ctx, const char *name) : name_(name)
{
	Oid declared = out.column_type(column);
	declared_ = declared;
	int32 typmod = -1;
	type_ = pg_call([declared, &typmod] { return getBaseTypeAndTypmod(declared, &typmod); });
	if (type_ != declared)
	{
		checks_domain_ = pg_call([declared] { return DomainHasConstraints(declared); });
		if (type_ == VARCHAROID && typmod >= static_cast<int32>(VARHDRSZ))
			varchar_typmod_ = typmod;
		domain_memory_ = out.call_memory();
	}
	const CallKeys::Key *key = ctx.keys ? ctx.keys->find(name) : nullptr;
	KeyType ids = key ? key->type : KeyType::Integer;
	KeyType result = KeyType::Integer;
	bool known = key_type_of_result(type_, &result);
	if (!known || result != ids)
	{
		std::string type_name = pg_call([declared] { return std::string(format_type_be(declared)); });
		throw Error(sqlstate::datatype_mismatch,
					std::string("the call's \"") + name + "\" ids are " + key_type_name(ids) +
						", but it returns them as " + type_name,
					"The ids a function returns take the type of its id_type argument, bigint when it is not "
					"given.",
					ids_type_hint(ids, known, result, name));
	}
	key_type_ = ids;
	if (key)
		dictionary_ = key->dictionary.get();
}

Datum ResultIds::operator()(int64_t id)
{
	Datum value = value_of(id);
	return checks_domain_ || varchar_typmod_ >= 0 ? as_domain(value) : value;
}

Datum ResultIds::as_domain(Datum value)
{
	Oid domain = declared_;
	int32 typmod = varchar_typmod_;
	bool constraints = checks_domain_;
	void **cache = &domain_cache_;
	MemoryContext memory = domain_memory_;
	/*
	 * what a cast to the domain does, with its errors: varchar's length
	 * (22001; trailing spaces past it cut, as the standard says), then the
	 * constraints
	 */
	return pg_call([value, domain, typmod, constraints, cache, memory] {
		Datum cast = typmod >= 0 ? DirectFunctionCall3(varchar, value, Int32GetDatum(typmod), BoolGetDatum(false))
								 : value;
		if (constraints)
			domain_check(cast, false, domain, cache, memory);
		return cast;
	});
}

Datum ResultIds::value_of(int64_t id)
{
	switch (key_type_)
	{
		case KeyType::Integer:
			if (type_ == INT8OID)
				return Int64GetDatum(id);
			if ((type_ == INT4OID && (id < INT32_MIN || id > INT32_MAX)) ||
				(type_ == INT2OID && (id < INT16_MIN || id > INT16_MAX)))
				throw Error(sqlstate::numeric_value_out_of_range,
							std::string("\"") + name_ + "\" " + std::to_string(id) + " is out of range for " +
								(type_ == INT4OID ? "integer" : "smallint"),
							{}, "Pass a wider id_type (NULL::bigint).");
			return type_ == INT4OID ? Int32GetDatum(static_cast<int32>(id)) : Int16GetDatum(static_cast<int16>(id));
		case KeyType::Uuid:
			value_.assign(dictionary_->value(id), dictionary_->value(id) + UUID_LEN);
			return PointerGetDatum(value_.data());
		case KeyType::Text:
		{
			size_t size = dictionary_->value_size(id);
			value_.resize(VARHDRSZ + size);
			SET_VARSIZE(value_.data(), VARHDRSZ + size);
			std::memcpy(value_.data() + VARHDRSZ, dictionary_->value(id), size);
			return PointerGetDatum(value_.data());
		}
	}
	return (Datum) 0;
}

Datum bytes_result(const std::vector<uint8_t> &bytes, const std::string &too_large)
{
	if (bytes.size() > MaxAllocSize - VARHDRSZ)
		throw Error(sqlstate::program_limit_exceeded, too_large);
	bytea *out = new_bytea(bytes.size());
	memcpy(VARDATA(out), bytes.data(), bytes.size());
	PG_RETURN_BYTEA_P(out);
}

Datum shard_rows_result(const ShardRows &part, const char *function)
{
	return bytes_result(part.bytes(), std::string("a partition's answer to ") + function + " is larger than 1 GB");
}

} // namespace gpurec
