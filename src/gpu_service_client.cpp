/*
 * gpu_service_client.cpp: a backend's side of the GPU service
 * (gpu_service.hpp): connecting, asking for the status, sending a call and
 * waiting for its answer while checking for interrupts.
 */
#include "no_postgres.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <thread>

#include "gpu_service.hpp"
#include "gpu_service_wire.hpp"

namespace gpurec::service {

namespace {

/* How often a waiting backend checks for a cancel: well within the second a cancel may take. */
constexpr int kPollMs = 50;

constexpr const char *kServiceGone = "58000";

/* Error keeps a SQLSTATE's address: the service's codes are kept here for the backend's life. */
const char *interned_sqlstate(const char *code)
{
	static std::set<std::string> codes;
	std::string five(code, strnlen(code, 5));
	if (five.size() != 5)
		five = sqlstate::internal_error;
	return codes.insert(five).first->c_str();
}

Error service_gone(const std::string &when)
{
	return Error(kServiceGone, "the GPU service ended " + when,
				 "The service restarts by itself; the server log says why it ended.",
				 "Run the call again.");
}

/* Closes a descriptor when it goes out of scope. */
struct Descriptor
{
	int fd;
	~Descriptor()
	{
		if (fd >= 0)
			close(fd);
	}
};

/*
 * Places a call's chunks after its message (ByteWriter::place_chunks): each
 * at a page boundary of the area, the reference its offset there plus one
 * (0 means no reference).  Without an area it only counts; with one it
 * lists the copies, which the caller runs on its cores.  A chunk that lies
 * in the service's shared memory already (a lease's, from a parallel read)
 * is referred to where it is, and neither counted nor copied.
 */
class ChunkPlacement final : public ChunkPlacer
{
  public:
	ChunkPlacement(uint8_t *area, const uint8_t *shared, size_t shared_bytes)
		: area_(area), shared_(shared), shared_bytes_(shared_bytes)
	{
	}

	uint64_t place(const void *data, size_t bytes, size_t reserve) override
	{
		auto *at = static_cast<const uint8_t *>(data);
		if (shared_ && at >= shared_ && static_cast<size_t>(at - shared_) <= shared_bytes_ &&
			reserve <= shared_bytes_ - static_cast<size_t>(at - shared_))
		{
			in_place_bytes += bytes;
			return wire::kInShared | static_cast<uint64_t>(at - shared_);
		}
		size_t offset = area_bytes;
		area_bytes += wire::page_aligned(reserve);
		copied_bytes += bytes;
		if (area_ && bytes > 0)
			copies.push_back({area_ + offset, data, bytes});
		return offset + 1;
	}

	uint64_t room(size_t bytes, uint8_t **at) override
	{
		size_t offset = area_bytes;
		area_bytes += wire::page_aligned(bytes);
		copied_bytes += bytes;
		*at = area_ ? area_ + offset : nullptr;
		return offset + 1;
	}

	size_t area_bytes = 0;
	size_t in_place_bytes = 0, copied_bytes = 0;
	std::vector<gpu::HostCopy> copies;

