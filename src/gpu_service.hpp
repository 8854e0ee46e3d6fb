/*
 * gpu_service.hpp: the GPU service, one process per server that owns every
 * GPU gpurec uses, and the client through which a backend sends it work.
 *
 * Why a process of its own: a CUDA context costs a backend hundreds of
 * milliseconds to a second to create (more GPUs visible, more time), each
 * holds GPU memory, and a fault in GPU code must not take a backend, let
 * alone the cluster, with it.  The service creates each GPU's context once
 * and keeps it; backends hand it work and wait.
 *
 * The wire: a Unix socket of kind SOCK_SEQPACKET (one message a request,
 * its end seen at once when either side goes away) in Linux's abstract
 * namespace, named after the data directory, every server process's
 * working directory (no file that backups would meet); the service talks
 * only to processes of its own user.  Messages are small fixed
 * headers; the data of a call travels in a memfd whose descriptor rides on
 * the message (SCM_RIGHTS), both ways, so no row passes through the socket.
 * A client that goes away (a cancel, statement_timeout, the backend's exit)
 * cancels its call: the service drops it from the queue, or stops it at its
 * next interrupt point.
 *
 * What runs in the service is the engine's own code for a function's
 * device part (a Handler the family registers), with the same ExecContext
 * rules, so that answers are those of an in-process call.  Without a GPU
 * (CI), `stand_in_devices` makes the service present devices that compute
 * on the CPU, so that the protocol, queue and faults are tested everywhere.
 *
 * Plain C++: no PostgreSQL header.  pg_gpu_service.cpp starts and watches
 * the process and asks it for its status.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "byte_stream.hpp"
#include "cost_model.hpp"
#include "device.hpp"

namespace gpurec::service {

/* The device parts the service runs; numbers travel on the wire. */
enum class Function : uint32_t
{
	RocCountsArrays = 1,
	RocCountsLong = 2,
	GeoWork = 3,
	CheapestOffers = 4,
	CartSearch = 5,
};

/*
 * What the parts of one call share: what a handler prepares once for all of
 * them (the input read and checked, points grouped, ...).  The first part to
 * ask makes it, the others wait for it; it lives as long as the call's input.
 */
class CallState
{
  public:
	/* The call's prepared T, made by make() (a std::unique_ptr<T>) the first time. */
	template <typename T, typename Make> T &once(Make make)
	{
		std::call_once(made_, [&] { value_ = std::shared_ptr<T>(make()); });
		return *static_cast<T *>(value_.get());
	}

  private:
	std::once_flag made_;
	std::shared_ptr<void> value_;
};

/*
 * Which part of a call split over several devices a handler computes: part
 * `index` of `count`.  Every family splits the same way: part p takes the
 * p-th of `count` contiguous shares of its items in order (begin, end), and
 * its result is fields of those items (put_field), which the service
 * concatenates in part order (concatenate_parts): the unsplit result.
 */
struct Part
{
	int32_t index = 0;
	int32_t count = 1;
	/* the call's shared preparation (the service's; a handler called outside the service gets its own) */
	CallState *call = nullptr;

	size_t begin(size_t items) const { return items * static_cast<size_t>(index) / static_cast<size_t>(count); }
	size_t end(size_t items) const { return items * static_cast<size_t>(index + 1) / static_cast<size_t>(count); }
};

/*
 * What the service runs for a Function: reads the input the client wrote,
 * computes `part` of it with `ctx` (its mode Gpu on the device the service
 * chose, or Cpu on a stand-in device) and returns the result's bytes.
 * Throws as the engine does.
 */
using Handler = std::vector<uint8_t> (*)(ByteReader &input, const Part &part, ExecContext &ctx);

/*
 * Registers the handler of `function`; the family's file does it once, at
 * load.  A function that `splits` is split over the service's devices when
 * a call asks for it, a part each; its handler's result is fields
 * (put_field), every part's as many and of the same types.
 */
void register_handler(Function function, Handler handler, bool splits = false);

/* One field of a split function's result: its element size, then put_vector's form. */
template <typename T> void put_field(ByteWriter &out, const std::vector<T> &values)
{
	out.put<uint64_t>(sizeof(T));
	put_vector(out, values);
}

template <typename T> std::vector<T> get_field(ByteReader &in)
{
	if (in.get<uint64_t>() != sizeof(T))
		throw Error(sqlstate::internal_error, "the GPU service's answer has a field of another type");
	return get_vector<T>(in);
}

/*
 * The same field read where it lies, not copied: its `count` elements'
 * bytes (unaligned: copy them out with memcpy).
 */
