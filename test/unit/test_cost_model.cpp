/*
 * test_cost_model.cpp: gpurec.device = auto's cost model (src/cost_model.hpp)
 * and its use by the dispatch: estimates that grow as the work does, a
 * threshold that agrees with the estimates on both sides of it, work that
 * splits over GPUs, memory-bound work that stops gaining from threads, and
 * a dispatch that follows the estimate and says why.
 */
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "../../src/cost_model.hpp"
#include "../../src/device.hpp"

namespace gpurec {
namespace {

HostProfile measured_host(double upload_gb_s, double call_ms, int gpus)
{
	HostProfile host;
	host.upload_bytes_per_ms = upload_gb_s * 1e6;
	host.call_ms = call_ms;
	host.gpus = gpus;
	host.measured = true;
	return host;
}

TEST(CostModel, EstimatesGrowWithTheWorkAndTheBytes)
{
	HostProfile host = measured_host(10, 0.2, 1);
	WorkShape small{rates::kScores, 1e5, 1e5 * 8};
	WorkShape large{rates::kScores, 1e8, 1e8 * 8};
	CostEstimate a = estimate_cost(small, host, 16), b = estimate_cost(large, host, 16);
	EXPECT_GT(b.cpu_ms, a.cpu_ms * 900);
	EXPECT_GT(b.gpu_ms, a.gpu_ms);
	/* a GPU call never costs less than its fixed cost, and the copy is bytes over the rate */
	EXPECT_GE(a.gpu_ms, 0.2);
	WorkShape copy_only{rates::kScores, 0, 1e9};
	EXPECT_NEAR(estimate_cost(copy_only, host, 16).gpu_ms, 0.2 + 1e9 / 1e7, 1e-9);
	/* CUDA's start still to come counts against the GPU */
	HostProfile starting = host;
	starting.start_ms = 250;
	EXPECT_NEAR(estimate_cost(small, starting, 16).gpu_ms - a.gpu_ms, 250, 1e-9);
}

TEST(CostModel, MoreThreadsMakeTheCpuFasterAndMemoryBoundWorkSaturates)
{
	HostProfile host = measured_host(10, 0.2, 1);
	WorkShape arithmetic{rates::kPointPairs, 1e10, 0};
	EXPECT_NEAR(estimate_cost(arithmetic, host, 1).cpu_ms / estimate_cost(arithmetic, host, 64).cpu_ms, 64, 1e-6);
	WorkShape memory{rates::kScores, 1e8, 0};
	double one = estimate_cost(memory, host, 1).cpu_ms, sixteen = estimate_cost(memory, host, 16).cpu_ms,
		   many = estimate_cost(memory, host, 64).cpu_ms;
	EXPECT_LT(sixteen, one);
	EXPECT_LT(many, sixteen);
	/* past kMemoryBoundThreads' worth, 4x the threads gains well under 2x */
	EXPECT_LT(sixteen / many, 1.5);
	EXPECT_GT(one / many, 4);
	EXPECT_LT(one / many, 2 * kMemoryBoundThreads);
}

TEST(CostModel, WorkThatSplitsDividesOverTheGpus)
{
	WorkShape pairs{rates::kPointPairs, 4e12, 0, true};
	CostEstimate one = estimate_cost(pairs, measured_host(10, 0.2, 1), 64);
	CostEstimate four = estimate_cost(pairs, measured_host(10, 0.2, 4), 64);
	EXPECT_EQ(four.gpus, 4);
	EXPECT_NEAR(four.gpu_ms - 4 * 0.2, (one.gpu_ms - 0.2) / 4, 1e-6);
	pairs.splits = false;
	EXPECT_EQ(estimate_cost(pairs, measured_host(10, 0.2, 4), 64).gpus, 1);
}

TEST(CostModel, WorkSmallNextToItsInputStaysWhole)
{
	HostProfile host = measured_host(50, 0.5, 4);
	/* user_similarity on 500,000 users x 20 points: one user's points against all, 200 MB of points */
	WorkShape one_user{rates::kPointPairs, 1e7 * 20, 2e8, true};
	EXPECT_EQ(best_parts(one_user, host, 4), 1);
	EXPECT_EQ(estimate_cost(one_user, host, 64).gpus, 1);
	/* similar_users on 100,000 users x 20 points: seconds of work on 40 MB */
	WorkShape all_users{rates::kPointPairs, 4e12, 4e7, true};
	EXPECT_EQ(best_parts(all_users, host, 4), 4);
	EXPECT_EQ(best_parts(all_users, host, 3), 3);
	/* in between, as many parts as pay for their copies: each more part's time against its saving */
	WorkShape middle{rates::kStrengthTerms, 2e10, 2e8, true}; /* 22 ms of terms, 4 ms a copy */
	int parts = best_parts(middle, host, 4);
	EXPECT_GT(parts, 1);
	EXPECT_LT(parts, 4);
	double each_copy = 2e8 / 5e7 + 0.5, computing = 2e10 * rates::kStrengthTerms.gpu_ns / 1e6;
	EXPECT_LE(each_copy * parts + computing / parts, each_copy * (parts + 1) + computing / (parts + 1));
	EXPECT_LE(each_copy * parts + computing / parts, each_copy * (parts - 1) + computing / (parts - 1));
	EXPECT_EQ(best_parts(all_users, host, 1), 1);
}

TEST(CostModel, ThresholdAgreesWithTheEstimates)
{
	for (const WorkRates &rates : {rates::kOffers, rates::kScores, rates::kPointPairs, rates::kCarts})
		for (size_t threads : {size_t(1), size_t(2), size_t(16), size_t(64)})
			for (double bytes_per_unit : {0.0, 8.0, 24.0})
			{
				HostProfile host = measured_host(12, 0.3, 1);
				WorkShape unit{rates, 1, bytes_per_unit};
				double from = gpu_cheaper_from(unit, host, threads);
				auto shape_of = [&](double units) { return WorkShape{rates, units, units * bytes_per_unit}; };
				if (std::isinf(from))
				{
					EXPECT_FALSE(estimate_cost(shape_of(1e12), host, threads).gpu_cheaper())
						<< rates.unit << " " << threads << " threads";
					continue;
				}
				EXPECT_FALSE(estimate_cost(shape_of(from * 0.99), host, threads).gpu_cheaper())
					<< rates.unit << " " << threads << " threads";
				EXPECT_TRUE(estimate_cost(shape_of(from * 1.01), host, threads).gpu_cheaper())
					<< rates.unit << " " << threads << " threads";
			}
}

TEST(CostModel, RanksOffersOnTheCpuOnABigHostAndTheGpuOnASmallOne)
{
	/* offers: per offer, the copy against the CPU's ranking on the call's threads */
	HostProfile host = measured_host(8.7, 0.3, 1);
	WorkShape offers{rates::kOffers, 30.72e6, 30.72e6 * 20};
	EXPECT_FALSE(estimate_cost(offers, host, 64).gpu_cheaper());
	EXPECT_FALSE(estimate_cost(offers, host, 16).gpu_cheaper());
	EXPECT_TRUE(estimate_cost(offers, host, 2).gpu_cheaper());
}

TEST(CostModel, ExplanationSaysTheChoiceAndTheFigures)
{
	WorkShape pairs{rates::kPointPairs, 4e10, 1e6, true};
	CostEstimate e = estimate_cost(pairs, measured_host(10, 0.2, 4), 16);
	ASSERT_TRUE(e.gpu_cheaper());
	std::string why = explain_choice(pairs, e, true);
	EXPECT_EQ(why.rfind("auto chose the gpu: about ", 0), 0u) << why;
	EXPECT_NE(why.find("on 4 GPUs against about"), std::string::npos) << why;
	EXPECT_NE(why.find("on 16 CPU threads"), std::string::npos) << why;
	EXPECT_NE(why.find("4e+10 point pairs"), std::string::npos) << why;
	std::string other = explain_choice(pairs, e, false);
	EXPECT_EQ(other.rfind("auto chose the cpu: about ", 0), 0u) << other;
}

TEST(CostModel, DispatchFollowsTheEstimateWithoutAGpu)
{
	/* no GPU in this build or machine: auto takes the CPU whatever the work, and says why */
	for (double units : {0.0, 10.0, 1e12})
	{
		ExecContext ctx;
		ctx.mode = DeviceMode::Auto;
		bool gpu = false;
		bool known_missing = gpu::found_unusable(); /* always so in a build without CUDA */
		int got = dispatch(
			ctx, "test", WorkShape{rates::kPointPairs, units, 0},
			[&] {
				gpu = true;
				return 1;
			},
			[] { return 2; });
		if (gpu::usable())
			continue; /* a GPU here: the service tests and the GPU suite check the GPU's side */
		EXPECT_EQ(got, 2);
		EXPECT_FALSE(gpu);
		EXPECT_EQ(ctx.device_choice.rfind("auto chose the cpu", 0), 0u) << ctx.device_choice;
		if (units == 0)
			EXPECT_NE(ctx.device_choice.find("gains nothing"), std::string::npos) << ctx.device_choice;
		/* where the GPU is known to be missing, the reason is that, not an estimate of a GPU there is not */
		if (units > 0 && known_missing)
		{
			EXPECT_EQ(ctx.device_choice.find("about"), std::string::npos) << ctx.device_choice;
			std::string why_not;
			ASSERT_FALSE(gpu::usable(&why_not));
			EXPECT_NE(ctx.device_choice.find(why_not), std::string::npos) << ctx.device_choice;
		}
	}
}

} // namespace
} // namespace gpurec
