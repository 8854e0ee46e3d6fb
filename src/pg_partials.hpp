/*
 * pg_partials.hpp: results that combine from partial results, one per share of
 * the input rows.  When parallel workers read an inner query of such a
 * function, each process computes the partial result of the rows it read,
 * and only those partial results travel to the calling backend, which
 * combines them: the rows themselves never leave the process that read them
 * (pg_parallel_read.hpp).  A worker is another process, so a partial result
 * is named by its kind and one parameter, not by code.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "columns.hpp"
#include "device.hpp"

namespace gpurec {

class InputTable;
struct ColumnSpec;

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
 * How large a partial result can grow: at most rows_per_key rows for each
 * distinct value of the table's column key_column (cheapest_offers: k for
 * each product).  A partial result pays only where that is far fewer rows
 * than the process read (partials_pay_off asks the table's statistics).
 */
struct PartialBound
{
	int key_column;
	int64_t rows_per_key;
};
PartialBound partial_bound(const PartialRequest &request);

/*
 * The partial result of the table's rows, in flat form (byte_stream.hpp),
 * computed on the CPU with ctx's threads, whatever ctx's device: a worker
 * process never starts the GPU.  Phase times go to ctx.
 */
std::vector<uint8_t> compute_partial(const PartialRequest &request, InputTable &table, ExecContext &ctx);

/* Partial results of several shares, of one request, as the one partial result of all their rows. */
std::vector<uint8_t> merge_partials(const PartialRequest &request, const std::vector<std::vector<uint8_t>> &parts,
									ExecContext &ctx);

/*
 * One process's partial result, built while it reads: its rows go into a
 * piece (an InputTable) of kPieceRows rows, which is reduced to its partial
 * result once full and then emptied for the next rows, its chunks kept
 * (RecycledChunks).  So a process holds one piece and the pieces' partial
 * results, not every row it read, and touches the same memory piece after
 * piece instead of fresh pages for every row.  The reductions run on one
 * thread, on the CPU, with a copy of the context it is given: a process of
 * a parallel read is one of as many as there are cores.
 */
class PartialBuilder
{
  public:
	static constexpr size_t kPieceRows = size_t(1) << 20;

	/*
	 * Pieces are made as `what` and `specs` say, and then handed to
	 * `prepare` (the column types the query's binding gives).
	 */
	PartialBuilder(PartialRequest request, const char *what, std::vector<ColumnSpec> specs,
				   std::function<void(InputTable &)> prepare, const ExecContext &ctx);
	~PartialBuilder();

	/* Where the next rows go. */
	InputTable &piece() { return *piece_; }
	/* Reduces the piece when it holds kPieceRows rows or more (its rows all appended). */
	void reduce_if_full();
	/* The partial result of every row given: the last piece reduced, and all merged. */
	std::vector<uint8_t> finish();

  private:
	void start_piece();
	void reduce_piece();

	PartialRequest request_;
	const char *what_;
	std::vector<ColumnSpec> specs_;
	std::function<void(InputTable &)> prepare_;
	ExecContext ctx_;
	RecycledChunks chunks_; /* before piece_: it outlives the piece's columns */
	std::unique_ptr<InputTable> piece_;
	std::vector<std::vector<uint8_t>> parts_;
};

} // namespace gpurec