  private:
	uint8_t *area_;
	const uint8_t *shared_;
	size_t shared_bytes_;
};

} // namespace

Client::~Client() { disconnect(); }

void Client::disconnect()
{
	if (socket_ >= 0)
		close(socket_);
	socket_ = -1;
	known_ = false;
	/*
	 * another service, after a restart, has other shared memory: mapped
	 * again from its status (this mapping stays while a lease's chunks are
	 * read from it)
	 */
	mapping_.reset();
	shared_ = nullptr;
	shared_bytes_ = 0;
}

void Client::connect_waiting(ExecContext &ctx, int wait_ms)
{
	if (socket_ >= 0)
		return;
	auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
	for (;;)
	{
		int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (fd < 0)
			throw Error(kServiceGone, std::string("could not reach the GPU service: ") + std::strerror(errno));
		struct sockaddr_un address;
		socklen_t length;
		try
		{
			length = wire::socket_address(&address);
		}
		catch (...)
		{
			close(fd);
			throw;
		}
		if (connect(fd, reinterpret_cast<struct sockaddr *>(&address), length) == 0)
		{
			socket_ = fd;
			return;
		}
		int err = errno;
		close(fd);
		/* a service that is starting or restarting has no socket yet, or does not listen yet */
		if ((err != ENOENT && err != ECONNREFUSED && err != EAGAIN) || std::chrono::steady_clock::now() >= deadline)
			throw Error(kServiceGone, "the GPU service is not running",
						std::string("Connecting to its socket failed: ") + std::strerror(err) + ".",
						"It starts with the server when gpurec is in shared_preload_libraries; the server log "
						"says why it is not running.");
		ctx.check_interrupts();
		std::this_thread::sleep_for(std::chrono::milliseconds(20));
	}
}

namespace {

/* A status request's answer, at least this long awaited: the service's main thread answers it at once. */
constexpr int kStatusAnswerMs = 1000;

/*
 * Waits for the service's answer on `socket`, checking for interrupts
 * every kPollMs; returns its size, 0 when the service went away.  Where
 * limit_ms >= 0, a service that has not answered by then is ERROR 58000:
 * it is not running as a service should (stopped, or its main thread
 * stuck), and waiting longer would hang the call.
 */
size_t await_reply(int socket, void *buffer, size_t capacity, int *fd, ExecContext &ctx, int limit_ms = -1)
{
	/* the session shows as waiting (pg_stat_activity's wait_event 'Extension') while the service works */
	struct Waiting
	{
		ExecContext &ctx;
		explicit Waiting(ExecContext &c) : ctx(c) { ctx.waiting(true); }
		~Waiting() { ctx.waiting(false); }
	} waiting(ctx);
	auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
	for (;;)
	{
		struct pollfd polled = {socket, POLLIN, 0};
		int ready = poll(&polled, 1, kPollMs);
		if (ready > 0)
			return wire::receive_message(socket, buffer, capacity, fd);
		if (ready < 0 && errno != EINTR)
			return 0;
		ctx.check_interrupts();
		if (limit_ms >= 0 && std::chrono::steady_clock::now() >= deadline)
			throw Error(kServiceGone, "the GPU service is not running",
						"It has not answered for " + std::to_string((limit_ms + 999) / 1000) + " s.",
						"Its process may be stopped or stuck: the server log says what it last did, and "
						"gpurec.devices() shows its pid.");
	}
}

} // namespace

Status Client::status(ExecContext &ctx, int wait_ms)
{
	auto reply = std::make_unique<wire::StatusReply>();
	std::chrono::steady_clock::time_point asked;
	for (int attempt = 0;; ++attempt)
	{
		connect_waiting(ctx, wait_ms);
		wire::Header request{wire::kVersion, wire::Kind::StatusRequest};
		int fd = -1;
		size_t got = 0;
		asked = std::chrono::steady_clock::now();
		try
		{
			if (wire::send_message(socket_, &request, sizeof request, -1))
				got = await_reply(socket_, reply.get(), sizeof *reply, &fd, ctx, std::max(wait_ms, kStatusAnswerMs));
		}
		catch (...)
		{
			disconnect();
			throw;
		}
		Descriptor area{fd};
		if (got >= offsetof(wire::StatusReply, devices) && reply->header.kind == wire::Kind::StatusReply &&
			reply->header.version == wire::kVersion && reply->device_count <= wire::kMaxDevices &&
			got == offsetof(wire::StatusReply, devices) + reply->device_count * sizeof(wire::DeviceRecord))
		{
			if (!shared_ && area.fd >= 0 && reply->shared_bytes > 0)
			{
				/* without it, calls bring their input in memfds of their own */
				try
				{
					size_t bytes = reply->shared_bytes;
					shared_ = wire::map_shared(area.fd, bytes, true);
					shared_bytes_ = bytes;
					mapping_ = std::shared_ptr<uint8_t>(shared_, [bytes](uint8_t *at) { wire::unmap_shared(at, bytes); });
				}
				catch (const Error &)
				{
				}
			}
			break;
		}
		disconnect();
		/* a connection kept from a service that has since restarted: once more on a fresh one */
		if (attempt > 0)
			throw service_gone("before it answered");
	}
	double took_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - asked).count();
	round_trip_ms_ = known_ ? std::min(round_trip_ms_, took_ms) : took_ms;
	Status status;
	status.pid = reply->pid;
	status.upload_bytes_per_ms = reply->upload_bytes_per_ms;
	status.call_ms = reply->call_ms;
	status.shared_bytes = reply->shared_bytes;
	status.shared_in_use = reply->shared_in_use;
	status.stand_ins = reply->stand_ins != 0;
	for (uint32_t d = 0; d < reply->device_count; ++d)
	{
		const wire::DeviceRecord &r = reply->devices[d];
		DeviceStatus s;
		s.info = {r.device_id, r.name, r.compute_capability, r.total_memory_bytes, r.free_memory_bytes,
				  r.multiprocessors};
		s.calls_running = r.calls_running;
		s.calls_queued = r.calls_queued;
		s.memory_used = r.memory_used;
		status.devices.push_back(s);
	}
	last_status_ = status;
	why_no_device_ = reply->why_no_device;
	known_ = true;
	return status;
}

