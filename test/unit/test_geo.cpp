/*
 * test_geo.cpp: the geospatial recommender against a brute-force oracle
 * written here independently (library hypot, sin, asin and pow; plain
 * loops), on random integer grids so that ties and zero distances occur;
 * a two-user example by hand, exactly; haversine on known city pairs;
 * every ERROR.
 * With a usable GPU, the GPU path must give the CPU's results bit for bit
 * (up to 1e-12 for exponents that go through pow()).
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "../../src/float_column.hpp"
#include "../../src/geo.hpp"
#include "../../src/geo_internal.hpp"
#include "../../src/id_column.hpp"
#include "../../src/number_column.hpp"
#include "test_random.hpp"

namespace gpurec {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/* ---- inputs -------------------------------------------------------------- */

struct Point
{
	int64_t user;
	double x, y;
};

struct PointColumns
{
	IdColumn user;
	FloatColumn x, y;

	explicit PointColumns(const std::vector<Point> &rows)
	{
		for (const Point &p : rows)
		{
			user.push_back(p.user);
			x.push_back(p.x);
			y.push_back(p.y);
		}
		user.number_in_id_order(); /* as the SQL layer does after reading */
	}
	GeoPoints view() const { return {user, x, y}; }
};

struct Candidate
{
	int64_t id;
	double x, y;
};

struct CandidateColumns
{
	Int64Column id;
	FloatColumn x, y;

	explicit CandidateColumns(const std::vector<Candidate> &rows)
	{
		for (const Candidate &c : rows)
		{
			id.push_back(c.id);
			x.push_back(c.x);
			y.push_back(c.y);
		}
	}
	GeoCandidates view() const { return {id, x, y}; }
};

struct HoldoutColumns
{
	Int64Column user, candidate;

	explicit HoldoutColumns(const std::vector<std::pair<int64_t, int64_t>> &rows)
	{
		for (auto [u, c] : rows)
		{
			user.push_back(u);
			candidate.push_back(c);
		}
	}
	GeoHoldout view() const { return {user, candidate}; }
};

/* A visit to a random candidate for about one point in four. */
std::vector<std::pair<int64_t, int64_t>> random_visits(std::mt19937_64 &rng, const std::vector<Point> &rows,
														 const std::vector<Candidate> &cand_rows)
{
	std::vector<std::pair<int64_t, int64_t>> visits;
	for (const Point &p : rows)
		if (rng() % 4 == 0)
			visits.push_back({p.user, cand_rows[rng() % cand_rows.size()].id});
	return visits;
}

ExecContext cpu_context()
{
	ExecContext ctx;
	ctx.mode = DeviceMode::Cpu;
	return ctx;
}

ExecContext gpu_context(size_t budget = 0)
{
	ExecContext ctx;
	ctx.mode = DeviceMode::Gpu;
	ctx.gpu_memory_budget = budget;
	return ctx;
}

/*
 * Random users on a small integer grid, rows shuffled so users interleave.
 * Euclidean: x, y in [0, grid]; haversine: a corner of Europe in whole
 * degrees, plus points at the poles and on the date line.
 */
std::vector<Point> random_points(std::mt19937_64 &rng, int users, int max_points, GeoMetric metric,
								 int grid = 6)
{
	std::vector<Point> rows;
	std::uniform_int_distribution<int> count(1, max_points), cell(0, grid), coin(0, 19);
	std::set<int64_t> ids;
	while (static_cast<int>(ids.size()) < users)
		ids.insert(std::uniform_int_distribution<int64_t>(-1000000, 1000000)(rng));
	for (int64_t id : ids)
	{
		int n = count(rng);
		for (int i = 0; i < n; ++i)
		{
			if (metric == GeoMetric::Euclidean)
				rows.push_back({id, double(cell(rng)), double(cell(rng))});
			else if (coin(rng) == 0)
				rows.push_back({id, coin(rng) < 10 ? 180.0 : -180.0, double(cell(rng) * 15 - 45)});
			else if (coin(rng) == 0)
				rows.push_back({id, double(cell(rng) * 30 - 90), coin(rng) < 10 ? 90.0 : -90.0});
			else
				rows.push_back({id, double(cell(rng)), double(40 + cell(rng))});
		}
	}
	std::shuffle(rows.begin(), rows.end(), rng);
	return rows;
}

std::vector<Candidate> random_candidates(std::mt19937_64 &rng, int n, GeoMetric metric, int grid = 6)
{
	std::vector<Candidate> rows;
	std::uniform_int_distribution<int> cell(0, grid);
	for (int i = 0; i < n; ++i)
	{
		int64_t id = 1000 + (i % (n - n / 8)); /* some ids repeat: each row is its own candidate */
		if (metric == GeoMetric::Euclidean)
			rows.push_back({id, double(cell(rng)), double(cell(rng))});
		else
			rows.push_back({id, double(cell(rng)), double(40 + cell(rng))});
	}
	return rows;
}

/* ---- the oracle ---------------------------------------------------------- */

/*
 * Euclidean: hypot.  Great circle: Vincenty's formula on the sphere in long
 * double, a different formula from the engine's and well conditioned at
 * every distance, antipodes included.
 */
double oracle_distance(GeoMetric metric, double ax, double ay, double bx, double by)
{
	if (metric == GeoMetric::Euclidean)
		return std::hypot(ax - bx, ay - by);
	const long double rad = 3.141592653589793238462643383279502884L / 180;
	long double p1 = ay * rad, p2 = by * rad, dl = (bx - ax) * rad;
	long double y = hypotl(cosl(p2) * sinl(dl), cosl(p1) * sinl(p2) - sinl(p1) * cosl(p2) * cosl(dl));
	long double x = sinl(p1) * sinl(p2) + cosl(p1) * cosl(p2) * cosl(dl);
	return static_cast<double>(6371008.8L * atan2l(y, x));
}

using Users = std::map<int64_t, std::vector<std::pair<double, double>>>;

Users users_of(const std::vector<Point> &rows)
{
	Users users;
	for (const Point &p : rows)
		users[p.user].push_back({p.x, p.y});
	return users;
}

/* Similarity of b to a, and the raw mean of a's nearest distances. */
std::pair<double, double> oracle_similarity(const Users &users, int64_t a, int64_t b,
											GeoMetric metric, double epsilon)
{
	double floored = 0, raw = 0;
	for (auto [ax, ay] : users.at(a))
	{
		double nearest = kInf;
		for (auto [bx, by] : users.at(b))
			nearest = std::min(nearest, oracle_distance(metric, ax, ay, bx, by));
		floored += std::max(nearest, epsilon);
		raw += nearest;
	}
	double n = double(users.at(a).size());
	return {1.0 / (floored / n), raw / n};
}

std::vector<double> oracle_strength(const Users &users, int64_t main, const std::vector<Candidate> &cands,
									GeoMetric metric, double epsilon, double exponent,
									double max_distance, double min_similarity)
{
	std::vector<double> out;
	for (const Candidate &c : cands)
	{
		double strength = 0;
		for (const auto &[b, pts] : users)
		{
			if (b == main)
				continue;
			double sim = oracle_similarity(users, main, b, metric, epsilon).first;
			if (!(sim >= min_similarity))
				continue;
			double sum = 0;
			for (auto [px, py] : pts)
			{
				double d = oracle_distance(metric, px, py, c.x, c.y);
				if (d <= max_distance)
					sum += std::pow(std::max(d, epsilon), -exponent);
			}
			strength += sim * sum;
		}
		out.push_back(strength);
	}
	return out;
}

bool near(double a, double b, double rel)
{
	if (a == b)
		return true;
	return std::fabs(a - b) <= rel * std::max(std::fabs(a), std::fabs(b));
}

#define EXPECT_NEAR_REL(a, b, rel) EXPECT_PRED3(near, a, b, rel)

/* Distances: relatively near, or both within a micrometre (zero distances at the poles). */
bool near_distance(double a, double b, double rel) { return near(a, b, rel) || std::fabs(a - b) < 1e-6; }

/* ---- an asymmetric pair by hand, and precision --------------------------- */

TEST(Geo, AsymmetricSimilarityExactly)
{
	/* A = 1: (0, 0) and (10, 10); B = 2: (4, 4).  From A, each of A's points to the
	 * nearest of B's: 32^0.5 and 72^0.5; from B, its one point to the nearest of A's:
	 * 32^0.5.  The mean minimum distance, so the similarity, depends on the direction. */
	PointColumns in({{1, 0, 0}, {1, 10, 10}, {2, 4, 4}});
	ExecContext ctx = cpu_context();
	std::vector<UserSimilarity> to_a = user_similarity(in.view(), 1, {}, ctx);
	ASSERT_EQ(to_a.size(), 1u);
	EXPECT_EQ(to_a[0].user_id, 2);
	EXPECT_EQ(to_a[0].similarity, 1.0 / ((std::sqrt(32.0) + std::sqrt(72.0)) / 2));
	EXPECT_EQ(to_a[0].mean_min_distance, (std::sqrt(32.0) + std::sqrt(72.0)) / 2);
	std::vector<UserSimilarity> to_b = user_similarity(in.view(), 2, {}, ctx);
	ASSERT_EQ(to_b.size(), 1u);
	EXPECT_EQ(to_b[0].user_id, 1);
	EXPECT_EQ(to_b[0].similarity, 1.0 / std::sqrt(32.0));
	EXPECT_EQ(to_b[0].mean_min_distance, std::sqrt(32.0));
}

TEST(Geo, IdenticalPointsGiveLargeFiniteSimilarity)
{
	PointColumns in({{1, 3, 3}, {2, 3, 3}});
	ExecContext ctx = cpu_context();
	std::vector<UserSimilarity> rows = user_similarity(in.view(), 1, {GeoMetric::Euclidean, 1e-9}, ctx);
	ASSERT_EQ(rows.size(), 1u);
	EXPECT_EQ(rows[0].similarity, 1 / 1e-9);
	EXPECT_EQ(rows[0].mean_min_distance, 0.0);
}

TEST(Geo, SmallDistancesBetweenLargeCoordinatesKeepTheirDigits)
{
	/* 3-4-5 triangles around 1e9 and 1e12: the differences are exact */
	for (double base : {1e9, 1e12, -7.5e11})
	{
		PointColumns in({{1, base, base}, {2, base + 3, base + 4}, {3, base + 0.75, base - 1}});
		ExecContext ctx = cpu_context();
		std::vector<UserSimilarity> rows = user_similarity(in.view(), 1, {}, ctx);
		ASSERT_EQ(rows.size(), 2u);
		EXPECT_EQ(rows[0].mean_min_distance, 5.0) << base;
		EXPECT_EQ(rows[1].mean_min_distance, 1.25) << base;
	}
}

