/*
 * marketplace.cpp: the k cheapest offers per product, and the smart cart.
 *
 * Ranking is one pass of bounded heaps, one per product, over candidate
 * rows: on the CPU the candidates are all offers; on the GPU the device first
 * reduces the offers to at most k candidates per product, and the same heaps
 * rank those.  Either way the result is the same rows in the same order.
 */
#include "no_postgres.hpp"

#include "marketplace.hpp"
#include "cpu_parallel.hpp"
#include "gpu_service.hpp"
#include "key_dictionary.hpp"

#include <atomic>
#include <algorithm>
#include <limits>
#include <numeric>
#include <unordered_map>


namespace gpurec {

namespace {

/* Rows a CPU loop handles between interrupt checks (a few milliseconds). */
constexpr size_t kCheckEvery = size_t(1) << 18;
/* products per item of the CPU's threads where each product's work is small */
constexpr size_t kProductsPerBlock = 4096;

/* body(block, worker, product) for every product code: for_each_in_blocks, kProductsPerBlock codes a block. */
template <typename Body> void for_each_product(size_t n_products, ExecContext &ctx, Body body)
{
	for_each_in_blocks(n_products, kProductsPerBlock, ctx, body);
}

/* Under gpurec.device = auto, k at most this: the GPU spends a round per rank. */
constexpr int kMaxGpuAutoK = 32;

/* A ranked offer's bytes on their way to a GPU: its product's code, its store and its price. */
constexpr double kBytesPerOffer = sizeof(int32_t) + sizeof(int64_t) + sizeof(double);

/* cheapest_offers' work, for auto's cost model: none for the GPU where k is past kMaxGpuAutoK. */
WorkShape offers_work(double offers, int k)
{
	return WorkShape{rates::kOffers, k <= kMaxGpuAutoK ? offers : 0, offers * kBytesPerOffer};
}

/*
 * Whether gpurec.device = auto may rank offers on the GPU, decided before
 * the read, which ranks them on the CPU as it goes where the GPU may not:
 * whether, offer for offer, the GPU's copy and ranking cost less than the
 * CPU's ranking on the call's threads (both grow with the offers; many
 * offers, so that fixed costs do not decide).
 */
bool gpu_may_rank(int k, const ExecContext &ctx)
{
	return estimate_cost(offers_work(1e8, k), host_profile_for_reading(ctx), call_threads(ctx)).gpu_cheaper();
}

struct Candidate
{
	int64_t key;
	int64_t store;
	uint32_t row;

	bool operator<(const Candidate &o) const
	{
		if (key != o.key)
			return key < o.key;
		if (store != o.store)
			return store < o.store;
		return row < o.row;
	}
};

/* Where each product's heap starts in a TopKHeaps: room for min(k, its offers); the total last. */
std::vector<int64_t> heap_offsets(const Offers &offers, int k)
{
	const std::vector<int64_t> &counts = offers.product.counts();
	std::vector<int64_t> offsets(counts.size() + 1, 0);
	for (size_t p = 0; p < counts.size(); ++p)
		offsets[p + 1] = offsets[p] + std::min<int64_t>(k, counts[p]);
	return offsets;
}

/*
 * Ranks candidate rows: per product a max-heap of its k best so far, so a
 * row costs one comparison with the heap's worst unless it enters.  The
 * heaps are laid out by heap_offsets, which several TopKHeaps may share.
 */
class TopKHeaps
{
  public:
	TopKHeaps(const Offers &offers, const std::vector<int64_t> &offsets)
		: offers_(offers), offsets_(offsets), heaps_(static_cast<size_t>(offsets.back())), sizes_(offsets.size() - 1, 0)
	{
	}

	void add(uint32_t row)
	{
		int32_t p = offers_.product.code(row);
		Candidate c{offers_.price.key(row), offers_.store[row], row};
		Candidate *heap = heaps_.data() + offsets_[p];
		int64_t capacity = offsets_[p + 1] - offsets_[p];
		int64_t &size = sizes_[p];
		if (size < capacity)
		{
			heap[size++] = c;
			std::push_heap(heap, heap + size);
		}
		else if (c < heap[0])
		{
			std::pop_heap(heap, heap + size);
			heap[size - 1] = c;
			std::push_heap(heap, heap + size);
		}
	}

	/*
	 * The k best of every product among all of heaps' rows, ascending: the
	 * order is total (price key, store, row), so how the rows were shared
	 * out among the heaps does not change it.  Products run on every core.
	 */
	static RankedOffers finish(std::vector<TopKHeaps> &heaps, int k, ExecContext &ctx)
	{
		const std::vector<int64_t> &offsets = heaps.front().offsets_;
		size_t n_products = offsets.size() - 1;
		RankedOffers out;
		out.offsets.resize(n_products + 1);
		out.offsets[0] = 0;
		for (size_t p = 0; p < n_products; ++p)
		{
			int64_t found = 0;
			for (const TopKHeaps &h : heaps)
				found += h.sizes_[p];
			out.offsets[p + 1] = out.offsets[p] + std::min<int64_t>(k, found);
		}
		out.rows.resize(static_cast<size_t>(out.offsets[n_products]));
		std::vector<std::vector<Candidate>> scratch(parallel_workers(n_products, ctx));
		for_each_product(n_products, ctx, [&](size_t, size_t worker, size_t p) {
			std::vector<Candidate> &all = scratch[worker];
			all.clear();
			for (const TopKHeaps &h : heaps)
				all.insert(all.end(), h.heaps_.begin() + offsets[p], h.heaps_.begin() + offsets[p] + h.sizes_[p]);
			size_t keep = static_cast<size_t>(out.offsets[p + 1] - out.offsets[p]);
			std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(keep), all.end());
			for (size_t i = 0; i < keep; ++i)
				out.rows[static_cast<size_t>(out.offsets[p]) + i] = all[i].row;
		});
		return out;
	}

