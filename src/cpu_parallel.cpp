/*
 * cpu_parallel.cpp: parallel_for (cpu_parallel.hpp), the worker threads of
 * every CPU path, and the calling thread's interrupt points while they run.
 */
#include "no_postgres.hpp"

#include "cpu_parallel.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

namespace gpurec {

namespace {

/* How long the calling thread waits for the workers between interrupt checks. */
constexpr std::chrono::milliseconds kInterruptCheckInterval(5);

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
	std::condition_variable finished;
	size_t running = n_workers;
	std::exception_ptr failure; /* the first that a worker threw */

	auto work = [&](size_t worker) {
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
		std::lock_guard<std::mutex> lock(mutex);
		if (--running == 0)
			finished.notify_all();
	};

	std::vector<std::thread> threads;
	std::exception_ptr interrupt; /* what the calling thread caught: a cancel, or no thread to start */
	try
	{
		for (size_t t = 0; t < n_workers; ++t)
			threads.emplace_back(work, t);
	}
	catch (...)
	{
		/* could not start a thread: stop those that run, then report */
		interrupt = std::current_exception();
		cancelled = true;
		std::lock_guard<std::mutex> lock(mutex);
		running -= n_workers - threads.size();
	}
	for (;;)
	{
		{
			std::unique_lock<std::mutex> lock(mutex);
			if (running == 0)
				break;
			finished.wait_for(lock, kInterruptCheckInterval);
			if (running == 0)
				break;
		}
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
	for (std::thread &t : threads)
		t.join();
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
