/*
 * pg_parallel_state.hpp: what the two ways of parallel reading share
 * (pg_parallel_read.cpp: the aggregate and the calling backend's side;
 * pg_parallel_scan.cpp: the direct scan): the leader's read, its shared
 * memory area, a worker's state and columns there, and how a worker's
 * columns join the call's table.  Internal to those files.
 */
#pragma once

#include "pg_boundary.hpp"

extern "C" {
#include "utils/dsa.h"
}

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "column_chunks.hpp"
#include "pg_column_types.hpp"
#include "pg_input.hpp"
#include "pg_parallel_read.hpp"

namespace gpurec {

/* A worker's state as it arrives in the leader: the bytes, read in place. */
struct ArrivedPart
{
	const uint8_t *data;
	size_t size;
	dsa_pointer in_area; /* InvalidDsaPointer when inline */
	dsa_area *chunks;	 /* where it lies, with the chunks its references name */
};

/* Parts that have arrived, to be appended at once. */
struct ArrivedParts
{
	ArrivedPart *parts;
	int count;
};

/* The read this backend runs now, as the leader; null when none. */
struct ActiveRead
{
	InputTable *table;
	ExecContext *ctx; /* the call's: its interrupt points, while parts are appended on the CPU's threads */
	dsa_area *area; /* the read's own: its token, key filter and ChunkAreas */
	dsa_area **chunk_areas; /* worker w's chunks and part, for w < n_chunk_areas; the others' are in area */
	int n_chunk_areas;
	int worker_parts;
	/* the workers' columns as they arrive through the aggregate, appended when the last has */
	ArrivedParts arrived;
	int arrived_capacity;
	MemoryContext arrived_context;
	double join_ms; /* spent adding the workers' columns to the table */
	bool partials;	/* the processes sent partial results (InputTable::partials), not columns */
};

extern ActiveRead *active_read;

/*
 * Where a worker finds the leader's area: handle, and a token only the
 * wrapper query knows; the table's key filter there, when it has one
 * (its keys, ascending: key_column -1 when none); and the ChunkAreas.
 */
struct AreaAddress
{
	dsa_handle handle;
	dsa_pointer token_at;
	uint64 token;
	int key_column;
	dsa_pointer keys_at;
	uint64 n_keys;
	dsa_pointer chunk_areas_at;
};

/*
 * In the leader's area: an area of its own for each planned worker's
 * chunks, which the leader makes and holds.  Within one area, every new
 * segment is made (and the kernel zeroes all of its pages, as
 * posix_fallocate asks) under the area's one lock: with 15 workers taking
 * chunks from one area, each waited while the others' segments were
 * zeroed, and reading on the 16-core host ran at a third of the 2-core
 * machine's rate per process.  Worker w takes its chunks, and then its
 * part (their flat form, or its partial result: a dictionary of a million
 * ids is 16 MB), from handles[w] when w < count, from the leader's area
 * otherwise.
 */
struct ChunkAreas
{
	uint32 count;
	dsa_handle handles[FLEXIBLE_ARRAY_MEMBER];
};

/*
 * A worker's chunks, in the leader's area: the leader takes them as they
 * are.  None is given back before the area's end, as the leader holds them
 * after the worker is gone.
 */
class AreaChunks final : public ChunkSource
{
  public:
	dsa_area *area = nullptr; /* set before the first row */

	void *allocate(size_t bytes) override
	{
		dsa_area *in = area;
		dsa_pointer at = pg_call([in, bytes] { return dsa_allocate_extended(in, bytes, DSA_ALLOC_HUGE); });
		void *address = pg_call([in, at] { return dsa_get_address(in, at); });
		references_.emplace(address, at);
		return address;
	}
	void release(void *, size_t) noexcept override {}
	uint64_t reference(const void *chunk) const override
	{
		auto found = references_.find(chunk);
		return found == references_.end() ? 0 : static_cast<uint64_t>(found->second);
	}