  private:
	const Offers &offers_;
	const std::vector<int64_t> &offsets_;
	std::vector<Candidate> heaps_;
	std::vector<int64_t> sizes_;
};

/* Heaps of every worker together at most this many bytes; past it, fewer workers rank the rows. */
constexpr size_t kMaxHeapBytes = size_t(512) << 20;

RankedOffers rank_on_cpu(const Offers &offers, int k, ExecContext &ctx)
{
	Stopwatch clock;
	size_t n = offers.product.size();
	/* each worker ranks a slice of the rows into heaps of its own, which are then merged per product */
	std::vector<int64_t> offsets = heap_offsets(offers, k);
	size_t heap_bytes = static_cast<size_t>(offsets.back()) * sizeof(Candidate);
	size_t slices = std::max<size_t>(1, std::min({parallel_workers(n / kCheckEvery + 1, ctx), n / kCheckEvery + 1,
												  kMaxHeapBytes / std::max<size_t>(heap_bytes, 1)}));
	std::vector<TopKHeaps> heaps;
	heaps.reserve(slices);
	for (size_t s = 0; s < slices; ++s)
		heaps.emplace_back(offers, offsets);
	size_t per_slice = (n + slices - 1) / slices;
	size_t pieces = (n + kCheckEvery - 1) / kCheckEvery;
	/* pieces of kCheckEvery rows, each slice's in order, so that a cancel is seen between pieces */
	size_t pieces_per_slice = (per_slice + kCheckEvery - 1) / kCheckEvery;
	parallel_for(slices, ctx, [&](size_t slice, size_t, const std::atomic<bool> &cancelled) {
		size_t first_piece = slice * pieces_per_slice, last_piece = std::min(pieces, first_piece + pieces_per_slice);
		for (size_t piece = first_piece; piece < last_piece && !cancelled.load(std::memory_order_relaxed); ++piece)
		{
			size_t end = std::min(n, (piece + 1) * kCheckEvery);
			for (size_t row = piece * kCheckEvery; row < end; ++row)
				heaps[slice].add(static_cast<uint32_t>(row));
			ctx.progress.add(end - piece * kCheckEvery);
		}
	});
	RankedOffers out = TopKHeaps::finish(heaps, k, ctx);
	settle_ties(offers, out, ctx);
	ctx.times.compute_ms += clock.elapsed_ms();
	return out;
}

} // namespace

void check_offer_count(size_t offers)
{
	/* rows are uint32_t, and UINT32_MAX itself marks "no offer" */
	if (offers > UINT32_MAX)
		throw Error(sqlstate::program_limit_exceeded, "too many offers in one call",
					"gpurec ranks at most 4294967295 offers per call.");
}

void check_quantities(const CartLines &lines, const CallKeys *keys)
{
	size_t n_lines = lines.cart.size();
	size_t named = n_lines;
	auto key = [&](size_t i) { return std::make_tuple(lines.cart[i], lines.product[i], lines.quantity[i]); };
	for (size_t i = 0; i < n_lines; ++i)
		if (lines.quantity[i] < 1 && (named == n_lines || key(i) < key(named)))
			named = i;
	if (named < n_lines)
		throw Error(sqlstate::invalid_parameter_value, "quantity must be at least 1",
					"Cart " + shown_id(keys, "cart_id", lines.cart[named]) + " has " +
						std::to_string(lines.quantity[named]) + " of product " +
						shown_id(keys, "product_id", lines.product[named]) + ".")
			.ordered({kQuantityCheck, lines.cart[named], lines.product[named], lines.quantity[named]});
}

/*
 * Offers of one product with an equal price key and store form a tie: they
 * differ at most in how the price was spelled (4.5, 4.50).  The ranks a tie
 * fills take its members with the fewest decimals first, a rule of values,
 * not of row order, so that rows read in any order (by parallel workers)
 * give the same answer.  Members spelled alike read alike, so only two cases
 * need a pass over the offers: the GPU gives a tie as its first row
 * repeated, once per rank it fills; and the CPU takes a tie's members in row
 * order, which decides the spelling only when the column mixes scales.  The
 * pass stops as soon as it can: at once when only repeats need filling.
 */
