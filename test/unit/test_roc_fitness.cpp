/*
 * test_roc_fitness.cpp: ROC counts against brute force, the seed formula,
 * and the GPU against the CPU bit for bit.
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "../../src/roc_fitness.hpp"

namespace gpurec {
namespace {

/* Random individuals: few distinct scores (many ties), NaN, single-class and empty ones. */
RocSegments random_population(std::mt19937_64 &rng, int individuals, int max_examples)
{
	RocSegments s;
	s.offsets.push_back(0);
	for (int i = 0; i < individuals; ++i)
	{
		s.individual_ids.push_back(i * 3 - 10);
		int n = static_cast<int>(rng() % (max_examples + 1));
		int kind = static_cast<int>(rng() % 6); /* 0: positives only, 1: negatives only */
		for (int e = 0; e < n; ++e)
		{
			double score = rng() % 50 == 0 ? std::nan("") : static_cast<double>(rng() % 7) / 2;
			s.keys.push_back(order_key_from_double(score));
			s.labels.push_back(kind == 0 ? 1 : kind == 1 ? 0 : static_cast<uint8_t>(rng() % 2));
		}
		s.offsets.push_back(static_cast<int64_t>(s.keys.size()));
	}
	return s;
}

TEST(RocFitness, CountsMatchBruteForce)
{
	std::mt19937_64 rng(std::random_device{}());
	RocSegments s = random_population(rng, 200, 60);
	ExecContext ctx;
	ctx.mode = DeviceMode::Cpu;
	std::vector<RocResult> got = roc_fitness(s, ctx);
	ASSERT_EQ(got.size(), s.individual_ids.size());
	for (size_t i = 0; i < got.size(); ++i)
	{
		int64_t p = 0, n = 0, twice = 0, low = 0, high = 0;
		for (int64_t a = s.offsets[i]; a < s.offsets[i + 1]; ++a)
		{
			(s.labels[a] ? p : n)++;
			if (!s.labels[a])
				continue;
			int64_t above = 0;
			for (int64_t b = s.offsets[i]; b < s.offsets[i + 1]; ++b)
			{
				above += s.keys[b] > s.keys[a];
				if (!s.labels[b])
					twice += s.keys[a] > s.keys[b] ? 2 : s.keys[a] == s.keys[b] ? 1 : 0;
			}
			low = low == 0 ? above + 1 : std::min(low, above + 1);
			high = std::max(high, above + 1);
		}
		const RocResult &r = got[i];
		EXPECT_EQ(r.individual_id, s.individual_ids[i]);
		EXPECT_EQ(r.counts.n_positive, p);
		EXPECT_EQ(r.counts.n_negative, n);
		EXPECT_EQ(r.has_auc, p > 0 && n > 0);
		EXPECT_EQ(r.counts.lowest_positive_rank, low);
		EXPECT_EQ(r.counts.highest_positive_rank, high);
		if (r.has_auc)
		{
			EXPECT_EQ(static_cast<int64_t>(r.counts.twice_wins), twice);
			EXPECT_NEAR(r.auc, twice / (2.0 * p * n), 1e-15);
			EXPECT_NEAR(r.fitness, r.auc - 0.5, 1e-15);
		}
	}
}

/* The seed formula: mean over sorted positions of (TPR - FPR), when no scores tie. */
TEST(RocFitness, SeedFormulaWithoutTies)
{
	std::mt19937_64 rng(std::random_device{}());
	for (int trial = 0; trial < 50; ++trial)
	{
		int n = 2 + static_cast<int>(rng() % 300);
		std::vector<double> scores(n);
		for (int i = 0; i < n; ++i)
			scores[i] = i + 0.5;
		std::shuffle(scores.begin(), scores.end(), rng);
		RocSegments s;
		s.individual_ids = {1};
		s.offsets = {0, n};
		int64_t p = 0;
		for (int i = 0; i < n; ++i)
		{
			s.keys.push_back(order_key_from_double(scores[i]));
			s.labels.push_back(static_cast<uint8_t>(rng() % 2));
			p += s.labels.back();
		}
		if (p == 0 || p == n)
			continue;
		/* walk the examples from the highest score down */
		std::vector<int> order(n);
		for (int i = 0; i < n; ++i)
			order[i] = i;
		std::sort(order.begin(), order.end(), [&](int a, int b) { return scores[a] > scores[b]; });
		double tp = 0, fp = 0, sum = 0;
		for (int i : order)
		{
			(s.labels[i] ? tp : fp) += 1;
			sum += tp / p - fp / (n - p); /* TPR so far - FPR so far */
		}
		double seed = sum / n;
		ExecContext ctx;
		ctx.mode = DeviceMode::Cpu;
		EXPECT_NEAR(roc_fitness(s, ctx)[0].fitness, seed, 1e-12);
	}
}

TEST(RocFitness, GpuMatchesCpuExactly)
{
	if (!gpu_usable())
		GTEST_SKIP() << "no usable GPU";
	std::mt19937_64 rng(std::random_device{}());
	for (auto [individuals, examples] : {std::pair{300, 80}, std::pair{20, 200000}})
	{
		RocSegments s = random_population(rng, individuals, examples);
		ExecContext cpu, gpu;
		cpu.mode = DeviceMode::Cpu;
		gpu.mode = DeviceMode::Gpu;
		std::vector<RocResult> want = roc_fitness(s, cpu), got = roc_fitness(s, gpu);
		ASSERT_EQ(got.size(), want.size());
		for (size_t i = 0; i < got.size(); ++i)
		{
			EXPECT_EQ(got[i].counts.twice_wins, want[i].counts.twice_wins) << i;
			EXPECT_EQ(got[i].counts.n_positive, want[i].counts.n_positive) << i;
			EXPECT_EQ(got[i].counts.n_negative, want[i].counts.n_negative) << i;
			EXPECT_EQ(got[i].counts.lowest_positive_rank, want[i].counts.lowest_positive_rank) << i;
			EXPECT_EQ(got[i].counts.highest_positive_rank, want[i].counts.highest_positive_rank) << i;
			if (want[i].has_auc)
				EXPECT_EQ(got[i].auc, want[i].auc) << i; /* bit for bit */
		}
	}
}

} // namespace
} // namespace gpurec
