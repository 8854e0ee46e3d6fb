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
#include <limits>
#include <tuple>
#include <type_traits>

#include "cart_candidates.hpp"
#include "cpu_parallel.hpp"
#include "gpu_service.hpp"

namespace gpurec {

namespace {

using carts::CartArrays;
using carts::kMaxCartProducts;
using carts::kMaxUnits;

/* Cart lines per piece of work of the CPU's threads (and of the GPU's batches' building). */
constexpr double kLinesPerPiece = 4096;
/* Search steps of one cart between checks for a cancel on the CPU. */
constexpr int64_t kStepsBetweenChecks = int64_t(1) << 16;

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
							"cart " + std::to_string(cart_id) + ": the cost of product " + std::to_string(product_id) +
								" at store " + std::to_string(o.store) + " is too large to sum exactly",
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
					"cart " + std::to_string(cart_id) + " has " + std::to_string(products.size()) +
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

/* Every cart of every piece, on the CPU's threads. */
void solve_on_cpu(std::vector<CartProblems> &pieces, ExecContext &ctx)
{
	Stopwatch clock;
	parallel_for(pieces.size(), ctx, [&](size_t p, size_t, const std::atomic<bool> &cancelled) {
		CartProblems &piece = pieces[p];
		CartArrays a = piece.arrays();
		piece.choice.assign(piece.product_rank.size(), 0);
		std::vector<int64_t> subtotal, potential;
		std::vector<int32_t> uses;
		carts::CartSearchState state;
		for (int64_t c = 0; c < a.n_carts; ++c)
		{
			size_t n_stores = static_cast<size_t>(a.cart_stores[c + 1] - a.cart_stores[c]);
			subtotal.resize(std::max<size_t>(n_stores, 1));
			potential.resize(subtotal.size());
			uses.resize(subtotal.size());
			carts::CartStoreScratch scratch{subtotal.data(), potential.data(), uses.data()};
			carts::cart_search_start(a, c, state, scratch);
			while (!carts::cart_search_run(a, c, state, scratch, kStepsBetweenChecks))
				if (cancelled)
					return;
			for (int32_t d = 0; d < state.n_products; ++d)
				piece.choice[a.cart_products[c] + d] = state.best_choice[d];
			ctx.progress.add(1);
		}
	});
	ctx.times.compute_ms += clock.elapsed_ms();
}

/*
 * The pieces' search arrays end to end, for the GPU.  Copied on every core
 * (on the H100 host, appending them one value at a time took 640-840 ms of
 * a GPU call whose kernels took 136), each piece's place known from the
 * sizes before, offsets within a piece shifted by its place; into buffers
 * that nothing writes before the copy, so that the copying threads are the
 * first to touch their pages (zeroing the 390 MB of 100,000 carts on the
 * calling thread first took about 200 ms).
 */
struct ConcatenatedCarts
{
	std::unique_ptr<int64_t[]> cart_products, product_candidates, candidate_cost, cart_stores, store_fee,
		store_free_from, store_share;
	std::unique_ptr<int32_t[]> product_rank, candidate_store;
	carts::CartArrays arrays;
	gpu::CartArraySizes sizes;
};

void concatenate(const std::vector<CartProblems> &pieces, ConcatenatedCarts &all, ExecContext &ctx)
{
	struct Place
	{
		size_t carts = 0, products = 0, candidates = 0, stores = 0;
	};
	std::vector<Place> places(pieces.size() + 1);
	for (size_t p = 0; p < pieces.size(); ++p)
		places[p + 1] = {places[p].carts + pieces[p].carts(), places[p].products + pieces[p].product_rank.size(),
						 places[p].candidates + pieces[p].candidate_cost.size(),
						 places[p].stores + pieces[p].store_fee.size()};
	const Place &total = places.back();
	auto fresh = [](auto &buffer, size_t n) {
		using T = typename std::remove_reference_t<decltype(buffer)>::element_type;
		buffer.reset(new T[std::max<size_t>(n, 1)]); /* default-initialised: not written */
		return buffer.get();
	};
	carts::CartArrays &a = all.arrays;
	a.n_carts = static_cast<int64_t>(total.carts);
	int64_t *cart_products = fresh(all.cart_products, total.carts + 1);
	int64_t *cart_stores = fresh(all.cart_stores, total.carts + 1);
	int64_t *product_candidates = fresh(all.product_candidates, total.products + 1);
	int32_t *product_rank = fresh(all.product_rank, total.products);
	int32_t *candidate_store = fresh(all.candidate_store, total.candidates);
	int64_t *candidate_cost = fresh(all.candidate_cost, total.candidates);
	int64_t *store_fee = fresh(all.store_fee, total.stores);
	int64_t *store_free_from = fresh(all.store_free_from, total.stores);
	int64_t *store_share = fresh(all.store_share, total.stores);
	cart_products[0] = cart_stores[0] = product_candidates[0] = 0;
	parallel_for(pieces.size(), ctx, [&](size_t p, size_t, const std::atomic<bool> &) {
		const CartProblems &piece = pieces[p];
		const Place &at = places[p];
		/* offsets: entry 0 of each piece is 0, the previous piece's end */
		auto shifted = [](const std::vector<int64_t> &from, int64_t *to, size_t place, size_t shift) {
			for (size_t i = 1; i < from.size(); ++i)
				to[place + i] = from[i] + static_cast<int64_t>(shift);
		};
		shifted(piece.cart_products, cart_products, at.carts, at.products);
		shifted(piece.cart_stores, cart_stores, at.carts, at.stores);
		shifted(piece.product_candidates, product_candidates, at.products, at.candidates);
		auto copied = [](const auto &from, auto *to, size_t place) { std::copy(from.begin(), from.end(), to + place); };
		copied(piece.product_rank, product_rank, at.products);
		copied(piece.candidate_store, candidate_store, at.candidates);
		copied(piece.candidate_cost, candidate_cost, at.candidates);
		copied(piece.store_fee, store_fee, at.stores);
		copied(piece.store_free_from, store_free_from, at.stores);
		copied(piece.store_share, store_share, at.stores);
	});
	a.cart_products = cart_products;
	a.cart_stores = cart_stores;
	a.product_candidates = product_candidates;
	a.product_rank = product_rank;
	a.candidate_store = candidate_store;
	a.candidate_cost = candidate_cost;
	a.store_fee = store_fee;
	a.store_free_from = store_free_from;
	a.store_share = store_share;
	all.sizes = {static_cast<int64_t>(total.products), static_cast<int64_t>(total.candidates),
				 static_cast<int64_t>(total.stores)};
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

/* Every cart of every piece, on the GPU, in one batch. */
void solve_on_gpu(std::vector<CartProblems> &pieces, ExecContext &ctx)
{
	Stopwatch clock;
	ConcatenatedCarts all;
	concatenate(pieces, all, ctx);
	ctx.times.compute_ms += clock.elapsed_ms();
	take_choices(pieces, gpu::solve_carts(all.arrays, all.sizes, ctx));
}

/* A piece's search arrays, in the order put_search_arrays writes them. */
template <typename Visit> void each_search_array(CartArrayVectors &arrays, Visit visit)
{
	visit(arrays.cart_products);
	visit(arrays.product_candidates);
	visit(arrays.product_rank);
	visit(arrays.candidate_store);
	visit(arrays.candidate_cost);
	visit(arrays.cart_stores);
	visit(arrays.store_fee);
	visit(arrays.store_free_from);
	visit(arrays.store_share);
}

/* The bytes of every piece's search arrays: what travels to a GPU. */
int64_t search_bytes(std::vector<CartProblems> &pieces)
{
	int64_t bytes = 0;
	for (CartProblems &piece : pieces)
		each_search_array(piece, [&](const auto &array) {
			bytes += static_cast<int64_t>(array.size() * sizeof(array[0]));
		});
	return bytes;
}

size_t carts_in(const std::vector<CartProblems> &pieces)
{
	size_t carts = 0;
	for (const CartProblems &piece : pieces)
		carts += piece.carts();
	return carts;
}

/* part[begin, end) of a vector, as a vector. */
template <typename T> std::vector<T> slice(const std::vector<T> &values, int64_t begin, int64_t end)
{
	return std::vector<T>(values.begin() + begin, values.begin() + end);
}

/* Offsets [begin, end] of a vector, less their first: the offsets of a slice of what they index. */
std::vector<int64_t> rebased(const std::vector<int64_t> &offsets, int64_t begin, int64_t end)
{
	std::vector<int64_t> out = slice(offsets, begin, end + 1);
	for (int64_t &offset : out)
		offset -= offsets[begin];
	return out;
}

/*
 * Carts [first, end) of a piece, searched alone: a cart's products, their
 * candidates and its stores are its own, and their indices within it stay.
 */
CartProblems carts_of(const CartArrayVectors &a, int64_t first, int64_t end)
{
	CartProblems out;
	int64_t products = a.cart_products[first], products_end = a.cart_products[end];
	int64_t stores = a.cart_stores[first], stores_end = a.cart_stores[end];
	int64_t candidates = a.product_candidates[products], candidates_end = a.product_candidates[products_end];
	out.cart_products = rebased(a.cart_products, first, end);
	out.cart_stores = rebased(a.cart_stores, first, end);
	out.product_candidates = rebased(a.product_candidates, products, products_end);
	out.product_rank = slice(a.product_rank, products, products_end);
	out.candidate_store = slice(a.candidate_store, candidates, candidates_end);
	out.candidate_cost = slice(a.candidate_cost, candidates, candidates_end);
	out.store_fee = slice(a.store_fee, stores, stores_end);
	out.store_free_from = slice(a.store_free_from, stores, stores_end);
	out.store_share = slice(a.store_share, stores, stores_end);
	return out;
}

/*
 * The search of every piece in the GPU service: their search arrays go,
 * the choices come back.  The service runs the same search (search_carts)
 * on its device.
 */
void solve_in_service(std::vector<CartProblems> &pieces, ExecContext &ctx)
{
	int64_t products = 0;
	for (CartProblems &piece : pieces)
		products += static_cast<int64_t>(piece.product_rank.size());
	std::vector<int32_t> choice = service::call_for_vector<int32_t>(
		service::Function::CartSearch, search_bytes(pieces) + products * static_cast<int64_t>(sizeof(int32_t)),
		[&](ByteWriter &out) {
			out.put<uint64_t>(pieces.size());
			for (CartProblems &piece : pieces)
				each_search_array(piece, [&](const auto &array) { put_vector(out, array); });
		},
		ctx, service::split_parts(carts_in(pieces), ctx));
	if (static_cast<int64_t>(choice.size()) != products)
		throw Error(sqlstate::internal_error, "optimize_carts: a malformed answer of the GPU service");
	take_choices(pieces, choice);
}

/*
 * The searches of every piece, on the device the context picks (the
 * service's where it has one, split by cart over its devices).
 */
void search_carts(std::vector<CartProblems> &pieces, ExecContext &ctx)
{
	size_t carts = carts_in(pieces);
	/* the CPU counts each cart it searched */
	ctx.progress.begin(ProgressPhase::Computing, "carts", carts);
	dispatch(
		ctx, "optimize_carts",
		WorkShape{rates::kCarts, static_cast<double>(carts), static_cast<double>(search_bytes(pieces)),
				  ctx.service != nullptr},
		[&] { ctx.service ? solve_in_service(pieces, ctx) : solve_on_gpu(pieces, ctx); },
		[&] { solve_on_cpu(pieces, ctx); });
}

/* Whether offsets are those of compressed rows over `items`: from 0, never down, to items. */
bool are_offsets(const std::vector<int64_t> &offsets, size_t items)
{
	if (offsets.empty() || offsets.front() != 0 || offsets.back() != static_cast<int64_t>(items))
		return false;
	for (size_t i = 1; i < offsets.size(); ++i)
		if (offsets[i] < offsets[i - 1])
			return false;
	return true;
}

/* Whether a piece's search arrays are of the layout the search indexes by (CartArrays), within its limits. */
bool is_search_problem(const CartArrayVectors &a)
{
	size_t carts = a.carts(), products = a.product_rank.size(), candidates = a.candidate_cost.size(),
		   stores = a.store_fee.size();
	if (a.cart_products.empty() || !are_offsets(a.cart_products, products) || a.cart_stores.size() != carts + 1 ||
		!are_offsets(a.cart_stores, stores) || a.product_candidates.size() != products + 1 ||
		!are_offsets(a.product_candidates, candidates) || a.candidate_store.size() != candidates ||
		a.store_free_from.size() != stores || a.store_share.size() != stores)
		return false;
	for (size_t c = 0; c < carts; ++c)
	{
		int64_t first = a.cart_products[c], end = a.cart_products[c + 1];
		int64_t cart_stores = a.cart_stores[c + 1] - a.cart_stores[c];
		if (end - first > carts::kMaxCartProducts)
			return false;
		for (int64_t p = first; p < end; ++p)
		{
			if (a.product_rank[p] < 0 || a.product_rank[p] >= end - first)
				return false;
			for (int64_t j = a.product_candidates[p]; j < a.product_candidates[p + 1]; ++j)
				if (a.candidate_store[j] < 0 || a.candidate_store[j] >= cart_stores)
					return false;
		}
	}
	return true;
}

/* The pieces a call of the service brought, read and checked once for all its parts. */
std::unique_ptr<std::vector<CartProblems>> read_cart_pieces(ByteReader &input)
{
	auto pieces = std::make_unique<std::vector<CartProblems>>();
	uint64_t n_pieces = input.get<uint64_t>();
	bool agree = true;
	for (uint64_t p = 0; agree && p < n_pieces; ++p)
	{
		CartProblems &piece = pieces->emplace_back();
		each_search_array(piece, [&](auto &array) {
			array = get_vector<typename std::decay_t<decltype(array)>::value_type>(input);
		});
		agree = is_search_problem(piece);
	}
	if (!agree || !input.at_end())
		throw Error(sqlstate::internal_error, "optimize_carts: the GPU service got carts that disagree with themselves");
	return pieces;
}

/*
 * The service's side of solve_in_service: the searches of the part's share
 * of the carts (counted over the pieces end to end) on its device, their
 * choices end to end.
 */
std::vector<uint8_t> carts_in_service(ByteReader &input, const service::Part &part, ExecContext &ctx)
{
	service::CallState own;
	const std::vector<CartProblems> &all =
		(part.call ? *part.call : own).once<std::vector<CartProblems>>([&] { return read_cart_pieces(input); });
	size_t carts = carts_in(all), first = part.begin(carts), end = part.end(carts), before = 0;
	std::vector<CartProblems> pieces;
	for (const CartProblems &piece : all)
	{
		size_t from = std::max(first, before), to = std::min(end, before + piece.carts());
		if (from < to)
			pieces.push_back(carts_of(piece, static_cast<int64_t>(from - before), static_cast<int64_t>(to - before)));
		before += piece.carts();
	}
	search_carts(pieces, ctx);
	std::vector<int32_t> choice;
	for (const CartProblems &piece : pieces)
		choice.insert(choice.end(), piece.choice.begin(), piece.choice.end());
	return service::vector_result(choice);
}

const bool carts_registered =
	(service::register_handler(service::Function::CartSearch, carts_in_service, true), true);

/* Adds a price x quantity or a fee of `display_scale` decimals to an amount being summed. */
void add_to(__int128 &sum, int &scale, __int128 units, int display_scale)
{
	sum += units;
	scale = std::max(scale, display_scale);
}

Amount amount_of(__int128 units, int display_scale, int64_t cart_id, const char *what)
{
	if (units > INT64_MAX || units < INT64_MIN + 1)
		throw Error(sqlstate::numeric_value_out_of_range,
					"cart " + std::to_string(cart_id) + ": its " + what + " is too large to hold exactly");
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
	out.shipping = amount_of(shipping, shipping_scale, out.cart_id, "shipping");
	out.total = amount_of(items + shipping, std::max(items_scale, shipping_scale), out.cart_id, "total");

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
		out.current_total = amount_of(current, current_scale, out.cart_id, "current total");
	}
}

} // namespace

CartsAnswer optimize_carts(const CartLines &lines, const Offers &offers, const Shipping &shipping,
						   ExecContext &ctx)
{
	check_quantities(lines);
	require_exact(offers.price);
	require_exact(shipping.fee);
	require_exact(shipping.free_from);
	check_offer_count(offers.product.size());

	Stopwatch clock;
	CartsAnswer answer;
	int scale = std::max({offers.price.scale(), shipping.fee.scale(), shipping.free_from.scale()});
	answer.scale = scale;
	ShippingTable shipping_table = read_shipping(shipping, scale);

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
						"cart " + std::to_string(cart_id) + ": the quantities of product " + std::to_string(product_id) +
							" add up past bigint");
		demand.quantity = static_cast<int64_t>(quantity);
		if (demand.code >= 0)
			needed[demand.code] |= current ? kNeeded | kNeededByStore : kNeeded;
		demands.push_back(demand);
		cart_groups.back().end_demand = demands.size();
	}
	keys = {};
	ProductOffers products = product_offers(offers, std::move(needed), scale, shipping_table, ctx);
	CallData call{lines, offers, shipping_table, products, order, demands, cart_groups, scale};

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
	search_carts(pieces, ctx);
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
