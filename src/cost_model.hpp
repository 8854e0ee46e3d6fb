/*
 * cost_model.hpp: how gpurec.device = auto chooses, by cost.
 *
 * A call's time on each device is estimated from what the call knows of
 * its work before it computes (WorkShape: units of work, the bytes that
 * would travel to the GPU, whether it splits over GPUs) and what is known
 * of the host (HostProfile: the rate at which columns reach a GPU and a GPU
 * call's fixed cost, both measured once, the GPUs the call may use, the CPU
 * threads it may use).  What one unit of a family's work costs a GPU and a
 * CPU thread are the family's constants (WorkRates, below), taken from the
 * benchmarks: they describe the kernels, which change only with the code,
 * where the host's rates are measured on the host.
 *
 * Plain C++: no PostgreSQL, no CUDA.
 */
#pragma once

#include <cstddef>
#include <string>

namespace gpurec {

/* What auto knows of the host's GPUs, for the call at hand. */
struct HostProfile
{
	/* Host memory to one GPU, bytes a millisecond (the columns' way: staged through pinned memory). */
	double upload_bytes_per_ms = 8e6;
	/* A GPU call's fixed cost: a kernel's launch and synchronisation, and the GPU service's round trip. */
	double call_ms = 0.5;
	/* CUDA's start still to come in this backend (no GPU service, no GPU call yet), ms. */
	double start_ms = 0;
	/* The GPUs a call that splits may use. */
	int gpus = 1;
	/* Whether the figures above were measured on this host (else the defaults above). */
	bool measured = false;
	/* Whether the call's input is first copied into the GPU service's shared memory (on the call's threads). */
	bool through_service = false;
};

/*
 * What one unit of a family's work costs, from the benchmarks (BENCHMARKS.md
 * names the runs): a GPU's time, one CPU thread's, and whether the CPU's
 * work is bound by memory (it stops scaling with threads near
 * kMemoryBoundThreads) or by arithmetic (it scales with every thread).
 */
struct WorkRates
{
	const char *unit; /* "offers", "scores", "point pairs", "carts": for the explanation */
	double gpu_ns;
	double cpu_thread_ns;
	bool cpu_memory_bound;
};

namespace rates {
/* cheapest_offers: H100, compute 0.88 ms for 30.72M offers; each of 16 threads ranks an offer in 34 ns. */
constexpr WorkRates kOffers{"offers", 0.03, 34, false};
/* roc_fitness: H100, compute 9.16 ms for 1e8 scores; a thread sorts and counts a score in about 22 ns. */
constexpr WorkRates kScores{"scores", 0.092, 22, true};
/* user_similarity, similar_users: 7.9e11 point pairs a second on an H100; 1.2e9 a CPU thread (euclidean). */
constexpr WorkRates kPointPairs{"point pairs", 0.00127, 0.84, false};
/* the same under haversine: its trigonometry costs a CPU thread about twice a euclidean pair */
constexpr WorkRates kPointPairsHaversine{"point pairs", 0.0025, 1.7, false};
/* predict_strength, fit_exponent: 9.1e11 strength terms a second on an H100; a CPU thread's pow about 4 ns */
constexpr WorkRates kStrengthTerms{"strength terms", 0.0011, 4, false};
/*
 * optimize_carts' searches: H100, the kernels search 100,000 carts in 136 ms
 * (a thread per cart, its branch and bound diverging from its warp's); 16
 * CPU threads in 109-116 ms.  The CPU's searches walk each cart's candidate
 * arrays and stop scaling with threads: on 64 cores (4x H200) the CPU path
 * took 1,195 ms where the GPU's took 1,061, which searches scaling with
 * every thread (28 ms) could not explain.
 */
constexpr WorkRates kCarts{"carts", 1360, 6300, true};
} // namespace rates

/* A call's work, as it knows it when auto chooses. */
struct WorkShape
{
	WorkRates rates;
	double units = 0;
	/* The bytes that would travel to the GPU. */
	double bytes = 0;
	/* Whether the work splits over every GPU the call may use (through the GPU service). */
	bool splits = false;
};

/* Near this many threads, memory-bound work stops gaining from more (the hosts measured). */
constexpr double kMemoryBoundThreads = 8;

/* A call's estimated time on each device, ms. */
struct CostEstimate
{
	double gpu_ms = 0;
	double cpu_ms = 0;
	size_t cpu_threads = 1;
	int gpus = 1;

	bool gpu_cheaper() const { return gpu_ms < cpu_ms; }
};

CostEstimate estimate_cost(const WorkShape &shape, const HostProfile &host, size_t cpu_threads);

/*
 * How many of at most `most` GPUs work of `shape` is best split over: each
 * part beyond the first costs a call's fixed cost and a copy of the input to
 * its GPU, so work whose computing is small next to its input stays whole
 * (user_similarity: one user's points against all, a copy's worth of work).
 */
int best_parts(const WorkShape &shape, const HostProfile &host, int most);

/*
 * The units of work from which the GPU is estimated cheaper for work like
 * `per_unit` (its bytes: those of one unit; its units ignored), infinite
 * when never: what an input's reading needs to know before the input is
 * there (whether to start CUDA while reading, whether to rank while
 * reading).
 */
double gpu_cheaper_from(const WorkShape &per_unit, const HostProfile &host, size_t cpu_threads);

/* Why auto chose as it did, for gpurec.timing: "auto chose the gpu: about 12 ms there against 40 ms on 16 CPU threads". */
std::string explain_choice(const WorkShape &shape, const CostEstimate &estimate, bool chose_gpu);

} // namespace gpurec
