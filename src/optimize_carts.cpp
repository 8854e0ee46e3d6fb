/*
 * optimize_carts.cpp: optimize_carts (carts.hpp): the input's checks, every cart's
 * search problem in compressed rows, the search on the GPU or on every
 * core (kernels/api/cart_search.hpp, the same code on both), and each
 * cart's answer in exact integers.
 *
 * Numbers: prices, fees and thresholds are exact decimals (integer or
 * numeric columns; a floating-point one is refused).  Each is taken as an
 * integer at the call's common scale, the largest scale of the three
 * columns, so that a cart's sums are plain integer sums.  A candidate's
 * cost (price x quantity) and a fee must lie within +-2^56 units there
 * (ERROR 22003 otherwise): then no sum the search makes can overflow.
 *
 * The candidates of each product, and the dominance rule that keeps them
 * few, are cart_candidates.hpp's.
 */
#include "no_postgres.hpp"

#include "carts.hpp"

#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>
#include <tuple>
#include <type_traits>

#include "cart_candidates.hpp"
#include "cpu_parallel.hpp"
#include "gpu_service.hpp"
#include "key_dictionary.hpp"

namespace gpurec {

namespace {

using carts::CartArrays;
using carts::kMaxCartProducts;
using carts::kMaxUnits;

/* Cart lines per piece of work of the CPU's threads (and of the GPU's batches' building). */
constexpr double kLinesPerPiece = 4096;
/* Search steps of one cart between checks for a cancel on the CPU. */
constexpr int64_t kStepsBetweenChecks = int64_t(1) << 16;
/*
 * Search steps the GPU gives one cart; the carts whose searches take more
 * are searched again on the CPU (kernels/carts.cu says why).  On the
 * benchmark's 100,000 carts, 0.5% take more than 256 steps, and those
 * about 320,000 steps in all: about 0.2 s of one core, against a GPU
 * thread's 256 steps at about 26 us each.
 */
constexpr int64_t kGpuStepsPerCart = 256;

/* The carts as the input gave them: lines sorted, grouped into carts and demands (lines of one product). */
struct Demand
{
	size_t first, end; /* positions in the sorted lines */
	int32_t code;	   /* the product's offers code, or -1: nobody offers it */
	int64_t quantity;  /* the lines' quantities added */
};

struct CartGroup
{
	size_t first_demand, end_demand;
};

/*
 * The search problems of a piece of carts (CartArrays' layout), with what
 * the answer needs: each product's demand and each candidate's offer row.
 */
struct CartProblems : CartArrayVectors
{
	size_t first_cart = 0; /* the piece's first cart, in CartGroup numbering */
	std::vector<size_t> product_demand;
	std::vector<uint32_t> candidate_row;
	std::vector<int32_t> choice; /* the answer: per product, its candidate */
};

struct CallData
{
	const CartLines &lines;
	const Offers &offers;
	const ShippingTable &shipping;
	const ProductOffers &products;
	const std::vector<size_t> &order; /* the lines, sorted */
	const std::vector<Demand> &demands;
	const std::vector<CartGroup> &carts;
	int scale;
	const CallKeys *keys; /* the call's, for the ids its errors name (shown_id) */
};

/* What add_cart reuses from one cart to the next on a thread. */
struct CartScratch
{
	struct Candidate
	{
		int64_t store;
		int64_t cost;
		int64_t fee;
		uint32_t row;
		int32_t number; /* the store's, within the cart */
	};
	struct Product
	{
		size_t demand;
		int32_t rank;
		size_t first, end; /* its candidates */
	};
	std::vector<Candidate> candidates;
	std::vector<Product> products;
	std::vector<std::pair<int64_t, uint32_t>> by_store; /* (store, candidate) */
};

/* Appends cart g's search problem to piece. */
void add_cart(const CallData &call, size_t g, CartProblems &piece, CartScratch &scratch)
{
	const CartGroup &cart = call.carts[g];
	int64_t cart_id = call.lines.cart[call.order[call.demands[cart.first_demand].first]];
	std::vector<CartScratch::Candidate> &candidates = scratch.candidates;
	std::vector<CartScratch::Product> &products = scratch.products;
	candidates.clear();
	products.clear();
	/* the products' candidates lie apart in kept: ask for all of them before reading any */
	for (size_t d = cart.first_demand; d < cart.end_demand; ++d)
		if (call.demands[d].code >= 0)
		{
			const ProductOffer *first = call.products.kept.data() + call.products.kept_offsets[call.demands[d].code];
			__builtin_prefetch(first);
			__builtin_prefetch(first + 2);
		}
	int32_t rank = 0;
	for (size_t d = cart.first_demand; d < cart.end_demand; ++d)
	{
		const Demand &demand = call.demands[d];
		if (demand.code < 0)
			continue;
		size_t first = candidates.size();
		int64_t product_id = call.lines.product[call.order[demand.first]];
		for (int64_t k = call.products.kept_offsets[demand.code]; k < call.products.kept_offsets[demand.code + 1]; ++k)
		{
			const ProductOffer &o = call.products.kept[k];
			__int128 cost = (__int128) o.unit * demand.quantity;
			if (cost > kMaxUnits || cost < -kMaxUnits)
				throw Error(sqlstate::numeric_value_out_of_range,
							"cart " + shown_id(call.keys, "cart_id", cart_id) + ": the cost of product " +
								shown_id(call.keys, "product_id", product_id) + " at store " +
								shown_id(call.keys, "store_id", o.store) + " is too large to sum exactly",
							"optimize_carts sums prices x quantities and fees as 64-bit integers at scale " +
								std::to_string(call.scale) +
								"; each price x quantity may be at most 2^56 = 72057594037927936 units there.");
			candidates.push_back({o.store, static_cast<int64_t>(cost), o.fee, o.row, -1});
		}
		size_t kept = drop_dominated(candidates.data() + first, candidates.size() - first,
									 [](const CartScratch::Candidate &c) { return c.cost; });
		candidates.resize(first + kept);
		products.push_back({d, rank++, first, candidates.size()});
	}
	if (products.size() > static_cast<size_t>(kMaxCartProducts))
		throw Error(sqlstate::program_limit_exceeded,
					"cart " + shown_id(call.keys, "cart_id", cart_id) + " has " + std::to_string(products.size()) +
						" distinct products that stores offer; optimize_carts solves at most " +
						std::to_string(kMaxCartProducts) + " exactly",
					"The search is exact, and its time can grow exponentially with the products of a cart.",
					"Split the cart.");

	/*
	 * The cart's stores numbered by ascending id, so that a candidate's
	 * store number orders as its id; with each store's share of its fee
	 * (CartArrays::store_share), from the products that could use it.
	 */
	auto &by_store = scratch.by_store;
	by_store.clear();
	for (size_t i = 0; i < candidates.size(); ++i)
		by_store.push_back({candidates[i].store, static_cast<uint32_t>(i)});
	std::sort(by_store.begin(), by_store.end());
	int32_t number = -1;
	int64_t offering = 0, most = 0;
	for (size_t i = 0; i < by_store.size(); ++i)
	{
		const CartScratch::Candidate &c = candidates[by_store[i].second];
		if (i == 0 || by_store[i - 1].first != c.store)
		{
			++number;
			offering = most = 0;
		}
		candidates[by_store[i].second].number = number;
		++offering;
		most += std::max<int64_t>(c.cost, 0);
		if (i + 1 == by_store.size() || by_store[i + 1].first != c.store)
		{
			const StoreShipping *ship = call.shipping.find(c.store);
			int64_t fee = ship ? ship->fee : 0, free_from = ship ? ship->free_from : carts::kNeverFree;
			piece.store_fee.push_back(fee);
			piece.store_free_from.push_back(free_from);
			bool never_free = free_from == carts::kNeverFree || most < free_from;
			piece.store_share.push_back(never_free ? fee / offering : 0);
		}
	}
	piece.cart_stores.push_back(static_cast<int64_t>(piece.store_fee.size()));

	/*
	 * The most constrained products first: fewer candidates, fewer branches
	 * near the root.  A product's candidates stay cheapest first, equal
	 * costs by store number: kept is by (units, store id), and a quantity
	 * of at least 1 keeps that order.
	 */
	std::stable_sort(products.begin(), products.end(), [](const CartScratch::Product &a, const CartScratch::Product &b) {
		return a.end - a.first < b.end - b.first;
	});
	for (const CartScratch::Product &p : products)
	{
		for (size_t i = p.first; i < p.end; ++i)
		{
			piece.candidate_store.push_back(candidates[i].number);
			piece.candidate_cost.push_back(candidates[i].cost);
			piece.candidate_row.push_back(candidates[i].row);
		}
		piece.product_candidates.push_back(static_cast<int64_t>(piece.candidate_cost.size()));
		piece.product_rank.push_back(p.rank);
		piece.product_demand.push_back(p.demand);
	}
	piece.cart_products.push_back(static_cast<int64_t>(piece.product_rank.size()));
}

/*
 * Carts [begin, end) of a, searched on the calling thread: each cart's
 * choices at choice[i - a.cart_products[0]] for its products i.  False
 * when `cancelled` stopped it.
 */
bool search_on_thread(const CartArrays &a, int64_t begin, int64_t end, int32_t *choice, ExecContext &ctx,
					  const std::atomic<bool> &cancelled)
{
	std::vector<int64_t> subtotal, potential;
	std::vector<int32_t> uses;
	carts::CartSearchState state;
	for (int64_t c = begin; c < end; ++c)
	{
		size_t n_stores = static_cast<size_t>(a.cart_stores[c + 1] - a.cart_stores[c]);
		subtotal.resize(std::max<size_t>(n_stores, 1));
		potential.resize(subtotal.size());
		uses.resize(subtotal.size());
		carts::CartStoreScratch scratch{subtotal.data(), potential.data(), uses.data()};
		carts::cart_search_start(a, c, state, scratch);
		while (!carts::cart_search_run(a, c, state, scratch, kStepsBetweenChecks))
			if (cancelled)
				return false;
		for (int32_t d = 0; d < state.n_products; ++d)
			choice[a.cart_products[c] - a.cart_products[0] + d] = state.best_choice[d];
		ctx.progress.add(1);
	}
	return true;
}

/* Every cart of every piece, on the CPU's threads. */
void solve_on_cpu(std::vector<CartProblems> &pieces, ExecContext &ctx)
{
	Stopwatch clock;
	parallel_for(pieces.size(), ctx, [&](size_t p, size_t, const std::atomic<bool> &cancelled) {
		CartProblems &piece = pieces[p];
		piece.choice.assign(piece.product_rank.size(), 0);
		search_on_thread(piece.arrays(), 0, static_cast<int64_t>(piece.carts()), piece.choice.data(), ctx, cancelled);
	});
	ctx.times.compute_ms += clock.elapsed_ms();
}

/* Every cart of a, on the CPU's threads: per product of a, its choice. */
std::vector<int32_t> solve_on_cpu(const CartArrays &a, ExecContext &ctx)
{
	Stopwatch clock;
	std::vector<int32_t> choice(static_cast<size_t>(a.cart_products[a.n_carts] - a.cart_products[0]), 0);
	std::vector<size_t> bounds = split_by_cost(static_cast<size_t>(a.n_carts), kLinesPerPiece, [&](size_t c) {
		return static_cast<double>(a.cart_products[c + 1] - a.cart_products[c]);
	});
	parallel_for(bounds.size() - 1, ctx, [&](size_t r, size_t, const std::atomic<bool> &cancelled) {
		search_on_thread(a, static_cast<int64_t>(bounds[r]), static_cast<int64_t>(bounds[r + 1]), choice.data(), ctx,
						 cancelled);
	});
	ctx.times.compute_ms += clock.elapsed_ms();
	return choice;
}

/* The lengths of the search arrays of pieces end to end (the totals), or where one piece's begin among them. */
struct Place
{
	size_t carts = 0, products = 0, candidates = 0, stores = 0;
};

/* Where each piece's arrays begin among all pieces' end to end; the last place is the totals. */
std::vector<Place> places_of(const std::vector<CartProblems> &pieces)
{
	std::vector<Place> places(pieces.size() + 1);
	for (size_t p = 0; p < pieces.size(); ++p)
		places[p + 1] = {places[p].carts + pieces[p].carts(), places[p].products + pieces[p].product_rank.size(),
						 places[p].candidates + pieces[p].candidate_cost.size(),
						 places[p].stores + pieces[p].store_fee.size()};
	return places;
}

/*
 * The search arrays of every piece end to end (CartArrays' layout): where
 * the GPU reads them, or the GPU service (written straight into the
 * call's shared memory).
 */
struct JoinedArrays
{
	int64_t *cart_products = nullptr, *product_candidates = nullptr, *candidate_cost = nullptr,
			*cart_stores = nullptr, *store_fee = nullptr, *store_free_from = nullptr, *store_share = nullptr;
	int32_t *product_rank = nullptr, *candidate_store = nullptr;

