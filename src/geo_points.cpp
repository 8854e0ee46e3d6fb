/*
 * geo_points.cpp: the geospatial recommender's inputs as the CPU path
 * holds them: the points grouped per user (CSR, each user's points in
 * input order) and the candidates, each with cos(latitude) under haversine.
 * The GPU groups the points the same way on the device (geo_kernels.hpp).
 */
#include "no_postgres.hpp"

#include "geo_internal.hpp"

#include <functional>
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

/* The CSR of valid points, stable: each user's points in input order. */
GeoPointSet build_point_set(const GeoPoints &points, GeoMetric metric,
							const std::function<void()> &interrupt_point = [] {})
{
	size_t n = points.user.size();
	GeoPointSet set;
	set.metric = metric;
	int32_t n_users = static_cast<int32_t>(points.user.distinct());
	set.user_ids = points.user.values();
	set.offsets.assign(n_users + 1, 0);
	const std::vector<int64_t> &counts = points.user.counts();
	std::partial_sum(counts.begin(), counts.end(), set.offsets.begin() + 1);
	std::vector<int64_t> fill(set.offsets.begin(), set.offsets.end() - 1);
	set.x.resize(n);
	set.y.resize(n);
	for (size_t row = 0; row < n; ++row)
	{
		if ((row & (kCheckRows - 1)) == 0)
			interrupt_point();
		int64_t at = fill[points.user.code(row)]++;
		set.x[at] = points.x[row];
		set.y[at] = points.y[row];
	}
	if (metric == GeoMetric::Haversine)
		set.cos_lat = cos_latitudes(set.y);
	return set;
}

} // namespace

/* The CPU path's grouping, counted as its compute. */
GeoPointSet grouped_on_cpu(const GeoPoints &points, GeoMetric metric, ExecContext &ctx)
{
	Stopwatch clock;
	GeoPointSet set = build_point_set(points, metric, [&ctx] { ctx.interrupt_point(Phase::Compute); });
	ctx.times.compute_ms += clock.elapsed_ms();
	return set;
}

GeoCandidateSet candidate_set(const GeoCandidates &candidates, GeoMetric metric)
{
	GeoCandidateSet set;
	size_t n = candidates.id.size();
	set.x = candidates.x.to_vector();
	set.y = candidates.y.to_vector();
	for (size_t i = 0; i < n; ++i)
		check_coordinates(set.x[i], set.y[i], metric, "candidate", candidates.id[i]);
	if (metric == GeoMetric::Haversine)
		set.cos_lat = cos_latitudes(set.y);
	return set;
}

GeoPointSet group_points(const GeoPoints &points, const GeoOptions &options)
{
	check_geo_input(points, options);
	return build_point_set(points, options.metric);
}

} // namespace gpurec
