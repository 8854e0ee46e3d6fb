/*
 * pg_geo.cpp: SQL entry points of the geospatial recommender.
 *
 * None of them is STRICT: epsilon defaults to NULL, the metric's own
 * epsilon, and max_distance to NULL, no limit.  A NULL in any other
 * argument gives no rows, as STRICT would.
 */
#include "pg_boundary.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/memutils.h"
}

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <memory>
#include <unordered_set>

#include "cpu_parallel.hpp"
#include "geo.hpp"
#include "geo_shards.hpp"
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
/*
 * PostGIS points agree with the metric: geography, and geometry of SRID
 * 4326, are longitude and latitude (haversine); any other SRID is planar
 * (euclidean).  A call's points and candidates share their SRID (`other`:
 * the points, for the candidates).  ERROR 22023 otherwise.
 */
void check_point_source(const InputTable &table, const GeoOptions &options, const InputTable *other = nullptr)
{
	const PointSource &points = table.points();
	if (!points.postgis)
		return;
	std::string what = std::string("the ") + table.what() + "'s " + (points.geography ? "geography" : "geometry") +
					   " column \"" + points.column + "\"";
	/* two SRIDs first: no metric fits both, and the metric's hint would only move the error to the other */
	if (other && other->points().postgis && points.srid_known && other->points().srid_known &&
		other->points().srid != points.srid)
		throw Error(sqlstate::invalid_parameter_value,
					what + " has SRID " + std::to_string(points.srid) + ", the " + other->what() + "'s " +
						std::to_string(other->points().srid),
					{}, "Transform one to the other's SRID (ST_Transform).");
	bool lon_lat = points.geography || points.srid == 4326;
	if (points.srid_known && lon_lat != (options.metric == GeoMetric::Haversine))
		throw Error(sqlstate::invalid_parameter_value,
					what + (lon_lat ? " holds longitudes and latitudes" : " holds planar coordinates") + " (SRID " +
						std::to_string(points.srid) + "), not what metric '" +
						(options.metric == GeoMetric::Haversine ? "haversine" : "euclidean") + "' measures",
					"geography, and geometry of SRID 4326, are measured with haversine; other SRIDs with euclidean, "
					"in their own units.",
					std::string("Pass metric => '") + (lon_lat ? "haversine" : "euclidean") + "'.");
}

/*
 * A part of gpurec_shards travels with integer ids: a dictionary's codes
 * would mean nothing on another server.
 */
void require_integer_ids(const ExecContext &ctx)
{
	if (ctx.keys && ctx.keys->codes_values())
		throw Error(sqlstate::feature_not_supported,
					"gpurec_shards' geospatial functions take integer user and candidate ids",
					"A partition's query gives uuid or text ids.");
}

/*
 * On a partition of gpurec_shards, the points of other partitions' users
 * that a call needs (a geo_points part; null: none), of *only_user alone
 * where only_user is not null (append_remote_points).
 */
struct RemotePoints
{
	const ShardRows *points = nullptr;
	const int64_t *only_user = nullptr;
};

