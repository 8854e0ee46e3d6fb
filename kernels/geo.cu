/*
 * geo.cu: the geospatial recommender on the GPU.
 *
 * All three computations are brute force over point pairs in double
 * precision, arranged so that one side of each pair sits in registers and
 * the other streams past every thread of a warp at once (a uniform load:
 * one transaction feeds 32 threads):
 *
 *   similarity to a main user   a thread per other user B, B's points in
 *                               registers; the main user's points stream
 *                               (a warp per user too large for registers,
 *                               the main user's points in its lanes).
 *   best others of every user   a thread per user A, A's points in
 *                               registers with a running minimum each;
 *                               every other user's points stream.  Each
 *                               thread keeps a heap of its k best in global
 *                               memory, touched only when a user enters.
 *   strengths of candidates     a thread per 4 candidates and slice of
 *                               points; the slice's points stream.
 *   best others, bounded        a warp per user A: its lanes rule others
 *                               out by boxes around their points, then
 *                               compare 32 of those left at once, A's
 *                               points in every lane's registers.
 *
 * Register tiles are compiled for 4, 8, ..., 32 points (16 under
 * haversine, whose pairs hold three values per point); users are sorted by
 * point count so that a warp shares one tile size, and larger users go
 * through in chunks.  The arithmetic is geo_arithmetic.hpp's, in the same
 * order as on the CPU, so results match the CPU bit for bit.
 *
 * Work goes in launches of a few tens of milliseconds, with an interrupt
 * check between them.
 */
#include <algorithm>
#include <memory>
#include <numeric>

#include <cub/device/device_radix_sort.cuh>

#include "api/geo_kernels.hpp"
#include "cuda_util.cuh"

namespace gpurec::gpu {

namespace {

/* The metric as a template argument, so that each kernel is compiled for one. */
enum class Metric
{
	Euclidean,
	Haversine
};

constexpr int kTileStep = 4;
constexpr int kEuclideanMaxTile = 32;
constexpr int kHaversineMaxTile = 16;
constexpr int kBlock = 128;
constexpr int kCandidatesPerThread = 4;

/* Pair evaluations per launch: ~30 ms at the euclidean rate; haversine pairs cost ~12x. */
constexpr double kEuclideanPairsPerLaunch = 4e10;
constexpr double kHaversinePairsPerLaunch = 3e9;

/* Users per batch of a pruned best-others search, at most: lists of a few thousand others each fit well. */
constexpr int32_t kListedBatch = 16384;

/*
 * The threads the current device holds at once, at most: what the bounded
 * search's batches of warps are measured in.
 */
double resident_threads()
{
	int device = 0, sms = 0, per_sm = 0;
	check(cudaGetDevice(&device), "cudaGetDevice");
	check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
	check(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device), "cudaDeviceGetAttribute");
	return static_cast<double>(sms) * per_sm;
}

struct DevicePoints
{
	const double *__restrict__ x;
	const double *__restrict__ y;
	const double *__restrict__ cos_lat;
	const int64_t *__restrict__ offsets;
};

template <Metric M>
__device__ __forceinline__ double point_key(double ax, double ay, double ac, double bx, double by,
											double bc)
{
	if constexpr (M == Metric::Euclidean)
		return geo::euclidean_key(ax, ay, bx, by);
	else
		return geo::haversine_key(ax, ay, ac, bx, by, bc);
}

/* Loads point p: x, y and, under haversine, cos(latitude). */
template <Metric M>
__device__ __forceinline__ void load_point(const DevicePoints &pts, long long p, double &x, double &y,
										   double &c)
{
	x = __ldg(pts.x + p);
	y = __ldg(pts.y + p);
	c = M == Metric::Haversine ? __ldg(pts.cos_lat + p) : 0.0;
}

/*
 * mn[j]: the least key from register point j (ax, ay, ac) to the points
 * [p0, p1), which stream past in order.
 */
template <Metric M, int N>
__device__ __forceinline__ void nearest_keys(const DevicePoints &pts, long long p0, long long p1,
											 const double (&ax)[N], const double (&ay)[N],
											 const double (&ac)[N], double (&mn)[N])
{
#pragma unroll
	for (int j = 0; j < N; ++j)
		mn[j] = INFINITY;
	for (long long p = p0; p < p1; ++p)
	{
		double bx, by, bc;
		load_point<M>(pts, p, bx, by, bc);
#pragma unroll
		for (int j = 0; j < N; ++j)
			mn[j] = geo::lesser(mn[j], point_key<M>(ax[j], ay[j], ac[j], bx, by, bc));
	}
}

/*
 * floored[u], raw[u] for the users of the list with at most R points each:
 * over the main user's points in order, the distance to u's nearest point.
 * u's points sit in registers, padded with copies of its last point (which
 * change no minimum).
 */
template <Metric M, int R>
__global__ void __launch_bounds__(kBlock)
	similarity_to_main(DevicePoints pts, long long main_begin, long long main_end,
					   const int32_t *__restrict__ users, int n, double epsilon, double *floored,
					   double *raw)
{
	int t = blockIdx.x * blockDim.x + threadIdx.x;
	if (t >= n)
		return;
	int32_t u = users[t];
	long long b0 = pts.offsets[u], nb = pts.offsets[u + 1] - b0;
	double bx[R], by[R], bc[R];
#pragma unroll
	for (int j = 0; j < R; ++j)
		load_point<M>(pts, b0 + (j < nb ? j : nb - 1), bx[j], by[j], bc[j]);

	double f = 0.0, r = 0.0;
	for (long long a = main_begin; a < main_end; ++a)
	{
		double ax, ay, ac;
		load_point<M>(pts, a, ax, ay, ac);
		/* four independent chains of minima: the minimum is exact in any order */
		double best[4] = {INFINITY, INFINITY, INFINITY, INFINITY};
#pragma unroll
		for (int j = 0; j < R; ++j)
			best[j % 4] = geo::lesser(best[j % 4], point_key<M>(ax, ay, ac, bx[j], by[j], bc[j]));
		double d = geo::key_distance(
			M == Metric::Haversine, geo::lesser(geo::lesser(best[0], best[1]), geo::lesser(best[2], best[3])));
		f = geo::add(f, geo::greater(d, epsilon));
		r = geo::add(r, d);
	}
	floored[u] = f;
	raw[u] = r;
}

/*
 * The same for users too large for a register tile: a warp per user.  Lane
 * l holds main points l, l + 32, ... (kWarpTile of them at a time) with a
 * running minimum each, while the user's points stream past the whole warp;
 * then every lane adds the distances up in main-point order, fetching each
 * from the lane that holds it, as the CPU does.
 */
constexpr int kWarpTile = 4;

template <Metric M>
__global__ void __launch_bounds__(kBlock)
	similarity_to_main_warp(DevicePoints pts, long long main_begin, long long main_end,
							const int32_t *__restrict__ users, int n, double epsilon,
							double *floored, double *raw)
{
	int warp = static_cast<int>((blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) / 32);
	int lane = threadIdx.x % 32;
	if (warp >= n)
		return; /* the whole warp */
	int32_t u = users[warp];
	long long b0 = pts.offsets[u], b1 = pts.offsets[u + 1];
	long long n_main = main_end - main_begin;
	double f = 0.0, r = 0.0;
	for (long long c0 = 0; c0 < n_main; c0 += 32 * kWarpTile)
	{
		double ax[kWarpTile], ay[kWarpTile], ac[kWarpTile], mn[kWarpTile];
#pragma unroll
		for (int t = 0; t < kWarpTile; ++t)
		{
			long long i = min(c0 + t * 32 + lane, n_main - 1);
			load_point<M>(pts, main_begin + i, ax[t], ay[t], ac[t]);
		}
		nearest_keys<M>(pts, b0, b1, ax, ay, ac, mn);
#pragma unroll
		for (int t = 0; t < kWarpTile; ++t)
		{
			double d = geo::key_distance(M == Metric::Haversine, mn[t]);
			for (int l = 0; l < 32 && c0 + t * 32 + l < n_main; ++l)
			{
				double dl = __shfl_sync(0xffffffffu, d, l);
				f = geo::add(f, geo::greater(dl, epsilon));
				r = geo::add(r, dl);
			}
		}
	}
	if (lane == 0)
	{
		floored[u] = f;
		raw[u] = r;
	}
}

/* The others that a best-others thread compares: users [begin, end), or a list of them. */
struct OtherRange
{
	int32_t begin, end;
	__device__ long long count() const { return end - begin; }
	__device__ int32_t operator[](long long i) const { return begin + static_cast<int32_t>(i); }
};
struct OtherList
{
	const int32_t *__restrict__ others;
	long long n;
	__device__ long long count() const { return n; }
	__device__ int32_t operator[](long long i) const { return __ldg(others + i); }
};

/*
 * User a's points in registers, R at a time (all of them when it has at
 * most R), and its floored sum against another user: over a's points in
 * order, the distance to b's nearest point floored at epsilon, added up as
 * on the CPU.  b's points stream past, each against every register point.
 */
template <Metric M, int R>
struct RegisterUser
{
	long long a0, na;
	bool one_chunk;
	double ax[R], ay[R], ac[R];

	__device__ __forceinline__ RegisterUser(const DevicePoints &pts, int32_t a)
		: a0(pts.offsets[a]), na(pts.offsets[a + 1] - a0), one_chunk(na <= R)
	{
		if (one_chunk)
			load_chunk(pts, 0);
	}

	/* a's points [c0, c0 + R), padded with copies of its last (which change no minimum) */
	__device__ __forceinline__ void load_chunk(const DevicePoints &pts, long long c0)
	{
		long long last = min(na - c0, static_cast<long long>(R)) - 1;
#pragma unroll
		for (int j = 0; j < R; ++j)
			load_point<M>(pts, a0 + c0 + (j < last ? j : last), ax[j], ay[j], ac[j]);
	}

