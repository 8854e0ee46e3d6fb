/*
 * read.cpp: read_inner_query (see read.hpp): prepares an inner query
 * through SPI, refuses anything but one read-only SELECT, binds its columns
 * by name, starts CUDA beside the read where the call will need it, and
 * runs the query with the caller's privileges, read-only: in parallel
 * (parallel.cpp) where it can, else into the serial receiver
 * (receiver.cpp).  Then the gpurec.timing note of how it read.
 */
#include "read.hpp"

extern "C" {
#include "access/xact.h"
#include "executor/spi.h"
#include "storage/ipc.h"
#include "nodes/nodeFuncs.h"
#include "nodes/parsenodes.h"
#include "utils/memutils.h"
#include "tcop/utility.h"
#include "utils/plancache.h"
}

#include <cmath>
#include <cstdio>

#include "errors.hpp"
#include "read_internal.hpp"

namespace gpurec {

PlanEstimate plan_estimate(SPIPlanPtr plan)
{
	PlanEstimate estimate;
	inspect_plan(plan, [&estimate](PlannedStmt *stmt) {
		if (stmt->planTree)
			estimate = PlanEstimate{stmt->planTree->plan_rows, static_cast<double>(stmt->planTree->plan_width)};
	});
	return estimate;
}

namespace {

/*
 * Whether a query, or one inside it (a subquery, a view's, a CTE's), locks
 * rows: SPI would refuse it later, with a message about non-volatile
 * functions that names none of gpurec's.
 */
bool locks_rows(Node *node, void *context)
{
	if (node == nullptr)
		return false;
	/* PostgreSQL 15's walkers take an unprototyped function; void (*)() converts to it without a warning */
	auto walker = reinterpret_cast<bool (*)()>(reinterpret_cast<void (*)()>(locks_rows));
	if (IsA(node, Query))
	{
		Query *query = castNode(Query, node);
		return query->rowMarks != NIL || query_tree_walker(query, walker, context, 0);
	}
	return expression_tree_walker(node, walker, context);
}

/* Refuses anything but one read-only query. */
void check_read_only(SPIPlanPtr plan, const char *what)
{
	List *sources = SPI_plan_get_plan_sources(plan);
	if (list_length(sources) == 0)
		ereport(ERROR, (errcode(ERRCODE_SYNTAX_ERROR), errmsg("the %s is empty", what),
						errhint("Pass one SELECT statement that returns the expected columns.")));
	if (list_length(sources) != 1)
		ereport(ERROR, (errcode(ERRCODE_SYNTAX_ERROR),
						errmsg("the %s must be exactly one SQL statement", what)));
	CachedPlanSource *source = static_cast<CachedPlanSource *>(linitial(sources));
	ListCell *lc;
	foreach (lc, source->query_list)
	{
		Query *query = lfirst_node(Query, lc);
		const char *refused = nullptr;
		if (query->utilityStmt != nullptr)
			refused = CreateCommandName(query->utilityStmt); /* "SELECT INTO" too */
		else if (query->commandType != CMD_SELECT)
			refused = GetCommandTagName(source->commandTag);
		else if (query->hasModifyingCTE)
			refused = "a data-modifying WITH";
		else if (locks_rows(reinterpret_cast<Node *>(query), nullptr))
			refused = "SELECT FOR UPDATE/SHARE";
		if (refused)
			ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
							errmsg("the %s must be a read-only SELECT", what),
							errdetail("gpurec runs inner queries read-only; it refuses %s.", refused),
							errhint("Modify or lock the data in a statement of its own.")));
	}
}

/* The text of the one statement of `source`: without a trailing semicolon or comment. */
char *statement_text(CachedPlanSource *source)
{
	RawStmt *raw = source->raw_parse_tree;
	const char *text = source->query_string + raw->stmt_location;
	return raw->stmt_len > 0 ? pnstrdup(text, raw->stmt_len) : pstrdup(text);
}


/*
 * A call that will compute on the GPU starts CUDA while it reads, so that
 * a new session's first such call waits for CUDA's start only where it
 * outlasts the read: every call under gpurec.device = gpu, and under auto
 * a call whose input the planner expects large enough for the GPU
 * (InputTable::set_gpu_from_rows).  The backend's exit waits for a start
 * still under way, so that CUDA's own teardown at exit never meets it.
 * Returns whether a start began.  PostgreSQL code.
 */