void settle_ties(const Offers &offers, RankedOffers &ranked, ExecContext &ctx)
{
	struct Run
	{
		int32_t product;
		int64_t key;
		int64_t store;
		int64_t begin; /* position in ranked.rows */
		int64_t size;
		std::vector<std::pair<int16_t, uint32_t>> members; /* the best so far: (display scale, row), sorted */
	};
	bool mixed = offers.price.has_mixed_scales();
	std::vector<Run> runs;
	size_t n_products = ranked.offsets.size() - 1;
	auto same_offer = [&](uint32_t a, uint32_t b) {
		return offers.price.key(a) == offers.price.key(b) && offers.store[a] == offers.store[b];
	};
	/* the ties, products in blocks on every core (each ranked row is a random read of the columns) */
	std::vector<std::vector<Run>> found((n_products + kProductsPerBlock - 1) / kProductsPerBlock);
	for_each_product(n_products, ctx, [&](size_t block, size_t, size_t p) {
		int64_t begin = ranked.offsets[p], end = ranked.offsets[p + 1];
		for (int64_t first = begin; first < end;)
		{
			uint32_t row = ranked.rows[first];
			int64_t last = first + 1;
			bool repeats = false;
			for (; last < end && same_offer(ranked.rows[last], row); ++last)
				repeats |= ranked.rows[last] == ranked.rows[last - 1];
			if (mixed || repeats)
				found[block].push_back({static_cast<int32_t>(p), offers.price.key(row), offers.store[row], first,
										last - first, {}});
			first = last;
		}
	});
	for (std::vector<Run> &block_runs : found)
		for (Run &run : block_runs)
			runs.push_back(std::move(run));
	if (runs.empty())
		return;

	/* runs of a product are consecutive in `runs` */
	constexpr uint32_t kNone = UINT32_MAX;
	std::vector<uint32_t> first_run(n_products, kNone);
	for (size_t r = runs.size(); r-- > 0;)
		first_run[runs[r].product] = static_cast<uint32_t>(r);
	/* without mixed scales the first members in row order will do: stop once every run has them */
	size_t unfilled = mixed ? SIZE_MAX : runs.size();
	size_t n = offers.product.size();
	for (size_t begin = 0; begin < n && unfilled > 0; begin += kCheckEvery)
	{
		ctx.interrupt_point(Phase::Compute);
		size_t end = std::min(n, begin + kCheckEvery);
		for (size_t row = begin; row < end; ++row)
		{
			int32_t p = offers.product.code(row);
			uint32_t r = first_run[p];
			if (r == kNone)
				continue;
			for (; r < runs.size() && runs[r].product == p; ++r)
			{
				Run &run = runs[r];
				if (run.key != offers.price.key(row) || run.store != offers.store[row])
					continue;
				std::pair<int16_t, uint32_t> member(offers.price.display_scale(row), static_cast<uint32_t>(row));
				auto &best = run.members;
				if (static_cast<int64_t>(best.size()) < run.size)
				{
					best.insert(std::upper_bound(best.begin(), best.end(), member), member);
					if (!mixed && static_cast<int64_t>(best.size()) == run.size)
						--unfilled;
				}
				else if (member < best.back())
				{
					best.pop_back();
					best.insert(std::upper_bound(best.begin(), best.end(), member), member);
				}
				break;
			}
		}
	}
	for (const Run &run : runs)
		for (size_t i = 0; i < run.members.size(); ++i)
			ranked.rows[run.begin + static_cast<int64_t>(i)] = run.members[i].second;
}

namespace {

/* The offers as the kernels see them: the one place that adapts them. */
gpu::OfferColumns offer_columns(const Offers &offers)
{
	return {chunk_view(offers.product.codes()), chunk_view(offers.store), chunk_view(offers.price.keys()),
			offers.price.scale()};
}

RankedOffers rank_on_gpu(const Offers &offers, int k, ExecContext &ctx, OfferStreamer *streamer)
{
	/* no product needs more rounds than it has offers */
	const std::vector<int64_t> &counts = offers.product.counts();
	int64_t most_offers = counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end());
	int rounds = static_cast<int>(std::min<int64_t>(k, most_offers));
	size_t n_products = offers.product.distinct();
	std::vector<uint32_t> picks = gpu::cheapest_offer_picks(offer_columns(offers), n_products, rounds,
															streamer ? streamer->upload() : nullptr, ctx);
	Stopwatch clock;
	RankedOffers out;
	if (picks.size() == n_products * static_cast<size_t>(rounds))
	{
		/* one part: the GPU's picks are the ranking; counted, then copied, on every core */
		out.offsets.assign(n_products + 1, 0);
		for_each_product(n_products, ctx, [&](size_t, size_t, size_t p) {
			const uint32_t *slot = picks.data() + p * rounds;
			int r = 0;
			while (r < rounds && slot[r] != gpu::kNoOffer)
				++r;
			out.offsets[p + 1] = r;
		});
		std::partial_sum(out.offsets.begin(), out.offsets.end(), out.offsets.begin());
		out.rows.resize(static_cast<size_t>(out.offsets.back()));
		for_each_product(n_products, ctx, [&](size_t, size_t, size_t p) {
			const uint32_t *slot = picks.data() + p * rounds;
			std::copy(slot, slot + (out.offsets[p + 1] - out.offsets[p]), out.rows.data() + out.offsets[p]);
		});
	}
	else
	{
		/* several parts: rank their picks together */
		std::vector<int64_t> offsets = heap_offsets(offers, k);
		std::vector<TopKHeaps> heaps;
		heaps.emplace_back(offers, offsets);
		for (uint32_t row : picks)
			if (row != gpu::kNoOffer)
				heaps.front().add(row);
		out = TopKHeaps::finish(heaps, k, ctx);
	}
	settle_ties(offers, out, ctx);
	ctx.times.compute_ms += clock.elapsed_ms();
	return out;
}