InputTable read_points(const char *points_query, ExecContext &ctx, const GeoOptions &options,
					   double gpu_from_rows, RemotePoints remote = {})
{
	InputTable points("points query", {{"user_id", ColumnKind::Id}, point_spec("x", 0), point_spec("y", 1)});
	points.set_gpu_from_rows(gpu_from_rows);
	read_inner_query(points_query, points, ctx);
	check_point_source(points, options);
	if (remote.points)
	{
		require_integer_ids(ctx);
		append_remote_points(points, *remote.points, remote.only_user);
	}
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

/* candidates_query: candidate_id, x, y; each row is a candidate, in the query's order */
InputTable candidates_input()
{
	InputTable candidates("candidates query", {id_spec("candidate_id"), point_spec("x", 0), point_spec("y", 1)});
	candidates.keep_row_order();
	return candidates;
}

/* points: the call's, whose PostGIS SRID the candidates' must share; null where none were read (a coordinator's) */
InputTable read_candidates(const char *candidates_query, ExecContext &ctx, const GeoOptions &options,
						   const InputTable *points)
{
	InputTable candidates = candidates_input();
	read_inner_query(candidates_query, candidates, ctx);
	check_point_source(candidates, options, points);
	return candidates;
}

/* holdout_query: user_id, candidate_id (fit_exponent's visits to predict) */
InputTable holdout_input() { return InputTable("holdout query", {id_spec("user_id"), id_spec("candidate_id")}); }

GeoCandidates candidates_of(InputTable &table)
{
	return {table.int64(0), table.floats(1), table.floats(2)};
}

/* metric text, epsilon float8 at arguments n and n + 1; a NULL epsilon is the metric's default */
GeoOptions options_arguments(FunctionCallInfo fcinfo, int n)
{
	const char *metric = text_argument(fcinfo, n);
	double epsilon = PG_ARGISNULL(n + 1) ? default_epsilon(parse_geo_metric(metric)) : PG_GETARG_FLOAT8(n + 1);
	GeoOptions options = geo_options(metric, epsilon);
	options.pruning = settings_geo_pruning();
	return options;
}

/* max_distance, then min_similarity; a NULL max_distance means no limit */
constexpr int kMaxDistanceArgument = 4;

/* epsilon of user_similarity and similar_users; of predict_strength and fit_exponent */
constexpr int kPairEpsilonArgument = 3;
constexpr int kStrengthEpsilonArgument = 7;
/* the typed forms' id_type, always NULL: of user_similarity and similar_users; of predict_strength */
constexpr int kPairIdTypeArgument = 4;
constexpr int kStrengthIdTypeArgument = 8;

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

/* candidates_query: null where argument 2 is not a query (a partition's candidates part) */
StrengthArguments strength_arguments(FunctionCallInfo fcinfo, const std::vector<double> &exponents,
									 bool candidates_query = true)
{
	StrengthArguments args{text_argument(fcinfo, 0), candidates_query ? text_argument(fcinfo, 2) : nullptr,
						   StrengthOptions{}, options_arguments(fcinfo, 6)};
	if (!PG_ARGISNULL(kMaxDistanceArgument))
		args.strength.max_distance = PG_GETARG_FLOAT8(kMaxDistanceArgument);
	args.strength.min_similarity = PG_GETARG_FLOAT8(kMaxDistanceArgument + 1);
	check_strength_arguments(exponents, args.strength);
	return args;
}

std::vector<UserSimilarity> user_similarity_rows(FunctionCallInfo fcinfo, ExecContext &ctx, RemotePoints remote)
{
	const char *points_query = text_argument(fcinfo, 0);
	GeoOptions options = options_arguments(fcinfo, 2);

	InputTable points = read_points(points_query, ctx, options, gpu_pairs_from(ctx), remote);
	int64_t main_user = id_argument(fcinfo, 1, ctx, "user_id", "main user");
	std::vector<UserSimilarity> rows = user_similarity(points_of(points), main_user, options, ctx);
	release_while_call_goes_on(std::move(points), ctx);
	return rows;
}

Datum user_similarity_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	if (answered_null_as_strict(fcinfo, {kPairEpsilonArgument, kPairIdTypeArgument}))
		return (Datum) 0;
	std::vector<UserSimilarity> rows = user_similarity_rows(fcinfo, ctx, {});

	ResultWriter out(fcinfo, ctx, "user_similarity");
	ResultIds user(out, 0, ctx, "user_id");
	for (const UserSimilarity &row : rows)
	{
		Datum values[3] = {user(row.user_id), Float8GetDatum(row.similarity),
						   Float8GetDatum(row.mean_min_distance)};
		bool nulls[3] = {false, false, false};
		out.put(values, nulls);
	}
	out.finish();
	return (Datum) 0;
}

