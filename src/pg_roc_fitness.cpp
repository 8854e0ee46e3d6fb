/*
 * pg_roc_fitness.cpp: SQL entry points of the ROC fitness family
 * (roc_fitness over rows or arrays, roc_auc): each reads its arguments and
 * inner query, runs the engine (roc_fitness.hpp) and returns its result.
 */
#include "pg_boundary.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/memutils.h"
}

#include <algorithm>

#include "array_column.hpp"
#include "number_column.hpp"
#include "pg_arguments.hpp"
#include "pg_output.hpp"
#include "pg_settings.hpp"
#include "read/read.hpp"
#include "roc_fitness.hpp"

namespace gpurec {

namespace {


void write_results(FunctionCallInfo fcinfo, const std::vector<RocResult> &results, ExecContext &ctx)
{
	ResultWriter out(fcinfo, ctx, "roc_fitness");
	ResultIds individual(out, 0, ctx, "individual_id");
	for (const RocResult &r : results)
	{
		Datum values[7];
		bool nulls[7] = {false, !r.has_auc, !r.has_auc, false, false, r.counts.n_positive == 0,
						 r.counts.n_positive == 0};
		values[0] = individual(r.individual_id);
		values[1] = Float8GetDatum(r.auc);
		values[2] = Float8GetDatum(r.fitness);
		values[3] = Int64GetDatum(r.counts.n_positive);
		values[4] = Int64GetDatum(r.counts.n_negative);
		values[5] = Int64GetDatum(r.counts.lowest_positive_rank);
		values[6] = Int64GetDatum(r.counts.highest_positive_rank);
		out.put(values, nulls);
	}
	out.finish();
}

/* roc_fitness(scores_query): individual_id, label, score per row */
Datum roc_fitness_rows_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	const char *scores_query = text_argument(fcinfo, 0);
	InputTable rows("scores query", {{"individual_id", ColumnKind::Id},
									 {"label", ColumnKind::Label},
									 {"score", ColumnKind::Number}});
	rows.set_gpu_from_rows(gpu_scores_from(ctx));
	read_inner_query(scores_query, rows, ctx);
	std::vector<RocResult> results = roc_fitness_long(rows.id(0), rows.label(1), rows.number(2), ctx);
	rows.release_rows_in_background();
	write_results(fcinfo, results, ctx);
	return (Datum) 0;
}

/* roc_fitness(population_query, labels): individual_id, scores per row */
Datum roc_fitness_arrays_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	const char *population_query = text_argument(fcinfo, 0);
	std::vector<int8_t> labels = label_list_argument(fcinfo, 1, "labels");
	InputTable population("population query", {id_spec("individual_id"),
											   {"scores", ColumnKind::FloatArray}});
	population.set_gpu_from_rows(gpu_scores_from(ctx) / static_cast<double>(std::max<size_t>(1, labels.size())));
	read_inner_query(population_query, population, ctx);
	std::vector<RocResult> results = roc_fitness_arrays(population.int64(0), population.float_array(1), labels, ctx);
	population.release_rows_in_background();
	write_results(fcinfo, results, ctx);
	return (Datum) 0;
}

/* roc_fitness(query, labels, id_type): labels NULL, a scores query; else a population query */
Datum roc_fitness_typed_body(FunctionCallInfo fcinfo)
{
	if (answered_null_as_strict(fcinfo, {1, 2}))
		return (Datum) 0;
	return PG_ARGISNULL(1) ? roc_fitness_rows_body(fcinfo) : roc_fitness_arrays_body(fcinfo);
}

/* roc_auc(scores float8[], labels boolean[]) for one individual */
Datum roc_auc_body(FunctionCallInfo fcinfo)
{
	ExecContext ctx = exec_context_from_settings();
	ArrayType *array = list_array_argument(fcinfo, 0, "scores");
	size_t count = pg_call([&] { return ArrayGetNItems(ARR_NDIM(array), ARR_DIMS(array)); });
	std::vector<int8_t> labels = label_list_argument(fcinfo, 1, "labels");
	if (count != labels.size())
		throw Error(sqlstate::invalid_parameter_value, "scores and labels must have the same length",
					"scores has " + std::to_string(count) + " elements, labels " +
						std::to_string(labels.size()) + ".");
	FloatArrayColumn scores;
	scores.set_doubles(true);
	scores.append_row(ARR_DATA_PTR(array), count, ARR_NULLBITMAP(array));
	Int64Column individual;
	individual.push_back(0);
	std::vector<RocResult> results = roc_fitness_arrays(individual, scores, labels, ctx);
	if (!results[0].has_auc)
	{
		fcinfo->isnull = true;
		return (Datum) 0;
	}
	return Float8GetDatum(results[0].auc);
}

} // namespace
} // namespace gpurec

GPUREC_SQL_FUNCTION(gpurec_roc_fitness_rows, gpurec::roc_fitness_rows_body)
GPUREC_SQL_FUNCTION(gpurec_roc_fitness_arrays, gpurec::roc_fitness_arrays_body)
GPUREC_SQL_FUNCTION(gpurec_roc_fitness_typed, gpurec::roc_fitness_typed_body)
GPUREC_SQL_FUNCTION(gpurec_roc_auc, gpurec::roc_auc_body)