/* GPU memory a ranking needs per offer, for the service's queue: its code, store and price key, and a pick. */
constexpr int64_t kServiceBytesPerOffer = 28;

/*
 * The ranking in the GPU service, on the same rows: the product codes with
 * their counts (not the product column, which the service would number
 * afresh), stores and prices.  The service ranks by these very codes and
 * rows, so its answer is the backend's.
 */
RankedOffers rank_in_service(const Offers &offers, int k, ExecContext &ctx)
{
	service::CallResult bytes = ctx.service->call(
		service::Function::CheapestOffers, static_cast<int64_t>(offers.product.size()) * kServiceBytesPerOffer,
		[&](ByteWriter &out) {
			out.put<int32_t>(k);
			offers.product.codes().serialize(out);
			put_vector(out, offers.product.counts());
			offers.store.serialize(out);
			out.put<uint8_t>(static_cast<uint8_t>(offers.price.type()));
			offers.price.serialize(out);
		},
		ctx);
	ByteReader in(bytes.data(), bytes.size());
	RankedOffers ranked;
	ranked.offsets = get_vector<int64_t>(in);
	ranked.rows = get_vector<uint32_t>(in);
	bool agree = in.at_end() && ranked.offsets.size() == offers.product.distinct() + 1 &&
				 ranked.offsets.front() == 0 && ranked.offsets.back() == static_cast<int64_t>(ranked.rows.size());
	for (uint32_t row : ranked.rows)
		agree = agree && row < offers.product.size();
	if (!agree)
		throw Error(sqlstate::internal_error, "cheapest_offers: a malformed answer of the GPU service");
	return ranked;
}

/*
 * Whether every row's code is a product's, and every product has the rows
 * counted for it: what the ranking indexes by.  On every core, as the rows
 * may be tens of millions; each thread counts into a vector of its own
 * where the products are few, else into the one vector atomically.
 */
bool codes_agree_with_counts(const ChunkedColumn<int32_t> &codes, const std::vector<int64_t> &counts, ExecContext &ctx)
{
	constexpr size_t kBlockRows = size_t(1) << 16;
	size_t n = codes.size(), n_products = counts.size();
	/* at least one: no rows (an empty query) still compares every product's count, all 0 */
	size_t threads = std::max<size_t>(1, parallel_workers((n + kBlockRows - 1) / kBlockRows, ctx));
	bool own_counts = n_products * threads <= n;
	std::vector<std::vector<int64_t>> counted(own_counts ? threads : 1, std::vector<int64_t>(n_products, 0));
	std::atomic<bool> out_of_range{false};
	for_each_in_blocks(
		(n + kBlockRows - 1) / kBlockRows, 1, ctx,
		[&](size_t, size_t worker, size_t block) {
			std::vector<int64_t> &rows = counted[own_counts ? worker : 0];
			size_t end = std::min(n, (block + 1) * kBlockRows);
			for (size_t r = block * kBlockRows; r < end; ++r)
			{
				auto code = static_cast<uint32_t>(codes[r]); /* a negative code is out of range too */
				if (code >= n_products)
				{
					out_of_range.store(true, std::memory_order_relaxed);
					return;
				}
				if (own_counts)
					++rows[code];
				else
					__atomic_fetch_add(&rows[code], 1, __ATOMIC_RELAXED);
			}
		},
		Phase::Transfer);
	if (out_of_range.load())
		return false;
	for (size_t t = 1; t < counted.size(); ++t)
		for (size_t p = 0; p < n_products; ++p)
			counted[0][p] += counted[t][p];
	return counted[0] == counts;
}

/*
 * The service's side of rank_in_service: cheapest_offers itself, on the
 * service's device.  The columns' full chunks are read where the backend
 * wrote them, in the service's pinned memory, and go to the GPU from there;
 * only each column's last, partial chunk is copied.
 */
std::vector<uint8_t> offers_in_service(ByteReader &input, const service::Part &, ExecContext &ctx)
{
	PieceRunner on_threads = pieces_on_threads(ctx, Phase::Transfer);
	int k = input.get<int32_t>();
	ChunkedColumn<int32_t> codes = ChunkedColumn<int32_t>::read_serialized(input);
	std::vector<int64_t> counts = get_vector<int64_t>(input);
	Int64Column store;
	store.append_serialized(input, on_threads, true);
	uint8_t type = input.get<uint8_t>();
	if (type > static_cast<uint8_t>(NumberType::Numeric))
		throw Error(sqlstate::internal_error, "cheapest_offers: the GPU service got prices of an unknown type");
	NumberColumn price(static_cast<NumberType>(type));
	price.append_serialized(input, on_threads, true);
	bool agree = input.at_end() && store.size() == codes.size() && price.size() == codes.size() &&
				 codes_agree_with_counts(codes, counts, ctx);
	if (!agree)
		throw Error(sqlstate::internal_error, "cheapest_offers: the GPU service got offers that disagree with themselves");
	IdColumn product = IdColumn::of_codes(std::move(codes), std::move(counts));
	Offers offers{product, store, price};
	RankedOffers ranked = cheapest_offers(offers, k, ctx);
	/* the GPU service's answer: the ranking's offsets, then its rows */
	return written_bytes([&](ByteWriter &out) {
		put_vector(out, ranked.offsets);
		put_vector(out, ranked.rows);
	});
}

