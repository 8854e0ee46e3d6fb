/*
 * test_cpu_parallel.cpp: parallel_for, the CPU paths' one threading helper:
 * every item runs once, on a worker whose index is its own while it runs;
 * only the calling thread checks for interrupts; a cancel reaches the
 * workers and comes back on the calling thread, and so does a worker's
 * exception, after every worker has stopped.  A test fault aimed at the
 * compute phase's first interrupt point comes before any item runs, on the
 * calling thread.  And split_by_cost's ranges.
 */
#include <gtest/gtest.h>

#include <csignal>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "../../src/cpu_parallel.hpp"
#include "test_random.hpp"

namespace gpurec {
namespace {

using Clock = std::chrono::steady_clock;

/* Spins until cancelled, for at most 10 s (so that a broken cancel fails rather than hangs); true if cancelled. */
bool wait_for_cancel(const std::atomic<bool> &cancelled)
{
	Clock::time_point give_up = Clock::now() + std::chrono::seconds(10);
	while (!cancelled.load(std::memory_order_relaxed))
	{
		if (Clock::now() > give_up)
			return false;
		std::this_thread::yield();
	}
	return true;
}

TEST(CpuParallel, WorkersPerItemCount)
{
	size_t cores = std::max(1u, std::thread::hardware_concurrency());
	ExecContext ctx;
	EXPECT_EQ(parallel_workers(0, ctx), 0u);
	EXPECT_EQ(parallel_workers(1, ctx), 1u);
	EXPECT_EQ(parallel_workers(1000000, ctx), cores);
	EXPECT_EQ(parallel_workers(cores + 1, ctx), cores);
}

/* gpurec.cpu_threads: at most that many threads run the items, fewer cores or more */
TEST(CpuParallel, CpuThreadsCapsTheWorkers)
{
	for (size_t cap : {1, 2, 3, 5})
	{
		SCOPED_TRACE("cpu_threads " + std::to_string(cap));
		ExecContext ctx;
		ctx.cpu_threads = cap;
		EXPECT_EQ(parallel_workers(0, ctx), 0u);
		EXPECT_EQ(parallel_workers(2, ctx), std::min<size_t>(2, cap));
		EXPECT_EQ(parallel_workers(1000000, ctx), cap);
		std::mutex mutex;
		std::set<std::thread::id> threads;
		std::atomic<int> bad_worker{0};
		parallel_for(400, ctx, [&](size_t, size_t worker, const std::atomic<bool> &) {
			bad_worker += worker >= cap;
			{
				std::lock_guard<std::mutex> lock(mutex);
				threads.insert(std::this_thread::get_id());
			}
			std::this_thread::sleep_for(std::chrono::microseconds(50));
		});
		EXPECT_EQ(bad_worker.load(), 0);
		EXPECT_LE(threads.size(), cap);
		EXPECT_GE(threads.size(), 1u);
		EXPECT_EQ(ctx.cpu_threads_used, cap) << "the call reports the threads it started";
	}
}

TEST(CpuParallel, EveryItemOnceOnItsOwnWorker)
{
	constexpr size_t n = 5000;
	std::vector<std::atomic<int>> runs(n);
	ExecContext ctx;
	size_t workers = parallel_workers(n, ctx);
	std::unique_ptr<std::atomic<bool>[]> busy(new std::atomic<bool>[workers]);
	for (size_t w = 0; w < workers; ++w)
		busy[w] = false;
	std::atomic<int> bad_worker{0}, overlaps{0}, on_caller{0};
	std::thread::id caller = std::this_thread::get_id();
	int checks = 0;
	ctx.check_interrupts = [&] {
		EXPECT_EQ(std::this_thread::get_id(), caller);
		++checks;
	};
	parallel_for(n, ctx, [&](size_t item, size_t worker, const std::atomic<bool> &cancelled) {
		EXPECT_FALSE(cancelled.load());
		if (worker >= workers)
		{
			++bad_worker;
			return;
		}
		if (busy[worker].exchange(true))
			++overlaps;
		on_caller += std::this_thread::get_id() == caller;
		++runs[item];
		std::this_thread::sleep_for(std::chrono::microseconds(20));
		busy[worker] = false;
	});
	EXPECT_EQ(bad_worker.load(), 0);
	EXPECT_EQ(overlaps.load(), 0);
	EXPECT_EQ(on_caller.load(), 0) << "the calling thread only waits";
	for (size_t i = 0; i < n; ++i)
		ASSERT_EQ(runs[i].load(), 1) << "item " << i;
}

TEST(CpuParallel, NoItemsNoWork)
{
	ExecContext ctx;
	int checks = 0;
	ctx.check_interrupts = [&] { ++checks; };
	parallel_for(0, ctx, [&](size_t, size_t, const std::atomic<bool> &) { ADD_FAILURE() << "no item to run"; });
	EXPECT_EQ(checks, 0);
}

/* The calling thread checks for interrupts while the workers run; what it throws stops them, then comes through. */
TEST(CpuParallel, CancelReachesTheWorkers)
{
	struct Cancelled
	{
	};
	std::thread::id caller = std::this_thread::get_id();
	std::atomic<int> started{0}, saw_cancel{0}, running{0};
	int checks = 0;
	ExecContext ctx;
	ctx.check_interrupts = [&] {
		EXPECT_EQ(std::this_thread::get_id(), caller);
		if (++checks == 2)
			throw Cancelled();
	};
	size_t n = 1000;
	bool caught = false;
	try
	{
		parallel_for(n, ctx, [&](size_t, size_t, const std::atomic<bool> &cancelled) {
			++running;
			++started;
			saw_cancel += wait_for_cancel(cancelled);
			--running;
		});
	}
	catch (const Cancelled &)
	{
		caught = true;
		EXPECT_EQ(running.load(), 0) << "every worker stopped before the cancel came through";
	}
	EXPECT_TRUE(caught);
	EXPECT_EQ(checks, 2) << "no check once cancelled";
	EXPECT_GE(started.load(), 1);
	EXPECT_LE(static_cast<size_t>(started.load()), parallel_workers(n, ctx)) << "no item starts after a cancel";
	EXPECT_EQ(saw_cancel.load(), started.load());
}

/* An item's exception stops the other workers and is rethrown on the calling thread after they all joined. */
TEST(CpuParallel, WorkerFailureComesThroughAfterTheJoin)
{
	std::atomic<int> running{0}, saw_cancel{0}, others{0};
	ExecContext ctx;
	bool caught = false;
	try
	{
		parallel_for(1000, ctx, [&](size_t item, size_t, const std::atomic<bool> &cancelled) {
			if (item == 0)
			{
				/* let the others start before failing */
				std::this_thread::sleep_for(std::chrono::milliseconds(20));
				throw std::runtime_error("item 0 failed");
			}
			++running;
			++others;
			saw_cancel += wait_for_cancel(cancelled);
			--running;
		});
	}
	catch (const std::runtime_error &e)
	{
		caught = true;
		EXPECT_STREQ(e.what(), "item 0 failed");
		EXPECT_EQ(running.load(), 0) << "every worker stopped before the failure came through";
	}
	EXPECT_TRUE(caught);
	EXPECT_EQ(saw_cancel.load(), others.load());
}

/* interrupt_point counts per phase; a fault fires once, at its point, after the interrupt check */
TEST(CpuParallel, TestFaultCountsItsPhaseOnly)
{
	ExecContext ctx;
	std::vector<int> order;
	ctx.check_interrupts = [&] { order.push_back(0); };
	ctx.inject_fault = [&](const TestFault &f) { order.push_back(static_cast<int>(f.phase) + 1); };
	ctx.fault.phase = Phase::Transfer;
	ctx.fault.at = 2;
	ctx.interrupt_point(Phase::Compute);
	ctx.interrupt_point(Phase::Transfer);
	ctx.interrupt_point(Phase::Compute);
	ctx.interrupt_point(Phase::Transfer);
	ctx.interrupt_point(Phase::Transfer);
	EXPECT_EQ(order, (std::vector<int>{0, 0, 0, 0, 2, 0}));
}

TEST(CpuParallel, ComputeFaultBeforeAnyItem)
{
	struct Injected
	{
	};
	std::thread::id caller = std::this_thread::get_id();
	ExecContext ctx;
	ctx.fault.phase = Phase::Compute;
	ctx.fault.at = 1;
	ctx.fault.action = TestFault::Action::Error;
	ctx.inject_fault = [&](const TestFault &) {
		EXPECT_EQ(std::this_thread::get_id(), caller);
		throw Injected();
	};
	std::atomic<int> ran{0};
	EXPECT_THROW(parallel_for(1, ctx, [&](size_t, size_t, const std::atomic<bool> &) { ++ran; }), Injected);
	EXPECT_EQ(ran.load(), 0);
}

TEST(CpuParallel, SplitByCost)
{
	auto unit = [](size_t) { return 1.0; };
	EXPECT_EQ(split_by_cost(0, 2, unit), (std::vector<size_t>{0}));
	EXPECT_EQ(split_by_cost(5, 2, unit), (std::vector<size_t>{0, 2, 4, 5}));
	EXPECT_EQ(split_by_cost(4, 2, unit), (std::vector<size_t>{0, 2, 4}));
	EXPECT_EQ(split_by_cost(3, 100, unit), (std::vector<size_t>{0, 3}));
	/* a costly element ends its range, and is a range of its own after a full one */
	std::vector<double> costs{1, 1, 5, 1, 9, 1};
	EXPECT_EQ(split_by_cost(costs.size(), 2, [&](size_t i) { return costs[i]; }),
			  (std::vector<size_t>{0, 2, 3, 5, 6}));
}

/* parallel_sort gives std::sort's order for a total order, on any thread count and size, slices of any length */
TEST(CpuParallel, ParallelSortAsStdSort)
{
	std::mt19937_64 rng(20261124);
	for (size_t n : {0, 1, 7, 100, 1000, 4097, 100003})
		for (size_t threads : {1, 2, 3, 5, 16})
		{
			SCOPED_TRACE("n " + std::to_string(n) + ", threads " + std::to_string(threads));
			std::vector<std::pair<int, size_t>> v(n); /* few keys (ties), then the index: a total order */
			for (size_t i = 0; i < n; ++i)
				v[i] = {static_cast<int>(rng() % 50), i};
			std::vector<std::pair<int, size_t>> want = v;
			std::sort(want.begin(), want.end());
			ExecContext ctx;
			ctx.cpu_threads = threads;
			parallel_sort(v, ctx, std::less<std::pair<int, size_t>>(), 16);
			EXPECT_EQ(v, want);
		}
}

/*
 * parallel_copy, what the GPU paths stage through: every range where memcpy
 * puts it, nothing around them, whatever the threads and however the
 * ranges fall across the pieces.
 */
TEST(CpuParallel, ParallelCopyAsMemcpy)
{
	std::mt19937_64 rng = seeded_rng();
	const size_t mb = size_t(1) << 20;
	std::vector<std::vector<size_t>> layouts = {
		{0}, {1}, {2 * mb - 1}, {2 * mb}, {9 * mb + 3}, {4 * mb, 4 * mb}, {1, 3 * mb, 0, 5 * mb + 7, 2}};
	for (const std::vector<size_t> &sizes : layouts)
		for (size_t threads : {1, 2, 3, 16})
		{
			size_t total = 0;
			for (size_t bytes : sizes)
				total += bytes;
			SCOPED_TRACE(std::to_string(sizes.size()) + " ranges, " + std::to_string(total) + " bytes, threads " +
						 std::to_string(threads));
			std::vector<uint8_t> from(total), to(total + sizes.size() + 1, 0xA5);
			for (uint8_t &b : from)
				b = static_cast<uint8_t>(rng());
			/* each range lands one byte after the one before ends: the gaps must stay untouched */
			std::vector<gpu::HostCopy> copies;
			size_t at_from = 0, at_to = 1;
			for (size_t bytes : sizes)
			{
				copies.push_back(gpu::HostCopy{to.data() + at_to, from.data() + at_from, bytes});
				at_from += bytes;
				at_to += bytes + 1;
			}
			ExecContext ctx;
			ctx.cpu_threads = threads;
			ctx.host_copy(ctx, copies.data(), copies.size());
			at_from = 0;
			at_to = 1;
			EXPECT_EQ(to[0], 0xA5);
			for (size_t bytes : sizes)
			{
				if (bytes > 0) /* an empty source vector's data() may be null */
					EXPECT_EQ(0, std::memcmp(to.data() + at_to, from.data() + at_from, bytes));
				EXPECT_EQ(to[at_to + bytes], 0xA5) << "the byte after a range";
				at_from += bytes;
				at_to += bytes + 1;
			}
			EXPECT_LE(ctx.cpu_threads_used, threads);
		}
}

/*
 * The threads are kept between calls: once a call has had its workers, a
 * later one with as many starts no thread of its own; and they block every
 * signal, which belong to the backend's own thread.
 */
TEST(CpuParallel, ThreadsAreKeptAndBlockSignals)
{
	ExecContext ctx;
	ctx.cpu_threads = 8;
	std::mutex mutex;
	std::set<std::thread::id> first_call, later_calls;
	std::atomic<int> signals_open{0};
	auto record = [&](std::set<std::thread::id> &into) {
		return [&](size_t, size_t, const std::atomic<bool> &) {
			sigset_t mask;
			pthread_sigmask(SIG_BLOCK, nullptr, &mask);
			for (int signal : {SIGINT, SIGTERM, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGURG})
				signals_open += sigismember(&mask, signal) != 1;
			std::this_thread::sleep_for(std::chrono::microseconds(200));
			std::lock_guard<std::mutex> lock(mutex);
			into.insert(std::this_thread::get_id());
		};
	};
	parallel_for(64, ctx, record(first_call));
	for (int call = 0; call < 20; ++call)
		parallel_for(64, ctx, record(later_calls));
	std::set<std::thread::id> pool = first_call;
	/* other tests ran before this one: any thread they left may serve too, but not a new one per call */
	EXPECT_LE(later_calls.size(), 64u) << "threads are not started anew for each call";
	for (std::thread::id id : later_calls)
		pool.insert(id);
	EXPECT_LE(pool.size(), 64u);
	EXPECT_EQ(signals_open.load(), 0) << "a worker thread left a signal unblocked";
	EXPECT_EQ(later_calls.count(std::this_thread::get_id()), 0u);
}

/* BackgroundWork runs beside the caller, which goes on; wait() and the destructor return once it has run. */
TEST(CpuParallel, BackgroundWorkRunsBesideTheCaller)
{
	std::atomic<bool> caller_went_on{false}, saw_caller_go_on{false}, done{false};
	std::thread::id ran_on;
	{
		BackgroundWork work([&]() noexcept {
			ran_on = std::this_thread::get_id();
			/* proof that it runs beside the caller: it sees what the caller does after starting it */
			for (int i = 0; i < 5000 && !caller_went_on; ++i)
				std::this_thread::sleep_for(std::chrono::milliseconds(1));
			saw_caller_go_on = caller_went_on.load();
			std::this_thread::sleep_for(std::chrono::milliseconds(50));
			done = true;
		});
		caller_went_on = true;
	} /* the destructor waits */
	EXPECT_TRUE(done.load());
	EXPECT_TRUE(saw_caller_go_on.load());
	EXPECT_NE(ran_on, std::this_thread::get_id());

	std::atomic<int> runs{0};
	BackgroundWork twice([&]() noexcept { ++runs; });
	twice.wait();
	twice.wait();
	EXPECT_EQ(runs.load(), 1);
}

} // namespace
} // namespace gpurec
