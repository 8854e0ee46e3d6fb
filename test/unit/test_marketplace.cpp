/*
 * test_marketplace.cpp: cheapest_offers and improve_carts of the engine
 * (marketplace.hpp) against brute force written here, on fresh random
 * markets of every price type: ties on price and on (price, store), exact
 * duplicates, NaN and infinite prices, negative prices, extreme ids,
 * numerics of mixed scales.  The brute force orders prices by their true
 * value (exact decimals, IEEE doubles with PostgreSQL's NaN rule), not by
 * the engine's order keys.
 *
 * Where a GPU is usable, the GPU path must return the same offers as the
 * CPU path (and fall back to the CPU, or fail, when GPU allocation fails);
 * where none is, asking for the GPU must fail.  GPUREC_TEST_SEED replays a
 * run.
 */
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <tuple>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "../../src/column_chunks.hpp"
#include "../../src/id_column.hpp"
#include "../../src/marketplace.hpp"
#include "../../src/number_column.hpp"
#include "test_random.hpp"

namespace gpurec {
namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

/* A price as the test knows it, apart from the engine's keys. */
struct TruePrice
{
	enum Class
	{
		NegInf,
		Finite,
		PosInf,
		NaN
	} cls;
	__int128 exact; /* Integer and Numeric: value x 10^18 */
	double d;		/* Float4 and Float8 */
	int dscale;		/* Numeric: the display scale the output must keep */
};

__int128 pow10_128(int p)
{
	__int128 r = 1;
	while (p-- > 0)
		r *= 10;
	return r;
}

int compare_prices(const TruePrice &a, const TruePrice &b, NumberType type)
{
	if (a.cls != b.cls)
		return a.cls < b.cls ? -1 : 1;
	if (a.cls != TruePrice::Finite)
		return 0;
	if (type == NumberType::Float4 || type == NumberType::Float8)
		return a.d < b.d ? -1 : a.d > b.d ? 1 : 0;
	return a.exact < b.exact ? -1 : a.exact > b.exact ? 1 : 0;
}

TruePrice of_double(double d)
{
	if (std::isnan(d))
		return {TruePrice::NaN, 0, d, 0};
	if (std::isinf(d))
		return {d > 0 ? TruePrice::PosInf : TruePrice::NegInf, 0, d, 0};
	return {TruePrice::Finite, 0, d, 0};
}

/* A market of offers: the engine's columns and the truth beside them. */
struct Market
{
	IdColumn product;
	Int64Column store;
	NumberColumn price;
	std::vector<int64_t> product_id;
	std::vector<TruePrice> truth;

	explicit Market(NumberType type) : price(type) {}
	Offers offers() const { return {product, store, price}; }
	NumberType type() const { return price.type(); }
	size_t size() const { return truth.size(); }

	void add(int64_t p, int64_t s, TruePrice t, int64_t unscaled = 0)
	{
		product.push_back(p);
		store.push_back(s);
		product_id.push_back(p);
		truth.push_back(t);
		switch (price.type())
		{
			case NumberType::Integer:
				price.push_integer(static_cast<int64_t>(t.exact / pow10_128(18)));
				break;
			case NumberType::Float4:
			case NumberType::Float8:
				price.push_double(t.d);
				break;
			case NumberType::Numeric:
				if (t.cls == TruePrice::Finite)
					price.push_numeric(unscaled, t.dscale);
				else
					price.push_numeric_special(t.cls == TruePrice::NaN	  ? NumberColumn::kScaleNaN
											   : t.cls == TruePrice::PosInf ? NumberColumn::kScalePosInf
																			: NumberColumn::kScaleNegInf);
				break;
		}
	}
	void add_integer(int64_t p, int64_t s, int64_t v)
	{
		add(p, s, {TruePrice::Finite, __int128(v) * pow10_128(18), 0, 0});
	}
	void add_numeric(int64_t p, int64_t s, int64_t unscaled, int dscale)
	{
		add(p, s, {TruePrice::Finite, __int128(unscaled) * pow10_128(18 - dscale), 0, dscale},
			unscaled);
	}
	void add_double(int64_t p, int64_t s, double d) { add(p, s, of_double(d)); }
	void add_special(int64_t p, int64_t s, TruePrice::Class cls)
	{
		double d = cls == TruePrice::NaN ? kNaN : cls == TruePrice::PosInf ? kInf : -kInf;
		add(p, s, {cls, 0, d, 0});
	}