	__device__ __forceinline__ double floored_sum(const DevicePoints &pts, int32_t b, double epsilon)
	{
		long long p0 = __ldg(pts.offsets + b), p1 = __ldg(pts.offsets + b + 1);
		double f = 0.0;
		for (long long c0 = 0; c0 < na; c0 += R)
		{
			if (!one_chunk)
				load_chunk(pts, c0);
			double mn[R];
			nearest_keys<M>(pts, p0, p1, ax, ay, ac, mn);
#pragma unroll
			for (int j = 0; j < R; ++j)
				if (c0 + j < na)
					f = geo::add(f, geo::greater(geo::key_distance(M == Metric::Haversine, mn[j]), epsilon));
		}
		return f;
	}
};

/*
 * Offers user a's heap (of `size` entries) each of `others` but a itself,
 * with its similarity to a.
 */
template <Metric M, int R, typename Others>
__device__ __forceinline__ void rank_others(const DevicePoints &pts, const int64_t *__restrict__ ids, int32_t a,
											Others others, double epsilon, int k, SimilarityEntry *heap, int &size)
{
	RegisterUser<M, R> user(pts, a);
	SimilarityEntry worst = size == k ? heap[0] : SimilarityEntry{0, 0}; /* the root, once full */
	for (long long i = 0; i < others.count(); ++i)
	{
		int32_t b = others[i];
		if (b == a)
			continue;
		SimilarityEntry e{geo::similarity_of(user.na, user.floored_sum(pts, b, epsilon)), __ldg(ids + b)};
		if (size < k || geo::better(e, worst))
		{
			geo::heap_offer(heap, size, k, e);
			if (size == k)
				worst = heap[0];
		}
	}
}

/*
 * Best others: thread t of column blockIdx.y keeps, for user a = users[t],
 * the k most similar among the other users [b_begin, b_end) of its column,
 * in heaps[(column * n + t) * k ...] with sizes[column * n + t].
 */
template <Metric M, int R>
__global__ void __launch_bounds__(kBlock)
	best_others(DevicePoints pts, const int64_t *__restrict__ ids,
				const int32_t *__restrict__ users, int n, int32_t first_b, int32_t column_width,
				int32_t n_users, double epsilon, int k, SimilarityEntry *heaps, int *sizes)
{
	int t = blockIdx.x * blockDim.x + threadIdx.x;
	if (t >= n)
		return;
	int32_t b_begin = first_b + static_cast<int32_t>(blockIdx.y) * column_width;
	int32_t b_end = min(n_users, b_begin + column_width);
	if (b_begin >= b_end)
		return;
	size_t slot = static_cast<size_t>(blockIdx.y) * n + t;
	int size = sizes[slot];
	rank_others<M, R>(pts, ids, users[t], OtherRange{b_begin, b_end}, epsilon, k, heaps + slot * k, size);
	sizes[slot] = size;
}

/*
 * The k best of user t's columns' heaps (best_others) into merged[t * k
 * ...], with merged_sizes[t]: offered column by column, each heap in its
 * order, as the host merged them before, so the heap is the same entry for
 * entry.  Only the merged heaps then travel to the host.
 */
__global__ void __launch_bounds__(kBlock)
	merge_columns(const SimilarityEntry *__restrict__ heaps, const int *__restrict__ sizes, int n, int columns, int k,
				  SimilarityEntry *merged, int *merged_sizes)
{
	int t = blockIdx.x * blockDim.x + threadIdx.x;
	if (t >= n)
		return;
	SimilarityEntry *heap = merged + static_cast<size_t>(t) * k;
	int size = 0;
	for (int column = 0; column < columns; ++column)
	{
		size_t slot = static_cast<size_t>(column) * n + t;
		for (int i = 0; i < sizes[slot]; ++i)
			geo::heap_offer(heap, size, k, heaps[slot * k + i]);
	}
	merged_sizes[t] = size;
}

/*
 * Best others among listed ones (a pruned similar_users): thread t keeps,
 * for user a = users[t], the k most similar of others[offsets[t],
 * offsets[t + 1]) in heaps[t * k ...] with sizes[t].
 */
template <Metric M, int R>
__global__ void __launch_bounds__(kBlock)
	best_listed_others(DevicePoints pts, const int64_t *__restrict__ ids, const int32_t *__restrict__ users, int n,
					   const int64_t *__restrict__ offsets, const int32_t *__restrict__ others, double epsilon, int k,
					   SimilarityEntry *heaps, int *sizes)
{
	int t = blockIdx.x * blockDim.x + threadIdx.x;
	if (t >= n)
		return;
	int size = 0;
	rank_others<M, R>(pts, ids, users[t], OtherList{others + offsets[t], offsets[t + 1] - offsets[t]}, epsilon, k,
					  heaps + static_cast<size_t>(t) * k, size);
	sizes[t] = size;
}

/* ---- the bounded search: users' boxes ------------------------------------- */

/* A user's points go into at most this many boxes: a box per place (city) it goes. */
constexpr int kUserBoxes = 4;

/* Points' box: x (longitude) and y (latitude) from the least to the greatest. */
struct Box
{
	double x_lo, x_hi, y_lo, y_hi;
};

/*
 * Every user's boxes, box[u * kUserBoxes + j] for j < count[u], with
 * points[...] of u's points in each and, under haversine, cos_lo[...] the
 * least cos(latitude) of them.  And every box again as an entry, in the
 * order of a Morton code of its centre (entry_slot: its u * kUserBoxes +
 * j), so that boxes near each other are near in that order; the entries in
 * tiles of 32 with the box around each tile's (tile_box), and home_entry[u]
 * the entry of u's main box (its box of most points, the first of them).
 */
struct UserBoxes
{
	const Box *__restrict__ box;
	const double *__restrict__ cos_lo;
	const int32_t *__restrict__ points;
	const int32_t *__restrict__ count;
	const Box *__restrict__ entry_box;
	const double *__restrict__ entry_cos;
	const int32_t *__restrict__ entry_slot;
	long long entries;
	const Box *__restrict__ tile_box;
	const double *__restrict__ tile_cos;
	long long tiles;
	const int32_t *__restrict__ home_entry;
};

/* Entries per tile of UserBoxes: a warp's lanes. */
constexpr int kTileEntries = 32;

/*
 * What the service's queue asks for the boxes (geo_kernels.hpp) covers a
 * user's share of UserBoxes: its slots, as many entries, its count and
 * home_entry, and its entries' share of the tiles.
 */
static_assert(kBoundedBytesPerUser >=
				  2 * kUserBoxes * static_cast<int64_t>(sizeof(Box) + sizeof(double) + sizeof(int32_t)) +
					  2 * static_cast<int64_t>(sizeof(int32_t)) +
					  (kUserBoxes * static_cast<int64_t>(sizeof(Box) + sizeof(double)) + kTileEntries - 1) / kTileEntries,
			  "kBoundedBytesPerUser must cover a user's share of UserBoxes");

__device__ __forceinline__ Box load_box(const Box *box)
{
	return Box{__ldg(&box->x_lo), __ldg(&box->x_hi), __ldg(&box->y_lo), __ldg(&box->y_hi)};
}

/*
 * The bounds are lowered by this share before they rule a user out, so
 * that rounding can never lift one above the sum the comparison computes
 * (their arithmetic differs from point_key's and key_distance's, each
 * within a few ulps).
 */
constexpr double kBoundMargin = 1.0 - 1e-9;

/*
 * A lower bound of the square of the distance between any point of box a
 * and any point of box b: euclidean, from the gaps between them;
 * great-circle, from the least latitude and (circular) longitude gaps,
 * with sin(t) >= 2t/pi for t in [0, pi/2] and asin(s) >= s, so that
 * d >= 2R sqrt(h) >= 2R sqrt((dlat/180)^2 + cos_a cos_b (dlon/180)^2) in
 * degrees, cos_a and cos_b the least cos(latitude) of each box's points.
 */
template <Metric M>
__device__ __forceinline__ double box_gap_square(const Box &a, double a_cos, const Box &b, double b_cos)
{
	double dy = fmax(fmax(b.y_lo - a.y_hi, a.y_lo - b.y_hi), 0.0);
	if constexpr (M == Metric::Euclidean)
	{
		double dx = fmax(fmax(b.x_lo - a.x_hi, a.x_lo - b.x_hi), 0.0);
		return dx * dx + dy * dy;
	}
	else
	{
		double dx = 0.0; /* around the circle, whichever way is shorter */
		if (b.x_lo > a.x_hi)
			dx = fmin(b.x_lo - a.x_hi, a.x_lo + 360.0 - b.x_hi);
		else if (a.x_lo > b.x_hi)
			dx = fmin(a.x_lo - b.x_hi, b.x_lo + 360.0 - a.x_hi);
		double h = (dy / 180.0) * (dy / 180.0) + a_cos * b_cos * ((dx / 180.0) * (dx / 180.0));
		return 4.0 * geo::kEarthRadius * geo::kEarthRadius * h;
	}
}

/* cos_lo of a box slot where the metric needs it (haversine); 0 for euclidean, never loaded. */
template <Metric M>
__device__ __forceinline__ double box_cos(const double *cos_lo, long long slot)
{
	return M == Metric::Haversine ? __ldg(cos_lo + slot) : 0.0;
}

/*
 * Whether a box of `points` points whose squared gap from another user's
 * points is at least gap_square bounds the floored sum above `over`: its
 * term alone, lowered by the margin, squared on both sides.
 */
__device__ __forceinline__ bool term_over(double points, double gap_square, double epsilon, double over)
{
	double over_square = (over / kBoundMargin) * (over / kBoundMargin);
	return points * points * fmax(gap_square, epsilon * epsilon) > over_square;
}

/* A user's boxes, in registers: unused ones repeat the first and count no points. */
template <Metric M>
struct RegisterBoxes
{
	Box box[kUserBoxes];
	double cos_lo[kUserBoxes], points[kUserBoxes];
	/* the first box of the most points, chosen once (index_boxes' home entries too): a register array takes no index known only at run time */
	Box main_box;
	double main_cos, main_points;

	__device__ __forceinline__ RegisterBoxes(const UserBoxes &boxes, int32_t u)
	{
		int n = boxes.count[u];
#pragma unroll
		for (int i = 0; i < kUserBoxes; ++i)
		{
			int slot = u * kUserBoxes + (i < n ? i : 0);
			box[i] = boxes.box[slot];
			cos_lo[i] = M == Metric::Haversine ? boxes.cos_lo[slot] : 0.0;
			points[i] = i < n ? boxes.points[slot] : 0.0;
		}
		main_box = box[0], main_cos = cos_lo[0], main_points = points[0];
#pragma unroll
		for (int i = 1; i < kUserBoxes; ++i)
			if (points[i] > main_points)
				main_box = box[i], main_cos = cos_lo[i], main_points = points[i];
	}

	/* The square of the least gap from the main box to `other`. */
	__device__ __forceinline__ double main_gap_square(const Box &other, double other_cos) const
	{
		return box_gap_square<M>(main_box, main_cos, other, other_cos);
	}

	/*
	 * Whether a user with a box at gap_square from the main box, and none
	 * nearer, has a floored sum whose bound (the main box's term alone),
	 * lowered by the margin, exceeds `over`.
	 */
	__device__ __forceinline__ bool main_term_over(double gap_square, double epsilon, double over) const
	{
		return term_over(main_points, gap_square, epsilon, over);
	}

	/*
	 * Whether entry (b, j) is the one that lists b: the first of b's boxes
	 * at the least gap from the main box.  Each other thus comes up once,
	 * and where any of its boxes is near enough, that one is.
	 */
	__device__ __forceinline__ bool lists_its_user(const UserBoxes &boxes, int32_t b, int j, double gap_square) const
	{
		int n = __ldg(boxes.count + b);
		for (int other = 0; other < n; ++other)
		{
			if (other == j)
				continue;
			int slot = b * kUserBoxes + other;
			double g = main_gap_square(load_box(boxes.box + slot), box_cos<M>(boxes.cos_lo, slot));
			if (g < gap_square || (g == gap_square && other < j))
				return false;
		}
		return true;
	}

	/*
	 * Whether user b's floored sum to these boxes' user, lowered by the
	 * margin, exceeds `over` (so that b's similarity is below the heap's
	 * worst): each of the user's points is at least its box's gap from
	 * b's nearest box, so the boxes' floored gaps, times their points,
	 * bound the sum from below.  First each box's term alone, squared (one
	 * term above the bound is enough), then their sum.
	 */
	__device__ __forceinline__ bool rule_out(const UserBoxes &boxes, int32_t b, double epsilon, double over) const
	{
		double least[kUserBoxes];
#pragma unroll
		for (int i = 0; i < kUserBoxes; ++i)
			least[i] = INFINITY;
		int n = __ldg(boxes.count + b);
		for (int j = 0; j < n; ++j)
		{
			int slot = b * kUserBoxes + j;
			Box other = load_box(boxes.box + slot);
			double other_cos = box_cos<M>(boxes.cos_lo, slot);
#pragma unroll
			for (int i = 0; i < kUserBoxes; ++i)
				least[i] = fmin(least[i], box_gap_square<M>(box[i], cos_lo[i], other, other_cos));
		}
#pragma unroll
		for (int i = 0; i < kUserBoxes; ++i)
			if (term_over(points[i], least[i], epsilon, over))
				return true;
		double sum = 0.0;
#pragma unroll
		for (int i = 0; i < kUserBoxes; ++i)
			sum += points[i] * fmax(sqrt(least[i]), epsilon);
		return sum * kBoundMargin > over;
	}
};

/* extents[block]: the least and greatest x and y of the points that the grid's block `block` visits. */
__global__ void __launch_bounds__(kBlock) point_extents(const double *__restrict__ x, const double *__restrict__ y,
														long long n, Box *extents)
{
	Box e{INFINITY, -INFINITY, INFINITY, -INFINITY};
	for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
		 i += static_cast<long long>(gridDim.x) * blockDim.x)
	{
		e.x_lo = fmin(e.x_lo, x[i]);
		e.x_hi = fmax(e.x_hi, x[i]);
		e.y_lo = fmin(e.y_lo, y[i]);
		e.y_hi = fmax(e.y_hi, y[i]);
	}
	for (int offset = 16; offset > 0; offset /= 2)
	{
		e.x_lo = fmin(e.x_lo, __shfl_down_sync(0xffffffffu, e.x_lo, offset));
		e.x_hi = fmax(e.x_hi, __shfl_down_sync(0xffffffffu, e.x_hi, offset));
		e.y_lo = fmin(e.y_lo, __shfl_down_sync(0xffffffffu, e.y_lo, offset));
		e.y_hi = fmax(e.y_hi, __shfl_down_sync(0xffffffffu, e.y_hi, offset));
	}
	__shared__ Box warps[kBlock / 32];
	if (threadIdx.x % 32 == 0)
		warps[threadIdx.x / 32] = e;
	__syncthreads();
	if (threadIdx.x != 0)
		return;
	for (int w = 1; w < kBlock / 32; ++w)
	{
		e.x_lo = fmin(e.x_lo, warps[w].x_lo);
		e.x_hi = fmax(e.x_hi, warps[w].x_hi);
		e.y_lo = fmin(e.y_lo, warps[w].y_lo);
		e.y_hi = fmax(e.y_hi, warps[w].y_hi);
	}
	extents[blockIdx.x] = e;
}

/*
 * Groups each user's points into boxes: a point joins the first box whose
 * first point lies within reach_x and reach_y of it, else opens a box while
 * there are fewer than kUserBoxes, else joins the box whose first point is
 * nearest.  Any grouping gives true bounds; this one gives a user a box
 * per city it goes to.
 */