/*
 * The great-circle distance in long double: the textbook haversine up to a
 * quarter turn, Vincenty's formula beyond (where the haversine's asin loses
 * digits near the antipode).
 */
long double reference_distance(long double lon1, long double lat1, long double lon2, long double lat2)
{
	const long double rad = 3.141592653589793238462643383279502884L / 180;
	long double s1 = sinl((lat2 - lat1) * rad / 2), s2 = sinl((lon2 - lon1) * rad / 2);
	long double h = s1 * s1 + cosl(lat1 * rad) * cosl(lat2 * rad) * s2 * s2;
	if (h <= 0.5L)
		return 2 * 6371008.8L * asinl(sqrtl(h));
	return oracle_distance(GeoMetric::Haversine, lon1, lat1, lon2, lat2);
}

TEST(Geo, HaversineCityPairs)
{
	struct City
	{
		const char *name;
		double lon, lat;
		double km_to_next; /* published great-circle distance to the next city, roughly */
	};
	/* Paris, London, New York, Los Angeles, Sydney, Tokyo */
	std::vector<City> cities = {{"Paris", 2.3522, 48.8566, 343.6},
								{"London", -0.1276, 51.5072, 5570},
								{"New York", -74.0060, 40.7128, 3936},
								{"Los Angeles", -118.2437, 34.0522, 12060},
								{"Sydney", 151.2093, -33.8688, 7823},
								{"Tokyo", 139.6503, 35.6762, 0}};
	GeoOptions hav{GeoMetric::Haversine, 1e-9};
	for (size_t i = 0; i + 1 < cities.size(); ++i)
	{
		const City &a = cities[i], &b = cities[i + 1];
		PointColumns in({{1, a.lon, a.lat}, {2, b.lon, b.lat}});
		ExecContext ctx = cpu_context();
		std::vector<UserSimilarity> rows = user_similarity(in.view(), 1, hav, ctx);
		ASSERT_EQ(rows.size(), 1u);
		double want = static_cast<double>(reference_distance(a.lon, a.lat, b.lon, b.lat));
		EXPECT_NEAR_REL(rows[0].mean_min_distance, want, 1e-13);
		EXPECT_NEAR(rows[0].mean_min_distance / 1000, a.km_to_next, a.km_to_next * 0.005) << a.name;
	}
	/* a metre apart, across the date line, pole to pole, antipodes */
	std::vector<std::array<double, 4>> pairs = {{2.3522, 48.8566, 2.3522, 48.85660899},
												{179.9999, 10, -179.9999, 10},
												{0, 90, 0, -90},
												{10, 20, -170, -20},
												{0, 0, 1e-9, 0}};
	for (auto [lon1, lat1, lon2, lat2] : pairs)
	{
		PointColumns in({{1, lon1, lat1}, {2, lon2, lat2}});
		ExecContext ctx = cpu_context();
		std::vector<UserSimilarity> rows = user_similarity(in.view(), 1, hav, ctx);
		double want = static_cast<double>(reference_distance(lon1, lat1, lon2, lat2));
		EXPECT_NEAR_REL(rows[0].mean_min_distance, want, 1e-12) << lon1 << " " << lat1;
	}
}

/* ---- against the oracle on random grids ---------------------------------- */

class GeoOracle : public ::testing::TestWithParam<GeoMetric>
{
};

TEST_P(GeoOracle, UserSimilarity)
{
	GeoMetric metric = GetParam();
	std::mt19937_64 rng = seeded_rng();
	for (int round = 0; round < 6; ++round)
	{
		std::vector<Point> rows = random_points(rng, 2 + round * 5, 1 + round, metric);
		Users users = users_of(rows);
		PointColumns in(rows);
		double epsilon = round % 2 ? 1e-9 : (metric == GeoMetric::Euclidean ? 1.5 : 200000.0);
		for (const auto &[main, pts] : users)
		{
			ExecContext ctx = cpu_context();
			std::vector<UserSimilarity> got = user_similarity(in.view(), main, {metric, epsilon}, ctx);
			ASSERT_EQ(got.size(), users.size() - 1);
			auto it = users.begin();
			for (const UserSimilarity &row : got)
			{
				if (it->first == main)
					++it;
				ASSERT_EQ(row.user_id, it->first);
				auto [sim, mean] = oracle_similarity(users, main, row.user_id, metric, epsilon);
				EXPECT_NEAR_REL(row.similarity, sim, 1e-12);
				EXPECT_PRED3(near_distance, row.mean_min_distance, mean, 1e-12);
				++it;
			}
		}
	}
}

/*
 * A similar_users answer is right when every user's rows are the oracle's
 * similarities, best first, k of them (or all others), equal ones by
 * ascending id, and no left-out user beats the last row.  Which values are
 * equal is the engine's own arithmetic: two similarities the oracle finds
 * equal may differ in their last bit once the same distances are summed in
 * another order.  user_similarity computes them with the same operations,
 * so it gives the engine's value for the users left out; it must agree with
 * similar_users to the bit and with the oracle within 1e-12.
 */
void expect_best_others(const std::vector<SimilarUser> &got, const GeoPoints &points,
						const Users &users, int k, const GeoOptions &options)
{
	size_t i = 0;
	for (const auto &[a, pts] : users)
	{
		ExecContext ctx = cpu_context();
		std::map<int64_t, double> engine;
		for (const UserSimilarity &row : user_similarity(points, a, options, ctx))
		{
			engine[row.user_id] = row.similarity;
			EXPECT_NEAR_REL(row.similarity,
							oracle_similarity(users, a, row.user_id, options.metric, options.epsilon).first,
							1e-12);
		}
		size_t want_rows = std::min<size_t>(k, users.size() - 1);
		std::set<int64_t> listed;
		double last = kInf;
		int64_t last_id = INT64_MIN;
		for (size_t r = 0; r < want_rows; ++r, ++i)
		{
			ASSERT_LT(i, got.size());
			const SimilarUser &row = got[i];
			ASSERT_EQ(row.user_id, a);
			ASSERT_EQ(row.rank, int(r + 1));
			ASSERT_NE(row.other_user_id, a);
			ASSERT_TRUE(engine.count(row.other_user_id));
			ASSERT_TRUE(listed.insert(row.other_user_id).second) << "user listed twice";
			EXPECT_EQ(row.similarity, engine[row.other_user_id]) << "user " << a << " rank " << r + 1;
			EXPECT_TRUE(row.similarity < last || (row.similarity == last && row.other_user_id > last_id))
				<< "user " << a << " rank " << r + 1;
			last = row.similarity;
			last_id = row.other_user_id;
		}
		for (const auto &[b, sim] : engine)
			if (!listed.count(b))
				EXPECT_TRUE(sim < last || (sim == last && b > last_id))
					<< "user " << a << " left out " << b << " at " << sim << " > " << last;
	}
	EXPECT_EQ(i, got.size());
}

TEST_P(GeoOracle, SimilarUsers)
{
	GeoMetric metric = GetParam();
	std::mt19937_64 rng = seeded_rng();
	for (int k : {1, 2, 3, 7, 1000})
	{
		std::vector<Point> rows = random_points(rng, 3 + k % 13 * 3, 4, metric, 4);
		Users users = users_of(rows);
		PointColumns in(rows);
		for (double epsilon : {1e-9, metric == GeoMetric::Euclidean ? 1.0 : 300000.0})
		{
			ExecContext ctx = cpu_context();
			std::vector<SimilarUser> got = similar_users(in.view(), k, {metric, epsilon}, ctx);
			expect_best_others(got, in.view(), users, k, {metric, epsilon});
		}
	}
}

/*
 * One user's points: around one to three of `cities` on a grid fine enough
 * for ties (1 m, or 0.001 degree under haversine), or, with `anywhere` a
 * step, anywhere on a grid of 500 such steps (3,600 x 1,800 tenths of a
 * degree under haversine); one point in eight twice.
 */
void add_user_points(std::mt19937_64 &rng, std::vector<Point> &rows, int64_t id, int points,
					 const std::vector<std::pair<double, double>> &cities, bool haversine, double anywhere)
{
	size_t home[3] = {rng() % cities.size(), rng() % cities.size(), rng() % cities.size()};
	int homes = 1 + static_cast<int>(rng() % 3);
	for (int i = 0; i < points; ++i)
	{
		double x, y;
		if (anywhere > 0)
		{
			x = haversine ? -180.0 + (rng() % 3600) * 0.1 : (rng() % 500) * anywhere;
			y = haversine ? -90.0 + (rng() % 1800) * 0.1 : (rng() % 500) * anywhere;
		}
		else
		{
			auto [cx, cy] = cities[home[rng() % homes]];
			double step = haversine ? 0.001 : 1.0;
			x = cx + step * static_cast<double>(static_cast<int>(rng() % 41) - 20);
			y = cy + step * static_cast<double>(static_cast<int>(rng() % 41) - 20);
			if (haversine)
				x = std::max(-180.0, std::min(180.0, x)), y = std::max(-90.0, std::min(90.0, y));
		}
		rows.push_back({id, x, y});
		if (rng() % 8 == 0)
			rows.push_back({id, x, y}); /* a duplicate point */
	}
}

/*
 * Check-in-like points: each user's points around one to three of a few
 * cities, on a grid fine enough for ties and duplicate points, some users
 * of one point; under haversine the cities spread over the globe (the date
 * line and a pole included).  With `uniform`, every point anywhere.
 */
std::vector<Point> clustered_points(std::mt19937_64 &rng, int users, GeoMetric metric, bool uniform)
{
	bool haversine = metric == GeoMetric::Haversine;
	std::vector<std::pair<double, double>> cities;
	for (int c = 0; c < 6; ++c)
		cities.push_back(haversine ? std::make_pair(-180.0 + 72.0 * c, -80.0 + 32.0 * c)
								   : std::make_pair(1000.0 * (rng() % 50), 1000.0 * (rng() % 50)));
	if (haversine)
		cities.push_back({179.999, 0.0}), cities.push_back({0.0, 89.999});
	std::vector<Point> rows;
	for (int u = 0; u < users; ++u)
	{
		int64_t id = static_cast<int64_t>(rng() % (users * 4)) - users;
		int points = rng() % 5 == 0 ? 1 : 1 + static_cast<int>(rng() % 12);
		add_user_points(rng, rows, id, points, cities, haversine, uniform ? 100.0 : 0.0);
	}
	std::shuffle(rows.begin(), rows.end(), rng);
	return rows;
}

