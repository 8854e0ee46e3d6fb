/*
 * pg_receiver.cpp: the DestReceiver of inner queries (see pg_receiver.hpp).
 *
 * Its methods are called by the executor, so they are PostgreSQL code: they
 * may ereport, and they hold no C++ object across a PostgreSQL call.  Each
 * row is first converted into plain values (convert_row); a guarded C++ call
 * then appends a whole batch of them to the columns.
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

/*
 * Rows converted before one guarded append: the per-row cost of crossing
 * into C++ is what makes reading slower than a plain scan.  Queries with an
 * array column append row by row, so that each detoasted array is freed
 * at once.
 */
constexpr int kBatchRows = 256;

struct InputReceiver
{
	DestReceiver pub; /* must be first */
	InputTable *table;
	ExecContext *ctx;
	ColumnBinding binding;
	bool bound; /* binding made before the query ran */
	int batch_capacity;
	int batched;
	uint64 skipped;
	RowValues batch[kBatchRows];
	uint64 rows_since_check;
};

void set_receiver_column_types(void *arg)
{
	auto *r = static_cast<InputReceiver *>(arg);
	set_column_types(*r->table, r->binding);
}

void receiver_startup(DestReceiver *self, int operation, TupleDesc desc)
{
	auto *r = reinterpret_cast<InputReceiver *>(self);
	if (!r->bound)
		bind_columns(&r->binding, *r->table, desc);
	r->batch_capacity = kBatchRows;
	for (int c = 0; c < r->binding.ncolumns; ++c)
		if (r->binding.specs[c].kind == ColumnKind::FloatArray &&
			r->binding.conversion[c] != Conversion::Absent)
			r->batch_capacity = 1;
	cpp_callback_guard(set_receiver_column_types, r);
	/* the read phase's first interrupt point comes before any row, however few there are */
	postgres_interrupt_point(*r->ctx, Phase::Read);
}

/* Appends the batch to the columns: the only C++ work of reading, behind the guard. */
void append_batch(void *arg)
{
	auto *r = static_cast<InputReceiver *>(arg);
	append_rows(*r->table, r->batch, r->batched, r->skipped);
}

/* Appends what is batched, then frees the batch's detoasted arrays. */
void flush_batch(InputReceiver *r)
{
	cpp_callback_guard(append_batch, r);
	release_rows(r->binding, r->batch, r->batched);
	r->batched = 0;
	r->skipped = 0;
}

bool receiver_receive(TupleTableSlot *slot, DestReceiver *self)
{
	auto *r = reinterpret_cast<InputReceiver *>(self);

	slot_getsomeattrs(slot, r->binding.max_attno);
	if (!convert_row(r->binding, slot->tts_values, slot->tts_isnull, &r->batch[r->batched]))
		++r->skipped;
	else if (++r->batched == r->batch_capacity)
		flush_batch(r);

	/* the executor checks for interrupts too, but not in every plan shape */
	if (++r->rows_since_check >= 16384)
	{
		r->rows_since_check = 0;
		postgres_interrupt_point(*r->ctx, Phase::Read);
	}
	return true;
}

void receiver_shutdown(DestReceiver *self)
{
	flush_batch(reinterpret_cast<InputReceiver *>(self));
}

void receiver_destroy(DestReceiver *) {}

} // namespace

DestReceiver *create_input_receiver(InputTable *table, ExecContext *ctx)
{
	auto *receiver = static_cast<InputReceiver *>(palloc0(sizeof(InputReceiver)));
	receiver->pub.receiveSlot = receiver_receive;
	receiver->pub.rStartup = receiver_startup;
	receiver->pub.rShutdown = receiver_shutdown;
	receiver->pub.rDestroy = receiver_destroy;
	receiver->pub.mydest = DestNone;
	receiver->table = table;
	receiver->ctx = ctx;
	return &receiver->pub;
}

DestReceiver *create_input_receiver(InputTable *table, ExecContext *ctx, const ColumnBinding &binding)
{
	DestReceiver *receiver = create_input_receiver(table, ctx);
	auto *r = reinterpret_cast<InputReceiver *>(receiver);
	r->binding = binding;
	r->bound = true;
	return receiver;
}

} // namespace gpurec
