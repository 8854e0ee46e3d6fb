/*
 * pg_receiver.cpp: the DestReceiver of inner queries (see pg_receiver.hpp).
 *
 * Its methods are called by the executor, so they are PostgreSQL code: they
 * may ereport, and they hold no C++ object across a PostgreSQL call.  Each
 * row is first converted into plain values and batched (add_row, in
 * pg_column_types); a guarded C++ call then appends a whole batch.
 */
#include "pg_receiver.hpp"

extern "C" {
#include "executor/tuptable.h"
#include "miscadmin.h"
}

#include "pg_column_types.hpp"
#include "pg_settings.hpp"

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
