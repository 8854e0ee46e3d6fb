/*
 * columns.hpp: the plain columns every engine function reads.
 *
 * The input layer (src/pg_receiver.cpp) streams the rows of an inner query
 * into these; the engine and the GPU kernels see nothing of PostgreSQL.
 * Columns grow in fixed chunks rather than by reallocation, so reading 30
 * million offers never holds two copies of a column (a backend's peak
 * memory stays near the bytes of one row times the rows), and so a chunk can
 * go to the GPU as soon as it is full.
 */
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "byte_stream.hpp"
#include "errors.hpp"

namespace gpurec {

/*
 * Chunk memory: 2 MiB aligned and advised to use transparent huge pages, as
 * first-touch page faults on fresh 4 KiB pages cost a large share of reading
 * tens of millions of rows (about a fifth of the reading time without
 * them).  Mapped from the kernel and unmapped by free_chunk (given the same
 * bytes), not taken from malloc: glibc raises its mmap threshold after the
 * first such block is freed, and later blocks then came from the brk heap,
 * where they fragmented it and kept a backend's resident memory growing over
 * thousands of small calls.  Throws std::bad_alloc.
 */
void *allocate_chunk(size_t bytes);
void free_chunk(void *chunk, size_t bytes) noexcept;
/*
 * Hands the whole pages inside [memory, memory + bytes) of a shared mapping
 * back to the kernel (MADV_REMOVE): they read as zeros afterwards, and the
 * mapping stays.  A page the range only partly covers is left as it is,
 * for its other bytes may be in use.  Advice: where the kernel refuses it,
 * nothing changes.
 */
void give_back_pages(void *memory, size_t bytes) noexcept;

/*
 * An allocator for large scratch vectors that are written before they are
 * read: no zeroing on resize(), and blocks of 2 MiB or more on transparent
 * huge pages (see allocate_chunk).
 */
template <typename T> struct BulkAllocator
{
	using value_type = T;
	static constexpr size_t kHugeBytes = size_t(2) << 20;

	BulkAllocator() = default;
	template <typename U> BulkAllocator(const BulkAllocator<U> &) {}

	T *allocate(size_t n)
	{
		size_t bytes = n * sizeof(T);
		return static_cast<T *>(bytes >= kHugeBytes ? allocate_chunk(bytes) : ::operator new(bytes));
	}
	void deallocate(T *p, size_t n) noexcept
	{
		if (n * sizeof(T) >= kHugeBytes)
			free_chunk(p, n * sizeof(T));
		else
			::operator delete(p);
	}
	/* resize() leaves new elements uninitialised */
	template <typename U> void construct(U *p) noexcept { ::new (static_cast<void *>(p)) U; }
	template <typename U, typename... Args> void construct(U *p, Args &&...args)
	{
		::new (static_cast<void *>(p)) U(std::forward<Args>(args)...);
	}
	template <typename U> bool operator==(const BulkAllocator<U> &) const { return true; }
	template <typename U> bool operator!=(const BulkAllocator<U> &) const { return false; }
};

template <typename T> using BulkVector = std::vector<T, BulkAllocator<T>>;

/*
 * Where a column's chunks come from and go back to.  By default mapped
 * memory (allocate_chunk, mapped_chunks()); a parallel worker's columns take
 * theirs from memory the calling backend maps too (pg_parallel_read.cpp),
 * so that the backend takes the worker's chunks as they are instead of
 * copying their rows.
 */
class ChunkSource
{
  public:
	/* Throws (std::bad_alloc, or an Error) when it cannot. */
	virtual void *allocate(size_t bytes) = 0;
	virtual void release(void *chunk, size_t bytes) noexcept = 0;
	/*
	 * A name that another process's ChunkResolver turns back into the
	 * chunk's address there; 0 when the chunk has none, and must travel as
	 * bytes.
	 */
	virtual uint64_t reference(const void *chunk) const
	{
		(void) chunk;
		return 0;
	}

