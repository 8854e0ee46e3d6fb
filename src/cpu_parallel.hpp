/*
 * cpu_parallel.hpp: the engine's one way to spread CPU work over threads.
 * Every family's CPU path (geo, roc_fitness) runs its items through
 * parallel_for, so that cancellation, failures and the rule "PostgreSQL is
 * called from the backend's thread alone" are handled in one place.
 */
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "column_chunks.hpp"
#include "device.hpp"

namespace gpurec {

/*
 * One item's work: item in [0, n); worker in [0, parallel_workers(n)), the
 * thread that runs it (a worker runs one item at a time, so state kept per
 * worker needs no lock); cancelled turns true when the call was cancelled
 * or another item failed, and long items may poll it to stop early.
 */
using ParallelBody = std::function<void(size_t item, size_t worker, const std::atomic<bool> &cancelled)>;

/*
 * The worker threads parallel_for starts for n items in the call ctx: one
 * per core, or ctx.cpu_threads when it is set, at most one per item.
 */
size_t parallel_workers(size_t n, const ExecContext &ctx);

/*
 * Runs body for every item in [0, n) on parallel_workers(n, ctx) worker threads,
 * which take the items in turn, and returns when all have finished.
 *
 * The calling thread (a backend's own) computes nothing: it calls
 * ctx.interrupt_point(phase) once before the workers start, then
 * waits and calls it again every few milliseconds.  The cancel checks belong to
 * it because PostgreSQL is single-threaded: its interrupt check reads the
 * backend's signal flags and, through pg_call, its error-handling and
 * memory-context state, which belong to the backend's thread; called from a
 * worker it would race with that thread.  So no worker ever calls
 * PostgreSQL, nor anything of ctx: the workers learn of a cancel through
 * `cancelled` and stop after their current item (or sooner, where body
 * polls the flag), and what interrupt_point threw is rethrown once they
 * all have joined.  What body throws stops the other workers the same way
 * and is rethrown on the calling thread after the join (a cancel first);
 * no exception leaves a worker thread.
 */
void parallel_for(size_t n, ExecContext &ctx, const ParallelBody &body, Phase phase = Phase::Compute);

/*
 * Work that one of parallel_for's threads runs while the calling thread
 * goes on (InputTable::release_rows_in_background: the input's memory given
 * back while the result rows are written).  wait(), and the destructor,
 * return once it has run; where no thread could start, it runs at once, on
 * the calling thread.  The work must not throw, nor call PostgreSQL.
 */
class BackgroundWork
{
  public:
	explicit BackgroundWork(std::function<void()> work);
	BackgroundWork(const BackgroundWork &) = delete;
	BackgroundWork &operator=(const BackgroundWork &) = delete;
	~BackgroundWork() { wait(); }
	void wait() noexcept;

