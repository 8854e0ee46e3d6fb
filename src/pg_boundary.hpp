/*
 * pg_boundary.hpp: the error boundary between PostgreSQL and C++.
 *
 * PostgreSQL reports errors by longjmp; C++ by exceptions.  Neither may cross
 * the other's frames: a longjmp skips C++ destructors (leaking GPU memory,
 * buffers, locks), and an exception unwinding through PostgreSQL frames
 * skips PG_TRY bookkeeping.  So the boundary is crossed in exactly two places:
 *
 *   GPUREC_SQL_FUNCTION  every SQL entry point runs its C++ body inside
 *                        sql_entry_guard(), which turns any C++ exception into
 *                        an ereport(ERROR) after all C++ objects are gone.
 *   pg_call(f)           C++ code calling PostgreSQL runs it under PG_TRY; a
 *                        PostgreSQL ERROR comes back as a PgError exception,
 *                        unwinds the C++ stack normally, and is re-thrown by
 *                        the entry guard with its SQLSTATE, message, detail
 *                        and context intact.
 *
 * The callable given to pg_call must not own objects with destructors while
 * it calls into PostgreSQL: a longjmp would skip them.
 */
#pragma once

extern "C" {
#include "postgres.h"

#include "fmgr.h"
}

#include <exception>
#include <type_traits>
#include <utility>

namespace gpurec {

/* A PostgreSQL ERROR caught by pg_call, held until the entry guard re-throws it. */
class PgError : public std::exception
{
  public:
	explicit PgError(ErrorData *data) : data_(data) {}
	ErrorData *data() const { return data_; }
	const char *what() const noexcept override;

  private:
	ErrorData *data_;
};

/* Runs fn(arg) under PG_TRY; throws PgError if it raised an ERROR. */
void run_postgres_code(void (*fn)(void *), void *arg);

template <typename Fn> auto pg_call(Fn &&fn) -> decltype(fn())
{
	using Result = decltype(fn());
	if constexpr (std::is_void_v<Result>)
	{
		run_postgres_code([](void *f) { (*static_cast<std::remove_reference_t<Fn> *>(f))(); },
						  static_cast<void *>(&fn));
	}
	else
	{
		Result result{};
		auto store = [&]() { result = fn(); };
		run_postgres_code([](void *f) { (*static_cast<decltype(store) *>(f))(); },
						  static_cast<void *>(&store));
		return result;
	}
}

/* Runs body; any C++ exception becomes an ereport(ERROR) once body's frames are gone. */
Datum sql_entry_guard(FunctionCallInfo fcinfo, Datum (*body)(FunctionCallInfo));

/*
 * sql_entry_guard for a function gpurec_shards runs on a partition through
 * PL/Proxy, which takes a partition's query_canceled (57014) for a cancel
 * of its own caller and then waits, without end, for partitions that have
 * answered.  So a cancel raised in body (the partition's own
 * statement_timeout or pg_cancel_backend; or PL/Proxy's cancel, whose
 * answer it ignores) leaves the partition as ERRCODE_PARTITION_CANCELED,
 * which PL/Proxy passes on as any error and gpurec_shards' translation
 * turns back into 57014 naming the partition.
 */
Datum partition_entry_guard(FunctionCallInfo fcinfo, Datum (*body)(FunctionCallInfo));

/*
 * The entry guards running in this backend: 1 inside a gpurec function
 * called from SQL, more inside one that another's inner query calls; and
 * the outermost one's function (InvalidOid outside any).
 */
int sql_entry_depth();
Oid outermost_sql_function();

/*
 * fn runs once the outermost entry point's body has returned or thrown,
 * before its error is raised (gpurec.progress empties the call's row).
 * Plain code: it must not ereport.
 */
void on_outermost_entry_end(void (*fn)());

/*
 * For PostgreSQL callbacks into C++ (a DestReceiver's methods): runs fn and
 * turns any C++ exception into ereport(ERROR) after fn's objects are gone.
 */
void cpp_callback_guard(void (*fn)(void *), void *arg);

} // namespace gpurec

/* Declares the V1 SQL function `name` whose C++ body is `body(fcinfo)`. */
#define GPUREC_SQL_FUNCTION(name, body)                                                            \
	extern "C" {                                                                                   \
	PG_FUNCTION_INFO_V1(name);                                                                     \
	Datum name(PG_FUNCTION_ARGS) { return gpurec::sql_entry_guard(fcinfo, body); }                \
	}

/* GPUREC_SQL_FUNCTION for what a partition runs (partition_entry_guard). */
#define GPUREC_PARTITION_FUNCTION(name, body)                                                      \
	extern "C" {                                                                                   \
	PG_FUNCTION_INFO_V1(name);                                                                     \
	Datum name(PG_FUNCTION_ARGS) { return gpurec::partition_entry_guard(fcinfo, body); }          \
	}

/* A partition's cancel on its way to the coordinator (gpurec_shards' translated_error). */
#define ERRCODE_PARTITION_CANCELED MAKE_SQLSTATE('5', '7', 'R', '1', '4')

/*
 * Declares the V1 SQL function `name` that is PostgreSQL code itself
 * (`fn(fcinfo)` may ereport and holds no C++ object, as an aggregate's
 * support functions): its C++ work goes through cpp_callback_guard.
 */
#define GPUREC_POSTGRES_FUNCTION(name, fn)                                                         \
	extern "C" {                                                                                   \
	PG_FUNCTION_INFO_V1(name);                                                                     \
	Datum name(PG_FUNCTION_ARGS) { return fn(fcinfo); }                                            \
	}
