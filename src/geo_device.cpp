/*
 * geo_device.cpp: one computation of the geospatial recommender on the
 * device that dispatch (device.hpp) chooses (geo_internal.hpp, GeoWork): a
 * GPU session of this process's, the CPU path on the points grouped per
 * user, or the GPU service, which runs this same code on its own device.
 */
#include "no_postgres.hpp"

#include "geo_internal.hpp"

#include <memory>

#include "gpu_service.hpp"
#include "roc_fitness.hpp"

namespace gpurec {

namespace {

/*
 * The points (and candidates) on the GPU: the one place where the engine's
 * geo columns become the kernels' views.
 */
gpu::GeoSessionPtr open_gpu_session(const GeoRows &points, GeoMetric metric, const GeoCandidateSet *cands,
									ExecContext &ctx)
{
	gpu::GeoPointColumns columns;
	columns.user_codes = chunk_view(points.codes);
	columns.x = chunk_view(points.x);
	columns.y = chunk_view(points.y);
	columns.user_ids = points.user_ids.data();
	columns.points_per_user = points.counts.data();
	columns.users = static_cast<int32_t>(points.user_ids.size());
	columns.haversine = metric == GeoMetric::Haversine;
	gpu::GeoCandidateColumns candidate_columns;
	if (cands)
		candidate_columns = {cands->x.data(), cands->y.data(), cands->cos_lat.empty() ? nullptr : cands->cos_lat.data(),
							 cands->size()};
	return gpu::open_geo_session(columns, cands ? &candidate_columns : nullptr, ctx);
}

/*
 * `work` on one device: strengths_for(main) gives main's strengths of the
 * candidates, one vector per power, on whichever device it was made for.
 */
template <typename StrengthsFor>
void strengths_work(const GeoWork &work, StrengthsFor strengths_for, GeoWorkResult &out, ExecContext &ctx)
{
	if (work.kind == GeoWork::Kind::Strengths)
	{
		out.strengths = strengths_for(work.main);
		return;
	}
	/* AucSums, of the part's range of users: from the start, as the CPU reruns what a GPU out of memory began */
	size_t n = work.users.size(), begin = n * work.part / work.parts, end = n * (work.part + 1) / work.parts;
	out.aucs.assign(work.powers.size(), {});
	for (size_t u = begin; u < end; ++u)
	{
		/*
		 * one segment per power, counted as roc_fitness counts: either
		 * device gives the strengths in host memory (geo_strengths returns
		 * them there, as predict_strength needs them)
		 */
		std::vector<std::vector<double>> s = strengths_for(work.users[u]);
		std::vector<ScoredSegment> segments;
		for (const std::vector<double> &strengths : s)
			segments.push_back({strengths.data(), work.positives[u].data(), strengths.size()});
		std::vector<RocCounts> counts = roc_counts_on_cpu(segments, ctx);
		for (size_t e = 0; e < work.powers.size(); ++e)
			out.aucs[e].push_back(auc_of(counts[e]));
		ctx.progress.add(1);
		ctx.interrupt_point(Phase::Compute);
	}
}

/*
 * `work` on one device, given its three operations: sums(main, floored,
 * raw), similar(floored heaps, sizes) and strengths_for(main), each the
 * device's own.
 */
template <typename Sums, typename Similar, typename StrengthsFor>
GeoWorkResult run_on(const GeoWork &work, int32_t n_users, size_t n_candidates, Sums sums, Similar similar,
					 StrengthsFor strengths_for, ExecContext &ctx)
{
	GeoWorkResult out;
	switch (work.kind)
	{
		case GeoWork::Kind::SimilaritySums:
			ctx.progress.begin(ProgressPhase::Computing, "users", static_cast<uint64_t>(n_users));
			sums(work.main, out.floored, out.raw);
			break;
		case GeoWork::Kind::SimilarUsers:
			/* the CPU counts each user it ranked */
			ctx.progress.begin(ProgressPhase::Computing, "users",
							   static_cast<uint64_t>(n_users > work.part ? (n_users - work.part + work.parts - 1) / work.parts : 0));
			similar(out.heaps, out.sizes);
			break;
		case GeoWork::Kind::Strengths:
			ctx.progress.begin(ProgressPhase::Computing, "candidates", n_candidates * work.powers.size());
			strengths_work(work, strengths_for, out, ctx);
			break;
		case GeoWork::Kind::AucSums:
			/* strengths_work counts each holdout user, on either device */
			ctx.progress.begin(ProgressPhase::Computing, "users",
							   work.users.size() * (work.part + 1) / work.parts - work.users.size() * work.part / work.parts);
			strengths_work(work, strengths_for, out, ctx);
			break;
	}
	return out;
}

GeoWorkResult on_gpu_session(const GeoRows &points, const GeoCandidateSet *cands, const GeoWork &work,
							 ExecContext &ctx)
{
	gpu::GeoSessionPtr session = open_gpu_session(points, work.metric, cands, ctx);
	std::unique_ptr<ReachGrid> reach;
	if (cands && work.strength.has_max_distance)
		reach = std::make_unique<ReachGrid>(reach_grid_of(points, *cands, work.strength));
	return run_on(
		work, static_cast<int32_t>(points.user_ids.size()), cands ? cands->size() : 0,
		[&](int32_t main, std::vector<double> &floored, std::vector<double> &raw) {
			gpu::geo_similarity_sums(*session, main, work.epsilon, floored, raw);
		},
		[&](std::vector<SimilarityEntry> &heaps, std::vector<int32_t> &sizes) {
			gpu::geo_similar_users(*session, work.kept, work.epsilon, work.part, work.parts, heaps, sizes);
		},
		[&](int32_t main) {
			return gpu::geo_strengths(*session, main, work.min_similarity, work.strength, work.powers, reach.get());
		},
		ctx);
}

GeoWorkResult on_cpu(const GeoRows &points, const GeoCandidateSet *cands, const GeoWork &work, ExecContext &ctx)
{
	GeoPointSet set = grouped_on_cpu(points, work.metric, ctx);
	std::unique_ptr<CpuReachIndex> reach;
	if (cands && work.strength.has_max_distance)
		reach = std::make_unique<CpuReachIndex>(
			reach_index_on_cpu(set, *cands, reach_grid_of(points, *cands, work.strength), ctx));
	return run_on(
		work, set.users(), cands ? cands->size() : 0,
		[&](int32_t main, std::vector<double> &floored, std::vector<double> &raw) {
			similarity_sums_on_cpu(set, main, work.epsilon, floored, raw, ctx);
		},
		[&](std::vector<SimilarityEntry> &heaps, std::vector<int32_t> &sizes) {
			similar_users_on_cpu(set, work.kept, work.epsilon, work.pruning, work.part, work.parts, heaps, sizes, ctx);
		},
		[&](int32_t main) {
			return strengths_on_cpu(set, *cands, main, work.min_similarity, work.strength, work.powers, reach.get(),
									ctx);
		},
		ctx);
}

/* ---- the GPU service's wire ------------------------------------------------ */

void put_candidates(ByteWriter &out, const GeoCandidateSet *cands)
{
	out.put<uint8_t>(cands ? 1 : 0);
	if (cands)
	{
		put_vector(out, cands->x);
		put_vector(out, cands->y);
		put_vector(out, cands->cos_lat);
	}
}

void put_work(ByteWriter &out, const GeoWork &work)
{
	out.put(work.kind);
	out.put(work.metric);
	out.put(work.epsilon);
	out.put(work.main);
	out.put(work.kept);
	out.put(work.min_similarity);
	out.put(work.pruning);
	out.put(work.strength);
	put_vector(out, work.powers);
	put_vector(out, work.users);
	for (const std::vector<uint8_t> &positive : work.positives)
		put_vector(out, positive);
}

GeoWork get_work(ByteReader &in)
{
	GeoWork work;
	work.kind = in.get<GeoWork::Kind>();
	work.metric = in.get<GeoMetric>();
	work.epsilon = in.get<double>();
	work.main = in.get<int32_t>();
	work.kept = in.get<int32_t>();
	work.min_similarity = in.get<double>();
	work.pruning = in.get<GeoPruning>();
	work.strength = in.get<StrengthParams>();
	work.powers = get_vector<PowerPlan>(in);
	work.users = get_vector<int32_t>(in);
	for (size_t u = 0; u < work.users.size(); ++u)
		work.positives.push_back(get_vector<uint8_t>(in));
	return work;
}

void put_result(ByteWriter &out, const GeoWorkResult &r)
{
	put_vector(out, r.floored);
	put_vector(out, r.raw);
	put_vector(out, r.heaps);
	put_vector(out, r.sizes);
	for (const auto *lists : {&r.strengths, &r.aucs})
	{
		out.put<uint64_t>(lists->size());
		for (const std::vector<double> &list : *lists)
			put_vector(out, list);
	}
}

std::vector<uint8_t> result_bytes(const GeoWorkResult &result)
{
	return written_bytes([&](ByteWriter &writer) { put_result(writer, result); });
}

GeoWorkResult get_result(ByteReader &in)
{
	GeoWorkResult r;
	r.floored = get_vector<double>(in);
	r.raw = get_vector<double>(in);
	r.heaps = get_vector<SimilarityEntry>(in);
	r.sizes = get_vector<int32_t>(in);
	for (auto *lists : {&r.strengths, &r.aucs})
	{
		uint64_t n = in.get<uint64_t>();
		if (n > in.remaining())
			throw Error(sqlstate::internal_error, "geo: a malformed answer of the GPU service");
		for (uint64_t i = 0; i < n; ++i)
			lists->push_back(get_vector<double>(in));
	}
	return r;
}

GeoWorkResult result_of(const std::vector<uint8_t> &bytes)
{
	ByteReader in(bytes.data(), bytes.size());
	GeoWorkResult result = get_result(in);
	if (!in.at_end())
		throw Error(sqlstate::internal_error, "geo: the GPU service's answer has bytes past its result");
	return result;
}

/* GPU memory a call needs, for the service's queue: the points and their grouping, candidates, results. */
int64_t device_bytes(const GeoRows &points, const GeoCandidateSet *cands, const GeoWork &work)
{
	auto n = static_cast<int64_t>(points.codes.size()), users = static_cast<int64_t>(points.user_ids.size());
	int64_t candidates = cands ? static_cast<int64_t>(cands->size()) : 0;
	return n * 48 + users * (32 + 16 * std::max<int64_t>(1, work.kept)) +
		   candidates * 24 * static_cast<int64_t>(std::max<size_t>(1, work.powers.size()));
}

/*
 * The work that splits by user: through the service it goes to every
 * device, a share each, unless it is a part already (a partition's of
 * gpurec_shards): the devices' division of a part is not the part's.
 */
bool splits_by_user(const GeoWork &work)
{
	return (work.kind == GeoWork::Kind::SimilarUsers || work.kind == GeoWork::Kind::AucSums) && work.parts == 1;
}

GeoWorkResult in_service(const GeoRows &points, const GeoCandidateSet *cands, const GeoWork &work, ExecContext &ctx)
{
	bool splits = splits_by_user(work);
	std::vector<uint8_t> bytes = ctx.service->call(
		service::Function::GeoWork, device_bytes(points, cands, work),
		[&](ByteWriter &out) {
			points.codes.serialize(out);
			points.x.serialize(out);
			points.y.serialize(out);
			put_vector(out, points.user_ids);
			put_vector(out, points.counts);
			put_candidates(out, cands);
			put_work(out, work);
		},
		ctx, splits ? ctx.service->device_count(ctx) : 1);
	return result_of(bytes);
}

/* The service's side of in_service: the same work, or the part of it asked, on the service's device. */
std::vector<uint8_t> geo_work_in_service(ByteReader &in, const service::Part &part, ExecContext &ctx)
{
	ChunkedColumn<int32_t> codes = ChunkedColumn<int32_t>::read_serialized(in);
	ChunkedColumn<double> x = ChunkedColumn<double>::read_serialized(in);
	ChunkedColumn<double> y = ChunkedColumn<double>::read_serialized(in);
	std::vector<int64_t> user_ids = get_vector<int64_t>(in);
	std::vector<int64_t> counts = get_vector<int64_t>(in);
	GeoCandidateSet cands;
	bool has_candidates = in.get<uint8_t>() != 0;
	if (has_candidates)
	{
		cands.x = get_vector<double>(in);
		cands.y = get_vector<double>(in);
		cands.cos_lat = get_vector<double>(in);
	}
	GeoWork work = get_work(in);
	if (part.count > 1)
	{
		work.part = part.index;
		work.parts = part.count;
	}
	/* what the devices index by: every row's code a user's, every count a row's, every holdout user a user */
	int64_t rows = 0;
	for (int64_t c : counts)
		rows += c;
	bool agree = in.at_end() && x.size() == codes.size() && y.size() == codes.size() &&
				 counts.size() == user_ids.size() && rows == static_cast<int64_t>(codes.size()) &&
				 cands.y.size() == cands.x.size() && work.positives.size() == work.users.size();
	for (size_t r = 0; agree && r < codes.size(); ++r)
		agree = codes[r] >= 0 && static_cast<size_t>(codes[r]) < user_ids.size();
	for (int32_t u : work.users)
		agree = agree && u >= 0 && static_cast<size_t>(u) < user_ids.size();
	for (const std::vector<uint8_t> &positive : work.positives)
		agree = agree && positive.size() == cands.size();
	bool has_main = work.kind == GeoWork::Kind::SimilaritySums || work.kind == GeoWork::Kind::Strengths;
	bool needs_candidates = work.kind == GeoWork::Kind::Strengths || work.kind == GeoWork::Kind::AucSums;
	agree = agree && (!has_main || (work.main >= 0 && static_cast<size_t>(work.main) < user_ids.size())) &&
			has_candidates == needs_candidates &&
			(work.kind != GeoWork::Kind::SimilarUsers || (work.kept >= 1 && work.kept < INT32_MAX));
	if (!agree)
		throw Error(sqlstate::internal_error, "geo: the GPU service got points that disagree with themselves");
	GeoRows points{codes, x, y, user_ids, counts};
	return result_bytes(run_geo_work(points, has_candidates ? &cands : nullptr, work, "geo", 0, ctx));
}

/*
 * The parts of a split GeoWork, as one: each user's heap from the part that
 * computed it (the one whose heap is not empty: every user has another to
 * rank, or no part ranks any), the AUCs of the parts' user ranges in order.
 */
std::vector<uint8_t> merge_geo_parts(std::vector<std::vector<uint8_t>> &parts)
{
	GeoWorkResult merged = result_of(parts.front());
	for (size_t p = 1; p < parts.size(); ++p)
	{
		GeoWorkResult part = result_of(parts[p]);
		if (part.sizes.size() != merged.sizes.size() || part.heaps.size() != merged.heaps.size() ||
			part.aucs.size() != merged.aucs.size())
			throw Error(sqlstate::internal_error, "geo: the parts of a split call disagree");
		size_t k = merged.sizes.empty() ? 0 : merged.heaps.size() / merged.sizes.size();
		for (size_t u = 0; u < part.sizes.size(); ++u)
			if (part.sizes[u] > 0)
			{
				merged.sizes[u] = part.sizes[u];
				std::copy(part.heaps.begin() + u * k, part.heaps.begin() + (u + 1) * k, merged.heaps.begin() + u * k);
			}
		for (size_t e = 0; e < part.aucs.size(); ++e)
			merged.aucs[e].insert(merged.aucs[e].end(), part.aucs[e].begin(), part.aucs[e].end());
	}
	return result_bytes(merged);
}

const bool geo_work_registered =
	(service::register_handler(service::Function::GeoWork, geo_work_in_service, merge_geo_parts), true);

} // namespace

double gpu_pairs_from(const ExecContext &ctx)
{
	return gpu_cheaper_from(WorkShape{rates::kPointPairs, 1, 0}, host_profile_for_reading(ctx), call_threads(ctx));
}

GeoWorkResult run_geo_work(const GeoRows &points, const GeoCandidateSet *candidates, const GeoWork &work,
						   const char *function, double cost, ExecContext &ctx)
{
	/* each user's points together, and on a GPU their upload, before any user is compared */
	ctx.progress.begin(ProgressPhase::Indexing, "points", points.codes.size());
	bool strengths = work.kind == GeoWork::Kind::Strengths || work.kind == GeoWork::Kind::AucSums;
	WorkRates rates = strengths							 ? rates::kStrengthTerms
					  : work.metric == GeoMetric::Haversine ? rates::kPointPairsHaversine
															 : rates::kPointPairs;
	/* a point travels as its user's code and two coordinates */
	double bytes = static_cast<double>(points.codes.size()) * (sizeof(int32_t) + 2 * sizeof(double));
	bool splits = ctx.service && splits_by_user(work);
	return dispatch(
		ctx, function, WorkShape{rates, cost, bytes, splits},
		[&] {
			return ctx.service ? in_service(points, candidates, work, ctx)
							   : on_gpu_session(points, candidates, work, ctx);
		},
		[&] { return on_cpu(points, candidates, work, ctx); });
}

} // namespace gpurec
