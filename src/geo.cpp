/*
 * geo.cpp: the geospatial recommender: validation, grouping points per
 * user, the CPU algorithms (on all cores through cpu_parallel.hpp), and the
 * choice of device.
 *
 * The CPU loops below and the GPU kernels (kernels/geo.cu) perform the same
 * IEEE operations in the same order (geo_kernels.hpp), so both give the
 * same bits.  Compilers must not fuse a*b+c here, whatever -march says:
 */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "no_postgres.hpp"

#include "geo.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cfloat>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <type_traits>
#include <unordered_map>

#include "cpu_parallel.hpp"

namespace gpurec {

namespace {

/* Under gpurec.device = auto, problems smaller than this many distance evaluations stay on the CPU. */
constexpr double kMinGpuPairs = 2e7;

/* Rows a single-threaded CPU loop handles between interrupt checks (a few milliseconds). */
constexpr size_t kCheckRows = size_t(1) << 18;

/* Distance evaluations per CPU work item: about a millisecond. */
constexpr double kPairsPerItem = 1e6;

/* As float8 output spells it. */
std::string number_text(double v)
{
	if (std::isnan(v))
		return "NaN";
	if (std::isinf(v))
		return v > 0 ? "Infinity" : "-Infinity";
	char buf[64];
	for (int digits = 15; digits <= 17; ++digits) /* the shortest that reads back the same */
	{
		std::snprintf(buf, sizeof buf, "%.*g", digits, v);
		if (std::strtod(buf, nullptr) == v)
			break;
	}
	return buf;
}

/* ---- arguments ---------------------------------------------------------- */

void check_epsilon(double epsilon)
{
	if (!(epsilon > 0) || !std::isfinite(epsilon))
		throw Error(sqlstate::invalid_parameter_value, "epsilon must be greater than zero",
					"epsilon = " + number_text(epsilon) + ".",
					"epsilon is the least distance counted; the default is 1e-9.");
}

void check_exponent(double exponent)
{
	if (!(exponent > 0) || !std::isfinite(exponent))
		throw Error(sqlstate::invalid_parameter_value, "exponent must be greater than zero",
					"exponent = " + number_text(exponent) + ".");
}

void check_strength_options(const StrengthOptions &strength)
{
	if (std::isnan(strength.max_distance) || strength.max_distance < 0)
		throw Error(sqlstate::invalid_parameter_value, "max_distance must not be negative",
					"max_distance = " + number_text(strength.max_distance) + ".",
					"Pass NULL for no limit.");
	if (std::isnan(strength.min_similarity))
		throw Error(sqlstate::invalid_parameter_value, "min_similarity must not be NaN");
}

/* Coordinates: finite; under haversine, longitude and latitude in range. */
void check_coordinates(double x, double y, GeoMetric metric, const char *what, int64_t id)
{
	auto whose = [&] { return std::string(what) + " " + std::to_string(id); };
	if (!std::isfinite(x) || !std::isfinite(y))
		throw Error(sqlstate::data_exception,
					"a point of " + whose() + " has a non-finite coordinate",
					"x = " + number_text(x) + ", y = " + number_text(y) + ".");
	if (metric != GeoMetric::Haversine)
		return;
	if (y < -90 || y > 90)
		throw Error(sqlstate::numeric_value_out_of_range,
					"latitude " + number_text(y) + " of " + whose() + " is out of range",
					"Under the haversine metric y is the latitude in degrees, from -90 to 90.");
	if (x < -180 || x > 180)
		throw Error(sqlstate::numeric_value_out_of_range,
					"longitude " + number_text(x) + " of " + whose() + " is out of range",
					"Under the haversine metric x is the longitude in degrees, from -180 to 180.");
}

int32_t main_user_code(const GeoPoints &points, int64_t main_user, const char *role = "main user")
{
	int32_t code = points.user.find(main_user);
	if (code < 0)
		throw Error(sqlstate::invalid_parameter_value,
					std::string(role) + " " + std::to_string(main_user) + " has no points",
					"Similarity to a user is measured from that user's points.");
	return code;
}

/*
 * Every coordinate finite and, under haversine, in range; else the error
 * that names the user of the first bad row.  A branch-free pass per chunk
 * first, as bad rows are rare.
 */
void validate_points(const GeoPoints &points, GeoMetric metric)
{
	size_t n = points.user.size();
	if (points.x.size() != n || points.y.size() != n)
		throw Error(sqlstate::internal_error, "points columns differ in length");
	if (points.user.distinct() > static_cast<size_t>(INT32_MAX) - 1)
		throw Error(sqlstate::program_limit_exceeded, "too many users in one call");
	bool haversine = metric == GeoMetric::Haversine;
	for (size_t c = 0; c < points.x.chunk_count(); ++c)
	{
		const double *x = points.x.chunk_data(c), *y = points.y.chunk_data(c);
		size_t rows = points.x.chunk_rows(c);
		bool bad = false;
		if (haversine)
			for (size_t i = 0; i < rows; ++i)
				bad |= !(x[i] >= -180 && x[i] <= 180 && y[i] >= -90 && y[i] <= 90);
		else
			for (size_t i = 0; i < rows; ++i)
				bad |= !(std::fabs(x[i]) <= DBL_MAX && std::fabs(y[i]) <= DBL_MAX);
		if (!bad)
			continue;
		for (size_t i = 0; i < rows; ++i)
		{
			size_t row = c * FloatColumn::kChunkRows + i;
			check_coordinates(x[i], y[i], metric, "user", points.user.value_of(points.user.code(row)));
		}
	}
}

/* What every function checks first: epsilon, then every point. */
void check_geo_input(const GeoPoints &points, const GeoOptions &options)
{
	check_epsilon(options.epsilon);
	validate_points(points, options.metric);
}

/* cos(latitude) of every latitude, which the haversine key takes with it. */
template <typename Vector> Vector cos_latitudes(const Vector &latitude)
{
	Vector out(latitude.size());
	for (size_t i = 0; i < latitude.size(); ++i)
		out[i] = geo::cos_latitude(latitude[i]);
	return out;
}

/* The CSR of valid points, stable: each user's points in input order. */
GeoPointSet build_point_set(const GeoPoints &points, GeoMetric metric,
							const std::function<void()> &check_interrupts = [] {})
{
	size_t n = points.user.size();
	GeoPointSet set;
	set.metric = metric;
	int32_t n_users = static_cast<int32_t>(points.user.distinct());
	set.user_ids = points.user.values();
	set.offsets.assign(n_users + 1, 0);
	const std::vector<int64_t> &counts = points.user.counts();
	std::partial_sum(counts.begin(), counts.end(), set.offsets.begin() + 1);
	std::vector<int64_t> fill(set.offsets.begin(), set.offsets.end() - 1);
	set.x.resize(n);
	set.y.resize(n);
	for (size_t row = 0; row < n; ++row)
	{
		if ((row & (kCheckRows - 1)) == 0)
			check_interrupts();
		int64_t at = fill[points.user.code(row)]++;
		set.x[at] = points.x[row];
		set.y[at] = points.y[row];
	}
	if (metric == GeoMetric::Haversine)
		set.cos_lat = cos_latitudes(set.y);
	return set;
}

/* The CPU path's grouping, counted as its compute. */
GeoPointSet grouped_on_cpu(const GeoPoints &points, GeoMetric metric, ExecContext &ctx)
{
	Stopwatch clock;
	GeoPointSet set = build_point_set(points, metric, ctx.check_interrupts);
	ctx.times.compute_ms += clock.elapsed_ms();
	return set;
}

GeoCandidateSet candidate_set(const GeoCandidates &candidates, GeoMetric metric)
{
	GeoCandidateSet set;
	size_t n = candidates.id.size();
	set.x = candidates.x.to_vector();
	set.y = candidates.y.to_vector();
	for (size_t i = 0; i < n; ++i)
		check_coordinates(set.x[i], set.y[i], metric, "candidate", candidates.id[i]);
	if (metric == GeoMetric::Haversine)
		set.cos_lat = cos_latitudes(set.y);
	return set;
}

/* The largest squared distance whose square root rounds to at most max_distance. */
double euclidean_max_key(double max_distance)
{
	double key = max_distance * max_distance;
	while (key > 0 && std::sqrt(key) > max_distance)
		key = std::nextafter(key, 0.0);
	while (std::sqrt(std::nextafter(key, INFINITY)) <= max_distance)
		key = std::nextafter(key, INFINITY);
	return key;
}

StrengthParams strength_params(const StrengthOptions &strength, const GeoOptions &options)
{
	StrengthParams p;
	p.haversine = options.metric == GeoMetric::Haversine;
	p.epsilon = options.epsilon;
	p.epsilon_squared = options.epsilon * options.epsilon;
	p.has_max_distance = !std::isinf(strength.max_distance);
	p.max_key = !p.has_max_distance ? INFINITY
				: options.metric == GeoMetric::Euclidean ? euclidean_max_key(strength.max_distance)
														 : strength.max_distance;
	return p;
}

/* ---- CPU algorithms ----------------------------------------------------- */

/* Order key of the distance between point a and point b of the set. */
template <GeoMetric M> double pair_key(const GeoPointSet &s, int64_t a, int64_t b)
{
	if constexpr (M == GeoMetric::Euclidean)
		return geo::euclidean_key(s.x[a], s.y[a], s.x[b], s.y[b]);
	else
		return geo::haversine_key(s.x[a], s.y[a], s.cos_lat[a], s.x[b], s.y[b], s.cos_lat[b]);
}

/* The distance from point a to the nearest point of user b. */
template <GeoMetric M> double nearest_distance(const GeoPointSet &s, int64_t a, int32_t b)
{
	double best = INFINITY;
	for (int64_t j = s.offsets[b]; j < s.offsets[b + 1]; ++j)
		best = geo::lesser(best, pair_key<M>(s, a, j));
	return geo::key_distance(M == GeoMetric::Haversine, best);
}

template <GeoMetric M>
void similarity_sums_cpu(const GeoPointSet &s, int32_t main_user, double epsilon,
						 std::vector<double> &floored, std::vector<double> &raw, ExecContext &ctx)
{
	int32_t n_users = s.users();
	int64_t main_begin = s.offsets[main_user], main_end = s.offsets[main_user + 1];
	double main_points = static_cast<double>(main_end - main_begin);
	floored.assign(n_users, 0.0);
	raw.assign(n_users, 0.0);
	std::vector<size_t> items = split_by_cost(n_users, kPairsPerItem, [&](size_t u) {
		return main_points * static_cast<double>(s.count(static_cast<int32_t>(u)));
	});
	parallel_for(items.size() - 1, ctx, [&](size_t item, size_t, const std::atomic<bool> &) {
		for (size_t u = items[item]; u < items[item + 1]; ++u)
		{
			double f = 0.0, r = 0.0;
			for (int64_t a = main_begin; a < main_end; ++a)
			{
				double d = nearest_distance<M>(s, a, static_cast<int32_t>(u));
				f = geo::add(f, geo::greater(d, epsilon));
				r = geo::add(r, d);
			}
			floored[u] = f;
			raw[u] = r;
		}
	});
}

/*
 * Calls run(metric) with s's metric as a compile-time constant (so each
 * metric gets its own loop), counting the time as compute.
 */
template <typename Run> void compute_on_cpu(const GeoPointSet &s, ExecContext &ctx, Run run)
{
	Stopwatch clock;
	if (s.metric == GeoMetric::Euclidean)
		run(std::integral_constant<GeoMetric, GeoMetric::Euclidean>{});
	else
		run(std::integral_constant<GeoMetric, GeoMetric::Haversine>{});
	ctx.times.compute_ms += clock.elapsed_ms();
}

void similarity_sums_on_cpu(const GeoPointSet &s, int32_t main_user, double epsilon,
							std::vector<double> &floored, std::vector<double> &raw,
							ExecContext &ctx)
{
	compute_on_cpu(s, ctx, [&](auto metric) {
		similarity_sums_cpu<metric()>(s, main_user, epsilon, floored, raw, ctx);
	});
}

template <GeoMetric M>
void similar_users_cpu(const GeoPointSet &s, int k, double epsilon,
					   std::vector<SimilarityEntry> &heaps, std::vector<int32_t> &sizes,
					   ExecContext &ctx)
{
	int32_t n_users = s.users();
	heaps.assign(static_cast<size_t>(n_users) * k, SimilarityEntry{0, 0});
	sizes.assign(n_users, 0);
	parallel_for(n_users, ctx, [&](size_t item, size_t, const std::atomic<bool> &cancelled) {
		int32_t a = static_cast<int32_t>(item);
		SimilarityEntry *heap = heaps.data() + static_cast<size_t>(a) * k;
		int size = 0;
		for (int32_t b = 0; b < n_users && !cancelled.load(std::memory_order_relaxed); ++b)
		{
			if (b == a)
				continue;
			double f = 0.0;
			for (int64_t i = s.offsets[a]; i < s.offsets[a + 1]; ++i)
				f = geo::add(f, geo::greater(nearest_distance<M>(s, i, b), epsilon));
			geo::heap_offer(heap, size, k,
							{geo::similarity_of(s.count(a), f), static_cast<long long>(s.user_ids[b])});
		}
		sizes[a] = size;
	});
}

void similar_users_on_cpu(const GeoPointSet &s, int k, double epsilon,
						  std::vector<SimilarityEntry> &heaps, std::vector<int32_t> &sizes,
						  ExecContext &ctx)
{
	compute_on_cpu(s, ctx, [&](auto metric) {
		similar_users_cpu<metric()>(s, k, epsilon, heaps, sizes, ctx);
	});
}

/*
 * The weight of every point in a strength: the similarity of its user to
 * the main user where that is at least min_similarity, else 0 (the main
 * user's own points weigh 0).
 */
HugeVector<double> point_weights(const GeoPointSet &s, int32_t main_user, double min_similarity,
								 const std::vector<double> &floored)
{
	HugeVector<double> w(s.points(), 0.0);
	int64_t main_points = s.count(main_user);
	for (int32_t u = 0; u < s.users(); ++u)
	{
		double sim = geo::similarity_of(main_points, floored[u]);
		if (u == main_user || !(sim >= min_similarity))
			continue;
		std::fill(w.begin() + s.offsets[u], w.begin() + s.offsets[u + 1], sim);
	}
	return w;
}

/* Candidates per CPU work item: one pass over the points serves all of them. */
constexpr size_t kCandidatesPerItem = 8;

/*
 * The strengths of candidates [first, first + n) under one power, in the
 * order geo_kernels.hpp fixes: slices; runs of equal weight as one
 * fraction; group values into the slice sum; slice sums into the total.
 */
void strengths_of_block(const GeoPointSet &s, const HugeVector<double> &w,
						const GeoCandidateSet &cands, size_t first, size_t n,
						const StrengthParams &sp, const PowerPlan &power, double *out,
						const std::atomic<bool> &cancelled)
{
	int64_t n_points = s.points();
	bool haversine = sp.haversine;
	double total[kCandidatesPerItem] = {}, slice_sum[kCandidatesPerItem];
	geo::GroupFraction group[kCandidatesPerItem];
	auto denominator = [&](int64_t p, size_t c) {
		double base = geo::strength_base(sp, s.x[p], s.y[p], haversine ? s.cos_lat[p] : 0.0,
										 cands.x[first + c], cands.y[first + c],
										 haversine ? cands.cos_lat[first + c] : 0.0);
		return base < 0 ? base : geo::raise(base, power);
	};
	for (int64_t slice = 0; slice < n_points && !cancelled.load(std::memory_order_relaxed);
		 slice += kStrengthSlice)
	{
		int64_t slice_end = std::min(n_points, slice + kStrengthSlice);
		std::fill(slice_sum, slice_sum + n, 0.0);
		for (int64_t g0 = slice, g1; g0 < slice_end; g0 = g1)
		{
			g1 = geo::group_end(w.data(), g0, slice_end);
			double weight = w[g0];
			if (weight == 0.0)
				continue;
			for (size_t c = 0; c < n; ++c)
				group[c] = geo::GroupFraction();
			for (int64_t p = g0; p < g1; ++p)
				for (size_t c = 0; c < n; ++c)
				{
					double g = denominator(p, c);
					if (g >= 0)
						group[c].add_term(g);
				}
			for (size_t c = 0; c < n; ++c)
			{
				double sum = 0.0;
				if (group[c].fallback_needed())
				{
					for (int64_t p = g0; p < g1; ++p)
					{
						double g = denominator(p, c);
						if (g >= 0)
							sum = geo::add(sum, geo::div(1.0, g));
					}
				}
				else if (!group[c].empty())
					sum = group[c].value();
				slice_sum[c] = geo::add(slice_sum[c], geo::mul(weight, sum));
			}
		}
		for (size_t c = 0; c < n; ++c)
			total[c] = geo::add(total[c], slice_sum[c]);
	}
	std::copy(total, total + n, out);
}

std::vector<std::vector<double>> strengths_on_cpu(const GeoPointSet &s, const GeoCandidateSet &cands,
												  int32_t main_user, double min_similarity,
												  const StrengthParams &sp,
												  const std::vector<PowerPlan> &powers,
												  ExecContext &ctx)
{
	std::vector<double> floored, raw;
	similarity_sums_on_cpu(s, main_user, sp.epsilon, floored, raw, ctx);
	Stopwatch clock;
	HugeVector<double> w = point_weights(s, main_user, min_similarity, floored);
	std::vector<std::vector<double>> out(powers.size(), std::vector<double>(cands.size()));
	size_t blocks = (cands.size() + kCandidatesPerItem - 1) / kCandidatesPerItem;
	parallel_for(blocks * powers.size(), ctx, [&](size_t item, size_t, const std::atomic<bool> &cancelled) {
		size_t e = item / blocks, first = (item % blocks) * kCandidatesPerItem;
		strengths_of_block(s, w, cands, first, std::min(kCandidatesPerItem, cands.size() - first),
						   sp, powers[e], out[e].data() + first, cancelled);
	});
	ctx.times.compute_ms += clock.elapsed_ms();
	return out;
}

} // namespace

/* ---- building blocks ---------------------------------------------------- */

GeoOptions geo_options(const std::string &metric, double epsilon)
{
	GeoOptions options{parse_geo_metric(metric), epsilon};
	check_epsilon(epsilon);
	return options;
}

void check_strength_arguments(const std::vector<double> &exponents, const StrengthOptions &strength)
{
	if (exponents.empty())
		throw Error(sqlstate::invalid_parameter_value, "exponents must not be empty");
	for (double e : exponents)
		check_exponent(e);
	check_strength_options(strength);
}

GeoMetric parse_geo_metric(const std::string &name)
{
	std::string lower(name);
	std::transform(lower.begin(), lower.end(), lower.begin(),
				   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
	if (lower == "euclidean")
		return GeoMetric::Euclidean;
	if (lower == "haversine")
		return GeoMetric::Haversine;
	throw Error(sqlstate::invalid_parameter_value, "unknown metric \"" + name + "\"",
				"The metric must be 'euclidean' or 'haversine'.");
}

GeoPointSet group_points(const GeoPoints &points, const GeoOptions &options)
{
	check_geo_input(points, options);
	return build_point_set(points, options.metric);
}

double auc_of(const std::vector<double> &scores, const std::vector<uint8_t> &positive)
{
	size_t n = scores.size();
	std::vector<uint32_t> order(n);
	std::iota(order.begin(), order.end(), 0u);
	std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return scores[a] < scores[b]; });
	/* twice the rank sum of the positives, with ties at their mid-rank: integers */
	int64_t twice_rank_sum = 0, n_positive = 0;
	for (size_t i = 0; i < n;)
	{
		size_t j = i;
		int64_t positives_here = 0;
		while (j < n && scores[order[j]] == scores[order[i]])
			positives_here += positive[order[j++]];
		/* ranks i+1 .. j: mid-rank (i + 1 + j) / 2 */
		twice_rank_sum += positives_here * static_cast<int64_t>(i + 1 + j);
		n_positive += positives_here;
		i = j;
	}
	int64_t n_negative = static_cast<int64_t>(n) - n_positive;
	return static_cast<double>(twice_rank_sum - n_positive * (n_positive + 1)) /
		   (2.0 * static_cast<double>(n_positive) * static_cast<double>(n_negative));
}

