/*
 * test_geo_shards.cpp: gpurec_shards' parts (ShardRows, partials.hpp) and
 * the geospatial family's merge (geo_shards.hpp): values keep every bit,
 * parts concatenate, foreign bytes are refused, a user on two partitions
 * is refused naming the least such user, lists and sums merge as one
 * server's.
 */
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "../../src/geo_shards.hpp"
#include "../../src/partials.hpp"

namespace gpurec {
namespace {

uint64_t bits(double value)
{
	uint64_t word;
	std::memcpy(&word, &value, sizeof word);
	return word;
}

PartBytes span(const std::vector<uint8_t> &bytes) { return {bytes.data(), bytes.size()}; }

TEST(ShardRows, EveryBitTravelsAndPartsConcatenate)
{
	const double values[] = {0.30000000000000004, 0.3, 0.0001 / 3, 1e308, -0.0,
							 std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
							 -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::denorm_min()};
	ShardRows a = geo_points_rows(), b = geo_points_rows();
	int64_t id = std::numeric_limits<int64_t>::min();
	for (double v : values)
	{
		a.put(id);
		a.put(v);
		a.put(-v);
		id = id == std::numeric_limits<int64_t>::min() ? std::numeric_limits<int64_t>::max() : id - 1;
	}
	b.put(int64_t(7));
	b.put(1.5);
	b.put(2.5);
	std::vector<uint8_t> bytes = a.bytes(), more = b.bytes();
	bytes.insert(bytes.end(), more.begin(), more.end());
	ShardRows read = geo_points_rows();
	read.append(bytes.data(), bytes.size(), 0);
	ASSERT_EQ(read.rows(), a.rows() + 1);
	for (size_t r = 0; r < a.rows(); ++r)
	{
		EXPECT_EQ(read.int64(r, 0), a.int64(r, 0));
		EXPECT_EQ(bits(read.float8(r, 1)), bits(a.float8(r, 1)));
		EXPECT_EQ(bits(read.float8(r, 2)), bits(a.float8(r, 2)));
	}
	EXPECT_EQ(read.int64(a.rows(), 0), 7);
}

TEST(ShardRows, ForeignOrTruncatedBytesAreRefused)
{
	ShardRows a = geo_points_rows();
	a.put(int64_t(1));
	a.put(1.0);
	a.put(2.0);
	std::vector<uint8_t> bytes = a.bytes();
	for (size_t size = 1; size < bytes.size(); ++size)
	{
		ShardRows read = geo_points_rows();
		EXPECT_THROW(read.append(bytes.data(), size, 0), Error) << size << " bytes";
	}
	ShardRows other("user_similarity", 3);
	EXPECT_THROW(other.append(bytes.data(), bytes.size(), 0), Error);
	std::vector<uint8_t> longer = bytes;
	longer.push_back(0);
	ShardRows read = geo_points_rows();
	EXPECT_THROW(read.append(longer.data(), longer.size(), 0), Error);
}

ShardRows points_of_users(std::initializer_list<int64_t> users)
{
	ShardRows part = geo_points_rows();
	for (int64_t user : users)
	{
		part.put(user);
		part.put(double(user));
		part.put(-double(user));
	}
	return part;
}

TEST(GeoPartsMerge, AUserOnTwoPartitionsIsRefusedTheLeastFirst)
{
	std::vector<uint8_t> p0 = points_of_users({5, 9, 3}).bytes(), p1 = points_of_users({4, 4}).bytes(),
						 p2 = points_of_users({9, 3, 8}).bytes();
	int64_t split_user = 0;
	size_t least = 0, greatest = 0;
	SplitKey split = [&](int64_t user, size_t a, size_t b) {
		split_user = user;
		least = a;
		greatest = b;
		throw Error(sqlstate::invalid_parameter_value, "split");
	};
	EXPECT_THROW(merge_geo_points({span(p0), span(p1), span(p2)}, split), Error);
	EXPECT_EQ(split_user, 3);
	EXPECT_EQ(least, 0u);
	EXPECT_EQ(greatest, 2u);
	ShardRows merged = merge_geo_points({span(p0), span(p1)}, split);
	EXPECT_EQ(merged.rows(), 5u);
	EXPECT_EQ(users_of_points(merged), (std::vector<std::pair<int64_t, int64_t>>{{3, 1}, {4, 2}, {5, 1}, {9, 1}}));
}

TEST(GeoPartsMerge, ListsInUserAndRankOrderCoveringEveryUserOnce)
{
	std::vector<uint8_t> p0 = similar_users_part({{4, 1, 2, 0.5}, {4, 2, 9, 0.25}}).bytes(),
						 p1 = similar_users_part({{2, 1, 4, 0.5}, {9, 1, 4, 0.25}}).bytes();
	ShardRows points = points_of_users({2, 4, 9});
	std::vector<SimilarUser> rows = merge_similar_users({span(p1), span(p0)}, points, "c");
	ASSERT_EQ(rows.size(), 4u);
	EXPECT_EQ(rows[0].user_id, 2);
	EXPECT_EQ(rows[1].user_id, 4);
	EXPECT_EQ(rows[1].rank, 1);
	EXPECT_EQ(rows[2].rank, 2);
	EXPECT_EQ(rows[3].user_id, 9);
	/* a user ranked by two partitions, or not at all */
	EXPECT_THROW(merge_similar_users({span(p0), span(p1), span(p1)}, points, "c"), Error);
	EXPECT_THROW(merge_similar_users({span(p0)}, points, "c"), Error);
}

TEST(GeoPartsMerge, StrengthsAddInPartitionOrder)
{
	std::vector<uint8_t> p0 = strengths_part({1e16, 0.5}).bytes(), p1 = strengths_part({1.0, 0.25}).bytes(),
						 p2 = strengths_part({-1e16, 0.0}).bytes();
	std::vector<double> sums = merge_strengths({span(p0), span(p1), span(p2)});
	ASSERT_EQ(sums.size(), 2u);
	EXPECT_EQ(sums[0], (1e16 + 1.0) + -1e16); /* in partition order: 1e16 + 1 rounds first */
	EXPECT_EQ(sums[1], 0.75);
	std::vector<uint8_t> shorter = strengths_part({1.0}).bytes();
	EXPECT_THROW(merge_strengths({span(p0), span(shorter)}), Error);
}

} // namespace
} // namespace gpurec
