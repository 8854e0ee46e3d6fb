/*
 * pg_settings.cpp: gpurec's GUCs (see pg_settings.hpp): their variables,
 * their definitions, and the ExecContext each SQL call starts from.
 *
 * Defining them starts no CUDA: _PG_init runs in the postmaster when the
 * library is preloaded, and a CUDA context does not survive fork.
 */
#include "pg_boundary.hpp"

extern "C" {
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

#include <cstdlib>
#include <climits>
#include <cstring>
#include <vector>

#include "geo.hpp"
#include "pg_gpu_service.hpp"
#include "pg_settings.hpp"

namespace gpurec {

namespace {

int device_setting = static_cast<int>(DeviceMode::Auto);
bool timing_setting = false;
int parallel_workers_setting = -1;
int cpu_threads_setting = 0;
int geo_pruning_setting = static_cast<int>(GeoPruning::Auto);
bool test_fail_gpu_alloc_setting = false;
char *gpus_setting = nullptr;
/* gpurec.gpus as parsed by its check hook */
std::vector<int> gpus;
int test_stand_in_devices_setting = 0;
int test_stand_in_memory_setting = 0; /* kB */
char *test_fault_setting = nullptr;
/* gpurec.test_fault as parsed by its check hook (at = 0: none). */
TestFault test_fault;

/* How long a `wait` fault waits for a cancel before it gives up with an ERROR. */
constexpr int kTestFaultMaxWaitMs = 30000;
/* The wait's sleep between interrupt checks. */
constexpr long kTestFaultSleepMs = 10;

const char *const phase_names[] = {"read", "transfer", "compute", "output"};

const struct config_enum_entry device_options[] = {
	{"auto", static_cast<int>(DeviceMode::Auto), false},
	{"gpu", static_cast<int>(DeviceMode::Gpu), false},
	{"cpu", static_cast<int>(DeviceMode::Cpu), false},
	{nullptr, 0, false}};

const struct config_enum_entry geo_pruning_options[] = {
	{"auto", static_cast<int>(GeoPruning::Auto), false},
	{"on", static_cast<int>(GeoPruning::Always), false},
	{"off", static_cast<int>(GeoPruning::Never), false},
	{nullptr, 0, false}};

/*
 * Parses "phase:n:action" (phase read, transfer, compute or output; n >= 1;
 * action wait or error) into *fault; '' is no fault.  On a bad value, says
 * why in *why and returns false.
 */
bool parse_test_fault(const char *value, TestFault *fault, const char **why)
{
	*fault = TestFault();
	if (value == nullptr || value[0] == '\0')
		return true;
	const char *first = strchr(value, ':');
	const char *second = first ? strchr(first + 1, ':') : nullptr;
	if (second == nullptr)
	{
		*why = "The value is phase:n:action, as in output:3:wait.";
		return false;
	}
	size_t phase_length = first - value;
	bool known = false;
	for (int p = 0; p < 4; ++p)
		if (strlen(phase_names[p]) == phase_length && strncmp(value, phase_names[p], phase_length) == 0)
		{
			fault->phase = static_cast<Phase>(p);
			known = true;
		}
	if (!known)
	{
		*why = "The phase is read, transfer, compute or output.";
		return false;
	}
	const char *digits = first + 1;
	uint64_t at = 0;
	for (const char *c = digits; c < second; ++c)
	{
		if (*c < '0' || *c > '9' || at > 1000000000)
		{
			*why = "n, the phase's interrupt point to fault, is an integer from 1 to 1000000000.";
			return false;
		}
		at = at * 10 + static_cast<uint64_t>(*c - '0');
	}
	if (at < 1 || at > 1000000000)
	{
		*why = "n, the phase's interrupt point to fault, is an integer from 1 to 1000000000.";
		return false;
	}
	fault->at = at;
	if (strcmp(second + 1, "wait") == 0)
		fault->action = TestFault::Action::Wait;
	else if (strcmp(second + 1, "error") == 0)
		fault->action = TestFault::Action::Error;
	else
	{
		*why = "The action is wait or error.";
		return false;
	}
	return true;
}

bool check_test_fault(char **newval, void **extra, GucSource)
{
	TestFault parsed;
	const char *why = nullptr;
	if (!parse_test_fault(*newval, &parsed, &why))
	{
		GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
		GUC_check_errdetail("%s", why);
		return false;
	}
	/* guc.c frees extra with free() */
	auto *copy = static_cast<TestFault *>(malloc(sizeof(TestFault)));
	if (copy == nullptr)
		return false;
	*copy = parsed;
	*extra = copy;
	return true;
}

void assign_test_fault(const char *, void *extra)
{
	test_fault = extra ? *static_cast<TestFault *>(extra) : TestFault();
}

/* Parses gpurec.gpus: device ids separated by commas (spaces allowed), '' for every GPU. */
bool parse_gpus(const char *value, std::vector<int> *ids)
{
	ids->clear();
	for (const char *c = value ? value : ""; *c;)
	{
		while (*c == ' ' || *c == ',')
			++c;
		if (*c == '\0')
			break;
		if (*c < '0' || *c > '9')
			return false;
		long id = 0;
		while (*c >= '0' && *c <= '9')
		{
			id = id * 10 + (*c++ - '0');
			if (id > 1023)
				return false;
		}
		while (*c == ' ')
			++c;
		if (*c != ',' && *c != '\0')
			return false;
		ids->push_back(static_cast<int>(id));
	}
	return true;
}

bool check_gpus(char **newval, void **extra, GucSource)
{
	std::vector<int> parsed;
	if (!parse_gpus(*newval, &parsed))
	{
		GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
		GUC_check_errdetail("gpurec.gpus is a list of GPU device ids separated by commas, as in '0,2', or empty "
							"for every GPU.");
		return false;
	}
	return true;
}

void assign_gpus(const char *value, void *)
{
	(void) parse_gpus(value, &gpus);
}

} // namespace

void define_settings()
{
	DefineCustomEnumVariable(
		"gpurec.device", "Where gpurec computes: auto, gpu or cpu.",
		"auto uses a usable GPU when the input is large enough to gain from it; gpu raises an "
		"error when no GPU is usable; cpu never uses one.",
		&device_setting, static_cast<int>(DeviceMode::Auto), device_options, PGC_USERSET, 0,
		nullptr, nullptr, nullptr);
	DefineCustomBoolVariable("gpurec.timing",
							 "Raises a NOTICE per call with the device used and the time of "
							 "each phase.",
							 nullptr, &timing_setting, false, PGC_USERSET, 0, nullptr, nullptr,
							 nullptr);
	DefineCustomIntVariable("gpurec.parallel_workers",
							"The most parallel workers that read one inner query; -1 follows PostgreSQL.",
							"Workers come from PostgreSQL's own settings (max_parallel_workers_per_gather, "
							"max_parallel_workers, a table's parallel_workers); this may only lower them.  0 reads "
							"every inner query in the calling backend.",
							&parallel_workers_setting, -1, -1, 1024, PGC_USERSET, 0, nullptr, nullptr, nullptr);
	DefineCustomIntVariable("gpurec.cpu_threads",
							"The most threads one CPU computation of a call uses; 0 uses every core.",
							"Servers that share a machine (the shards of gpurec_shards on one host, or busy "
							"backends) can each take their part of the cores instead of every backend "
							"starting one thread per core.",
							&cpu_threads_setting, 0, 0, 1024, PGC_USERSET, 0, nullptr, nullptr, nullptr);
	DefineCustomBoolVariable("gpurec.test_fail_gpu_alloc",
							 "For tests only: makes every GPU allocation fail.", nullptr,
							 &test_fail_gpu_alloc_setting, false, PGC_SUSET,
							 GUC_NOT_IN_SAMPLE | GUC_NO_SHOW_ALL, nullptr, nullptr, nullptr);
	DefineCustomStringVariable(
		"gpurec.test_fault",
		"For tests only: a fault at one interrupt point of one phase of every call.",
		"phase:n:action: at the n-th interrupt point (batch boundary) of the read, transfer, "
		"compute or output phase, wait until cancelled (wait) or raise an ERROR (error).  "
		"Empty: none.",
		&test_fault_setting, "", PGC_SUSET, GUC_NOT_IN_SAMPLE | GUC_NO_SHOW_ALL, check_test_fault,
		assign_test_fault, nullptr);
	DefineCustomEnumVariable(
		"gpurec.geo_pruning", "How similar_users finds each user's most similar: auto, on or off.",
		"on skips, through a spatial index of the points, the users that provably cannot be among a user's k "
		"most similar; off compares every pair of users; auto prunes where a sample of the users shows it "
		"cheaper.  The answers are the same either way.",
		&geo_pruning_setting, static_cast<int>(GeoPruning::Auto), geo_pruning_options, PGC_USERSET, 0, nullptr,
		nullptr, nullptr);
	/*
	 * The GPU service's settings are read when the server starts, and
	 * PostgreSQL defines such settings only while the library is preloaded:
	 * without preloading there is no service, and they do not exist.
	 */
	if (process_shared_preload_libraries_in_progress)
	{
		DefineCustomStringVariable(
			"gpurec.gpus", "The GPUs gpurec's GPU service uses: device ids separated by commas; empty uses every GPU.",
			"Read when the server starts, with gpurec in shared_preload_libraries.  Device ids are CUDA's, as "
			"gpurec.devices() and nvidia-smi show them.",
			&gpus_setting, "", PGC_POSTMASTER, 0, check_gpus, assign_gpus, nullptr);
		DefineCustomIntVariable("gpurec.test_stand_in_devices",
								"For tests only: the GPU service presents this many devices that compute on the CPU.",
								"0 uses the GPUs.  Read when the server starts.", &test_stand_in_devices_setting, 0, 0,
								64, PGC_POSTMASTER, GUC_NOT_IN_SAMPLE | GUC_NO_SHOW_ALL, nullptr, nullptr, nullptr);
		DefineCustomIntVariable("gpurec.test_stand_in_memory",
								"For tests only: the memory each stand-in device of the GPU service reports.", nullptr,
								&test_stand_in_memory_setting, 1024 * 1024, 0, INT_MAX, PGC_POSTMASTER,
								GUC_NOT_IN_SAMPLE | GUC_NO_SHOW_ALL | GUC_UNIT_KB, nullptr, nullptr, nullptr);
	}
	MarkGUCPrefixReserved("gpurec");
}

bool settings_timing() { return timing_setting; }

int settings_parallel_workers() { return parallel_workers_setting; }

GeoPruning settings_geo_pruning() { return static_cast<GeoPruning>(geo_pruning_setting); }

service::Options service_options_from_settings()
{
	service::Options options;
	options.gpus = gpus;
	options.stand_in_devices = test_stand_in_devices_setting;
	options.stand_in_memory = static_cast<int64_t>(test_stand_in_memory_setting) * 1024;
	return options;
}

ExecContext exec_context_from_settings()
{
	ExecContext ctx;
	ctx.mode = static_cast<DeviceMode>(device_setting);
	ctx.cpu_threads = static_cast<size_t>(cpu_threads_setting);
	/* every function's GPU work goes to the service where there is one, so that no backend starts CUDA */
	ctx.service = gpu_service_client();
	ctx.fail_gpu_alloc = test_fail_gpu_alloc_setting;
	ctx.check_interrupts = [] { pg_call([] { CHECK_FOR_INTERRUPTS(); }); };
	ctx.fault = test_fault;
	ctx.inject_fault = [](const TestFault &fault) { pg_call([&fault] { run_test_fault(fault); }); };
	ctx.notice = [](const std::string &message) {
		const char *text = message.c_str();
		pg_call([text] { ereport(NOTICE, (errmsg("%s", text))); });
	};
	return ctx;
}

} // namespace gpurec

namespace gpurec {

void run_test_fault(const TestFault &fault)
{
	const char *phase = phase_names[static_cast<int>(fault.phase)];
	if (fault.action == TestFault::Action::Error)
		ereport(ERROR, (errcode(ERRCODE_OPERATOR_INTERVENTION),
						errmsg("gpurec.test_fault: error injected in the %s phase", phase)));

	/* shows in pg_stat_activity as wait_event_type and wait_event 'Extension' */
	TimestampTz started = GetCurrentTimestamp();
	for (;;)
	{
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (TimestampDifferenceExceeds(started, GetCurrentTimestamp(), kTestFaultMaxWaitMs))
			ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
							errmsg("gpurec.test_fault: waited %d s in the %s phase and was not "
								   "cancelled",
								   kTestFaultMaxWaitMs / 1000, phase)));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 kTestFaultSleepMs, PG_WAIT_EXTENSION);
	}
}

void postgres_interrupt_point(ExecContext &ctx, Phase phase)
{
	CHECK_FOR_INTERRUPTS();
	if (ctx.fault.due(phase))
		run_test_fault(ctx.fault);
}

} // namespace gpurec
