/*
 * test_progress.cpp: what a call counts for gpurec.progress.  Counts from
 * many worker threads add up exactly; a context that reports nowhere
 * counts into nothing; and each family's CPU path ends its computing phase
 * having counted every unit of its input once, in the unit the SQL
 * reference names, against the input's size counted here.
 */
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>

#include "../../src/cpu_parallel.hpp"
#include "../../src/float_column.hpp"
#include "../../src/geo.hpp"
#include "../../src/id_column.hpp"
#include "../../src/marketplace.hpp"
#include "../../src/number_column.hpp"
#include "../../src/roc_fitness.hpp"

namespace gpurec {
namespace {

ExecContext cpu_context(Progress &progress)
{
	ExecContext ctx;
	ctx.mode = DeviceMode::Cpu;
	ctx.progress = ProgressReport(&progress);
	return ctx;
}

void expect_phase(const Progress &p, ProgressPhase phase, const char *unit, uint64_t units)
{
	EXPECT_EQ(p.phase(), phase);
	EXPECT_STREQ(p.unit(), unit);
	EXPECT_EQ(p.total(), units);
	EXPECT_EQ(p.done(), units);
}

TEST(Progress, WorkerThreadsAddUpExactly)
{
	Progress progress;
	ExecContext ctx = cpu_context(progress);
	ctx.cpu_threads = 4;
	ctx.progress.begin(ProgressPhase::Computing, "items", 100000);
	parallel_for(1000, ctx, [&](size_t item, size_t, const std::atomic<bool> &) {
		for (size_t i = 0; i < 100; ++i)
			ctx.progress.add(1);
	});
	expect_phase(progress, ProgressPhase::Computing, "items", 100000);
}

TEST(Progress, BeginStartsAPhaseFromNothingAndReachOnlyRaises)
{
	Progress progress;
	EXPECT_EQ(progress.phase(), ProgressPhase::Starting);
	EXPECT_EQ(progress.total(), Progress::kUnknown);
	progress.begin(ProgressPhase::Reading, "rows");
	progress.add(10);
	progress.reach(5);
	EXPECT_EQ(progress.done(), 10u);
	progress.reach(12);
	EXPECT_EQ(progress.done(), 12u);
	EXPECT_EQ(progress.total(), Progress::kUnknown);
	progress.begin(ProgressPhase::Writing, "rows", 3);
	EXPECT_EQ(progress.done(), 0u);
	EXPECT_EQ(progress.total(), 3u);
}

TEST(Progress, AContextThatReportsNowhereCountsIntoNothing)
{
	ExecContext ctx;
	ctx.progress.begin(ProgressPhase::Computing, "users", 7);
	ctx.progress.add(3);
	ctx.progress.reach(9);
	EXPECT_EQ(ctx.progress.phase(), ProgressPhase::Starting);
	EXPECT_EQ(ctx.progress.done(), 0u);
}

TEST(Progress, SimilarUsersCountsEveryUserOnce)
{
	std::mt19937_64 rng(std::random_device{}());
	for (int round = 0; round < 3; ++round)
	{
		IdColumn user;
		FloatColumn x, y;
		std::set<int64_t> users;
		size_t n = 200 + rng() % 800;
		for (size_t i = 0; i < n; ++i)
		{
			int64_t id = static_cast<int64_t>(rng() % 300) - 50; /* users of one point and of many */
			users.insert(id);
			user.push_back(id);
			x.push_back(static_cast<double>(rng() % 20));
			y.push_back(static_cast<double>(rng() % 20));
		}
		user.number_in_id_order();
		Progress progress;
		ExecContext ctx = cpu_context(progress);
		ctx.cpu_threads = 1 + rng() % 4;
		similar_users({user, x, y}, 3, geo_options("euclidean", 0.5), ctx);
		expect_phase(progress, ProgressPhase::Computing, "users", users.size());
	}
}

TEST(Progress, CheapestOffersCountsEveryOffer)
{
	std::mt19937_64 rng(std::random_device{}());
	IdColumn product;
	Int64Column store;
	NumberColumn price(NumberType::Integer);
	size_t n = 300000 + rng() % 300000; /* more than one piece of the CPU's ranking */
	for (size_t i = 0; i < n; ++i)
	{
		product.push_back(static_cast<int64_t>(rng() % 5000));
		store.push_back(static_cast<int64_t>(rng() % 50));
		price.push_integer(static_cast<int64_t>(rng() % 100));
	}
	product.number_in_id_order();
	Progress progress;
	ExecContext ctx = cpu_context(progress);
	cheapest_offers({product, store, price}, 2, ctx);
	expect_phase(progress, ProgressPhase::Computing, "offers", n);
}

TEST(Progress, RocFitnessCountsEveryExample)
{
	std::mt19937_64 rng(std::random_device{}());
	IdColumn individual;
	LabelColumn label;
	NumberColumn score(NumberType::Float8);
	size_t n = 50000 + rng() % 50000;
	for (size_t i = 0; i < n; ++i)
	{
		individual.push_back(static_cast<int64_t>(rng() % 700));
		label.push_back(static_cast<uint8_t>(rng() % 2));
		score.push_double(static_cast<double>(rng() % 1000) / 8);
	}
	individual.number_in_id_order();
	Progress progress;
	ExecContext ctx = cpu_context(progress);
	roc_fitness_long(individual, label, score, ctx);
	expect_phase(progress, ProgressPhase::Computing, "examples", n);
}

} // namespace
} // namespace gpurec