namespace {

/*
 * The points (and candidates) on the GPU: the one place where the engine's
 * geo columns become the kernels' views.
 */
gpu::GeoSessionPtr open_gpu_session(const GeoPoints &points, GeoMetric metric, const GeoCandidateSet *cands,
									ExecContext &ctx)
{
	gpu::GeoPointColumns columns;
	columns.user_codes = chunk_view(points.user.codes());
	columns.x = chunk_view(points.x);
	columns.y = chunk_view(points.y);
	columns.user_ids = points.user.values().data();
	columns.points_per_user = points.user.counts().data();
	columns.users = static_cast<int32_t>(points.user.distinct());
	columns.haversine = metric == GeoMetric::Haversine;
	gpu::GeoCandidateColumns candidate_columns;
	if (cands)
		candidate_columns = {cands->x.data(), cands->y.data(), cands->cos_lat.empty() ? nullptr : cands->cos_lat.data(),
							 cands->size()};
	return gpu::open_geo_session(columns, cands ? &candidate_columns : nullptr, ctx);
}

/*
 * Runs a computation on the device that dispatch (device.hpp) chooses for
 * `work` distance evaluations: on_gpu(session) with the points (and the
 * candidates, when given) on the GPU, or on_cpu(set) with the points
 * grouped on the CPU.
 */
template <typename OnGpu, typename OnCpu>
void on_chosen_device(const GeoPoints &points, GeoMetric metric, const GeoCandidateSet *cands,
					  const char *function, double work, ExecContext &ctx, OnGpu on_gpu, OnCpu on_cpu)
{
	dispatch(
		ctx, function, work, kMinGpuPairs,
		[&] {
			gpu::GeoSessionPtr session = open_gpu_session(points, metric, cands, ctx);
			on_gpu(*session);
		},
		[&] {
			GeoPointSet set = grouped_on_cpu(points, metric, ctx);
			on_cpu(set);
		});
}

} // namespace

