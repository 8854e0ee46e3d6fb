/*
 * carts.hpp: optimize_carts, the cheapest whole cart: every cart's lines
 * assigned to stores so that items plus the shipping of every store used
 * cost the least (the search: kernels/api/cart_search.hpp).
 */
#pragma once

#include <cstdint>
#include <vector>

#include "../kernels/api/cart_kernels.hpp"
#include "device.hpp"
#include "marketplace.hpp"
#include "number_column.hpp"

namespace gpurec {

/*
 * The arrays a CartArrays points into, for carts that are searched: the
 * engine fills them per piece of carts, and a test fills them by hand.
 */
struct CartArrayVectors
{
	std::vector<int64_t> cart_products{0};
	std::vector<int64_t> product_candidates{0};
	std::vector<int32_t> product_rank;
	std::vector<int32_t> candidate_store;
	std::vector<int64_t> candidate_cost;
	std::vector<int64_t> cart_stores{0};
	std::vector<int64_t> store_fee;
	std::vector<int64_t> store_free_from;
	std::vector<int64_t> store_share;

	size_t carts() const { return cart_products.size() - 1; }

	carts::CartArrays arrays() const
	{
		carts::CartArrays a;
		a.n_carts = static_cast<int64_t>(carts());
		a.cart_products = cart_products.data();
		a.product_candidates = product_candidates.data();
		a.product_rank = product_rank.data();
		a.candidate_store = candidate_store.data();
		a.candidate_cost = candidate_cost.data();
		a.cart_stores = cart_stores.data();
		a.store_fee = store_fee.data();
		a.store_free_from = store_free_from.data();
		a.store_share = store_share.data();
		return a;
	}
};

/* A cart line without a current store holds this store id (the reader's stand-in for NULL). */
constexpr int64_t kNoCurrentStore = INT64_MIN;

/* The shipping of a call: a fee per store, free from a subtotal (kNeverFree's stand-in when NULL). */
struct Shipping
{
	const Int64Column &store;
	const NumberColumn &fee;
	const NumberColumn &free_from;
};

/*
 * An amount as an integer at the call's common scale (CartsAnswer::scale),
 * and the display scale SQL would give it: the most decimals among the
 * values summed into it (0 when none).
 */
struct Amount
{
	int64_t units = 0;
	int display_scale = 0;
};

/* One cart's answer; its lines are CartsAnswer::lines[first_line, end_line). */
struct CartAnswer
{
	int64_t cart_id;
	size_t first_line, end_line;
	Amount total;
	Amount shipping;
	int32_t stores_used;
	bool complete;		/* every product is offered by some store */
	bool has_current;	/* every line's current store offers its product */
	Amount current_total;
};

/* One input line: the offer row chosen for its product, or -1 when nobody offers it. */
struct CartAnswerLine
{
	size_t line;
	int64_t offer_row;
};

/* A GPU's searches of a call: its launch, and the carts it left to the CPU (kernels/carts.cu). */
struct GpuCartSearch
{
	double copy_ms = 0;	  /* the search arrays to the GPU, the choices back */
	double kernel_ms = 0; /* every cart's search, up to its bound of steps */
	size_t carts_left = 0;
	double left_ms = 0; /* those carts' searches on the CPU's threads */
};

struct CartsAnswer
{
	int scale = 0; /* of every Amount */
	double search_ms = 0; /* the searches alone, on whichever device (for benchmarks) */
	/* where the searches' time went on this process's GPU (for benchmarks; zero otherwise) */
	GpuCartSearch gpu_search;
	std::vector<CartAnswer> carts;		/* by cart_id */
	std::vector<CartAnswerLine> lines;	/* by cart_id, product_id, quantity, then input order */
};

/*
 * The cheapest assignment of every cart (see README, optimize_carts):
 * exact, on the GPU or on every core by the context's mode, the same answer
 * either way.  Errors: quantity < 1, a fee < 0 or not finite, a price that
 * is not finite (the least product, then store), a store twice in shipping
 * (22023 / 21000); a price or fee column of a floating-point type (42804);
 * a cart of more than kMaxCartProducts offered products (54000); an amount
 * past the exact range (22003).
 */
CartsAnswer optimize_carts(const CartLines &lines, const Offers &offers, const Shipping &shipping,
						   ExecContext &ctx);

} // namespace gpurec
