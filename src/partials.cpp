/*
 * partials.cpp: the registry of partial result kinds, and PartialBuilder,
 * which builds one process's partial result a piece at a time (see
 * partials.hpp).  The kinds themselves are their families'.
 */
#include "no_postgres.hpp"

#include "partials.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "byte_stream.hpp"
#include "errors.hpp"

namespace gpurec {

namespace {

/*
 * The kinds registered in this process.  Made on first use, so that a
 * family's static registration finds it whichever translation unit the
 * loader initializes first.
 */
std::vector<const PartialKind *> &registered_kinds()
{
	static std::vector<const PartialKind *> kinds;
	return kinds;
}

/* A name a request can carry to another process: the specs split on spaces, tabs and newlines, and read 63 characters. */
bool valid_name(const char *name)
{
	if (name == nullptr || *name == '\0' || std::strlen(name) > 63)
		return false;
	for (const char *c = name; *c != '\0'; ++c)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_'))
			return false;
	return true;
}

} // namespace

bool register_partial_kind(const PartialKind &kind) noexcept
{
	if (!valid_name(kind.name) || kind.bound == nullptr || kind.start == nullptr ||
		find_partial_kind(kind.name) != nullptr)
		return false;
	try
	{
		registered_kinds().push_back(&kind);
	}
	catch (...)
	{
		return false; /* out of memory as the library loads: the kind's requests then find none */
	}
	return true;
}

const PartialKind *find_partial_kind(const char *name)
{
	for (const PartialKind *kind : registered_kinds())
		if (std::strcmp(kind->name, name) == 0)
			return kind;
	return nullptr;
}

namespace {

std::unique_ptr<RunningPartial> start_partial(const PartialRequest &request)
{
	if (request.kind == nullptr)
		throw Error(sqlstate::internal_error, "PartialBuilder: no partial result asked for");
	return request.kind->start(request.parameter);
}

} // namespace

PartialBuilder::PartialBuilder(PartialRequest request, const char *what, std::vector<ColumnSpec> specs,
							   const std::function<void(InputTable &)> &prepare)
	: piece_(std::make_unique<InputTable>(what, std::move(specs))), running_(start_partial(request)),
	  late_key_column_(request.kind->late_key_column)
{
	prepare(*piece_);
}

PartialBuilder::~PartialBuilder() = default;

void PartialBuilder::absorb_piece()
{
	running_->absorb(*piece_);
	piece_->forget_rows();
}

void PartialBuilder::absorb_if_full()
{
	if (piece_->rows() >= kPieceRows)
		absorb_piece();
}

std::vector<uint8_t> PartialBuilder::finish()
{
	absorb_piece();
	return running_->finish(*piece_);
}

namespace {

/* A part's first bytes: "GRSP" and the format's version; then its kind's name, its columns and its rows. */
constexpr uint32_t kShardPartMagic = 0x50535247;
constexpr uint8_t kShardPartVersion = 1;

/* A refusal's first bytes: "GRSR" and the format's version; then the error's SQLSTATE, texts and order. */
constexpr uint32_t kRefusalMagic = 0x52535247;
constexpr uint8_t kRefusalVersion = 1;

[[noreturn]] void not_a_part(const char *kind, size_t part, const std::string &why)
{
	throw Error(sqlstate::invalid_binary_representation, std::string("malformed ") + kind + " part " + std::to_string(part),
				why + " The coordinator and the partitions must run the same version of gpurec.");
}

} // namespace

std::vector<uint8_t> refusal_bytes(const Error &error)
{
	return written_bytes([&](ByteWriter &writer) {
		writer.put(kRefusalMagic);
		writer.put(kRefusalVersion);
		writer.write(error.sqlstate(), 5);
		for (const std::string &text : {std::string(error.what()), error.detail(), error.hint()})
		{
			writer.put(static_cast<uint32_t>(text.size()));
			writer.write(text.data(), text.size());
		}
		writer.put(static_cast<uint32_t>(error.order().size()));
		for (int64_t value : error.order())
			writer.put(value);
	});
}

bool is_refusal(const uint8_t *data, size_t size)
{
	uint32_t magic;
	if (size < sizeof magic)
		return false;
	std::memcpy(&magic, data, sizeof magic);
	return magic == kRefusalMagic;
}

Error refused_error(const uint8_t *data, size_t size, size_t part)
{
	try
	{
		ByteReader reader(data, size);
		if (reader.get<uint32_t>() != kRefusalMagic || reader.get<uint8_t>() != kRefusalVersion)
			not_a_part("refusal", part, "Its header is not what this gpurec writes.");
		const char *state = sqlstate::known(std::string(reinterpret_cast<const char *>(reader.take(5)), 5));
		std::string texts[3];
		for (std::string &text : texts)
		{
			uint32_t length = reader.get<uint32_t>();
			text.assign(reinterpret_cast<const char *>(reader.take(length)), length);
		}
		uint32_t count = reader.get<uint32_t>();
		if (count > reader.remaining() / sizeof(int64_t))
			not_a_part("refusal", part, "It ends before its order.");
		std::vector<int64_t> order(count);
		for (int64_t &value : order)
			value = reader.get<int64_t>();
		if (!state)
			not_a_part("refusal", part, "Its SQLSTATE is not one this gpurec raises.");
		if (!reader.at_end())
			not_a_part("refusal", part, "It goes on past its error.");
		return Error(state, texts[0], texts[1], texts[2]).ordered(std::move(order));
	}
	catch (const Error &e)
	{
		if (std::string(e.sqlstate()) != sqlstate::internal_error)
			throw;
		not_a_part("refusal", part, "It ends early.");
	}
}

ShardRows::ShardRows(const char *kind, size_t columns, std::vector<size_t> number_columns)
	: kind_(kind), columns_(columns), number_columns_(std::move(number_columns)), numbers_(number_columns_.size())
{
}

size_t ShardRows::number_index(size_t column) const
{
	for (size_t n = 0; n < number_columns_.size(); ++n)
		if (number_columns_[n] == column)
			return n;
	throw Error(sqlstate::internal_error, std::string("column ") + std::to_string(column) + " of a " + kind_ +
											  " part is not a number column");
}

void ShardRows::put_number(const NumberColumn &from, size_t row)
{
	NumberColumn &numbers = this->numbers(words_.size() % columns_);
	if (numbers.size() == 0)
		numbers.set_type(from.type());
	put(static_cast<int64_t>(numbers.size()));
	numbers.push_row_of(from, row);
}

std::vector<uint8_t> ShardRows::bytes() const
{
	return written_bytes([&](ByteWriter &writer) {
		size_t name = std::strlen(kind_);
		writer.put(kShardPartMagic);
		writer.put(kShardPartVersion);
		writer.put(static_cast<uint8_t>(name));
		writer.write(kind_, name);
		writer.put(static_cast<uint8_t>(columns_));
		writer.put(static_cast<uint64_t>(rows()));
		writer.write(words_.data(), words_.size() * sizeof(uint64_t));
		for (const NumberColumn &numbers : numbers_)
			numbers.serialize(writer);
	});
}

void ShardRows::append(const uint8_t *data, size_t size, size_t part)
{
	size_t name = std::strlen(kind_);
	ByteReader reader(data, size);
	while (!reader.at_end())
	{
		if (reader.remaining() < sizeof kShardPartMagic + 3 + name + sizeof(uint64_t) ||
			reader.get<uint32_t>() != kShardPartMagic || reader.get<uint8_t>() != kShardPartVersion ||
			reader.get<uint8_t>() != name || std::memcmp(reader.take(name), kind_, name) != 0 ||
			reader.get<uint8_t>() != columns_)
			not_a_part(kind_, part, "Its header is not what this gpurec writes for the kind.");
		uint64_t count = reader.get<uint64_t>();
		if (count > reader.remaining() / (columns_ * sizeof(uint64_t)))
			not_a_part(kind_, part, "It ends before its " + std::to_string(count) + " rows.");
		size_t words = static_cast<size_t>(count) * columns_;
		const uint8_t *values = reader.take(words * sizeof(uint64_t));
		size_t at = words_.size();
		words_.resize(at + words);
		if (words > 0) /* an empty part leaves words_ possibly without storage: memcpy takes no null */
			std::memcpy(words_.data() + at, values, words * sizeof(uint64_t));
		append_numbers(reader, at / columns_, part);
	}
}

void ShardRows::append_numbers(ByteReader &reader, size_t first_row, size_t part)
{
	for (size_t n = 0; n < number_columns_.size(); ++n)
	{
		NumberColumn numbers;
		try
		{
			ByteReader peek = reader;
			uint8_t type = peek.get<uint8_t>();
			if (type > static_cast<uint8_t>(NumberType::Numeric))
				not_a_part(kind_, part, "Its numbers are of an unknown type.");
			numbers.set_type(static_cast<NumberType>(type));
			numbers.append_serialized(reader);
		}
		catch (const Error &e)
		{
			if (std::string(e.sqlstate()) != sqlstate::internal_error)
				throw;
			not_a_part(kind_, part, std::string("Its numbers do not read: ") + e.what() + ".");
		}
		NumberColumn &into = numbers_[n];
		size_t before = into.size();
		if (before == 0)
		{
			numbers.set_description(into.description());
			into = std::move(numbers); /* its type too: a part of no numbers still says it */
		}
		else if (numbers.size() != 0 && numbers.type() != into.type())
			not_a_part(kind_, part, "Its numbers are of another type than those of the parts before.");
		else
			for (size_t row = 0; row < numbers.size(); ++row)
				into.push_row_of(numbers, row);
		size_t added = into.size() - before;
		for (size_t row = first_row; row < rows(); ++row)
		{
			int64_t &place = reinterpret_cast<int64_t &>(words_[row * columns_ + number_columns_[n]]);
			if (place == -1)
				continue;
			if (place < 0 || static_cast<uint64_t>(place) >= added)
				not_a_part(kind_, part, "A row names a number the part does not hold.");
			place += static_cast<int64_t>(before);
		}
	}
}

void ShardRows::sort_rows(const std::vector<size_t> &columns)
{
	std::vector<size_t> order(rows());
	std::iota(order.begin(), order.end(), size_t(0));
	std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
		for (size_t column : columns)
			if (int64(a, column) != int64(b, column))
				return int64(a, column) < int64(b, column);
		return false;
	});
	std::vector<uint64_t> sorted(words_.size());
	for (size_t r = 0; r < order.size(); ++r)
		std::memcpy(&sorted[r * columns_], &words_[order[r] * columns_], columns_ * sizeof(uint64_t));
	words_ = std::move(sorted);
}

} // namespace gpurec
