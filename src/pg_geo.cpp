/*
 * pg_geo.cpp: SQL entry points of the geospatial recommender.
 *
 * None of them is STRICT: epsilon defaults to NULL, the metric's own
 * epsilon, and max_distance to NULL, no limit.  A NULL in any other
 * argument gives no rows, as STRICT would.
 */
#include "pg_boundary.hpp"


#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "cpu_parallel.hpp"
#include "geo.hpp"
#include "pg_arguments.hpp"
#include "pg_output.hpp"
#include "pg_settings.hpp"
#include "read/read.hpp"

namespace gpurec {

namespace {

/*
 * points_query: user_id, x, y; a NULL in any skips the row.  Read in any
 * order (parallel workers included); the users are then numbered in
 * user_id order, counted as reading, which is all the functions ask of
 * the order (GeoPoints).  gpu_from_rows: the points from which the
 * function computes on the GPU under auto (InputTable::set_gpu_from_rows).
 */
InputTable read_points(const char *points_query, ExecContext &ctx, double gpu_from_rows = kMinGpuPairs)
{
	InputTable points("points query", {{"user_id", ColumnKind::Id},
									   {"x", ColumnKind::Float},
									   {"y", ColumnKind::Float}});
	points.set_gpu_from_rows(gpu_from_rows);
	read_inner_query(points_query, points, ctx);
	Stopwatch clock;
	points.id(0).number_in_id_order(pieces_on_threads(ctx, Phase::Read));
	double numbered_ms = clock.elapsed_ms();
	ctx.times.read_ms += numbered_ms;
	char note[96];
	std::snprintf(note, sizeof note, ", users numbered in user_id order in %.3f ms", numbered_ms);
	ctx.read_notes += note;
	return points;
}

GeoPoints points_of(InputTable &table) { return {table.id(0), table.floats(1), table.floats(2)}; }

/* candidates_query: candidate_id, x, y; each row is a candidate, returned in the query's order */
InputTable read_candidates(const char *candidates_query, ExecContext &ctx)
{
	InputTable candidates("candidates query", {{"candidate_id", ColumnKind::Int64},
											   {"x", ColumnKind::Float},
											   {"y", ColumnKind::Float}});
	candidates.keep_row_order();
	read_inner_query(candidates_query, candidates, ctx);
	return candidates;
}

GeoCandidates candidates_of(InputTable &table)
{
	return {table.int64(0), table.floats(1), table.floats(2)};
}

/* metric text, epsilon float8 at arguments n and n + 1; a NULL epsilon is the metric's default */
GeoOptions options_arguments(FunctionCallInfo fcinfo, int n)
{
	const char *metric = text_argument(fcinfo, n);
	double epsilon = PG_ARGISNULL(n + 1) ? default_epsilon(parse_geo_metric(metric)) : PG_GETARG_FLOAT8(n + 1);
	return geo_options(metric, epsilon);
}

/* max_distance, then min_similarity; a NULL max_distance means no limit */
constexpr int kMaxDistanceArgument = 4;

/*
 * A NULL in an argument other than those that may be NULL gives no rows, as
 * STRICT would.  Returns whether the call was so answered.
 */
bool answered_null_as_strict(FunctionCallInfo fcinfo, std::initializer_list<int> may_be_null)
{
	for (int i = 0; i < PG_NARGS(); ++i)
		if (PG_ARGISNULL(i) && std::find(may_be_null.begin(), may_be_null.end(), i) == may_be_null.end())
		{
			ResultWriter out(fcinfo);
			return true;
		}
	return false;
}

/* epsilon of user_similarity and similar_users; of predict_strength and fit_exponent */
constexpr int kPairEpsilonArgument = 3;
constexpr int kStrengthEpsilonArgument = 7;

/*
 * The arguments predict_strength and fit_exponent share, at the same places:
 * points_query (0), candidates_query (2), max_distance and min_similarity
 * (4, 5), metric and epsilon (6, 7).  They differ in the second and the
 * fourth (the exponents, which are checked with these).
 */
struct StrengthArguments
{
	const char *points_query;
	const char *candidates_query;
	StrengthOptions strength;
	GeoOptions options;
};

StrengthArguments strength_arguments(FunctionCallInfo fcinfo, const std::vector<double> &exponents)
{
	StrengthArguments args{text_argument(fcinfo, 0), text_argument(fcinfo, 2), StrengthOptions{},
						   options_arguments(fcinfo, 6)};
	if (!PG_ARGISNULL(kMaxDistanceArgument))
		args.strength.max_distance = PG_GETARG_FLOAT8(kMaxDistanceArgument);
	args.strength.min_similarity = PG_GETARG_FLOAT8(kMaxDistanceArgument + 1);
	check_strength_arguments(exponents, args.strength);
	return args;
}

Datum user_similarity_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	if (answered_null_as_strict(fcinfo, {kPairEpsilonArgument}))
		return (Datum) 0;
	const char *points_query = text_argument(fcinfo, 0);
	int64 main_user = PG_GETARG_INT64(1);
	GeoOptions options = options_arguments(fcinfo, 2);

	InputTable points = read_points(points_query, ctx);
	std::vector<UserSimilarity> rows = user_similarity(points_of(points), main_user, options, ctx);
	points.release_rows_in_background();

