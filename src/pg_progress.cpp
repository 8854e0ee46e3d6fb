/*
 * pg_progress.cpp: the slots of gpurec.progress (see pg_progress.hpp) and
 * the SQL function that reads them.
 *
 * One slot per backend id.  Its backend writes it between two increments
 * of its change count, odd while it writes, as PostgreSQL's own backend
 * status does (pgstat_begin_write_activity): a reader copies a slot and
 * keeps the copy when the count was even and the same before and after.
 * So no lock is taken on either side, and a call's interrupt point costs a
 * few comparisons, and a few stores where its counts moved.
 */
#include "pg_boundary.hpp"

extern "C" {
#include "catalog/pg_authid.h"
#include "commands/dbcommands.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/backendid.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
}

#include <cstring>

#include "pg_progress.hpp"

namespace gpurec {

namespace {

constexpr const char *kShmemName = "gpurec progress";
constexpr int kFunctionBytes = 64; /* NAMEDATALEN: a function's name fits */
constexpr int kUnitBytes = 16;

const char *const phase_names[] = {"starting", "reading", "indexing", "computing", "writing rows"};

struct Slot
{
	uint32 changecount; /* odd while its backend writes */
	int32 pid;			/* 0: no call */
	Oid database;
	Oid role; /* the session's user, as pg_stat_activity's usesysid */
	TimestampTz started;
	TimestampTz phase_started;
	int64 done;
	int64 total; /* -1: not known ahead */
	uint8 phase;
	char function[kFunctionBytes];
	char unit[kUnitBytes];
};

struct Slots
{
	int count;
	Slot slot[FLEXIBLE_ARRAY_MEMBER];
};

Slots *slots = nullptr;		 /* this process's mapping, once attached */
bool attach_failed = false;	 /* no room for them: this backend's calls report nowhere */
Progress backend_progress;	 /* the counts of the backend's running call */
Slot *own = nullptr;		 /* this backend's slot while it shows a call */
/* the name of the function last shown, so that a scalar call made per row (roc_auc) looks it up once */
Oid named_function = InvalidOid;
char function_name[kFunctionBytes];

/* What own last showed, to write only what moved. */
struct Shown
{
	ProgressPhase phase;
	const char *unit;
	uint64_t done, total;
} shown;

shmem_request_hook_type previous_request_hook = nullptr;
shmem_startup_hook_type previous_startup_hook = nullptr;

Size slots_size() { return add_size(offsetof(Slots, slot), mul_size(MaxBackends, sizeof(Slot))); }

/* Maps the slots, creating them when this is the first process to ask.  May ereport. */
void attach()
{
	bool found = false;
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	auto *s = static_cast<Slots *>(ShmemInitStruct(kShmemName, slots_size(), &found));
	if (!found)
	{
		std::memset(s, 0, slots_size());
		s->count = MaxBackends;
	}
	LWLockRelease(AddinShmemInitLock);
	slots = s;
}

void begin_write(Slot *slot)
{
	slot->changecount++;
	pg_write_barrier();
}

void end_write(Slot *slot)
{
	pg_write_barrier();
	slot->changecount++;
}

void empty_own_slot()
{
	if (!own)
		return;
	begin_write(own);
	own->pid = 0;
	end_write(own);
	own = nullptr;
}

/* A backend that ends in a call (FATAL, a terminated backend) leaves no row behind. */
void empty_at_exit(int, Datum) { empty_own_slot(); }

/*
 * Whether this process has the slots mapped, mapping them now when it has
 * not.  Without preloading they come from the spare part of the server's
 * shared memory; where that is too small for them, ShmemInitStruct raises
 * "out of shared memory" holding no lock of its own, and this backend then
 * goes on without them.
 */
bool attached()
{
	if (slots || attach_failed)
		return slots != nullptr;
	MemoryContext caller_context = CurrentMemoryContext;
	PG_TRY();
	{
		attach();
	}
	PG_CATCH();
	{
		if (LWLockHeldByMe(AddinShmemInitLock))
			LWLockRelease(AddinShmemInitLock);
		MemoryContextSwitchTo(caller_context);
		FlushErrorState();
		attach_failed = true;
	}
	PG_END_TRY();
	return slots != nullptr;
}

void request_slots()
{
	if (previous_request_hook)
		previous_request_hook();
	RequestAddinShmemSpace(slots_size());
}

void start_slots()
{
	if (previous_startup_hook)
		previous_startup_hook();
	attach();
}

void copy_text(char *to, size_t size, const char *from)
{
	size_t n = strnlen(from, size - 1);
	std::memcpy(to, from, n);
	to[n] = '\0';
}

int64 shown_total(uint64_t total) { return total == Progress::kUnknown ? -1 : static_cast<int64>(total); }

/* A consistent copy of slot, its backend writing it or not. */
Slot read_slot(const volatile Slot *slot)
{
	Slot copy;
	for (;;)
	{
		uint32 before = slot->changecount;
		pg_read_barrier();
		std::memcpy(&copy, const_cast<const Slot *>(slot), sizeof copy);
		pg_read_barrier();
		uint32 after = slot->changecount;
		if (before == after && (before & 1) == 0)
			return copy;
		CHECK_FOR_INTERRUPTS();
	}
}

} // namespace

void request_progress_memory()
{
	previous_request_hook = shmem_request_hook;
	shmem_request_hook = request_slots;
	previous_startup_hook = shmem_startup_hook;
	shmem_startup_hook = start_slots;
}

ProgressReport progress_for_call(bool track)
{
	if (sql_entry_depth() != 1)
		return {};
	if (own)
		return ProgressReport(&backend_progress);
	if (!track || !attached() || MyBackendId < 1 || MyBackendId > slots->count)
		return {};
	/* a preloading postmaster mapped the slots for every backend: each registers its own ends */
	static bool empties = false;
	if (!empties)
	{
		before_shmem_exit(empty_at_exit, 0);
		on_outermost_entry_end(empty_own_slot);
		empties = true;
	}
	Oid entry_function = outermost_sql_function();
	if (entry_function != named_function)
	{
		char *name = OidIsValid(entry_function) ? get_func_name(entry_function) : nullptr;
		copy_text(function_name, sizeof function_name, name ? name : "");
		named_function = entry_function;
		if (name)
			pfree(name);
	}
	backend_progress.begin(ProgressPhase::Starting, "");
	shown = {ProgressPhase::Starting, "", 0, Progress::kUnknown};
	Slot *slot = &slots->slot[MyBackendId - 1];
	TimestampTz now = GetCurrentTimestamp();
	begin_write(slot);
	slot->pid = MyProcPid;
	slot->database = MyDatabaseId;
	slot->role = GetSessionUserId();
	slot->started = slot->phase_started = now;
	slot->done = 0;
	slot->total = -1;
	slot->phase = static_cast<uint8>(ProgressPhase::Starting);
	std::memcpy(slot->function, function_name, sizeof slot->function);
	slot->unit[0] = '\0';
	end_write(slot);
	own = slot;
	return ProgressReport(&backend_progress);
}

void publish_progress() noexcept
{
	if (!own)
		return;
	Shown now{backend_progress.phase(), backend_progress.unit(), backend_progress.done(), backend_progress.total()};
	if (now.phase == shown.phase && now.done == shown.done && now.total == shown.total && now.unit == shown.unit)
		return;
	bool new_phase = now.phase != shown.phase;
	TimestampTz phase_started = new_phase ? GetCurrentTimestamp() : 0;
	begin_write(own);
	if (new_phase)
	{
		own->phase = static_cast<uint8>(now.phase);
		own->phase_started = phase_started;
	}
	if (now.unit != shown.unit)
		copy_text(own->unit, sizeof own->unit, now.unit);
	own->done = static_cast<int64>(now.done);
	own->total = shown_total(now.total);
	end_write(own);
	shown = now;
}

namespace {

/*
 * gpurec.progress(): a row per running gpurec call that the caller may
 * see, as pg_stat_activity shows a query: its own role's calls, and every
 * call to members of pg_read_all_stats.  PostgreSQL code: it holds no C++
 * object.
 */
Datum progress_rows(FunctionCallInfo fcinfo)
{
	if (!attached())
		ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						errmsg("gpurec.progress: no shared memory for the progress of calls"),
						errdetail("The server's spare shared memory could not hold a slot per backend (max_connections "
								  "and the worker settings make them)."),
						errhint("Add gpurec to shared_preload_libraries, which reserves them when the server starts.")));
	InitMaterializedSRF(fcinfo, 0);
	ReturnSetInfo *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
	Oid me = GetUserId();
	bool sees_all = has_privs_of_role(me, ROLE_PG_READ_ALL_STATS);
	for (int i = 0; i < slots->count; ++i)
	{
		Slot slot = read_slot(&slots->slot[i]);
		if (slot.pid == 0 || (!sees_all && !has_privs_of_role(me, slot.role)))
			continue;
		Datum values[10];
		bool nulls[10] = {};
		char *database = get_database_name(slot.database);
		char *role = GetUserNameFromId(slot.role, true);
		values[0] = Int32GetDatum(slot.pid);
		nulls[1] = database == nullptr;
		values[1] = database ? DirectFunctionCall1(namein, CStringGetDatum(database)) : (Datum) 0;
		nulls[2] = role == nullptr;
		values[2] = role ? DirectFunctionCall1(namein, CStringGetDatum(role)) : (Datum) 0;
		values[3] = CStringGetTextDatum(slot.function);
		values[4] = CStringGetTextDatum(phase_names[slot.phase < lengthof(phase_names) ? slot.phase : 0]);
		values[5] = Int64GetDatum(slot.done);
		nulls[6] = slot.total < 0;
		values[6] = Int64GetDatum(slot.total);
		nulls[7] = slot.unit[0] == '\0';
		values[7] = CStringGetTextDatum(slot.unit);
		values[8] = TimestampTzGetDatum(slot.started);
		values[9] = TimestampTzGetDatum(slot.phase_started);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

} // namespace
} // namespace gpurec

GPUREC_POSTGRES_FUNCTION(gpurec_progress, gpurec::progress_rows)
