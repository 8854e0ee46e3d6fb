/*
 * geo_reach.hpp: the reach index of predict_strength and fit_exponent under
 * max_distance, which both devices share: a grid of square cells over the
 * points, the points in cell order (each cell's in point order), and for
 * every candidate the ranges of that order its reach can touch.  A strength
 * then reads only those points, not all of them.
 *
 * The cells: side = max_distance / kReachCells (plus a margin, below), so a
 * candidate reads its own cell's rows and columns within kReachCells of it;
 * candidates of one cell (a "group") read the same ranges.  Under haversine
 * the cells are in degrees: rows within the reach's angle of latitude, and
 * per row of home cells the columns within the widest longitude the reach
 * spans at the row's latitudes, across the antimeridian too.  When the cells
 * would outnumber the points (kCellsPerPoint), they grow by doubling: fewer,
 * larger cells read more points but index fewer empty ones.
 *
 * Exactness: a point beyond max_distance still is dropped by the very test
 * of the unindexed sum (strength_base); the grid only has to miss no point
 * within it.  The reach is widened by kReachMargin (relative) for that, far
 * above the rounding of the cell arithmetic and of the distances.
 *
 * The sum: a candidate's strength adds its pieces' sums in plan order
 * (pieces of at most kReachPiece entries of one range); within a piece,
 * runs of at most kStrengthGroup entries of bitwise equal weight add up as
 * one fraction (GroupFraction), as the unindexed sum does in point order.
 * Both devices follow this one order, so they agree bit for bit with each
 * other; with the unindexed sum, whose order differs, to the rounding of a
 * sum of positive terms (the tests hold it to 1e-12 relative).
 */
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "geo_arithmetic.hpp"

namespace gpurec {

/* Cells per max_distance: a candidate's reach is its cell and kReachCells more each way. */
constexpr int kReachCells = 2;
/* The most entries one piece of work sums (a GPU thread's, a CPU item's share). */
constexpr int64_t kReachPiece = 4096;
/* How much wider than max_distance the cells reach, relatively. */
constexpr double kReachMargin = 1e-6;
/* At most this many cells per point (and at least kMinReachCells cells may be). */
constexpr double kCellsPerPoint = 1.0;
constexpr double kMinReachCells = 4096;

/*
 * The grid: nx x ny square cells of `side` from (x0, y0), row-major
 * (cell = row * nx + column); x is the longitude under haversine.  `reach`
 * is max_distance in the coordinates' units (degrees of arc under
 * haversine), widened by kReachMargin; `everywhere`: one cell, every
 * candidate reads every point (a reach beyond a quarter of the globe).
 */
struct ReachGrid
{
	bool haversine = false;
	bool everywhere = false;
	double x0 = 0, y0 = 0, side = 1;
	int32_t nx = 1, ny = 1;
	double reach = 0;
	double reach_radians = 0; /* haversine only */