const bool offers_registered =
	(service::register_handler(service::Function::CheapestOffers, offers_in_service), true);

} // namespace

/* With a GPU service, no copy while reading: this backend starts no CUDA, and the service gets the offers whole. */
OfferStreamer::OfferStreamer(ExecContext &ctx, int k)
	: ctx_(ctx), enabled_(!ctx.service && !ranks_offers_on_cpu(k, ctx)), gpu_from_(gpu_offers_from(k, ctx))
{
}

void OfferStreamer::on_chunk(const Offers &offers)
{
	if (!enabled_ || (ctx_.mode == DeviceMode::Auto && static_cast<double>(offers.product.size()) < gpu_from_))
		return;
	if (!upload_)
	{
		if (!gpu_usable(ctx_))
		{
			enabled_ = false;
			return;
		}
		try
		{
			upload_ = on_gpu([&] { return gpu::start_offer_upload(ctx_); });
		}
		catch (const GpuOutOfMemory &)
		{
			enabled_ = false; /* the ranking decides what to do without a copy */
			return;
		}
	}
	on_gpu([&] { gpu::upload_offer_chunks(*upload_, offer_columns(offers), ctx_); });
}

RankedOffers cheapest_offers(const Offers &offers, int k, ExecContext &ctx, OfferStreamer *streamer)
{
	check_k(k);
	check_offer_count(offers.product.size());
	/* the CPU counts the offers it ranked */
	ctx.progress.begin(ProgressPhase::Computing, "offers", offers.product.size());
	return dispatch(
		ctx, "cheapest_offers",
		gpu_may_rank(k, ctx) ? offers_work(static_cast<double>(offers.product.size()), k) : offers_work(0, k),
		[&] { return ctx.service ? rank_in_service(offers, k, ctx) : rank_on_gpu(offers, k, ctx, streamer); },
		[&] { return rank_on_cpu(offers, k, ctx); });
}

double gpu_offers_from(int k, const ExecContext &ctx)
{
	return ranks_offers_on_cpu(k, ctx)
			   ? std::numeric_limits<double>::infinity()
			   : gpu_cheaper_from(offers_work(1, k), host_profile_for_reading(ctx), call_threads(ctx));
}

bool ranks_offers_on_cpu(int k, const ExecContext &ctx)
{
	return ctx.mode == DeviceMode::Cpu ||
		   (ctx.mode == DeviceMode::Auto && (gpu::found_unusable() || !gpu_may_rank(k, ctx)));
}

namespace {

/*
 * The first bytes of an OffersPart: what it is, and the version of this
 * layout.  Numbers are in the machine's byte order: a coordinator of another
 * byte order, like one of another layout, reads a magic that does not match.
 */
constexpr uint32_t kOffersPartMagic = 0x4f505247; /* "GRPO" */
/* 2: its integer columns may be packed (byte_stream.hpp); 3: its numeric reach; 4: uuid or text ids with their values */
constexpr uint16_t kOffersPartVersion = 4;
/* which of a part's id columns are codes of the dictionaries it carries (OffersPart::carry_keys) */
constexpr uint8_t kProductKeys = 1, kStoreKeys = 2;

} // namespace

OffersPart::OffersPart(const Offers &offers, const RankedOffers &ranked, const std::vector<int64_t> &n_offers, int k,
					   const NumericReach &beyond)
	: OffersPart(k, offers.price.type(), beyond)
{
	reach_.add_column(offers.price);
	for (size_t p = 0; p + 1 < ranked.offsets.size(); ++p)
		for (int64_t r = ranked.offsets[p]; r < ranked.offsets[p + 1]; ++r)
		{
			uint32_t row = ranked.rows[r];
			add_offer(offers.product.value_of(static_cast<int32_t>(p)), r == ranked.offsets[p] ? n_offers[p] : 0,
					  offers.store[row], offers.price, row);
		}
}

void OffersPart::serialize(ByteWriter &out) const
{
	out.put<uint32_t>(kOffersPartMagic);
	out.put<uint16_t>(kOffersPartVersion);
	out.put<int32_t>(k_);
	out.put<uint8_t>(static_cast<uint8_t>(price_.type()));
	out.put<uint8_t>(static_cast<uint8_t>((product_keys_ ? kProductKeys : 0) | (store_keys_ ? kStoreKeys : 0)));
	product_.serialize(out);
	n_offers_.serialize(out);
	store_.serialize(out);
	price_.serialize(out);
	reach_.serialize(out);
	if (product_keys_)
		product_keys_->serialize(out);
	if (store_keys_)
		store_keys_->serialize(out);
}

