/*
 * test_random.hpp: the random numbers of the unit tests.  Every test draws
 * fresh data; the seed is printed so that GPUREC_TEST_SEED (or GPUREC_SEED,
 * as the property tests spell it) replays a failing run.
 */
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>

#include <gtest/gtest.h>

namespace gpurec {

/* A generator for the running test, seeded afresh unless a seed is given. */
inline std::mt19937_64 seeded_rng()
{
	uint64_t seed;
	const char *fixed = std::getenv("GPUREC_TEST_SEED");
	if (!fixed)
		fixed = std::getenv("GPUREC_SEED");
	if (fixed)
		seed = std::strtoull(fixed, nullptr, 10);
	else
	{
		std::random_device device;
		seed = (uint64_t(device()) << 32) | device();
	}
	const ::testing::TestInfo *test = ::testing::UnitTest::GetInstance()->current_test_info();
	std::printf("[ seed     ] %s.%s: GPUREC_TEST_SEED=%llu\n", test ? test->test_suite_name() : "?",
				test ? test->name() : "?", static_cast<unsigned long long>(seed));
	return std::mt19937_64(seed);
}

} // namespace gpurec
