/*
 * pg_geo.cpp: SQL entry points of the geospatial recommender.
 *
 * user_similarity and similar_users are STRICT.  predict_strength and
 * fit_exponent cannot be (max_distance defaults to NULL, meaning no limit),
 * so they answer a NULL in any other argument as STRICT would: no rows.
 */
#include "pg_boundary.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/array.h"
}

#include "geo.hpp"
#include "pg_input.hpp"
#include "pg_output.hpp"

namespace gpurec {

namespace {

/* points_query: user_id, x, y; a NULL in any skips the row */
InputTable points_table()
{
	return InputTable("points query", {{"user_id", ColumnKind::Id},
									   {"x", ColumnKind::Float},
									   {"y", ColumnKind::Float}});
}

GeoPoints points_of(InputTable &table) { return {table.id(0), table.floats(1), table.floats(2)}; }

/* candidates_query: candidate_id, x, y; each row is a candidate */
InputTable candidates_table()
{
	return InputTable("candidates query", {{"candidate_id", ColumnKind::Int64},
										   {"x", ColumnKind::Float},
										   {"y", ColumnKind::Float}});
}

GeoCandidates candidates_of(InputTable &table)
{
	return {table.int64(0), table.floats(1), table.floats(2)};
}

/* metric text, epsilon float8 at arguments n and n + 1 */
GeoOptions options_arguments(FunctionCallInfo fcinfo, int n)
{
	return geo_options(text_argument(fcinfo, n), PG_GETARG_FLOAT8(n + 1));
}

/* For the non-strict functions: whether an argument other than max_distance is NULL. */
bool any_null_but(FunctionCallInfo fcinfo, int nullable)
{
	for (int i = 0; i < PG_NARGS(); ++i)
		if (i != nullable && PG_ARGISNULL(i))
			return true;
	return false;
}

/* max_distance at argument n: NULL means no limit */
StrengthOptions strength_arguments(FunctionCallInfo fcinfo, int n)
{
	StrengthOptions strength;
	if (!PG_ARGISNULL(n))
		strength.max_distance = PG_GETARG_FLOAT8(n);
	strength.min_similarity = PG_GETARG_FLOAT8(n + 1);
	return strength;
}

/* A float8[] argument; a NULL element is an ERROR. */
std::vector<double> float8_array_argument(FunctionCallInfo fcinfo, int n, const char *name)
{
	Datum *elements = nullptr;
	bool *nulls = nullptr;
	int count = 0;
	pg_call([&] {
		deconstruct_array(PG_GETARG_ARRAYTYPE_P(n), FLOAT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
						  &elements, &nulls, &count);
	});
	std::vector<double> values(count);
	for (int i = 0; i < count; ++i)
	{
		if (nulls[i])
			throw Error(sqlstate::null_value_not_allowed,
						std::string(name) + " must not contain NULL elements");
		values[i] = DatumGetFloat8(elements[i]);
	}
	return values;
}

Datum user_similarity_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	const char *points_query = text_argument(fcinfo, 0);
	int64 main_user = PG_GETARG_INT64(1);
	GeoOptions options = options_arguments(fcinfo, 2);

	InputTable points = points_table();
	read_inner_query(points_query, points, ctx);
	std::vector<UserSimilarity> rows = user_similarity(points_of(points), main_user, options, ctx);

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

Datum similar_users_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	const char *points_query = text_argument(fcinfo, 0);
	int32 k = PG_GETARG_INT32(1);
	GeoOptions options = options_arguments(fcinfo, 2);
	check_k(k);

	InputTable points = points_table();
	read_inner_query(points_query, points, ctx);
	std::vector<SimilarUser> rows = similar_users(points_of(points), k, options, ctx);

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
	if (any_null_but(fcinfo, 4))
	{
		ResultWriter out(fcinfo);
		return (Datum) 0;
	}
	const char *points_query = text_argument(fcinfo, 0);
	int64 main_user = PG_GETARG_INT64(1);
	const char *candidates_query = text_argument(fcinfo, 2);
	double exponent = PG_GETARG_FLOAT8(3);
	StrengthOptions strength = strength_arguments(fcinfo, 4);
	GeoOptions options = options_arguments(fcinfo, 6);
	check_strength_arguments({exponent}, strength);

	InputTable points = points_table();
	read_inner_query(points_query, points, ctx);
	InputTable candidates = candidates_table();
	read_inner_query(candidates_query, candidates, ctx);
	GeoCandidates cands = candidates_of(candidates);
	std::vector<double> strengths =
		predict_strength(points_of(points), main_user, cands, exponent, strength, options, ctx);

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
	if (any_null_but(fcinfo, 4))
	{
		ResultWriter out(fcinfo);
		return (Datum) 0;
	}
	const char *points_query = text_argument(fcinfo, 0);
	const char *holdout_query = text_argument(fcinfo, 1);
	const char *candidates_query = text_argument(fcinfo, 2);
	std::vector<double> exponents = float8_array_argument(fcinfo, 3, "exponents");
	StrengthOptions strength = strength_arguments(fcinfo, 4);
	GeoOptions options = options_arguments(fcinfo, 6);
	check_strength_arguments(exponents, strength);

	InputTable points = points_table();
	read_inner_query(points_query, points, ctx);
	InputTable holdout("holdout query",
					   {{"user_id", ColumnKind::Int64}, {"candidate_id", ColumnKind::Int64}});
	read_inner_query(holdout_query, holdout, ctx);
	InputTable candidates = candidates_table();
	read_inner_query(candidates_query, candidates, ctx);
	std::vector<ExponentFit> fits =
		fit_exponent(points_of(points), {holdout.int64(0), holdout.int64(1)},
					 candidates_of(candidates), exponents, strength, options, ctx);

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
GPUREC_SQL_FUNCTION(gpurec_predict_strength, gpurec::predict_strength_body)
GPUREC_SQL_FUNCTION(gpurec_fit_exponent, gpurec::fit_exponent_body)
