/*
 * pg_gpu_service.cpp: the GPU service's background worker and a backend's
 * connection to it (pg_gpu_service.hpp).
 *
 * The worker supervises; the service is its child process.  The
 * postmaster knows only the worker, which touches no GPU: when the service
 * dies, however it dies (kill -9, a fault in GPU code), the postmaster sees
 * nothing, restarts no backend and resets no shared memory; the worker
 * logs it and starts the service again.  The service dies with the worker
 * (PR_SET_PDEATHSIG), and the worker with the postmaster.
 */
#include "pg_boundary.hpp"

extern "C" {
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/ps_status.h"
#include "utils/wait_event.h"
}

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "pg_gpu_service.hpp"

extern "C" {
PGDLLEXPORT void gpurec_gpu_service_main(Datum);
}

namespace gpurec {

namespace {

/* Set in the postmaster by _PG_init, so every backend it forks knows the service runs. */
bool service_registered = false;
/* the service's options, read from the settings in the worker (register_gpu_service) */
service::Options (*service_options)() = nullptr;
/* True in the worker itself, which never calls the service. */
bool in_supervisor = false;

volatile sig_atomic_t supervisor_stopping = false;
volatile sig_atomic_t service_stopping = false;

void supervisor_sigterm(SIGNAL_ARGS)
{
	int save_errno = errno;
	supervisor_stopping = true;
	SetLatch(MyLatch);
	errno = save_errno;
}

void service_sigterm(int) { service_stopping = true; }

bool service_should_stop() { return service_stopping; }

/*
 * The service's log: it writes its lines (and CUDA's own messages) to its
 * stderr, a pipe that the worker reads and logs through PostgreSQL's
 * logging, so that they reach every log destination (csvlog, syslog) with
 * the server's prefix.  The worker's end: -1 where no service runs.
 */
int service_log_fd = -1;
char service_log_line[1024];
size_t service_log_used = 0;

void log_service_line()
{
	service_log_line[service_log_used] = '\0';
	if (service_log_used > 0)
		ereport(LOG, (errmsg("%s", service_log_line)));
	service_log_used = 0;
}

/* Logs the service's complete lines read so far; until_end: and the rest, up to the pipe's end, then closes it. */
void read_service_log(bool until_end)
{
	while (service_log_fd >= 0)
	{
		char buffer[4096];
		ssize_t n = read(service_log_fd, buffer, sizeof buffer);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !until_end)
			return;
		if (n <= 0)
		{
			log_service_line();
			close(service_log_fd);
			service_log_fd = -1;
			return;
		}
		for (ssize_t i = 0; i < n; ++i)
		{
			if (buffer[i] == '\n')
				log_service_line();
			else
			{
				if (service_log_used == sizeof service_log_line - 1)
					log_service_line();
				service_log_line[service_log_used++] = buffer[i];
			}
		}
	}
}

/*
 * Forks the service.  The child leaves PostgreSQL's world at once: default
 * signal handlers, no PostgreSQL call, _exit at the end (no proc_exit, no
 * atexit handlers of the server's); its stderr is the pipe of its log.
 */
pid_t start_service(const service::Options &options)
{
	pid_t supervisor = getpid();
	fflush(stdout);
	fflush(stderr);
	int log_pipe[2];
	if (pipe2(log_pipe, O_CLOEXEC) != 0)
		return -1;
	/*
	 * The service shows as `postgres: gpurec GPU service`, the worker that
	 * forks it as `... service supervisor`, so that an operator tells them
	 * apart: killing the service fails its calls in flight and it starts
	 * again; killing the worker, a background worker of PostgreSQL's,
	 * restarts the server.
	 */
	set_ps_display("");
	pid_t pid = fork();
	if (pid != 0)
	{
		int saved_errno = errno;
		set_ps_display("supervisor");
		close(log_pipe[1]);
		if (pid < 0)
		{
			close(log_pipe[0]);
			errno = saved_errno;
			return pid;
		}
		service_log_fd = log_pipe[0];
		(void) fcntl(service_log_fd, F_SETFL, O_NONBLOCK);
		service_log_used = 0;
		return pid;
	}
	dup2(log_pipe[1], STDERR_FILENO); /* dup2 clears O_CLOEXEC on the copy */
	close(log_pipe[0]);
	close(log_pipe[1]);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != supervisor)
		_exit(1);
	for (int sig = 1; sig < NSIG; ++sig)
		if (sig != SIGKILL && sig != SIGSTOP)
			signal(sig, SIG_DFL);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGTERM, service_sigterm);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, nullptr);
	int status = 1;
	try
	{
		status = service::run(options, service_should_stop);
	}
	catch (const std::exception &e)
	{
		fprintf(stderr, "gpurec GPU service [%d]: ended by an error: %s\n", static_cast<int>(getpid()), e.what());
	}
	_exit(status);
}