  private:
	std::shared_ptr<void> job_; /* null once waited for */
};

/*
 * A PieceRunner (column_chunks.hpp) that runs a column's pieces through
 * parallel_for in ctx, checking for cancel as phase: a column's bulk
 * copies and fills on every core.
 */
PieceRunner pieces_on_threads(ExecContext &ctx, Phase phase);

/*
 * Splits [0, n) into consecutive ranges of about `per_item` units of
 * cost(i) each, for parallel_for: range r is [bounds[r], bounds[r + 1]), so
 * there are bounds.size() - 1 of them (none when n = 0).
 */
template <typename Cost> std::vector<size_t> split_by_cost(size_t n, double per_item, Cost cost)
{
	std::vector<size_t> bounds{0};
	double acc = 0;
	for (size_t i = 0; i < n; ++i)
	{
		acc += cost(i);
		if (acc >= per_item)
		{
			bounds.push_back(i + 1);
			acc = 0;
		}
	}
	if (bounds.back() != n)
		bounds.push_back(n);
	return bounds;
}

/*
 * body(block, worker, i) for every i in [0, n), in blocks of block_size
 * consecutive items on every core; blocks are numbered in order, for state
 * kept per block, and worker is the thread's (parallel_for), for scratch
 * kept per thread.  Cancel is checked as `phase`.
 */
template <typename Body>
void for_each_in_blocks(size_t n, size_t block_size, ExecContext &ctx, Body body, Phase phase = Phase::Compute)
{
	size_t blocks = (n + block_size - 1) / block_size;
	parallel_for(
		blocks, ctx,
		[&](size_t block, size_t worker, const std::atomic<bool> &) {
			size_t last = std::min(n, (block + 1) * block_size);
			for (size_t i = block * block_size; i < last; ++i)
				body(block, worker, i);
		},
		phase);
}

/*
 * A counting sort's placing, on the threads of run: the items 0 .. n - 1
 * in groups (group g the items bounds[g] .. bounds[g + 1] - 1), item i in
 * bucket bucket_of(i) < buckets.  Constructing it counts every group's
 * items of each bucket, the groups at once; starts() then says where each
 * bucket begins, and place(put) calls put(i, position) for every item, the
 * groups at once: positions in bucket order, a bucket's items in the
 * items' order.  bucket_of is called twice an item.
 */
template <typename BucketOf> class BucketPlacement
{
  public:
	BucketPlacement(std::vector<size_t> bounds, size_t buckets, BucketOf bucket_of, const PieceRunner &run)
		: bounds_(std::move(bounds)), buckets_(buckets), bucket_of_(bucket_of), run_(run),
		  next_((bounds_.size() - 1) * buckets, 0), starts_(buckets + 1, 0)
	{
		size_t groups = bounds_.size() - 1;
		run_(groups, [&](size_t g) {
			size_t *count = &next_[g * buckets_];
			for (size_t i = bounds_[g]; i < bounds_[g + 1]; ++i)
				++count[bucket_of_(i)];
		});
		/* a group's count of a bucket becomes where its first item there goes */
		for (size_t b = 0, at = 0; b < buckets_; ++b)
		{
			starts_[b] = at;
			for (size_t g = 0; g < groups; ++g)
				at += std::exchange(next_[g * buckets_ + b], at);
			starts_[b + 1] = at;
		}
	}
	/* buckets + 1 entries: bucket b's items go to starts()[b] .. starts()[b + 1] - 1 */
	const std::vector<size_t> &starts() const { return starts_; }
	template <typename Put> void place(Put put)
	{
		run_(bounds_.size() - 1, [&](size_t g) {
			size_t *next = &next_[g * buckets_];
			for (size_t i = bounds_[g]; i < bounds_[g + 1]; ++i)
				put(i, next[bucket_of_(i)]++);
		});
	}

  private:
	std::vector<size_t> bounds_;
	size_t buckets_;
	BucketOf bucket_of_;
	const PieceRunner &run_;
	std::vector<size_t> next_; /* group g's next position in bucket b at [g * buckets + b] */
	std::vector<size_t> starts_;
};

/*
 * Sorts v by less in `slices` slices sorted at once through run, then
 * merged in pairs, each round's merges at once: where the caller has a
 * PieceRunner (pieces_on_threads).  Fewer than 2 slices: std::sort.  For a
 * total order, the very order std::sort gives.
 */
template <typename Vector, typename Less>
void parallel_sort(Vector &v, size_t slices, const PieceRunner &run, Less less)
{
	size_t n = v.size();
	slices = std::min(slices, n);
	if (slices < 2)
	{
		std::sort(v.begin(), v.end(), less);
		return;
	}
	std::vector<size_t> bounds(slices + 1);
	for (size_t s = 0; s <= slices; ++s)
		bounds[s] = n * s / slices;
	run(slices, [&](size_t s) { std::sort(v.begin() + bounds[s], v.begin() + bounds[s + 1], less); });
	Vector other(n);
	Vector *from = &v, *to = &other;
	while (bounds.size() > 2)
	{
		size_t runs = bounds.size() - 1, pairs = (runs + 1) / 2;
		run(pairs, [&](size_t p) {
			size_t begin = bounds[2 * p], middle = bounds[std::min(2 * p + 1, runs)], end = bounds[std::min(2 * p + 2, runs)];
			std::merge(from->begin() + begin, from->begin() + middle, from->begin() + middle, from->begin() + end,
					   to->begin() + begin, less);
		});
		std::vector<size_t> merged;
		for (size_t i = 0; i < bounds.size(); i += 2)
			merged.push_back(bounds[i]);
		if (merged.back() != n)
			merged.push_back(n);
		bounds.swap(merged);
		std::swap(from, to);
	}
	if (from != &v)
		v.swap(other);
}

/*
 * Sorts v by less on every core of the call ctx (parallel_sort above, a
 * slice a thread).  Below min_slice items a slice, fewer threads.
 */
template <typename T, typename Less>
void parallel_sort(std::vector<T> &v, ExecContext &ctx, Less less, size_t min_slice = size_t(1) << 15)
{
	parallel_sort(v, std::min(parallel_workers(v.size(), ctx), v.size() / min_slice), pieces_on_threads(ctx, Phase::Compute),
				  less);
}

} // namespace gpurec