  protected:
	~ChunkSource() = default;
};

/* allocate_chunk and free_chunk, as a ChunkSource: every column's unless told otherwise. */
ChunkSource &mapped_chunks();

/*
 * Runs run_piece(0) .. run_piece(pieces - 1), in any order, perhaps several
 * at once on other threads, and returns when all have run (rethrowing what
 * one threw).  Appending serialized columns copies through one, so that the
 * caller decides where the copying runs: serially by default, on the CPU's
 * threads where the input layer gives it (pg_parallel_read.cpp).
 */
using PieceRunner = std::function<void(size_t pieces, const std::function<void(size_t)> &run_piece)>;

inline void run_serially(size_t pieces, const std::function<void(size_t)> &run_piece)
{
	for (size_t i = 0; i < pieces; ++i)
		run_piece(i);
}

/*
 * Rows in chunks of kChunkRows, every chunk full but the last.  A chunk is
 * owned (its source releases it with the column) or borrowed: a chunk of
 * another process's column, read by reference from its flat form, which
 * lives as long as the memory it is in (the caller keeps that mapped: see
 * InputTable::keep_alive).
 */
template <typename T> class ChunkedColumn
{
  public:
	static constexpr int kChunkShift = 20;
	static constexpr size_t kChunkRows = size_t(1) << kChunkShift;

	ChunkedColumn() = default;
	ChunkedColumn(ChunkedColumn &&other) noexcept
		: chunks_(std::move(other.chunks_)), size_(other.size_), source_(other.source_)
	{
		other.chunks_.clear();
		other.size_ = 0;
	}
	ChunkedColumn &operator=(ChunkedColumn &&other) noexcept
	{
		if (this != &other)
		{
			release_chunks();
			chunks_ = std::move(other.chunks_);
			size_ = other.size_;
			source_ = other.source_;
			other.chunks_.clear();
			other.size_ = 0;
		}
		return *this;
	}
	ChunkedColumn(const ChunkedColumn &) = delete;
	ChunkedColumn &operator=(const ChunkedColumn &) = delete;
	~ChunkedColumn() { release_chunks(); }

	/* Where this column's new chunks come from; set before its first row. */
	void use_chunk_source(ChunkSource &source) { source_ = &source; }

	void push_back(T value)
	{
		if ((size_ & (kChunkRows - 1)) == 0 && size_ / kChunkRows == chunks_.size())
			add_chunk();
		chunks_[size_ >> kChunkShift].data[size_ & (kChunkRows - 1)] = value;
		++size_;
	}
	size_t size() const { return size_; }
	bool empty() const { return size_ == 0; }
	/*
	 * Drops every row.  The chunks it owns stay, and the rows to come are
	 * written into them again: memory a core already has in its cache, not
	 * fresh pages (a piece of a parallel read, pg_partials.hpp).
	 */
	void forget_rows() noexcept
	{
		bool borrows = std::any_of(chunks_.begin(), chunks_.end(), [](const Chunk &chunk) { return chunk.source == nullptr; });
		if (borrows)
			release_chunks();
		size_ = 0;
	}
	const T &operator[](size_t i) const { return chunks_[i >> kChunkShift].data[i & (kChunkRows - 1)]; }
	T &operator[](size_t i) { return chunks_[i >> kChunkShift].data[i & (kChunkRows - 1)]; }

	size_t chunk_count() const { return (size_ + kChunkRows - 1) / kChunkRows; }
	const T *chunk_data(size_t c) const { return chunks_[c].data; }
	T *chunk_data(size_t c) { return chunks_[c].data; }
	size_t chunk_rows(size_t c) const
	{
		return c + 1 < chunk_count() ? kChunkRows : size_ - c * kChunkRows;
	}

	/*
	 * Appends n values in place: fill(out, first, count) writes values
	 * first .. first + count - 1 of the n at out, once per chunk they span.
	 */
	template <typename Fill> void append(size_t n, Fill fill)
	{
		for (size_t done = 0; done < n;)
		{
			if ((size_ & (kChunkRows - 1)) == 0 && size_ / kChunkRows == chunks_.size())
				add_chunk();
			size_t offset = size_ & (kChunkRows - 1), count = std::min(n - done, kChunkRows - offset);
			fill(chunks_[size_ >> kChunkShift].data + offset, done, count);
			size_ += count;
			done += count;
		}
	}

	/* Copies rows [begin, end) into out, contiguous. */
	void copy_out(size_t begin, size_t end, T *out) const
	{
		while (begin < end)
		{
			size_t c = begin >> kChunkShift, off = begin & (kChunkRows - 1);
			size_t n = std::min(end - begin, kChunkRows - off);
			std::memcpy(out, chunks_[c].data + off, n * sizeof(T));
			out += n;
			begin += n;
		}
	}
	/*
	 * append(), with fill called for pieces of kPieceRows rows through run:
	 * perhaps at once on several threads, so fill must be safe to run so.
	 * The rows count only once every piece is filled.
	 */
	template <typename Fill> void append_in_pieces(size_t n, Fill fill, const PieceRunner &run)
	{
		size_t start = size_, end = size_ + n;
		while (chunks_.size() * kChunkRows < end)
			add_chunk();
		run((n + kPieceRows - 1) / kPieceRows, [&](size_t piece) {
			for (size_t first = piece * kPieceRows, last = std::min(n, first + kPieceRows); first < last;)
			{
				size_t at = start + first, offset = at & (kChunkRows - 1);
				size_t count = std::min(last - first, kChunkRows - offset);
				fill(chunks_[at >> kChunkShift].data + offset, first, count);
				first += count;
			}
		});
		size_ = end;
	}
	/*
	 * Runs visit(rows, first, count) over every row, in place, in pieces of
	 * kPieceRows rows through run (perhaps at once on several threads).
	 */
	template <typename Visit> void visit_in_pieces(Visit visit, const PieceRunner &run)
	{
		run(pieces(), [&](size_t piece) { visit_piece(piece, visit); });
	}
	/* The pieces visit_in_pieces runs, and one of them: for work over the pieces of several columns at once. */
	size_t pieces() const { return (size_ + kPieceRows - 1) / kPieceRows; }
	template <typename Visit> void visit_piece(size_t piece, Visit visit)
	{
		size_t first = piece * kPieceRows, count = std::min(size_ - first, kPieceRows);
		visit(chunks_[first >> kChunkShift].data + (first & (kChunkRows - 1)), first, count);
	}

	/*
	 * The flat form (byte_stream.hpp): the row count, a form byte, then the
	 * rows (form 0); or, where the writer allows it and every chunk's source
	 * names it, the chunks' references instead (1); or, where the writer
	 * packs integers and T is one, each row's difference from the row
	 * before (the first's from 0) as a zigzag-coded varint (2): a column of
	 * repeated or small values then takes a byte or two a row.
	 */
	void serialize(ByteWriter &out) const
	{
		out.put<uint64_t>(size_);
		bool by_reference = out.by_reference();
		for (size_t c = 0; c < chunk_count() && by_reference; ++c)
			by_reference = chunks_[c].source != nullptr && chunks_[c].source->reference(chunks_[c].data) != 0;
		if constexpr (std::is_integral_v<T>)
			if (!by_reference && out.packs_integers())
			{
				out.put<uint8_t>(2);
				uint64_t before = 0;
				for (size_t c = 0; c < chunk_count(); ++c)
					for (size_t i = 0, n = chunk_rows(c); i < n; ++i)
					{
						auto value = static_cast<uint64_t>(static_cast<int64_t>(chunk_data(c)[i]));
						uint64_t step = value - before; /* modulo 2^64: every pair of rows has one */
						out.put_varint((step << 1) ^ (0 - (step >> 63)));
						before = value;
					}
				return;
			}
		out.put<uint8_t>(by_reference ? 1 : 0);
		for (size_t c = 0; c < chunk_count(); ++c)
			if (by_reference)
				out.put<uint64_t>(chunks_[c].source->reference(chunks_[c].data));
			else
				out.write(chunk_data(c), chunk_rows(c) * sizeof(T));
	}
	/*
	 * A column that serialize() wrote: by reference, the very chunks,
	 * borrowed; as bytes, a copy (through run).
	 */
	static ChunkedColumn read_serialized(ByteReader &in, const PieceRunner &run = run_serially)
	{
		size_t n = in.get<uint64_t>();
		if (n > SIZE_MAX / sizeof(T))
			throw Error(sqlstate::internal_error, "ChunkedColumn: a serialized row count out of range");
		uint8_t form = in.get<uint8_t>();
		ChunkedColumn part;
		if (form == 1)
		{
			if (in.resolver() == nullptr)
				throw Error(sqlstate::internal_error, "ChunkedColumn: chunks by reference where none can be read");
			size_t chunks = (n + kChunkRows - 1) / kChunkRows;
			part.chunks_.reserve(chunks);
			for (size_t c = 0; c < chunks; ++c)
				part.chunks_.push_back(
					Chunk{static_cast<T *>(in.resolver()->address(in.get<uint64_t>(), kChunkRows * sizeof(T))), nullptr});
			part.size_ = n;
		}
		else if (form == 0)
			part.append_bytes(in.take(n * sizeof(T)), n, run);
		else if (form == 2 && std::is_integral_v<T>)
			part.append_packed(in, n);
		else
			throw Error(sqlstate::internal_error, "ChunkedColumn: a serialized column of unknown form");
		return part;
	}
	/*
	 * Appends the rows of part, which is left empty.  With take_chunks,
	 * part's full chunks join this column as they are, before this column's
	 * last (partial) chunk, and only part's remaining rows are copied: the
	 * rows end up as [this column's full chunks] [part's full chunks] [this
	 * column's partial chunk] [part's last rows].  Columns of equal length
	 * that take parts of equal length so stay aligned row for row.  Without
	 * take_chunks every row is copied, in order.  Copies run through run.
	 */
	void append_column(ChunkedColumn &&part, bool take_chunks, const PieceRunner &run)
	{
		size_t taken = take_chunks ? part.size_ / kChunkRows : 0;
		if (taken > 0)
		{
			chunks_.insert(chunks_.begin() + static_cast<std::ptrdiff_t>(size_ / kChunkRows), part.chunks_.begin(),
						   part.chunks_.begin() + static_cast<std::ptrdiff_t>(taken));
			for (size_t c = 0; c < taken; ++c)
				part.chunks_[c] = Chunk{nullptr, nullptr}; /* this column's now */
			size_ += taken * kChunkRows;
		}
		size_t from = taken * kChunkRows;
		append_in_pieces(
			part.size_ - from,
			[&part, from](T *out, size_t first, size_t count) { part.copy_out(from + first, from + first + count, out); },
			run);
		part = ChunkedColumn();
	}
	/*
	 * Appends what serialize() wrote, copying no chunk that came by
	 * reference: those all follow this column's last chunk as they are, so
	 * the rows from this column's end to that chunk's end become a gap, which
	 * no row of the part fills.  Rows written as bytes are copied right
	 * after this column's end.  Returns the index the part's first row now
	 * has.  Only for a column whose rows are found through indices kept
	 * beside it (FloatArrayColumn's elements), never by their position.
	 */
	size_t append_serialized_in_place(ByteReader &in, const PieceRunner &run = run_serially)
	{
		ByteReader ahead = in;
		size_t n = ahead.get<uint64_t>();
		if (n <= SIZE_MAX / sizeof(T) && ahead.get<uint8_t>() == 0)
		{
			size_t first = size_;
			in = ahead;
			append_bytes(in.take(n * sizeof(T)), n, run);
			return first;
		}
		ChunkedColumn part = read_serialized(in, run);
		size_t first = chunk_count() * kChunkRows;
		if (part.size_ == 0)
			return size_;
		chunks_.insert(chunks_.begin() + static_cast<std::ptrdiff_t>(chunk_count()), part.chunks_.begin(),
					   part.chunks_.end());
		for (Chunk &chunk : part.chunks_)
			chunk = Chunk{nullptr, nullptr}; /* this column's now */
		size_ = first + part.size_;
		return first;
	}
	/*
	 * append_column() of what serialize() wrote.  Rows written as bytes or
	 * packed, of which no full chunk is to be taken, go from the bytes
	 * straight into this column: a column between would cost a chunk's
	 * mapping and first touch, more than the rows when they are few.
	 */
	void append_serialized(ByteReader &in, const PieceRunner &run = run_serially, bool take_chunks = false)
	{
		ByteReader ahead = in;
		size_t n = ahead.get<uint64_t>();
		uint8_t form = n <= SIZE_MAX / sizeof(T) ? ahead.get<uint8_t>() : 0xff;
		if ((form == 0 || (form == 2 && std::is_integral_v<T>)) && (!take_chunks || n < kChunkRows))
		{
			in = ahead;
			if (form == 0)
				append_bytes(in.take(n * sizeof(T)), n, run);
			else
				append_packed(in, n);
			return;
		}
		append_column(read_serialized(in, run), take_chunks, run);
	}
	/*
	 * Appends n rows that serialize() packed (ByteWriter::pack_integers):
	 * each a zigzag varint of its difference from the row before.  After an
	 * ERROR the column holds an unknown share of them.
	 */
	void append_packed(ByteReader &in, size_t n)
	{
		if (n > in.remaining()) /* a byte a row at least: checked before anything is allocated */
			throw Error(sqlstate::internal_error, "ChunkedColumn: a packed column shorter than its row count");
		uint64_t value = 0;
		append(n, [&](T *out, size_t, size_t count) {
			for (size_t i = 0; i < count; ++i)
			{
				uint64_t zigzag = in.get_varint();
				value += (zigzag >> 1) ^ (0 - (zigzag & 1));
				auto row = static_cast<T>(static_cast<int64_t>(value));
				if (static_cast<int64_t>(row) != static_cast<int64_t>(value))
					throw Error(sqlstate::internal_error, "ChunkedColumn: a packed value out of its type's range");
				out[i] = row;
			}
		});
	}
	/* Appends n rows from their bytes (at any alignment), through run. */
	void append_bytes(const uint8_t *rows, size_t n, const PieceRunner &run = run_serially)
	{
		append_in_pieces(
			n, [rows](T *out, size_t first, size_t count) { std::memcpy(out, rows + first * sizeof(T), count * sizeof(T)); },
			run);
	}

	std::vector<T> to_vector() const
	{
		std::vector<T> v(size_);
		copy_out(0, size_, v.data());
		return v;
	}

  private:
	/*
	 * A sixteenth of a chunk: a parallel worker's part of a read is often a
	 * chunk or two, and its pieces should keep every core busy while the
	 * calling backend joins it.
	 */
	static constexpr size_t kPieceRows = kChunkRows / 16;

	/* source: what releases the chunk; null when it is borrowed */
	struct Chunk
	{
		T *data;
		ChunkSource *source;
	};

	void add_chunk()
	{
		chunks_.reserve(chunks_.size() + 1);
		chunks_.push_back(Chunk{static_cast<T *>(source_->allocate(kChunkRows * sizeof(T))), source_});
	}
	void release_chunks() noexcept
	{
		for (const Chunk &chunk : chunks_)
			if (chunk.source != nullptr)
				chunk.source->release(chunk.data, kChunkRows * sizeof(T));
		chunks_.clear();
		size_ = 0;
	}

	std::vector<Chunk> chunks_;
	size_t size_ = 0;
	ChunkSource *source_ = &mapped_chunks();
};

/*
 * An integer id column, dictionary-encoded while it is read: each row holds a
 * dense code 0..n_distinct-1 in order of first appearance, so that engines
 * group by plain array indexing (on the CPU and on the GPU alike).
 */
class IdColumn
{
  public:
	void push_back(int64_t id);
	/* Appends n ids, id_at(i) the i-th: push_back n times, with the codes written a chunk at a time. */
	template <typename IdAt> void append(size_t n, IdAt id_at)
	{
		if (ids_as_codes_)
		{
			uint64_t largest = 0; /* as unsigned: a negative id is past every limit */
			for (size_t i = 0; i < n; ++i)
				largest = std::max(largest, static_cast<uint64_t>(id_at(i)));
			if (n == 0 || keeps_as_code(largest, n))
			{
				codes_.append(n, [&](int32_t *out, size_t first, size_t count) {
					for (size_t i = 0; i < count; ++i)
					{
						auto id = static_cast<size_t>(id_at(first + i));
						ids_held_ += id_rows_[id]++ == 0;
						out[i] = static_cast<int32_t>(id);
					}
				});
				return;
			}
			settle();
		}
		codes_.append(n, [&](int32_t *out, size_t first, size_t count) {
			for (size_t i = 0; i < count; ++i)
			{
				int32_t code = intern(id_at(first + i));
				out[i] = code;
				++counts_[code];
			}
		});
	}