template <Metric M>
__global__ void group_boxes(DevicePoints pts, int32_t n_users, double reach_x, double reach_y, Box *box,
							double *cos_lo, int32_t *points, int32_t *count)
{
	for (int32_t u = blockIdx.x * blockDim.x + threadIdx.x; u < n_users; u += gridDim.x * blockDim.x)
	{
		Box b[kUserBoxes];
		double first_x[kUserBoxes], first_y[kUserBoxes], c[kUserBoxes];
		int32_t in[kUserBoxes];
		int n = 0;
		for (long long p = pts.offsets[u]; p < pts.offsets[u + 1]; ++p)
		{
			double x, y, cl;
			load_point<M>(pts, p, x, y, cl);
			int j = -1;
			for (int i = 0; i < n && j < 0; ++i)
				if (fabs(x - first_x[i]) <= reach_x && fabs(y - first_y[i]) <= reach_y)
					j = i;
			if (j < 0 && n < kUserBoxes)
			{
				j = n++;
				first_x[j] = x, first_y[j] = y;
				b[j] = Box{x, x, y, y};
				c[j] = cl;
				in[j] = 0;
			}
			if (j < 0)
			{
				j = 0;
				double nearest = INFINITY;
				for (int i = 0; i < n; ++i)
				{
					double dx = (x - first_x[i]) / reach_x, dy = (y - first_y[i]) / reach_y;
					if (dx * dx + dy * dy < nearest)
						nearest = dx * dx + dy * dy, j = i;
				}
			}
			b[j] = Box{fmin(b[j].x_lo, x), fmax(b[j].x_hi, x), fmin(b[j].y_lo, y), fmax(b[j].y_hi, y)};
			c[j] = fmin(c[j], cl);
			++in[j];
		}
		for (int j = 0; j < n; ++j)
		{
			box[u * kUserBoxes + j] = b[j];
			cos_lo[u * kUserBoxes + j] = c[j];
			points[u * kUserBoxes + j] = in[j];
		}
		count[u] = n;
	}
}

/*
 * Best others bounded by the users' boxes: warp t keeps, for user
 * a = users[t], the k (at most kMostBoundedOthers) most similar of all
 * other users in heaps[t * k ...] with sizes[t].  The warp goes through the
 * tiles of boxes outwards from the one of a's main box, so that its heap
 * soon holds near users: a tile too far from a's main box rules out its 32
 * boxes at once; in the others, each lane takes a box, and the users that
 * may still enter the heap (by a's main box, then by all of a's boxes
 * against all of theirs) queue until the warp's 32 lanes compare 32 of
 * them point by point at once.  compared: the point pairs compared, added
 * up.
 */
template <Metric M, int R>
__global__ void __launch_bounds__(kBlock)
	best_others_bounded(DevicePoints pts, const int64_t *__restrict__ ids, const int32_t *__restrict__ users, int n,
						UserBoxes boxes, double epsilon, int k, SimilarityEntry *heaps, int *sizes,
						unsigned long long *compared)
{
	constexpr int kWarps = kBlock / 32;
	constexpr unsigned kAll = 0xffffffffu;
	__shared__ SimilarityEntry heap_of[kWarps][kMostBoundedOthers];
	__shared__ int32_t queue_of[kWarps][64];
	int w = threadIdx.x / 32, lane = threadIdx.x % 32;
	int t = blockIdx.x * kWarps + w;
	if (t >= n)
		return; /* the whole warp */
	SimilarityEntry *heap = heap_of[w];
	int32_t *queue = queue_of[w];
	int32_t a = users[t];
	RegisterUser<M, R> user(pts, a);
	RegisterBoxes<M> a_boxes(boxes, a);
	int size = 0;
	SimilarityEntry worst{0, 0};
	double over = INFINITY; /* once the heap is full: the floored sum of its worst */
	unsigned long long pairs = 0;

	/* lanes [0, m) compare queue[lane] with a; who enters the heap enters in lane order */
	auto compare_queued = [&](int m) {
		SimilarityEntry e{0, 0};
		bool enters = false;
		if (lane < m)
		{
			int32_t b = queue[lane];
			e = SimilarityEntry{geo::similarity_of(user.na, user.floored_sum(pts, b, epsilon)), __ldg(ids + b)};
			pairs += static_cast<unsigned long long>(user.na * (__ldg(pts.offsets + b + 1) - __ldg(pts.offsets + b)));
			enters = size < k || geo::better(e, worst);
		}
		for (unsigned entering = __ballot_sync(kAll, enters); entering; entering &= entering - 1)
		{
			int from = __ffs(entering) - 1;
			SimilarityEntry offered{__shfl_sync(kAll, e.similarity, from), __shfl_sync(kAll, e.user_id, from)};
			if (size == k && !geo::better(offered, worst))
				continue;
			if (lane == 0)
				geo::heap_offer(heap, size, k, offered);
			else if (size < k)
				++size;
			__syncwarp();
			if (size == k)
			{
				worst = heap[0];
				over = static_cast<double>(user.na) / worst.similarity;
			}
			__syncwarp();
		}
	};

	/* who may enter the heap queues; 32 queued, the lanes compare them */
	int queued = 0;
	auto queue_listed = [&](bool listed, int32_t b) {
		unsigned listing = __ballot_sync(kAll, listed);
		if (listed)
			queue[queued + __popc(listing & ((1u << lane) - 1))] = b;
		queued += __popc(listing);
		__syncwarp();
		if (queued >= 32)
		{
			compare_queued(32);
			__syncwarp();
			if (lane < queued - 32)
				queue[lane] = queue[32 + lane];
			queued -= 32;
			__syncwarp();
		}
	};

	/*
	 * The tiles outwards from the one of a's main box: tiles home, home + 1,
	 * home - 1, home + 2, ..., around the circle of tiles; a lane tests one
	 * tile's box, then the warp goes through the tiles not ruled out, a lane
	 * an entry.
	 */
	long long home = boxes.home_entry[a] / kTileEntries;
	for (long long s0 = 0; s0 < boxes.tiles; s0 += 32)
	{
		long long step = s0 + lane, tile = 0;
		bool near = false;
		if (step < boxes.tiles)
		{
			long long out = (step + 1) >> 1;
			tile = ((step & 1) ? home + out : home - out) % boxes.tiles;
			tile += tile < 0 ? boxes.tiles : 0;
			near = size < k ||
				   !a_boxes.main_term_over(
					   a_boxes.main_gap_square(load_box(boxes.tile_box + tile), box_cos<M>(boxes.tile_cos, tile)),
					   epsilon, over);
		}
		for (unsigned nears = __ballot_sync(kAll, near); nears; nears &= nears - 1)
		{
			long long e = __shfl_sync(kAll, tile, __ffs(nears) - 1) * kTileEntries + lane;
			bool listed = false;
			int32_t b = 0;
			if (e < boxes.entries)
			{
				int32_t slot = __ldg(boxes.entry_slot + e);
				b = slot / kUserBoxes;
				double gap = a_boxes.main_gap_square(load_box(boxes.entry_box + e), box_cos<M>(boxes.entry_cos, e));
				listed = b != a && (size < k || !a_boxes.main_term_over(gap, epsilon, over)) &&
						 a_boxes.lists_its_user(boxes, b, slot % kUserBoxes, gap) &&
						 (size < k || !a_boxes.rule_out(boxes, b, epsilon, over));
			}
			queue_listed(listed, b);
		}
	}
	if (queued > 0)
		compare_queued(queued);
	__syncwarp();
	for (int j = lane; j < size; j += 32)
		heaps[static_cast<size_t>(t) * k + j] = heap[j];
	for (int offset = 16; offset > 0; offset /= 2)
		pairs += __shfl_down_sync(kAll, pairs, offset);
	if (lane == 0)
	{
		sizes[t] = size;
		atomicAdd(compared, pairs);
	}
}

/* The weight of each point: its user's similarity to the main user, or 0. */
__global__ void point_weights(const int64_t *__restrict__ offsets, int32_t n_users,
							  int32_t main_user, long long main_points, double min_similarity,
							  const double *__restrict__ floored, double *w)
{
	for (int32_t u = blockIdx.x * blockDim.x + threadIdx.x; u < n_users;
		 u += gridDim.x * blockDim.x)
	{
		double sim = geo::similarity_of(main_points, floored[u]);
		if (u == main_user || !(sim >= min_similarity))
			sim = 0.0;
		for (long long p = offsets[u]; p < offsets[u + 1]; ++p)
			w[p] = sim;
	}
}

struct DeviceCandidates
{
	const double *__restrict__ x;
	const double *__restrict__ y;
	const double *__restrict__ cos_lat;
	int n;
};

/*
 * Slice sums of strengths: block (bx, s) handles slice first_slice + s for
 * kBlock * kCandidatesPerThread candidates; each thread sums its candidates'
 * groups as geo_kernels.hpp orders them and writes
 * partial[s * n_candidates + c].
 */
template <Metric M, bool kSquare, bool kFilter>
__global__ void __launch_bounds__(kBlock)
	strength_slices(DevicePoints pts, const double *__restrict__ w, long long n_points,
					long long first_slice, DeviceCandidates cands, StrengthParams sp,
					PowerPlan power, double *partial)
{
	sp.haversine = M == Metric::Haversine; /* constants, so that the compiler drops the other branches */
	sp.has_max_distance = kFilter;
	long long p_begin = (first_slice + blockIdx.y) * static_cast<long long>(kStrengthSlice);
	long long p_end = min(n_points, p_begin + static_cast<long long>(kStrengthSlice));
	int first_c = blockIdx.x * (kBlock * kCandidatesPerThread) + threadIdx.x;
	double cx[kCandidatesPerThread], cy[kCandidatesPerThread], cc[kCandidatesPerThread];
#pragma unroll
	for (int j = 0; j < kCandidatesPerThread; ++j)
	{
		int c = min(first_c + j * kBlock, cands.n - 1);
		cx[j] = cands.x[c];
		cy[j] = cands.y[c];
		cc[j] = M == Metric::Haversine ? cands.cos_lat[c] : 0.0;
	}
	auto denominator = [&](double px, double py, double pc, int j) {
		double base = geo::strength_base(sp, px, py, pc, cx[j], cy[j], cc[j]);
		return kSquare || base < 0 ? base : geo::raise(base, power);
	};

	double slice_sum[kCandidatesPerThread];
#pragma unroll
	for (int j = 0; j < kCandidatesPerThread; ++j)
		slice_sum[j] = 0.0;
	for (long long g0 = p_begin, g1; g0 < p_end; g0 = g1)
	{
		g1 = geo::group_end(w, g0, p_end);
		double weight = __ldg(w + g0);
		if (weight == 0.0)
			continue;
		geo::GroupFraction group[kCandidatesPerThread];
		for (long long p = g0; p < g1; ++p)
		{
			double px, py, pc;
			load_point<M>(pts, p, px, py, pc);
#pragma unroll
			for (int j = 0; j < kCandidatesPerThread; ++j)
			{
				double g = denominator(px, py, pc, j);
				if (!kFilter || g >= 0)
					group[j].add_term(g);
			}
		}
#pragma unroll
		for (int j = 0; j < kCandidatesPerThread; ++j)
		{
			double sum = 0.0;
			if (group[j].fallback_needed())
			{
				for (long long p = g0; p < g1; ++p)
				{
					double px, py, pc;
					load_point<M>(pts, p, px, py, pc);
					double g = denominator(px, py, pc, j);
					if (g >= 0)
						sum = geo::add(sum, geo::div(1.0, g));
				}
			}
			else if (!group[j].empty())
				sum = group[j].value();
			slice_sum[j] = geo::add(slice_sum[j], geo::mul(weight, sum));
		}
	}
#pragma unroll
	for (int j = 0; j < kCandidatesPerThread; ++j)
	{
		int c = first_c + j * kBlock;
		if (c < cands.n)
			partial[static_cast<size_t>(blockIdx.y) * cands.n + c] = slice_sum[j];
	}
}

/* total[c] += partial[s][c] for the launch's slices, in slice order. */
__global__ void add_slices(const double *__restrict__ partial, int n_slices, int n, double *total)
{
	for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < n; c += gridDim.x * blockDim.x)
	{
		double sum = total[c];
		for (int s = 0; s < n_slices; ++s)
			sum = geo::add(sum, partial[static_cast<size_t>(s) * n + c]);
		total[c] = sum;
	}
}

/* ---- the reach index under max_distance (geo_reach.hpp) ------------------ */

/* cell[p]: the grid cell of point p. */
__global__ void reach_cells(const double *__restrict__ x, const double *__restrict__ y, long long n, ReachGrid grid,
							uint32_t *cell)
{
	for (long long p = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; p < n;
		 p += static_cast<long long>(gridDim.x) * blockDim.x)
		cell[p] = grid.everywhere ? 0u : static_cast<uint32_t>(reach_cell(grid, x[p], y[p]));
}

