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
 * A partial result built as the rows come, a piece at a time: what each
 * kind keeps between pieces (cheapest_offers: RunningCheapestOffers).
 */
class RunningPartial
{
  public:
	virtual ~RunningPartial() = default;
	/* The piece's rows; its id columns keep their dictionaries from piece to piece (InputTable::forget_rows). */
	virtual void absorb(InputTable &piece) = 0;
	/* The partial result of every row absorbed, in flat form; the piece is the last one, emptied. */
	virtual std::vector<uint8_t> finish(InputTable &piece) = 0;
};

/*
 * One process's partial result, built while it reads: its rows go into a
 * piece (an InputTable) of kPieceRows rows, which the running partial
 * result absorbs once full; the piece then forgets its rows but keeps its
 * chunks and its id dictionaries, so that a code means the same id in
 * every piece.  A piece is small enough to stay in the core's own cache
 * while it fills and is absorbed, and what the partial result keeps
 * between pieces is what it will send (for cheapest_offers, each
 * product's k cheapest so far): at the end of the read little is left to
 * do.  One thread, on the CPU: a process of a parallel read is one of as
 * many as there are cores, and never starts the GPU.
 */
class PartialBuilder
{
  public:
	static constexpr size_t kPieceRows = size_t(1) << 13;

	/*
	 * The piece is made as `what` and `specs` say, and then handed to
	 * `prepare` (the column types the query's binding gives).
	 */
	PartialBuilder(PartialRequest request, const char *what, std::vector<ColumnSpec> specs,
				   const std::function<void(InputTable &)> &prepare);
	~PartialBuilder();

	/* Where the next rows go. */
	InputTable &piece() { return *piece_; }
	/* Absorbs the piece when it holds kPieceRows rows or more (its rows all appended). */
	void absorb_if_full();
	/* The partial result of every row given. */
	std::vector<uint8_t> finish();

  private:
	void absorb_piece();

	std::unique_ptr<InputTable> piece_;
	std::unique_ptr<RunningPartial> running_;
};

} // namespace gpurec
