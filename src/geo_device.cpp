/*
 * geo_device.cpp: one computation of the geospatial recommender on the
 * device that dispatch (device.hpp) chooses (geo_internal.hpp, GeoWork): a
 * GPU session of this process's, the CPU path on the points grouped per
 * user, or the GPU service, which runs this same code on its own device.
 */
#include "no_postgres.hpp"

#include "geo_internal.hpp"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>

#include "cpu_parallel.hpp"
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

/*
 * What a device's computation may be given ready: max_distance's grid (that
 * of every candidate of the call, where a part computes some of them), the
 * CPU's grouping of the points (made once for the parts of a call).
 */
struct Prepared
{
	const ReachGrid *grid = nullptr;
	const GeoPointSet *grouped = nullptr;
};

/* The reach grid `work` needs (null: none), `prepared`'s or else made from these points and candidates. */
std::unique_ptr<ReachGrid> reach_grid_for(const GeoRows &points, const GeoCandidateSet *cands, const GeoWork &work,
										  const Prepared &prepared)
{
	if (!cands || !work.strength.has_max_distance)
		return nullptr;
	return std::make_unique<ReachGrid>(prepared.grid ? *prepared.grid : reach_grid_of(points, *cands, work.strength));
}

/* A pruned search's lists of others (others_of), a batch of users at a time on all cores, for the GPU. */
class ListsOfSearch final : public gpu::GeoOtherLists
{
  public:
	ListsOfSearch(BestOthers &search, ExecContext &ctx) : search_(search), ctx_(ctx) {}

	void lists(const int32_t *users, int32_t n, std::vector<int64_t> &offsets, std::vector<int32_t> &others) override
	{
		std::vector<std::vector<int32_t>> each(static_cast<size_t>(n));
		parallel_for(each.size(), ctx_, [&](size_t t, size_t worker, const std::atomic<bool> &) {
			search_.others_of(users[t], worker, each[t]);
			ctx_.progress.add(1);
		});
		offsets.assign(each.size() + 1, 0);
		for (size_t t = 0; t < each.size(); ++t)
			offsets[t + 1] = offsets[t] + static_cast<int64_t>(each[t].size());
		others.resize(static_cast<size_t>(offsets.back()));
		parallel_for(each.size(), ctx_, [&](size_t t, size_t, const std::atomic<bool> &) {
			std::copy(each[t].begin(), each[t].end(), others.begin() + offsets[t]);
		});
	}

  private:
	BestOthers &search_;
	ExecContext &ctx_;
};

/* Whether the GPU's similar_users goes by the bounded search (gpu_bounded_by_size). */
bool gpu_bounded(const GeoRows &points, const GeoWork &work)
{
	return gpu_bounded_by_size(static_cast<int64_t>(points.codes.size()), static_cast<int32_t>(points.user_ids.size()),
							   work.kept, work.pruning);
}

/*
 * Whether the GPU's similar_users, a part of `parts`, may take the CPU's
 * lists (best_others_search), and so needs the CPU's grouping of the points:
 * neither bounded nor every pair whatever the places (brute_force_by_size).
 */
bool gpu_may_list_on_cpu(const GeoRows &points, const GeoWork &work, int parts)
{
	return !gpu_bounded(points, work) &&
		   !brute_force_by_size(static_cast<int64_t>(points.codes.size()),
								static_cast<int32_t>(points.user_ids.size()), work.kept, work.pruning, PrunedFor::Gpu,
								parts);
}

/*
 * similar_users on the GPU session: bounded by the users' boxes where k is
 * small; else pruned where best_others_search says (the CPU's index lists
 * each user's possible others, the GPU compares them); else every pair.
 */