bool start_gpu_while_reading(const ExecContext &ctx, const InputTable &table, SPIPlanPtr plan)
{
	static bool exit_waits = false;
	/* a call the GPU service computes finds CUDA started there */
	if (ctx.service)
		return false;
	bool will_use_gpu =
		ctx.mode == DeviceMode::Gpu ||
		(ctx.mode == DeviceMode::Auto && !gpu::found_unusable() && std::isfinite(table.gpu_from_rows()) &&
		 plan_estimate(plan).rows >= table.gpu_from_rows());
	if (!will_use_gpu)
		return false;
	if (!exit_waits)
	{
		on_proc_exit([](int, Datum) { gpu::finish_background_start(); }, 0);
		exit_waits = true;
	}
	return gpu::start_in_background();
}

/*
 * SPI_prepare of an inner query.  An inner query is text that gpurec runs
 * as a statement of its own, so a $1 in it names no parameter of the
 * statement around the call (a PREPARE's, a PL/pgSQL function's): that
 * 42P02 gets a hint of the way that works, the value put into the text with
 * format().  PostgreSQL code.
 */
SPIPlanPtr prepare_inner_query(const char *query, MemoryContext call_context)
{
	SPIPlanPtr plan = nullptr;
	PG_TRY();
	{
		plan = SPI_prepare(query, 0, nullptr);
	}
	PG_CATCH();
	{
		MemoryContext error_context = MemoryContextSwitchTo(call_context);
		ErrorData *error = CopyErrorData();
		if (error->sqlerrcode != ERRCODE_UNDEFINED_PARAMETER || error->hint != nullptr)
		{
			MemoryContextSwitchTo(error_context);
			FreeErrorData(error);
			PG_RE_THROW();
		}
		FlushErrorState();
		error->hint = pstrdup("An inner query is text that runs as a statement of its own: it takes no parameters.  "
							  "Put a value into the text with format(), as in "
							  "format('SELECT ... WHERE product_id = %L', $1).");
		ReThrowError(error);
	}
	PG_END_TRY();
	return plan;
}

/*
 * An error's context as the serial read gives it, where the parallel read
 * gave it otherwise: SPI's line names the statement it runs, there the
 * wrapper around the inner query (wrapper_text), and the direct scan's and
 * the workers' errors have none.  The wrapper's line becomes the inner
 * query's, or the inner query's is added.  PostgreSQL code.
 */
char *context_naming_query(const char *context, const char *wrapper, const char *query)
{
	char *query_line = psprintf("SQL statement \"%s\"", query);
	if (context == nullptr)
		return query_line;
	char *wrapper_line = psprintf("SQL statement \"%s\"", wrapper);
	StringInfoData named;
	initStringInfo(&named);
	if (const char *at = strstr(context, wrapper_line))
	{
		appendBinaryStringInfo(&named, context, static_cast<int>(at - context));
		appendStringInfoString(&named, query_line);
		appendStringInfoString(&named, at + strlen(wrapper_line));
	}
	else if (strstr(context, query_line) == nullptr)
		appendStringInfo(&named, "%s\n%s", context, query_line);
	else
		appendStringInfoString(&named, context);
	return named.data;
}

/* try_parallel_read, its errors' context as the serial read's (context_naming_query).  PostgreSQL code. */
ParallelReadOutcome read_in_parallel(SPIPlanPtr plan, CachedPlanSource *source, const ColumnBinding &binding,
									 InputTable *table, ExecContext *ctx, MemoryContext call_context)
{
	const char *query = statement_text(source);
	ParallelReadOutcome outcome;
	PG_TRY();
	{
		outcome = try_parallel_read(plan, query, binding, table, ctx, call_context);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(call_context);
		ErrorData *error = CopyErrorData();
		FlushErrorState();
		error->context = context_naming_query(error->context, wrapper_text(query, binding), source->query_string);
		ReThrowError(error);
	}
	PG_END_TRY();
	return outcome;
}

struct ColumnTypesArgs
{
	InputTable *table;
	const ColumnBinding *binding;
	ExecContext *ctx;
};

void set_table_column_types(void *arg)
{
	auto *a = static_cast<ColumnTypesArgs *>(arg);
	set_column_types(*a->table, *a->binding, a->ctx->keys);
}

/*
 * PostgreSQL code: prepares the query, checks it, and runs it into the
 * table; *gpu_started: whether CUDA's start began beside it.
 */
