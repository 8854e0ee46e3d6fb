/*
 * geo_validate.cpp: the geospatial recommender's checks of its arguments
 * (metric, epsilon, exponents, strength options) and of its data
 * (coordinates, the main user), each with the ERROR it raises.  The SQL
 * layer calls the argument checks before it reads any input; the
 * functions of geo.hpp make them all again.
 */
#include "no_postgres.hpp"

#include "geo_internal.hpp"
#include "key_dictionary.hpp"
#include "cpu_parallel.hpp"
#include "float_column.hpp"

#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace gpurec {

namespace {

/* As float8 output spells it. */
std::string number_text(double v)
{
	if (std::isnan(v))
		return "NaN";
	if (std::isinf(v))
		return v > 0 ? "Infinity" : "-Infinity";
	char buf[64];
	for (int digits = 15; digits <= 17; ++digits) /* the shortest that reads back the same */
	{
		std::snprintf(buf, sizeof buf, "%.*g", digits, v);
		if (std::strtod(buf, nullptr) == v)
			break;
	}
	return buf;
}

void check_epsilon(double epsilon)
{
	if (!(epsilon > 0) || !std::isfinite(epsilon))
		throw Error(sqlstate::invalid_parameter_value, "epsilon must be greater than zero",
					"epsilon = " + number_text(epsilon) + ".",
					"epsilon is the least distance counted; without one, 1e-9 under euclidean and 10 "
					"metres under haversine.");
}

void check_exponent(double exponent)
{
	if (!(exponent > 0) || !std::isfinite(exponent))
		throw Error(sqlstate::invalid_parameter_value, "exponent must be greater than zero",
					"exponent = " + number_text(exponent) + ".");
}

void check_strength_options(const StrengthOptions &strength)
{
	if (std::isnan(strength.max_distance) || strength.max_distance < 0)
		throw Error(sqlstate::invalid_parameter_value,
					std::isnan(strength.max_distance) ? "max_distance must not be NaN" : "max_distance must not be negative",
					"max_distance = " + number_text(strength.max_distance) + ".",
					"Pass NULL for no limit.");
	if (std::isnan(strength.min_similarity))
		throw Error(sqlstate::invalid_parameter_value, "min_similarity must not be NaN");
}

/*
 * Every coordinate finite and, under haversine, in range; else the error
 * that names the least user with a bad point.  A branch-free pass over
 * each piece first, on every core (the first pass over a parallel read's
 * points in this process: 20M points took 38-54 ms on one core of the
 * H100 host), then, as bad rows are rare, a pass over the pieces that
 * have any.
 */
void validate_points(const GeoPoints &points, GeoMetric metric, ExecContext &ctx)
{
	size_t n = points.user.size();
	if (points.x.size() != n || points.y.size() != n)
		throw Error(sqlstate::internal_error, "points columns differ in length");
	check_user_count(points.user.distinct());
	bool haversine = metric == GeoMetric::Haversine;
	constexpr size_t kPieceRows = size_t(1) << 16;
	size_t pieces = (n + kPieceRows - 1) / kPieceRows;
	auto rows_of = [&](size_t piece, const double *&x, const double *&y) {
		size_t first = piece * kPieceRows, c = first / FloatColumn::kChunkRows, at = first % FloatColumn::kChunkRows;
		x = points.x.chunk_data(c) + at;
		y = points.y.chunk_data(c) + at;
		return std::min(kPieceRows, n - first); /* a chunk holds a whole number of pieces */
	};
	std::vector<uint8_t> bad(pieces, 0);
	parallel_for(pieces, ctx, [&](size_t piece, size_t, const std::atomic<bool> &) {
		const double *x, *y;
		size_t rows = rows_of(piece, x, y);
		bool any = false;
		if (haversine)
			for (size_t i = 0; i < rows; ++i)
				any |= !point_in_range(x[i], y[i], GeoMetric::Haversine);
		else
			for (size_t i = 0; i < rows; ++i)
				any |= !point_in_range(x[i], y[i], GeoMetric::Euclidean);
		bad[piece] = any;
	});
	if (std::find(bad.begin(), bad.end(), 1) == bad.end())
		return;
	/*
	 * The point named: the least user's, its least x then y (NaN last),
	 * the same whatever order a parallel read gave the rows in.
	 */
	auto key = [](double v) { return std::make_pair(std::isnan(v), std::isnan(v) ? 0.0 : v); };
	bool found = false;
	int64_t user = 0;
	double bad_x = 0, bad_y = 0;
	for (size_t piece = 0; piece < pieces; ++piece)
	{
		if (!bad[piece])
			continue;
		const double *x, *y;
		size_t rows = rows_of(piece, x, y);
		for (size_t i = 0; i < rows; ++i)
		{
			if (point_in_range(x[i], y[i], metric))
				continue;
			int64_t owner = points.user.value_of(points.user.code(piece * kPieceRows + i));
			if (found && std::make_tuple(owner, key(x[i]), key(y[i])) >= std::make_tuple(user, key(bad_x), key(bad_y)))
				continue;
			found = true;
			user = owner;
			bad_x = x[i];
			bad_y = y[i];
		}
	}
	try
	{
		check_coordinates(bad_x, bad_y, metric, "user", user, ctx.keys.get());
	}
	catch (Error &e)
	{
		throw std::move(e).ordered({user});
	}
	throw Error(sqlstate::internal_error, "a piece of points was found bad, and none of its points");
}

} // namespace

