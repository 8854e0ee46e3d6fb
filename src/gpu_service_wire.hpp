/*
 * gpu_service_wire.hpp: the messages between the GPU service and its
 * clients (gpu_service.hpp), and the socket and memfd helpers both sides
 * use.  Internal to gpu_service.cpp and gpu_service_client.cpp.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <sys/socket.h>
#include <sys/un.h>

#include "errors.hpp"

namespace gpurec::service::wire {

/* Bumped whenever a message changes: a backend and a service of different builds refuse each other. */
constexpr uint32_t kVersion = 7;

enum class Kind : uint32_t
{
	StatusRequest = 1,
	CallRequest = 2,
	StatusReply = 3,
	CallReply = 4,
	ReserveRequest = 5,
	ReserveReply = 6,
	HoldRequest = 7,
	HoldReply = 8,
	ReleaseRequest = 9,
};

struct Header
{
	uint32_t version = kVersion;
	Kind kind;
};

/* CallRequest::shared_offset of a call whose input is in a memfd of its own */
constexpr uint64_t kNotShared = UINT64_MAX;

/*
 * Room in the service's shared memory, `bytes` long: the reply's offset, or
 * none (ok 0) when there is no room.
 *   token 0: a call's input.  The room is the connection's until the call
 *     that names it ends, or the connection closes.
 *   any other token: a lease, where the processes of a parallel read write
 *     their columns' chunks for the calls that follow it.  Its holders are
 *     the connection and every connection that holds it with the token
 *     (HoldRequest: a worker's); it is given back when the last of them
 *     lets it go (ReleaseRequest, or its connection closes).  A call refers
 *     to chunks in a lease its connection holds (kInShared), which the call
 *     holds too while it runs.
 */
struct ReserveRequest
{
	Header header{kVersion, Kind::ReserveRequest};
	uint64_t bytes = 0;
	uint64_t token = 0;
};

struct ReserveReply
{
	Header header{kVersion, Kind::ReserveReply};
	uint8_t ok = 0;
	uint64_t offset = 0;
};

/* Holds the lease at `offset` (with its token) for this connection too: the reply's bytes, 0 when refused. */
struct HoldRequest
{
	Header header{kVersion, Kind::HoldRequest};
	uint64_t offset = 0;
	uint64_t token = 0;
};

struct HoldReply
{
	Header header{kVersion, Kind::HoldReply};
	uint64_t bytes = 0;
};

/* Lets the lease at `offset` go, for this connection; no reply. */
struct ReleaseRequest
{
	Header header{kVersion, Kind::ReleaseRequest};
	uint64_t offset = 0;
};

/*
 * A chunk reference (ChunkResolver) with this bit names the chunk's offset
 * in the service's shared memory, in a lease, rather than its place after
 * the call's message.
 */
constexpr uint64_t kInShared = uint64_t(1) << 63;

/*
 * A call; its input is in the service's shared memory at shared_offset (a
 * reservation of this connection), or else in the memfd that rides on the
 * message.
 */
struct CallRequest
{
	Header header{kVersion, Kind::CallRequest};
	uint64_t shared_offset = kNotShared;
	uint32_t function = 0;
	int32_t mode = 0; /* DeviceMode of the caller: Gpu or Auto */
	int64_t device_memory = 0;
	uint64_t input_bytes = 0;	/* the memfd's: the message, then (page-aligned) its chunks */
	uint64_t message_bytes = 0; /* the message's, from the start */
	uint64_t cpu_threads = 0;
	uint64_t gpu_memory_budget = 0;
	uint64_t fault_at = 0;
	uint8_t fault_phase = 0;
	uint8_t fault_action = 0;
	uint8_t fail_gpu_alloc = 0;
	int32_t parts = 1; /* split over up to this many devices (a function with a merger) */
};

/*
 * The answer to a call: ok with the result in the memfd that rides on it,
 * or an error whose message, detail and hint follow the struct in the same
 * message (their lengths given).
 */