/* The remote points of a partition's call (a geo_points part, NULL for none) at argument n. */
std::unique_ptr<ShardRows> remote_points_argument(FunctionCallInfo fcinfo, int n)
{
	if (PG_ARGISNULL(n))
		return nullptr;
	auto remote = std::make_unique<ShardRows>(geo_points_rows());
	ByteSpan bytes = bytea_argument(fcinfo, n);
	remote->append(bytes.data, bytes.size, 0);
	return remote;
}

/*
 * gpurec_internal._user_similarity_part(points_query, main_user, metric,
 * epsilon, remote_points): a partition's user_similarity, the main user's
 * points from remote_points where the partition holds none.
 */
Datum user_similarity_part_rows(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	if (null_as_strict(fcinfo, {kPairEpsilonArgument, 4}))
		PG_RETURN_NULL();
	std::unique_ptr<ShardRows> remote = remote_points_argument(fcinfo, 4);
	int64_t main_user = PG_GETARG_INT64(1);
	std::vector<UserSimilarity> rows = user_similarity_rows(fcinfo, ctx, {remote.get(), &main_user});
	require_integer_ids(ctx);
	report_timing("_user_similarity_part", ctx);
	return shard_rows_result(user_similarity_part(rows), "user_similarity");
}

Datum user_similarity_part_body(FunctionCallInfo fcinfo)
{
	return part_or_refusal([fcinfo] { return user_similarity_part_rows(fcinfo); });
}

/*
 * gpurec_internal._geo_points_part(points_query, users, metric, epsilon):
 * a partition's points of `users` (every user where NULL), as the
 * geospatial functions read them, for the coordinator.
 */
Datum geo_points_part_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	if (null_as_strict(fcinfo, {1, 3}))
		PG_RETURN_NULL();
	const char *points_query = text_argument(fcinfo, 0);
	GeoOptions options = options_arguments(fcinfo, 2);
	std::unique_ptr<std::unordered_set<int64_t>> users;
	if (!PG_ARGISNULL(1))
	{
		std::vector<int64_t> ids = int8_list_argument(fcinfo, 1, "users");
		users = std::make_unique<std::unordered_set<int64_t>>(ids.begin(), ids.end());
	}
	InputTable points = read_points(points_query, ctx, options, std::numeric_limits<double>::infinity());
	require_integer_ids(ctx);
	/* every point, as one server checks them all: the coordinator raises the least user's fault of all partitions */
	check_geo_input(points_of(points), options, ctx);
	ShardRows part = geo_points_part(points, users.get());
	report_timing("_geo_points_part", ctx);
	return shard_rows_result(part, "the geospatial functions");
}

/*
 * gpurec_internal._points_users(points_query, metric): the distinct users
 * of a partition's points query, read as the geospatial functions read it,
 * ascending: the coordinator refuses a user two partitions hold.
 */
Datum points_users_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	const char *metric = text_argument(fcinfo, 1);
	GeoOptions options = geo_options(metric, default_epsilon(parse_geo_metric(metric)));
	InputTable points = read_points(text_argument(fcinfo, 0), ctx, options, std::numeric_limits<double>::infinity());
	require_integer_ids(ctx);
	const IdColumn &user = points.id(0);
	std::vector<Datum> users;
	for (int32_t code : user.codes_in_id_order())
		if (user.counts()[code] > 0)
			users.push_back(Int64GetDatum(user.value_of(code)));
	report_timing("_points_users", ctx);
	PG_RETURN_ARRAYTYPE_P(pg_call([&] {
		return construct_array(users.data(), static_cast<int>(users.size()), INT8OID, 8, FLOAT8PASSBYVAL, 'd');
	}));
}

Datum geo_points_part_or_refusal(FunctionCallInfo fcinfo)
{
	return part_or_refusal([fcinfo] { return geo_points_part_body(fcinfo); });
}