  private:
	std::unordered_map<const void *, dsa_pointer> references_;
};

/* One process's state of the aggregate: its batch, and its columns in a worker. */
struct ReadState
{
	std::string what;
	std::vector<std::string> names;
	std::vector<ColumnSpec> specs;
	AreaChunks chunks;				 /* before own: its columns' source outlives them */
	std::unique_ptr<InputTable> own; /* a worker's columns */
	AreaAddress address{};
	PartialRequest partial;			 /* what a worker of the direct scan sends: its partial result, or its columns */
	std::unique_ptr<PartialBuilder> builder; /* with a partial request: where the worker's rows go */
	std::vector<uint8_t> partial_result;
	dsa_area *area = nullptr;		 /* a worker's mapping of the leader's area */
	dsa_area *chunk_area = nullptr;	 /* and of the area its chunks and part go to (area itself, or one of ChunkAreas) */
	int32 chunk_area_index = -1;	 /* that one's index in ChunkAreas; -1: area */
	InputTable *table = nullptr;	 /* own, or the leader's active_read table */
	ColumnBinding binding{};
	ExecContext ctx;
	RowBatch batch;
};

struct NewStateArgs
{
	const char *specs;
	ReadState *state;
};

/* Makes the state of one process (NewStateArgs; through cpp_callback_guard). */
void make_state(void *arg);

/*
 * A worker's state: maps the leader's area (in `context`, which lives as
 * long as the state), makes sure the read is the leader's own, and takes the
 * leader's key filter.
 */
void attach_worker(ReadState *state, MemoryContext context);

/*
 * Writes a worker's columns (its batch flushed) in flat form into the
 * area of its chunks and detaches from the areas; *size is their size.
 * Invalid when the area has no room.
 */
dsa_pointer columns_into_area(ReadState *s, size_t *size);

/* A worker's areas unmapped, once its part is written (a mapping left to the end draws a leak WARNING). */
void detach_areas(ReadState *s);

/* The leader's mapping of the area that worker chunks' references name: ChunkAreas' index'th, or the read's own. */
dsa_area *chunks_area_of(const ActiveRead &read, int32 index);


/*
 * Appends the arrived parts (ArrivedParts) to the active read's table, all
 * at once (InputTable::append_parts; through cpp_callback_guard).
 */
void append_parts(void *arg);

/* Frees the parts that lie in an area, once appended, and trims their areas. */
void free_arrived_parts(const ArrivedParts &arrived);

/*
 * A scan of one table: its relation, its filter, and where each spec's
 * value comes from.  When every output of the query is a column of the
 * table, `source` is that column's attribute number (1-based) and
 * `outputs` NIL; otherwise each row is projected through `outputs` (the
 * query's target list) and `source` is the position there (1-based).
 * Lists are copies, in the caller's context.
 */
struct DirectShape
{
	Oid relid = InvalidOid;
	int16 source[kMaxColumns] = {};
	List *qual = NIL;	 /* NIL for none */
	List *outputs = NIL; /* NIL when every output is a column */
};

/*
 * Whether `inner` (the inner query's prepared plan) is a plain scan of one
 * table's columns (pg_parallel_scan.cpp); if so, checks the caller's
 * privileges and fills shape.
 */
bool direct_shape(SPIPlanPtr inner, const ColumnBinding &binding, DirectShape *shape);

/*
 * Whether partial results would be much smaller than the rows of the scan
 * (`processes` reading it): by the table's statistics, the key column's
 * distinct values times what a partial keeps of each, for every process,
 * against half the table's rows (a partial row takes more bytes than a
 * row of columns).  Not without statistics, nor for a computed key.
 */
bool partials_pay_off(const DirectShape &shape, const PartialRequest &request, int processes);

/*
 * The calling backend's direct scan, with up to `workers` workers: fills
 * the active read's table, or its partials when `specs` carry a request.
 */
void run_direct_scan(const DirectShape &shape, const ColumnBinding &binding, const char *specs, int workers,
					 bool partials);

} // namespace gpurec