template <typename T> const uint8_t *get_field_in_place(ByteReader &in, uint64_t &count)
{
	if (in.get<uint64_t>() != sizeof(T))
		throw Error(sqlstate::internal_error, "the GPU service's answer has a field of another type");
	count = in.get<uint64_t>();
	if (count > in.remaining() / sizeof(T))
		throw Error(sqlstate::internal_error, "ByteReader: a serialized vector longer than its bytes");
	return in.take(count * sizeof(T));
}

/*
 * The result of a split call from its parts' (in part order): each field
 * the concatenation of the parts' same field, in the form they have.
 */
std::vector<uint8_t> concatenate_parts(const std::vector<std::vector<uint8_t>> &parts);
/* The same, written to out (counting or copying). */
void write_concatenated(ByteWriter &out, const std::vector<std::vector<uint8_t>> &parts);

/* One device as the service sees it (gpurec.devices()). */
struct DeviceStatus
{
	gpu::DeviceInfo info;
	int32_t calls_running = 0;
	int32_t calls_queued = 0;
	int64_t memory_used = 0; /* admitted calls' estimates, bytes */
};

struct Status
{
	int32_t pid = 0;
	std::vector<DeviceStatus> devices;
	/* what the service measured at its start (no GPU: not measured) */
	double upload_bytes_per_ms = 0;
	double call_ms = 0;
	/* whether its devices are stand-ins computing on the CPU (gpurec.test_stand_in_devices) */
	bool stand_ins = false;
	/* its shared memory for calls' input, and the bytes calls hold in it now */
	uint64_t shared_bytes = 0;
	uint64_t shared_in_use = 0;
};

struct Options
{
	/* the device ids to use (gpurec.gpus); empty: every visible GPU */
	std::vector<int> gpus;
	/* test-only: this many devices computing on the CPU instead of GPUs (0: real GPUs) */
	int stand_in_devices = 0;
	/* a stand-in device's memory, bytes */
	int64_t stand_in_memory = 0;
	/* the shared memory calls put their input in (gpu_service_memory.hpp), bytes; 0: none */
	int64_t shared_memory_bytes = 0;
	/* whether that memory goes on the system's huge pages where it has enough (PostgreSQL's huge_pages not off) */
	bool huge_pages = true;
};

/*
 * Runs the service until `stop` says so or its socket cannot be made;
 * returns the process's exit status.  Logs a line per event to stderr.
 * Call it in a process of its own: it owns the GPUs and their contexts.
 */
int run(const Options &options, bool (*stop)());

/*
 * A lease: room in the service's shared memory where the processes of a
 * parallel read write their columns' chunks, so that the calls after the
 * read refer to them where they are, with no copy (wire::ReserveRequest).
 * Each process that writes there holds it on a connection of its own; the
 * mapping is kept by whatever borrows the chunks, so that a connection
 * closed meanwhile (a service that restarted) leaves them readable.
 */
struct Lease
{
	uint64_t offset = 0; /* in the service's shared memory */
	size_t bytes = 0;	 /* 0: no lease */
	uint64_t token = 0;
	int32_t service_pid = 0;
	std::shared_ptr<uint8_t> mapping; /* the service's shared memory, as this process maps it */

	uint8_t *at() const { return mapping.get() + offset; }
	/* The reference (ChunkSource::reference) of the lease's byte `at`. */
	uint64_t reference(size_t at) const;
	/* The address of a chunk of `chunk_bytes` that reference names, or null when it names none in the lease. */
	void *address(uint64_t reference, size_t chunk_bytes) const;
	/* Whether reference names a chunk in a lease (rather than one after a call's message or a DSA chunk). */
	static bool names_shared(uint64_t reference);
};

/*
 * A call's result where the service wrote it: its reply's memory, mapped
 * read-only for as long as the result lives (read in place, not copied).
 */
class CallResult
{
  public:
	CallResult() = default;
	/* Maps `bytes` of the memfd `fd` (which stays the caller's to close). */
	CallResult(int fd, size_t bytes);
	~CallResult();
	CallResult(CallResult &&other) noexcept;
	CallResult &operator=(CallResult &&other) noexcept;
	CallResult(const CallResult &) = delete;
	CallResult &operator=(const CallResult &) = delete;
	const uint8_t *data() const { return data_; }
	size_t size() const { return bytes_; }

  private:
	uint8_t *data_ = nullptr;
	size_t bytes_ = 0;
};

/*
 * A backend's connection to the service, kept between calls.  Every method
 * may throw gpurec::Error: 58000 when the service went away during a call
 * (or could not be reached), what the service's call raised otherwise.
 */
class Client
{
  public:
	Client() = default;
	~Client();
	Client(const Client &) = delete;
	Client &operator=(const Client &) = delete;