	ResultWriter out(fcinfo, ctx, "user_similarity");
	for (const UserSimilarity &row : rows)
	{
		Datum values[3] = {Int64GetDatum(row.user_id), Float8GetDatum(row.similarity),
						   Float8GetDatum(row.mean_min_distance)};
		bool nulls[3] = {false, false, false};
		out.put(values, nulls);
	}
	out.finish();
	return (Datum) 0;
}

/*
 * similar_users(points_query, k, metric, epsilon), and
 * gpurec_internal.similar_users_part(..., part, parts): the lists of a
 * part of the users, each gpurec_shards partition's.
 */
Datum similar_users_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	if (answered_null_as_strict(fcinfo, {kPairEpsilonArgument}))
		return (Datum) 0;
	const char *points_query = text_argument(fcinfo, 0);
	int32 k = PG_GETARG_INT32(1);
	GeoOptions options = options_arguments(fcinfo, 2);
	bool is_part = PG_NARGS() == 6;
	int32 part = is_part ? PG_GETARG_INT32(4) : 0, parts = is_part ? PG_GETARG_INT32(5) : 1;
	check_k(k);

	InputTable points = read_points(points_query, ctx, std::sqrt(kMinGpuPairs)); /* a pair of points each */
	std::vector<SimilarUser> rows = similar_users(points_of(points), k, options, ctx, part, parts);
	points.release_rows_in_background();

	ResultWriter out(fcinfo, ctx, "similar_users");
	for (const SimilarUser &row : rows)
	{
		Datum values[4] = {Int64GetDatum(row.user_id), Int32GetDatum(row.rank),
						   Int64GetDatum(row.other_user_id), Float8GetDatum(row.similarity)};
		bool nulls[4] = {false, false, false, false};
		out.put(values, nulls);
	}
	out.finish();
	return (Datum) 0;
}

/*
 * predict_strength(points_query, main_user, candidates_query, exponent,
 * max_distance, min_similarity, metric, epsilon)
 */
Datum predict_strength_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	if (answered_null_as_strict(fcinfo, {kMaxDistanceArgument, kStrengthEpsilonArgument}))
		return (Datum) 0;
	int64 main_user = PG_GETARG_INT64(1);
	double exponent = PG_GETARG_FLOAT8(3);
	StrengthArguments args = strength_arguments(fcinfo, {exponent});

	InputTable points = read_points(args.points_query, ctx);
	InputTable candidates = read_candidates(args.candidates_query, ctx);
	GeoCandidates cands = candidates_of(candidates);
	std::vector<double> strengths = predict_strength(points_of(points), main_user, cands, exponent,
													 args.strength, args.options, ctx);
	points.release_rows_in_background();

	ResultWriter out(fcinfo, ctx, "predict_strength");
	for (size_t row = 0; row < strengths.size(); ++row)
	{
		Datum values[2] = {Int64GetDatum(cands.id[row]), Float8GetDatum(strengths[row])};
		bool nulls[2] = {false, false};
		out.put(values, nulls);
	}
	out.finish();
	return (Datum) 0;
}

/*
 * fit_exponent(points_query, holdout_query, candidates_query, exponents,
 * max_distance, min_similarity, metric, epsilon)
 */
Datum fit_exponent_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	if (answered_null_as_strict(fcinfo, {kMaxDistanceArgument, kStrengthEpsilonArgument}))
		return (Datum) 0;
	const char *holdout_query = text_argument(fcinfo, 1);
	std::vector<double> exponents = float8_list_argument(fcinfo, 3, "exponents");
	StrengthArguments args = strength_arguments(fcinfo, exponents);

	InputTable points = read_points(args.points_query, ctx);
	InputTable holdout("holdout query",
					   {{"user_id", ColumnKind::Int64}, {"candidate_id", ColumnKind::Int64}});
	read_inner_query(holdout_query, holdout, ctx);
	InputTable candidates = read_candidates(args.candidates_query, ctx);
	std::vector<ExponentFit> fits =
		fit_exponent(points_of(points), {holdout.int64(0), holdout.int64(1)},
					 candidates_of(candidates), exponents, args.strength, args.options, ctx);
	points.release_rows_in_background();

	ResultWriter out(fcinfo, ctx, "fit_exponent");
	for (const ExponentFit &fit : fits)
	{
		/* no user with a visited and an unvisited candidate: no mean */
		Datum values[3] = {Float8GetDatum(fit.exponent), Float8GetDatum(fit.mean_auc),
						   Int64GetDatum(fit.users)};
		bool nulls[3] = {false, fit.users == 0, false};
		out.put(values, nulls);
	}
	out.finish();
	return (Datum) 0;
}

} // namespace
} // namespace gpurec

GPUREC_SQL_FUNCTION(gpurec_user_similarity, gpurec::user_similarity_body)
GPUREC_SQL_FUNCTION(gpurec_similar_users, gpurec::similar_users_body)
GPUREC_SQL_FUNCTION(gpurec_similar_users_part, gpurec::similar_users_body)
GPUREC_SQL_FUNCTION(gpurec_predict_strength, gpurec::predict_strength_body)
GPUREC_SQL_FUNCTION(gpurec_fit_exponent, gpurec::fit_exponent_body)
