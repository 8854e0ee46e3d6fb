/*
 * test_gpu_service.cpp: the GPU service (src/gpu_service.hpp) without a
 * server: a service on stand-in devices, in a thread of this process and a
 * directory of its own, and clients sending it the engine's device work.
 * What comes back must be what the engine computes on the CPU in the
 * caller, to the bit, split over the devices or not; errors keep their
 * SQLSTATE; a service that is not there is ERROR 58000.
 */
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>

#include "../../src/array_column.hpp"
#include "../../src/float_column.hpp"
#include "../../src/geo.hpp"
#include "../../src/gpu_service.hpp"
#include "../../src/id_column.hpp"
#include "../../src/number_column.hpp"
#include "../../src/roc_fitness.hpp"
#include "test_random.hpp"

namespace gpurec {
namespace {

std::atomic<bool> stop_service{false};

bool service_should_stop() { return stop_service.load(); }

/* A service on `devices` stand-in devices, in a fresh directory made the working one while it runs. */
class ServiceRun
{
  public:
	explicit ServiceRun(int devices)
	{
		char pattern[] = "/tmp/gpurec-service-test-XXXXXX";
		dir_ = mkdtemp(pattern);
		previous_ = getcwd(nullptr, 0);
		EXPECT_EQ(chdir(dir_.c_str()), 0);
		service::Options options;
		options.stand_in_devices = devices;
		options.stand_in_memory = int64_t(1) << 30;
		stop_service = false;
		thread_ = std::thread([options] { service::run(options, service_should_stop); });
	}
	~ServiceRun()
	{
		stop_service = true;
		thread_.join();
		EXPECT_EQ(chdir(previous_), 0);
		free(previous_);
		rmdir(dir_.c_str());
	}

  private:
	std::string dir_;
	char *previous_ = nullptr;
	std::thread thread_;
};

ExecContext through(service::Client &client)
{
	ExecContext ctx;
	ctx.mode = DeviceMode::Gpu;
	ctx.service = &client;
	return ctx;
}

ExecContext on_cpu()
{
	ExecContext ctx;
	ctx.mode = DeviceMode::Cpu;
	return ctx;
}

struct Points
{
	IdColumn user;
	FloatColumn x, y;
	Int64Column candidate;
	FloatColumn cx, cy;
	Int64Column holdout_user, holdout_candidate;

