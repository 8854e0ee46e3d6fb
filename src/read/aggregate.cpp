/*
 * aggregate.cpp: the general way of the parallel read (see
 * read_internal.hpp, part 4a): the aggregate gpurec_internal._read_columns, with an
 * `internal` state and serial, deserial and combine functions, PARALLEL
 * SAFE, wrapped around the inner query:
 *
 *     SELECT gpurec_internal._read_columns('<specs>', q."col", ...) FROM (<inner>) AS q
 *
 * When the planner splits it (Finalize Aggregate over Gather over Partial
 * Aggregate), any query it can run in parallel is read on several cores:
 * joins, views, partitioned tables included.  Its functions run in two
 * kinds of process:
 *   - a parallel worker: the transition function appends rows to columns of
 *     the worker's own, whose chunks it takes from a dynamic shared memory
 *     area the leader made for it (ChunkAreas); the serial function writes the
 *     columns' flat form, with the chunks as references into that area, and
 *     sends where that is as the worker's partial state;
 *   - the calling backend (the leader): its own share of the rows goes
 *     straight into the call's table (the `active_read` of this backend), its
 *     serial function sends an empty state, and the combine function keeps
 *     every worker's state, all appended to the table at once when the last
 *     has arrived (parallel.cpp: append_parts).
 * The final function only returns how many worker states arrived.
 *
 * Each state owns C++ objects (the worker's columns); a reset callback on
 * the aggregate's memory context deletes them, so an ERROR or a cancel
 * anywhere frees them with the context.
 */
#include "pg_boundary.hpp"

extern "C" {
#include "access/parallel.h"
#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/plannodes.h"
#include "utils/builtins.h"
#include "utils/dsa.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
}

#include <algorithm>

#include "pg_settings.hpp"
#include "read_internal.hpp"

namespace gpurec {

namespace {

/*
 * How a partial state travels: its first byte.  A worker's columns are in
 * the area of its chunks already (ChunkAreas); their flat form
 * (dictionaries, references to the chunks) goes there too, and the state
 * says where.  Only when the area
 * cannot hold that does it ride in the state itself, through the tuple
 * queue (a 64 kB ring: slower for a large dictionary).
 */
enum class StateKind : uint8_t
{
	Empty = 0,	/* the leader's own: its rows are in the call's table already */
	Inline = 1, /* the flat form follows */
	InArea = 2	/* a dsa_pointer and a byte count follow */
};

/* A state's header: its kind, and the index of the chunk area its references point into. */
constexpr size_t kStateHeader = 1 + sizeof(int32);

bytea *state_header(StateKind kind, int32 chunk_area_index, size_t payload)
{
	auto *out = static_cast<bytea *>(palloc(VARHDRSZ + kStateHeader + payload));
	SET_VARSIZE(out, VARHDRSZ + kStateHeader + payload);
	*reinterpret_cast<uint8_t *>(VARDATA(out)) = static_cast<uint8_t>(kind);
	memcpy(VARDATA(out) + 1, &chunk_area_index, sizeof chunk_area_index);
	return out;
}

/* The state of this aggregate call, made on its first row in the aggregate's context. */
ReadState *state_for(FunctionCallInfo fcinfo)
{
	if (!PG_ARGISNULL(0))
		return reinterpret_cast<ReadState *>(PG_GETARG_POINTER(0));
	MemoryContext aggregate_context;
	if (!AggCheckCallContext(fcinfo, &aggregate_context))
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("gpurec_internal._read_columns is gpurec's own and runs only inside its functions")));
	if (!IsParallelWorker() && active_read == nullptr)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("gpurec_internal._read_columns is gpurec's own and runs only inside its functions")));
	if (PG_ARGISNULL(1))
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("gpurec_internal._read_columns: no column specs")));
	char *specs = text_to_cstring(PG_GETARG_TEXT_PP(1));
	NewStateArgs args{specs, nullptr};
	cpp_callback_guard(make_state, &args);
	ReadState *state = args.state;
	/*
	 * Each argument's SQL type must give the conversion the specs name: they
	 * come as text, and a conversion applied to a Datum of another type
	 * would read it as what it is not.
	 */
	const ColumnBinding &b = state->binding;
	bool types_agree = PG_NARGS() == 2 + b.max_attno;
	for (int c = 0; c < b.ncolumns && types_agree; ++c)
		if (b.attno[c] >= 0)
			types_agree = conversion_for(b.specs[c], getBaseType(get_fn_expr_argtype(fcinfo->flinfo, 2 + b.attno[c]))) ==
						  b.conversion[c];
	if (!types_agree)
	{
		delete state;
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
						errmsg("gpurec_internal._read_columns: the columns passed are not those the specs name")));
	}
	/* the context's reset or deletion (the query's end, an ERROR) frees the state */
	auto *callback = static_cast<MemoryContextCallback *>(MemoryContextAlloc(aggregate_context, sizeof(MemoryContextCallback)));
	callback->func = [](void *arg) { delete static_cast<ReadState *>(arg); }; /* destructors do not throw */
	callback->arg = state;
	MemoryContextRegisterResetCallback(aggregate_context, callback);
	if (state->own)
		attach_worker(state, aggregate_context);
	/* the read phase's first interrupt point comes before any row, as in the serial path */
	postgres_interrupt_point(state->ctx, Phase::Read);
	return state;
}

