/*
 * gpu_service_memory.cpp: the GPU service's shared memory
 * (gpu_service_memory.hpp).
 */
#include "no_postgres.hpp"

#include <unistd.h>

#include <algorithm>
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

void SharedArea::create(size_t bytes, bool huge_pages)
{
	bytes = bytes / 4096 * 4096;
	if (bytes == 0)
		return;
	if (huge_pages)
	{
		size_t whole = (bytes + wire::kHugePage - 1) / wire::kHugePage * wire::kHugePage;
		fd_ = wire::create_shared_on_huge_pages(whole, &base_);
		if (fd_ >= 0)
		{
			bytes = whole;
			huge_pages_ = true;
		}
	}
	if (fd_ < 0)
		fd_ = wire::create_shared(bytes, &base_);
	bytes_ = bytes;
	free_[0] = bytes;
}

uint64_t SharedArea::reserve(size_t bytes, const void *owner, uint64_t token)
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
			held_[offset] = {bytes, {owner}, false, token};
			return offset;
		}
	return wire::kNotShared;
}

bool SharedArea::take(uint64_t offset, size_t bytes, const void *owner)
{
	std::lock_guard<std::mutex> lock(mutex_);
	auto it = held_.find(offset);
	if (it == held_.end() || it->second.taken || it->second.token != 0 || it->second.bytes < bytes ||
		it->second.holders != std::vector<const void *>{owner})
		return false;
	it->second.taken = true;
	it->second.holders.clear();
	return true;
}

void SharedArea::release(uint64_t offset)
{
	std::lock_guard<std::mutex> lock(mutex_);
	auto it = held_.find(offset);
	if (it == held_.end() || it->second.token != 0)
		return;
	size_t bytes = it->second.bytes;
	held_.erase(it);
	free_range(offset, bytes);
}

size_t SharedArea::hold(uint64_t offset, uint64_t token, const void *holder)
{
	std::lock_guard<std::mutex> lock(mutex_);
	auto it = held_.find(offset);
	if (it == held_.end() || it->second.token == 0 || it->second.token != token)
		return 0;
	it->second.holders.push_back(holder);
	return it->second.bytes;
}

std::vector<std::pair<uint64_t, size_t>> SharedArea::hold_leases_of(const void *owner, const void *holder)
{
	std::lock_guard<std::mutex> lock(mutex_);
	std::vector<std::pair<uint64_t, size_t>> leases;
	for (auto &[offset, held] : held_)
		if (held.token != 0 && std::find(held.holders.begin(), held.holders.end(), owner) != held.holders.end())
		{
			held.holders.push_back(holder);
			leases.emplace_back(offset, held.bytes);
		}
	return leases;
}

void SharedArea::drop(uint64_t offset, const void *holder)
{
	std::lock_guard<std::mutex> lock(mutex_);
	auto it = held_.find(offset);
	if (it != held_.end() && it->second.token != 0)
		let_go(it, holder);
}

void SharedArea::release_unused(const void *owner)
{
	std::lock_guard<std::mutex> lock(mutex_);
	for (auto it = held_.begin(); it != held_.end();)
	{
		auto next = std::next(it);
		std::vector<const void *> &holders = it->second.holders;
		if (!it->second.taken && std::find(holders.begin(), holders.end(), owner) != holders.end())
		{
			holders.erase(std::remove(holders.begin(), holders.end(), owner), holders.end());
			if (holders.empty())
			{
				free_range(it->first, it->second.bytes);
				held_.erase(it);
			}
		}
		it = next;
	}
}

void SharedArea::let_go(std::map<uint64_t, Held>::iterator it, const void *holder)
{
	std::vector<const void *> &holders = it->second.holders;
	auto found = std::find(holders.begin(), holders.end(), holder);
	if (found == holders.end())
		return;
	holders.erase(found);
	if (holders.empty() && !it->second.taken)
	{
		uint64_t offset = it->first;
		size_t bytes = it->second.bytes;
		held_.erase(it);
		free_range(offset, bytes);
	}
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
