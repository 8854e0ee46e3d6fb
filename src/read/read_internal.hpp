/*
 * read_internal.hpp: what the files of the read layer share (see read.hpp
 * for the layer and its files); internal to src/read/, which alone
 * includes it.
 *
 *   1. Rows into columns (column_types.cpp): which attribute of a query's
 *      rows feeds each column and how (ColumnBinding), one row's Datums
 *      converted (RowValues), and rows batched for one guarded append
 *      (RowBatch), as every way of reading adds them.
 *   2. The serial read (receiver.cpp): the DestReceiver.
 *   3. The parallel read (parallel.cpp), as read.cpp starts it, and what
 *      its two ways share: the calling backend's read (ActiveRead), its
 *      shared memory, one process's state (ReadState), the workers'
 *      columns joining the table.
 *   4. Its ways: the aggregate over the query's parallel plan
 *      (aggregate.cpp) and the direct scan of one table (direct_scan.cpp).
 *
 * Converting rows is PostgreSQL code (it may ereport; RowValues holds plain
 * values only, so a longjmp may pass over it).  Setting column types and
 * appending rows are C++ code: from PostgreSQL code, call them through
 * cpp_callback_guard.
 */
#pragma once

#include "pg_boundary.hpp"

extern "C" {
#include "access/tupdesc.h"
#include "executor/spi.h"
#include "tcop/dest.h"
#include "utils/array.h"
#include "port/atomics.h"
#include "utils/dsa.h"
#include "utils/plancache.h"
}

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "device.hpp"
#include "gpu_service.hpp"
#include "input_table.hpp"
#include "partials.hpp"