/* count[c]: the points of cell c. */
__global__ void count_cells(const uint32_t *__restrict__ cell, long long n, unsigned *count)
{
	for (long long p = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; p < n;
		 p += static_cast<long long>(gridDim.x) * blockDim.x)
		atomicAdd(count + cell[p], 1u);
}

/* The entries in cell order: each one's coordinates from its point, and later its weight. */
template <Metric M>
__global__ void gather_entries(const uint32_t *__restrict__ point, long long n, DevicePoints pts, double *x,
							   double *y, double *cos_lat)
{
	for (long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; e < n;
		 e += static_cast<long long>(gridDim.x) * blockDim.x)
	{
		uint32_t p = point[e];
		x[e] = pts.x[p];
		y[e] = pts.y[p];
		if (M == Metric::Haversine)
			cos_lat[e] = pts.cos_lat[p];
	}
}

__global__ void gather_weights(const uint32_t *__restrict__ point, long long n, const double *__restrict__ w,
							   double *entry_w)
{
	for (long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; e < n;
		 e += static_cast<long long>(gridDim.x) * blockDim.x)
		entry_w[e] = w[point[e]];
}

/*
 * A slab of a launch: candidates first .. first + count of its group's
 * order, each with every piece of the group; its units (piece p of
 * candidate j) are unit_base + p * count + j, its candidates cand_base + j,
 * both counted from the launch's start.
 */
struct ReachSlab
{
	long long unit_base;
	long long cand_base;
	int64_t group;
	int64_t first;
	int64_t count;
};

/* The plan on the device. */
struct DevicePlan
{
	const uint32_t *__restrict__ order;
	const int64_t *__restrict__ group_begin;
	const int64_t *__restrict__ piece_begin;
	const int64_t *__restrict__ piece_first;
	const int64_t *__restrict__ piece_last;
};

/* The last slab whose base (unit_base or cand_base, by `field`) is at most t. */
template <typename Field>
__device__ __forceinline__ int slab_of(const ReachSlab *slabs, int n_slabs, long long t, Field field)
{
	int lo = 0, hi = n_slabs - 1;
	while (lo < hi)
	{
		int mid = (lo + hi + 1) / 2;
		if (field(slabs[mid]) <= t)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* partial[t]: unit t's piece sum (geo_reach.hpp's reach_piece_sum, as the CPU's). */
template <Metric M>
__global__ void __launch_bounds__(kBlock)
	reach_pieces(ReachEntries entries, DevicePlan plan, const ReachSlab *__restrict__ slabs, int n_slabs,
				 long long n_units, DeviceCandidates cands, StrengthParams sp, PowerPlan power, double *partial)
{
	sp.haversine = M == Metric::Haversine;
	for (long long t = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; t < n_units;
		 t += static_cast<long long>(gridDim.x) * blockDim.x)
	{
		const ReachSlab &s = slabs[slab_of(slabs, n_slabs, t, [](const ReachSlab &x) { return x.unit_base; })];
		long long local = t - s.unit_base;
		int64_t piece = plan.piece_begin[s.group] + local / s.count;
		uint32_t c = plan.order[plan.group_begin[s.group] + s.first + local % s.count];
		partial[t] = reach_piece_sum(entries, plan.piece_first[piece], plan.piece_last[piece], sp, power,
									 cands.x[c], cands.y[c], M == Metric::Haversine ? cands.cos_lat[c] : 0.0);
	}
}

/* total[c]: the sum of candidate c's piece sums in piece order, for the launch's candidates. */
__global__ void reach_totals(DevicePlan plan, const ReachSlab *__restrict__ slabs, int n_slabs, long long n_cands,
							 const double *__restrict__ partial, double *total)
{
	for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n_cands;
		 i += static_cast<long long>(gridDim.x) * blockDim.x)
	{
		const ReachSlab &s = slabs[slab_of(slabs, n_slabs, i, [](const ReachSlab &x) { return x.cand_base; })];
		long long j = i - s.cand_base;
		int64_t pieces = plan.piece_begin[s.group + 1] - plan.piece_begin[s.group];
		double sum = 0.0;
		for (int64_t p = 0; p < pieces; ++p)
			sum = geo::add(sum, partial[s.unit_base + p * s.count + j]);
		total[plan.order[plan.group_begin[s.group] + s.first + j]] = sum;
	}
}

/* order[i] = i */
__global__ void fill_rows(uint32_t *order, long long n)
{
	for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
		 i += static_cast<long long>(gridDim.x) * blockDim.x)
		order[i] = static_cast<uint32_t>(i);
}

/* One pass's keys of the points' sort: the key of row rows[i]'s coordinate, or its user code. */
__global__ void coordinate_keys(const uint32_t *__restrict__ rows, const double *__restrict__ coordinate,
								long long n, uint64_t *keys)
{
	for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
		 i += static_cast<long long>(gridDim.x) * blockDim.x)
		keys[i] = geo::point_order_key(coordinate[rows[i]]);
}

__global__ void code_keys(const uint32_t *__restrict__ rows, const uint32_t *__restrict__ codes, long long n,
						  uint32_t *keys)
{
	for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
		 i += static_cast<long long>(gridDim.x) * blockDim.x)
		keys[i] = codes[rows[i]];
}

/* The points in CSR order: input row order[i] goes to position i. */
template <Metric M>
__global__ void gather_points(const uint32_t *__restrict__ order, const double *__restrict__ in_x,
							  const double *__restrict__ in_y, long long n, double *x, double *y,
							  double *cos_lat)
{
	for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
		 i += static_cast<long long>(gridDim.x) * blockDim.x)
	{
		uint32_t row = order[i];
		x[i] = in_x[row];
		y[i] = in_y[row];
		if (M == Metric::Haversine)
			cos_lat[i] = geo::cos_latitude(in_y[row]);
	}
}

unsigned blocks_for(size_t n, unsigned block = kBlock)
{
	return static_cast<unsigned>(std::max<size_t>(1, (n + block - 1) / block));
}

/*
 * The blocks of `kernel` (of kBlock threads) the current device holds at
 * once: its multiprocessors times what the kernel's registers leave each.
 */
template <typename Kernel> int64_t resident_blocks(Kernel kernel)
{
	int device = 0, sms = 0, per_sm = 0;
	check(cudaGetDevice(&device), "cudaGetDevice");
	check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
	check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kBlock, 0),
		  "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
	return static_cast<int64_t>(sms) * std::max(1, per_sm);
}

/*
 * The columns (1 to 64) of a best-others launch whose users take `blocks`
 * blocks: enough to fill the device (`resident` blocks at once), then the
 * fewest whose blocks come within 5% of whole waves of `resident`, else
 * the nearest.  Every block of a class does the same work, so a launch's
 * last, partial wave takes as long as a full one: a quarter of 100,000
 * users in 2.04 waves took the time of 3 (an H200, a call split over 4).
 */
int columns_in_whole_waves(int64_t blocks, int64_t resident)
{
	auto fill = static_cast<int>(std::clamp<int64_t>((resident + blocks - 1) / blocks, 1, 64));
	int best = fill;
	double best_share = 0;
	for (int columns = fill; columns <= 64; ++columns)
	{
		double waves = static_cast<double>(blocks * columns) / static_cast<double>(resident);
		double share = waves / std::ceil(waves); /* of the waves' time spent working */
		if (share > best_share + 1e-9)
		{
			best = columns;
			best_share = share;
		}
		if (share >= 0.95)
			break;
	}
	return best;
}

template <typename T>
void upload(DeviceBuffer<T> &to, const T *from, size_t n, cudaStream_t stream, CallContext &ctx)
{
	if (n)
		upload_staged(to.get(), from, n * sizeof(T), stream, ctx);
}

template <typename T, typename Vector>
void upload(DeviceBuffer<T> &to, const Vector &from, cudaStream_t stream, CallContext &ctx)
{
	upload(to, from.data(), from.size(), stream, ctx);
}


template <typename T> void download(std::vector<T> &to, const DeviceBuffer<T> &from, size_t n,
									cudaStream_t stream)
{
	to.resize(n);
	if (n)
		check(cudaMemcpyAsync(to.data(), from.get(), n * sizeof(T), cudaMemcpyDeviceToHost, stream),
			  "cudaMemcpyAsync");
}

} // namespace

namespace {

template <Metric M> constexpr int kMaxTile =
	M == Metric::Euclidean ? kEuclideanMaxTile : kHaversineMaxTile;

/* Calls launch(std::integral_constant<int, tile>()) for a tile compiled for metric M. */
template <Metric M, int R = kTileStep, typename Launch> void with_tile(int tile, Launch launch)
{
	if constexpr (R <= kMaxTile<M>)
	{
		if (tile == R)
			launch(std::integral_constant<int, R>());
		else
			with_tile<M, R + kTileStep>(tile, launch);
	}
	else
		throw Failure(Failure::Kind::Internal, "no geo kernel for tiles of " + std::to_string(tile));
}

/* Calls launch(std::integral_constant<Metric, metric>()). */
template <typename Launch> void with_metric(Metric metric, Launch launch)
{
	if (metric == Metric::Euclidean)
		launch(std::integral_constant<Metric, Metric::Euclidean>());
	else
		launch(std::integral_constant<Metric, Metric::Haversine>());
}

template <bool kValue> using Flag = std::integral_constant<bool, kValue>;

/* Calls launch(Flag<a>(), Flag<b>()). */
template <typename Launch> void with_flags(bool a, bool b, Launch launch)
{
	if (a && b)
		launch(Flag<true>(), Flag<true>());
	else if (a)
		launch(Flag<true>(), Flag<false>());
	else if (b)
		launch(Flag<false>(), Flag<true>());
	else
		launch(Flag<false>(), Flag<false>());
}

} // namespace

/*
 * The points on the device, grouped per user as GeoPointSet groups them,
 * and the users in order of point count, split into tile classes: class i
 * holds the users with at most (i + 1) * kTileStep points (more than the
 * previous class); the last class holds the users larger than the largest
 * tile.
 */
class GeoSession
{
  public:
	GeoSession(const GeoPointColumns &points, const GeoCandidateColumns *candidates, CallContext &ctx)
		: ctx_(ctx), metric_(points.haversine ? Metric::Haversine : Metric::Euclidean), n_users_(points.users),
		  n_points_(static_cast<int64_t>(points.user_codes.rows)),
		  max_tile_(metric_ == Metric::Euclidean ? kEuclideanMaxTile : kHaversineMaxTile),
		  x_(n_points_, ctx), y_(n_points_, ctx),
		  cos_lat_(metric_ == Metric::Haversine ? n_points_ : 0, ctx), offsets_(n_users_ + 1, ctx),
		  ids_(n_users_, ctx), by_count_(n_users_, ctx), floored_(n_users_, ctx), raw_(n_users_, ctx)
	{
		if (n_points_ > static_cast<int64_t>(UINT32_MAX))
			throw Failure(Failure::Kind::TooLarge, "too many points for the GPU in one call");
		const int64_t *counts = points.points_per_user;
		offsets_host_.assign(n_users_ + 1, 0);
		std::partial_sum(counts, counts + n_users_, offsets_host_.begin() + 1);
		sort_users_by_count(counts);

		EventTimer transfer(stream_);
		upload(offsets_, offsets_host_, stream_, ctx_);
		upload(ids_, points.user_ids, n_users_, stream_, ctx_);
		upload(by_count_, by_count_host_, stream_, ctx_);
		group_on_device(points);
		if (candidates)
		{
			n_candidates_ = static_cast<int>(candidates->count);
			size_t n_cos = candidates->cos_lat ? candidates->count : 0;
			cand_x_ = DeviceBuffer<double>(n_candidates_, ctx);
			cand_y_ = DeviceBuffer<double>(n_candidates_, ctx);
			cand_cos_ = DeviceBuffer<double>(n_cos, ctx);
			upload(cand_x_, candidates->x, candidates->count, stream_, ctx_);
			upload(cand_y_, candidates->y, candidates->count, stream_, ctx_);
			upload(cand_cos_, candidates->cos_lat, n_cos, stream_, ctx_);
			cand_host_x_.assign(candidates->x, candidates->x + candidates->count);
			cand_host_y_.assign(candidates->y, candidates->y + candidates->count);
		}
		ctx.times.transfer_ms += transfer.stop_ms();
		ctx.interrupt_point(Phase::Transfer);
	}

