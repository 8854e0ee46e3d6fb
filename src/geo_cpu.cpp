/*
 * geo_cpu.cpp: the geospatial recommender's CPU algorithms, what the GPU
 * kernels (kernels/geo.cu) do on the device: the similarity sums to one
 * user, every user's most similar others, and the strengths of candidates.
 * Each runs its work items on all cores (cpu_parallel.hpp) and performs
 * the kernels' IEEE operations in their order (geo_arithmetic.hpp), so the
 * two devices give the same bits.
 */
#include "no_postgres.hpp"

#include "geo_internal.hpp"

#include "geo_pairs.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <memory>
#include <type_traits>

#include "column_chunks.hpp"
#include "cpu_parallel.hpp"

namespace gpurec {

namespace {

/* Distance evaluations per CPU work item: about a millisecond. */
constexpr double kPairsPerItem = 1e6;

/* Candidates per CPU work item: one pass over the points serves all of them. */
constexpr size_t kCandidatesPerItem = 8;

/*
 * Calls run(metric) with s's metric as a compile-time constant (so each
 * metric gets its own loop), counting the time as compute.
 */
template <typename Run> void compute_on_cpu(const GeoPointSet &s, ExecContext &ctx, Run run)
{
	Stopwatch clock;
	if (s.metric == GeoMetric::Euclidean)
		run(std::integral_constant<GeoMetric, GeoMetric::Euclidean>{});
	else
		run(std::integral_constant<GeoMetric, GeoMetric::Haversine>{});
	ctx.times.compute_ms += clock.elapsed_ms();
}

template <GeoMetric M>
void similarity_sums_cpu(const GeoPointSet &s, int32_t main_user, double epsilon,
						 std::vector<double> &floored, std::vector<double> &raw, ExecContext &ctx)
{
	int32_t n_users = s.users();
	int64_t main_begin = s.offsets[main_user], main_end = s.offsets[main_user + 1];
	double main_points = static_cast<double>(main_end - main_begin);
	floored.assign(n_users, 0.0);
	raw.assign(n_users, 0.0);
	std::vector<size_t> items = split_by_cost(n_users, kPairsPerItem, [&](size_t u) {
		return main_points * static_cast<double>(s.count(static_cast<int32_t>(u)));
	});
	parallel_for(items.size() - 1, ctx, [&](size_t item, size_t, const std::atomic<bool> &) {
		for (size_t u = items[item]; u < items[item + 1]; ++u)
		{
			double f = 0.0, r = 0.0;
			for (int64_t a = main_begin; a < main_end; ++a)
			{
				double d = nearest_distance<M>(s, a, s.offsets[u], s.offsets[u + 1]);
				f = geo::add(f, geo::greater(d, epsilon));
				r = geo::add(r, d);
			}
			floored[u] = f;
			raw[u] = r;
		}
	});
}

/* a's best others, comparing a with every other user. */
template <GeoMetric M>
void best_others_of_all(const GeoPointSet &s, int32_t a, int k, double epsilon, SimilarityEntry *heap, int &size,
						const std::atomic<bool> &cancelled)
{
	size = 0;
	for (int32_t b = 0; b < s.users() && !cancelled.load(std::memory_order_relaxed); ++b)
		if (b != a)
			offer_other<M>(s, a, b, k, epsilon, heap, size);
}

template <GeoMetric M>
void similar_users_cpu(const GeoPointSet &s, int k, double epsilon, GeoPruning pruning, int part, int parts,
					   std::vector<SimilarityEntry> &heaps, std::vector<int32_t> &sizes, ExecContext &ctx)
{
	int32_t n_users = s.users();
	heaps.assign(static_cast<size_t>(n_users) * k, SimilarityEntry{0, 0});
	sizes.assign(n_users, 0);
	std::unique_ptr<BestOthers> pruned = best_others_search(s, k, epsilon, pruning, PrunedFor::Cpu, part, parts, ctx);
	/* the part's users: codes part, part + parts, ... */
	size_t users_of_part = n_users > part ? (n_users - part + parts - 1) / parts : 0;
	parallel_for(users_of_part, ctx, [&](size_t item, size_t worker, const std::atomic<bool> &cancelled) {
		int32_t a = static_cast<int32_t>(item * parts + part);
		SimilarityEntry *heap = heaps.data() + static_cast<size_t>(a) * k;
		int size = 0;
		if (pruned)
		{
			/* the listed users only, as the GPU compares them (the first k fill the heap early) */
			std::vector<int32_t> others;
			pruned->others_of(a, worker, others);
			for (int32_t b : others)
				offer_other<M>(s, a, b, k, epsilon, heap, size);
		}
		else
			best_others_of_all<M>(s, a, k, epsilon, heap, size, cancelled);
		sizes[a] = size;
		ctx.progress.add(1);
	});
	if (pruned)
	{
		double all = 0;
		for (size_t item = 0; item < users_of_part; ++item)
			all += static_cast<double>(s.count(static_cast<int32_t>(item * parts + part))) *
				   static_cast<double>(s.points());
		double examined = pruned->compared() + pruned->searched();
		char note[200];
		snprintf(note, sizeof note,
				 "; pruned: %.3g of %.3g point pairs examined (%.2f%%: %.3g listed to compare, %.3g in the index)",
				 examined, all, all > 0 ? 100 * examined / all : 0.0, pruned->compared(), pruned->searched());
		ctx.device_choice += note;
	}
}

/*
 * The weight of every point in a strength: the similarity of its user to
 * the main user where that is at least min_similarity, else 0 (the main
 * user's own points weigh 0).
 */
BulkVector<double> point_weights(const GeoPointSet &s, int32_t main_user, double min_similarity,
								 const std::vector<double> &floored)
{
	BulkVector<double> w(s.points(), 0.0);
	int64_t main_points = s.count(main_user);
	for (int32_t u = 0; u < s.users(); ++u)
	{
		double sim = geo::similarity_of(main_points, floored[u]);
		if (u == main_user || !(sim >= min_similarity))
			continue;
		std::fill(w.begin() + s.offsets[u], w.begin() + s.offsets[u + 1], sim);
	}
	return w;
}

/*
 * The strengths of candidates [first, first + n) under one power, in the
 * order geo_kernels.hpp fixes: slices; runs of equal weight as one
 * fraction; group values into the slice sum; slice sums into the total.
 */
void strengths_of_block(const GeoPointSet &s, const BulkVector<double> &w,
						const GeoCandidateSet &cands, size_t first, size_t n,
						const StrengthParams &sp, const PowerPlan &power, double *out,
						const std::atomic<bool> &cancelled)
{
	int64_t n_points = s.points();
	bool haversine = sp.haversine;
	double total[kCandidatesPerItem] = {}, slice_sum[kCandidatesPerItem];
	geo::GroupFraction group[kCandidatesPerItem];
	auto denominator = [&](int64_t p, size_t c) {
		double base = geo::strength_base(sp, s.x[p], s.y[p], haversine ? s.cos_lat[p] : 0.0,
										 cands.x[first + c], cands.y[first + c],
										 haversine ? cands.cos_lat[first + c] : 0.0);
		return base < 0 ? base : geo::raise(base, power);
	};
	for (int64_t slice = 0; slice < n_points && !cancelled.load(std::memory_order_relaxed);
		 slice += kStrengthSlice)
	{
		int64_t slice_end = std::min(n_points, slice + kStrengthSlice);
		std::fill(slice_sum, slice_sum + n, 0.0);
		for (int64_t g0 = slice, g1; g0 < slice_end; g0 = g1)
		{
			g1 = geo::group_end(w.data(), g0, slice_end);
			double weight = w[g0];
			if (weight == 0.0)
				continue;
			for (size_t c = 0; c < n; ++c)
				group[c] = geo::GroupFraction();
			for (int64_t p = g0; p < g1; ++p)
				for (size_t c = 0; c < n; ++c)
				{
					double g = denominator(p, c);
					if (g >= 0)
						group[c].add_term(g);
				}
			for (size_t c = 0; c < n; ++c)
			{
				double sum = 0.0;
				if (group[c].fallback_needed())
				{
					for (int64_t p = g0; p < g1; ++p)
					{
						double g = denominator(p, c);
						if (g >= 0)
							sum = geo::add(sum, geo::div(1.0, g));
					}
				}
				else if (!group[c].empty())
					sum = group[c].value();
				slice_sum[c] = geo::add(slice_sum[c], geo::mul(weight, sum));
			}
		}
		for (size_t c = 0; c < n; ++c)
			total[c] = geo::add(total[c], slice_sum[c]);
	}
	std::copy(total, total + n, out);
}

/*
 * The strengths through the reach index: each candidate's pieces, summed
 * in plan order (geo_reach.hpp), the candidates of a cell one after the
 * other so that their pieces stay in cache.
 */
void strengths_in_reach(const CpuReachIndex &reach, const BulkVector<double> &w, const GeoCandidateSet &cands,
						const StrengthParams &sp, const std::vector<PowerPlan> &powers,
						std::vector<std::vector<double>> &out, ExecContext &ctx)
{
	const ReachPlan &plan = reach.plan;
	BulkVector<double> entry_weight(reach.point.size());
	for_each_in_blocks(reach.point.size(), size_t(1) << 16, ctx,
					   [&](size_t, size_t, size_t e) { entry_weight[e] = w[reach.point[e]]; });
	ReachEntries entries{reach.x.data(), reach.y.data(), reach.cos_lat.empty() ? nullptr : reach.cos_lat.data(),
						 entry_weight.data()};
	std::vector<uint32_t> group_of(plan.order.size());
	for (size_t g = 0; g < plan.groups(); ++g)
		std::fill(group_of.begin() + plan.group_begin[g], group_of.begin() + plan.group_begin[g + 1],
				  static_cast<uint32_t>(g));
	size_t n = plan.order.size();
	parallel_for(n * powers.size(), ctx, [&](size_t item, size_t, const std::atomic<bool> &cancelled) {
		size_t e = item / n, at = item % n;
		uint32_t c = plan.order[at];
		uint32_t g = group_of[at];
		double cx = cands.x[c], cy = cands.y[c], ccos = sp.haversine ? cands.cos_lat[c] : 0.0;
		double total = 0.0;
		for (int64_t p = plan.piece_begin[g]; p < plan.piece_begin[g + 1] && !cancelled.load(std::memory_order_relaxed); ++p)
			total = geo::add(total, reach_piece_sum(entries, plan.piece_first[p], plan.piece_last[p], sp, powers[e],
													cx, cy, ccos));
		out[e][c] = total;
	});
}

} // namespace

void similarity_sums_on_cpu(const GeoPointSet &s, int32_t main_user, double epsilon,
							std::vector<double> &floored, std::vector<double> &raw,
							ExecContext &ctx)
{
	compute_on_cpu(s, ctx, [&](auto metric) {
		similarity_sums_cpu<metric()>(s, main_user, epsilon, floored, raw, ctx);
	});
}

void similar_users_on_cpu(const GeoPointSet &s, int k, double epsilon, GeoPruning pruning, int part, int parts,
						  std::vector<SimilarityEntry> &heaps, std::vector<int32_t> &sizes,
						  ExecContext &ctx)
{
	compute_on_cpu(s, ctx, [&](auto metric) {
		similar_users_cpu<metric()>(s, k, epsilon, pruning, part, parts, heaps, sizes, ctx);
	});
}

std::vector<std::vector<double>> strengths_on_cpu(const GeoPointSet &s, const GeoCandidateSet &cands,
												  int32_t main_user, double min_similarity,
												  const StrengthParams &sp,
												  const std::vector<PowerPlan> &powers, const CpuReachIndex *reach,
												  ExecContext &ctx)
{
	std::vector<double> floored, raw;
	similarity_sums_on_cpu(s, main_user, sp.epsilon, floored, raw, ctx);
	Stopwatch clock;
	BulkVector<double> w = point_weights(s, main_user, min_similarity, floored);
	std::vector<std::vector<double>> out(powers.size(), std::vector<double>(cands.size()));
	if (reach)
	{
		strengths_in_reach(*reach, w, cands, sp, powers, out, ctx);
		ctx.times.compute_ms += clock.elapsed_ms();
		return out;
	}
	size_t blocks = (cands.size() + kCandidatesPerItem - 1) / kCandidatesPerItem;
	parallel_for(blocks * powers.size(), ctx, [&](size_t item, size_t, const std::atomic<bool> &cancelled) {
		size_t e = item / blocks, first = (item % blocks) * kCandidatesPerItem;
		strengths_of_block(s, w, cands, first, std::min(kCandidatesPerItem, cands.size() - first),
						   sp, powers[e], out[e].data() + first, cancelled);
	});
	ctx.times.compute_ms += clock.elapsed_ms();
	return out;
}

} // namespace gpurec
