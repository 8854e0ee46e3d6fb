/*
 * chunk_arena.hpp: the tests' stand-in for a parallel worker's shared
 * memory, where the parts of columns that the tests join are written.
 */
#pragma once

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "../../src/byte_stream.hpp"
#include "../../src/column_chunks.hpp"

namespace gpurec {

/*
 * A worker's memory as the calling backend sees it: chunks the parts
 * allocate are named by references that the resolver turns back into
 * their addresses, and are freed only with the arena (as a parallel read's
 * shared memory is).
 */
class Arena final : public ChunkSource, public ChunkResolver
{
  public:
	~Arena()
	{
		for (void *chunk : chunks_)
			std::free(chunk);
	}
	void *allocate(size_t bytes) override
	{
		chunks_.push_back(std::malloc(bytes));
		return chunks_.back();
	}
	void release(void *, size_t) noexcept override {}
	uint64_t reference(const void *chunk) const override
	{
		for (size_t i = 0; i < chunks_.size(); ++i)
			if (chunks_[i] == chunk)
				return i + 1;
		return 0;
	}
	void *address(uint64_t reference, size_t) const override { return chunks_.at(reference - 1); }

  private:
	std::vector<void *> chunks_;
};

/* The flat form of `part`, its chunks written by reference where their source names them. */
template <typename Column> std::vector<uint8_t> serialized_by_reference(const Column &part)
{
	return serialized_bytes(part, [](ByteWriter &w) { w.allow_references(); });
}

} // namespace gpurec
