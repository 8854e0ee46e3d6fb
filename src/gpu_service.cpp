/*
 * gpu_service.cpp: the GPU service process (gpu_service.hpp): its devices,
 * their queues, the socket loop, and the wire helpers both sides share.
 *
 * One thread polls the socket and every connection; one worker thread per
 * device runs that device's calls in arrival order, so a call waits for the
 * device's memory instead of failing for want of it, and the devices
 * compute at once.  A call goes to the device with the fewest calls running
 * and queued.  Each device keeps a share of its memory in its pool between
 * calls, so a warm service allocates without cudaMalloc.
 */
#include "no_postgres.hpp"

#include <fcntl.h>
#include <poll.h>
#include <linux/memfd.h> /* MFD_HUGE_2MB */
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "gpu_service.hpp"
#include "gpu_service_memory.hpp"
#include "gpu_service_wire.hpp"

namespace gpurec::service {

namespace {

struct Registered
{
	Handler handler;
	bool splits;
};

std::map<Function, Registered> &handlers()
{
	static std::map<Function, Registered> registered;
	return registered;
}

} // namespace

void register_handler(Function function, Handler handler, bool splits)
{
	handlers()[function] = {handler, splits};
}

std::vector<uint8_t> concatenate_parts(const std::vector<std::vector<uint8_t>> &parts)
{
	/* written twice (counted, then written): each time from the parts' starts */
	return written_bytes([&](ByteWriter &out) { write_concatenated(out, parts); });
}

void write_concatenated(ByteWriter &out, const std::vector<std::vector<uint8_t>> &parts)
{
	std::vector<ByteReader> readers;
	for (const std::vector<uint8_t> &part : parts)
		readers.emplace_back(part.data(), part.size());
	if (readers.empty())
		return;
	while (!readers.front().at_end())
	{
		uint64_t element = readers.front().get<uint64_t>();
		std::vector<std::pair<const uint8_t *, uint64_t>> pieces;
		uint64_t count = 0;
		for (size_t p = 0; p < readers.size(); ++p)
		{
			ByteReader &in = readers[p];
			if (p > 0 && (in.at_end() || in.get<uint64_t>() != element))
				throw Error(sqlstate::internal_error, "the parts of a split call disagree");
			uint64_t n = in.get<uint64_t>();
			if (element == 0 || n > in.remaining() / element)
				throw Error(sqlstate::internal_error, "a part of a split call has a field longer than its bytes");
			pieces.emplace_back(in.take(n * element), n);
			count += n;
		}
		out.put<uint64_t>(element);
		out.put<uint64_t>(count);
		for (const auto &piece : pieces)
			out.write(piece.first, piece.second * element);
	}
	for (ByteReader &in : readers)
		if (!in.at_end())
			throw Error(sqlstate::internal_error, "the parts of a split call disagree");
}

/* ---- the wire -------------------------------------------------------------- */

namespace wire {

bool send_message(int socket, const void *data, size_t bytes, int fd)
{
	struct iovec iov = {const_cast<void *>(data), bytes};
	struct msghdr msg = {};
	alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	if (fd >= 0)
	{
		msg.msg_control = control;
		msg.msg_controllen = sizeof control;
		struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
		cmsg->cmsg_level = SOL_SOCKET;
		cmsg->cmsg_type = SCM_RIGHTS;
		cmsg->cmsg_len = CMSG_LEN(sizeof(int));
		std::memcpy(CMSG_DATA(cmsg), &fd, sizeof fd);
	}
	for (;;)
	{
		ssize_t sent = sendmsg(socket, &msg, MSG_NOSIGNAL);
		if (sent == static_cast<ssize_t>(bytes))
			return true;
		if (sent < 0 && errno == EINTR)
			continue;
		if (sent < 0 && (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN))
			return false;
		throw Error("58000", std::string("could not send to the GPU service: ") + std::strerror(errno));
	}
}

size_t receive_message(int socket, void *buffer, size_t capacity, int *fd)
{
	*fd = -1;
	struct iovec iov = {buffer, capacity};
	struct msghdr msg = {};
	alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = control;
	msg.msg_controllen = sizeof control;
	ssize_t got;
	do
		got = recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
	while (got < 0 && errno == EINTR);
	if (got <= 0)
		return 0; /* the peer is gone, or the connection broke: either way it is over */
	for (struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg); cmsg; cmsg = CMSG_NXTHDR(&msg, cmsg))
		if (cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS)
			std::memcpy(fd, CMSG_DATA(cmsg), sizeof(int));
	if (msg.msg_flags & MSG_TRUNC)
	{
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
		return 0;
	}
	return static_cast<size_t>(got);
}

int create_shared(size_t bytes, uint8_t **address)
{
	int fd = memfd_create("gpurec-call", MFD_CLOEXEC);
	if (fd < 0)
		throw Error(sqlstate::out_of_memory, std::string("could not create shared memory for the GPU service: ") +
												 std::strerror(errno));
	if (bytes > 0 && ftruncate(fd, static_cast<off_t>(bytes)) != 0)
	{
		int err = errno;
		close(fd);
		throw Error(sqlstate::out_of_memory,
					"could not size " + std::to_string(bytes) + " bytes of shared memory for the GPU service: " +
						std::strerror(err));
	}
	try
	{
		*address = map_shared(fd, bytes, true);
	}
	catch (...)
	{
		close(fd);
		throw;
	}
	return fd;
}

int create_shared_on_huge_pages(size_t bytes, uint8_t **address)
{
#if defined(MFD_HUGETLB) && defined(MFD_HUGE_2MB)
	if (bytes == 0 || bytes % kHugePage != 0)
		return -1;
	int fd = memfd_create("gpurec-shared", MFD_CLOEXEC | MFD_HUGETLB | MFD_HUGE_2MB);
	if (fd < 0)
		return -1;
	/* the mapping reserves its huge pages: it fails here, not with a SIGBUS at a later first touch */
	void *at = MAP_FAILED;
	if (ftruncate(fd, static_cast<off_t>(bytes)) == 0)
		at = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (at == MAP_FAILED)
	{
		close(fd);
		return -1;
	}
	*address = static_cast<uint8_t *>(at);
	return fd;
#else
	(void) bytes;
	(void) address;
	return -1;
#endif
}

uint8_t *map_shared(int fd, size_t bytes, bool writable)
{
	if (bytes == 0)
		return nullptr;
	void *at = mmap(nullptr, bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
	if (at == MAP_FAILED)
		throw Error(sqlstate::out_of_memory, "could not map " + std::to_string(bytes) +
												 " bytes of the GPU service's shared memory: " + std::strerror(errno));
	return static_cast<uint8_t *>(at);
}

void unmap_shared(uint8_t *address, size_t bytes)
{
	if (address && bytes > 0)
		munmap(address, bytes);
}

socklen_t socket_address(struct sockaddr_un *address)
{
	struct stat directory;
	if (stat(".", &directory) != 0)
		throw Error("58000", std::string("could not read the data directory for the GPU service's socket: ") +
								 std::strerror(errno));
	*address = {};
	address->sun_family = AF_UNIX;
	/* sun_path[0] stays 0: the abstract namespace */
	int n = std::snprintf(address->sun_path + 1, sizeof address->sun_path - 1, "gpurec-gpu-service-%llx-%llx",
						  static_cast<unsigned long long>(directory.st_dev),
						  static_cast<unsigned long long>(directory.st_ino));
	return static_cast<socklen_t>(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

void copy_text(char *to, size_t capacity, const std::string &from)
{
	size_t n = std::min(capacity - 1, from.size());
	std::memcpy(to, from.data(), n);
	to[n] = '\0';
}

} // namespace wire

/* ---- the service ----------------------------------------------------------- */

namespace {

/* A test fault's longest wait, as in a backend (pg_settings.cpp). */
constexpr int kTestFaultMaxWaitMs = 30000;
const char *const kPhaseNames[] = {"read", "transfer", "compute", "output"};

void log_line(const char *format, const std::string &what)
{
	std::fprintf(stderr, "gpurec GPU service [%d]: ", static_cast<int>(getpid()));
	std::fprintf(stderr, format, what.c_str());
	std::fputc('\n', stderr);
	std::fflush(stderr);
}

/* Thrown inside a call whose client went away. */
struct ClientGone
{
};

/* A client's socket; closed when the last of the loop and its running call lets go. */
struct Connection
{
	int fd;
	explicit Connection(int fd_) : fd(fd_) {}
	~Connection() { close(fd); }
};

/*
 * A call's input, read by each of its parts: its message, and after it the
 * chunks the message refers to (ByteWriter::place_chunks), which columns
 * read from it borrow where they are.  In the service's shared memory (its
 * room given back when the last part ends), or a memfd of its own, mapped
 * once.  Chunks a parallel read left in a lease of the connection's are
 * referred to where they are (wire::kInShared); the input holds those
 * leases while it lives.
 */
struct Input final : ChunkResolver
{
	uint8_t *data = nullptr;
	size_t bytes = 0;
	size_t message_bytes = 0;
	SharedArea *area = nullptr; /* the room's, or null: data is a mapping of the call's own */
	uint64_t offset = 0;
	SharedArea *shared = nullptr; /* the service's shared memory, where the leases are */
	std::vector<std::pair<uint64_t, size_t>> leases;
	/* what its parts prepare once (it borrows data: it goes first) */
	std::unique_ptr<CallState> state = std::make_unique<CallState>();
	~Input()
	{
		state.reset();
		for (const auto &lease : leases)
			shared->drop(lease.first, this);
		if (area)
			area->release(offset);
		else
			wire::unmap_shared(data, bytes);
	}

	void *address(uint64_t reference, size_t chunk_bytes) const override
	{
		if (reference & wire::kInShared)
		{
			uint64_t at = reference & ~wire::kInShared;
			for (const auto &lease : leases)
				if (at >= lease.first && at - lease.first <= lease.second && chunk_bytes <= lease.second - (at - lease.first))
					return shared->base() + at;
			throw Error(sqlstate::internal_error, "the GPU service got a chunk outside the connection's leases");
		}
		size_t area = wire::page_aligned(message_bytes);
		if (area > bytes || reference == 0 || reference - 1 > bytes - area ||
			chunk_bytes > bytes - area - (reference - 1))
			throw Error(sqlstate::internal_error, "the GPU service got a chunk outside the call's memory");
		return data + area + (reference - 1);
	}
};

/* How one part of a call ended: its result, or an error to answer with. */
struct Outcome
{
	bool ok = false;
	bool client_gone = false;
	std::vector<uint8_t> result;
	std::string sqlstate = sqlstate::internal_error, message, detail, hint;
	double transfer_ms = 0, compute_ms = 0, queued_ms = 0;
	int32_t device_id = -1;
};

/* A call split over several devices: answered, merged, when its last part ends. */
struct Group
{
	std::mutex mutex;
	std::vector<Outcome> parts;
	int remaining = 0;
};

struct Job
{
	std::shared_ptr<Connection> client;
	wire::CallRequest request;
	std::shared_ptr<Input> input;
	Part part;
	std::shared_ptr<Group> group; /* null: the call is not split */
	std::atomic<bool> cancelled{false};
	std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now();
};

struct Device
{
	gpu::DeviceInfo info;
	bool stand_in = false;
	std::deque<std::shared_ptr<Job>> queue;
	std::shared_ptr<Job> running;
	std::thread worker;
};

class Service
{
  public:
	explicit Service(const Options &options) : options_(options) {}

	int serve(bool (*stop)());

  private:
	void find_devices();
	void measure_costs();
	void make_shared_area();
	void answer_reserve(Connection &connection, const wire::ReserveRequest &request);
	void work(Device &device);
	Outcome compute(Device &device, Job &job);
	void answer(Job &job, Outcome outcome);
	void reply_error(Connection &client, const std::string &sqlstate, const std::string &message,
					 const std::string &detail = {}, const std::string &hint = {});
	/* the result write_result writes (counting, then copying) into the reply's memory */
	void reply_result(Connection &client, const Outcome &outcome, int32_t parts,
					  const std::function<void(ByteWriter &)> &write_result);
	void answer_status(int fd);
	void take_call(const std::shared_ptr<Connection> &connection, const wire::CallRequest &request, int input_fd);
	void forget_connection(const std::shared_ptr<Connection> &connection);

	Options options_;
	/* before devices_: the inputs that jobs still hold give their room back to it */
	SharedArea area_;
	std::string why_no_device_;
	gpu::DeviceCosts costs_{}; /* measured on the first device at the start (none: zeros) */
	bool area_pinned_ = false;
	std::vector<std::unique_ptr<Device>> devices_;
	std::mutex mutex_; /* the queues, running calls and stopping_ */
	std::condition_variable wake_;
	bool stopping_ = false;
};

/* The share of a GPU's memory its pool keeps between calls (gpu::keep_device_memory). */
constexpr int64_t kKeptMemoryShare = 4;

void Service::find_devices()
{
	std::vector<gpu::DeviceInfo> found;
	if (options_.stand_in_devices > 0)
	{
		for (int d = 0; d < options_.stand_in_devices; ++d)
			found.push_back({d, "CPU stand-in", "", options_.stand_in_memory, options_.stand_in_memory, 0});
	}
	else if (!gpu::usable(&why_no_device_))
		log_line("%s", why_no_device_);
	else
		found = gpu::devices(); /* creates every GPU's context, once */
	for (const gpu::DeviceInfo &info : found)
	{
		bool wanted = options_.gpus.empty();
		for (int id : options_.gpus)
			wanted = wanted || id == info.device_id;
		if (!wanted)
			continue;
		auto device = std::make_unique<Device>();
		device->info = info;
		device->stand_in = options_.stand_in_devices > 0;
		if (!device->stand_in)
		{
			try
			{
				gpu::use_device(info.device_id);
				gpu::keep_device_memory(static_cast<size_t>(info.total_memory_bytes / kKeptMemoryShare));
			}
			catch (const std::exception &e)
			{
				log_line("%s", "device " + std::to_string(info.device_id) + " is left out: " + e.what());
				continue;
			}
		}
		devices_.push_back(std::move(device));
	}
	for (int id : options_.gpus)
	{
		bool present = false;
		for (const auto &device : devices_)
			present = present || device->info.device_id == id;
		if (!present)
			log_line("%s", "gpurec.gpus names device " + std::to_string(id) + ", which is not present");
	}
	if (devices_.empty() && why_no_device_.empty())
		why_no_device_ = found.empty() ? "no GPU was found" : "gpurec.gpus names none of the GPUs present";
}

void Service::measure_costs()
{
	if (devices_.empty())
		return;
	if (devices_.front()->stand_in)
	{
		/* a stand-in's "upload" is the copy its columns would take: host memory's rate on one thread */
		std::vector<char> from(size_t(32) << 20, 1), to(from.size());
		double best_ms = 0;
		for (int round = 0; round < 3; ++round)
		{
			auto started = std::chrono::steady_clock::now();
			std::memcpy(to.data(), from.data(), from.size());
			double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
			best_ms = round == 0 ? ms : std::min(best_ms, ms);
		}
		costs_.upload_bytes_per_ms = static_cast<double>(from.size()) / std::max(best_ms, 1e-3);
		costs_.call_ms = 0.01;
	}
	else
	{
		try
		{
			gpu::use_device(devices_.front()->info.device_id);
			/* from where calls' columns will be: the pinned shared memory, where it is large enough */
			costs_ = gpu::measure_device_costs(area_pinned_ && area_.bytes() >= gpu::kMeasuredBytes ? area_.base()
																								   : nullptr);
		}
		catch (const std::exception &e)
		{
			log_line("%s", std::string("could not measure the GPU's costs (auto uses its defaults): ") + e.what());
			costs_ = {};
			return;
		}
	}
	char measured[160];
	std::snprintf(measured, sizeof measured, "columns reach a GPU at %.1f GB/s, a GPU call's fixed cost %.3f ms",
				  costs_.upload_bytes_per_ms / 1e6, costs_.call_ms);
	log_line("measured: %s", measured);
}

void Service::reply_error(Connection &client, const std::string &sqlstate, const std::string &message,
						  const std::string &detail, const std::string &hint)
{
	char buffer[wire::kMaxMessage];
	wire::CallReply reply;
	std::memcpy(reply.sqlstate, sqlstate.c_str(), std::min<size_t>(5, sqlstate.size()));
	std::string texts[3] = {message.substr(0, wire::kMaxText), detail.substr(0, wire::kMaxText),
							hint.substr(0, wire::kMaxText)};
	reply.message_length = static_cast<uint32_t>(texts[0].size());
	reply.detail_length = static_cast<uint32_t>(texts[1].size());
	reply.hint_length = static_cast<uint32_t>(texts[2].size());
	size_t at = sizeof reply;
	std::memcpy(buffer, &reply, sizeof reply);
	for (const std::string &text : texts)
	{
		std::memcpy(buffer + at, text.data(), text.size());
		at += text.size();
	}
	wire::send_message(client.fd, buffer, at, -1);
}

void Service::reply_result(Connection &client, const Outcome &outcome, int32_t parts,
						   const std::function<void(ByteWriter &)> &write_result)
{
	uint8_t *shared = nullptr;
	int fd = -1;
	size_t bytes = 0;
	try
	{
		ByteWriter counter;
		write_result(counter);
		bytes = counter.size();
		fd = wire::create_shared(bytes, &shared);
		ByteWriter writer(shared, bytes);
		write_result(writer);
	}
	catch (const Error &e)
	{
		if (fd >= 0)
		{
			wire::unmap_shared(shared, bytes);
			close(fd);
		}
		reply_error(client, e.sqlstate(), e.what());
		return;
	}
	wire::unmap_shared(shared, bytes);
	wire::CallReply reply;
	reply.ok = 1;
	reply.device_id = outcome.device_id;
	reply.parts = parts;
	reply.result_bytes = bytes;
	reply.transfer_ms = outcome.transfer_ms;
	reply.compute_ms = outcome.compute_ms;
	reply.queued_ms = outcome.queued_ms;
	wire::send_message(client.fd, &reply, sizeof reply, fd);
	close(fd);
}

Outcome Service::compute(Device &device, Job &job)
{
	const wire::CallRequest &request = job.request;
	Outcome out;
	out.device_id = device.info.device_id;
	out.queued_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - job.arrived).count();
	auto found = handlers().find(static_cast<Function>(request.function));
	if (found == handlers().end())
	{
		out.message = "the GPU service has no function " + std::to_string(request.function);
		out.detail = "The server's gpurec library and the service's differ; restart the server.";
		return out;
	}
	ExecContext ctx;
	ctx.mode = device.stand_in ? DeviceMode::Cpu : DeviceMode::Gpu;
	ctx.cpu_threads = request.cpu_threads;
	ctx.gpu_memory_budget = request.gpu_memory_budget;
	ctx.fail_gpu_alloc = request.fail_gpu_alloc != 0;
	/* a split call's test fault strikes its last part alone: the others end well, and the call must still fail */
	ctx.fault.at = job.part.index + 1 == job.part.count ? request.fault_at : 0;
	ctx.fault.phase = static_cast<Phase>(request.fault_phase);
	ctx.fault.action = static_cast<TestFault::Action>(request.fault_action);
	ctx.check_interrupts = [&job] {
		if (job.cancelled.load(std::memory_order_relaxed))
			throw ClientGone();
	};
	ctx.inject_fault = [&job](const TestFault &fault) {
		const char *phase = kPhaseNames[static_cast<int>(fault.phase) & 3];
		if (fault.action == TestFault::Action::Error)
			throw Error("57000", std::string("gpurec.test_fault: error injected in the ") + phase + " phase");
		for (int waited = 0; waited < kTestFaultMaxWaitMs; waited += 10)
		{
			if (job.cancelled.load(std::memory_order_relaxed))
				throw ClientGone();
			std::this_thread::sleep_for(std::chrono::milliseconds(10));
		}
		throw Error(sqlstate::object_not_in_prerequisite_state,
					"gpurec.test_fault: waited " + std::to_string(kTestFaultMaxWaitMs / 1000) + " s in the " + phase +
						" phase and was not cancelled");
	};
	try
	{
		if (!device.stand_in)
			gpu::use_device(device.info.device_id);
		ByteReader input(job.input->data, job.input->message_bytes, job.input.get());
		out.result = found->second.handler(input, job.part, ctx);
		out.ok = true;
	}
	catch (const ClientGone &)
	{
		out.client_gone = true;
	}
	catch (const Error &e)
	{
		out.sqlstate = e.sqlstate();
		out.message = e.what();
		out.detail = e.detail();
		out.hint = e.hint();
	}
	catch (const std::bad_alloc &)
	{
		out.sqlstate = sqlstate::out_of_memory;
		out.message = "the GPU service ran out of memory";
	}
	catch (const std::exception &e)
	{
		out.message = e.what();
	}
	out.transfer_ms = ctx.times.transfer_ms;
	out.compute_ms = ctx.times.compute_ms;
	return out;
}

void Service::answer(Job &job, Outcome outcome)
{
	int32_t parts = 1;
	std::vector<std::vector<uint8_t>> results; /* a split call's parts', in part order */
	if (job.group)
	{
		Group &group = *job.group;
		std::lock_guard<std::mutex> lock(group.mutex);
		group.parts[job.part.index] = std::move(outcome);
		if (--group.remaining > 0)
			return;
		/* the last part: an error of any part is the call's, else the parts merged */
		parts = static_cast<int32_t>(group.parts.size());
		outcome = Outcome();
		outcome.ok = true;
		for (size_t p = 0; p < group.parts.size(); ++p)
		{
			Outcome &part = group.parts[p];
			if (!part.ok)
			{
				/* the call fails with its first failed part's error, which says which part it was */
				outcome = std::move(part);
				std::string where = "In part " + std::to_string(p + 1) + " of " + std::to_string(parts) +
									" of a call split over the GPU service's devices.";
				outcome.detail = outcome.detail.empty() ? where : outcome.detail + " " + where;
				break;
			}
			outcome.transfer_ms = std::max(outcome.transfer_ms, part.transfer_ms);
			outcome.compute_ms = std::max(outcome.compute_ms, part.compute_ms);
			outcome.queued_ms = std::max(outcome.queued_ms, part.queued_ms);
			outcome.device_id = outcome.device_id < 0 ? part.device_id : outcome.device_id;
			results.push_back(std::move(part.result));
		}
	}
	if (outcome.client_gone)
		return;
	/* a split call's parts are concatenated straight into the reply's memory */
	if (outcome.ok && job.group)
		reply_result(*job.client, outcome, parts, [&](ByteWriter &out) { write_concatenated(out, results); });
	else if (outcome.ok)
		reply_result(*job.client, outcome, parts,
					 [&](ByteWriter &out) { out.write(outcome.result.data(), outcome.result.size()); });
	else
		reply_error(*job.client, outcome.sqlstate, outcome.message, outcome.detail, outcome.hint);
}

void Service::work(Device &device)
{
	for (;;)
	{
		std::shared_ptr<Job> job;
		{
			std::unique_lock<std::mutex> lock(mutex_);
			wake_.wait(lock, [&] { return stopping_ || !device.queue.empty(); });
			if (stopping_)
				return;
			job = device.queue.front();
			device.queue.pop_front();
			device.running = job;
		}
		try
		{
			Outcome outcome = compute(device, *job);
			/* the input's room is free before the client hears the answer (the call's last part's) */
			job->input.reset();
			answer(*job, std::move(outcome));
		}
		catch (const std::exception &e)
		{
			log_line("a reply could not be sent: %s", e.what());
		}
		std::lock_guard<std::mutex> lock(mutex_);
		device.running.reset();
	}
}

void Service::answer_status(int fd)
{
	auto reply = std::make_unique<wire::StatusReply>();
	reply->pid = static_cast<int32_t>(getpid());
	wire::copy_text(reply->why_no_device, sizeof reply->why_no_device, why_no_device_);
	reply->upload_bytes_per_ms = costs_.upload_bytes_per_ms;
	reply->call_ms = costs_.call_ms;
	reply->stand_ins = options_.stand_in_devices > 0 ? 1 : 0;
	reply->shared_bytes = area_.bytes();
	reply->shared_in_use = area_.in_use();
	{
		std::lock_guard<std::mutex> lock(mutex_);
		for (const auto &device : devices_)
		{
			if (reply->device_count == wire::kMaxDevices)
				break;
			wire::DeviceRecord &r = reply->devices[reply->device_count++];
			r.device_id = device->info.device_id;
			wire::copy_text(r.name, sizeof r.name, device->info.name);
			wire::copy_text(r.compute_capability, sizeof r.compute_capability, device->info.compute_capability);
			r.total_memory_bytes = device->info.total_memory_bytes;
			r.free_memory_bytes = device->info.free_memory_bytes;
			r.multiprocessors = device->info.multiprocessors;
			r.calls_running = device->running ? 1 : 0;
			r.calls_queued = static_cast<int32_t>(device->queue.size());
			r.memory_used = device->running ? device->running->request.device_memory / device->running->part.count : 0;
		}
	}
	size_t bytes = offsetof(wire::StatusReply, devices) + reply->device_count * sizeof(wire::DeviceRecord);
	wire::send_message(fd, reply.get(), bytes, area_.fd());
}

void Service::answer_reserve(Connection &connection, const wire::ReserveRequest &request)
{
	wire::ReserveReply reply;
	reply.offset =
		request.bytes <= area_.bytes() ? area_.reserve(request.bytes, &connection, request.token) : wire::kNotShared;
	reply.ok = reply.offset != wire::kNotShared;
	wire::send_message(connection.fd, &reply, sizeof reply, -1);
}

void Service::make_shared_area()
{
	if (options_.shared_memory_bytes <= 0)
		return;
	try
	{
		area_.create(static_cast<size_t>(options_.shared_memory_bytes), options_.huge_pages);
	}
	catch (const std::exception &e)
	{
		log_line("%s", std::string("runs without shared memory (every call brings its own): ") + e.what());
		return;
	}
	char made[160];
	std::snprintf(made, sizeof made, "%.0f MB of shared memory on %s", static_cast<double>(area_.bytes()) / 1e6,
				  area_.on_huge_pages() ? "2 MB huge pages"
				  : options_.huge_pages ? "4 kB pages (not enough free huge pages: vm.nr_hugepages)"
										: "4 kB pages (huge_pages = off)");
	log_line("%s", made);
	if (devices_.empty() || devices_.front()->stand_in)
		return;
	auto started = std::chrono::steady_clock::now();
	try
	{
		gpu::register_host_memory(area_.base(), area_.bytes());
	}
	catch (const std::exception &e)
	{
		log_line("%s", std::string("could not pin its shared memory for the GPUs (calls' copies go through "
								   "staging): ") + e.what());
		return;
	}
	area_pinned_ = true;
	char pinned[96];
	std::snprintf(pinned, sizeof pinned, "%.0f MB in %.0f ms", static_cast<double>(area_.bytes()) / 1e6,
				  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
	log_line("pinned its shared memory for the GPUs: %s", pinned);
}

void Service::take_call(const std::shared_ptr<Connection> &connection, const wire::CallRequest &request,
						int input_fd)
{
	auto input = std::make_shared<Input>();
	try
	{
		if (request.message_bytes > request.input_bytes)
			throw Error(sqlstate::internal_error, "the GPU service got a call whose message is longer than its input");
		if (request.shared_offset != wire::kNotShared)
		{
			if (!area_.take(request.shared_offset, request.input_bytes, connection.get()))
				throw Error(sqlstate::internal_error, "the GPU service got a call in shared memory it did not reserve");
			input->area = &area_;
			input->offset = request.shared_offset;
			input->data = area_.base() + request.shared_offset;
		}
		else
		{
			/* a mapping past the memfd's end would fault when read: its size is checked first */
			struct stat shared;
			if (fstat(input_fd, &shared) != 0 || static_cast<uint64_t>(shared.st_size) < request.input_bytes)
				throw Error(sqlstate::internal_error, "the GPU service got a call whose memory is smaller than it says");
			input->data = wire::map_shared(input_fd, request.input_bytes, false);
		}
		input->bytes = request.input_bytes;
		input->message_bytes = request.message_bytes;
		input->shared = &area_;
		input->leases = area_.hold_leases_of(connection.get(), input.get());
	}
	catch (const Error &e)
	{
		if (input_fd >= 0)
			close(input_fd);
		reply_error(*connection, e.sqlstate(), e.what());
		return;
	}
	if (input_fd >= 0)
		close(input_fd);
	if (devices_.empty())
	{
		reply_error(*connection, sqlstate::object_not_in_prerequisite_state, "the GPU service has no usable GPU",
					why_no_device_, "Set gpurec.device to 'auto' or 'cpu'.");
		return;
	}
	auto found = handlers().find(static_cast<Function>(request.function));
	size_t parts = 1;
	if (found != handlers().end() && found->second.splits && request.parts > 1)
		parts = std::min<size_t>(static_cast<size_t>(request.parts), devices_.size());
	std::shared_ptr<Group> group;
	if (parts > 1)
	{
		group = std::make_shared<Group>();
		group->parts.resize(parts);
		group->remaining = static_cast<int>(parts);
	}

	std::lock_guard<std::mutex> lock(mutex_);
	/* each part to a device of its own, the least loaded first */
	std::vector<Device *> by_load;
	for (const auto &device : devices_)
		by_load.push_back(device.get());
	std::stable_sort(by_load.begin(), by_load.end(), [](const Device *a, const Device *b) {
		return a->queue.size() + (a->running ? 1 : 0) < b->queue.size() + (b->running ? 1 : 0);
	});
	for (size_t p = 0; p < parts; ++p)
	{
		auto job = std::make_shared<Job>();
		job->client = connection;
		job->request = request;
		job->input = input;
		job->part = {static_cast<int32_t>(p), static_cast<int32_t>(parts), input->state.get()};
		job->group = group;
		by_load[p]->queue.push_back(job);
	}
	wake_.notify_all();
}

void Service::forget_connection(const std::shared_ptr<Connection> &connection)
{
	area_.release_unused(connection.get());
	std::lock_guard<std::mutex> lock(mutex_);
	for (const auto &device : devices_)
	{
		auto &queue = device->queue;
		for (auto it = queue.begin(); it != queue.end();)
			it = (*it)->client == connection ? queue.erase(it) : it + 1;
		if (device->running && device->running->client == connection)
			device->running->cancelled = true;
	}
}

int Service::serve(bool (*stop)())
{
	/* the devices first: a client that connects finds the service ready, its costs measured */
	find_devices();
	make_shared_area();
	measure_costs();
	int listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct sockaddr_un address;
	socklen_t length = wire::socket_address(&address);
	if (listener < 0 || bind(listener, reinterpret_cast<struct sockaddr *>(&address), length) != 0 ||
		listen(listener, 128) != 0)
	{
		log_line("cannot listen on its socket: %s", std::strerror(errno));
		return 1;
	}

	for (const auto &device : devices_)
		device->worker = std::thread([this, d = device.get()] { work(*d); });
	log_line("%s", "ready with " + std::to_string(devices_.size()) +
					   (options_.stand_in_devices > 0 ? " stand-in device(s)" : " GPU(s)"));

	std::vector<std::shared_ptr<Connection>> connections;
	std::vector<uint8_t> buffer(wire::kMaxMessage);
	while (!stop())
	{
		std::vector<struct pollfd> polled;
		polled.push_back({listener, POLLIN, 0});
		for (const auto &c : connections)
			polled.push_back({c->fd, POLLIN, 0});
		int ready = poll(polled.data(), polled.size(), 100);
		if (ready <= 0)
			continue;
		if (polled[0].revents & POLLIN)
		{
			int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
			/* an abstract socket has no file permissions: only the server's own user is served */
			struct ucred peer;
			socklen_t peer_length = sizeof peer;
			if (fd >= 0 && (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_length) != 0 || peer.uid != getuid()))
			{
				close(fd);
				fd = -1;
			}
			if (fd >= 0)
				connections.push_back(std::make_shared<Connection>(fd));
		}
		for (size_t i = 1; i < polled.size(); ++i)
		{
			if (!polled[i].revents)
				continue;
			std::shared_ptr<Connection> connection = connections[i - 1];
			int input_fd = -1;
			size_t got = (polled[i].revents & POLLIN)
							 ? wire::receive_message(connection->fd, buffer.data(), buffer.size(), &input_fd)
							 : 0;
			wire::Header header{};
			if (got >= sizeof header)
				std::memcpy(&header, buffer.data(), sizeof header);
			bool understood = got >= sizeof header && header.version == wire::kVersion;
			if (understood && header.kind == wire::Kind::StatusRequest)
			{
				if (input_fd >= 0)
					close(input_fd);
				try
				{
					answer_status(connection->fd);
				}
				catch (const std::exception &)
				{
				}
				continue;
			}
			if (understood && header.kind == wire::Kind::ReserveRequest && got == sizeof(wire::ReserveRequest))
			{
				if (input_fd >= 0)
					close(input_fd);
				wire::ReserveRequest request;
				std::memcpy(&request, buffer.data(), sizeof request);
				try
				{
					answer_reserve(*connection, request);
				}
				catch (const std::exception &)
				{
				}
				continue;
			}
			if (understood && header.kind == wire::Kind::HoldRequest && got == sizeof(wire::HoldRequest))
			{
				if (input_fd >= 0)
					close(input_fd);
				wire::HoldRequest request;
				std::memcpy(&request, buffer.data(), sizeof request);
				wire::HoldReply reply;
				reply.bytes = area_.hold(request.offset, request.token, connection.get());
				try
				{
					wire::send_message(connection->fd, &reply, sizeof reply, -1);
				}
				catch (const std::exception &)
				{
				}
				continue;
			}
			if (understood && header.kind == wire::Kind::ReleaseRequest && got == sizeof(wire::ReleaseRequest))
			{
				if (input_fd >= 0)
					close(input_fd);
				wire::ReleaseRequest request;
				std::memcpy(&request, buffer.data(), sizeof request);
				area_.drop(request.offset, connection.get());
				continue;
			}
			if (understood && header.kind == wire::Kind::CallRequest && got == sizeof(wire::CallRequest))
			{
				wire::CallRequest request;
				std::memcpy(&request, buffer.data(), sizeof request);
				if (input_fd >= 0 || request.shared_offset != wire::kNotShared)
				{
					take_call(connection, request, input_fd);
					continue;
				}
			}
			/* gone, or speaking another protocol: its calls end with it */
			if (input_fd >= 0)
				close(input_fd);
			forget_connection(connection);
			connections[i - 1] = nullptr;
		}
		connections.erase(std::remove(connections.begin(), connections.end(), nullptr), connections.end());
	}

	{
		std::lock_guard<std::mutex> lock(mutex_);
		stopping_ = true;
		for (const auto &device : devices_)
			if (device->running)
				device->running->cancelled = true;
	}
	wake_.notify_all();
	for (const auto &device : devices_)
		device->worker.join();
	close(listener);
	return 0;
}

} // namespace

int run(const Options &options, bool (*stop)())
{
	Service service(options);
	return service.serve(stop);
}

} // namespace gpurec::service
