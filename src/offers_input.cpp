/*
 * offers_input.cpp: the marketplace family's partial result,
 * cheapest_offers' (see offers_input.hpp), and its registration: a static
 * one, made as gpurec.so loads, so that every process has it, parallel
 * workers included, before any read asks for it.
 */
#include "no_postgres.hpp"

#include "offers_input.hpp"

#include "partials.hpp"

namespace gpurec {

namespace {

/* cheapest_offers: each product's k cheapest offers of the share, and its count of offers there. */
class CheapestOffersPartial final : public RunningPartial
{
  public:
	explicit CheapestOffersPartial(int k) : running_(k) {}
	void absorb(InputTable &piece) override { running_.absorb(offers_of(piece)); }
	std::vector<uint8_t> finish(InputTable &piece) override { return running_.finish(offers_of(piece)); }

  private:
	/* the piece's columns, as OffersInput declares them; uuid or text products as the process's own codes, stores as they came */
	static Offers offers_of(InputTable &piece)
	{
		return Offers{piece.id(0), piece.int64(1), piece.number(2), piece.key_order(0), piece.key_order(1),
					  piece.key_bytes(1)};
	}

	RunningCheapestOffers running_;
};

} // namespace

/* at most k offers of each product (column 0); a store id (column 1) coded only for an offer that enters them */
const PartialKind cheapest_offers_partial{
	"cheapest_offers", [](int64_t k) { return PartialBound{0, k}; },
	[](int64_t k) -> std::unique_ptr<RunningPartial> { return std::make_unique<CheapestOffersPartial>(static_cast<int>(k)); },
	1};

namespace {

const bool cheapest_offers_registered = register_partial_kind(cheapest_offers_partial);

} // namespace

} // namespace gpurec
