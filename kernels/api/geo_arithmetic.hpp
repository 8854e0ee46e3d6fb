/*
 * geo_arithmetic.hpp: the geospatial arithmetic that the CPU path and the
 * GPU kernels share: distances, their order keys, the strength terms, the
 * order of every sum, and the heaps of best others.
 *
 * The two devices must give the same numbers.  Every floating-point step
 * below is one IEEE operation rounded once (no fused multiply-add, no
 * library transcendental: sine and arcsine are polynomials written here),
 * and every sum runs in an order fixed by this file, not by the device.  So
 * for a given input the CPU and the GPU compute the same similarities and
 * strengths, equal values tie the same way on both, and the only exception
 * is an exponent that is not a multiple of 1/4, which goes through the
 * libraries' pow() and may differ in the last bit.
 *
 * The metric is a flag here (haversine or not): which metrics SQL accepts,
 * and how they are spelled, is the engine's business (geo.hpp).
 */
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "host_device.hpp"

namespace gpurec {


/* One entry of a user's best others: the other user and its similarity. */
struct SimilarityEntry
{
	double similarity;
	long long user_id;
};

/*
 * How a strength term max(d, epsilon)^exponent is raised: from the floored
 * squared distance s = max(d^2, epsilon^2) as s^(exponent/2).  Exponents
 * that are multiples of 1/4 (all the usual ones) use products and square
 * roots only: s^whole * sqrt(s) [if half] * sqrt(sqrt(s)) [if quarter].
 */
struct PowerPlan
{
	double exponent;
	int whole;
	bool half;
	bool quarter;
	bool general; /* pow(s, exponent / 2) */
};

inline PowerPlan plan_power(double exponent)
{
	PowerPlan plan{exponent, 0, false, false, false};
	double quarters = exponent * 2; /* exponent / 2 in quarters */
	if (quarters == std::floor(quarters) && quarters <= 64)
	{
		int q = static_cast<int>(quarters);
		plan.whole = q / 4;
		plan.half = (q & 2) != 0;
		plan.quarter = (q & 1) != 0;
	}
	else
		plan.general = true;
	return plan;
}

/* What the strength of a candidate sums, besides the weights of the points. */
struct StrengthParams
{
	bool haversine; /* else euclidean */
	double epsilon;
	double epsilon_squared;
	/*
	 * max_distance: a point counts when its distance d <= max_distance.
	 * Euclidean compares the squared distance with max_key, the largest
	 * double whose square root rounds to at most max_distance, which is the
	 * same test exactly; haversine compares d itself (max_key = max_distance).
	 */
	bool has_max_distance;
	double max_key;
};

/*
 * The sum of one candidate's terms w / g runs over the points in CSR order,
 * in slices of kStrengthSlice points.  Within a slice, a group is a run of
 * at most kStrengthGroup consecutive points of bitwise equal weight w
 * (mostly the points of one user): its terms add up as w * (N / D), the sum
 * of the 1 / g as one fraction (one division per group instead of one per
 * point).  Group values add up into the slice's sum, and slice sums into
 * the total, in order.  Both devices follow exactly this order.
 */
constexpr int kStrengthGroup = 16;
constexpr int64_t kStrengthSlice = 16384;

namespace geo {

constexpr double kEarthRadius = 6371008.8;
constexpr double kPi = 3.141592653589793238462643383279502884;
/* radians per degree, halved: the haversine works on half-angles */
constexpr double kHalfRadiansPerDegree = kPi / 360.0;
constexpr double kPiOver2Hi = 1.57079632679489655800e+00;
constexpr double kPiOver2Lo = 6.12323399573676603587e-17;

/* IEEE operations rounded once each, never fused (nvcc fuses a*b+c by default). */
GPUREC_HOST_DEVICE double mul(double a, double b)
{
#ifdef __CUDA_ARCH__
	return __dmul_rn(a, b);
#else
	return a * b;
#endif
}

GPUREC_HOST_DEVICE double add(double a, double b)
{
#ifdef __CUDA_ARCH__
	return __dadd_rn(a, b);
#else
	return a + b;
#endif
}

GPUREC_HOST_DEVICE double sub(double a, double b)
{
#ifdef __CUDA_ARCH__
	return __dsub_rn(a, b);
#else
	return a - b;
#endif
}

GPUREC_HOST_DEVICE double div(double a, double b)
{
#ifdef __CUDA_ARCH__
	return __ddiv_rn(a, b);
#else
	return a / b;
#endif
}

GPUREC_HOST_DEVICE double root(double a)
{
#ifdef __CUDA_ARCH__
	return __dsqrt_rn(a);
#else
	return std::sqrt(a);
#endif
}

/* min and max; the same for all operands here (never NaN; zeros are +0) */
GPUREC_HOST_DEVICE double lesser(double a, double b)
{
#ifdef __CUDA_ARCH__
	return fmin(a, b);
#else
	return b < a ? b : a;
#endif
}

GPUREC_HOST_DEVICE double greater(double a, double b)
{
#ifdef __CUDA_ARCH__
	return fmax(a, b);
#else
	return b > a ? b : a;
#endif
}

/*
 * sin(x) for |x| <= pi/2: the Taylor series to x^23 (truncation below
 * 2e-18 there), Horner in x^2.  Small x keep full relative precision,
 * which is what short distances need.
 */
GPUREC_HOST_DEVICE double sine(double x)
{
	double z = mul(x, x);
	double p = -3.868170170630684e-23;
	p = add(1.9572941063391263e-20, mul(z, p));
	p = add(-8.22063524662433e-18, mul(z, p));
	p = add(2.8114572543455206e-15, mul(z, p));
	p = add(-7.647163731819816e-13, mul(z, p));
	p = add(1.6059043836821613e-10, mul(z, p));
	p = add(-2.505210838544172e-08, mul(z, p));
	p = add(2.7557319223985893e-06, mul(z, p));
	p = add(-0.0001984126984126984, mul(z, p));
	p = add(0.008333333333333333, mul(z, p));
	p = add(-0.16666666666666666, mul(z, p));
	return add(x, mul(x, mul(z, p)));
}

/* asin(x) for 0 <= x <= 0.5: fdlibm's rational approximation. */
GPUREC_HOST_DEVICE double arcsine_small(double x)
{
	double z = mul(x, x);
	double p = 3.47933107596021167570e-05;
	p = add(7.91534994289814532176e-04, mul(z, p));
	p = add(-4.00555345006794114027e-02, mul(z, p));
	p = add(2.01212532134862925881e-01, mul(z, p));
	p = add(-3.25565818622400915405e-01, mul(z, p));
	p = add(1.66666666666666657415e-01, mul(z, p));
	p = mul(z, p);
	double q = 7.70381505559019352791e-02;
	q = add(-6.88283971605453293030e-01, mul(z, q));
	q = add(2.02094576023350569471e+00, mul(z, q));
	q = add(-2.40339491173441421878e+00, mul(z, q));
	q = add(1.0, mul(z, q));
	return add(x, mul(x, div(p, q)));
}

/* asin(x) for 0 <= x <= 1; above 1/2 through asin(x) = pi/2 - 2 asin(sqrt((1 - x) / 2)). */
GPUREC_HOST_DEVICE double arcsine(double x)
{
	if (x <= 0.5)
		return arcsine_small(x);
	double t = root(mul(sub(1.0, x), 0.5)); /* 1 - x is exact here */
	return sub(kPiOver2Hi, sub(mul(2.0, arcsine_small(t)), kPiOver2Lo));
}

/*
 * The order of a user's points, in which every sum over them runs: by x,
 * then y, each by this key, IEEE's total order as an unsigned integer (-0
 * before +0; coordinates are never NaN).  An integer, so that the CPU's
 * comparison sort and the GPU's radix sort put the points in the same
 * order, equal keys being equal bits.
 */
GPUREC_HOST_DEVICE uint64_t point_order_key(double v)
{
	uint64_t bits;
	memcpy(&bits, &v, sizeof bits);
	return (bits >> 63) ? ~bits : bits | (uint64_t(1) << 63);
}

/* cos(latitude) for a latitude in degrees in [-90, 90], as sin(90 - |latitude|): 0 at the poles. */
GPUREC_HOST_DEVICE double cos_latitude(double latitude)
{
	return sine(mul(sub(90.0, latitude < 0 ? -latitude : latitude), 2 * kHalfRadiansPerDegree));
}

/* The squared distance, the order key of euclidean distances. */
GPUREC_HOST_DEVICE double euclidean_key(double ax, double ay, double bx, double by)
{
	double dx = sub(ax, bx), dy = sub(ay, by);
	return add(mul(dx, dx), mul(dy, dy));
}

/*
 * The order key of great-circle distances.  Up to a quarter turn it is the
 * haversine of the central angle, h = sin^2(dlat/2) + cos(lat_a) cos(lat_b)
 * sin^2(dlon/2), from differences of the input degrees, so that nearby
 * points keep every digit.  Beyond, h nears 1 and would lose the angle's
 * last digits near the antipode; there the key is 1 / h', h' = 1 - h
 * computed directly as the haversine of the angle to b's antipode,
 * sin^2((lat_a + lat_b)/2) + cos(lat_a) cos(lat_b) cos^2(dlon/2).  Keys
 * above 1/2 are of that kind (1 / h' >= 2), and keys grow with distance
 * throughout.  The same value for (a, b) as for (b, a), bit for bit.
 */
GPUREC_HOST_DEVICE double haversine_key(double a_lon, double a_lat, double a_cos, double b_lon, double b_lat,
							double b_cos)
{
	double dlon = sub(b_lon, a_lon); /* in [-360, 360]; sin^2(dlon/2) has period 360 */
	if (dlon > 180.0)
		dlon = sub(dlon, 360.0); /* exact */
	else if (dlon < -180.0)
		dlon = add(dlon, 360.0);
	double cos_product = mul(a_cos, b_cos);
	double s_lat = sine(mul(sub(b_lat, a_lat), kHalfRadiansPerDegree));
	double s_lon = sine(mul(dlon, kHalfRadiansPerDegree));
	double h = add(mul(s_lat, s_lat), mul(cos_product, mul(s_lon, s_lon)));
	if (h <= 0.5)
		return h;
	double half_dlon = mul(dlon < 0 ? -dlon : dlon, 0.5); /* exact */
	double s_sum = sine(mul(add(a_lat, b_lat), kHalfRadiansPerDegree));
	double c_lon = sine(mul(sub(90.0, half_dlon), 2 * kHalfRadiansPerDegree)); /* cos(dlon/2) */
	return div(1.0, add(mul(s_sum, s_sum), mul(cos_product, mul(c_lon, c_lon))));
}

/* The distance whose order key is `key`. */
GPUREC_HOST_DEVICE double key_distance(bool haversine, double key)
{
	if (!haversine)
		return root(key);
	double half_angle;
	if (key <= 0.5)
		half_angle = arcsine(root(key));
	else /* pi/2 - asin(sqrt(h')) */
		half_angle = sub(kPiOver2Hi, sub(arcsine(root(div(1.0, key))), kPiOver2Lo));
	return mul(2.0 * kEarthRadius, half_angle);
}

/* similarity = 1 / mean of the floored distances = n / their sum */
GPUREC_HOST_DEVICE double similarity_of(int64_t main_points, double floored_sum)
{
	return div(static_cast<double>(main_points), floored_sum);
}

/* s^(exponent/2) for the floored squared distance s. */
GPUREC_HOST_DEVICE double raise(double s, const PowerPlan &plan)
{
	if (plan.general)
	{
#ifdef __CUDA_ARCH__
		return ::pow(s, 0.5 * plan.exponent);
#else
		return std::pow(s, 0.5 * plan.exponent);
#endif
	}
	double g = 1.0;
	for (int i = 0; i < plan.whole; ++i)
		g = mul(g, s);
	if (plan.half || plan.quarter)
	{
		double r = root(s);
		if (plan.half)
			g = mul(g, r);
		if (plan.quarter)
			g = mul(g, root(r));
	}
	return g;
}

/*
 * The floored squared distance s = max(d^2, epsilon^2) from point p to
 * candidate c, or -1 when p lies beyond max_distance.
 */
GPUREC_HOST_DEVICE double strength_base(const StrengthParams &sp, double px, double py, double pcos, double cx,
							double cy, double ccos)
{
	double d2;
	if (!sp.haversine)
	{
		d2 = euclidean_key(px, py, cx, cy);
		if (sp.has_max_distance && !(d2 <= sp.max_key))
			return -1.0;
	}
	else
	{
		double d = key_distance(true, haversine_key(px, py, pcos, cx, cy, ccos));
		if (sp.has_max_distance && !(d <= sp.max_key))
			return -1.0;
		d2 = mul(d, d);
	}
	return greater(d2, sp.epsilon_squared);
}

/* The end of the group that starts at point p (see kStrengthGroup). */
GPUREC_HOST_DEVICE int64_t group_end(const double *w, int64_t p, int64_t slice_end)
{
	int64_t end = p + kStrengthGroup < slice_end ? p + kStrengthGroup : slice_end;
	int64_t q = p + 1;
	while (q < end && w[q] == w[p])
		++q;
	return q;
}

/*
 * A group's sum of 1 / g_i as the fraction N / D: adding 1 / g makes it
 * (N g + D) / (D g).  All terms are positive, so there is no cancellation;
 * only D may leave the range of doubles, and then the group is summed term
 * by term instead (fallback_needed()).
 */
struct GroupFraction
{
	double numerator = 0.0;
	double denominator = 1.0;

