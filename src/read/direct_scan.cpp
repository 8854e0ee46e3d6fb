/*
 * direct_scan.cpp: the parallel read's way for a query over one table (see
 * read_internal.hpp, part 4b).
 *
 * Where the inner query reads one table (its serial plan a sequential
 * scan: the table's columns or expressions of them, filtered or not), the
 * calling backend starts workers of its own (CreateParallelContext, as
 * PostgreSQL's parallel index builds do) and they, and it, read the
 * table's pages through one parallel scan, without an executor: no plan
 * node or aggregate call stands between a row and its conversion, and only
 * the query's own expressions are evaluated.  The caller's privileges are
 * checked as the executor checks them; row-level security's policies are
 * part of the scan's filter.  The workers' columns reach the table as the
 * aggregate's do (columns_into_area, append_parts).  Where the table asks
 * for partial results (InputTable::combine_partials) and its statistics
 * show them much smaller than the rows, each process sends the partial
 * result of its own rows instead, built as it reads them (PartialBuilder),
 * so the rows never leave the process that read them.  The number of
 * workers is the one the planner gave the aggregate's plan, so
 * PostgreSQL's settings decide it alike.
 *
 * Why it stays beside the aggregate, which reads any query: on the 2-core
 * machine it read rows in about two thirds of the aggregate's time (its
 * plan node, per-row argument expressions and fmgr call), a filter or
 * row-level security included, and cheapest_offers on the CPU took 0.60 to
 * 0.72 of the aggregate's time end to end (BENCHMARKS.md, 2026-11-27).
 */
#include "pg_boundary.hpp"

extern "C" {
#include "access/parallel.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_class.h"
#include "catalog/pg_statistic.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "nodes/nodes.h"
#include "optimizer/optimizer.h"
#include "parser/parsetree.h"
#include "storage/shm_toc.h"
#include "utils/memutils.h"
#include "utils/plancache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
}

#include <algorithm>

#include "pg_settings.hpp"
#include "read_internal.hpp"

