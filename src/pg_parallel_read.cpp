/*
 * pg_parallel_read.cpp: the parallel path of reading an inner query (see
 * pg_parallel_read.hpp): choosing the way, the aggregate gpurec._read_columns
 * behind the general one, and the calling backend's side that both ways
 * share (its area, the workers' columns joining its table).  The direct
 * scan is in pg_parallel_scan.cpp.
 *
 * The aggregate's functions run in two kinds of process:
 *   - a parallel worker: the transition function appends rows to columns of
 *     the worker's own, whose chunks it takes from a dynamic shared memory
 *     area the leader made for it (ChunkAreas); the serial function writes the
 *     columns' flat form, with the chunks as references into that area, and
 *     sends where that is as the worker's partial state;
 *   - the calling backend (the leader): its own share of the rows goes
 *     straight into the call's table (the `active_read` of this backend), its
 *     serial function sends an empty state, and the combine function appends
 *     every worker's state to the table: the workers' full chunks join it as
 *     they are, and the table keeps the area mapped while it lives.
 * The final function only returns how many worker states arrived.
 *
 * Each state owns C++ objects (the worker's columns); a reset callback on
 * the aggregate's memory context deletes them, so an ERROR or a cancel
 * anywhere frees them with the context.
 */
#include "pg_parallel_read.hpp"
#include "pg_parallel_state.hpp"

extern "C" {
#include "access/parallel.h"
#include "access/xact.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/plannodes.h"
#include "optimizer/cost.h"
#include "storage/lwlock.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/dsa.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/plancache.h"
}

#include <cstdio>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "cpu_parallel.hpp"
#include "number_column.hpp"
#include "pg_settings.hpp"

namespace gpurec {

ActiveRead *active_read = nullptr;

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


/*
 * The specs, as the wrapper query passes them to every process: the
 * leader's area, its key filter and chunk areas there (AreaAddress), the partial result
 * a worker computes of its rows (none in the aggregate), the query's name,
 * then per column its name, kind, null rule (0 fallback, 1 skip, 2 error), fallback and
 * the conversion the leader bound.  One line per column, fields split by
 * tabs (spec names never hold either).
 */
char *encode_specs(const ColumnBinding &binding, const AreaAddress &area, const PartialRequest &partial)
{
	StringInfoData text;
	initStringInfo(&text);
	appendStringInfo(&text, "%u %llu %llu %d %llu %llu %llu %d %lld\n", static_cast<unsigned>(area.handle),
					 static_cast<unsigned long long>(area.token_at), static_cast<unsigned long long>(area.token),
					 area.key_column, static_cast<unsigned long long>(area.keys_at),
					 static_cast<unsigned long long>(area.n_keys), static_cast<unsigned long long>(area.chunk_areas_at),
					 static_cast<int>(partial.kind), static_cast<long long>(partial.parameter));
	appendStringInfoString(&text, binding.what);
	for (int c = 0; c < binding.ncolumns; ++c)
	{
		const ColumnSpec &spec = binding.specs[c];
		appendStringInfo(&text, "\n%s\t%d\t%d\t%d\t%lld\t%d", spec.name, static_cast<int>(spec.kind),
						 spec.optional ? 1 : 0, spec.null_is_error ? 2 : spec.null_skips_row ? 1 : 0, static_cast<long long>(spec.fallback),
						 static_cast<int>(binding.conversion[c]));
	}
	return text.data;
}

/*
 * The leader's side: a worker's chunk references, as addresses in the
 * leader's mapping of the area, each noted as memory the table borrows
 * (InputTable::note_borrowed).
 */
class AreaResolver final : public ChunkResolver
{
  public:
	AreaResolver(dsa_area *area, InputTable &table) : area_(area), table_(table) {}
	void *address(uint64_t reference, size_t bytes) const override
	{
		dsa_area *in = area_;
		auto at = static_cast<dsa_pointer>(reference);
		void *chunk = pg_call([in, at] { return dsa_get_address(in, at); });
		table_.note_borrowed(chunk, bytes);
		return chunk;
	}