	void similarity_sums(int32_t main_user, double epsilon);
	/* from by_count_ position `from` of class first_class on, where a bounded search gave up */
	void similar_users(int k, double epsilon, int part, int parts, std::vector<SimilarityEntry> &heaps,
					   std::vector<int32_t> &sizes, size_t first_class = 0, int32_t from = 0);
	void similar_users_listed(int k, double epsilon, int part, int parts, GeoOtherLists &lists,
							  std::vector<SimilarityEntry> &heaps, std::vector<int32_t> &sizes, double &pairs);
	bool similar_users_bounded(int k, double epsilon, int part, int parts, bool give_up,
							   std::vector<SimilarityEntry> &heaps, std::vector<int32_t> &sizes, double &pairs,
							   double &all_pairs);
	std::vector<std::vector<double>> strengths(int32_t main_user, double min_similarity,
											   const StrengthParams &params,
											   const std::vector<PowerPlan> &powers, const ReachGrid *reach);
	void download_sums(std::vector<double> &floored, std::vector<double> &raw)
	{
		EventTimer transfer(stream_);
		download(floored, floored_, n_users_, stream_);
		download(raw, raw_, n_users_, stream_);
		ctx_.times.transfer_ms += transfer.stop_ms();
	}

  private:
	/* The reach index and its plan (geo_reach.hpp), on the device. */
	struct ReachIndex
	{
		ReachGrid grid;
		ReachPlan plan;
		DeviceBuffer<double> x, y, cos_lat, w;
		DeviceBuffer<uint32_t> point, order;
		DeviceBuffer<int64_t> group_begin, piece_begin, piece_first, piece_last;
		/* the launches: slabs [launch_slab[l], launch_slab[l + 1]), with so many units and candidates */
		DeviceBuffer<ReachSlab> slabs;
		std::vector<int> launch_slab{0};
		std::vector<long long> launch_units, launch_cands;
		long long most_units = 0;

		DevicePlan device_plan() const
		{
			return {order.get(), group_begin.get(), piece_begin.get(), piece_first.get(), piece_last.get()};
		}
	};
	void build_reach(const ReachGrid &grid);
	void strengths_in_reach(const StrengthParams &params, const PowerPlan &power, const double *w, double *total);

	/*
	 * by_count_host_: the users by point count (a counting sort, stable),
	 * class_begin_ and count_prefix_ over that order.
	 */
	void sort_users_by_count(const int64_t *counts)
	{
		constexpr int64_t kCap = 1 << 16; /* larger users share the last key */
		std::vector<int64_t> start(kCap + 2, 0);
		for (int32_t u = 0; u < n_users_; ++u)
			++start[std::min(counts[u], kCap) + 1];
		std::partial_sum(start.begin(), start.end(), start.begin());
		by_count_host_.resize(n_users_);
		/* each position's count as it is placed: the passes below then read in order, not counts at random */
		count_prefix_.assign(n_users_ + 1, 0);
		for (int32_t u = 0; u < n_users_; ++u)
		{
			int64_t at = start[std::min(counts[u], kCap)]++;
			by_count_host_[at] = u;
			count_prefix_[at + 1] = counts[u];
		}

		int n_classes = max_tile_ / kTileStep + 1;
		class_begin_.assign(n_classes + 1, n_users_);
		for (int32_t i = n_users_ - 1; i >= 0; --i)
			class_begin_[class_of(count_prefix_[i + 1])] = i;
		for (int c = n_classes - 1; c >= 0; --c)
			class_begin_[c] = std::min(class_begin_[c], class_begin_[c + 1]);
		std::partial_sum(count_prefix_.begin(), count_prefix_.end(), count_prefix_.begin());
	}

	/*
	 * Copies the input columns as they are, in any row order, then sorts the
	 * rows by user code (ascending ids) and, within a user, by (x, y) in
	 * point order, as the CPU path's grouping does: three stable radix
	 * sorts, by y's key, then x's, then the code.  Then gathers x, y (and
	 * cos(latitude)) in that order.
	 */
	void group_on_device(const GeoPointColumns &points)
	{
		size_t n = static_cast<size_t>(n_points_);
		if (n == 0)
			return;
		auto count = static_cast<int64_t>(n);
		DeviceBuffer<uint32_t> rows(n, ctx_), order(n, ctx_);
		{
			DeviceBuffer<double> in_x(n, ctx_), in_y(n, ctx_);
			DeviceBuffer<uint32_t> codes(n, ctx_);
			upload_staged(reinterpret_cast<int32_t *>(codes.get()), points.user_codes, 0, n, stream_, ctx_);
			upload_staged(in_x.get(), points.x, 0, n, stream_, ctx_);
			upload_staged(in_y.get(), points.y, 0, n, stream_, ctx_);
			int code_bits = 1;
			while (code_bits < 32 && (uint64_t(1) << code_bits) < static_cast<uint64_t>(n_users_))
				++code_bits;
			{
				DeviceBuffer<uint64_t> keys(n, ctx_), sorted_keys(n, ctx_);
				size_t temp_bytes = 0, code_temp_bytes = 0;
				check(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys.get(), sorted_keys.get(), rows.get(),
													  order.get(), count, 0, 64, stream_),
					  "cub::DeviceRadixSort");
				check(cub::DeviceRadixSort::SortPairs(nullptr, code_temp_bytes, codes.get(), codes.get(), rows.get(),
													  order.get(), count, 0, code_bits, stream_),
					  "cub::DeviceRadixSort");
				temp_bytes = std::max(temp_bytes, code_temp_bytes);
				DeviceBuffer<char> temp(temp_bytes, ctx_);
				fill_rows<<<grid_for(n), 256, 0, stream_>>>(rows.get(), static_cast<long long>(n));
				check_launch("fill_rows");
				/* y's keys, then x's: after the second sort, order holds the rows by (x, y) */
				const double *coordinates[2] = {in_y.get(), in_x.get()};
				for (const double *coordinate : coordinates)
				{
					coordinate_keys<<<grid_for(n), 256, 0, stream_>>>(rows.get(), coordinate,
																	 static_cast<long long>(n), keys.get());
					check_launch("coordinate_keys");
					check(cub::DeviceRadixSort::SortPairs(temp.get(), temp_bytes, keys.get(), sorted_keys.get(),
														  rows.get(), order.get(), count, 0, 64, stream_),
						  "cub::DeviceRadixSort");
					std::swap(rows, order);
				}
				/* rows holds them by (x, y): the codes last, stable, so each user's stay so */
				auto *code_of_row = reinterpret_cast<uint32_t *>(keys.get());
				auto *sorted_codes = reinterpret_cast<uint32_t *>(sorted_keys.get());
				code_keys<<<grid_for(n), 256, 0, stream_>>>(rows.get(), codes.get(), static_cast<long long>(n),
															code_of_row);
				check_launch("code_keys");
				check(cub::DeviceRadixSort::SortPairs(temp.get(), temp_bytes, code_of_row, sorted_codes, rows.get(),
													  order.get(), count, 0, code_bits, stream_),
					  "cub::DeviceRadixSort");
			}
			with_metric(metric_, [&](auto metric) {
				gather_points<decltype(metric)::value><<<grid_for(n), 256, 0, stream_>>>(
					order.get(), in_x.get(), in_y.get(), static_cast<long long>(n), x_.get(), y_.get(),
					cos_lat_.get());
			});
			check_launch("gather_points");
			stream_.synchronize(); /* before the input buffers go */
		}
	}

	/* Part `part` of `parts`'s share of tile class c (geo_kernels.hpp): by_count_ positions [first, second). */
	std::pair<int32_t, int32_t> part_of_class(size_t c, int part, int parts) const
	{
		int64_t whole_lo = class_begin_[c], span = class_begin_[c + 1] - whole_lo;
		return {static_cast<int32_t>(whole_lo + span * part / parts),
				static_cast<int32_t>(whole_lo + span * (part + 1) / parts)};
	}
	/* The register tile of the best-others kernels for class c: the last class's users go through in chunks of the largest. */
	int best_others_tile(size_t c) const
	{
		return c + 2 == class_begin_.size() ? max_tile_ : static_cast<int>(c + 1) * kTileStep;
	}
	int class_of(int64_t count) const
	{
		if (count > max_tile_)
			return max_tile_ / kTileStep;
		return static_cast<int>(std::max<int64_t>(count - 1, 0) / kTileStep);
	}
	DevicePoints device_points() const
	{
		return {x_.get(), y_.get(), cos_lat_.get(), offsets_.get()};
	}
	double pairs_per_launch() const
	{
		return metric_ == Metric::Euclidean ? kEuclideanPairsPerLaunch
													  : kHaversinePairsPerLaunch;
	}
	size_t free_bytes() const
	{
		size_t free_b = 0, total_b = 0;
		check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
		if (ctx_.gpu_memory_budget)
			free_b = std::min(free_b, ctx_.gpu_memory_budget);
		return free_b;
	}
	/* Waits for the queued launches and lets a cancel through. */
	void between_launches()
	{
		stream_.synchronize();
		ctx_.interrupt_point(Phase::Compute);
	}

	CallContext &ctx_;
	Metric metric_;
	int32_t n_users_;
	int64_t n_points_;
	int max_tile_;
	Stream stream_;
	DeviceBuffer<double> x_, y_, cos_lat_;
	DeviceBuffer<int64_t> offsets_, ids_;
	DeviceBuffer<int32_t> by_count_;
	DeviceBuffer<double> floored_, raw_;
	std::vector<int64_t> offsets_host_;
	std::vector<int32_t> by_count_host_;
	std::vector<int32_t> class_begin_;
	std::vector<int64_t> count_prefix_;
	int n_candidates_ = 0;
	DeviceBuffer<double> cand_x_, cand_y_, cand_cos_;
	std::vector<double> cand_host_x_, cand_host_y_;
	std::unique_ptr<ReachIndex> reach_;

	/* The users' boxes of the bounded search (UserBoxes), made once per session. */
	struct BoxIndex
	{
		DeviceBuffer<Box> box, entry_box, tile_box;
		DeviceBuffer<double> cos_lo, entry_cos, tile_cos;
		DeviceBuffer<int32_t> points, count, entry_slot, home_entry;

		UserBoxes view() const
		{
			return {box.get(),
					cos_lo.get(),
					points.get(),
					count.get(),
					entry_box.get(),
					entry_cos.get(),
					entry_slot.get(),
					static_cast<long long>(entry_slot.size()),
					tile_box.get(),
					tile_cos.get(),
					static_cast<long long>(tile_box.size()),
					home_entry.get()};
		}
	};
	/* The users' boxes as group_boxes makes them, downloaded, and the extent of every point. */
	struct GroupedBoxes
	{
		std::unique_ptr<BoxIndex> index; /* its box, cos_lo, points and count */
		Box whole;
		std::vector<Box> box;
		std::vector<double> cos_lo;
		std::vector<int32_t> points, count;
	};
	GroupedBoxes group_user_boxes();
	static bool boxes_cover_the_map(const GroupedBoxes &grouped);
	void index_boxes(GroupedBoxes grouped);
	std::unique_ptr<BoxIndex> boxes_;
	/* Every point pair of the part's users from by_count_ position `from` of class first_class on. */
	double pairs_of_part(int part, int parts, size_t first_class = 0, int32_t from = 0) const;
};

void GeoSessionDeleter::operator()(GeoSession *session) const noexcept { delete session; }


void GeoSession::similarity_sums(int32_t main_user, double epsilon)
{
	long long main_begin = offsets_host_[main_user], main_end = offsets_host_[main_user + 1];
	double main_points = static_cast<double>(main_end - main_begin);
	EventTimer compute(stream_);
	for (size_t c = 0; c + 1 < class_begin_.size(); ++c)
	{
		/* the class's users in launches of about pairs_per_launch() pairs */
		int tile = c + 2 == class_begin_.size() ? 0 : static_cast<int>(c + 1) * kTileStep;
		for (int32_t lo = class_begin_[c]; lo < class_begin_[c + 1];)
		{
			int32_t hi = lo + 1;
			while (hi < class_begin_[c + 1] &&
				   main_points * static_cast<double>(count_prefix_[hi + 1] - count_prefix_[lo]) <=
					   pairs_per_launch())
				++hi;
			int n = hi - lo;
			with_metric(metric_, [&](auto metric) {
				constexpr Metric M = decltype(metric)::value;
				DevicePoints pts = device_points();
				const int32_t *users = by_count_.get() + lo;
				if (tile == 0)
					similarity_to_main_warp<M><<<blocks_for(static_cast<size_t>(n) * 32), kBlock, 0,
												 stream_>>>(pts, main_begin, main_end, users, n, epsilon,
															floored_.get(), raw_.get());
				else
					with_tile<M>(tile, [&](auto r) {
						similarity_to_main<M, decltype(r)::value><<<blocks_for(n), kBlock, 0, stream_>>>(
							pts, main_begin, main_end, users, n, epsilon, floored_.get(), raw_.get());
					});
				check_launch("similarity_to_main");
			});
			between_launches();
			lo = hi;
		}
	}
	ctx_.times.compute_ms += compute.stop_ms();
}

