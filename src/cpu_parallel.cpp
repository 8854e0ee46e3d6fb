/*
 * cpu_parallel.cpp: parallel_for (cpu_parallel.hpp), the worker threads of
 * every CPU path (one pool a backend keeps), and the calling thread's
 * interrupt points while they run.
 */
#include "no_postgres.hpp"

#include "cpu_parallel.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <pthread.h>
#include <thread>

namespace gpurec {

namespace {

/* How long the calling thread waits for the workers between interrupt checks. */
constexpr std::chrono::milliseconds kInterruptCheckInterval(5);

/* One parallel_for's workers: task(w) for every w in [0, n), each on one thread. */
struct Job
{
	std::function<void(size_t)> task; /* catches what it throws */
	size_t n = 0;
	size_t finished = 0; /* guarded by the pool's mutex */
};

/*
 * The threads that run every parallel_for of this process, started as a
 * call first needs them and then kept: a call's threads used to be started
 * and joined for each parallel_for, and appending 15 parallel workers'
 * columns ran 75 of those, 16 threads each, at about 30 us a thread.  A
 * job's workers wait in one queue; there are always as many threads idle as
 * workers queued, so every worker of a job runs at once.  The threads block
 * every signal (PostgreSQL's handlers belong to the backend's thread) and
 * never call PostgreSQL.  The pool is never destroyed: a process ends with
 * its threads waiting, and a joinable std::thread destroyed at exit would
 * abort it.
 */
class ThreadPool
{
  public:
	static ThreadPool &instance()
	{
		static ThreadPool *pool = new ThreadPool;
		return *pool;
	}

	/* Queues job's workers; throws when not even one thread could be started for them. */
	void start(const std::shared_ptr<Job> &job)
	{
		std::lock_guard<std::mutex> lock(mutex_);
		for (size_t w = 0; w < job->n; ++w)
			queue_.emplace_back(job, w);
		try
		{
			while (idle_ < queue_.size())
				add_thread();
		}
		catch (...)
		{
			if (threads_ == 0)
			{
				queue_.erase(std::remove_if(queue_.begin(), queue_.end(), [&job](const auto &slot) { return slot.first == job; }),
							 queue_.end());
				throw;
			}
			/* fewer threads than workers: they run in turn */
		}
		wake_.notify_all();
	}

	/* Whether every worker of job has returned, waiting up to `timeout` for it. */
	bool wait_for(const Job &job, std::chrono::milliseconds timeout)
	{
		std::unique_lock<std::mutex> lock(mutex_);
		return done_.wait_for(lock, timeout, [&job] { return job.finished == job.n; });
	}

  private:
	ThreadPool() = default;

	/* Under mutex_: one more thread, idle, with every signal blocked. */
	void add_thread()
	{
		sigset_t all, previous;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &previous); /* the new thread inherits the mask */
		try
		{
			std::thread([this] { run(); }).detach();
		}
		catch (...)
		{
			pthread_sigmask(SIG_SETMASK, &previous, nullptr);
			throw;
		}
		pthread_sigmask(SIG_SETMASK, &previous, nullptr);
		++threads_;
		++idle_;
	}

	void run()
	{
		std::unique_lock<std::mutex> lock(mutex_);
		for (;;)
		{
			wake_.wait(lock, [this] { return !queue_.empty(); });
			auto [job, worker] = queue_.front();
			queue_.pop_front();
			--idle_;
			lock.unlock();
			job->task(worker);
			lock.lock();
			++idle_;
			if (++job->finished == job->n)
				done_.notify_all();
		}
	}

	std::mutex mutex_;
	std::condition_variable wake_; /* a worker queued */
	std::condition_variable done_; /* a job finished */
	std::deque<std::pair<std::shared_ptr<Job>, size_t>> queue_;
	size_t threads_ = 0;
	size_t idle_ = 0; /* threads waiting for a worker to run */
};

} // namespace

size_t parallel_workers(size_t n, const ExecContext &ctx)
{
	size_t threads = ctx.cpu_threads > 0 ? ctx.cpu_threads : std::max(1u, std::thread::hardware_concurrency());
	return std::min(n, threads);
}

