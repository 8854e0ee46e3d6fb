/*
 * geo_pruned.cpp: similar_users without comparing every pair of users, to
 * the same bits as comparing them all.
 *
 * A k-d tree holds every point of the call (in the plane under euclidean;
 * on the unit sphere, by chord, under haversine), and each user's points
 * are grouped in boxes, about one per place it goes to.  A search of
 * radius r from a box visits every point within r of it, by its owner,
 * except that a node far from the box for its size is visited once per
 * user with points in it.  A second k-d tree, the pairs' index, holds every
 * ordered pair of each user's boxes (for users of at most 3 boxes).
 *
 * For each user A, others_of lists the users that may enter A's k best;
 * the device then compares A with exactly those (offer_other on the CPU,
 * geo_cpu.cpp; best_listed_others on the GPU, kernels/geo.cu), with the
 * brute force's arithmetic and tie rule.  The list:
 *   - seeds: the users around A's boxes (the radius doubling until there
 *     are k) get an upper bound of their sum from the boxes (bound_above);
 *     the k of least bound are compared with A point by point, and the
 *     worst of them, W, is at most A's k-th best similarity;
 *   - a user that can reach W has a sum at most W's, so on at least one of
 *     A's boxes its terms are at most W's mean term: for A of one box, the
 *     users within that of A's box; for A of several, the users of a pair
 *     in the pairs' index whose bound from A's two largest boxes is within
 *     W's sum (and the users of too many boxes to index);
 *   - of those, the users whose boxes' bound (boxes_bound) is above W's
 *     sum are struck out.
 *
 * Bounds are computed in doubles, lower bounds made a little lower and
 * upper ones a little higher (bound_margin, geo_pairs.hpp) than rounding
 * could make the sums; a user is left out only when its bound's similarity
 * is strictly below W, so equal similarities are listed and tie by id as
 * in the brute force.  The k best of the listed are therefore the brute
 * force's k best, whose similarity values are computed by the same
 * function.
 *
 * Where the points are spread evenly (users of many boxes), the lists hold
 * nearly everyone: pruning would cost more than the brute force.  Under
 * gpurec.geo_pruning = auto that, or a sample of the users' lists, decides
 * (best_others_search).
 */
#include "no_postgres.hpp"

#include "geo_internal.hpp"

#include "geo_pairs.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <memory>

#include "cpu_parallel.hpp"

