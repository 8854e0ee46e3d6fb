/*
 * pg_boundary.cpp: the error boundary's two crossings (see pg_boundary.hpp):
 * run_postgres_code catches a PostgreSQL ERROR under PG_TRY for pg_call, and
 * the guards turn a C++ exception into ereport(ERROR) once its frames are
 * gone.
 */
#include "pg_boundary.hpp"

extern "C" {
#include "utils/memutils.h"
}

#include <cstdio>
#include <cstring>
#include <new>

#include "errors.hpp"

namespace gpurec {

const char *PgError::what() const noexcept
{
	return data_ && data_->message ? data_->message : "PostgreSQL error";
}

void run_postgres_code(void (*fn)(void *), void *arg)
{
	MemoryContext caller_context = CurrentMemoryContext;
	ErrorData *volatile error = nullptr;

	PG_TRY();
	{
		fn(arg);
	}
	PG_CATCH();
	{
		/*
		 * Copy the error out of ErrorContext into the (sub)transaction's
		 * memory: it stays valid while the C++ stack unwinds, and goes with
		 * the abort, also when a plpgsql EXCEPTION block or a savepoint
		 * catches the error and the transaction goes on.
		 */
		MemoryContextSwitchTo(CurTransactionContext);
		error = CopyErrorData();
		FlushErrorState();
	}
	PG_END_TRY();

	MemoryContextSwitchTo(caller_context);
	/* thrown only here, after PG_END_TRY restored PostgreSQL's handler stack */
	if (error)
		throw PgError(error);
}

namespace {

/* What a caught C++ exception said, in storage that needs no destructor. */
struct CaughtError
{
	int sqlerrcode = 0;
	ErrorData *postgres_error = nullptr;
	/* filled only when an exception is caught: initialising them would cost every call */
	char message[1024];
	char detail[1024];
	char hint[512];
};

void copy_text(char *dst, size_t size, const char *src)
{
	std::snprintf(dst, size, "%s", src ? src : "");
}

int sqlstate_code(const char *s)
{
	return MAKE_SQLSTATE(s[0], s[1], s[2], s[3], s[4]);
}

/*
 * Runs fn(arg), recording an exception in *caught.  No PostgreSQL function is
 * called while an exception object is alive (a longjmp out of a catch block
 * would corrupt the C++ runtime's state): the error is raised by the caller.
 */
template <typename Fn> bool run_catching(Fn &&fn, CaughtError *caught)
{
	caught->detail[0] = caught->hint[0] = '\0';
	try
	{
		fn();
		return true;
	}
	catch (const PgError &e)
	{
		caught->postgres_error = e.data();
	}
	catch (const Error &e)
	{
		caught->sqlerrcode = sqlstate_code(e.sqlstate());
		copy_text(caught->message, sizeof caught->message, e.what());
		copy_text(caught->detail, sizeof caught->detail, e.detail().c_str());
		copy_text(caught->hint, sizeof caught->hint, e.hint().c_str());
	}
	catch (const std::bad_alloc &)
	{
		caught->sqlerrcode = ERRCODE_OUT_OF_MEMORY;
		copy_text(caught->message, sizeof caught->message, "out of memory");
	}
	catch (const std::exception &e)
	{
		caught->sqlerrcode = ERRCODE_INTERNAL_ERROR;
		copy_text(caught->message, sizeof caught->message, e.what());
	}
	catch (...)
	{
		caught->sqlerrcode = ERRCODE_INTERNAL_ERROR;
		copy_text(caught->message, sizeof caught->message, "unknown C++ exception");
	}
	return false;
}

pg_attribute_noreturn() void raise_caught(const CaughtError &caught)
{
	if (caught.postgres_error)
		ReThrowError(caught.postgres_error);
	ereport(ERROR, (errcode(caught.sqlerrcode), errmsg("%s", caught.message),
					caught.detail[0] ? errdetail("%s", caught.detail) : 0,
					caught.hint[0] ? errhint("%s", caught.hint) : 0));
	pg_unreachable();
}

} // namespace

namespace {

int entry_depth = 0;
Oid outermost_function = InvalidOid;
void (*outermost_end)() = nullptr;

} // namespace

int sql_entry_depth() { return entry_depth; }

Oid outermost_sql_function() { return outermost_function; }

void on_outermost_entry_end(void (*fn)()) { outermost_end = fn; }

namespace {

Datum guarded_entry(FunctionCallInfo fcinfo, Datum (*body)(FunctionCallInfo), bool on_partition)
{
	CaughtError caught;
	Datum result = (Datum) 0;
	if (entry_depth++ == 0)
		outermost_function = fcinfo->flinfo ? fcinfo->flinfo->fn_oid : InvalidOid;
	bool returned = run_catching([&] { result = body(fcinfo); }, &caught);
	if (--entry_depth == 0 && outermost_end)
		outermost_end();
	if (returned)
		return result;
	if (on_partition)
	{
		int &code = caught.postgres_error ? caught.postgres_error->sqlerrcode : caught.sqlerrcode;
		if (code == ERRCODE_QUERY_CANCELED)
			code = ERRCODE_PARTITION_CANCELED;
	}
	raise_caught(caught);
}

} // namespace

Datum sql_entry_guard(FunctionCallInfo fcinfo, Datum (*body)(FunctionCallInfo))
{
	return guarded_entry(fcinfo, body, false);
}

Datum partition_entry_guard(FunctionCallInfo fcinfo, Datum (*body)(FunctionCallInfo))
{
	return guarded_entry(fcinfo, body, true);
}

void cpp_callback_guard(void (*fn)(void *), void *arg)
{
	CaughtError caught;
	if (!run_catching([&] { fn(arg); }, &caught))
		raise_caught(caught);
}

} // namespace gpurec