/*
 * Pruning (gpurec.geo_pruning) changes which pairs are compared, never the
 * answer: the rows of a pruned search are the brute force's to the bit,
 * for every k from 1 to past the users, on clustered and uniform data, on
 * one thread and on several; and they are right by the oracle.
 */
TEST_P(GeoOracle, PrunedSimilarUsersAreTheBruteForceToTheBit)
{
	GeoMetric metric = GetParam();
	std::mt19937_64 rng = seeded_rng();
	for (int round = 0; round < 6; ++round)
	{
		bool uniform = round % 3 == 2;
		int n_users = 10 + static_cast<int>(rng() % 60);
		std::vector<Point> rows = clustered_points(rng, n_users, metric, uniform);
		PointColumns in(rows);
		Users users = users_of(rows);
		int others = static_cast<int>(users.size()) - 1;
		double big = metric == GeoMetric::Euclidean ? 3.0 : 150.0;
		for (double epsilon : {1e-9, big})
			for (int k : {1, 2, 3, 10, others - 1, others, others + 3})
			{
				if (k < 1)
					continue;
				GeoOptions brute{metric, epsilon, GeoPruning::Never};
				ExecContext ctx = cpu_context();
				std::vector<SimilarUser> want = similar_users(in.view(), k, brute, ctx);
				for (GeoPruning pruning : {GeoPruning::Always, GeoPruning::Auto})
					for (size_t threads : {size_t(1), size_t(3)})
					{
						ExecContext pruned_ctx = cpu_context();
						pruned_ctx.cpu_threads = threads;
						std::vector<SimilarUser> got =
							similar_users(in.view(), k, {metric, epsilon, pruning}, pruned_ctx);
						ASSERT_EQ(got.size(), want.size()) << "k " << k;
						for (size_t i = 0; i < got.size(); ++i)
						{
							ASSERT_EQ(got[i].user_id, want[i].user_id) << "k " << k << " row " << i;
							ASSERT_EQ(got[i].rank, want[i].rank);
							ASSERT_EQ(got[i].other_user_id, want[i].other_user_id)
								<< "k " << k << " user " << got[i].user_id << " rank " << got[i].rank;
							ASSERT_EQ(std::memcmp(&got[i].similarity, &want[i].similarity, sizeof(double)), 0);
						}
					}
				if (round < 2 && (k == 3 || k == others + 3))
				{
					ExecContext pruned_ctx = cpu_context();
					GeoOptions always{metric, epsilon, GeoPruning::Always};
					expect_best_others(similar_users(in.view(), k, always, pruned_ctx), in.view(), users, k, always);
				}
			}
	}
}

/*
 * Hundreds of users around a dozen cities far apart, of 1 to 20 points
 * (duplicates among them), and `wide` users of points everywhere, rows
 * shuffled.
 */
std::vector<Point> far_apart_points(std::mt19937_64 &rng, GeoMetric metric, int wide)
{
	bool haversine = metric == GeoMetric::Haversine;
	std::vector<std::pair<double, double>> cities;
	for (int c = 0; c < 12; ++c)
		cities.push_back(haversine ? std::make_pair(-180.0 + (rng() % 3600) * 0.1, -80.0 + (rng() % 1600) * 0.1)
								   : std::make_pair(1000.0 * (rng() % 500), 1000.0 * (rng() % 500)));
	std::vector<Point> rows;
	int n_users = 300;
	for (int u = 0; u < n_users + wide; ++u)
	{
		int points = rng() % 7 == 0 ? 1 : 1 + static_cast<int>(rng() % 20);
		add_user_points(rng, rows, u, points, cities, haversine, u >= n_users ? 1000.0 : 0.0);
	}
	std::shuffle(rows.begin(), rows.end(), rng);
	return rows;
}

/*
 * The pruned search's later rounds at a size where they matter: hundreds of
 * users around a dozen cities (so that a user's places lie far apart, are
 * searched from their boxes and looked up in the pairs' index), a few users
 * of points everywhere (too many boxes for that index: offered to everyone),
 * and more of them than the index allows (the points' search alone).  The
 * rows are the brute force's to the bit.
 */
TEST_P(GeoOracle, PrunedSimilarUsersWithPlacesFarApartAreTheBruteForceToTheBit)
{
	GeoMetric metric = GetParam();
	bool haversine = metric == GeoMetric::Haversine;
	std::mt19937_64 rng = seeded_rng();
	for (int wide : {0, 3, 40})
	{
		std::vector<Point> rows = far_apart_points(rng, metric, wide);
		PointColumns in(rows);
		double big = haversine ? 150.0 : 3.0;
		for (double epsilon : {1e-9, big})
			for (int k : {1, 4, 10})
			{
				ExecContext ctx = cpu_context();
				std::vector<SimilarUser> want = similar_users(in.view(), k, {metric, epsilon, GeoPruning::Never}, ctx);
				ExecContext pruned_ctx = cpu_context();
				pruned_ctx.cpu_threads = 2;
				std::vector<SimilarUser> got =
					similar_users(in.view(), k, {metric, epsilon, GeoPruning::Always}, pruned_ctx);
				ASSERT_EQ(got.size(), want.size()) << "k " << k;
				for (size_t i = 0; i < got.size(); ++i)
				{
					ASSERT_EQ(got[i].user_id, want[i].user_id) << "wide " << wide << " k " << k << " row " << i;
					ASSERT_EQ(got[i].rank, want[i].rank);
					ASSERT_EQ(got[i].other_user_id, want[i].other_user_id)
						<< "wide " << wide << " k " << k << " user " << got[i].user_id << " rank " << got[i].rank;
					ASSERT_EQ(std::memcmp(&got[i].similarity, &want[i].similarity, sizeof(double)), 0);
				}
			}
	}
}

/*
 * The GPU's pruned similar_users compares each user only with the others
 * that the CPU's index lists for it (BestOthers::others_of).  Against the
 * brute force's similarities (user_similarity to each user): every user at
 * or above a user's k-th best similarity is listed, once, never the user
 * itself; and the k best of the listed, kept as the GPU keeps them
 * (geo::heap_offer, the same similarities), are the brute force's rows.
 */
TEST_P(GeoOracle, PrunedListsForTheGpuHoldEveryUserThatRanks)
{
	GeoMetric metric = GetParam();
	bool haversine = metric == GeoMetric::Haversine;
	std::mt19937_64 rng = seeded_rng();
	for (int round = 0; round < 6; ++round)
	{
		std::vector<Point> rows = round < 4 ? clustered_points(rng, 10 + static_cast<int>(rng() % 60), metric, round == 2)
											: far_apart_points(rng, metric, round == 4 ? 0 : 3);
		PointColumns in(rows);
		ExecContext ctx = cpu_context();
		GeoPointSet set = grouped_on_cpu(rows_of(in.view()), metric, ctx);
		int32_t n = set.users();
		for (double epsilon : {1e-9, haversine ? 150.0 : 3.0})
		{
			/* similarity[a][b], by code, from the brute force */
			std::vector<std::vector<double>> similarity(n, std::vector<double>(n, 0.0));
			for (int32_t a = 0; a < n; ++a)
			{
				std::vector<UserSimilarity> all = user_similarity(in.view(), set.user_ids[a], {metric, epsilon}, ctx);
				ASSERT_EQ(all.size(), static_cast<size_t>(n - 1));
				for (const UserSimilarity &other : all)
				{
					auto b = static_cast<int32_t>(std::lower_bound(set.user_ids.begin(), set.user_ids.end(), other.user_id) -
												  set.user_ids.begin());
					similarity[a][b] = other.similarity;
				}
			}
			for (int k : {1, 2, 3, 10, n - 3})
			{
				if (k < 1 || k >= n - 1)
					continue;
				std::vector<SimilarUser> want = similar_users(in.view(), k, {metric, epsilon, GeoPruning::Never}, ctx);
				std::unique_ptr<BestOthers> search =
					best_others_search(set, k, epsilon, GeoPruning::Always, PrunedFor::Gpu, 0, 1, ctx);
				ASSERT_TRUE(search);
				std::vector<SimilarUser> got;
				for (int32_t a = 0; a < n; ++a)
				{
					std::vector<int32_t> others;
					search->others_of(a, 0, others);
					std::vector<uint8_t> listed(n, 0);
					for (int32_t b : others)
					{
						ASSERT_TRUE(b >= 0 && b < n && b != a) << "round " << round << " user " << a << " lists " << b;
						ASSERT_EQ(listed[b]++, 0) << "round " << round << " user " << a << " lists " << b << " twice";
					}
					std::vector<double> row;
					for (int32_t b = 0; b < n; ++b)
						if (b != a)
							row.push_back(similarity[a][b]);
					std::nth_element(row.begin(), row.begin() + (k - 1), row.end(), std::greater<double>());
					for (int32_t b = 0; b < n; ++b)
						if (b != a && similarity[a][b] >= row[k - 1])
							ASSERT_TRUE(listed[b]) << "round " << round << " epsilon " << epsilon << " k " << k
												   << ": user " << set.user_ids[a] << " does not list "
												   << set.user_ids[b] << ", which ranks";
					std::vector<SimilarityEntry> heap(k);
					int size = 0;
					for (int32_t b : others)
						geo::heap_offer(heap.data(), size, k, {similarity[a][b], static_cast<long long>(set.user_ids[b])});
					std::sort(heap.begin(), heap.begin() + size, geo::better);
					for (int i = 0; i < size; ++i)
						got.push_back({set.user_ids[a], i + 1, heap[i].user_id, heap[i].similarity});
				}
				ASSERT_EQ(got.size(), want.size()) << "round " << round << " k " << k;
				for (size_t i = 0; i < got.size(); ++i)
				{
					ASSERT_EQ(got[i].user_id, want[i].user_id) << "round " << round << " k " << k << " row " << i;
					ASSERT_EQ(got[i].rank, want[i].rank);
					ASSERT_EQ(got[i].other_user_id, want[i].other_user_id)
						<< "round " << round << " k " << k << " user " << got[i].user_id << " rank " << got[i].rank;
					ASSERT_EQ(std::memcmp(&got[i].similarity, &want[i].similarity, sizeof(double)), 0);
				}
			}
		}
	}
}