	CartArrays arrays(size_t carts) const
	{
		CartArrays a;
		a.n_carts = static_cast<int64_t>(carts);
		a.cart_products = cart_products;
		a.product_candidates = product_candidates;
		a.product_rank = product_rank;
		a.candidate_store = candidate_store;
		a.candidate_cost = candidate_cost;
		a.cart_stores = cart_stores;
		a.store_fee = store_fee;
		a.store_free_from = store_free_from;
		a.store_share = store_share;
		return a;
	}
};

/* visit(array, length) for each array of `arrays` at the totals `total`, in the order the service's input has them. */
template <typename Visit> void each_joined_array(JoinedArrays &arrays, const Place &total, Visit visit)
{
	visit(arrays.cart_products, total.carts + 1);
	visit(arrays.product_candidates, total.products + 1);
	visit(arrays.product_rank, total.products);
	visit(arrays.candidate_store, total.candidates);
	visit(arrays.candidate_cost, total.candidates);
	visit(arrays.cart_stores, total.carts + 1);
	visit(arrays.store_fee, total.stores);
	visit(arrays.store_free_from, total.stores);
	visit(arrays.store_share, total.stores);
}

/* The bytes of the search arrays at the totals `total`: what travels to a GPU. */
int64_t search_bytes(const Place &total)
{
	JoinedArrays none;
	int64_t bytes = 0;
	each_joined_array(none, total, [&](auto *array, size_t n) { bytes += static_cast<int64_t>(n * sizeof *array); });
	return bytes;
}

/*
 * The pieces' search arrays end to end into `to`, on every core: each
 * piece's place known from the sizes before (places_of), offsets within
 * a piece shifted by its place.  `to` is memory that nothing wrote before
 * (on the H100 host, appending the arrays one value at a time took
 * 640-840 ms of a GPU call whose kernels took 136, and zeroing the 390 MB
 * of 100,000 carts on the calling thread first about 200 ms): the copying
 * threads are the first to touch its pages.
 */
void concatenate(const std::vector<CartProblems> &pieces, const std::vector<Place> &places, const JoinedArrays &to,
				 ExecContext &ctx)
{
	to.cart_products[0] = to.cart_stores[0] = to.product_candidates[0] = 0;
	parallel_for(pieces.size(), ctx, [&](size_t p, size_t, const std::atomic<bool> &) {
		const CartProblems &piece = pieces[p];
		const Place &at = places[p];
		/* offsets: entry 0 of each piece is 0, the previous piece's end */
		auto shifted = [](const std::vector<int64_t> &from, int64_t *out, size_t place, size_t shift) {
			for (size_t i = 1; i < from.size(); ++i)
				out[place + i] = from[i] + static_cast<int64_t>(shift);
		};
		shifted(piece.cart_products, to.cart_products, at.carts, at.products);
		shifted(piece.cart_stores, to.cart_stores, at.carts, at.stores);
		shifted(piece.product_candidates, to.product_candidates, at.products, at.candidates);
		auto copied = [](const auto &from, auto *out, size_t place) { std::copy(from.begin(), from.end(), out + place); };
		copied(piece.product_rank, to.product_rank, at.products);
		copied(piece.candidate_store, to.candidate_store, at.candidates);
		copied(piece.candidate_cost, to.candidate_cost, at.candidates);
		copied(piece.store_fee, to.store_fee, at.stores);
		copied(piece.store_free_from, to.store_free_from, at.stores);
		copied(piece.store_share, to.store_share, at.stores);
	});
}

/* Every piece's choices from those of all their products end to end. */
void take_choices(std::vector<CartProblems> &pieces, const std::vector<int32_t> &choice)
{
	size_t at = 0;
	for (CartProblems &piece : pieces)
	{
		piece.choice.assign(choice.begin() + at, choice.begin() + at + piece.product_rank.size());
		at += piece.product_rank.size();
	}
}

/*
 * Every cart of a, on the GPU, but those whose searches take more than
 * kGpuStepsPerCart steps: those on the CPU's threads, from their start;
 * per product of a, its choice.
 */
std::vector<int32_t> solve_on_gpu(const CartArrays &a, ExecContext &ctx, GpuCartSearch *figures = nullptr)
{
	PhaseTimes before = ctx.times;
	gpu::CartSolution solution = gpu::solve_carts(a, kGpuStepsPerCart, ctx);
	Stopwatch clock;
	parallel_for(solution.left.size(), ctx, [&](size_t i, size_t, const std::atomic<bool> &cancelled) {
		int64_t c = solution.left[i];
		search_on_thread(a, c, c + 1, solution.choice.data(), ctx, cancelled);
	});
	double left_ms = clock.elapsed_ms();
	if (figures)
		*figures = {ctx.times.transfer_ms - before.transfer_ms, ctx.times.compute_ms - before.compute_ms,
					solution.left.size(), left_ms};
	ctx.times.compute_ms += left_ms;
	return std::move(solution.choice);
}

/* Every cart of every piece, on the GPU, in one batch. */
void solve_on_gpu(std::vector<CartProblems> &pieces, ExecContext &ctx, GpuCartSearch *figures)
{
	Stopwatch clock;
	std::vector<Place> places = places_of(pieces);
	const Place &total = places.back();
	JoinedArrays joined;
	std::vector<std::unique_ptr<uint8_t[]>> owned;
	each_joined_array(joined, total, [&](auto *&array, size_t n) {
		/* default-initialised: not written before concatenate */
		owned.emplace_back(new uint8_t[std::max<size_t>(n, 1) * sizeof *array]);
		array = reinterpret_cast<std::remove_reference_t<decltype(array)>>(owned.back().get());
	});
	concatenate(pieces, places, joined, ctx);
	ctx.times.compute_ms += clock.elapsed_ms();
	take_choices(pieces, solve_on_gpu(joined.arrays(total.carts), ctx, figures));
}

/*
 * The search of every piece in the GPU service: the pieces' search arrays
 * are written end to end straight into the call's shared memory, on every
 * core, where the service searches them in place; the choices come back.
 * The service runs the same search (search_carts) on its device.
 */
void solve_in_service(std::vector<CartProblems> &pieces, ExecContext &ctx)
{
	std::vector<Place> places = places_of(pieces);
	const Place &total = places.back();
	std::vector<int32_t> choice = service::call_for_vector<int32_t>(
		service::Function::CartSearch,
		search_bytes(total) + static_cast<int64_t>(total.products * sizeof(int32_t)),
		[&](ByteWriter &out) {
			ChunkPlacer *placer = out.chunk_placer();
			if (!placer)
				throw Error(sqlstate::internal_error, "optimize_carts: a GPU service call without shared memory");
			for (size_t count : {total.carts, total.products, total.candidates, total.stores})
				out.put<uint64_t>(count);
			JoinedArrays room;
			each_joined_array(room, total, [&](auto *&array, size_t n) {
				uint8_t *at = nullptr;
				out.put<uint64_t>(placer->room(n * sizeof *array, &at));
				array = reinterpret_cast<std::remove_reference_t<decltype(array)>>(at);
			});
			/* the counting pass has no room yet */
			if (room.cart_products)
				concatenate(pieces, places, room, ctx);
		},
		ctx, service::split_parts(total.carts, ctx));
	if (choice.size() != total.products)
		throw Error(sqlstate::internal_error, "optimize_carts: a malformed answer of the GPU service");
	take_choices(pieces, choice);
}

/*
 * The searches of every piece, on the device the context picks (the
 * service's where it has one, split by cart over its devices).
 */
void search_carts(std::vector<CartProblems> &pieces, ExecContext &ctx, GpuCartSearch *figures)
{
	Place total = places_of(pieces).back();
	/* the CPU counts each cart it searched */
	ctx.progress.begin(ProgressPhase::Computing, "carts", total.carts);
	dispatch(
		ctx, "optimize_carts",
		WorkShape{rates::kCarts, static_cast<double>(total.carts), static_cast<double>(search_bytes(total)),
				  ctx.service != nullptr},
		[&] { ctx.service ? solve_in_service(pieces, ctx) : solve_on_gpu(pieces, ctx, figures); },
		[&] { solve_on_cpu(pieces, ctx); });
}

/* The service's side: the searches of carts in place, on the device its context picks; per product, its choice. */
std::vector<int32_t> search_carts(const CartArrays &a, ExecContext &ctx)
{
	Place total{static_cast<size_t>(a.n_carts), static_cast<size_t>(a.cart_products[a.n_carts] - a.cart_products[0]),
				static_cast<size_t>(a.product_candidates[a.cart_products[a.n_carts]] -
									a.product_candidates[a.cart_products[0]]),
				static_cast<size_t>(a.cart_stores[a.n_carts] - a.cart_stores[0])};
	ctx.progress.begin(ProgressPhase::Computing, "carts", total.carts);
	return dispatch(
		ctx, "optimize_carts",
		WorkShape{rates::kCarts, static_cast<double>(total.carts), static_cast<double>(search_bytes(total)), false},
		[&] { return solve_on_gpu(a, ctx); }, [&] { return solve_on_cpu(a, ctx); });
}

/*
 * Whether cart c's part of a, of the lengths total says, is of the layout
 * the search indexes by (CartArrays), within its limits: its offsets
 * within their arrays and never down, its products' ranks a permutation,
 * their candidates' stores the cart's.  Each offset is checked before it
 * is followed, so that no cart's check reads outside the arrays, whatever
 * the other carts hold.
 */
bool is_search_problem(const CartArrays &a, const Place &total, int64_t c)
{
	int64_t first = a.cart_products[c], end = a.cart_products[c + 1];
	int64_t first_store = a.cart_stores[c], end_store = a.cart_stores[c + 1];
	if (first < 0 || end < first || end > static_cast<int64_t>(total.products) ||
		end - first > carts::kMaxCartProducts || first_store < 0 || end_store < first_store ||
		end_store > static_cast<int64_t>(total.stores))
		return false;
	int64_t cart_stores = end_store - first_store;
	uint64_t ranks = 0;
	for (int64_t p = first; p < end; ++p)
	{
		int32_t rank = a.product_rank[p];
		if (rank < 0 || rank >= end - first || a.product_candidates[p] < 0 ||
			a.product_candidates[p + 1] < a.product_candidates[p] ||
			a.product_candidates[p + 1] > static_cast<int64_t>(total.candidates))
			return false;
		ranks |= uint64_t(1) << rank;
		for (int64_t j = a.product_candidates[p]; j < a.product_candidates[p + 1]; ++j)
			if (a.candidate_store[j] < 0 || a.candidate_store[j] >= cart_stores)
				return false;
	}
	return ranks == (uint64_t(1) << (end - first)) - 1;
}

/*
 * Whether a's arrays, of the lengths total says, agree with themselves:
 * every offset array from 0 to its end, each cart's part checked on every
 * core.
 */
bool are_search_arrays(const CartArrays &a, const Place &total, ExecContext &ctx)
{
	size_t carts = total.carts;
	if (a.cart_products[0] != 0 || a.cart_products[carts] != static_cast<int64_t>(total.products) ||
		a.cart_stores[0] != 0 || a.cart_stores[carts] != static_cast<int64_t>(total.stores) ||
		a.product_candidates[0] != 0 || a.product_candidates[total.products] != static_cast<int64_t>(total.candidates))
		return false;
	std::atomic<bool> agree{true};
	constexpr size_t kCartsPerCheck = size_t(1) << 12;
	for_each_in_blocks(carts, kCartsPerCheck, ctx, [&](size_t, size_t, size_t c) {
		if (!is_search_problem(a, total, static_cast<int64_t>(c)))
			agree.store(false, std::memory_order_relaxed);
	});
	return agree;
}

/*
 * The search arrays a call of the service brought (solve_in_service),
 * where the client wrote them in the call's shared memory, checked once
 * for all its parts.
 */
std::unique_ptr<CartArrays> read_search_arrays(ByteReader &input, ExecContext &ctx)
{
	const ChunkResolver *resolver = input.resolver();
	if (!resolver)
		throw Error(sqlstate::internal_error, "optimize_carts: carts for the GPU service outside its shared memory");
	Place total;
	for (size_t *count : {&total.carts, &total.products, &total.candidates, &total.stores})
	{
		*count = input.get<uint64_t>();
		if (*count > (size_t(1) << 48))
			throw Error(sqlstate::internal_error, "optimize_carts: the GPU service got carts past any size");
	}
	JoinedArrays at;
	each_joined_array(at, total, [&](auto *&array, size_t n) {
		void *address = resolver->address(input.get<uint64_t>(), n * sizeof *array);
		array = static_cast<std::remove_reference_t<decltype(array)>>(address);
	});
	auto arrays = std::make_unique<CartArrays>(at.arrays(total.carts));
	if (!input.at_end() || !are_search_arrays(*arrays, total, ctx))
		throw Error(sqlstate::internal_error, "optimize_carts: the GPU service got carts that disagree with themselves");
	return arrays;
}

/*
 * The service's side of solve_in_service: the searches of the part's share
 * of the carts on its device, where the client wrote them; their choices
 * end to end.  A share is a view of the arrays: the search indexes a
 * cart's products, candidates and stores by the offsets the cart holds.
 */
std::vector<uint8_t> carts_in_service(ByteReader &input, const service::Part &part, ExecContext &ctx)
{
	service::CallState own;
	const CartArrays &all =
		(part.call ? *part.call : own).once<CartArrays>([&] { return read_search_arrays(input, ctx); });
	size_t carts = static_cast<size_t>(all.n_carts), first = part.begin(carts);
	CartArrays share = all;
	share.n_carts = static_cast<int64_t>(part.end(carts) - first);
	share.cart_products += first;
	share.cart_stores += first;
	return service::vector_result(search_carts(share, ctx));
}

const bool carts_registered =
	(service::register_handler(service::Function::CartSearch, carts_in_service, true), true);

/* Adds a price x quantity or a fee of `display_scale` decimals to an amount being summed. */
void add_to(__int128 &sum, int &scale, __int128 units, int display_scale)
{
	sum += units;
	scale = std::max(scale, display_scale);
}

Amount amount_of(__int128 units, int display_scale, const CallData &call, int64_t cart_id, const char *what)
{
	if (units > INT64_MAX || units < INT64_MIN + 1)
		throw Error(sqlstate::numeric_value_out_of_range,
					"cart " + shown_id(call.keys, "cart_id", cart_id) + ": its " + what + " is too large to hold exactly");
	return {static_cast<int64_t>(units), display_scale};
}

/*
 * The shipping of stores given (store, subtotal) pairs sorted by store:
 * added to sum (and the paid fees' scales to scale).
 */
void add_shipping(const ShippingTable &shipping, const std::vector<std::pair<int64_t, __int128>> &by_store,
				  __int128 &sum, int &scale, int32_t *stores_used)
{
	int32_t used = 0;
	for (size_t i = 0; i < by_store.size();)
	{
		int64_t store = by_store[i].first;
		__int128 subtotal = 0;
		for (; i < by_store.size() && by_store[i].first == store; ++i)
			subtotal += by_store[i].second;
		++used;
		const StoreShipping *ship = shipping.find(store);
		/* a paid fee of 0.00 still shows its decimals, as SQL's sum would */
		if (ship && !(ship->free_from != carts::kNeverFree && subtotal >= ship->free_from))
			add_to(sum, scale, ship->fee, ship->fee_display_scale);
	}
	if (stores_used)
		*stores_used = used;
}

/* Cart g's answer from the choices of its piece. */
void answer_cart(const CallData &call, size_t g, const CartProblems &piece, CartsAnswer &answer)
{
	const CartGroup &cart = call.carts[g];
	const NumberColumn &price = call.offers.price;
	CartAnswer &out = answer.carts[g];
	size_t first_line = call.demands[cart.first_demand].first;
	out.cart_id = call.lines.cart[call.order[first_line]];
	out.first_line = first_line;
	out.end_line = call.demands[cart.end_demand - 1].end;
	out.complete = true;

	/* the optimum: every demand's chosen row, then the shipping of the stores used */
	for (size_t d = cart.first_demand; d < cart.end_demand; ++d)
		for (size_t l = call.demands[d].first; l < call.demands[d].end; ++l)
			answer.lines[l] = {call.order[l], -1};
	__int128 items = 0;
	int items_scale = 0;
	std::vector<std::pair<int64_t, __int128>> by_store;
	size_t first_product = static_cast<size_t>(piece.cart_products[g - piece.first_cart]);
	size_t end_product = static_cast<size_t>(piece.cart_products[g - piece.first_cart + 1]);
	for (size_t p = first_product; p < end_product; ++p)
	{
		const Demand &demand = call.demands[piece.product_demand[p]];
		int64_t j = piece.product_candidates[p] + piece.choice[p];
		uint32_t row = piece.candidate_row[j];
		for (size_t l = demand.first; l < demand.end; ++l)
			answer.lines[l].offer_row = row;
		add_to(items, items_scale, piece.candidate_cost[j], price.display_scale(row));
		by_store.push_back({call.offers.store[row], piece.candidate_cost[j]});
	}
	for (size_t d = cart.first_demand; d < cart.end_demand; ++d)
		if (call.demands[d].code < 0)
			out.complete = false;
	std::sort(by_store.begin(), by_store.end());
	__int128 shipping = 0;
	int shipping_scale = 0;
	add_shipping(call.shipping, by_store, shipping, shipping_scale, &out.stores_used);
	out.shipping = amount_of(shipping, shipping_scale, call, out.cart_id, "shipping");
	out.total = amount_of(items + shipping, std::max(items_scale, shipping_scale), call, out.cart_id, "total");

	/* the current stores: every line's own, when each offers the line's product */
	out.has_current = true;
	by_store.clear();
	__int128 current = 0;
	int current_scale = 0;
	for (size_t l = out.first_line; l < out.end_line && out.has_current; ++l)
	{
		size_t line = call.order[l];
		int64_t store = call.lines.store[line];
		int32_t code = call.offers.product.find(call.lines.product[line]);
		int64_t row = store == kNoCurrentStore || code < 0 ? -1 : call.products.best_row_at(call.offers, code, store);
		if (row < 0)
		{
			out.has_current = false;
			break;
		}
		__int128 unit = 0;
		units_of(price, static_cast<size_t>(row), call.scale, &unit); /* finite: checked with the candidates */
		__int128 cost = unit * call.lines.quantity[line];
		add_to(current, current_scale, cost, price.display_scale(static_cast<size_t>(row)));
		by_store.push_back({store, cost});
	}
	if (out.has_current)
	{
		std::sort(by_store.begin(), by_store.end());
		add_shipping(call.shipping, by_store, current, current_scale, nullptr);
		out.current_total = amount_of(current, current_scale, call, out.cart_id, "current total");
	}
}

} // namespace

CartsAnswer optimize_carts(const CartLines &lines, const Offers &offers, const Shipping &shipping,
						   ExecContext &ctx)
{
	check_quantities(lines, ctx.keys.get());
	require_exact(offers.price, 0);
	require_exact(shipping.fee, 1);
	require_exact(shipping.free_from, 2);
	check_offer_count(offers.product.size());

	Stopwatch clock;
	CartsAnswer answer;
	int scale = std::max({offers.price.scale(), shipping.fee.scale(), shipping.free_from.scale()});
	answer.scale = scale;
	ShippingTable shipping_table = read_shipping(shipping, scale, ctx.keys.get());

	/*
	 * Lines by (cart, product, quantity, input order): carts, and demands
	 * within them.  Sorted as keys side by side, on every core, so that the
	 * comparisons and the walk after stay in cache, not in the columns'
	 * chunks; each key's product code and current store looked up at once.
	 */
	struct LineKey
	{
		int64_t cart, product, quantity;
		size_t line;
		bool operator<(const LineKey &o) const
		{
			return std::tie(cart, product, quantity, line) < std::tie(o.cart, o.product, o.quantity, o.line);
		}
	};
	size_t n_lines = lines.cart.size();
	/* the search problems built from the lines, counted as each cart's are */
	ctx.progress.begin(ProgressPhase::Indexing, "lines", n_lines);
	std::vector<LineKey> keys(n_lines);
	constexpr size_t kLinesPerBlock = size_t(1) << 16;
	auto each_line = [&](auto body) {
		for_each_in_blocks(n_lines, kLinesPerBlock, ctx, [&](size_t, size_t, size_t i) { body(i); });
	};
	each_line([&](size_t l) { keys[l] = {lines.cart[l], lines.product[l], lines.quantity[l], l}; });
	parallel_sort(keys, ctx, std::less<LineKey>());
	ctx.interrupt_point(Phase::Compute);
	std::vector<size_t> order(n_lines);
	std::vector<int32_t> code_at(n_lines);
	std::vector<uint8_t> current_at(n_lines);
	each_line([&](size_t i) {
		order[i] = keys[i].line;
		code_at[i] = offers.product.find(keys[i].product);
		current_at[i] = lines.store[keys[i].line] != kNoCurrentStore;
	});
	ctx.interrupt_point(Phase::Compute);

	std::vector<Demand> demands;
	std::vector<CartGroup> cart_groups;
	std::vector<uint8_t> needed(offers.product.distinct(), 0);
	for (size_t i = 0; i < n_lines;)
	{
		int64_t cart_id = keys[i].cart, product_id = keys[i].product;
		if (i == 0 || keys[i - 1].cart != cart_id)
			cart_groups.push_back({demands.size(), demands.size()});
		Demand demand{i, i, code_at[i], 0};
		__int128 quantity = 0;
		bool current = false;
		for (; i < n_lines && keys[i].cart == cart_id && keys[i].product == product_id; ++i)
		{
			quantity += keys[i].quantity;
			current |= current_at[i] != 0;
		}
		demand.end = i;
		if (quantity > INT64_MAX)
			throw Error(sqlstate::numeric_value_out_of_range,
						"cart " + shown_id(ctx.keys.get(), "cart_id", cart_id) + ": the quantities of product " +
							shown_id(ctx.keys.get(), "product_id", product_id) + " add up past bigint");
		demand.quantity = static_cast<int64_t>(quantity);
		if (demand.code >= 0)
			needed[demand.code] |= current ? kNeeded | kNeededByStore : kNeeded;
		demands.push_back(demand);
		cart_groups.back().end_demand = demands.size();
	}
	keys = {};
	ProductOffers products = product_offers(offers, std::move(needed), scale, shipping_table, ctx);
	CallData call{lines, offers, shipping_table, products, order, demands, cart_groups, scale, ctx.keys.get()};

	/* the search problems, in pieces of about kLinesPerPiece lines, built on every core */
	std::vector<size_t> bounds = split_by_cost(cart_groups.size(), kLinesPerPiece, [&](size_t g) {
		return static_cast<double>(demands[cart_groups[g].end_demand - 1].end - demands[cart_groups[g].first_demand].first);
	});
	std::vector<CartProblems> pieces(bounds.size() - 1);
	parallel_for(pieces.size(), ctx, [&](size_t p, size_t, const std::atomic<bool> &cancelled) {
		pieces[p].first_cart = bounds[p];
		CartScratch scratch;
		for (size_t g = bounds[p]; g < bounds[p + 1] && !cancelled; ++g)
		{
			add_cart(call, g, pieces[p], scratch);
			ctx.progress.add(demands[cart_groups[g].end_demand - 1].end - demands[cart_groups[g].first_demand].first);
		}
	});
	ctx.times.compute_ms += clock.elapsed_ms();

	Stopwatch search_clock;
	search_carts(pieces, ctx, &answer.gpu_search);
	answer.search_ms = search_clock.elapsed_ms();

	Stopwatch answer_clock;
	answer.carts.resize(cart_groups.size());
	answer.lines.resize(n_lines);
	parallel_for(pieces.size(), ctx, [&](size_t p, size_t, const std::atomic<bool> &cancelled) {
		const CartProblems &piece = pieces[p];
		for (size_t g = bounds[p]; g < bounds[p + 1] && !cancelled; ++g)
			answer_cart(call, g, piece, answer);
	});
	ctx.times.compute_ms += answer_clock.elapsed_ms();
	return answer;
}

} // namespace gpurec