namespace gpurec {

namespace {

/* Points per leaf of the k-d tree. */
constexpr int64_t kLeafPoints = 16;

/*
 * A search takes a node's least distance for all of its points where the
 * node's diagonal is at most this share of that distance: a bound within
 * half for the users of a faraway cluster, at one visit per user instead
 * of one per point (the boxes' bound then tightens it, boxes_bound).
 */
constexpr double kFarEnough = 1.0;

/* Users sampled to decide between pruning and the brute force (auto). */
constexpr int32_t kSampleUsers = 96;

/* auto prunes when the sample's searches cost less than this share of their brute force. */
constexpr double kPruneWhenBelow = 0.6;

/*
 * auto compares every pair below this many pairs of points: less than a
 * millisecond of work, where building the index would cost as much.
 */
constexpr double kLeastPrunedPairs = 1e6;

/* For the GPU, which compares every pair at about 8e11 pairs/s: the least input worth an index (about 15 ms of pairs). */
constexpr double kLeastGpuPrunedPairs = 1e10;

/*
 * For the GPU, what a step of the index (others_of) costs one CPU thread,
 * its share of the index's build included: 100k clustered users on one
 * H100 with 16 cores listed 2.96e9 steps in 4.0 s and built the index in
 * 1.1 s (lists: 21.6 ns a step a thread).  Against the GPU's rate for a
 * point pair (rates::kPointPairs), the steps of a part's lists, made on its
 * share of the call's threads, weigh as that many GPU pairs: about 1,400
 * a step on 16 threads, where a weight of 200 had auto prune a call that
 * the brute force did in 3.5 s and the lists in 6.1 s.
 */
constexpr double kCpuStepThreadNs = 28;

/*
 * Building the index, a point's share, on one thread (100k clustered users
 * x 20 points: 1.47 s on the H100 host), and what a pruned search costs at
 * the least against that build: the build, then lists several times as
 * long (that run: lists 4.0 s on 16 threads).
 */
constexpr double kIndexNsPerPoint = 730;
constexpr double kPrunedOverIndex = 4;

double cpu_step_in_gpu_pairs(int parts, const ExecContext &ctx)
{
	double threads = std::max(1.0, static_cast<double>(call_threads(ctx)) / std::max(1, parts));
	return kCpuStepThreadNs / threads / rates::kPointPairs.gpu_ns;
}

/*
 * The index space: under euclidean the plane, under haversine the unit
 * sphere's points in space, whose chords order great-circle distances.
 */
template <GeoMetric M> constexpr int kDims = M == GeoMetric::Euclidean ? 2 : 3;

/*
 * A lower bound of the distance (metres under haversine) between points
 * whose index-space distance squared was computed as `squared`.
 * Haversine: the arc is at least the chord, 2 asin(c / 2) >= c; the
 * computed chord is within 1e-14 of the true one (geo_pairs.hpp).
 */
template <GeoMetric M> double distance_below(double squared)
{
	if constexpr (M == GeoMetric::Euclidean)
		return std::sqrt(squared) * (1 - 1e-12);
	else
		return chord_distance_below(squared);
}

/*
 * An upper bound of the distance, as computed (geo_arithmetic.hpp), between
 * points whose index-space distance squared is at most `squared`.
 * Haversine: the arc of a chord c is 2 asin(c / 2); the computed chord and
 * distance are within 1e-14 of the true ones, far inside these margins.
 */
template <GeoMetric M> double distance_above(double squared)
{
	if constexpr (M == GeoMetric::Euclidean)
		return std::sqrt(squared) * (1 + 1e-9) + 1e-300;
	else
		return 2 * std::asin(std::min(1.0, (std::sqrt(squared) + 1e-12) / 2)) * geo::kEarthRadius * (1 + 1e-9) + 1e-6;
}

/* The index-space radius that reaches every point within `distance` (metres under haversine). */
template <GeoMetric M> double radius_for(double distance)
{
	if constexpr (M == GeoMetric::Euclidean)
		return distance * (1 + 1e-6);
	else
		return distance / geo::kEarthRadius * (1 + 1e-6) + 1e-12;
}

template <GeoMetric M> class KdTree
{
  public:
	static constexpr int D = kDims<M>;

	KdTree(const GeoPointSet &s, ExecContext &ctx)
	{
		int64_t n = s.points();
		std::vector<uint32_t> order(static_cast<size_t>(n));
		for (int64_t p = 0; p < n; ++p)
			order[p] = static_cast<uint32_t>(p);
		std::vector<int32_t> owner_of(static_cast<size_t>(n));
		for (int32_t u = 0; u < s.users(); ++u)
			std::fill(owner_of.begin() + s.offsets[u], owner_of.begin() + s.offsets[u + 1], u);
		const double *source[3];
		if constexpr (M == GeoMetric::Euclidean)
		{
			source[0] = s.x.data();
			source[1] = s.y.data();
		}
		else
		{
			source[0] = s.ux.data();
			source[1] = s.uy.data();
			source[2] = s.uz.data();
		}
		if (n > 0)
			build(order, 0, n, source, ctx);
		for (int d = 0; d < D; ++d)
		{
			coordinate_[d].resize(static_cast<size_t>(n));
			for (int64_t i = 0; i < n; ++i)
				coordinate_[d][i] = source[d][order[i]];
		}
		owner_.resize(static_cast<size_t>(n));
		for (int64_t i = 0; i < n; ++i)
			owner_[i] = owner_of[order[i]];
		if (n > 0)
			list_users(0);
		/* the first radius tried: a typical leaf's half diagonal */
		std::vector<double> diagonals;
		for (const Node &node : nodes_)
			if (node.left < 0)
				diagonals.push_back(std::sqrt(diagonal(node)));
		if (!diagonals.empty())
		{
			std::nth_element(diagonals.begin(), diagonals.begin() + diagonals.size() / 2, diagonals.end());
			first_radius_ = std::max(diagonals[diagonals.size() / 2] / 2, 1e-300);
		}
		if (!nodes_.empty())
			whole_ = std::sqrt(diagonal(nodes_[0])) * 2 + 1e-300;
	}

	/*
	 * visit(user, squared distance) for every point within squared radius
	 * r2 of q, by its owner; or, for a node far from q for its size, once
	 * for each user with points in it, with the node's least distance from
	 * q (a lower bound of each of those points'; its points beyond r2 are
	 * visited too then).  Returns the visits.
	 */
	template <typename Visit> int64_t around(const double *lo, const double *hi, double r2, Visit visit) const
	{
		if (nodes_.empty())
			return 0;
		int64_t visits = 0;
		int32_t stack[64];
		int top = 0;
		stack[top++] = 0;
		while (top > 0)
		{
			const Node &node = nodes_[stack[--top]];
			double gap = box_distance(node, lo, hi);
			if (gap > r2)
				continue;
			if (node.left < 0)
			{
				visits += node.end - node.begin;
				for (int64_t p = node.begin; p < node.end; ++p)
				{
					double d2 = 0;
					for (int d = 0; d < D; ++d)
					{
						double below = lo[d] - coordinate_[d][p], above = coordinate_[d][p] - hi[d];
						double delta = below > 0 ? below : above > 0 ? above : 0;
						d2 += delta * delta;
					}
					if (d2 <= r2)
						visit(owner_[p], d2);
				}
				continue;
			}
			if (gap > 0 && diagonal(node) <= kFarEnough * kFarEnough * gap)
			{
				visits += node.users_end - node.users_begin;
				for (int64_t i = node.users_begin; i < node.users_end; ++i)
					visit(users_[i], gap);
				continue;
			}
			stack[top++] = node.left;
			stack[top++] = node.right;
		}
		return visits;
	}

	double first_radius() const { return first_radius_; }
	/* An index-space radius that reaches every point from any point. */
	double whole() const { return whole_; }

  private:
	struct Node
	{
		double lo[D], hi[D];
		int64_t begin, end;
		int32_t left = -1, right = -1; /* -1: a leaf */
		int64_t users_begin = 0, users_end = 0; /* its points' owners, once each: users_[users_begin, users_end) */
	};

	static double diagonal(const Node &node)
	{
		double d2 = 0;
		for (int d = 0; d < D; ++d)
			d2 += (node.hi[d] - node.lo[d]) * (node.hi[d] - node.lo[d]);
		return d2;
	}

	static double box_distance(const Node &node, const double *lo, const double *hi)
	{
		double d2 = 0;
		for (int d = 0; d < D; ++d)
		{
			double below = node.lo[d] - hi[d], above = lo[d] - node.hi[d];
			double gap = below > 0 ? below : above > 0 ? above : 0;
			d2 += gap * gap;
		}
		return d2;
	}

	/* The node of points order[begin, end), split at the median of its widest side; returns its index. */
	int32_t build(std::vector<uint32_t> &order, int64_t begin, int64_t end, const double *const *source,
				  ExecContext &ctx, int depth = 0)
	{
		auto index = static_cast<int32_t>(nodes_.size());
		nodes_.emplace_back();
		Node node;
		node.begin = begin;
		node.end = end;
		for (int d = 0; d < D; ++d)
		{
			node.lo[d] = INFINITY;
			node.hi[d] = -INFINITY;
			for (int64_t i = begin; i < end; ++i)
			{
				node.lo[d] = std::min(node.lo[d], source[d][order[i]]);
				node.hi[d] = std::max(node.hi[d], source[d][order[i]]);
			}
		}
		int widest = 0;
		for (int d = 1; d < D; ++d)
			if (node.hi[d] - node.lo[d] > node.hi[widest] - node.lo[widest])
				widest = d;
		if (end - begin > kLeafPoints && node.hi[widest] > node.lo[widest] && depth < 60)
		{
			int64_t middle = begin + (end - begin) / 2;
			const double *c = source[widest];
			std::nth_element(order.begin() + begin, order.begin() + middle, order.begin() + end,
							 [c](uint32_t a, uint32_t b) { return c[a] < c[b]; });
			node.left = build(order, begin, middle, source, ctx, depth + 1);
			node.right = build(order, middle, end, source, ctx, depth + 1);
		}
		nodes_[index] = node;
		return index;
	}

	/* Lists the owners of node `index`'s points in users_, sorted, once each; its children's first. */
	void list_users(int32_t index)
	{
		Node node = nodes_[index];
		if (node.left >= 0)
		{
			list_users(node.left);
			list_users(node.right);
		}
		std::vector<int32_t> owners;
		if (node.left < 0)
		{
			owners.assign(owner_.begin() + node.begin, owner_.begin() + node.end);
			std::sort(owners.begin(), owners.end());
			owners.erase(std::unique(owners.begin(), owners.end()), owners.end());
		}
		else
		{
			const Node &left = nodes_[node.left], &right = nodes_[node.right];
			std::set_union(users_.begin() + left.users_begin, users_.begin() + left.users_end,
						   users_.begin() + right.users_begin, users_.begin() + right.users_end,
						   std::back_inserter(owners));
		}
		nodes_[index].users_begin = static_cast<int64_t>(users_.size());
		users_.insert(users_.end(), owners.begin(), owners.end());
		nodes_[index].users_end = static_cast<int64_t>(users_.size());
	}

	std::vector<Node> nodes_;
	std::vector<int32_t> users_;
	std::vector<double> coordinate_[D];
	std::vector<int32_t> owner_;
	double first_radius_ = 1e-300;
	double whole_ = 1e-300;
};

/*
 * Users' points grouped in boxes: runs of a user's points (in point order,
 * by x) without a gap in x wider than a 256th of all the points' x range,
 * at most kMostBoxes a user.  A user whose points lie around a few places
 * far apart gets a small box around each, whose distance from a point
 * bounds the user's nearest distance from it closely.
 */
constexpr int kMostBoxes = 8;

/* The widest gap in x within a box: a 256th of all the points' x range. */
double box_gap(const GeoPointSet &s)
{
	double lo = INFINITY, hi = -INFINITY;
	for (int64_t p = 0; p < s.points(); ++p)
		lo = std::min(lo, s.x[p]), hi = std::max(hi, s.x[p]);
	return (hi - lo) / 256;
}

/* Whether point p, of a user whose points begin at `first` and who has `boxes` boxes before p, begins a box. */
bool starts_box(const GeoPointSet &s, int64_t p, int64_t first, double gap, int64_t boxes)
{
	return p == first || (s.x[p] - s.x[p - 1] > gap && boxes < kMostBoxes);
}

/* Users of at most this many boxes are in the pairs' index (PrunedSearch::users_by_pairs), each with the square of it in entries. */
constexpr int64_t kPairBoxes = 3;

/* The pairs' index serves where at most one user in this many has more boxes (those are offered to every user). */
constexpr size_t kWidePairsShare = 64;

template <GeoMetric M> class PrunedSearch final : public BestOthers
{
	struct Box
	{
		double lo[kDims<M>], hi[kDims<M>];
		int64_t begin, end; /* its user's points in it: [begin, end) */
		int64_t points() const { return end - begin; }
	};
  public:
	PrunedSearch(const GeoPointSet &s, int k, double epsilon, ExecContext &ctx)
		: s_(s), k_(k), epsilon_(epsilon), tree_(s, ctx), scratch_(parallel_workers(s.users(), ctx))
	{
		group_in_boxes();
		index_pairs();
	}

	/*
	 * The users that may enter a's k best.  The users around a's boxes give
	 * k upper bounds of sums (bound_above); the k users of the least are
	 * compared with a, point by point, as the brute force compares them: the
	 * worst of them, W, is at most the k-th best.  A user can reach W only
	 * within W's mean term of one of a's boxes (or, for a of several boxes,
	 * through the pairs' index), and with its boxes' bound at most W's sum:
	 * those are the users listed.
	 */
	void others_of(int32_t a, size_t worker, std::vector<int32_t> &others) override
	{
		Scratch &w = scratch_[worker];
		if (w.slot.empty())
			w.slot.assign(static_cast<size_t>(s_.users()), -1);
		int64_t n = s_.count(a);
		double margin = bound_margin(n);
		double searched = 0;
		/* users near a's boxes, wider until there are k */
		for (double radius = tree_.first_radius();; radius = radius * 2 >= tree_.whole() ? INFINITY : radius * 2)
		{
			searched += users_around(a, radius * radius, w);
			if (w.found.size() >= static_cast<size_t>(k_) || radius == INFINITY)
				break;
		}
		w.above.clear();
		for (int32_t u : w.found)
			w.above.push_back({bound_above(a, u), u});
		searched += static_cast<double>(w.found.size() * (box_offsets_[a + 1] - box_offsets_[a]));
		std::nth_element(w.above.begin(), w.above.begin() + (k_ - 1), w.above.end());
		w.heap.resize(static_cast<size_t>(k_));
		int size = 0;
		for (int i = 0; i < k_; ++i)
		{
			offer_other<M>(s_, a, w.above[i].second, k_, epsilon_, w.heap.data(), size);
			searched += static_cast<double>(n) * static_cast<double>(s_.count(w.above[i].second));
		}
		double worst = w.heap[0].similarity;
		/* above the sum of W's similarity (any rounding of n / sum included) */
		double most = static_cast<double>(n) / worst * (1 + margin);
		/* a user with every term above most / n has a sum above it: it is within that of one of a's boxes */
		if (box_offsets_[a + 1] - box_offsets_[a] >= 2 && pairs_usable_)
			searched += users_by_pairs(a, worst, w, [](int32_t) {});
		else
		{
			double r = radius_for<M>(most * (1 + margin) / static_cast<double>(n));
			searched += users_around(a, r >= tree_.whole() ? INFINITY : r * r, w);
		}
		/* the k compared first (a device that compares in list order fills its heap with them), then the rest */
		double pairs = 0;
		for (int i = 0; i < k_; ++i)
		{
			int32_t u = w.above[i].second;
			others.push_back(u);
			w.slot[u] = 1;
			pairs += static_cast<double>(n) * static_cast<double>(s_.count(u));
		}
		for (int32_t u : w.found)
		{
			if (w.slot[u] == 1)
				continue;
			searched += static_cast<double>((box_offsets_[a + 1] - box_offsets_[a]) * (box_offsets_[u + 1] - box_offsets_[u]));
			if (geo::similarity_of(n, boxes_bound(a, u) * (1 - margin)) < worst)
				continue;
			others.push_back(u);
			pairs += static_cast<double>(n) * static_cast<double>(s_.count(u));
		}
		for (int i = 0; i < k_; ++i)
			w.slot[w.above[i].second] = -1;
		compared_.fetch_add(static_cast<int64_t>(std::min(pairs, 9e18)), std::memory_order_relaxed);
		searched_.fetch_add(static_cast<int64_t>(std::min(searched, 9e18)), std::memory_order_relaxed);
	}

	double compared() const override { return static_cast<double>(compared_.load()); }
	double searched() const override { return static_cast<double>(searched_.load()); }

  private:
	struct Scratch
	{
		std::vector<int32_t> slot;	/* per user: 0 while found by the current search, 1 while listed first, else -1 */
		std::vector<int32_t> found; /* users found once each (users_by_pairs, users_around) */
		std::vector<std::pair<double, int32_t>> above; /* their upper bounds (others_of) */
		std::vector<SimilarityEntry> heap;			   /* the best of those (others_of) */
	};


	/*
	 * found(b), once each, for the users b other than a (of two boxes or
	 * more) that may have a similarity of at least `worst`: those of a pair
	 * in the index whose bound from a's two largest boxes allows it (by_pairs
	 * says why), and the users of too many boxes to index.  Returns the
	 * index's nodes and entries examined, and those users.
	 */
	template <typename Found> double users_by_pairs(int32_t a, double worst, Scratch &w, Found found)
	{
		int64_t n = s_.count(a);
		double margin = 1 - bound_margin(n);
		int64_t one = box_offsets_[a], two = one + 1;
		for (int64_t x = one; x < box_offsets_[a + 1]; ++x)
			if (boxes_[x].points() > boxes_[one].points())
				two = one, one = x;
			else if (x != one && (two == one || boxes_[x].points() > boxes_[two].points()))
				two = x;
		w.found.clear();
		auto consider = [&](int32_t u) {
			if (u == a || w.slot[u] >= 0)
				return;
			w.slot[u] = 0;
			w.found.push_back(u);
		};
		double examined = within(
			[&](const double *lo, const double *hi) {
				double sum = static_cast<double>(boxes_[one].points()) * term_below(boxes_[one], lo, hi) +
							 static_cast<double>(boxes_[two].points()) * term_below(boxes_[two], lo + kDims<M>, hi + kDims<M>);
				return geo::similarity_of(n, sum * margin) >= worst;
			},
			consider);
		for (int32_t u : wide_users_)
			consider(u);
		for (int32_t u : w.found)
		{
			w.slot[u] = -1;
			found(u);
		}
		return examined + static_cast<double>(wide_users_.size());
	}

	/* w.found: the users other than a with a point within squared radius r2 of one of a's boxes, once each; returns the visits. */
	double users_around(int32_t a, double r2, Scratch &w) const
	{
		w.found.clear();
		double visits = 0;
		for (int64_t x = box_offsets_[a]; x < box_offsets_[a + 1]; ++x)
			visits += static_cast<double>(tree_.around(boxes_[x].lo, boxes_[x].hi, r2, [&](int32_t u, double) {
				if (u != a && w.slot[u] < 0)
				{
					w.slot[u] = 0;
					w.found.push_back(u);
				}
			}));
		for (int32_t u : w.found)
			w.slot[u] = -1;
		return visits;
	}

	/*
	 * An upper bound of user b's sum: each point of a box of a is at most
	 * the farthest corners of that box and b's box away from b's points in
	 * that box, and so from b's nearest point; the nearest of b's boxes by
	 * that, floored, per box of a.
	 */
	double bound_above(int32_t a, int32_t b) const
	{
		double sum = 0;
		for (int64_t x = box_offsets_[a]; x < box_offsets_[a + 1]; ++x)
		{
			const Box &mine = boxes_[x];
			double nearest = INFINITY;
			for (int64_t y = box_offsets_[b]; y < box_offsets_[b + 1]; ++y)
			{
				double d2 = 0;
				for (int d = 0; d < kDims<M>; ++d)
				{
					double one = boxes_[y].hi[d] - mine.lo[d], other = mine.hi[d] - boxes_[y].lo[d];
					double far = std::max(std::fabs(one), std::fabs(other));
					d2 += far * far;
				}
				nearest = std::min(nearest, d2);
			}
			sum += static_cast<double>(mine.points()) * std::max(distance_above<M>(nearest), epsilon_);
		}
		return sum;
	}

	/* A point's least term from a box of points [lo, hi): its distance below, floored. */
	double term_below(const Box &box, const double *lo, const double *hi) const
	{
		double d2 = 0;
		for (int d = 0; d < kDims<M>; ++d)
		{
			double below = lo[d] - box.hi[d], above = box.lo[d] - hi[d];
			double gap = below > 0 ? below : above > 0 ? above : 0;
			d2 += gap * gap;
		}
		return std::max(distance_below<M>(d2), epsilon_);
	}

	void point_of(int64_t i, double *q) const
	{
		if constexpr (M == GeoMetric::Euclidean)
		{
			q[0] = s_.x[i];
			q[1] = s_.y[i];
		}
		else
		{
			q[0] = s_.ux[i];
			q[1] = s_.uy[i];
			q[2] = s_.uz[i];
		}
	}

	/*
	 * The cheapest bound of user b's sum, from both users' boxes: each of
	 * a's points is at least as far from b's nearest point as its box is
	 * from b's nearest box.  A box per box of each: it sets aside the users
	 * around none of a's places at once.
	 */
	double boxes_bound(int32_t a, int32_t b) const
	{
		double sum = 0;
		for (int64_t x = box_offsets_[a]; x < box_offsets_[a + 1]; ++x)
		{
			const Box &mine = boxes_[x];
			double nearest = INFINITY;
			for (int64_t y = box_offsets_[b]; y < box_offsets_[b + 1]; ++y)
			{
				double d2 = 0;
				for (int d = 0; d < kDims<M>; ++d)
				{
					double below = boxes_[y].lo[d] - mine.hi[d], above = mine.lo[d] - boxes_[y].hi[d];
					double gap = below > 0 ? below : above > 0 ? above : 0;
					d2 += gap * gap;
				}
				nearest = std::min(nearest, d2);
			}
			sum += static_cast<double>(mine.end - mine.begin) * std::max(distance_below<M>(nearest), epsilon_);
		}
		return sum;
	}

	void group_in_boxes()
	{
		double gap = box_gap(s_);
		box_offsets_.assign(static_cast<size_t>(s_.users()) + 1, 0);
		for (int32_t u = 0; u < s_.users(); ++u)
		{
			box_offsets_[u] = static_cast<int64_t>(boxes_.size());
			for (int64_t p = s_.offsets[u]; p < s_.offsets[u + 1]; ++p)
			{
				double q[3];
				point_of(p, q);
				bool new_box = starts_box(s_, p, s_.offsets[u], gap, static_cast<int64_t>(boxes_.size()) - box_offsets_[u]);
				if (new_box)
				{
					Box box;
					for (int d = 0; d < kDims<M>; ++d)
						box.lo[d] = box.hi[d] = q[d];
					box.begin = p;
					boxes_.push_back(box);
				}
				boxes_.back().end = p + 1;
				if (!new_box)
					for (int d = 0; d < kDims<M>; ++d)
						boxes_.back().lo[d] = std::min(boxes_.back().lo[d], q[d]),
						boxes_.back().hi[d] = std::max(boxes_.back().hi[d], q[d]);
			}
		}
		box_offsets_[s_.users()] = static_cast<int64_t>(boxes_.size());
	}

	std::vector<int64_t> box_offsets_; /* user u's boxes: boxes_[box_offsets_[u], box_offsets_[u + 1]) */
	std::vector<Box> boxes_;

	/*
	 * The pairs' index: for each user of at most kPairBoxes boxes, every
	 * ordered pair of its boxes (a box with itself too), as a box of twice
	 * the dimensions, in a k-d tree of such boxes.  within() visits the
	 * entries whose bound from a's two boxes may let their user in.
	 */
	struct PairEntry
	{
		int64_t boxes; /* its user's first box */
		int32_t user;
		uint8_t first, second; /* its two boxes: boxes_[boxes + first], boxes_[boxes + second] */
	};
	struct PairNode
	{
		double lo[2 * kDims<M>], hi[2 * kDims<M>];
		int64_t begin, end;
		int32_t left = -1, right = -1;
	};
	std::vector<PairEntry> pair_entries_;
	std::vector<PairNode> pair_nodes_;
	std::vector<int32_t> wide_users_; /* users of more than kPairBoxes boxes: not in the pairs' index */
	bool pairs_usable_ = false;

	void entry_extent(const PairEntry &e, double *lo, double *hi) const
	{
		const Box &one = boxes_[e.boxes + e.first], &two = boxes_[e.boxes + e.second];
		for (int d = 0; d < kDims<M>; ++d)
		{
			lo[d] = one.lo[d], hi[d] = one.hi[d];
			lo[kDims<M> + d] = two.lo[d], hi[kDims<M> + d] = two.hi[d];
		}
	}

	void index_pairs()
	{
		for (int32_t u = 0; u < s_.users(); ++u)
		{
			int64_t first = box_offsets_[u], count = box_offsets_[u + 1] - first;
			if (count > kPairBoxes)
			{
				wide_users_.push_back(u);
				continue;
			}
			for (int64_t i = 0; i < count; ++i)
				for (int64_t j = 0; j < count; ++j)
					pair_entries_.push_back({first, u, static_cast<uint8_t>(i), static_cast<uint8_t>(j)});
		}
		/* users of many boxes (points spread evenly) would be offered to everyone: the points' search serves better */
		pairs_usable_ = wide_users_.size() * kWidePairsShare <= static_cast<size_t>(s_.users());
		if (pairs_usable_ && !pair_entries_.empty())
			build_pairs(0, static_cast<int64_t>(pair_entries_.size()), 0);
	}

	int32_t build_pairs(int64_t begin, int64_t end, int depth)
	{
		constexpr int P = 2 * kDims<M>;
		auto index = static_cast<int32_t>(pair_nodes_.size());
		pair_nodes_.emplace_back();
		PairNode node;
		node.begin = begin;
		node.end = end;
		std::fill(node.lo, node.lo + P, INFINITY);
		std::fill(node.hi, node.hi + P, -INFINITY);
		for (int64_t e = begin; e < end; ++e)
		{
			double lo[P], hi[P];
			entry_extent(pair_entries_[e], lo, hi);
			for (int d = 0; d < P; ++d)
				node.lo[d] = std::min(node.lo[d], lo[d]), node.hi[d] = std::max(node.hi[d], hi[d]);
		}
		int widest = 0;
		for (int d = 1; d < P; ++d)
			if (node.hi[d] - node.lo[d] > node.hi[widest] - node.lo[widest])
				widest = d;
		if (end - begin > kLeafPoints && node.hi[widest] > node.lo[widest] && depth < 60)
		{
			int64_t middle = begin + (end - begin) / 2;
			auto centre = [this, widest](const PairEntry &e) {
				const Box &box = boxes_[e.boxes + (widest < kDims<M> ? e.first : e.second)];
				int d = widest % kDims<M>;
				return box.lo[d] + box.hi[d];
			};
			std::nth_element(pair_entries_.begin() + begin, pair_entries_.begin() + middle,
							 pair_entries_.begin() + end,
							 [&centre](const PairEntry &x, const PairEntry &y) { return centre(x) < centre(y); });
			node.left = build_pairs(begin, middle, depth + 1);
			node.right = build_pairs(middle, end, depth + 1);
		}
		pair_nodes_[index] = node;
		return index;
	}

	/* emit(user) for each entry whose extent `may` accept, the nodes' first; returns the nodes and entries examined. */
	template <typename May, typename Emit> double within(May may, Emit emit) const
	{
		if (pair_nodes_.empty())
			return 0;
		double examined = 0;
		int32_t stack[128];
		int top = 0;
		stack[top++] = 0;
		while (top > 0)
		{
			const PairNode &node = pair_nodes_[stack[--top]];
			examined += 1;
			if (!may(node.lo, node.hi))
				continue;
			if (node.left < 0)
			{
				for (int64_t e = node.begin; e < node.end; ++e)
				{
					double lo[2 * kDims<M>], hi[2 * kDims<M>];
					entry_extent(pair_entries_[e], lo, hi);
					examined += 1;
					if (may(lo, hi))
						emit(pair_entries_[e].user);
				}
				continue;
			}
			stack[top++] = node.left;
			stack[top++] = node.right;
		}
		return examined;
	}

	const GeoPointSet &s_;
	int k_;
	double epsilon_;
	KdTree<M> tree_;
	std::vector<Scratch> scratch_;
	std::atomic<int64_t> compared_{0}, searched_{0};
};

/* The users of more boxes than the pairs' index takes (PrunedSearch::index_pairs). */
size_t wide_users(const GeoPointSet &s)
{
	double gap = box_gap(s);
	size_t wide = 0;
	for (int32_t u = 0; u < s.users(); ++u)
	{
		int64_t boxes = 0;
		for (int64_t p = s.offsets[u]; p < s.offsets[u + 1]; ++p)
			boxes += starts_box(s, p, s.offsets[u], gap, boxes) ? 1 : 0;
		wide += boxes > kPairBoxes ? 1 : 0;
	}
	return wide;
}

} // namespace

bool brute_force_by_size(int64_t n_points, int32_t n_users, int k, GeoPruning pruning, PrunedFor device,
						 int parts)
{
	auto points = static_cast<double>(n_points);
	bool gpu = device == PrunedFor::Gpu;
	/* every other user ranks: nothing to prune */
	if (pruning == GeoPruning::Never || k >= n_users - 1)
		return true;
	if (pruning != GeoPruning::Auto)
		return false;
	if (points * points < (gpu ? kLeastGpuPrunedPairs : kLeastPrunedPairs))
		return true;
	/*
	 * On the GPU, a part whose brute force takes less than a pruned search
	 * costs at the least is not worth the index its sample would build (at
	 * 100k clustered users the sample's index made auto 1.47x the brute
	 * force, which it then chose).
	 */
	return gpu && points * points / std::max(1, parts) * rates::kPointPairs.gpu_ns <
					  kPrunedOverIndex * kIndexNsPerPoint * points;
}

bool gpu_bounded_by_size(int64_t n_points, int32_t n_users, int k, GeoPruning pruning)
{
	auto points = static_cast<double>(n_points);
	if (pruning == GeoPruning::Never || k >= n_users - 1 || k > gpu::kMostBoundedOthers)
		return false;
	return pruning == GeoPruning::Always || points * points >= kLeastGpuPrunedPairs;
}

std::unique_ptr<BestOthers> best_others_search(const GeoPointSet &s, int k, double epsilon, GeoPruning pruning,
											   PrunedFor device, int part, int parts, ExecContext &ctx)
{
	int32_t n_users = s.users();
	double n_points = static_cast<double>(s.points());
	bool gpu = device == PrunedFor::Gpu;
	if (brute_force_by_size(s.points(), n_users, k, pruning, device, parts))
		return nullptr;
	/*
	 * Users of more places than the pairs' index takes (points spread
	 * evenly) would list nearly everyone: the brute force, without building
	 * the index to sample it.
	 */
	if (pruning == GeoPruning::Auto && wide_users(s) * kWidePairsShare > static_cast<size_t>(n_users))
		return nullptr;
	std::unique_ptr<BestOthers> search;
	if (s.metric == GeoMetric::Euclidean)
		search = std::make_unique<PrunedSearch<GeoMetric::Euclidean>>(s, k, epsilon, ctx);
	else
		search = std::make_unique<PrunedSearch<GeoMetric::Haversine>>(s, k, epsilon, ctx);
	if (pruning == GeoPruning::Always)
		return search;

	/* auto: the part's users at even steps, searched as they would be */
	size_t users_of_part = n_users > part ? (n_users - part + parts - 1) / parts : 0;
	auto sample = static_cast<size_t>(std::min<size_t>(users_of_part, kSampleUsers));
	std::vector<double> brute(sample, 0);
	parallel_for(sample, ctx, [&](size_t item, size_t worker, const std::atomic<bool> &) {
		auto a = static_cast<int32_t>((item * users_of_part / sample) * parts + part);
		brute[item] = static_cast<double>(s.count(a)) * n_points;
		std::vector<int32_t> others;
		search->others_of(a, worker, others);
	});
	double brute_pairs = 0;
	for (double pairs : brute)
		brute_pairs += pairs;
	double searched = search->searched() * (gpu ? cpu_step_in_gpu_pairs(parts, ctx) : 1);
	if (!(search->compared() + searched < kPruneWhenBelow * brute_pairs))
		return nullptr;
	return search;
}

} // namespace gpurec