/* The parts of bytea[] argument n, in partition order. */
std::vector<PartBytes> parts_argument(FunctionCallInfo fcinfo, int n)
{
	std::vector<PartBytes> parts;
	for (const ByteSpan &part : partition_parts_argument(fcinfo, n, "parts"))
		parts.push_back({part.data, part.size});
	return parts;
}

/* The refusal of a user whose points two partitions of `cluster` hold. */
SplitKey split_user(const std::string &cluster)
{
	return [cluster](int64_t user, size_t part, size_t other_part) {
		throw split_key_error("user", user, cluster, static_cast<int64_t>(part), static_cast<int64_t>(other_part));
	};
}

/*
 * gpurec_internal._merge_geo_points(cluster, parts): the partitions'
 * geo_points parts as one, for every partition; NULL where no point.
 */
Datum merge_geo_points_body(FunctionCallInfo fcinfo)
{
	std::string cluster = text_argument(fcinfo, 0);
	ShardRows points = merge_geo_points(parts_argument(fcinfo, 1), split_user(cluster));
	if (points.rows() == 0)
		PG_RETURN_NULL();
	return shard_rows_result(points, "the geospatial functions");
}

/* gpurec_internal._geo_points_users(points): the distinct users of a geo_points part, in id order, and their points */
Datum geo_points_users_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	std::unique_ptr<ShardRows> points = remote_points_argument(fcinfo, 0);
	ResultWriter out(fcinfo, ctx, "_geo_points_users");
	std::vector<std::pair<int64_t, int64_t>> users = users_of_points(*points);
	put_bigint_pairs(out, users.size(), [&](size_t i) { return users[i]; });
	out.finish();
	return (Datum) 0;
}

/* gpurec_internal._merge_user_similarity(cluster, parts): user_similarity's rows of the partitions' parts */
Datum merge_user_similarity_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	std::string cluster = text_argument(fcinfo, 0);
	std::vector<UserSimilarity> rows = merge_user_similarity(parts_argument(fcinfo, 1), split_user(cluster));
	ResultWriter out(fcinfo, ctx, "_merge_user_similarity");
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
 * gpurec_internal._merge_similar_users(cluster, points, parts):
 * similar_users' lists of the partitions' parts, every user of points
 * (the merged geo_points the partitions ranked against) once.
 */
Datum merge_similar_users_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	std::string cluster = text_argument(fcinfo, 0);
	std::unique_ptr<ShardRows> points = remote_points_argument(fcinfo, 1);
	ShardRows no_points = geo_points_rows();
	std::vector<SimilarUser> rows = merge_similar_users(parts_argument(fcinfo, 2), points ? *points : no_points, cluster);
	ResultWriter out(fcinfo, ctx, "_merge_similar_users");
	for (const SimilarUser &row : rows)
	{
		Datum values[4] = {Int64GetDatum(row.user_id), Int32GetDatum(row.rank), Int64GetDatum(row.other_user_id),
						   Float8GetDatum(row.similarity)};
		bool nulls[4] = {false, false, false, false};
		out.put(values, nulls);
	}
	out.finish();
	return (Datum) 0;
}

/* gpurec_internal._merge_strengths(parts): each candidate's strength (n: its place) over the partitions */
Datum merge_strengths_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	std::vector<double> strengths = merge_strengths(parts_argument(fcinfo, 0));
	ResultWriter out(fcinfo, ctx, "_merge_strengths");
	for (size_t c = 0; c < strengths.size(); ++c)
	{
		Datum values[2] = {Int64GetDatum(static_cast<int64_t>(c + 1)), Float8GetDatum(strengths[c])};
		bool nulls[2] = {false, false};
		out.put(values, nulls);
	}
	out.finish();
	return (Datum) 0;
}