	explicit Points(std::mt19937_64 rng)
	{
		/* coordinates on a coarse grid, so that distances tie */
		for (int i = 0; i < 900; ++i)
		{
			user.push_back(static_cast<int64_t>(rng() % 60));
			x.push_back(static_cast<double>(rng() % 40) / 2);
			y.push_back(static_cast<double>(rng() % 40) / 2);
		}
		user.number_in_id_order();
		for (int c = 0; c < 80; ++c)
		{
			candidate.push_back(c);
			cx.push_back(static_cast<double>(rng() % 40) / 2);
			cy.push_back(static_cast<double>(rng() % 40) / 2);
		}
		for (int v = 0; v < 120; ++v)
		{
			holdout_user.push_back(static_cast<int64_t>(rng() % 20));
			holdout_candidate.push_back(static_cast<int64_t>(rng() % 80));
		}
	}
	GeoPoints points() const { return {user, x, y}; }
	GeoCandidates candidates() const { return {candidate, cx, cy}; }
	GeoHoldout holdout() const { return {holdout_user, holdout_candidate}; }
};

TEST(GpuService, StatusListsTheStandInDevices)
{
	ServiceRun run(3);
	service::Client client;
	ExecContext ctx = through(client);
	service::Status status = client.status(ctx);
	ASSERT_EQ(status.devices.size(), 3u);
	EXPECT_EQ(status.pid, static_cast<int32_t>(getpid()));
	for (size_t d = 0; d < 3; ++d)
	{
		EXPECT_EQ(status.devices[d].info.device_id, static_cast<int>(d));
		EXPECT_EQ(status.devices[d].calls_running, 0);
		EXPECT_EQ(status.devices[d].calls_queued, 0);
	}
}

TEST(GpuService, GeoAnswersAsTheCpuSplitOrNot)
{
	Points in(seeded_rng());
	for (int devices : {1, 3})
	{
		ServiceRun run(devices);
		service::Client client;
		for (GeoMetric metric : {GeoMetric::Euclidean, GeoMetric::Haversine})
		{
			GeoOptions options{metric, default_epsilon(metric)};
			ExecContext remote = through(client), local = on_cpu();
			std::vector<SimilarUser> got = similar_users(in.points(), 4, options, remote);
			std::vector<SimilarUser> want = similar_users(in.points(), 4, options, local);
			ASSERT_EQ(got.size(), want.size());
			for (size_t i = 0; i < got.size(); ++i)
			{
				EXPECT_EQ(got[i].user_id, want[i].user_id);
				EXPECT_EQ(got[i].rank, want[i].rank);
				EXPECT_EQ(got[i].other_user_id, want[i].other_user_id);
				EXPECT_EQ(got[i].similarity, want[i].similarity);
			}
			EXPECT_EQ(remote.service_devices, devices) << "similar_users splits over every device";

			std::vector<UserSimilarity> sims = user_similarity(in.points(), 7, options, remote);
			std::vector<UserSimilarity> sims_cpu = user_similarity(in.points(), 7, options, local);
			ASSERT_EQ(sims.size(), sims_cpu.size());
			for (size_t i = 0; i < sims.size(); ++i)
				EXPECT_EQ(sims[i].similarity, sims_cpu[i].similarity);

			StrengthOptions strength;
			std::vector<double> s = predict_strength(in.points(), 7, in.candidates(), 2.5, strength, options, remote);
			EXPECT_EQ(s, predict_strength(in.points(), 7, in.candidates(), 2.5, strength, options, local));

			std::vector<double> exponents{1, 1.5, 2, 3};
			std::vector<ExponentFit> fit =
				fit_exponent(in.points(), in.holdout(), in.candidates(), exponents, strength, options, remote);
			std::vector<ExponentFit> fit_cpu =
				fit_exponent(in.points(), in.holdout(), in.candidates(), exponents, strength, options, local);
			ASSERT_EQ(fit.size(), fit_cpu.size());
			for (size_t e = 0; e < fit.size(); ++e)
			{
				EXPECT_EQ(fit[e].mean_auc, fit_cpu[e].mean_auc) << "exponent " << fit[e].exponent;
				EXPECT_EQ(fit[e].users, fit_cpu[e].users);
			}
		}
	}
}

TEST(GpuService, RocAnswersAsTheCpu)
{
	std::mt19937_64 rng = seeded_rng();
	Int64Column ids;
	FloatArrayColumn scores;
	std::vector<int8_t> labels;
	for (int e = 0; e < 50; ++e)
		labels.push_back(static_cast<int8_t>(rng() % 3 == 0 ? -1 : rng() % 2));
	for (int r = 0; r < 40; ++r)
	{
		ids.push_back(1000 - r * 7);
		std::vector<float> values;
		uint8_t present[7] = {};
		for (int e = 0; e < 50; ++e)
			if (rng() % 10 != 0)
			{
				present[e / 8] |= uint8_t(1u << (e % 8));
				values.push_back(static_cast<float>(rng() % 9) / 4);
			}
		scores.append_row(values.data(), 50, present);
	}
	ServiceRun run(2);
	service::Client client;
	ExecContext remote = through(client), local = on_cpu();
	std::vector<RocResult> got = roc_fitness_arrays(ids, scores, labels, remote);
	std::vector<RocResult> want = roc_fitness_arrays(ids, scores, labels, local);
	ASSERT_EQ(got.size(), want.size());
	for (size_t i = 0; i < got.size(); ++i)
	{
		EXPECT_EQ(got[i].individual_id, want[i].individual_id);
		EXPECT_EQ(got[i].auc, want[i].auc);
		EXPECT_EQ(got[i].counts.twice_wins, want[i].counts.twice_wins);
		EXPECT_EQ(got[i].counts.lowest_positive_rank, want[i].counts.lowest_positive_rank);
	}
	EXPECT_GE(remote.service_device, 0);
}

TEST(GpuService, AnErrorKeepsItsSqlstate)
{
	Points in(seeded_rng());
	ServiceRun run(1);
	service::Client client;
	ExecContext ctx = through(client);
	/* a function this service does not have: its error, raised there, comes back whole */
	try
	{
		client.call(static_cast<service::Function>(999), 0, [](ByteWriter &out) { out.put<uint8_t>(0); }, ctx);
		FAIL() << "a call of no function succeeded";
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), "XX000");
		EXPECT_EQ(std::string(e.what()), "the GPU service has no function 999");
		EXPECT_NE(e.detail().find("restart the server"), std::string::npos);
	}
	/* the same connection serves the next call */
	ExecContext again = through(client), local = on_cpu();
	EXPECT_EQ(similar_users(in.points(), 3, {}, again).size(), similar_users(in.points(), 3, {}, local).size());
	EXPECT_GE(again.service_device, 0);
}

TEST(GpuService, NoServiceIs58000)
{
	char pattern[] = "/tmp/gpurec-no-service-XXXXXX";
	std::string dir = mkdtemp(pattern);
	char *previous = getcwd(nullptr, 0);
	ASSERT_EQ(chdir(dir.c_str()), 0);
	service::Client client;
	ExecContext ctx = through(client);
	try
	{
		client.status(ctx, 100);
		ADD_FAILURE() << "a status without a service";
	}
	catch (const Error &e)
	{
		EXPECT_STREQ(e.sqlstate(), "58000");
		EXPECT_NE(std::string(e.what()).find("not running"), std::string::npos);
	}
	EXPECT_EQ(chdir(previous), 0);
	free(previous);
	rmdir(dir.c_str());
}

} // namespace
} // namespace gpurec
