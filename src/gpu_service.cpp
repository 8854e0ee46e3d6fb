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
#include "gpu_service_wire.hpp"

namespace gpurec::service {

namespace {

std::map<Function, Handler> &handlers()
{
	static std::map<Function, Handler> registered;
	return registered;
}

} // namespace

void register_handler(Function function, Handler handler) { handlers()[function] = handler; }

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

struct Job
{
	std::shared_ptr<Connection> client;
	wire::CallRequest request;
	uint8_t *input = nullptr;
	std::atomic<bool> cancelled{false};
	std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now();

	~Job() { wire::unmap_shared(input, request.input_bytes); }
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
	void work(Device &device);
	void run_call(Device &device, Job &job);
	void reply_error(Job &job, const char *sqlstate, const std::string &message, const std::string &detail = {},
					 const std::string &hint = {});
	void answer_status(int fd);
	void take_call(const std::shared_ptr<Connection> &connection, const wire::CallRequest &request, int input_fd);
	void forget_connection(const std::shared_ptr<Connection> &connection);

	Options options_;
	std::string why_no_device_;
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

void Service::reply_error(Job &job, const char *sqlstate, const std::string &message, const std::string &detail,
						  const std::string &hint)
{
	char buffer[wire::kMaxMessage];
	wire::CallReply reply;
	std::memcpy(reply.sqlstate, sqlstate, 5);
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
	wire::send_message(job.client->fd, buffer, at, -1);
}

void Service::run_call(Device &device, Job &job)
{
	const wire::CallRequest &request = job.request;
	double queued_ms =
		std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - job.arrived).count();
	auto found = handlers().find(static_cast<Function>(request.function));
	if (found == handlers().end())
	{
		reply_error(job, sqlstate::internal_error,
					"the GPU service has no function " + std::to_string(request.function),
					"The server's gpurec library and the service's differ; restart the server.");
		return;
	}
	ExecContext ctx;
	ctx.mode = device.stand_in ? DeviceMode::Cpu : DeviceMode::Gpu;
	ctx.cpu_threads = request.cpu_threads;
	ctx.gpu_memory_budget = request.gpu_memory_budget;
	ctx.fail_gpu_alloc = request.fail_gpu_alloc != 0;
	ctx.fault.at = request.fault_at;
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
	std::vector<uint8_t> result;
	try
	{
		if (!device.stand_in)
			gpu::use_device(device.info.device_id);
		ByteReader input(job.input, request.input_bytes);
		result = found->second(input, ctx);
	}
	catch (const ClientGone &)
	{
		return;
	}
	catch (const Error &e)
	{
		reply_error(job, e.sqlstate(), e.what(), e.detail(), e.hint());
		return;
	}
	catch (const std::bad_alloc &)
	{
		reply_error(job, sqlstate::out_of_memory, "the GPU service ran out of memory");
		return;
	}
	catch (const std::exception &e)
	{
		reply_error(job, sqlstate::internal_error, e.what());
		return;
	}

	uint8_t *shared = nullptr;
	int fd = -1;
	try
	{
		fd = wire::create_shared(result.size(), &shared);
	}
	catch (const Error &e)
	{
		reply_error(job, e.sqlstate(), e.what());
		return;
	}
	if (!result.empty())
		std::memcpy(shared, result.data(), result.size());
	wire::unmap_shared(shared, result.size());
	wire::CallReply reply;
	reply.ok = 1;
	reply.device_id = device.info.device_id;
	reply.result_bytes = result.size();
	reply.transfer_ms = ctx.times.transfer_ms;
	reply.compute_ms = ctx.times.compute_ms;
	reply.queued_ms = queued_ms;
	wire::send_message(job.client->fd, &reply, sizeof reply, fd);
	close(fd);
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
			run_call(device, *job);
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
			r.memory_used = device->running ? device->running->request.device_memory : 0;
		}
	}
	size_t bytes = offsetof(wire::StatusReply, devices) + reply->device_count * sizeof(wire::DeviceRecord);
	wire::send_message(fd, reply.get(), bytes, -1);
}

void Service::take_call(const std::shared_ptr<Connection> &connection, const wire::CallRequest &request,
						int input_fd)
{
	auto job = std::make_shared<Job>();
	job->client = connection;
	job->request = request;
	try
	{
		job->input = wire::map_shared(input_fd, request.input_bytes, false);
	}
	catch (const Error &e)
	{
		close(input_fd);
		reply_error(*job, e.sqlstate(), e.what());
		return;
	}
	close(input_fd);
	if (devices_.empty())
	{
		reply_error(*job, sqlstate::object_not_in_prerequisite_state, "the GPU service has no usable GPU",
					why_no_device_, "Set gpurec.device to 'auto' or 'cpu'.");
		return;
	}
	std::lock_guard<std::mutex> lock(mutex_);
	Device *least = nullptr;
	size_t least_load = 0;
	for (const auto &device : devices_)
	{
		size_t load = device->queue.size() + (device->running ? 1 : 0);
		if (least == nullptr || load < least_load)
		{
			least = device.get();
			least_load = load;
		}
	}
	least->queue.push_back(job);
	wake_.notify_all();
}

void Service::forget_connection(const std::shared_ptr<Connection> &connection)
{
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
	int listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct sockaddr_un address = {};
	address.sun_family = AF_UNIX;
	std::strncpy(address.sun_path, kSocketName, sizeof address.sun_path - 1);
	unlink(kSocketName);
	if (listener < 0 || bind(listener, reinterpret_cast<struct sockaddr *>(&address), sizeof address) != 0 ||
		chmod(kSocketName, 0600) != 0 || listen(listener, 128) != 0)
	{
		log_line("cannot listen on its socket: %s", std::strerror(errno));
		return 1;
	}

	find_devices();
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
			if (understood && header.kind == wire::Kind::CallRequest && got == sizeof(wire::CallRequest) &&
				input_fd >= 0)
			{
				wire::CallRequest request;
				std::memcpy(&request, buffer.data(), sizeof request);
				take_call(connection, request, input_fd);
				continue;
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
	unlink(kSocketName);
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
