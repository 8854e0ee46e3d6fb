/*
 * marketplace.hpp: the k cheapest offers per product, and the smart cart.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "../kernels/api/marketplace_kernels.hpp"
#include "device.hpp"
#include "id_column.hpp"
#include "key_dictionary.hpp"
#include "number_column.hpp"

namespace gpurec {

/*
 * The offers of a call, as the input layer read them.  Where a process
 * ranks its own share of uuid or text ids (RunningCheapestOffers), its
 * ids are codes of its own dictionaries: product_keys and store_keys say
 * how they compare and what they are.  Null once the ids are the call's
 * codes, numbered in key order, and for integers.  Where such a process
 * holds its uuid or text stores as they came (store_bytes, a piece's late
 * key column: partials.hpp), each store is the index of its value there,
 * and store_keys is unused.
 */
struct Offers
{
	const IdColumn &product;
	const Int64Column &store;
	const NumberColumn &price;
	const KeyOrder *product_keys = nullptr;
	const KeyOrder *store_keys = nullptr;
	const KeyBytes *store_bytes = nullptr;
};

/* A hash of (product code, store id), for maps of a product's offers at a store. */
struct ProductStoreHash
{
	size_t operator()(const std::pair<int32_t, int64_t> &k) const
	{
		/* unsigned: store ids span int64, and a signed product would overflow */
		return std::hash<uint64_t>()(static_cast<uint64_t>(k.second) * 1000003u + static_cast<uint32_t>(k.first));
	}
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
	double gpu_from_; /* offers from which auto ranks on the GPU (gpu_offers_from) */
	gpu::OfferUploadPtr upload_;
};

/* At most UINT32_MAX offers: rows are numbered in 32 bits (ERROR 54000). */
void check_offer_count(size_t offers);

RankedOffers cheapest_offers(const Offers &offers, int k, ExecContext &ctx,
							 OfferStreamer *streamer = nullptr);

/*
 * Whether cheapest_offers ranks on the CPU whatever the offers turn out to
 * be (gpurec.device, the build, a GPU this backend found missing, the
 * CPU's threads): known before they are read, so that parallel workers may
 * rank their own shares.
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
	/*
	 * n_offers: per product code, its count of offers (the offers' own, or
	 * a merge's sums).  The part's numeric reach (NumericReach) is that of
	 * offers' prices and `beyond`: the reach of the rows a merge's offers
	 * stand for and no longer hold.
	 */
	OffersPart(const Offers &offers, const RankedOffers &ranked, const std::vector<int64_t> &n_offers, int k,
			   const NumericReach &beyond = NumericReach());
	/* An empty part, whose offers come by add_offer. */
	OffersPart(int k, NumberType price_type, const NumericReach &reach) : k_(k), reach_(reach), price_(price_type) {}
	/*
	 * Its product and store ids (those added so far) are uuid or text ids
	 * as codes of a process's own dictionaries (Offers::product_keys; null:
	 * integers, which stay as they are): their values travel with the part,
	 * in dictionaries of the part's own holding only them, the ids
	 * rewritten as codes there.  Once, after the last add_offer.
	 */
	void carry_keys(const KeyOrder *product_keys, const KeyOrder *store_keys);
	/*
	 * The next ranked offer: a product's offers come together, cheapest
	 * first, the first with the product's count of offers, the others with 0.
	 */
	void add_offer(int64_t product, int64_t n_offers, int64_t store, const NumberColumn &price, size_t row)
	{
		product_.push_back(product);
		n_offers_.push_back(n_offers);
		store_.push_back(store);
		price_.push_row_of(price, row);
	}
	void serialize(ByteWriter &out) const;

  private:
	int k_;
	NumericReach reach_;
	/* a row per ranked offer; n_offers_ holds the product's count on its first row, 0 on the others */
	Int64Column product_;
	Int64Column n_offers_;
	Int64Column store_;
	NumberColumn price_;
	std::unique_ptr<KeyDictionary> product_keys_, store_keys_;
};

class MergedOffers
{
  public:
	/*
	 * price_description names the price column in an ERROR 22003, where the
	 * parts' prices cannot share one column (as for one read of all).
	 */
	explicit MergedOffers(std::string price_description = "a numeric column", std::shared_ptr<CallKeys> keys = nullptr);

	/*
	 * Adds one shard's part.  Bytes that are not a part (another version
	 * of gpurec, truncated or foreign): ERROR 22P03; a part ranked for a
	 * smaller k than `k`: 22023; prices of another type than the parts'
	 * before: 42804.  After an error the merge holds an unknown share of
	 * the part, and only serves to fail its call.  A part's uuid or text
	 * ids (OffersPart::carry_keys) take the codes of the call's keys,
	 * which the merge was made with.
	 */
	void append_part(const uint8_t *data, size_t size, int k);
	/*
	 * Once every part is in: the call's dictionaries that took parts' uuid
	 * or text ids numbered in key order, and the merge's ids with them
	 * (CallKeys::settle), so that the ranking compares stores in their
	 * order and the products come in theirs.  Nothing to do for integers.
	 */
	void settle_keys(const PieceRunner &run = run_serially);