void similar_users_on_gpu(gpu::GeoSession &session, const GeoRows &points, const GeoWork &work,
						  const Prepared &prepared, std::vector<SimilarityEntry> &heaps, std::vector<int32_t> &sizes,
						  ExecContext &ctx)
{
	if (gpu_bounded(points, work))
	{
		double pairs = 0, all = 0;
		bool by_boxes = gpu::geo_similar_users_bounded(session, work.kept, work.epsilon, work.part, work.parts,
													   work.pruning == GeoPruning::Auto, heaps, sizes, pairs, all);
		char note[200];
		if (by_boxes)
			snprintf(note, sizeof note,
					 "; pruned on the GPU by the users' boxes: %.3g of %.3g point pairs compared (%.2f%%)", pairs, all,
					 all > 0 ? 100 * pairs / all : 0.0);
		else
			snprintf(note, sizeof note,
					 "; every point pair compared on the GPU: the users' places spread over the map, too wide for "
					 "their boxes to prune");
		ctx.device_choice += note;
		return;
	}
	if (gpu_may_list_on_cpu(points, work, work.parts))
	{
		std::unique_ptr<GeoPointSet> own;
		if (!prepared.grouped)
			own = std::make_unique<GeoPointSet>(grouped_on_cpu(points, work.metric, ctx));
		const GeoPointSet &set = prepared.grouped ? *prepared.grouped : *own;
		Stopwatch indexing;
		std::unique_ptr<BestOthers> search =
			best_others_search(set, work.kept, work.epsilon, work.pruning, PrunedFor::Gpu, work.part, work.parts, ctx);
		double index_ms = indexing.elapsed_ms();
		if (search)
		{
			ListsOfSearch lists(*search, ctx);
			double pairs = 0;
			gpu::geo_similar_users_listed(session, work.kept, work.epsilon, work.part, work.parts, lists, heaps, sizes,
										  pairs);
			double all = 0;
			for (int32_t u = 0; u < set.users(); ++u)
				if (sizes[u] > 0)
					all += static_cast<double>(set.count(u)) * static_cast<double>(set.points());
			char note[240];
			snprintf(note, sizeof note,
					 "; pruned on the GPU: %.3g of %.3g point pairs examined (%.2f%%: %.3g compared on the GPU, "
					 "%.3g index steps on the CPU; index built in %.0f ms)",
					 pairs + search->searched(), all, all > 0 ? 100 * (pairs + search->searched()) / all : 0.0, pairs,
					 search->searched(), index_ms);
			ctx.device_choice += note;
			return;
		}
	}
	gpu::geo_similar_users(session, work.kept, work.epsilon, work.part, work.parts, heaps, sizes);
}

GeoWorkResult on_gpu_session(const GeoRows &points, const GeoCandidateSet *cands, const GeoWork &work,
							 const Prepared &prepared, ExecContext &ctx)
{
	gpu::GeoSessionPtr session = open_gpu_session(points, work.metric, cands, ctx);
	std::unique_ptr<ReachGrid> reach = reach_grid_for(points, cands, work, prepared);
	return run_on(
		work, static_cast<int32_t>(points.user_ids.size()), cands ? cands->size() : 0,
		[&](int32_t main, std::vector<double> &floored, std::vector<double> &raw) {
			gpu::geo_similarity_sums(*session, main, work.epsilon, floored, raw);
		},
		[&](std::vector<SimilarityEntry> &heaps, std::vector<int32_t> &sizes) {
			similar_users_on_gpu(*session, points, work, prepared, heaps, sizes, ctx);
		},
		[&](int32_t main) {
			return gpu::geo_strengths(*session, main, work.min_similarity, work.strength, work.powers, reach.get());
		},
		ctx);
}