/*
 * Haversine's nearest points are found by chord (geo_pairs.hpp); the
 * distances must still be those of the least geo::haversine_key over all
 * the points, to the bit.  Many points at nearly equal distances (a ring
 * around each main point, jittered in the last digits, and duplicates)
 * make the chord's rounding matter if anything does.
 */
TEST(Geo, HaversineNearestByChordIsTheLeastKeyToTheBit)
{
	std::mt19937_64 rng = seeded_rng();
	std::uniform_real_distribution<double> unit(0, 1);
	for (int round = 0; round < 40; ++round)
	{
		double lon = -180 + 360 * unit(rng), lat = -90 + 180 * unit(rng);
		double spread = std::pow(10.0, -1 - static_cast<int>(rng() % 8)); /* degrees: 10 km down to 1 mm */
		std::vector<Point> rows;
		for (int i = 0; i < 5; ++i)
			rows.push_back({1, std::clamp(lon + spread * unit(rng), -180.0, 180.0),
							std::clamp(lat + spread * unit(rng), -90.0, 90.0)});
		for (int j = 0; j < 150; ++j)
		{
			double angle = 2 * M_PI * (j % 50) / 50, r = spread * (1 + 1e-13 * (rng() % 3));
			double x = std::clamp(lon + r * std::cos(angle), -180.0, 180.0);
			double y = std::clamp(lat + r * std::sin(angle), -90.0, 90.0);
			rows.push_back({2, x, y});
		}
		/* a point of user 2 a spread north of user 1's first, or south where that would pass the pole */
		rows.push_back({2, rows[0].x, rows[0].y <= 90 - spread ? rows[0].y + spread : rows[0].y - spread});
		PointColumns in(rows);
		ExecContext ctx = cpu_context();
		std::vector<UserSimilarity> got = user_similarity(in.view(), 1, {GeoMetric::Haversine, 1e-9}, ctx);
		ASSERT_EQ(got.size(), 1u);
		GeoPointSet set = group_points(in.view(), {GeoMetric::Haversine, 1e-9});
		double raw = 0;
		for (int64_t i = set.offsets[0]; i < set.offsets[1]; ++i)
		{
			double best = kInf;
			for (int64_t j = set.offsets[1]; j < set.offsets[2]; ++j)
				best = std::min(best, geo::haversine_key(set.x[i], set.y[i], set.cos_lat[i], set.x[j], set.y[j],
														 set.cos_lat[j]));
			raw += geo::key_distance(true, best);
		}
		double want = raw / static_cast<double>(set.count(0));
		EXPECT_EQ(std::memcmp(&got[0].mean_min_distance, &want, sizeof want), 0)
			<< got[0].mean_min_distance << " against " << want << " at spread " << spread;
	}
}

/* The users' similarities to main, sorted: min_similarity thresholds between them. */
std::vector<double> similarity_thresholds(const Users &users, int64_t main, GeoMetric metric,
										  double epsilon)
{
	std::vector<double> sims;
	for (const auto &[b, pts] : users)
		if (b != main)
			sims.push_back(oracle_similarity(users, main, b, metric, epsilon).first);
	std::sort(sims.begin(), sims.end());
	std::vector<double> out{0.0};
	for (size_t i = 0; i + 1 < sims.size(); ++i)
		if (!near(sims[i], sims[i + 1], 1e-9))
			out.push_back((sims[i] + sims[i + 1]) / 2);
	return out;
}

TEST_P(GeoOracle, PredictStrength)
{
	GeoMetric metric = GetParam();
	std::mt19937_64 rng = seeded_rng();
	bool euclid = metric == GeoMetric::Euclidean;
	for (int round = 0; round < 4; ++round)
	{
		std::vector<Point> rows = random_points(rng, 6 + round * 3, 5, metric);
		Users users = users_of(rows);
		PointColumns in(rows);
		std::vector<Candidate> cand_rows = random_candidates(rng, 20, metric);
		CandidateColumns cands(cand_rows);
		int64_t main = std::next(users.begin(), round % users.size())->first;
		for (double exponent : {0.5, 1.0, 1.3, 1.5, 2.0, 2.5, 3.0})
			for (double max_distance : {kInf, 0.0, euclid ? 2.5 : 250000.0})
				for (double epsilon : {1e-9, euclid ? 0.7 : 90000.0})
				{
					std::vector<double> thresholds = similarity_thresholds(users, main, metric, epsilon);
					double min_similarity = thresholds[rng() % thresholds.size()];
					ExecContext ctx = cpu_context();
					std::vector<double> got =
						predict_strength(in.view(), main, cands.view(), exponent,
										 {max_distance, min_similarity}, {metric, epsilon}, ctx);
					std::vector<double> want =
						oracle_strength(users, main, cand_rows, metric, epsilon, exponent,
										max_distance, min_similarity);
					ASSERT_EQ(got.size(), want.size());
					for (size_t c = 0; c < got.size(); ++c)
						EXPECT_NEAR_REL(got[c], want[c], 1e-11)
							<< "candidate row " << c << " exponent " << exponent << " max_distance "
							<< max_distance << " epsilon " << epsilon;
				}
	}
}

/*
 * The oracle's AUC can only be bracketed where two strengths are within
 * rounding of each other: such a pair may count 0, 1/2 or 1.  Exactly equal
 * strengths of candidates at the same place, or both zero, are ties.
 */
std::pair<double, double> oracle_auc_bracket(const std::vector<double> &s,
											 const std::vector<Candidate> &cands,
											 const std::vector<bool> &positive)
{
	double low = 0, high = 0;
	double pairs = 0;
	for (size_t p = 0; p < s.size(); ++p)
		for (size_t n = 0; n < s.size(); ++n)
		{
			if (!positive[p] || positive[n])
				continue;
			pairs += 1;
			bool same_place = cands[p].x == cands[n].x && cands[p].y == cands[n].y;
			if ((s[p] == 0 && s[n] == 0) || same_place)
			{
				low += 0.5;
				high += 0.5;
			}
			else if (near(s[p], s[n], 1e-11))
				high += 1;
			else if (s[p] > s[n])
			{
				low += 1;
				high += 1;
			}
		}
	return {low / pairs, high / pairs};
}

TEST_P(GeoOracle, FitExponent)
{
	GeoMetric metric = GetParam();
	std::mt19937_64 rng = seeded_rng();
	bool euclid = metric == GeoMetric::Euclidean;
	for (int round = 0; round < 3; ++round)
	{
		std::vector<Point> rows = random_points(rng, 8, 4, metric);
		Users users = users_of(rows);
		PointColumns in(rows);
		std::vector<Candidate> cand_rows = random_candidates(rng, 16, metric);
		CandidateColumns cands(cand_rows);
		/* holdout: a few users, some visiting nothing listed or everything */
		std::vector<std::pair<int64_t, int64_t>> visits;
		for (const auto &[u, pts] : users)
		{
			int kind = rng() % 4;
			for (const Candidate &c : cand_rows)
				if (kind == 0 ? rng() % 3 == 0 : kind == 1 ? true : kind == 2 ? rng() % 2 == 0 : false)
					visits.push_back({u, c.id});
			if (kind == 3)
				visits.push_back({u, 999999}); /* names no candidate */
		}
		HoldoutColumns holdout(visits);
		std::vector<double> exponents = {3, 1, 2.5, 1.5, 2, 1.3};
		double max_distance = round == 1 ? (euclid ? 3.0 : 300000.0) : kInf;
		double min_similarity = round == 2 ? similarity_thresholds(users, users.begin()->first, metric, 1e-9).back() : 0;
		ExecContext ctx = cpu_context();
		std::vector<ExponentFit> got = fit_exponent(in.view(), holdout.view(), cands.view(), exponents,
													{max_distance, min_similarity}, {metric, 1e-9}, ctx);
		ASSERT_EQ(got.size(), exponents.size());
		std::vector<double> sorted = exponents;
		std::sort(sorted.begin(), sorted.end());
		for (size_t e = 0; e < got.size(); ++e)
		{
			EXPECT_EQ(got[e].exponent, sorted[e]);
			double low = 0, high = 0;
			int64_t n_users = 0;
			std::map<int64_t, std::set<int64_t>> visited;
			for (auto [u, c] : visits)
				visited[u].insert(c);
			for (const auto &[u, ids] : visited)
			{
				std::vector<bool> positive;
				size_t n_pos = 0;
				for (const Candidate &c : cand_rows)
				{
					positive.push_back(ids.count(c.id) > 0);
					n_pos += positive.back();
				}
				if (n_pos == 0 || n_pos == cand_rows.size())
					continue;
				std::vector<double> s = oracle_strength(users, u, cand_rows, metric, 1e-9, sorted[e],
														max_distance, min_similarity);
				auto [lo, hi] = oracle_auc_bracket(s, cand_rows, positive);
				low += lo;
				high += hi;
				++n_users;
			}
			EXPECT_EQ(got[e].users, n_users);
			if (n_users)
			{
				EXPECT_GE(got[e].mean_auc, low / n_users - 1e-12) << "exponent " << sorted[e];
				EXPECT_LE(got[e].mean_auc, high / n_users + 1e-12) << "exponent " << sorted[e];
			}
		}
	}
}

/*
 * mean_auc, bit for bit: over the holdout users with a visited and an
 * unvisited candidate row, in user_id order, the sum of each one's AUC of
 * the engine's own strengths (predict_strength), every visited row against
 * every other, ties half, divided by their number.
 */