namespace gpurec {

namespace {

/* Where the direct scan's shared memory keeps what every process needs. */
enum ScanKey : uint64
{
	kScanShared = UINT64CONST(0x6770726563000001),
	kScanSpecs = UINT64CONST(0x6770726563000002),
	kScanQual = UINT64CONST(0x6770726563000003),	/* the filter, as nodeToString wrote it; none without one */
	kScanOutputs = UINT64CONST(0x6770726563000004) /* the computed outputs, likewise; none when all are columns */
};

/* One worker's columns, as it left them in the area. */
struct ScanPart
{
	dsa_pointer at; /* InvalidDsaPointer: none */
	uint64 size;
	int32 chunk_area; /* the index in ChunkAreas of the area it and its chunks are in; -1: the read's own */
};

/* In the parallel context's segment: the table, its columns, each worker's part, then the scan. */
struct ScanShared
{
	Oid relid;
	int nworkers;
	int16 source[kMaxColumns]; /* per spec, as DirectShape::source */
	size_t scan_offset;		   /* of the ParallelTableScanDescData, from this struct */
	ScanPart parts[FLEXIBLE_ARRAY_MEMBER];
};

ParallelTableScanDesc scan_of(ScanShared *shared)
{
	return reinterpret_cast<ParallelTableScanDesc>(reinterpret_cast<char *>(shared) + shared->scan_offset);
}

} // namespace

/*
 * Whether `inner` (the inner query's prepared plan) is a plain scan of one
 * table.  Its serial plan tells: a SeqScan with no subplan (a view over one
 * table, flattened, qualifies too), whose filter and computed outputs, if
 * any, the scan then evaluates as the executor would (row-level security's
 * policies are part of the filter).  The
 * caller's privileges on everything the query names are checked here, as
 * the executor checks them.
 */
bool direct_shape(SPIPlanPtr inner, const ColumnBinding &binding, DirectShape *shape)
{
	bool plain = false;
	List *rtable = NIL;
	inspect_plan(inner, [&](PlannedStmt *stmt) {
		Plan *top = stmt->planTree;
		plain = stmt->commandType == CMD_SELECT && top != nullptr && IsA(top, SeqScan) && top->initPlan == NIL &&
				stmt->subplans == NIL && stmt->rowMarks == NIL;
		if (!plain)
			return;
		Index scanrelid = reinterpret_cast<Scan *>(top)->scanrelid;
		RangeTblEntry *rte = rt_fetch(scanrelid, stmt->rtable);
		plain = rte->rtekind == RTE_RELATION && (rte->relkind == RELKIND_RELATION || rte->relkind == RELKIND_MATVIEW);
		/*
		 * The output columns, in order (junk columns come last): each a
		 * column of the table, or else every row is projected.
		 */
		int16 output_attnum[MaxTupleAttributeNumber];
		int outputs = 0;
		bool computed = false;
		List *outputs_list = NIL;
		ListCell *lc;
		foreach (lc, top->targetlist)
		{
			TargetEntry *entry = lfirst_node(TargetEntry, lc);
			if (!plain || entry->resjunk || outputs >= MaxTupleAttributeNumber)
				break;
			Var *var = reinterpret_cast<Var *>(entry->expr);
			bool column = IsA(var, Var) && var->varno == static_cast<int>(scanrelid) && var->varattno > 0 &&
						  var->varlevelsup == 0;
			computed = computed || !column;
			output_attnum[outputs++] = column ? var->varattno : 0;
			outputs_list = lappend(outputs_list, entry);
		}
		for (int c = 0; c < binding.ncolumns && plain; ++c)
			if (binding.attno[c] >= 0)
			{
				plain = binding.attno[c] < outputs;
				if (plain)
					shape->source[c] = computed ? binding.attno[c] + 1 : output_attnum[binding.attno[c]];
			}
		if (plain)
		{
			shape->relid = rte->relid;
			shape->qual = static_cast<List *>(copyObjectImpl(top->qual));
			shape->outputs = computed ? static_cast<List *>(copyObjectImpl(outputs_list)) : NIL;
			rtable = static_cast<List *>(copyObjectImpl(stmt->rtable));
		}
	});
	if (plain)
		ExecCheckRTPerms(rtable, true);
	return plain;
}

namespace {


/* The binding of a scan's rows: each column at its source (DirectShape::source). */
ColumnBinding scan_binding(const ColumnBinding &binding, const int16 *source)
{
	ColumnBinding scan = binding;
	scan.max_attno = 0;
	for (int c = 0; c < scan.ncolumns; ++c)
		if (scan.attno[c] >= 0)
		{
			scan.attno[c] = source[c] - 1;
			scan.max_attno = std::max<int>(scan.max_attno, source[c]);
		}
	return scan;
}

/* A builder's piece absorbed when full (through cpp_callback_guard). */
void absorb_if_full(void *builder)
{
	static_cast<PartialBuilder *>(builder)->absorb_if_full();
}

/*
 * Reads rows of the parallel scan into `table`, or `builder`'s pieces
 * (each absorbed once full), until the scan is done: each row that passes
 * `qual`, the table's own columns or, with `outputs`, the row those
 * expressions make of it.  Whatever a row's conversion allocates lives in
 * a context emptied at every flush of the batch, what its expressions
 * allocate in one emptied after every row.  PostgreSQL code.
 */
void scan_rows(Relation rel, ParallelTableScanDesc parallel, List *qual, List *outputs, InputTable *table,
			   PartialBuilder *builder, const ColumnBinding &binding, ExecContext &ctx)
{
	InputTable *into = builder != nullptr ? &builder->piece() : table;
	/* a builder's pieces may hold a column as its values came (its late key column) */
	ColumnBinding rows_binding = binding;
	if (builder != nullptr)
		hold_late_keys(&rows_binding, builder->piece(), builder->late_key_column());
	TableScanDesc scan = table_beginscan_parallel(rel, parallel);
	TupleTableSlot *slot = table_slot_create(rel, nullptr);
	auto *batch = static_cast<RowBatch *>(palloc(sizeof(RowBatch)));
	start_batch(batch, rows_binding);
	MemoryContext rows_context = AllocSetContextCreate(CurrentMemoryContext, "gpurec scan rows", ALLOCSET_DEFAULT_SIZES);
	/* the filter and the outputs, evaluated on each row as a sequential scan evaluates them */
	EState *estate = nullptr;
	ExprContext *econtext = nullptr;
	ExprState *filter = nullptr;
	ProjectionInfo *projection = nullptr;
	if (qual != NIL || outputs != NIL)
	{
		estate = CreateExecutorState();
		econtext = GetPerTupleExprContext(estate);
		if (qual != NIL)
			filter = ExecPrepareQual(qual, estate);
		if (outputs != NIL)
		{
			MemoryContext caller_context = MemoryContextSwitchTo(estate->es_query_cxt);
			TupleTableSlot *row = MakeSingleTupleTableSlot(ExecTypeFromTL(outputs), &TTSOpsVirtual);
			projection = ExecBuildProjectionInfo(outputs, econtext, row, nullptr, RelationGetDescr(rel));
			MemoryContextSwitchTo(caller_context);
		}
	}
	/* the read phase's first interrupt point comes before any row, as in the other paths */
	postgres_interrupt_point(ctx, Phase::Read);
	while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		TupleTableSlot *row = slot;
		if (econtext != nullptr)
		{
			econtext->ecxt_scantuple = slot;
			if (filter != nullptr && !ExecQual(filter, econtext))
			{
				ResetExprContext(econtext);
				continue;
			}
			if (projection != nullptr)
				row = ExecProject(projection);
		}
		if (row == slot) /* a projected row holds every value already */
			slot_getsomeattrs(row, rows_binding.max_attno);
		MemoryContext scan_context = MemoryContextSwitchTo(rows_context);
		add_row(batch, *into, rows_binding, row->tts_values, row->tts_isnull, ctx);
		MemoryContextSwitchTo(scan_context);
		if (batch->batched == 0) /* the batch went into the table */
		{
			MemoryContextReset(rows_context);
			if (builder != nullptr)
			{
				cpp_callback_guard(absorb_if_full, builder);
				into = &builder->piece();
			}
		}
		if (econtext != nullptr)
			ResetExprContext(econtext);
	}
	flush_batch(batch, *into, rows_binding);
	if (projection != nullptr)
		ExecDropSingleTupleTableSlot(projection->pi_state.resultslot);
	if (estate != nullptr)
		FreeExecutorState(estate);
	MemoryContextDelete(rows_context);
	pfree(batch);
	ExecDropSingleTupleTableSlot(slot);
	table_endscan(scan);
}

/* What the calling backend's share of the rows goes into when every process sends its partial result. */
struct LeaderShare
{
	const ColumnBinding *binding;
	std::unique_ptr<PartialBuilder> builder;
};

/* The share's builder, for the active read (through cpp_callback_guard). */
void make_leader_builder(void *arg)
{
	auto *share = static_cast<LeaderShare *>(arg);
	const InputTable &table = *active_read->table;
	const ColumnBinding *binding = share->binding;
	share->builder = std::make_unique<PartialBuilder>(
		table.partial_request(), table.what(), table.specs(),
		[binding](InputTable &piece) { set_column_types(piece, *binding); });
}

/* The share's rows all read: their partial result joins the call's partials (through cpp_callback_guard). */
void keep_leader_partial(void *arg)
{
	auto *share = static_cast<LeaderShare *>(arg);
	active_read->table->add_partial(share->builder->finish());
}

/*
 * The leader's share of the scan when every process sends its partial
 * result: its rows into pieces of its own (PartialBuilder), not the call's
 * table, and their partial result into the call's partials, as each
 * worker does.  Not a phase of the call: the read's time holds it.
 * PostgreSQL code.
 */
void scan_leader_share(Relation rel, ParallelTableScanDesc parallel, const DirectShape &shape,
					   const ColumnBinding &binding)
{
	MemoryContext share_context = AllocSetContextCreate(CurrentMemoryContext, "gpurec leader's share", ALLOCSET_SMALL_SIZES);
	auto *share = new LeaderShare{&binding, nullptr};
	/* an ERROR or a cancel during the scan frees the share with its context */
	auto *callback = static_cast<MemoryContextCallback *>(MemoryContextAlloc(share_context, sizeof(MemoryContextCallback)));
	callback->func = [](void *arg) { delete static_cast<LeaderShare *>(arg); };
	callback->arg = share;
	MemoryContextRegisterResetCallback(share_context, callback);
	cpp_callback_guard(make_leader_builder, share);
	scan_rows(rel, parallel, shape.qual, shape.outputs, nullptr, share->builder.get(),
			  scan_binding(binding, shape.source), *active_read->ctx);
	cpp_callback_guard(keep_leader_partial, share);
	MemoryContextDelete(share_context);
}

/*
 * A worker's partial result joins the call's partials where it lies, in
 * the area, which the table keeps mapped (an ArrivedPart; through
 * cpp_callback_guard).
 */
void take_partial(void *arg)
{
	auto *part = static_cast<ArrivedPart *>(arg);
	Stopwatch clock;
	active_read->table->add_partial_in_place(part->data, part->size);
	active_read->join_ms += clock.elapsed_ms();
}

} // namespace

