/*
 * input_table.cpp: InputTable (see input_table.hpp): one column of the
 * engine's type for each spec's kind, the table's flat form and appending
 * one, and giving its rows back in the background.  Reading the query into
 * it is the read layer's work (src/read/).
 */
#include "no_postgres.hpp"

#include "input_table.hpp"

#include <algorithm>
#include <type_traits>

namespace gpurec {

InputTable::InputTable(const char *what, std::vector<ColumnSpec> specs)
	: what_(what), specs_(std::move(specs))
{
	add_columns();
}

InputTable::~InputTable()
{
	if (keys_)
		for (AnyColumn &column : columns_)
			keys_->forget(&column);
}

void InputTable::order_ids_by(size_t i, KeyOrder order)
{
	if (key_orders_.size() <= i)
		key_orders_.resize(specs_.size(), KeyOrder{nullptr, 1});
	key_orders_[i] = order;
}

KeyBytes &InputTable::hold_key_bytes(size_t i)
{
	if (key_bytes_.size() <= i)
		key_bytes_.resize(specs_.size());
	if (!key_bytes_[i])
		key_bytes_[i] = std::make_unique<KeyBytes>();
	return *key_bytes_[i];
}

void InputTable::code_ids_with(std::shared_ptr<CallKeys> keys, size_t i)
{
	const std::string name = specs_[i].name;
	if (specs_[i].kind == ColumnKind::Id)
		keys->code_column(name, &id(i));
	else
		keys->code_column(name, &int64(i));
	keys_ = std::move(keys);
}

void InputTable::add_columns()
{
	for (const ColumnSpec &spec : specs_)
	{
		switch (spec.kind)
		{
			case ColumnKind::Id:
				columns_.emplace_back(std::in_place_type<IdColumn>);
				break;
			case ColumnKind::Int64:
				columns_.emplace_back(std::in_place_type<Int64Column>);
				break;
			case ColumnKind::Number:
				columns_.emplace_back(std::in_place_type<NumberColumn>);
				std::get<NumberColumn>(columns_.back())
					.set_description("column \"" + std::string(spec.name) + "\" of the " + what_);
				break;
			case ColumnKind::Float:
				columns_.emplace_back(std::in_place_type<FloatColumn>);
				break;
			case ColumnKind::Label:
				columns_.emplace_back(std::in_place_type<LabelColumn>);
				break;
			case ColumnKind::FloatArray:
				columns_.emplace_back(std::in_place_type<FloatArrayColumn>);
				break;
		}
	}
}

void InputTable::release_rows_in_background()
{
	auto columns = std::make_shared<std::vector<AnyColumn>>(std::move(columns_));
	auto borrowed = std::make_shared<std::vector<std::pair<void *, size_t>>>(std::move(borrowed_));
	columns_.clear();
	borrowed_.clear();
	add_columns();
	rows_ = 0;
	notified_chunks_ = 0;
	releasing_ = std::make_unique<BackgroundWork>([columns, borrowed]() noexcept {
		columns->clear(); /* borrowed chunks are not freed with their columns */
		for (const auto &[chunk, bytes] : *borrowed)
			give_back_pages(chunk, bytes);
	});
}

void release_while_call_goes_on(InputTable &&table, ExecContext &ctx)
{
	auto kept = std::make_shared<InputTable>(std::move(table));
	kept->release_rows_in_background();
	ctx.kept_until_done.push_back(std::move(kept));
}

namespace {

/* The first bytes of a serialized table: what it is and in which version of this layout. */
constexpr uint32_t kTableMagic = 0x67707231; /* "gpr1" */

} // namespace

void InputTable::serialize(ByteWriter &out) const
{
	out.put<uint32_t>(kTableMagic);
	out.put<uint32_t>(static_cast<uint32_t>(specs_.size()));
	out.put<uint64_t>(rows_);
	out.put<uint64_t>(skipped_rows_);
	for (const AnyColumn &column : columns_)
	{
		out.put<uint8_t>(static_cast<uint8_t>(column.index()));
		std::visit([&](const auto &c) { c.serialize(out); }, column);
	}
}

void InputTable::use_chunk_source(ChunkSource &source)
{
	for (AnyColumn &column : columns_)
		std::visit([&](auto &c) { c.use_chunk_source(source); }, column);
}

void InputTable::forget_rows()
{
	for (AnyColumn &column : columns_)
		std::visit(
			[](auto &c) {
				if constexpr (std::is_same_v<std::decay_t<decltype(c)>, FloatArrayColumn>)
					throw Error(sqlstate::internal_error, "InputTable::forget_rows: an array column");
				else
					c.forget_rows();
			},
			column);
	for (std::unique_ptr<KeyBytes> &held : key_bytes_)
		if (held)
			held->clear();
	rows_ = 0;
	notified_chunks_ = 0;
}

void InputTable::take_ids_as_codes()
{
	if (keeps_row_order_ || chunk_listener_)
		return;
	for (AnyColumn &column : columns_)
		if (auto *ids = std::get_if<IdColumn>(&column))
			ids->take_ids_as_codes();
}

void InputTable::settle_ids(const PieceRunner &run)
{
	for (AnyColumn &column : columns_)
		if (auto *ids = std::get_if<IdColumn>(&column))
			ids->settle(run);
}

void InputTable::settle_sparse_ids()
{
	for (AnyColumn &column : columns_)
		if (auto *ids = std::get_if<IdColumn>(&column))
			ids->settle_if_sparse();
}

void InputTable::append_serialized(ByteReader &in, const PieceRunner &run)
{
	std::vector<ByteReader> parts{in};
	append_parts(parts, run);
	in = parts.front();
}

void InputTable::append_parts(std::vector<ByteReader> &parts, const PieceRunner &run,
							  const ColumnIdRewrite &rewrite)
{
	bool take_chunks = std::none_of(columns_.begin(), columns_.end(), [](const AnyColumn &column) {
		return std::holds_alternative<FloatArrayColumn>(column);
	});
	std::vector<std::pair<size_t, size_t>> counted; /* each part's rows and skipped rows */
	for (ByteReader &in : parts)
	{
		if (in.get<uint32_t>() != kTableMagic || in.get<uint32_t>() != specs_.size())
			throw Error(sqlstate::internal_error, "InputTable: serialized columns of another table");
		size_t rows = in.get<uint64_t>();
		counted.emplace_back(rows, in.get<uint64_t>());
	}
	/* column by column, each part's in turn: every column places the parts' rows alike */
	for (size_t index = 0; index < columns_.size(); ++index)
	{
		AnyColumn &column = columns_[index];
		for (ByteReader &in : parts)
			if (in.get<uint8_t>() != column.index())
				throw Error(sqlstate::internal_error, "InputTable: a serialized column of another kind");
		std::visit(
			[&](auto &c) {
				using Column = std::decay_t<decltype(c)>;
				if constexpr (std::is_same_v<Column, IdColumn>)
					c.append_parts(parts, run, take_chunks,
								   rewrite ? IdRewrite([&](size_t part, int64_t *ids, size_t n) { rewrite(index, part, ids, n); })
										   : IdRewrite());
				else if constexpr (std::is_same_v<Column, FloatArrayColumn>)
					for (ByteReader &in : parts)
						c.append_serialized(in, run);
				else
					for (ByteReader &in : parts)
						c.append_serialized(in, run, take_chunks);
			},
			column);
	}
	for (const ByteReader &in : parts)
		if (!in.at_end())
			throw Error(sqlstate::internal_error, "InputTable: bytes after the serialized columns");
	for (const auto &[rows, skipped] : counted)
		count_rows(rows, skipped);
}

} // namespace gpurec
