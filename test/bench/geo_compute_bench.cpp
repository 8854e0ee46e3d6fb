/*
 * geo_compute_bench.cpp: the compute phases of the geospatial recommender
 * alone, at these sizes, without PostgreSQL:
 *   user_similarity   USERS (1,000,000) x 20 points, main user of 64 points
 *   similar_users     SIMILAR (100,000) x 20 points, k = 10
 *   predict_strength  CANDIDATES (10,000) against the USERS x 20 points, exponent 2
 * on the GPU (and the CPU where that is reasonable), with each phase's time
 * and the pair rate against the H100 SXM's limits.  Instruction rates:
 * fp32 33.5e12/s (67 TFLOPS counts an FMA as two), fp64 16.7e12/s, the
 * special-function unit (fp32 reciprocals) 4.2e12/s.  A distance and its
 * minimum take 5 fp32 instructions (sub, sub, mul, fma, min), so the fp32
 * limit is 6.7e12 pairs/s; gpurec takes 6 fp64 ones (no fused multiply-add,
 * so that the CPU gets the same bits): fp64 limit 2.8e12.  A strength term
 * in fp32 needs a reciprocal (the SFU bounds it at 4.2e12 pairs/s); gpurec
 * takes 10 fp64 instructions and a division per 16 points: about 1.6e12.
 *
 * Build: make compute-benches
 * Run: test/bench/geo_compute_bench [USERS [SIMILAR [CANDIDATES]]]
 */
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>

#include "../../src/float_column.hpp"
#include "../../src/geo.hpp"
#include "../../src/id_column.hpp"
#include "../../src/number_column.hpp"

using namespace gpurec;

namespace {

/* H100 SXM limits in pairs/s, see above */
constexpr double kSimilarityFp32 = 6.7e12, kSimilarityFp64 = 2.8e12;
constexpr double kStrengthFp32 = 4.2e12, kStrengthFp64 = 1.6e12;

struct Population
{
	IdColumn user;
	FloatColumn x, y;
	GeoPoints view() const { return {user, x, y}; }
};

/* users x 20 random points in a 10 km square, users interleaved, and user 0 of 64 points */
void fill(Population &p, size_t users, std::mt19937_64 &rng)
{
	std::uniform_real_distribution<double> coord(0, 10000);
	for (int i = 0; i < 20; ++i)
		for (size_t u = 1; u <= users; ++u)
		{
			p.user.push_back(static_cast<int64_t>(u));
			p.x.push_back(coord(rng));
			p.y.push_back(coord(rng));
		}
	for (int i = 0; i < 64; ++i)
	{
		p.user.push_back(0);
		p.x.push_back(coord(rng));
		p.y.push_back(coord(rng));
	}
	p.user.number_in_id_order(); /* as the SQL layer does after reading */
}

ExecContext context(DeviceMode mode)
{
	ExecContext ctx;
	ctx.mode = mode;
	return ctx;
}

/* the median of `reps` runs of f(ctx), by compute time; prints the phases */
template <typename F> ExecContext median_run(const char *what, DeviceMode mode, int reps, F f)
{
	std::vector<ExecContext> runs;
	for (int r = 0; r < reps; ++r)
	{
		ExecContext ctx = context(mode);
		Stopwatch wall;
		f(ctx);
		ctx.times.output_ms = wall.elapsed_ms(); /* the engine call, end to end */
		runs.push_back(ctx);
	}
	std::sort(runs.begin(), runs.end(), [](const ExecContext &a, const ExecContext &b) {
		return a.times.compute_ms < b.times.compute_ms;
	});
	ExecContext m = runs[runs.size() / 2];
	std::printf("%s (%s): compute %.3f ms, transfer %.3f ms, engine call %.1f ms (median of %d)\n",
				what, mode == DeviceMode::Gpu ? "gpu" : "cpu", m.times.compute_ms,
				m.times.transfer_ms, m.times.output_ms, reps);
	return m;
}

void rate(double pairs, double ms, double fp32_limit, double fp64_limit)
{
	double per_s = pairs / ms * 1e3;
	std::printf("  %.4g pairs in the compute phase = %.3g pairs/s: %.0f%% of the fp32 limit (%.3g), "
				"%.0f%% of the fp64 one (%.3g)\n",
				pairs, per_s, 100 * per_s / fp32_limit, fp32_limit, 100 * per_s / fp64_limit, fp64_limit);
}

} // namespace

int main(int argc, char **argv)
{
	size_t users = argc > 1 ? std::stoul(argv[1]) : 1000000;
	size_t similar = argc > 2 ? std::stoul(argv[2]) : 100000;
	size_t n_candidates = argc > 3 ? std::stoul(argv[3]) : 10000;
	bool gpu = gpu_usable();
	std::mt19937_64 rng(42);

	Population big;
	fill(big, users, rng);
	double points = static_cast<double>(big.user.size());
	std::printf("user_similarity: %zu users x 20 points + main user of 64\n", users);
	if (gpu)
	{
		ExecContext m = median_run("user_similarity", DeviceMode::Gpu, 7, [&](ExecContext &ctx) {
			user_similarity(big.view(), 0, {}, ctx);
		});
		rate(64 * points, m.times.compute_ms, kSimilarityFp32, kSimilarityFp64);
		std::printf("  GPU memory: 16 bytes per point (x, y) while computing, about 56 while "
					"grouping them per user; 36 bytes per user\n");
	}
	{
		Population small;
		fill(small, 10000, rng);
		ExecContext m = median_run("user_similarity, 10,000 users", DeviceMode::Cpu, 5,
								   [&](ExecContext &ctx) { user_similarity(small.view(), 0, {}, ctx); });
		rate(64 * static_cast<double>(small.user.size()), m.times.compute_ms, kSimilarityFp32,
			 kSimilarityFp64);
	}

	if (gpu)
	{
		Population pop;
		fill(pop, similar, rng);
		std::printf("similar_users: %zu users x 20 points, k = 10\n", similar);
		ExecContext m = median_run("similar_users", DeviceMode::Gpu, 3, [&](ExecContext &ctx) {
			similar_users(pop.view(), 10, {}, ctx);
		});
		double p = static_cast<double>(pop.user.size());
		rate(p * p, m.times.compute_ms, kSimilarityFp32, kSimilarityFp64);
	}

	if (gpu)
	{
		Int64Column id;
		FloatColumn cx, cy;
		std::uniform_real_distribution<double> coord(0, 10000);
		for (size_t c = 0; c < n_candidates; ++c)
		{
			id.push_back(static_cast<int64_t>(c));
			cx.push_back(coord(rng));
			cy.push_back(coord(rng));
		}
		std::printf("predict_strength: %zu candidates against %.0f points, exponent 2\n", n_candidates,
					points);
		ExecContext m = median_run("predict_strength", DeviceMode::Gpu, 5, [&](ExecContext &ctx) {
			predict_strength(big.view(), 0, {id, cx, cy}, 2, {}, {}, ctx);
		});
		rate(static_cast<double>(n_candidates) * points, m.times.compute_ms, kStrengthFp32, kStrengthFp64);
		std::printf("  GPU memory: 24 bytes per point (x, y, weight) while computing\n");
	}
	if (!gpu)
		std::printf("(no usable GPU: the GPU figures are missing)\n");
	return 0;
}
