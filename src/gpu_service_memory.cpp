/*
 * gpu_service_memory.cpp: the GPU service's shared memory
 * (gpu_service_memory.hpp).
 */
#include "no_postgres.hpp"

#include <unistd.h>

#include <iterator>

#include "gpu_service_memory.hpp"
#include "gpu_service_wire.hpp"

namespace gpurec::service {

SharedArea::~SharedArea()
{
	wire::unmap_shared(base_, bytes_);
	if (fd_ >= 0)
		close(fd_);
}

void SharedArea::create(size_t bytes)
{
	bytes = bytes / 4096 * 4096;
	if (bytes == 0)
		return;
	fd_ = wire::create_shared(bytes, &base_);
	bytes_ = bytes;
	free_[0] = bytes;
}

uint64_t SharedArea::reserve(size_t bytes, const void *owner)
{
	bytes = wire::page_aligned(bytes == 0 ? 1 : bytes);
	std::lock_guard<std::mutex> lock(mutex_);
	for (auto it = free_.begin(); it != free_.end(); ++it)
		if (it->second >= bytes)
		{
			uint64_t offset = it->first;
			size_t left = it->second - bytes;
			free_.erase(it);
			if (left > 0)
				free_[offset + bytes] = left;
			held_[offset] = {bytes, owner, false};
			return offset;
		}
	return wire::kNotShared;
}

bool SharedArea::take(uint64_t offset, size_t bytes, const void *owner)
{
	std::lock_guard<std::mutex> lock(mutex_);
	auto it = held_.find(offset);
	if (it == held_.end() || it->second.taken || it->second.owner != owner || it->second.bytes < bytes)
		return false;
	it->second.taken = true;
	return true;
}

void SharedArea::release(uint64_t offset)
{
	std::lock_guard<std::mutex> lock(mutex_);
	auto it = held_.find(offset);
	if (it == held_.end())
		return;
	size_t bytes = it->second.bytes;
	held_.erase(it);
	free_range(offset, bytes);
}

void SharedArea::release_unused(const void *owner)
{
	std::lock_guard<std::mutex> lock(mutex_);
	for (auto it = held_.begin(); it != held_.end();)
		if (it->second.owner == owner && !it->second.taken)
		{
			uint64_t offset = it->first;
			size_t bytes = it->second.bytes;
			it = held_.erase(it);
			free_range(offset, bytes);
		}
		else
			++it;
}

size_t SharedArea::in_use() const
{
	std::lock_guard<std::mutex> lock(mutex_);
	size_t bytes = 0;
	for (const auto &held : held_)
		bytes += held.second.bytes;
	return bytes;
}

void SharedArea::free_range(uint64_t offset, size_t bytes)
{
	/* joined to the free ranges on either side, so that room does not crumble */
	auto next = free_.lower_bound(offset);
	if (next != free_.end() && offset + bytes == next->first)
	{
		bytes += next->second;
		next = free_.erase(next);
	}
	if (next != free_.begin())
	{
		auto previous = std::prev(next);
		if (previous->first + previous->second == offset)
		{
			previous->second += bytes;
			return;
		}
	}
	free_[offset] = bytes;
}

} // namespace gpurec::service