bool partials_pay_off(const DirectShape &shape, const PartialRequest &request, int processes)
{
	if (request.kind == nullptr || shape.outputs != NIL)
		return false;
	PartialBound bound = request.kind->bound(request.parameter);
	if (bound.key_column < 0)
		return false;
	int16 attnum = shape.source[bound.key_column];
	Relation rel = table_open(shape.relid, AccessShareLock);
	double rows = RelationGetForm(rel)->reltuples; /* -1: never counted */
	table_close(rel, AccessShareLock);
	HeapTuple stats = SearchSysCache3(STATRELATTINH, ObjectIdGetDatum(shape.relid), Int16GetDatum(attnum),
									  BoolGetDatum(false));
	if (!HeapTupleIsValid(stats))
		return false;
	double stadistinct = reinterpret_cast<Form_pg_statistic>(GETSTRUCT(stats))->stadistinct;
	ReleaseSysCache(stats);
	if (rows <= 0 || stadistinct == 0) /* 0: not known */
		return false;
	double distinct = stadistinct > 0 ? stadistinct : -stadistinct * rows;
	return distinct * static_cast<double>(bound.rows_per_key) * processes <= rows / 2;
}

void run_direct_scan(const DirectShape &shape, const ColumnBinding &binding, const char *specs, int workers,
					 bool partials)
{
	ActiveRead &read = *active_read;
	Relation rel = table_open(shape.relid, AccessShareLock);
	/* as the executor's scan refuses it (ExecOpenScanRelation) */
	if (!RelationIsScannable(rel))
		ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						errmsg("materialized view \"%s\" has not been populated", RelationGetRelationName(rel)),
						errhint("Use the REFRESH MATERIALIZED VIEW command.")));
	Snapshot snapshot = GetActiveSnapshot();
	EnterParallelMode();
	ParallelContext *pcxt = CreateParallelContext("gpurec", "gpurec_parallel_scan_main", workers);
	size_t scan_offset = BUFFERALIGN(offsetof(ScanShared, parts) + sizeof(ScanPart) * workers);
	size_t shared_size = add_size(scan_offset, table_parallelscan_estimate(rel, snapshot));
	size_t specs_size = strlen(specs) + 1;
	char *qual = shape.qual != NIL ? nodeToString(shape.qual) : nullptr;
	size_t qual_size = qual != nullptr ? strlen(qual) + 1 : 0;
	char *outputs = shape.outputs != NIL ? nodeToString(shape.outputs) : nullptr;
	size_t outputs_size = outputs != nullptr ? strlen(outputs) + 1 : 0;
	shm_toc_estimate_chunk(&pcxt->estimator, shared_size);
	shm_toc_estimate_chunk(&pcxt->estimator, specs_size);
	if (qual != nullptr)
		shm_toc_estimate_chunk(&pcxt->estimator, qual_size);
	if (outputs != nullptr)
		shm_toc_estimate_chunk(&pcxt->estimator, outputs_size);
	shm_toc_estimate_keys(&pcxt->estimator, 4);
	InitializeParallelDSM(pcxt);

	/* without a segment (none was left), the context's memory is private and no worker starts */
	auto *shared = static_cast<ScanShared *>(shm_toc_allocate(pcxt->toc, shared_size));
	shared->relid = shape.relid;
	shared->nworkers = workers;
	memcpy(shared->source, shape.source, sizeof shared->source);
	shared->scan_offset = scan_offset;
	for (int w = 0; w < workers; ++w)
		shared->parts[w] = ScanPart{InvalidDsaPointer, 0, -1};
	ParallelTableScanDesc parallel = scan_of(shared);
	table_parallelscan_initialize(rel, parallel, snapshot);
	shm_toc_insert(pcxt->toc, kScanShared, shared);
	char *specs_copy = static_cast<char *>(shm_toc_allocate(pcxt->toc, specs_size));
	memcpy(specs_copy, specs, specs_size);
	shm_toc_insert(pcxt->toc, kScanSpecs, specs_copy);
	if (qual != nullptr)
	{
		char *qual_copy = static_cast<char *>(shm_toc_allocate(pcxt->toc, qual_size));
		memcpy(qual_copy, qual, qual_size);
		shm_toc_insert(pcxt->toc, kScanQual, qual_copy);
	}
	if (outputs != nullptr)
	{
		char *outputs_copy = static_cast<char *>(shm_toc_allocate(pcxt->toc, outputs_size));
		memcpy(outputs_copy, outputs, outputs_size);
		shm_toc_insert(pcxt->toc, kScanOutputs, outputs_copy);
	}
	LaunchParallelWorkers(pcxt);

	/* with no worker, the leader reads every row, and a partial result would only add work */
	read.partials = partials && pcxt->nworkers_launched > 0;
	if (pcxt->nworkers_launched == 0 || parallel_leader_participation)
	{
		if (read.partials)
			scan_leader_share(rel, parallel, shape, binding);
		else
			scan_rows(rel, parallel, shape.qual, shape.outputs, read.table, nullptr, scan_binding(binding, shape.source),
					  *read.ctx);
	}
	if (pcxt->nworkers_launched > 0)
	{
		WaitForParallelWorkersToFinish(pcxt);
		auto *arrived = static_cast<ArrivedPart *>(palloc(sizeof(ArrivedPart) * pcxt->nworkers_launched));
		int count = 0;
		for (int w = 0; w < pcxt->nworkers_launched; ++w)
		{
			ScanPart &sent = shared->parts[w];
			if (!DsaPointerIsValid(sent.at))
				continue;
			dsa_area *in = chunks_area_of(read, sent.chunk_area);
			arrived[count++] = ArrivedPart{static_cast<const uint8_t *>(dsa_get_address(in, sent.at)),
										   static_cast<size_t>(sent.size), sent.at, in};
		}
		read.worker_parts += count;
		if (read.partials) /* each read in place until the table is gone */
			for (int p = 0; p < count; ++p)
				cpp_callback_guard(take_partial, &arrived[p]);
		else
		{
			ArrivedParts parts{arrived, count};
			cpp_callback_guard(append_parts, &parts);
			free_arrived_parts(parts);
		}
		pfree(arrived);
	}
	DestroyParallelContext(pcxt);
	ExitParallelMode();
	table_close(rel, AccessShareLock);
}

