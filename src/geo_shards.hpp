/*
 * geo_shards.hpp: the geospatial family of gpurec_shards in the engine: the
 * parts a partition sends (ShardRows, partials.hpp) and the coordinator's
 * merge of them into the rows one server holding every point gives.
 *
 * A user's points live on one partition (points sharded by user).  A
 * partition computes with its own points and, where the function needs
 * other partitions' users (user_similarity's and predict_strength's main
 * user, every user for similar_users), with their points as the
 * coordinator gathered them (one geo_points part, sent to every partition
 * once): it appends those of the users it does not hold itself
 * (append_remote_points), so a partition that holds the main user reads it
 * once.  The answers come back as parts, which merge here.
 */
#pragma once

#include <functional>
#include <unordered_set>
#include <vector>

#include "geo.hpp"
#include "input_table.hpp"
#include "partials.hpp"

namespace gpurec {

/* The bytes of one partition's part, in partition order. */
struct PartBytes
{
	const uint8_t *data;
	size_t size;
};

/* split(key, least partition, greatest partition): a key two partitions hold; it throws. */
using SplitKey = std::function<void(int64_t, size_t, size_t)>;

/* user_id, x, y */
ShardRows geo_points_rows();
/*
 * The rows of a points table (user_id, x, y, as the geospatial functions
 * read it), of the users in `users` only where it is not null.
 */
ShardRows geo_points_part(InputTable &points, const std::unordered_set<int64_t> *users);
/*
 * Appends to a points table, before its users are numbered, the points of
 * `remote` whose user it holds no point of; of user *only_user alone where
 * only_user is not null (a main user: the partition's sums over users
 * would otherwise count the remote users too).
 */
void append_remote_points(InputTable &points, const ShardRows &remote, const int64_t *only_user);
/* The distinct users of a geo_points part, in id order, each with its number of points. */
std::vector<std::pair<int64_t, int64_t>> users_of_points(const ShardRows &points);

/* user_id, similarity, mean_min_distance */
ShardRows user_similarity_part(const std::vector<UserSimilarity> &rows);
/* user_id, rank, other_user_id, similarity */
ShardRows similar_users_part(const std::vector<SimilarUser> &rows);
/* strength, one row per candidate in the candidates' order */
ShardRows strengths_part(const std::vector<double> &strengths);

/* The partitions' geo_points parts as one (every user's points on one partition, else split). */
ShardRows merge_geo_points(const std::vector<PartBytes> &parts, const SplitKey &split);
/* The partitions' user_similarity rows in user_id order (a user on one partition, else split). */
std::vector<UserSimilarity> merge_user_similarity(const std::vector<PartBytes> &parts, const SplitKey &split);
/*
 * The partitions' similar_users lists in user and rank order: each list
 * whole from one partition, and every user of `points` (the merged
 * geo_points, where two or more users have points) ranked once, else
 * ERROR XX000 (the partitions divided the users differently: another
 * device on one).
 */
std::vector<SimilarUser> merge_similar_users(const std::vector<PartBytes> &parts, const ShardRows &points,
											 const std::string &cluster);
/* Each candidate's strength, the partitions' sums added in partition order. */
std::vector<double> merge_strengths(const std::vector<PartBytes> &parts);

} // namespace gpurec
