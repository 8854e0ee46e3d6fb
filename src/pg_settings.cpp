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
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/guc_tables.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

/* libpq/libpq.h's, whose header needs GSSAPI's where the server was built with it */
extern bool pq_check_connection(void);
}

#include <algorithm>
#include <cstdlib>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "geo.hpp"
#include "pg_gpu_service.hpp"
#include "pg_progress.hpp"
#include "pg_settings.hpp"

namespace gpurec {

namespace {

int device_setting = static_cast<int>(DeviceMode::Auto);
bool timing_setting = false;
bool track_progress_setting = true;
int parallel_workers_setting = -1;
int cpu_threads_setting = 0;
int geo_pruning_setting = static_cast<int>(GeoPruning::Auto);
bool test_fail_gpu_alloc_setting = false;
char *gpus_setting = nullptr;
/* gpurec.gpus as parsed by its check hook */
std::vector<int> gpus;
int service_memory_setting = 2048; /* MB */
int test_stand_in_devices_setting = 0;
int test_stand_in_memory_setting = 0; /* kB */
char *test_fault_setting = nullptr;
/* gpurec.test_fault as parsed by its check hook (at = 0: none). */
TestFault test_fault;

/* The integer settings' ranges, shared by their definitions and the check of values set before loading. */
constexpr int kMaxParallelWorkers = 1024;
constexpr int kMaxCpuThreads = 1024;
constexpr int kMaxStandInDevices = 64;

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

/*
 * Parses gpurec.gpus: distinct device ids separated by commas (spaces
 * around them allowed); '' (or only spaces) for every GPU.
 */
bool parse_gpus(const char *value, std::vector<int> *ids)
{
	ids->clear();
	const char *c = value ? value : "";
	while (*c == ' ')
		++c;
	if (*c == '\0')
		return true;
	for (;;)
	{
		while (*c == ' ')
			++c;
		if (*c < '0' || *c > '9')
			return false;
		long id = 0;
		while (*c >= '0' && *c <= '9')
		{
			id = id * 10 + (*c++ - '0');
			if (id > 1023)
				return false;
		}
		if (std::find(ids->begin(), ids->end(), static_cast<int>(id)) != ids->end())
			return false;
		ids->push_back(static_cast<int>(id));
		while (*c == ' ')
			++c;
		if (*c == '\0')
			return true;
		if (*c++ != ',')
			return false;
	}
}

bool check_gpus(char **newval, void **extra, GucSource)
{
	std::vector<int> parsed;
	if (!parse_gpus(*newval, &parsed))
	{
		GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
		GUC_check_errdetail("gpurec.gpus is a list of distinct GPU device ids separated by commas, as in '0,2', "
							"or empty for every GPU.");
		return false;
	}
	return true;
}

void assign_gpus(const char *value, void *)
{
	(void) parse_gpus(value, &gpus);
}

/* An integer setting's value as parse_int reads it (units by flags), within [min, max]. */
bool valid_int(const char *value, int flags, int min, int max)
{
	int parsed = 0;
	return parse_int(value, &parsed, flags, nullptr) && parsed >= min && parsed <= max;
}

/*
 * Whether `value` is one PostgreSQL would take for gpurec's setting `name`
 * once defined (the same parsers and ranges as its definition below), and
 * if not, a hint.  Unknown names are not gpurec's: *known is false.
 */
bool valid_setting_value(const char *name, const char *value, bool *known, char (&hint)[256])
{
	*known = true;
	bool flag = false;
	if (strcmp(name, "gpurec.device") == 0)
	{
		for (const config_enum_entry *option = device_options; option->name; ++option)
			if (pg_strcasecmp(value, option->name) == 0)
				return true;
		snprintf(hint, sizeof hint, "%s", "Available values: auto, gpu, cpu.");
		return false;
	}
	if (strcmp(name, "gpurec.timing") == 0 || strcmp(name, "gpurec.test_fail_gpu_alloc") == 0 ||
		strcmp(name, "gpurec.track_progress") == 0)
	{
		snprintf(hint, sizeof hint, "%s", "It is a boolean: on or off.");
		return parse_bool(value, &flag);
	}
	if (strcmp(name, "gpurec.geo_pruning") == 0)
	{
		for (const config_enum_entry *option = geo_pruning_options; option->name; ++option)
			if (pg_strcasecmp(value, option->name) == 0)
				return true;
		snprintf(hint, sizeof hint, "%s", "Available values: auto, on, off.");
		return false;
	}
	if (strcmp(name, "gpurec.parallel_workers") == 0)
	{
		snprintf(hint, sizeof hint, "It is an integer from -1 to %d.", kMaxParallelWorkers);
		return valid_int(value, 0, -1, kMaxParallelWorkers);
	}
	if (strcmp(name, "gpurec.cpu_threads") == 0)
	{
		snprintf(hint, sizeof hint, "It is an integer from 0 to %d.", kMaxCpuThreads);
		return valid_int(value, 0, 0, kMaxCpuThreads);
	}
	if (strcmp(name, "gpurec.test_fault") == 0)
	{
		TestFault fault;
		const char *why = "";
		bool ok = parse_test_fault(value, &fault, &why);
		snprintf(hint, sizeof hint, "%s", why);
		return ok;
	}
	if (strcmp(name, "gpurec.gpus") == 0)
	{
		std::vector<int> ids;
		snprintf(hint, sizeof hint, "%s", "It is a list of GPU device ids separated by commas, as in '0,2', or empty for every GPU.");
		return parse_gpus(value, &ids);
	}
	if (strcmp(name, "gpurec.service_memory") == 0)
	{
		snprintf(hint, sizeof hint, "%s", "It is an amount of memory, as in 2GB, or 0 for none.");
		return valid_int(value, GUC_UNIT_MB, 0, INT_MAX / 2);
	}
	if (strcmp(name, "gpurec.test_stand_in_devices") == 0)
	{
		snprintf(hint, sizeof hint, "It is an integer from 0 to %d.", kMaxStandInDevices);
		return valid_int(value, 0, 0, kMaxStandInDevices);
	}
	if (strcmp(name, "gpurec.test_stand_in_memory") == 0)
	{
		snprintf(hint, sizeof hint, "%s", "It is an amount of memory, as in 1GB.");
		return valid_int(value, GUC_UNIT_KB, 0, INT_MAX);
	}
	*known = false;
	return false;
}

/* The settings PostgreSQL defines only while gpurec is preloaded (define_settings). */
bool read_at_server_start(const char *name)
{
	for (const char *start_only :
		 {"gpurec.gpus", "gpurec.service_memory", "gpurec.test_stand_in_devices", "gpurec.test_stand_in_memory"})
		if (strcmp(name, start_only) == 0)
			return true;
	return false;
}

/*
 * Without preloading, a gpurec.* setting given before the library loads
 * (SET, ALTER ROLE or DATABASE ... SET, PGOPTIONS, postgresql.conf) is a
 * placeholder string that nothing checked.  Defining the setting would
 * reapply it with only a WARNING and fall back to the default, so that a
 * misspelled gpurec.device = 'gpuu' would silently compute under auto:
 * instead, before anything is defined, a bad value or an unknown gpurec.*
 * name is an ERROR.  Nothing is defined then, so every later call that
 * loads the library meets the same ERROR until the setting is corrected or
 * RESET.  In the postmaster (shared_preload_libraries) the ERROR stops the
 * server from starting, as a bad value of PostgreSQL's own settings in
 * postgresql.conf does; at a session's start (session_preload_libraries) it
 * refuses the connection.  PostgreSQL code: no C++ object lives across its
 * ereport.
 */
void check_settings_given_before_loading()
{
	struct config_generic **variables = get_guc_variables();
	int count = GetNumConfigOptions();
	for (int i = 0; i < count; ++i)
	{
		const struct config_generic *variable = variables[i];
		if (!(variable->flags & GUC_CUSTOM_PLACEHOLDER) || variable->source == PGC_S_DEFAULT ||
			strncmp(variable->name, "gpurec.", strlen("gpurec.")) != 0)
			continue;
		const char *value = *reinterpret_cast<const struct config_string *>(variable)->variable;
		if (value == nullptr)
			value = "";
		bool known = false;
		char hint[256] = "";
		const char *source = GucSource_Names[variable->source];
		if (valid_setting_value(variable->name, value, &known, hint))
		{
			/*
			 * PostgreSQL then removes the placeholder with a WARNING that
			 * the name is invalid: say first that it is gpurec's, and why
			 * it has no effect here.
			 */
			if (!process_shared_preload_libraries_in_progress && read_at_server_start(variable->name))
				ereport(WARNING, (errcode(ERRCODE_CANT_CHANGE_RUNTIME_PARAM),
								  errmsg("\"%s\" has no effect: gpurec is not in shared_preload_libraries",
										 variable->name),
								  errdetail("It was set (%s).  The GPU service's settings are read when the server "
											"starts with gpurec preloaded, and exist only then.",
											source),
								  errhint("Add gpurec to shared_preload_libraries and restart the server, or remove "
										  "the setting.")));
			continue;
		}
		/* at the server's start the setting is the configuration's: no SET or RESET reaches it */
		bool starting = process_shared_preload_libraries_in_progress;
		if (!known)
			ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
							errmsg("unrecognized configuration parameter \"%s\"", variable->name),
							errdetail("It was set (%s) before gpurec was loaded, and gpurec has no such setting.",
									  source),
							errhint("gpurec's settings are gpurec.device, gpurec.timing, gpurec.parallel_workers, "
									"gpurec.cpu_threads, gpurec.geo_pruning, gpurec.track_progress, gpurec.gpus and "
									"gpurec.service_memory.  %s %s.",
									starting ? "Correct or remove, in the server's configuration," : "RESET, or correct,",
									variable->name)));
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("invalid value for parameter \"%s\": \"%s\"", variable->name, value),
						errdetail("It was set (%s) before gpurec was loaded, which checks it as it loads.", source),
						starting ? errhint("%s  Correct it in the server's configuration, then start the server.", hint)
						/* the connection's options: a session that session_preload_libraries refuses has no SET */
						: variable->source == PGC_S_CLIENT
							? errhint("%s  Correct it in the connection's options (PGOPTIONS, or options in the connect "
									  "string); in a session, SET it to a valid value, or RESET %s.",
									  hint, variable->name)
							: errhint("%s  SET it to a valid value, or RESET %s.", hint, variable->name)));
	}
}

} // namespace

