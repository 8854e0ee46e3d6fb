/*
 * pg_partials.cpp: each kind of partial result, built as a share's rows are
 * read (see pg_partials.hpp).
 */

#include "pg_partials.hpp"

#include "marketplace.hpp"
#include "pg_input.hpp"

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
	static Offers offers_of(InputTable &piece) { return Offers{piece.id(0), piece.int64(1), piece.number(2)}; }

	RunningCheapestOffers running_;
};

std::unique_ptr<RunningPartial> start_partial(const PartialRequest &request)
{
	switch (request.kind)
	{
		case PartialKind::CheapestOffers:
			return std::make_unique<CheapestOffersPartial>(static_cast<int>(request.parameter));
		case PartialKind::None:
			break;
	}
	throw Error(sqlstate::internal_error, "PartialBuilder: no partial result of this kind");
}

} // namespace

PartialBound partial_bound(const PartialRequest &request)
{
	switch (request.kind)
	{
		case PartialKind::CheapestOffers:
			return PartialBound{0, request.parameter};
		case PartialKind::None:
			break;
	}
	return PartialBound{-1, 0};
}

PartialBuilder::PartialBuilder(PartialRequest request, const char *what, std::vector<ColumnSpec> specs,
							   const std::function<void(InputTable &)> &prepare)
	: piece_(std::make_unique<InputTable>(what, std::move(specs))), running_(start_partial(request))
{
	prepare(*piece_);
}

PartialBuilder::~PartialBuilder() = default;

void PartialBuilder::absorb_piece()
{
	running_->absorb(*piece_);
	piece_->forget_rows();
}

void PartialBuilder::absorb_if_full()
{
	if (piece_->rows() >= kPieceRows)
		absorb_piece();
}

std::vector<uint8_t> PartialBuilder::finish()
{
	absorb_piece();
	return running_->finish(*piece_);
}

} // namespace gpurec
