/*
 * partials.cpp: the registry of partial result kinds, and PartialBuilder,
 * which builds one process's partial result a piece at a time (see
 * partials.hpp).  The kinds themselves are their families'.
 */
#include "no_postgres.hpp"

#include "partials.hpp"

#include <cstring>

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

[[noreturn]] void not_a_part(const char *kind, size_t part, const std::string &why)
{
	throw Error(sqlstate::invalid_binary_representation, std::string("malformed ") + kind + " part " + std::to_string(part),
				why + " The coordinator and the partitions must run the same version of gpurec.");
}

} // namespace

std::vector<uint8_t> ShardRows::bytes() const
{
	size_t name = std::strlen(kind_);
	std::vector<uint8_t> out(sizeof kShardPartMagic + 1 + 1 + name + 1 + sizeof(uint64_t) +
							 words_.size() * sizeof(uint64_t));
	ByteWriter writer(out.data(), out.size());
	writer.put(kShardPartMagic);
	writer.put(kShardPartVersion);
	writer.put(static_cast<uint8_t>(name));
	writer.write(kind_, name);
	writer.put(static_cast<uint8_t>(columns_));
	writer.put(static_cast<uint64_t>(rows()));
	writer.write(words_.data(), words_.size() * sizeof(uint64_t));
	return out;
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
		std::memcpy(words_.data() + at, values, words * sizeof(uint64_t));
	}
}

} // namespace gpurec