bool Client::has_devices(ExecContext &ctx, std::string *why_not, int wait_ms)
{
	if (!known_)
		status(ctx, wait_ms);
	if (why_not)
		*why_not = why_no_device_.empty() ? "the GPU service has no usable GPU" : why_no_device_;
	return !last_status_.devices.empty();
}

template <typename Request, typename Reply> bool Client::exchange(const Request &request, Reply *reply, ExecContext &ctx)
{
	int fd = -1;
	size_t got = 0;
	try
	{
		if (wire::send_message(socket_, &request, sizeof request, -1))
			got = await_reply(socket_, reply, sizeof *reply, &fd, ctx);
	}
	catch (...)
	{
		disconnect();
		throw;
	}
	if (fd >= 0)
		close(fd);
	return got == sizeof *reply && reply->header.kind == Reply{}.header.kind;
}

uint64_t Client::reserve(size_t bytes, ExecContext &ctx, uint64_t token)
{
	if (socket_ < 0 || !known_ || !shared_ || bytes > shared_bytes_)
		return wire::kNotShared;
	wire::ReserveRequest request;
	request.bytes = bytes;
	request.token = token;
	wire::ReserveReply reply;
	if (!exchange(request, &reply, ctx))
	{
		/* a service gone since the last call: the call goes on a fresh connection, in a memfd */
		disconnect();
		return wire::kNotShared;
	}
	if (!reply.ok || reply.offset > shared_bytes_ || bytes > shared_bytes_ - reply.offset)
		return wire::kNotShared;
	return reply.offset;
}

uint64_t Lease::reference(size_t at) const { return wire::kInShared | (offset + at); }

bool Lease::names_shared(uint64_t reference) { return (reference & wire::kInShared) != 0; }

void *Lease::address(uint64_t reference, size_t chunk_bytes) const
{
	if (!names_shared(reference) || bytes == 0)
		return nullptr;
	uint64_t in = (reference & ~wire::kInShared) - offset; /* wraps far past bytes when below the lease */
	if (in > bytes || chunk_bytes > bytes - in)
		return nullptr;
	return at() + in;
}

Lease Client::lease(size_t bytes, ExecContext &ctx)
{
	Lease lease;
	try
	{
		status(ctx, 0); /* what is free now */
	}
	catch (const Error &)
	{
		return lease; /* no service at once: the read goes on without */
	}
	if (!shared_ || last_status_.shared_bytes <= last_status_.shared_in_use)
		return lease;
	/* at most three quarters of what is free, so that calls of other sessions still find room */
	size_t free_bytes = last_status_.shared_bytes - last_status_.shared_in_use;
	bytes = wire::page_aligned(std::min(bytes, free_bytes / 4 * 3));
	if (bytes == 0)
		return lease;
	uint64_t token = 0;
	while (token == 0)
		token = (static_cast<uint64_t>(std::random_device()()) << 32) ^ std::random_device()();
	uint64_t offset = reserve(bytes, ctx, token);
	if (offset == wire::kNotShared)
		return lease;
	lease.offset = offset;
	lease.bytes = bytes;
	lease.token = token;
	lease.service_pid = last_status_.pid;
	lease.mapping = mapping_;
	return lease;
}

Lease Client::hold(uint64_t offset, uint64_t token, int32_t service_pid, ExecContext &ctx)
{
	Lease lease;
	try
	{
		if (!known_)
			status(ctx, 0);
	}
	catch (const Error &)
	{
		return lease;
	}
	if (!shared_ || last_status_.pid != service_pid || offset >= shared_bytes_)
		return lease;
	wire::HoldRequest request;
	request.offset = offset;
	request.token = token;
	wire::HoldReply reply;
	if (!exchange(request, &reply, ctx) || reply.bytes == 0 || reply.bytes > shared_bytes_ - offset)
		return lease;
	lease.offset = offset;
	lease.bytes = reply.bytes;
	lease.token = token;
	lease.service_pid = service_pid;
	lease.mapping = mapping_;
	return lease;
}

void Client::release(const Lease &lease) noexcept
{
	if (socket_ < 0 || lease.bytes == 0 || !mapping_ || lease.mapping != mapping_)
		return;
	wire::ReleaseRequest request;
	request.offset = lease.offset;
	try
	{
		if (!wire::send_message(socket_, &request, sizeof request, -1))
			disconnect();
	}
	catch (...)
	{
		disconnect(); /* closing lets every lease of the connection go */
	}
}