namespace {

/* A worker's partial result of its rows (a ReadState; through cpp_callback_guard). */
void worker_partial_result(void *arg)
{
	auto *s = static_cast<ReadState *>(arg);
	s->partial_result = s->builder->finish();
	s->builder.reset(); /* its pieces are done with */
}

/*
 * Writes a worker's partial result into the area of its chunks and
 * detaches from the areas; *size is its size.  Invalid when the area has
 * no room.
 */
dsa_pointer partial_into_area(ReadState *s, size_t *size)
{
	cpp_callback_guard(worker_partial_result, s);
	*size = s->partial_result.size();
	dsa_pointer at = dsa_allocate_extended(s->chunk_area, *size, DSA_ALLOC_HUGE | DSA_ALLOC_NO_OOM);
	if (DsaPointerIsValid(at))
	{
		memcpy(dsa_get_address(s->chunk_area, at), s->partial_result.data(), *size);
		detach_areas(s);
	}
	return at;
}

/*
 * A direct scan's worker: reads its share of the table into columns of its
 * own, and leaves them, or their partial result, in the area the leader
 * made for its chunks.
 */
void direct_scan_worker(shm_toc *toc)
{
	auto *shared = static_cast<ScanShared *>(shm_toc_lookup(toc, kScanShared, false));
	auto *specs = static_cast<char *>(shm_toc_lookup(toc, kScanSpecs, false));
	auto *qual_text = static_cast<char *>(shm_toc_lookup(toc, kScanQual, true));
	List *qual = qual_text != nullptr ? static_cast<List *>(stringToNode(qual_text)) : NIL;
	auto *outputs_text = static_cast<char *>(shm_toc_lookup(toc, kScanOutputs, true));
	List *outputs = outputs_text != nullptr ? static_cast<List *>(stringToNode(outputs_text)) : NIL;
	MemoryContext worker_context = AllocSetContextCreate(CurrentMemoryContext, "gpurec scan worker", ALLOCSET_DEFAULT_SIZES);
	NewStateArgs args{specs, nullptr};
	cpp_callback_guard(make_state, &args);
	ReadState *state = args.state;
	auto *callback = static_cast<MemoryContextCallback *>(MemoryContextAlloc(worker_context, sizeof(MemoryContextCallback)));
	callback->func = [](void *arg) { delete static_cast<ReadState *>(arg); };
	callback->arg = state;
	MemoryContextRegisterResetCallback(worker_context, callback);
	attach_worker(state, worker_context);
	state->binding = scan_binding(state->binding, shared->source);

	Relation rel = table_open(shared->relid, AccessShareLock);
	scan_rows(rel, scan_of(shared), qual, outputs, state->table, state->builder.get(), state->binding, state->ctx);
	table_close(rel, AccessShareLock);
	size_t size = 0;
	bool partial = state->partial.kind != nullptr;
	dsa_pointer at = partial ? partial_into_area(state, &size) : columns_into_area(state, &size);
	if (!DsaPointerIsValid(at))
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of dynamic shared memory"),
						errdetail("A parallel worker's %s of the %s %s %zu bytes.", partial ? "partial result" : "columns",
								  state->what.c_str(), partial ? "takes" : "take", size)));
	shared->parts[ParallelWorkerNumber] = ScanPart{at, static_cast<uint64>(size), state->chunk_area_index};
	MemoryContextDelete(worker_context);
}

} // namespace

} // namespace gpurec

/* The direct scan's workers start here (CreateParallelContext names it). */
extern "C" PGDLLEXPORT void gpurec_parallel_scan_main(dsm_segment *, shm_toc *toc);
void gpurec_parallel_scan_main(dsm_segment *, shm_toc *toc)
{
	gpurec::direct_scan_worker(toc);
}

