/*
 * geo_pruned_compute_bench.cpp: similar_users (k = 10) pruned and by brute
 * force, the engine alone without PostgreSQL, on check-in-like points as
 * bench_geo_pruned.sh makes them: USERS users of 20 points, each around one
 * to three of 200 cities (a normal spread of 3 km in each direction), or
 * anywhere on the globe (uniform); x, y metres on a sinusoidal projection
 * (euclidean) or lon, lat degrees (haversine).
 *
 * Build: make compute-benches
 * Run: test/bench/geo_pruned_compute_bench USERS [clustered|uniform] [euclidean|haversine]
 *          [cpu|gpu] [auto|on|off|compare|lists|lists-auto] [THREADS]
 * compare runs on and off and checks that the rows are the same bits;
 * lists times the CPU's half of the GPU's pruned search alone (grouping,
 * index, every user's list of possible others) and counts the pairs the
 * GPU would compare (lists-auto: where auto's sample prunes); THREADS (0: one per core) as gpurec.cpu_threads.
 */
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "../../src/cpu_parallel.hpp"
#include "../../src/float_column.hpp"
#include "../../src/geo.hpp"
#include "../../src/geo_internal.hpp"
#include "../../src/id_column.hpp"

using namespace gpurec;

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kEarth = 6371008.8;

struct Population
{
	IdColumn user;
	FloatColumn x, y;
	GeoPoints view() const { return {user, x, y}; }
};

void fill(Population &p, size_t users, bool clustered, bool haversine)
{
	std::mt19937_64 rng(31);
	std::uniform_real_distribution<double> unit(0, 1);
	std::normal_distribution<double> spread(0, 3.0);
	double city_lon[200], city_lat[200];
	for (int c = 0; c < 200; ++c)
	{
		city_lon[c] = -180 + 360 * unit(rng);
		city_lat[c] = std::asin(2 * unit(rng) - 1) * 180 / kPi * 0.8;
	}
	for (size_t u = 1; u <= users; ++u)
	{
		int homes = 1 + static_cast<int>(unit(rng) * 3);
		int at[3];
		for (int &h : at)
			h = static_cast<int>(unit(rng) * 200);
		for (int i = 0; i < 20; ++i)
		{
			double lon, lat;
			if (clustered)
			{
				int c = at[static_cast<int>(unit(rng) * homes)];
				lon = city_lon[c] + spread(rng) / (111.195 * std::cos(city_lat[c] * kPi / 180));
				lat = std::max(-90.0, std::min(90.0, city_lat[c] + spread(rng) / 111.195));
			}
			else
			{
				lon = -180 + 360 * unit(rng);
				lat = std::asin(2 * unit(rng) - 1) * 180 / kPi;
			}
			lon -= 360 * std::floor((lon + 180) / 360);
			p.user.push_back(static_cast<int64_t>(u));
			if (haversine)
			{
				p.x.push_back(lon);
				p.y.push_back(lat);
			}
			else
			{
				p.x.push_back(lon * kPi / 180 * kEarth * std::cos(lat * kPi / 180));
				p.y.push_back(lat * kPi / 180 * kEarth);
			}
		}
	}
	p.user.number_in_id_order();
}

size_t threads = 0;

std::vector<SimilarUser> run(const Population &p, GeoOptions o, DeviceMode mode, const char *label)
{
	ExecContext ctx;
	ctx.mode = mode;
	ctx.cpu_threads = threads;
	Stopwatch wall;
	std::vector<SimilarUser> rows = similar_users(p.view(), 10, o, ctx);
	std::printf("%s: %.1f ms (compute %.1f ms)%s\n", label, wall.elapsed_ms(), ctx.times.compute_ms,
				ctx.device_choice.c_str());
	std::fflush(stdout);
	return rows;
}

