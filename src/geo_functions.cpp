/*
 * geo_functions.cpp: the geospatial recommender's functions (geo.hpp):
 * each checks its arguments and data (geo_validate.cpp), chooses the
 * device, computes there (the GPU through kernels/api/geo_kernels.hpp, the
 * CPU through geo_points.cpp and geo_cpu.cpp) and builds its result rows.
 * geo_internal.hpp says how the recommender's files divide the work.
 */
#include "no_postgres.hpp"

#include "geo_internal.hpp"
#include "cpu_parallel.hpp"
#include "roc_fitness.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace gpurec {

namespace {

/* The largest squared distance whose square root rounds to at most max_distance. */
double euclidean_max_key(double max_distance)
{
	double key = max_distance * max_distance;
	while (key > 0 && std::sqrt(key) > max_distance)
		key = std::nextafter(key, 0.0);
	while (std::sqrt(std::nextafter(key, INFINITY)) <= max_distance)
		key = std::nextafter(key, INFINITY);
	return key;
}

StrengthParams strength_params(const StrengthOptions &strength, const GeoOptions &options)
{
	StrengthParams p;
	p.haversine = options.metric == GeoMetric::Haversine;
	p.epsilon = options.epsilon;
	p.epsilon_squared = options.epsilon * options.epsilon;
	p.has_max_distance = !std::isinf(strength.max_distance);
	p.max_key = !p.has_max_distance ? INFINITY
				: options.metric == GeoMetric::Euclidean ? euclidean_max_key(strength.max_distance)
														 : strength.max_distance;
	return p;
}

/*
 * The points (and candidates) on the GPU: the one place where the engine's
 * geo columns become the kernels' views.
 */
gpu::GeoSessionPtr open_gpu_session(const GeoPoints &points, GeoMetric metric, const GeoCandidateSet *cands,
									ExecContext &ctx)
{
	gpu::GeoPointColumns columns;
	columns.user_codes = chunk_view(points.user.codes());
	columns.x = chunk_view(points.x);
	columns.y = chunk_view(points.y);
	columns.user_ids = points.user.values().data();
	columns.points_per_user = points.user.counts().data();
	columns.users = static_cast<int32_t>(points.user.distinct());
	columns.haversine = metric == GeoMetric::Haversine;
	gpu::GeoCandidateColumns candidate_columns;
	if (cands)
		candidate_columns = {cands->x.data(), cands->y.data(), cands->cos_lat.empty() ? nullptr : cands->cos_lat.data(),
							 cands->size()};
	return gpu::open_geo_session(columns, cands ? &candidate_columns : nullptr, ctx);
}

/*
 * Runs a computation on the device that dispatch (device.hpp) chooses for
 * `work` distance evaluations: on_gpu(session) with the points (and the
 * candidates, when given) on the GPU, or on_cpu(set) with the points
 * grouped on the CPU.
 */
template <typename OnGpu, typename OnCpu>
void on_chosen_device(const GeoPoints &points, GeoMetric metric, const GeoCandidateSet *cands,
					  const char *function, double work, ExecContext &ctx, OnGpu on_gpu, OnCpu on_cpu)
{
	dispatch(
		ctx, function, work, kMinGpuPairs,
		[&] {
			gpu::GeoSessionPtr session = open_gpu_session(points, metric, cands, ctx);
			on_gpu(*session);
		},
		[&] {
			GeoPointSet set = grouped_on_cpu(points, metric, ctx);
			on_cpu(set);
		});
}

} // namespace

/* ---- the functions ------------------------------------------------------ */

