/*
 * test_column_parts.cpp: serializing a column and appending it to another
 * (how a parallel worker's columns join the calling backend's), against the
 * column that pushing all rows one by one makes.  Rows are split at random
 * points into parts, so dictionaries overlap, numeric scales differ between
 * parts, and NULL array elements appear in some parts only.
 */
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "../../src/columns.hpp"
#include "test_random.hpp"

namespace gpurec {
namespace {

/* Runs the pieces on threads of their own, the last first: order and concurrency must not matter. */
void run_on_threads(size_t pieces, const std::function<void(size_t)> &piece)
{
	std::vector<std::thread> threads;
	for (size_t i = pieces; i-- > 0;)
		threads.emplace_back(piece, i);
	for (std::thread &t : threads)
		t.join();
}

/* Serializes `part` and appends it to `into`, through a counting then a copying writer. */
template <typename Column> void append_part(Column &into, const Column &part)
{
	ByteWriter counter;
	part.serialize(counter);
	std::vector<uint8_t> bytes(counter.size());
	ByteWriter writer(bytes.data(), bytes.size());
	part.serialize(writer);
	ASSERT_EQ(writer.size(), bytes.size());
	ByteReader reader(bytes.data(), bytes.size());
	into.append_serialized(reader, run_on_threads);
	EXPECT_TRUE(reader.at_end());
}

/* Random cut points of [0, n): 1 to 4 parts, some empty. */
std::vector<size_t> cuts(std::mt19937_64 &rng, size_t n)
{
	std::vector<size_t> at{0};
	int parts = 1 + static_cast<int>(rng() % 4);
	for (int p = 1; p < parts; ++p)
		at.push_back(rng() % (n + 1));
	at.push_back(n);
	std::sort(at.begin(), at.end());
	return at;
}

TEST(ColumnParts, IdColumnAsIfPushedInOrder)
{
	auto rng = seeded_rng();
	for (int round = 0; round < 50; ++round)
	{
		size_t n = rng() % 5000;
		int64_t range = 1 + static_cast<int64_t>(rng() % 300);
		std::vector<int64_t> ids(n);
		for (auto &id : ids)
			id = (rng() % 3 == 0 ? INT64_MIN + 5 : 0) + static_cast<int64_t>(rng() % range);
		IdColumn whole;
		for (int64_t id : ids)
			whole.push_back(id);
		std::vector<size_t> at = cuts(rng, n);
		IdColumn merged;
		for (size_t p = 0; p + 1 < at.size(); ++p)
		{
			IdColumn part;
			for (size_t r = at[p]; r < at[p + 1]; ++r)
				part.push_back(ids[r]);
			append_part(merged, part);
		}
		ASSERT_EQ(merged.size(), n);
		ASSERT_EQ(merged.distinct(), whole.distinct());
		for (size_t r = 0; r < n; ++r)
			ASSERT_EQ(merged.value_of(merged.code(r)), ids[r]) << "row " << r;
		for (size_t code = 0; code < whole.distinct(); ++code)
		{
			int32_t other = merged.find(whole.value_of(static_cast<int32_t>(code)));
			ASSERT_GE(other, 0);
			EXPECT_EQ(merged.counts()[other], whole.counts()[code]);
		}
	}
}

TEST(ColumnParts, NumericScalesAsIfPushedInOrder)
{
	auto rng = seeded_rng();
	for (int round = 0; round < 200; ++round)
	{
		size_t n = 1 + rng() % 3000;
		/* each row: unscaled, scale, display scale; or a special marker */
		struct Row
		{
			int64_t unscaled;
			int scale, display;
		};
		std::vector<Row> rows(n);
		int max_scale = static_cast<int>(rng() % 6);
		bool mixed_display = rng() % 2;
		for (auto &row : rows)
		{
			if (rng() % 50 == 0)
			{
				int16_t markers[] = {NumberColumn::kScaleNaN, NumberColumn::kScalePosInf, NumberColumn::kScaleNegInf};
				row = {0, markers[rng() % 3], -1};
				continue;
			}
			row.scale = static_cast<int>(rng() % (max_scale + 1));
			row.unscaled = static_cast<int64_t>(rng() % 2000000) - 1000000;
			row.display = mixed_display ? row.scale + static_cast<int>(rng() % 2) : row.scale;
		}
		auto push = [](NumberColumn &c, const Row &row) {
			if (row.display < 0 && row.unscaled == 0 && row.scale < 0)
				c.push_numeric_special(static_cast<int16_t>(row.scale));
			else
				c.push_numeric(row.unscaled, row.scale, row.display);
		};
		NumberColumn whole(NumberType::Numeric);
		for (const Row &row : rows)
			push(whole, row);
		std::vector<size_t> at = cuts(rng, n);
		NumberColumn merged(NumberType::Numeric);
		for (size_t p = 0; p + 1 < at.size(); ++p)
		{
			NumberColumn part(NumberType::Numeric);
			for (size_t r = at[p]; r < at[p + 1]; ++r)
				push(part, rows[r]);
			append_part(merged, part);
		}
		ASSERT_EQ(merged.size(), n);
		ASSERT_EQ(merged.scale(), whole.scale());
		for (size_t r = 0; r < n; ++r)
		{
			ASSERT_EQ(merged.key(r), whole.key(r)) << "row " << r;
			ASSERT_EQ(merged.display_scale(r), whole.display_scale(r)) << "row " << r;
		}
	}
}

TEST(ColumnParts, NumericOutOfRangeAtTheMergedScale)
{
	/* 10^17 at scale 0 fits; a part at scale 2 needs 10^19: ERROR 22003, as pushing would */
	NumberColumn merged(NumberType::Numeric), part(NumberType::Numeric);
	merged.push_numeric(100000000000000000LL, 0);
	part.push_numeric(5, 2);
	try
	{
		append_part(merged, part);
		FAIL() << "no error";
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), sqlstate::numeric_value_out_of_range);
	}
	NumberColumn whole(NumberType::Numeric);
	whole.push_numeric(100000000000000000LL, 0);
	EXPECT_THROW(whole.push_numeric(5, 2), Error);
}

