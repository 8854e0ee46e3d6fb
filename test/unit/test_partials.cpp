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
#include <map>
#include <memory>
#include <string>
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

/* A random text id: few letters, bytes past 0x7f, prefixes of one another, the empty string. */
std::string random_key(std::mt19937_64 &rng)
{
	static const char letters[] = {'a', 'B', 'b', 'A', '0', '\xc3', '\xa9', ' '};
	std::string key;
	size_t size = rng() % 4;
	for (size_t i = 0; i < size; ++i)
		key += letters[rng() % sizeof letters];
	return key;
}

struct TextRow
{
	std::string product, store;
	int64_t price;
};

/*
 * Processes rank rows of text ids as a parallel read's do, merged: each
 * codes its products through a dictionary of its own, as they come (the
 * calling backend through the call's, lane 0; a worker through its own,
 * code x stride + lane), so that its codes are not the ids' order, yet
 * ties at the k-th price must rank the lower store_id by its bytes.  Its
 * stores too (stores_held false), or held as they came, in the piece's
 * bytes (stores_held: the read's late key column), as the read holds them.
 * The merge takes the parts' values into the call's dictionaries, numbered
 * in key order.  Oracle: the rows sorted on (price, store's bytes) per
 * product, as std::string orders bytes.
 */
void expect_text_ids_ranked(std::mt19937_64 &rng, const std::vector<TextRow> &rows, int k, bool stores_held,
							 int64_t processes)
{
	ExecContext shape_ctx;
	OffersInput shape(shape_ctx);
	std::map<std::string, std::vector<std::pair<int64_t, std::string>>> by_product;
	for (const TextRow &row : rows)
		by_product[row.product].emplace_back(row.price, row.store);
	std::vector<std::tuple<std::string, int64_t, int64_t, std::string, int64_t>> expected;
	for (auto &[product, offers] : by_product)
	{
		std::sort(offers.begin(), offers.end());
		for (size_t r = 0; r < offers.size() && r < static_cast<size_t>(k); ++r)
			expected.emplace_back(product, static_cast<int64_t>(offers.size()), static_cast<int64_t>(r + 1),
								  offers[r].second, offers[r].first);
	}

	auto keys = std::make_shared<CallKeys>();
	KeyDictionary &call_products = *keys->key("product_id", KeyType::Text).dictionary;
	KeyDictionary &call_stores = *keys->key("store_id", KeyType::Text).dictionary;
	std::vector<std::vector<TextRow>> shares(static_cast<size_t>(processes));
	for (const TextRow &row : rows)
		shares[rng() % shares.size()].push_back(row);
	MergedOffers merged("a numeric column", keys);
	auto bytes = [](const std::string &v) { return reinterpret_cast<const uint8_t *>(v.data()); };
	for (int64_t lane = 0; lane < processes; ++lane)
	{
		KeyDictionary own_products, own_stores;
		KeyDictionary &product_codes = lane == 0 ? call_products : own_products;
		KeyDictionary &store_codes = lane == 0 ? call_stores : own_stores;
		PartialBuilder builder(PartialRequest{find_partial_kind("cheapest_offers"), k}, shape.table.what(),
							   shape.table.specs(), [&](InputTable &piece) {
								   piece.order_ids_by(0, KeyOrder{&product_codes, processes});
								   if (stores_held)
									   piece.hold_key_bytes(1);
								   else
									   piece.order_ids_by(1, KeyOrder{&store_codes, processes});
							   });
		const std::vector<TextRow> &share = shares[static_cast<size_t>(lane)];
		auto code = [&](KeyDictionary &d, const std::string &v) { return d.intern(bytes(v), v.size()) * processes + lane; };
		for (size_t at = 0; at < share.size();)
		{
			/* a batch's stores held in the piece it goes to (forgotten with its rows when it is absorbed) */
			size_t batch = std::min<size_t>(share.size() - at, 1 + rng() % 256);
			std::vector<Row> coded;
			for (size_t i = at; i < at + batch; ++i)
				coded.push_back(Row{code(product_codes, share[i].product),
									stores_held ? builder.piece().hold_key_bytes(1).hold(bytes(share[i].store), share[i].store.size())
												: code(store_codes, share[i].store),
									share[i].price});
			append(builder.piece(), coded.data(), batch);
			builder.absorb_if_full();
			at += batch;
		}
		std::vector<uint8_t> part = builder.finish();
		merged.append_part(part.data(), part.size(), k);
	}
	merged.settle_keys();
	ExecContext merge_ctx;
	merge_ctx.mode = DeviceMode::Cpu;
	RankedOffers ranked = merge_cheapest_offers(merged, k, merge_ctx);
	auto text = [](const KeyDictionary &d, int64_t code) {
		return std::string(reinterpret_cast<const char *>(d.value(code)), d.value_size(code));
	};
	std::vector<std::tuple<std::string, int64_t, int64_t, std::string, int64_t>> got;
	for (const auto &[product, count, rank, store, price] : shown(merged.offers(), ranked, merged.n_offers()))
		got.emplace_back(text(call_products, product), count, rank, text(call_stores, store), price);
	EXPECT_EQ(got, expected) << rows.size() << " rows, " << processes << " processes, k = " << k
							 << (stores_held ? ", stores held" : ", stores coded");
}

/* n rows of random text ids, from few products and stores, prices 0-3 (ties at every rank). */
std::vector<TextRow> random_text_rows(std::mt19937_64 &rng, size_t n)
{
	std::vector<std::string> products(1 + rng() % 30), stores(1 + rng() % 12);
	for (std::string &key : products)
		key = random_key(rng);
	for (std::string &key : stores)
		key = random_key(rng);
	std::vector<TextRow> rows(n);
	for (TextRow &row : rows)
		row = TextRow{products[rng() % products.size()], stores[rng() % stores.size()], static_cast<int64_t>(rng() % 4)};
	return rows;
}

TEST(PartialBuilders, ProcessesRankTextIdsByTheirBytesAndTheirSurvivorsCarryThem)
{
	auto rng = seeded_rng();
	for (int round = 0; round < 30; ++round)
	{
		bool stores_held = round % 2 == 1;
		expect_text_ids_ranked(rng, random_text_rows(rng, rng() % 3000), 1 + static_cast<int>(rng() % 4), stores_held,
							   1 + static_cast<int64_t>(rng() % 4));
	}
}

TEST(PartialBuilders, StoresHeldAsBytesSurviveTheCompactionOfWhatIsKept)
{
	/*
	 * Prices falling in runs of 8, so that a product's first offer of a
	 * run enters its heap, and the others of the run tie with it on price
	 * and rank by the stores' bytes: each of the two processes keeps
	 * more than the 65,536 offers past which it compacts what it keeps,
	 * and ties go on being ranked by those bytes after.
	 */
	auto rng = seeded_rng();
	std::vector<TextRow> rows = random_text_rows(rng, 400000);
	for (size_t i = 0; i < rows.size(); ++i)
		rows[i].price = static_cast<int64_t>((rows.size() - i) / 8);
	expect_text_ids_ranked(rng, rows, 1 + static_cast<int>(rng() % 4), true, 2);
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