  private:
	dsa_area *area_;
	InputTable &table_;
};

/* Parses what encode_specs wrote into state's specs and binding. */
void decode_specs(ReadState &state, const std::string &text)
{
	unsigned handle;
	unsigned long long token_at, token, keys_at, n_keys, chunk_areas_at;
	int key_column, partial_kind;
	long long partial_parameter;
	if (std::sscanf(text.c_str(), "%u %llu %llu %d %llu %llu %llu %d %lld", &handle, &token_at, &token, &key_column,
					&keys_at, &n_keys, &chunk_areas_at, &partial_kind, &partial_parameter) != 9)
		throw Error(sqlstate::internal_error, "gpurec._read_columns: malformed column specs");
	state.address = AreaAddress{static_cast<dsa_handle>(handle), static_cast<dsa_pointer>(token_at), token, key_column,
								static_cast<dsa_pointer>(keys_at), n_keys, static_cast<dsa_pointer>(chunk_areas_at)};
	state.partial = PartialRequest{static_cast<PartialKind>(partial_kind), partial_parameter};
	size_t what_start = text.find('\n') + 1;
	size_t line_end = text.find('\n', what_start);
	state.what = text.substr(what_start, line_end == std::string::npos ? std::string::npos : line_end - what_start);
	std::vector<int> conversions;
	while (line_end != std::string::npos)
	{
		size_t start = line_end + 1;
		line_end = text.find('\n', start);
		std::string line = text.substr(start, line_end == std::string::npos ? std::string::npos : line_end - start);
		std::vector<std::string> fields;
		for (size_t at = 0;;)
		{
			size_t tab = line.find('\t', at);
			fields.push_back(line.substr(at, tab == std::string::npos ? std::string::npos : tab - at));
			if (tab == std::string::npos)
				break;
			at = tab + 1;
		}
		if (fields.size() != 6 || state.names.size() >= static_cast<size_t>(kMaxColumns))
			throw Error(sqlstate::internal_error, "gpurec._read_columns: malformed column specs");
		state.names.push_back(fields[0]);
		ColumnSpec spec{nullptr, static_cast<ColumnKind>(std::stoi(fields[1]))};
		spec.optional = fields[2] == "1";
		spec.null_skips_row = fields[3] == "1";
		spec.null_is_error = fields[3] == "2";
		spec.fallback = std::stoll(fields[4]);
		state.specs.push_back(spec);
		conversions.push_back(std::stoi(fields[5]));
	}
	for (size_t c = 0; c < state.specs.size(); ++c)
		state.specs[c].name = state.names[c].c_str();

	ColumnBinding &b = state.binding;
	b.specs = state.specs.data();
	b.what = state.what.c_str();
	b.key_filter = nullptr; /* the table's, once it is known (make_state, take_key_filter) */
	b.key_column = -1;
	b.ncolumns = static_cast<int>(state.specs.size());
	int passed = 0;
	for (int c = 0; c < b.ncolumns; ++c)
	{
		b.conversion[c] = static_cast<Conversion>(conversions[c]);
		b.attno[c] = b.conversion[c] == Conversion::Absent ? -1 : passed++;
	}
	b.max_attno = passed;
	start_batch(&state.batch, b);
}

} // namespace

void make_state(void *arg)
{
	auto *a = static_cast<NewStateArgs *>(arg);
	auto state = std::make_unique<ReadState>();
	decode_specs(*state, a->specs);
	if (active_read != nullptr && !IsParallelWorker())
	{
		state->table = active_read->table;
		bind_key_filter(&state->binding, *state->table);
	}
	else
	{
		state->own = std::make_unique<InputTable>(state->what.c_str(), state->specs);
		state->own->use_chunk_source(state->chunks);
		state->own->take_ids_as_codes();
		state->table = state->own.get();
		set_column_types(*state->table, state->binding);
	}
	state->ctx = exec_context_from_settings();
	if (state->partial.kind != PartialKind::None)
	{
		const ColumnBinding *binding = &state->binding; /* the state outlives its builder */
		state->builder = std::make_unique<PartialBuilder>(
			state->partial, state->what.c_str(), state->specs,
			[binding](InputTable &piece) { set_column_types(piece, *binding); });
	}
	a->state = state.release();
}

