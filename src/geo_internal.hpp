/*
 * geo_internal.hpp: what the files of the geospatial recommender share and
 * nothing else includes.  The recommender is split by concern:
 *
 *   geo_validate.cpp  arguments and data: metric, epsilon, exponents,
 *                     strength options, coordinates, the main user
 *   geo_points.cpp    the points grouped per user (CSR) and the candidates,
 *                     as the CPU path holds them
 *   geo_cpu.cpp       the CPU algorithms: similarity sums, similar users,
 *                     strengths
 *   geo_functions.cpp the SQL-callable functions (geo.hpp): checks, the
 *                     choice of device, the GPU session, the results
 *
 * (geo.hpp, which this header includes, has no source of its own by its
 * name, so that no header/source pair includes another that includes it
 * back.)  Every geo_*.cpp includes this header right after
 * no_postgres.hpp, before any other: the CPU loops and the GPU kernels
 * perform the same IEEE operations in the same order
 * (kernels/api/geo_arithmetic.hpp), so both give the same bits, and for
 * that compilers must not fuse a*b+c in these files, whatever -march says.
 * The pragma below covers every function defined after it, the shared
 * arithmetic's inline functions included.
 */
#pragma once

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <cstdint>
#include <vector>

#include "geo.hpp"

namespace gpurec {

/* ---- geo_validate.cpp --------------------------------------------------- */

/*
 * One point's coordinates: finite; under haversine, longitude and latitude
 * in range.  The ERROR names the point's owner as `what id` ("user 7").
 */
void check_coordinates(double x, double y, GeoMetric metric, const char *what, int64_t id);

/* What every function checks first: epsilon, then every point's coordinates (check_coordinates). */
void check_geo_input(const GeoPoints &points, const GeoOptions &options, ExecContext &ctx);

/*
 * The 32-bit limits of a call (README, Limits): at most 2^31 - 2 users and
 * 2^32 - 1 candidate rows; past them ERROR 54000, before any is indexed.
 */
void check_user_count(size_t users);
void check_candidate_count(size_t candidates);

/* The code of a user that has points; else an ERROR that calls it `role`. */
int32_t main_user_code(const GeoPoints &points, int64_t main_user, const char *role = "main user");

/* ---- geo_points.cpp ----------------------------------------------------- */

/* The points grouped per user (valid ones: check_geo_input), counted as the CPU path's compute. */
GeoPointSet grouped_on_cpu(const GeoPoints &points, GeoMetric metric, ExecContext &ctx);

/* The candidates, validated, with cos(latitude) under haversine. */
GeoCandidateSet candidate_set(const GeoCandidates &candidates, GeoMetric metric);

/* ---- geo_cpu.cpp: what gpu::geo_similarity_sums, geo_similar_users and geo_strengths do, on the CPU */

void similarity_sums_on_cpu(const GeoPointSet &s, int32_t main_user, double epsilon,
							std::vector<double> &floored, std::vector<double> &raw, ExecContext &ctx);

void similar_users_on_cpu(const GeoPointSet &s, int k, double epsilon,
						  std::vector<SimilarityEntry> &heaps, std::vector<int32_t> &sizes,
						  ExecContext &ctx);

std::vector<std::vector<double>> strengths_on_cpu(const GeoPointSet &s, const GeoCandidateSet &cands,
												  int32_t main_user, double min_similarity,
												  const StrengthParams &sp,
												  const std::vector<PowerPlan> &powers, ExecContext &ctx);

} // namespace gpurec