namespace gpurec {

/* ---- 1. rows into columns (column_types.cpp) ---------------------------- */

/* The most columns one InputTable may have. */
constexpr int kMaxColumns = 8;

/* How one input column's Datums become engine values. */
enum class Conversion : uint8_t
{
	Absent, /* optional column not in the query */
	Int16,
	Int32,
	Int64,
	Float4,
	Float8,
	Numeric,
	Bool,
	Float4Array,
	Float8Array,
	Uuid,	/* an id coded through the call's KeyDictionary of its column name */
	Text,	/* text or varchar: the same */
	PointX, /* a PostGIS point (geometry, geography), through its type's binary output: x and y at once */
	PointY	/* y of that point, which PointX has set */
};

/* Which attribute of the rows feeds each spec of a table, and how. */
struct ColumnBinding
{
	const ColumnSpec *specs;
	const char *what; /* the query's name in messages */
	int ncolumns;
	int max_attno;			 /* 1-based, for slot_getsomeattrs */
	int attno[kMaxColumns];	 /* 0-based; -1 when absent */
	Conversion conversion[kMaxColumns];
	/*
	 * Uuid, Text: the dictionary that codes the column's values, the
	 * call's of its name (CallKeys) or a parallel worker's own.  An
	 * IdColumn holds a value coded c as c, its dictionary's own code; its
	 * process's part names its lane (write_worker_keys), through which the
	 * calling backend rewrites the part's ids (CallKeys::lane_to_call_codes),
	 * and a partial result carries the values themselves.  Dense codes keep
	 * a process's ids as codes (IdColumn::take_ids_as_codes), where a
	 * lane's, stride apart, outgrew its direct array or were too sparse
	 * for it, and every row paid a hash lookup more (a million uuid users;
	 * 30,000 products over 16 processes).  An Int64Column holds c x
	 * key_stride + key_lane (CallKeys::learn_lane; 1 and 0 but in a
	 * parallel read): its parts' rows join as they are, recoded after the
	 * read.
	 */
	KeyDictionary *keys[kMaxColumns];
	int64 key_stride;
	int64 key_lane;
	/*
	 * Uuid, Text: where not null, the column's values are held as they
	 * came, a row holding its value's index there, not coded through keys
	 * (a piece's late key column: hold_late_keys)
	 */
	KeyBytes *held[kMaxColumns];
	/* PointX: the point column's binary output function, whether it is geography, and the y column */
	Oid point_send;
	bool point_geography;
	int point_y;
	/* the SRID of the points read so far, which every row must share (palloc'd: copies of the binding share it) */
	struct PointState
	{
		int32 srid;
		bool known;
	} *point_state;
	/* the table's filter (InputTable::keep_rows_with_keys), and its column; -1: none */
	const KeyFilter *key_filter;
	int key_column;
};

/* The conversion of the column of `spec` from SQL type `type` (a base type); Absent when it does not accept it. */
Conversion conversion_for(const ColumnSpec &spec, Oid type);

/*
 * Matches the specs of `table` by name to the attributes of `desc` and picks
 * each one's conversion.  Raises an ERROR for a column named twice, a
 * missing column that is not optional, a type its kind does not accept,
 * and an id column whose type (integer, uuid or text) is not that of the
 * call's other columns of its name (`keys`, which learns the types and
 * gives uuid and text columns their dictionaries).
 */
void bind_columns(ColumnBinding *binding, const InputTable &table, TupleDesc desc, CallKeys &keys);

/* Whether some column of the binding holds uuid or text ids. */
bool binds_coded_ids(const ColumnBinding &binding);

/* Whether column c's uuid or text ids are held in its process's own codes: an IdColumn's (ColumnBinding::keys). */
bool in_own_codes(const ColumnBinding &binding, int c);

/* Whether the binding reads PostGIS points. */
bool binds_postgis_points(const ColumnBinding &binding);

/* What the binding read of its PostGIS points, into table.points() (through cpp_callback_guard). */
void note_point_source(InputTable &table, const ColumnBinding &binding, TupleDesc desc);

/*
 * The binding of the rows that go into `piece` (a PartialBuilder's): its
 * uuid or text column `late_key_column` (the builder's; -1: none) held as
 * the values came, in the piece's key_bytes, not coded.  The piece must
 * outlive the binding's use.
 */
void hold_late_keys(ColumnBinding *binding, InputTable &piece, int late_key_column);

/* The binding drops the rows that `table`'s key filter does not keep (none when it has none). */
void bind_key_filter(ColumnBinding *binding, const InputTable &table);

/*
 * Numbers and arrays keep what the query's column type tells: sets it on
 * `table`'s columns, before the first row is appended; with `keys`, its
 * uuid and text id columns are coded through them (InputTable::code_ids_with), and
 * without, ordered by the binding's own dictionaries (InputTable::order_ids_by).
 */
void set_column_types(InputTable &table, const ColumnBinding &binding,
					  const std::shared_ptr<CallKeys> &keys = nullptr);

/* One converted row: plain values only, so a longjmp may pass over it. */
struct RowValues
{
	int64 i[kMaxColumns];
	double d[kMaxColumns];
	int16 numeric_scale[kMaxColumns]; /* Number/Numeric: dscale or special marker */
	int16 numeric_key_scale[kMaxColumns]; /* ... the scale of i[c]: dscale, trailing zeros past 18 dropped */
	ArrayType *array[kMaxColumns];	  /* FloatArray: detoasted array, or NULL */
	bool array_copied[kMaxColumns];	  /* ... palloc'd by detoasting: pfree after use */
};

/*
 * Converts one row, given as attribute values and nulls (a slot's
 * tts_values/tts_isnull, holding at least max_attno attributes), into *row.
 * Returns false when a NULL skips the row, or binding's key filter drops it.
 */
bool convert_row(const ColumnBinding &binding, const Datum *values, const bool *isnull,
				 RowValues *row);

/*
 * Appends `n` converted rows to `table` and counts them, with `skipped` rows
 * that a NULL skipped.
 */
void append_rows(InputTable &table, const RowValues *rows, int n, size_t skipped);

/* Frees the arrays that converting `n` rows detoasted into copies. */
void release_rows(const ColumnBinding &binding, RowValues *rows, int n);

/*
 * Rows converted and waiting for one guarded append: the per-row cost of
 * crossing into C++ is what makes reading slower than a plain scan.  Every
 * reader of rows (the serial receiver, each process of a parallel read) adds
 * them through one.  Plain values only, so PostgreSQL code may hold it.
 */
struct RowBatch
{
	static constexpr int kRows = 256;
	int capacity; /* kRows, or 1 with an array column: each detoasted array is freed at once */
	int batched;
	uint64 skipped;
	uint64 rows_since_check;
	RowValues rows[kRows];
};

/* Empties batch for rows bound by binding. */
void start_batch(RowBatch *batch, const ColumnBinding &binding);

/*
 * Converts one row (values and nulls by binding's attno) into the batch,
 * appending the batch to table when it is full, and gives ctx's read phase
 * an interrupt point every 16384 rows (the executor checks too, but not in
 * every plan shape).  PostgreSQL code.
 */
void add_row(RowBatch *batch, InputTable &table, const ColumnBinding &binding, const Datum *values,
			 const bool *isnull, ExecContext &ctx);

/* Appends what is batched to table (through cpp_callback_guard), then frees the batch's detoasted arrays. */
void flush_batch(RowBatch *batch, InputTable &table, const ColumnBinding &binding);

/* ---- 2. the serial read (receiver.cpp) ---------------------------------- */

/*
 * A receiver, palloc'd in the current memory context, that appends every
 * row it receives to `table`, whose columns `binding` bound (bind_columns,
 * set_column_types) to the rows it will receive.  Its interrupt points (one
 * as it starts, then one every 16384 rows) are the read phase's of `ctx`.
 * PostgreSQL code.
 */
DestReceiver *create_input_receiver(InputTable *table, ExecContext *ctx, const ColumnBinding &binding);

/* ---- 3. the parallel read (parallel.cpp) -------------------------------- */

/*
 * Hands inspect(PlannedStmt *) the plan SPI makes of a prepared query of
 * one statement (its generic plan), then releases it; nothing when there
 * is none.  What inspect keeps of the plan it copies.  An ERROR in inspect
 * skips the release, which costs nothing: the plan of an unsaved query
 * belongs to no resource owner and goes with SPI's memory.  PostgreSQL
 * code.
 */
template <typename Inspect> void inspect_plan(SPIPlanPtr plan, Inspect inspect)
{
	CachedPlan *cached = SPI_plan_get_cached_plan(plan);
	if (cached == nullptr)
		return;
	if (list_length(cached->stmt_list) == 1)
		inspect(linitial_node(PlannedStmt, cached->stmt_list));
	ReleaseCachedPlan(cached, nullptr); /* an unsaved plan's, held by no resource owner */
}

/*
 * The rows the planner expects of a prepared inner query, and their
 * average width in bytes (an array's width is its statistics'); zeros when
 * it has no plan to ask.
 */
struct PlanEstimate
{
	double rows = 0;
	double row_bytes = 0;
};
PlanEstimate plan_estimate(SPIPlanPtr inner);

/* What the parallel path did, for the gpurec.timing NOTICE. */
struct ParallelReadOutcome
{
	bool ran = false;	   /* false: the caller reads serially */
	int planned_workers = 0;
	bool direct = false;   /* the table scanned directly, not the query's plan run */
	int worker_parts = 0;  /* partial states that arrived from workers */
	double join_ms = 0;	   /* the calling backend's time adding their columns to the table */
	bool partials = false; /* every process sent its partial result (InputTable::partials), not columns */
	bool partials_declined = false; /* asked for, but by the statistics not much smaller than the rows */
	const char *why_serial = nullptr; /* when !ran, or when no worker launched */
};

/*
 * Tries the parallel path for `query` (already prepared as `inner` and
 * checked as read-only), whose columns `binding` bound.  Runs it and fills
 * `table` when the plan is split over workers; otherwise returns with ran
 * = false and table untouched.  The way: the direct scan where `inner`
 * reads one table (direct_shape), else the aggregate over the query's
 * parallel plan.  PostgreSQL code: may ereport, holds no C++ object.
 * Called between SPI_connect and SPI_finish; call_context is the one
 * before SPI_connect, which lives as long as the table may hold the
 * workers' shared memory.
 */
ParallelReadOutcome try_parallel_read(SPIPlanPtr inner, const char *query, const ColumnBinding &binding,
									  InputTable *table, ExecContext *ctx, MemoryContext call_context);

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
	const ColumnBinding *binding; /* the calling backend's: which columns the workers code apart (keys) */
	const service::Lease *lease;  /* where the workers write their chunks for the GPU service; null: none */
	/*
	 * The wrapper's token (AreaAddress): the leader takes rows only from an
	 * aggregate whose specs carry it, not from one that an inner query
	 * calls itself while this read runs.
	 */
	uint64 token;
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
	/* the calling backend's lease in the GPU service's shared memory (lease_bytes 0: none), and its bytes taken */
	uint64 lease_offset;
	uint64 lease_bytes;
	uint64 lease_token;
	int32 lease_service_pid;
	dsa_pointer lease_used_at; /* a pg_atomic_uint64 */
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
 * Room for a chunk of `bytes` in a lease of the GPU service's shared
 * memory, taken from the lease's counter of bytes taken, which every
 * process of the read shares (in the leader's area): its address, and its
 * reference in *reference; null once the lease is full.  Each chunk at a
 * page of its own, as the copy to a GPU likes.
 */
inline void *take_from_lease(const service::Lease &lease, pg_atomic_uint64 *used, size_t bytes, uint64_t *reference)
{
	constexpr size_t kPage = 4096;
	size_t room = (bytes + kPage - 1) / kPage * kPage;
	uint64 at = pg_atomic_fetch_add_u64(used, room);
	if (at > lease.bytes || room > lease.bytes - at)
		return nullptr;
	*reference = lease.reference(at);
	return lease.at() + at;
}

/*
 * A worker's chunks, in the leader's area: the leader takes them as they
 * are.  None is given back before the area's end, as the leader holds them
 * after the worker is gone.  Where the leader took a lease in the GPU
 * service's shared memory for the call's input, chunks come from there
 * first, so that the call refers to them where they are: they are never
 * copied again, nor are their pages faulted in and freed per call.  Once
 * the lease is full, the area's.
 */
class AreaChunks final : public ChunkSource
{
  public:
	dsa_area *area = nullptr;				/* set before the first row */
	service::Lease lease;					/* bytes 0: none */
	pg_atomic_uint64 *lease_used = nullptr; /* in the leader's area */

	void *allocate(size_t bytes) override
	{
		uint64_t reference;
		void *address = lease.bytes > 0 ? take_from_lease(lease, lease_used, bytes, &reference) : nullptr;
		if (address == nullptr)
		{
			dsa_area *in = area;
			dsa_pointer at = pg_call([in, bytes] { return dsa_allocate_extended(in, bytes, DSA_ALLOC_HUGE); });
			address = pg_call([in, at] { return dsa_get_address(in, at); });
			reference = at;
		}
		references_.emplace(address, reference);
		return address;
	}
	void release(void *, size_t) noexcept override {}
	uint64_t reference(const void *chunk) const override
	{
		auto found = references_.find(chunk);
		return found == references_.end() ? 0 : static_cast<uint64_t>(found->second);
	}

  private:
	std::unordered_map<const void *, uint64_t> references_;
};

/*
 * The calling backend's own chunks during a read with a lease: from the
 * lease while it has room (where the workers' last rows are copied too, so
 * that the whole input is in the service's memory), else mapped ones.  A
 * lease's chunk goes back with the lease.
 */
class LeaseChunks final : public ChunkSource
{
  public:
	LeaseChunks(const service::Lease &lease, pg_atomic_uint64 *used) : lease_(lease), used_(used) {}

	void *allocate(size_t bytes) override { return allocate(bytes, false); }
	void *allocate_first(size_t bytes) override { return allocate(bytes, true); }
	void release(void *chunk, size_t bytes) noexcept override
	{
		auto *at = static_cast<uint8_t *>(chunk);
		if (at < lease_.at() || at >= lease_.at() + lease_.bytes)
			mapped_chunks().release(chunk, bytes);
	}

  private:
	void *allocate(size_t bytes, bool first)
	{
		uint64_t reference;
		void *address = take_from_lease(lease_, used_, bytes, &reference);
		if (address != nullptr)
			return address;
		return first ? mapped_chunks().allocate_first(bytes) : mapped_chunks().allocate(bytes);
	}

	const service::Lease &lease_;
	pg_atomic_uint64 *used_;
};

/* One process's state of a parallel read: its batch, and its columns in a worker. */
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
	std::vector<std::unique_ptr<KeyDictionary>> local_keys; /* a worker's dictionaries of its uuid and text ids */
};

struct NewStateArgs
{
	const char *specs; /* as the leader encoded them (try_parallel_read) */
	ReadState *state;
};

/*
 * Makes the state of one process (NewStateArgs; through
 * cpp_callback_guard): the leader's own appends to the active read's
 * table, a worker's to columns of its own, or with a partial request to
 * the pieces of its PartialBuilder.
 */
void make_state(void *arg);

/*
 * A worker's state: maps the leader's area and the one its chunks come
 * from (in `context`, which lives as long as the state), makes sure the
 * read is the leader's own, and takes the leader's key filter.
 */
void attach_worker(ReadState *state, MemoryContext context);

/*
 * Writes a worker's columns (its batch flushed) in flat form into the
 * area of its chunks and detaches from the areas; *size is their size.
 * Invalid when the area has no room (the columns then stay in the worker,
 * and *size says how much they would take: write_columns).
 */
dsa_pointer columns_into_area(ReadState *s, size_t *size);

/* A worker's areas unmapped, once its part is written (a mapping left to the end draws a leak WARNING). */
void detach_areas(ReadState *s);

/* Writes a worker's columns in flat form to `out` (`size` bytes, as columns_into_area counted) and detaches. */
void write_columns(ReadState *s, uint8_t *out, size_t size);

/* The leader's mapping of the area that worker chunks' references name: ChunkAreas' index'th, or the read's own. */
dsa_area *chunks_area_of(const ActiveRead &read, int32 index);

/*
 * Appends the arrived parts (ArrivedParts) to the active read's table, all
 * at once (InputTable::append_parts; through cpp_callback_guard).
 */
void append_parts(void *arg);

/* Frees the parts that lie in an area, once appended, and trims their areas. */
void free_arrived_parts(const ArrivedParts &arrived);

/* ---- 4a. the aggregate over the query's parallel plan (aggregate.cpp) --- */

/*
 * The inner query wrapped in the aggregate, prepared with its specs as
 * the one parameter:
 *
 *     SELECT gpurec_internal._read_columns($1, q."col", ...) FROM (<query>) AS q
 *
 * generic, so that running it with the specs plans nothing again.
 */
SPIPlanPtr prepare_wrapper(const char *query, const ColumnBinding &binding);

/* The statement prepare_wrapper prepares, palloc'd. */
char *wrapper_text(const char *query, const ColumnBinding &binding);

/*
 * The workers a plan of prepare_wrapper splits the aggregate over; 0 when
 * it is not split, and the serial path then reads.
 */
int planned_workers(SPIPlanPtr wrapper);

/* Runs prepare_wrapper's plan with its specs, the rows going to the workers' and the leader's aggregate. */
void run_wrapper_plan(SPIPlanPtr wrapper, const char *specs);

/* ---- 4b. the direct scan of one table (direct_scan.cpp) ----------------- */

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
 * table's columns; if so, checks the caller's privileges and fills shape.
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
