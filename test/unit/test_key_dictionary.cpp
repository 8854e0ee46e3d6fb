/*
 * test_key_dictionary.cpp: uuid and text ids as codes (key_dictionary.hpp)
 * against references written here: the dictionary against std::map of
 * std::string (whose order is bytewise, as memcmp's), CallKeys' renumbering
 * of the columns coded from it against the values each row was given.
 * Fresh random data every run; the seed is printed, and GPUREC_TEST_SEED
 * replays it.
 */
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "../../src/key_dictionary.hpp"
#include "run_on_threads.hpp"
#include "test_random.hpp"

namespace gpurec {
namespace {

/*
 * Random byte strings: short ones of up to 15 bytes (prefixes of one another,
 * equal ones, ones that differ in a trailing zero byte), 16-byte ones, the
 * empty one, and longer ones that share their first 16 bytes (the part a
 * slot of the dictionary holds) and differ past them.
 */
std::string random_value(std::mt19937_64 &rng)
{
	static const char bytes[] = {'\0', 'a', 'b', 'B', '\x7f', '\x80', '\xc3', '\xff'};
	size_t size = rng() % 4 == 0 ? 16 : rng() % (rng() % 2 == 0 ? 6 : 16);
	std::string value = rng() % 5 == 0 ? std::string("shared 16 bytes.") : std::string();
	for (size_t i = 0; i < size; ++i)
		value.push_back(bytes[rng() % sizeof bytes]);
	return value;
}

const uint8_t *bytes_of(const std::string &s) { return reinterpret_cast<const uint8_t *>(s.data()); }

std::string value_at(const KeyDictionary &d, int64_t code)
{
	return std::string(reinterpret_cast<const char *>(d.value(code)), d.value_size(code));
}

TEST(KeyDictionary, CodesAreDenseAndNumberedInByteOrder)
{
	std::mt19937_64 rng = seeded_rng();
	KeyDictionary d;
	std::map<std::string, int64_t> first_code; /* std::string compares bytewise, as unsigned chars */
	std::vector<std::pair<std::string, int64_t>> given;
	for (int i = 0; i < 20000; ++i)
	{
		std::string v = random_value(rng);
		int64_t code = d.intern(bytes_of(v), v.size());
		auto [it, added] = first_code.emplace(v, static_cast<int64_t>(first_code.size()));
		ASSERT_EQ(code, it->second) << "a new value takes the next code, a known one its own";
		given.emplace_back(v, code);
	}
	ASSERT_EQ(d.size(), first_code.size());
	EXPECT_EQ(d.numbered_in_key_order(), false);
	std::vector<int64_t> new_code = d.number_in_key_order();
	EXPECT_TRUE(d.numbered_in_key_order());
	int64_t rank = 0;
	for (const auto &[value, code] : first_code)
	{
		EXPECT_EQ(new_code[code], rank) << "renumbered in byte order";
		EXPECT_EQ(value_at(d, rank), value);
		EXPECT_EQ(d.find(bytes_of(value), value.size()), rank);
		++rank;
	}
	std::string absent(17, 'z');
	EXPECT_EQ(d.find(bytes_of(absent), absent.size()), -1);
	/* after numbering, a new value takes the next code again, and the order is lost until the next */
	int64_t code = d.intern(bytes_of(absent), absent.size());
	EXPECT_EQ(code, static_cast<int64_t>(first_code.size()));
	EXPECT_FALSE(d.numbered_in_key_order());
}

/* d's values interned in first_code's order (their codes), then numbered on 7 threads: in byte order? */
void expect_numbered_on_threads_in_byte_order(KeyDictionary &d, const std::map<std::string, int64_t> &first_code)
{
	std::vector<int64_t> new_code = d.number_in_key_order(run_on_threads, 7);
	ASSERT_TRUE(d.numbered_in_key_order());
	ASSERT_EQ(new_code.size(), first_code.size());
	int64_t rank = 0;
	for (const auto &[value, code] : first_code)
	{
		ASSERT_EQ(new_code[static_cast<size_t>(code)], rank) << "renumbered in byte order";
		ASSERT_EQ(value_at(d, rank), value);
		ASSERT_EQ(d.find(bytes_of(value), value.size()), rank);
		++rank;
	}
}

void intern_as_first_coded(KeyDictionary &d, std::map<std::string, int64_t> &first_code, const std::string &v)
{
	int64_t code = d.intern(bytes_of(v), v.size());
	auto it = first_code.emplace(v, static_cast<int64_t>(first_code.size())).first;
	ASSERT_EQ(code, it->second);
}

TEST(KeyDictionary, ManyValuesNumberedInByteOrderOnThreads)
{
	/*
	 * Enough values that their sort runs in slices on threads and is merged
	 * (number_in_key_order's parallel_sort: a third of them share the
	 * prefix "SKU-", too many for one bucket of its sort_in_buckets):
	 * uuid-like random 16 bytes, text of up to 40 bytes, and the short and
	 * shared-prefix ones above, against std::map's byte order.
	 */
	std::mt19937_64 rng = seeded_rng();
	KeyDictionary d;
	std::map<std::string, int64_t> first_code;
	for (int i = 0; i < 300000; ++i)
	{
		std::string v;
		switch (rng() % 3)
		{
			case 0: v = random_value(rng); break;
			case 1:
				for (int b = 0; b < 16; ++b)
					v.push_back(static_cast<char>(rng() & 0xff));
				break;
			default:
				v = "SKU-" + std::to_string(rng() % 200000);
				v.append(rng() % 30, static_cast<char>('a' + rng() % 3));
		}
		intern_as_first_coded(d, first_code, v);
	}
	expect_numbered_on_threads_in_byte_order(d, first_code);
}

TEST(KeyDictionary, ManyValuesNumberedInByteOrderThroughBuckets)
{
	/*
	 * Values spread enough that the sort goes through buckets of the
	 * first bits in which they differ (sort_in_buckets), with ties in a
	 * bucket that only the whole value breaks: groups of values that
	 * share their first 8 or all 16 bytes and differ past them (longer
	 * ones, ones that end in zero bytes).  Three kinds of set: the
	 * buckets taken from the first word; every value sharing its first 8
	 * bytes, so that they come from the second; and every value sharing
	 * its first 16 bytes, where no bucket divides them.
	 */
	for (int kind = 0; kind < 3; ++kind)
	{
		SCOPED_TRACE(kind);
		std::mt19937_64 rng = seeded_rng();
		KeyDictionary d;
		std::map<std::string, int64_t> first_code;
		auto random_bytes = [&rng](size_t n) {
			std::string v;
			for (size_t b = 0; b < n; ++b)
				v.push_back(static_cast<char>(rng() % 8 == 0 ? 0 : rng() & 0xff));
			return v;
		};
		std::string common = kind == 0 ? "" : random_bytes(kind == 1 ? 8 : 16);
		std::vector<std::string> heads;
		for (int i = 0; i < 5000; ++i)
			heads.push_back(random_bytes(16 - common.size()));
		for (int i = 0; i < 280000; ++i)
		{
			std::string v = common;
			if (rng() % 4 == 0) /* a head shared with others, a tail of 0-20 bytes */
				v += heads[rng() % heads.size()] + random_bytes(rng() % 21);
			else
				v += random_bytes(16 - common.size() + (rng() % 8 == 0 ? rng() % 5 : 0));
			intern_as_first_coded(d, first_code, v);
		}
		expect_numbered_on_threads_in_byte_order(d, first_code);
	}
}

TEST(KeyDictionary, StagedBatchesTakeTheCodesOfOneByOne)
{
	/*
	 * A read codes a batch at once (stage, then intern_staged): the codes
	 * must be those that interning each value as it came gives, and a
	 * staged value that no index names (a row a NULL skipped) must not
	 * enter the dictionary.  Batches of random sizes, values of every
	 * length class, longer ones with a shared 16-byte head, many repeats.
	 */
	std::mt19937_64 rng = seeded_rng();
	KeyDictionary batched, one_by_one;
	std::map<std::string, int64_t> named;
	for (int batch = 0; batch < 400; ++batch)
	{
		size_t n = rng() % 300;
		std::vector<int64_t> indices;
		std::vector<std::string> values;
		for (size_t i = 0; i < n; ++i)
		{
			std::string v = random_value(rng);
			int64_t index = batched.stage(bytes_of(v), v.size());
			ASSERT_GE(index, 0);
			if (rng() % 10 == 0) /* skipped: staged, never named */
				continue;
			indices.push_back(index);
			values.push_back(v);
		}
		batched.intern_staged(indices);
		ASSERT_EQ(indices.size(), values.size());
		for (size_t i = 0; i < values.size(); ++i)
		{
			int64_t expected = one_by_one.intern(bytes_of(values[i]), values[i].size());
			named.emplace(values[i], expected);
			ASSERT_EQ(indices[i], expected) << "batch " << batch << ", value " << i;
			ASSERT_EQ(value_at(batched, indices[i]), values[i]);
		}
		ASSERT_EQ(batched.size(), named.size()) << "only the values named are interned";
	}
}

TEST(KeyDictionary, AStagedIndexOutsideTheBatchIsAnInternalError)
{
	/* an index no stage gave since the last batch, or a negative one, never reads past the staged values */
	KeyDictionary d;
	std::string v = "a value";
	for (int64_t bad : {int64_t(1), int64_t(-2), int64_t(1) << 40})
	{
		std::vector<int64_t> indices{d.stage(bytes_of(v), v.size()), bad};
		ASSERT_EQ(indices[0], 0);
		try
		{
			d.intern_staged(indices);
			ADD_FAILURE() << "index " << bad << " was taken";
		}
		catch (const Error &e)
		{
			EXPECT_STREQ(e.sqlstate(), sqlstate::internal_error);
		}
		std::vector<int64_t> none;
		d.intern_staged(none); /* forgets what the failed batch staged */
	}
	std::vector<int64_t> stale{0};
	EXPECT_THROW(d.intern_staged(stale), Error) << "a batch's indices are gone after it";
}

TEST(KeyDictionary, SerializedValuesTakeTheCodesOfOneByOne)
{
	/*
	 * A parallel read's calling backend interns each worker's dictionary in
	 * its flat form (serialize, intern_serialized), in batches: the codes
	 * must be those of interning each value in turn, into a dictionary that
	 * already holds some of them; thousands of values, so that batches end
	 * amid a part.
	 */
	std::mt19937_64 rng = seeded_rng();
	KeyDictionary call, one_by_one;
	for (int part = 0; part < 6; ++part)
	{
		KeyDictionary worker;
		std::vector<std::string> values;
		size_t n = rng() % 3000;
		for (size_t i = 0; i < n; ++i)
		{
			std::string v = random_value(rng) + std::to_string(rng() % 2000);
			if (worker.intern(bytes_of(v), v.size()) == static_cast<int64_t>(values.size()))
				values.push_back(v);
		}
		std::vector<uint8_t> flat = written_bytes([&](ByteWriter &w) { worker.serialize(w); });
		ByteReader in(flat.data(), flat.size());
		std::vector<int64_t> codes = call.intern_serialized(in);
		EXPECT_TRUE(in.at_end());
		ASSERT_EQ(codes.size(), values.size());
		for (size_t i = 0; i < values.size(); ++i)
		{
			ASSERT_EQ(codes[i], one_by_one.intern(bytes_of(values[i]), values[i].size()))
				<< "part " << part << ", value " << i;
			ASSERT_EQ(value_at(call, codes[i]), values[i]);
		}
		ASSERT_EQ(call.size(), one_by_one.size());
	}
}

TEST(KeyDictionary, PartsTakeTheCodesOfOneByOne)
{
	/*
	 * A parallel read's calling backend interns all its workers'
	 * dictionaries at once (intern_parts): the known values found on
	 * threads, the others interned part after part.  The codes must be
	 * those of interning each part's values in turn, one by one, into a
	 * dictionary that holds some of them already (or none); parts that
	 * share most of their values, as a read whose rows do not cluster the
	 * ids gives, and parts of their own; empty parts.
	 */
	std::mt19937_64 rng = seeded_rng();
	for (int round = 0; round < 6; ++round)
	{
		KeyDictionary call, one_by_one;
		for (size_t i = 0, held = round % 3 == 0 ? 0 : rng() % 40000; i < held; ++i)
		{
			std::string v = "id " + std::to_string(rng() % 60000);
			call.intern(bytes_of(v), v.size());
			one_by_one.intern(bytes_of(v), v.size());
		}
		std::vector<std::vector<std::string>> values;
		std::vector<std::vector<uint8_t>> flats;
		for (size_t p = 0, parts = 1 + rng() % 9; p < parts; ++p)
		{
			KeyDictionary worker;
			values.emplace_back();
			bool shared = rng() % 3 != 0;
			for (size_t i = 0, n = rng() % 5 == 0 ? 0 : rng() % 50000; i < n; ++i)
			{
				std::string v = shared ? "id " + std::to_string(rng() % 60000) : random_value(rng) + std::to_string(p);
				if (worker.intern(bytes_of(v), v.size()) == static_cast<int64_t>(values.back().size()))
					values.back().push_back(v);
			}
			flats.push_back(written_bytes([&](ByteWriter &w) { worker.serialize(w); }));
		}
		std::vector<KeyDictionary::SerializedValues> parts;
		for (const std::vector<uint8_t> &flat : flats)
		{
			ByteReader in(flat.data(), flat.size());
			parts.push_back(KeyDictionary::read_serialized(in));
			EXPECT_TRUE(in.at_end());
		}
		std::vector<std::vector<int64_t>> codes = call.intern_parts(parts, run_on_threads);
		ASSERT_EQ(codes.size(), values.size());
		for (size_t p = 0; p < values.size(); ++p)
		{
			ASSERT_EQ(codes[p].size(), values[p].size());
			for (size_t i = 0; i < values[p].size(); ++i)
			{
				ASSERT_EQ(codes[p][i], one_by_one.intern(bytes_of(values[p][i]), values[p][i].size()))
					<< "round " << round << ", part " << p << ", value " << i;
				ASSERT_EQ(value_at(call, codes[p][i]), values[p][i]);
			}
		}
		ASSERT_EQ(call.size(), one_by_one.size());
	}
}

TEST(KeyBytes, HoldsEveryValueAsItCameUntilCleared)
{
	std::mt19937_64 rng = seeded_rng();
	KeyBytes held;
	for (int round = 0; round < 3; ++round)
	{
		std::vector<std::string> values;
		size_t n = 1 + rng() % 5000;
		for (size_t i = 0; i < n; ++i)
		{
			/* every size from 0 to 40, around the inline copy's 8 and 16 */
			std::string v(rng() % 41, '\0');
			for (char &c : v)
				c = static_cast<char>(rng());
			ASSERT_EQ(held.hold(bytes_of(v), v.size()), static_cast<int64_t>(i));
			values.push_back(v);
		}
		ASSERT_EQ(held.size(), n);
		for (size_t i = 0; i < n; ++i)
			ASSERT_EQ(std::string(reinterpret_cast<const char *>(held.value(static_cast<int64_t>(i))),
								  held.value_size(static_cast<int64_t>(i))),
					  values[i]);
		held.clear();
		ASSERT_EQ(held.size(), 0u);
	}
}

TEST(CallKeys, SettleRenumbersEveryColumnCodedFromADictionary)
{
	std::mt19937_64 rng = seeded_rng();
	CallKeys keys;
	KeyDictionary &d = *keys.key("store_id", KeyType::Text).dictionary;
	EXPECT_EQ(keys.key("store_id", KeyType::Uuid).type, KeyType::Text) << "a key keeps its first type";
	EXPECT_EQ(keys.key("cart_id", KeyType::Integer).dictionary, nullptr);
	IdColumn ids;
	Int64Column rows;
	std::vector<std::string> id_values, row_values;
	keys.code_column("store_id", &ids);
	keys.code_column("store_id", &rows);
	constexpr int64_t kFallback = INT64_MIN; /* a NULL's fallback, which is no code */
	/* two reads: the second brings values that fall between the first's */
	for (int read = 0; read < 2; ++read)
	{
		for (int i = 0; i < 5000; ++i)
		{
			std::string v = random_value(rng);
			ids.push_back(d.intern(bytes_of(v), v.size()));
			id_values.push_back(v);
			if (rng() % 10 == 0)
			{
				rows.push_back(kFallback);
				row_values.push_back("NULL");
			}
			else
			{
				std::string w = random_value(rng);
				rows.push_back(d.intern(bytes_of(w), w.size()));
				row_values.push_back(w);
			}
		}
		keys.settle();
		ASSERT_TRUE(d.numbered_in_key_order());
		for (size_t r = 0; r < ids.size(); ++r)
			ASSERT_EQ(value_at(d, ids.value_of(ids.code(r))), id_values[r]) << "row " << r << " of read " << read;
		for (size_t r = 0; r < rows.size(); ++r)
			if (row_values[r] == "NULL")
				ASSERT_EQ(rows[r], kFallback);
			else
				ASSERT_EQ(value_at(d, rows[r]), row_values[r]) << "row " << r << " of read " << read;
		/* the ids ascend with the values: a tie rule that compares ids compares values */
		std::vector<int32_t> order = ids.codes_in_id_order();
		for (size_t i = 1; i < order.size(); ++i)
			ASSERT_LT(value_at(d, ids.value_of(order[i - 1])), value_at(d, ids.value_of(order[i])));
	}
	keys.forget(&rows);
	std::string v(20, 'q');
	d.intern(bytes_of(v), v.size());
	int64_t before = rows[0];
	keys.settle();
	EXPECT_EQ(rows[0], before) << "a forgotten column is no longer renumbered";
}

TEST(CallKeys, PartsOfEitherCodingTakeTheCallsCodesOfTheirValues)
{
	/*
	 * A parallel read's worker codes its values through a dictionary of
	 * its own, and holds code c as c itself in an IdColumn's part
	 * (lane_to_call_codes, told the part's lane), as c x stride + lane in
	 * an Int64Column (recode_lanes, the calling backend's lane 0 beside
	 * the workers').  Either way each value comes out as the call's code of
	 * its value; a NULL's fallback stays; a code past the lane's
	 * dictionary, or a lane never learned, is an internal error.
	 */
	std::mt19937_64 rng = seeded_rng();
	CallKeys keys;
	KeyDictionary &call = *keys.key("user_id", KeyType::Uuid).dictionary;
	constexpr int64_t kStride = 5;
	std::vector<KeyDictionary> workers(kStride - 1);
	std::vector<std::vector<std::string>> values(workers.size());
	for (size_t w = 0; w < workers.size(); ++w)
	{
		for (int i = 0; i < 3000; ++i)
		{
			std::string v = random_value(rng);
			if (workers[w].intern(bytes_of(v), v.size()) == static_cast<int64_t>(values[w].size()))
				values[w].push_back(v);
		}
		std::vector<int64_t> codes;
		for (const std::string &v : values[w])
			codes.push_back(call.intern(bytes_of(v), v.size()));
		keys.learn_lane("user_id", static_cast<int64_t>(w) + 1, codes);
	}
	Int64Column strided; /* every lane's rows, the calling backend's (lane 0: the call's own codes) first */
	std::vector<int64_t> strided_expected;
	for (int64_t code = 0; code < static_cast<int64_t>(call.size()); code += 7)
	{
		strided.push_back(code * kStride);
		strided_expected.push_back(code);
	}
	for (size_t w = 0; w < workers.size(); ++w)
	{
		int64_t lane = static_cast<int64_t>(w) + 1;
		std::vector<int64_t> own;
		for (size_t c = 0; c < values[w].size(); ++c)
		{
			own.push_back(static_cast<int64_t>(c));
			strided.push_back(static_cast<int64_t>(c) * kStride + lane);
		}
		own.push_back(-1);
		strided.push_back(-1);
		keys.lane_to_call_codes("user_id", lane, own.data(), own.size());
		strided_expected.insert(strided_expected.end(), own.begin(), own.end());
		EXPECT_EQ(own.back(), -1) << "a NULL's fallback stays";
		for (size_t c = 0; c < values[w].size(); ++c)
			ASSERT_EQ(value_at(call, own[c]), values[w][c]);
		int64_t past = static_cast<int64_t>(values[w].size());
		EXPECT_THROW(keys.lane_to_call_codes("user_id", lane, &past, 1), Error);
	}
	keys.recode_lanes("user_id", strided, kStride, run_on_threads);
	ASSERT_EQ(strided.size(), strided_expected.size());
	for (size_t r = 0; r < strided.size(); ++r)
		ASSERT_EQ(strided[r], strided_expected[r]) << "row " << r;
	int64_t code = 0;
	EXPECT_THROW(keys.lane_to_call_codes("user_id", kStride, &code, 1), Error);
	EXPECT_THROW(keys.lane_to_call_codes("product_id", 1, &code, 1), Error);
	Int64Column past;
	past.push_back(static_cast<int64_t>(values[0].size()) * kStride + 1);
	EXPECT_THROW(keys.recode_lanes("user_id", past, kStride, run_serially), Error);
}

TEST(IdColumn, MapIdsKeepsCodesAndCounts)
{
	IdColumn ids;
	for (int64_t id : {3, 1, 3, 0, 2, 1, 3})
		ids.push_back(id);
	std::vector<int64_t> counts = ids.counts();
	std::vector<int32_t> codes;
	for (size_t r = 0; r < ids.size(); ++r)
		codes.push_back(ids.code(r));
	std::vector<int64_t> to{10, 5, 7, 2}; /* 0 -> 10, 1 -> 5, 2 -> 7, 3 -> 2 */
	ids.map_ids([&to](int64_t id) { return to[static_cast<size_t>(id)]; });
	EXPECT_EQ(ids.counts(), counts);
	for (size_t r = 0; r < ids.size(); ++r)
		EXPECT_EQ(ids.code(r), codes[r]);
	EXPECT_EQ(ids.value_of(ids.code(0)), 2);
	EXPECT_EQ(ids.value_of(ids.code(1)), 5);
	EXPECT_EQ(ids.find(10), ids.code(3));
	EXPECT_EQ(ids.find(3), -1);
	EXPECT_FALSE(ids.numbered_in_id_order());
}

} // namespace
} // namespace gpurec