std::vector<SimilarUser> similar_users_rows(FunctionCallInfo fcinfo, ExecContext &ctx, int32 part, int32 parts,
										  RemotePoints remote)
{
	const char *points_query = text_argument(fcinfo, 0);
	int32 k = PG_GETARG_INT32(1);
	GeoOptions options = options_arguments(fcinfo, 2);
	check_k(k);

	InputTable points = read_points(points_query, ctx, options, std::sqrt(gpu_pairs_from(ctx)), remote); /* a pair of points each */
	std::vector<SimilarUser> rows = similar_users(points_of(points), k, options, ctx, part, parts);
	release_while_call_goes_on(std::move(points), ctx);
	return rows;
}

/* similar_users(points_query, k, metric, epsilon) */
Datum similar_users_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	if (answered_null_as_strict(fcinfo, {kPairEpsilonArgument, kPairIdTypeArgument}))
		return (Datum) 0;
	std::vector<SimilarUser> rows = similar_users_rows(fcinfo, ctx, 0, 1, {});

	ResultWriter out(fcinfo, ctx, "similar_users");
	ResultIds user(out, 0, ctx, "user_id"), other_user(out, 2, ctx, "user_id");
	for (const SimilarUser &row : rows)
	{
		Datum values[4] = {user(row.user_id), Int32GetDatum(row.rank), other_user(row.other_user_id),
						   Float8GetDatum(row.similarity)};
		bool nulls[4] = {false, false, false, false};
		out.put(values, nulls);
	}
	out.finish();
	return (Datum) 0;
}

/*
 * gpurec_internal._similar_users_part(points_query, k, metric, epsilon,
 * part, parts, remote_points): the lists of part `part` of `parts` of the
 * users (a gpurec_shards partition's), ranked against the partition's
 * points and the remote ones of the users it does not hold.
 */
Datum similar_users_part_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	if (null_as_strict(fcinfo, {kPairEpsilonArgument, 6}))
		PG_RETURN_NULL();
	std::unique_ptr<ShardRows> remote = remote_points_argument(fcinfo, 6);
	std::vector<SimilarUser> rows =
		similar_users_rows(fcinfo, ctx, PG_GETARG_INT32(4), PG_GETARG_INT32(5), {remote.get(), nullptr});
	require_integer_ids(ctx);
	report_timing("_similar_users_part", ctx);
	return shard_rows_result(similar_users_part(rows), "similar_users");
}

/* predict_strength's candidates (their ids for the result) and their strengths, in the candidates' order */
struct CandidateStrengths
{
	InputTable candidates;
	std::vector<double> strengths;
};

/* candidate_id, x, y: the candidates of predict_strength over partitions, in their order */
ShardRows candidates_rows() { return ShardRows("candidates", 3); }

/* A candidates table, in its rows' order, of a candidates part (id, x, y: _candidates_part). */
InputTable candidates_of_part(const ShardRows &part)
{
	InputTable candidates = candidates_input();
	Int64Column &id = candidates.int64(0);
	FloatColumn &x = candidates.floats(1), &y = candidates.floats(2);
	for (size_t r = 0; r < part.rows(); ++r)
	{
		id.push_back(part.int64(r, 0));
		x.push_back(part.float8(r, 1));
		y.push_back(part.float8(r, 2));
	}
	candidates.count_rows(part.rows(), 0);
	return candidates;
}

/* candidates: the partition's candidates part (_candidates_part), else null: argument 2 is a query */
CandidateStrengths candidate_strengths(FunctionCallInfo fcinfo, ExecContext &ctx, RemotePoints remote,
									   const ShardRows *candidates_part = nullptr)
{
	double exponent = PG_GETARG_FLOAT8(3);
	StrengthArguments args = strength_arguments(fcinfo, {exponent}, candidates_part == nullptr);

	InputTable points = read_points(args.points_query, ctx, args.options, gpu_pairs_from(ctx), remote);
	InputTable candidates = candidates_part ? candidates_of_part(*candidates_part)
											: read_candidates(args.candidates_query, ctx, args.options, &points);
	int64_t main_user = id_argument(fcinfo, 1, ctx, "user_id", "main user");
	std::vector<double> strengths = predict_strength(points_of(points), main_user, candidates_of(candidates),
													 exponent, args.strength, args.options, ctx);
	release_while_call_goes_on(std::move(points), ctx);
	return {std::move(candidates), std::move(strengths)};
}

