/*
 * errors.hpp: the engine's exception, carrying a SQLSTATE.
 *
 * The engine (everything that is not an SQL entry point) includes no
 * PostgreSQL header, so it cannot ereport.  It throws gpurec::Error instead;
 * the guard at each SQL entry point (pg_boundary.hpp) turns it into an
 * ereport(ERROR) with the same SQLSTATE once every C++ object is destroyed.
 */
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpurec {

/* The SQLSTATEs the engine raises, spelled as PostgreSQL spells them. */
namespace sqlstate {
constexpr const char *invalid_parameter_value = "22023";
constexpr const char *data_exception = "22000";
constexpr const char *numeric_value_out_of_range = "22003";
constexpr const char *null_value_not_allowed = "22004";
constexpr const char *invalid_binary_representation = "22P03";
constexpr const char *array_subscript_error = "2202E";
constexpr const char *cardinality_violation = "21000";
constexpr const char *undefined_column = "42703";
constexpr const char *datatype_mismatch = "42804";
constexpr const char *ambiguous_column = "42702";
constexpr const char *feature_not_supported = "0A000";
constexpr const char *object_not_in_prerequisite_state = "55000";
constexpr const char *out_of_memory = "53200";
constexpr const char *program_limit_exceeded = "54000";
constexpr const char *internal_error = "XX000";

/* The constant above spelled `code`; null for a code the engine never raises. */
inline const char *known(const std::string &code)
{
	for (const char *state : {invalid_parameter_value, data_exception, numeric_value_out_of_range,
							  null_value_not_allowed, invalid_binary_representation, array_subscript_error,
							  cardinality_violation, undefined_column, datatype_mismatch, ambiguous_column,
							  feature_not_supported, object_not_in_prerequisite_state, out_of_memory,
							  program_limit_exceeded, internal_error})
		if (code == state)
			return state;
	return nullptr;
}
} // namespace sqlstate

class Error : public std::runtime_error
{
  public:
	Error(const char *sqlstate, const std::string &message, std::string detail = {},
		  std::string hint = {})
		: std::runtime_error(message), sqlstate_(sqlstate), detail_(std::move(detail)),
		  hint_(std::move(hint))
	{
	}

	const char *sqlstate() const { return sqlstate_; }
	const std::string &detail() const { return detail_; }
	const std::string &hint() const { return hint_; }

	/*
	 * Where the data holds several faults that checks of a call find, the
	 * one its error names is the least by order(): the check's place in
	 * the call, then the ids it names (the least in their order).  A
	 * gpurec_shards partition that raises an ordered error sends it as a
	 * refusal part instead, and the coordinator raises the least of the
	 * partitions' refusals, which is the one one server raises
	 * (refusal_bytes, partials.hpp).  Empty: an error about no fault of
	 * the data's rows.
	 */
	const std::vector<int64_t> &order() const { return order_; }
	Error ordered(std::vector<int64_t> order) &&
	{
		order_ = std::move(order);
		return std::move(*this);
	}

  private:
	const char *sqlstate_;
	std::string detail_;
	std::string hint_;
	std::vector<int64_t> order_;
};

/*
 * The check of k, the most rows a function returns per key (similar_users,
 * cheapest_offers), shared so that every function words it alike.
 */
inline void check_k(int k)
{
	if (k < 1)
		throw Error(sqlstate::invalid_parameter_value, "k must be at least 1",
					"k = " + std::to_string(k) + ".");
}

/*
 * gpurec_shards' refusal of a key (an individual, a user, a cart) whose
 * rows two partitions of `cluster` hold: no partition saw them all, and an
 * answer built from the parts would be wrong.  The coordinator's merges
 * raise it, and gpurec_shards' own checks through
 * gpurec_internal.refuse_split: one wording.
 */
inline Error split_key_error(const std::string &what, int64_t key, const std::string &cluster, int64_t part,
							 int64_t other_part)
{
	return Error(sqlstate::invalid_parameter_value,
				 what + " " + std::to_string(key) + " is on more than one partition of cluster \"" + cluster +
					 "\" (" + std::to_string(std::min(part, other_part)) + " and " +
					 std::to_string(std::max(part, other_part)) + ")",
				 "", "Shard the data by " + what + ": all rows of one " + what + " on one partition.");
}

/*
 * The GPU could not allocate what a computation needs.  Under
 * gpurec.device = auto the dispatcher catches it and reruns on the CPU; under
 * gpurec.device = gpu it reaches the user as an out-of-memory ERROR.
 */
class GpuOutOfMemory : public Error
{
  public:
	explicit GpuOutOfMemory(const std::string &message)
		: Error(sqlstate::out_of_memory, message)
	{
	}
};

} // namespace gpurec
