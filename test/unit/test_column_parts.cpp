/*
 * test_column_parts.cpp: serializing a column and appending it to another
 * (how a parallel worker's columns join the calling backend's), against the
 * column that pushing all rows one by one makes.  Rows are split at random
 * points into parts, so dictionaries overlap, numeric scales differ between
 * parts, and NULL array elements appear in some parts only.
 */
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "../../src/array_column.hpp"
#include "../../src/column_chunks.hpp"
#include "../../src/float_column.hpp"
#include "../../src/id_column.hpp"
#include "../../src/input_table.hpp"
#include "../../src/number_column.hpp"
#include "chunk_arena.hpp"
#include "run_on_threads.hpp"
#include "test_random.hpp"

namespace gpurec {
namespace {

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

/* Serializes `part` with its chunks by reference to `arena` and appends it to `into`, taking its full chunks. */
template <typename Column> void append_by_reference(Column &into, const Column &part, const Arena &arena)
{
	std::vector<uint8_t> bytes = serialized_by_reference(part);
	ByteReader reader(bytes.data(), bytes.size(), &arena);
	into.append_serialized(reader, run_on_threads, true);
	EXPECT_TRUE(reader.at_end());
}

/*
 * Where taking chunks puts each row: [the column's full chunks] [the part's
 * full chunks] [the column's partial chunk] [the part's last rows].
 */
template <typename T> void place_like_taken_chunks(std::vector<T> &rows, const std::vector<T> &part)
{
	constexpr size_t kRows = ChunkedColumn<T>::kChunkRows;
	size_t full = rows.size() / kRows * kRows, taken = part.size() / kRows * kRows;
	std::vector<T> placed(rows.begin(), rows.begin() + full);
	placed.insert(placed.end(), part.begin(), part.begin() + taken);
	placed.insert(placed.end(), rows.begin() + full, rows.end());
	placed.insert(placed.end(), part.begin() + taken, part.end());
	rows = std::move(placed);
}

TEST(ColumnParts, IdColumnPartsAtOnceAsIfPushedInOrder)
{
	/*
	 * Several parts appended at once, after rows of the column's own: ids
	 * the direct array holds (the union is numbered in id order at once),
	 * some the column's hash table held first (large ones among few), and
	 * negative or far ones (each part's dictionary merged in turn: -1, the
	 * largest of all as unsigned, among them), and chunks of codes by
	 * reference over a chunk boundary.  The column and each part may hold
	 * ids as codes (as a read's do), some parts settled first as a worker
	 * settles sparse ones, the column settled at the end as the read is.
	 */
	auto rng = seeded_rng();
	constexpr size_t kRows = ChunkedColumn<int32_t>::kChunkRows;
	for (int round = 0; round < 24; ++round)
	{
		bool dense = round % 3 != 2, big = round % 4 == 0;
		size_t n = big ? kRows + rng() % kRows : rng() % 20000;
		int64_t range = 1 + static_cast<int64_t>(rng() % (big ? 300000 : 3000));
		std::vector<int64_t> ids(n);
		for (auto &id : ids)
			id = (dense ? 0 : (rng() % 3 == 0 ? INT64_MIN + 5 : int64_t(1) << 40)) + static_cast<int64_t>(rng() % range);
		bool minus_one = n > 0 && rng() % 4 == 0;
		if (minus_one)
			ids[rng() % n] = -1;
		std::vector<size_t> at = cuts(rng, n);
		Arena arena;
		IdColumn merged;
		if (rng() % 2 == 0)
			merged.take_ids_as_codes();
		if (rng() % 2 == 0)
			merged.append(at[1], [&ids](size_t r) { return ids[r]; });
		else
			for (size_t r = 0; r < at[1]; ++r)
				merged.push_back(ids[r]);
		std::vector<std::vector<uint8_t>> bytes;
		std::vector<int64_t> expected(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(at[1]));
		for (size_t p = 1; p + 1 < at.size(); ++p)
		{
			IdColumn part;
			part.use_chunk_source(arena);
			if (rng() % 3 != 0)
				part.take_ids_as_codes();
			for (size_t r = at[p]; r < at[p + 1]; ++r)
				part.push_back(ids[r]);
			if (rng() % 2 == 0)
				part.settle_if_sparse();
			bytes.push_back(serialized_by_reference(part));
			place_like_taken_chunks(expected, std::vector<int64_t>(ids.begin() + static_cast<std::ptrdiff_t>(at[p]),
																   ids.begin() + static_cast<std::ptrdiff_t>(at[p + 1])));
		}
		std::vector<ByteReader> readers;
		for (const std::vector<uint8_t> &b : bytes)
			readers.emplace_back(b.data(), b.size(), &arena);
		merged.append_parts(readers, run_on_threads, true);
		for (const ByteReader &reader : readers)
			EXPECT_TRUE(reader.at_end());
		merged.settle(run_on_threads);
		ASSERT_FALSE(merged.holds_ids_as_codes());

		ASSERT_EQ(merged.size(), n);
		for (size_t r = 0; r < n; ++r)
			ASSERT_EQ(merged.value_of(merged.code(r)), expected[r]) << "row " << r;
		std::map<int64_t, int64_t> counts;
		for (int64_t id : ids)
			++counts[id];
		ASSERT_EQ(merged.distinct(), counts.size());
		for (const auto &[id, count] : counts)
		{
			int32_t code = merged.find(id);
			ASSERT_GE(code, 0);
			EXPECT_EQ(merged.counts()[static_cast<size_t>(code)], count) << "id " << id;
		}
		/* ids the direct array holds come out numbered in id order; the others as they came */
		if (dense && !minus_one && bytes.size() > 0)
		{
			ASSERT_TRUE(merged.numbered_in_id_order());
			for (size_t code = 1; code < merged.distinct(); ++code)
				ASSERT_LT(merged.value_of(static_cast<int32_t>(code - 1)), merged.value_of(static_cast<int32_t>(code)));
		}
		merged.number_in_id_order();
		for (size_t r = 0; r < n; ++r)
			ASSERT_EQ(merged.value_of(merged.code(r)), expected[r]) << "row " << r;
	}
}

TEST(ColumnParts, RewrittenIdDictionariesJoinAsOne)
{
	/*
	 * A parallel read's uuid or text ids: each worker holds its own code c
	 * of a key, its codes numbered as the keys came to it, and the calling
	 * backend rewrites part p's dictionary through part p's codes to the
	 * call's code of the key (CallKeys::lane_to_call_codes) as the parts
	 * join.  Some rounds' parts hold sparse ids instead, c * s + l (lane l
	 * of stride s), rewritten through c = id / s: any rewrite that keeps
	 * distinct ids distinct joins.  The column must come out holding, row
	 * by row, the key's call code, with one distinct id per key however
	 * many parts held it, and the rows' counts summed; few keys and many,
	 * parts of ids as codes and dictionaries, NULLs' fallback (-1) kept,
	 * the parts rewritten at once.
	 */
	auto rng = seeded_rng();
	for (int round = 0; round < 12; ++round)
	{
		int64_t stride = round % 2 == 0 ? 4 : 32;
		bool own_codes = round % 4 >= 2;
		size_t keys = 1 + rng() % (round % 3 == 0 ? 40000 : 500);
		size_t parts = 1 + rng() % 12;
		std::vector<int64_t> call_code(keys); /* the call's code of each key: any distinct numbers */
		for (size_t k = 0; k < keys; ++k)
			call_code[k] = static_cast<int64_t>(k);
		std::shuffle(call_code.begin(), call_code.end(), rng);
		std::vector<std::vector<uint8_t>> bytes;
		std::vector<std::vector<int64_t>> local_key; /* per part: its code c's key */
		std::vector<int64_t> expected;
		for (size_t p = 0; p < parts; ++p)
		{
			int64_t lane = 1 + static_cast<int64_t>(p % static_cast<size_t>(stride - 1));
			std::map<size_t, int64_t> code_of_key;
			local_key.emplace_back();
			IdColumn part;
			if (rng() % 2 == 0) /* as a worker's column is, until an id past its limits (a NULL's -1) settles it */
				part.take_ids_as_codes();
			size_t rows = rng() % 30000;
			for (size_t r = 0; r < rows; ++r)
			{
				if (rng() % 50 == 0 && round % 4 != 1)
				{
					part.push_back(-1);
					expected.push_back(-1);
					continue;
				}
				size_t key = rng() % keys;
				auto [it, added] = code_of_key.emplace(key, static_cast<int64_t>(local_key.back().size()));
				if (added)
					local_key.back().push_back(static_cast<int64_t>(key));
				part.push_back(own_codes ? it->second : it->second * stride + lane);
				expected.push_back(call_code[key]);
			}
			bytes.push_back(written_bytes([&](ByteWriter &w) { part.serialize(w); }));
		}
		std::vector<ByteReader> readers;
		for (const std::vector<uint8_t> &b : bytes)
			readers.emplace_back(b.data(), b.size());
		IdColumn joined;
		std::vector<std::atomic<int>> rewrites(parts);
		joined.append_parts(readers, run_on_threads, false, [&](size_t part, int64_t *ids, size_t n) {
			++rewrites.at(part);
			const std::vector<int64_t> &keys_of = local_key[part];
			for (size_t i = 0; i < n; ++i)
				if (ids[i] >= 0)
					ids[i] = call_code[static_cast<size_t>(keys_of[static_cast<size_t>(own_codes ? ids[i] : ids[i] / stride)])];
		});
		for (const std::atomic<int> &n : rewrites)
			EXPECT_EQ(n.load(), 1) << "each part rewritten once";
		for (const ByteReader &reader : readers)
			EXPECT_TRUE(reader.at_end());
		joined.settle(run_on_threads);
		ASSERT_EQ(joined.size(), expected.size());
		std::map<int64_t, int64_t> counts;
		for (size_t r = 0; r < expected.size(); ++r)
		{
			ASSERT_EQ(joined.value_of(joined.code(r)), expected[r]) << "round " << round << ", row " << r;
			++counts[expected[r]];
		}
		ASSERT_EQ(joined.distinct(), counts.size()) << "one id per key, whatever parts held it";
		for (const auto &[id, count] : counts)
			EXPECT_EQ(joined.counts()[static_cast<size_t>(joined.find(id))], count) << "id " << id;
	}
}

TEST(ColumnParts, IdsAsCodesSettleAsADictionaryNumberedInIdOrder)
{
	/*
	 * A column of ids as codes, settled, is the column of the same pushes
	 * as a dictionary, numbered in id order: rows, counts, find.  Shuffled
	 * ids below the room, then (some rounds) one past it, a far or a
	 * negative one, which settles the column half way; the rest goes on as
	 * a dictionary.
	 */
	auto rng = seeded_rng();
	for (int round = 0; round < 16; ++round)
	{
		size_t n = 1 + rng() % 200000;
		std::vector<int64_t> ids(n);
		for (auto &id : ids)
			id = static_cast<int64_t>(rng() % (1 + rng() % 1000000));
		int64_t odd[] = {-1, int64_t(1) << 22, int64_t(1) << 40, 5000000};
		bool leaves = round % 2 == 1;
		if (leaves)
			ids[rng() % n] = odd[rng() % 4];
		IdColumn as_codes, dictionary;
		as_codes.take_ids_as_codes();
		size_t half = rng() % (n + 1);
		as_codes.append(half, [&ids](size_t r) { return ids[r]; });
		for (size_t r = half; r < n; ++r)
			as_codes.push_back(ids[r]);
		for (int64_t id : ids)
			dictionary.push_back(id);
		as_codes.settle(run_on_threads);
		ASSERT_FALSE(as_codes.holds_ids_as_codes());
		/* settled in id order; where a far id settled it early, the later ids came as a dictionary's do */
		if (!leaves)
			EXPECT_TRUE(as_codes.numbered_in_id_order());
		as_codes.number_in_id_order();
		dictionary.number_in_id_order();
		ASSERT_EQ(as_codes.size(), n);
		ASSERT_EQ(as_codes.distinct(), dictionary.distinct());
		EXPECT_EQ(as_codes.values(), dictionary.values());
		EXPECT_EQ(as_codes.counts(), dictionary.counts());
		for (size_t r = 0; r < n; ++r)
			ASSERT_EQ(as_codes.value_of(as_codes.code(r)), ids[r]) << "row " << r;
		for (int k = 0; k < 100; ++k)
		{
			int64_t id = ids[rng() % n];
			ASSERT_EQ(as_codes.value_of(as_codes.find(id)), id);
		}
		EXPECT_EQ(as_codes.find(3000000000LL), -1);
	}
}

TEST(ColumnParts, SparseIdsAsCodesTravelAsADictionary)
{
	/* a few ids far apart: settle_if_sparse makes the part a dictionary, which serializes in far fewer bytes */
	IdColumn sparse, dense;
	sparse.take_ids_as_codes();
	dense.take_ids_as_codes();
	for (int64_t id : {900000, 3, 900000, 17})
		sparse.push_back(id);
	for (int64_t id = 0; id < 200000; ++id)
		dense.push_back(id % 70000);
	size_t before = serialized_bytes(sparse).size();
	sparse.settle_if_sparse();
	dense.settle_if_sparse();
	EXPECT_FALSE(sparse.holds_ids_as_codes());
	EXPECT_TRUE(dense.holds_ids_as_codes());
	EXPECT_LT(serialized_bytes(sparse).size() * 100, before);
	IdColumn joined;
	joined.take_ids_as_codes();
	joined.push_back(5);
	std::vector<uint8_t> a = serialized_bytes(sparse), b = serialized_bytes(dense);
	std::vector<ByteReader> readers{ByteReader(a.data(), a.size()), ByteReader(b.data(), b.size())};
	joined.append_parts(readers);
	joined.settle();
	ASSERT_EQ(joined.size(), 200005u);
	EXPECT_EQ(joined.distinct(), 70001u); /* 0 .. 69999, and 900000 */
	EXPECT_EQ(joined.counts()[static_cast<size_t>(joined.find(900000))], 2);
	EXPECT_EQ(joined.counts()[static_cast<size_t>(joined.find(5))], 4); /* 3 of dense's, 1 of its own */
	EXPECT_EQ(joined.counts()[static_cast<size_t>(joined.find(17))], 4);
	for (size_t r = 0; r < joined.size(); ++r)
		ASSERT_GE(joined.code(r), 0);
}

TEST(ColumnParts, IdsAsCodesOfNoIdHeldAreAnInternalError)
{
	/* a part's code that its counts say no row holds: bytes gone wrong, found when the column settles */
	IdColumn part;
	part.take_ids_as_codes();
	for (int64_t id : {4, 9, 4})
		part.push_back(id);
	std::vector<uint8_t> bytes = serialized_bytes(part);
	/* the count of id 9 (form, held, entries, then a count of 4 bytes per id) set to 0 */
	size_t at = 1 + 8 + 8 + 9 * sizeof(uint32_t);
	ASSERT_EQ(bytes[at], 1);
	bytes[at] = 0;
	IdColumn joined;
	joined.take_ids_as_codes();
	ByteReader reader(bytes.data(), bytes.size());
	joined.append_serialized(reader);
	try
	{
		joined.settle();
		FAIL() << "settled a code of no id held";
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), sqlstate::internal_error);
	}
}