TEST_P(GeoOracle, FitExponentIsTheMeanOfEachUsersAuc)
{
	GeoMetric metric = GetParam();
	std::mt19937_64 rng = seeded_rng();
	for (int round = 0; round < 3; ++round)
	{
		std::vector<Point> rows = random_points(rng, 30, 5, metric, 3); /* a small grid: tied strengths */
		Users users = users_of(rows);
		PointColumns in(rows);
		std::vector<Candidate> cand_rows = random_candidates(rng, 24, metric, 3);
		CandidateColumns cands(cand_rows);
		std::vector<std::pair<int64_t, int64_t>> visits = random_visits(rng, rows, cand_rows);
		visits.push_back({users.begin()->first, 999999}); /* names no candidate */
		for (const Candidate &c : cand_rows)
			visits.push_back({std::prev(users.end())->first, c.id}); /* visits every row: no AUC */
		HoldoutColumns holdout(visits);
		std::map<int64_t, std::set<int64_t>> visited; /* ascending user_id */
		for (auto [u, c] : visits)
			visited[u].insert(c);
		std::vector<double> exponents = {2, 1, 3};
		ExecContext ctx = cpu_context();
		std::vector<ExponentFit> got =
			fit_exponent(in.view(), holdout.view(), cands.view(), exponents, {}, {metric, 1e-9}, ctx);
		ASSERT_EQ(got.size(), exponents.size());
		for (const ExponentFit &fit : got)
		{
			double sum = 0;
			int64_t n_users = 0;
			for (const auto &[u, ids] : visited)
			{
				std::vector<double> s =
					predict_strength(in.view(), u, cands.view(), fit.exponent, {}, {metric, 1e-9}, ctx);
				int64_t wins = 0, ties = 0, positives = 0;
				for (size_t p = 0; p < s.size(); ++p)
					positives += ids.count(cand_rows[p].id);
				int64_t negatives = static_cast<int64_t>(s.size()) - positives;
				if (positives == 0 || negatives == 0)
					continue;
				for (size_t p = 0; p < s.size(); ++p)
					for (size_t n = 0; n < s.size(); ++n)
						if (ids.count(cand_rows[p].id) && !ids.count(cand_rows[n].id))
						{
							wins += s[p] > s[n];
							ties += s[p] == s[n];
						}
				sum += (static_cast<double>(wins) + 0.5 * static_cast<double>(ties)) /
					   (static_cast<double>(positives) * static_cast<double>(negatives));
				++n_users;
			}
			ASSERT_GT(n_users, 0);
			EXPECT_EQ(fit.users, n_users);
			EXPECT_EQ(fit.mean_auc, sum / static_cast<double>(n_users)) << "exponent " << fit.exponent;
		}
	}
}

INSTANTIATE_TEST_SUITE_P(Metrics, GeoOracle,
						 ::testing::Values(GeoMetric::Euclidean, GeoMetric::Haversine),
						 [](const auto &info) {
							 return info.param == GeoMetric::Euclidean ? "euclidean" : "haversine";
						 });

/* gpurec.cpu_threads changes which thread measures which user, never a number */
TEST_P(GeoOracle, SameResultsOnOneThreadAsOnEveryCore)
{
	GeoMetric metric = GetParam();
	std::mt19937_64 rng = seeded_rng();
	std::vector<Point> rows = random_points(rng, 120, 8, metric);
	PointColumns in(rows);
	std::vector<Candidate> cand_rows = random_candidates(rng, 40, metric);
	CandidateColumns cands(cand_rows);
	HoldoutColumns holdout(random_visits(rng, rows, cand_rows));
	auto run = [&](size_t threads) {
		ExecContext ctx = cpu_context();
		ctx.cpu_threads = threads;
		std::vector<SimilarUser> similar = similar_users(in.view(), 5, {metric, 1e-9}, ctx);
		std::vector<double> strengths = predict_strength(in.view(), rows[0].user, cands.view(), 1.5, {},
														 {metric, 1e-9}, ctx);
		std::vector<ExponentFit> fits =
			fit_exponent(in.view(), holdout.view(), cands.view(), {1, 2, 3}, {}, {metric, 1e-9}, ctx);
		return std::make_tuple(similar, strengths, fits);
	};
	auto [similar_want, strengths_want, fits_want] = run(0);
	for (size_t threads : {1, 3})
	{
		SCOPED_TRACE("cpu_threads " + std::to_string(threads));
		auto [similar, strengths, fits] = run(threads);
		ASSERT_EQ(similar.size(), similar_want.size());
		for (size_t i = 0; i < similar.size(); ++i)
		{
			EXPECT_EQ(similar[i].user_id, similar_want[i].user_id);
			EXPECT_EQ(similar[i].rank, similar_want[i].rank);
			EXPECT_EQ(similar[i].other_user_id, similar_want[i].other_user_id);
			EXPECT_EQ(similar[i].similarity, similar_want[i].similarity);
		}
		EXPECT_EQ(strengths, strengths_want);
		ASSERT_EQ(fits.size(), fits_want.size());
		for (size_t e = 0; e < fits.size(); ++e)
		{
			EXPECT_EQ(fits[e].users, fits_want[e].users);
			EXPECT_EQ(fits[e].mean_auc, fits_want[e].mean_auc);
		}
	}
}

/* ---- edge cases ---------------------------------------------------------- */

TEST(Geo, EdgeCases)
{
	ExecContext ctx = cpu_context();
	/* a single user: nothing to compare */
	PointColumns single({{5, 1, 1}, {5, 2, 2}});
	EXPECT_TRUE(user_similarity(single.view(), 5, {}, ctx).empty());
	EXPECT_TRUE(similar_users(single.view(), 3, {}, ctx).empty());
	CandidateColumns cands({{1, 0, 0}, {2, 1, 1}});
	EXPECT_EQ(predict_strength(single.view(), 5, cands.view(), 2, {}, {}, ctx),
			  std::vector<double>({0.0, 0.0}));
	/* empty inputs */
	PointColumns none({});
	EXPECT_TRUE(similar_users(none.view(), 3, {}, ctx).empty());
	CandidateColumns no_cands({});
	EXPECT_TRUE(predict_strength(single.view(), 5, no_cands.view(), 2, {}, {}, ctx).empty());
	HoldoutColumns no_holdout({});
	std::vector<ExponentFit> fit =
		fit_exponent(single.view(), no_holdout.view(), cands.view(), {2, 1}, {}, {}, ctx);
	ASSERT_EQ(fit.size(), 2u);
	EXPECT_EQ(fit[0].exponent, 1);
	EXPECT_EQ(fit[0].users, 0);
	/* users with one point each; k beyond the users */
	PointColumns ones({{1, 0, 0}, {2, 3, 4}, {3, 0, 1}});
	std::vector<SimilarUser> best = similar_users(ones.view(), 10, {}, ctx);
	ASSERT_EQ(best.size(), 6u);
	EXPECT_EQ(best[0].other_user_id, 3);
	EXPECT_EQ(best[0].similarity, 1.0);
	EXPECT_EQ(best[1].other_user_id, 2);
	EXPECT_EQ(best[1].similarity, 0.2);
	/* equal similarity: the lower other_user_id first */
	PointColumns tie({{1, 0, 0}, {9, 1, 0}, {4, -1, 0}, {7, 0, 1}});
	best = similar_users(tie.view(), 2, {}, ctx);
	ASSERT_EQ(best.size(), 8u);
	EXPECT_EQ(best[0].other_user_id, 4);
	EXPECT_EQ(best[1].other_user_id, 7);
}

/*
 * similar_users' parts (gpurec_shards gives each partition one): every
 * user's list comes whole from exactly one part, and the parts together
 * are the whole answer; a part out of range is 22023.
 */
TEST(Geo, SimilarUsersPartsCoverEveryUserOnce)
{
	ExecContext ctx = cpu_context();
	std::vector<Point> points;
	for (int64_t u = 1; u <= 23; ++u)
		for (int64_t i = 0; i <= u % 4; ++i)
			points.push_back({u * 1000003, double((u * 7 + i * 3) % 11), double((u * 5 + i) % 13)});
	PointColumns in(points);
	std::vector<SimilarUser> whole = similar_users(in.view(), 4, {}, ctx);
	for (int parts : {1, 2, 3, 5})
	{
		std::vector<SimilarUser> joined;
		std::set<int64_t> seen;
		for (int part = 0; part < parts; ++part)
		{
			std::vector<SimilarUser> got = similar_users(in.view(), 4, {}, ctx, part, parts);
			std::set<int64_t> users;
			for (const SimilarUser &row : got)
				users.insert(row.user_id);
			for (int64_t u : users)
				EXPECT_TRUE(seen.insert(u).second) << "user " << u << " in two parts of " << parts;
			joined.insert(joined.end(), got.begin(), got.end());
		}
		std::sort(joined.begin(), joined.end(), [](const SimilarUser &a, const SimilarUser &b) {
			return a.user_id != b.user_id ? a.user_id < b.user_id : a.rank < b.rank;
		});
		ASSERT_EQ(joined.size(), whole.size()) << parts << " parts";
		for (size_t i = 0; i < whole.size(); ++i)
		{
			EXPECT_EQ(joined[i].user_id, whole[i].user_id);
			EXPECT_EQ(joined[i].other_user_id, whole[i].other_user_id);
			EXPECT_EQ(joined[i].similarity, whole[i].similarity);
		}
	}
	try
	{
		similar_users(in.view(), 4, {}, ctx, 2, 2);
		ADD_FAILURE() << "no error for part 2 of 2";
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), sqlstate::invalid_parameter_value) << e.what();
	}
}

/* ---- errors -------------------------------------------------------------- */

void expect_error(const std::function<void()> &call, const char *sqlstate, const std::string &words)
{
	try
	{
		call();
		ADD_FAILURE() << "no error; expected " << words;
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), sqlstate) << e.what();
		EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
	}
}