namespace {


struct FilterArgs
{
	ReadState *state;
	const int64_t *keys; /* in the area */
};

/* A worker's table keeps the leader's filter: its keys copied from the area. */
void take_key_filter(void *arg)
{
	auto *a = static_cast<FilterArgs *>(arg);
	ReadState &state = *a->state;
	auto filter = std::make_shared<const KeyFilter>(std::vector<int64_t>(a->keys, a->keys + state.address.n_keys));
	state.own->keep_rows_with_keys(static_cast<size_t>(state.address.key_column), filter);
	bind_key_filter(&state.binding, *state.own);
}

} // namespace

/*
 * A worker's state: maps the leader's area and the one its chunks come
 * from (in `context`, which lives as long as the state), makes sure the
 * read is the leader's own, and takes the leader's key filter.
 */
void attach_worker(ReadState *state, MemoryContext context)
{
	MemoryContext caller_context = MemoryContextSwitchTo(context);
	state->area = dsa_attach(state->address.handle);
	MemoryContextSwitchTo(caller_context);
	if (*static_cast<uint64 *>(dsa_get_address(state->area, state->address.token_at)) != state->address.token)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
						errmsg("gpurec._read_columns: the read area is not this query's")));
	state->chunk_area = state->area;
	const auto *chunk_areas = static_cast<const ChunkAreas *>(dsa_get_address(state->area, state->address.chunk_areas_at));
	if (ParallelWorkerNumber >= 0 && static_cast<uint32>(ParallelWorkerNumber) < chunk_areas->count)
	{
		caller_context = MemoryContextSwitchTo(context);
		state->chunk_area = dsa_attach(chunk_areas->handles[ParallelWorkerNumber]);
		MemoryContextSwitchTo(caller_context);
		state->chunk_area_index = ParallelWorkerNumber;
	}
	state->chunks.area = state->chunk_area;
	if (state->address.key_column >= 0)
	{
		FilterArgs filter{state, static_cast<const int64_t *>(dsa_get_address(state->area, state->address.keys_at))};
		cpp_callback_guard(take_key_filter, &filter);
	}
}

namespace {


/* The state of this aggregate call, made on its first row in the aggregate's context. */
ReadState *state_for(FunctionCallInfo fcinfo)
{
	if (!PG_ARGISNULL(0))
		return reinterpret_cast<ReadState *>(PG_GETARG_POINTER(0));
	MemoryContext aggregate_context;
	if (!AggCheckCallContext(fcinfo, &aggregate_context))
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("gpurec._read_columns is gpurec's own and runs only inside its functions")));
	if (!IsParallelWorker() && active_read == nullptr)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("gpurec._read_columns is gpurec's own and runs only inside its functions")));
	if (PG_ARGISNULL(1))
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("gpurec._read_columns: no column specs")));
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
			types_agree = conversion_for(b.specs[c].kind, getBaseType(get_fn_expr_argtype(fcinfo->flinfo, 2 + b.attno[c]))) ==
						  b.conversion[c];
	if (!types_agree)
	{
		delete state;
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
						errmsg("gpurec._read_columns: the columns passed are not those the specs name")));
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
						errmsg("gpurec._read_columns: %d columns passed, %d expected", PG_NARGS() - 2, passed)));
	for (int k = 0; k < passed; ++k)
	{
		values[k] = PG_GETARG_DATUM(2 + k);
		isnull[k] = PG_ARGISNULL(2 + k);
	}
	add_row(&s->batch, *s->table, s->binding, values, isnull, s->ctx);
	PG_RETURN_POINTER(s);
}

struct SerializeArgs
{
	ReadState *state;
	size_t size;
	uint8_t *out;
};

/* A worker's columns travel as their dictionaries and references to their chunks in the area. */
void count_serialized(void *arg)
{
	auto *a = static_cast<SerializeArgs *>(arg);
	a->state->table->settle_sparse_ids(); /* a count for every integer below a far id is no way to send a few */
	ByteWriter counter;
	counter.allow_references();
	a->state->table->serialize(counter);
	a->size = counter.size();
}

void write_serialized(void *arg)
{
	auto *a = static_cast<SerializeArgs *>(arg);
	ByteWriter writer(a->out, a->size);
	writer.allow_references();
	a->state->table->serialize(writer);
	a->state->own.reset(); /* what is left in this process (the chunks stay in the area, for the leader) */
}

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

} // namespace