	GPUREC_HOST_DEVICE void add_term(double g)
	{
		numerator = geo::add(mul(numerator, g), denominator);
		denominator = mul(denominator, g);
	}
	GPUREC_HOST_DEVICE bool empty() const { return numerator == 0.0; }
	GPUREC_HOST_DEVICE bool fallback_needed() const
	{
		return !(denominator >= 2.2250738585072014e-308 && denominator <= 1.7976931348623157e308 &&
				 numerator <= 1.7976931348623157e308);
	}
	GPUREC_HOST_DEVICE double value() const { return div(numerator, denominator); }
};

/* Heaps of the best others: the root is the worst kept entry. */
GPUREC_HOST_DEVICE bool better(const SimilarityEntry &a, const SimilarityEntry &b)
{
	return a.similarity > b.similarity || (a.similarity == b.similarity && a.user_id < b.user_id);
}

/* Offers e to a heap of at most k entries; returns whether it was kept. */
GPUREC_HOST_DEVICE bool heap_offer(SimilarityEntry *heap, int &size, int k, SimilarityEntry e)
{
	int i;
	if (size < k)
	{
		/* sift up: parents are worse than children */
		i = size++;
		while (i > 0)
		{
			int parent = (i - 1) / 2;
			if (!better(heap[parent], e))
				break;
			heap[i] = heap[parent];
			i = parent;
		}
		heap[i] = e;
		return true;
	}
	if (!better(e, heap[0]))
		return false;
	/* replace the root, sift down */
	i = 0;
	for (;;)
	{
		int child = 2 * i + 1;
		if (child >= size)
			break;
		if (child + 1 < size && better(heap[child], heap[child + 1]))
			++child; /* the worse child */
		if (!better(e, heap[child]))
			break;
		heap[i] = heap[child];
		i = child;
	}
	heap[i] = e;
	return true;
}

} // namespace geo

} // namespace gpurec
