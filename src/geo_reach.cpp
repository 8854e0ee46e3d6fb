/*
 * geo_reach.cpp: the reach index of predict_strength and fit_exponent under
 * max_distance (kernels/api/geo_reach.hpp) as the CPU path holds it: the
 * grid from the data's bounds, the points in cell order, and the plan of
 * what each candidate reads.  The GPU builds the same order on the device
 * (kernels/geo.cu) from the same grid.
 */
#include "no_postgres.hpp"

#include "geo_internal.hpp"

#include <algorithm>
#include <cmath>

#include "cpu_parallel.hpp"

namespace gpurec {

ReachGrid reach_grid_of(const GeoRows &points, const GeoCandidateSet &cands, const StrengthParams &sp)
{
	/* min and max do not depend on the rows' order, so every device and process finds this grid */
	double lo_x = INFINITY, hi_x = -INFINITY, lo_y = INFINITY, hi_y = -INFINITY;
	auto cover = [&](double x, double y) {
		lo_x = std::min(lo_x, x);
		hi_x = std::max(hi_x, x);
		lo_y = std::min(lo_y, y);
		hi_y = std::max(hi_y, y);
	};
	for (size_t r = 0; r < points.x.size(); ++r)
		cover(points.x[r], points.y[r]);
	for (size_t c = 0; c < cands.size(); ++c)
		cover(cands.x[c], cands.y[c]);
	if (!(lo_x <= hi_x))
		lo_x = hi_x = lo_y = hi_y = 0;
	return reach_grid(sp, lo_x, hi_x, lo_y, hi_y, static_cast<int64_t>(points.x.size()));
}

CpuReachIndex reach_index_on_cpu(const GeoPointSet &s, const GeoCandidateSet &cands, const ReachGrid &grid,
								 ExecContext &ctx)
{
	Stopwatch clock;
	CpuReachIndex index;
	index.grid = grid;
	int64_t n = s.points();
	if (n > static_cast<int64_t>(UINT32_MAX))
		throw Error(sqlstate::program_limit_exceeded, "too many points for max_distance's index",
					std::to_string(n) + " points; at most 4294967295.");
	std::vector<uint32_t> cell(static_cast<size_t>(n));
	for_each_in_blocks(static_cast<size_t>(n), size_t(1) << 16, ctx, [&](size_t, size_t, size_t p) {
		cell[p] = grid.everywhere ? 0 : static_cast<uint32_t>(reach_cell(grid, s.x[p], s.y[p]));
	});
	/* a counting sort by cell, stable: each cell's points in point order, as the GPU's radix sort leaves them */
	index.cell_start.assign(static_cast<size_t>(grid.cells()) + 1, 0);
	for (uint32_t c : cell)
		++index.cell_start[c + 1];
	for (size_t c = 1; c < index.cell_start.size(); ++c)
		index.cell_start[c] += index.cell_start[c - 1];
	std::vector<int64_t> fill(index.cell_start.begin(), index.cell_start.end() - 1);
	index.point.resize(static_cast<size_t>(n));
	for (int64_t p = 0; p < n; ++p)
		index.point[static_cast<size_t>(fill[cell[p]]++)] = static_cast<uint32_t>(p);
	index.x.resize(static_cast<size_t>(n));
	index.y.resize(static_cast<size_t>(n));
	if (s.metric == GeoMetric::Haversine)
		index.cos_lat.resize(static_cast<size_t>(n));
	for_each_in_blocks(static_cast<size_t>(n), size_t(1) << 16, ctx, [&](size_t, size_t, size_t e) {
		uint32_t p = index.point[e];
		index.x[e] = s.x[p];
		index.y[e] = s.y[p];
		if (s.metric == GeoMetric::Haversine)
			index.cos_lat[e] = s.cos_lat[p];
	});
	index.plan = plan_reach(grid, index.cell_start, cands.x.data(), cands.y.data(), cands.size());
	ctx.times.compute_ms += clock.elapsed_ms();
	return index;
}

} // namespace gpurec