	/*
	 * Ids as codes, for a column being read: while every id is an integer
	 * in [0, 2^22) and the ids are not too sparse, each row's code is its id
	 * and the column only counts each id's rows, in an array by id.  That
	 * is one look into memory a row, where a dictionary takes two (its
	 * direct array, then the id's count), each a cache miss when the ids
	 * come shuffled.  Parts read so meet without dictionaries to merge
	 * (append_parts adds their counts), and settle() numbers the ids, in id
	 * order, once, over all the rows.  Until then the column has no
	 * dictionary: only size(), appending, serialize() and settle() may be
	 * used.  An id past those limits settles the column, which goes on as
	 * a dictionary.  Only on an empty column.
	 */
	void take_ids_as_codes();
	/* Whether the column holds ids as codes, not settled yet. */
	bool holds_ids_as_codes() const { return ids_as_codes_; }
	/*
	 * Makes a column of ids as codes a dictionary again, numbered in id
	 * order: every row's code rewritten in pieces through run.  Nothing to
	 * do for a dictionary.
	 */
	void settle(const PieceRunner &run = run_serially);
	/*
	 * settle() where the ids as codes are sparse (their array of counts
	 * more than 8 for each id held, past its first 2^16): what serialize()
	 * then writes is a dictionary, not a count for every integer below the
	 * largest id.
	 */
	void settle_if_sparse(const PieceRunner &run = run_serially);

