/*
 * geo_points.cpp: the geospatial recommender's inputs as the CPU path
 * holds them: the points grouped per user (CSR, each user's points in
 * point order) and the candidates, each with cos(latitude) under haversine.
 * The GPU groups the points the same way on the device (geo_kernels.hpp).
 */
#include "no_postgres.hpp"

#include "cpu_parallel.hpp"
#include "geo_internal.hpp"
#include "key_dictionary.hpp"

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstring>
#include <numeric>
#include <utility>

namespace gpurec {

namespace {

/* Rows a single-threaded CPU loop handles between interrupt checks (a few milliseconds). */
constexpr size_t kCheckRows = size_t(1) << 18;

/* cos(latitude) of every latitude, which the haversine key takes with it. */
template <typename Vector> Vector cos_latitudes(const Vector &latitude)
{
	Vector out(latitude.size());
	for (size_t i = 0; i < latitude.size(); ++i)
		out[i] = geo::cos_latitude(latitude[i]);
	return out;
}

/*
 * Each point on the unit sphere (geo_pairs.hpp orders distances by these
 * chords): the library's sine and cosine, whose last bits do not reach any
 * result, as only the exact keys of the nearest points do.
 */
void unit_vectors(GeoPointSet &set, ExecContext &ctx)
{
	size_t n = static_cast<size_t>(set.points());
	set.ux.resize(n);
	set.uy.resize(n);
	set.uz.resize(n);
	constexpr double kRadiansPerDegree = geo::kPi / 180.0;
	for_each_in_blocks(n, size_t(1) << 16, ctx, [&](size_t, size_t, size_t i) {
		double lon = set.x[i] * kRadiansPerDegree, lat = set.y[i] * kRadiansPerDegree;
		double c = std::cos(lat);
		set.ux[i] = c * std::cos(lon);
		set.uy[i] = c * std::sin(lon);
		set.uz[i] = std::sin(lat);
	});
}

/* A point's place in its user's order: x's key, then y's (geo::point_order_key). */
struct PointKey
{
	uint64_t x, y;
	bool operator<(const PointKey &o) const { return x != o.x ? x < o.x : y < o.y; }
};

/* The coordinate whose point_order_key is key. */
double coordinate_of(uint64_t key)
{
	uint64_t bits = (key >> 63) ? key & ~(uint64_t(1) << 63) : ~key;
	double v;
	std::memcpy(&v, &bits, sizeof v);
	return v;
}

/* Rows a pass of place_points counts or places as one item of parallel_for. */
constexpr size_t kBlockRows = size_t(1) << 16;

/*
 * Each user's points together in set (its offsets made), in any order
 * within a user: a counting sort of the rows by owner, an owner being a
 * range of users holding about as many points as the others.  Each block
 * of rows counts its rows of each owner; then writes their indices (of
 * type Index) where that owner's points go, after the blocks before it;
 * then each owner moves its users' points to their places, reading only
 * its own rows.  Every row is read a fixed number of times, whatever the
 * threads and whatever order the rows come in: where each thread scanned
 * every row for its own users, users numbered in another order than the
 * rows' (uuid or text ids, numbered in their values' order) had each
 * thread read nearly every line of x and y.
 */
template <typename Index> void place_points(const GeoRows &points, GeoPointSet &set, ExecContext &ctx)
{
	size_t n = points.codes.size(), n_users = points.user_ids.size();
	const std::vector<int64_t> &counts = points.counts;
	size_t threads = parallel_workers(n_users, ctx);
	std::vector<size_t> owners =
		split_by_cost(n_users, static_cast<double>(n) / static_cast<double>(std::max<size_t>(1, threads)),
					  [&](size_t u) { return static_cast<double>(counts[u]); });
	size_t n_owners = owners.size() - 1, blocks = (n + kBlockRows - 1) / kBlockRows;
	std::vector<uint32_t> owner_of(n_users);
	for (size_t o = 0; o < n_owners; ++o)
		std::fill(owner_of.begin() + static_cast<std::ptrdiff_t>(owners[o]),
				  owner_of.begin() + static_cast<std::ptrdiff_t>(owners[o + 1]), static_cast<uint32_t>(o));
	/* each block's rows placed where its owner's rows go (owner o's from set.offsets[owners[o]]) */
	std::vector<size_t> block_bounds(blocks + 1);
	for (size_t block = 0; block <= blocks; ++block)
		block_bounds[block] = std::min(n, block * kBlockRows);
	PieceRunner run = pieces_on_threads(ctx, Phase::Compute);
	BucketPlacement by_owner(
		std::move(block_bounds), n_owners, [&](size_t row) { return owner_of[static_cast<size_t>(points.codes[row])]; },
		run);
	BulkVector<Index> rows(n);
	by_owner.place([&](size_t row, size_t position) { rows[position] = static_cast<Index>(row); });
	parallel_for(n_owners, ctx, [&](size_t owner, size_t, const std::atomic<bool> &cancelled) {
		size_t lo = owners[owner], hi = owners[owner + 1];
		std::vector<int64_t> fill(set.offsets.begin() + static_cast<std::ptrdiff_t>(lo),
								  set.offsets.begin() + static_cast<std::ptrdiff_t>(hi));
		for (auto i = static_cast<size_t>(set.offsets[lo]), end = static_cast<size_t>(set.offsets[hi]); i < end; ++i)
		{
			if ((i & (kCheckRows - 1)) == 0 && cancelled.load(std::memory_order_relaxed))
				return;
			size_t row = rows[i];
			auto place = static_cast<size_t>(fill[static_cast<size_t>(points.codes[row]) - lo]++);
			set.x[place] = points.x[row];
			set.y[place] = points.y[row];
		}
	});
}

/*
 * The CSR of valid points: users by code (ascending ids), each user's
 * points by (x, y) in point order (geo::point_order_key), so that every sum
 * over them runs in one order however the rows arrived: in the query's
 * order, or from parallel workers in any order.  On every core.
 */
GeoPointSet build_point_set(const GeoRows &points, GeoMetric metric, ExecContext &ctx)
{
	size_t n = points.codes.size();
	GeoPointSet set;
	set.metric = metric;
	size_t n_users = points.user_ids.size();
	set.user_ids = points.user_ids;
	set.offsets.assign(n_users + 1, 0);
	const std::vector<int64_t> &counts = points.counts;
	std::partial_sum(counts.begin(), counts.end(), set.offsets.begin() + 1);
	set.x.resize(n);
	set.y.resize(n);
	if (n <= UINT32_MAX)
		place_points<uint32_t>(points, set, ctx);
	else
		place_points<uint64_t>(points, set, ctx);
	/* then each user's points in point order */
	std::vector<size_t> bounds =
		split_by_cost(n_users, 1 << 16, [&](size_t u) { return static_cast<double>(counts[u]); });
	parallel_for(bounds.size() - 1, ctx, [&](size_t part, size_t, const std::atomic<bool> &cancelled) {
		std::vector<PointKey> keyed;
		for (size_t u = bounds[part]; u < bounds[part + 1] && !cancelled; ++u)
		{
			auto begin = static_cast<size_t>(set.offsets[u]), end = static_cast<size_t>(set.offsets[u + 1]);
			keyed.clear();
			for (size_t i = begin; i < end; ++i)
				keyed.push_back({geo::point_order_key(set.x[i]), geo::point_order_key(set.y[i])});
			std::sort(keyed.begin(), keyed.end());
			for (size_t i = 0; i < keyed.size(); ++i)
			{
				set.x[begin + i] = coordinate_of(keyed[i].x);
				set.y[begin + i] = coordinate_of(keyed[i].y);
			}
		}
	});
	if (metric == GeoMetric::Haversine)
	{
		set.cos_lat = cos_latitudes(set.y);
		unit_vectors(set, ctx);
	}
	return set;
}

} // namespace

/* The CPU path's grouping, counted as its compute. */
GeoPointSet grouped_on_cpu(const GeoRows &points, GeoMetric metric, ExecContext &ctx)
{
	Stopwatch clock;
	GeoPointSet set = build_point_set(points, metric, ctx);
	ctx.times.compute_ms += clock.elapsed_ms();
	return set;
}

void check_candidates(const GeoCandidates &candidates, GeoMetric metric, const CallKeys *keys)
{
	/* the candidate named: the least id with a bad point, whatever order the rows came in */
	size_t n = candidates.id.size();
	size_t named = n;
	for (size_t i = 0; i < n; ++i)
		if (!point_in_range(candidates.x[i], candidates.y[i], metric) &&
			(named == n || candidates.id[i] < candidates.id[named]))
			named = i;
	if (named < n)
		check_coordinates(candidates.x[named], candidates.y[named], metric, "candidate", candidates.id[named], keys);
}

GeoCandidateSet candidate_set(const GeoCandidates &candidates, GeoMetric metric, const CallKeys *keys)
{
	check_candidates(candidates, metric, keys);
	GeoCandidateSet set;
	set.x = candidates.x.to_vector();
	set.y = candidates.y.to_vector();
	if (metric == GeoMetric::Haversine)
		set.cos_lat = cos_latitudes(set.y);
	return set;
}

GeoPointSet group_points(const GeoPoints &points, const GeoOptions &options)
{
	ExecContext ctx;
	check_geo_input(points, options, ctx);
	return build_point_set(rows_of(points), options.metric, ctx);
}

} // namespace gpurec