HostProfile Client::host_profile() const
{
	HostProfile host;
	host.through_service = true;
	if (!known_ || last_status_.upload_bytes_per_ms <= 0)
		return host;
	host.upload_bytes_per_ms = last_status_.upload_bytes_per_ms;
	host.call_ms = last_status_.call_ms + round_trip_ms_;
	host.gpus = std::max<int>(1, static_cast<int>(last_status_.devices.size()));
	host.measured = true;
	return host;
}

int32_t split_parts(size_t items, ExecContext &ctx)
{
	if (items < 2)
		return 1;
	int most = static_cast<int>(std::min<size_t>(static_cast<size_t>(ctx.service->device_count(ctx)), items));
	/*
	 * Work of unknown size (none dispatched) splits over every device, and so
	 * does all work on stand-in devices: their figures are not a GPU's, and
	 * what they are there to test is the split itself.
	 */
	if (ctx.gpu_work.units <= 0 || ctx.service->stand_ins(ctx))
		return most;
	return best_parts(ctx.gpu_work, ctx.service->host_profile(), most);
}

int32_t Client::device_count(ExecContext &ctx)
{
	if (!known_)
		status(ctx);
	return static_cast<int32_t>(last_status_.devices.size());
}

bool Client::stand_ins(ExecContext &ctx)
{
	if (!known_)
		status(ctx);
	return last_status_.stand_ins;
}

CallResult::CallResult(int fd, size_t bytes) : bytes_(bytes)
{
	/* a mapping past the memfd's end would fault when read: its size is checked first */
	struct stat shared;
	if (bytes > 0 && (fstat(fd, &shared) != 0 || static_cast<uint64_t>(shared.st_size) < bytes))
		throw Error(sqlstate::internal_error, "the GPU service's answer is smaller than it says");
	if (bytes > 0)
		data_ = wire::map_shared(fd, bytes, false);
}

CallResult::~CallResult()
{
	if (data_)
		wire::unmap_shared(data_, bytes_);
}

CallResult::CallResult(CallResult &&other) noexcept : data_(other.data_), bytes_(other.bytes_)
{
	other.data_ = nullptr;
	other.bytes_ = 0;
}

CallResult &CallResult::operator=(CallResult &&other) noexcept
{
	std::swap(data_, other.data_);
	std::swap(bytes_, other.bytes_);
	return *this;
}