Datum read_columns_transition(FunctionCallInfo fcinfo)
{
	ReadState *s = state_for(fcinfo);
	Datum values[kMaxColumns];
	bool isnull[kMaxColumns];
	int passed = s->binding.max_attno;
	if (PG_NARGS() != 2 + passed)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
						errmsg("gpurec_internal._read_columns: %d columns passed, %d expected", PG_NARGS() - 2, passed)));
	for (int k = 0; k < passed; ++k)
	{
		values[k] = PG_GETARG_DATUM(2 + k);
		isnull[k] = PG_ARGISNULL(2 + k);
	}
	add_row(&s->batch, *s->table, s->binding, values, isnull, s->ctx);
	PG_RETURN_POINTER(s);
}

Datum read_columns_serialize(FunctionCallInfo fcinfo)
{
	ReadState *s = reinterpret_cast<ReadState *>(PG_GETARG_POINTER(0));
	if (!s->own) /* the leader's share is in the call's table already */
	{
		flush_batch(&s->batch, *s->table, s->binding);
		PG_RETURN_BYTEA_P(state_header(StateKind::Empty, -1, 0));
	}

	size_t size = 0;
	dsa_pointer at = columns_into_area(s, &size);
	if (DsaPointerIsValid(at))
	{
		bytea *out = state_header(StateKind::InArea, s->chunk_area_index, sizeof(uint64) * 2);
		uint64 where[2] = {static_cast<uint64>(at), static_cast<uint64>(size)};
		memcpy(VARDATA(out) + kStateHeader, where, sizeof where);
		PG_RETURN_BYTEA_P(out);
	}
	if (size > MaxAllocSize - VARHDRSZ - kStateHeader)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a parallel worker read more of the %s than one partial state can carry", s->what.c_str()),
				 errdetail("Its %zu rows take %zu bytes as columns; without room in dynamic shared memory, a "
						   "worker sends at most 1 GB.",
						   s->table->rows(), size),
				 errhint("Allow more workers (max_parallel_workers_per_gather), or SET gpurec.parallel_workers = 0 "
						 "to read in the calling backend.")));
	bytea *out = state_header(StateKind::Inline, s->chunk_area_index, size);
	write_columns(s, reinterpret_cast<uint8_t *>(VARDATA(out)) + kStateHeader, size);
	PG_RETURN_BYTEA_P(out);
}