std::vector<UserSimilarity> user_similarity(const GeoPoints &points, int64_t main_user,
											const GeoOptions &options, ExecContext &ctx)
{
	check_geo_input(points, options, ctx);
	int32_t main = main_user_code(points, main_user);
	int64_t main_points = points.user.counts()[main];
	std::vector<double> floored, raw;
	double work = static_cast<double>(main_points) * static_cast<double>(points.user.size());
	on_chosen_device(
		points, options.metric, nullptr, "user_similarity", work, ctx,
		[&](gpu::GeoSession &session) { gpu::geo_similarity_sums(session, main, options.epsilon, floored, raw); },
		[&](const GeoPointSet &set) { similarity_sums_on_cpu(set, main, options.epsilon, floored, raw, ctx); });

	/* codes ascend with the ids (check_geo_input): user u's row is the u-th, less main's */
	size_t users = points.user.distinct();
	std::vector<UserSimilarity> out(users - 1);
	for_each_in_blocks(users, size_t(1) << 16, ctx, [&](size_t, size_t, size_t u) {
		if (u != static_cast<size_t>(main))
			out[u < static_cast<size_t>(main) ? u : u - 1] = {points.user.value_of(static_cast<int32_t>(u)),
															   geo::similarity_of(main_points, floored[u]),
															   raw[u] / static_cast<double>(main_points)};
	});
	return out;
}

std::vector<SimilarUser> similar_users(const GeoPoints &points, int k, const GeoOptions &options,
									   ExecContext &ctx)
{
	check_k(k);
	check_geo_input(points, options, ctx);
	int32_t n_users = static_cast<int32_t>(points.user.distinct());
	if (n_users < 2)
		return {};
	int kept = std::min(k, n_users - 1);
	std::vector<SimilarityEntry> heaps;
	std::vector<int32_t> sizes;
	double n_points = static_cast<double>(points.user.size());
	on_chosen_device(
		points, options.metric, nullptr, "similar_users", n_points * n_points, ctx,
		[&](gpu::GeoSession &session) { gpu::geo_similar_users(session, kept, options.epsilon, heaps, sizes); },
		[&](const GeoPointSet &set) { similar_users_on_cpu(set, kept, options.epsilon, heaps, sizes, ctx); });

	std::vector<SimilarUser> out;
	out.reserve(static_cast<size_t>(n_users) * kept);
	for (int32_t a : points.user.codes_in_id_order())
	{
		SimilarityEntry *heap = heaps.data() + static_cast<size_t>(a) * kept;
		std::sort(heap, heap + sizes[a], geo::better);
		for (int r = 0; r < sizes[a]; ++r)
			out.push_back({points.user.value_of(a), r + 1, heap[r].user_id, heap[r].similarity});
	}
	return out;
}

namespace {

/*
 * Strengths of the candidates for main users one after another, on the
 * device chosen once: consume(strengths_for), strengths_for(main_code) ->
 * one vector per power.
 */
template <typename Consumer>
void with_strengths(const GeoPoints &points, const GeoCandidateSet &cands,
					const std::vector<PowerPlan> &powers, const StrengthOptions &strength,
					const StrengthParams &sp, double work, const char *function,
					ExecContext &ctx, Consumer consume)
{
	GeoMetric metric = sp.haversine ? GeoMetric::Haversine : GeoMetric::Euclidean;
	on_chosen_device(
		points, metric, &cands, function, work, ctx,
		[&](gpu::GeoSession &session) {
			consume([&](int32_t main) {
				return gpu::geo_strengths(session, main, strength.min_similarity, sp, powers);
			});
		},
		[&](const GeoPointSet &set) {
			consume([&](int32_t main) {
				return strengths_on_cpu(set, cands, main, strength.min_similarity, sp, powers, ctx);
			});
		});
}

} // namespace

std::vector<double> predict_strength(const GeoPoints &points, int64_t main_user,
									 const GeoCandidates &candidates, double exponent,
									 const StrengthOptions &strength, const GeoOptions &options,
									 ExecContext &ctx)
{
	check_strength_arguments({exponent}, strength);
	check_geo_input(points, options, ctx);
	int32_t main = main_user_code(points, main_user);
	GeoCandidateSet cands = candidate_set(candidates, options.metric);
	if (cands.size() == 0)
		return {};
	StrengthParams sp = strength_params(strength, options);
	std::vector<PowerPlan> powers{plan_power(exponent)};
	double work = static_cast<double>(points.user.size()) *
				  static_cast<double>(points.user.counts()[main] + static_cast<int64_t>(cands.size()));
	std::vector<double> out;
	with_strengths(points, cands, powers, strength, sp, work, "predict_strength", ctx,
				   [&](auto strengths_for) { out = std::move(strengths_for(main)[0]); });
	return out;
}

