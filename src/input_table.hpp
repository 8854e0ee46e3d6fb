/*
 * input_table.hpp: InputTable, the engine's columns that one inner query of
 * a gpurec function fills, declared by the function as specs (a name and a
 * kind per column): what the read layer (src/read/read.hpp) reads into,
 * and what the function then computes on.
 *
 * Each function takes its data as inner queries (text): any SELECT the
 * caller may run, joins and views included, feeds it.  The read layer runs
 * one read-only, with the caller's privileges, and streams its rows from
 * the executor straight into these columns: no tuplestore, no
 * row-at-a-time SPI fetch.  Columns are matched by name; order and extra
 * columns do not matter.  Nothing here talks to PostgreSQL: a parallel
 * worker's table travels to the calling backend in flat form
 * (serialize, append_parts), and a table can ask the read for partial
 * results instead of rows (combine_partials; partials.hpp).
 */
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "array_column.hpp"
#include "column_chunks.hpp"
#include "cpu_parallel.hpp"
#include "device.hpp"
#include "float_column.hpp"
#include "id_column.hpp"
#include "key_dictionary.hpp"
#include "number_column.hpp"

namespace gpurec {

/* An IdRewrite of the id column of index `column` (InputTable::append_parts). */
using ColumnIdRewrite = std::function<void(size_t column, size_t part, int64_t *ids, size_t n)>;

enum class ColumnKind
{
	Id,		   /* smallint, integer, bigint; dictionary-encoded (IdColumn) */
	Int64,	   /* smallint, integer, bigint */
	Number,	   /* any integer type, numeric, real, double precision; exact order keys */
	Float,	   /* any integer type, numeric, real, double precision; as double */
	Label,	   /* boolean, or an integer that must be 0 or 1 */
	FloatArray /* real[] or double precision[] */
};

/*
 * The fallback of a Number column that stands for +Infinity: it reads as
 * +Infinity in a numeric, real or double precision column, and as the
 * largest bigint in an integer one (so "never reached" either way).
 */
constexpr int64_t kFallbackInfinity = INT64_MAX;

struct ColumnSpec
{
	const char *name;
	ColumnKind kind;
	/* An optional column may be missing from the query: every row then takes `fallback`. */
	bool optional = false;
	/*
	 * A NULL skips the row; otherwise it takes `fallback` (Int64, Number: see
	 * kFallbackInfinity) or an empty array (FloatArray).
	 */
	bool null_skips_row = true;
	int64_t fallback = 0;
	/* A NULL is ERROR 22004 naming the column (before null_skips_row is looked at). */
	bool null_is_error = false;
	/*
	 * An Int64 column of ids (cart_id, store_id): like an Id column, it may
	 * be uuid or text, coded through the call's dictionary of its name
	 * (key_dictionary.hpp).
	 */
	bool ids = false;
	/*
	 * A Float column that is one coordinate of a point: 0 x, 1 y.  Where
	 * the query has neither x nor y, both come from its one PostGIS point
	 * column (geometry or geography, whatever its name): PointSource.
	 */
	int point_axis = -1;