	/* Offer rows a, b: (price, store, row) order. */
	bool before(size_t a, size_t b) const
	{
		int c = compare_prices(truth[a], truth[b], type());
		if (c != 0)
			return c < 0;
		if (store[a] != store[b])
			return store[a] < store[b];
		/* a tie spelled differently (4.5, 4.50): the fewer decimals first */
		if (type() == NumberType::Numeric && truth[a].cls == TruePrice::Finite && truth[a].dscale != truth[b].dscale)
			return truth[a].dscale < truth[b].dscale;
		return a < b;
	}
	/* What SQL shows of an offer: its store, and its price (value and spelling). */
	bool same_offer(size_t a, size_t b) const
	{
		return store[a] == store[b] && compare_prices(truth[a], truth[b], type()) == 0 &&
			   (type() != NumberType::Numeric || truth[a].dscale == truth[b].dscale);
	}
};

std::vector<int64_t> pick_ids(std::mt19937_64 &rng, size_t n)
{
	std::vector<int64_t> ids = {INT64_MIN, INT64_MAX, 0, -1};
	while (ids.size() < n)
		ids.push_back(rng() % 2 ? static_cast<int64_t>(rng()) : static_cast<int64_t>(rng() % 200) - 50);
	std::shuffle(ids.begin(), ids.end(), rng);
	ids.resize(n);
	return ids;
}

/* n random offers of the given price type; few distinct prices and stores, so ties abound. */
Market random_market(std::mt19937_64 &rng, NumberType type, size_t n)
{
	Market m(type);
	std::vector<int64_t> products = pick_ids(rng, 1 + rng() % 60);
	std::vector<int64_t> stores = pick_ids(rng, 1 + rng() % 10);
	std::vector<size_t> weight(products.size());
	for (size_t &w : weight)
		w = 1 + (rng() % 4 == 0 ? rng() % 50 : rng() % 3);
	std::discrete_distribution<size_t> which(weight.begin(), weight.end());
	for (size_t i = 0; i < n; ++i)
	{
		if (i > 0 && rng() % 16 == 0)
		{
			/* an exact duplicate of an earlier offer */
			size_t j = rng() % i;
			TruePrice t = m.truth[j]; /* a copy: adding may reallocate truth */
			int64_t unscaled = 0;
			if (type == NumberType::Numeric && t.cls == TruePrice::Finite)
				unscaled = static_cast<int64_t>(t.exact / pow10_128(18 - t.dscale));
			m.add(m.product_id[j], m.store[j], t, unscaled);
			continue;
		}
		int64_t p = rng() % 12 == 0 ? static_cast<int64_t>(rng()) /* most likely a single offer */
									: products[which(rng)];
		int64_t s = stores[rng() % stores.size()];
		bool special = rng() % 10 == 0;
		switch (type)
		{
			case NumberType::Integer:
			{
				const int64_t edges[] = {INT64_MIN, INT64_MAX, INT64_MIN + 1, INT64_MAX - 1, 0};
				m.add_integer(p, s, special ? edges[rng() % 5] : static_cast<int64_t>(rng() % 30) - 6);
				break;
			}
			case NumberType::Numeric:
				if (special)
				{
					switch (rng() % 5)
					{
						case 0:
							m.add_special(p, s, TruePrice::NaN);
							break;
						case 1:
							m.add_special(p, s, TruePrice::PosInf);
							break;
						case 2:
							m.add_special(p, s, TruePrice::NegInf);
							break;
						case 3:
							m.add_numeric(p, s, rng() % 2 ? 1 : -1, 15); /* +-1e-15 */
							break;
						default:
							m.add_numeric(p, s, 999999999999999999LL, 15); /* 999.999... */
							break;
					}
				}
				else
				{
					/* tenths at scale 1, 2 or 3 (1.5, 1.50, 1.500), or whole at scale 0 */
					int64_t tenths = static_cast<int64_t>(rng() % 141) - 20;
					int dscale = static_cast<int>(rng() % 4);
					if (dscale == 0)
						m.add_numeric(p, s, tenths / 10, 0);
					else
						m.add_numeric(p, s, tenths * static_cast<int64_t>(pow10_128(dscale - 1)), dscale);
				}
				break;
			case NumberType::Float8:
			{
				const double edges[] = {kNaN,
										-kNaN,
										kInf,
										-kInf,
										-0.0,
										0.0,
										5e-324,
										-5e-324,
										std::numeric_limits<double>::max(),
										0.1,
										0.3,
										0.1 + 0.2};
				m.add_double(p, s, special ? edges[rng() % 12] : (static_cast<int>(rng() % 80) - 20) / 8.0);
				break;
			}
			case NumberType::Float4:
			{
				const float edges[] = {std::numeric_limits<float>::quiet_NaN(),
									   std::numeric_limits<float>::infinity(),
									   -std::numeric_limits<float>::infinity(),
									   -0.0f,
									   0.0f,
									   1e-40f,
									   -1e-40f,
									   std::numeric_limits<float>::max(),
									   0.1f,
									   16777216.0f};
				float f = special ? edges[rng() % 10] : (static_cast<int>(rng() % 80) - 20) / 4.0f;
				m.add_double(p, s, static_cast<double>(f));
				break;
			}
		}
	}
	return m;
}

/* The brute force: per product id, its rows in (price, store, row) order. */
std::map<int64_t, std::vector<size_t>> brute_force_ranking(const Market &m)
{
	std::map<int64_t, std::vector<size_t>> by_product;
	for (size_t i = 0; i < m.size(); ++i)
		by_product[m.product_id[i]].push_back(i);
	for (auto &entry : by_product)
		std::sort(entry.second.begin(), entry.second.end(),
				  [&](size_t a, size_t b) { return m.before(a, b); });
	return by_product;
}

ExecContext context(DeviceMode mode)
{
	ExecContext ctx;
	ctx.mode = mode;
	return ctx;
}

/* The CPU path returns exactly the brute force's rows: ties by spelling, then input order. */
void expect_brute_force(const Market &m, int k, const RankedOffers &got)
{
	auto want = brute_force_ranking(m);
	ASSERT_EQ(got.offsets.size(), m.product.distinct() + 1);
	ASSERT_EQ(want.size(), m.product.distinct());
	size_t total = 0;
	for (const auto &[id, rows] : want)
	{
		int32_t code = m.product.find(id);
		ASSERT_GE(code, 0) << id;
		ASSERT_EQ(m.product.counts()[code], static_cast<int64_t>(rows.size())) << "n_offers of " << id;
		size_t ranks = std::min<size_t>(static_cast<size_t>(k), rows.size());
		ASSERT_EQ(static_cast<size_t>(got.offsets[code + 1] - got.offsets[code]), ranks)
			<< "ranks of product " << id;
		for (size_t r = 0; r < ranks; ++r)
			ASSERT_EQ(got.rows[got.offsets[code] + r], rows[r])
				<< "product " << id << " rank " << r + 1 << " k " << k;
		total += ranks;
	}
	EXPECT_EQ(got.rows.size(), total);
}

/* Two rankings show the same offers at every (product, rank). */
void expect_same_offers(const Market &m, const RankedOffers &a, const RankedOffers &b,
						const char *what)
{
	ASSERT_EQ(a.offsets, b.offsets) << what;
	ASSERT_EQ(a.rows.size(), b.rows.size()) << what;
	for (size_t i = 0; i < a.rows.size(); ++i)
		ASSERT_TRUE(m.same_offer(a.rows[i], b.rows[i]))
			<< what << ": entry " << i << " is row " << a.rows[i] << " (store " << m.store[a.rows[i]]
			<< ", scale " << m.truth[a.rows[i]].dscale << ") against row " << b.rows[i]
			<< " (store " << m.store[b.rows[i]] << ", scale " << m.truth[b.rows[i]].dscale << ")";
}

const NumberType kPriceTypes[] = {NumberType::Integer, NumberType::Numeric, NumberType::Float4,
								  NumberType::Float8};

const char *type_name(NumberType t)
{
	switch (t)
	{
		case NumberType::Integer:
			return "integer";
		case NumberType::Numeric:
			return "numeric";
		case NumberType::Float4:
			return "real";
		case NumberType::Float8:
			return "double precision";
	}
	return "?";
}

int most_offers(const Market &m)
{
	int64_t most = 0;
	for (int64_t c : m.product.counts())
		most = std::max(most, c);
	return static_cast<int>(most);
}

std::vector<int> ks_for(const Market &m) { return {1, 2, 3, 7, most_offers(m) + 1, INT_MAX}; }

/* Calls check(m, k) on six random markets of each price type, for every k of ks_for(m). */
template <typename Check> void for_random_markets(Check check)
{
	auto rng = seeded_rng();
	for (NumberType type : kPriceTypes)
		for (int trial = 0; trial < 6; ++trial)
		{
			SCOPED_TRACE(type_name(type));
			Market m = random_market(rng, type, 1 + rng() % 4000);
			for (int k : ks_for(m))
			{
				SCOPED_TRACE(k);
				check(m, k);
			}
		}
}

/* --------------------------------------------------------- cheapest_offers */

TEST(MarketplaceCheapest, CpuMatchesBruteForce)
{
	for_random_markets([](const Market &m, int k) {
		ExecContext ctx = context(DeviceMode::Cpu);
		expect_brute_force(m, k, cheapest_offers(m.offers(), k, ctx));
		EXPECT_FALSE(ctx.used_gpu);
	});
}

TEST(MarketplaceCheapest, IntegerPricesMatchSortedOffers)
{
	/* each product's (price, store) pairs sorted: its first k are the ranking */
	auto rng = seeded_rng();
	for (int trial = 0; trial < 20; ++trial)
	{
		Market m(NumberType::Integer);
		size_t n = 1 + rng() % 3000;
		for (size_t i = 0; i < n; ++i)
		{
			int64_t p = static_cast<int64_t>(rng() % 50);
			int64_t s = static_cast<int64_t>(rng() % 8);
			m.add_integer(p, s, static_cast<int64_t>(rng() % 20) - 5); /* ties and duplicates */
		}
		int k = 1 + static_cast<int>(rng() % 6);
		ExecContext ctx = context(DeviceMode::Cpu);
		RankedOffers got = cheapest_offers(m.offers(), k, ctx);

		std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> by_product;
		for (size_t i = 0; i < n; ++i)
			by_product[m.product.value_of(m.product.code(i))].push_back({m.price.key(i), m.store[i]});
		for (auto &[id, list] : by_product)
		{
			std::sort(list.begin(), list.end());
			int32_t code = m.product.find(id);
			size_t ranks = std::min<size_t>(k, list.size());
			ASSERT_EQ(static_cast<size_t>(got.offsets[code + 1] - got.offsets[code]), ranks);
			for (size_t r = 0; r < ranks; ++r)
			{
				uint32_t row = got.rows[got.offsets[code] + r];
				EXPECT_EQ(m.price.key(row), list[r].first);
				EXPECT_EQ(m.store[row], list[r].second);
			}
		}
	}
}

TEST(MarketplaceCheapest, DuplicatesSpreadAsTheCpuRanksThem)
{
	/*
	 * The GPU's picks as they come back: every run of exact duplicates in
	 * the CPU's ranking given as one row repeated (one part), or as two rows
	 * each repeated (two parts, each giving its own first row).  Spreading
	 * them must give the CPU's very rows.  Runs without a GPU.
	 */
	int runs_seen = 0;
	for_random_markets([&](const Market &m, int k) {
		ExecContext ctx = context(DeviceMode::Cpu);
		RankedOffers want = cheapest_offers(m.offers(), k, ctx);
		for (bool two_parts : {false, true})
		{
			RankedOffers picks = want;
			for (size_t i = 0; i < picks.rows.size();)
			{
				size_t j = i + 1;
				/* one key, store and product: 4.5 and 4.50 too */
				uint32_t a = want.rows[i];
				while (j < picks.rows.size() && m.product_id[a] == m.product_id[want.rows[j]] &&
					   m.store[a] == m.store[want.rows[j]] &&
					   m.offers().price.key(a) == m.offers().price.key(want.rows[j]))
					++j;
				size_t split = two_parts ? i + (j - i + 1) / 2 : j;
				for (size_t e = i; e < j; ++e)
					picks.rows[e] = want.rows[e < split ? i : split];
				runs_seen += j - i > 1;
				i = j;
			}
			settle_ties(m.offers(), picks, ctx);
			EXPECT_EQ(picks.rows, want.rows) << (two_parts ? "two parts" : "one part");
		}
	});
	EXPECT_GT(runs_seen, 0) << "the random markets held no exact duplicates";
}

TEST(MarketplaceCheapest, RowOrderDoesNotChangeTheAnswer)
{
	/*
	 * The same offers in a shuffled order (as parallel workers may deliver
	 * them) rank to the same values, spelling included: ties of one product,
	 * price and store spelled 4.5 and 4.50 fill their ranks fewest decimals
	 * first, whatever row came first.
	 */
	auto rng = seeded_rng();
	auto ranks = [](const Market &m, const RankedOffers &r) {
		std::vector<std::tuple<int64_t, size_t, int64_t, int64_t, int16_t>> out;
		for (size_t p = 0; p + 1 < r.offsets.size(); ++p)
			for (int64_t i = r.offsets[p]; i < r.offsets[p + 1]; ++i)
			{
				uint32_t row = r.rows[i];
				out.emplace_back(m.product_id[row], static_cast<size_t>(i - r.offsets[p]), m.store[row],
								 m.price.key(row), m.price.display_scale(row));
			}
		std::sort(out.begin(), out.end());
		return out;
	};
	int mixed_seen = 0;
	for (NumberType type : kPriceTypes)
		for (int trial = 0; trial < 6; ++trial)
		{
			Market m = random_market(rng, type, 1 + rng() % 3000);
			std::vector<size_t> order(m.size());
			std::iota(order.begin(), order.end(), 0);
			std::shuffle(order.begin(), order.end(), rng);
			Market shuffled(type);
			for (size_t i : order)
			{
				const TruePrice &t = m.truth[i];
				int64_t unscaled = type == NumberType::Numeric && t.cls == TruePrice::Finite
									   ? static_cast<int64_t>(t.exact / pow10_128(18 - t.dscale))
									   : 0;
				shuffled.add(m.product_id[i], m.store[i], t, unscaled);
			}
			mixed_seen += m.price.has_mixed_scales();
			for (int k : ks_for(m))
			{
				ExecContext a = context(DeviceMode::Cpu), b = context(DeviceMode::Cpu);
				EXPECT_EQ(ranks(m, cheapest_offers(m.offers(), k, a)),
						  ranks(shuffled, cheapest_offers(shuffled.offers(), k, b)))
					<< type_name(type) << " k=" << k;
			}
		}
	EXPECT_GT(mixed_seen, 0) << "no market mixed numeric scales";
}

TEST(MarketplaceCheapest, DeepRankingPastAChunk)
{
	/* more offers than a chunk, few products: long rankings */
	auto rng = seeded_rng();
	Market m = random_market(rng, NumberType::Numeric, ChunkedColumn<int32_t>::kChunkRows + 4321);
	for (int k : {1, 50})
	{
		ExecContext ctx = context(DeviceMode::Cpu);
		expect_brute_force(m, k, cheapest_offers(m.offers(), k, ctx));
	}
}

TEST(MarketplaceCheapest, KBelowOneIsAnError)
{
	auto rng = seeded_rng();
	Market empty(NumberType::Integer);
	Market some = random_market(rng, NumberType::Integer, 100);
	for (Market *m : {&empty, &some})
		for (int k : {0, -1, INT_MIN})
			for (DeviceMode mode : {DeviceMode::Cpu, DeviceMode::Auto, DeviceMode::Gpu})
			{
				ExecContext ctx = context(mode);
				try
				{
					cheapest_offers(m->offers(), k, ctx);
					ADD_FAILURE() << "k = " << k << " accepted";
				}
				catch (const Error &e)
				{
					EXPECT_STREQ(e.sqlstate(), sqlstate::invalid_parameter_value) << e.what();
				}
			}
}

TEST(MarketplaceCheapest, EmptyInputHasNoRows)
{
	for (NumberType type : kPriceTypes)
		for (int k : {1, 3, INT_MAX})
		{
			Market m(type);
			ExecContext ctx = context(DeviceMode::Cpu);
			RankedOffers got = cheapest_offers(m.offers(), k, ctx);
			EXPECT_TRUE(got.rows.empty());
			EXPECT_EQ(got.offsets, std::vector<int64_t>{0});
			ExecContext automatic = context(DeviceMode::Auto);
			EXPECT_TRUE(cheapest_offers(m.offers(), k, automatic).rows.empty());
		}
}

TEST(MarketplaceCheapest, ErrorsAndEmptyInput)
{
	Market m(NumberType::Integer);
	ExecContext ctx = context(DeviceMode::Cpu);
	try
	{
		cheapest_offers(m.offers(), 0, ctx);
		FAIL() << "k = 0 accepted";
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), sqlstate::invalid_parameter_value);
	}
	RankedOffers none = cheapest_offers(m.offers(), 3, ctx);
	EXPECT_TRUE(none.rows.empty());
}

