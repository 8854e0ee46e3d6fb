/*
 * column_chunks.cpp: chunk memory (column_chunks.hpp): mapped at 2 MiB
 * boundaries and advised onto huge pages, unmapped whole, and the pages of
 * shared memory handed back to the kernel.
 */
#include "no_postgres.hpp"

#include "column_chunks.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <new>

namespace gpurec {

namespace {

constexpr size_t kHugePage = size_t(2) << 20;

size_t mapped_bytes(size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }

} // namespace

void *allocate_chunk(size_t bytes, bool small_pages_first)
{
	size_t rounded = mapped_bytes(bytes);
	/* map one huge page more, then unmap what lies before and after the aligned part */
	void *mapped = mmap(nullptr, rounded + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mapped == MAP_FAILED)
		throw std::bad_alloc();
	uintptr_t start = reinterpret_cast<uintptr_t>(mapped);
	uintptr_t aligned = (start + kHugePage - 1) & ~(uintptr_t(kHugePage) - 1);
	if (aligned > start)
		munmap(mapped, aligned - start);
	if (size_t after = start + kHugePage - aligned)
		munmap(reinterpret_cast<void *>(aligned + rounded), after);
	void *chunk = reinterpret_cast<void *>(aligned);
	size_t small = small_pages_first ? kHugePage : 0;
	if (rounded > small) /* advice only: failure is harmless */
		madvise(static_cast<uint8_t *>(chunk) + small, rounded - small, MADV_HUGEPAGE);
	return chunk;
}

void free_chunk(void *chunk, size_t bytes) noexcept
{
	if (chunk != nullptr)
		munmap(chunk, mapped_bytes(bytes));
}

void give_back_pages(void *memory, size_t bytes) noexcept
{
	auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
	uintptr_t first = (reinterpret_cast<uintptr_t>(memory) + page - 1) & ~(page - 1);
	uintptr_t end = (reinterpret_cast<uintptr_t>(memory) + bytes) & ~(page - 1);
	if (first < end)
		madvise(reinterpret_cast<void *>(first), end - first, MADV_REMOVE);
}

ChunkSource &mapped_chunks()
{
	struct Mapped final : ChunkSource
	{
		void *allocate(size_t bytes) override { return allocate_chunk(bytes); }
		void *allocate_first(size_t bytes) override { return allocate_chunk(bytes, true); }
		void release(void *chunk, size_t bytes) noexcept override { free_chunk(chunk, bytes); }
	};
	static Mapped source;
	return source;
}

} // namespace gpurec