	/* Whether the column holds ids, which may be uuid or text. */
	bool holds_ids() const { return kind == ColumnKind::Id || ids; }
};

/* Coordinate `axis` (0 x, 1 y) of a point: a Float column, or the query's PostGIS point column. */
inline ColumnSpec point_spec(const char *name, int axis)
{
	ColumnSpec spec{name, ColumnKind::Float};
	spec.point_axis = axis;
	return spec;
}

/* Where a table's points came from: x and y columns, or a PostGIS point column (set by the read). */
struct PointSource
{
	bool postgis = false;	/* a geometry or geography column */
	bool geography = false; /* geography: longitude and latitude, on the sphere */
	int32_t srid = 0;		/* the points' SRID (geography: 4326 unless given); one for every row */
	bool srid_known = false; /* some row was read */
	std::string column;		/* its name, for messages */
};

/* An Int64 column of ids: a NULL skips the row, or takes `fallback` where null_skips is false. */
inline ColumnSpec id_spec(const char *name, bool null_skips = true, int64_t fallback = 0)
{
	return ColumnSpec{name, ColumnKind::Int64, !null_skips, null_skips, fallback, false, true};
}

/*
 * A kind of partial result (partials.hpp): what a share of the rows
 * becomes in the process that read it, registered by its family under a
 * name that parallel workers look up in their own process.
 */
struct PartialKind;

/* What a table asks a parallel read's processes to send instead of their rows: none, or a kind and its parameter. */
struct PartialRequest
{
	const PartialKind *kind = nullptr; /* registered (register_partial_kind); null: rows, not partial results */
	int64_t parameter = 0;
};

using AnyColumn =
	std::variant<IdColumn, Int64Column, NumberColumn, FloatColumn, LabelColumn, FloatArrayColumn>;

/* The columns of one inner query, in the order of the specs it was made with. */
class InputTable
{
  public:
	InputTable(const char *what, std::vector<ColumnSpec> specs);
	InputTable(InputTable &&) = default;
	/* Its columns leave the call's keys (code_ids_with). */
	~InputTable();

	/*
	 * Column i holds uuid or text ids coded through keys' dictionary of
	 * its name: renumbered with it (CallKeys::settle).  While a table holds
	 * such a column, no chunk listener is called (its codes are not final
	 * before the read ends).  Before the first row.
	 */
	void code_ids_with(std::shared_ptr<CallKeys> keys, size_t i);
	bool codes_ids() const { return keys_ != nullptr; }
	/*
	 * Column i holds uuid or text ids as codes of a process's own
	 * dictionary, in order (a piece of a partial result, partials.hpp):
	 * key_order(i) then says how its values compare; null for other columns.
	 */
	void order_ids_by(size_t i, KeyOrder order);
	const KeyOrder *key_order(size_t i) const
	{
		return i < key_orders_.size() && key_orders_[i].dictionary ? &key_orders_[i] : nullptr;
	}
	/*
	 * Column i holds uuid or text ids as they came, each row the index of
	 * its value in key_bytes(i), which the read fills (a piece's late key
	 * column, PartialBound::late_key_column): made here on the first call,
	 * where it stays while the table lives; cleared with the rows
	 * (forget_rows).  key_bytes(i) is null for other columns.
	 */
	KeyBytes &hold_key_bytes(size_t i);
	const KeyBytes *key_bytes(size_t i) const { return i < key_bytes_.size() ? key_bytes_[i].get() : nullptr; }

	/* Where the points of a point_spec table came from (the read sets it). */
	PointSource &points() { return points_; }
	const PointSource &points() const { return points_; }

	/* What the query is called in messages: "offers query". */
	const char *what() const { return what_; }
	const std::vector<ColumnSpec> &specs() const { return specs_; }
	size_t rows() const { return rows_; }
	/* Rows dropped: a NULL in a column that skips on it, or a key the table's filter does not hold. */
	size_t skipped_rows() const { return skipped_rows_; }
	/*
	 * Reads only the rows whose column `column` (of kind Id or Int64) holds
	 * one of filter's keys: the others are dropped as they are read, before
	 * their later columns are converted, in parallel workers as in the
	 * calling backend.  Set before the read.
	 */
	void keep_rows_with_keys(size_t column, std::shared_ptr<const KeyFilter> filter)
	{
		key_column_ = static_cast<int>(column);
		key_filter_ = std::move(filter);
	}
	const KeyFilter *key_filter() const { return key_filter_.get(); }
	int key_column() const { return key_filter_ ? key_column_ : -1; }

	/*
	 * For a function whose result follows the query's row order (candidates
	 * come back in input order): read in the calling backend, in the order
	 * the query returns them, never by parallel workers.
	 */
	void keep_row_order() { keeps_row_order_ = true; }
	bool keeps_row_order() const { return keeps_row_order_; }