	size_t size() const { return codes_.size(); }
	/*
	 * Drops every row but keeps the dictionary, and the counts of the rows
	 * dropped: the ids keep their codes for the rows to come, and counts()
	 * counts every row ever pushed.  A dictionary only (not ids as codes).
	 */
	void forget_rows();
	size_t distinct() const { return values_.size(); }
	const ChunkedColumn<int32_t> &codes() const { return codes_; }
	int32_t code(size_t row) const { return codes_[row]; }
	int64_t value_of(int32_t code) const { return values_[code]; }
	const std::vector<int64_t> &values() const { return values_; }
	/* Rows per code. */
	const std::vector<int64_t> &counts() const { return counts_; }
	/* The code of id, or -1 when the column never held it. */
	int32_t find(int64_t id) const;
	/* Every code, in ascending order of its id. */
	std::vector<int32_t> codes_in_id_order() const;

	/*
	 * Renumbers the codes so that they ascend with the ids (code 0 the
	 * lowest id); the rows stay where they are, each row's code rewritten
	 * in pieces through run.  Work of the order of the distinct ids, plus
	 * one table lookup per row.
	 */
	void number_in_id_order(const PieceRunner &run = run_serially);
	/* Whether the codes ascend with the ids: after number_in_id_order, or ids that first came in ascending order. */
	bool numbered_in_id_order() const { return numbered_in_id_order_; }

