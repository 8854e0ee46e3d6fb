/*
 * geo_split_compute_bench.cpp: similar_users' split over GPUs, without
 * PostgreSQL or the GPU service: USERS (100,000) users x 20 points spread
 * evenly, k = 10, computed whole on device 0, then as PARTS (the GPUs)
 * parts one after another on device 0 (what a part costs beyond its share),
 * then the parts at once, each on a device of its own (what running
 * together costs).  Prints each run's engine call, compute and transfer.
 *
 * Build: make compute-benches
 * Run: test/bench/geo_split_compute_bench [USERS [PARTS]]
 */
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../../src/float_column.hpp"
#include "../../src/geo.hpp"
#include "../../src/id_column.hpp"

using namespace gpurec;

namespace {

struct Run
{
	double wall_ms = 0, compute_ms = 0, transfer_ms = 0;
	size_t rows = 0;
};

Run run_part(const GeoPoints &points, int device, int part, int parts)
{
	gpu::use_device(device);
	ExecContext ctx;
	ctx.mode = DeviceMode::Gpu;
	Stopwatch wall;
	std::vector<SimilarUser> rows = similar_users(points, 10, {}, ctx, part, parts);
	return {wall.elapsed_ms(), ctx.times.compute_ms, ctx.times.transfer_ms, rows.size()};
}

void print(const char *what, const Run &r)
{
	std::printf("%s: engine call %.1f ms, compute %.1f ms, transfer %.1f ms, %zu rows\n", what, r.wall_ms,
				r.compute_ms, r.transfer_ms, r.rows);
}

} // namespace

int main(int argc, char **argv)
{
	size_t users = argc > 1 ? std::stoul(argv[1]) : 100000;
	std::vector<gpu::DeviceInfo> devices = gpu::devices();
	int parts = argc > 2 ? std::stoi(argv[2]) : static_cast<int>(devices.size());
	if (devices.empty() || parts < 1)
	{
		std::printf("no usable GPU\n");
		return 0;
	}
	std::mt19937_64 rng(42);
	std::uniform_real_distribution<double> coord(0, 1000);
	IdColumn user;
	FloatColumn x, y;
	for (size_t i = 0; i < users * 20; ++i)
	{
		user.push_back(static_cast<int64_t>(i / 20));
		x.push_back(coord(rng));
		y.push_back(coord(rng));
	}
	user.number_in_id_order();
	GeoPoints points{user, x, y};
	std::printf("similar_users: %zu users x 20 points, k = 10, %d parts, %zu GPUs\n", users, parts, devices.size());
	print("warm-up, whole on device 0", run_part(points, 0, 0, 1));
	print("whole on device 0", run_part(points, 0, 0, 1));
	for (int p = 0; p < parts; ++p)
		print(("part " + std::to_string(p) + " alone on device 0").c_str(), run_part(points, 0, p, parts));
	for (int round = 0; round < 2; ++round)
	{
		std::vector<Run> runs(parts);
		std::vector<std::thread> threads;
		Stopwatch wall;
		for (int p = 0; p < parts; ++p)
			threads.emplace_back(
				[&, p] { runs[p] = run_part(points, p % static_cast<int>(devices.size()), p, parts); });
		for (std::thread &t : threads)
			t.join();
		std::printf("parts at once (round %d): %.1f ms\n", round + 1, wall.elapsed_ms());
		for (int p = 0; p < parts; ++p)
			print(("  part " + std::to_string(p) + " on device " + std::to_string(p % devices.size())).c_str(),
				  runs[p]);
	}
	return 0;
}
