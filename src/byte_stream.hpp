/*
 * byte_stream.hpp: the flat form of engine columns that travels between
 * processes (a parallel worker's columns, sent to the backend that called).
 *
 * ByteWriter either counts (no buffer) or copies into a buffer of the
 * counted size, so that one serialize function, run twice, sizes and then
 * fills the destination without an intermediate copy.  ByteReader checks
 * every read against the end: a truncated or foreign buffer is an internal
 * error, never a read past it.
 *
 * Between processes that map the same memory, a column's chunks may travel
 * by reference instead (ChunkedColumn::serialize): the writer allows it,
 * and the reader's ChunkResolver turns each reference into an address.
 * Where the bytes travel as text (a bytea through dblink, hex: two
 * characters a byte), the writer may pack integer columns instead, as
 * varints of each row's difference from the one before.
 */
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "errors.hpp"

namespace gpurec {

/*
 * Turns a chunk reference (ChunkSource::reference) into the chunk's address
 * in this process; `bytes` is the chunk's size.
 */
class ChunkResolver
{
  public:
	virtual void *address(uint64_t reference, size_t bytes) const = 0;

  protected:
	~ChunkResolver() = default;
};

/*
 * Where a writer puts chunks for a reader that maps the same memory, when
 * the chunks have no reference of their own there (the GPU service maps a
 * call's whole shared memory): place() gives the chunk room (`reserve`
 * bytes, at least its `bytes`), copies it there unless the writer only
 * counts, and returns its reference.
 */
class ChunkPlacer
{
  public:
	virtual uint64_t place(const void *data, size_t bytes, size_t reserve) = 0;
	/*
	 * Room for a chunk of `bytes` that the writer fills itself (arrays
	 * built straight where the reader maps them, with no copy after):
	 * its reference, and in *at its address, or null while the writer
	 * only counts.
	 */
	virtual uint64_t room(size_t bytes, uint8_t **at) = 0;

  protected:
	~ChunkPlacer() = default;
};

class ByteWriter
{
  public:
	/* A counting writer: size() tells what a copying one will need. */
	ByteWriter() = default;
	/* A copying writer into out, which holds capacity bytes. */
	ByteWriter(uint8_t *out, size_t capacity) : out_(out), capacity_(capacity) {}

	void write(const void *data, size_t n)
	{
		if (out_)
		{
			if (n > capacity_ - size_)
				throw Error(sqlstate::internal_error, "ByteWriter: more bytes than were counted");
			if (n > 0) /* an empty vector's data() may be null, which memcpy may not take even for 0 bytes */
				std::memcpy(out_ + size_, data, n);
		}
		size_ += n;
	}
	template <typename T> void put(T value) { write(&value, sizeof value); }
	size_t size() const { return size_; }

	/* An unsigned integer in 7-bit groups, low first, the high bit of each byte saying another follows. */
	void put_varint(uint64_t value)
	{
		uint8_t bytes[10];
		size_t n = 0;
		for (; value >= 0x80; value >>= 7)
			bytes[n++] = static_cast<uint8_t>(value | 0x80);
		bytes[n++] = static_cast<uint8_t>(value);
		write(bytes, n);
	}
	/* Chunks whose source names them may be written as references (for a reader with a resolver). */
	void allow_references() { by_reference_ = true; }
	bool by_reference() const { return by_reference_; }
	/* Every chunk goes to `placer` and is written as the reference it returns (ChunkedColumn::serialize). */
	void place_chunks(ChunkPlacer *placer) { placer_ = placer; }
	ChunkPlacer *chunk_placer() const { return placer_; }
	/* Integer columns may be written packed (ChunkedColumn::serialize): smaller, slower to read. */
	void pack_integers() { packs_integers_ = true; }
	bool packs_integers() const { return packs_integers_; }

  private:
	bool by_reference_ = false;
	bool packs_integers_ = false;
	ChunkPlacer *placer_ = nullptr;
	uint8_t *out_ = nullptr;
	size_t capacity_ = 0;
	size_t size_ = 0;
};

class ByteReader
{
  public:
	ByteReader(const uint8_t *data, size_t size, const ChunkResolver *resolver = nullptr)
		: data_(data), size_(size), resolver_(resolver)
	{
	}

	/* The next n bytes, in place. */
	const uint8_t *take(size_t n)
	{
		if (n > size_ - at_)
			throw Error(sqlstate::internal_error, "ByteReader: the serialized columns end early");
		const uint8_t *p = data_ + at_;
		at_ += n;
		return p;
	}
	template <typename T> T get()
	{
		T value;
		std::memcpy(&value, take(sizeof value), sizeof value);
		return value;
	}
	/* What put_varint wrote; at most ten bytes, the tenth holding one bit. */
	uint64_t get_varint()
	{
		uint64_t value = 0;
		for (int shift = 0;; shift += 7)
		{
			uint8_t byte = get<uint8_t>();
			if (shift == 63 && byte > 1)
				throw Error(sqlstate::internal_error, "ByteReader: a varint of more than 64 bits");
			value |= static_cast<uint64_t>(byte & 0x7f) << shift;
			if (!(byte & 0x80))
				return value;
		}
	}
	bool at_end() const { return at_ == size_; }
	size_t remaining() const { return size_ - at_; }
	/* Where chunks written by reference are; null when none may be. */
	const ChunkResolver *resolver() const { return resolver_; }

  private:
	const uint8_t *data_;
	size_t size_;
	const ChunkResolver *resolver_;
	size_t at_ = 0;
};

/* A vector of plain values in the flat form: its length, then its elements. */
template <typename T> void put_vector(ByteWriter &out, const std::vector<T> &values)
{
	out.put<uint64_t>(values.size());
	out.write(values.data(), values.size() * sizeof(T));
}

template <typename T> std::vector<T> get_vector(ByteReader &in)
{
	uint64_t n = in.get<uint64_t>();
	if (n > in.remaining() / sizeof(T))
		throw Error(sqlstate::internal_error, "ByteReader: a serialized vector longer than its bytes");
	std::vector<T> values(n);
	if (n > 0)
		std::memcpy(values.data(), in.take(n * sizeof(T)), n * sizeof(T));
	return values;
}

/* What `write(writer)` writes, as a vector: counted by a first call, then written by a second. */
template <typename Write> std::vector<uint8_t> written_bytes(Write write)
{
	ByteWriter counter;
	write(counter);
	std::vector<uint8_t> bytes(counter.size());
	ByteWriter writer(bytes.data(), bytes.size());
	write(writer);
	return bytes;
}

/*
 * The flat form of `object` (its serialize(ByteWriter &)) as a vector.
 * prepare(writer) sets up both writers alike (allow_references,
 * pack_integers).
 */
template <typename Object, typename Prepare = void (*)(ByteWriter &)>
std::vector<uint8_t> serialized_bytes(const Object &object, Prepare prepare = [](ByteWriter &) {})
{
	return written_bytes([&](ByteWriter &writer) {
		prepare(writer);
		object.serialize(writer);
	});
}

} // namespace gpurec
