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
	/*
	 * Each user's points together: each worker thread owns a range of users
	 * holding about as many points as the others and scans every row for
	 * them, so no slot is written by two threads and no counter is shared;
	 * the rows' order within a user does not matter, as the sort below
	 * settles it.
	 */
	size_t threads = parallel_workers(n_users, ctx);
	std::vector<size_t> owners =
		split_by_cost(n_users, static_cast<double>(n) / static_cast<double>(std::max<size_t>(1, threads)),
					  [&](size_t u) { return static_cast<double>(counts[u]); });
	parallel_for(owners.size() - 1, ctx, [&](size_t part, size_t, const std::atomic<bool> &cancelled) {
		auto lo = static_cast<int32_t>(owners[part]), hi = static_cast<int32_t>(owners[part + 1]);
		std::vector<int64_t> fill(set.offsets.begin() + lo, set.offsets.begin() + hi);
		for (size_t row = 0; row < n; ++row)
		{
			if ((row & (kCheckRows - 1)) == 0 && cancelled.load(std::memory_order_relaxed))
				return;
			int32_t u = points.codes[row];
			if (u < lo || u >= hi)
				continue;
			auto at = static_cast<size_t>(fill[u - lo]++);
			set.x[at] = points.x[row];
			set.y[at] = points.y[row];
		}
	});
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

GeoCandidateSet candidate_set(const GeoCandidates &candidates, GeoMetric metric, const CallKeys *keys)
{
	GeoCandidateSet set;
	size_t n = candidates.id.size();
	set.x = candidates.x.to_vector();
	set.y = candidates.y.to_vector();
	/* the candidate named: the least id with a bad point, whatever order the rows came in */
	size_t named = n;
	for (size_t i = 0; i < n; ++i)
		if (!point_in_range(set.x[i], set.y[i], metric) && (named == n || candidates.id[i] < candidates.id[named]))
			named = i;
	if (named < n)
		check_coordinates(set.x[named], set.y[named], metric, "candidate", candidates.id[named], keys);
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
