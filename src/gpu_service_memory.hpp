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
 *
 * A lease (a room reserved with a token) is no call's: the processes of a
 * parallel read write their chunks there, and later calls read them in
 * place.  It has holders (the connection that reserved it, the workers'
 * connections that hold it with its token, and the calls that run on
 * them), and goes back when its last holder lets it go (drop), so that no
 * process still writing or reading it ever finds it another's.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace gpurec::service {

class SharedArea
{
  public:
	SharedArea() = default;
	~SharedArea();
	SharedArea(const SharedArea &) = delete;
	SharedArea &operator=(const SharedArea &) = delete;

	/*
	 * Makes the memfd of `bytes` bytes and maps it; throws gpurec::Error
	 * when it cannot.  With huge_pages, on the system's huge pages where it
	 * has enough of them free (bytes rounded up to whole huge pages), else
	 * on ordinary pages: every process that maps the area then fills in
	 * its own page table as it first touches each page, and with 2 MiB
	 * pages that is 512 times fewer faults than with 4 KiB ones (most of a
	 * new backend's extra cost in its first call).
	 */
	void create(size_t bytes, bool huge_pages = false);

	int fd() const { return fd_; }
	uint8_t *base() const { return base_; }
	size_t bytes() const { return bytes_; }
	/* Whether the area lies on huge pages. */
	bool on_huge_pages() const { return huge_pages_; }

	/*
	 * Room for `bytes` bytes, held by `owner` (a connection): its offset, or
	 * wire::kNotShared when there is none.  A token other than 0 makes it a
	 * lease.
	 */
	uint64_t reserve(size_t bytes, const void *owner, uint64_t token = 0);

	/*
	 * Makes owner's room at `offset` a call's, checking that it holds `bytes`:
	 * false when owner holds no such room (a confused or hostile client), or
	 * the room is a lease.
	 */
	bool take(uint64_t offset, size_t bytes, const void *owner);

	/* Gives back the room at `offset` (a call's, once it ended). */
	void release(uint64_t offset);

	/* Adds `holder` to the lease at `offset` if its token is `token`: the lease's bytes, 0 when refused. */
	size_t hold(uint64_t offset, uint64_t token, const void *holder);

	/*
	 * Adds `holder` to every lease `owner` holds, and returns them (offset,
	 * bytes): a call's, for as long as it may read them.
	 */
	std::vector<std::pair<uint64_t, size_t>> hold_leases_of(const void *owner, const void *holder);

	/* `holder` lets the lease at `offset` go; the last holder gives it back. */
	void drop(uint64_t offset, const void *holder);

	/* Gives back the room `owner` holds that no call took, and lets its leases go (its connection closed). */
	void release_unused(const void *owner);

	/* The bytes held now, by calls and connections. */
	size_t in_use() const;

  private:
	struct Held
	{
		size_t bytes;
		std::vector<const void *> holders; /* until a call takes it; a lease's, until the last lets go */
		bool taken;
		uint64_t token; /* 0: a call's input room; else a lease */
	};
	/* Removes one of holder's holds on the room at `it`, giving it back when none is left (with mutex_ held). */
	void let_go(std::map<uint64_t, Held>::iterator it, const void *holder);
	void free_range(uint64_t offset, size_t bytes); /* with mutex_ held */

	int fd_ = -1;
	bool huge_pages_ = false;
	uint8_t *base_ = nullptr;
	size_t bytes_ = 0;
	mutable std::mutex mutex_; /* free_, held_: reserved by the service's loop, released by its workers */
	std::map<uint64_t, size_t> free_;
	std::map<uint64_t, Held> held_;
};

} // namespace gpurec::service