void GeoSession::similar_users(int k, double epsilon, int part, int parts, std::vector<SimilarityEntry> &heaps,
							   std::vector<int32_t> &sizes, size_t first_class, int32_t from)
{
	heaps.assign(static_cast<size_t>(n_users_) * k, SimilarityEntry{0, 0});
	sizes.assign(n_users_, 0);
	double total_points = static_cast<double>(n_points_);
	double mean_points = total_points / std::max(1, n_users_);

	for (size_t c = first_class; c + 1 < class_begin_.size(); ++c)
	{
		auto [class_lo, class_hi] = part_of_class(c, part, parts);
		class_lo = std::max(class_lo, from);
		if (class_lo >= class_hi)
			continue;
		int tile = best_others_tile(c);
		/* pairs a user of this class evaluates per point of another user */
		double pairs_per_point =
			c + 2 == class_begin_.size()
				? static_cast<double>(count_prefix_[class_hi] - count_prefix_[class_lo]) /
					  (class_hi - class_lo)
				: tile;

		/*
		 * Users of the class in batches whose heaps fit; few users get several
		 * columns, each searching its own share of the other users, merged
		 * below.
		 */
		size_t entry_bytes = sizeof(SimilarityEntry) * static_cast<size_t>(k) + sizeof(int);
		size_t budget = free_bytes() / 2;
		int64_t resident = 0;
		with_metric(metric_, [&](auto metric) {
			constexpr Metric M = decltype(metric)::value;
			with_tile<M>(tile, [&](auto r) { resident = resident_blocks(best_others<M, decltype(r)::value>); });
		});
		for (int32_t lo = class_lo; lo < class_hi;)
		{
			int columns = columns_in_whole_waves(blocks_for(class_hi - lo), resident);
			int32_t n = static_cast<int32_t>(std::min<size_t>(
				class_hi - lo, std::max<size_t>(1, budget / (entry_bytes * columns))));
			if (static_cast<size_t>(n) * columns * entry_bytes > budget)
				columns = 1;
			DeviceBuffer<SimilarityEntry> d_heaps(static_cast<size_t>(n) * columns * k, ctx_);
			DeviceBuffer<int> d_sizes(static_cast<size_t>(n) * columns, ctx_);
			check(cudaMemsetAsync(d_sizes.get(), 0, d_sizes.size() * sizeof(int), stream_),
				  "cudaMemsetAsync");

			/* other users in launches: each column takes column_width of them per launch */
			double points_per_launch = pairs_per_launch() / (static_cast<double>(n) * pairs_per_point);
			int32_t column_width = static_cast<int32_t>(std::clamp(
				points_per_launch / columns / std::max(1.0, mean_points), 1.0,
				static_cast<double>(n_users_)));
			EventTimer compute(stream_);
			for (int64_t first_b = 0; first_b < n_users_;
				 first_b += static_cast<int64_t>(column_width) * columns)
			{
				int32_t launch_columns = static_cast<int32_t>(std::min<int64_t>(
					columns, (n_users_ - first_b + column_width - 1) / column_width));
				dim3 grid(blocks_for(n), launch_columns);
				with_metric(metric_, [&](auto metric) {
					constexpr Metric M = decltype(metric)::value;
					with_tile<M>(tile, [&](auto r) {
						best_others<M, decltype(r)::value><<<grid, kBlock, 0, stream_>>>(
							device_points(), ids_.get(), by_count_.get() + lo, n,
							static_cast<int32_t>(first_b), column_width, n_users_, epsilon, k,
							d_heaps.get(), d_sizes.get());
					});
				});
				check_launch("best_others");
				between_launches();
			}
			/*
			 * the columns' heaps merged: the k best of their union, the same set
			 * as one search.  Zeroed first, so that no byte of the copy is
			 * uninitialised (initcheck): only sizes[] entries of each are written.
			 */
			DeviceBuffer<SimilarityEntry> d_merged(static_cast<size_t>(n) * k, ctx_);
			DeviceBuffer<int> d_merged_sizes(static_cast<size_t>(n), ctx_);
			check(cudaMemsetAsync(d_merged.get(), 0, d_merged.size() * sizeof(SimilarityEntry), stream_),
				  "cudaMemsetAsync");
			merge_columns<<<blocks_for(n), kBlock, 0, stream_>>>(d_heaps.get(), d_sizes.get(), n, columns, k,
																d_merged.get(), d_merged_sizes.get());
			check_launch("merge_columns");
			ctx_.times.compute_ms += compute.stop_ms();

			EventTimer transfer(stream_);
			std::vector<SimilarityEntry> h_heaps;
			std::vector<int> h_sizes;
			download(h_heaps, d_merged, d_merged.size(), stream_);
			download(h_sizes, d_merged_sizes, d_merged_sizes.size(), stream_);
			ctx_.times.transfer_ms += transfer.stop_ms();
			for (int32_t t = 0; t < n; ++t)
			{
				int32_t a = by_count_host_[lo + t];
				std::copy_n(h_heaps.begin() + static_cast<size_t>(t) * k, k,
							heaps.begin() + static_cast<size_t>(a) * k);
				sizes[a] = h_sizes[t];
			}
			lo += n;
		}
	}
}

/*
 * The users of each class in batches of kListedBatch: the CPU makes a
 * batch's lists (GeoOtherLists) while the GPU compares the batch before.
 */
void GeoSession::similar_users_listed(int k, double epsilon, int part, int parts, GeoOtherLists &lists,
									  std::vector<SimilarityEntry> &heaps, std::vector<int32_t> &sizes, double &pairs)
{
	heaps.assign(static_cast<size_t>(n_users_) * k, SimilarityEntry{0, 0});
	sizes.assign(n_users_, 0);
	pairs = 0;
	struct Batch
	{
		size_t c;
		int32_t lo, n; /* by_count_ positions [lo, lo + n) */
		std::vector<int64_t> offsets;
		std::vector<int32_t> others;
	};
	/* at most kListedBatch users, fewer where lists of every other user would not fit half the free memory */
	size_t user_bytes = sizeof(int32_t) * static_cast<size_t>(n_users_) + sizeof(SimilarityEntry) * k + 16;
	auto batch = static_cast<int32_t>(std::clamp<size_t>(free_bytes() / 2 / user_bytes, 1, kListedBatch));
	std::vector<Batch> batches;
	for (size_t c = 0; c + 1 < class_begin_.size(); ++c)
	{
		auto [class_lo, class_hi] = part_of_class(c, part, parts);
		for (int32_t lo = class_lo; lo < class_hi; lo += batch)
			batches.push_back({c, lo, std::min(batch, class_hi - lo), {}, {}});
	}
	Stopwatch whole;
	double transfer_ms = 0;
	auto make = [&](Batch &b) {
		lists.lists(by_count_host_.data() + b.lo, b.n, b.offsets, b.others);
		for (int32_t t = 0; t < b.n; ++t)
			for (int64_t i = b.offsets[t]; i < b.offsets[t + 1]; ++i)
				pairs += static_cast<double>(offsets_host_[by_count_host_[b.lo + t] + 1] - offsets_host_[by_count_host_[b.lo + t]]) *
						 static_cast<double>(offsets_host_[b.others[i] + 1] - offsets_host_[b.others[i]]);
	};
	if (!batches.empty())
		make(batches[0]);
	for (size_t i = 0; i < batches.size(); ++i)
	{
		Batch &b = batches[i];
		DeviceBuffer<int64_t> d_offsets(b.offsets.size(), ctx_);
		DeviceBuffer<int32_t> d_others(std::max<size_t>(1, b.others.size()), ctx_);
		DeviceBuffer<SimilarityEntry> d_heaps(static_cast<size_t>(b.n) * k, ctx_);
		DeviceBuffer<int> d_sizes(b.n, ctx_);
		upload(d_offsets, b.offsets, stream_, ctx_);
		upload(d_others, b.others, stream_, ctx_);
		/* heaps are downloaded whole though only sizes[] entries of each are written: zeroed (initcheck) */
		check(cudaMemsetAsync(d_heaps.get(), 0, d_heaps.size() * sizeof(SimilarityEntry), stream_), "cudaMemsetAsync");
		with_metric(metric_, [&](auto metric) {
			constexpr Metric M = decltype(metric)::value;
			with_tile<M>(best_others_tile(b.c), [&](auto r) {
				best_listed_others<M, decltype(r)::value><<<blocks_for(b.n), kBlock, 0, stream_>>>(
					device_points(), ids_.get(), by_count_.get() + b.lo, b.n, d_offsets.get(), d_others.get(), epsilon,
					k, d_heaps.get(), d_sizes.get());
			});
		});
		check_launch("best_listed_others");
		/* the next batch's lists on the CPU meanwhile; this batch's stay until its copy is done */
		if (i + 1 < batches.size())
			make(batches[i + 1]);
		between_launches();

		EventTimer transfer(stream_);
		std::vector<SimilarityEntry> h_heaps;
		std::vector<int> h_sizes;
		download(h_heaps, d_heaps, d_heaps.size(), stream_);
		download(h_sizes, d_sizes, d_sizes.size(), stream_);
		transfer_ms += transfer.stop_ms();
		for (int32_t t = 0; t < b.n; ++t)
		{
			int32_t a = by_count_host_[b.lo + t];
			std::copy(h_heaps.begin() + static_cast<size_t>(t) * k, h_heaps.begin() + static_cast<size_t>(t + 1) * k,
					  heaps.begin() + static_cast<size_t>(a) * k);
			sizes[a] = h_sizes[t];
		}
		b.offsets = {};
		b.others = {};
	}
	/* the lists' making, overlapped with the GPU's comparing, counts as compute */
	ctx_.times.transfer_ms += transfer_ms;
	ctx_.times.compute_ms += std::max(0.0, whole.elapsed_ms() - transfer_ms);
}

/* Of the points' extent, the reach within which a user's points share a box (a few cities of the world apart). */
constexpr double kBoxReachShare = 1.0 / 64;

/* Blocks of point_extents: a partial extent each, the host takes their union. */
constexpr unsigned kExtentBlocks = 256;

/* The users' boxes (group_boxes), on the device and downloaded. */
GeoSession::GroupedBoxes GeoSession::group_user_boxes()
{
	GroupedBoxes grouped;
	grouped.index = std::make_unique<BoxIndex>();
	BoxIndex *index = grouped.index.get();
	size_t slots = static_cast<size_t>(n_users_) * kUserBoxes;
	index->box = DeviceBuffer<Box>(slots, ctx_);
	index->cos_lo = DeviceBuffer<double>(slots, ctx_);
	index->points = DeviceBuffer<int32_t>(slots, ctx_);
	index->count = DeviceBuffer<int32_t>(n_users_, ctx_);
	/* the slots past a user's boxes are read as copies of its first: zeroed, none is uninitialised (initcheck) */
	check(cudaMemsetAsync(index->box.get(), 0, slots * sizeof(Box), stream_), "cudaMemsetAsync");
	check(cudaMemsetAsync(index->cos_lo.get(), 0, slots * sizeof(double), stream_), "cudaMemsetAsync");
	check(cudaMemsetAsync(index->points.get(), 0, slots * sizeof(int32_t), stream_), "cudaMemsetAsync");

	DeviceBuffer<Box> extents(kExtentBlocks, ctx_);
	point_extents<<<kExtentBlocks, kBlock, 0, stream_>>>(x_.get(), y_.get(), n_points_, extents.get());
	check_launch("point_extents");
	std::vector<Box> parts;
	download(parts, extents, kExtentBlocks, stream_);
	stream_.synchronize();
	Box whole{INFINITY, -INFINITY, INFINITY, -INFINITY};
	for (const Box &e : parts)
		whole = Box{std::min(whole.x_lo, e.x_lo), std::max(whole.x_hi, e.x_hi), std::min(whole.y_lo, e.y_lo),
					std::max(whole.y_hi, e.y_hi)};

	with_metric(metric_, [&](auto metric) {
		group_boxes<decltype(metric)::value><<<blocks_for(n_users_), kBlock, 0, stream_>>>(
			device_points(), n_users_, (whole.x_hi - whole.x_lo) * kBoxReachShare,
			(whole.y_hi - whole.y_lo) * kBoxReachShare, index->box.get(), index->cos_lo.get(), index->points.get(),
			index->count.get());
	});
	check_launch("group_boxes");
	grouped.whole = whole;
	download(grouped.box, index->box, slots, stream_);
	download(grouped.cos_lo, index->cos_lo, slots, stream_);
	download(grouped.points, index->points, slots, stream_);
	download(grouped.count, index->count, n_users_, stream_);
	stream_.synchronize();
	return grouped;
}

