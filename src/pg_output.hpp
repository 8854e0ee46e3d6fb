/*
 * pg_output.hpp: the result rows of every set-returning SQL entry point, and
 * the call's output phase.
 */
#pragma once

#include "pg_boundary.hpp"

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "device.hpp"
#include "key_dictionary.hpp"

namespace gpurec {

/*
 * Materialises a set-returning function's rows into its tuplestore
 * (InitMaterializedSRF), checking for interrupts as it goes.  Given the
 * call's context, it is the call's output phase, whose interrupt points
 * (one as it starts, then one every 4096 rows) may carry gpurec.test_fault;
 * finish() adds that phase's
 * time and raises the gpurec.timing NOTICE for `function` when that setting
 * is on.
 */
class ResultWriter
{
  public:
	explicit ResultWriter(FunctionCallInfo fcinfo);
	ResultWriter(FunctionCallInfo fcinfo, ExecContext &ctx, const char *function);
	~ResultWriter();
	ResultWriter(const ResultWriter &) = delete;
	ResultWriter &operator=(const ResultWriter &) = delete;
	/*
	 * From now until finish(), what is palloc'd goes to a small memory
	 * context of the writer's own that put() empties every few rows: for
	 * writers whose rows hold values built for them (numeric Datums),
	 * which put() copies into the tuplestore and nothing needs after.
	 * Otherwise each row's values stay until the call ends (a million
	 * rows of optimize_carts: five numerics each, about 100 MB, every page
	 * of it new memory), where reusing one block keeps them in the core's
	 * cache.  Nothing palloc'd after this call may be kept across rows.
	 */
	void build_rows_in_own_memory();
	void put(const Datum *values, const bool *nulls);
	void finish();
	/* The SQL type of result column `column` (0-based), as the call resolved it (a polymorphic result). */
	Oid column_type(int column) const;
	/* The memory that lasts the call (not build_rows_in_own_memory's): for what the writing keeps across rows. */
	MemoryContext call_memory() const { return call_memory_; }

  private:
	FunctionCallInfo fcinfo_;
	MemoryContext call_memory_ = CurrentMemoryContext;
	uint64 rows_ = 0;
	ExecContext *ctx_ = nullptr;
	const char *function_ = nullptr;
	Stopwatch clock_;
	/* build_rows_in_own_memory's context, and the one it replaced as CurrentMemoryContext */
	MemoryContext row_memory_ = nullptr;
	MemoryContext outer_memory_ = nullptr;
	void leave_row_memory();
};

/* Rows of two bigint columns, pair_of(i) for each i below n (a pair of int64_t), written to out. */
template <typename PairOf> void put_bigint_pairs(ResultWriter &out, size_t n, PairOf pair_of)
{
	for (size_t i = 0; i < n; ++i)
	{
		auto [first, second] = pair_of(i);
		Datum values[2] = {Int64GetDatum(first), Int64GetDatum(second)};
		bool nulls[2] = {false, false};
		out.put(values, nulls);
	}
}

/*
 * The ids of one result column in its SQL type: integers as smallint,
 * integer or bigint (ERROR 22003 beyond its range), and the codes of uuid
 * and text ids (key_dictionary.hpp) as their values.  The column's type
 * comes from the call (the function's id_type or main_user argument): one
 * that is not of the ids' kind is ERROR 42804, at construction, before any
 * row.  A domain's constraints hold for every id returned as it (ERROR
 * 23514 as a cast to it says), and a domain over varchar(n) its length
 * (22001).  A Datum it gives lives until the next one it gives.
 */
class ResultIds
{
  public:
	ResultIds(const ResultWriter &out, int column, const ExecContext &ctx, const char *name);
	Datum operator()(int64_t id);

  private:
	Datum value_of(int64_t id);
	/* an id returned as a domain: its varchar's length and its constraints checked */
	Datum as_domain(Datum value);

	Oid declared_; /* the column's type: type_, or a domain over it */
	Oid type_;
	bool checks_domain_ = false;	  /* a domain with constraints */
	int32 varchar_typmod_ = -1;		  /* a domain over varchar(n): its typmod */
	void *domain_cache_ = nullptr;	  /* domain_check's, for the call, in the writer's call_memory */
	MemoryContext domain_memory_ = nullptr;
	KeyType key_type_ = KeyType::Integer;
	const KeyDictionary *dictionary_ = nullptr;
	std::vector<uint8_t> value_; /* the last uuid or text given */
	const char *name_;
};

/*
 * A NULL in an argument other than those that may be NULL gives no rows, as
 * STRICT would (for functions that are not STRICT: some argument may be
 * NULL, as the id_type of a typed form always is).  Returns whether the
 * call was so answered.
 */
bool answered_null_as_strict(FunctionCallInfo fcinfo, std::initializer_list<int> may_be_null);
/* Whether an argument other than those that may be NULL is NULL: for a function of one value, which then returns NULL. */
bool null_as_strict(FunctionCallInfo fcinfo, std::initializer_list<int> may_be_null);

class ShardRows;

/*
 * A part of gpurec_shards (ShardRows, partials.hpp) as the bytea a
 * partition's function returns; ERROR 54000 naming `function` where it is
 * larger than a bytea can be.
 */
Datum shard_rows_result(const ShardRows &part, const char *function);

/* A bytea result of `size` bytes, to be filled (palloc'd in the current memory context). */
bytea *new_bytea(size_t size);

/* `bytes` as a bytea result; ERROR 54000 saying `too_large` where they are larger than a bytea can be. */
Datum bytes_result(const std::vector<uint8_t> &bytes, const std::string &too_large);

/*
 * A gpurec_shards partition's part, part(), or where it raises an ordered
 * error (Error::order), the refusal that stands in its place
 * (refusal_bytes, partials.hpp), for the coordinator to raise the least
 * of.  part's ordered errors come from the engine, after its reads.
 */
Datum part_or_refusal(const std::function<Datum()> &part);

/*
 * The gpurec.timing NOTICE of one call of `function`, when that setting is
 * on: ResultWriter::finish() raises it, and a function that returns no rows
 * when it is done.
 */
void report_timing(const char *function, const ExecContext &ctx);

} // namespace gpurec
