/*
 * geo_shards.cpp: gpurec_shards' geospatial parts and their merge (see
 * geo_shards.hpp).
 */
#include "no_postgres.hpp"

#include "geo_shards.hpp"

#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "errors.hpp"

namespace gpurec {

namespace {

/* Every part's rows, one after the other; first_rows[p] is where part p's begin (and one past the last part). */
ShardRows read_parts(ShardRows rows, const std::vector<PartBytes> &parts, std::vector<size_t> &first_rows)
{
	first_rows.assign(1, 0);
	for (size_t p = 0; p < parts.size(); ++p)
	{
		rows.append(parts[p].data, parts[p].size, p);
		first_rows.push_back(rows.rows());
	}
	return rows;
}

/* Refuses the least key of column `column` that rows of two partitions hold (split). */
void refuse_split_keys(const ShardRows &rows, size_t column, const std::vector<size_t> &first_rows,
					   const SplitKey &split)
{
	std::unordered_map<int64_t, std::pair<size_t, size_t>> parts_of_key; /* least and greatest partition */
	for (size_t p = 0; p + 1 < first_rows.size(); ++p)
		for (size_t r = first_rows[p]; r < first_rows[p + 1]; ++r)
		{
			int64_t key = rows.int64(r, column);
			/* a key's rows mostly come one after another (a user's points): one look for each run */
			if (r > first_rows[p] && key == rows.int64(r - 1, column))
				continue;
			auto [at, fresh] = parts_of_key.try_emplace(key, p, p);
			if (!fresh)
			{
				at->second.first = std::min(at->second.first, p);
				at->second.second = std::max(at->second.second, p);
			}
		}
	const std::pair<const int64_t, std::pair<size_t, size_t>> *least = nullptr;
	for (const auto &entry : parts_of_key)
		if (entry.second.first != entry.second.second && (least == nullptr || entry.first < least->first))
			least = &entry;
	if (least)
		split(least->first, least->second.first, least->second.second);
}

} // namespace

ShardRows geo_points_rows() { return ShardRows("geo_points", 3); }

ShardRows geo_points_part(InputTable &points, const std::unordered_set<int64_t> *users)
{
	ShardRows part = geo_points_rows();
	const IdColumn &user = points.id(0);
	const FloatColumn &x = points.floats(1), &y = points.floats(2);
	for (size_t r = 0; r < points.rows(); ++r)
	{
		int64_t id = user.value_of(user.codes()[r]);
		if (users && users->count(id) == 0)
			continue;
		part.put(id);
		part.put(x[r]);
		part.put(y[r]);
	}
	return part;
}

void append_remote_points(InputTable &points, const ShardRows &remote, const int64_t *only_user)
{
	IdColumn &user = points.id(0);
	std::unordered_set<int64_t> own;
	for (size_t code = 0; code < user.distinct(); ++code)
		if (user.counts()[code] > 0)
			own.insert(user.value_of(static_cast<int32_t>(code)));
	FloatColumn &x = points.floats(1), &y = points.floats(2);
	size_t appended = 0;
	bool skip = false; /* the last row's user's: a user's points come one after another, one look for each run */
	for (size_t r = 0; r < remote.rows(); ++r)
	{
		int64_t id = remote.int64(r, 0);
		if (r == 0 || id != remote.int64(r - 1, 0))
			skip = own.count(id) != 0 || (only_user && id != *only_user);
		if (skip)
			continue;
		user.push_back(id);
		x.push_back(remote.float8(r, 1));
		y.push_back(remote.float8(r, 2));
		++appended;
	}
	points.count_rows(appended, 0);
}

std::vector<std::pair<int64_t, int64_t>> users_of_points(const ShardRows &points)
{
	std::vector<int64_t> users(points.rows());
	for (size_t r = 0; r < points.rows(); ++r)
		users[r] = points.int64(r, 0);
	std::sort(users.begin(), users.end());
	std::vector<std::pair<int64_t, int64_t>> counted;
	for (int64_t user : users)
		if (!counted.empty() && counted.back().first == user)
			++counted.back().second;
		else
			counted.emplace_back(user, 1);
	return counted;
}

ShardRows user_similarity_part(const std::vector<UserSimilarity> &rows)
{
	ShardRows part("user_similarity", 3);
	for (const UserSimilarity &row : rows)
	{
		part.put(row.user_id);
		part.put(row.similarity);
		part.put(row.mean_min_distance);
	}
	return part;
}

ShardRows similar_users_part(const std::vector<SimilarUser> &rows)
{
	ShardRows part("similar_users", 4);
	for (const SimilarUser &row : rows)
	{
		part.put(row.user_id);
		part.put(static_cast<int64_t>(row.rank));
		part.put(row.other_user_id);
		part.put(row.similarity);
	}
	return part;
}

ShardRows strengths_part(const std::vector<double> &strengths)
{
	ShardRows part("strengths", 1);
	for (double strength : strengths)
		part.put(strength);
	return part;
}

ShardRows merge_geo_points(const std::vector<PartBytes> &parts, const SplitKey &split)
{
	std::vector<size_t> first_rows;
	ShardRows points = read_parts(geo_points_rows(), parts, first_rows);
	refuse_split_keys(points, 0, first_rows, split);
	return points;
}

std::vector<UserSimilarity> merge_user_similarity(const std::vector<PartBytes> &parts, const SplitKey &split)
{
	std::vector<size_t> first_rows;
	ShardRows rows = read_parts(ShardRows("user_similarity", 3), parts, first_rows);
	refuse_split_keys(rows, 0, first_rows, split);
	std::vector<UserSimilarity> merged(rows.rows());
	for (size_t r = 0; r < rows.rows(); ++r)
		merged[r] = {rows.int64(r, 0), rows.float8(r, 1), rows.float8(r, 2)};
	std::stable_sort(merged.begin(), merged.end(),
					 [](const UserSimilarity &a, const UserSimilarity &b) { return a.user_id < b.user_id; });
	return merged;
}

std::vector<SimilarUser> merge_similar_users(const std::vector<PartBytes> &parts, const ShardRows &points,
											 const std::string &cluster)
{
	std::vector<size_t> first_rows;
	ShardRows rows = read_parts(ShardRows("similar_users", 4), parts, first_rows);
	/* (a user's points, and a user's list, come one row after another: one look for each run) */
	std::unordered_set<int64_t> users_with_points;
	for (size_t r = 0; r < points.rows(); ++r)
		if (r == 0 || points.int64(r, 0) != points.int64(r - 1, 0))
			users_with_points.insert(points.int64(r, 0));
	size_t expected = users_with_points.size() >= 2 ? users_with_points.size() : 0;
	/* each user's list whole from one partition: the distinct (user, partition) pairs are as many as the users */
	std::unordered_map<int64_t, size_t> part_of_user;
	part_of_user.reserve(users_with_points.size());
	size_t lists = 0;
	for (size_t p = 0; p + 1 < first_rows.size(); ++p)
		for (size_t r = first_rows[p]; r < first_rows[p + 1]; ++r)
		{
			if (r > first_rows[p] && rows.int64(r, 0) == rows.int64(r - 1, 0))
				continue;
			auto [at, fresh] = part_of_user.try_emplace(rows.int64(r, 0), p);
			lists += fresh || at->second != p;
		}
	if (part_of_user.size() != expected || lists != part_of_user.size())
		throw Error(sqlstate::internal_error,
					"the partitions of cluster \"" + cluster + "\" divided the users differently",
					std::to_string(expected) + " users have points; the partitions ranked " +
						std::to_string(part_of_user.size()) + ", " + std::to_string(lists) + " times in all.",
					"The partitions divide the users as their devices do: set gpurec.device alike on every "
					"partition (gpu on all, or cpu on all).");
	std::vector<SimilarUser> merged(rows.rows());
	for (size_t r = 0; r < rows.rows(); ++r)
		merged[r] = {rows.int64(r, 0), static_cast<int32_t>(rows.int64(r, 1)), rows.int64(r, 2), rows.float8(r, 3)};
	auto before = [](const SimilarUser &a, const SimilarUser &b) {
		return a.user_id != b.user_id ? a.user_id < b.user_id : a.rank < b.rank;
	};
	/* the partitions rank ranges of the users in id order: their lists come sorted, but for a check */
	if (!std::is_sorted(merged.begin(), merged.end(), before))
		std::stable_sort(merged.begin(), merged.end(), before);
	return merged;
}

std::vector<double> merge_strengths(const std::vector<PartBytes> &parts)
{
	std::vector<double> sums;
	for (size_t p = 0; p < parts.size(); ++p)
	{
		ShardRows part("strengths", 1);
		part.append(parts[p].data, parts[p].size, p);
		if (p == 0)
			sums.assign(part.rows(), 0.0);
		else if (part.rows() != sums.size())
			throw Error(sqlstate::internal_error,
						"partition " + std::to_string(p) + " gave " + std::to_string(part.rows()) +
							" strengths, partition 0 " + std::to_string(sums.size()),
						"Every partition reads the same candidates from the coordinator.");
		for (size_t c = 0; c < sums.size(); ++c)
			sums[c] += part.float8(c, 0);
	}
	return sums;
}

} // namespace gpurec
