/*
 * geo.hpp: the geospatial recommender: users are sets of points, and a
 * user B is similar to a user A when every point of A has a point of B
 * nearby.
 *
 * Similarity of B to A (not symmetric): over A's points, the distance to
 * the nearest of B's points, each floored at epsilon; similarity = 1 / the
 * mean of those.  Distances are euclidean on (x, y) or, under haversine,
 * great-circle metres with x = longitude and y = latitude in degrees.
 *
 * Every function validates its arguments and data here and throws
 * gpurec::Error; the SQL layer only converts.  The CPU and GPU paths give
 * the same results (kernels/api/geo_arithmetic.hpp says how).
 */
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../kernels/api/geo_kernels.hpp"
#include "column_chunks.hpp"
#include "device.hpp"
#include "float_column.hpp"
#include "id_column.hpp"
#include "number_column.hpp"

namespace gpurec {

/*
 * The distance evaluations from which a geo function computes on the GPU
 * under gpurec.device = auto (auto's cost model, for a read that has not
 * counted its points yet): user_similarity, predict_strength and
 * fit_exponent evaluate at least one a point, similar_users one a pair of
 * points.
 */
double gpu_pairs_from(const ExecContext &ctx);

enum class GeoMetric : uint8_t
{
	Euclidean, /* on (x, y) */
	Haversine  /* x = longitude, y = latitude in degrees; metres on a sphere */
};

/*
 * The points query: user_id, x, y (rows with a NULL were skipped by the
 * input layer), in any row order.  The user codes ascend with the ids
 * (IdColumn::number_in_id_order, which the SQL layer applies after reading;
 * else ERROR XX000): the functions group the points by code, each user's
 * points in point order (geo::point_order_key), so that every sum runs in
 * one order however the rows arrived, from parallel workers included.
 */
struct GeoPoints
{
	const IdColumn &user;
	const FloatColumn &x;
	const FloatColumn &y;
};

/*
 * The points grouped per user (CSR), for the CPU: user u (its code in the
 * input's IdColumn) owns points offsets[u] .. offsets[u+1], in point order.
 * The GPU groups them the same way on the device.
 */
struct GeoPointSet
{
	GeoMetric metric = GeoMetric::Euclidean;
	std::vector<int64_t> offsets{0};
	std::vector<int64_t> user_ids; /* the id of each user code */
	BulkVector<double> x, y;
	BulkVector<double> cos_lat; /* haversine only: cos(latitude) of each point */
	/*
	 * haversine only: each point on the unit sphere, whose chord lengths
	 * order the points by distance without trigonometry per pair (geo_pairs.hpp)
	 */
	BulkVector<double> ux, uy, uz;

	int32_t users() const { return static_cast<int32_t>(user_ids.size()); }
	int64_t points() const { return offsets.back(); }
	int64_t count(int32_t u) const { return offsets[u + 1] - offsets[u]; }
};

/* Candidate locations, one per input row. */
struct GeoCandidateSet
{
	std::vector<double> x, y;
	std::vector<double> cos_lat; /* haversine only */