	void use_chunk_source(ChunkSource &source) { codes_.use_chunk_source(source); }

	/*
	 * The flat form: a form byte, then the distinct ids with their row
	 * counts (form 0), or, for ids as codes (form 1), how many ids are held
	 * and every integer's row count up to the largest id; then the codes.
	 */
	void serialize(ByteWriter &out) const;
	/*
	 * Appends a column that serialize() wrote: its ids join this dictionary
	 * (new ones get the next codes) and its codes are translated, in place
	 * where they came by reference, so the work is per distinct id plus one
	 * table lookup per row (through run).  Rows as
	 * ChunkedColumn::append_column places them.
	 */
	void append_serialized(ByteReader &in, const PieceRunner &run = run_serially, bool take_chunks = false);
	/*
	 * append_serialized() of several parts, each reader at its own, in
	 * order.  Where every id, this column's and the parts', is one the
	 * direct array may hold, the dictionary first becomes their union,
	 * numbered in id order (the rows held renumbered), and then every
	 * part's codes are translated at once, over all the parts' pieces
	 * together: no id is interned one by one, and the column comes out
	 * numbered in id order, so number_in_id_order has nothing left to do.
	 */
	void append_parts(std::vector<ByteReader> &parts, const PieceRunner &run = run_serially, bool take_chunks = false);

  private:
	/*
	 * A part's dictionary as serialize() wrote it, read in place: entries
	 * d = 0 .. entries - 1, each an id with its rows; for a part of ids as
	 * codes, entry d is the id d, which the part holds where it has rows.
	 */
	struct PartDictionary
	{
		bool ids_as_codes;
		size_t entries;
		size_t held; /* the entries with rows */
		const uint8_t *values;
		const uint8_t *counts;
		int64_t id(size_t d) const
		{
			if (ids_as_codes)
				return static_cast<int64_t>(d);
			int64_t id;
			std::memcpy(&id, values + d * sizeof id, sizeof id);
			return id;
		}
		int64_t count(size_t d) const
		{
			if (ids_as_codes)
			{
				uint32_t rows;
				std::memcpy(&rows, counts + d * sizeof rows, sizeof rows);
				return rows;
			}
			int64_t count;
			std::memcpy(&count, counts + d * sizeof count, sizeof count);
			return count;
		}
		bool holds(size_t d) const { return !ids_as_codes || count(d) != 0; }
	};
	static PartDictionary read_dictionary(ByteReader &in);
	/* Each of the part's ids' code here, -1 where the column lacks it; the known ones' rows counted. */
	std::vector<int32_t> known_codes(const PartDictionary &part, const PieceRunner &run);
	/* append_serialized() once the part's dictionary is read. */
	void append_part(const PartDictionary &dictionary, ByteReader &in, const PieceRunner &run, bool take_chunks);
	/* The union of this column's ids and the parts' numbered in id order (append_parts); false, and nothing done, where some id is beyond the direct array. */
	bool number_union_in_id_order(const std::vector<PartDictionary> &parts, const PieceRunner &run);

	/*
	 * append_parts of parts all of ids as codes, into a column of ids as
	 * codes: their rows counted, their codes kept.  False, and the readers
	 * as they were, where the rows would be more than a count holds.
	 */
	bool add_parts_of_ids_as_codes(const std::vector<PartDictionary> &parts, std::vector<ByteReader> &readers,
								   const PieceRunner &run, bool take_chunks);

	/* Ids below this are looked up in a direct array (dense_) when they are dense enough. */
	static constexpr uint64_t kMaxDirectIds = uint64_t(1) << 22;
	/*
	 * Whether an array over `span` integers is worth it for `ids` of them:
	 * an eighth of it in use once past its first 64k (the direct array's
	 * rule, and that of ids as codes past their fixed room).
	 */
	static bool dense_enough(size_t span, size_t ids) { return span <= 8 * ids + 65536; }
	/* Ids as codes count the rows of every integer below the largest id: up to this many, or 8 for each id held. */
	static constexpr size_t kIdsAsCodesRoom = size_t(1) << 20;

	/*
	 * Whether `n` more rows of ids at most `largest` stay ids as codes:
	 * id_rows_ grown to hold `largest` where the limits allow.
	 */
	bool keeps_as_code(uint64_t largest, size_t n);

	/* Makes dense_ reach id, moving the ids it now covers out of the hash table; false when too sparse. */
	bool cover_directly(uint64_t id);
	void rebuild_table(size_t capacity);
	/* The code of id, added to the dictionary (with no row) when new. */
	int32_t intern(int64_t id);
	int32_t new_code(int64_t id);

	/* an open-addressing slot: the id beside its code, so a probe is one cache line */
	struct Slot
	{
		int64_t id;
		int32_t code; /* -1: empty */
	};