void parallel_for(size_t n, ExecContext &ctx, const ParallelBody &body, Phase phase)
{
	if (n == 0)
		return;
	/* the phase's first interrupt point comes before any work, however short the work is */
	ctx.interrupt_point(phase);
	size_t n_workers = parallel_workers(n, ctx);
	ctx.cpu_threads_used = std::max(ctx.cpu_threads_used, n_workers);
	std::atomic<size_t> next{0};
	std::atomic<bool> cancelled{false};
	std::mutex mutex;
	std::exception_ptr failure; /* the first that a worker threw */

	/* every access to this frame ends before the worker counts as finished, which the wait below sees */
	auto job = std::make_shared<Job>();
	job->n = n_workers;
	job->task = [&](size_t worker) {
		try
		{
			for (size_t i; !cancelled.load(std::memory_order_relaxed) && (i = next++) < n;)
				body(i, worker, cancelled);
		}
		catch (...)
		{
			std::lock_guard<std::mutex> lock(mutex);
			if (!failure)
				failure = std::current_exception();
			cancelled = true;
		}
	};

	ThreadPool &pool = ThreadPool::instance();
	pool.start(job); /* throws only when no worker was queued */
	std::exception_ptr interrupt; /* what the calling thread caught: a cancel */
	while (!pool.wait_for(*job, kInterruptCheckInterval))
	{
		if (interrupt)
			continue;
		try
		{
			ctx.interrupt_point(phase);
		}
		catch (...)
		{
			interrupt = std::current_exception();
			cancelled = true;
		}
	}
	if (interrupt)
		std::rethrow_exception(interrupt);
	if (failure)
		std::rethrow_exception(failure);
}

void parallel_copy(const gpu::HostCopy *copies, size_t n, ExecContext &ctx)
{
	/* pieces of 2 MB at least: a thread started for less costs about what it saves */
	constexpr size_t kPieceBytes = size_t(2) << 20;
	size_t bytes = 0;
	for (size_t i = 0; i < n; ++i)
		bytes += copies[i].bytes;
	size_t pieces = std::min(parallel_workers(std::max<size_t>(1, bytes / kPieceBytes), ctx), bytes / kPieceBytes);
	if (pieces <= 1)
	{
		for (size_t i = 0; i < n; ++i)
			if (copies[i].bytes > 0) /* an empty range may have null ends, which memcpy may not take */
				std::memcpy(copies[i].to, copies[i].from, copies[i].bytes);
		return;
	}
	/* piece p copies bytes [p * per_piece, (p + 1) * per_piece) of the ranges laid end to end */
	size_t per_piece = (bytes + pieces - 1) / pieces;
	parallel_for(
		pieces, ctx,
		[&](size_t piece, size_t, const std::atomic<bool> &) {
			size_t begin = piece * per_piece, end = std::min(bytes, begin + per_piece), at = 0;
			for (size_t i = 0; i < n && at < end; at += copies[i].bytes, ++i)
			{
				size_t from = std::max(begin, at), to = std::min(end, at + copies[i].bytes);
				if (from < to)
					std::memcpy(static_cast<char *>(copies[i].to) + (from - at),
								static_cast<const char *>(copies[i].from) + (from - at), to - from);
			}
		},
		Phase::Transfer);
}

BackgroundWork::BackgroundWork(std::function<void()> work)
{
	auto job = std::make_shared<Job>();
	job->n = 1;
	job->task = [work = std::move(work)](size_t) { work(); };
	try
	{
		ThreadPool::instance().start(job);
		job_ = job;
	}
	catch (...)
	{
		job->task(0);
	}
}

void BackgroundWork::wait() noexcept
{
	if (!job_)
		return;
	const Job &job = *static_cast<const Job *>(job_.get());
	while (!ThreadPool::instance().wait_for(job, std::chrono::milliseconds(1000)))
	{
	}
	job_.reset();
}

PieceRunner pieces_on_threads(ExecContext &ctx, Phase phase)
{
	return [&ctx, phase](size_t pieces, const std::function<void(size_t)> &piece) {
		if (pieces == 1)
			piece(0);
		else
			parallel_for(
				pieces, ctx, [&piece](size_t i, size_t, const std::atomic<bool> &) { piece(i); }, phase);
	};
}

} // namespace gpurec
