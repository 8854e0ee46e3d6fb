/*
 * column_chunks.hpp: the chunked storage every kind of column is made of
 * (ChunkedColumn), the memory its chunks come from (ChunkSource: by default
 * mapped chunks on huge pages), scratch vectors on the same memory
 * (BulkVector), and the PieceRunner through which a column's pieces are
 * copied or visited.  The kinds of column built on it: id_column.hpp,
 * number_column.hpp, float_column.hpp, array_column.hpp.
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
#include <cstdint>
#include <cstring>
#include <functional>
#include <new>
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
 * thousands of small calls.  With small_pages_first, the chunk's first 2 MiB
 * stay on 4 KiB pages: a column's first chunk, so that a column of a few
 * rows faults in a page or two, where its first touch of a huge page had
 * the kernel zero all 2 MiB (about 0.2 ms a column: most of a small call's
 * time, and most of a sharded call's overhead, in every shard and in the
 * merge).  A column that fills them pays about 512 small faults once.
 * Throws std::bad_alloc.
 */
void *allocate_chunk(size_t bytes, bool small_pages_first = false);
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

	/* huge blocks are aligned to their pages; smaller ones as T asks (a slot aligned to a cache line's part) */
	static constexpr std::align_val_t kAlignment{alignof(T)};

	T *allocate(size_t n)
	{
		size_t bytes = n * sizeof(T);
		return static_cast<T *>(bytes >= kHugeBytes ? allocate_chunk(bytes) : ::operator new(bytes, kAlignment));
	}
	void deallocate(T *p, size_t n) noexcept
	{
		if (n * sizeof(T) >= kHugeBytes)
			free_chunk(p, n * sizeof(T));
		else
			::operator delete(p, kAlignment);
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
	/* A column's first chunk: one that may hold a few rows only (see allocate_chunk). */
	virtual void *allocate_first(size_t bytes) { return allocate(bytes); }
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
			if (!by_reference && out.packs_integers() && out.chunk_placer() == nullptr)
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
		if (ChunkPlacer *placer = out.chunk_placer())
		{
			/* references the reader resolves in the memory the placer fills, whatever this column's own */
			out.put<uint8_t>(1);
			for (size_t c = 0; c < chunk_count(); ++c)
				out.put<uint64_t>(placer->place(chunk_data(c), chunk_rows(c) * sizeof(T), kChunkRows * sizeof(T)));
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
		size_t bytes = kChunkRows * sizeof(T);
		void *chunk = chunks_.empty() ? source_->allocate_first(bytes) : source_->allocate(bytes);
		chunks_.push_back(Chunk{static_cast<T *>(chunk), source_});
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

} // namespace gpurec