/* ---- the functions ------------------------------------------------------ */

std::vector<UserSimilarity> user_similarity(const GeoPoints &points, int64_t main_user,
											const GeoOptions &options, ExecContext &ctx)
{
	check_geo_input(points, options);
	int32_t main = main_user_code(points, main_user);
	int64_t main_points = points.user.counts()[main];
	std::vector<double> floored, raw;
	double work = static_cast<double>(main_points) * static_cast<double>(points.user.size());
	on_chosen_device(
		points, options.metric, nullptr, "user_similarity", work, ctx,
		[&](gpu::GeoSession &session) { gpu::geo_similarity_sums(session, main, options.epsilon, floored, raw); },
		[&](const GeoPointSet &set) { similarity_sums_on_cpu(set, main, options.epsilon, floored, raw, ctx); });

	std::vector<UserSimilarity> out;
	for (int32_t u : points.user.codes_in_id_order())
		if (u != main)
			out.push_back({points.user.value_of(u), geo::similarity_of(main_points, floored[u]),
						   raw[u] / static_cast<double>(main_points)});
	return out;
}

std::vector<SimilarUser> similar_users(const GeoPoints &points, int k, const GeoOptions &options,
									   ExecContext &ctx)
{
	check_k(k);
	check_geo_input(points, options);
	int32_t n_users = static_cast<int32_t>(points.user.distinct());
	if (n_users < 2)
		return {};
	int kept = std::min(k, n_users - 1);
	std::vector<SimilarityEntry> heaps;
	std::vector<int32_t> sizes;
	double n_points = static_cast<double>(points.user.size());
	on_chosen_device(
		points, options.metric, nullptr, "similar_users", n_points * n_points, ctx,
		[&](gpu::GeoSession &session) { gpu::geo_similar_users(session, kept, options.epsilon, heaps, sizes); },
		[&](const GeoPointSet &set) { similar_users_on_cpu(set, kept, options.epsilon, heaps, sizes, ctx); });

	std::vector<SimilarUser> out;
	out.reserve(static_cast<size_t>(n_users) * kept);
	for (int32_t a : points.user.codes_in_id_order())
	{
		SimilarityEntry *heap = heaps.data() + static_cast<size_t>(a) * kept;
		std::sort(heap, heap + sizes[a], geo::better);
		for (int r = 0; r < sizes[a]; ++r)
			out.push_back({points.user.value_of(a), r + 1, heap[r].user_id, heap[r].similarity});
	}
	return out;
}

