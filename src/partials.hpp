/*
 * partials.hpp: results that combine from partial results, one per share of
 * the input rows.  When parallel workers read an inner query of such a
 * function, each process computes the partial result of the rows it read,
 * and only those partial results travel to the calling backend, which
 * combines them: the rows themselves never leave the process that read them
 * (pg_parallel_read.hpp).  A worker is another process, so a partial result
 * is named by its kind and one parameter, not by code.
 */
#pragma once

#include <cstdint>
#include <vector>

#include "device.hpp"

namespace gpurec {

class InputTable;

enum class PartialKind : uint8_t
{
	None = 0,
	/*
	 * cheapest_offers' OffersPart (marketplace.hpp): each product's k
	 * cheapest offers of the share, and its count of offers there.  The
	 * parameter is k.
	 */
	CheapestOffers = 1
};

struct PartialRequest
{
	PartialKind kind = PartialKind::None;
	int64_t parameter = 0;
};

/*
 * The partial result of the table's rows, in flat form (byte_stream.hpp),
 * computed on the CPU with ctx's threads, whatever ctx's device: a worker
 * process never starts the GPU.  Phase times go to ctx.
 */
std::vector<uint8_t> compute_partial(const PartialRequest &request, InputTable &table, ExecContext &ctx);

} // namespace gpurec