void define_settings()
{
	check_settings_given_before_loading();
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
	DefineCustomBoolVariable("gpurec.track_progress",
							 "Shows each running call of this session in gpurec.progress.",
							 "As track_activities does for pg_stat_activity: only superusers and roles granted "
							 "SET on it may turn it off.",
							 &track_progress_setting, true, PGC_SUSET, 0, nullptr, nullptr, nullptr);
	DefineCustomIntVariable("gpurec.parallel_workers",
							"The most parallel workers that read one inner query; -1 follows PostgreSQL.",
							"Workers come from PostgreSQL's own settings (max_parallel_workers_per_gather, "
							"max_parallel_workers, a table's parallel_workers); this may only lower them.  0 reads "
							"every inner query in the calling backend.",
							&parallel_workers_setting, -1, -1, kMaxParallelWorkers, PGC_USERSET, 0, nullptr, nullptr, nullptr);
	DefineCustomIntVariable("gpurec.cpu_threads",
							"The most threads one CPU computation of a call uses; 0 uses every core.",
							"Servers that share a machine (the shards of gpurec_shards on one host, or busy "
							"backends) can each take their part of the cores instead of every backend "
							"starting one thread per core.",
							&cpu_threads_setting, 0, 0, kMaxCpuThreads, PGC_USERSET, 0, nullptr, nullptr, nullptr);
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
		DefineCustomIntVariable(
			"gpurec.service_memory",
			"The GPU service's shared memory, where calls put their input for the GPUs; 0: none.",
			"Read when the server starts, with gpurec in shared_preload_libraries.  Pinned for the GPUs at the "
			"service's start: a call's columns then reach a GPU without extra copies.  A call whose input does not "
			"fit in what is free brings its own memory.",
			&service_memory_setting, 2048, 0, INT_MAX / 2, PGC_POSTMASTER, GUC_UNIT_MB, nullptr, nullptr, nullptr);
		DefineCustomIntVariable("gpurec.test_stand_in_devices",
								"For tests only: the GPU service presents this many devices that compute on the CPU.",
								"0 uses the GPUs.  Read when the server starts.", &test_stand_in_devices_setting, 0, 0,
								kMaxStandInDevices, PGC_POSTMASTER, GUC_NOT_IN_SAMPLE | GUC_NO_SHOW_ALL, nullptr, nullptr, nullptr);
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
	options.shared_memory_bytes = static_cast<int64_t>(service_memory_setting) << 20;
	/* as PostgreSQL's own shared memory: huge pages unless huge_pages = off, falling back where there are none */
	const char *huge_pages = GetConfigOption("huge_pages", true, false);
	options.huge_pages = huge_pages == nullptr || strcmp(huge_pages, "off") != 0;
	return options;
}

