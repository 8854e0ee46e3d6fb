/*
 * geo_pairs.hpp: the CPU's distance from a point to the nearest point of a
 * user, and the offer of one user to another's best others:
 * what the brute force and the pruned search (geo_pruned.cpp) both evaluate,
 * so that both give the same bits, which are also the GPU's
 * (geo_arithmetic.hpp).  Included by geo_*.cpp after geo_internal.hpp.
 *
 * Under haversine the nearest point is found by chord length on the unit
 * sphere (three differences, three products), which orders points as their
 * great-circle distance does, and only the points whose chord is within
 * rounding of the least one get the exact order key of
 * geo::haversine_key.  The least of those keys is the least key of all
 * points (see nearest_haversine_key), so the distance is today's to the
 * bit, at about the cost of a euclidean comparison per pair.
 */
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "geo_internal.hpp"

namespace gpurec {

/* Points of the other user whose chords a nearest search holds at once. */
constexpr int64_t kChordChunk = 64;

/*
 * The largest squared chord that may still belong to the nearest point
 * when the least computed squared chord is `least`.  Each unit vector's
 * components are within 2e-15 of the true ones (library sine and cosine of
 * radians rounded once), so a computed chord is within 7e-15 + 1e-15 c of
 * the true one; haversine_key orders true chords to a relative 1e-14.  The
 * band below is a hundred times wider than both together.
 */
inline double chord_band(double least)
{
	double c = std::sqrt(least) * (1 + 1e-12) + 1e-12;
	return c * c;
}

inline double squared_chord(const GeoPointSet &s, int64_t a, int64_t b)
{
	double dx = geo::sub(s.ux[a], s.ux[b]), dy = geo::sub(s.uy[a], s.uy[b]), dz = geo::sub(s.uz[a], s.uz[b]);
	return geo::add(geo::add(geo::mul(dx, dx), geo::mul(dy, dy)), geo::mul(dz, dz));
}

inline double haversine_pair_key(const GeoPointSet &s, int64_t a, int64_t b)
{
	return geo::haversine_key(s.x[a], s.y[a], s.cos_lat[a], s.x[b], s.y[b], s.cos_lat[b]);
}

/*
 * The least haversine_key from point a to the points [begin, end): the
 * chords of a chunk at a time find the least chord; the points within
 * chord_band of it are the only ones whose key can be the least (a point
 * with the least key has a true chord at most 1e-14 relative above the
 * least true chord, so its computed chord is within the band), and their
 * exact keys give the answer.
 */
inline double nearest_haversine_key(const GeoPointSet &s, int64_t a, int64_t begin, int64_t end)
{
	double chords[kChordChunk];
	double least = INFINITY;
	bool whole = end - begin <= kChordChunk;
	for (int64_t j = begin; j < end; ++j)
	{
		double c = squared_chord(s, a, j);
		if (whole)
			chords[j - begin] = c;
		least = geo::lesser(least, c);
	}
	double band = chord_band(least);
	double best = INFINITY;
	for (int64_t j = begin; j < end; ++j)
		if ((whole ? chords[j - begin] : squared_chord(s, a, j)) <= band)
			best = geo::lesser(best, haversine_pair_key(s, a, j));
	return best;
}

/* The distance from point a of the set to the nearest of the points [begin, end). */
template <GeoMetric M> double nearest_distance(const GeoPointSet &s, int64_t a, int64_t begin, int64_t end)
{
	if constexpr (M == GeoMetric::Euclidean)
	{
		double best = INFINITY;
		for (int64_t j = begin; j < end; ++j)
			best = geo::lesser(best, geo::euclidean_key(s.x[a], s.y[a], s.x[j], s.y[j]));
		return geo::key_distance(false, best);
	}
	else
		return geo::key_distance(true, nearest_haversine_key(s, a, begin, end));
}

/*
 * The relative margin by which a bound of a floored sum of n terms is made
 * lower than the least sum that rounding could give: each distance and the
 * sum of n terms are within (n + 8) x 2^-53 of exact (geo_arithmetic.hpp),
 * far below this.
 */
inline double bound_margin(int64_t n) { return 1e-9 + 4e-16 * static_cast<double>(n); }

/*
 * A lower bound of the great-circle distance between two points whose
 * squared chord was computed as `squared`: the arc is at least the chord
 * (2 asin(c / 2) >= c), and the computed chord is within chord_band's
 * rounding of the true one.
 */
inline double chord_distance_below(double squared)
{
	return std::max(0.0, std::sqrt(squared) * (1 - 1e-12) - 1e-12) * geo::kEarthRadius;
}

/*
 * Offers user b to the heap of a's best others (geo::heap_offer), with b's
 * similarity to a: over a's points in order, the distance to b's nearest
 * point floored at epsilon, summed (similarity_of's sum; the GPU's
 * best_others adds the same terms in the same order).  Once the heap is full, b
 * enters only with a similarity at least the worst kept one, so two
 * shortcuts skip it as soon as it provably cannot:
 *   - under haversine, a bound from chords alone (a square root per point
 *     of a instead of a great-circle distance) first;
 *   - the sum itself only grows term by term (adding non-negative doubles
 *     never lowers a rounded sum), so once a partial sum's similarity is
 *     below the worst kept, the whole one is too.
 * Where b may enter, its similarity is that sum's, whole.
 */
template <GeoMetric M>
void offer_other(const GeoPointSet &s, int32_t a, int32_t b, int k, double epsilon, SimilarityEntry *heap,
				 int &size)
{
	int64_t n = s.count(a);
	bool full = size == k;
	double worst = full ? heap[0].similarity : 0.0;
	/* partial sums above this may already be out; the division then says (it decides, exactly) */
	double cut = full ? static_cast<double>(n) / worst * (1 - 1e-12) : INFINITY;
	if constexpr (M == GeoMetric::Haversine)
		if (full)
		{
			double below = 0.0;
			for (int64_t i = s.offsets[a]; i < s.offsets[a + 1]; ++i)
			{
				double least = INFINITY;
				for (int64_t j = s.offsets[b]; j < s.offsets[b + 1]; ++j)
					least = geo::lesser(least, squared_chord(s, i, j));
				below += std::max(chord_distance_below(least), epsilon);
			}
			if (geo::similarity_of(n, below * (1 - bound_margin(n))) < worst)
				return;
		}
	double f = 0.0;
	for (int64_t i = s.offsets[a]; i < s.offsets[a + 1]; ++i)
	{
		f = geo::add(f, geo::greater(nearest_distance<M>(s, i, s.offsets[b], s.offsets[b + 1]), epsilon));
		if (f > cut && geo::similarity_of(n, f) < worst)
			return;
	}
	geo::heap_offer(heap, size, k, {geo::similarity_of(n, f), static_cast<long long>(s.user_ids[b])});
}

} // namespace gpurec