/* The CPU's half of the GPU's pruned similar_users: its grouping, index and lists of others. */
void lists(const Population &p, const GeoOptions &o)
{
	ExecContext ctx;
	ctx.mode = DeviceMode::Cpu;
	ctx.cpu_threads = threads;
	GeoPoints view = p.view();
	Stopwatch clock;
	GeoPointSet set = grouped_on_cpu(rows_of(view), o.metric, ctx);
	double grouped = clock.elapsed_ms();
	std::unique_ptr<BestOthers> search = best_others_search(set, 10, o.epsilon, o.pruning, PrunedFor::Gpu, 0, 1, ctx);
	double indexed = clock.elapsed_ms();
	if (!search)
	{
		std::printf("lists: none (auto chose the brute force) after %.1f ms\n", indexed);
		return;
	}
	std::vector<size_t> listed(static_cast<size_t>(set.users()));
	parallel_for(listed.size(), ctx, [&](size_t a, size_t worker, const std::atomic<bool> &) {
		std::vector<int32_t> others;
		search->others_of(static_cast<int32_t>(a), worker, others);
		listed[a] = others.size();
	});
	double done = clock.elapsed_ms();
	double all = static_cast<double>(set.points()) * static_cast<double>(set.points());
	double users = 0;
	for (size_t n : listed)
		users += static_cast<double>(n);
	std::printf("lists: grouped %.1f ms, index %.1f ms, lists %.1f ms; %.3g others listed (%.1f a user), "
				"%.3g point pairs to compare (%.3f%% of %.3g), %.3g index steps\n",
				grouped, indexed - grouped, done - indexed, users, users / set.users(), search->compared(),
				100 * search->compared() / all, all, search->searched());
}

} // namespace

int main(int argc, char **argv)
{
	size_t users = argc > 1 ? std::stoul(argv[1]) : 20000;
	bool clustered = !(argc > 2 && std::strcmp(argv[2], "uniform") == 0);
	bool haversine = argc > 3 && std::strcmp(argv[3], "haversine") == 0;
	DeviceMode mode = argc > 4 && std::strcmp(argv[4], "gpu") == 0 ? DeviceMode::Gpu : DeviceMode::Cpu;
	std::string how = argc > 5 ? argv[5] : "auto";
	threads = argc > 6 ? std::stoul(argv[6]) : 0;
	Population p;
	fill(p, users, clustered, haversine);
	GeoOptions o;
	o.metric = haversine ? GeoMetric::Haversine : GeoMetric::Euclidean;
	o.epsilon = default_epsilon(o.metric);
	std::printf("similar_users %zu users x 20, %s, %s, %s\n", users, clustered ? "clustered" : "uniform",
				haversine ? "haversine" : "euclidean", mode == DeviceMode::Gpu ? "gpu" : "cpu");
	if (how == "compare")
	{
		o.pruning = GeoPruning::Always;
		std::vector<SimilarUser> pruned = run(p, o, mode, "on");
		o.pruning = GeoPruning::Never;
		std::vector<SimilarUser> brute = run(p, o, mode, "off");
		size_t differ = pruned.size() == brute.size() ? 0 : std::max(pruned.size(), brute.size());
		for (size_t i = 0; i < pruned.size() && i < brute.size(); ++i)
			if (pruned[i].user_id != brute[i].user_id || pruned[i].rank != brute[i].rank ||
				pruned[i].other_user_id != brute[i].other_user_id ||
				std::memcmp(&pruned[i].similarity, &brute[i].similarity, sizeof(double)) != 0)
				++differ;
		std::printf(differ ? "ROWS DIFFER: %zu\n" : "rows identical (%zu differ)\n", differ);
		return differ ? 1 : 0;
	}
	if (how == "lists" || how == "lists-auto")
	{
		o.pruning = how == "lists" ? GeoPruning::Always : GeoPruning::Auto;
		lists(p, o);
		return 0;
	}
	o.pruning = how == "on" ? GeoPruning::Always : how == "off" ? GeoPruning::Never : GeoPruning::Auto;
	run(p, o, mode, how.c_str());
	return 0;
}
