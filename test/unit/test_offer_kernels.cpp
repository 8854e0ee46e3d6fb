/*
 * test_offer_kernels.cpp: the GPU ranking of offers gives exactly the CPU's
 * rows, on inputs of several chunks, through each of its paths: offers
 * streamed while read, offers copied after reading, offers in parts (a
 * small GPU memory budget), packed (price, store) values and the unpacked
 * fallback.  Skipped without a GPU.
 */
#include <gtest/gtest.h>

#include <random>

#include "../../src/column_chunks.hpp"
#include "../../src/id_column.hpp"
#include "../../src/marketplace.hpp"
#include "../../src/number_column.hpp"

namespace gpurec {
namespace {

struct RandomOffers
{
	IdColumn product;
	Int64Column store;
	NumberColumn price{NumberType::Numeric};

	/* wide_stores: store ids over all of int64, so (price, store) cannot be packed */
	RandomOffers(size_t n, uint64_t seed, bool wide_stores)
	{
		std::mt19937_64 rng(seed);
		std::uniform_int_distribution<int64_t> product_id(1, 20000);
		std::uniform_int_distribution<int64_t> store_id(1, 50);
		std::uniform_int_distribution<int64_t> cents(-500, 3000); /* many ties */
		for (size_t i = 0; i < n; ++i)
		{
			product.push_back(product_id(rng));
			store.push_back(wide_stores ? static_cast<int64_t>(rng()) : store_id(rng));
			if (rng() % 1000 == 0)
				price.push_numeric_special(NumberColumn::kScaleNaN);
			else
				price.push_numeric(cents(rng), 2);
		}
	}
	Offers offers() const { return {product, store, price}; }
};

void expect_same(const RankedOffers &a, const RankedOffers &b, const RandomOffers &in)
{
	ASSERT_EQ(a.offsets, b.offsets);
	ASSERT_EQ(a.rows.size(), b.rows.size());
	for (size_t i = 0; i < a.rows.size(); ++i)
	{
		ASSERT_EQ(in.price.key(a.rows[i]), in.price.key(b.rows[i])) << "rank entry " << i;
		ASSERT_EQ(in.store[a.rows[i]], in.store[b.rows[i]]) << "rank entry " << i;
	}
	/* the very rows: exact duplicates of an offer in input order on both devices */
	EXPECT_EQ(a.rows, b.rows);
}

class OfferKernels : public ::testing::TestWithParam<std::tuple<int, bool>>
{
  protected:
	void SetUp() override
	{
		if (!gpu_usable())
			GTEST_SKIP() << "no usable GPU";
	}
};

TEST_P(OfferKernels, GpuPathsMatchCpu)
{
	auto [k, wide_stores] = GetParam();
	RandomOffers in(3 * ChunkedColumn<int32_t>::kChunkRows + 12345, 7 + k, wide_stores);
	ExecContext cpu;
	cpu.mode = DeviceMode::Cpu;
	RankedOffers want = cheapest_offers(in.offers(), k, cpu);

	ExecContext copied;
	copied.mode = DeviceMode::Gpu;
	expect_same(cheapest_offers(in.offers(), k, copied), want, in);

	ExecContext in_parts;
	in_parts.mode = DeviceMode::Gpu;
	in_parts.gpu_memory_budget = 2 * ChunkedColumn<int32_t>::kChunkRows * 20;
	expect_same(cheapest_offers(in.offers(), k, in_parts), want, in);

	/* streamed: the chunks go to the GPU as if the input were still being read */
	ExecContext streamed;
	streamed.mode = DeviceMode::Gpu;
	OfferStreamer streamer(streamed, k);
	streamer.on_chunk(in.offers());
	expect_same(cheapest_offers(in.offers(), k, streamed, &streamer), want, in);
}

INSTANTIATE_TEST_SUITE_P(KAndPacking, OfferKernels,
						 ::testing::Combine(::testing::Values(1, 2, 5), ::testing::Bool()));

TEST(OfferKernelsFallback, AllocationFailureFallsBackUnderAuto)
{
	if (!gpu_usable())
		GTEST_SKIP() << "no usable GPU";
	RandomOffers in(5 * ChunkedColumn<int32_t>::kChunkRows, 3, false);
	ExecContext cpu;
	cpu.mode = DeviceMode::Cpu;
	RankedOffers want = cheapest_offers(in.offers(), 1, cpu);

	ExecContext failing; /* auto, on fewer than 8 CPU threads: it tries the GPU */
	failing.cpu_threads = 4;
	failing.fail_gpu_alloc = true;
	std::string notice;
	failing.notice = [&](const std::string &m) { notice = m; };
	expect_same(cheapest_offers(in.offers(), 1, failing), want, in);
	EXPECT_FALSE(failing.used_gpu);
	EXPECT_NE(notice.find("on the CPU instead"), std::string::npos) << notice;

	ExecContext forced;
	forced.mode = DeviceMode::Gpu;
	forced.fail_gpu_alloc = true;
	EXPECT_THROW(cheapest_offers(in.offers(), 1, forced), GpuOutOfMemory);
}

} // namespace
} // namespace gpurec