/*
 * predict_strength(points_query, main_user, candidates_query, exponent,
 * max_distance, min_similarity, metric, epsilon)
 */
Datum predict_strength_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	if (answered_null_as_strict(fcinfo, {kMaxDistanceArgument, kStrengthEpsilonArgument, kStrengthIdTypeArgument}))
		return (Datum) 0;
	CandidateStrengths result = candidate_strengths(fcinfo, ctx, {});
	GeoCandidates cands = candidates_of(result.candidates);

	ResultWriter out(fcinfo, ctx, "predict_strength");
	ResultIds candidate(out, 0, ctx, "candidate_id");
	for (size_t row = 0; row < result.strengths.size(); ++row)
	{
		Datum values[2] = {candidate(cands.id[row]), Float8GetDatum(result.strengths[row])};
		bool nulls[2] = {false, false};
		out.put(values, nulls);
	}
	out.finish();
	return (Datum) 0;
}

/*
 * gpurec_internal._predict_strength_part(... predict_strength's arguments
 * ..., remote_points): the strengths a partition's users give each
 * candidate, in the candidates' order, the main user's points from
 * remote_points where the partition holds none.
 */
Datum predict_strength_part_rows(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	if (null_as_strict(fcinfo, {kMaxDistanceArgument, kStrengthEpsilonArgument, 8}))
		PG_RETURN_NULL();
	std::unique_ptr<ShardRows> remote = remote_points_argument(fcinfo, 8);
	int64_t main_user = PG_GETARG_INT64(1);
	ShardRows candidates = candidates_rows();
	ByteSpan bytes = bytea_argument(fcinfo, 2);
	candidates.append(bytes.data, bytes.size, 0);
	CandidateStrengths result = candidate_strengths(fcinfo, ctx, {remote.get(), &main_user}, &candidates);
	require_integer_ids(ctx);
	report_timing("_predict_strength_part", ctx);
	return shard_rows_result(strengths_part(result.strengths), "predict_strength");
}

Datum predict_strength_part_body(FunctionCallInfo fcinfo)
{
	return part_or_refusal([fcinfo] { return predict_strength_part_rows(fcinfo); });
}

/*
 * gpurec_internal._candidates_part(candidates_query, metric): the
 * candidates query read on gpurec_shards' coordinator as predict_strength
 * and fit_exponent read it (read-only, its columns' types checked, rows
 * with a NULL skipped, PostGIS points agreeing with the metric), each
 * point checked, as one part in its rows' order for every partition.
 */
Datum candidates_part_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	const char *metric = text_argument(fcinfo, 1);
	GeoOptions options = geo_options(metric, default_epsilon(parse_geo_metric(metric)));
	InputTable candidates = read_candidates(text_argument(fcinfo, 0), ctx, options, nullptr);
	require_integer_ids(ctx);
	GeoCandidates read = candidates_of(candidates);
	check_candidates(read, options.metric, ctx.keys.get());
	ShardRows part = candidates_rows();
	for (size_t r = 0; r < read.id.size(); ++r)
	{
		part.put(read.id[r]);
		part.put(read.x[r]);
		part.put(read.y[r]);
	}
	return shard_rows_result(part, "predict_strength");
}

