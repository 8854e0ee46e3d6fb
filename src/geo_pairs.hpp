/*
 * geo_pairs.hpp: the CPU's distance from a point to the nearest point of a
 * user, and the floored sum that makes one user's similarity to another:
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

/* Over a's points in order, the distance to b's nearest point floored at epsilon, summed: similarity_of's sum. */
template <GeoMetric M> double floored_sum(const GeoPointSet &s, int32_t a, int32_t b, double epsilon)
{
	double f = 0.0;
	for (int64_t i = s.offsets[a]; i < s.offsets[a + 1]; ++i)
		f = geo::add(f, geo::greater(nearest_distance<M>(s, i, s.offsets[b], s.offsets[b + 1]), epsilon));
	return f;
}

} // namespace gpurec
