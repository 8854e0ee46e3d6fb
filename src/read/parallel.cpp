/*
 * parallel.cpp: the parallel read's calling backend, and what its two ways
 * share (see read_internal.hpp, part 3): choosing the way and making the
 * shared memory the workers leave their columns in (try_parallel_read),
 * the specs every process reads (encode_specs, decode_specs), one
 * process's state (make_state, attach_worker), a worker's columns written
 * into the area, and the workers' columns joining the call's table
 * (append_parts), which keeps the areas mapped while it lives.  The ways
 * themselves: aggregate.cpp (the query's parallel plan) and
 * direct_scan.cpp (one table, scanned by workers of gpurec's own).
 *
 * Why the areas: every worker converts and appends its share of the rows
 * to columns of its own, whose chunks it takes from a dynamic shared
 * memory area the calling backend made for the read (ChunkAreas), and
 * sends their dictionaries and where their chunks are; the calling backend
 * takes the workers' full chunks into its table as they are (a dictionary
 * merge, its last rows copied, codes translated in place).
 */
#include "pg_boundary.hpp"

extern "C" {
#include "access/parallel.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "optimizer/cost.h"
#include "storage/lwlock.h"
#include "utils/dsa.h"
#include "utils/guc.h"
#include "utils/memutils.h"
}

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cpu_parallel.hpp"
#include "pg_settings.hpp"
#include "read_internal.hpp"