TEST(ColumnParts, ChunksTakenByReferenceKeepRowsAlignedAcrossColumns)
{
	/* rows of three columns (an id, a numeric, a plain one), read by a leader and workers as a parallel read does */
	auto rng = seeded_rng();
	constexpr size_t kRows = ChunkedColumn<int32_t>::kChunkRows;
	size_t n = 3 * kRows + rng() % kRows;
	struct Row
	{
		int64_t id;
		int64_t unscaled;
		int scale;
		int64_t plain;
	};
	std::vector<Row> rows(n);
	for (size_t r = 0; r < n; ++r)
		rows[r] = Row{static_cast<int64_t>(rng() % 5000), static_cast<int64_t>(rng() % 100000) - 50000,
					  static_cast<int>(rng() % 3), static_cast<int64_t>(r)};
	/* the leader's rows first, then workers' parts, one of them over a chunk and one short of one */
	std::vector<size_t> at{0, rng() % kRows, 0, 0, n};
	at[2] = at[1] + kRows + rng() % 1000;
	at[3] = at[2] + kRows - 1 - rng() % 1000;

	Arena arena;
	IdColumn ids;
	NumberColumn numbers(NumberType::Numeric);
	Int64Column plain;
	std::vector<Row> expected(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(at[1]));
	for (size_t r = 0; r < at[1]; ++r)
	{
		ids.push_back(rows[r].id);
		numbers.push_numeric(rows[r].unscaled, rows[r].scale);
		plain.push_back(rows[r].plain);
	}
	for (size_t p = 1; p + 1 < at.size(); ++p)
	{
		IdColumn part_ids;
		NumberColumn part_numbers(NumberType::Numeric);
		Int64Column part_plain;
		part_ids.use_chunk_source(arena);
		part_numbers.use_chunk_source(arena);
		part_plain.use_chunk_source(arena);
		for (size_t r = at[p]; r < at[p + 1]; ++r)
		{
			part_ids.push_back(rows[r].id);
			part_numbers.push_numeric(rows[r].unscaled, rows[r].scale);
			part_plain.push_back(rows[r].plain);
		}
		append_by_reference(ids, part_ids, arena);
		append_by_reference(numbers, part_numbers, arena);
		append_by_reference(plain, part_plain, arena);
		place_like_taken_chunks(expected, std::vector<Row>(rows.begin() + static_cast<std::ptrdiff_t>(at[p]),
														   rows.begin() + static_cast<std::ptrdiff_t>(at[p + 1])));
	}
	ASSERT_EQ(ids.size(), n);
	ASSERT_EQ(numbers.size(), n);
	ASSERT_EQ(plain.size(), n);
	ASSERT_EQ(numbers.scale(), 2);
	/* every row in its place, in every column: the rows stay whole */
	for (size_t r = 0; r < n; ++r)
	{
		ASSERT_EQ(plain[r], expected[r].plain) << "row " << r;
		ASSERT_EQ(ids.value_of(ids.code(r)), expected[r].id) << "row " << r;
		int64_t key = expected[r].unscaled;
		for (int s = expected[r].scale; s < 2; ++s)
			key *= 10;
		ASSERT_EQ(numbers.key(r), key) << "row " << r;
		ASSERT_EQ(numbers.display_scale(r), expected[r].scale) << "row " << r;
	}
	std::vector<int64_t> counts(5000, 0);
	for (const Row &row : rows)
		++counts[static_cast<size_t>(row.id)];
	for (size_t code = 0; code < ids.distinct(); ++code)
		EXPECT_EQ(ids.counts()[code], counts[static_cast<size_t>(ids.value_of(static_cast<int32_t>(code)))]);
}

