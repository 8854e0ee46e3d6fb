/*
 * gpu_service_memory.hpp: the GPU service's shared memory, where calls put
 * their input.  Internal to gpu_service.cpp.
 *
 * One memfd, made at the service's start, mapped by the service and by
 * every backend that talks to it (its descriptor rides on the status
 * reply), and pinned for every GPU once (gpu::register_host_memory): a
 * call's columns then go from where the backend wrote them to the GPU
 * directly, without a memfd, a mapping and a pinning per call, and without
 * the staging copy that memory not pinned takes.
 *
 * A backend asks the service for room (reserve), writes its input there and
 * names the room in its call; the room is the call's until it ends (release)
 * and, until a call names it, the connection's (release_unused when the
 * connection closes: a cancel, a backend's exit).  Room goes first fit, in
 * whole pages; a call that finds none sends its input in a memfd of its
 * own, as a service without shared memory has every call do.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace gpurec::service {

class SharedArea
{
  public:
	SharedArea() = default;
	~SharedArea();
	SharedArea(const SharedArea &) = delete;
	SharedArea &operator=(const SharedArea &) = delete;

	/* Makes the memfd of `bytes` bytes and maps it; throws gpurec::Error when it cannot. */
	void create(size_t bytes);

	int fd() const { return fd_; }
	uint8_t *base() const { return base_; }
	size_t bytes() const { return bytes_; }

	/* Room for `bytes` bytes, held by `owner` (a connection): its offset, or wire::kNotShared when there is none. */
	uint64_t reserve(size_t bytes, const void *owner);

	/*
	 * Makes owner's room at `offset` a call's, checking that it holds `bytes`:
	 * false when owner holds no such room (a confused or hostile client).
	 */
	bool take(uint64_t offset, size_t bytes, const void *owner);

	/* Gives back the room at `offset` (a call's, once it ended). */
	void release(uint64_t offset);

	/* Gives back the room `owner` holds that no call took (its connection closed). */
	void release_unused(const void *owner);

	/* The bytes held now, by calls and connections. */
	size_t in_use() const;

  private:
	struct Held
	{
		size_t bytes;
		const void *owner;
		bool taken;
	};
	void free_range(uint64_t offset, size_t bytes); /* with mutex_ held */

	int fd_ = -1;
	uint8_t *base_ = nullptr;
	size_t bytes_ = 0;
	mutable std::mutex mutex_; /* free_, held_: reserved by the service's loop, released by its workers */
	std::map<uint64_t, size_t> free_;
	std::map<uint64_t, Held> held_;
};

} // namespace gpurec::service
