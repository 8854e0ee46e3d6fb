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

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "../../src/array_column.hpp"
#include "../../src/carts.hpp"
#include "../../src/float_column.hpp"
#include "../../src/geo.hpp"
#include "../../src/gpu_service.hpp"
#include "../../src/gpu_service_memory.hpp"
#include "../../src/gpu_service_wire.hpp"
#include "../../src/id_column.hpp"
#include "../../src/marketplace.hpp"
#include "../../src/number_column.hpp"
#include "../../src/roc_fitness.hpp"
#include "cart_answers.hpp"
#include "proc_smaps.hpp"
#include "test_random.hpp"

namespace gpurec {
namespace {

std::atomic<bool> stop_service{false};

bool service_should_stop() { return stop_service.load(); }

/*
 * A service on `devices` stand-in devices, in a fresh directory made the
 * working one while it runs, with `shared_bytes` of shared memory for the
 * calls' input (0: every call brings a memfd of its own).
 */
class ServiceRun
{
  public:
	explicit ServiceRun(int devices, int64_t shared_bytes = int64_t(64) << 20)
	{
		char pattern[] = "/tmp/gpurec-service-test-XXXXXX";
		dir_ = mkdtemp(pattern);
		previous_ = getcwd(nullptr, 0);
		EXPECT_EQ(chdir(dir_.c_str()), 0);
		service::Options options;
		options.stand_in_devices = devices;
		options.stand_in_memory = int64_t(1) << 30;
		options.shared_memory_bytes = shared_bytes;
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

TEST(GpuService, AutoChoosesByCostWithTheServicesMeasuredHost)
{
	ServiceRun run(2);
	service::Client client;
	ExecContext probe = through(client);
	service::Status status = client.status(probe);
	EXPECT_GT(status.upload_bytes_per_ms, 0) << "the service measured no copy rate at its start";
	HostProfile host = client.host_profile();
	EXPECT_TRUE(host.measured);
	EXPECT_TRUE(host.through_service);
	EXPECT_EQ(host.gpus, 2);
	EXPECT_GT(host.call_ms, 0);

	Points in(seeded_rng());
	GeoPoints all = in.points();
	for (bool tiny : {true, false})
	{
		IdColumn user;
		FloatColumn x, y;
		/*
		 * 6 points, or the 900 ten times over (other users, further east):
		 * 81M pairs, whose CPU estimate dwarfs a round trip to the service
		 * even on a loaded machine
		 */
		size_t n = tiny ? 6 : all.user.size(), copies = tiny ? 1 : 10;
		for (size_t copy = 0; copy < copies; ++copy)
			for (size_t i = 0; i < n; ++i)
			{
				user.push_back(in.user.value_of(in.user.codes()[i]) + static_cast<int64_t>(copy) * 1000);
				x.push_back(in.x[i] + static_cast<double>(copy) * 100);
				y.push_back(in.y[i]);
			}
		user.number_in_id_order();
		GeoPoints points{user, x, y};
		ExecContext automatic = through(client), cpu = on_cpu();
		automatic.mode = DeviceMode::Auto;
		automatic.cpu_threads = 1;
		std::vector<SimilarUser> got = similar_users(points, 3, {}, automatic);
		std::vector<SimilarUser> want = similar_users(points, 3, {}, cpu);
		ASSERT_EQ(got.size(), want.size());
		for (size_t i = 0; i < got.size(); ++i)
		{
			EXPECT_EQ(got[i].user_id, want[i].user_id);
			EXPECT_EQ(got[i].other_user_id, want[i].other_user_id);
			EXPECT_EQ(got[i].similarity, want[i].similarity);
		}
		/* a few points: a GPU call's fixed costs outweigh the pairs; 9,000 points' 81M pairs do not */
		EXPECT_EQ(automatic.used_gpu, !tiny) << automatic.device_choice;
		EXPECT_EQ(automatic.device_choice.rfind(tiny ? "auto chose the cpu: about" : "auto chose the gpu: about", 0), 0u)
			<< automatic.device_choice;
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
			EXPECT_EQ(got[i].other_user_id, want[i].other_user_id);
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
	ExecContext local = on_cpu();
	std::vector<RocResult> want = roc_fitness_arrays(ids, scores, labels, local);
	/*
	 * in the service's shared memory, in a memfd of the call's own where it
	 * has none, and where the call does not fit in it (a page)
	 */
	for (int64_t shared : {int64_t(64) << 20, int64_t(0), int64_t(4096)})
	{
		ServiceRun run(2, shared);
		service::Client client;
		ExecContext remote = through(client);
		std::vector<RocResult> got = roc_fitness_arrays(ids, scores, labels, remote);
		ASSERT_EQ(got.size(), want.size());
		for (size_t i = 0; i < got.size(); ++i)
		{
			EXPECT_EQ(got[i].individual_id, want[i].individual_id);
			EXPECT_EQ(got[i].auc, want[i].auc);
			EXPECT_EQ(got[i].counts.twice_wins, want[i].counts.twice_wins);
			EXPECT_EQ(got[i].counts.lowest_positive_rank, want[i].counts.lowest_positive_rank);
		}
		EXPECT_GE(remote.service_device, 0);
		EXPECT_EQ(remote.service_devices, 2) << "roc_fitness splits by individual over the devices";
		service::Status status = client.status(remote);
		EXPECT_EQ(status.shared_bytes, static_cast<uint64_t>(shared));
		EXPECT_EQ(status.shared_in_use, 0u) << "a call's room in shared memory outlived it";
	}
}

TEST(GpuService, SharedMemoryComesBackFromCallsAndClientsThatWentAway)
{
	/* room for about one call's input: the others at the same time bring memfds of their own */
	ServiceRun run(2, int64_t(6) << 12);
	Points in(seeded_rng());
	ExecContext local = on_cpu();
	std::vector<SimilarUser> want = similar_users(in.points(), 4, {}, local);
	/* many clients at once, calls that the shared memory cannot all hold at once: all answer alike */
	std::vector<std::thread> clients;
	std::atomic<int> wrong{0};
	for (int c = 0; c < 8; ++c)
		clients.emplace_back([&] {
			service::Client client;
			ExecContext ctx = through(client);
			for (int call = 0; call < 3; ++call)
			{
				std::vector<SimilarUser> got = similar_users(in.points(), 4, {}, ctx);
				if (got.size() != want.size())
					++wrong;
				else
					for (size_t i = 0; i < got.size(); ++i)
						if (got[i].other_user_id != want[i].other_user_id || got[i].similarity != want[i].similarity)
							++wrong;
			}
		});
	for (std::thread &t : clients)
		t.join();
	EXPECT_EQ(wrong.load(), 0);
	/*
	 * a client cancelled at its n-th interrupt check, wherever that falls
	 * (writing its input, waiting for the answer), gives its room back
	 * with its connection or its call
	 */
	service::Client observer;
	ExecContext watching = through(observer);
	int cancelled = 0;
	for (int n = 1; n <= 12; ++n)
	{
		{
			service::Client client;
			ExecContext ctx = through(client);
			client.status(ctx);
			int checks = 0;
			ctx.check_interrupts = [&checks, n] {
				if (++checks == n)
					throw std::runtime_error("cancelled");
			};
			try
			{
				similar_users(in.points(), 4, {}, ctx);
			}
			catch (const std::runtime_error &)
			{
				++cancelled;
			}
		}
		service::Status status;
		for (int wait = 0; wait < 200; ++wait)
		{
			status = observer.status(watching);
			if (status.shared_in_use == 0)
				break;
			std::this_thread::sleep_for(std::chrono::milliseconds(10));
		}
		EXPECT_EQ(status.shared_in_use, 0u) << "cancelled at interrupt check " << n;
	}
	EXPECT_GT(cancelled, 0);
}

TEST(GpuService, SharedAreaReservesFirstFitAndJoinsWhatComesBack)
{
	service::SharedArea area;
	area.create(size_t(16) << 12); /* 16 pages */
	int a = 0, b = 0;
	uint64_t first = area.reserve(4096 * 4, &a), second = area.reserve(1, &a), third = area.reserve(4096 * 11, &b);
	EXPECT_EQ(first, 0u);
	EXPECT_EQ(second, 4096u * 4);
	EXPECT_EQ(third, 4096u * 5);
	EXPECT_EQ(area.reserve(1, &a), service::wire::kNotShared) << "the area is full";
	EXPECT_EQ(area.in_use(), size_t(16) << 12);
	/* only the owner's room, of at least the bytes named, becomes a call's, once */
	EXPECT_FALSE(area.take(first, 4096 * 4, &b));
	EXPECT_FALSE(area.take(first, 4096 * 5, &a));
	EXPECT_TRUE(area.take(first, 4096 * 4, &a));
	EXPECT_FALSE(area.take(first, 4096 * 4, &a));
	/* a's connection closes: its room no call took goes back, the call's stays */
	area.release_unused(&a);
	EXPECT_EQ(area.in_use(), size_t(15) << 12);
	area.release(first);
	area.release(third);
	EXPECT_EQ(area.in_use(), 0u);
	/* what came back is joined: the whole area fits one reservation again */
	EXPECT_EQ(area.reserve(size_t(16) << 12, &a), 0u);
}

/* A /proc/meminfo field, in its unit (kB or pages); 0 where absent. */
long meminfo(const std::string &field)
{
	std::ifstream in("/proc/meminfo");
	std::string name;
	long value = 0;
	while (in >> name >> value)
	{
		if (name == field + ":")
			return value;
		in.ignore(256, '\n');
	}
	return 0;
}

/*
 * The service's memory lies on the system's huge pages where it has
 * enough free (rounded up to whole ones), else on ordinary pages; and it
 * works either way, read and written through a second mapping of its fd as
 * a backend maps it.  Which of the two runs depends on the host's
 * vm.nr_hugepages: each is checked as it comes, and asking for more huge
 * pages than are free always takes the ordinary ones.
 */
TEST(GpuService, SharedAreaOnHugePagesWhereThereAreEnough)
{
	long free_huge = meminfo("HugePages_Free"), huge_kb = meminfo("Hugepagesize");
	bool enough = free_huge >= 2 && huge_kb == 2048;
	for (bool huge : {true, false})
	{
		service::SharedArea area;
		area.create(size_t(3) << 20, huge);
		ASSERT_NE(area.base(), nullptr);
		bool expected = huge && enough;
		EXPECT_EQ(area.on_huge_pages(), expected) << "free huge pages " << free_huge << " of " << huge_kb << " kB";
		EXPECT_EQ(area.bytes(), expected ? size_t(4) << 20 : size_t(3) << 20);
		EXPECT_EQ(std::atol(smaps_field(area.base(), "KernelPageSize").c_str()), expected ? 2048 : 4);
		uint8_t *other = service::wire::map_shared(area.fd(), area.bytes(), true);
		for (size_t at = 0; at < area.bytes(); at += 4096)
			area.base()[at] = static_cast<uint8_t>(at >> 12);
		for (size_t at = 0; at < area.bytes(); at += 4096)
			ASSERT_EQ(other[at], static_cast<uint8_t>(at >> 12)) << at;
		service::wire::unmap_shared(other, area.bytes());
	}
	/* more than the free huge pages: ordinary ones (the memfd is sparse: nothing of it is touched here) */
	service::SharedArea beyond;
	beyond.create(static_cast<size_t>(free_huge + 1) << 21, true);
	EXPECT_FALSE(beyond.on_huge_pages());
	EXPECT_EQ(beyond.bytes(), static_cast<size_t>(free_huge + 1) << 21);
}

TEST(GpuService, SharedAreaLeasesGoBackWithTheirLastHolder)
{
	service::SharedArea area;
	area.create(size_t(16) << 12);
	int leader = 0, worker = 0, call = 0, stranger = 0;
	uint64_t lease = area.reserve(4096 * 8, &leader, 77);
	ASSERT_EQ(lease, 0u);
	/* a lease is no call's input, and only its token holds it */
	EXPECT_FALSE(area.take(lease, 4096, &leader));
	EXPECT_EQ(area.hold(lease, 78, &stranger), 0u);
	EXPECT_EQ(area.hold(lease + 4096, 77, &stranger), 0u) << "no lease starts there";
	EXPECT_EQ(area.hold(lease, 77, &worker), size_t(4096) * 8);
	/* a call on the leader's connection holds the leader's leases, and only those */
	uint64_t room = area.reserve(4096, &stranger);
	auto held = area.hold_leases_of(&leader, &call);
	ASSERT_EQ(held.size(), 1u);
	EXPECT_EQ(held[0], std::make_pair(lease, size_t(4096) * 8));
	EXPECT_TRUE(area.hold_leases_of(&stranger, &call).empty()) << "a call's input room is no lease";
	/* the lease stays while any holder does: the leader first, then the call, then the worker's connection */
	area.drop(lease, &leader);
	area.drop(lease, &leader); /* twice: nothing more */
	EXPECT_EQ(area.in_use(), size_t(9) << 12);
	area.drop(lease, &call);
	EXPECT_EQ(area.in_use(), size_t(9) << 12);
	area.release_unused(&worker);
	EXPECT_EQ(area.in_use(), size_t(1) << 12);
	/* a call's room is not let go as a lease is */
	area.drop(room, &stranger);
	EXPECT_EQ(area.in_use(), size_t(1) << 12);
	area.release_unused(&stranger);
	EXPECT_EQ(area.in_use(), 0u);
	/* a connection that closes lets its leases go; the lease stays for the other holders */
	lease = area.reserve(4096, &leader, 5);
	EXPECT_EQ(area.hold(lease, 5, &worker), size_t(4096));
	area.release_unused(&leader);
	EXPECT_EQ(area.in_use(), size_t(1) << 12);
	area.release_unused(&worker);
	EXPECT_EQ(area.in_use(), 0u);
	EXPECT_EQ(area.reserve(size_t(16) << 12, &leader), 0u) << "what came back is joined";
}

/*
 * Offers whose product codes are not those of their first appearance (the
 * ids come shuffled, then are numbered in id order), so that a service that
 * numbered the products afresh would rank the wrong products; prices of few
 * values spelled with one or two decimals (ties, mixed scales); carts over
 * them, some lines with no current store or a product nobody offers.
 */
struct Market
{
	IdColumn product;
	Int64Column store;
	NumberColumn price{NumberType::Numeric};
	Int64Column ship_store;
	NumberColumn fee{NumberType::Numeric}, free_from{NumberType::Numeric};
	Int64Column cart, line_product, line_store, quantity;

	/* offers' chunks from `source` where one is given (a lease's, say) */
	explicit Market(std::mt19937_64 rng, ChunkSource *source = nullptr)
	{
		if (source)
		{
			product.use_chunk_source(*source);
			store.use_chunk_source(*source);
			price.use_chunk_source(*source);
		}
		auto draw = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
		constexpr int kProducts = 400;
		for (int i = 0; i < 6000; ++i)
		{
			product.push_back(static_cast<int64_t>(draw(0, kProducts - 1)) * 7919 % 4001 - 2000);
			store.push_back(draw(1, 9));
			int64_t tenths = draw(1, 12) * 5;
			if (draw(0, 1) == 0)
				price.push_numeric(tenths, 1);
			else
				price.push_numeric(tenths * 10, 2);
		}
		product.number_in_id_order();
		for (int s = 1; s <= 9; ++s)
		{
			ship_store.push_back(s);
			fee.push_numeric(draw(0, 6) * 50, 2);
			if (draw(0, 2) == 0)
				free_from.push_numeric_special(NumberColumn::kScalePosInf);
			else
				free_from.push_numeric(draw(1, 16) * 50, 2);
		}
		for (int c = 1; c <= 300; ++c)
			for (int l = draw(1, 6); l > 0; --l)
			{
				cart.push_back(c);
				/* one product in 20 nobody offers */
				line_product.push_back(draw(0, 19) == 0 ? 999999 : product.value_of(draw(0, kProducts - 1)));
				line_store.push_back(draw(0, 3) == 0 ? kNoCurrentStore : draw(1, 9));
				quantity.push_back(draw(1, 3));
			}
	}
	Offers offers() const { return {product, store, price}; }
	CartLines lines() const { return {cart, line_product, line_store, quantity}; }
	Shipping shipping() const { return {ship_store, fee, free_from}; }
};

TEST(GpuService, MarketplaceAnswersAsTheCpu)
{
	Market m(seeded_rng());
	/* the codes in order of first appearance are not 0, 1, 2, ...: a fresh numbering would differ */
	std::vector<int32_t> first_seen;
	std::vector<bool> seen(m.product.distinct());
	for (size_t row = 0; row < m.product.size(); ++row)
		if (!seen[m.product.code(row)])
		{
			seen[m.product.code(row)] = true;
			first_seen.push_back(m.product.code(row));
		}
	ASSERT_FALSE(std::is_sorted(first_seen.begin(), first_seen.end()));
	ServiceRun run(2);
	service::Client client;
	for (int k : {1, 3, 7})
	{
		SCOPED_TRACE("k " + std::to_string(k));
		ExecContext remote = through(client), local = on_cpu();
		RankedOffers got = cheapest_offers(m.offers(), k, remote);
		RankedOffers want = cheapest_offers(m.offers(), k, local);
		EXPECT_EQ(got.offsets, want.offsets);
		EXPECT_EQ(got.rows, want.rows);
		EXPECT_GE(remote.service_device, 0);
	}

	ExecContext remote = through(client), local = on_cpu();
	std::vector<CartImprovement> got = improve_carts(m.lines(), m.offers(), remote);
	std::vector<CartImprovement> want = improve_carts(m.lines(), m.offers(), local);
	ASSERT_EQ(got.size(), want.size());
	for (size_t i = 0; i < got.size(); ++i)
	{
		EXPECT_EQ(got[i].line, want[i].line);
		EXPECT_EQ(got[i].current_row, want[i].current_row);
		EXPECT_EQ(got[i].best_row, want[i].best_row);
	}
	EXPECT_GE(remote.service_device, 0);
}

/* Chunks from a lease, as a parallel read's processes take them (AreaChunks, LeaseChunks). */
class ChunksInLease final : public ChunkSource
{
  public:
	explicit ChunksInLease(const service::Lease &lease) : lease_(lease) {}
	void *allocate(size_t bytes) override
	{
		size_t room = service::wire::page_aligned(bytes);
		if (room > lease_.bytes - used_)
			throw std::bad_alloc();
		void *at = lease_.at() + used_;
		used_ += room;
		return at;
	}
	void release(void *, size_t) noexcept override {}

  private:
	const service::Lease &lease_;
	size_t used_ = 0;
};

TEST(GpuService, ColumnsInALeaseAreReadInPlace)
{
	ServiceRun run(2);
	service::Client client, worker, stranger;
	ExecContext ctx = through(client), worker_ctx = through(worker), stranger_ctx = through(stranger);
	client.status(ctx); /* a lease is only taken from a service that answers at once */
	service::Lease lease = client.lease(size_t(40) << 20, ctx);
	ASSERT_GT(lease.bytes, 0u);
	/* another process holds it with its token only, on a service of the lease's */
	EXPECT_EQ(stranger.hold(lease.offset, lease.token + 1, lease.service_pid, stranger_ctx).bytes, 0u);
	EXPECT_EQ(stranger.hold(lease.offset, lease.token, lease.service_pid + 1, stranger_ctx).bytes, 0u);
	service::Lease held = worker.hold(lease.offset, lease.token, lease.service_pid, worker_ctx);
	EXPECT_EQ(held.bytes, lease.bytes);
	{
		ChunksInLease chunks(lease);
		Market m(seeded_rng(), &chunks);
		ExecContext local = on_cpu();
		for (int k : {1, 4})
		{
			SCOPED_TRACE("k " + std::to_string(k));
			ExecContext remote = through(client);
			RankedOffers got = cheapest_offers(m.offers(), k, remote);
			RankedOffers want = cheapest_offers(m.offers(), k, local);
			EXPECT_EQ(got.offsets, want.offsets);
			EXPECT_EQ(got.rows, want.rows);
			/* the offers' columns were not written again: only the message was */
			EXPECT_GE(remote.service_in_place_bytes, 6000.0 * (4 + 8 + 8));
			EXPECT_LT(remote.service_written_bytes, 6000.0 * 4);
		}
		/* the same columns, not in a lease, are written whole */
		Market copy(seeded_rng());
		ExecContext remote = through(client);
		cheapest_offers(copy.offers(), 2, remote);
		EXPECT_EQ(remote.service_in_place_bytes, 0.0);
	}
	/* the lease goes back once the leader and the worker's connection let it go */
	client.release(lease);
	EXPECT_GE(client.status(ctx).shared_in_use, lease.bytes) << "the worker still holds it";
	worker_ctx = through(worker); /* a fresh context; the connection is the same */
	worker.release(held);
	bool gone = false;
	for (int wait = 0; wait < 200 && !gone; ++wait)
	{
		gone = client.status(ctx).shared_in_use == 0;
		if (!gone)
			std::this_thread::sleep_for(std::chrono::milliseconds(10));
	}
	EXPECT_TRUE(gone) << "a lease outlived its holders";
}


TEST(GpuService, CartsAnswerAsTheCpu)
{
	Market m(seeded_rng());
	ExecContext local = on_cpu();
	CartsAnswer want = optimize_carts(m.lines(), m.offers(), m.shipping(), local);
	/* on one device, and split by cart over several */
	for (int devices : {1, 3})
	{
		ServiceRun run(devices);
		service::Client client;
		ExecContext remote = through(client);
		CartsAnswer got = optimize_carts(m.lines(), m.offers(), m.shipping(), remote);
		EXPECT_GE(remote.service_device, 0);
		EXPECT_EQ(remote.service_devices, devices);
		expect_same_answers(got, want);
	}
}

TEST(GpuService, PartsShareTheirItemsInOrderAndTheirFieldsConcatenate)
{
	std::mt19937_64 rng = seeded_rng();
	for (size_t items : {size_t(0), size_t(1), size_t(7), size_t(100), size_t(1001)})
		for (int32_t count = 1; count <= 5; ++count)
		{
			/* each part's share of items 0 .. items - 1 as two fields of its own, as a splitting handler writes */
			std::vector<std::vector<uint8_t>> results;
			std::vector<int64_t> whole_items;
			std::vector<double> whole_values;
			size_t next = 0;
			for (int32_t index = 0; index < count; ++index)
			{
				service::Part part{index, count};
				EXPECT_EQ(part.begin(items), next) << "the shares leave a gap or overlap";
				EXPECT_LE(part.begin(items), part.end(items));
				next = part.end(items);
				std::vector<int64_t> mine;
				std::vector<double> values;
				for (size_t i = part.begin(items); i < part.end(items); ++i)
				{
					mine.push_back(static_cast<int64_t>(i));
					values.push_back(static_cast<double>(rng() % 1000) / 8);
				}
				whole_items.insert(whole_items.end(), mine.begin(), mine.end());
				whole_values.insert(whole_values.end(), values.begin(), values.end());
				results.push_back(written_bytes([&](ByteWriter &out) {
					service::put_field(out, mine);
					service::put_field(out, values);
				}));
			}
			EXPECT_EQ(next, items);
			std::vector<uint8_t> merged = service::concatenate_parts(results);
			ByteReader in(merged.data(), merged.size());
			EXPECT_EQ(service::get_field<int64_t>(in), whole_items);
			EXPECT_EQ(service::get_field<double>(in), whole_values);
			EXPECT_TRUE(in.at_end());
		}
	/* parts whose fields differ in type or number are an internal error, never a wrong answer */
	std::vector<std::vector<uint8_t>> unlike = {
		written_bytes([](ByteWriter &out) { service::put_field(out, std::vector<int32_t>{1, 2}); }),
		written_bytes([](ByteWriter &out) { service::put_field(out, std::vector<int64_t>{3}); })};
	EXPECT_THROW(service::concatenate_parts(unlike), Error);
	std::vector<std::vector<uint8_t>> fewer = {
		written_bytes([](ByteWriter &out) {
			service::put_field(out, std::vector<int32_t>{1});
			service::put_field(out, std::vector<int32_t>{2});
		}),
		written_bytes([](ByteWriter &out) { service::put_field(out, std::vector<int32_t>{3}); })};
	EXPECT_THROW(service::concatenate_parts(fewer), Error);
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

TEST(GpuService, NoServiceIs58000UnderGpuAndTheCpuUnderAuto)
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
	/* under auto, a call large enough for the GPU computes on the CPU at once, with the same answer */
	std::mt19937_64 rng = seeded_rng();
	ExecContext automatic = through(client), local = on_cpu();
	automatic.mode = DeviceMode::Auto;
	IdColumn user;
	FloatColumn x, y;
	for (int i = 0; i < 5000; ++i)
	{
		user.push_back(static_cast<int64_t>(rng() % 500));
		x.push_back(static_cast<double>(rng() % 100));
		y.push_back(static_cast<double>(rng() % 100));
	}
	user.number_in_id_order();
	GeoPoints many{user, x, y};
	auto started = std::chrono::steady_clock::now();
	std::vector<SimilarUser> got = similar_users(many, 2, {}, automatic);
	double took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
	std::vector<SimilarUser> want = similar_users(many, 2, {}, local);
	ASSERT_EQ(got.size(), want.size());
	for (size_t i = 0; i < got.size(); ++i)
		EXPECT_EQ(got[i].similarity, want[i].similarity);
	EXPECT_FALSE(automatic.used_gpu);
	EXPECT_NE(automatic.device_choice.find("auto chose the cpu"), std::string::npos) << automatic.device_choice;
	EXPECT_LT(took_s, 8.0) << "auto waited for a service that is not there";
	EXPECT_EQ(chdir(previous), 0);
	free(previous);
	rmdir(dir.c_str());
}

} // namespace
} // namespace gpurec
