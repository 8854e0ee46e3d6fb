/*
 * progress.hpp: how far a call has come, as gpurec.progress shows it to
 * other sessions: its phase, the units of the phase done, and the units in
 * all where they are known ahead.
 *
 * The engine counts; the SQL layer publishes (pg_progress.cpp).  Counting is
 * an atomic add, so that worker threads may count what they finish; they
 * never publish, since publishing writes the backend's slot of shared
 * memory, which is PostgreSQL's: the backend's thread copies the counts
 * there at its interrupt points, between batches.  Nothing here knows of
 * shared memory, and a context that reports nowhere (a unit test, the GPU
 * service, a nested call) counts into nothing.
 */
#pragma once

#include <atomic>
#include <cstdint>

namespace gpurec {

/* The phases gpurec.progress names, in the order a call passes them. */
enum class ProgressPhase : uint8_t
{
	Starting,  /* the arguments, before the first inner query */
	Reading,   /* the inner queries into columns: rows */
	Indexing,  /* what a family builds from its input before computing (geo: each user's points) */
	Computing, /* the family's own work, in its own unit (users, offers, carts, examples) */
	Writing	   /* the result rows: rows */
};

/* The counts of one call: written by the engine, read by the backend's thread to publish. */
class Progress
{
  public:
	static constexpr uint64_t kUnknown = UINT64_MAX;

	/* The backend's thread: `phase` begins, none of its `unit`s (a string literal) done yet. */
	void begin(ProgressPhase phase, const char *unit, uint64_t total = kUnknown)
	{
		done_.store(0, std::memory_order_relaxed);
		total_.store(total, std::memory_order_relaxed);
		unit_.store(unit, std::memory_order_relaxed);
		phase_.store(phase, std::memory_order_relaxed);
	}
	/* Any thread: n more units done. */
	void add(uint64_t n) { done_.fetch_add(n, std::memory_order_relaxed); }
	/* The backend's thread: done is at least n. */
	void reach(uint64_t n)
	{
		if (done_.load(std::memory_order_relaxed) < n)
			done_.store(n, std::memory_order_relaxed);
	}

	ProgressPhase phase() const { return phase_.load(std::memory_order_relaxed); }
	const char *unit() const { return unit_.load(std::memory_order_relaxed); }
	uint64_t done() const { return done_.load(std::memory_order_relaxed); }
	uint64_t total() const { return total_.load(std::memory_order_relaxed); }

  private:
	std::atomic<ProgressPhase> phase_{ProgressPhase::Starting};
	std::atomic<const char *> unit_{""};
	std::atomic<uint64_t> done_{0};
	std::atomic<uint64_t> total_{kUnknown};
};

/*
 * What an ExecContext counts into: the backend's Progress while the call
 * reports, else nothing.  Copies of a context count into the same one.
 */
class ProgressReport
{
  public:
	ProgressReport() = default;
	explicit ProgressReport(Progress *to) : to_(to) {}

	void begin(ProgressPhase phase, const char *unit, uint64_t total = Progress::kUnknown)
	{
		if (to_)
			to_->begin(phase, unit, total);
	}
	void add(uint64_t n)
	{
		if (to_)
			to_->add(n);
	}
	void reach(uint64_t n)
	{
		if (to_)
			to_->reach(n);
	}
	/* ProgressPhase::Starting where the call reports nowhere */
	ProgressPhase phase() const { return to_ ? to_->phase() : ProgressPhase::Starting; }
	uint64_t done() const { return to_ ? to_->done() : 0; }

  private:
	Progress *to_ = nullptr;
};

} // namespace gpurec