/* gpurec_internal._candidate_ids(part): the ids of a _candidates_part, each with its place n (from 1) */
Datum candidate_ids_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	ShardRows part = candidates_rows();
	ByteSpan bytes = bytea_argument(fcinfo, 0);
	part.append(bytes.data, bytes.size, 0);
	ResultWriter out(fcinfo, ctx, "_candidate_ids");
	put_bigint_pairs(out, part.rows(),
					 [&](size_t r) { return std::make_pair(static_cast<int64_t>(r + 1), part.int64(r, 0)); });
	out.finish();
	return (Datum) 0;
}

/*
 * gpurec_internal._holdout_rows(holdout_query): the holdout query read on
 * gpurec_shards' coordinator as fit_exponent reads it (read-only, its
 * columns' types checked, rows with a NULL skipped).
 */
Datum holdout_rows_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	InputTable holdout = holdout_input();
	read_inner_query(text_argument(fcinfo, 0), holdout, ctx);
	require_integer_ids(ctx);
	const Int64Column &user = holdout.int64(0), &candidate = holdout.int64(1);
	ResultWriter out(fcinfo, ctx, "_holdout_rows");
	put_bigint_pairs(out, user.size(), [&](size_t r) { return std::make_pair(user[r], candidate[r]); });
	out.finish();
	return (Datum) 0;
}

/* fit_exponent's continuous search: its tolerance, NULL for none */
constexpr int kToleranceArgument = 8;

/*
 * fit_exponent(points_query, holdout_query, candidates_query, exponents,
 * max_distance, min_similarity, metric, epsilon, tolerance)
 */
Datum fit_exponent_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	if (answered_null_as_strict(fcinfo, {kMaxDistanceArgument, kStrengthEpsilonArgument, kToleranceArgument}))
		return (Datum) 0;
	const char *holdout_query = text_argument(fcinfo, 1);
	std::vector<double> exponents = float8_list_argument(fcinfo, 3, "exponents");
	StrengthArguments args = strength_arguments(fcinfo, exponents);
	double tolerance = PG_ARGISNULL(kToleranceArgument) ? 0 : PG_GETARG_FLOAT8(kToleranceArgument);
	if (!PG_ARGISNULL(kToleranceArgument))
		check_tolerance(tolerance);

	InputTable points = read_points(args.points_query, ctx, args.options, gpu_pairs_from(ctx));
	InputTable holdout = holdout_input();
	read_inner_query(holdout_query, holdout, ctx);
	InputTable candidates = read_candidates(args.candidates_query, ctx, args.options, &points);
	ExponentSearch fits =
		search_exponent(points_of(points), {holdout.int64(0), holdout.int64(1)}, candidates_of(candidates),
						exponents, tolerance, args.strength, args.options, ctx);
	release_while_call_goes_on(std::move(points), ctx);

	ResultWriter out(fcinfo, ctx, "fit_exponent");
	for (const ExponentFit &fit : fits.grid)
	{
		/* no user with a visited and an unvisited candidate: no mean; no search: no fitted exponent */
		Datum values[5] = {Float8GetDatum(fit.exponent), Float8GetDatum(fit.mean_auc), Int64GetDatum(fit.users),
						   Float8GetDatum(fits.exponent), Float8GetDatum(fits.mean_auc)};
		bool nulls[5] = {false, fit.users == 0, false, !fits.fitted, !fits.fitted};
		out.put(values, nulls);
	}
	out.finish();
	return (Datum) 0;
}

/*
 * _exponent_search(exponents, grid_means, tolerance, probed_means): the
 * continuous search of fit_exponent for gpurec_shards, which evaluates the
 * mean AUCs over its partitions.  The grid (exponents with their means, as
 * fit_exponent's rows but in the argument's order) and every round's
 * means so far (probed_means, kSearchPoints a round) replay the search to
 * where it stands: its next round's exponents, one row each (fitted
 * columns NULL), or once it is done one row of the fit (probe NULL).
 */