TEST(Geo, Errors)
{
	ExecContext ctx = cpu_context();
	PointColumns in({{1, 0, 0}, {2, 1, 1}});
	CandidateColumns cands({{1, 0, 0}});
	HoldoutColumns holdout({{1, 1}});
	const char *bad = sqlstate::invalid_parameter_value;

	expect_error([] { parse_geo_metric("manhattan"); }, bad, "unknown metric \"manhattan\"");
	try
	{
		parse_geo_metric("");
	}
	catch (const Error &e)
	{
		EXPECT_NE(e.detail().find("'euclidean' or 'haversine'"), std::string::npos);
	}
	EXPECT_EQ(parse_geo_metric("Haversine"), GeoMetric::Haversine);

	for (double epsilon : {0.0, -1.0, kNaN})
	{
		GeoOptions options{GeoMetric::Euclidean, epsilon};
		expect_error([&] { user_similarity(in.view(), 1, options, ctx); }, bad, "epsilon");
		expect_error([&] { similar_users(in.view(), 1, options, ctx); }, bad, "epsilon");
		expect_error([&] { predict_strength(in.view(), 1, cands.view(), 2, {}, options, ctx); }, bad,
					 "epsilon");
		expect_error([&] { fit_exponent(in.view(), holdout.view(), cands.view(), {2}, {}, options, ctx); },
					 bad, "epsilon");
	}
	for (double exponent : {0.0, -2.0, kNaN, kInf})
	{
		expect_error([&] { predict_strength(in.view(), 1, cands.view(), exponent, {}, {}, ctx); }, bad,
					 "exponent");
		expect_error(
			[&] { fit_exponent(in.view(), holdout.view(), cands.view(), {2, exponent}, {}, {}, ctx); }, bad,
			"exponent");
	}
	expect_error([&] { fit_exponent(in.view(), holdout.view(), cands.view(), {}, {}, {}, ctx); }, bad,
				 "exponents");
	expect_error([&] { predict_strength(in.view(), 1, cands.view(), 2, {-1, 0}, {}, ctx); }, bad,
				 "max_distance");
	expect_error([&] { predict_strength(in.view(), 1, cands.view(), 2, {kInf, kNaN}, {}, ctx); }, bad,
				 "min_similarity");
	expect_error([&] { similar_users(in.view(), 0, {}, ctx); }, bad, "k must be at least 1");
	expect_error([&] { user_similarity(in.view(), 3, {}, ctx); }, bad, "main user 3 has no points");
	expect_error([&] { predict_strength(in.view(), 3, cands.view(), 2, {}, {}, ctx); }, bad,
				 "main user 3 has no points");
	HoldoutColumns stranger({{1, 1}, {42, 1}});
	expect_error([&] { fit_exponent(in.view(), stranger.view(), cands.view(), {2}, {}, {}, ctx); }, bad,
				 "holdout user 42 has no points");

	/* bad data names the user or the candidate */
	PointColumns nan_point({{1, 0, 0}, {77, kNaN, 1}});
	expect_error([&] { similar_users(nan_point.view(), 1, {}, ctx); }, sqlstate::data_exception,
				 "user 77");
	PointColumns inf_point({{1, 0, 0}, {78, 1, -kInf}});
	expect_error([&] { user_similarity(inf_point.view(), 1, {}, ctx); }, sqlstate::data_exception,
				 "user 78");
	CandidateColumns nan_cand({{5, 0, kNaN}});
	expect_error([&] { predict_strength(in.view(), 1, nan_cand.view(), 2, {}, {}, ctx); },
				 sqlstate::data_exception, "candidate 5");
	GeoOptions hav{GeoMetric::Haversine, 1e-9};
	PointColumns high_lat({{1, 0, 0}, {79, 10, 90.5}});
	expect_error([&] { user_similarity(high_lat.view(), 1, hav, ctx); },
				 sqlstate::numeric_value_out_of_range, "latitude 90.5 of user 79");
	PointColumns wide_lon({{1, 0, 0}, {80, -180.25, 10}});
	expect_error([&] { user_similarity(wide_lon.view(), 1, hav, ctx); },
				 sqlstate::numeric_value_out_of_range, "longitude -180.25 of user 80");
	CandidateColumns far_cand({{6, 200, 0}});
	expect_error([&] { predict_strength(in.view(), 1, far_cand.view(), 2, {}, hav, ctx); },
				 sqlstate::numeric_value_out_of_range, "candidate 6");
	/* the same coordinates are fine under euclidean */
	EXPECT_NO_THROW(user_similarity(wide_lon.view(), 1, {}, ctx));

	/*
	 * Among many points, checked on every core, the least user with a bad
	 * point is named, wherever its rows lie among the others, in this
	 * chunk or the next: the same whatever order the rows came in.
	 */
	std::mt19937_64 rng = seeded_rng();
	std::vector<Point> many = random_points(rng, 120000, 12, GeoMetric::Euclidean, 1000);
	size_t first_bad = 70000 + rng() % 500000;
	int64_t least_bad = INT64_MAX;
	for (size_t at : {first_bad, first_bad + 1 + rng() % 1000, first_bad + 70000, size_t(1) << 20, many.size() - 1})
		if (at < many.size() && many[at].user != many[0].user)
		{
			many[at].x = kNaN;
			least_bad = std::min(least_bad, many[at].user);
		}
	PointColumns bad_many(many);
	expect_error([&] { user_similarity(bad_many.view(), many[0].user, {}, ctx); }, sqlstate::data_exception,
				 "a point of user " + std::to_string(least_bad) + " has");
	std::reverse(many.begin(), many.end());
	PointColumns reversed(many);
	expect_error([&] { user_similarity(reversed.view(), many.back().user, {}, ctx); }, sqlstate::data_exception,
				 "a point of user " + std::to_string(least_bad) + " has");
}

TEST(Geo, CancelStopsTheCpuPath)
{
	std::mt19937_64 rng(1);
	std::vector<Point> rows = random_points(rng, 2000, 30, GeoMetric::Euclidean, 1000);
	PointColumns in(rows);
	struct Cancelled
	{
	};
	ExecContext ctx = cpu_context();
	int checks = 0;
	ctx.check_interrupts = [&] {
		if (++checks == 2)
			throw Cancelled();
	};
	Stopwatch clock;
	EXPECT_THROW(similar_users(in.view(), 5, {}, ctx), Cancelled);
	EXPECT_LT(clock.elapsed_ms(), 1000); /* the whole computation takes seconds */
}

/* Points so far apart that the product of a group's denominators overflows. */
TEST(Geo, HugeDistancesSumTermByTerm)
{
	std::vector<Point> rows = {{1, 0, 0}, {2, 1e80, 0}};
	for (int i = 0; i < 20; ++i)
		rows.push_back({2, 1e80 + i * 1e66, 3e79});
	rows.push_back({3, 1e-200, 0});
	PointColumns in(rows);
	std::vector<Candidate> cand_rows = {{1, 0, 0}, {2, 2e80, 1e80}, {3, 1e-200, 0}};
	CandidateColumns cands(cand_rows);
	Users users = users_of(rows);
	for (double exponent : {1.0, 2.0, 3.0})
	{
		ExecContext ctx = cpu_context();
		std::vector<double> got = predict_strength(in.view(), 1, cands.view(), exponent, {}, {}, ctx);
		std::vector<double> want =
			oracle_strength(users, 1, cand_rows, GeoMetric::Euclidean, 1e-9, exponent, kInf, 0);
		for (size_t c = 0; c < got.size(); ++c)
			EXPECT_NEAR_REL(got[c], want[c], 1e-12) << exponent << " " << c;
	}
}

/* ---- GPU against CPU ----------------------------------------------------- */

class GeoGpu : public ::testing::TestWithParam<GeoMetric>
{
  protected:
	void SetUp() override
	{
		if (!gpu_usable())
			GTEST_SKIP() << "no usable GPU";
	}
};

/* Users of 1 to 40 points, so that every register tile and the large-user path run. */
std::vector<Point> varied_points(std::mt19937_64 &rng, int users, GeoMetric metric)
{
	std::vector<Point> rows;
	std::uniform_int_distribution<int> cell(0, 40);
	for (int u = 0; u < users; ++u)
	{
		int n = 1 + u % 40;
		for (int i = 0; i < n; ++i)
		{
			double x = cell(rng), y = cell(rng);
			if (metric == GeoMetric::Haversine)
				rows.push_back({int64_t(u) * 7 - 300, x * 0.01 + (u % 3) * 60 - 60, y * 0.01 + 45});
			else
				rows.push_back({int64_t(u) * 7 - 300, x * 0.5 + 1e6, y});
		}
	}
	std::shuffle(rows.begin(), rows.end(), rng);
	return rows;
}

TEST_P(GeoGpu, UserSimilarityBitIdentical)
{
	GeoMetric metric = GetParam();
	std::mt19937_64 rng(11);
	std::vector<Point> rows = varied_points(rng, 300, metric);
	PointColumns in(rows);
	for (int64_t main : {int64_t(-300), int64_t(-293), int64_t(7 * 39 - 300), int64_t(7 * 250 - 300)})
	{
		ExecContext cpu = cpu_context(), gpu = gpu_context();
		std::vector<UserSimilarity> want = user_similarity(in.view(), main, {metric, 1e-9}, cpu);
		std::vector<UserSimilarity> got = user_similarity(in.view(), main, {metric, 1e-9}, gpu);
		EXPECT_TRUE(gpu.used_gpu);
		ASSERT_EQ(got.size(), want.size());
		for (size_t i = 0; i < got.size(); ++i)
		{
			ASSERT_EQ(got[i].user_id, want[i].user_id);
			EXPECT_EQ(got[i].similarity, want[i].similarity) << "user " << got[i].user_id;
			EXPECT_EQ(got[i].mean_min_distance, want[i].mean_min_distance) << "user " << got[i].user_id;
		}
	}
}

TEST_P(GeoGpu, SimilarUsersBitIdentical)
{
	GeoMetric metric = GetParam();
	std::mt19937_64 rng(12);
	std::vector<Point> rows = varied_points(rng, 200, metric);
	/* and integer-grid users, whose similarities tie */
	std::vector<Point> grid = random_points(rng, 60, 5, metric, 3);
	rows.insert(rows.end(), grid.begin(), grid.end());
	PointColumns in(rows);
	for (int k : {1, 3, 10})
		for (size_t budget : {size_t(0), size_t(3000)})
		{
			ExecContext cpu = cpu_context(), gpu = gpu_context(budget);
			std::vector<SimilarUser> want = similar_users(in.view(), k, {metric, 1e-9}, cpu);
			std::vector<SimilarUser> got = similar_users(in.view(), k, {metric, 1e-9}, gpu);
			ASSERT_EQ(got.size(), want.size());
			for (size_t i = 0; i < got.size(); ++i)
			{
				ASSERT_EQ(got[i].user_id, want[i].user_id);
				ASSERT_EQ(got[i].rank, want[i].rank);
				EXPECT_EQ(got[i].other_user_id, want[i].other_user_id)
					<< "user " << got[i].user_id << " rank " << got[i].rank;
				EXPECT_EQ(got[i].similarity, want[i].similarity);
			}
		}
}

/*
 * similar_users pruned on the GPU gives the CPU brute force's rows to the
 * bit, both ways it prunes: bounded by the users' boxes (k up to
 * gpu::kMostBoundedOthers) and from the CPU's lists (larger k); users of
 * places far apart, a few of points everywhere, clustered and uniform
 * check-ins with ties, duplicates and users of one point, every tile class.
 */
