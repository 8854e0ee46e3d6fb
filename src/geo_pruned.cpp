/*
 * geo_pruned.cpp: similar_users without comparing every pair of users, to
 * the same bits as comparing them all.
 *
 * A k-d tree holds every point of the call (in the plane under euclidean;
 * on the unit sphere, by chord, under haversine).  For a user A, a search
 * of radius r around each of A's points i visits every point within r of
 * it, by its owner and distance, except that a node far from i for its
 * size is visited once per user with points in it, at the node's least
 * distance from i.  For any other user B, the distance from i to B's
 * nearest point is then at least the least distance at which the search
 * visited B, and more than r when it did not visit B.  So the sum that
 * makes B's similarity to A (geo_pairs.hpp, offer_other) is at least
 *     sum over i of max(visited_i(B) ? least_i(B) : r, epsilon),
 * and a user that no search visited has a sum of at least
 * n_A max(r, epsilon).  The users visited are compared with A point by
 * point (offer_other, exactly as the brute force does) in order of that
 * bound, until the bound of the next one says that it cannot enter A's
 * heap of best others (once the heap is full, a second bound from the
 * user's boxes, box_bound, may still skip it); A is done when the bound of
 * the users not visited says the same of them.  Otherwise r grows (to the mean distance of A's
 * k-th best so far, once there are k: the users beyond it cannot enter)
 * and the search repeats; the users already compared are not compared
 * again.
 *
 * Bounds are computed in doubles and made a little lower (bound_margin,
 * geo_pairs.hpp) than the least sum that rounding could make; a user is skipped only
 * when its bound's similarity is strictly below the heap's worst, so equal
 * similarities still enter and tie by id as in the brute force.  The heap
 * therefore holds the brute force's k best, whose similarity values are
 * computed by the same function.
 *
 * Where the points are spread evenly, the radii grow until nearly every
 * pair is compared: pruning would cost more than the brute force.  Under
 * gpurec.geo_pruning = auto a sample of the users decides (choose_pruned);
 * and a user whose search exceeds half of its brute force's cost is
 * finished by the brute force.
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
 * of one per point (the boxes' bound then tightens it, box_bound).
 */
constexpr double kFarEnough = 1.0;

/* A user's search gives up past this share of its brute force's pairs (and the brute force finishes it). */
constexpr double kSearchBudget = 0.5;

/* Users sampled to decide between pruning and the brute force (auto). */
constexpr int32_t kSampleUsers = 96;

/* auto prunes when the sample's searches cost less than this share of their brute force. */
constexpr double kPruneWhenBelow = 0.6;

/*
 * auto compares every pair below this many pairs of points: less than a
 * millisecond of work, where building the index would cost as much.
 */