MergedOffers::MergedOffers(std::string price_description, std::shared_ptr<CallKeys> keys) : keys_(std::move(keys))
{
	price_.set_description(std::move(price_description));
}

namespace {

/*
 * The call's code of each code of a part's dictionary of the ids named
 * name: its values interned in the call's (null: a part of integer ids).
 */
std::vector<int64_t> call_codes_of_part(ByteReader &in, bool carried, CallKeys *keys, const char *name)
{
	if (!carried)
		return {};
	const CallKeys::Key *key = keys ? keys->find(name) : nullptr;
	if (!key || !key->dictionary)
		throw Error(sqlstate::internal_error, std::string("its ") + name + " values have no dictionary of the call");
	return key->dictionary->intern_serialized(in);
}

/* A part's id through its dictionary's codes (call_codes_of_part; none: the id itself). */
int64_t call_code(const std::vector<int64_t> &codes, bool carried, int64_t id)
{
	if (!carried)
		return id;
	if (id < 0 || static_cast<uint64_t>(id) >= codes.size())
		throw Error(sqlstate::internal_error, "an id outside its dictionary");
	return codes[static_cast<size_t>(id)];
}

} // namespace

void MergedOffers::append_part(const uint8_t *data, size_t size, int k)
{
	ByteReader in(data, size);
	size_t before = store_.size();
	try
	{
		if (in.get<uint32_t>() != kOffersPartMagic || in.get<uint16_t>() != kOffersPartVersion)
			throw Error(sqlstate::internal_error, "it does not begin as one of this version of gpurec");
		int part_k = in.get<int32_t>();
		if (part_k < k)
			throw Error(sqlstate::invalid_parameter_value,
						"a shard's part ranks fewer offers per product than the merge needs",
						"The part has the " + std::to_string(part_k) + " cheapest offers of each product; k = " +
							std::to_string(k) + ".");
		uint8_t type = in.get<uint8_t>();
		if (type > static_cast<uint8_t>(NumberType::Numeric))
			throw Error(sqlstate::internal_error, "its prices are of an unknown type");
		if (parts_ == 0)
			price_.set_type(static_cast<NumberType>(type));
		else if (type != static_cast<uint8_t>(price_.type()))
			throw Error(sqlstate::datatype_mismatch, "the shards' prices are of different types",
						"Every shard's offers query must return price as the same type.");
		uint8_t carried = in.get<uint8_t>();
		if (carried & ~(kProductKeys | kStoreKeys))
			throw Error(sqlstate::internal_error, "its ids are of an unknown kind");
		/* straight into this merge's columns (a column per part between would cost more than its rows) */
		product_ids_.append_serialized(in);
		counts_.append_serialized(in);
		store_.append_serialized(in);
		price_.append_serialized(in);
		reach_.add(NumericReach::read(in));
		bool product_keys = carried & kProductKeys, store_keys = carried & kStoreKeys;
		std::vector<int64_t> product_codes = call_codes_of_part(in, product_keys, keys_.get(), "product_id");
		std::vector<int64_t> store_codes = call_codes_of_part(in, store_keys, keys_.get(), "store_id");
		if (!in.at_end() || product_ids_.size() != store_.size() || counts_.size() != store_.size() ||
			price_.size() != store_.size())
			throw Error(sqlstate::internal_error, "its columns disagree");
		if (product_keys)
			product_ids_.visit_in_pieces(
				[&](int64_t *ids, size_t first, size_t count) {
					for (size_t i = first < before ? before - first : 0; i < count; ++i)
						ids[i] = call_code(product_codes, true, ids[i]);
				},
				run_serially);
		if (store_keys)
			store_.visit_in_pieces(
				[&](int64_t *ids, size_t first, size_t count) {
					for (size_t i = first < before ? before - first : 0; i < count; ++i)
						ids[i] = call_code(store_codes, true, ids[i]);
				},
				run_serially);
		took_keys_ = took_keys_ || carried != 0;
	}
	catch (const Error &e)
	{
		if (std::string(e.sqlstate()) != sqlstate::internal_error)
			throw;
		throw Error(sqlstate::invalid_binary_representation, "not a shard's part of cheapest_offers",
					std::string("The bytes are ") + std::to_string(size) + " long; " + e.what() + ".",
					"Parts come from gpurec_internal._cheapest_offers_part of the same version of gpurec.");
	}
	size_t end = store_.size();
	for (size_t row = before; row < end; ++row)
		product_.push_back(product_ids_[row]);
	n_offers_.resize(product_.distinct(), 0);
	for (size_t row = before; row < end; ++row)
	{
		int64_t &sum = n_offers_[product_.code(row)];
		if (counts_[row] < 0 || __builtin_add_overflow(sum, counts_[row], &sum))
			throw Error(sqlstate::invalid_binary_representation, "not a shard's part of cheapest_offers",
						"A count of offers is out of range.");
	}
	++parts_;
}

void MergedOffers::settle_keys(const PieceRunner &run)
{
	if (!took_keys_)
		return;
	keys_->code_column("product_id", &product_);
	keys_->code_column("store_id", &store_);
	try
	{
		keys_->settle(run);
	}
	catch (...)
	{
		keys_->forget(&product_);
		keys_->forget(&store_);
		throw;
	}
	keys_->forget(&product_);
	keys_->forget(&store_);
}