	/*
	 * The service's status.  Waits at most `wait_ms` for a service that is
	 * (re)starting, checking `ctx`'s interrupts.
	 */
	Status status(ExecContext &ctx, int wait_ms = 10000);

	/*
	 * Whether the service has a device, and if not why (from the last
	 * status; a first status waits at most `wait_ms` for the service).
	 */
	bool has_devices(ExecContext &ctx, std::string *why_not, int wait_ms = 10000);

	/*
	 * Runs `function` in the service: its input is what `write_input`
	 * writes (called with a counting writer first, then with one into the
	 * call's shared memory), `device_memory` the estimate of GPU memory it needs
	 * (for the queue).  Waits, checking ctx's interrupts; a cancel closes
	 * the connection, which cancels the call in the service.  Adds the
	 * service's phase times to ctx's.  What the service's call raised is
	 * raised here, its GPU running out of memory as GpuOutOfMemory.  A call
	 * of a function registered with a merger may ask to be split in up to
	 * `parts`, one a device.
	 */
	CallResult call(Function function, int64_t device_memory, const std::function<void(ByteWriter &)> &write_input,
					ExecContext &ctx, int32_t parts = 1);

	/*
	 * A lease of about `bytes` (less where the shared memory has less room
	 * free; none, bytes 0, where it has no room or the service does not
	 * answer at once), held by this connection until release().
	 */
	Lease lease(size_t bytes, ExecContext &ctx);

	/*
	 * Holds another process's lease on this connection too, for as long as
	 * it stays open: a worker's, which writes there.  No lease (bytes 0)
	 * where the service is another than the lease's, or refuses it.
	 */
	Lease hold(uint64_t offset, uint64_t token, int32_t service_pid, ExecContext &ctx);

	/* Lets a lease this connection took go; nothing when the connection is another since. */
	void release(const Lease &lease) noexcept;

	/* How many devices the service computes on (from the last status; asks for one first). */
	int32_t device_count(ExecContext &ctx);

	/* Whether those devices are stand-ins computing on the CPU (tests), from the same status. */
	bool stand_ins(ExecContext &ctx);

	/*
	 * The host as auto's cost model sees a call through the service: the
	 * service's measured figures, its devices and this connection's round
	 * trip, from the last status (the defaults before one).
	 */
	HostProfile host_profile() const;

  private:
	void connect_waiting(ExecContext &ctx, int wait_ms);
	void disconnect();
	/*
	 * Sends a request of a fixed size and waits for its reply: false when
	 * the reply is none or another (the service gone since), throwing (and
	 * closing the connection) on a cancel.
	 */
	template <typename Request, typename Reply> bool exchange(const Request &request, Reply *reply, ExecContext &ctx);
	/*
	 * Room for `bytes` in the service's shared memory on this connection: its
	 * offset, or wire's kNotShared.  A token other than 0 makes it a lease.
	 */
	uint64_t reserve(size_t bytes, ExecContext &ctx, uint64_t token = 0);

	int socket_ = -1;
	bool known_ = false; /* last_status_ is this connection's service's */
	Status last_status_;
	std::string why_no_device_;
	double round_trip_ms_ = 0; /* the least a status took on this connection */
	/* the service's shared memory, mapped from this connection's first status; null: none */
	uint8_t *shared_ = nullptr;
	size_t shared_bytes_ = 0;
	std::shared_ptr<uint8_t> mapping_; /* shared_'s, kept also by the leases taken through it */
};

/* A handler's result that is a vector of plain values: one field (put_field), so that its parts' concatenate. */
template <typename T> std::vector<uint8_t> vector_result(const std::vector<T> &values)
{
	return written_bytes([&](ByteWriter &writer) { put_field(writer, values); });
}

/* Runs `function` in ctx's service (Client::call, split in up to `parts`) and reads its vector_result. */
template <typename T>
std::vector<T> call_for_vector(Function function, int64_t device_memory,
							   const std::function<void(ByteWriter &)> &write_input, ExecContext &ctx,
							   int32_t parts = 1)
{
	CallResult bytes = ctx.service->call(function, device_memory, write_input, ctx, parts);
	ByteReader in(bytes.data(), bytes.size());
	std::vector<T> values = get_field<T>(in);
	if (!in.at_end())
		throw Error(sqlstate::internal_error, "the GPU service's answer has bytes past its result");
	return values;
}

/*
 * How many parts a call of `items` items that split asks for: at most one a
 * device of ctx's service and one an item, and no more than its work is
 * worth (best_parts, for the work dispatch sent to the GPU).
 */
int32_t split_parts(size_t items, ExecContext &ctx);

} // namespace gpurec::service