TEST(MarketplaceCheapest, TiesByHand)
{
	Market m(NumberType::Numeric);
	m.add_numeric(10, 2, 45, 1);  /* 4.5 at store 2 */
	m.add_numeric(10, 1, 450, 2); /* 4.50 at store 1: the first rank */
	m.add_numeric(10, 2, 45, 1);  /* the same as row 0 */
	m.add_numeric(10, 2, 4500, 3);
	m.add_special(10, 0, TruePrice::NaN);
	m.add_special(10, 9, TruePrice::NegInf);
	m.add_numeric(11, 5, -3, 0);
	ExecContext ctx = context(DeviceMode::Cpu);
	RankedOffers got = cheapest_offers(m.offers(), 10, ctx);
	int32_t p10 = m.product.find(10), p11 = m.product.find(11);
	std::vector<uint32_t> ranked10(got.rows.begin() + got.offsets[p10],
								   got.rows.begin() + got.offsets[p10 + 1]);
	EXPECT_EQ(ranked10, (std::vector<uint32_t>{5, 1, 0, 2, 3, 4}));
	EXPECT_EQ(got.offsets[p11 + 1] - got.offsets[p11], 1);
	EXPECT_EQ(got.rows[got.offsets[p11]], 6u);
}

TEST(MarketplaceCheapest, CancelledOnTheCpu)
{
	auto rng = seeded_rng();
	Market m = random_market(rng, NumberType::Integer, 600000);
	ExecContext ctx = context(DeviceMode::Cpu);
	int calls = 0;
	ctx.check_interrupts = [&] {
		if (++calls == 2)
			throw Error("57014", "canceling statement due to user request");
	};
	EXPECT_THROW(cheapest_offers(m.offers(), 3, ctx), Error);
	EXPECT_EQ(calls, 2);
}

/* ------------------------------------------- cheapest_offers over shards */