CallResult Client::call(Function function, int64_t device_memory, const std::function<void(ByteWriter &)> &write_input,
						ExecContext &ctx, int32_t parts)
{
	/*
	 * The input's message, then its columns' chunks, each at a page of its
	 * own (ChunkPlacement), which the service reads where they are: one
	 * copy, on the call's cores, from the backend's columns to the GPU
	 * service's reach.
	 */
	/*
	 * The service's shared memory as the chunks are counted: a chunk in it
	 * is referred to where it is, and placing must see the same mapping,
	 * though reserve() below may find the service gone (and drop it) or
	 * map a restarted one's.
	 */
	const uint8_t *counted_shared = shared_;
	size_t counted_shared_bytes = shared_bytes_;
	ChunkPlacement counting(nullptr, counted_shared, counted_shared_bytes);
	ByteWriter counter;
	counter.place_chunks(&counting);
	write_input(counter);
	size_t message_bytes = counter.size();
	size_t area_offset = wire::page_aligned(message_bytes);
	size_t input_bytes = area_offset + counting.area_bytes;
	ctx.service_written_bytes += message_bytes + counting.copied_bytes;
	ctx.service_in_place_bytes += counting.in_place_bytes;
	auto write_at = [&](uint8_t *at) {
		ChunkPlacement placing(at + area_offset, counted_shared, counted_shared_bytes);
		ByteWriter writer(at, message_bytes);
		writer.place_chunks(&placing);
		write_input(writer);
		parallel_copy(placing.copies.data(), placing.copies.size(), ctx);
	};
	/*
	 * The input goes to the service's shared memory, pinned for its GPUs,
	 * where there is room; else to a memfd of the call's own.
	 */
	Stopwatch staging;
	uint64_t shared_offset = reserve(input_bytes, ctx);
	/*
	 * Chunks read in place lie in the shared memory of the service that
	 * leased it: one that ended since (its reserve found it gone, or mapped
	 * a new one's) cannot read them, and no other service can.
	 */
	if (counting.in_place_bytes > 0 && shared_ != counted_shared)
	{
		disconnect(); /* gives back a room a new service reserved */
		throw service_gone("during the call");
	}
	Descriptor input{-1};
	if (shared_offset != wire::kNotShared)
	{
		try
		{
			write_at(shared_ + shared_offset);
		}
		catch (...)
		{
			disconnect(); /* gives the room back */
			throw;
		}
	}
	else
	{
		uint8_t *shared = nullptr;
		input.fd = wire::create_shared(input_bytes, &shared);
		std::unique_ptr<uint8_t, std::function<void(uint8_t *)>> mapping(
			shared, [input_bytes](uint8_t *at) { wire::unmap_shared(at, input_bytes); });
		write_at(shared);
	}

	ctx.service_staged_ms += staging.elapsed_ms();

	wire::CallRequest request;
	request.shared_offset = shared_offset;
	request.function = static_cast<uint32_t>(function);
	request.mode = static_cast<int32_t>(ctx.mode);
	request.device_memory = device_memory;
	request.input_bytes = input_bytes;
	request.message_bytes = message_bytes;
	request.cpu_threads = ctx.cpu_threads;
	request.gpu_memory_budget = ctx.gpu_memory_budget;
	request.fault_at = ctx.fault.at > ctx.fault.seen ? ctx.fault.at - ctx.fault.seen : 0;
	request.fault_phase = static_cast<uint8_t>(ctx.fault.phase);
	request.fault_action = static_cast<uint8_t>(ctx.fault.action);
	request.fail_gpu_alloc = ctx.fail_gpu_alloc ? 1 : 0;
	request.parts = std::max<int32_t>(1, parts);

	std::vector<char> buffer(wire::kMaxMessage);
	size_t got = 0;
	Descriptor result{-1};
	Stopwatch answering;
	try
	{
		/* a kept connection may be to a service that has since restarted: then once more on a fresh one */
		connect_waiting(ctx, 10000);
		if (!wire::send_message(socket_, &request, sizeof request, input.fd))
		{
			if (shared_offset != wire::kNotShared)
				throw service_gone("before it took the call"); /* its room went with it */
			disconnect();
			connect_waiting(ctx, 10000);
			if (!wire::send_message(socket_, &request, sizeof request, input.fd))
				throw service_gone("before it took the call");
		}
		got = await_reply(socket_, buffer.data(), buffer.size(), &result.fd, ctx);
	}
	catch (...)
	{
		/* a cancel or a timeout: closing the connection cancels the call in the service */
		disconnect();
		throw;
	}
	ctx.service_answered_ms += answering.elapsed_ms();
	wire::CallReply reply;
	if (got < sizeof reply)
	{
		disconnect();
		throw service_gone("during the call");
	}
	std::memcpy(&reply, buffer.data(), sizeof reply);
	if (!reply.ok)
	{
		size_t texts = size_t(reply.message_length) + reply.detail_length + reply.hint_length;
		if (got != sizeof reply + texts)
		{
			disconnect();
			throw Error(sqlstate::internal_error, "the GPU service sent a malformed answer");
		}
		const char *at = buffer.data() + sizeof reply;
		std::string message(at, reply.message_length);
		std::string detail(at + reply.message_length, reply.detail_length);
		std::string hint(at + reply.message_length + reply.detail_length, reply.hint_length);
		const char *code = interned_sqlstate(reply.sqlstate);
		/* the service's GPU was full: under auto, the dispatch computes on the CPU instead */
		if (std::strcmp(code, sqlstate::out_of_memory) == 0)
			throw GpuOutOfMemory(message);
		throw Error(code, message, detail, hint);
	}
	if (result.fd < 0)
	{
		disconnect();
		throw Error(sqlstate::internal_error, "the GPU service answered without its result");
	}
	CallResult out(result.fd, reply.result_bytes);
	ctx.times.transfer_ms += reply.transfer_ms;
	ctx.times.compute_ms += reply.compute_ms;
	ctx.service_device = reply.device_id;
	ctx.service_devices = reply.parts;
	ctx.service_queued_ms += reply.queued_ms;
	return out;
}

} // namespace gpurec::service

namespace gpurec {

bool service_has_devices(ExecContext &ctx, std::string *why_not)
{
	if (ctx.mode == DeviceMode::Gpu)
		return ctx.service->has_devices(ctx, why_not);
	/*
	 * Under auto, a service that does not answer at once (starting again
	 * after a fault, say) is a reason to compute on the CPU, not to wait or
	 * to fail; a cancel still ends the call (it is no gpurec::Error).
	 */
	try
	{
		return ctx.service->has_devices(ctx, why_not, 0);
	}
	catch (const Error &e)
	{
		if (why_not)
			*why_not = e.what();
		return false;
	}
}

} // namespace gpurec
