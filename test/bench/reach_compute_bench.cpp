/*
 * reach_compute_bench.cpp: predict_strength with max_distance through the
 * reach index against the sum over every point (max_distance NULL, which is
 * the work the unindexed max_distance did: every point evaluated, then
 * tested), without PostgreSQL, on check-in-like points: USERS x 20 points
 * around one to three of 200 cities (normal spread SPREAD metres, the
 * cities in a 4,000 km square, euclidean in metres), CANDIDATES near the
 * cities, main user 1, exponent 2; max_distance such that a candidate has
 * about SHARE of the points within it (the median over 200 candidates of a
 * 20,000-point sample's quantile).  Prints each device's median engine
 * call and compute phase, the speed-up, the candidates with a point in reach,
 * and the largest relative difference between the two devices' indexed
 * strengths where both run.
 *
 * Build: make test/bench/reach_compute_bench (with nvcc for the GPU)
 * Run: test/bench/reach_compute_bench [USERS [CANDIDATES [SHARE [SPREAD [DEVICES]]]]]
 *      DEVICES: cpu, gpu or both (default: gpu where usable, else cpu)
 * The size: test/bench/reach_compute_bench 1000000 10000 0.01 (20M points).
 */
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "../../src/float_column.hpp"
#include "../../src/geo.hpp"
#include "../../src/id_column.hpp"
#include "../../src/number_column.hpp"

using namespace gpurec;

namespace {

struct Population
{
	IdColumn user;
	FloatColumn x, y;
	GeoPoints view() const { return {user, x, y}; }
};

struct Candidates
{
	Int64Column id;
	FloatColumn x, y;
	GeoCandidates view() const { return {id, x, y}; }
};

void fill(Population &p, Candidates &c, size_t users, size_t n_candidates, double spread, std::mt19937_64 &rng)
{
	std::uniform_real_distribution<double> square(0, 4e6);
	std::vector<std::pair<double, double>> cities(200);
	for (auto &city : cities)
		city = {square(rng), square(rng)};
	std::normal_distribution<double> jitter(0, spread);
	for (size_t u = 1; u <= users; ++u)
	{
		size_t home[3] = {rng() % 200, rng() % 200, rng() % 200};
		size_t homes = 1 + rng() % 3;
		for (int i = 0; i < 20; ++i)
		{
			auto [cx, cy] = cities[home[rng() % homes]];
			p.user.push_back(static_cast<int64_t>(u));
			p.x.push_back(cx + jitter(rng));
			p.y.push_back(cy + jitter(rng));
		}
	}
	p.user.number_in_id_order(); /* as the SQL layer does after reading */
	for (size_t i = 0; i < n_candidates; ++i)
	{
		auto [cx, cy] = cities[rng() % 200];
		c.id.push_back(static_cast<int64_t>(i));
		c.x.push_back(cx + jitter(rng));
		c.y.push_back(cy + jitter(rng));
	}
}

/* A max_distance within which a candidate has about `share` of the points. */
double reach_for(const Population &p, const Candidates &c, double share, std::mt19937_64 &rng)
{
	std::vector<double> medians;
	for (int k = 0; k < 200; ++k)
	{
		size_t ci = rng() % c.x.size();
		std::vector<double> d;
		for (int s = 0; s < 20000; ++s)
		{
			size_t pi = rng() % p.x.size();
			d.push_back(std::hypot(p.x[pi] - c.x[ci], p.y[pi] - c.y[ci]));
		}
		std::nth_element(d.begin(), d.begin() + static_cast<long>(share * d.size()), d.end());
		medians.push_back(d[static_cast<size_t>(share * d.size())]);
	}
	std::nth_element(medians.begin(), medians.begin() + 100, medians.end());
	return medians[100];
}

struct Timed
{
	double call_ms, compute_ms;
	std::vector<double> strengths;
};

Timed median_run(DeviceMode mode, int reps, const Population &p, const Candidates &c, double max_distance)
{
	std::vector<Timed> runs;
	for (int r = 0; r < reps; ++r)
	{
		ExecContext ctx;
		ctx.mode = mode;
		Stopwatch wall;
		std::vector<double> s = predict_strength(p.view(), 1, c.view(), 2, {max_distance, 0}, {}, ctx);
		runs.push_back({wall.elapsed_ms(), ctx.times.compute_ms, std::move(s)});
	}
	std::sort(runs.begin(), runs.end(), [](const Timed &a, const Timed &b) { return a.call_ms < b.call_ms; });
	return runs[runs.size() / 2];
}

} // namespace

int main(int argc, char **argv)
{
	size_t users = argc > 1 ? std::stoul(argv[1]) : 1000000;
	size_t n_candidates = argc > 2 ? std::stoul(argv[2]) : 10000;
	double share = argc > 3 ? std::stod(argv[3]) : 0.01;
	double spread = argc > 4 ? std::stod(argv[4]) : 3000;
	std::string devices = argc > 5 ? argv[5] : (gpu_usable() ? "gpu" : "cpu");
	std::mt19937_64 rng(42);
	Population p;
	Candidates c;
	fill(p, c, users, n_candidates, spread, rng);
	double max_distance = reach_for(p, c, share, rng);
	double points = static_cast<double>(p.user.size());
	std::printf("predict_strength: %zu candidates against %.0f points (%zu users x 20 around 200 cities, spread "
				"%.0f m), exponent 2; max_distance %.0f m (about %.2g of the points per candidate)\n",
				n_candidates, points, users, spread, max_distance, share);
	std::vector<std::vector<double>> indexed;
	for (DeviceMode mode : {DeviceMode::Cpu, DeviceMode::Gpu})
	{
		const char *name = mode == DeviceMode::Gpu ? "gpu" : "cpu";
		if (devices != "both" && devices != name)
			continue;
		int reps = mode == DeviceMode::Gpu ? 5 : 3;
		Timed with = median_run(mode, reps, p, c, max_distance);
		Timed without = median_run(mode, mode == DeviceMode::Gpu ? 3 : 1, p, c, INFINITY);
		size_t reached = static_cast<size_t>(std::count_if(with.strengths.begin(), with.strengths.end(),
															[](double s) { return s > 0; }));
		std::printf("%s: with max_distance (index) %.1f ms (compute %.1f); without (every point) %.1f ms "
					"(compute %.1f): %.1fx; %zu of %zu candidates with a point in reach\n",
					name, with.call_ms, with.compute_ms, without.call_ms, without.compute_ms,
					without.call_ms / with.call_ms, reached, with.strengths.size());
		indexed.push_back(std::move(with.strengths));
	}
	if (indexed.size() == 2)
	{
		double worst = 0;
		for (size_t i = 0; i < indexed[0].size(); ++i)
			if (indexed[0][i] != indexed[1][i])
				worst = std::max(worst, std::fabs(indexed[0][i] - indexed[1][i]) /
											std::max(std::fabs(indexed[0][i]), std::fabs(indexed[1][i])));
		std::printf("gpu against cpu, indexed: largest relative difference %.3g (0: the same bits)\n", worst);
	}
	return 0;
}