/* A shard's part (OffersPart) as the bytes that travel; packed: as _cheapest_offers_part sends it. */
std::vector<uint8_t> part_bytes(const Market &m, int k, bool packed = false)
{
	ExecContext ctx = context(DeviceMode::Cpu);
	OffersPart part(m.offers(), cheapest_offers(m.offers(), k, ctx), m.product.counts(), k);
	if (!packed)
		return serialized_bytes(part);
	return serialized_bytes(part, [](ByteWriter &w) { w.pack_integers(); });
}

/*
 * What the SQL rows of a ranking show, per product id: each rank's store and
 * price (its value, exact, and its spelling), and the product's n_offers.
 * Keys are compared as values: the merge holds numerics at the scale of the
 * shards' ranked rows, which may be smaller than the whole input's.
 */
using ShownOffer = std::tuple<int64_t, int, __int128, int16_t>;
std::map<int64_t, std::pair<int64_t, std::vector<ShownOffer>>> shown(const Offers &offers, const RankedOffers &r,
																	 const std::vector<int64_t> &n_offers)
{
	std::map<int64_t, std::pair<int64_t, std::vector<ShownOffer>>> out;
	for (size_t p = 0; p + 1 < r.offsets.size(); ++p)
	{
		auto &product = out[offers.product.value_of(static_cast<int32_t>(p))];
		product.first = n_offers[p];
		for (int64_t i = r.offsets[p]; i < r.offsets[p + 1]; ++i)
		{
			uint32_t row = r.rows[i];
			int16_t scale = offers.price.display_scale(row);
			bool exact_decimal = offers.price.type() == NumberType::Numeric && scale >= 0;
			__int128 value = exact_decimal ? __int128(offers.price.key(row)) * pow10_128(18 - offers.price.scale())
										   : __int128(offers.price.key(row));
			product.second.emplace_back(offers.store[row], exact_decimal ? 1 : 0, value, scale);
		}
	}
	return out;
}

/* A price's unscaled digits at its display scale (numeric), as the input layer gives them; 0 otherwise. */
int64_t unscaled_of(const TruePrice &t, NumberType type)
{
	return type == NumberType::Numeric && t.cls == TruePrice::Finite
			   ? static_cast<int64_t>(t.exact / pow10_128(18 - t.dscale))
			   : 0;
}

/* The market's rows dealt to `shards` markets at random (some may get none). */
std::vector<Market> deal(std::mt19937_64 &rng, const Market &m, size_t shards)
{
	std::vector<Market> parts;
	for (size_t s = 0; s < shards; ++s)
		parts.emplace_back(m.type());
	size_t empty = rng() % 3 == 0 ? rng() % shards : shards; /* sometimes one shard holds nothing */
	for (size_t i = 0; i < m.size(); ++i)
	{
		size_t s = rng() % shards;
		if (s == empty)
			s = (s + 1) % shards;
		parts[shards == 1 ? 0 : s].add(m.product_id[i], m.store[i], m.truth[i], unscaled_of(m.truth[i], m.type()));
	}
	return parts;
}

TEST(MarketplaceShards, MergedPartsAreTheWholeRanking)
{
	/*
	 * Every shard ranks its own offers and sends its part; the merge of the
	 * parts shows the rows one ranking of all offers shows: same products,
	 * ranks, stores, prices in their spelling, n_offers summed.
	 */
	auto rng = seeded_rng();
	int mixed_seen = 0, empty_shards = 0;
	for_random_markets([&](const Market &m, int k) {
		size_t shards = 1 + rng() % 4;
		std::vector<Market> parts = deal(rng, m, shards);
		MergedOffers merged;
		for (const Market &part : parts)
		{
			/* packed, as shards send them, or flat, as parallel workers do */
			std::vector<uint8_t> bytes = part_bytes(part, k, rng() % 2 == 0);
			merged.append_part(bytes.data(), bytes.size(), k);
			empty_shards += part.size() == 0;
		}
		mixed_seen += merged.offers().price.has_mixed_scales();
		ExecContext whole_ctx = context(DeviceMode::Cpu), merge_ctx = context(DeviceMode::Cpu);
		RankedOffers whole = cheapest_offers(m.offers(), k, whole_ctx);
		RankedOffers got = merge_cheapest_offers(merged, k, merge_ctx);
		EXPECT_EQ(shown(merged.offers(), got, merged.n_offers()), shown(m.offers(), whole, m.product.counts()))
			<< shards << " shards";
	});
	EXPECT_GT(mixed_seen, 0) << "no merge mixed numeric scales";
	EXPECT_GT(empty_shards, 0) << "no shard was empty";
}

/* An integer id as bytes that order as the ids do: its bits, the sign's flipped, most significant first. */
std::array<uint8_t, 8> id_as_bytes(int64_t id)
{
	uint64_t bits = static_cast<uint64_t>(id) ^ (uint64_t(1) << 63);
	std::array<uint8_t, 8> out;
	for (int i = 0; i < 8; ++i)
		out[static_cast<size_t>(i)] = static_cast<uint8_t>(bits >> (56 - 8 * i));
	return out;
}

int64_t id_of_bytes(const uint8_t *bytes)
{
	uint64_t bits = 0;
	for (int i = 0; i < 8; ++i)
		bits = bits << 8 | bytes[i];
	return static_cast<int64_t>(bits ^ (uint64_t(1) << 63));
}

/*
 * A process's part as a parallel read builds it (PartialBuilder): its rows
 * pushed into one set of columns in pieces of `piece_rows`, each piece
 * ranked in (RunningCheapestOffers::absorb) and then forgotten, the
 * dictionary of product ids kept.  as_bytes: ids as the read gives uuid
 * or text ids (id_as_bytes' of the ids): the products coded through a
 * dictionary of the process's own, the stores held as they came in each
 * piece (Offers::store_bytes).
 */
std::vector<uint8_t> running_part_bytes(const Market &process, int k, size_t piece_rows, size_t compact_from,
										bool as_bytes = false)
{
	RunningCheapestOffers running(k, compact_from);
	Market piece(process.type());
	KeyDictionary products;
	KeyOrder product_order{&products, 1};
	KeyBytes held;
	Int64Column held_at;
	auto offers = [&] {
		return as_bytes ? Offers{piece.product, held_at, piece.price, &product_order, nullptr, &held} : piece.offers();
	};
	auto absorb = [&] {
		running.absorb(offers());
		piece.product.forget_rows();
		piece.store.forget_rows();
		piece.price.forget_rows();
		held.clear();
		held_at.forget_rows();
	};
	for (size_t i = 0; i < process.size(); ++i)
	{
		int64_t product = process.product_id[i];
		if (as_bytes)
		{
			std::array<uint8_t, 8> product_bytes = id_as_bytes(product), store = id_as_bytes(process.store[i]);
			product = products.intern(product_bytes.data(), product_bytes.size());
			held_at.push_back(held.hold(store.data(), store.size()));
		}
		piece.add(product, process.store[i], process.truth[i], unscaled_of(process.truth[i], process.type()));
		if (piece.product.size() == piece_rows)
			absorb();
	}
	absorb();
	return running.finish(offers());
}

