/*
 * partials.hpp: results that combine from partial results, one per share of
 * the input rows, and the registry of their kinds.  When parallel workers
 * read an inner query of such a function, each process computes the
 * partial result of the rows it read, and only those partial results
 * travel to the calling backend, which combines them: the rows themselves
 * never leave the process that read them (src/read/read_internal.hpp).
 *
 * A worker is another process, which loaded gpurec.so afresh: a kind
 * travels to it by name, and it finds the kind's code in its own registry.
 * Each family registers its kinds in its own translation unit, as a static
 * registration that runs as the library loads, in every process, before
 * any read (offers_input.cpp: cheapest_offers).  The read layer includes
 * no family's header.
 */
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "byte_stream.hpp"
#include "input_table.hpp"
#include "number_column.hpp"

namespace gpurec {

/*
 * How large a partial result can grow: at most rows_per_key rows for each
 * distinct value of the table's column key_column (cheapest_offers: k for
 * each product).  A partial result pays only where that is far fewer rows
 * than the process read (the read asks the table's statistics).
 */
struct PartialBound
{
	int key_column;
	int64_t rows_per_key;
};

/*
 * A partial result built as the rows come, a piece at a time: what each
 * kind keeps between pieces (cheapest_offers: RunningCheapestOffers).
 */
class RunningPartial
{
  public:
	virtual ~RunningPartial() = default;
	/* The piece's rows; its id columns keep their dictionaries from piece to piece (InputTable::forget_rows). */
	virtual void absorb(InputTable &piece) = 0;
	/* The partial result of every row absorbed, in flat form; the piece is the last one, emptied. */
	virtual std::vector<uint8_t> finish(InputTable &piece) = 0;
};

/*
 * A kind of partial result, as its family registers it: a name that
 * travels to other processes (letters, digits and '_' only, at most 63), its bound,
 * and the running partial result that one process builds, each for the
 * request's parameter.  A static object: requests point at it.
 */
struct PartialKind
{
	const char *name;
	PartialBound (*bound)(int64_t parameter);
	std::unique_ptr<RunningPartial> (*start)(int64_t parameter);
	/*
	 * A column whose uuid or text ids the running partial result codes
	 * itself, for the few rows it keeps (cheapest_offers: the stores of
	 * the offers that enter a product's k cheapest): a piece holds them as
	 * they came (InputTable::key_bytes), so that the read looks up no
	 * dictionary for the rows it drops.  -1: none.  Integer ids stay
	 * integers.
	 */
	int late_key_column = -1;
};

/*
 * Registers `kind` in this process, for find_partial_kind; false (and
 * nothing registered) where its name is taken or not one a request can
 * carry.  For a static registration: never throws.
 */
bool register_partial_kind(const PartialKind &kind) noexcept;

/* The kind registered under `name` in this process; null when none is. */
const PartialKind *find_partial_kind(const char *name);

/*
 * One process's partial result, built while it reads: its rows go into a
 * piece (an InputTable) of kPieceRows rows, which the running partial
 * result absorbs once full; the piece then forgets its rows but keeps its
 * chunks and its id dictionaries, so that a code means the same id in
 * every piece.  A piece is small enough to stay in the core's own cache
 * while it fills and is absorbed, and what the partial result keeps
 * between pieces is what it will send (for cheapest_offers, each
 * product's k cheapest so far): at the end of the read little is left to
 * do.  One thread, on the CPU: a process of a parallel read is one of as
 * many as there are cores, and never starts the GPU.
 */
class PartialBuilder
{
  public:
	static constexpr size_t kPieceRows = size_t(1) << 13;

	/*
	 * For a request of a registered kind.  The piece is made as `what` and
	 * `specs` say, and then handed to `prepare` (the column types the
	 * query's binding gives).
	 */
	PartialBuilder(PartialRequest request, const char *what, std::vector<ColumnSpec> specs,
				   const std::function<void(InputTable &)> &prepare);
	~PartialBuilder();

	/* Where the next rows go. */
	InputTable &piece() { return *piece_; }
	/* The kind's late key column (PartialKind::late_key_column), which the read may fill as key_bytes. */
	int late_key_column() const { return late_key_column_; }
	/* Absorbs the piece when it holds kPieceRows rows or more (its rows all appended). */
	void absorb_if_full();
	/* The partial result of every row given. */
	std::vector<uint8_t> finish();

  private:
	void absorb_piece();

