/*
 * partials.cpp: each kind of partial result, computed on a share's rows
 * (see partials.hpp).
 */
#include "no_postgres.hpp"

#include "partials.hpp"

#include "marketplace.hpp"
#include "pg_input.hpp"

namespace gpurec {

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

} // namespace gpurec