	ChunkedColumn<int32_t> codes_;
	std::vector<int64_t> values_;
	std::vector<int64_t> counts_;
	/*
	 * The code of each id in [0, dense_.size()), or -1: serial keys, most
	 * inputs' ids, are found by one look into an array a fraction of the
	 * hash table's size (in cache, where the table's random probes are
	 * not).  The hash table holds every other id.
	 */
	std::vector<int32_t> dense_;
	std::vector<Slot> table_;
	size_t mask_ = 0;
	size_t hashed_ = 0;
	bool numbered_in_id_order_ = true;
	/* ids as codes: the rows of each id below id_rows_.size(), and how many have any */
	bool ids_as_codes_ = false;
	std::vector<uint32_t> id_rows_;
	size_t ids_held_ = 0;
};

/*
 * How the input spelled a number column.  Ordering and ties must be exact for
 * every input type, so numbers are held as 64-bit order keys: comparing two
 * keys as signed integers compares the input values as PostgreSQL would
 * (NaN above everything, -0 equal to 0), and each key converts back to the
 * exact input value for output.
 */
enum class NumberType : uint8_t
{
	Integer, /* smallint, integer, bigint: key = value */
	Float4,	 /* real: key = order bits of the (exactly widened) double */
	Float8,	 /* double precision: key = order bits of the double */
	Numeric	 /* numeric: key = value * 10^scale(), special values at the ends */
};

/* Order keys of doubles: monotone, NaN canonical and highest, -0 == 0. */
inline int64_t order_key_from_double(double d)
{
	int64_t bits;
	if (std::isnan(d))
		d = std::numeric_limits<double>::quiet_NaN();
	if (d == 0)
		d = 0; /* folds -0 into +0 */
	std::memcpy(&bits, &d, sizeof bits);
	return bits >= 0 ? bits : bits ^ INT64_MAX;
}

inline double double_from_order_key(int64_t key)
{
	int64_t bits = key >= 0 ? key : key ^ INT64_MAX;
	double d;
	std::memcpy(&d, &bits, sizeof d);
	return d;
}

class NumberColumn
{
  public:
	/* Keys of numeric's special values; finite numerics lie strictly between. */
	static constexpr int64_t kNumericNaN = INT64_MAX;
	static constexpr int64_t kNumericPosInf = INT64_MAX - 1;
	static constexpr int64_t kNumericNegInf = INT64_MIN;
	/* display_scale() markers of those special values */
	static constexpr int16_t kScaleNaN = -1, kScalePosInf = -2, kScaleNegInf = -3;
	static constexpr int kMaxNumericScale = 18;

	explicit NumberColumn(NumberType type = NumberType::Integer) : type_(type) {}

	/* How errors name the column: `column "price" of the offers query`, say. */
	void set_description(std::string description) { description_ = std::move(description); }
	const std::string &description() const { return description_; }

	void set_type(NumberType type) { type_ = type; }
	NumberType type() const { return type_; }
	size_t size() const { return keys_.size(); }
	const ChunkedColumn<int64_t> &keys() const { return keys_; }
	int64_t key(size_t row) const { return keys_[row]; }

	void push_integer(int64_t v) { keys_.push_back(v); }
	void push_double(double v) { keys_.push_back(order_key_from_double(v)); }
	/*
	 * A finite numeric equal to unscaled * 10^-dscale.  The column holds
	 * every value exactly as a 64-bit integer at its largest scale (at most
	 * 18 decimals): value x 10^scale() within the finite key range.  A value
	 * that breaks that, or makes an earlier one break it, is ERROR 22003
	 * naming the value and the scale (numeric_range_error).
	 */
	void push_numeric(int64_t unscaled, int dscale) { push_numeric(unscaled, dscale, dscale); }
	/*
	 * The same value given at `scale`, shown with display_scale decimals:
	 * more than scale (trailing zeros past 18 decimals), or fewer when the
	 * value is another column's row at that column's scale (its digits past
	 * display_scale are zeros).
	 */
	void push_numeric(int64_t unscaled, int scale, int display_scale)
	{
		if (takes_as_is(unscaled, scale, display_scale))
			keys_.push_back(unscaled); /* the common case: the scale of every row before */
		else
			push_numeric_rescaling(unscaled, scale, display_scale);
	}
	void push_numeric_special(int16_t marker);
	/*
	 * n numerics, value_at(i) filling the i-th: push_numeric(unscaled,
	 * scale, display_scale), or push_numeric_special(display_scale) where
	 * display_scale is a special value's marker (< 0).  Written a chunk at
	 * a time where they all have the scales of the rows before (the common
	 * case), else one by one.
	 */
	template <typename ValueAt> void push_numerics(size_t n, ValueAt value_at)
	{
		bool as_they_are = true;
		for (size_t i = 0; i < n && as_they_are; ++i)
		{
			int64_t unscaled;
			int scale, display_scale;
			value_at(i, &unscaled, &scale, &display_scale);
			as_they_are = takes_as_is(unscaled, scale, display_scale);
		}
		if (as_they_are)
			keys_.append(n, [&](int64_t *out, size_t first, size_t count) {
				int scale, display_scale;
				for (size_t i = 0; i < count; ++i)
					value_at(first + i, &out[i], &scale, &display_scale);
			});
		else
			for (size_t i = 0; i < n; ++i)
			{
				int64_t unscaled;
				int scale, display_scale;
				value_at(i, &unscaled, &scale, &display_scale);
				if (display_scale < 0)
					push_numeric_special(static_cast<int16_t>(display_scale));
				else
					push_numeric(unscaled, scale, display_scale);
			}
	}
	/* Row `row` of a column of the same type, as pushing its input value would have added it. */
	void push_row_of(const NumberColumn &from, size_t row);
	/*
	 * A key of a column at `scale` as a value that compares across columns
	 * of other scales: a finite numeric at scale 18, exact in 128 bits,
	 * numeric's special values past every finite one in PostgreSQL's
	 * order; the key itself for the other types, whose keys have no scale.
	 */
	static __int128 comparable(int64_t key, NumberType type, int scale);
	/* The largest comparable value: NaN's, above every other key's. */
	static constexpr __int128 kLargestComparable = static_cast<__int128>(~static_cast<unsigned __int128>(0) >> 1);
	/* ERROR 22003: the value unscaled x 10^-dscale of the column `description` cannot be held at_scale. */
	[[noreturn]] static void raise_out_of_range(int64_t unscaled, int dscale, int at_scale,
												 const std::string &description);