GeoWorkResult on_cpu(const GeoRows &points, const GeoCandidateSet *cands, const GeoWork &work,
					 const Prepared &prepared, ExecContext &ctx)
{
	std::unique_ptr<GeoPointSet> own;
	if (!prepared.grouped)
		own = std::make_unique<GeoPointSet>(grouped_on_cpu(points, work.metric, ctx));
	const GeoPointSet &set = prepared.grouped ? *prepared.grouped : *own;
	std::unique_ptr<CpuReachIndex> reach;
	if (std::unique_ptr<ReachGrid> grid = reach_grid_for(points, cands, work, prepared))
		reach = std::make_unique<CpuReachIndex>(reach_index_on_cpu(set, *cands, *grid, ctx));
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

/*
 * A result as fields (service::put_field), so that the results of a split
 * call's parts, concatenated, are the call's: SimilarUsers' heaps only of
 * the users the part ranked (heap_users), Strengths' and AucSums' vectors a
 * field per power.
 */
void put_result(ByteWriter &out, const GeoWorkResult &r, int32_t kept)
{
	std::vector<int32_t> heap_users, sizes;
	std::vector<SimilarityEntry> heaps;
	for (size_t u = 0; u < r.sizes.size(); ++u)
		if (r.sizes[u] > 0) /* the part ranked u: every user has another to rank, or no part ranks any */
		{
			heap_users.push_back(static_cast<int32_t>(u));
			sizes.push_back(r.sizes[u]);
			heaps.insert(heaps.end(), r.heaps.begin() + u * kept, r.heaps.begin() + (u + 1) * kept);
		}
	service::put_field(out, r.floored);
	service::put_field(out, r.raw);
	service::put_field(out, heap_users);
	service::put_field(out, sizes);
	service::put_field(out, heaps);
	for (const auto *lists : {&r.strengths, &r.aucs})
		for (const std::vector<double> &list : *lists)
			service::put_field(out, list);
}

/* The result put_result wrote (or the concatenation of its parts') of `work` over `users` users. */
GeoWorkResult result_of(const service::CallResult &bytes, const GeoWork &work, size_t users)
{
	ByteReader in(bytes.data(), bytes.size());
	GeoWorkResult r;
	r.floored = service::get_field<double>(in);
	r.raw = service::get_field<double>(in);
	std::vector<int32_t> heap_users = service::get_field<int32_t>(in);
	std::vector<int32_t> sizes = service::get_field<int32_t>(in);
	/* the heaps read where they are, each copied once, to its user's place */
	uint64_t entries = 0;
	const uint8_t *heaps = service::get_field_in_place<SimilarityEntry>(in, entries);
	auto kept = static_cast<size_t>(std::max(0, work.kept));
	bool agree = sizes.size() == heap_users.size() && entries == heap_users.size() * kept;
	if (work.kind == GeoWork::Kind::SimilarUsers && agree)
	{
		r.sizes.assign(users, 0);
		r.heaps.resize(users * kept);
		for (size_t i = 0; agree && i < heap_users.size(); ++i)
		{
			auto u = static_cast<size_t>(heap_users[i]);
			agree = heap_users[i] >= 0 && u < users && r.sizes[u] == 0 && sizes[i] > 0 &&
					static_cast<size_t>(sizes[i]) <= kept;
			if (agree)
			{
				r.sizes[u] = sizes[i];
				std::memcpy(r.heaps.data() + u * kept, heaps + i * kept * sizeof(SimilarityEntry),
							kept * sizeof(SimilarityEntry));
			}
		}
	}
	size_t powers = work.powers.size();
	for (size_t e = 0; e < powers && work.kind == GeoWork::Kind::Strengths; ++e)
		r.strengths.push_back(service::get_field<double>(in));
	for (size_t e = 0; e < powers && work.kind == GeoWork::Kind::AucSums; ++e)
		r.aucs.push_back(service::get_field<double>(in));
	if (!agree || !in.at_end())
		throw Error(sqlstate::internal_error, "geo: a malformed answer of the GPU service");
	return r;
}

/*
 * GPU memory a call needs, for the service's queue: the points and their
 * grouping, candidates, results, and a bounded search's boxes.
 */
int64_t device_bytes(const GeoRows &points, const GeoCandidateSet *cands, const GeoWork &work)
{
	auto n = static_cast<int64_t>(points.codes.size()), users = static_cast<int64_t>(points.user_ids.size());
	int64_t candidates = cands ? static_cast<int64_t>(cands->size()) : 0;
	int64_t boxes = work.kind == GeoWork::Kind::SimilarUsers && gpu_bounded(points, work) ? gpu::kBoundedBytesPerUser : 0;
	return n * 48 + users * (32 + 16 * std::max<int64_t>(1, work.kept) + boxes) +
		   candidates * 24 * static_cast<int64_t>(std::max<size_t>(1, work.powers.size()));
}

/*
 * The items over which the service splits `work` (users, candidates or
 * holdout users), a share to each device; 0 where it does not split: work
 * that is a part already (a partition's of gpurec_shards: the devices'
 * division of a part is not the part's).
 */
size_t split_items(const GeoRows &points, const GeoCandidateSet *cands, const GeoWork &work)
{
	if (work.parts != 1)
		return 0;
	switch (work.kind)
	{
		case GeoWork::Kind::SimilaritySums:
		case GeoWork::Kind::SimilarUsers:
			return points.user_ids.size();
		case GeoWork::Kind::Strengths:
			return cands ? cands->size() : 0;
		case GeoWork::Kind::AucSums:
			return work.users.size();
	}
	return 0;
}

GeoWorkResult in_service(const GeoRows &points, const GeoCandidateSet *cands, const GeoWork &work, ExecContext &ctx)
{
	size_t items = split_items(points, cands, work);
	int32_t parts = service::split_parts(items, ctx);
	service::CallResult bytes = ctx.service->call(
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
		ctx, parts);
	return result_of(bytes, work, points.user_ids.size());
}

/*
 * A call's input in the service, read and checked once for all its parts;
 * the CPU's grouping of its points (a stand-in device's) made once too.
 */
struct GeoCall
{
	ChunkedColumn<int32_t> codes;
	ChunkedColumn<double> x, y;
	std::vector<int64_t> user_ids, counts;
	bool has_candidates = false;
	GeoCandidateSet cands;
	GeoWork work;
	std::unique_ptr<ReachGrid> grid;
	std::once_flag grouped_once;
	std::unique_ptr<GeoPointSet> grouped;

	GeoRows rows() const { return {codes, x, y, user_ids, counts}; }
	const GeoCandidateSet *candidates() const { return has_candidates ? &cands : nullptr; }
	const GeoPointSet &grouped_set(ExecContext &ctx)
	{
		std::call_once(grouped_once,
					   [&] { grouped = std::make_unique<GeoPointSet>(grouped_on_cpu(rows(), work.metric, ctx)); });
		return *grouped;
	}
};

std::unique_ptr<GeoCall> read_geo_call(ByteReader &in, ExecContext &ctx)
{
	auto call = std::make_unique<GeoCall>();
	PieceRunner on_threads = pieces_on_threads(ctx, Phase::Transfer);
	call->codes = ChunkedColumn<int32_t>::read_serialized(in, on_threads);
	call->x = ChunkedColumn<double>::read_serialized(in, on_threads);
	call->y = ChunkedColumn<double>::read_serialized(in, on_threads);
	call->user_ids = get_vector<int64_t>(in);
	call->counts = get_vector<int64_t>(in);
	GeoCandidateSet &cands = call->cands;
	call->has_candidates = in.get<uint8_t>() != 0;
	if (call->has_candidates)
	{
		cands.x = get_vector<double>(in);
		cands.y = get_vector<double>(in);
		cands.cos_lat = get_vector<double>(in);
	}
	call->work = get_work(in);
	const GeoWork &work = call->work;
	const ChunkedColumn<int32_t> &codes = call->codes;
	const std::vector<int64_t> &user_ids = call->user_ids, &counts = call->counts;
	/* what the devices index by: every row's code a user's, every count a row's, every holdout user a user */
	int64_t rows = 0;
	for (int64_t c : counts)
		rows += c;
	bool agree = in.at_end() && call->x.size() == codes.size() && call->y.size() == codes.size() &&
				 counts.size() == user_ids.size() && rows == static_cast<int64_t>(codes.size()) &&
				 cands.y.size() == cands.x.size() && work.positives.size() == work.users.size();
	/* every row's code a user's: as unsigned, a negative code is past every user too */
	std::atomic<bool> codes_agree{true};
	if (agree)
		call->codes.visit_in_pieces(
			[&](const int32_t *piece, size_t, size_t count) {
				uint32_t largest = 0;
				for (size_t r = 0; r < count; ++r)
					largest = std::max(largest, static_cast<uint32_t>(piece[r]));
				if (largest >= user_ids.size())
					codes_agree.store(false, std::memory_order_relaxed);
			},
			on_threads);
	agree = agree && codes_agree.load();
	for (int32_t u : work.users)
		agree = agree && u >= 0 && static_cast<size_t>(u) < user_ids.size();
	for (const std::vector<uint8_t> &positive : work.positives)
		agree = agree && positive.size() == cands.size();
	bool has_main = work.kind == GeoWork::Kind::SimilaritySums || work.kind == GeoWork::Kind::Strengths;
	bool needs_candidates = work.kind == GeoWork::Kind::Strengths || work.kind == GeoWork::Kind::AucSums;
	agree = agree && (!has_main || (work.main >= 0 && static_cast<size_t>(work.main) < user_ids.size())) &&
			call->has_candidates == needs_candidates &&
			(work.kind != GeoWork::Kind::SimilarUsers || (work.kept >= 1 && work.kept < INT32_MAX));
	if (!agree)
		throw Error(sqlstate::internal_error, "geo: the GPU service got points that disagree with themselves");
	if (call->has_candidates && work.strength.has_max_distance)
		call->grid = std::make_unique<ReachGrid>(reach_grid_of(call->rows(), cands, work.strength));
	return call;
}

/*
 * The points of the users of codes [begin, end) and of `main`, in the rows'
 * order, their codes renumbered densely in the same order: a user's
 * similarity to main is the same among these as among all.
 */
struct UserRange
{
	ChunkedColumn<int32_t> codes;
	ChunkedColumn<double> x, y;
	std::vector<int64_t> user_ids, counts;
	std::vector<int32_t> code_of; /* the range's code of each of the call's, -1 outside it */

	UserRange(const GeoRows &points, size_t begin, size_t end, int32_t main) : code_of(points.user_ids.size(), -1)
	{
		for (size_t u = 0; u < code_of.size(); ++u)
			if ((u >= begin && u < end) || u == static_cast<size_t>(main))
			{
				code_of[u] = static_cast<int32_t>(user_ids.size());
				user_ids.push_back(points.user_ids[u]);
				counts.push_back(points.counts[u]);
			}
		for (size_t r = 0; r < points.codes.size(); ++r)
			if (int32_t code = code_of[points.codes[r]]; code >= 0)
			{
				codes.push_back(code);
				x.push_back(points.x[r]);
				y.push_back(points.y[r]);
			}
	}
	GeoRows rows() const { return {codes, x, y, user_ids, counts}; }
};

GeoWorkResult on_device(const GeoRows &points, const GeoCandidateSet *cands, const GeoWork &work,
						const Prepared &prepared, ExecContext &ctx)
{
	return ctx.mode == DeviceMode::Cpu ? on_cpu(points, cands, work, prepared, ctx)
									   : on_gpu_session(points, cands, work, prepared, ctx);
}

/*
 * The service's side of in_service: the work, or part `part` of it, on the
 * service's device: SimilarUsers of the part's users and AucSums of its
 * holdout users (GeoWork's part), Strengths of its candidates and
 * SimilaritySums of its users (computed among those users' and main's
 * points alone).
 */
std::vector<uint8_t> geo_work_in_service(ByteReader &in, const service::Part &part, ExecContext &ctx)
{
	service::CallState own;
	GeoCall &call = (part.call ? *part.call : own).once<GeoCall>([&] { return read_geo_call(in, ctx); });
	const GeoWork &whole = call.work;
	GeoRows points = call.rows();
	const GeoCandidateSet *cands = call.candidates();
	Prepared prepared{call.grid.get(), nullptr};
	GeoWorkResult result;
	if (part.count > 1 && whole.kind == GeoWork::Kind::SimilaritySums)
	{
		UserRange range(points, part.begin(call.user_ids.size()), part.end(call.user_ids.size()), whole.main);
		GeoWork work = whole;
		work.main = range.code_of[whole.main];
		GeoWorkResult sums = on_device(range.rows(), nullptr, work, prepared, ctx);
		for (size_t u = part.begin(call.user_ids.size()); u < part.end(call.user_ids.size()); ++u)
		{
			result.floored.push_back(sums.floored[range.code_of[u]]);
			result.raw.push_back(sums.raw[range.code_of[u]]);
		}
		return written_bytes([&](ByteWriter &out) { put_result(out, result, whole.kept); });
	}
	/*
	 * the CPU's grouping: the CPU's points, or the index of the GPU's
	 * similar_users where it may prune (made once for the parts)
	 */
	if (ctx.mode == DeviceMode::Cpu ||
		(whole.kind == GeoWork::Kind::SimilarUsers && gpu_may_list_on_cpu(points, whole, part.count)))
		prepared.grouped = &call.grouped_set(ctx);
	if (part.count > 1 && whole.kind == GeoWork::Kind::Strengths)
	{
		size_t begin = part.begin(cands->size()), end = part.end(cands->size());
		GeoCandidateSet mine;
		mine.x.assign(cands->x.begin() + begin, cands->x.begin() + end);
		mine.y.assign(cands->y.begin() + begin, cands->y.begin() + end);
		if (!cands->cos_lat.empty())
			mine.cos_lat.assign(cands->cos_lat.begin() + begin, cands->cos_lat.begin() + end);
		result = on_device(points, &mine, whole, prepared, ctx);
	}
	else if (part.count > 1)
	{
		GeoWork work = whole;
		work.part = part.index;
		work.parts = part.count;
		result = on_device(points, cands, work, prepared, ctx);
	}
	else
		result = on_device(points, cands, whole, prepared, ctx);
	return written_bytes([&](ByteWriter &out) { put_result(out, result, whole.kept); });
}

const bool geo_work_registered =
	(service::register_handler(service::Function::GeoWork, geo_work_in_service, true), true);

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
	bool splits = ctx.service && split_items(points, candidates, work) > 1;
	return dispatch(
		ctx, function, WorkShape{rates, cost, bytes, splits},
		[&] {
			return ctx.service ? in_service(points, candidates, work, ctx)
							   : on_gpu_session(points, candidates, work, Prepared{}, ctx);
		},
		[&] { return on_cpu(points, candidates, work, Prepared{}, ctx); });
}

} // namespace gpurec