	int64_t cells() const { return static_cast<int64_t>(nx) * ny; }
};

/* The index of the cell along one axis that holds v (clamped into the grid). */
GPUREC_HOST_DEVICE int32_t reach_axis_cell(double v, double origin, double side, int32_t n)
{
	double t = floor(geo::div(geo::sub(v, origin), side));
	if (!(t > 0))
		return 0;
	return t >= static_cast<double>(n - 1) ? n - 1 : static_cast<int32_t>(t);
}

GPUREC_HOST_DEVICE int64_t reach_cell(const ReachGrid &g, double x, double y)
{
	return static_cast<int64_t>(reach_axis_cell(y, g.y0, g.side, g.ny)) * g.nx +
		   reach_axis_cell(x, g.x0, g.side, g.nx);
}

/*
 * The grid for points and candidates within [lo_x, hi_x] x [lo_y, hi_y]
 * (both: a candidate's home cell is then its true cell), `points` of them,
 * and the strength parameters' max_distance (has_max_distance).
 */
inline ReachGrid reach_grid(const StrengthParams &sp, double lo_x, double hi_x, double lo_y, double hi_y,
							int64_t points)
{
	ReachGrid g;
	g.haversine = sp.haversine;
	g.x0 = lo_x;
	g.y0 = lo_y;
	double width = hi_x > lo_x ? hi_x - lo_x : 0, height = hi_y > lo_y ? hi_y - lo_y : 0;
	if (sp.haversine)
	{
		g.reach_radians = sp.max_key / geo::kEarthRadius * (1 + kReachMargin);
		if (!(g.reach_radians < geo::kPi / 2))
		{
			g.everywhere = true;
			g.side = std::max({width, height, 1.0}) * 2;
			return g;
		}
		g.reach = g.reach_radians * (180 / geo::kPi);
	}
	else
		g.reach = std::sqrt(sp.max_key) * (1 + kReachMargin); /* the largest distance max_key admits */
	double side = g.reach / kReachCells;
	if (!(side > 0) || !std::isfinite(side))
		side = std::max({width, height, 1.0}) / 65536;
	double most = std::max(kMinReachCells, kCellsPerPoint * static_cast<double>(points));
	auto cells_along = [&](double extent) { return std::floor(extent / side) + 1; };
	while (cells_along(width) * cells_along(height) > most)
		side *= 2;
	g.side = side;
	g.nx = static_cast<int32_t>(cells_along(width));
	g.ny = static_cast<int32_t>(cells_along(height));
	return g;
}

/* The cells along one axis within the reach of a cell: k each way. */
inline int32_t reach_cells_along(const ReachGrid &g)
{
	return static_cast<int32_t>(std::ceil(g.reach * (1 + kReachMargin / 10) / g.side));
}

/*
 * The column ranges [first, last] of row-band `row`'s reach from home
 * column `column`, sorted and disjoint: under euclidean the columns within
 * reach_cells_along; under haversine those whose longitudes the reach spans
 * at the home row's latitudes, with their images across the antimeridian.
 */
inline std::vector<std::pair<int32_t, int32_t>> reach_columns(const ReachGrid &g, int32_t home_row, int32_t column)
{
	std::vector<std::pair<int32_t, int32_t>> out;
	if (!g.haversine)
	{
		int32_t k = reach_cells_along(g);
		out.push_back({std::max(0, column - k), static_cast<int32_t>(std::min<int64_t>(g.nx - 1, int64_t(column) + k))});
		return out;
	}
	double lat_lo = g.y0 + home_row * g.side, lat_hi = g.y0 + (home_row + 1) * g.side;
	double widest = std::max(std::fabs(lat_lo), std::fabs(lat_hi)) + g.side * kReachMargin;
	double half_width = 360; /* degrees of longitude each way: past a pole, every one */
	if (widest + g.reach < 90)
	{
		double s = std::sin(g.reach_radians) / std::cos(widest * (geo::kPi / 180));
		if (s < 1)
			half_width = std::asin(s) * (180 / geo::kPi) * (1 + kReachMargin) + g.side * kReachMargin;
	}
	double lo = g.x0 + column * g.side - half_width, hi = g.x0 + (column + 1) * g.side + half_width;
	if (hi - lo >= 360)
	{
		out.push_back({0, g.nx - 1});
		return out;
	}
	double grid_hi = g.x0 + g.nx * g.side;
	for (double shift : {-360.0, 0.0, 360.0})
	{
		double a = lo + shift, b = hi + shift;
		if (b < g.x0 || a > grid_hi)
			continue;
		out.push_back({reach_axis_cell(a, g.x0, g.side, g.nx), reach_axis_cell(b, g.x0, g.side, g.nx)});
	}
	std::sort(out.begin(), out.end());
	std::vector<std::pair<int32_t, int32_t>> merged;
	for (const auto &r : out)
		if (!merged.empty() && r.first <= merged.back().second + 1)
			merged.back().second = std::max(merged.back().second, r.second);
		else
			merged.push_back(r);
	return merged;
}

/*
 * What each candidate reads: candidates by home cell (order), one group per
 * occupied home cell (its candidates order[group_begin[g] ..
 * group_begin[g + 1])), each group's pieces piece_begin[g] ..
 * piece_begin[g + 1], piece i the entries [piece_first[i], piece_last[i]).
 */
struct ReachPlan
{
	std::vector<uint32_t> order;
	std::vector<int64_t> group_begin{0};
	std::vector<int64_t> piece_begin{0};
	std::vector<int64_t> piece_first, piece_last;