/* The leader's steps (deserialize, combine, finalize) run only inside a read of gpurec's own. */
void require_active_read(const char *step)
{
	if (active_read == nullptr || IsParallelWorker())
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
						errmsg("gpurec_internal._read_columns: %s outside gpurec's read", step)));
}

Datum read_columns_deserialize(FunctionCallInfo fcinfo)
{
	require_active_read("a partial state read");
	bytea *bytes = PG_GETARG_BYTEA_P(0); /* a state is never compressed: no copy */
	size_t size = VARSIZE(bytes) - VARHDRSZ;
	const uint8_t *data = reinterpret_cast<const uint8_t *>(VARDATA(bytes));
	auto *part = static_cast<ArrivedPart *>(palloc0(sizeof(ArrivedPart)));
	part->in_area = InvalidDsaPointer;
	StateKind kind = size > 0 ? static_cast<StateKind>(data[0]) : StateKind::Empty;
	int32 chunk_area_index = -1;
	if (kind != StateKind::Empty && size >= kStateHeader)
		memcpy(&chunk_area_index, data + 1, sizeof chunk_area_index);
	part->chunks = chunks_area_of(*active_read, chunk_area_index);
	if (kind == StateKind::Inline && size >= kStateHeader)
	{
		part->data = data + kStateHeader;
		part->size = size - kStateHeader;
	}
	else if (kind == StateKind::InArea && size == kStateHeader + 2 * sizeof(uint64))
	{
		uint64 where[2];
		memcpy(where, data + kStateHeader, sizeof where);
		part->in_area = static_cast<dsa_pointer>(where[0]);
		part->data = static_cast<const uint8_t *>(dsa_get_address(part->chunks, part->in_area));
		part->size = static_cast<size_t>(where[1]);
	}
	else if (kind != StateKind::Empty)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("gpurec_internal._read_columns: a malformed partial state")));
	PG_RETURN_POINTER(part);
}

Datum read_columns_combine(FunctionCallInfo fcinfo)
{
	require_active_read("partial states combined");
	if (!PG_ARGISNULL(1))
	{
		auto *part = reinterpret_cast<ArrivedPart *>(PG_GETARG_POINTER(1));
		if (part->data != nullptr)
		{
			/*
			 * Kept until the last has arrived (read_columns_final), where the
			 * read lives: a part in the state itself lies in the tuple that
			 * brought it, which the next one replaces.
			 */
			ActiveRead &read = *active_read;
			MemoryContext caller = MemoryContextSwitchTo(read.arrived_context);
			if (read.arrived.count == read.arrived_capacity)
			{
				read.arrived_capacity = std::max(8, 2 * read.arrived_capacity);
				size_t bytes = sizeof(ArrivedPart) * static_cast<size_t>(read.arrived_capacity);
				read.arrived.parts = static_cast<ArrivedPart *>(
					read.arrived.parts == nullptr ? palloc(bytes) : repalloc(read.arrived.parts, bytes));
			}
			ArrivedPart kept = *part;
			if (!DsaPointerIsValid(part->in_area))
			{
				auto *copy = static_cast<uint8_t *>(palloc(std::max<size_t>(1, part->size)));
				memcpy(copy, part->data, part->size);
				kept.data = copy;
			}
			read.arrived.parts[read.arrived.count++] = kept;
			MemoryContextSwitchTo(caller);
			++read.worker_parts;
		}
	}
	/* the state stays whatever it was: the rows live in the call's table */
	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	PG_RETURN_POINTER(PG_GETARG_POINTER(0));
}

Datum read_columns_final(FunctionCallInfo fcinfo)
{
	require_active_read("finalized");
	/* a serial plan (replanned since the check) ran every row through the leader: flush them */
	if (!PG_ARGISNULL(0))
	{
		ReadState *s = reinterpret_cast<ReadState *>(PG_GETARG_POINTER(0));
		if (!s->own)
			flush_batch(&s->batch, *s->table, s->binding);
	}
	ActiveRead &read = *active_read;
	if (read.arrived.count > 0)
	{
		cpp_callback_guard(append_parts, &read.arrived);
		free_arrived_parts(read.arrived);
		read.arrived.count = 0;
	}
	PG_RETURN_INT64(active_read->worker_parts);
}

} // namespace