namespace {

/*
 * Strengths of the candidates for main users one after another, on the
 * device chosen once: consume(strengths_for), strengths_for(main_code) ->
 * one vector per power.
 */
template <typename Consumer>
void with_strengths(const GeoPoints &points, const GeoCandidateSet &cands,
					const std::vector<PowerPlan> &powers, const StrengthOptions &strength,
					const StrengthParams &sp, double work, const char *function,
					ExecContext &ctx, Consumer consume)
{
	GeoMetric metric = sp.haversine ? GeoMetric::Haversine : GeoMetric::Euclidean;
	on_chosen_device(
		points, metric, &cands, function, work, ctx,
		[&](gpu::GeoSession &session) {
			consume([&](int32_t main) {
				return gpu::geo_strengths(session, main, strength.min_similarity, sp, powers);
			});
		},
		[&](const GeoPointSet &set) {
			consume([&](int32_t main) {
				return strengths_on_cpu(set, cands, main, strength.min_similarity, sp, powers, ctx);
			});
		});
}

} // namespace

std::vector<double> predict_strength(const GeoPoints &points, int64_t main_user,
									 const GeoCandidates &candidates, double exponent,
									 const StrengthOptions &strength, const GeoOptions &options,
									 ExecContext &ctx)
{
	check_strength_arguments({exponent}, strength);
	check_geo_input(points, options);
	int32_t main = main_user_code(points, main_user);
	GeoCandidateSet cands = candidate_set(candidates, options.metric);
	if (cands.size() == 0)
		return {};
	StrengthParams sp = strength_params(strength, options);
	std::vector<PowerPlan> powers{plan_power(exponent)};
	double work = static_cast<double>(points.user.size()) *
				  static_cast<double>(points.user.counts()[main] + static_cast<int64_t>(cands.size()));
	std::vector<double> out;
	with_strengths(points, cands, powers, strength, sp, work, "predict_strength", ctx,
				   [&](auto strengths_for) { out = std::move(strengths_for(main)[0]); });
	return out;
}