TEST(ColumnParts, ChunkedColumnsAcrossChunkBoundaries)
{
	auto rng = seeded_rng();
	size_t n = FloatColumn::kChunkRows * 2 + rng() % 1000;
	std::vector<double> values(n);
	for (auto &v : values)
		v = static_cast<double>(rng() % 100000) / 7;
	std::vector<size_t> at{0, FloatColumn::kChunkRows - 3 - rng() % 100, n};
	FloatColumn merged;
	for (size_t p = 0; p + 1 < at.size(); ++p)
	{
		FloatColumn part;
		for (size_t r = at[p]; r < at[p + 1]; ++r)
			part.push_back(values[r]);
		append_part(merged, part);
	}
	ASSERT_EQ(merged.size(), n);
	for (size_t r = 0; r < n; ++r)
		ASSERT_EQ(merged[r], values[r]) << "row " << r;
}

TEST(ColumnParts, FloatArraysWithNullsInSomeParts)
{
	auto rng = seeded_rng();
	for (int round = 0; round < 100; ++round)
	{
		bool doubles = rng() % 2;
		size_t n = rng() % 300;
		std::vector<std::vector<double>> arrays(n);
		std::vector<std::vector<uint8_t>> present(n);
		bool nulls_somewhere = rng() % 2;
		for (size_t r = 0; r < n; ++r)
		{
			size_t len = rng() % 20;
			present[r].assign((len + 7) / 8, 0);
			for (size_t e = 0; e < len; ++e)
			{
				bool there = !(nulls_somewhere && r % 7 == 3 && rng() % 3 == 0);
				if (there)
				{
					present[r][e / 8] |= uint8_t(1) << (e % 8);
					arrays[r].push_back(static_cast<double>(rng() % 1000) / 8);
				}
			}
			if (arrays[r].size() == len)
				present[r].clear(); /* every element there: no bitmap */
			arrays[r].push_back(static_cast<double>(len)); /* the length rides at the end */
		}
		auto push = [&](FloatArrayColumn &c, size_t r) {
			size_t len = static_cast<size_t>(arrays[r].back());
			std::vector<float> floats(arrays[r].begin(), arrays[r].end() - 1);
			const void *data = doubles ? static_cast<const void *>(arrays[r].data()) : floats.data();
			c.append_row(data, len, present[r].empty() ? nullptr : present[r].data());
		};
		FloatArrayColumn whole;
		whole.set_doubles(doubles);
		for (size_t r = 0; r < n; ++r)
			push(whole, r);
		std::vector<size_t> at = cuts(rng, n);
		FloatArrayColumn merged;
		merged.set_doubles(doubles);
		for (size_t p = 0; p + 1 < at.size(); ++p)
		{
			FloatArrayColumn part;
			part.set_doubles(doubles);
			for (size_t r = at[p]; r < at[p + 1]; ++r)
				push(part, r);
			append_part(merged, part);
		}
		ASSERT_EQ(merged.size(), whole.size());
		ASSERT_EQ(merged.elements(), whole.elements());
		ASSERT_EQ(merged.has_nulls(), whole.has_nulls());
		for (size_t r = 0; r < n; ++r)
		{
			ASSERT_EQ(merged.row_begin(r), whole.row_begin(r));
			ASSERT_EQ(merged.row_end(r), whole.row_end(r));
		}
		for (size_t e = 0; e < whole.elements(); ++e)
		{
			ASSERT_EQ(merged.value(e), whole.value(e)) << "element " << e;
			ASSERT_EQ(merged.valid(e), whole.valid(e)) << "element " << e;
		}
	}
}

TEST(ColumnParts, ForeignBytesAreAnInternalError)
{
	IdColumn part, merged;
	part.push_back(7);
	ByteWriter counter;
	part.serialize(counter);
	std::vector<uint8_t> bytes(counter.size());
	ByteWriter writer(bytes.data(), bytes.size());
	part.serialize(writer);
	ByteReader truncated(bytes.data(), bytes.size() - 1);
	EXPECT_THROW(merged.append_serialized(truncated), Error);
}

} // namespace
} // namespace gpurec