TEST(ColumnParts, PartsAsBytesLandWhereChunksByReferenceDo)
{
	/*
	 * One column's parts come with their chunks by reference, another's
	 * as bytes, a third's packed, all taking chunks: each row must land at
	 * one index in all three, as the placement of taken chunks says, for
	 * parts short of a chunk, just under one, just over one and of several,
	 * after column rows that end anywhere in a chunk (none included).
	 */
	auto rng = seeded_rng();
	constexpr size_t kRows = Int64Column::kChunkRows;
	auto some_rows = [&rng]() -> size_t {
		switch (rng() % 6)
		{
			case 0: return 0;
			case 1: return rng() % 3000;
			case 2: return kRows - 1 - rng() % 3000;
			case 3: return kRows + rng() % 3000;
			case 4: return kRows / 2 + rng() % kRows;
			default: return rng() % (2 * kRows);
		}
	};
	for (int round = 0; round < 6; ++round)
	{
		Arena arena;
		Int64Column by_reference, as_bytes, packed;
		std::vector<int64_t> expected;
		int64_t next = 0;
		for (size_t r = 0, own = some_rows(); r < own; ++r, ++next)
		{
			by_reference.push_back(next);
			as_bytes.push_back(next);
			packed.push_back(next);
			expected.push_back(next);
		}
		for (int p = 0; p < 5; ++p)
		{
			Int64Column part;
			part.use_chunk_source(arena);
			std::vector<int64_t> rows;
			for (size_t r = 0, n = some_rows(); r < n; ++r, ++next)
			{
				part.push_back(next);
				rows.push_back(next);
			}
			append_by_reference(by_reference, part, arena);
			for (bool pack : {false, true})
			{
				std::vector<uint8_t> bytes = serialized_bytes(part, [pack](ByteWriter &w) {
					if (pack)
						w.pack_integers();
				});
				ByteReader reader(bytes.data(), bytes.size());
				(pack ? packed : as_bytes).append_serialized(reader, run_on_threads, true);
				EXPECT_TRUE(reader.at_end());
			}
			place_like_taken_chunks(expected, rows);
		}
		ASSERT_EQ(by_reference.size(), expected.size());
		ASSERT_EQ(as_bytes.size(), expected.size());
		ASSERT_EQ(packed.size(), expected.size());
		for (size_t r = 0; r < expected.size(); ++r)
		{
			ASSERT_EQ(by_reference[r], expected[r]) << "round " << round << ", row " << r;
			ASSERT_EQ(as_bytes[r], expected[r]) << "round " << round << ", row " << r;
			ASSERT_EQ(packed[r], expected[r]) << "round " << round << ", row " << r;
		}
	}
}

