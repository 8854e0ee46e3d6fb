/*
 * float_column.hpp: FloatColumn, numbers of any type read as doubles
 * (rounded where the input was exact), for what computes in floating
 * point: the geospatial recommender's coordinates.
 */
#pragma once

#include "column_chunks.hpp"

namespace gpurec {

class FloatColumn : public ChunkedColumn<double>
{
};

} // namespace gpurec