TEST(MarketplaceShards, RunningPartsAreTheWholeRanking)
{
	/*
	 * Each process of a parallel read ranks its rows as they come, piece
	 * by piece (the scales of a numeric piece differing from the next's),
	 * compacting what it keeps now and then; the processes' parts merged
	 * show the whole ranking, n_offers summed.  Some markets come in
	 * descending price order, so that every offer enters its heap.  Half
	 * the time the ids come as bytes, as uuid or text ids do, which the
	 * parts carry and the merge codes (their order the ids').
	 */
	auto rng = seeded_rng();
	int descending = 0, as_bytes = 0;
	for_random_markets([&](const Market &m, int k) {
		const Market *input = &m;
		Market sorted(m.type());
		if (rng() % 3 == 0)
		{
			std::vector<size_t> order(m.size());
			std::iota(order.begin(), order.end(), 0);
			std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
				return compare_prices(m.truth[b], m.truth[a], m.type()) < 0;
			});
			for (size_t i : order)
				sorted.add(m.product_id[i], m.store[i], m.truth[i], unscaled_of(m.truth[i], m.type()));
			input = &sorted;
			++descending;
		}
		bool ids_as_bytes = rng() % 2 == 0;
		as_bytes += ids_as_bytes;
		std::shared_ptr<CallKeys> keys = ids_as_bytes ? std::make_shared<CallKeys>() : nullptr;
		if (keys)
		{
			keys->key("product_id", KeyType::Uuid);
			keys->key("store_id", KeyType::Uuid);
		}
		size_t processes = 1 + rng() % 4;
		MergedOffers merged("a numeric column", keys);
		for (const Market &process : deal(rng, *input, processes))
		{
			std::vector<uint8_t> bytes = running_part_bytes(process, k, 1 + rng() % 300, 1 + rng() % 64, ids_as_bytes);
			merged.append_part(bytes.data(), bytes.size(), k);
		}
		if (keys)
			merged.settle_keys();
		ExecContext whole_ctx = context(DeviceMode::Cpu), merge_ctx = context(DeviceMode::Cpu);
		RankedOffers whole = cheapest_offers(input->offers(), k, whole_ctx);
		RankedOffers got = merge_cheapest_offers(merged, k, merge_ctx);
		auto got_shown = shown(merged.offers(), got, merged.n_offers());
		if (keys) /* the merge's ids are codes of the call's dictionaries: back to the ids */
		{
			auto id_of = [&keys](const char *name, int64_t code) {
				return id_of_bytes(keys->find(name)->dictionary->value(code));
			};
			std::map<int64_t, std::pair<int64_t, std::vector<ShownOffer>>> by_id;
			for (auto &[product, ranked] : got_shown)
			{
				for (ShownOffer &offer : ranked.second)
					std::get<0>(offer) = id_of("store_id", std::get<0>(offer));
				by_id[id_of("product_id", product)] = ranked;
			}
			got_shown = by_id;
		}
		EXPECT_EQ(got_shown, shown(input->offers(), whole, input->product.counts()))
			<< processes << " processes" << (ids_as_bytes ? ", ids as bytes" : "");
	});
	EXPECT_GT(descending, 0);
	EXPECT_GT(as_bytes, 0);
}

TEST(MarketplaceShards, ARunningPartIsTheWholeProcesssPart)
{
	/* one process's running part, whatever its pieces, is the part of its rows ranked at once */
	auto rng = seeded_rng();
	for_random_markets([&](const Market &m, int k) {
		std::vector<uint8_t> running = running_part_bytes(m, k, 1 + rng() % 500, 1 + rng() % 64);
		MergedOffers from_running, from_whole;
		from_running.append_part(running.data(), running.size(), k);
		std::vector<uint8_t> whole = part_bytes(m, k);
		from_whole.append_part(whole.data(), whole.size(), k);
		ExecContext a = context(DeviceMode::Cpu), b = context(DeviceMode::Cpu);
		EXPECT_EQ(shown(from_running.offers(), merge_cheapest_offers(from_running, k, a), from_running.n_offers()),
				  shown(from_whole.offers(), merge_cheapest_offers(from_whole, k, b), from_whole.n_offers()));
	});
}

/* The SQLSTATE that f raises, or "" when it raises nothing. */
template <typename F> std::string sqlstate_of(F f)
{
	try
	{
		f();
		return "";
	}
	catch (const Error &e)
	{
		return e.sqlstate();
	}
}

TEST(MarketplaceShards, PricesNoOneColumnHoldsAreAnErrorWhereverTheyLie)
{
	/*
	 * 10000000 holds in 64 bits at scale 11 but not at 12: one read of all
	 * the prices raises 22003 once a price of 12 decimals comes, and so do
	 * shards and parallel processes that each read one of the two, though
	 * the big price is no product's cheapest and reaches no ranking.
	 */
	for (int decimals : {11, 12})
	{
		SCOPED_TRACE(decimals);
		Market big(NumberType::Numeric), small(NumberType::Numeric);
		big.add_numeric(1, 2, 1, 0); /* product 1's cheapest in its share, first: the big price never enters a heap */
		big.add_numeric(1, 1, 10000000, 0);
		small.add_numeric(1, 3, 1, decimals);
		bool fits = decimals <= 11;
		std::string want = fits ? "" : sqlstate::numeric_value_out_of_range;
		/* one column of every price */
		EXPECT_EQ(sqlstate_of([&] {
					  Market all(NumberType::Numeric);
					  all.add_numeric(1, 1, 10000000, 0);
					  all.add_numeric(1, 3, 1, decimals);
				  }),
				  want);
		/* shards */
		MergedOffers merged;
		for (const Market *shard : {&big, &small})
		{
			std::vector<uint8_t> bytes = part_bytes(*shard, 1);
			merged.append_part(bytes.data(), bytes.size(), 1);
		}
		EXPECT_EQ(merged.offers().product.size(), 2u) << "the big price reached the merge";
		EXPECT_EQ(sqlstate_of([&] { merged.reach().check("column \"price\""); }), want);
		/*
		 * one process, its pieces: the big price first, the small one in a
		 * later piece (the rows only: no one column of them is made here)
		 */
		Market both(NumberType::Numeric);
		for (const Market *share : {&big, &small})
			for (size_t i = 0; i < share->size(); ++i)
			{
				both.product_id.push_back(share->product_id[i]);
				both.store.push_back(share->store[i]);
				both.truth.push_back(share->truth[i]);
			}
		EXPECT_EQ(sqlstate_of([&] { running_part_bytes(both, 1, 2, 64); }), want);
		/* the same in one piece: its own column raises */
		EXPECT_EQ(sqlstate_of([&] { running_part_bytes(both, 1, 3, 64); }), want);
	}
	/* special values and other types carry no reach */
	Market specials(NumberType::Numeric);
	specials.add(1, 1, {TruePrice::NaN, 0, 0, 0});
	specials.add(1, 2, {TruePrice::PosInf, 0, 0, 0});
	std::vector<uint8_t> bytes = running_part_bytes(specials, 1, 1, 64);
	MergedOffers merged;
	merged.append_part(bytes.data(), bytes.size(), 1);
	EXPECT_NO_THROW(merged.reach().check("column \"price\""));
}

/*
 * Where the parts' kept prices cannot share one column (a huge price on one
 * shard, a tenth on another), the merge's own column raises 22003; its
 * message names the price column as one read of all the offers would.
 */
TEST(MarketplaceShards, APriceTheMergeCannotHoldNamesThePriceColumn)
{
	Market big(NumberType::Numeric), small(NumberType::Numeric);
	big.add_numeric(1, 1, 9000000000000000000LL, 0);
	small.add_numeric(2, 1, 5, 1); /* 0.5 */
	const std::string column = "column \"price\" of the offers query";
	MergedOffers merged(column);
	try
	{
		for (const Market *shard : {&big, &small})
		{
			std::vector<uint8_t> bytes = part_bytes(*shard, 1);
			merged.append_part(bytes.data(), bytes.size(), 1);
		}
		merged.reach().check(column);
		ADD_FAILURE() << "no error";
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), sqlstate::numeric_value_out_of_range) << e.what();
		EXPECT_NE(std::string(e.what()).find(column), std::string::npos) << e.what();
		EXPECT_NE(std::string(e.what()).find("9000000000000000000"), std::string::npos) << e.what();
	}
}

TEST(MarketplaceShards, NoPartsNoRows)
{
	MergedOffers merged;
	ExecContext ctx = context(DeviceMode::Cpu);
	RankedOffers got = merge_cheapest_offers(merged, 3, ctx);
	EXPECT_TRUE(got.rows.empty());
	EXPECT_THROW(merge_cheapest_offers(merged, 0, ctx), Error);
}

