/*
 * The 32-bit limits of a call (README, Limits), at their boundaries: the
 * counts are given as numbers, as no test machine holds 2^32 offers, and
 * each guard must let its largest count through and stop the next with
 * ERROR 54000 before anything is indexed.
 */
#include <cstdint>
#include <gtest/gtest.h>

#include "../../src/geo_internal.hpp"
#include "../../src/marketplace.hpp"
#include "../../src/roc_fitness.hpp"

namespace gpurec {
namespace {

template <typename Check> void expect_limit(Check check, uint64_t largest)
{
	EXPECT_NO_THROW(check(largest));
	try
	{
		check(largest + 1);
		ADD_FAILURE() << "no error past " << largest;
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), "54000");
	}
}

TEST(Limits, OffersPerCall)
{
	/* a uint32_t row for each, and UINT32_MAX is the kernels' "no offer" */
	expect_limit([](uint64_t n) { check_offer_count(n); }, UINT32_MAX);
	EXPECT_EQ(gpu::kNoOffer, UINT32_MAX);
}

TEST(Limits, CandidatesPerCall)
{
	expect_limit([](uint64_t n) { check_candidate_count(n); }, UINT32_MAX);
}

TEST(Limits, UsersPerCall)
{
	expect_limit([](uint64_t n) { check_user_count(n); }, uint64_t(INT32_MAX) - 1);
}

TEST(Limits, ExamplesPerIndividual)
{
	expect_limit([](uint64_t n) { check_examples_per_individual(7, static_cast<int64_t>(n), nullptr); }, INT32_MAX);
	try
	{
		check_examples_per_individual(7, int64_t(1) << 40, nullptr);
	}
	catch (const Error &e)
	{
		EXPECT_NE(std::string(e.what()).find("individual 7"), std::string::npos) << e.what();
	}
}

} // namespace
} // namespace gpurec
