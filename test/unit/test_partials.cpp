/*
 * test_partials.cpp: the registry of partial result kinds and
 * PartialBuilder (partials.hpp), on the one kind a family registers today,
 * cheapest_offers' (offers_input.cpp).  The kind must be found by its name
 * in a process that made no call (its registration is static, as in a
 * parallel worker that loaded gpurec.so afresh), and a parallel read's
 * processes building their partial results piece by piece, merged, must
 * give the ranking of all the rows read into one table.
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <tuple>
#include <vector>

#include "../../src/marketplace.hpp"
#include "../../src/offers_input.hpp"
#include "../../src/partials.hpp"
#include "test_random.hpp"

namespace gpurec {
namespace {

TEST(PartialKinds, CheapestOffersIsRegisteredAsTheLibraryLoads)
{
	const PartialKind *kind = find_partial_kind("cheapest_offers");
	ASSERT_EQ(kind, &cheapest_offers_partial);
	PartialBound bound = kind->bound(7);
	EXPECT_EQ(bound.key_column, 0); /* product_id */
	EXPECT_EQ(bound.rows_per_key, 7);
	EXPECT_EQ(find_partial_kind("cheapest_offer"), nullptr);
	EXPECT_EQ(find_partial_kind(""), nullptr);
}

PartialBound no_bound(int64_t) { return PartialBound{-1, 0}; }
std::unique_ptr<RunningPartial> no_start(int64_t) { return nullptr; }

TEST(PartialKinds, ANameIsRegisteredOnceAndMustTravelInTheSpecs)
{
	static const PartialKind taken{"cheapest_offers", no_bound, no_start};
	static const PartialKind spaced{"two words", no_bound, no_start};
	static const PartialKind empty{"", no_bound, no_start};
	static const PartialKind long_name{"a_name_longer_than_the_sixty_three_characters_that_the_specs_read", no_bound,
									   no_start};
	static const PartialKind no_code{"no_code", no_bound, nullptr};
	static const PartialKind fresh{"test_only_kind", no_bound, no_start};
	EXPECT_FALSE(register_partial_kind(taken));
	EXPECT_EQ(find_partial_kind("cheapest_offers"), &cheapest_offers_partial);
	EXPECT_FALSE(register_partial_kind(spaced));
	EXPECT_FALSE(register_partial_kind(empty));
	EXPECT_FALSE(register_partial_kind(long_name));
	EXPECT_FALSE(register_partial_kind(no_code));
	EXPECT_EQ(find_partial_kind("no_code"), nullptr);
	EXPECT_TRUE(register_partial_kind(fresh));
	EXPECT_EQ(find_partial_kind("test_only_kind"), &fresh);
	EXPECT_FALSE(register_partial_kind(fresh));
}

struct Row
{
	int64_t product;
	int64_t store;
	int64_t price;
};

/* Appends rows to an offers table (OffersInput's columns, integer prices) as the read layer's append_rows does. */
void append(InputTable &table, const Row *rows, size_t n)
{
	table.id(0).append(n, [rows](size_t k) { return rows[k].product; });
	table.int64(1).append(n, [rows](int64_t *out, size_t first, size_t m) {
		for (size_t k = 0; k < m; ++k)
			out[k] = rows[first + k].store;
	});
	for (size_t k = 0; k < n; ++k)
		table.number(2).push_integer(rows[k].price);
	table.count_rows(n, 0);
}

/* Every product's ranked offers, products in id order: (product, count, rank, store, price). */
std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>> shown(const Offers &offers,
																			 const RankedOffers &ranked,
																			 const std::vector<int64_t> &n_offers)
{
	std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>> out;
	for (int32_t code : offers.product.codes_in_id_order())
		for (int64_t r = ranked.offsets[code]; r < ranked.offsets[code + 1]; ++r)
			out.emplace_back(offers.product.value_of(code), n_offers[code], r - ranked.offsets[code] + 1,
							 offers.store[ranked.rows[r]], offers.price.key(ranked.rows[r]));
	return out;
}

TEST(PartialBuilders, TheProcessesPartsMergedAreTheWholeRanking)
{
	auto rng = seeded_rng();
	for (int round = 0; round < 6; ++round)
	{
		int k = 1 + static_cast<int>(rng() % 5);
		size_t n = rng() % 40000;
		int64_t products = 1 + static_cast<int64_t>(rng() % 2000);
		std::vector<Row> rows(n);
		for (Row &row : rows)
			row = Row{static_cast<int64_t>(rng() % products) * 37 - 500, static_cast<int64_t>(rng() % 50),
					  static_cast<int64_t>(rng() % 1000)};

		ExecContext whole_ctx;
		whole_ctx.mode = DeviceMode::Cpu;
		OffersInput whole(whole_ctx);
		append(whole.table, rows.data(), rows.size());
		RankedOffers expected = cheapest_offers(whole.offers, k, whole_ctx);

		/* each process reads a share of its own, in batches as the read layer appends them */
		size_t processes = 1 + rng() % 3;
		std::vector<std::vector<Row>> shares(processes);
		for (const Row &row : rows)
			shares[rng() % processes].push_back(row);
		MergedOffers merged;
		for (const std::vector<Row> &share : shares)
		{
			PartialBuilder builder(PartialRequest{find_partial_kind("cheapest_offers"), k}, whole.table.what(),
								   whole.table.specs(), [](InputTable &) {});
			for (size_t at = 0; at < share.size();)
			{
				size_t batch = std::min<size_t>(share.size() - at, 1 + rng() % 256);
				append(builder.piece(), share.data() + at, batch);
				builder.absorb_if_full();
				at += batch;
			}
			std::vector<uint8_t> part = builder.finish();
			merged.append_part(part.data(), part.size(), k);
		}
		ExecContext merge_ctx;
		merge_ctx.mode = DeviceMode::Cpu;
		RankedOffers got = merge_cheapest_offers(merged, k, merge_ctx);
		EXPECT_EQ(shown(merged.offers(), got, merged.n_offers()),
				  shown(whole.offers, expected, whole.offers.product.counts()))
			<< n << " rows, " << processes << " processes, k = " << k;
	}
}

TEST(PartialBuilders, ARequestOfNoKindIsRefused)
{
	ExecContext ctx;
	OffersInput offers_shape(ctx);
	EXPECT_THROW(PartialBuilder(PartialRequest{}, "offers query", offers_shape.table.specs(), [](InputTable &) {}),
				 Error);
}

} // namespace
} // namespace gpurec