/* The SQLSTATE append_part raises for these bytes, or "" when it takes them. */
std::string append_error(MergedOffers &merged, const std::vector<uint8_t> &bytes, int k)
{
	try
	{
		merged.append_part(bytes.data(), bytes.size(), k);
		return "";
	}
	catch (const Error &e)
	{
		return e.sqlstate();
	}
}

TEST(MarketplaceShards, BadPartsAreErrors)
{
	auto rng = seeded_rng();
	Market m = random_market(rng, NumberType::Numeric, 300);
	std::vector<uint8_t> good = part_bytes(m, 2), packed = part_bytes(m, 2, true);
	EXPECT_LT(packed.size(), good.size()) << "packing made the part no smaller";
	/* cut anywhere, or one byte too many: not a part (and never a read past the bytes) */
	for (const std::vector<uint8_t> *whole : {&good, &packed})
		for (size_t size = 0; size < whole->size(); ++size)
		{
			MergedOffers merged;
			std::vector<uint8_t> cut(whole->begin(), whole->begin() + static_cast<std::ptrdiff_t>(size));
			ASSERT_EQ(append_error(merged, cut, 2), sqlstate::invalid_binary_representation)
				<< size << " bytes of " << whole->size();
		}
	std::vector<uint8_t> longer = good;
	longer.push_back(0);
	MergedOffers with_longer;
	EXPECT_EQ(append_error(with_longer, longer, 2), sqlstate::invalid_binary_representation);
	/* another magic or version: a part of another gpurec */
	for (size_t at : {0, 4})
	{
		std::vector<uint8_t> other = good;
		other[at] ^= 1;
		MergedOffers with_other;
		EXPECT_EQ(append_error(with_other, other, 2), sqlstate::invalid_binary_representation) << "byte " << at;
	}
	/*
	 * a numeric reach (the last 17 bytes: any, scale, value, its scale) that
	 * no part holds: not a part, rather than a check of the wrong values
	 */
	auto with_reach = [&](uint8_t any, int32_t scale, int64_t unscaled, int32_t value_scale) {
		std::vector<uint8_t> bytes = good;
		uint8_t *reach = bytes.data() + bytes.size() - 17;
		reach[0] = any;
		std::memcpy(reach + 1, &scale, sizeof scale);
		std::memcpy(reach + 5, &unscaled, sizeof unscaled);
		std::memcpy(reach + 13, &value_scale, sizeof value_scale);
		MergedOffers with_bad_reach;
		return append_error(with_bad_reach, bytes, 2);
	};
	EXPECT_EQ(with_reach(1, 3, 12345, 2), "") << "a reach a part may hold";
	EXPECT_EQ(with_reach(2, 3, 12345, 2), sqlstate::invalid_binary_representation);
	EXPECT_EQ(with_reach(1, 19, 12345, 2), sqlstate::invalid_binary_representation);
	EXPECT_EQ(with_reach(1, -1, 12345, 0), sqlstate::invalid_binary_representation);
	EXPECT_EQ(with_reach(1, 3, 12345, 4), sqlstate::invalid_binary_representation);
	EXPECT_EQ(with_reach(1, 3, 12345, -1), sqlstate::invalid_binary_representation);
	EXPECT_EQ(with_reach(1, 3, INT64_MIN, 2), sqlstate::invalid_binary_representation);
	EXPECT_EQ(with_reach(1, 3, INT64_MAX - 1, 2), sqlstate::invalid_binary_representation);
	/* ranked for a smaller k than the merge's: a wrong answer if taken */
	MergedOffers merged;
	EXPECT_EQ(append_error(merged, good, 3), sqlstate::invalid_parameter_value);
	EXPECT_EQ(append_error(merged, good, 2), "");
	EXPECT_EQ(append_error(merged, good, 1), "") << "a part of a larger k holds the smaller k's offers";
	/* prices of another type than the parts' before */
	Market doubles = random_market(rng, NumberType::Float8, 50);
	EXPECT_EQ(append_error(merged, part_bytes(doubles, 2), 2), sqlstate::datatype_mismatch);
}

/* ----------------------------------------------------------- improve_carts */

struct Carts
{
	Int64Column cart, product, store, quantity;
	CartLines lines() const { return {cart, product, store, quantity}; }
	void add(int64_t c, int64_t p, int64_t s, int64_t q)
	{
		cart.push_back(c);
		product.push_back(p);
		store.push_back(s);
		quantity.push_back(q);
	}
};

Carts random_carts(std::mt19937_64 &rng, const Market &m, size_t n)
{
	Carts carts;
	std::vector<int64_t> stores(m.store.to_vector());
	for (size_t i = 0; i < n; ++i)
	{
		if (i > 0 && rng() % 20 == 0)
		{
			size_t j = rng() % i;
			carts.add(carts.cart[j], carts.product[j], carts.store[j], carts.quantity[j]);
			continue;
		}
		int64_t c = rng() % 10 == 0 ? (rng() % 2 ? INT64_MIN : INT64_MAX) : static_cast<int64_t>(rng() % 25);
		int64_t p = m.size() && rng() % 10 ? m.product_id[rng() % m.size()] : static_cast<int64_t>(rng());
		int64_t s = !stores.empty() && rng() % 10 ? stores[rng() % stores.size()] : static_cast<int64_t>(rng() % 1000);
		int64_t q = rng() % 8 == 0 ? INT64_MAX : 1 + static_cast<int64_t>(rng() % 5);
		carts.add(c, p, s, q);
	}
	return carts;
}

/* The brute force of improve_carts, in its output order. */
std::vector<CartImprovement> brute_force_carts(const Carts &carts, const Market &m)
{
	std::vector<CartImprovement> out;
	for (size_t line = 0; line < carts.cart.size(); ++line)
	{
		int64_t best = -1, current = -1;
		for (size_t row = 0; row < m.size(); ++row)
		{
			if (m.product_id[row] != carts.product[line])
				continue;
			if (best < 0 || m.before(row, static_cast<size_t>(best)))
				best = static_cast<int64_t>(row);
			/* the current store's cheapest offer: of the cheapest rows, the fewest decimals, then the first */
			if (m.store[row] == carts.store[line] && (current < 0 || m.before(row, static_cast<size_t>(current))))
				current = static_cast<int64_t>(row);
		}
		if (best < 0 || current < 0 || compare_prices(m.truth[best], m.truth[current], m.type()) < 0)
			out.push_back({line, current, best});
	}
	std::stable_sort(out.begin(), out.end(), [&](const CartImprovement &a, const CartImprovement &b) {
		return std::make_tuple(carts.cart[a.line], carts.product[a.line], carts.store[a.line], carts.quantity[a.line]) <
			   std::make_tuple(carts.cart[b.line], carts.product[b.line], carts.store[b.line], carts.quantity[b.line]);
	});
	return out;
}

void expect_same_lines(const std::vector<CartImprovement> &got,
					   const std::vector<CartImprovement> &want, const Market &m, bool exact_rows,
					   const char *what)
{
	ASSERT_EQ(got.size(), want.size()) << what;
	for (size_t i = 0; i < got.size(); ++i)
	{
		ASSERT_EQ(got[i].line, want[i].line) << what << ": output line " << i;
		ASSERT_EQ(got[i].current_row < 0, want[i].current_row < 0) << what << ": line " << got[i].line;
		ASSERT_EQ(got[i].best_row < 0, want[i].best_row < 0) << what << ": line " << got[i].line;
		if (exact_rows)
		{
			ASSERT_EQ(got[i].current_row, want[i].current_row) << what << ": line " << got[i].line;
			ASSERT_EQ(got[i].best_row, want[i].best_row) << what << ": line " << got[i].line;
		}
		else
		{
			if (got[i].current_row >= 0)
			{
				ASSERT_TRUE(m.same_offer(got[i].current_row, want[i].current_row))
					<< what << ": current offer of line " << got[i].line;
			}
			if (got[i].best_row >= 0)
			{
				ASSERT_TRUE(m.same_offer(got[i].best_row, want[i].best_row))
					<< what << ": best offer of line " << got[i].line;
			}
		}
	}
}