std::vector<ExponentFit> fit_exponent(const GeoPoints &points, const GeoHoldout &holdout,
									  const GeoCandidates &candidates,
									  const std::vector<double> &exponents,
									  const StrengthOptions &strength, const GeoOptions &options,
									  ExecContext &ctx)
{
	check_strength_arguments(exponents, strength);
	check_geo_input(points, options);
	GeoCandidateSet cands = candidate_set(candidates, options.metric);
	StrengthParams sp = strength_params(strength, options);

	/* the candidate rows of each candidate_id */
	std::unordered_map<int64_t, std::vector<uint32_t>> rows_of;
	if (cands.size() > UINT32_MAX)
		throw Error(sqlstate::program_limit_exceeded, "too many candidates in one call");
	for (size_t r = 0; r < cands.size(); ++r)
		rows_of[candidates.id[r]].push_back(static_cast<uint32_t>(r));

	/* holdout users in id order, each with its visited candidate ids */
	std::vector<std::pair<int64_t, int64_t>> visits(holdout.user.size());
	for (size_t i = 0; i < visits.size(); ++i)
		visits[i] = {holdout.user[i], holdout.candidate[i]};
	std::sort(visits.begin(), visits.end());
	visits.erase(std::unique(visits.begin(), visits.end()), visits.end());

	struct Evaluated
	{
		int32_t code;
		std::vector<uint8_t> positive;
	};
	std::vector<Evaluated> users;
	double work = 0;
	double n_points = static_cast<double>(points.user.size());
	for (size_t i = 0; i < visits.size();)
	{
		int64_t user = visits[i].first;
		int32_t code = main_user_code(points, user, "holdout user");
		std::vector<uint8_t> positive(cands.size(), 0);
		size_t n_positive = 0;
		for (; i < visits.size() && visits[i].first == user; ++i)
		{
			auto it = rows_of.find(visits[i].second);
			if (it != rows_of.end())
				for (uint32_t r : it->second)
					n_positive += positive[r] ? 0 : (positive[r] = 1);
		}
		/* an AUC needs a visited and an unvisited candidate */
		if (n_positive > 0 && n_positive < cands.size())
		{
			users.push_back({code, std::move(positive)});
			work += n_points * static_cast<double>(points.user.counts()[code] +
												   static_cast<int64_t>(cands.size() * exponents.size()));
		}
	}

	std::vector<PowerPlan> powers;
	for (double e : exponents)
		powers.push_back(plan_power(e));
	std::vector<double> auc_sum(exponents.size(), 0.0);
	if (!users.empty())
		with_strengths(points, cands, powers, strength, sp, work, "fit_exponent", ctx,
					   [&](auto strengths_for) {
						   /* from the start: the CPU reruns what a GPU out of memory began */
						   std::fill(auc_sum.begin(), auc_sum.end(), 0.0);
						   for (const Evaluated &user : users)
						   {
							   std::vector<std::vector<double>> s = strengths_for(user.code);
							   Stopwatch clock;
							   for (size_t e = 0; e < exponents.size(); ++e)
								   auc_sum[e] += auc_of(s[e], user.positive);
							   ctx.times.compute_ms += clock.elapsed_ms();
							   ctx.check_interrupts();
						   }
					   });

	std::vector<ExponentFit> out;
	for (size_t e = 0; e < exponents.size(); ++e)
		out.push_back({exponents[e],
					   users.empty() ? 0.0 : auc_sum[e] / static_cast<double>(users.size()),
					   static_cast<int64_t>(users.size())});
	std::stable_sort(out.begin(), out.end(),
					 [](const ExponentFit &a, const ExponentFit &b) { return a.exponent < b.exponent; });
	return out;
}

} // namespace gpurec