void detach_areas(ReadState *s)
{
	if (s->chunk_area != nullptr && s->chunk_area != s->area)
		dsa_detach(s->chunk_area);
	s->chunk_area = nullptr;
	s->chunks.area = nullptr;
	dsa_detach(s->area);
	s->area = nullptr;
}

dsa_area *chunks_area_of(const ActiveRead &read, int32 index)
{
	return index >= 0 && index < read.n_chunk_areas ? read.chunk_areas[index] : read.area;
}

/*
 * Writes a worker's columns (its batch flushed) in flat form into the
 * area of its chunks and detaches from the areas; *size is their size.
 * Invalid when the area has no room (the columns then stay in the worker,
 * and *size says how much they would take).
 */
dsa_pointer columns_into_area(ReadState *s, size_t *size)
{
	flush_batch(&s->batch, *s->table, s->binding);
	SerializeArgs args{s, 0, nullptr};
	cpp_callback_guard(count_serialized, &args);
	*size = args.size;
	dsa_pointer at = dsa_allocate_extended(s->chunk_area, args.size, DSA_ALLOC_HUGE | DSA_ALLOC_NO_OOM);
	if (DsaPointerIsValid(at))
	{
		args.out = static_cast<uint8_t *>(dsa_get_address(s->chunk_area, at));
		cpp_callback_guard(write_serialized, &args);
		detach_areas(s);
	}
	return at;
}

namespace {


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
	SerializeArgs args{s, size, nullptr};
	if (args.size > MaxAllocSize - VARHDRSZ - kStateHeader)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a parallel worker read more of the %s than one partial state can carry", s->what.c_str()),
				 errdetail("Its %zu rows take %zu bytes as columns; without room in dynamic shared memory, a "
						   "worker sends at most 1 GB.",
						   s->table->rows(), args.size),
				 errhint("Allow more workers (max_parallel_workers_per_gather), or SET gpurec.parallel_workers = 0 "
						 "to read in the calling backend.")));
	bytea *out = state_header(StateKind::Inline, s->chunk_area_index, args.size);
	args.out = reinterpret_cast<uint8_t *>(VARDATA(out)) + kStateHeader;
	cpp_callback_guard(write_serialized, &args);
	detach_areas(s);
	PG_RETURN_BYTEA_P(out);
}

/* The leader's steps (deserialize, combine, finalize) run only inside a read of gpurec's own. */
void require_active_read(const char *step)
{
	if (active_read == nullptr || IsParallelWorker())
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
						errmsg("gpurec._read_columns: %s outside gpurec's read", step)));
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
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("gpurec._read_columns: a malformed partial state")));
	PG_RETURN_POINTER(part);
}

} // namespace

void append_parts(void *arg)
{
	auto *arrived = static_cast<ArrivedParts *>(arg);
	Stopwatch clock;
	std::vector<std::unique_ptr<AreaResolver>> resolvers;
	std::vector<ByteReader> readers;
	for (int p = 0; p < arrived->count; ++p)
	{
		const ArrivedPart &part = arrived->parts[p];
		resolvers.push_back(std::make_unique<AreaResolver>(part.chunks, *active_read->table));
		readers.emplace_back(part.data, part.size, resolvers.back().get());
	}
	/* the work runs on the CPU's threads; the backend's own checks for cancel */
	active_read->table->append_parts(readers, pieces_on_threads(*active_read->ctx, Phase::Read));
	active_read->join_ms += clock.elapsed_ms();
}

void free_arrived_parts(const ArrivedParts &arrived)
{
	for (int p = 0; p < arrived.count; ++p)
		if (DsaPointerIsValid(arrived.parts[p].in_area))
			dsa_free(arrived.parts[p].chunks, arrived.parts[p].in_area);
	for (int p = 0; p < arrived.count; ++p)
		dsa_trim(arrived.parts[p].chunks);
}