TEST(MarketplaceCarts, CpuMatchesBruteForce)
{
	auto rng = seeded_rng();
	for (NumberType type : kPriceTypes)
		for (int trial = 0; trial < 5; ++trial)
		{
			SCOPED_TRACE(type_name(type));
			Market m = random_market(rng, type, rng() % 3000);
			Carts carts = random_carts(rng, m, rng() % 500);
			ExecContext ctx = context(DeviceMode::Cpu);
			std::vector<CartImprovement> got = improve_carts(carts.lines(), m.offers(), ctx);
			expect_same_lines(got, brute_force_carts(carts, m), m, true, "cpu");
		}
}

TEST(MarketplaceCarts, IntegerPricesMatchALinearScan)
{
	/* every line against a scan of all offers: the cheapest (price, store) and the line's store */
	auto rng = seeded_rng();
	Market m(NumberType::Integer);
	for (int i = 0; i < 2000; ++i)
	{
		int64_t p = static_cast<int64_t>(rng() % 40);
		int64_t s = static_cast<int64_t>(rng() % 6);
		m.add_integer(p, s, static_cast<int64_t>(rng() % 15));
	}
	Carts carts;
	for (int i = 0; i < 500; ++i)
	{
		int64_t c = static_cast<int64_t>(rng() % 30);
		int64_t p = static_cast<int64_t>(rng() % 45); /* some nobody offers */
		int64_t s = static_cast<int64_t>(rng() % 7);  /* some stores offer nothing */
		carts.add(c, p, s, 1 + static_cast<int64_t>(rng() % 3));
	}
	ExecContext ctx = context(DeviceMode::Cpu);
	std::vector<CartImprovement> got = improve_carts(carts.lines(), m.offers(), ctx);

	size_t expected = 0;
	for (size_t line = 0; line < carts.cart.size(); ++line)
	{
		int64_t best_key = INT64_MAX, best_store = INT64_MAX, current = INT64_MAX;
		bool offered = false, current_offers = false;
		for (size_t i = 0; i < m.size(); ++i)
		{
			if (m.product_id[i] != carts.product[line])
				continue;
			offered = true;
			std::pair<int64_t, int64_t> o{m.price.key(i), m.store[i]};
			if (o < std::make_pair(best_key, best_store))
				std::tie(best_key, best_store) = o;
			if (m.store[i] == carts.store[line])
			{
				current_offers = true;
				current = std::min(current, m.price.key(i));
			}
		}
		bool returned = !offered || !current_offers || best_key < current;
		auto it = std::find_if(got.begin(), got.end(), [&](const CartImprovement &c) { return c.line == line; });
		ASSERT_EQ(it != got.end(), returned) << "line " << line;
		if (!returned)
			continue;
		++expected;
		EXPECT_EQ(it->best_row < 0, !offered);
		EXPECT_EQ(it->current_row < 0, !current_offers);
		if (offered)
		{
			EXPECT_EQ(m.price.key(it->best_row), best_key);
			EXPECT_EQ(m.store[it->best_row], best_store);
		}
		if (current_offers)
			EXPECT_EQ(m.price.key(it->current_row), current);
	}
	EXPECT_EQ(got.size(), expected);
	for (size_t i = 1; i < got.size(); ++i)
		EXPECT_LE(carts.cart[got[i - 1].line], carts.cart[got[i].line]);

	carts.quantity[7] = 0;
	EXPECT_THROW(improve_carts(carts.lines(), m.offers(), ctx), Error);
}

TEST(MarketplaceCarts, ByHand)
{
	Market m(NumberType::Numeric);
	m.add_numeric(10, 1, 45, 1);   /* 0: 4.5 at store 1, the best of 10 */
	m.add_numeric(10, 1, 450, 2);  /* 1: 4.50 at store 1 */
	m.add_numeric(10, 2, 500, 2);  /* 2: 5.00 at store 2 */
	m.add_numeric(10, 2, 6, 0);	   /* 3 */
	m.add_special(10, 3, TruePrice::NaN); /* 4 */
	m.add_numeric(11, 2, 7, 0);	   /* 5: the best of 11 */
	m.add_special(11, 2, TruePrice::NaN); /* 6 */
	m.add_numeric(13, 4, 45, 1);   /* 7: the best of 13, tied with 8 on price: the lower store */
	m.add_numeric(13, 5, 45, 1);   /* 8 */
	Carts carts;
	carts.add(1, 10, 2, 1); /* 0: 5.00 -> 4.5 */
	carts.add(1, 10, 1, 2); /* 1: already the best: not shown */
	carts.add(1, 11, 3, 1); /* 2: store 3 does not offer 11 */
	carts.add(1, 12, 1, 4); /* 3: nobody offers 12 */
	carts.add(2, 10, 3, 3); /* 4: NaN -> 4.5 */
	carts.add(2, 10, 3, 3); /* 5: the same line again */
	carts.add(2, 11, 2, 1); /* 6: 7 is the best already */
	carts.add(0, 13, 5, 1); /* 7: equal price at store 4 is not strictly cheaper */
	ExecContext ctx = context(DeviceMode::Cpu);
	std::vector<CartImprovement> got = improve_carts(carts.lines(), m.offers(), ctx);
	std::vector<std::tuple<size_t, int64_t, int64_t>> rows;
	for (const CartImprovement &c : got)
		rows.emplace_back(c.line, c.current_row, c.best_row);
	EXPECT_EQ(rows, (std::vector<std::tuple<size_t, int64_t, int64_t>>{
						{0, 2, 0}, {2, -1, 5}, {3, -1, -1}, {4, 4, 0}, {5, 4, 0}}));
}

TEST(MarketplaceCarts, QuantityBelowOneIsAnError)
{
	Market m(NumberType::Integer);
	m.add_integer(1, 1, 5);
	for (int64_t bad : {int64_t(0), int64_t(-1), INT64_MIN})
	{
		Carts carts;
		carts.add(1, 1, 1, 1);
		carts.add(2, 1, 2, bad);
		for (DeviceMode mode : {DeviceMode::Cpu, DeviceMode::Auto})
		{
			ExecContext ctx = context(mode);
			try
			{
				improve_carts(carts.lines(), m.offers(), ctx);
				ADD_FAILURE() << "quantity " << bad << " accepted";
			}
			catch (const Error &e)
			{
				EXPECT_STREQ(e.sqlstate(), sqlstate::invalid_parameter_value) << e.what();
			}
		}
	}
}

TEST(MarketplaceCarts, EmptyInputs)
{
	auto rng = seeded_rng();
	Market none(NumberType::Float8);
	Market some = random_market(rng, NumberType::Float8, 500);
	Carts no_lines;
	Carts lines = random_carts(rng, some, 200);
	ExecContext ctx = context(DeviceMode::Cpu);
	EXPECT_TRUE(improve_carts(no_lines.lines(), some.offers(), ctx).empty());
	EXPECT_TRUE(improve_carts(no_lines.lines(), none.offers(), ctx).empty());
	/* no offers at all: every line, with neither a current nor a best offer */
	std::vector<CartImprovement> got = improve_carts(lines.lines(), none.offers(), ctx);
	ASSERT_EQ(got.size(), lines.cart.size());
	for (const CartImprovement &c : got)
	{
		EXPECT_EQ(c.current_row, -1);
		EXPECT_EQ(c.best_row, -1);
	}
	expect_same_lines(got, brute_force_carts(lines, none), none, true, "no offers");
}

/* --------------------------------------------------------------------- GPU */