/*
 * Whether the users' places spread over the whole map: the median user's
 * boxes cover a tenth of the points' extent or more.  Then nearly every
 * other user has a box near one of its boxes, and the bounded search,
 * which rules others out by their boxes, would compare nearly every pair,
 * slower than the brute force.  On 20 points a user spread evenly the
 * median covers about half of the extent; on check-ins around cities
 * (even 500 km around) well under a hundredth, and a user of a few points
 * anywhere has small boxes too.
 */
bool GeoSession::boxes_cover_the_map(const GroupedBoxes &grouped)
{
	constexpr double kCoveringShare = 0.1;
	const Box &whole = grouped.whole;
	double area = (whole.x_hi - whole.x_lo) * (whole.y_hi - whole.y_lo);
	if (!(area > 0) || grouped.count.empty())
		return false;
	std::vector<double> covered(grouped.count.size(), 0.0);
	for (size_t u = 0; u < covered.size(); ++u)
		for (int j = 0; j < grouped.count[u]; ++j)
		{
			const Box &b = grouped.box[u * kUserBoxes + j];
			covered[u] += (b.x_hi - b.x_lo) * (b.y_hi - b.y_lo) / area;
		}
	auto median = covered.begin() + covered.size() / 2;
	std::nth_element(covered.begin(), median, covered.end());
	return *median >= kCoveringShare;
}

/* The users' boxes' entries in the order of a Morton code of each box's centre, in tiles (UserBoxes). */
void GeoSession::index_boxes(GroupedBoxes grouped)
{
	std::unique_ptr<BoxIndex> index = std::move(grouped.index);
	const Box &whole = grouped.whole;
	const std::vector<Box> &box = grouped.box;
	const std::vector<double> &cos_lo = grouped.cos_lo;
	const std::vector<int32_t> &points = grouped.points, &count = grouped.count;
	auto cell = [](double v, double lo, double hi) {
		double at = hi > lo ? (v - lo) / (hi - lo) * 65535.0 : 0.0;
		return static_cast<uint32_t>(std::clamp(at, 0.0, 65535.0));
	};
	auto spread = [](uint32_t v) { /* v's 16 bits to the even bits of 32 */
		v = (v | (v << 8)) & 0x00FF00FFu;
		v = (v | (v << 4)) & 0x0F0F0F0Fu;
		v = (v | (v << 2)) & 0x33333333u;
		return (v | (v << 1)) & 0x55555555u;
	};
	std::vector<uint64_t> keyed; /* Morton code above, slot below: one sort, ties by slot */
	for (int32_t u = 0; u < n_users_; ++u)
		for (int j = 0; j < count[u]; ++j)
		{
			size_t slot = static_cast<size_t>(u) * kUserBoxes + j;
			const Box &b = box[slot];
			uint64_t morton = spread(cell(0.5 * (b.x_lo + b.x_hi), whole.x_lo, whole.x_hi)) |
							  (spread(cell(0.5 * (b.y_lo + b.y_hi), whole.y_lo, whole.y_hi)) << 1);
			keyed.push_back(morton << 32 | static_cast<uint32_t>(slot));
		}
	std::sort(keyed.begin(), keyed.end());

	size_t entries = keyed.size(), tiles = (entries + kTileEntries - 1) / kTileEntries;
	std::vector<Box> entry_box(entries), tile_box(tiles, Box{INFINITY, -INFINITY, INFINITY, -INFINITY});
	std::vector<double> entry_cos(entries), tile_cos(tiles, INFINITY);
	std::vector<int32_t> entry_slot(entries), home_entry(n_users_, 0);
	/* each user's main box: the first of most points, as RegisterBoxes chooses it */
	std::vector<int32_t> main_slot(n_users_);
	for (int32_t u = 0; u < n_users_; ++u)
	{
		main_slot[u] = u * kUserBoxes;
		for (int j = 1; j < count[u]; ++j)
			if (points[u * kUserBoxes + j] > points[main_slot[u]])
				main_slot[u] = u * kUserBoxes + j;
	}
	for (size_t e = 0; e < entries; ++e)
	{
		auto slot = static_cast<int32_t>(keyed[e] & 0xFFFFFFFFu);
		int32_t u = slot / kUserBoxes;
		entry_slot[e] = slot;
		entry_box[e] = box[slot];
		entry_cos[e] = cos_lo[slot];
		Box &t = tile_box[e / kTileEntries];
		t = Box{std::min(t.x_lo, box[slot].x_lo), std::max(t.x_hi, box[slot].x_hi), std::min(t.y_lo, box[slot].y_lo),
				std::max(t.y_hi, box[slot].y_hi)};
		tile_cos[e / kTileEntries] = std::min(tile_cos[e / kTileEntries], cos_lo[slot]);
		if (slot == main_slot[u])
			home_entry[u] = static_cast<int32_t>(e);
	}
	index->entry_box = DeviceBuffer<Box>(entries, ctx_);
	index->entry_cos = DeviceBuffer<double>(entries, ctx_);
	index->entry_slot = DeviceBuffer<int32_t>(entries, ctx_);
	index->tile_box = DeviceBuffer<Box>(tiles, ctx_);
	index->tile_cos = DeviceBuffer<double>(tiles, ctx_);
	index->home_entry = DeviceBuffer<int32_t>(n_users_, ctx_);
	upload(index->entry_box, entry_box, stream_, ctx_);
	upload(index->entry_cos, entry_cos, stream_, ctx_);
	upload(index->entry_slot, entry_slot, stream_, ctx_);
	upload(index->tile_box, tile_box, stream_, ctx_);
	upload(index->tile_cos, tile_cos, stream_, ctx_);
	upload(index->home_entry, home_entry, stream_, ctx_);
	stream_.synchronize();
	boxes_ = std::move(index);
}

double GeoSession::pairs_of_part(int part, int parts, size_t first_class, int32_t from) const
{
	double pairs = 0;
	for (size_t c = first_class; c + 1 < class_begin_.size(); ++c)
	{
		auto [lo, hi] = part_of_class(c, part, parts);
		lo = std::max(lo, from);
		if (lo < hi)
			pairs += static_cast<double>(count_prefix_[hi] - count_prefix_[lo]) * static_cast<double>(n_points_);
	}
	return pairs;
}

/*
 * The users of each class of the part in launches of a few times the warps
 * the device holds at once.  With give_up, users whose boxes cover the map
 * (boxes_cover_the_map) are compared with every other at once; else after
 * each launch the search goes on only while its users so far compared at
 * most kBoundedGiveUpShare of their pairs, and the users left are compared
 * with every other (similar_users), their heaps merged in.
 */
bool GeoSession::similar_users_bounded(int k, double epsilon, int part, int parts, bool give_up,
									   std::vector<SimilarityEntry> &heaps, std::vector<int32_t> &sizes, double &pairs,
									   double &all_pairs)
{
	constexpr double kBoundedGiveUpShare = 0.25;
	/*
	 * Users of the first launch: enough for the decision, and few, so that
	 * on points spread evenly (every pair compared, a warp's lanes each on
	 * its own other, slower than the brute force's threads) they cost about
	 * one user's time: with a first launch of 2,112 users (a quarter of an
	 * H200's resident warps), uniform 100k users cost 1.04-1.07x the brute
	 * force, and a quarter of them (a part of a call split over 4 GPUs)
	 * would have paid that launch each.
	 */
	constexpr int32_t kBoundedSampleUsers = 256;
	constexpr double kLaunchesOfResidentWarps = 2;
	pairs = all_pairs = 0;
	if (!boxes_)
	{
		GroupedBoxes grouped = group_user_boxes();
		/* places spread over the map: every pair at once, without indexing boxes to try them first */
		if (give_up && boxes_cover_the_map(grouped))
		{
			grouped = GroupedBoxes(); /* their device memory back: the brute force's batches take half what is free */
			similar_users(k, epsilon, part, parts, heaps, sizes);
			pairs = all_pairs = pairs_of_part(part, parts);
			return false;
		}
		index_boxes(std::move(grouped));
	}
	heaps.assign(static_cast<size_t>(n_users_) * k, SimilarityEntry{0, 0});
	sizes.assign(n_users_, 0);
	UserBoxes boxes = boxes_->view();
	auto batch = static_cast<int32_t>(std::max(1.0, kLaunchesOfResidentWarps * resident_threads() / 32));
	DeviceBuffer<SimilarityEntry> d_heaps(static_cast<size_t>(batch) * k, ctx_);
	DeviceBuffer<int> d_sizes(batch, ctx_);
	DeviceBuffer<unsigned long long> d_compared(1, ctx_);
	check(cudaMemsetAsync(d_compared.get(), 0, sizeof(unsigned long long), stream_), "cudaMemsetAsync");
	/* heaps are downloaded whole though only sizes[] entries of each are written: zeroed (initcheck) */
	check(cudaMemsetAsync(d_heaps.get(), 0, d_heaps.size() * sizeof(SimilarityEntry), stream_), "cudaMemsetAsync");
	std::vector<SimilarityEntry> h_heaps;
	std::vector<int> h_sizes;
	std::vector<unsigned long long> h_compared;
	bool bounded = true;
	EventTimer compute(stream_);
	for (size_t c = 0; c + 1 < class_begin_.size() && bounded; ++c)
	{
		auto [class_lo, class_hi] = part_of_class(c, part, parts);
		for (int32_t lo = class_lo; lo < class_hi && bounded;)
		{
			/* the first launch a sample of users, so that giving up costs a few milliseconds */
			int32_t n = std::min(all_pairs == 0 ? std::min(batch, kBoundedSampleUsers) : batch, class_hi - lo);
			with_metric(metric_, [&](auto metric) {
				constexpr Metric M = decltype(metric)::value;
				with_tile<M>(best_others_tile(c), [&](auto r) {
					best_others_bounded<M, decltype(r)::value>
						<<<blocks_for(static_cast<size_t>(n) * 32), kBlock, 0, stream_>>>(
							device_points(), ids_.get(), by_count_.get() + lo, n, boxes, epsilon, k,
							d_heaps.get(), d_sizes.get(), d_compared.get());
				});
			});
			check_launch("best_others_bounded");
			between_launches();
			download(h_heaps, d_heaps, static_cast<size_t>(n) * k, stream_);
			download(h_sizes, d_sizes, n, stream_);
			download(h_compared, d_compared, 1, stream_);
			stream_.synchronize();
			for (int32_t t = 0; t < n; ++t)
			{
				int32_t a = by_count_host_[lo + t];
				std::copy(h_heaps.begin() + static_cast<size_t>(t) * k,
						  h_heaps.begin() + static_cast<size_t>(t) * k + h_sizes[t],
						  heaps.begin() + static_cast<size_t>(a) * k);
				sizes[a] = h_sizes[t];
			}
			double searched = static_cast<double>(count_prefix_[lo + n] - count_prefix_[lo]) *
							  static_cast<double>(n_points_);
			all_pairs += searched;
			pairs = static_cast<double>(h_compared[0]);
			lo += n;
			if (give_up && pairs > kBoundedGiveUpShare * all_pairs)
			{
				bounded = false;
				/* the rest of this class and the classes after it compare every pair */
				std::vector<SimilarityEntry> rest_heaps;
				std::vector<int32_t> rest_sizes;
				ctx_.times.compute_ms += compute.stop_ms();
				similar_users(k, epsilon, part, parts, rest_heaps, rest_sizes, c, lo);
				double every = pairs_of_part(part, parts, c, lo);
				pairs += every;
				all_pairs += every;
				for (int32_t u = 0; u < n_users_; ++u)
					if (rest_sizes[u] > 0)
					{
						std::copy(rest_heaps.begin() + static_cast<size_t>(u) * k,
								  rest_heaps.begin() + static_cast<size_t>(u) * k + rest_sizes[u],
								  heaps.begin() + static_cast<size_t>(u) * k);
						sizes[u] = rest_sizes[u];
					}
				return true;
			}
		}
	}
	ctx_.times.compute_ms += compute.stop_ms();
	return true;
}