struct CallReply
{
	Header header{kVersion, Kind::CallReply};
	uint8_t ok = 0;
	char sqlstate[6] = {};
	int32_t device_id = -1; /* the device that computed it; the first of them for a split call */
	int32_t parts = 1;		/* how many devices computed it */
	uint64_t result_bytes = 0;
	double transfer_ms = 0;
	double compute_ms = 0;
	double queued_ms = 0;
	uint32_t message_length = 0;
	uint32_t detail_length = 0;
	uint32_t hint_length = 0;
};

constexpr size_t kNameBytes = 96;

struct DeviceRecord
{
	int32_t device_id;
	char name[kNameBytes];
	char compute_capability[16];
	int64_t total_memory_bytes;
	int64_t free_memory_bytes;
	int32_t multiprocessors;
	int32_t calls_running;
	int32_t calls_queued;
	int64_t memory_used;
};

constexpr uint32_t kMaxDevices = 64;

struct StatusReply
{
	Header header{kVersion, Kind::StatusReply};
	int32_t pid = 0;
	uint32_t device_count = 0;
	/* why there is no device, when device_count is 0 */
	char why_no_device[256] = {};
	/* measured at the service's start on its first device (gpu::measure_device_costs): auto's cost model */
	double upload_bytes_per_ms = 0;
	double call_ms = 0;
	/* 1: the devices are stand-ins computing on the CPU (tests) */
	uint8_t stand_ins = 0;
	/*
	 * The service's shared memory, where calls put their input (its memfd
	 * rides on this reply when there is one), and how much of it calls hold
	 * now.  Pinned for the GPUs once, at the start.
	 */
	uint64_t shared_bytes = 0;
	uint64_t shared_in_use = 0;
	DeviceRecord devices[kMaxDevices];
};

/* The largest message either side sends: a call reply's texts are bounded to fit. */
constexpr size_t kMaxMessage = 16384 > sizeof(StatusReply) ? 16384 : sizeof(StatusReply);
constexpr size_t kMaxText = 4096;

/*
 * Sends one message with at most one descriptor (-1: none).  Returns false
 * when the peer is gone; throws on any other failure.
 */
bool send_message(int socket, const void *data, size_t bytes, int fd);

/*
 * Receives one message into buffer (at most capacity bytes) and the
 * descriptor that rode on it (-1: none).  Returns the message's size, 0 when
 * the peer is gone.
 */
size_t receive_message(int socket, void *buffer, size_t capacity, int *fd);

/* A memfd of `bytes` bytes, mapped read-write at *address; throws 53200 when memory runs out. */
int create_shared(size_t bytes, uint8_t **address);

/* The huge pages create_shared_on_huge_pages asks for: the x86-64 and arm64 default size. */
constexpr size_t kHugePage = size_t(2) << 20;

/*
 * The same on the system's huge pages of kHugePage (bytes a whole number
 * of them), their room reserved at once; -1 where there are not enough
 * free (vm.nr_hugepages) or the kernel has none.
 */
int create_shared_on_huge_pages(size_t bytes, uint8_t **address);

/* Maps `bytes` of fd; throws on failure. */
uint8_t *map_shared(int fd, size_t bytes, bool writable);

void unmap_shared(uint8_t *address, size_t bytes);

/*
 * The service's socket address: in the abstract namespace, named after the
 * data directory (the working directory's device and inode), so that one
 * server's backends find its service and no other's.  Returns the
 * address's length; throws when the directory cannot be read.
 */
socklen_t socket_address(struct sockaddr_un *address);

/* bytes rounded up to a whole number of pages: where a call's chunks start, and each chunk's room */
inline size_t page_aligned(size_t bytes)
{
	constexpr size_t kPage = 4096;
	return (bytes + kPage - 1) / kPage * kPage;
}

/* Copies a string into a fixed field, cut to fit, always terminated. */
void copy_text(char *to, size_t capacity, const std::string &from);

} // namespace gpurec::service::wire
