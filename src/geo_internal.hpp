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
 *   geo_pairs.hpp     the CPU's nearest point of a user (by chord under
 *                     haversine) and one user's offer to another's best
 *   geo_pruned.cpp    similar_users through a k-d tree, pruned
 *   geo_reach.cpp     the reach index under max_distance, as the CPU holds it
 *   geo_device.cpp    one computation on the device dispatch chooses: the
 *                     GPU session, the CPU path, or the GPU service
 *   geo_functions.cpp the SQL-callable functions (geo.hpp): checks, the
 *                     work they ask of a device, the results
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

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "geo.hpp" /* and through it geo_kernels.hpp: geo_arithmetic.hpp, geo_reach.hpp */

namespace gpurec {

/*
 * The points as the devices take them: each row's user code and
 * coordinates, and per code the user's id and number of points.  From a
 * GeoPoints in a backend (rows_of), from the wire in the GPU service.
 */
struct GeoRows
{
	const ChunkedColumn<int32_t> &codes;
	const ChunkedColumn<double> &x;
	const ChunkedColumn<double> &y;
	const std::vector<int64_t> &user_ids;
	const std::vector<int64_t> &counts;
};

inline GeoRows rows_of(const GeoPoints &points)
{
	return {points.user.codes(), points.x, points.y, points.user.values(), points.user.counts()};
}

/* ---- geo_validate.cpp --------------------------------------------------- */

/* Whether check_coordinates accepts the point, without building its error. */
inline bool point_in_range(double x, double y, GeoMetric metric)
{
	if (metric == GeoMetric::Haversine)
		return x >= -180 && x <= 180 && y >= -90 && y <= 90;
	return std::fabs(x) <= kMaxEuclideanCoordinate && std::fabs(y) <= kMaxEuclideanCoordinate;
}

/*
 * One point's coordinates: finite; under haversine, longitude and latitude
 * in range.  The ERROR names the point's owner as `what id` ("user 7"),
 * the id as the call shows its column `what`_id (shown_id).
 */
void check_coordinates(double x, double y, GeoMetric metric, const char *what, int64_t id, const CallKeys *keys);


/*
 * The 32-bit limits of a call (README, Limits): at most 2^31 - 2 users and
 * 2^32 - 1 candidate rows; past them ERROR 54000, before any is indexed.
 */
void check_user_count(size_t users);
void check_candidate_count(size_t candidates);

/*
 * The code of a user that has points; else an ERROR that calls it `role`
 * and names it by its own id (a uuid or text id's value, through ctx.keys).
 */
int32_t main_user_code(const GeoPoints &points, int64_t main_user, const ExecContext &ctx,
					   const char *role = "main user");

/* ---- geo_points.cpp ----------------------------------------------------- */

/* The points grouped per user (valid ones: check_geo_input), counted as the CPU path's compute. */
GeoPointSet grouped_on_cpu(const GeoRows &points, GeoMetric metric, ExecContext &ctx);

/* The candidates, validated, with cos(latitude) under haversine. */
GeoCandidateSet candidate_set(const GeoCandidates &candidates, GeoMetric metric, const CallKeys *keys);

/* ---- geo_cpu.cpp: what gpu::geo_similarity_sums, geo_similar_users and geo_strengths do, on the CPU */

void similarity_sums_on_cpu(const GeoPointSet &s, int32_t main_user, double epsilon,
							std::vector<double> &floored, std::vector<double> &raw, ExecContext &ctx);

/* Part `part` of `parts`: the users of codes part, part + parts, ...; the others keep sizes 0. */
void similar_users_on_cpu(const GeoPointSet &s, int k, double epsilon, GeoPruning pruning, int part, int parts,
						  std::vector<SimilarityEntry> &heaps, std::vector<int32_t> &sizes,
						  ExecContext &ctx);

/* ---- geo_reach.cpp: the reach index under max_distance (kernels/api/geo_reach.hpp) */

/* The grid of a call: over its points and candidates, whatever the rows' order. */
ReachGrid reach_grid_of(const GeoRows &points, const GeoCandidateSet &cands, const StrengthParams &sp);

/* The points in the grid's cell order (point: each entry's index in the GeoPointSet), and the plan. */
struct CpuReachIndex
{
	ReachGrid grid;
	std::vector<int64_t> cell_start;
	BulkVector<double> x, y, cos_lat;
	std::vector<uint32_t> point;
	ReachPlan plan;
};

CpuReachIndex reach_index_on_cpu(const GeoPointSet &s, const GeoCandidateSet &cands, const ReachGrid &grid,
								 ExecContext &ctx);

/* The strengths; through `reach` when given (max_distance), else over every point. */
std::vector<std::vector<double>> strengths_on_cpu(const GeoPointSet &s, const GeoCandidateSet &cands,
												  int32_t main_user, double min_similarity,
												  const StrengthParams &sp,
												  const std::vector<PowerPlan> &powers, const CpuReachIndex *reach,
												  ExecContext &ctx);

/* ---- geo_pruned.cpp: similar_users through a spatial index ------------- */

/* A search of users' best others that prunes the users who cannot enter (geo_pruned.cpp says how). */
class BestOthers
{
  public:
	virtual ~BestOthers() = default;
	/*
	 * Appends to `others` the users that may enter a's k best, from bounds
	 * and k comparisons: distinct, not a, and holding every user whose
	 * similarity to a reaches the k-th best's (ties too), k of them (compared
	 * on the CPU to find them) first.  worker: parallel_for's, for scratch
	 * kept per thread.  The device compares them all (the CPU, geo_cpu.cpp,
	 * or the GPU, geo_device.cpp).
	 */
	virtual void others_of(int32_t a, size_t worker, std::vector<int32_t> &others) = 0;
	/* The point pairs listed so far (others_of) to compare, and the index's steps (and the CPU's comparisons) to list them. */
	virtual double compared() const = 0;
	virtual double searched() const = 0;
};

/* Who compares the users a pruned search lists: the CPU or the GPU (their costs differ against the index's). */
enum class PrunedFor : uint8_t
{
	Cpu,
	Gpu
};

/*
 * Whether similar_users compares every pair whatever its points' places
 * are: pruning Never, k at least the other users, or under Auto an input
 * too small for an index (on the GPU: one whose brute force, a part of
 * `parts`, costs less than a pruned search at the least).  No index, nor
 * the CPU's grouping of the points, is then made.
 */
bool brute_force_by_size(int64_t n_points, int32_t n_users, int k, GeoPruning pruning, PrunedFor device,
						 int parts);

/*
 * Whether the GPU's similar_users goes by its search bounded by the users'
 * boxes (gpu::geo_similar_users_bounded), with no index on the CPU: k of
 * at most gpu::kMostBoundedOthers, pruning Always, or Auto on an input
 * worth pruning (under Auto the search may still give up for the brute
 * force).
 */
bool gpu_bounded_by_size(int64_t n_points, int32_t n_users, int k, GeoPruning pruning);

/*
 * The pruned search for similar_users' part `part` of `parts`, with its
 * index built, or null where every pair is to be compared: pruning Never,
 * k at least the other users, or under Auto a small input or a sample of
 * the part's users whose lists (others_of: the index's steps, and the
 * pairs listed) cost more than a brute force would.
 */
std::unique_ptr<BestOthers> best_others_search(const GeoPointSet &s, int k, double epsilon, GeoPruning pruning,
											   PrunedFor device, int part, int parts, ExecContext &ctx);

/* ---- geo_device.cpp: one computation of a function on its device --------- */

/* What a function asks of the device (the CPU's or the GPU's: the same work either way). */
struct GeoWork
{
	enum class Kind : uint8_t
	{
		SimilaritySums, /* user_similarity: main's sums against every user */
		SimilarUsers,	/* similar_users: every user's `kept` most similar */
		Strengths,		/* predict_strength: main's strengths of the candidates, one vector per power */
		AucSums			/* fit_exponent: per power, each of `users`' AUC */
	};
	Kind kind = Kind::SimilaritySums;
	GeoMetric metric = GeoMetric::Euclidean;
	double epsilon = 0;
	int32_t main = 0;
	int32_t kept = 0;
	double min_similarity = 0;
	GeoPruning pruning = GeoPruning::Auto; /* SimilarUsers */
	StrengthParams strength{};
	std::vector<PowerPlan> powers;
	/* AucSums: the holdout users' codes, and for each the candidates it visited (1) or not (0) */
	std::vector<int32_t> users;
	std::vector<std::vector<uint8_t>> positives;
	/*
	 * Split over several devices (the GPU service, or a partition of
	 * gpurec_shards): this is part `part` of `parts`, which computes
	 * SimilarUsers of some users, AucSums of a contiguous range of `users`.
	 * (The service splits Strengths by candidate and SimilaritySums by user
	 * range by giving each part those candidates or users: geo_device.cpp.)
	 */
	int32_t part = 0;
	int32_t parts = 1;
};

struct GeoWorkResult
{
	std::vector<double> floored, raw;			/* SimilaritySums, by user code */
	std::vector<SimilarityEntry> heaps;			/* SimilarUsers, as gpu::geo_similar_users leaves them */
	std::vector<int32_t> sizes;
	std::vector<std::vector<double>> strengths; /* Strengths */
	std::vector<std::vector<double>> aucs;		/* AucSums: per power, each user's (of the part's range) */
};

/*
 * Runs `work` on the device dispatch chooses for `cost` distance
 * evaluations (`function` names the call in its NOTICEs): the GPU of this
 * process, the GPU service's (ctx.service), or the CPU.  `candidates` for
 * Strengths and AucSums, else null.
 */
GeoWorkResult run_geo_work(const GeoRows &points, const GeoCandidateSet *candidates, const GeoWork &work,
						   const char *function, double cost, ExecContext &ctx);

} // namespace gpurec