/* Stops the service: SIGTERM, then after 5 s SIGKILL. */
void stop_service(pid_t pid)
{
	if (pid <= 0)
		return;
	kill(pid, SIGTERM);
	for (int waited_ms = 0; waited_ms < 5000; waited_ms += 10)
	{
		if (waitpid(pid, nullptr, WNOHANG) == pid)
			return;
		pg_usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, nullptr, 0);
}

/* Logs how the service ended: a plain ereport, no C++ allocation that could throw. */
void log_service_end(pid_t pid, int status)
{
	if (WIFSIGNALED(status))
		ereport(LOG, (errmsg("gpurec GPU service (pid %d) was terminated by signal %d (%s); starting it again",
							 static_cast<int>(pid), WTERMSIG(status), strsignal(WTERMSIG(status)))));
	else
		ereport(LOG, (errmsg("gpurec GPU service (pid %d) exited with status %d; starting it again",
							 static_cast<int>(pid), WEXITSTATUS(status))));
}

} // namespace

void register_gpu_service(service::Options (*options_from_settings)())
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	service_options = options_from_settings;
	BackgroundWorker worker;
	memset(&worker, 0, sizeof worker);
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	worker.bgw_start_time = BgWorkerStart_PostmasterStart;
	worker.bgw_restart_time = 1;
	strlcpy(worker.bgw_library_name, "gpurec", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "gpurec_gpu_service_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "gpurec GPU service", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "gpurec GPU service", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
	service_registered = true;
}

service::Client *gpu_service_client()
{
	if (!service_registered || in_supervisor)
		return nullptr;
	static service::Client client;
	return &client;
}

} // namespace gpurec

/*
 * The worker: starts the service, and starts it again when it ends, at
 * most once a second.  Stops it on SIGTERM (the server's shutdown).
 */
void gpurec_gpu_service_main(Datum)
{
	using namespace gpurec;
	in_supervisor = true;
	pqsignal(SIGTERM, supervisor_sigterm);
	BackgroundWorkerUnblockSignals();

	/* no C++ exception may leave a background worker: a copy of the settings that fails ends it, and it restarts */
	service::Options options;
	bool copied = false;
	try
	{
		options = service_options();
		copied = true;
	}
	catch (...)
	{
	}
	if (!copied) /* raised outside the catch: no longjmp leaves a C++ handler */
		ereport(FATAL, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("gpurec GPU service: out of memory for its settings")));
	pid_t service = -1;
	auto started = std::chrono::steady_clock::now() - std::chrono::seconds(1);
	while (!supervisor_stopping)
	{
		if (service < 0 &&
			std::chrono::steady_clock::now() - started >= std::chrono::seconds(1))
		{
			started = std::chrono::steady_clock::now();
			service = start_service(options);
			if (service < 0)
				ereport(LOG, (errmsg("gpurec could not start its GPU service: %m")));
			else
				ereport(LOG, (errmsg("gpurec GPU service started (pid %d)", static_cast<int>(service))));
		}
		int events = WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH;
		if (service_log_fd >= 0)
			events |= WL_SOCKET_READABLE;
		(void) WaitLatchOrSocket(MyLatch, events, service_log_fd, 50, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		read_service_log(false);
		int status = 0;
		if (service > 0 && waitpid(service, &status, WNOHANG) == service)
		{
			read_service_log(true); /* its last words, before the line that says how it ended */
			log_service_end(service, status);
			service = -1;
		}
	}
	stop_service(service);
	read_service_log(true);
	proc_exit(0);
}