TEST_P(GeoGpu, PrunedSimilarUsersAreTheBruteForceToTheBit)
{
	GeoMetric metric = GetParam();
	std::mt19937_64 rng(31);
	std::vector<std::vector<Point>> inputs = {far_apart_points(rng, metric, 0), far_apart_points(rng, metric, 3),
											  clustered_points(rng, 200, metric, false),
											  clustered_points(rng, 200, metric, true)};
	std::vector<Point> varied = varied_points(rng, 120, metric);
	inputs.push_back(varied);
	for (size_t input = 0; input < inputs.size(); ++input)
	{
		PointColumns in(inputs[input]);
		for (double epsilon : {1e-9, metric == GeoMetric::Haversine ? 150.0 : 3.0})
			for (int k : {1, 4, 10, gpu::kMostBoundedOthers, gpu::kMostBoundedOthers + 1})
			{
				ExecContext cpu = cpu_context(), gpu = gpu_context();
				std::vector<SimilarUser> want = similar_users(in.view(), k, {metric, epsilon, GeoPruning::Never}, cpu);
				std::vector<SimilarUser> got = similar_users(in.view(), k, {metric, epsilon, GeoPruning::Always}, gpu);
				EXPECT_TRUE(gpu.used_gpu);
				const char *how = k <= gpu::kMostBoundedOthers ? "pruned on the GPU by the users' boxes" : "pruned on the GPU:";
				EXPECT_NE(gpu.device_choice.find(how), std::string::npos) << gpu.device_choice;
				ASSERT_EQ(got.size(), want.size()) << "input " << input << " k " << k;
				for (size_t i = 0; i < got.size(); ++i)
				{
					ASSERT_EQ(got[i].user_id, want[i].user_id) << "input " << input << " k " << k << " row " << i;
					ASSERT_EQ(got[i].rank, want[i].rank);
					ASSERT_EQ(got[i].other_user_id, want[i].other_user_id)
						<< "input " << input << " k " << k << " user " << got[i].user_id << " rank " << got[i].rank;
					ASSERT_EQ(std::memcmp(&got[i].similarity, &want[i].similarity, sizeof(double)), 0);
				}
			}
	}
}

/*
 * Under auto, an input worth pruning goes by the bounded search: on
 * check-ins around cities it prunes to the end; on points spread evenly
 * the users' boxes cover the map, and every pair is compared at once,
 * without indexing them.  Both give the GPU brute force's rows (the
 * CPU's, above) to the bit.
 */
TEST_P(GeoGpu, BoundedSimilarUsersUnderAutoAreTheBruteForceToTheBit)
{
	GeoMetric metric = GetParam();
	bool haversine = metric == GeoMetric::Haversine;
	std::mt19937_64 rng(41);
	std::vector<std::pair<double, double>> cities;
	for (int c = 0; c < 40; ++c)
		cities.push_back(haversine ? std::make_pair(-180.0 + (rng() % 3600) * 0.1, -80.0 + (rng() % 1600) * 0.1)
								   : std::make_pair(1000.0 * (rng() % 5000), 1000.0 * (rng() % 5000)));
	for (bool even : {false, true})
	{
		std::vector<Point> rows;
		for (int u = 0; u < 6000; ++u)
			add_user_points(rng, rows, u * 3 - 9000, 14 + static_cast<int>(rng() % 14), cities, haversine,
							even ? 1e5 : 0.0);
		std::shuffle(rows.begin(), rows.end(), rng);
		PointColumns in(rows);
		for (int k : {1, 10})
		{
			ExecContext brute = gpu_context(), bounded = gpu_context();
			std::vector<SimilarUser> want = similar_users(in.view(), k, {metric, 1e-9, GeoPruning::Never}, brute);
			std::vector<SimilarUser> got = similar_users(in.view(), k, {metric, 1e-9, GeoPruning::Auto}, bounded);
			EXPECT_TRUE(bounded.used_gpu);
			const char *how = even ? "every point pair compared on the GPU: the users' places spread over the map"
								   : "pruned on the GPU by the users' boxes";
			EXPECT_NE(bounded.device_choice.find(how), std::string::npos) << bounded.device_choice;
			ASSERT_EQ(got.size(), want.size()) << "even " << even << " k " << k;
			for (size_t i = 0; i < got.size(); ++i)
			{
				ASSERT_EQ(got[i].user_id, want[i].user_id) << "even " << even << " k " << k << " row " << i;
				ASSERT_EQ(got[i].other_user_id, want[i].other_user_id) << "even " << even << " k " << k << " row " << i;
				ASSERT_EQ(std::memcmp(&got[i].similarity, &want[i].similarity, sizeof(double)), 0);
			}
		}
	}
}

TEST_P(GeoGpu, StrengthsBitIdentical)
{
	GeoMetric metric = GetParam();
	bool euclid = metric == GeoMetric::Euclidean;
	std::mt19937_64 rng(13);
	/* more than one slice of points */
	std::vector<Point> rows = varied_points(rng, euclid ? 2500 : 1000, metric);
	PointColumns in(rows);
	std::vector<Candidate> cand_rows;
	for (int i = 0; i < 700; ++i)
		cand_rows.push_back({i, in.x[rng() % rows.size()] + (i % 3) * 0.25, in.y[rng() % rows.size()]});
	CandidateColumns cands(cand_rows);
	for (double exponent : {2.0, 1.0, 1.5, 2.5, 3.0, 1.3})
		for (double max_distance : {kInf, euclid ? 4.0 : 2000.0})
			for (size_t budget : {size_t(0), size_t(40000)})
			{
				ExecContext cpu = cpu_context(), gpu = gpu_context(budget);
				StrengthOptions strength{max_distance, exponent == 3.0 ? 1e-3 : 0.0};
				std::vector<double> want = predict_strength(in.view(), -300, cands.view(), exponent,
															strength, {metric, 1e-9}, cpu);
				std::vector<double> got = predict_strength(in.view(), -300, cands.view(), exponent,
														   strength, {metric, 1e-9}, gpu);
				ASSERT_EQ(got.size(), want.size());
				for (size_t c = 0; c < got.size(); ++c)
				{
					if (plan_power(exponent).general)
						EXPECT_NEAR_REL(got[c], want[c], 1e-12) << "candidate " << c;
					else
						EXPECT_EQ(got[c], want[c]) << "candidate " << c << " exponent " << exponent;
				}
			}
}

TEST_P(GeoGpu, FitExponentIdentical)
{
	GeoMetric metric = GetParam();
	std::mt19937_64 rng(14);
	std::vector<Point> rows = random_points(rng, 40, 6, metric);
	PointColumns in(rows);
	std::vector<Candidate> cand_rows = random_candidates(rng, 50, metric);
	CandidateColumns cands(cand_rows);
	HoldoutColumns holdout(random_visits(rng, rows, cand_rows));
	ExecContext cpu = cpu_context(), gpu = gpu_context();
	std::vector<ExponentFit> want =
		fit_exponent(in.view(), holdout.view(), cands.view(), {1, 1.5, 2, 2.5, 3}, {}, {metric, 1e-9}, cpu);
	std::vector<ExponentFit> got =
		fit_exponent(in.view(), holdout.view(), cands.view(), {1, 1.5, 2, 2.5, 3}, {}, {metric, 1e-9}, gpu);
	ASSERT_EQ(got.size(), want.size());
	for (size_t e = 0; e < got.size(); ++e)
	{
		EXPECT_EQ(got[e].exponent, want[e].exponent);
		EXPECT_EQ(got[e].users, want[e].users);
		EXPECT_EQ(got[e].mean_auc, want[e].mean_auc);
	}
}

TEST_P(GeoGpu, HugeDistancesSumTermByTerm)
{
	std::vector<Point> rows = {{1, 0, 0}};
	for (int i = 0; i < 20; ++i)
		rows.push_back({2, 1e80 + i * 1e66, 3e79});
	PointColumns in(rows);
	CandidateColumns cands({{1, 0, 0}, {2, 2e80, 1e80}});
	if (GetParam() == GeoMetric::Haversine)
		GTEST_SKIP() << "euclidean only";
	ExecContext cpu = cpu_context(), gpu = gpu_context();
	EXPECT_EQ(predict_strength(in.view(), 1, cands.view(), 3, {}, {}, gpu),
			  predict_strength(in.view(), 1, cands.view(), 3, {}, {}, cpu));
}

/* More rows than one input chunk: the upload goes chunk by chunk, the grouping sorts them all. */
TEST(GeoGpuLarge, ManyChunksGroupLikeTheCpu)
{
	if (!gpu_usable())
		GTEST_SKIP() << "no usable GPU";
	std::mt19937_64 rng(16);
	std::vector<Point> rows = random_points(rng, 70000, 31, GeoMetric::Euclidean, 100000);
	ASSERT_GT(rows.size(), FloatColumn::kChunkRows);
	PointColumns in(rows);
	ExecContext cpu = cpu_context(), gpu = gpu_context();
	int64_t main = rows[12345].user;
	std::vector<UserSimilarity> want = user_similarity(in.view(), main, {}, cpu);
	std::vector<UserSimilarity> got = user_similarity(in.view(), main, {}, gpu);
	ASSERT_EQ(got.size(), want.size());
	for (size_t i = 0; i < got.size(); ++i)
	{
		ASSERT_EQ(got[i].user_id, want[i].user_id);
		ASSERT_EQ(got[i].similarity, want[i].similarity) << "user " << got[i].user_id;
		ASSERT_EQ(got[i].mean_min_distance, want[i].mean_min_distance);
	}
	EXPECT_GT(gpu.times.transfer_ms, 0);
	EXPECT_GT(gpu.times.compute_ms, 0);
}

TEST(GeoGpuLarge, CancelStopsTheGpuPath)
{
	if (!gpu_usable())
		GTEST_SKIP() << "no usable GPU";
	std::mt19937_64 rng(17);
	std::vector<Point> rows = random_points(rng, 20000, 30, GeoMetric::Euclidean, 1000);
	PointColumns in(rows);
	struct Cancelled
	{
	};
	ExecContext ctx = gpu_context();
	ctx.check_interrupts = [] { throw Cancelled(); };
	EXPECT_THROW(similar_users(in.view(), 5, {}, ctx), Cancelled);
	/* and the GPU still works */
	ExecContext again = gpu_context();
	EXPECT_EQ(similar_users(in.view(), 1, {}, again).size(), 20000u);
}