	/*
	 * Drops every row.  Like a new column's, the keys of the rows to come
	 * are at the first finite row's scale, or larger (a special value
	 * first keeps the scale reached before): each piece has its own scale().
	 */
	void forget_rows() noexcept
	{
		keys_.forget_rows();
		display_scales_.forget_rows();
		uniform_scale_ = kMixedScales;
	}

	/* Numeric rows spelled with different display scales (1.5 and 1.50): their order may tell. */
	bool has_mixed_scales() const { return type_ == NumberType::Numeric && uniform_scale_ == kMixedScales && !keys_.empty(); }

	/* The column's common scale, and each row's own dscale (or marker); 0 unless numeric. */
	int scale() const { return scale_; }
	int16_t display_scale(size_t row) const
	{
		if (type_ != NumberType::Numeric)
			return 0;
		return uniform_scale_ != kMixedScales ? uniform_scale_ : display_scales_[row];
	}
	/*
	 * Numeric only: a finite row's value as unscaled * 10^-display_scale(row),
	 * for rows whose display scale is at most scale() (beyond it, the digits
	 * are zeros: see number_as_numeric).
	 */
	int64_t unscaled_at_display_scale(size_t row) const;

	/* The value as a double (exact for Float4/Float8; rounded otherwise). */
	double to_double(size_t row) const;

	void use_chunk_source(ChunkSource &source)
	{
		keys_.use_chunk_source(source);
		display_scales_.use_chunk_source(source);
	}

	/* The flat form: scales, the keys, and the display scales when they are mixed. */
	void serialize(ByteWriter &out) const;
	/*
	 * Appends a column of the same type that serialize() wrote.  The result
	 * holds the rows that pushing them one by one would have made, placed
	 * as ChunkedColumn::append_column places them: keys at the larger of
	 * the two scales (ERROR 22003 as push_numeric when a value cannot be
	 * held there), display scales kept per row.
	 */
	void append_serialized(ByteReader &in, const PieceRunner &run = run_serially, bool take_chunks = false);

  private:
	static constexpr int16_t kMixedScales = INT16_MIN;

	void push_numeric_rescaling(int64_t unscaled, int dscale, int display);
	/*
	 * Whether a finite numeric's key is `unscaled` as it is: it has the
	 * column's scale and the display scale of every row before (never a
	 * special value's marker, which the first row may have left there).
	 */
	bool takes_as_is(int64_t unscaled, int scale, int display_scale) const
	{
		return scale == scale_ && display_scale == uniform_scale_ && display_scale >= 0 &&
			   unscaled > kNumericNegInf && unscaled < kNumericPosInf;
	}
	void push_display_scale(int16_t scale);
	void rescale_to(int new_scale);

	[[noreturn]] void out_of_range(int64_t unscaled, int dscale, int at_scale) const
	{
		raise_out_of_range(unscaled, dscale, at_scale, description_);
	}

	NumberType type_;
	std::string description_ = "a numeric column";
	ChunkedColumn<int64_t> keys_;
	/*
	 * Numeric only: the dscale (or special marker) of every row while they
	 * all agree, as a numeric(p,s) column's do; kMixedScales once they differ,
	 * and then display_scales_ holds one per row.
	 */
	int16_t uniform_scale_ = kMixedScales;
	ChunkedColumn<int16_t> display_scales_;
	int scale_ = 0;
};

/*
 * What decides whether one NumberColumn could hold the rows of a numeric
 * input (every finite value exact at the largest scale among them, in 64
 * bits): that scale, and the value of largest magnitude.  Rows read apart
 * and never held in one column (the processes of a parallel read that
 * send partial results, shards) each carry theirs, so that joined they
 * raise ERROR 22003 where one column of all the rows would, though the
 * join holds only some of them.
 */
class NumericReach
{
  public:
	/* Every finite row of a numeric column; nothing for the other types. */
	void add_column(const NumberColumn &column);
	void add(const NumericReach &other);
	/* ERROR 22003, in NumberColumn's words naming `description`, where one column could not hold every row added. */
	void check(const std::string &description) const;

	/* The flat form; reading one that is not raises an internal error. */
	void serialize(ByteWriter &out) const;
	static NumericReach read(ByteReader &in);

  private:
	void add_value(int64_t unscaled, int scale);

	bool any_ = false; /* a finite value was added */
	int scale_ = 0;	   /* the largest scale among them */
	/* the value of largest magnitude (the lowest of equal magnitudes, at its lowest scale) */
	int64_t unscaled_ = 0;
	int value_scale_ = 0;
};

/* unscaled * 10^-scale as SQL spells it: 1000000000000, 0.0000001, -4.50 */
std::string decimal_text(int64_t unscaled, int scale);

/*
 * The words of ERROR 22003 for a numeric the engine cannot hold exactly, as
 * printf formats: the input layer raises it for a single value too large
 * for 64 bits, NumberColumn for one that breaks the column's common scale.
 */
namespace numeric_range_text {
constexpr const char *message = "numeric value %s of %s cannot be held exactly at scale %d";
constexpr const char *detail = "gpurec holds a numeric column exactly as 64-bit integers at its largest scale "
							   "(the most decimal places among its values; here %d, at most 18): every value "
							   "x 10^%d must lie within +-9223372036854775806.";
constexpr const char *hint = "Cast the column to double precision, or round it to fewer decimals.";
} // namespace numeric_range_text

class Int64Column : public ChunkedColumn<int64_t>
{
};

/*
 * int64 key -> a value >= 0, for at most the n keys it is made for: open
 * addressing, at most half full, so that a lookup is a probe or two.
 */
class KeyIndex
{
  public:
	explicit KeyIndex(size_t n)
	{
		size_t capacity = 16;
		while (capacity < 2 * n)
			capacity <<= 1;
		slots_.assign(capacity, Slot{0, -1});
		mask_ = capacity - 1;
	}
	/* False when key is there already. */
	bool insert(int64_t key, int32_t value)
	{
		for (size_t i = hash(key);; i = (i + 1) & mask_)
		{
			if (slots_[i].value < 0)
			{
				slots_[i] = Slot{key, value};
				return true;
			}
			if (slots_[i].key == key)
				return false;
		}
	}
	/* key's value, or -1. */
	int32_t find(int64_t key) const
	{
		for (size_t i = hash(key);; i = (i + 1) & mask_)
			if (slots_[i].value < 0 || slots_[i].key == key)
				return slots_[i].value;
	}