	const Offers &offers() const { return offers_; }
	/* Per product code: the shards' counts of its offers, added up. */
	const std::vector<int64_t> &n_offers() const { return n_offers_; }
	/*
	 * The numeric reach of every offer of every part: check() it raises
	 * ERROR 22003 where one read of all the shards' offers would have.
	 */
	const NumericReach &reach() const { return reach_; }

  private:
	IdColumn product_;
	Int64Column store_;
	NumberColumn price_;
	Offers offers_{product_, store_, price_};
	std::vector<int64_t> n_offers_;
	/* every part's rows, as they came: product ids, and counts on a product's first row */
	Int64Column product_ids_;
	Int64Column counts_;
	NumericReach reach_;
	size_t parts_ = 0;
	std::shared_ptr<CallKeys> keys_;
	bool took_keys_ = false;
};

/*
 * A share of the offers ranked as they are read, a piece at a time (a
 * parallel read's partial result, partials.hpp): each product's k
 * cheapest so far, in a heap of its own, and its count of offers.  An
 * offer is first compared with its product's k-th cheapest so far, one
 * value per product, which stays in the core's cache, and only the few
 * that are cheaper enter a heap; their prices and stores are kept aside
 * (compacted now and then), the piece's rows forgotten.  The order is
 * rank_on_cpu's with settle_ties (price, store, fewest decimals), so
 * finish() gives the OffersPart of the same rows ranked at once, read in
 * any order and cut into any pieces.  Stores held as they came
 * (Offers::store_bytes) are coded here, in a dictionary of the stores
 * kept, only for the offers that pass the product's k-th cheapest: the
 * rows dropped at that first comparison, most of them, cost no lookup.
 */
class RunningCheapestOffers
{
  public:
	/* Kept offers are compacted once they are compact_from or more, and twice those in the heaps (small in tests). */
	explicit RunningCheapestOffers(int k, size_t compact_from = size_t(1) << 16);

	/*
	 * Ranks the piece's offers in.  Its product column must be one and the
	 * same from piece to piece, its rows forgotten in between
	 * (IdColumn::forget_rows), so that a code names the same product in
	 * every piece; its prices are of one type throughout.
	 */
	void absorb(const Offers &piece);
	/*
	 * The OffersPart of every offer absorbed, in flat form: products by the
	 * piece's product column (its ids, and its counts of every row pushed),
	 * prices of the piece's price type.  ERROR 22003 where one column of
	 * every price absorbed could not hold them (NumericReach), as reading
	 * them all into one would raise.
	 */
	std::vector<uint8_t> finish(const Offers &piece);

  private:
	/*
	 * An offer in a heap: its price as a value comparable across scales
	 * (NumberColumn::comparable), store, display scale, and where its price and
	 * store are kept.  Ordered as the ranking is.
	 */
	struct Candidate
	{
		__int128 price;
		int64_t store;
		int16_t display_scale;
		uint32_t kept;
	};
	/* The ranking's order of candidates: stores compare as their ids do (stores, for uuid or text ids). */
	struct Ranking
	{
		const KeyOrder *stores;
		bool operator()(const Candidate &a, const Candidate &b) const
		{
			if (a.price != b.price)
				return a.price < b.price;
			if (a.store != b.store)
				return stores ? stores->less(a.store, b.store) : a.store < b.store;
			return std::tie(a.display_scale, a.kept) < std::tie(b.display_scale, b.kept);
		}
	};

	void offer(int32_t product, Candidate candidate, const Offers &piece, size_t row, Ranking ranking);
	/* How the stores of the heaps compare: the piece's order, or that of held_stores_ where the piece holds stores as they came. */
	KeyOrder held_order() const { return KeyOrder{&held_stores_, 1}; }
	/* The code in held_stores_ of the piece's store at row (one of Offers::store_bytes). */
	int64_t code_held_store(const Offers &piece, size_t row);
	/* The kept offers, rewritten with those in a heap only, once most are out of every heap. */
	void compact();

	int k_;
	NumericReach reach_;
	/* per product code: its heap (a max-heap, its worst first), and the worst's price once it holds k */
	std::vector<std::vector<Candidate>> heaps_;
	std::vector<__int128> worst_;
	size_t in_heaps_ = 0;
	size_t compact_from_;
	Int64Column kept_store_;
	NumberColumn kept_price_;
	/* the stores of the offers that passed their product's k-th cheapest, where the pieces hold stores as they came */
	KeyDictionary held_stores_;
};

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

/*
 * The carts functions' checks of their rows, by their place in a call, the
 * first value of their errors' order (Error::order): every quantity first,
 * then (optimize_carts) the exact types of prices, fees and free_from, the
 * shipping query's stores, and every price.  A gpurec_shards partition
 * sends such an error as a refusal: the coordinator raises the one one
 * server raises, whichever partitions found what.
 */
constexpr int64_t kQuantityCheck = 1, kExactCheck = 2, kShippingCheck = 3, kPriceCheck = 4;

/*
 * Every quantity is at least 1: else ERROR 22023 naming the least cart,
 * then product, with one (ordered: kQuantityCheck, cart, product).
 */
void check_quantities(const CartLines &lines, const CallKeys *keys);

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