	size_t size() const { return x.size(); }
};

/* 'euclidean' or 'haversine' (any case); anything else is an ERROR listing the two. */
GeoMetric parse_geo_metric(const std::string &name);

/*
 * The least distance counted when a call names none.  Under haversine, 10
 * metres: about what a phone's position is sure of, so that a check-in at a
 * venue's exact coordinates weighs as much as one across the street, not
 * 10^18 times more.  Under euclidean the unit is the data's own, unknown
 * here: 1e-9 only keeps identical points finite.
 */
constexpr double kDefaultEuclideanEpsilon = 1e-9;
/* The largest |x| or |y| under euclidean: (2 x 1e150)^2 x 2 is far below DBL_MAX. */
constexpr double kMaxEuclideanCoordinate = 1e150;
constexpr double kDefaultHaversineEpsilon = 10.0;

inline double default_epsilon(GeoMetric metric)
{
	return metric == GeoMetric::Haversine ? kDefaultHaversineEpsilon : kDefaultEuclideanEpsilon;
}

/*
 * How similar_users finds each user's best others (gpurec.geo_pruning):
 * Auto prunes through a spatial index where a sample of the users says it
 * is cheaper than comparing every pair, Always prunes wherever it can (k
 * below the other users), Never compares every pair.  The answers are the
 * same bits either way.
 */
enum class GeoPruning : uint8_t
{
	Auto,
	Always,
	Never
};

struct GeoOptions
{
	GeoMetric metric = GeoMetric::Euclidean;
	double epsilon = kDefaultEuclideanEpsilon; /* > 0 */
	GeoPruning pruning = GeoPruning::Auto;
};

/*
 * The candidates query: candidate_id, x, y.  Each row is a candidate of its
 * own, even when an id repeats; results come per row, in input order.
 */
struct GeoCandidates
{
	const Int64Column &id;
	const FloatColumn &x;
	const FloatColumn &y;
};

/* The holdout query: user_id, candidate_id (the visits to predict). */
struct GeoHoldout
{
	const Int64Column &user;
	const Int64Column &candidate;
};

/* user_similarity: one row per user other than the main user, ordered by user_id. */
struct UserSimilarity
{
	int64_t user_id;
	double similarity;
	double mean_min_distance; /* the raw mean, not floored */
};

std::vector<UserSimilarity> user_similarity(const GeoPoints &points, int64_t main_user,
											const GeoOptions &options, ExecContext &ctx);

/*
 * similar_users: ordered by (user_id, rank); equal similarities rank the
 * lower other_user_id first.  With parts > 1, only the lists of part
 * `part` of the users (as the device divides them among its own parts):
 * gpurec_shards gives every partition all points and each a part, so that
 * the partitions divide the work.
 */
struct SimilarUser
{
	int64_t user_id;
	int32_t rank;
	int64_t other_user_id;
	double similarity;
};

std::vector<SimilarUser> similar_users(const GeoPoints &points, int k, const GeoOptions &options,
									   ExecContext &ctx, int part = 0, int parts = 1);

struct StrengthOptions
{
	double max_distance = std::numeric_limits<double>::infinity(); /* SQL NULL: no limit */
	double min_similarity = 0;
};

/* predict_strength: the strength of each candidate row, in input order. */
std::vector<double> predict_strength(const GeoPoints &points, int64_t main_user,
									 const GeoCandidates &candidates, double exponent,
									 const StrengthOptions &strength, const GeoOptions &options,
									 ExecContext &ctx);

/*
 * fit_exponent: per exponent (ordered by exponent, duplicates kept), the
 * mean over holdout users (summed in user_id order) of the AUC of their
 * visited candidates against the others (roc_fitness.hpp's auc_of, ties
 * counting half); users = how many holdout users had both kinds (mean_auc is
 * meaningless, SQL NULL, when users = 0).  A holdout row whose candidate_id
 * names no candidate row is ignored; one that names several marks them all.
 */
struct ExponentFit
{
	double exponent;
	double mean_auc;
	int64_t users;
};

std::vector<ExponentFit> fit_exponent(const GeoPoints &points, const GeoHoldout &holdout,
									  const GeoCandidates &candidates,
									  const std::vector<double> &exponents,
									  const StrengthOptions &strength, const GeoOptions &options,
									  ExecContext &ctx);

/*
 * fit_exponent with the continuous search: besides the grid's rows, the
 * exponent of the greatest mean AUC found within [least, greatest
 * exponent].  The objective is the grid's: the mean AUC over the holdout
 * users.  The method: the bracket around the grid's best exponent (its
 * neighbours on the grid, or the range's end) is searched by zooming: 8
 * exponents evenly inside it, then the bracket of the best found so far
 * and a step either way, until a step is at most `tolerance`; the best of
 * every exponent evaluated, the grid's included (equal means: the grid's
 * best, then the lesser exponent), so the fit is never worse than the
 * grid's.  The mean AUC is a step function of the exponent (a ranking's):
 * this finds a best step near the grid's best, not always the best of the
 * whole range.  tolerance 0: no search (`fitted` false), as when no user
 * counts (users = 0).
 */
struct ExponentSearch
{
	std::vector<ExponentFit> grid;
	bool fitted = false;
	double exponent = 0;
	double mean_auc = 0;
	int evaluations = 0; /* exponents evaluated beyond the grid */
};

ExponentSearch search_exponent(const GeoPoints &points, const GeoHoldout &holdout, const GeoCandidates &candidates,
							   const std::vector<double> &exponents, double tolerance,
							   const StrengthOptions &strength, const GeoOptions &options, ExecContext &ctx);

/*
 * search_exponent's continuous search, one round at a time, for a caller
 * that evaluates the mean AUCs itself (gpurec_shards, over partitions):
 * from the grid's rows in exponent order (tolerance > 0), probes() are
 * the exponents whose mean AUCs take() wants, until done(); then
 * exponent() and mean_auc() are the fit.  The same rounds whoever
 * evaluates them: given the same means, the same fit.
 */
class ExponentZoom
{
  public:
	ExponentZoom(const std::vector<ExponentFit> &grid, double tolerance);
	bool done() const { return done_; }
	std::vector<double> probes() const;
	/* the mean AUCs of probes(), in their order; ERROR XX000 after done() or for another count */
	void take(const std::vector<double> &means);
	double exponent() const { return found_; }
	double mean_auc() const { return found_auc_; }

  private:
	double tolerance_, grid_best_, found_, found_auc_, least_, greatest_, lo_, hi_, step_;
	bool done_;
};

/*
 * The argument checks of the functions above (which make them too), for the
 * SQL layer to call before it reads any input: metric and epsilon; the
 * exponents and the strength options (and check_k, errors.hpp).
 */
GeoOptions geo_options(const std::string &metric, double epsilon);
void check_strength_arguments(const std::vector<double> &exponents, const StrengthOptions &strength);
/* search_exponent's tolerance: finite and greater than zero (0 only from C++: no search) */
void check_tolerance(double tolerance);

/*
 * The input checks of the functions above, for gpurec_shards' coordinator
 * and partitions, which read parts of the input apart.  check_geo_input:
 * what every function checks first, epsilon, then every point's
 * coordinates (finite; under haversine in range): the error names the
 * least user with a bad point, ordered by it (Error::order) for the
 * partitions' refusals.  check_candidates: every candidate's point, the
 * error naming the least candidate id with a bad one.
 */
void check_geo_input(const GeoPoints &points, const GeoOptions &options, ExecContext &ctx);
void check_candidates(const GeoCandidates &candidates, GeoMetric metric, const CallKeys *keys);

/*
 * A building block, exposed for the unit tests: the points grouped per user
 * as the CPU path holds them (validating coordinates).
 */
GeoPointSet group_points(const GeoPoints &points, const GeoOptions &options);

} // namespace gpurec