Datum exponent_search_body(FunctionCallInfo fcinfo)
{
	std::vector<double> exponents = float8_list_argument(fcinfo, 0, "exponents");
	std::vector<double> grid_means = float8_list_argument(fcinfo, 1, "grid_means");
	double tolerance = PG_GETARG_FLOAT8(2);
	std::vector<double> probed_means = float8_list_argument(fcinfo, 3, "probed_means");
	check_tolerance(tolerance);
	if (exponents.empty() || grid_means.size() != exponents.size())
		throw Error(sqlstate::invalid_parameter_value, "exponents and grid_means must be as long, and not empty");

	std::vector<ExponentFit> grid;
	for (size_t e = 0; e < exponents.size(); ++e)
		grid.push_back({exponents[e], grid_means[e], 0});
	std::stable_sort(grid.begin(), grid.end(),
					 [](const ExponentFit &a, const ExponentFit &b) { return a.exponent < b.exponent; });
	ExponentZoom zoom(grid, tolerance);
	for (size_t taken = 0; taken < probed_means.size();)
	{
		size_t round = zoom.done() ? probed_means.size() - taken : zoom.probes().size();
		if (taken + round > probed_means.size())
			round = probed_means.size() - taken; /* a partial round: take() refuses it */
		zoom.take(std::vector<double>(probed_means.begin() + taken, probed_means.begin() + taken + round));
		taken += round;
	}

	ExecContext ctx = exec_context_from_settings();
	ResultWriter out(fcinfo, ctx, "_exponent_search");
	if (zoom.done())
	{
		Datum values[3] = {0, Float8GetDatum(zoom.exponent()), Float8GetDatum(zoom.mean_auc())};
		bool nulls[3] = {true, false, false};
		out.put(values, nulls);
	}
	else
		for (double probe : zoom.probes())
		{
			Datum values[3] = {Float8GetDatum(probe), 0, 0};
			bool nulls[3] = {false, true, true};
			out.put(values, nulls);
		}
	out.finish();
	return (Datum) 0;
}

} // namespace
} // namespace gpurec

GPUREC_SQL_FUNCTION(gpurec_user_similarity, gpurec::user_similarity_body)
GPUREC_SQL_FUNCTION(gpurec_similar_users, gpurec::similar_users_body)
GPUREC_PARTITION_FUNCTION(gpurec_similar_users_part, gpurec::similar_users_part_body)
GPUREC_PARTITION_FUNCTION(gpurec_user_similarity_part, gpurec::user_similarity_part_body)
GPUREC_PARTITION_FUNCTION(gpurec_predict_strength_part, gpurec::predict_strength_part_body)
GPUREC_PARTITION_FUNCTION(gpurec_geo_points_part, gpurec::geo_points_part_or_refusal)
GPUREC_PARTITION_FUNCTION(gpurec_points_users, gpurec::points_users_body)
GPUREC_SQL_FUNCTION(gpurec_merge_geo_points, gpurec::merge_geo_points_body)
GPUREC_SQL_FUNCTION(gpurec_geo_points_users, gpurec::geo_points_users_body)
GPUREC_SQL_FUNCTION(gpurec_merge_user_similarity, gpurec::merge_user_similarity_body)
GPUREC_SQL_FUNCTION(gpurec_merge_similar_users, gpurec::merge_similar_users_body)
GPUREC_SQL_FUNCTION(gpurec_merge_strengths, gpurec::merge_strengths_body)
GPUREC_SQL_FUNCTION(gpurec_predict_strength, gpurec::predict_strength_body)
GPUREC_SQL_FUNCTION(gpurec_candidates_part, gpurec::candidates_part_body)
GPUREC_SQL_FUNCTION(gpurec_candidate_ids, gpurec::candidate_ids_body)
GPUREC_SQL_FUNCTION(gpurec_holdout_rows, gpurec::holdout_rows_body)
GPUREC_SQL_FUNCTION(gpurec_fit_exponent, gpurec::fit_exponent_body)
GPUREC_SQL_FUNCTION(gpurec_exponent_search, gpurec::exponent_search_body)