namespace {

constexpr uint32_t kNotKept = UINT32_MAX;

} // namespace

RunningCheapestOffers::RunningCheapestOffers(int k, size_t compact_from) : k_(k), compact_from_(compact_from)
{
	check_k(k);
}

void RunningCheapestOffers::absorb(const Offers &piece)
{
	size_t n = piece.product.size();
	if (n == 0)
		return;
	if (kept_price_.size() == 0)
		kept_price_.set_type(piece.price.type());
	kept_price_.set_description(piece.price.description());
	reach_.add_column(piece.price);
	size_t products = piece.product.distinct();
	if (heaps_.size() < products)
	{
		heaps_.resize(products);
		worst_.resize(products, NumberColumn::kLargestComparable); /* a heap short of k takes every offer */
	}
	NumberType type = piece.price.type();
	int scale = piece.price.scale();
	KeyOrder held = held_order();
	Ranking ranking{piece.store_bytes ? &held : piece.store_keys};
	for (size_t row = 0; row < n; ++row)
	{
		int32_t product = piece.product.code(row);
		__int128 price = NumberColumn::comparable(piece.price.key(row), type, scale);
		if (price > worst_[product])
			continue;
		int64_t store = piece.store_bytes ? code_held_store(piece, row) : piece.store[row];
		offer(product, Candidate{price, store, piece.price.display_scale(row), kNotKept}, piece, row, ranking);
	}
}

int64_t RunningCheapestOffers::code_held_store(const Offers &piece, size_t row)
{
	int64_t index = piece.store[row];
	if (index < 0 || static_cast<size_t>(index) >= piece.store_bytes->size())
		throw Error(sqlstate::internal_error, "RunningCheapestOffers: a store outside its piece's values");
	int64_t code = held_stores_.intern(piece.store_bytes->value(index), piece.store_bytes->value_size(index));
	if (code < 0)
		throw Error(sqlstate::out_of_memory, "could not code the store ids of a parallel read: out of memory, or "
											 "more than 2147483647 distinct ids");
	return code;
}

void RunningCheapestOffers::offer(int32_t product, Candidate candidate, const Offers &piece, size_t row,
								  Ranking ranking)
{
	std::vector<Candidate> &heap = heaps_[static_cast<size_t>(product)];
	auto k = static_cast<size_t>(k_);
	if (heap.size() == k)
	{
		if (!ranking(candidate, heap.front()))
			return;
		std::pop_heap(heap.begin(), heap.end(), ranking);
		heap.pop_back();
		--in_heaps_;
	}
	if (kept_store_.size() >= kNotKept)
		throw Error(sqlstate::program_limit_exceeded, "too many offers kept in one process",
					"A process of a parallel read keeps at most 4294967294 offers at once.");
	candidate.kept = static_cast<uint32_t>(kept_store_.size());
	kept_store_.push_back(candidate.store);
	kept_price_.push_row_of(piece.price, row);
	if (heap.capacity() == 0)
		heap.reserve(std::min<size_t>(k, 16)); /* a product's first offer: room for a small k at once */
	heap.push_back(candidate);
	std::push_heap(heap.begin(), heap.end(), ranking);
	++in_heaps_;
	if (heap.size() == k)
		worst_[static_cast<size_t>(product)] = heap.front().price;
	if (kept_store_.size() >= std::max(compact_from_, 2 * in_heaps_))
		compact();
}

void RunningCheapestOffers::compact()
{
	/* kept in the order they were: a heap orders equal offers by where they are kept */
	std::vector<uint32_t> moved(kept_store_.size(), kNotKept);
	for (const std::vector<Candidate> &heap : heaps_)
		for (const Candidate &candidate : heap)
			moved[candidate.kept] = 0;
	Int64Column store;
	NumberColumn price(kept_price_.type());
	price.set_description(kept_price_.description());
	for (size_t at = 0; at < moved.size(); ++at)
		if (moved[at] != kNotKept)
		{
			moved[at] = static_cast<uint32_t>(store.size());
			store.push_back(kept_store_[at]);
			price.push_row_of(kept_price_, at);
		}
	for (std::vector<Candidate> &heap : heaps_)
		for (Candidate &candidate : heap)
			candidate.kept = moved[candidate.kept];
	kept_store_ = std::move(store);
	kept_price_ = std::move(price);
}

std::vector<uint8_t> RunningCheapestOffers::finish(const Offers &piece)
{
	reach_.check(piece.price.description());
	OffersPart part(k_, piece.price.type(), reach_);
	const std::vector<int64_t> &counts = piece.product.counts();
	KeyOrder held = held_order();
	const KeyOrder *stores = piece.store_bytes ? &held : piece.store_keys;
	Ranking ranking{stores};
	for (size_t product = 0; product < heaps_.size(); ++product)
	{
		std::vector<Candidate> &heap = heaps_[product];
		std::sort_heap(heap.begin(), heap.end(), ranking); /* cheapest first */
		for (size_t i = 0; i < heap.size(); ++i)
			part.add_offer(piece.product.value_of(static_cast<int32_t>(product)), i == 0 ? counts[product] : 0,
						   kept_store_[heap[i].kept], kept_price_, heap[i].kept);
	}
	part.carry_keys(piece.product_keys, stores);
	return serialized_bytes(part);
}