ParallelReadOutcome run_query(const char *query, InputTable *table, ExecContext *ctx, bool *gpu_started)
{
	SPIExecuteOptions options;
	SPIPlanPtr plan;
	ColumnBinding binding;
	ParallelReadOutcome outcome;
	MemoryContext call_context = CurrentMemoryContext;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	plan = prepare_inner_query(query, call_context);
	if (plan == nullptr)
		elog(ERROR, "could not prepare the %s: %s", table->what(),
			 SPI_result_code_string(SPI_result));
	check_read_only(plan, table->what());
	*gpu_started = start_gpu_while_reading(*ctx, *table, plan);
	CachedPlanSource *source = static_cast<CachedPlanSource *>(linitial(SPI_plan_get_plan_sources(plan)));
	/* errors of binding name the query, as SPI's own context does for errors while it runs */
	ErrorContextCallback context;
	context.callback = [](void *arg) { errcontext("SQL statement \"%s\"", static_cast<const char *>(arg)); };
	context.arg = const_cast<char *>(query);
	context.previous = error_context_stack;
	error_context_stack = &context;
	bind_columns(&binding, *table, source->resultDesc, *ctx->keys);
	error_context_stack = context.previous;
	ColumnTypesArgs types{table, &binding, ctx};
	cpp_callback_guard(set_table_column_types, &types);

	/*
	 * SPI's read_only checks the statement, not the functions it calls; a
	 * read-only transaction state refuses writes anywhere inside (25006).
	 * A subtransaction abort restores the flag too.
	 */
	bool was_read_only = XactReadOnly;
	XactReadOnly = true;
	PG_TRY();
	{
		if (table->keeps_row_order())
			outcome.why_serial = "its row order is kept";
		else if (binds_coded_ids(binding) && table->key_filter())
			/* a worker's codes are its own, not the call's that the filter's keys are */
			outcome.why_serial = "its rows are filtered by uuid or text ids";
		else if (binds_postgis_points(binding))
			/* one SRID for every row: checked as they come, in one process */
			outcome.why_serial = "its points are PostGIS points";
		else
			outcome = read_in_parallel(plan, source, binding, table, ctx, call_context);
		if (!outcome.ran)
		{
			memset(&options, 0, sizeof options);
			options.read_only = true;
			options.dest = create_input_receiver(table, ctx, binding);
			SPI_execute_plan_extended(plan, &options);
		}
	}
	PG_FINALLY();
	{
		XactReadOnly = was_read_only;
	}
	PG_END_TRY();
	if (binds_postgis_points(binding))
		note_point_source(*table, binding, source->resultDesc);
	SPI_freeplan(plan);
	SPI_finish();
	return outcome;
}

} // namespace

void read_inner_query(const char *query, InputTable &table, ExecContext &ctx)
{
	if (table.specs().size() > static_cast<size_t>(kMaxColumns))
		throw Error(sqlstate::internal_error, "too many columns in one inner query");
	Stopwatch clock;
	/* a call's inner queries count as one reading, in rows read (those a NULL skipped too) */
	if (ctx.progress.phase() != ProgressPhase::Reading)
		ctx.progress.begin(ProgressPhase::Reading, "rows");
	uint64_t rows_before = table.rows() + table.skipped_rows(), done_before = ctx.progress.done();
	InputTable *destination = &table;
	ExecContext *call = &ctx;
	bool gpu_started = false;
	bool *started = &gpu_started;
	if (!ctx.keys)
		ctx.keys = std::make_shared<CallKeys>();
	table.take_ids_as_codes();
	ParallelReadOutcome outcome =
		pg_call([query, destination, call, started] { return run_query(query, destination, call, started); });
	/* the ids as codes of every process numbered at once: the last step of joining the workers' columns */
	Stopwatch settling;
	/* the calling backend counted its own rows as it read them; the workers' count as they join */
	ctx.progress.reach(done_before + (table.rows() + table.skipped_rows() - rows_before));
	table.settle_ids(pieces_on_threads(ctx, Phase::Read));
	/* uuid and text ids numbered in their order, in this table and in the call's earlier ones */
	ctx.keys->settle(pieces_on_threads(ctx, Phase::Read), parallel_workers(SIZE_MAX, ctx));
	outcome.join_ms += settling.elapsed_ms();
	ctx.times.read_ms += clock.elapsed_ms();

	std::string note = std::string(table.what()) + ": ";
	if (outcome.ran && outcome.worker_parts > 0)
	{
		char joined[64];
		std::snprintf(joined, sizeof joined, "%.3f", outcome.join_ms);
		note += std::to_string(outcome.worker_parts) + " of " + std::to_string(outcome.planned_workers) +
				" planned parallel workers read rows, beside the calling backend (" +
				(outcome.partials ? "each process's partial result taken in " : "their columns joined in ") + joined +
				" ms), " + (outcome.direct ? "by a direct scan of the table" : "through the query's parallel plan") +
				(outcome.partials_declined ? " (as columns: by the table's statistics, partial results would not be "
											 "much smaller)"
										   : "");
	}
	else
		note += std::string("the calling backend alone, as ") + (outcome.why_serial ? outcome.why_serial : "planned");
	if (gpu_started)
		ctx.gpu_start_began_in_read = true;
	ctx.read_notes += (ctx.read_notes.empty() ? "" : "; ") + note;
}

} // namespace gpurec
