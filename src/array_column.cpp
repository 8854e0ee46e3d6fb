/*
 * array_column.cpp: FloatArrayColumn (array_column.hpp): rows appended with
 * their NULL elements, and the flat form.
 */
#include "no_postgres.hpp"

#include "array_column.hpp"

#include <cstring>

#include "errors.hpp"

namespace gpurec {

void FloatArrayColumn::set_doubles(bool doubles)
{
	if (elements() != 0)
		throw Error(sqlstate::internal_error, "FloatArrayColumn: the element width is set before the first row");
	doubles_ = doubles;
}

namespace {

bool is_present(const uint8_t *present, size_t e) { return (present[e / 8] >> (e % 8)) & 1; }

} // namespace

template <typename T>
void FloatArrayColumn::append_values(ChunkedColumn<T> &to, const T *data, size_t n, const uint8_t *present)
{
	if (!present)
	{
		to.append(n, [&](T *out, size_t first, size_t count) { std::memcpy(out, data + first, count * sizeof(T)); });
		return;
	}
	/* the elements that are there are packed in data: walk them in step */
	size_t next = 0;
	to.append(n, [&](T *out, size_t first, size_t count) {
		for (size_t i = 0; i < count; ++i)
			if (is_present(present, first + i))
				std::memcpy(&out[i], data + next++, sizeof(T));
			else
				out[i] = 0;
	});
}

void FloatArrayColumn::extend_validity(size_t end)
{
	if (end > valid_.size())
		valid_.append(end - valid_.size(), [](uint8_t *out, size_t, size_t count) { std::memset(out, 1, count); });
}

void FloatArrayColumn::append_validity(size_t n, const uint8_t *present)
{
	if (!present && valid_.empty())
		return;
	extend_validity(elements()); /* after the first NULL: every element before it was there */
	valid_.append(n, [&](uint8_t *out, size_t first, size_t count) {
		if (!present)
			std::memset(out, 1, count);
		else
			for (size_t i = 0; i < count; ++i)
				out[i] = is_present(present, first + i) ? 1 : 0;
	});
}

void FloatArrayColumn::append_row(const void *data, size_t n, const uint8_t *present)
{
	append_validity(n, present);
	auto begin = static_cast<int64_t>(elements());
	if (doubles_)
		append_values(doubles_column_, static_cast<const double *>(data), n, present);
	else
		append_values(floats_, static_cast<const float *>(data), n, present);
	begins_.push_back(begin);
	ends_.push_back(begin + static_cast<int64_t>(n));
}

void FloatArrayColumn::serialize(ByteWriter &out) const
{
	out.put<uint8_t>(doubles_ ? 1 : 0);
	out.put<uint64_t>(begins_.size());
	out.write(begins_.data(), begins_.size() * sizeof(int64_t));
	out.write(ends_.data(), ends_.size() * sizeof(int64_t));
	if (doubles_)
		doubles_column_.serialize(out);
	else
		floats_.serialize(out);
	out.put<uint8_t>(has_nulls() ? 1 : 0);
	if (has_nulls())
		valid_.serialize(out);
}

void FloatArrayColumn::append_serialized(ByteReader &in, const PieceRunner &run)
{
	if (in.get<uint8_t>() != (doubles_ ? 1 : 0))
		throw Error(sqlstate::internal_error, "FloatArrayColumn: appending a column of another element width");
	size_t rows = in.get<uint64_t>();
	if (rows > SIZE_MAX / (2 * sizeof(int64_t)))
		throw Error(sqlstate::internal_error, "FloatArrayColumn: a serialized row count out of range");
	const uint8_t *begins = in.take(rows * sizeof(int64_t));
	const uint8_t *ends = in.take(rows * sizeof(int64_t));
	size_t first = doubles_ ? doubles_column_.append_serialized_in_place(in, run)
							: floats_.append_serialized_in_place(in, run);
	size_t part_elements = elements() - first;
	/* the validity at the same indices: the elements before (and the gap) are there, then the part's own */
	if (in.get<uint8_t>() != 0)
	{
		extend_validity(first);
		valid_.append_serialized(in, run);
	}
	else if (!valid_.empty())
		extend_validity(elements());
	if (has_nulls() && valid_.size() != elements())
		throw Error(sqlstate::internal_error, "FloatArrayColumn: serialized elements and validity disagree");
	begins_.reserve(begins_.size() + rows);
	ends_.reserve(ends_.size() + rows);
	for (size_t r = 0; r < rows; ++r)
	{
		int64_t begin, end;
		std::memcpy(&begin, begins + r * sizeof begin, sizeof begin);
		std::memcpy(&end, ends + r * sizeof end, sizeof end);
		if (begin < 0 || end < begin || static_cast<uint64_t>(end) > part_elements)
			throw Error(sqlstate::internal_error, "FloatArrayColumn: a serialized row outside its elements");
		begins_.push_back(static_cast<int64_t>(first) + begin);
		ends_.push_back(static_cast<int64_t>(first) + end);
	}
}

} // namespace gpurec
