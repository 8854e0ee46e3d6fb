/*
 * pg_partials.cpp: each kind of partial result, computed on a share's rows
 * (see pg_partials.hpp).
 */

#include "pg_partials.hpp"

#include "marketplace.hpp"
#include "pg_input.hpp"

namespace gpurec {

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

std::vector<uint8_t> compute_partial(const PartialRequest &request, InputTable &table, ExecContext &ctx)
{
	switch (request.kind)
	{
		case PartialKind::CheapestOffers:
		{
			Offers offers{table.id(0), table.int64(1), table.number(2)};
			return cheapest_offers_part(offers, static_cast<int>(request.parameter), ctx);
		}
		case PartialKind::None:
			break;
	}
	throw Error(sqlstate::internal_error, "compute_partial: no partial result of this kind");
}

std::vector<uint8_t> merge_partials(const PartialRequest &request, const std::vector<std::vector<uint8_t>> &parts,
									ExecContext &ctx)
{
	switch (request.kind)
	{
		case PartialKind::CheapestOffers:
			return merge_offers_parts(parts, static_cast<int>(request.parameter), ctx);
		case PartialKind::None:
			break;
	}
	throw Error(sqlstate::internal_error, "merge_partials: no partial result of this kind");
}

PartialBuilder::PartialBuilder(PartialRequest request, const char *what, std::vector<ColumnSpec> specs,
							   std::function<void(InputTable &)> prepare, const ExecContext &ctx)
	: request_(request), what_(what), specs_(std::move(specs)), prepare_(std::move(prepare)), ctx_(ctx)
{
	ctx_.cpu_threads = 1;
	ctx_.mode = DeviceMode::Cpu;
	start_piece();
}

PartialBuilder::~PartialBuilder() = default;

void PartialBuilder::start_piece()
{
	piece_.reset(); /* its chunks go back to chunks_, for the next piece */
	piece_ = std::make_unique<InputTable>(what_, specs_);
	piece_->use_chunk_source(chunks_);
	prepare_(*piece_);
}

void PartialBuilder::reduce_piece()
{
	parts_.push_back(compute_partial(request_, *piece_, ctx_));
	start_piece();
}

void PartialBuilder::reduce_if_full()
{
	if (piece_->rows() >= kPieceRows)
		reduce_piece();
}

std::vector<uint8_t> PartialBuilder::finish()
{
	if (piece_->rows() > 0 || parts_.empty())
		reduce_piece();
	if (parts_.size() == 1)
		return std::move(parts_.front());
	return merge_partials(request_, parts_, ctx_);
}

} // namespace gpurec