namespace {


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

/*
 * The workers a plan splits the aggregate over: the plan is a Finalize
 * Aggregate whose input, through any Sort, is a Gather (Merge) of Partial
 * Aggregates.  0 for any other shape, which the serial path then reads.
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

/* The table keeps the area mapped; the last detach frees it. */
void keep_area_alive(void *arg)
{
	auto *keeper = static_cast<std::pair<InputTable *, dsa_area *> *>(arg);
	keeper->first->keep_alive(std::shared_ptr<void>(keeper->second, [](void *area) {
		try
		{
			pg_call([area] { dsa_detach(static_cast<dsa_area *>(area)); });
		}
		catch (...)
		{
			/* a destructor's work: nothing to tell, and the resource owner detaches at the end anyway */
		}
	}));
}

/*
 * SELECT gpurec._read_columns($1, q."a", ...) FROM (<query>) AS q, $1 the
 * specs: a parameter, so that the plan says whether workers will read
 * before the area the specs name exists.
 */
char *wrapper_query(const char *query, const ColumnBinding &binding)
{
	StringInfoData sql;
	initStringInfo(&sql);
	appendStringInfoString(&sql, "SELECT gpurec._read_columns($1");
	for (int c = 0; c < binding.ncolumns; ++c)
		if (binding.conversion[c] != Conversion::Absent)
			appendStringInfo(&sql, ", q.%s", quote_identifier(binding.specs[c].name));
	/* the newline ends a trailing -- comment of the inner query */
	appendStringInfo(&sql, ") FROM (%s\n) AS q", query);
	return sql.data;
}

/* Runs wrapper_query's plan with its specs, the rows going to the workers' and the leader's aggregate. */
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

} // namespace