/*
 * The plan splits the aggregate when it is a Finalize Aggregate whose
 * input, through any Sort, is a Gather (Merge) of Partial Aggregates.
 */
int planned_workers(SPIPlanPtr plan)
{
	int workers = 0;
	inspect_plan(plan, [&workers](PlannedStmt *stmt) {
		Plan *top = stmt->planTree;
		if (top == nullptr || !IsA(top, Agg) || reinterpret_cast<Agg *>(top)->aggsplit != AGGSPLIT_FINAL_DESERIAL)
			return;
		for (Plan *p = top->lefttree; p != nullptr; p = p->lefttree)
		{
			if (IsA(p, Gather))
			{
				workers = reinterpret_cast<Gather *>(p)->num_workers;
				return;
			}
			if (IsA(p, GatherMerge))
			{
				workers = reinterpret_cast<GatherMerge *>(p)->num_workers;
				return;
			}
		}
	});
	return workers;
}

/*
 * The specs are a parameter so that the plan says whether workers will
 * read before the area the specs name exists (try_parallel_read).
 */
char *wrapper_text(const char *query, const ColumnBinding &binding)
{
	StringInfoData sql;
	initStringInfo(&sql);
	appendStringInfoString(&sql, "SELECT gpurec_internal._read_columns($1");
	for (int c = 0; c < binding.ncolumns; ++c)
		if (binding.conversion[c] != Conversion::Absent)
			appendStringInfo(&sql, ", q.%s", quote_identifier(binding.specs[c].name));
	/* the newline ends a trailing -- comment of the inner query */
	appendStringInfo(&sql, ") FROM (%s\n) AS q", query);
	return sql.data;
}

SPIPlanPtr prepare_wrapper(const char *query, const ColumnBinding &binding)
{
	Oid spec_type = TEXTOID;
	SPIPlanPtr plan = SPI_prepare_cursor(wrapper_text(query, binding), 1, &spec_type,
										 CURSOR_OPT_PARALLEL_OK | CURSOR_OPT_GENERIC_PLAN);
	if (plan == nullptr)
		elog(ERROR, "could not prepare the parallel read of the %s: %s", binding.what,
			 SPI_result_code_string(SPI_result));
	return plan;
}

void run_wrapper_plan(SPIPlanPtr plan, const char *specs)
{
	ParamListInfo parameters = makeParamList(1);
	parameters->params[0].value = CStringGetTextDatum(specs);
	parameters->params[0].isnull = false;
	parameters->params[0].pflags = PARAM_FLAG_CONST;
	parameters->params[0].ptype = TEXTOID;
	SPIExecuteOptions options;
	memset(&options, 0, sizeof options);
	options.params = parameters;
	options.read_only = true;
	options.dest = None_Receiver;
	SPI_execute_plan_extended(plan, &options);
}

} // namespace gpurec

/* PostgreSQL code, not C++ bodies: each reaches C++ through cpp_callback_guard only. */
GPUREC_POSTGRES_FUNCTION(gpurec_read_columns_transition, gpurec::read_columns_transition)
GPUREC_POSTGRES_FUNCTION(gpurec_read_columns_serialize, gpurec::read_columns_serialize)
GPUREC_POSTGRES_FUNCTION(gpurec_read_columns_deserialize, gpurec::read_columns_deserialize)
GPUREC_POSTGRES_FUNCTION(gpurec_read_columns_combine, gpurec::read_columns_combine)
GPUREC_POSTGRES_FUNCTION(gpurec_read_columns_final, gpurec::read_columns_final)