namespace gpurec {

ActiveRead *active_read = nullptr;

namespace {

/*
 * The specs, as the wrapper query or the direct scan passes them to every
 * process: the leader's area, its key filter and chunk areas there
 * (AreaAddress), the partial result a worker computes of its rows (its
 * kind's registered name and its parameter, "-" for none; none in the
 * aggregate), the ids' lane stride, the lease (AreaAddress), the query's name, then per column its name, kind, null rule
 * (0 fallback, 1 skip, 2 error), fallback and the conversion the leader
 * bound.  One line per column, fields split by tabs (spec names never
 * hold either).
 */
char *encode_specs(const ColumnBinding &binding, const AreaAddress &area, const PartialRequest &partial)
{
	StringInfoData text;
	initStringInfo(&text);
	appendStringInfo(&text, "%u %llu %llu %d %llu %llu %llu %s %lld %lld %llu %llu %llu %d %llu\n",
					 static_cast<unsigned>(area.handle), static_cast<unsigned long long>(area.token_at),
					 static_cast<unsigned long long>(area.token), area.key_column,
					 static_cast<unsigned long long>(area.keys_at), static_cast<unsigned long long>(area.n_keys),
					 static_cast<unsigned long long>(area.chunk_areas_at),
					 partial.kind != nullptr ? partial.kind->name : "-", static_cast<long long>(partial.parameter),
					 static_cast<long long>(binding.key_stride),
					 static_cast<unsigned long long>(area.lease_offset),
					 static_cast<unsigned long long>(area.lease_bytes), static_cast<unsigned long long>(area.lease_token),
					 static_cast<int>(area.lease_service_pid), static_cast<unsigned long long>(area.lease_used_at));
	appendStringInfoString(&text, binding.what);
	for (int c = 0; c < binding.ncolumns; ++c)
	{
		const ColumnSpec &spec = binding.specs[c];
		appendStringInfo(&text, "\n%s\t%d\t%d\t%d\t%lld\t%d\t%d", spec.name, static_cast<int>(spec.kind),
						 spec.optional ? 1 : 0, spec.null_is_error ? 2 : spec.null_skips_row ? 1 : 0, static_cast<long long>(spec.fallback),
						 static_cast<int>(binding.conversion[c]), spec.ids ? 1 : 0);
	}
	return text.data;
}

/*
 * The leader's side: a worker's chunk references, as addresses in the
 * leader's mapping of the area (or of the lease), each noted as memory the table borrows
 * (InputTable::note_borrowed).
 */
class AreaResolver final : public ChunkResolver
{
  public:
	AreaResolver(dsa_area *area, InputTable &table) : area_(area), table_(table) {}
	void *address(uint64_t reference, size_t bytes) const override
	{
		if (service::Lease::names_shared(reference))
		{
			/* not noted: the lease's pages stay, pinned for the GPUs (a page handed back would no longer be theirs) */
			const service::Lease *lease = active_read->lease;
			void *chunk = lease != nullptr ? lease->address(reference, bytes) : nullptr;
			if (chunk == nullptr)
				throw Error(sqlstate::internal_error, "a parallel worker's chunk is outside the read's lease");
			return chunk;
		}
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

namespace {

/* A whole decimal number of the specs within [low, high]; else they are malformed (not a read of gpurec's own). */
long long spec_number(const std::string &field, long long low, long long high)
{
	char *end = nullptr;
	errno = 0;
	long long value = std::strtoll(field.c_str(), &end, 10);
	if (field.empty() || *end != '\0' || errno != 0 || value < low || value > high)
		throw Error(sqlstate::internal_error, "gpurec_internal._read_columns: malformed column specs");
	return value;
}

} // namespace

/* Parses what encode_specs wrote into state's specs and binding. */
void decode_specs(ReadState &state, const std::string &text)
{
	unsigned handle;
	unsigned long long token_at, token, keys_at, n_keys, chunk_areas_at, lease_offset, lease_bytes, lease_token,
		lease_used_at;
	int key_column, lease_service_pid;
	char partial_kind[64];
	long long partial_parameter, key_stride;
	if (std::sscanf(text.c_str(), "%u %llu %llu %d %llu %llu %llu %63s %lld %lld %llu %llu %llu %d %llu", &handle,
					&token_at, &token, &key_column, &keys_at, &n_keys, &chunk_areas_at, partial_kind, &partial_parameter,
					&key_stride, &lease_offset, &lease_bytes, &lease_token, &lease_service_pid, &lease_used_at) != 15 ||
		key_stride < 1)
		throw Error(sqlstate::internal_error, "gpurec_internal._read_columns: malformed column specs");
	/* the kind's code is this process's own: registered as gpurec.so loaded here (partials.hpp) */
	const PartialKind *kind = nullptr;
	if (std::strcmp(partial_kind, "-") != 0 && (kind = find_partial_kind(partial_kind)) == nullptr)
		throw Error(sqlstate::internal_error,
					std::string("gpurec_internal._read_columns: no partial result \"") + partial_kind + "\" is registered");
	state.address = AreaAddress{static_cast<dsa_handle>(handle), static_cast<dsa_pointer>(token_at), token, key_column,
								static_cast<dsa_pointer>(keys_at), n_keys, static_cast<dsa_pointer>(chunk_areas_at),
								lease_offset, lease_bytes, lease_token, lease_service_pid,
								static_cast<dsa_pointer>(lease_used_at)};
	state.partial = PartialRequest{kind, partial_parameter};
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
		if (fields.size() != 7 || state.names.size() >= static_cast<size_t>(kMaxColumns))
			throw Error(sqlstate::internal_error, "gpurec_internal._read_columns: malformed column specs");
		state.names.push_back(fields[0]);
		ColumnSpec spec{nullptr, static_cast<ColumnKind>(spec_number(fields[1], 0, int(ColumnKind::FloatArray)))};
		spec.optional = fields[2] == "1";
		spec.null_skips_row = fields[3] == "1";
		spec.null_is_error = fields[3] == "2";
		spec.fallback = spec_number(fields[4], LLONG_MIN, LLONG_MAX);
		spec.ids = fields[6] == "1";
		state.specs.push_back(spec);
		conversions.push_back(static_cast<int>(spec_number(fields[5], 0, int(Conversion::PointY))));
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
	/* uuid and text ids: the calling backend codes them through the call's dictionaries, a worker through its own */
	b.key_stride = key_stride;
	b.key_lane = IsParallelWorker() ? ParallelWorkerNumber + 1 : 0;
	for (int c = 0; c < b.ncolumns; ++c)
	{
		b.keys[c] = nullptr;
		b.held[c] = nullptr;
		if (b.conversion[c] != Conversion::Uuid && b.conversion[c] != Conversion::Text)
			continue;
		if (IsParallelWorker())
		{
			state.local_keys.push_back(std::make_unique<KeyDictionary>());
			b.keys[c] = state.local_keys.back().get();
		}
		else
		{
			const CallKeys::Key *key = active_read && active_read->ctx->keys ? active_read->ctx->keys->find(b.specs[c].name)
																			 : nullptr;
			if (!key || !key->dictionary)
				throw Error(sqlstate::internal_error, "gpurec_internal._read_columns: no dictionary for column " + state.names[c]);
			b.keys[c] = key->dictionary.get();
		}
	}
	start_batch(&state.batch, b);
}

/* Whether column c of the binding is coded through a dictionary (uuid, text). */
bool coded(const ColumnBinding &b, int c)
{
	return b.keys[c] != nullptr;
}

/*
 * Before a worker's columns: its lane, then the dictionary of each of its
 * uuid and text id columns, for the calling backend to make the codes the
 * call's (CallKeys::learn_lane).
 */
void write_worker_keys(const ReadState &state, ByteWriter &out)
{
	const ColumnBinding &b = state.binding;
	if (!binds_coded_ids(b))
		return;
	out.put<int64_t>(b.key_lane);
	for (int c = 0; c < b.ncolumns; ++c)
		if (coded(b, c))
			b.keys[c]->serialize(out);
}

} // namespace

void make_state(void *arg)
{
	auto *a = static_cast<NewStateArgs *>(arg);
	auto state = std::make_unique<ReadState>();
	decode_specs(*state, a->specs);
	if (active_read != nullptr && !IsParallelWorker())
	{
		if (state->address.token != active_read->token || state->address.handle != dsa_get_handle(active_read->area))
			throw Error(sqlstate::feature_not_supported,
						"gpurec_internal._read_columns is gpurec's own and runs only inside its functions");
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
	if (state->partial.kind != nullptr)
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

/*
 * A worker holds the calling backend's lease on its own connection to the
 * GPU service, and takes its chunks there: the lease is not given back
 * while the worker may still write to it, even where the calling backend
 * lets it go first (an ERROR).  Where the service does not hold it for the
 * worker (restarted since, say), the worker's chunks come from the area.
 */
void hold_lease(void *arg)
{
	auto *state = static_cast<ReadState *>(arg);
	const AreaAddress &address = state->address;
	if (state->ctx.service == nullptr)
		return;
	service::Lease lease =
		state->ctx.service->hold(address.lease_offset, address.lease_token, address.lease_service_pid, state->ctx);
	if (lease.bytes == address.lease_bytes)
		state->chunks.lease = std::move(lease);
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
						errmsg("gpurec_internal._read_columns: the read area is not this query's")));
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
	if (state->address.lease_bytes > 0 && state->own != nullptr && state->partial.kind == nullptr)
	{
		state->chunks.lease_used = static_cast<pg_atomic_uint64 *>(dsa_get_address(state->area, state->address.lease_used_at));
		cpp_callback_guard(hold_lease, state);
	}
	if (state->address.key_column >= 0)
	{
		FilterArgs filter{state, static_cast<const int64_t *>(dsa_get_address(state->area, state->address.keys_at))};
		cpp_callback_guard(take_key_filter, &filter);
	}
}

namespace {

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
	write_worker_keys(*a->state, counter);
	a->state->table->serialize(counter);
	a->size = counter.size();
}

void write_serialized(void *arg)
{
	auto *a = static_cast<SerializeArgs *>(arg);
	ByteWriter writer(a->out, a->size);
	writer.allow_references();
	write_worker_keys(*a->state, writer);
	a->state->table->serialize(writer);
	a->state->own.reset(); /* what is left in this process (the chunks stay in the area, for the leader) */
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

void write_columns(ReadState *s, uint8_t *out, size_t size)
{
	SerializeArgs args{s, size, out};
	cpp_callback_guard(write_serialized, &args);
	detach_areas(s);
}

dsa_pointer columns_into_area(ReadState *s, size_t *size)
{
	flush_batch(&s->batch, *s->table, s->binding);
	SerializeArgs counted{s, 0, nullptr};
	cpp_callback_guard(count_serialized, &counted);
	*size = counted.size;
	dsa_pointer at = dsa_allocate_extended(s->chunk_area, *size, DSA_ALLOC_HUGE | DSA_ALLOC_NO_OOM);
	if (DsaPointerIsValid(at))
		write_columns(s, static_cast<uint8_t *>(dsa_get_address(s->chunk_area, at)), *size);
	return at;
}

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
	/* before each part's columns, its uuid and text ids' dictionaries (write_worker_keys) */
	const ColumnBinding &b = *active_read->binding;
	PieceRunner run = pieces_on_threads(*active_read->ctx, Phase::Read);
	std::vector<int64_t> lanes(readers.size());
	if (binds_coded_ids(b))
	{
		/* each part's dictionaries read in place, the parts at once */
		std::vector<std::vector<KeyDictionary::SerializedValues>> values(static_cast<size_t>(b.ncolumns),
																		 std::vector<KeyDictionary::SerializedValues>(readers.size()));
		run(readers.size(), [&](size_t p) {
			lanes[p] = readers[p].get<int64_t>();
			for (int c = 0; c < b.ncolumns; ++c)
				if (coded(b, c))
					values[static_cast<size_t>(c)][p] = KeyDictionary::read_serialized(readers[p]);
		});
		for (int c = 0; c < b.ncolumns; ++c)
			if (coded(b, c))
			{
				std::vector<std::vector<int64_t>> codes = b.keys[c]->intern_parts(values[static_cast<size_t>(c)], run);
				for (size_t p = 0; p < lanes.size(); ++p)
					active_read->ctx->keys->learn_lane(b.specs[c].name, lanes[p], std::move(codes[p]));
			}
	}
	/*
	 * The work runs on the CPU's threads; the backend's own checks for
	 * cancel.  The table's uuid and text id columns hold the call's codes:
	 * the calling backend's own ids (lane 0) are its dictionary's, the
	 * call's, and each part's are rewritten through its lane's codes
	 * (CallKeys::lane_to_call_codes).  The union of the parts' ids is then
	 * the call's distinct ids, not every worker's of its own (31 x 30,000
	 * products for 30,000), and dense: they join through the id column's
	 * direct array, over every part's rows at once.
	 */
	ColumnIdRewrite in_call_codes;
	if (binds_coded_ids(b))
		in_call_codes = [&b, &lanes](size_t column, size_t part, int64_t *ids, size_t n) {
			if (coded(b, static_cast<int>(column)))
				active_read->ctx->keys->lane_to_call_codes(b.specs[column].name, lanes[part], ids, n);
		};
	active_read->table->append_parts(readers, run, in_call_codes);
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

} // namespace

namespace {

struct RecodeArgs
{
	InputTable *table;
	ExecContext *ctx;
	const ColumnBinding *binding;
};

/*
 * Every process's uuid and text ids of an Int64Column in the call's codes
 * (CallKeys::recode_lanes), once every part has come; an IdColumn's are
 * the call's already (append_parts).
 */
void recode_lanes(void *arg)
{
	auto *a = static_cast<RecodeArgs *>(arg);
	const ColumnBinding &b = *a->binding;
	CallKeys &keys = *a->ctx->keys;
	PieceRunner run = pieces_on_threads(*a->ctx, Phase::Read);
	for (int c = 0; c < b.ncolumns; ++c)
		if (b.keys[c] && !in_own_codes(b, c))
			keys.recode_lanes(b.specs[c].name, a->table->int64(static_cast<size_t>(c)), b.key_stride, run);
	keys.forget_lanes();
}

} // namespace

namespace {

/* Below this many bytes of input, a lease saves less than it costs (a round trip to the service). */
constexpr double kLeastLeaseBytes = 16.0 * (1 << 20);

struct LeaseArgs
{
	InputTable *table;
	ExecContext *ctx;
	double bytes;
	pg_atomic_uint64 *used;		 /* the lease's bytes taken, in the read's area */
	const service::Lease *lease; /* out: the table's, or null */
};

/* The lease a table holds, and the chunks the calling backend takes there; let go with the table. */
struct HeldLease
{
	HeldLease(service::Client *client_, service::Lease lease_, pg_atomic_uint64 *used)
		: client(client_), lease(std::move(lease_)), chunks(lease, used)
	{
	}
	HeldLease(const HeldLease &) = delete;
	HeldLease &operator=(const HeldLease &) = delete;
	~HeldLease() { client->release(lease); }

