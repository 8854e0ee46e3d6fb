/*
 * pg_gpurec.cpp: the module's entry (PG_MODULE_MAGIC, _PG_init),
 * gpurec.devices(), and for gpurec_shards
 * gpurec_internal.statement_text() and gpurec_internal.raise_error().
 *
 * _PG_init only defines the settings (pg_settings.cpp), registers the GPU
 * service and, while preloading, reserves gpurec.progress's shared memory:
 * CUDA starts lazily in the first backend call that needs a GPU, never in
 * the postmaster (a CUDA context does not survive fork).
 */
#include "pg_boundary.hpp"

extern "C" {
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/wait_event.h"
}

#include <string>

#include "errors.hpp"
#include "pg_gpu_service.hpp"
#include "pg_output.hpp"
#include "pg_progress.hpp"
#include "pg_settings.hpp"

extern "C" {
PG_MODULE_MAGIC;
void _PG_init(void);
}

void _PG_init(void)
{
	gpurec::define_settings();
	gpurec::register_gpu_service(gpurec::service_options_from_settings);
	if (process_shared_preload_libraries_in_progress)
		gpurec::request_progress_memory();
}

namespace gpurec {
namespace {

/*
 * One row per GPU: the service's, with its load, where it runs; else the
 * GPUs this backend sees, the service's columns NULL.
 */
Datum devices_body(FunctionCallInfo fcinfo)
{
	std::vector<service::DeviceStatus> devices;
	int32 service_pid = 0;
	if (service::Client *client = gpu_service_client())
	{
		ExecContext ctx = exec_context_from_settings();
		service::Status status = client->status(ctx);
		devices = status.devices;
		service_pid = status.pid;
	}
	else
		for (const gpu::DeviceInfo &info : gpu::devices())
			devices.push_back({info});
	ResultWriter out(fcinfo);
	for (const service::DeviceStatus &d : devices)
	{
		const char *name = d.info.name.c_str();
		const char *capability = d.info.compute_capability.c_str();
		Datum values[10];
		bool nulls[10] = {};
		pg_call([&] {
			values[0] = Int32GetDatum(d.info.device_id);
			values[1] = CStringGetTextDatum(name);
			values[2] = CStringGetTextDatum(capability);
			values[3] = Int64GetDatum(d.info.total_memory_bytes);
			values[4] = Int64GetDatum(d.info.free_memory_bytes);
			values[5] = Int32GetDatum(d.info.multiprocessors);
			values[6] = Int32GetDatum(d.calls_running);
			values[7] = Int32GetDatum(d.calls_queued);
			values[8] = Int64GetDatum(d.memory_used);
			values[9] = Int32GetDatum(service_pid);
		});
		for (int c = 6; c < 10; ++c)
			nulls[c] = service_pid == 0;
		out.put(values, nulls);
	}
	return (Datum) 0;
}

/*
 * Raises the error its arguments describe, with a detail and a hint only
 * where they are not NULL (PL/pgSQL's RAISE refuses a NULL option and shows
 * an empty one), and without the callers' context: gpurec_shards raises its
 * translated errors here, once, as errors of the function the user called
 * rather than of its internal statements.  The PG_TRY around this restores
 * the context stack.
 */
Datum raise_error_body(FunctionCallInfo fcinfo)
{
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		throw Error(sqlstate::null_value_not_allowed, "raise_error needs a SQLSTATE and a message");
	pg_call([&] {
		char *state = text_to_cstring(PG_GETARG_TEXT_PP(0));
		char *message = text_to_cstring(PG_GETARG_TEXT_PP(1));
		char *detail = PG_ARGISNULL(2) ? nullptr : text_to_cstring(PG_GETARG_TEXT_PP(2));
		char *hint = PG_ARGISNULL(3) ? nullptr : text_to_cstring(PG_GETARG_TEXT_PP(3));
		/* as plpgsql's RAISE: five digits or capitals, and not of the classes that are no error (00, 01, 02) */
		bool valid = strlen(state) == 5 && strspn(state, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ") == 5 &&
					 !(state[0] == '0' && (state[1] == '0' || state[1] == '1' || state[1] == '2'));
		if (!valid)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("invalid SQLSTATE code \"%s\"", state)));
		error_context_stack = nullptr;
		ereport(ERROR, (errcode(MAKE_SQLSTATE(state[0], state[1], state[2], state[3], state[4])),
						errmsg_internal("%s", message), detail ? errdetail_internal("%s", detail) : 0,
						hint ? errhint("%s", hint) : 0));
	});
	PG_RETURN_VOID();
}

/* refuse_split(what, key, cluster, part, other_part): split_key_error, for gpurec_shards' checks in SQL */
Datum refuse_split_body(FunctionCallInfo fcinfo)
{
	std::string what = pg_call([&] { return std::string(text_to_cstring(PG_GETARG_TEXT_PP(0))); });
	std::string cluster = pg_call([&] { return std::string(text_to_cstring(PG_GETARG_TEXT_PP(2))); });
	throw split_key_error(what, PG_GETARG_INT64(1), cluster, PG_GETARG_INT32(3), PG_GETARG_INT32(4));
}

} // namespace
} // namespace gpurec

GPUREC_SQL_FUNCTION(gpurec_refuse_split, gpurec::refuse_split_body)
GPUREC_SQL_FUNCTION(gpurec_raise_error, gpurec::raise_error_body)
GPUREC_SQL_FUNCTION(gpurec_devices, gpurec::devices_body)