std::vector<std::vector<double>> GeoSession::strengths(int32_t main_user, double min_similarity,
													   const StrengthParams &params,
													   const std::vector<PowerPlan> &powers, const ReachGrid *reach)
{
	if (reach && !reach_)
		build_reach(*reach);
	similarity_sums(main_user, params.epsilon);
	int n = n_candidates_;
	std::vector<std::vector<double>> out(powers.size());
	if (n == 0)
	{
		for (auto &v : out)
			v.assign(n, 0.0);
		return out;
	}
	long long n_slices = (n_points_ + kStrengthSlice - 1) / kStrengthSlice;
	double pairs_per_slice = static_cast<double>(kStrengthSlice) * n;
	long long slices_per_launch = static_cast<long long>(
		std::clamp(pairs_per_launch() / pairs_per_slice, 1.0, static_cast<double>(n_slices)));
	/* the partial sums of a launch: bounded by the memory budget */
	slices_per_launch = std::min<long long>(
		slices_per_launch,
		std::max<long long>(1, free_bytes() / 4 / (sizeof(double) * static_cast<size_t>(n))));
	slices_per_launch = std::min<long long>(slices_per_launch, 65535);

	DeviceBuffer<double> w(n_points_, ctx_);
	DeviceBuffer<double> partial(reach ? 0 : static_cast<size_t>(slices_per_launch) * n, ctx_);
	DeviceBuffer<double> total(n, ctx_);
	DeviceCandidates cands{cand_x_.get(), cand_y_.get(), cand_cos_.get(), n};
	{
		EventTimer compute(stream_);
		long long main_points = offsets_host_[main_user + 1] - offsets_host_[main_user];
		point_weights<<<blocks_for(n_users_, 256), 256, 0, stream_>>>(
			offsets_.get(), n_users_, main_user, main_points, min_similarity, floored_.get(), w.get());
		check_launch("point_weights");
		ctx_.times.compute_ms += compute.stop_ms();
	}
	if (reach)
	{
		for (size_t e = 0; e < powers.size(); ++e)
		{
			strengths_in_reach(params, powers[e], w.get(), total.get());
			EventTimer transfer(stream_);
			download(out[e], total, n, stream_);
			ctx_.times.transfer_ms += transfer.stop_ms();
		}
		return out;
	}
	for (size_t e = 0; e < powers.size(); ++e)
	{
		const PowerPlan &power = powers[e];
		bool square = !power.general && power.whole == 1 && !power.half && !power.quarter;
		EventTimer compute(stream_);
		check(cudaMemsetAsync(total.get(), 0, n * sizeof(double), stream_), "cudaMemsetAsync");
		for (long long first = 0; first < n_slices; first += slices_per_launch)
		{
			int launch_slices = static_cast<int>(std::min(slices_per_launch, n_slices - first));
			dim3 grid(blocks_for(n, kBlock * kCandidatesPerThread), launch_slices);
			with_metric(metric_, [&](auto metric) {
				with_flags(square, params.has_max_distance, [&](auto sq, auto filter) {
					strength_slices<decltype(metric)::value, decltype(sq)::value,
									decltype(filter)::value><<<grid, kBlock, 0, stream_>>>(
						device_points(), w.get(), n_points_, first, cands, params, power,
						partial.get());
				});
			});
			check_launch("strength_slices");
			add_slices<<<blocks_for(n, 256), 256, 0, stream_>>>(partial.get(), launch_slices, n,
																total.get());
			check_launch("add_slices");
			between_launches();
		}
		ctx_.times.compute_ms += compute.stop_ms();
		EventTimer transfer(stream_);
		download(out[e], total, n, stream_);
		ctx_.times.transfer_ms += transfer.stop_ms();
	}
	return out;
}

/*
 * The points in cell order as the CPU's counting sort leaves them (a
 * stable radix sort of the point indices by cell), each cell's start from
 * its count, and the plan from those (geo_reach.hpp), cut into launches of
 * slabs: each bounded by the memory its piece sums take and by the pairs a
 * launch evaluates.
 */
void GeoSession::build_reach(const ReachGrid &grid)
{
	auto index = std::make_unique<ReachIndex>();
	index->grid = grid;
	size_t n = static_cast<size_t>(n_points_);
	auto count = static_cast<long long>(n);
	int64_t cells = grid.cells();
	index->point = DeviceBuffer<uint32_t>(n, ctx_);
	index->x = DeviceBuffer<double>(n, ctx_);
	index->y = DeviceBuffer<double>(n, ctx_);
	index->cos_lat = DeviceBuffer<double>(metric_ == Metric::Haversine ? n : 0, ctx_);
	index->w = DeviceBuffer<double>(n, ctx_);
	std::vector<int64_t> cell_start(static_cast<size_t>(cells) + 1, 0);
	EventTimer compute(stream_);
	if (n > 0)
	{
		DeviceBuffer<uint32_t> cell(n, ctx_), sorted_cell(n, ctx_), rows(n, ctx_);
		DeviceBuffer<unsigned> counts(static_cast<size_t>(cells), ctx_);
		reach_cells<<<grid_for(n), 256, 0, stream_>>>(x_.get(), y_.get(), count, grid, cell.get());
		check_launch("reach_cells");
		check(cudaMemsetAsync(counts.get(), 0, counts.size() * sizeof(unsigned), stream_), "cudaMemsetAsync");
		count_cells<<<grid_for(n), 256, 0, stream_>>>(cell.get(), count, counts.get());
		check_launch("count_cells");
		fill_rows<<<grid_for(n), 256, 0, stream_>>>(rows.get(), count);
		check_launch("fill_rows");
		int cell_bits = 1;
		while (cell_bits < 32 && (int64_t(1) << cell_bits) < cells)
			++cell_bits;
		size_t temp_bytes = 0;
		check(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, cell.get(), sorted_cell.get(), rows.get(),
											  index->point.get(), static_cast<int64_t>(n), 0, cell_bits, stream_),
			  "cub::DeviceRadixSort");
		DeviceBuffer<char> temp(temp_bytes, ctx_);
		check(cub::DeviceRadixSort::SortPairs(temp.get(), temp_bytes, cell.get(), sorted_cell.get(), rows.get(),
											  index->point.get(), static_cast<int64_t>(n), 0, cell_bits, stream_),
			  "cub::DeviceRadixSort");
		with_metric(metric_, [&](auto metric) {
			gather_entries<decltype(metric)::value><<<grid_for(n), 256, 0, stream_>>>(
				index->point.get(), count, device_points(), index->x.get(), index->y.get(), index->cos_lat.get());
		});
		check_launch("gather_entries");
		std::vector<unsigned> host_counts;
		download(host_counts, counts, static_cast<size_t>(cells), stream_);
		stream_.synchronize();
		for (int64_t c = 0; c < cells; ++c)
			cell_start[c + 1] = cell_start[c] + host_counts[c];
	}
	ctx_.times.compute_ms += compute.stop_ms();

	Stopwatch planning;
	ReachPlan &plan = index->plan;
	plan = plan_reach(grid, cell_start, cand_host_x_.data(), cand_host_y_.data(), cand_host_x_.size());
	/* slabs: a group's candidates in shares whose units fit; consecutive slabs into launches */
	long long unit_cap = std::max<long long>(1 << 16, static_cast<long long>(free_bytes() / 4 / sizeof(double)));
	double work_cap = pairs_per_launch();
	std::vector<ReachSlab> slabs;
	long long units = 0, cands = 0;
	double work = 0;
	auto close_launch = [&] {
		index->launch_slab.push_back(static_cast<int>(slabs.size()));
		index->launch_units.push_back(units);
		index->launch_cands.push_back(cands);
		index->most_units = std::max(index->most_units, units);
		units = cands = 0;
		work = 0;
	};
	for (size_t g = 0; g < plan.groups(); ++g)
	{
		int64_t pieces = plan.piece_begin[g + 1] - plan.piece_begin[g];
		int64_t members = plan.group_begin[g + 1] - plan.group_begin[g];
		double entries = 0;
		for (int64_t p = plan.piece_begin[g]; p < plan.piece_begin[g + 1]; ++p)
			entries += static_cast<double>(plan.piece_last[p] - plan.piece_first[p]);
		int64_t share = std::max<int64_t>(
			1, std::min<int64_t>(unit_cap / std::max<int64_t>(1, pieces),
								 static_cast<int64_t>(work_cap / std::max(1.0, entries))));
		for (int64_t first = 0; first < members; first += share)
		{
			int64_t m = std::min(share, members - first);
			if (units > 0 && (units + pieces * m > unit_cap || work + entries * m > work_cap))
				close_launch();
			slabs.push_back({units, cands, static_cast<int64_t>(g), first, m});
			units += pieces * m;
			cands += m;
			work += entries * m;
		}
	}
	if (cands > 0)
		close_launch();
	ctx_.times.compute_ms += planning.elapsed_ms();

	EventTimer transfer(stream_);
	index->order = DeviceBuffer<uint32_t>(plan.order.size(), ctx_);
	index->group_begin = DeviceBuffer<int64_t>(plan.group_begin.size(), ctx_);
	index->piece_begin = DeviceBuffer<int64_t>(plan.piece_begin.size(), ctx_);
	index->piece_first = DeviceBuffer<int64_t>(plan.piece_first.size(), ctx_);
	index->piece_last = DeviceBuffer<int64_t>(plan.piece_last.size(), ctx_);
	index->slabs = DeviceBuffer<ReachSlab>(slabs.size(), ctx_);
	upload(index->order, plan.order, stream_, ctx_);
	upload(index->group_begin, plan.group_begin, stream_, ctx_);
	upload(index->piece_begin, plan.piece_begin, stream_, ctx_);
	upload(index->piece_first, plan.piece_first, stream_, ctx_);
	upload(index->piece_last, plan.piece_last, stream_, ctx_);
	upload(index->slabs, slabs, stream_, ctx_);
	ctx_.times.transfer_ms += transfer.stop_ms();
	reach_ = std::move(index);
	ctx_.interrupt_point(Phase::Compute);
}

/* total[c] for every candidate under one power, given the points' weights w. */
void GeoSession::strengths_in_reach(const StrengthParams &params, const PowerPlan &power, const double *w,
									double *total)
{
	ReachIndex &index = *reach_;
	EventTimer compute(stream_);
	auto n = static_cast<long long>(n_points_);
	if (n > 0)
	{
		gather_weights<<<grid_for(static_cast<size_t>(n)), 256, 0, stream_>>>(index.point.get(), n, w, index.w.get());
		check_launch("gather_weights");
	}
	ReachEntries entries{index.x.get(), index.y.get(), index.cos_lat.get(), index.w.get()};
	DeviceCandidates cands{cand_x_.get(), cand_y_.get(), cand_cos_.get(), n_candidates_};
	DeviceBuffer<double> partial(static_cast<size_t>(std::max<long long>(1, index.most_units)), ctx_);
	for (size_t l = 0; l + 1 < index.launch_slab.size(); ++l)
	{
		const ReachSlab *slabs = index.slabs.get() + index.launch_slab[l];
		int n_slabs = index.launch_slab[l + 1] - index.launch_slab[l];
		long long units = index.launch_units[l];
		if (units > 0)
		{
			with_metric(metric_, [&](auto metric) {
				reach_pieces<decltype(metric)::value><<<grid_for(static_cast<size_t>(units), kBlock), kBlock, 0, stream_>>>(
					entries, index.device_plan(), slabs, n_slabs, units, cands, params, power, partial.get());
			});
			check_launch("reach_pieces");
		}
		reach_totals<<<grid_for(static_cast<size_t>(index.launch_cands[l])), 256, 0, stream_>>>(
			index.device_plan(), slabs, n_slabs, index.launch_cands[l], partial.get(), total);
		check_launch("reach_totals");
		between_launches();
	}
	ctx_.times.compute_ms += compute.stop_ms();
}

GeoSessionPtr open_geo_session(const GeoPointColumns &points, const GeoCandidateColumns *candidates,
							   CallContext &ctx)
{
	return GeoSessionPtr(new GeoSession(points, candidates, ctx));
}

void geo_similarity_sums(GeoSession &session, int32_t main_user, double epsilon,
						 std::vector<double> &floored, std::vector<double> &raw)
{
	session.similarity_sums(main_user, epsilon);
	session.download_sums(floored, raw);
}

void geo_similar_users(GeoSession &session, int k, double epsilon, int part, int parts,
					   std::vector<SimilarityEntry> &heaps, std::vector<int32_t> &sizes)
{
	session.similar_users(k, epsilon, part, parts, heaps, sizes);
}

bool geo_similar_users_bounded(GeoSession &session, int k, double epsilon, int part, int parts, bool give_up,
							   std::vector<SimilarityEntry> &heaps, std::vector<int32_t> &sizes, double &pairs,
							   double &all_pairs)
{
	if (k < 1 || k > kMostBoundedOthers)
		throw Failure(Failure::Kind::Internal, "a bounded search keeps at most " +
												   std::to_string(kMostBoundedOthers) + " others");
	return session.similar_users_bounded(k, epsilon, part, parts, give_up, heaps, sizes, pairs, all_pairs);
}

void geo_similar_users_listed(GeoSession &session, int k, double epsilon, int part, int parts,
							  GeoOtherLists &lists, std::vector<SimilarityEntry> &heaps, std::vector<int32_t> &sizes,
							  double &pairs)
{
	session.similar_users_listed(k, epsilon, part, parts, lists, heaps, sizes, pairs);
}

std::vector<std::vector<double>> geo_strengths(GeoSession &session, int32_t main_user,
											   double min_similarity, const StrengthParams &params,
											   const std::vector<PowerPlan> &powers, const ReachGrid *reach)
{
	return session.strengths(main_user, min_similarity, params, powers, reach);
}

} // namespace gpurec::gpu
