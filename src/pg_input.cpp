/*
 * pg_input.cpp: InputTable, the engine columns one inner query fills (see
 * pg_input.hpp): one column of the engine's type for each spec's kind.
 * Reading the query is pg_inner_query.cpp's work.
 */
#include "pg_input.hpp"

namespace gpurec {

InputTable::InputTable(const char *what, std::vector<ColumnSpec> specs)
	: what_(what), specs_(std::move(specs))
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

} // namespace gpurec
