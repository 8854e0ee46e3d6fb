/*
 * geo_points.cpp: the geospatial recommender's inputs as the CPU path
 * holds them: the points grouped per user (CSR, each user's points in
 * input order) and the candidates, each with cos(latitude) under haversine.
 * The GPU groups the points the same way on the device (geo_kernels.hpp).
 */
#include "no_postgres.hpp"

#include "cpu_parallel.hpp"
#include "geo_internal.hpp"

#include <algorithm>
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

/* The order of two points of one user: x, then y, by value, then by bit pattern (-0 before 0). */
struct PointKey
{
	int64_t x_key, y_key;
	uint64_t x_bits, y_bits;
	bool operator<(const PointKey &o) const
	{
		if (x_key != o.x_key)
			return x_key < o.x_key;
		if (y_key != o.y_key)
			return y_key < o.y_key;
		if (x_bits != o.x_bits)
			return x_bits < o.x_bits;
		return y_bits < o.y_bits;
	}
};

PointKey point_key(double x, double y)
{
	PointKey k{order_key_from_double(x), order_key_from_double(y), 0, 0};
	std::memcpy(&k.x_bits, &x, sizeof x);
	std::memcpy(&k.y_bits, &y, sizeof y);
	return k;
}

} // namespace

void order_points(IdColumn &user, FloatColumn &x, FloatColumn &y, ExecContext &ctx)
{
	size_t n = user.size();
	std::vector<int32_t> by_id = user.codes_in_id_order();
	std::vector<int32_t> rank(by_id.size());
	std::vector<int64_t> ids(by_id.size()), counts(by_id.size()), offsets(by_id.size() + 1, 0);
	for (size_t r = 0; r < by_id.size(); ++r)
	{
		rank[by_id[r]] = static_cast<int32_t>(r);
		ids[r] = user.value_of(by_id[r]);
		counts[r] = user.counts()[by_id[r]];
		offsets[r + 1] = offsets[r] + counts[r];
	}
	/*
	 * Each user's points together, users in id order, straight into the
	 * ordered columns (their chunks made first, written in place).  Each
	 * worker thread owns a range of users holding about as many points as
	 * the others and scans every row for them: no slot is written by two
	 * threads and no counter is shared, and the rows' order within a user
	 * does not matter, as the sort below settles it.
	 */
	FloatColumn ordered_x, ordered_y;
	ordered_x.append(n, [](double *, size_t, size_t) {});
	ordered_y.append(n, [](double *, size_t, size_t) {});
	/* each row's user rank, looked up once on every core, not by every thread below at random */
	BulkVector<int32_t> rank_of_row(n);
	for_each_in_blocks(
		n, size_t(1) << 16, ctx, [&](size_t, size_t, size_t row) { rank_of_row[row] = rank[user.code(row)]; },
		Phase::Read);
	size_t threads = parallel_workers(by_id.size(), ctx);
	std::vector<size_t> owners = split_by_cost(
		by_id.size(), static_cast<double>(n) / static_cast<double>(std::max<size_t>(1, threads)),
		[&](size_t u) { return static_cast<double>(counts[u]); });
	parallel_for(
		owners.size() - 1, ctx,
		[&](size_t part, size_t, const std::atomic<bool> &cancelled) {
			int32_t lo = static_cast<int32_t>(owners[part]), hi = static_cast<int32_t>(owners[part + 1]);
			std::vector<int64_t> fill(offsets.begin() + lo, offsets.begin() + hi);
			for (size_t row = 0; row < n; ++row)
			{
				if ((row & (kCheckRows - 1)) == 0 && cancelled.load(std::memory_order_relaxed))
					return;
				int32_t r = rank_of_row[row];
				if (r < lo || r >= hi)
					continue;
				auto at = static_cast<size_t>(fill[r - lo]++);
				ordered_x[at] = x[row];
				ordered_y[at] = y[row];
			}
		},
		Phase::Read);
	/* then each user's points by (x, y), on every core */
	std::vector<size_t> bounds =
		split_by_cost(by_id.size(), 1 << 16, [&](size_t u) { return static_cast<double>(counts[u]); });
	parallel_for(
		bounds.size() - 1, ctx,
		[&](size_t part, size_t, const std::atomic<bool> &cancelled) {
			std::vector<std::pair<PointKey, size_t>> keyed;
			std::vector<double> sx, sy;
			for (size_t u = bounds[part]; u < bounds[part + 1] && !cancelled; ++u)
			{
				size_t begin = static_cast<size_t>(offsets[u]), end = static_cast<size_t>(offsets[u + 1]);
				keyed.clear();
				sx.clear();
				sy.clear();
				for (size_t i = begin; i < end; ++i)
				{
					keyed.emplace_back(point_key(ordered_x[i], ordered_y[i]), i - begin);
					sx.push_back(ordered_x[i]);
					sy.push_back(ordered_y[i]);
				}
				std::sort(keyed.begin(), keyed.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
				for (size_t i = 0; i < keyed.size(); ++i)
				{
					ordered_x[begin + i] = sx[keyed[i].second];
					ordered_y[begin + i] = sy[keyed[i].second];
				}
			}
		},
		Phase::Read);
	user = IdColumn::grouped(ids, counts, pieces_on_threads(ctx, Phase::Read));
	x = std::move(ordered_x);
	y = std::move(ordered_y);
}

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
