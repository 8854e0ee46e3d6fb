/*
 * partials.cpp: the registry of partial result kinds, and PartialBuilder,
 * which builds one process's partial result a piece at a time (see
 * partials.hpp).  The kinds themselves are their families'.
 */
#include "no_postgres.hpp"

#include "partials.hpp"

#include <cstring>

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

} // namespace gpurec