	size_t groups() const { return group_begin.size() - 1; }
	/* entries read, over all candidates: the work of the indexed sum */
	double entries_read() const
	{
		double total = 0;
		for (size_t g = 0; g < groups(); ++g)
			for (int64_t p = piece_begin[g]; p < piece_begin[g + 1]; ++p)
				total += static_cast<double>(piece_last[p] - piece_first[p]) *
						 static_cast<double>(group_begin[g + 1] - group_begin[g]);
		return total;
	}
};

/* The plan of candidates (cx, cy; n of them) over the grid whose cells start at cell_start (cells() + 1). */
inline ReachPlan plan_reach(const ReachGrid &g, const std::vector<int64_t> &cell_start, const double *cx,
							const double *cy, size_t n)
{
	ReachPlan plan;
	std::vector<int64_t> home(n);
	for (size_t c = 0; c < n; ++c)
		home[c] = g.everywhere ? 0 : reach_cell(g, cx[c], cy[c]);
	plan.order.resize(n);
	std::iota(plan.order.begin(), plan.order.end(), 0u);
	std::stable_sort(plan.order.begin(), plan.order.end(), [&](uint32_t a, uint32_t b) { return home[a] < home[b]; });
	int32_t k = g.everywhere ? 0 : reach_cells_along(g);
	auto add_range = [&](int64_t first, int64_t last) {
		for (int64_t p = first; p < last; p += kReachPiece)
		{
			plan.piece_first.push_back(p);
			plan.piece_last.push_back(std::min(last, p + kReachPiece));
		}
	};
	for (size_t i = 0; i < n;)
	{
		int64_t cell = home[plan.order[i]];
		while (i < n && home[plan.order[i]] == cell)
			++i;
		plan.group_begin.push_back(static_cast<int64_t>(i));
		auto row = static_cast<int32_t>(cell / g.nx), column = static_cast<int32_t>(cell % g.nx);
		std::vector<std::pair<int32_t, int32_t>> columns = reach_columns(g, row, column);
		for (int64_t r = std::max<int64_t>(0, row - k); r <= std::min<int64_t>(g.ny - 1, int64_t(row) + k); ++r)
			for (const auto &span : columns)
				add_range(cell_start[r * g.nx + span.first], cell_start[r * g.nx + span.second + 1]);
		plan.piece_begin.push_back(static_cast<int64_t>(plan.piece_first.size()));
	}
	return plan;
}

/* The points in the index's order: coordinates, cos(latitude) (haversine) and each one's weight. */
struct ReachEntries
{
	const double *x;
	const double *y;
	const double *cos_lat;
	const double *w;
};

/*
 * One piece's share of a candidate's strength under one power: the
 * entries [first, last) of equal weight in runs (see above).
 */
GPUREC_HOST_DEVICE double reach_piece_sum(const ReachEntries &e, int64_t first, int64_t last,
										  const StrengthParams &sp, const PowerPlan &power, double cx, double cy,
										  double ccos)
{
	auto denominator = [&](int64_t p) {
		double base = geo::strength_base(sp, e.x[p], e.y[p], sp.haversine ? e.cos_lat[p] : 0.0, cx, cy, ccos);
		return base < 0 ? base : geo::raise(base, power);
	};
	double piece_sum = 0.0;
	for (int64_t g0 = first, g1; g0 < last; g0 = g1)
	{
		g1 = geo::group_end(e.w, g0, last);
		double weight = e.w[g0];
		if (weight == 0.0)
			continue;
		geo::GroupFraction group;
		for (int64_t p = g0; p < g1; ++p)
		{
			double d = denominator(p);
			if (d >= 0)
				group.add_term(d);
		}
		double sum = 0.0;
		if (group.fallback_needed())
		{
			for (int64_t p = g0; p < g1; ++p)
			{
				double d = denominator(p);
				if (d >= 0)
					sum = geo::add(sum, geo::div(1.0, d));
			}
		}
		else if (!group.empty())
			sum = group.value();
		piece_sum = geo::add(piece_sum, geo::mul(weight, sum));
	}
	return piece_sum;
}

} // namespace gpurec