namespace {

/*
 * The values of the codes a part holds, as a dictionary of their own
 * (numbered as they first come): each id rewritten to its code there.
 * Only the survivors' values travel, not the process's whole dictionary.
 */
std::unique_ptr<KeyDictionary> carried_values(const KeyOrder *order, Int64Column &ids)
{
	if (!order)
		return nullptr;
	auto carried = std::make_unique<KeyDictionary>();
	ids.visit_in_pieces(
		[&](int64_t *rows, size_t, size_t count) {
			for (size_t i = 0; i < count; ++i)
			{
				int64_t code = order->code(rows[i]);
				rows[i] = carried->intern(order->dictionary->value(code), order->dictionary->value_size(code));
				if (rows[i] < 0)
					throw std::bad_alloc();
			}
		},
		run_serially);
	return carried;
}

} // namespace

void OffersPart::carry_keys(const KeyOrder *product_keys, const KeyOrder *store_keys)
{
	product_keys_ = carried_values(product_keys, product_);
	store_keys_ = carried_values(store_keys, store_);
}

RankedOffers merge_cheapest_offers(const MergedOffers &merged, int k, ExecContext &ctx)
{
	check_k(k);
	check_offer_count(merged.offers().product.size());
	return rank_on_cpu(merged.offers(), k, ctx);
}

std::vector<CartImprovement> improve_carts(const CartLines &lines, const Offers &offers,
										   ExecContext &ctx, OfferStreamer *streamer)
{
	check_quantities(lines, ctx.keys.get());
	size_t n_lines = lines.cart.size();

	/* the cheapest offer of every product: the same ranking as cheapest_offers */
	RankedOffers best = cheapest_offers(offers, 1, ctx, streamer);
	std::vector<int64_t> best_row(offers.product.distinct(), -1);
	for (size_t p = 0; p < best_row.size(); ++p)
		if (best.offsets[p + 1] > best.offsets[p])
			best_row[p] = best.rows[best.offsets[p]];

	/*
	 * The current store's cheapest offer of each (product, store) the carts
	 * hold: one pass over the offers, looking up only products in some cart.
	 */
	Stopwatch clock;
	std::vector<int32_t> line_code(n_lines);
	std::vector<uint8_t> product_in_cart(offers.product.distinct(), 0);
	std::unordered_map<std::pair<int32_t, int64_t>, int64_t, ProductStoreHash> current;
	for (size_t i = 0; i < n_lines; ++i)
	{
		line_code[i] = offers.product.find(lines.product[i]);
		if (line_code[i] >= 0)
		{
			product_in_cart[line_code[i]] = 1;
			current.emplace(std::make_pair(line_code[i], lines.store[i]), -1);
		}
	}
	size_t n_offers = offers.product.size();
	for (size_t begin = 0; begin < n_offers; begin += kCheckEvery)
	{
		ctx.interrupt_point(Phase::Compute);
		size_t end = std::min(n_offers, begin + kCheckEvery);
		for (size_t row = begin; row < end; ++row)
		{
			int32_t code = offers.product.code(row);
			if (!product_in_cart[code])
				continue;
			auto it = current.find({code, offers.store[row]});
			if (it == current.end())
				continue;
			int64_t &cur = it->second;
			/* equal prices: the fewer decimals, as settle_ties ranks them, so that row order does not matter */
			if (cur < 0 || offers.price.key(row) < offers.price.key(cur) ||
				(offers.price.key(row) == offers.price.key(cur) &&
				 offers.price.display_scale(row) < offers.price.display_scale(cur)))
				cur = static_cast<int64_t>(row);
		}
	}

	std::vector<CartImprovement> out;
	for (size_t i = 0; i < n_lines; ++i)
	{
		if (line_code[i] < 0)
		{
			out.push_back({i, -1, -1});
			continue;
		}
		int64_t cur = current.at({line_code[i], lines.store[i]});
		int64_t cheapest = best_row[line_code[i]];
		if (cur < 0 || offers.price.key(cheapest) < offers.price.key(cur))
			out.push_back({i, cur, cheapest});
	}
	std::sort(out.begin(), out.end(), [&](const CartImprovement &a, const CartImprovement &b) {
		if (lines.cart[a.line] != lines.cart[b.line])
			return lines.cart[a.line] < lines.cart[b.line];
		if (lines.product[a.line] != lines.product[b.line])
			return lines.product[a.line] < lines.product[b.line];
		if (lines.store[a.line] != lines.store[b.line])
			return lines.store[a.line] < lines.store[b.line];
		/* lines equal so far differ in quantity or in nothing: row order must not show */
		if (lines.quantity[a.line] != lines.quantity[b.line])
			return lines.quantity[a.line] < lines.quantity[b.line];
		return a.line < b.line;
	});
	ctx.times.compute_ms += clock.elapsed_ms();
	return out;
}

} // namespace gpurec