TEST(MarketplaceGpu, GpuModeWithoutAGpuIsAnError)
{
	if (gpu_usable())
		GTEST_SKIP() << "a GPU is usable";
	Market m(NumberType::Integer);
	m.add_integer(1, 1, 1);
	ExecContext ctx = context(DeviceMode::Gpu);
	try
	{
		cheapest_offers(m.offers(), 1, ctx);
		ADD_FAILURE() << "gpurec.device = gpu without a GPU accepted";
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), sqlstate::object_not_in_prerequisite_state) << e.what();
	}
	/* auto without a GPU: the CPU, silently */
	ExecContext automatic = context(DeviceMode::Auto);
	std::string notice;
	automatic.notice = [&](const std::string &text) { notice = text; };
	expect_brute_force(m, 1, cheapest_offers(m.offers(), 1, automatic));
	EXPECT_FALSE(automatic.used_gpu);
	EXPECT_EQ(notice, "");
}

class MarketplaceGpuPaths : public ::testing::TestWithParam<NumberType>
{
  protected:
	void SetUp() override
	{
		if (!gpu_usable())
			GTEST_SKIP() << "no usable GPU";
	}
};

TEST_P(MarketplaceGpuPaths, SameOffersAsTheCpu)
{
	auto rng = seeded_rng();
	for (int trial = 0; trial < 4; ++trial)
	{
		bool large = trial == 3;
		Market m = random_market(rng, GetParam(),
								 large ? 2 * ChunkedColumn<int32_t>::kChunkRows + 99 : 1 + rng() % 5000);
		/* the GPU spends a round per rank: no deep rankings of large inputs */
		for (int k : large ? std::vector<int>{1, 2, 7} : ks_for(m))
		{
			SCOPED_TRACE(k);
			ExecContext cpu = context(DeviceMode::Cpu);
			RankedOffers want = cheapest_offers(m.offers(), k, cpu);

			/* the very rows: exact duplicates too, in input order */
			auto expect_cpu_rows = [&](const RankedOffers &got, const char *what) {
				expect_same_offers(m, got, want, what);
				EXPECT_EQ(got.rows, want.rows) << what;
			};
			ExecContext gpu = context(DeviceMode::Gpu);
			expect_cpu_rows(cheapest_offers(m.offers(), k, gpu), "gpu");
			EXPECT_TRUE(gpu.used_gpu);

			/* offers streamed while read, and offers in parts of a small memory budget */
			ExecContext streamed = context(DeviceMode::Gpu);
			OfferStreamer streamer(streamed, k);
			streamer.on_chunk(m.offers());
			expect_cpu_rows(cheapest_offers(m.offers(), k, streamed, &streamer), "streamed");
			ExecContext parts = context(DeviceMode::Gpu);
			parts.gpu_memory_budget = 2 * ChunkedColumn<int32_t>::kChunkRows * 20;
			expect_cpu_rows(cheapest_offers(m.offers(), k, parts), "in parts");
		}
		Carts carts = random_carts(rng, m, 400);
		ExecContext cpu = context(DeviceMode::Cpu), gpu = context(DeviceMode::Gpu);
		expect_same_lines(improve_carts(carts.lines(), m.offers(), gpu),
						  improve_carts(carts.lines(), m.offers(), cpu), m, false, "gpu carts");
	}
}

INSTANTIATE_TEST_SUITE_P(PriceTypes, MarketplaceGpuPaths,
						 ::testing::Values(NumberType::Integer, NumberType::Numeric,
										   NumberType::Float4, NumberType::Float8));

TEST(MarketplaceGpu, TiedOffersKeepTheirOwnSpelling)
{
	/* 4.5 and 4.50 at one store: both offers come back, each with its own scale */
	if (!gpu_usable())
		GTEST_SKIP() << "no usable GPU";
	Market m(NumberType::Numeric);
	m.add_numeric(10, 1, 45, 1);
	m.add_numeric(10, 1, 450, 2);
	m.add_numeric(10, 1, 4500, 3);
	m.add_numeric(10, 2, 1, 0);
	for (int k : {2, 3, 4})
	{
		ExecContext cpu = context(DeviceMode::Cpu), gpu = context(DeviceMode::Gpu);
		RankedOffers want = cheapest_offers(m.offers(), k, cpu);
		RankedOffers got = cheapest_offers(m.offers(), k, gpu);
		EXPECT_EQ(got.rows, want.rows) << "k = " << k;
		ASSERT_EQ(got.rows.size(), want.rows.size());
		std::vector<int> got_scales, want_scales;
		for (size_t i = 0; i < got.rows.size(); ++i)
		{
			got_scales.push_back(m.truth[got.rows[i]].dscale);
			want_scales.push_back(m.truth[want.rows[i]].dscale);
		}
		std::sort(got_scales.begin(), got_scales.end());
		std::sort(want_scales.begin(), want_scales.end());
		EXPECT_EQ(got_scales, want_scales) << "k = " << k;
	}
}

TEST(MarketplaceGpu, AllocationFailure)
{
	if (!gpu_usable())
		GTEST_SKIP() << "no usable GPU";
	/* past the size from which auto picks the GPU (4e6 offers) */
	auto rng = seeded_rng();
	Market m = random_market(rng, NumberType::Numeric, 4200000);
	Carts carts = random_carts(rng, m, 300);
	ExecContext cpu = context(DeviceMode::Cpu);
	RankedOffers want = cheapest_offers(m.offers(), 2, cpu);
	std::vector<CartImprovement> want_lines = improve_carts(carts.lines(), m.offers(), cpu);

	/* auto with fewer than 8 CPU threads tries the GPU: the CPU instead, with a notice */
	ExecContext automatic = context(DeviceMode::Auto);
	automatic.cpu_threads = 4;
	automatic.fail_gpu_alloc = true;
	std::vector<std::string> notices;
	automatic.notice = [&](const std::string &text) { notices.push_back(text); };
	expect_same_offers(m, cheapest_offers(m.offers(), 2, automatic), want, "auto, allocation failing");
	EXPECT_FALSE(automatic.used_gpu);
	ASSERT_EQ(notices.size(), 1u);
	EXPECT_NE(notices[0].find("CPU"), std::string::npos) << notices[0];

	ExecContext auto_carts = context(DeviceMode::Auto);
	auto_carts.cpu_threads = 4;
	auto_carts.fail_gpu_alloc = true;
	notices.clear();
	auto_carts.notice = [&](const std::string &text) { notices.push_back(text); };
	expect_same_lines(improve_carts(carts.lines(), m.offers(), auto_carts), want_lines, m, false,
					  "auto carts, allocation failing");
	EXPECT_EQ(notices.size(), 1u);

	/*
	 * auto with 8 CPU threads: the cost model decides with the host's
	 * measured figures whether the GPU is tried at all; either way the
	 * offers are the CPU's, and a refused GPU says so once
	 */
	ExecContext many_threads = context(DeviceMode::Auto);
	many_threads.cpu_threads = 8;
	many_threads.fail_gpu_alloc = true;
	notices.clear();
	many_threads.notice = [&](const std::string &text) { notices.push_back(text); };
	expect_same_offers(m, cheapest_offers(m.offers(), 2, many_threads), want, "auto, 8 threads");
	EXPECT_FALSE(many_threads.used_gpu);
	ASSERT_LE(notices.size(), 1u);
	if (!notices.empty())
		EXPECT_NE(notices[0].find("CPU"), std::string::npos) << notices[0];

	/* gpu: an out-of-memory error */
	ExecContext forced = context(DeviceMode::Gpu);
	forced.fail_gpu_alloc = true;
	try
	{
		cheapest_offers(m.offers(), 2, forced);
		ADD_FAILURE() << "gpurec.device = gpu with failing allocations returned";
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), sqlstate::out_of_memory) << e.what();
		EXPECT_NE(dynamic_cast<const GpuOutOfMemory *>(&e), nullptr) << e.what();
	}
}

} // namespace
} // namespace gpurec