/* ---- arguments ---------------------------------------------------------- */

GeoOptions geo_options(const std::string &metric, double epsilon)
{
	GeoOptions options{parse_geo_metric(metric), epsilon};
	check_epsilon(epsilon);
	return options;
}

GeoMetric parse_geo_metric(const std::string &name)
{
	std::string lower(name);
	std::transform(lower.begin(), lower.end(), lower.begin(),
				   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
	if (lower == "euclidean")
		return GeoMetric::Euclidean;
	if (lower == "haversine")
		return GeoMetric::Haversine;
	throw Error(sqlstate::invalid_parameter_value, "unknown metric \"" + name + "\"",
				"The metric must be 'euclidean' or 'haversine'.");
}

void check_strength_arguments(const std::vector<double> &exponents, const StrengthOptions &strength)
{
	if (exponents.empty())
		throw Error(sqlstate::invalid_parameter_value, "exponents must not be empty");
	for (double e : exponents)
		check_exponent(e);
	check_strength_options(strength);
}

void check_tolerance(double tolerance)
{
	if (!(tolerance > 0) || !std::isfinite(tolerance))
		throw Error(sqlstate::invalid_parameter_value, "tolerance must be greater than zero",
					"tolerance = " + number_text(tolerance) + ".", "Pass NULL for no continuous search.");
}

/* ---- data --------------------------------------------------------------- */

void check_coordinates(double x, double y, GeoMetric metric, const char *what, int64_t id, const CallKeys *keys)
{
	auto whose = [&] { return std::string(what) + " " + shown_id(keys, std::string(what) + "_id", id); };
	if (!std::isfinite(x) || !std::isfinite(y))
		throw Error(sqlstate::data_exception,
					"a point of " + whose() + " has a non-finite coordinate",
					"x = " + number_text(x) + ", y = " + number_text(y) + ".");
	if (metric != GeoMetric::Haversine)
	{
		/* dx^2 + dy^2 of coordinates up to this bound stays below DBL_MAX */
		if (std::fabs(x) > kMaxEuclideanCoordinate || std::fabs(y) > kMaxEuclideanCoordinate)
			throw Error(sqlstate::numeric_value_out_of_range,
						"a point of " + whose() + " is too far from the origin",
						"x = " + number_text(x) + ", y = " + number_text(y) +
							"; under the euclidean metric |x| and |y| must be at most 1e150, or their "
							"squared distances would overflow.",
						"Scale the coordinates down, or subtract a point near them.");
		return;
	}
	if (y < -90 || y > 90)
		throw Error(sqlstate::numeric_value_out_of_range,
					"latitude " + number_text(y) + " of " + whose() + " is out of range",
					"Under the haversine metric y is the latitude in degrees, from -90 to 90.");
	if (x < -180 || x > 180)
		throw Error(sqlstate::numeric_value_out_of_range,
					"longitude " + number_text(x) + " of " + whose() + " is out of range",
					"Under the haversine metric x is the longitude in degrees, from -180 to 180.");
}

void check_user_count(size_t users)
{
	/* user codes are int32_t, and the kernels take one past the last */
	if (users > static_cast<size_t>(INT32_MAX) - 1)
		throw Error(sqlstate::program_limit_exceeded, "too many users in one call");
}

void check_candidate_count(size_t candidates)
{
	/* candidate rows are uint32_t */
	if (candidates > UINT32_MAX)
		throw Error(sqlstate::program_limit_exceeded, "too many candidates in one call");
}

int32_t main_user_code(const GeoPoints &points, int64_t main_user, const ExecContext &ctx, const char *role)
{
	int32_t code = points.user.find(main_user);
	if (code < 0)
		throw Error(sqlstate::invalid_parameter_value,
					std::string(role) + " " + shown_id(ctx.keys.get(), "user_id", main_user) + " has no points",
					"Similarity to a user is measured from that user's points.");
	return code;
}

void check_geo_input(const GeoPoints &points, const GeoOptions &options, ExecContext &ctx)
{
	if (!points.user.numbered_in_id_order())
		throw Error(sqlstate::internal_error, "the points' users are not numbered in user_id order");
	check_epsilon(options.epsilon);
	validate_points(points, options.metric, ctx);
}

} // namespace gpurec