ParallelReadOutcome try_parallel_read(SPIPlanPtr inner, const char *query, const ColumnBinding &binding,
									  InputTable *table, ExecContext *ctx, MemoryContext call_context)
{
	ParallelReadOutcome outcome;
	int limit = settings_parallel_workers();
	if (limit == 0)
	{
		outcome.why_serial = "gpurec.parallel_workers is 0";
		return outcome;
	}
	if (max_parallel_workers_per_gather == 0)
	{
		outcome.why_serial = "max_parallel_workers_per_gather is 0";
		return outcome;
	}
	if (IsInParallelMode())
	{
		outcome.why_serial = "the call itself runs in parallel mode";
		return outcome;
	}

	/* gpurec.parallel_workers lowers PostgreSQL's own limit for this query only */
	int nest_level = NewGUCNestLevel();
	if (limit > 0 && limit < max_parallel_workers_per_gather)
		(void) set_config_option("max_parallel_workers_per_gather", std::to_string(limit).c_str(), PGC_USERSET,
								 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);

	/*
	 * The plan first: most small queries get none, and then no shared
	 * memory is made for workers (a dynamic shared memory segment costs
	 * system calls, a quarter of a call on an empty query).  Generic, so
	 * that running it with the specs plans nothing again.
	 */
	Oid spec_type = TEXTOID;
	SPIPlanPtr plan = SPI_prepare_cursor(wrapper_query(query, binding), 1, &spec_type,
										 CURSOR_OPT_PARALLEL_OK | CURSOR_OPT_GENERIC_PLAN);
	if (plan == nullptr)
		elog(ERROR, "could not prepare the parallel read of the %s: %s", binding.what,
			 SPI_result_code_string(SPI_result));
	outcome.planned_workers = planned_workers(plan);
	if (outcome.planned_workers == 0)
	{
		SPI_freeplan(plan);
		AtEOXact_GUC(true, nest_level);
		outcome.why_serial = "the plan is not parallel";
		return outcome;
	}

	/*
	 * The area the workers leave their columns in.  The call's table keeps
	 * it mapped (so it is made in the call's context, which outlives SPI's);
	 * on an ERROR the resource owner frees it.
	 */
	static int tranche = 0;
	if (tranche == 0)
	{
		tranche = LWLockNewTrancheId();
		LWLockRegisterTranche(tranche, "gpurec_parallel_read");
	}
	MemoryContext spi_context = MemoryContextSwitchTo(call_context);
	dsa_area *area = dsa_create(tranche);
	MemoryContextSwitchTo(spi_context);
	/* room for an area per worker the plan can have; they are made once the plan says how many */
	int most_workers = std::max(0, max_parallel_workers_per_gather);
	AreaAddress address{dsa_get_handle(area), dsa_allocate(area, sizeof(uint64)), 0, -1, InvalidDsaPointer, 0,
						dsa_allocate0(area, offsetof(ChunkAreas, handles) + sizeof(dsa_handle) * most_workers)};
	if (!pg_strong_random(&address.token, sizeof address.token))
		elog(ERROR, "could not generate a random token");
	*static_cast<uint64 *>(dsa_get_address(area, address.token_at)) = address.token;
	if (const KeyFilter *filter = table->key_filter())
	{
		const std::vector<int64_t> &keys = filter->keys();
		address.key_column = table->key_column();
		address.n_keys = keys.size();
		address.keys_at = dsa_allocate_extended(area, std::max<size_t>(1, keys.size()) * sizeof(int64_t), DSA_ALLOC_HUGE);
		if (!keys.empty())
			memcpy(dsa_get_address(area, address.keys_at), keys.data(), keys.size() * sizeof(int64_t));
	}

	DirectShape shape;
	outcome.direct = direct_shape(inner, binding, &shape);
	PartialRequest partial = table->partial_request();
	if (partial.kind != PartialKind::None &&
		!(outcome.direct && partials_pay_off(shape, partial, outcome.planned_workers + 1)))
	{
		outcome.partials_declined = outcome.direct;
		partial = PartialRequest{};
	}
	auto *chunk_areas = static_cast<ChunkAreas *>(dsa_get_address(area, address.chunk_areas_at));
	chunk_areas->count = static_cast<uint32>(std::min(outcome.planned_workers, most_workers));
	MemoryContextSwitchTo(call_context);
	auto **worker_areas = static_cast<dsa_area **>(palloc(sizeof(dsa_area *) * std::max<uint32>(1, chunk_areas->count)));
	for (uint32 w = 0; w < chunk_areas->count; ++w)
	{
		worker_areas[w] = dsa_create(tranche);
		chunk_areas->handles[w] = dsa_get_handle(worker_areas[w]);
	}
	MemoryContextSwitchTo(spi_context);
	ActiveRead read{table, ctx, area, worker_areas, static_cast<int>(chunk_areas->count), 0, ArrivedParts{nullptr, 0},
					0, spi_context, 0, false};
	ActiveRead *outer = active_read;
	active_read = &read;
	PG_TRY();
	{
		if (outcome.direct)
			run_direct_scan(shape, binding, encode_specs(binding, address, partial), outcome.planned_workers,
							partial.kind != PartialKind::None);
		else
			run_wrapper_plan(plan, encode_specs(binding, address, PartialRequest{}));
	}
	PG_FINALLY();
	{
		active_read = outer;
	}
	PG_END_TRY();
	/* the workers have ended; the table holds their chunks, and detaches the areas when it is gone */
	std::pair<InputTable *, dsa_area *> keeper(table, area);
	cpp_callback_guard(keep_area_alive, &keeper);
	for (int w = 0; w < read.n_chunk_areas; ++w)
	{
		keeper.second = worker_areas[w];
		cpp_callback_guard(keep_area_alive, &keeper);
	}
	SPI_freeplan(plan);
	AtEOXact_GUC(true, nest_level);
	outcome.ran = true;
	outcome.worker_parts = read.worker_parts;
	outcome.join_ms = read.join_ms;
	outcome.partials = read.partials;
	if (read.worker_parts == 0)
		outcome.why_serial = "no planned worker read a row (none was free under max_parallel_workers, or "
							 "the calling backend read them all before one started)";
	return outcome;
}

} // namespace gpurec

/* PostgreSQL code, not C++ bodies: each reaches C++ through cpp_callback_guard only. */
GPUREC_POSTGRES_FUNCTION(gpurec_read_columns_transition, gpurec::read_columns_transition)
GPUREC_POSTGRES_FUNCTION(gpurec_read_columns_serialize, gpurec::read_columns_serialize)
GPUREC_POSTGRES_FUNCTION(gpurec_read_columns_deserialize, gpurec::read_columns_deserialize)
GPUREC_POSTGRES_FUNCTION(gpurec_read_columns_combine, gpurec::read_columns_combine)
GPUREC_POSTGRES_FUNCTION(gpurec_read_columns_final, gpurec::read_columns_final)
