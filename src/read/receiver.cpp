/*
 * receiver.cpp: the serial read: the DestReceiver that streams the
 * executor's rows of an inner query into its InputTable, in the calling
 * backend (create_input_receiver, read_internal.hpp part 2), where the
 * query cannot or may not be read in parallel: its plan is not parallel
 * (LIMIT, a parallel-unsafe function, no worker allowed), or the table
 * keeps the query's row order.
 *
 * Its methods are called by the executor, so they are PostgreSQL code: they
 * may ereport, and they hold no C++ object across a PostgreSQL call.  Each
 * row is first converted into plain values and batched (add_row, in
 * column_types.cpp); a guarded C++ call then appends a whole batch.
 */
#include "pg_boundary.hpp"

extern "C" {
#include "executor/tuptable.h"
#include "miscadmin.h"
}

#include "pg_settings.hpp"
#include "read_internal.hpp"

namespace gpurec {

namespace {

struct InputReceiver
{
	DestReceiver pub; /* must be first */
	InputTable *table;
	ExecContext *ctx;
	ColumnBinding binding;
	RowBatch batch;
};

void receiver_startup(DestReceiver *self, int operation, TupleDesc desc)
{
	auto *r = reinterpret_cast<InputReceiver *>(self);
	start_batch(&r->batch, r->binding);
	/* the read phase's first interrupt point comes before any row, however few there are */
	postgres_interrupt_point(*r->ctx, Phase::Read);
}

bool receiver_receive(TupleTableSlot *slot, DestReceiver *self)
{
	auto *r = reinterpret_cast<InputReceiver *>(self);

	slot_getsomeattrs(slot, r->binding.max_attno);
	add_row(&r->batch, *r->table, r->binding, slot->tts_values, slot->tts_isnull, *r->ctx);
	return true;
}

void receiver_shutdown(DestReceiver *self)
{
	auto *r = reinterpret_cast<InputReceiver *>(self);
	flush_batch(&r->batch, *r->table, r->binding);
}

void receiver_destroy(DestReceiver *) {}

} // namespace

DestReceiver *create_input_receiver(InputTable *table, ExecContext *ctx, const ColumnBinding &binding)
{
	auto *receiver = static_cast<InputReceiver *>(palloc0(sizeof(InputReceiver)));
	receiver->pub.receiveSlot = receiver_receive;
	receiver->pub.rStartup = receiver_startup;
	receiver->pub.rShutdown = receiver_shutdown;
	receiver->pub.rDestroy = receiver_destroy;
	receiver->pub.mydest = DestNone;
	receiver->table = table;
	receiver->ctx = ctx;
	receiver->binding = binding;
	return &receiver->pub;
}

} // namespace gpurec