  private:
	struct Slot
	{
		int64_t key;
		int32_t value;
	};
	size_t hash(int64_t key) const
	{
		return static_cast<size_t>((static_cast<uint64_t>(key) * 0x9E3779B97F4A7C15ull) >> 20) & mask_;
	}
	std::vector<Slot> slots_;
	size_t mask_;
};

/*
 * A set of int64 keys, asked once for each row an input reads (whether to
 * keep the row): a bitmap over the keys' range where they are dense in it,
 * else a KeyIndex, so that an answer is a load or two.
 */
class KeyFilter
{
  public:
	explicit KeyFilter(std::vector<int64_t> keys);
	bool contains(int64_t key) const
	{
		if (!bits_.empty())
		{
			uint64_t at = static_cast<uint64_t>(key) - static_cast<uint64_t>(min_);
			return at < range_ && ((bits_[at >> 6] >> (at & 63)) & 1) != 0;
		}
		return index_.find(key) >= 0;
	}
	/* The keys, ascending, each once. */
	const std::vector<int64_t> &keys() const { return keys_; }

  private:
	std::vector<int64_t> keys_;
	int64_t min_ = 0;
	uint64_t range_ = 0;
	std::vector<uint64_t> bits_;
	KeyIndex index_{0};
};

class FloatColumn : public ChunkedColumn<double>
{
};

/* Booleans, or integers restricted to 0 and 1. */
class LabelColumn : public ChunkedColumn<uint8_t>
{
};

/*
 * One array of scores per row, flattened: row r's elements are
 * [row_begin(r), row_end(r)).  Elements keep their width, 4-byte floats for
 * real[] and 8-byte doubles for double precision[] (set_doubles() before the
 * first row), so that reading copies each array once, in bulk, and a GPU
 * gets half the bytes of real[] scores.  A NULL element reads as 0 and
 * valid() false; the validity bytes exist only from the first NULL on.
 */
class FloatArrayColumn
{
  public:

	void set_doubles(bool doubles);
	/*
	 * Appends a row of n elements.  data holds the elements that are there,
	 * packed, as floats or doubles; present is a bitmap (bit e % 8 of byte
	 * e / 8 set when element e is there, as PostgreSQL's arrays keep it), or
	 * null when every element is.
	 */
	void append_row(const void *data, size_t n, const uint8_t *present);

	size_t size() const { return begins_.size(); }
	/* The elements' index space: past every row's last element, gaps included (append_serialized). */
	size_t elements() const { return doubles_ ? doubles_column_.size() : floats_.size(); }
	/* Row r's elements: [row_begin(r), row_end(r)), together; the next row's need not follow. */
	int64_t row_begin(size_t r) const { return begins_[r]; }
	int64_t row_end(size_t r) const { return ends_[r]; }
	const std::vector<int64_t> &row_begins() const { return begins_; }

	bool doubles() const { return doubles_; }
	const ChunkedColumn<float> &floats() const { return floats_; }
	const ChunkedColumn<double> &double_values() const { return doubles_column_; }
	double value(size_t e) const { return doubles_ ? doubles_column_[e] : floats_[e]; }

	bool has_nulls() const { return !valid_.empty(); }
	/* 1 where an element is there, 0 where NULL; empty while no element was NULL */
	const ChunkedColumn<uint8_t> &valid() const { return valid_; }
	bool valid(size_t e) const { return valid_.empty() || valid_[e] != 0; }

	void use_chunk_source(ChunkSource &source)
	{
		floats_.use_chunk_source(source);
		doubles_column_.use_chunk_source(source);
		valid_.use_chunk_source(source);
	}

	/* The flat form: element width, each row's first and end element, elements, validity when any is NULL. */
	void serialize(ByteWriter &out) const;
	/*
	 * Appends the rows of a column of the same width that serialize() wrote,
	 * in order.  Its elements are not copied where their chunks came by
	 * reference: they join this column's as they are, after a gap
	 * (ChunkedColumn::append_serialized_in_place), and its rows' indices are
	 * moved to match.  A worker's 100,000-element arrays are thus read where
	 * the worker wrote them, as a fixed-width column's full chunks are.
	 */
	void append_serialized(ByteReader &in, const PieceRunner &run = run_serially);

  private:
	template <typename T> void append_values(ChunkedColumn<T> &to, const T *data, size_t n, const uint8_t *present);
	/* Makes valid_ reach index `end`: 1 for the elements before it, which were all there. */
	void extend_validity(size_t end);
	void append_validity(size_t n, const uint8_t *present);

	bool doubles_ = false;
	ChunkedColumn<float> floats_;
	ChunkedColumn<double> doubles_column_;
	ChunkedColumn<uint8_t> valid_;
	std::vector<int64_t> begins_;
	std::vector<int64_t> ends_;
};

} // namespace gpurec
