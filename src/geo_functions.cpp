/*
 * geo_functions.cpp: the geospatial recommender's functions (geo.hpp):
 * each checks its arguments and data (geo_validate.cpp), says what it asks
 * of a device (GeoWork, run by geo_device.cpp) and builds its result rows.
 * geo_internal.hpp says how the recommender's files divide the work.
 */
#include "no_postgres.hpp"

#include "geo_internal.hpp"
#include "cpu_parallel.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <unordered_map>

namespace gpurec {

namespace {

/* Exponents fit_exponent's continuous search evaluates a round. */
constexpr int kSearchPoints = 8;

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

} // namespace

/* ---- the functions ------------------------------------------------------ */

std::vector<UserSimilarity> user_similarity(const GeoPoints &points, int64_t main_user,
											const GeoOptions &options, ExecContext &ctx)
{
	check_geo_input(points, options, ctx);
	int32_t main = main_user_code(points, main_user, ctx);
	int64_t main_points = points.user.counts()[main];
	GeoWork work;
	work.kind = GeoWork::Kind::SimilaritySums;
	work.metric = options.metric;
	work.epsilon = options.epsilon;
	work.main = main;
	double cost = static_cast<double>(main_points) * static_cast<double>(points.user.size());
	GeoWorkResult sums = run_geo_work(rows_of(points), nullptr, work, "user_similarity", cost, ctx);
	const std::vector<double> &floored = sums.floored, &raw = sums.raw;

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
									   ExecContext &ctx, int part, int parts)
{
	check_k(k);
	if (parts < 1 || part < 0 || part >= parts)
		throw Error(sqlstate::invalid_parameter_value, "part must be at least 0 and below parts",
					"part = " + std::to_string(part) + ", parts = " + std::to_string(parts) + ".");
	check_geo_input(points, options, ctx);
	int32_t n_users = static_cast<int32_t>(points.user.distinct());
	if (n_users < 2)
		return {};
	int kept = std::min(k, n_users - 1);
	GeoWork work;
	work.kind = GeoWork::Kind::SimilarUsers;
	work.metric = options.metric;
	work.epsilon = options.epsilon;
	work.kept = kept;
	work.pruning = options.pruning;
	work.part = part;
	work.parts = parts;
	double n_points = static_cast<double>(points.user.size());
	GeoWorkResult found = run_geo_work(rows_of(points), nullptr, work, "similar_users",
									   n_points * n_points / parts, ctx);
	std::vector<SimilarityEntry> &heaps = found.heaps;
	const std::vector<int32_t> &sizes = found.sizes;

	/* each user's rows at their place in user_id order, the users on every core (a million rows: 100k users) */
	std::vector<int32_t> by_id = points.user.codes_in_id_order();
	std::vector<size_t> first(by_id.size() + 1, 0);
	for (size_t i = 0; i < by_id.size(); ++i)
		first[i + 1] = first[i] + static_cast<size_t>(sizes[by_id[i]]);
	std::vector<SimilarUser> out(first.back());
	constexpr size_t kUsersAtATime = 4096;
	parallel_for((by_id.size() + kUsersAtATime - 1) / kUsersAtATime, ctx,
				 [&](size_t item, size_t, const std::atomic<bool> &) {
					 size_t end = std::min(by_id.size(), (item + 1) * kUsersAtATime);
					 for (size_t i = item * kUsersAtATime; i < end; ++i)
					 {
						 int32_t a = by_id[i];
						 SimilarityEntry *heap = heaps.data() + static_cast<size_t>(a) * kept;
						 std::sort(heap, heap + sizes[a], geo::better);
						 for (int r = 0; r < sizes[a]; ++r)
							 out[first[i] + r] = {points.user.value_of(a), r + 1, heap[r].user_id, heap[r].similarity};
					 }
				 });
	return out;
}

std::vector<double> predict_strength(const GeoPoints &points, int64_t main_user,
									 const GeoCandidates &candidates, double exponent,
									 const StrengthOptions &strength, const GeoOptions &options,
									 ExecContext &ctx)
{
	check_strength_arguments({exponent}, strength);
	check_geo_input(points, options, ctx);
	int32_t main = main_user_code(points, main_user, ctx);
	GeoCandidateSet cands = candidate_set(candidates, options.metric, ctx.keys.get());
	if (cands.size() == 0)
		return {};
	GeoWork work;
	work.kind = GeoWork::Kind::Strengths;
	work.metric = options.metric;
	work.main = main;
	work.min_similarity = strength.min_similarity;
	work.strength = strength_params(strength, options);
	work.powers = {plan_power(exponent)};
	double cost = static_cast<double>(points.user.size()) *
				  static_cast<double>(points.user.counts()[main] + static_cast<int64_t>(cands.size()));
	return std::move(run_geo_work(rows_of(points), &cands, work, "predict_strength", cost, ctx).strengths[0]);
}

std::vector<ExponentFit> fit_exponent(const GeoPoints &points, const GeoHoldout &holdout,
									  const GeoCandidates &candidates,
									  const std::vector<double> &exponents,
									  const StrengthOptions &strength, const GeoOptions &options,
									  ExecContext &ctx)
{
	return search_exponent(points, holdout, candidates, exponents, 0, strength, options, ctx).grid;
}

ExponentSearch search_exponent(const GeoPoints &points, const GeoHoldout &holdout, const GeoCandidates &candidates,
							   const std::vector<double> &exponents, double tolerance,
							   const StrengthOptions &strength, const GeoOptions &options, ExecContext &ctx)
{
	check_strength_arguments(exponents, strength);
	if (tolerance != 0)
		check_tolerance(tolerance);
	check_geo_input(points, options, ctx);
	GeoCandidateSet cands = candidate_set(candidates, options.metric, ctx.keys.get());

	/* the candidate rows of each candidate_id */
	std::unordered_map<int64_t, std::vector<uint32_t>> rows_of_candidate;
	check_candidate_count(cands.size());
	for (size_t r = 0; r < cands.size(); ++r)
		rows_of_candidate[candidates.id[r]].push_back(static_cast<uint32_t>(r));

	/* holdout users in id order, each with its visited candidate ids */
	std::vector<std::pair<int64_t, int64_t>> visits(holdout.user.size());
	for (size_t i = 0; i < visits.size(); ++i)
		visits[i] = {holdout.user[i], holdout.candidate[i]};
	std::sort(visits.begin(), visits.end());
	visits.erase(std::unique(visits.begin(), visits.end()), visits.end());

	GeoWork work;
	work.kind = GeoWork::Kind::AucSums;
	work.metric = options.metric;
	work.min_similarity = strength.min_similarity;
	work.strength = strength_params(strength, options);
	/* distance evaluations: each user's similarity sums once, and its strengths per exponent */
	double sums_cost = 0, strengths_cost = 0;
	double n_points = static_cast<double>(points.user.size());
	for (size_t i = 0; i < visits.size();)
	{
		int64_t user = visits[i].first;
		int32_t code = main_user_code(points, user, ctx, "holdout user");
		std::vector<uint8_t> positive(cands.size(), 0);
		size_t n_positive = 0;
		for (; i < visits.size() && visits[i].first == user; ++i)
		{
			auto it = rows_of_candidate.find(visits[i].second);
			if (it != rows_of_candidate.end())
				for (uint32_t r : it->second)
					n_positive += positive[r] ? 0 : (positive[r] = 1);
		}
		/* an AUC needs a visited and an unvisited candidate */
		if (n_positive > 0 && n_positive < cands.size())
		{
			work.users.push_back(code);
			work.positives.push_back(std::move(positive));
			sums_cost += n_points * static_cast<double>(points.user.counts()[code]);
			strengths_cost += n_points * static_cast<double>(cands.size());
		}
	}
	size_t users = work.users.size();

	/* the mean AUC of each exponent: AUCs summed in user order, however many devices computed them */
	auto mean_aucs = [&](const std::vector<double> &of) {
		std::vector<double> auc_sum(of.size(), 0.0);
		if (users == 0)
			return auc_sum;
		work.powers.clear();
		for (double e : of)
			work.powers.push_back(plan_power(e));
		double cost = sums_cost + strengths_cost * static_cast<double>(of.size());
		std::vector<std::vector<double>> aucs = run_geo_work(rows_of(points), &cands, work, "fit_exponent", cost, ctx).aucs;
		for (size_t e = 0; e < of.size(); ++e)
		{
			for (double auc : aucs[e])
				auc_sum[e] += auc;
			auc_sum[e] /= static_cast<double>(users);
		}
		return auc_sum;
	};

	ExponentSearch out;
	std::vector<double> grid_means = mean_aucs(exponents);
	for (size_t e = 0; e < exponents.size(); ++e)
		out.grid.push_back({exponents[e], grid_means[e], static_cast<int64_t>(users)});
	std::stable_sort(out.grid.begin(), out.grid.end(),
					 [](const ExponentFit &a, const ExponentFit &b) { return a.exponent < b.exponent; });
	if (tolerance == 0 || users == 0)
		return out;

	ExponentZoom zoom(out.grid, tolerance);
	while (!zoom.done())
	{
		zoom.take(mean_aucs(zoom.probes()));
		out.evaluations += kSearchPoints;
		ctx.interrupt_point(Phase::Compute);
	}
	out.fitted = true;
	out.exponent = zoom.exponent();
	out.mean_auc = zoom.mean_auc();
	return out;
}

ExponentZoom::ExponentZoom(const std::vector<ExponentFit> &grid, double tolerance) : tolerance_(tolerance)
{
	/* the grid's best (the lesser exponent of equal means), and the bracket of its neighbours */
	size_t best = 0;
	for (size_t e = 1; e < grid.size(); ++e)
		if (grid[e].mean_auc > grid[best].mean_auc)
			best = e;
	grid_best_ = found_ = grid[best].exponent;
	found_auc_ = grid[best].mean_auc;
	least_ = grid.front().exponent;
	greatest_ = grid.back().exponent;
	lo_ = grid[best > 0 ? best - 1 : 0].exponent;
	hi_ = grid[best + 1 < grid.size() ? best + 1 : best].exponent;
	step_ = (hi_ - lo_) / (kSearchPoints + 1);
	done_ = !(hi_ > lo_);
}

/*
 * Zooming: kSearchPoints exponents evenly inside the bracket, in one call
 * (one pass over the points serves them all); the bracket becomes the best
 * found so far and a step either way; until a step is at most the
 * tolerance.  Several points a round, not one as golden section takes: the
 * mean AUC is a step function, and a lone probe stalls on a step beside a
 * narrow peak.
 */
std::vector<double> ExponentZoom::probes() const
{
	std::vector<double> out;
	for (int i = 1; i <= kSearchPoints; ++i)
		out.push_back(lo_ + (hi_ - lo_) * i / (kSearchPoints + 1));
	return out;
}

void ExponentZoom::take(const std::vector<double> &means)
{
	std::vector<double> probed = probes();
	if (done_ || means.size() != probed.size())
		throw Error(sqlstate::internal_error, "an exponent search step got " + std::to_string(means.size()) +
												  " means for " + std::to_string(probed.size()) + " exponents");
	for (size_t i = 0; i < probed.size(); ++i)
		/* equal means: the grid's best stays, else the lesser exponent */
		if (means[i] > found_auc_ || (means[i] == found_auc_ && probed[i] < found_ && found_ != grid_best_))
		{
			found_ = probed[i];
			found_auc_ = means[i];
		}
	if (step_ <= tolerance_)
	{
		done_ = true;
		return;
	}
	lo_ = std::max(least_, found_ - step_);
	hi_ = std::min(greatest_, found_ + step_);
	step_ = (hi_ - lo_) / (kSearchPoints + 1);
	done_ = !(hi_ > lo_);
}

} // namespace gpurec