	service::Client *client;
	service::Lease lease;
	LeaseChunks chunks;
};

/*
 * Takes a lease for the read (LeaseArgs), which the table holds: the
 * workers' chunks go there (AreaChunks), and so do the calling backend's.
 */
void take_lease(void *arg)
{
	auto *a = static_cast<LeaseArgs *>(arg);
	auto held = std::make_shared<HeldLease>(a->ctx->service,
											a->ctx->service->lease(static_cast<size_t>(a->bytes), *a->ctx), a->used);
	if (held->lease.bytes == 0)
		return;
	a->lease = &held->lease;
	a->table->use_chunk_source(held->chunks);
	a->table->keep_alive(std::move(held));
}

/*
 * The bytes the read's chunks would take, by the inner query's plan's
 * estimate of its rows and their width (at least 8 a column, plus a display scale), and a
 * chunk partly filled for each process and column.
 */
double lease_bytes_for(SPIPlanPtr inner, const ColumnBinding &binding, int workers)
{
	PlanEstimate estimate = plan_estimate(inner);
	if (estimate.rows <= 0)
		return 0;
	constexpr double kChunkBytes = 8.0 * (1 << 20);
	double row_bytes = std::max(estimate.row_bytes, 8.0 * binding.ncolumns + 8.0);
	return estimate.rows * row_bytes * 1.1 + (workers + 1) * binding.ncolumns * kChunkBytes;
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
	 * system calls, a quarter of a call on an empty query).  The direct
	 * scan takes as many workers as the planner gives the aggregate, so
	 * that PostgreSQL's settings decide both alike.
	 */
	SPIPlanPtr plan = prepare_wrapper(query, binding);
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
	if (partial.kind != nullptr && !(outcome.direct && partials_pay_off(shape, partial, outcome.planned_workers + 1)))
	{
		outcome.partials_declined = outcome.direct;
		partial = PartialRequest{};
	}
	/* each process codes its uuid and text ids in a lane of its own (CallKeys::learn_lane) */
	ColumnBinding lanes = binding;
	lanes.key_stride = outcome.planned_workers + 1;
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
	/*
	 * Where the call's columns go to the GPU service, the workers write
	 * their chunks into a lease of its shared memory (AreaChunks): the call
	 * then refers to them where they are.
	 */
	LeaseArgs leasing{table, ctx, 0, nullptr, nullptr};
	if (partial.kind == nullptr && ctx->service != nullptr && ctx->mode != DeviceMode::Cpu &&
		(leasing.bytes = lease_bytes_for(inner, binding, outcome.planned_workers)) >= kLeastLeaseBytes)
	{
		address.lease_used_at = dsa_allocate(area, sizeof(pg_atomic_uint64));
		leasing.used = static_cast<pg_atomic_uint64 *>(dsa_get_address(area, address.lease_used_at));
		pg_atomic_init_u64(leasing.used, 0);
		cpp_callback_guard(take_lease, &leasing);
	}
	if (leasing.lease != nullptr)
	{
		address.lease_offset = leasing.lease->offset;
		address.lease_bytes = leasing.lease->bytes;
		address.lease_token = leasing.lease->token;
		address.lease_service_pid = leasing.lease->service_pid;
	}
	ActiveRead read{table, ctx, area, worker_areas, static_cast<int>(chunk_areas->count), 0, ArrivedParts{nullptr, 0},
					0, spi_context, 0, false, &lanes, leasing.lease, address.token};
	ActiveRead *outer = active_read;
	active_read = &read;
	PG_TRY();
	{
		if (outcome.direct)
			run_direct_scan(shape, lanes, encode_specs(lanes, address, partial), outcome.planned_workers,
							partial.kind != nullptr);
		else
			run_wrapper_plan(plan, encode_specs(lanes, address, PartialRequest{}));
	}
	PG_FINALLY();
	{
		active_read = outer;
	}
	PG_END_TRY();
	if (binds_coded_ids(lanes))
	{
		RecodeArgs recode{table, ctx, &lanes};
		cpp_callback_guard(recode_lanes, &recode);
	}
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