	/*
	 * For a function that, under gpurec.device = auto, computes on the GPU
	 * once this input holds `rows` rows or more: when the planner expects
	 * as many, CUDA starts while the input is read (read_inner_query), as
	 * it does for every input under gpurec.device = gpu.  Infinite (the
	 * default): never under auto.
	 */
	void set_gpu_from_rows(double rows) { gpu_from_rows_ = rows; }
	double gpu_from_rows() const { return gpu_from_rows_; }

	/*
	 * For a function whose result combines from partial results
	 * (partials.hpp): when parallel workers read the query by a direct scan,
	 * every process, the calling backend included, computes the partial
	 * result of its own rows and only that arrives here, in partials(); the
	 * table then holds no rows.  When the query is read any other way, the
	 * table holds every row as usual and partials() is empty.  Set before
	 * the read.
	 */
	void combine_partials(PartialRequest request) { partial_request_ = request; }
	const PartialRequest &partial_request() const { return partial_request_; }
	struct Partial
	{
		const uint8_t *data;
		size_t size;
	};
	const std::vector<Partial> &partials() const { return partials_; }
	/* A partial result the table keeps. */
	void add_partial(std::vector<uint8_t> bytes)
	{
		kept_partials_.push_back(std::move(bytes));
		partials_.push_back(Partial{kept_partials_.back().data(), kept_partials_.back().size()});
	}
	/* A partial result read where it lies: in memory the table keeps alive (keep_alive). */
	void add_partial_in_place(const uint8_t *data, size_t size) { partials_.push_back(Partial{data, size}); }

	IdColumn &id(size_t i) { return std::get<IdColumn>(columns_[i]); }
	Int64Column &int64(size_t i) { return std::get<Int64Column>(columns_[i]); }
	NumberColumn &number(size_t i) { return std::get<NumberColumn>(columns_[i]); }
	FloatColumn &floats(size_t i) { return std::get<FloatColumn>(columns_[i]); }
	LabelColumn &label(size_t i) { return std::get<LabelColumn>(columns_[i]); }
	FloatArrayColumn &float_array(size_t i) { return std::get<FloatArrayColumn>(columns_[i]); }

	/*
	 * Called while the query is still running, each time all columns hold
	 * another full chunk (ChunkedColumn::kChunkRows rows): lets the GPU path
	 * copy data while the rest is read.
	 */
	void on_chunk_complete(std::function<void()> listener) { chunk_listener_ = std::move(listener); }

	/* Used while rows are appended (append_rows in src/read/column_types.cpp). */
	AnyColumn &column(size_t i) { return columns_[i]; }
	void count_rows(size_t appended, size_t skipped)
	{
		rows_ += appended;
		skipped_rows_ += skipped;
		size_t chunks = rows_ / ChunkedColumn<int32_t>::kChunkRows;
		if (chunks > notified_chunks_)
		{
			notified_chunks_ = chunks;
			if (chunk_listener_ && !keys_)
				chunk_listener_();
		}
	}

	/* Where every column's new chunks come from; set before the first row. */
	void use_chunk_source(ChunkSource &source);
	/*
	 * Drops every row, each column as its forget_rows() says: chunks kept
	 * for the rows to come, id dictionaries and their counts kept (a piece
	 * of a parallel read, partials.hpp).  No array column.
	 */
	void forget_rows();

	/*
	 * For a read: every id column takes ids as codes (IdColumn::take_ids_as_codes),
	 * unless the table keeps row order (its codes then number the ids as the
	 * rows first bring them) or has a chunk listener (which reads the codes
	 * of each chunk as it fills).  Before the first row.
	 */
	void take_ids_as_codes();
	/* After the read: every id column a dictionary again (IdColumn::settle), its codes rewritten through run. */
	void settle_ids(const PieceRunner &run = run_serially);
	/* Before a worker's columns are sent: IdColumn::settle_if_sparse of every id column. */
	void settle_sparse_ids();