std::vector<ExponentFit> fit_exponent(const GeoPoints &points, const GeoHoldout &holdout,
									  const GeoCandidates &candidates,
									  const std::vector<double> &exponents,
									  const StrengthOptions &strength, const GeoOptions &options,
									  ExecContext &ctx)
{
	check_strength_arguments(exponents, strength);
	check_geo_input(points, options, ctx);
	GeoCandidateSet cands = candidate_set(candidates, options.metric);
	StrengthParams sp = strength_params(strength, options);

	/* the candidate rows of each candidate_id */
	std::unordered_map<int64_t, std::vector<uint32_t>> rows_of;
	check_candidate_count(cands.size());
	for (size_t r = 0; r < cands.size(); ++r)
		rows_of[candidates.id[r]].push_back(static_cast<uint32_t>(r));

	/* holdout users in id order, each with its visited candidate ids */
	std::vector<std::pair<int64_t, int64_t>> visits(holdout.user.size());
	for (size_t i = 0; i < visits.size(); ++i)
		visits[i] = {holdout.user[i], holdout.candidate[i]};
	std::sort(visits.begin(), visits.end());
	visits.erase(std::unique(visits.begin(), visits.end()), visits.end());

	struct Evaluated
	{
		int32_t code;
		std::vector<uint8_t> positive;
	};
	std::vector<Evaluated> users;
	double work = 0;
	double n_points = static_cast<double>(points.user.size());
	for (size_t i = 0; i < visits.size();)
	{
		int64_t user = visits[i].first;
		int32_t code = main_user_code(points, user, "holdout user");
		std::vector<uint8_t> positive(cands.size(), 0);
		size_t n_positive = 0;
		for (; i < visits.size() && visits[i].first == user; ++i)
		{
			auto it = rows_of.find(visits[i].second);
			if (it != rows_of.end())
				for (uint32_t r : it->second)
					n_positive += positive[r] ? 0 : (positive[r] = 1);
		}
		/* an AUC needs a visited and an unvisited candidate */
		if (n_positive > 0 && n_positive < cands.size())
		{
			users.push_back({code, std::move(positive)});
			work += n_points * static_cast<double>(points.user.counts()[code] +
												   static_cast<int64_t>(cands.size() * exponents.size()));
		}
	}

	std::vector<PowerPlan> powers;
	for (double e : exponents)
		powers.push_back(plan_power(e));
	std::vector<double> auc_sum(exponents.size(), 0.0);
	if (!users.empty())
		with_strengths(points, cands, powers, strength, sp, work, "fit_exponent", ctx,
					   [&](auto strengths_for) {
						   /* from the start: the CPU reruns what a GPU out of memory began */
						   std::fill(auc_sum.begin(), auc_sum.end(), 0.0);
						   for (const Evaluated &user : users)
						   {
							   /*
							    * one segment per exponent, counted as roc_fitness counts: either
							    * device gives the strengths in host memory (geo_strengths returns
							    * them there, as predict_strength needs them)
							    */
							   std::vector<std::vector<double>> s = strengths_for(user.code);
							   std::vector<ScoredSegment> segments;
							   for (const std::vector<double> &strengths : s)
								   segments.push_back({strengths.data(), user.positive.data(), strengths.size()});
							   std::vector<RocCounts> counts = roc_counts_on_cpu(segments, ctx);
							   for (size_t e = 0; e < exponents.size(); ++e)
								   auc_sum[e] += auc_of(counts[e]);
							   ctx.interrupt_point(Phase::Compute);
						   }
					   });

	std::vector<ExponentFit> out;
	for (size_t e = 0; e < exponents.size(); ++e)
		out.push_back({exponents[e],
					   users.empty() ? 0.0 : auc_sum[e] / static_cast<double>(users.size()),
					   static_cast<int64_t>(users.size())});
	std::stable_sort(out.begin(), out.end(),
					 [](const ExponentFit &a, const ExponentFit &b) { return a.exponent < b.exponent; });
	return out;
}

} // namespace gpurec