TEST(ColumnParts, ChunksByReferenceNeedAResolver)
{
	Arena arena;
	Int64Column part;
	part.use_chunk_source(arena);
	part.push_back(7);
	std::vector<uint8_t> bytes = serialized_by_reference(part);
	Int64Column into;
	ByteReader without_resolver(bytes.data(), bytes.size());
	EXPECT_THROW(into.append_serialized(without_resolver, run_serially, true), Error);
	ByteReader with_resolver(bytes.data(), bytes.size(), &arena);
	into.append_serialized(with_resolver, run_serially, true);
	ASSERT_EQ(into.size(), 1u);
	EXPECT_EQ(into[0], 7);
}

/*
 * Appends one array row: its elements that are there, packed, with its
 * length riding at the end of `row`, and `present` its bitmap (empty when
 * every element is there), as floats or as doubles.
 */
void push_array_row(FloatArrayColumn &c, const std::vector<double> &row, const std::vector<uint8_t> &present, bool doubles)
{
	size_t len = static_cast<size_t>(row.back());
	std::vector<float> floats(row.begin(), row.end() - 1);
	const void *data = doubles ? static_cast<const void *>(row.data()) : floats.data();
	c.append_row(data, len, present.empty() ? nullptr : present.data());
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
		auto push = [&](FloatArrayColumn &c, size_t r) { push_array_row(c, arrays[r], present[r], doubles); };
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

TEST(ColumnParts, FloatArraysByReferenceStayWhereTheWorkerWroteThem)
{
	/*
	 * Rows of long arrays, some over a chunk boundary, read by a leader and
	 * by workers whose chunks come by reference: every row keeps its
	 * elements and their validity, the parts' elements are not copied, and
	 * the leader's rows after a part's go on after it.
	 */
	auto rng = seeded_rng();
	constexpr size_t kRows = ChunkedColumn<float>::kChunkRows;
	for (int round = 0; round < 4; ++round)
	{
		bool doubles = round % 2 == 1, nulls = round >= 2;
		size_t n = 40 + rng() % 20;
		std::vector<std::vector<double>> arrays(n);
		std::vector<std::vector<uint8_t>> present(n);
		for (size_t r = 0; r < n; ++r)
		{
			size_t len = r % 9 == 4 ? 0 : kRows / 8 + rng() % 5000;
			present[r].assign((len + 7) / 8, 0xff);
			for (size_t e = 0; e < len; ++e)
				if (nulls && r % 5 == 2 && rng() % 4 == 0)
					present[r][e / 8] &= static_cast<uint8_t>(~(1u << (e % 8)));
				else
					arrays[r].push_back(static_cast<double>(rng() % 100000) / 16);
			if (arrays[r].size() == len)
				present[r].clear();
			arrays[r].push_back(static_cast<double>(len)); /* the length rides at the end */
		}
		auto push = [&](FloatArrayColumn &c, size_t r) { push_array_row(c, arrays[r], present[r], doubles); };
		/* the leader's first rows, two workers' parts (over a chunk each), then the leader's last rows */
		std::vector<size_t> at{0, 5, 5 + 12 + rng() % 4, 0, n};
		at[3] = at[2] + 12 + rng() % 4;
		Arena arena;
		FloatArrayColumn merged;
		merged.set_doubles(doubles);
		for (size_t r = at[0]; r < at[1]; ++r)
			push(merged, r);
		std::vector<const void *> part_chunks;
		for (size_t p = 1; p <= 2; ++p)
		{
			FloatArrayColumn part;
			part.set_doubles(doubles);
			part.use_chunk_source(arena);
			for (size_t r = at[p]; r < at[p + 1]; ++r)
				push(part, r);
			ASSERT_GT(part.elements(), kRows);
			for (size_t c = 0; c < (doubles ? part.double_values().chunk_count() : part.floats().chunk_count()); ++c)
				part_chunks.push_back(doubles ? static_cast<const void *>(part.double_values().chunk_data(c))
											  : part.floats().chunk_data(c));
			std::vector<uint8_t> bytes = serialized_by_reference(part);
			ByteReader reader(bytes.data(), bytes.size(), &arena);
			merged.append_serialized(reader, run_on_threads);
			EXPECT_TRUE(reader.at_end());
		}
		for (size_t r = at[3]; r < at[4]; ++r)
			push(merged, r);

		ASSERT_EQ(merged.size(), n);
		ASSERT_EQ(merged.has_nulls(), nulls);
		for (size_t r = 0; r < n; ++r)
		{
			size_t len = static_cast<size_t>(arrays[r].back());
			ASSERT_EQ(merged.row_end(r) - merged.row_begin(r), static_cast<int64_t>(len)) << "row " << r;
			ASSERT_LE(static_cast<size_t>(merged.row_end(r)), merged.elements());
			size_t next = 0;
			for (size_t e = 0; e < len; ++e)
			{
				size_t at_e = static_cast<size_t>(merged.row_begin(r)) + e;
				bool there = present[r].empty() || ((present[r][e / 8] >> (e % 8)) & 1);
				ASSERT_EQ(merged.valid(at_e), there) << "row " << r << " element " << e;
				if (there)
				{
					double want = doubles ? arrays[r][next] : static_cast<double>(static_cast<float>(arrays[r][next]));
					ASSERT_EQ(merged.value(at_e), want) << "row " << r << " element " << e;
					++next;
				}
			}
		}
		/* the parts' chunks are the merged column's own, not copies */
		size_t found = 0;
		size_t chunks = doubles ? merged.double_values().chunk_count() : merged.floats().chunk_count();
		for (size_t c = 0; c < chunks; ++c)
		{
			const void *data = doubles ? static_cast<const void *>(merged.double_values().chunk_data(c))
									   : merged.floats().chunk_data(c);
			found += std::count(part_chunks.begin(), part_chunks.end(), data);
		}
		EXPECT_EQ(found, part_chunks.size());
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

TEST(ColumnParts, ForgottenRowsLeaveChunksAndDictionaries)
{
	/*
	 * A parallel read's piece forgets its rows between pieces
	 * (InputTable::forget_rows): the next rows go into the same chunks,
	 * ids keep their codes and their counts go on, and numbers take the
	 * scales of the rows that come, whatever the earlier ones had.
	 */
	auto rng = seeded_rng();
	Int64Column ints;
	IdColumn ids;
	NumberColumn prices(NumberType::Numeric);
	std::map<int64_t, int64_t> rows_of_id;
	const void *first_chunk = nullptr;
	for (int round = 0; round < 4; ++round)
	{
		size_t n = 1 + rng() % 3000;
		int scale = static_cast<int>(rng() % 4); /* a piece's scale differs from the last one's */
		std::vector<int64_t> want;
		for (size_t r = 0; r < n; ++r)
		{
			int64_t id = static_cast<int64_t>(rng() % 50), v = static_cast<int64_t>(rng() % 100000) - 50000;
			ints.push_back(v);
			ids.push_back(id);
			prices.push_numeric(v, scale);
			want.push_back(v);
			++rows_of_id[id];
		}
		ASSERT_EQ(ints.size(), n);
		ASSERT_EQ(ids.size(), n);
		ASSERT_EQ(prices.size(), n);
		if (round == 0)
			first_chunk = ints.chunk_data(0);
		EXPECT_EQ(ints.chunk_data(0), first_chunk) << "round " << round << " mapped a new chunk";
		EXPECT_FALSE(prices.has_mixed_scales()) << "round " << round;
		for (size_t r = 0; r < n; ++r)
		{
			ASSERT_EQ(ints[r], want[r]);
			ASSERT_EQ(prices.display_scale(r), scale);
			ASSERT_EQ(prices.unscaled_at_display_scale(r), want[r]);
		}
		for (const auto &[id, rows] : rows_of_id)
		{
			int32_t code = ids.find(id);
			ASSERT_GE(code, 0);
			EXPECT_EQ(ids.counts()[static_cast<size_t>(code)], rows) << "id " << id << ": the counts go on";
		}
		ints.forget_rows();
		ids.forget_rows();
		prices.forget_rows();
		EXPECT_EQ(ints.size(), 0u);
		EXPECT_EQ(ids.size(), 0u);
		EXPECT_EQ(prices.size(), 0u);
		EXPECT_EQ(ids.distinct(), rows_of_id.size()) << "the dictionary was dropped";
	}
	IdColumn as_codes;
	as_codes.take_ids_as_codes();
	as_codes.push_back(3);
	EXPECT_THROW(as_codes.forget_rows(), Error);
}

} // namespace
} // namespace gpurec

/*
 * release_while_call_goes_on: the table's rows go back on another thread
 * while the call goes on, and the memory the table kept alive (a parallel
 * read's shared memory, whose deleter calls PostgreSQL) goes only when the
 * call's context does, on the calling thread, after that work: a page
 * handed back after its memory was unmapped would be a fault.
 */
TEST(ColumnParts, ReleasedRowsGoWithTheCallAndTheirMemoryAfterThem)
{
	const size_t bytes = 1 << 20;
	void *shared = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(shared, MAP_FAILED);
	std::memset(shared, 7, bytes);
	std::atomic<bool> unmapped{false};
	std::thread::id unmapped_on;
	unsigned char first_byte_when_unmapped = 7;
	auto ctx = std::make_unique<gpurec::ExecContext>();
	{
		gpurec::InputTable table("points query", {gpurec::id_spec("user_id")});
		for (int64_t i = 0; i < 100000; ++i)
			table.int64(0).push_back(i);
		table.count_rows(100000, 0);
		table.keep_alive(std::shared_ptr<void>(shared, [&](void *memory) {
			unmapped_on = std::this_thread::get_id();
			/* the pages handed back (MADV_REMOVE) read as zeros: the work was done first */
			first_byte_when_unmapped = *static_cast<unsigned char *>(memory);
			munmap(memory, bytes);
			unmapped = true;
		}));
		table.note_borrowed(shared, bytes);
		gpurec::release_while_call_goes_on(std::move(table), *ctx);
	}
	EXPECT_FALSE(unmapped) << "the kept memory went with the function that read it, before the call ended";
	ASSERT_EQ(ctx->kept_until_done.size(), 1u);
	ctx.reset();
	EXPECT_TRUE(unmapped);
	EXPECT_EQ(unmapped_on, std::this_thread::get_id());
	EXPECT_EQ(first_byte_when_unmapped, 0) << "the kept memory went before its pages were handed back";
}
