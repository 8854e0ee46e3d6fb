/*
 * roc_compute_bench.cpp: the compute phase of roc_fitness alone, without
 * PostgreSQL, at these sizes:
 *   array format  INDIVIDUALS (1,000) x EXAMPLES (100,000), scores as real[]
 *                 gives them (floats; "double" scores: any double)
 *   long format   100 x 100,000 rows
 * on the GPU (median of 5 runs after a warm-up; the target is compute of at
 * most 10 ms for the array format on an H100) and once on the CPU.
 *
 * Build: make compute-benches
 * Run: test/bench/roc_compute_bench [INDIVIDUALS [EXAMPLES [real|double]]]
 */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../../src/array_column.hpp"
#include "../../src/id_column.hpp"
#include "../../src/number_column.hpp"
#include "../../src/roc_fitness.hpp"

using namespace gpurec;

namespace {

struct Times
{
	double transfer_ms, compute_ms;
};

template <typename Call> Times median_of_runs(DeviceMode mode, int runs, Call call)
{
	std::vector<Times> times;
	for (int run = 0; run < runs; ++run)
	{
		ExecContext ctx;
		ctx.mode = mode;
		call(ctx);
		times.push_back({ctx.times.transfer_ms, ctx.times.compute_ms});
	}
	std::sort(times.begin(), times.end(),
			  [](const Times &a, const Times &b) { return a.compute_ms < b.compute_ms; });
	return times[times.size() / 2];
}

void report(const char *what, const char *device, Times t)
{
	std::printf("%-44s %-4s compute %9.2f ms   transfer %8.2f ms\n", what, device, t.compute_ms, t.transfer_ms);
}

} // namespace

int main(int argc, char **argv)
{
	size_t individuals = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1000;
	size_t examples = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 100000;
	bool doubles = argc > 3 && std::string(argv[3]) == "double";
	std::mt19937_64 rng(42);
	std::uniform_real_distribution<double> uniform(0, 1);

	/* the benchmark's data: (random() * 100)::int::real / 100, 30% positives */
	Int64Column ids;
	FloatArrayColumn scores;
	scores.set_doubles(doubles);
	std::vector<int8_t> labels(examples);
	for (int8_t &l : labels)
		l = uniform(rng) < 0.3 ? 1 : 0;
	std::vector<double> row_doubles(examples);
	std::vector<float> row_floats(examples);
	for (size_t i = 0; i < individuals; ++i)
	{
		ids.push_back(static_cast<int64_t>(i + 1));
		for (size_t e = 0; e < examples; ++e)
		{
			row_doubles[e] = uniform(rng);
			row_floats[e] = static_cast<float>(static_cast<int>(uniform(rng) * 100) / 100.0f);
		}
		scores.append_row(doubles ? static_cast<const void *>(row_doubles.data()) : row_floats.data(), examples,
						  nullptr);
	}
	char what[128];
	std::snprintf(what, sizeof what, "arrays %zu x %zu (%s)", individuals, examples, doubles ? "double" : "real");
	auto arrays = [&](ExecContext &ctx) { roc_fitness_arrays(ids, scores, labels, ctx); };
	if (gpu_usable())
	{
		median_of_runs(DeviceMode::Gpu, 1, arrays); /* warm-up: CUDA context, kernels */
		report(what, "gpu", median_of_runs(DeviceMode::Gpu, 5, arrays));
	}
	else
		std::printf("no usable GPU\n");
	report(what, "cpu", median_of_runs(DeviceMode::Cpu, 1, arrays));

	/* long format, 100 x 100,000 rows, rows of all individuals interleaved */
	IdColumn individual;
	LabelColumn label;
	NumberColumn score(NumberType::Float8);
	for (size_t e = 0; e < 100000; ++e)
		for (int64_t i = 1; i <= 100; ++i)
		{
			individual.push_back(i);
			label.push_back(uniform(rng) < 0.3 ? 1 : 0);
			score.push_double(static_cast<int>(uniform(rng) * 1000));
		}
	auto rows = [&](ExecContext &ctx) { roc_fitness_long(individual, label, score, ctx); };
	if (gpu_usable())
		report("long 100 x 100000 (float8)", "gpu", median_of_runs(DeviceMode::Gpu, 5, rows));
	report("long 100 x 100000 (float8)", "cpu", median_of_runs(DeviceMode::Cpu, 1, rows));
	return 0;
}
