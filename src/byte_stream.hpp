/*
 * byte_stream.hpp: the flat form of engine columns that travels between
 * processes (a parallel worker's columns, sent to the backend that called).
 *
 * ByteWriter either counts (no buffer) or copies into a buffer of the
 * counted size, so that one serialize function, run twice, sizes and then
 * fills the destination without an intermediate copy.  ByteReader checks
 * every read against the end: a truncated or foreign buffer is an internal
 * error, never a read past it.
 */
#pragma once

#include <cstdint>
#include <cstring>

#include "errors.hpp"

namespace gpurec {

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
			std::memcpy(out_ + size_, data, n);
		}
		size_ += n;
	}
	template <typename T> void put(T value) { write(&value, sizeof value); }
	size_t size() const { return size_; }

  private:
	uint8_t *out_ = nullptr;
	size_t capacity_ = 0;
	size_t size_ = 0;
};

class ByteReader
{
  public:
	ByteReader(const uint8_t *data, size_t size) : data_(data), size_(size) {}

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
	bool at_end() const { return at_ == size_; }

  private:
	const uint8_t *data_;
	size_t size_;
	size_t at_ = 0;
};

} // namespace gpurec