	std::unique_ptr<InputTable> piece_;
	std::unique_ptr<RunningPartial> running_;
	int late_key_column_;
};

/*
 * A gpurec_shards partition's refusal.  Each partition checks only its own
 * rows, and PL/Proxy raises whichever partition's error arrives first; so
 * where a partition's computation raises an ordered error (Error::order:
 * a fault of the data, of which one server names the least), the
 * partition sends the error in place of its part, and the coordinator's
 * merge raises the least of the partitions' refusals before it reads any
 * part: the error one server holding every row raises.  A refusal is a
 * part of its own format, whatever the kind it stands in for.
 */
std::vector<uint8_t> refusal_bytes(const Error &error);
/* Whether bytes (a partition's whole part) are a refusal. */
bool is_refusal(const uint8_t *data, size_t size);
/* The error of a refusal (is_refusal), its order kept; ERROR 22P03 for one that does not read (`part` names it). */
Error refused_error(const uint8_t *data, size_t size, size_t part);
/*
 * A merge's first step: where any of `parts` (each a partition's whole
 * part, with .data and .size, in partition order) is a refusal, the least
 * of them by order is raised (the first of equal ones).
 */
template <typename Parts> void raise_least_refusal(const Parts &parts)
{
	std::unique_ptr<Error> least;
	size_t p = 0;
	for (const auto &part : parts)
	{
		if (is_refusal(part.data, part.size))
		{
			Error refused = refused_error(part.data, part.size, p);
			if (!least || refused.order() < least->order())
				least = std::make_unique<Error>(std::move(refused));
		}
		++p;
	}
	if (least)
		throw *least;
}

/*
 * A part of gpurec_shards: rows that a partition sends the coordinator, or
 * the coordinator a partition, as one bytea, in gpurec's binary form: rows
 * of a named kind ("geo_points", "user_similarity", ...), each `columns`
 * 8-byte values (an int64, or a float8 with every bit: -0, NaN and
 * infinities included).  A kind may name some of its columns number
 * columns: each value of such a column is the place of an exact number in
 * that column's numbers(), or -1 for NULL, and those numbers travel with
 * the part in their own type (a price: numeric with its scales, an integer,
 * or a float with every bit; NumberColumn), their type too where there are
 * none.  Parts concatenate: the bytes of several parts one after the other
 * read as one part of all their rows (append), so that the coordinator can
 * pass on the partitions' parts without reading them.  Bytes that are not
 * a part of the kind (another version of gpurec on one side, truncated or
 * foreign bytes): ERROR 22P03.
 */
class ShardRows
{
  public:
	ShardRows(const char *kind, size_t columns, std::vector<size_t> number_columns = {});

	const char *kind() const { return kind_; }
	size_t columns() const { return columns_; }
	size_t rows() const { return words_.size() / columns_; }

	/* The next value of the row being written; a row is complete after `columns` of them. */
	void put(int64_t value) { words_.push_back(static_cast<uint64_t>(value)); }
	void put(double value)
	{
		uint64_t word;
		std::memcpy(&word, &value, sizeof word);
		words_.push_back(word);
	}
	/*
	 * The next value, of a number column: row `row` of `from`.  The first
	 * number of the column gives it its type (set_number_type, else
	 * integers); every later one is of that type.
	 */
	void put_number(const NumberColumn &from, size_t row);
	/* The next value, of a number column: NULL. */
	void put_no_number() { put(int64_t(-1)); }
	/* The type of number column `column`'s numbers, for a part that may have none. */
	void set_number_type(size_t column, NumberType type) { numbers(column).set_type(type); }
	int64_t int64(size_t row, size_t column) const { return static_cast<int64_t>(words_[row * columns_ + column]); }
	double float8(size_t row, size_t column) const
	{
		double value;
		std::memcpy(&value, &words_[row * columns_ + column], sizeof value);
		return value;
	}
	/* The numbers of number column `column`, which int64(row, column) places (-1: NULL). */
	const NumberColumn &numbers(size_t column) const { return numbers_[number_index(column)]; }
	NumberColumn &numbers(size_t column) { return numbers_[number_index(column)]; }

	/* The rows reordered by the int64 values of `columns`, the first deciding first; equal rows keep their order. */
	void sort_rows(const std::vector<size_t> &columns);

	/* The rows as one part. */
	std::vector<uint8_t> bytes() const;
	/* Appends the rows of `data` (one part of this kind, or several concatenated); `part` names it in errors. */
	void append(const uint8_t *data, size_t size, size_t part);

  private:
	size_t number_index(size_t column) const;
	/* Appends the numbers of a part whose rows begin at first_row, moving their places past the numbers before. */
	void append_numbers(ByteReader &reader, size_t first_row, size_t part);

	const char *kind_;
	size_t columns_;
	std::vector<size_t> number_columns_;
	std::vector<uint64_t> words_;
	/* one per number column, in the order of number_columns_ */
	std::vector<NumberColumn> numbers_;
};

} // namespace gpurec