	/*
	 * The flat form of the columns (byte_stream.hpp), and appending one:
	 * how a parallel worker's columns join the calling backend's table.
	 * The result has the rows of both.  Where the worker's chunks come by
	 * reference they join the table as they are, not copied, so rows are
	 * not in reading order (ChunkedColumn::append_column says where each
	 * goes; every column places them alike); in a table with an array
	 * column, only the array's elements stay where they are
	 * (FloatArrayColumn::append_serialized), and the other columns' rows are
	 * copied, in order.  append_parts appends several parts, each reader at
	 * its own, as append_serialized would one after the other, but an id
	 * column's dictionaries are merged at once (IdColumn::append_parts).
	 */
	void serialize(ByteWriter &out) const;
	void append_serialized(ByteReader &in, const PieceRunner &run = run_serially);
	/* rewrite, where given, rewrites the dictionary ids of each id column's parts before they join its own. */
	void append_parts(std::vector<ByteReader> &parts, const PieceRunner &run = run_serially,
					  const ColumnIdRewrite &rewrite = nullptr);
	/*
	 * Keeps `memory` (what borrowed chunks live in: a parallel read's shared
	 * memory) until the table is gone; its deleter gives it back.
	 */
	void keep_alive(std::shared_ptr<void> memory) { kept_alive_.push_back(std::move(memory)); }
	/* A borrowed chunk's memory (`bytes` at `chunk`), in what keep_alive keeps: release_rows_in_background gives its pages back. */
	void note_borrowed(void *chunk, size_t bytes) { borrowed_.emplace_back(chunk, bytes); }

  private:
	friend void release_while_call_goes_on(InputTable &&table, ExecContext &ctx);

	/*
	 * Gives the rows' memory back on one of the CPU's threads: the columns
	 * are freed there, and the pages of the chunks borrowed from a
	 * parallel read's shared memory are handed back to the kernel
	 * (MADV_REMOVE), which is most of what unmapping that memory costs
	 * later.  The table then holds no rows; it waits for that work before
	 * the memory it keeps alive is unmapped.  Private: a table that went
	 * with the function that read it would wait for this work before the
	 * result is written; release_while_call_goes_on keeps it with the call.
	 */
	void release_rows_in_background();
	void add_columns();

	/* first, so that it outlives the columns that borrow from it */
	std::vector<std::shared_ptr<void>> kept_alive_;
	std::vector<std::pair<void *, size_t>> borrowed_;
	/* after kept_alive_, so that it is waited for before that memory goes */
	std::unique_ptr<BackgroundWork> releasing_;
	std::shared_ptr<const KeyFilter> key_filter_;
	int key_column_ = -1;
	const char *what_;
	std::vector<ColumnSpec> specs_;
	std::vector<AnyColumn> columns_;
	size_t rows_ = 0;
	size_t skipped_rows_ = 0;
	size_t notified_chunks_ = 0;
	bool keeps_row_order_ = false;
	PartialRequest partial_request_;
	double gpu_from_rows_ = std::numeric_limits<double>::infinity();
	std::vector<std::vector<uint8_t>> kept_partials_; /* their buffers stay put as the vector grows */
	std::vector<Partial> partials_;
	std::function<void()> chunk_listener_;
	PointSource points_;
	/* the call's keys, where a column is coded through them (code_ids_with) */
	std::shared_ptr<CallKeys> keys_;
	std::vector<KeyOrder> key_orders_; /* per column (order_ids_by); a null dictionary for the others */
	std::vector<std::unique_ptr<KeyBytes>> key_bytes_; /* per column (hold_key_bytes); null for the others */
};

/*
 * For a function done with its input before it writes its result: the
 * rows' memory given back on a CPU thread (release_rows_in_background)
 * while the call goes on, the table kept by ctx until the call ends, which
 * waits for that work there.  Freeing 20M points' columns and their
 * workers' shared memory took the H100's user_similarity 120-165 ms; a
 * table that went at once, at the end of the function that read it,
 * waited for it before the first row was written.
 */
void release_while_call_goes_on(InputTable &&table, ExecContext &ctx);

} // namespace gpurec
