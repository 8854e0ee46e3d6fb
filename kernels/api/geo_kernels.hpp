/*
 * geo_kernels.hpp: the GPU half of the geospatial recommender.  The
 * arithmetic it shares with the CPU path is in geo_arithmetic.hpp.
 */
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "geo_arithmetic.hpp"
#include "geo_reach.hpp"
#include "kernel_api.hpp"

namespace gpurec::gpu {

/*
 * The points of a call as read, rows in any order: a dense user code per
 * row (0 .. users - 1, ascending with the user ids), x and y.  Per code:
 * its user_id and its number of points.
 */
struct GeoPointColumns
{
	ChunkedView<int32_t> user_codes;
	ChunkedView<double> x, y;
	const int64_t *user_ids = nullptr;
	const int64_t *points_per_user = nullptr;
	int32_t users = 0;
	bool haversine = false; /* x = longitude, y = latitude in degrees; else euclidean */
};

/* Candidate locations, one per input row; cos_lat (haversine only) is cos(latitude). */
struct GeoCandidateColumns
{
	const double *x = nullptr;
	const double *y = nullptr;
	const double *cos_lat = nullptr;
	size_t count = 0;
};

/* The points (and candidates) of one call on the device. */
class GeoSession;
struct GeoSessionDeleter
{
	void operator()(GeoSession *session) const noexcept;
};
using GeoSessionPtr = std::unique_ptr<GeoSession, GeoSessionDeleter>;

/*
 * Copies the points (valid ones: the caller checked them) and the
 * candidates, when given, to the GPU, and groups the points per user there:
 * by code, each user's points by (x, y) in point order
 * (geo::point_order_key), as the CPU path groups them.
 */
GeoSessionPtr open_geo_session(const GeoPointColumns &points, const GeoCandidateColumns *candidates,
							   CallContext &ctx);

/*
 * For every user u (by code): over the main user's points in order, the sum
 * of the distance to u's nearest point, floored at epsilon (floored[u]) and
 * raw (raw[u]).
 */
void geo_similarity_sums(GeoSession &session, int32_t main_user, double epsilon,
						 std::vector<double> &floored, std::vector<double> &raw);

/*
 * For every user u (by code) of part `part` of `parts`, the k others of
 * highest similarity to u: heaps[u * k .. u * k + sizes[u]), in heap order
 * (the caller sorts); the other parts' users keep sizes[u] = 0.  The parts
 * share out each class of users by point count, so that devices computing
 * a part each get about the same work; together they cover every user
 * once, and each user's heap holds what it holds unsplit.
 */
void geo_similar_users(GeoSession &session, int k, double epsilon, int part, int parts,
					   std::vector<SimilarityEntry> &heaps, std::vector<int32_t> &sizes);

/*
 * The same heaps, by a search bounded by the users' boxes: each user's
 * points are grouped into at most a few boxes (a box per place it goes),
 * and another user whose boxes are too far from u's to enter u's heap,
 * once full, is never compared point by point.  For k of at most
 * kMostBoundedOthers.  While `give_up` is set, the search compares every
 * pair at once where the users' boxes cover the map (points spread
 * evenly), and returns to comparing every pair where its first users
 * compared more than a quarter of their pairs anyway.  pairs: the point
 * pairs compared; all_pairs: every pair of the users searched.  False
 * where it compared every pair at once, without the boxes.
 */
constexpr int kMostBoundedOthers = 32;
/* GPU memory a bounded search's boxes take, at most, per user (kernels/geo.cu checks it against its layout). */
constexpr int64_t kBoundedBytesPerUser = 2 * 4 * 44 + 8 + 8;
bool geo_similar_users_bounded(GeoSession &session, int k, double epsilon, int part, int parts, bool give_up,
							   std::vector<SimilarityEntry> &heaps, std::vector<int32_t> &sizes, double &pairs,
							   double &all_pairs);

/*
 * The others that each user may rank where a pruned search has ruled the
 * rest out (src/geo_pruned.cpp): lists(users, n, offsets, others) gives,
 * for users[0, n) (codes), others[offsets[i], offsets[i + 1]) (n + 1
 * offsets from 0): distinct codes, none the user's own, among which are
 * all the users that can enter its k best, ties included.  Called from the
 * thread of geo_similar_users, one batch at a time.
 */
class GeoOtherLists
{
  public:
	virtual ~GeoOtherLists() = default;
	virtual void lists(const int32_t *users, int32_t n, std::vector<int64_t> &offsets, std::vector<int32_t> &others) = 0;
};

/*
 * geo_similar_users comparing each user only with its others of `lists`:
 * the same heaps, the users of each tile class in batches whose lists the
 * CPU makes while the GPU compares the previous batch's.  pairs: the point
 * pairs compared (the lists' length weighed by point counts).
 */
void geo_similar_users_listed(GeoSession &session, int k, double epsilon, int part, int parts,
							  GeoOtherLists &lists, std::vector<SimilarityEntry> &heaps, std::vector<int32_t> &sizes,
							  double &pairs);

/*
 * The strength of every candidate for the main user, one vector per power:
 * points of users other than the main user whose similarity to it is at
 * least min_similarity weigh by that similarity.  With `reach` (under
 * max_distance), each candidate reads only its reach's points through the
 * index of that grid (geo_reach.hpp), built on the session's first such
 * call and kept for the next: pass the same grid to every call of a session.
 */
std::vector<std::vector<double>> geo_strengths(GeoSession &session, int32_t main_user, double min_similarity,
											   const StrengthParams &params, const std::vector<PowerPlan> &powers,
											   const ReachGrid *reach);

} // namespace gpurec::gpu