constexpr double kLeastPrunedPairs = 1e6;

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
	template <typename Visit> int64_t around(const double *q, double r2, Visit visit) const
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
			double gap = box_distance(node, q);
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
						double delta = coordinate_[d][p] - q[d];
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

	static double box_distance(const Node &node, const double *q)
	{
		double d2 = 0;
		for (int d = 0; d < D; ++d)
		{
			double below = node.lo[d] - q[d], above = q[d] - node.hi[d];
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

/* A user visited by a search: the bound of its sum, folded one of A's points at a time, in order. */
struct Seen
{
	int32_t user;
	int64_t point; /* A's point whose least distance to the user so far is in `least` */
	double least;  /* that least index-space distance squared */
	double sum;	   /* the bounds of A's points before `point`, floored, summed */
	double bound;
};

/*
 * Users' points grouped in boxes: runs of a user's points (in point order,
 * by x) without a gap in x wider than a 256th of all the points' x range,
 * at most kMostBoxes a user.  A user whose points lie around a few places
 * far apart gets a small box around each, whose distance from a point
 * bounds the user's nearest distance from it closely.
 */
constexpr int kMostBoxes = 8;

template <GeoMetric M> class PrunedSearch final : public BestOthers
{
  public:
	PrunedSearch(const GeoPointSet &s, int k, double epsilon, ExecContext &ctx)
		: s_(s), k_(k), epsilon_(epsilon), tree_(s, ctx), scratch_(parallel_workers(s.users(), ctx))
	{
		group_in_boxes();
	}

	bool find(int32_t a, size_t worker, SimilarityEntry *heap, int &size) override
	{
		Scratch &w = scratch_[worker];
		if (w.slot.empty())
		{
			w.slot.assign(static_cast<size_t>(s_.users()), -1);
			w.compared.assign(static_cast<size_t>(s_.users()), 0);
		}
		int64_t n = s_.count(a);
		double budget = kSearchBudget * static_cast<double>(n) * static_cast<double>(s_.points());
		double margin = 1 - bound_margin(n);
		double work = 0, searched = 0, boxed = 0;
		double radius = tree_.first_radius();
		bool done = false;
		w.compared_users.clear();
		for (;;)
		{
			double r2 = radius * radius;
			double unseen = std::max(radius >= tree_.whole() ? INFINITY : distance_below<M>(r2), epsilon_);
			w.seen.clear();
			for (int64_t i = s_.offsets[a]; i < s_.offsets[a + 1]; ++i)
			{
				double q[3];
				point_of(i, q);
				searched += static_cast<double>(tree_.around(q, r2, [&](int32_t u, double d2) __attribute__((always_inline)) {
					if (u == a)
						return;
					int32_t &slot = w.slot[u];
					if (slot < 0)
					{
						slot = static_cast<int32_t>(w.seen.size());
						w.seen.push_back({u, i, d2, 0.0, 0.0});
						fold_unseen(w.seen.back(), s_.offsets[a], i, unseen);
						return;
					}
					Seen &seen = w.seen[slot];
					if (seen.point != i)
					{
						fold(seen);
						fold_unseen(seen, seen.point + 1, i, unseen);
						seen.point = i;
						seen.least = d2;
					}
					else
						seen.least = std::min(seen.least, d2);
				}));
			}
			for (Seen &seen : w.seen)
			{
				fold(seen);
				fold_unseen(seen, seen.point + 1, s_.offsets[a + 1], unseen);
				w.slot[seen.user] = -1;
				seen.bound = seen.sum * margin;
			}
			std::sort(w.seen.begin(), w.seen.end(), [](const Seen &x, const Seen &y) { return x.bound < y.bound; });
			for (const Seen &seen : w.seen)
			{
				if (size == k_ && geo::similarity_of(n, seen.bound) < heap[0].similarity)
					break;
				if (w.compared[seen.user])
					continue;
				/* compared, or shown unable to enter: the heap's worst only rises */
				w.compared[seen.user] = 1;
				w.compared_users.push_back(seen.user);
				if (size == k_)
				{
					boxed += static_cast<double>(n) * static_cast<double>(box_offsets_[seen.user + 1] -
																		  box_offsets_[seen.user]);
					if (geo::similarity_of(n, box_bound(a, seen.user) * margin) < heap[0].similarity)
						continue;
				}
				offer_other<M>(s_, a, seen.user, k_, epsilon_, heap, size);
				work += static_cast<double>(n) * static_cast<double>(s_.count(seen.user));
			}
			bool all_seen = w.seen.size() + 1 == static_cast<size_t>(s_.users());
			if (all_seen || (size == k_ && geo::similarity_of(n, static_cast<double>(n) * unseen * margin) <
											   heap[0].similarity))
			{
				done = true;
				break;
			}
			if (work + searched + boxed > budget)
				break;
			/* the radius at which the users not seen fall behind the worst kept, once there are k */
			double next = radius * 2;
			if (size == k_)
				next = std::max(next, radius_for<M>(1.0 / heap[0].similarity / margin));
			radius = next >= tree_.whole() ? INFINITY : next;
		}
		for (int32_t u : w.compared_users)
			w.compared[u] = 0;
		compared_.fetch_add(static_cast<int64_t>(std::min(work, 9e18)), std::memory_order_relaxed);
		searched_.fetch_add(static_cast<int64_t>(std::min(searched + boxed, 9e18)), std::memory_order_relaxed);
		return done;
	}

	double compared() const override { return static_cast<double>(compared_.load()); }
	double searched() const override { return static_cast<double>(searched_.load()); }

  private:
	struct Scratch
	{
		std::vector<int32_t> slot; /* per user: its place in `seen`, or -1 */
		std::vector<Seen> seen;
		std::vector<uint8_t> compared; /* per user: compared with the current user */
		std::vector<int32_t> compared_users;
	};

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

	void fold(Seen &seen) const { seen.sum += std::max(distance_below<M>(seen.least), epsilon_); }

	/* A's points [from, to), from which the search did not visit the user: each at least `unseen` (floored). */
	static void fold_unseen(Seen &seen, int64_t from, int64_t to, double unseen)
	{
		if (to > from)
			seen.sum += static_cast<double>(to - from) * unseen;
	}

	/*
	 * Another bound of user b's sum, from its boxes: each of a's points is at
	 * least b's nearest box away from b's nearest point.  Dearer than the
	 * search's (a box distance per point of a and box of b), so taken only
	 * for the users that the search's bound leaves to compare.
	 */
	double box_bound(int32_t a, int32_t b) const
	{
		double sum = 0;
		for (int64_t i = s_.offsets[a]; i < s_.offsets[a + 1]; ++i)
		{
			double q[3];
			point_of(i, q);
			double nearest = INFINITY;
			for (int64_t x = box_offsets_[b]; x < box_offsets_[b + 1]; ++x)
			{
				double d2 = 0;
				for (int d = 0; d < kDims<M>; ++d)
				{
					double below = boxes_[x].lo[d] - q[d], above = q[d] - boxes_[x].hi[d];
					double gap = below > 0 ? below : above > 0 ? above : 0;
					d2 += gap * gap;
				}
				nearest = std::min(nearest, d2);
			}
			sum += std::max(distance_below<M>(nearest), epsilon_);
		}
		return sum;
	}

	void group_in_boxes()
	{
		int64_t n = s_.points();
		double lo = INFINITY, hi = -INFINITY;
		for (int64_t p = 0; p < n; ++p)
			lo = std::min(lo, s_.x[p]), hi = std::max(hi, s_.x[p]);
		double gap = (hi - lo) / 256;
		box_offsets_.assign(static_cast<size_t>(s_.users()) + 1, 0);
		for (int32_t u = 0; u < s_.users(); ++u)
		{
			box_offsets_[u] = static_cast<int64_t>(boxes_.size());
			for (int64_t p = s_.offsets[u]; p < s_.offsets[u + 1]; ++p)
			{
				double q[3];
				point_of(p, q);
				bool new_box = p == s_.offsets[u] || (s_.x[p] - s_.x[p - 1] > gap &&
													  static_cast<int64_t>(boxes_.size()) - box_offsets_[u] < kMostBoxes);
				if (new_box)
				{
					Box box;
					for (int d = 0; d < kDims<M>; ++d)
						box.lo[d] = box.hi[d] = q[d];
					boxes_.push_back(box);
				}
				else
					for (int d = 0; d < kDims<M>; ++d)
						boxes_.back().lo[d] = std::min(boxes_.back().lo[d], q[d]),
						boxes_.back().hi[d] = std::max(boxes_.back().hi[d], q[d]);
			}
		}
		box_offsets_[s_.users()] = static_cast<int64_t>(boxes_.size());
	}

	struct Box
	{
		double lo[kDims<M>], hi[kDims<M>];
	};
	std::vector<int64_t> box_offsets_; /* user u's boxes: boxes_[box_offsets_[u], box_offsets_[u + 1]) */
	std::vector<Box> boxes_;

	const GeoPointSet &s_;
	int k_;
	double epsilon_;
	KdTree<M> tree_;
	std::vector<Scratch> scratch_;
	std::atomic<int64_t> compared_{0}, searched_{0};
};

} // namespace

std::unique_ptr<BestOthers> best_others_search(const GeoPointSet &s, int k, double epsilon, GeoPruning pruning,
											   int part, int parts, ExecContext &ctx)
{
	int32_t n_users = s.users();
	double n_points = static_cast<double>(s.points());
	/* every other user ranks: nothing to prune */
	if (pruning == GeoPruning::Never || k >= n_users - 1)
		return nullptr;
	if (pruning == GeoPruning::Auto && n_points * n_points < kLeastPrunedPairs)
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
	std::vector<SimilarityEntry> heaps(sample * k);
	parallel_for(sample, ctx, [&](size_t item, size_t worker, const std::atomic<bool> &) {
		auto a = static_cast<int32_t>((item * users_of_part / sample) * parts + part);
		int size = 0;
		search->find(a, worker, heaps.data() + item * k, size);
		brute[item] = static_cast<double>(s.count(a)) * n_points;
	});
	double brute_pairs = 0;
	for (double b : brute)
		brute_pairs += b;
	if (!(search->compared() + search->searched() < kPruneWhenBelow * brute_pairs))
		return nullptr;
	return search;
}

} // namespace gpurec
