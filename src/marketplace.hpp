/*
 * marketplace.hpp: the k cheapest offers per product, and the smart cart.
 */
#pragma once

#include <cstdint>
#include <vector>

#include "../kernels/api/marketplace_kernels.hpp"
#include "columns.hpp"
#include "device.hpp"

namespace gpurec {

/* The offers of a call, as the input layer read them. */
struct Offers
{
	const IdColumn &product;
	const Int64Column &store;
	const NumberColumn &price;
};

/*
 * Per product code p (see IdColumn): its ranked offers are
 * rows[offsets[p] .. offsets[p+1]), cheapest first; equal prices rank the
 * lower store_id first, then the fewer decimals (settle_ties).
 */
struct RankedOffers
{
	std::vector<int64_t> offsets;
	std::vector<uint32_t> rows;
};

/*
 * Copies offers to the GPU while the input layer is still reading them,
 * when the GPU is going to rank them, so that the copy hides behind the
 * reading.  Give on_chunk() to InputTable::on_chunk_complete().
 */
class OfferStreamer
{
  public:
	OfferStreamer(ExecContext &ctx, int k);
	void on_chunk(const Offers &offers);
	gpu::OfferUpload *upload() const { return upload_.get(); }

  private:
	ExecContext &ctx_;
	bool enabled_;
	gpu::OfferUploadPtr upload_;
};

/* At most UINT32_MAX offers: rows are numbered in 32 bits (ERROR 54000). */
void check_offer_count(size_t offers);

RankedOffers cheapest_offers(const Offers &offers, int k, ExecContext &ctx,
							 OfferStreamer *streamer = nullptr);

/*
 * Whether cheapest_offers ranks on the CPU whatever the offers turn out to
 * be (gpurec.device, the build, the CPU's threads): known before they are
 * read, so that parallel workers may rank their own shares.
 */
bool ranks_offers_on_cpu(int k, const ExecContext &ctx);

/* The offers from which cheapest_offers ranks on the GPU under gpurec.device = auto; infinite where ranks_offers_on_cpu. */
double gpu_offers_from(int k, const ExecContext &ctx);

/*
 * Fills the ranks of each tie (offers of one product with an equal price key
 * and store) with its members of fewest decimals first, replacing the GPU's
 * repeated rows too (see marketplace.cpp).  A part of both paths of
 * cheapest_offers, declared here for its unit test.
 */
void settle_ties(const Offers &offers, RankedOffers &ranked, ExecContext &ctx);

/*
 * cheapest_offers over shards (gpurec_shards): each shard ranks its own
 * offers and sends its OffersPart, the rows of its ranking with its count of
 * each product's offers, in a flat form (byte_stream.hpp) that travels as
 * one bytea; the coordinator reads every shard's part into one MergedOffers
 * and ranks those rows again (merge_cheapest_offers).  A product's k
 * cheapest offers of all shards are among the shards' k cheapest, and both
 * rankings follow the same total order (price, store, fewest decimals), so
 * the ranks are those of one server holding every offer, and the shards'
 * counts add up to its n_offers.  Prices keep their type and every digit.
 */
class OffersPart
{
  public:
	/* n_offers: per product code, its count of offers (the offers' own, or a merge's sums) */
	OffersPart(const Offers &offers, const RankedOffers &ranked, const std::vector<int64_t> &n_offers, int k);
	void serialize(ByteWriter &out) const;

  private:
	int k_;
	/* a row per ranked offer; n_offers_ holds the product's count on its first row, 0 on the others */
	Int64Column product_;
	Int64Column n_offers_;
	Int64Column store_;
	NumberColumn price_;
};

class MergedOffers
{
  public:
	/*
	 * Adds one shard's part.  Bytes that are not a part (another version
	 * of gpurec, truncated or foreign): ERROR 22P03; a part ranked for a
	 * smaller k than `k`: 22023; prices of another type than the parts'
	 * before: 42804.  After an error the merge holds an unknown share of
	 * the part, and only serves to fail its call.
	 */
	void append_part(const uint8_t *data, size_t size, int k);

	const Offers &offers() const { return offers_; }
	/* Per product code: the shards' counts of its offers, added up. */
	const std::vector<int64_t> &n_offers() const { return n_offers_; }

  private:
	IdColumn product_;
	Int64Column store_;
	NumberColumn price_;
	Offers offers_{product_, store_, price_};
	std::vector<int64_t> n_offers_;
	/* every part's rows, as they came: product ids, and counts on a product's first row */
	Int64Column product_ids_;
	Int64Column counts_;
	size_t parts_ = 0;
};

/*
 * A share of the offers ranked on the CPU, with ctx's threads, as its
 * OffersPart in flat form: a parallel worker's partial result of
 * cheapest_offers (pg_partials.hpp).
 */
std::vector<uint8_t> cheapest_offers_part(const Offers &offers, int k, ExecContext &ctx);

/* Parts (OffersPart, in flat form) merged into the one part of all their offers, on the CPU with ctx's threads. */
std::vector<uint8_t> merge_offers_parts(const std::vector<std::vector<uint8_t>> &parts, int k, ExecContext &ctx);

/* The k cheapest of every product among the parts' offers, on the CPU (a merge is few rows). */
RankedOffers merge_cheapest_offers(const MergedOffers &merged, int k, ExecContext &ctx);

/* The cart lines of a call. */
struct CartLines
{
	const Int64Column &cart;
	const Int64Column &product;
	const Int64Column &store;
	const Int64Column &quantity;
};

/* Every quantity is at least 1 (ERROR 22023 naming the cart and product). */
void check_quantities(const CartLines &lines);

/*
 * A cart line worth showing: a cheaper offer exists (best_row), or the
 * current store has no offer for it (current_row = -1), or nobody offers the
 * product at all (both -1).  Rows index the offers.
 */
struct CartImprovement
{
	size_t line;
	int64_t current_row;
	int64_t best_row;
};

/* In order of cart_id, product_id, store_id, then input order. */
std::vector<CartImprovement> improve_carts(const CartLines &lines, const Offers &offers,
										   ExecContext &ctx, OfferStreamer *streamer = nullptr);

} // namespace gpurec