TEST(GeoGpuFallback, AllocationFailureFallsBackUnderAuto)
{
	if (!gpu_usable())
		GTEST_SKIP() << "no usable GPU";
	std::mt19937_64 rng(15);
	std::vector<Point> rows = random_points(rng, 3000, 10, GeoMetric::Euclidean, 50);
	PointColumns in(rows);
	ExecContext cpu = cpu_context();
	std::vector<SimilarUser> want = similar_users(in.view(), 2, {}, cpu);
	ExecContext failing;
	failing.fail_gpu_alloc = true;
	std::string notice;
	failing.notice = [&](const std::string &m) { notice = m; };
	std::vector<SimilarUser> got = similar_users(in.view(), 2, {}, failing);
	EXPECT_FALSE(failing.used_gpu);
	EXPECT_NE(notice.find("on the CPU instead"), std::string::npos) << notice;
	ASSERT_EQ(got.size(), want.size());
	ExecContext forced = gpu_context();
	forced.fail_gpu_alloc = true;
	EXPECT_THROW(similar_users(in.view(), 2, {}, forced), GpuOutOfMemory);
}

INSTANTIATE_TEST_SUITE_P(Metrics, GeoGpu, ::testing::Values(GeoMetric::Euclidean, GeoMetric::Haversine),
						 [](const auto &info) {
							 return info.param == GeoMetric::Euclidean ? "euclidean" : "haversine";
						 });

} // namespace
} // namespace gpurec

namespace gpurec {
namespace {

/* Bit patterns, so that "equal" means the last bit too. */
uint64_t bits(double d)
{
	uint64_t b;
	std::memcpy(&b, &d, sizeof b);
	return b;
}

TEST(GeoPointOrder, UsersNotNumberedInIdOrderAreRefused)
{
	/* users first seen in descending id order, never renumbered: their sums would follow the rows' order */
	IdColumn user;
	FloatColumn x, y;
	for (int64_t id : {9, 4, 9, 1})
	{
		user.push_back(id);
		x.push_back(static_cast<double>(id));
		y.push_back(1.0);
	}
	ASSERT_FALSE(user.numbered_in_id_order());
	ExecContext ctx = cpu_context();
	GeoPoints points{user, x, y};
	try
	{
		user_similarity(points, 4, {}, ctx);
		ADD_FAILURE() << "no error";
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), sqlstate::internal_error);
	}
	user.number_in_id_order();
	EXPECT_EQ(user_similarity(points, 4, {}, ctx).size(), 2u);
}

TEST(GeoPointOrder, GroupingOnAnyThreadsIsEachUsersPointsInPointOrder)
{
	/*
	 * The CPU's grouping against one written plainly (each user's points
	 * gathered, then ordered by their x, then y), over rows spanning many
	 * of its blocks of rows, in an order unrelated to the users' ids (as
	 * uuid users' rows are), on 1 to 13 threads: every user's points in
	 * point order, -0 before +0.
	 */
	std::mt19937_64 rng = seeded_rng();
	for (size_t threads : {size_t(1), size_t(2), size_t(5), size_t(13)})
	{
		std::vector<Point> rows = random_points(rng, 1 + static_cast<int>(rng() % 40000), 12, GeoMetric::Euclidean, 50);
		for (size_t r = 0; r < rows.size(); r += 11)
			rows[r].x = rows[r].x == 0 ? -0.0 : -rows[r].x;
		PointColumns in(rows);
		ExecContext ctx = cpu_context();
		ctx.cpu_threads = threads;
		GeoPointSet set = grouped_on_cpu(rows_of(in.view()), GeoMetric::Euclidean, ctx);

		std::map<int64_t, std::vector<std::pair<uint64_t, uint64_t>>> want;
		for (const Point &p : rows)
			want[p.user].push_back({geo::point_order_key(p.x), geo::point_order_key(p.y)});
		ASSERT_EQ(set.user_ids.size(), want.size());
		ASSERT_EQ(set.points(), static_cast<int64_t>(rows.size()));
		size_t u = 0;
		for (auto &[user, keys] : want)
		{
			std::sort(keys.begin(), keys.end());
			ASSERT_EQ(set.user_ids[u], user);
			ASSERT_EQ(set.count(static_cast<int32_t>(u)), static_cast<int64_t>(keys.size())) << "user " << user;
			for (size_t i = 0; i < keys.size(); ++i)
			{
				auto at = static_cast<size_t>(set.offsets[u]) + i;
				ASSERT_EQ(geo::point_order_key(set.x[at]), keys[i].first) << "user " << user << ", point " << i;
				ASSERT_EQ(geo::point_order_key(set.y[at]), keys[i].second) << "user " << user << ", point " << i;
			}
			++u;
		}
	}
}

TEST(GeoPointOrder, ShuffledRowsGiveTheSameBits)
{
	/*
	 * With the users numbered in id order, as the SQL layer does after
	 * every read, the same points in any row order (parallel workers
	 * deliver them so) give every geo function's answer to the last bit:
	 * each user's points are summed in point order, on the CPU and the GPU.
	 * Some points are -0 and +0 of each other, and some repeat.
	 */
	std::mt19937_64 rng = seeded_rng();
	for (GeoMetric metric : {GeoMetric::Euclidean, GeoMetric::Haversine})
		for (int round = 0; round < 4; ++round)
		{
			std::vector<Point> rows = random_points(rng, 8 + round * 5, 9, metric);
			for (size_t r = 0; r + 1 < rows.size(); r += 7)
			{
				rows[r + 1] = rows[r]; /* the same point twice */
				rows[r].x = rows[r].x == 0 ? -0.0 : rows[r].x;
			}
			rows.push_back({rows[0].user, 0.0, 0.0});
			rows.push_back({rows[0].user, -0.0, 0.0});
			rows.push_back({rows[0].user, 0.0, -0.0});
			std::vector<Point> shuffled = rows;
			std::shuffle(shuffled.begin(), shuffled.end(), rng);
			PointColumns a(rows), b(shuffled);
			GeoOptions grouping{metric, 1.0};
			GeoPointSet ga = group_points(a.view(), grouping), gb = group_points(b.view(), grouping);
			ASSERT_EQ(ga.offsets, gb.offsets);
			ASSERT_EQ(ga.user_ids, gb.user_ids);
			ASSERT_TRUE(std::is_sorted(ga.user_ids.begin(), ga.user_ids.end()));
			for (size_t i = 0; i < rows.size(); ++i)
			{
				ASSERT_EQ(bits(ga.x[i]), bits(gb.x[i])) << "point " << i;
				ASSERT_EQ(bits(ga.y[i]), bits(gb.y[i])) << "point " << i;
			}
			std::vector<Candidate> cand_rows = random_candidates(rng, 15, metric);
			CandidateColumns cands(cand_rows);
			GeoOptions options{metric, metric == GeoMetric::Euclidean ? 1e-9 : 10.0};
			int64_t main = rows[rng() % rows.size()].user;
			ExecContext c1 = cpu_context(), c2 = cpu_context();
			std::vector<UserSimilarity> s1 = user_similarity(a.view(), main, options, c1);
			std::vector<UserSimilarity> s2 = user_similarity(b.view(), main, options, c2);
			ASSERT_EQ(s1.size(), s2.size());
			for (size_t i = 0; i < s1.size(); ++i)
			{
				EXPECT_EQ(s1[i].user_id, s2[i].user_id);
				EXPECT_EQ(bits(s1[i].similarity), bits(s2[i].similarity));
				EXPECT_EQ(bits(s1[i].mean_min_distance), bits(s2[i].mean_min_distance));
			}
			std::vector<SimilarUser> k1 = similar_users(a.view(), 3, options, c1);
			std::vector<SimilarUser> k2 = similar_users(b.view(), 3, options, c2);
			ASSERT_EQ(k1.size(), k2.size());
			for (size_t i = 0; i < k1.size(); ++i)
			{
				EXPECT_EQ(k1[i].user_id, k2[i].user_id);
				EXPECT_EQ(k1[i].other_user_id, k2[i].other_user_id);
				EXPECT_EQ(bits(k1[i].similarity), bits(k2[i].similarity));
			}
			std::vector<double> p1 = predict_strength(a.view(), main, cands.view(), 1.5, {}, options, c1);
			std::vector<double> p2 = predict_strength(b.view(), main, cands.view(), 1.5, {}, options, c2);
			ASSERT_EQ(p1.size(), p2.size());
			for (size_t i = 0; i < p1.size(); ++i)
				EXPECT_EQ(bits(p1[i]), bits(p2[i])) << "candidate row " << i;
			if (!gpu_usable())
				continue;
			/* the GPU groups the points it is given in their order: the same holds there */
			ExecContext g1 = gpu_context(), g2 = gpu_context();
			std::vector<UserSimilarity> t1 = user_similarity(a.view(), main, options, g1);
			std::vector<UserSimilarity> t2 = user_similarity(b.view(), main, options, g2);
			ASSERT_EQ(t1.size(), t2.size());
			ASSERT_EQ(t1.size(), s1.size());
			for (size_t i = 0; i < t1.size(); ++i)
			{
				EXPECT_EQ(bits(t1[i].similarity), bits(t2[i].similarity)) << "gpu, user " << t1[i].user_id;
				EXPECT_EQ(bits(t1[i].similarity), bits(s1[i].similarity)) << "gpu and cpu, user " << t1[i].user_id;
				EXPECT_EQ(bits(t1[i].mean_min_distance), bits(s1[i].mean_min_distance)) << "user " << t1[i].user_id;
			}
			std::vector<double> q1 = predict_strength(a.view(), main, cands.view(), 1.5, {}, options, g1);
			std::vector<double> q2 = predict_strength(b.view(), main, cands.view(), 1.5, {}, options, g2);
			ASSERT_EQ(q1.size(), q2.size());
			ASSERT_EQ(q1.size(), p1.size());
			for (size_t i = 0; i < q1.size(); ++i)
			{
				EXPECT_EQ(bits(q1[i]), bits(q2[i])) << "gpu, candidate row " << i;
				EXPECT_EQ(bits(q1[i]), bits(p1[i])) << "gpu and cpu, candidate row " << i;
			}
		}
}

} // namespace
} // namespace gpurec