namespace {

/*
 * A client that went away ends the call within about a second, as
 * client_connection_check_interval would (PostgreSQL's own check, where
 * that is set): a gpurec_shards partition whose coordinator dropped its
 * connection, after another partition's error or at its own end, stops
 * working for no one.  A backend's only: a parallel or background worker
 * has no client.  ERROR, not FATAL: the call unwinds, and the backend ends
 * at its next read from the client.
 */
void check_client_connection()
{
	static TimestampTz last_check = 0;
	if (MyProcPort == nullptr || whereToSendOutput != DestRemote || client_connection_check_interval > 0)
		return;
	TimestampTz now = GetCurrentTimestamp();
	if (now - last_check < USECS_PER_SEC)
		return;
	last_check = now;
	/* its look at the socket ends the wait event the call shows (waiting on the GPU service): show it again */
	uint32 waiting = *my_wait_event_info;
	bool connected = pq_check_connection();
	if (waiting != 0)
		pgstat_report_wait_start(waiting);
	if (!connected)
		ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE), errmsg("connection to client lost")));
}

} // namespace

ExecContext exec_context_from_settings()
{
	ExecContext ctx;
	ctx.mode = static_cast<DeviceMode>(device_setting);
	ctx.cpu_threads = static_cast<size_t>(cpu_threads_setting);
	/* every function's GPU work goes to the service where there is one, so that no backend starts CUDA */
	ctx.service = gpu_service_client();
	ctx.fail_gpu_alloc = test_fail_gpu_alloc_setting;
	ctx.progress = pg_call([] { return progress_for_call(track_progress_setting); });
	ctx.check_interrupts = [] {
		pg_call([] {
			CHECK_FOR_INTERRUPTS();
			check_client_connection();
		});
		publish_progress();
	};
	ctx.fault = test_fault;
	ctx.inject_fault = [](const TestFault &fault) { pg_call([&fault] { run_test_fault(fault); }); };
	ctx.notice = [](const std::string &message) {
		const char *text = message.c_str();
		pg_call([text] { ereport(NOTICE, (errmsg("%s", text))); });
	};
	/* a store into the backend's PGPROC, which raises nothing */
	ctx.waiting = [](bool waiting) {
		if (waiting)
			pgstat_report_wait_start(PG_WAIT_EXTENSION);
		else
			pgstat_report_wait_end();
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
	check_client_connection();
	publish_progress();
	if (ctx.fault.due(phase))
		run_test_fault(ctx.fault);
}

} // namespace gpurec
