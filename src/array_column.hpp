/*
 * array_column.hpp: FloatArrayColumn, an array of scores per row (real[] or
 * double precision[]), its elements flattened into chunks; its flat form,
 * appended without copying the elements that came by reference.
 */
#pragma once

#include <cstdint>
#include <vector>

#include "byte_stream.hpp"
#include "column_chunks.hpp"

namespace gpurec {

/*
 * One array of scores per row, flattened: row r's elements are
 * [row_begin(r), row_end(r)).  Elements keep their width, 4-byte floats for
 * real[] and 8-byte doubles for double precision[] (set_doubles() before the
 * first row), so that reading copies each array once, in bulk, and a GPU
 * gets half the bytes of real[] scores.  A NULL element reads as 0 and
 * valid() false; the validity bytes exist only from the first NULL on.
 */
class FloatArrayColumn
{
  public:

	void set_doubles(bool doubles);
	/*
	 * Appends a row of n elements.  data holds the elements that are there,
	 * packed, as floats or doubles; present is a bitmap (bit e % 8 of byte
	 * e / 8 set when element e is there, as PostgreSQL's arrays keep it), or
	 * null when every element is.
	 */
	void append_row(const void *data, size_t n, const uint8_t *present);

	size_t size() const { return begins_.size(); }
	/* The elements' index space: past every row's last element, gaps included (append_serialized). */
	size_t elements() const { return doubles_ ? doubles_column_.size() : floats_.size(); }
	/* Row r's elements: [row_begin(r), row_end(r)), together; the next row's need not follow. */
	int64_t row_begin(size_t r) const { return begins_[r]; }
	int64_t row_end(size_t r) const { return ends_[r]; }
	const std::vector<int64_t> &row_begins() const { return begins_; }

	bool doubles() const { return doubles_; }
	const ChunkedColumn<float> &floats() const { return floats_; }
	const ChunkedColumn<double> &double_values() const { return doubles_column_; }
	double value(size_t e) const { return doubles_ ? doubles_column_[e] : floats_[e]; }

	bool has_nulls() const { return !valid_.empty(); }
	/* 1 where an element is there, 0 where NULL; empty while no element was NULL */
	const ChunkedColumn<uint8_t> &valid() const { return valid_; }
	bool valid(size_t e) const { return valid_.empty() || valid_[e] != 0; }

	void use_chunk_source(ChunkSource &source)
	{
		floats_.use_chunk_source(source);
		doubles_column_.use_chunk_source(source);
		valid_.use_chunk_source(source);
	}

	/* The flat form: element width, each row's first and end element, elements, validity when any is NULL. */
	void serialize(ByteWriter &out) const;
	/*
	 * Appends the rows of a column of the same width that serialize() wrote,
	 * in order.  Its elements are not copied where their chunks came by
	 * reference: they join this column's as they are, after a gap
	 * (ChunkedColumn::append_serialized_in_place), and its rows' indices are
	 * moved to match.  A worker's 100,000-element arrays are thus read where
	 * the worker wrote them, as a fixed-width column's full chunks are.
	 */
	void append_serialized(ByteReader &in, const PieceRunner &run = run_serially);

  private:
	template <typename T> void append_values(ChunkedColumn<T> &to, const T *data, size_t n, const uint8_t *present);
	/* Makes valid_ reach index `end`: 1 for the elements before it, which were all there. */
	void extend_validity(size_t end);
	void append_validity(size_t n, const uint8_t *present);

	bool doubles_ = false;
	ChunkedColumn<float> floats_;
	ChunkedColumn<double> doubles_column_;
	ChunkedColumn<uint8_t> valid_;
	std::vector<int64_t> begins_;
	std::vector<int64_t> ends_;
};

} // namespace gpurec
